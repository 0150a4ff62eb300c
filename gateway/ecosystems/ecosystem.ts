/**
 * What an ecosystem route adds to a plain proxy route: it tells metadata
 * requests from artifact requests and answers metadata itself, rewritten so
 * the client asks the gateway, and only for what the chain endorses.
 * Owns: the contract between `routes/proxy-handler.ts` (routing, the verified path,
 * origin connection, metadata cache) and one module per package manager,
 * which only parses and rewrites; answers are made through
 * `MetadataIO.answer`, once per origin body, chain state and client form.
 * Trusts: nothing the origin sends (bounded, parsed strictly); the verified
 * index behind `MetadataIO.endorsed`.
 * Must hold: a module never fetches or sends an artifact's bytes; every
 * artifact link it hands out points at the gateway or is removed; a deny
 * route never offers a version with no endorsement in force.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Selection } from '../../chain/select.ts';
import type { Logger } from '../observability/logger.ts';
import type { ChecksumAlgorithm } from './maven-checksums.ts';

/** The digest of an artifact's verified bytes (`MetadataIO.verifiedDigest`); `pass`: answer from the origin (a pass or audit route's policy). */
export type VerifiedDigest = { ok: true; hex: string } | { ok: false; status: number; message: string } | { ok: 'pass' };

/** What a request under an ecosystem route is. */
export type Classified =
  /** An artifact: served like a plain route (verified bytes), failures in the client's form. */
  | { type: 'artifact' }
  /** Metadata the ecosystem module answers (`answer` never rejects for origin trouble: it calls `io.fail`). */
  | { type: 'metadata'; answer: (io: MetadataIO) => Promise<void> }
  /** Anything else: passed through on a `pass` route, 404 in the client's form on a `deny` route. */
  | { type: 'other' };

export interface EcosystemHandler {
  kind: 'npm' | 'pypi' | 'goproxy' | 'maven' | 'oci';
  /**
   * The form of the path (after the route's prefix, no query) that the
   * climb-out check sees, for a spelling the ecosystem needs and the check
   * would refuse (npm's `@scope%2fname` -> `@scope/name`); null: as it is.
   */
  checkedPath?(rest: string): string | null;
  /**
   * The target after the prefix (path and query, as sent) in the spelling
   * the artifact URL and the origin request are built from, for a client
   * that percent-encodes what the ecosystem's URLs spell plainly (go sends
   * the case-encoding `!` as `%21`); null: as sent. The framework checks
   * the result for climbing out of the route again.
   */
  artifactTarget?(tail: string): string | null;
  /** Sorts a request by the path after the prefix (as sent, percent-encoding kept) and its query (without `?`). */
  classify(rest: string, query: string): Classified;
  /**
   * The body of a failure the client shows its user: npm prints `{"error": ...}`, pip and go a text line.
   * `status` is the failure's status and `target` the request target; a module may answer another
   * `status` for a client that shows the reason only for some statuses (Maven hides it on 404 / 410).
   */
  errorBody(
    message: string,
    status?: number,
    target?: string,
  ): {
    contentType: string;
    body: string;
    /** The status to send instead of the given one. */
    status?: number;
    /** The status line's reason phrase instead of the standard one (printable ASCII), for a client that prints it and not the body (pip). */
    reason?: string;
  };
}

/** One origin answer for metadata (from the cache or just fetched). */
export interface MetadataResponse {
  /** The origin body's serial in the metadata cache (equal for a byte-identical reload). */
  id: number;
  status: number;
  /** Lower-case names; only content-type, location, etag, last-modified and cache-control are kept. */
  headers: Record<string, string>;
  body: Buffer;
  /** Seconds since the origin sent it (0: just now). */
  age: number;
  /** True when served from the cache past its lifetime because the origin failed. */
  stale: boolean;
}

/**
 * A metadata answer made from an origin body: a page to send (its gateway
 * links made on `RenderView.gatewayUrlOf`) or a failure in the client's
 * form. Kept and shared by every request with the same body, chain state
 * and form, so it must not depend on anything else of the request.
 */
export type Rendered =
  | {
      ok: true;
      status: number;
      contentType: string;
      body: string | Buffer;
      headers?: Record<string, string>;
      /** The unit whose version list the answer shows: it carries that unit's completeness proof (gateway/ecosystems/listing-proof.ts). */
      unit?: string;
    }
  | { ok: false; status: number; message: string };

/** What an npm rendering needs besides the origin body and the chain (also sent to the render worker). */
export interface PackumentJob {
  kind: 'npm';
  contentType: string | undefined;
  name: string;
  abbreviated: boolean;
}
/** What a PyPI rendering needs besides the origin body and the chain (also sent to the render worker). */
export interface PageJob {
  kind: 'pypi';
  contentType: string | undefined;
  pageUrl: string;
  project: string;
  want: { form: 'json' | 'html'; contentType: string };
}
/** A rendering the render worker can do (render-job.ts). */
export type RenderJob = PackumentJob | PageJob;

/** What making a `Rendered` may use: nothing request-specific (the gateway's host is filled in when sent). */
export type RenderView = Pick<MetadataIO, 'unendorsed' | 'endorsed' | 'revoked' | 'artifactUrlOf' | 'artifactTailOf' | 'gatewayUrlOf' | 'originUrl' | 'log'>;

/** What a metadata answer may use: the origin (cached), the chain, the URL maps, the response. */
export interface MetadataIO {
  req: IncomingMessage;
  res: ServerResponse;
  /** The route's policy for unendorsed artifacts. */
  unendorsed: 'deny' | 'pass';
  /** The path after the prefix, as sent (no query). */
  rest: string;
  /** The query without `?` ('' when none). */
  query: string;
  /**
   * The origin's answer for `rest` (path after the prefix, query included when
   * wanted) under this route, through the metadata cache: fresh for the
   * route's `metadata_ttl`, then served stale for up to `metadata_max_stale`
   * while the origin fails. Only the client's `accept` is sent (as `accept`),
   * no other client header. `form` separates cache entries of one path
   * (e.g. npm's abbreviated and full packuments).
   * @throws VouchError origin_error / origin_timeout / too_large when the
   * origin fails and nothing usable is cached.
   */
  fetch(rest: string, opts: { accept: string; form: string }): Promise<MetadataResponse>;
  /** The origin URL of `rest` under this route (to resolve relative links against). */
  originUrl(rest: string): string;
  /** The selection in force for an artifact URL (newest version, not revoked), or null. */
  endorsed(artifactUrl: string): Selection | null;
  /**
   * Whether the authority revoked what an artifact URL selects (its download
   * answers 410): never offered, on a pass route either. Absent: nothing is.
   */
  revoked?(artifactUrl: string): boolean;
  /**
   * The artifact URL (canonical form) of an absolute URL found in metadata: a
   * URL under this route's (or another route's) origin or canonical base maps
   * to that route's canonical base; null when no route serves it.
   */
  artifactUrlOf(url: string): string | null;
  /** The absolute gateway URL that serves an artifact URL, for this request's host; null when no route serves it. */
  gatewayUrlOf(artifactUrl: string): string | null;
  /**
   * The path (and query) after the prefix of the route that serves an
   * artifact URL: what that route classifies when the client asks for the
   * gateway URL; null when no route serves it.
   */
  artifactTailOf(artifactUrl: string): string | null;
  /**
   * Answers with what `make` renders from the origin body `r` in the client
   * form `form` (a key: everything the answer depends on besides the body,
   * the route and the chain state). Made once and kept; a throw of `make`
   * other than a VouchError (a RangeError of a document too deep) is
   * answered 502 and logged at warn. `make` runs synchronously.
   */
  answer(r: MetadataResponse, form: string, make: (view: RenderView) => Rendered): void;
  /**
   * As `answer`, for a rendering that can leave the event loop: the body is
   * parsed and the answer written in the render worker (render-job.ts),
   * which asks this thread only about the URLs it found. Resolves once the
   * answer is sent (or refused).
   */
  answerJob(r: MetadataResponse, form: string, job: RenderJob): Promise<void>;
  /** The value `make` derives from the origin body `r` under `form` and the chain state, made once and kept like `answer`'s (`bytes`: what it occupies). */
  remember<T>(r: MetadataResponse, form: string, make: (view: RenderView) => { value: T; bytes: number }): T;
  /**
   * Sends a metadata answer (200 unless given); adds nosniff and
   * `cache-control: no-cache` unless set. A body goes out in pieces under
   * the stall guard, charged to the memory budget while it is sent (503
   * when the budget has no room for it).
   */
  send(status: number, contentType: string, body: string | Buffer, headers?: Record<string, string>): void;
  /** The completeness-proof headers of a listing of `unit` built from the chain as it is now (docs/spec/index.md 11); {} when none. */
  listingHeaders?(unit: string): Record<string, string>;
  /** Sends a failure in the client's form (`errorBody`), counted as failed. */
  fail(status: number, message: string): void;
  /** Streams the origin's answer for the request through (as a pass route does). */
  passThrough(): Promise<void>;
  /**
   * When the request's own URL has an endorsement (in force or revoked),
   * answers it as an `artifact` request is answered (verified bytes, 409 /
   * 410, audit) and resolves true; otherwise sends nothing and resolves
   * false (Go's `.mod`, endorsed by a lockfile endorser, is an artifact).
   */
  serveArtifact(): Promise<boolean>;
  /**
   * The digest of the verified bytes of the artifact at `rest` under this
   * route (fetched through the mirror and hash-checked like a download), or
   * the refusal an artifact request for it would get (404 unendorsed on a
   * deny route, 410 revoked, 409 mismatch, 502 / 504), or `pass` where the
   * route's policy answers from the origin (unendorsed on a pass route; a
   * revoked or mismatched artifact on an audit route).
   */
  verifiedDigest(rest: string, algorithm: ChecksumAlgorithm): Promise<VerifiedDigest>;
  log: Logger;
}
