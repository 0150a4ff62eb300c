/**
 * What the mirror hands to readers: a verified artifact in memory or in a
 * file, with the origin headers kept beside its bytes.
 *
 * Owns: which origin response headers are kept with the bytes and served
 * with them on every later hit (`KEPT_ORIGIN_HEADERS`), and the reader's
 * handle (`StoredArtifact`: release and retain).
 *
 * Trusts: nothing in the headers it filters (they come from origins and
 * from metadata files on disk).
 *
 * Must hold: a kept header is one of the kept names, a string of at most
 * 1,024 characters without control characters (HTAB aside).
 */

/**
 * Origin response headers kept with the bytes (besides Content-Type) and
 * served with them on every later hit, so a mirror hit answers like the
 * origin fetch did. Only descriptive headers that are the same for every
 * client: never Set-Cookie, Vary, validators (the gateway sets its own
 * ETag) or lengths. Content-Encoding is kept: the signed hash is over the
 * bytes as the origin sent them, so an origin that answers `gzip` despite
 * `accept-encoding: identity` has its encoded bytes hashed and served, and
 * the client needs the header to decode them.
 */
export const KEPT_ORIGIN_HEADERS: readonly string[] = ['content-disposition', 'last-modified', 'cache-control', 'content-language', 'content-encoding'];
const MAX_KEPT_HEADER = 1024;

/** The kept subset of origin response headers (lower-case names; overlong values dropped). */
export function keptOriginHeaders(headers: Readonly<Record<string, unknown>> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (headers === undefined || headers === null || typeof headers !== 'object') return out;
  for (const name of KEPT_ORIGIN_HEADERS) {
    const v = Object.hasOwn(headers, name) ? headers[name] : undefined;
    if (typeof v === 'string' && v.length <= MAX_KEPT_HEADER && /^[\t\x20-\x7e\x80-\xff]*$/.test(v)) out[name] = v;
  }
  return out;
}

/** One verified artifact handed to a reader. */
export interface StoredArtifact {
  readonly artifactHash: string;
  readonly contentType: string;
  /** The kept origin headers stored with the bytes (`KEPT_ORIGIN_HEADERS`); absent when none were stored. */
  readonly headers?: Readonly<Record<string, string>>;
  readonly size: number;
  /** The bytes, when they are in memory. */
  readonly bytes?: Buffer;
  /** The file holding the bytes, when they are not in memory. Valid until `release()`. */
  readonly path?: string;
  /** Where the mirror had it: `memory`, `disk`, or a `spool` file of a fresh fetch. */
  readonly tier: 'memory' | 'disk' | 'spool';
  /** Done reading (also done sending: a socket may still read `bytes`); the bytes or file may go. Idempotent. Every artifact handed out must be released. */
  release(): void;
  /** Another reference for another reader (released separately). */
  retain(): StoredArtifact;
}
