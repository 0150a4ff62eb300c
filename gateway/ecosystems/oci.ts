/**
 * The OCI distribution spec's read side, as text: request paths under
 * `/v2/`, the canonical URL a tag is endorsed as, manifests and image
 * indexes (their media type, the digests they reach), tag lists and a
 * registry's `WWW-Authenticate` challenge. Pure: no I/O (oci-route.ts serves).
 *
 * Owns: the grammars (repository names, tags and digests as the spec's
 * regular expressions give them) and the bounds of every parser here.
 * Trusts: nothing of the bytes it reads.
 * Must hold: every parser is bounded in bytes, values, depth and time
 * (linear), and answers a value or a VouchError `bad_request`/`too_large`,
 * never another throw.
 */
import { VouchError } from '../../chain/errors.ts';
import { checkJsonShape, JsonShapeError } from '../../artifacts/json-shape.ts';
import type { EcosystemHandler } from './ecosystem.ts';
import { OCI_MANIFEST_ACCEPT, OCI_MANIFEST_TYPES } from '../../artifacts/oci-accept.ts';

export { parseChallenge, MAX_CHALLENGE_BYTES } from '../../artifacts/oci-accept.ts';

export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
export const DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';
export const MANIFEST_TYPES: readonly string[] = OCI_MANIFEST_TYPES;
/** The `accept` of every manifest request the gateway or `vouch endorse --oci` makes. */
export const MANIFEST_ACCEPT = OCI_MANIFEST_ACCEPT;

/** Largest manifest or index read (the spec lets registries refuse more than 4 MiB). */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
/** Descriptors (layers, platform manifests) one manifest or index may list. */
export const MAX_DESCRIPTORS = 10_000;
/** Largest tag list page read from a registry, and the most tags it may hold. */
export const MAX_TAG_LIST_BYTES = 8 * 1024 * 1024;
export const MAX_TAGS = 100_000;

const COMPONENT = '[a-z0-9]+(?:(?:\\.|_|__|-+)[a-z0-9]+)*';
/** A repository name (the spec's `<name>`), at most 255 characters. */
export const REPOSITORY = new RegExp(`^${COMPONENT}(?:/${COMPONENT})*$`);
export const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
/** The digests the gateway serves: sha256 and sha512, lowercase hex (the chain's artifact_hash form). */
export const DIGEST = /^(?:sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$/;

export function isRepository(s: string): boolean {
  return s.length > 0 && s.length <= 255 && REPOSITORY.test(s);
}

/** What a request under an OCI route asks for (the path after `/v2/` and the route's own prefix). */
export type OciRequest =
  | { type: 'base' }
  | { type: 'manifest'; repo: string; ref: string; byDigest: boolean }
  | { type: 'blob'; repo: string; digest: string }
  | { type: 'tags'; repo: string };

/** Sorts the path after the route's prefix (percent-encoding as sent); null: not a read endpoint of the spec. */
export function parseOciPath(rest: string): OciRequest | null {
  if (rest === '') return { type: 'base' };
  if (rest.length > 1024) return null;
  const m = /^(.+)\/(manifests|blobs|tags)\/([^/]+)$/.exec(rest);
  if (m === null) return null;
  const [, repo, what, last] = m as unknown as [string, string, string, string];
  if (!isRepository(repo)) return null;
  if (what === 'tags') return last === 'list' ? { type: 'tags', repo } : null;
  if (what === 'blobs') return DIGEST.test(last) ? { type: 'blob', repo, digest: last } : null;
  if (DIGEST.test(last)) return { type: 'manifest', repo, ref: last, byDigest: true };
  return TAG.test(last) ? { type: 'manifest', repo, ref: last, byDigest: false } : null;
}

/**
 * The URL a manifest is endorsed as (docs/guide/oci.md): the
 * registry's base URL (the route's canonical base, else its origin), `v2/`,
 * the repository, `/manifests/` and the tag or digest, e.g.
 * `https://registry-1.docker.io/v2/library/alpine/manifests/3.20`.
 */
export function manifestUrl(base: string, repo: string, ref: string): string {
  return `${base.endsWith('/') ? base : `${base}/`}v2/${repo}/manifests/${ref}`;
}

export function blobUrl(base: string, repo: string, digest: string): string {
  return `${base.endsWith('/') ? base : `${base}/`}v2/${repo}/blobs/${digest}`;
}

/** A manifest or index as far as serving needs it. */
export interface ManifestFacts {
  /** Its media type: the `mediaType` field, else told by its shape (an OCI manifest may omit it). */
  mediaType: string;
  /** Platform manifests of an index (digests). */
  manifests: string[];
  /** Config and layers of a manifest (digests). */
  blobs: string[];
  /** The sizes their descriptors declare, in the order of `blobs` (null: none or not a size). Unchecked: for scheduling only. */
  blobSizes: Array<number | null>;
}

function bad(what: string): never {
  throw new VouchError('bad_request', `not an OCI manifest: ${what}`);
}

function descriptorSizes(list: unknown): Array<number | null> {
  if (!Array.isArray(list)) return [];
  return list.map((d) => {
    const size = (d as { size?: unknown } | null)?.size;
    return typeof size === 'number' && Number.isSafeInteger(size) && size >= 0 ? size : null;
  });
}

function descriptorDigests(list: unknown, field: string): string[] {
  if (list === undefined) return [];
  if (!Array.isArray(list)) bad(`${field} is not an array`);
  if (list.length > MAX_DESCRIPTORS) throw new VouchError('too_large', `OCI manifest: more than ${MAX_DESCRIPTORS} ${field}`);
  return list.map((d, i) => {
    const digest = (d as { digest?: unknown } | null)?.digest;
    if (typeof digest !== 'string' || !DIGEST.test(digest)) bad(`${field}[${i}].digest is not a sha256 or sha512 digest`);
    return digest;
  });
}

/**
 * Reads a manifest or image index (OCI or Docker schema 2).
 * @throws VouchError too_large (over MAX_MANIFEST_BYTES, more than
 * MAX_DESCRIPTORS, too deep or too many values), bad_request (not JSON, not
 * an object, a schema 1 manifest, a descriptor without a digest).
 */
export function parseManifest(bytes: Buffer): ManifestFacts {
  if (bytes.length > MAX_MANIFEST_BYTES) throw new VouchError('too_large', `OCI manifest larger than ${MAX_MANIFEST_BYTES} bytes`);
  const doc = boundedJson(bytes, 'OCI manifest', { maxValues: 8 * MAX_DESCRIPTORS + 1000, maxDepth: 32, maxString: 64 * 1024 });
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) bad('not a JSON object');
  const o = doc as Record<string, unknown>;
  if (o.schemaVersion !== 2) bad('schemaVersion is not 2');
  const declared = o.mediaType;
  if (declared !== undefined && typeof declared !== 'string') bad('mediaType is not a string');
  const isIndex = Array.isArray(o.manifests);
  const mediaType = typeof declared === 'string' ? declared : isIndex ? OCI_INDEX : OCI_MANIFEST;
  if (!MANIFEST_TYPES.includes(mediaType)) bad(`media type ${JSON.stringify(mediaType.slice(0, 100))} is not served`);
  if (mediaType === OCI_INDEX || mediaType === DOCKER_LIST) {
    return { mediaType, manifests: descriptorDigests(o.manifests, 'manifests'), blobs: [], blobSizes: [] };
  }
  const config = o.config === undefined ? [] : descriptorDigests([o.config], 'config');
  const blobs = [...config, ...descriptorDigests(o.layers, 'layers')];
  return { mediaType, manifests: [], blobs, blobSizes: [...(o.config === undefined ? [] : descriptorSizes([o.config])), ...descriptorSizes(o.layers)] };
}

/** JSON.parse after a linear check of the text's shape. */
function boundedJson(bytes: Buffer, what: string, caps: { maxValues: number; maxDepth: number; maxString: number }): unknown {
  const text = bytes.toString('utf8');
  try {
    checkJsonShape(text, caps);
  } catch (e) {
    if (e instanceof JsonShapeError) throw new VouchError('too_large', `${what}: ${e.message}`);
    throw e;
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new VouchError('bad_request', `${what}: not JSON`);
  }
}

/**
 * Reads a `tags/list` answer: `{"name": ..., "tags": [...]}` (tags may be null).
 * @throws VouchError too_large / bad_request.
 */
export function parseTagList(bytes: Buffer): { name: string; tags: string[] } {
  if (bytes.length > MAX_TAG_LIST_BYTES) throw new VouchError('too_large', `tag list larger than ${MAX_TAG_LIST_BYTES} bytes`);
  const doc = boundedJson(bytes, 'tag list', { maxValues: 2 * MAX_TAGS + 100, maxDepth: 8, maxString: 4096 });
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) throw new VouchError('bad_request', 'tag list: not a JSON object');
  const { name, tags } = doc as { name?: unknown; tags?: unknown };
  if (typeof name !== 'string') throw new VouchError('bad_request', 'tag list: name is not a string');
  if (tags === null || tags === undefined) return { name, tags: [] };
  if (!Array.isArray(tags)) throw new VouchError('bad_request', 'tag list: tags is not an array');
  if (tags.length > MAX_TAGS) throw new VouchError('too_large', `tag list: more than ${MAX_TAGS} tags`);
  return { name, tags: tags.filter((t): t is string => typeof t === 'string' && TAG.test(t)) };
}

/**
 * The tags of one page of `tags/list` after `last` (exclusive), at most `n`
 * (the spec's pagination: lexical order), and whether more follow.
 */
export function pageOf(sorted: readonly string[], n: number | null, last: string | null): { tags: string[]; more: boolean } {
  let from = 0;
  if (last !== null) {
    from = sorted.findIndex((t) => t > last);
    if (from === -1) from = sorted.length;
  }
  const end = n === null ? sorted.length : Math.min(sorted.length, from + n);
  return { tags: sorted.slice(from, end), more: end < sorted.length };
}

/** The spec's error body (`{"errors":[{"code","message"}]}`) for a failure with `status`; the code from the status and what was asked. */
export function ociErrorBody(status: number, message: string, what: OciRequest['type'] | null): string {
  const code =
    status === 401
      ? 'UNAUTHORIZED'
      : status === 403 || status === 409 || status === 410
        ? 'DENIED'
        : status === 404
          ? what === 'blob'
            ? 'BLOB_UNKNOWN'
            : what === 'tags'
              ? 'NAME_UNKNOWN'
              : 'MANIFEST_UNKNOWN'
          : status === 429
            ? 'TOOMANYREQUESTS'
            : status === 400
              ? what === 'manifest'
                ? 'MANIFEST_INVALID'
                : 'NAME_INVALID'
              : 'UNSUPPORTED';
  return JSON.stringify({ errors: [{ code, message, detail: null }] });
}

/**
 * The route kind's module for what the proxy answers itself before an OCI
 * route sees a request (a refused path, a method, a chain not loaded):
 * failures in the spec's error form. Requests go to oci-route.ts.
 */
export const oci: EcosystemHandler = {
  kind: 'oci',
  classify: () => ({ type: 'other' }),
  errorBody: (message, status) => ({ contentType: 'application/json', body: ociErrorBody(status ?? 500, message, null) }),
};
