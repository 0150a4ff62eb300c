/**
 * The one HTTP transport vouch speaks git over (smart HTTP, protocol v0,
 * stateless RPC): the mirror's fetch (./upload-pack.ts) and the authority's
 * push (./chain-push.ts) both go through `exchange()`.
 * Owns: the undici client (one keep-alive agent), each exchange's bounds
 * (total time, silence, bytes after inflating gzip/deflate), redirects
 * (fetches only, up to 10), credentials split off remote URLs
 * (`parseRemote`), the failure classes (`timeout`, `stall`, `cancelled`,
 * `unreachable`, `broken`).
 * Trusts: undici for framing, TLS and reuse; nothing in an answer.
 * Must hold: an exchange ends within `timeoutMs` (plus `msPerMiB` per MiB
 * received, when given); never more than `maxBytes` reach the sink;
 * credentials never appear in a message.
 */
import { type Readable, pipeline } from 'node:stream';
import { createGunzip, createInflate } from 'node:zlib';
import { Agent, type Dispatcher, interceptors, request } from 'undici';
import { VouchError } from '../chain/errors.ts';

/** A git remote: its base URL (no credentials, query or fragment), the same for messages, Basic auth when the URL carried credentials. */
export interface Remote {
  base: string;
  shown: string;
  auth: string | null;
}

/** Splits credentials off a remote URL (sent as Basic auth, never shown). */
export function parseRemote(url: string): Remote {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new VouchError('bad_request', 'chain remote is not a URL');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new VouchError('bad_request', `chain remote must be an http(s) URL, not ${u.protocol}`);
  const auth =
    u.username || u.password ? `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64')}` : null;
  u.username = '';
  u.password = '';
  u.search = '';
  u.hash = '';
  const base = u.toString().replace(/\/+$/, '');
  return { base, shown: base, auth };
}

/** A URL with its credentials cut out, for messages. */
export function shownUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//');
}

/** `base` + `/` + `rest`. */
export function gitUrl(base: string, rest: string): string {
  return `${base.replace(/\/+$/, '')}/${rest}`;
}

/** Text from the remote for an error message: one line, at most 200 characters. */
export function remoteText(text: string): string {
  const t = text.replace(/[\x00-\x1f\x7f]+/g, ' ').trim();
  return t.length > 200 ? `${t.slice(0, 200)}...` : t;
}

let sharedAgent: Agent | null = null;
/** The agent exchanges use unless given one: keep-alive, `connectMs` to connect (the first caller's). */
export function defaultDispatcher(connectMs = 10_000): Dispatcher {
  sharedAgent ??= new Agent({ connect: { timeout: connectMs }, keepAliveTimeout: 4_000 });
  return sharedAgent;
}

/** Why an exchange failed, for the caller's message: `stall` carries the silence, `broken` a failure after the headers. */
export type ExchangeFailure = 'timeout' | 'stall' | 'cancelled' | 'unreachable' | 'broken';

export interface Exchange {
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body: Buffer | Readable | null;
  /** Headers and body together. */
  timeoutMs: number;
  /** Each MiB of answer received extends `timeoutMs` by this much (the pack of a big clone; default 0: a fixed bound). */
  msPerMiB?: number;
  /** Longest silence: before the headers, and between two chunks of the answer. */
  stallMs: number;
  /** Most bytes of answer (after inflating) handed to the sink. */
  maxBytes: number;
  signal?: AbortSignal;
  dispatcher?: Dispatcher;
  /** Follow redirects and inflate gzip/deflate answers (the fetch, as git does; not a push). */
  lenient?: boolean;
  /** The answer's headers arrived: throw to refuse it, else return where its body goes (a promise: the next chunk waits for it, the silence bound rearmed after). */
  onHead: (status: number, contentType: string) => (chunk: Buffer) => void | Promise<void>;
  /** Words a failure (the exchange passes what happened and the underlying error). */
  fail: (why: ExchangeFailure, cause: unknown) => VouchError;
  /** Words an answer past `maxBytes`. */
  tooLarge: (limit: number) => VouchError;
}

const followRedirects = interceptors.redirect({ maxRedirections: 10 });

const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/**
 * One HTTP exchange with a git remote, bounded in time, silence and bytes,
 * and cancellable: `onHead` sees the status and content type first, then
 * the body goes to the sink it returned, chunk by chunk. Errors of the
 * callbacks are thrown as they are; anything else goes through `fail`.
 */
export async function exchange(x: Exchange): Promise<void> {
  const stall = new AbortController();
  let stalled: Error | null = null;
  // Only a silence shorter than the whole exchange's bound needs a timer of its own.
  let stallTimer: NodeJS.Timeout | null = null;
  const arm = (): void => {
    if (stallTimer) {
      stallTimer.refresh();
      return;
    }
    stallTimer = setTimeout(
      () => {
        stalled = new VouchError('io_error', `sent nothing for ${x.stallMs / 1000} s`, { evidence: { reason: 'stall' } });
        stall.abort(stalled);
      },
      x.stallMs < x.timeoutMs ? x.stallMs : 2 ** 31 - 1,
    );
  };
  // A streamed request body (a push's pack) may take longer to send than a silence is allowed
  // to last: until the answer starts, undici's headersTimeout watches that case instead.
  if (!(x.body && typeof (x.body as Readable).pipe === 'function')) arm();
  // The whole exchange's bound: fixed, or pushed back as the answer arrives (msPerMiB).
  const timeout = new AbortController();
  const start = performance.now();
  let deadline = start + x.timeoutMs;
  let deadlineTimer: NodeJS.Timeout;
  const onDeadline = (): void => {
    const left = deadline - performance.now();
    if (left > 1) deadlineTimer = setTimeout(onDeadline, left);
    else timeout.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
  };
  deadlineTimer = setTimeout(onDeadline, x.timeoutMs);
  const signal = AbortSignal.any([timeout.signal, stall.signal, ...(x.signal ? [x.signal] : [])]);
  const classify = (e: unknown): VouchError => {
    if (stalled) return x.fail('stall', stalled);
    if (timeout.signal.aborted) return x.fail('timeout', timeout.signal.reason);
    if (x.signal?.aborted) return x.fail('cancelled', x.signal.reason);
    const code = (e as { code?: string } | null)?.code;
    if (code && TIMEOUT_CODES.has(code)) return x.fail(code === 'UND_ERR_CONNECT_TIMEOUT' ? 'timeout' : 'stall', e);
    return x.fail(gotHead ? 'broken' : 'unreachable', e);
  };
  /**
   * `p`, or the abort's error if the signal fires first. The listener is
   * removed once `p` settles: racing every chunk against one long-lived
   * promise (`Promise.race([next, aborted])`) would keep every chunk
   * reachable from that promise's reactions until the exchange ends, i.e.
   * hold the whole answer (a 710 MB pack at 1,000,000 blocks).
   */
  const orAbort = <T>(p: Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const onAbort = (): void => reject(classify(signal.reason));
      signal.addEventListener('abort', onAbort, { once: true });
      p.then(
        (v) => {
          signal.removeEventListener('abort', onAbort);
          resolve(v);
        },
        (e: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(e);
        },
      );
    });
  let gotHead = false;
  let body: Readable | null = null;
  let rawBody: Readable | null = null;
  try {
    if (signal.aborted) throw classify(signal.reason);
    const base = x.dispatcher ?? defaultDispatcher();
    const dispatcher = x.lenient ? base.compose(followRedirects) : base;
    let res: Dispatcher.ResponseData;
    try {
      res = await orAbort(
        request(x.url, {
          method: x.method,
          headers: x.lenient ? { 'accept-encoding': 'gzip, deflate', ...x.headers } : x.headers,
          body: x.body,
          dispatcher,
          signal,
          headersTimeout: x.stallMs,
          bodyTimeout: x.stallMs,
        }),
      );
    } catch (e) {
      if (e instanceof VouchError) throw e;
      throw classify(e);
    }
    gotHead = true;
    arm();
    body = res.body;
    rawBody = res.body;
    const sink = x.onHead(res.statusCode, String(res.headers['content-type'] ?? ''));
    const encoding = x.lenient
      ? String(res.headers['content-encoding'] ?? '')
          .trim()
          .toLowerCase()
      : '';
    if (encoding === 'gzip' || encoding === 'x-gzip' || encoding === 'deflate') {
      // Inflated as it arrives: what counts against maxBytes is what it inflates to.
      const z = encoding === 'deflate' ? createInflate() : createGunzip();
      body = pipeline(res.body, z, () => {});
    }
    const iter = body[Symbol.asyncIterator]();
    let total = 0;
    try {
      for (;;) {
        const r = await orAbort(iter.next());
        arm();
        if (r.value) {
          const chunk = r.value as Buffer;
          total += chunk.byteLength;
          if (total > x.maxBytes) throw x.tooLarge(x.maxBytes);
          if (x.msPerMiB) deadline = start + x.timeoutMs + (total / 2 ** 20) * x.msPerMiB;
          const wait = sink(chunk);
          if (wait) {
            await orAbort(wait);
            arm();
          }
        }
        if (r.done) break;
      }
    } catch (e) {
      if (e instanceof VouchError) throw e;
      throw classify(e);
    }
  } finally {
    clearTimeout(deadlineTimer);
    if (stallTimer) clearTimeout(stallTimer);
    // Not read to its end (refused, failed, cancelled): let the connection go (errors of the discarded stream are moot).
    for (const b of [body, rawBody]) if (b && !b.destroyed) b.on('error', () => {}).destroy();
  }
}
