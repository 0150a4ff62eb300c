/**
 * Fetching artifact bytes from origins (docs/spec/design.md §3.4): GET only,
 * keep-alive, redirects followed hop by hop over `h1/pool.ts`.
 * Owns: the origin limits (timeouts, one deadline over redirects and body,
 * size and redirect caps), cancellation, one-line `VouchError`s. Guarded
 * hops: with `guardPrivate` (submit) every hop; for downloads each redirect
 * to another host unless `allowPrivate`; the checked IP is the one used.
 * Trusts: `h1/` for framing; `AddressGuard` for what may be connected to.
 * Must hold: only a final 200 is handed over; a body is at most `maxBytes`
 * and complete only when the framing says so, else `too_large`,
 * `origin_error` or `origin_timeout`; a refused hop names no address; an
 * abort destroys the socket; nothing here writes an HTTP response.
 */
import { isIP } from 'node:net';
import { Readable } from 'node:stream';
import { VouchError } from '../chain/errors.ts';
import { AddressGuard, type AddressGuardOptions } from './address-guard.ts';
import { OCI_MANIFEST_ACCEPT, isOciManifestPath, parseChallenge } from './oci-accept.ts';
import { H1Client, type H1ClientOptions, type H1Request, type H1Response } from './h1/pool.ts';

/** A response head from the transport, its body read exactly one way (`h1/pool.ts`'s `H1Response`). */
export type OriginTransportResponse = Pick<
  H1Response,
  'statusCode' | 'headers' | 'contentLength' | 'stream' | 'receiveInto' | 'receiveWindows' | 'discard' | 'abort'
>;

/**
 * The HTTP/1.1 client under the fetcher: `h1/pool.ts`'s `H1Client`, the only
 * one shipped. The seam lets the gateway bench run the same fetcher over
 * other clients side by side (bench/origin-clients/, docs/decisions/h1-client.md).
 */
export interface OriginTransport {
  request(req: H1Request): Promise<OriginTransportResponse>;
  close(): void;
  destroy(): void;
}

export interface OriginLimits {
  /** Total deadline of one fetch: connect, redirects, headers and the whole body. */
  timeoutMs: number;
  connectTimeoutMs: number;
  /** Wait for the response headers of one hop; default = timeoutMs. */
  headersTimeoutMs: number;
  /** Largest accepted body, declared or streamed. */
  maxBytes: number;
  /** Redirects followed at most (0: none). */
  maxRedirects: number;
}

export const DEFAULT_ORIGIN_LIMITS: Readonly<OriginLimits> = {
  timeoutMs: 30_000,
  connectTimeoutMs: 10_000,
  headersTimeoutMs: 30_000,
  maxBytes: 2 * 1024 ** 3,
  maxRedirects: 5,
};

export interface OriginFetcherOptions extends Partial<OriginLimits> {
  /** The guard of guarded hops (or its options). */
  guard?: AddressGuard | AddressGuardOptions;
  /**
   * `origin.allow_private`: redirect hops of unguarded fetches may reach
   * loopback and private addresses on any host. Default false: a hop that
   * leaves the first URL's host (and `trustedHosts`) is checked by the guard.
   */
  allowPrivate?: boolean;
  /** Sent as User-Agent. */
  userAgent?: string;
  /** Idle keep-alive sockets are closed after this long (default 4 s). */
  keepAliveTimeoutMs?: number;
  /** Extra TLS options for https origins (a private CA). */
  tls?: H1ClientOptions['tls'];
  /** The HTTP/1.1 client to fetch over (default: `H1Client`); the gateway bench's side-by-side runs only. */
  transport?: (options: H1ClientOptions) => OriginTransport;
}

export interface OriginFetchOptions {
  /** Aborting cancels the origin request (socket destroyed), before or during the body. */
  signal?: AbortSignal;
  /** Refuse loopback, private and other non-public addresses at every hop (submit). */
  guardPrivate?: boolean;
  /**
   * Hosts (as `URL.host` spells them: name or IP, and a port unless the
   * scheme's default) that redirect hops may reach unguarded besides the
   * first URL's own — a proxy route's canonical host.
   */
  trustedHosts?: readonly string[];
  /**
   * Request headers added to the hops on the first URL's own host only (a
   * registry's `accept` and `authorization`): never sent to a redirect
   * target elsewhere, never logged.
   */
  headers?: Readonly<Record<string, string>>;
}

export interface OriginResponse {
  status: number;
  /** The URL that answered, after redirects. */
  finalUrl: string;
  /** The origin's Content-Type, or `application/octet-stream` when it sent none. */
  contentType: string;
  /** Declared Content-Length, or null when none was declared. */
  contentLength: number | null;
  /** Response headers, lower-case names, repeated headers joined with ", ". */
  headers: Record<string, string>;
  /**
   * The body as a stream (taken on first access; then `receiveInto` is not
   * available). Ends only when complete; errors with a VouchError when it is
   * cut short, too large or too slow, or with the caller's abort reason.
   * Destroying it cancels the origin request.
   */
  readonly body: Readable;
  /**
   * Instead of `body`: receives the whole body into `dest`, which must be
   * exactly the declared Content-Length (TypeError otherwise); `progress` is
   * told the bytes received so far, in order. Rejects as the body would fail;
   * once it settles, nothing more is written into `dest`.
   */
  receiveInto(dest: Buffer, progress: (received: number) => void): Promise<void>;
  /**
   * Instead of `body`, for a declared Content-Length: fills `window` from the
   * socket and hands it to `onFull` each time it is full and at the end (a
   * shorter view); reading waits for its promise, then refills the window.
   * Rejects as the body would fail, or with `onFull`'s rejection.
   */
  receiveWindows(window: Buffer, onFull: (filled: Buffer) => Promise<void>): Promise<void>;
  /** Closes the origin connection without reading (more of) the body. */
  cancel(): void;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const REDIRECT_HINT =
  ' (a redirect reaches loopback and private addresses only on the host of the URL itself, or with origin.allow_private: true in the gateway config)';

/** Lifecycle of one fetch: the deadline timer and the caller's abort signal. */
class FetchState {
  readonly controller = new AbortController();
  timedOut = false;
  private timer: NodeJS.Timeout;
  private readonly onAbort: () => void;

  constructor(
    readonly resource: string,
    readonly limits: OriginLimits,
    readonly signal: AbortSignal | undefined,
  ) {
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort(new Error('origin deadline'));
    }, limits.timeoutMs);
    this.timer.unref();
    this.onAbort = () => this.controller.abort(signal?.reason);
    signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  /** The caller aborted (its reason wins over every other failure). */
  get callerAborted(): boolean {
    return this.signal?.aborted === true;
  }

  done(): void {
    clearTimeout(this.timer);
    this.signal?.removeEventListener('abort', this.onAbort);
  }

  /** The error to surface for `e`, given what happened to this fetch. */
  failure(e: unknown, current: string): unknown {
    if (this.callerAborted) return this.signal!.reason;
    if (this.timedOut) {
      return new VouchError('origin_timeout', `origin ${this.resource}: no complete answer within ${this.limits.timeoutMs} ms`, { resource: this.resource });
    }
    if (e instanceof VouchError) {
      // The transport's own errors name no URL: they get this fetch's.
      return e.resource === undefined ? new VouchError(e.code, `origin ${current}: ${e.message}`, { resource: this.resource }) : e;
    }
    return networkError(e, current, this.resource);
  }
}

/** One line for a socket error; never its stack or cause. */
function networkError(e: unknown, url: string, resource: string): VouchError {
  const err = (e ?? {}) as { code?: unknown; message?: unknown; name?: unknown };
  const code = typeof err.code === 'string' ? err.code : '';
  const at = `origin ${url}`;
  const opts = { resource };
  switch (code) {
    case 'ECONNREFUSED':
      return new VouchError('origin_error', `${at}: connection refused`, opts);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_NONAME':
      return new VouchError('origin_error', `${at}: host not found (${code})`, opts);
    case 'ECONNRESET':
    case 'EPIPE':
      return new VouchError('origin_error', `${at}: the connection closed before the response was complete`, opts);
    case 'ETIMEDOUT':
      return new VouchError('origin_timeout', `${at}: the connection timed out`, opts);
    default: {
      if (/^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO|SELF_SIGNED|HOSTNAME_MISMATCH)/.test(code)) {
        return new VouchError('origin_error', `${at}: TLS failure (${code})`, opts);
      }
      const message = typeof err.message === 'string' ? err.message.split('\n')[0]!.slice(0, 200) : 'request failed';
      return new VouchError('origin_error', `${at}: ${message}${code ? ` (${code})` : ''}`, opts);
    }
  }
}

function parseHttpUrl(text: string, resource: string, what: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new VouchError('bad_request', `${what} is not an absolute URL: ${JSON.stringify(text.slice(0, 200))}`, { resource });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new VouchError('bad_request', `${what} is not http or https: ${url.protocol}`, { resource });
  }
  if (url.username !== '' || url.password !== '') {
    throw new VouchError('bad_request', `${what} must not carry credentials`, { resource });
  }
  return url;
}

export class OriginFetcher {
  readonly limits: Readonly<OriginLimits>;
  private readonly client: OriginTransport;
  private readonly guard: AddressGuard;
  private readonly allowPrivate: boolean;
  private readonly userAgent: string;

  constructor(options: OriginFetcherOptions = {}) {
    const timeoutMs = options.timeoutMs ?? DEFAULT_ORIGIN_LIMITS.timeoutMs;
    this.limits = Object.freeze({
      timeoutMs,
      connectTimeoutMs: options.connectTimeoutMs ?? Math.min(DEFAULT_ORIGIN_LIMITS.connectTimeoutMs, timeoutMs),
      headersTimeoutMs: options.headersTimeoutMs ?? timeoutMs,
      maxBytes: options.maxBytes ?? DEFAULT_ORIGIN_LIMITS.maxBytes,
      maxRedirects: options.maxRedirects ?? DEFAULT_ORIGIN_LIMITS.maxRedirects,
    });
    for (const [k, v] of Object.entries(this.limits)) {
      if (!Number.isInteger(v) || v < 0) throw new TypeError(`origin fetcher: ${k} must be a non-negative integer`);
    }
    this.guard = options.guard instanceof AddressGuard ? options.guard : new AddressGuard(options.guard);
    this.allowPrivate = options.allowPrivate ?? false;
    this.userAgent = options.userAgent ?? 'vouch';
    if (!/^[\x20-\x7e]*$/.test(this.userAgent)) throw new TypeError('origin fetcher: userAgent must be printable ASCII');
    const clientOptions: H1ClientOptions = {
      connectTimeoutMs: this.limits.connectTimeoutMs,
      headersTimeoutMs: this.limits.headersTimeoutMs,
      keepAliveTimeoutMs: options.keepAliveTimeoutMs ?? 4_000,
      ...(options.tls ? { tls: options.tls } : {}),
    };
    this.client = options.transport ? options.transport(clientOptions) : new H1Client(clientOptions);
  }

  /**
   * GETs `url`, following redirects (each hop checked when guarded: see the
   * header). Resolves once a final 200's headers arrived; the body is
   * streamed. Rejects with VouchError: `bad_request` (not an absolute http(s)
   * URL, or an address refused under `guardPrivate`), `origin_error`
   * (unreachable, any status but 200, too many redirects, a redirect hop
   * refused, cut short), `origin_timeout`, `too_large` (declared
   * Content-Length over the cap); or with `signal.reason` when aborted.
   */
  async fetch(url: string | URL, options: OriginFetchOptions = {}): Promise<OriginResponse> {
    const resource = typeof url === 'string' ? url : url.href;
    let current = parseHttpUrl(resource, resource, 'artifact URL');
    if (options.signal?.aborted) throw options.signal.reason;
    const state = new FetchState(resource, this.limits, options.signal);
    const guardAll = options.guardPrivate === true;
    const trusted = new Set([current.host, ...(options.trustedHosts ?? [])]);
    const first = current.host;
    /** A registry's pull token for a manifest URL that answered 401 (the token flow runs once per fetch). */
    let bearer: string | undefined;
    try {
      for (let hop = 0; ; hop++) {
        const guard = guardAll ? 'all' : hop > 0 && !this.allowPrivate && !trusted.has(current.host) ? 'redirect' : 'none';
        const extra = current.host !== first ? undefined : bearer !== undefined ? { ...options.headers, authorization: bearer } : options.headers;
        const res = await this.request(current, resource, guard, state, extra);
        if (
          res.statusCode === 401 &&
          bearer === undefined &&
          current.host === first &&
          options.headers?.authorization === undefined &&
          isOciManifestPath(current.pathname)
        ) {
          // A registry that wants a pull token first (the distribution spec's token flow, anonymous).
          const challenge = res.headers['www-authenticate'];
          res.discard();
          if (typeof challenge !== 'string')
            throw new VouchError('origin_error', `origin ${current.href}: HTTP 401 without a challenge`, { resource, evidence: { status: 401 } });
          bearer = await this.registryToken(challenge, current, resource, state, guardAll, trusted);
          hop--;
          continue;
        }
        const location = res.headers['location'];
        if (REDIRECTS.has(res.statusCode) && typeof location === 'string' && location !== '') {
          res.discard();
          if (hop >= this.limits.maxRedirects) {
            throw new VouchError('origin_error', `origin ${resource}: more than ${this.limits.maxRedirects} redirects`, { resource });
          }
          let next: URL;
          try {
            next = new URL(location, current);
          } catch {
            throw new VouchError('origin_error', `origin ${current.href}: bad redirect location`, { resource });
          }
          if (next.protocol !== 'http:' && next.protocol !== 'https:') {
            throw new VouchError('origin_error', `origin ${current.href}: redirect to a non-http(s) URL`, { resource });
          }
          next.username = '';
          next.password = '';
          current = next;
          continue;
        }
        if (res.statusCode !== 200) {
          // Only a 200 carries the artifact: a 204 is no body, a 206 part of one, a 202 a promise.
          res.discard();
          throw new VouchError('origin_error', `origin ${current.href}: HTTP ${res.statusCode}${res.statusCode < 300 ? ' (only 200 is accepted)' : ''}`, {
            resource,
            evidence: { status: res.statusCode },
          });
        }
        const contentLength = res.contentLength;
        if (contentLength !== null && contentLength > this.limits.maxBytes) {
          res.abort();
          throw new VouchError('too_large', `origin ${current.href}: declares ${contentLength} bytes, over the ${this.limits.maxBytes}-byte limit`, {
            resource,
          });
        }
        return new FetchedResponse(res, current.href, state);
      }
    } catch (e) {
      const failure = state.failure(e, current.href);
      state.done();
      throw failure;
    }
  }

  /**
   * An anonymous pull token for the repository of a registry manifest URL,
   * from the realm its challenge names (`Bearer realm=...,service=...`); the
   * realm is guarded as a redirect hop is, and must be https unless it is
   * on the registry's own host. Its answer is read up to 64 KiB.
   */
  private async registryToken(
    challenge: string,
    registry: URL,
    resource: string,
    state: FetchState,
    guardAll: boolean,
    trusted: ReadonlySet<string>,
  ): Promise<string> {
    const fail = (why: string): never => {
      throw new VouchError('origin_error', `origin ${registry.href}: HTTP 401, and no pull token: ${why}`, { resource, evidence: { status: 401 } });
    };
    let ch: ReturnType<typeof parseChallenge>;
    try {
      ch = parseChallenge(challenge);
    } catch {
      return fail('an unreadable WWW-Authenticate');
    }
    if (ch.scheme !== 'bearer' || ch.params.realm === undefined) return fail(`the registry asks for ${ch.scheme} authentication`);
    let realm: URL;
    try {
      realm = new URL(ch.params.realm);
    } catch {
      return fail('the token realm is not a URL');
    }
    if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && realm.host === registry.host))
      return fail("the token realm must be https or on the registry's host");
    const name = /\/v2\/(.+)\/manifests\/[^/]+$/.exec(registry.pathname)?.[1] ?? '';
    if (ch.params.service !== undefined) realm.searchParams.set('service', ch.params.service);
    realm.searchParams.set('scope', `repository:${name}:pull`);
    realm.username = '';
    realm.password = '';
    const guard = guardAll ? 'all' : !this.allowPrivate && !trusted.has(realm.host) ? 'redirect' : 'none';
    const res = await this.request(realm, resource, guard, state, { accept: 'application/json' });
    if (res.statusCode !== 200) {
      res.discard();
      return fail(`the token service answered ${res.statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of res.stream()) {
      size += (c as Buffer).length;
      if (size > 64 * 1024) {
        res.abort();
        return fail('the token answer is larger than 64 KiB');
      }
      chunks.push(c as Buffer);
    }
    let token: unknown;
    try {
      const doc = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { token?: unknown; access_token?: unknown };
      token = doc.token ?? doc.access_token;
    } catch {
      return fail('the token answer is not JSON');
    }
    if (typeof token !== 'string' || !/^[\x21-\x7e]{1,8192}$/.test(token)) return fail('the token answer holds no token');
    return `Bearer ${token}`;
  }

  private async request(
    url: URL,
    resource: string,
    guard: 'all' | 'redirect' | 'none',
    state: FetchState,
    extra?: Readonly<Record<string, string>>,
  ): Promise<OriginTransportResponse> {
    const hostname = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    let host = hostname;
    if (guard !== 'none') {
      let target;
      try {
        target = await this.guard.check(url, resource);
      } catch (e) {
        if (guard === 'redirect' && e instanceof VouchError && e.code === 'bad_request') {
          // Refused before anything was sent to it: the same answer whether its port is open or not.
          throw new VouchError('origin_error', `origin ${resource}: redirect to ${url.host} refused: not a public address${REDIRECT_HINT}`, { resource });
        }
        throw e;
      }
      if (state.controller.signal.aborted) throw state.controller.signal.reason;
      host = target.address; // Host header and TLS server name stay the URL's own
    }
    const secure = url.protocol === 'https:';
    return await this.client.request({
      secure,
      host,
      port: url.port ? Number(url.port) : secure ? 443 : 80,
      servername: isIP(hostname) === 0 ? hostname : undefined,
      hostHeader: url.host,
      path: `${url.pathname}${url.search}`,
      // A registry's manifest URL is asked for in the manifest media types (an endorsement of an image tag).
      headers: { 'user-agent': this.userAgent, 'accept-encoding': 'identity', accept: isOciManifestPath(url.pathname) ? OCI_MANIFEST_ACCEPT : '*/*', ...extra },
      signal: state.controller.signal,
    });
  }

  /** Closes idle keep-alive sockets and refuses further fetches. */
  async close(): Promise<void> {
    this.client.close();
  }

  /** Destroys every socket, in flight or idle. */
  async destroy(): Promise<void> {
    this.client.destroy();
  }
}

/** A final 200: its head, and its body read exactly one way. */
class FetchedResponse implements OriginResponse {
  readonly status: number;
  readonly contentType: string;
  readonly contentLength: number | null;
  readonly headers: Record<string, string>;
  private stream: Readable | null = null;
  private taken = false;

  constructor(
    private readonly res: OriginTransportResponse,
    readonly finalUrl: string,
    private readonly state: FetchState,
  ) {
    this.status = res.statusCode;
    this.headers = res.headers;
    this.contentLength = res.contentLength;
    this.contentType = res.headers['content-type'] || 'application/octet-stream';
  }

  get body(): Readable {
    if (this.stream === null) {
      if (this.taken) throw new TypeError('the body was already received');
      this.taken = true;
      this.stream = limitBody(this.res.stream(), this.contentLength, this.finalUrl, this.state);
    }
    return this.stream;
  }

  async receiveInto(dest: Buffer, progress: (received: number) => void): Promise<void> {
    if (this.contentLength === null || dest.length !== this.contentLength) {
      throw new TypeError(`receiveInto needs a buffer of the declared length (${this.contentLength})`);
    }
    await this.direct(() => this.res.receiveInto(dest, progress));
  }

  async receiveWindows(window: Buffer, onFull: (filled: Buffer) => Promise<void>): Promise<void> {
    if (this.contentLength === null) throw new TypeError('receiveWindows needs a declared Content-Length');
    const own: unknown[] = []; // onFull's own failure passes through unchanged
    await this.direct(() =>
      this.res.receiveWindows(window, (filled) =>
        onFull(filled).catch((e: unknown) => {
          own.push(e);
          throw e;
        }),
      ),
    ).catch((e: unknown) => {
      throw own.length > 0 ? own[0] : e;
    });
  }

  /** Runs a direct receive under this fetch's deadline, mapping its failure. */
  private async direct(receive: () => Promise<void>): Promise<void> {
    if (this.taken) throw new TypeError('the body was already taken');
    this.taken = true;
    try {
      await receive();
    } catch (e) {
      throw this.state.failure(e, this.finalUrl);
    } finally {
      this.state.done();
    }
  }

  cancel(): void {
    if (this.stream !== null) {
      this.stream.destroy();
      return;
    }
    this.taken = true;
    this.res.abort();
    this.state.done();
  }
}

/**
 * Wraps the transport's body stream: counts bytes against the cap, checks the declared
 * length at the end, maps every error, and ends the fetch's deadline and
 * abort listener when the body is done either way.
 */
function limitBody(src: Readable, declared: number | null, url: string, state: FetchState): Readable {
  const { maxBytes } = state.limits;
  let received = 0;
  let settled = false;
  const out = new Readable({
    highWaterMark: 64 * 1024,
    read() {
      src.resume();
    },
    destroy(err, callback) {
      settled = true;
      state.done();
      if (!src.destroyed) src.destroy();
      callback(err);
    },
  });
  // A body nobody reads may still fail (its deadline): that must not be an
  // unhandled 'error' event. Readers still see the error (iteration, pipeline).
  out.on('error', () => {});
  const fail = (e: unknown) => {
    if (settled) return;
    out.destroy(state.failure(e, url) as Error);
  };
  src.on('data', (chunk: Buffer) => {
    if (settled) return;
    received += chunk.length;
    if (received > maxBytes) {
      fail(new VouchError('too_large', `origin ${url}: sent more than the ${maxBytes}-byte limit`, { resource: state.resource }));
      return;
    }
    if (declared !== null && received > declared) {
      fail(new VouchError('origin_error', `origin ${url}: sent more than its declared ${declared} bytes`, { resource: state.resource }));
      return;
    }
    if (!out.push(chunk)) src.pause();
  });
  src.on('end', () => {
    if (settled) return;
    if (declared !== null && received !== declared) {
      fail(new VouchError('origin_error', `origin ${url}: body cut short (${received} of ${declared} bytes)`, { resource: state.resource }));
      return;
    }
    settled = true;
    state.done();
    out.push(null);
  });
  src.on('error', fail);
  // The deadline or the caller's abort while the body streams.
  state.controller.signal.addEventListener('abort', () => fail(state.controller.signal.reason), { once: true });
  return out;
}
