/**
 * HTTP plumbing shared by the gateway's handlers: JSON answers and errors
 * (docs/spec/design.md §3.1), the Accept rule (406), strict query parsing, bounded JSON
 * request bodies, and the empty-bodied failures of downloads (3.2).
 *
 * Must hold: every JSON answer carries a boolean `success`; error bodies
 * carry `status` (a catalogue code), `message` and, when one applies,
 * `resource`; statuses come only from `error-status.ts`; no stack trace
 * or internal detail ever reaches a client.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { VouchError, isVouchError, type ErrorCode } from '../../chain/errors.ts';
import { HTTP_STATUS } from './error-status.ts';
import { isArtifactUrl, isDate, isSemver } from '../../chain/block.ts';
import { FAULT, injectFault } from '../test-fault.ts';

export const JSON_TYPE = 'application/json; charset=utf-8';

export function sendJson(res: ServerResponse, status: number, body: Record<string, unknown>, headers: Record<string, string> = {}): void {
  sendJsonText(res, status, JSON.stringify(body), headers);
}

/** `sendJson` of an already serialized JSON object (it must carry `success`). */
export function sendJsonText(res: ServerResponse, status: number, text: string | Buffer, headers?: Record<string, string>): void {
  res.writeHead(status, {
    'content-type': JSON_TYPE,
    'content-length': Buffer.byteLength(text),
    'x-content-type-options': 'nosniff',
    'cache-control': 'no-cache',
    ...headers,
  });
  res.end(text);
}

/**
 * `sendJsonText` with an ETag: the headers of every lookup answer, made
 * without a spread. `text` is a string of `bytes` UTF-8 bytes: node:http
 * joins a string body to the head and hands both to the socket in one
 * piece (a Buffer body, kept per answer, measured a few microseconds slower
 * per answer under load); an ASCII body goes as latin1, copied as it is.
 */
export function sendJsonTagged(res: ServerResponse, text: string, bytes: number, etag: string, treeSize = -1, syncAge = -1): void {
  // The fleet headers (gateway/http/server.ts) in the literal: a header set before writeHead takes node:http off its fast path.
  if (treeSize < 0) {
    res.writeHead(200, { 'content-type': JSON_TYPE, 'content-length': bytes, 'x-content-type-options': 'nosniff', 'cache-control': 'no-cache', etag });
  } else if (syncAge < 0) {
    res.writeHead(200, {
      'content-type': JSON_TYPE,
      'content-length': bytes,
      'x-content-type-options': 'nosniff',
      'cache-control': 'no-cache',
      etag,
      'vouch-tree-size': treeSize,
    });
  } else {
    res.writeHead(200, {
      'content-type': JSON_TYPE,
      'content-length': bytes,
      'x-content-type-options': 'nosniff',
      'cache-control': 'no-cache',
      etag,
      'vouch-tree-size': treeSize,
      'vouch-sync-age': syncAge,
    });
  }
  // All ASCII (as many bytes as characters): written as latin1, the same bytes, copied as they are, where
  // utf8 would flatten the head and body joined by node:http into a new string and encode it.
  res.end(text, bytes === text.length ? 'latin1' : 'utf8');
}

/** HTTP status of an error (of its public code, from `HTTP_STATUS`). Unknown errors are 500. */
export function statusOf(e: unknown): number {
  return isVouchError(e) ? HTTP_STATUS[publicCode(e)] : 500;
}

/** The `status` codes clients can see (docs/spec/http.md's table; a test keeps them in step). */
export const PUBLIC_CODES: readonly ErrorCode[] = [
  'bad_request',
  'unauthorized',
  'not_found',
  'method_not_allowed',
  'not_acceptable',
  'semver_conflict',
  'too_large',
  'unsupported_media_type',
  'origin_error',
  'origin_timeout',
  'not_ready',
  'behind',
  'internal_error',
  'hash_mismatch',
  'revoked',
  'already_revoked',
  'bad_statement',
  'stale_statement',
  'key_unavailable',
];

/** Error code exposed to clients; server-side failures (files, keys, a broken chain) are internal. */
export function publicCode(e: VouchError): ErrorCode {
  if (e.code === 'usage') return 'bad_request';
  return PUBLIC_CODES.includes(e.code) ? e.code : 'internal_error';
}

/** The JSON error body of `e`: {success: false, status, message, resource?, refused?}. */
export function errorBody(e: unknown, resource?: string): Record<string, unknown> {
  const err = isVouchError(e) ? e : new VouchError('internal_error', 'internal error');
  const code = publicCode(err);
  const message = code === err.code ? err.message.split('\n')[0] : 'internal error';
  const body: Record<string, unknown> = { success: false, status: code, message };
  const r = err.resource ?? resource;
  if (r !== undefined) body.resource = r;
  // A submit's refused claims (gateway/chain/submitter.ts checkClaims): one record per entry.
  if (code === 'hash_mismatch' && Array.isArray(err.evidence?.refused)) body.refused = err.evidence.refused;
  // A lookup's 404 with proof=1: the completeness-index proof of the URL and its checkpoint note (docs/spec/index.md 8).
  if (code === 'not_found' && typeof err.evidence?.index_proof === 'string') {
    body.index_proof = err.evidence.index_proof;
    body.checkpoint = err.evidence.checkpoint;
  }
  return body;
}

export function sendError(res: ServerResponse, e: unknown, resource?: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const err = isVouchError(e) ? e : new VouchError('internal_error', 'internal error');
  const code = publicCode(err);
  const body = errorBody(err, resource);
  const headers: Record<string, string> = {};
  if (code === 'method_not_allowed' && err.evidence?.allow) headers.allow = String(err.evidence.allow);
  if (code === 'unauthorized') headers['www-authenticate'] = 'Bearer realm="vouch"';
  sendJson(res, HTTP_STATUS[code], body, headers);
}

/** Failure of a byte endpoint: status code only, empty body. */
export function sendEmpty(res: ServerResponse, status: number, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-length': '0', 'cache-control': 'no-store', ...headers });
  res.end();
}

/**
 * True when the Accept header admits JSON (absent, `*\/*`, `application/*`,
 * `application/json`, `+json` types), honouring q=0 exclusions.
 */
/**
 * A request header's value read from `rawHeaders` (several fields joined
 * with ", ", as `req.headers` would); undefined when absent. Reading
 * `req.headers` builds the whole header object, a cost on every lookup.
 * `name` must be lower case.
 */
export function rawHeader(req: IncomingMessage, name: string): string | undefined {
  const raw = req.rawHeaders;
  let value: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]!;
    if (k.length === name.length && k.toLowerCase() === name) value = value === undefined ? raw[i + 1]! : `${value}, ${raw[i + 1]!}`;
  }
  return value;
}

export function acceptsJson(accept: string | undefined): boolean {
  // What clients send most (curl, fetch, most libraries), answered without parsing.
  if (accept === undefined || accept === '*/*' || accept === 'application/json') return true;
  if (accept.trim() === '') return true;
  // The most specific media range matching JSON decides, by its q value.
  let match: { specificity: number; q: number } | null = null;
  for (const part of accept.split(',')) {
    const [rawType, ...params] = part.trim().split(';');
    const type = rawType!.trim().toLowerCase();
    const specificity =
      type === 'application/json' || /^application\/[a-z0-9.+-]*\+json$/.test(type) ? 3 : type === 'application/*' ? 2 : type === '*/*' ? 1 : 0;
    if (specificity === 0 || (match !== null && specificity <= match.specificity)) continue;
    let q = 1;
    for (const p of params) {
      const [k, v] = p.trim().split('=');
      if (k?.trim().toLowerCase() === 'q') q = Number(v);
    }
    match = { specificity, q: Number.isFinite(q) ? q : 0 };
  }
  return match !== null && match.q > 0;
}

export interface SelectionQuery {
  url: string;
  semver: string | undefined;
  at: string | undefined;
  /** `proof=1`: a lookup adds the block's inclusion proof in the served checkpoint (issue 17). */
  proof?: boolean;
  /**
   * Parameters that are not lookup parameters (`name=value`, the first few): what an unencoded `&` in the
   * artifact URL leaves after it (`?url=https://h/x?a=1&b=2` is url `https://h/x?a=1` and `b=2`).
   */
  extra?: string[];
}

const QUERY_PARAMETERS = new Set(['url', 'semver', 'at', 'proof']);

/**
 * A not-found lookup's hint when its query had parameters that are not lookup
 * parameters: the `url` was most likely cut at an unencoded `&`.
 */
export function truncationHint(q: SelectionQuery): string {
  if (q.extra === undefined || q.extra.length === 0) return '';
  const rest = q.extra.map((p) => (p.length > 64 ? `${p.slice(0, 64)}...` : p)).join('&');
  return (
    `; the url looks truncated at an unencoded '&' (the query also has ${rest}, which is not a lookup parameter): ` +
    `percent-encode the url parameter (& as %26), e.g. curl -G --data-urlencode 'url=...'`
  );
}

const MAX_QUERY = 16 * 1024;

/**
 * `url` (required, absolute http(s)), `semver` (SemVer 2.0.0), `at`
 * (YYYY-MM-DD). Repeated or empty parameters are refused. `checkUrl: false`
 * leaves out the URL's form check (`checkArtifactUrl`), for a caller that
 * looks the URL up among verified blocks first (their URLs are all well
 * formed, so a URL found is one) and checks it only when none is found.
 * @throws VouchError bad_request naming the parameter.
 */
export function parseSelectionQuery(search: string, o: { checkUrl?: boolean } = {}): SelectionQuery {
  if (search.length > MAX_QUERY) throw new VouchError('bad_request', `query string longer than ${MAX_QUERY} bytes`);
  let url: string | undefined;
  let semver: string | undefined;
  let at: string | undefined;
  let proof: string | undefined;
  let extra: string[] | undefined;
  if (search.startsWith('url=') && !search.includes('&')) {
    // The usual query, one `url`: what URLSearchParams gives (`+` is a space), without building one.
    const value = search.slice(4);
    try {
      url = decodeURIComponent(value.includes('+') ? value.replace(/\+/g, ' ') : value);
    } catch {
      throw new VouchError('bad_request', 'query string has invalid percent-encoding');
    }
  } else {
    let params: URLSearchParams;
    try {
      // URLSearchParams never throws, but replaces invalid percent-encoding; check it first.
      decodeURIComponent(search.replace(/\+/g, ' '));
      params = new URLSearchParams(search);
    } catch {
      throw new VouchError('bad_request', 'query string has invalid percent-encoding');
    }
    const one = (name: string): string | undefined => {
      const all = params.getAll(name);
      if (all.length > 1) throw new VouchError('bad_request', `parameter ${name} given ${all.length} times`);
      return all[0];
    };
    url = one('url');
    semver = one('semver');
    at = one('at');
    proof = one('proof');
    for (const [k, v] of params) {
      if (QUERY_PARAMETERS.has(k)) continue;
      (extra ??= []).push(v === '' && !search.includes(`${k}=`) ? k : `${k}=${v}`);
      if (extra.length === 4) break;
    }
  }
  if (url === undefined || url === '') throw new VouchError('bad_request', 'missing url parameter');
  const badSemver = semver !== undefined && !isSemver(semver);
  const badAt = at !== undefined && !isDate(at);
  // The URL's error comes first, as ever, whether the check is left to the caller or not.
  if (o.checkUrl !== false || badSemver || badAt) checkArtifactUrl(url);
  if (badSemver) throw new VouchError('bad_request', 'semver must be a SemVer 2.0.0 version', { resource: url });
  if (badAt) throw new VouchError('bad_request', 'at must be a date YYYY-MM-DD', { resource: url });
  if (proof !== undefined && proof !== '1' && proof !== '0') throw new VouchError('bad_request', 'proof must be 1 or 0', { resource: url });
  const q: SelectionQuery = proof === '1' ? { url, semver, at, proof: true } : { url, semver, at };
  if (extra !== undefined) q.extra = extra;
  return q;
}

/** @throws VouchError bad_request unless `url` is an absolute http(s) URL (the `url` parameter's rule). */
export function checkArtifactUrl(url: string): void {
  if (!isArtifactUrl(url)) throw new VouchError('bad_request', 'url must be an absolute http or https URL', { resource: url });
}

/** Where an exception that no handler expected came from, when not from the handler itself (the `stage` of the metric). */
export const UNEXPECTED_STAGE = Symbol('vouch.unexpectedStage');

/**
 * Reads a request body up to `limit` bytes. Listens for 'data' and 'end'
 * instead of iterating the request: leaving a `for await` early destroys
 * the request and sets its `socket` to null (node's stream destroyer),
 * while its answer is still to be written and recorded. Over the limit, the
 * rest of the body is read and dropped (the dispatch bounds how long).
 * An exception in a listener rejects the promise (its stage `body`), never
 * escapes into node:http's parser.
 * @throws VouchError too_large; bad_request when the client left before the body ended
 */
export function readBody(req: IncomingMessage, limit: number, route = ''): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > limit) {
    req.resume();
    return Promise.reject(new VouchError('too_large', `request body over ${limit} bytes`));
  }
  if (req.readableEnded) return Promise.resolve(Buffer.alloc(0)); // read already: nothing more comes
  if (req.destroyed) return Promise.reject(new VouchError('bad_request', 'the client closed the connection before the body ended'));
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = (e: unknown) => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      req.resume(); // the rest is read and dropped
      reject(e);
    };
    const guarded = (f: () => void) => {
      try {
        f();
      } catch (e) {
        if (e !== null && typeof e === 'object' && !isVouchError(e)) (e as { [UNEXPECTED_STAGE]?: string })[UNEXPECTED_STAGE] = 'body';
        stop(e);
      }
    };
    const onData = (chunk: Buffer) =>
      guarded(() => {
        if (FAULT !== null) injectFault('body', route);
        size += chunk.length;
        if (size > limit) stop(new VouchError('too_large', `request body over ${limit} bytes`));
        else chunks.push(chunk);
      });
    const onEnd = () =>
      guarded(() => {
        req.off('data', onData);
        req.off('close', onClose);
        resolve(Buffer.concat(chunks, size));
      });
    const onClose = () => stop(new VouchError('bad_request', 'the client closed the connection before the body ended'));
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('close', onClose);
  });
}

/** JSON.parse with a nesting bound. @throws VouchError bad_request */
export function parseJsonBody(buf: Buffer, maxDepth = 32): unknown {
  const text = buf.toString('utf8');
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92) i++;
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 || c === 91) max = Math.max(max, ++depth);
    else if (c === 125 || c === 93) depth--;
  }
  if (max > maxDepth) throw new VouchError('bad_request', `JSON nested deeper than ${maxDepth} levels`);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new VouchError('bad_request', `body is not JSON: ${(e as Error).message.split('\n')[0]}`);
  }
}

/** Minified JSON with every non-ASCII character escaped (\\uXXXX): safe in an HTTP header (chain/uns-header.ts). */
export { asciiJson } from '../../chain/uns-header.ts';
