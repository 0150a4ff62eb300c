/**
 * The gateway bench's undici 7 origin client (issue 33 item 2): the origin
 * fetcher's transport surface (`OriginTransport`) on undici's dispatcher
 * API, to measure rows 2-4 side by side with artifacts/h1 (never shipped).
 * Owns: one undici `Pool` per connect target and Host; the handler copying
 * undici's chunks into the caller's buffer or window; the checks undici
 * leaves to its caller (at most 16 interim answers, Transfer-Encoding exactly
 * one `chunked`, no control character in the reason phrase or trailers).
 * Trusts: undici (llhttp) for framing; it never tells the HTTP version.
 * Must hold: a body ends only when complete, else a `VouchError`
 * (`origin_error`, `origin_timeout`) or the socket's own error.
 */
import { Readable } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import { VouchError } from '../../chain/errors.ts';
import type { OriginTransport } from '../../artifacts/origin-fetcher.ts';
import type { H1ClientOptions, H1Request } from '../../artifacts/h1/pool.ts';

export type TransportErrorCode = 'CONNECT_TIMEOUT' | 'HEADERS_TIMEOUT' | 'HEADERS_OVERFLOW' | 'BAD_RESPONSE' | 'CLOSED';

/** The fetcher's own errors (`origin_timeout`, `origin_error`), with undici's reason kept for the retry rule. */
export class TransportError extends VouchError {
  constructor(
    readonly reason: TransportErrorCode,
    message: string,
  ) {
    super(reason.endsWith('TIMEOUT') ? 'origin_timeout' : 'origin_error', reason === 'BAD_RESPONSE' ? `malformed response: ${message}` : message);
    this.name = 'TransportError';
  }
}

const MAX_HEAD_BYTES = 64 * 1024;
const MAX_INTERIM = 16;
const DRAIN_LIMIT = 64 * 1024;
const REASON = /^[\t\x20-\x7e\x80-\xff]*$/;
const MAX_POOLS = 64;
const GATHER_BYTES = 64 * 1024;
const GATHER_DIRECT = 16 * 1024;
const PIECES_PER_TURN = 4096;

/** undici's and llhttp's failures as the fetcher's codes; socket errors keep their own. */
function transportError(e: unknown): Error {
  const err = (e ?? {}) as Error & { code?: unknown };
  const code = typeof err.code === 'string' ? err.code : '';
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return new TransportError('CONNECT_TIMEOUT', 'could not connect in time');
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return new TransportError('HEADERS_TIMEOUT', 'no response headers in time');
  if (code === 'UND_ERR_HEADERS_OVERFLOW' || code === 'HPE_HEADER_OVERFLOW')
    return new TransportError('HEADERS_OVERFLOW', `response head over ${MAX_HEAD_BYTES} bytes`);
  if (err.name === 'HTTPParserError' || code.startsWith('HPE_') || code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH')
    return new TransportError('BAD_RESPONSE', String(err.message).split('\n')[0]!.slice(0, 200));
  if (code === 'UND_ERR_SOCKET') {
    return /bad (response|upgrade)/.test(String(err.message))
      ? new TransportError('BAD_RESPONSE', String(err.message))
      : new TransportError('CLOSED', 'the connection closed before the response was complete');
  }
  if (code === 'UND_ERR_CLOSED' || code === 'UND_ERR_DESTROYED' || code === 'UND_ERR_INFO')
    return new TransportError('CLOSED', 'the connection closed before the response was complete');
  if (e instanceof Error) return e;
  return new TransportError('CLOSED', String(e));
}

type Mode = 'wait' | 'stream' | 'direct' | 'discard' | 'done';

/** One request and its response, as undici's handler. */
class Exchange implements Dispatcher.DispatchHandler {
  controller: Dispatcher.DispatchController | null = null;
  responded = false;
  mode: Mode = 'wait';
  private interim = 0;
  private failure: Error | null = null;
  private ended = false;
  // stream mode
  private out: Readable | null = null;
  private gather: Buffer | null = null;
  private gathered = 0;
  /** Body pieces since the last turn of the event loop, and whether parsing is paused for a turn. */
  private pieces = 0;
  private sliced = false;
  // direct mode
  private dest: Buffer | null = null;
  private got = 0;
  private total = 0;
  private busy = false;
  private extra: Buffer[] = [];
  private onFull: ((filled: Buffer) => Promise<void>) | null = null;
  private progress: (n: number) => void = () => {};
  private settle: { resolve: () => void; reject: (e: Error) => void } | null = null;
  private readonly onAbort: () => void;

  constructor(
    private readonly signal: AbortSignal,
    private readonly onHead: (res: UndiciResponse) => void,
    private readonly onHeadError: (e: Error, retryable: boolean) => void,
  ) {
    this.onAbort = () => this.abort(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  abort(e: Error): void {
    if (this.controller !== null && !this.controller.aborted) this.controller.abort(e);
    else this.fail(e);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.signal.aborted) controller.abort(this.signal.reason);
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
    statusMessage?: string,
  ): void {
    this.responded = true;
    if (statusCode === 101) return controller.abort(new TransportError('BAD_RESPONSE', 'unexpected protocol switch (101)'));
    if (statusMessage !== undefined && !REASON.test(statusMessage))
      return controller.abort(new TransportError('BAD_RESPONSE', 'control character in the reason phrase'));
    if (statusCode < 200) {
      if (++this.interim > MAX_INTERIM) controller.abort(new TransportError('BAD_RESPONSE', `more than ${MAX_INTERIM} interim (1xx) responses`));
      return;
    }
    const joined: Record<string, string> = {};
    for (const [k, v] of Object.entries(headers)) {
      if (v !== undefined) joined[k] = Array.isArray(v) ? v.join(', ') : v;
    }
    const te = headers['transfer-encoding'];
    let contentLength: number | null = null;
    if (te !== undefined) {
      // Only `chunked`, once: what is handed over must never be transfer-coded.
      if (Array.isArray(te) || te.trim().toLowerCase() !== 'chunked') {
        return controller.abort(new TransportError('BAD_RESPONSE', `unsupported Transfer-Encoding ${JSON.stringify(String(te).slice(0, 80))} (only chunked)`));
      }
    } else if (typeof headers['content-length'] === 'string') {
      contentLength = Number(headers['content-length']);
    }
    if (statusCode === 204 || statusCode === 304) contentLength = 0;
    controller.pause(); // until the caller chooses how to read the body
    this.onHead(new UndiciResponse(this, statusCode, joined, contentLength));
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (++this.pieces === PIECES_PER_TURN) {
      // Many tiny chunks in one read: the rest of it is parsed in a later turn of the event loop.
      this.sliced = true;
      controller.pause();
      setImmediate(() => {
        this.pieces = 0;
        this.sliced = false;
        if (this.mode === 'direct' ? !this.busy : this.mode === 'stream' ? this.out!.readableLength < this.out!.readableHighWaterMark : this.mode === 'discard')
          controller.resume();
      });
    }
    if (this.mode === 'stream') {
      if (chunk.length >= GATHER_DIRECT) {
        this.flush();
        if (!this.out!.push(chunk)) controller.pause();
        return;
      }
      // Small pieces (tiny chunks) are gathered and handed on once undici has parsed the read.
      if (this.gathered + chunk.length > GATHER_BYTES) this.flush();
      if (this.gathered === 0) queueMicrotask(() => this.flush());
      this.gather ??= Buffer.allocUnsafe(GATHER_BYTES);
      chunk.copy(this.gather, this.gathered);
      this.gathered += chunk.length;
    } else if (this.mode === 'direct') {
      this.take(chunk);
    } // 'discard': dropped
  }

  onResponseEnd(_controller: Dispatcher.DispatchController, trailers: Record<string, string | string[] | undefined>): void {
    for (const v of Object.values(trailers)) {
      const values = Array.isArray(v) ? v : [v ?? ''];
      if (!values.every((x) => REASON.test(x))) return this.fail(new TransportError('BAD_RESPONSE', 'bad characters in a trailer field'));
    }
    this.ended = true;
    this.finish();
  }

  onResponseError(_controller: Dispatcher.DispatchController, e: Error): void {
    this.fail(e === this.signal.reason || e instanceof TransportError ? e : transportError(e));
  }

  private flush(): void {
    if (this.gathered === 0 || this.mode !== 'stream') return;
    const piece = Buffer.from(this.gather!.subarray(0, this.gathered));
    this.gathered = 0;
    if (!this.out!.push(piece)) this.controller?.pause();
  }

  private done(): void {
    this.signal.removeEventListener('abort', this.onAbort);
  }

  private fail(e: Error): void {
    if (this.mode === 'done') return;
    this.failure = e;
    const mode = this.mode;
    this.mode = 'done';
    this.done();
    if (!this.headed) {
      const retryable = !this.responded && !this.signal.aborted && e instanceof TransportError && e.reason === 'CLOSED';
      this.onHeadError(e, retryable);
      return;
    }
    if (mode === 'stream') this.out!.destroy(e);
    else if (this.settle !== null) this.settle.reject(e);
  }

  headed = false;

  /** The body as a stream of undici's chunks. */
  startStream(): Readable {
    const out = new Readable({
      highWaterMark: 64 * 1024,
      read: () => {
        if (!this.sliced) this.controller?.resume();
      },
      destroy: (err, callback) => {
        if (this.mode !== 'done') this.abort(err ?? new TransportError('CLOSED', 'body abandoned'));
        callback(err);
      },
    });
    this.out = out;
    if (this.failure !== null) {
      out.destroy(this.failure);
      return out;
    }
    if (this.mode === 'done') {
      out.push(null);
      return out;
    }
    this.mode = 'stream';
    this.controller?.resume();
    return out;
  }

  private finish(): void {
    if (this.mode === 'done') return;
    const mode = this.mode;
    if (mode === 'direct') {
      if (this.busy) return; // the last window is handed out when its predecessor settles
      if (this.onFull !== null && (this.got > 0 || this.extra.length > 0)) return this.handOut();
    }
    if (mode === 'stream') this.flush();
    this.mode = 'done';
    this.done();
    if (mode === 'stream') this.out!.push(null);
    else if (mode === 'direct') this.settle!.resolve();
  }

  startDirect(dest: Buffer, progress: (n: number) => void, onFull: ((filled: Buffer) => Promise<void>) | null): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.failure !== null) return reject(this.failure);
      this.settle = { resolve, reject };
      this.dest = dest;
      this.progress = progress;
      this.onFull = onFull;
      if (this.mode === 'done') return this.onFull !== null ? undefined : resolve();
      this.mode = 'direct';
      this.controller?.resume();
    });
  }

  /** Copies a chunk into the buffer or window; what does not fit waits (in order) for the next window. */
  private take(chunk: Buffer): void {
    const dest = this.dest!;
    this.total += chunk.length;
    const room = this.busy || this.extra.length > 0 ? 0 : dest.length - this.got;
    const now = Math.min(room, chunk.length);
    if (now > 0) {
      chunk.copy(dest, this.got, 0, now);
      this.got += now;
    }
    if (now < chunk.length) {
      if (this.onFull === null) return this.abort(new TransportError('BAD_RESPONSE', 'more body bytes than declared'));
      this.extra.push(chunk.subarray(now));
    }
    this.progress(this.total);
    if (this.onFull !== null && !this.busy && this.got === dest.length) this.handOut();
  }

  /** Hands the window to `onFull`; undici stays paused until its promise settles. */
  private handOut(): void {
    this.busy = true;
    this.controller?.pause();
    this.onFull!(this.dest!.subarray(0, this.got)).then(
      () => {
        if (this.mode === 'done') return;
        this.busy = false;
        this.got = 0;
        while (this.extra.length > 0 && this.got < this.dest!.length) {
          const b = this.extra.shift()!;
          const n = Math.min(b.length, this.dest!.length - this.got);
          b.copy(this.dest!, this.got, 0, n);
          this.got += n;
          if (n < b.length) this.extra.unshift(b.subarray(n));
        }
        if (this.got === this.dest!.length && (this.extra.length > 0 || !this.ended)) return this.handOut();
        if (this.ended) return this.finish();
        if (!this.sliced) this.controller?.resume();
      },
      (e: Error) => this.abort(e),
    );
  }

  discard(pending: number | null): void {
    if (this.mode !== 'wait') return;
    if (pending === null || pending > DRAIN_LIMIT) {
      this.abort(new TransportError('CLOSED', 'body discarded'));
      return;
    }
    this.mode = 'discard';
    this.controller?.resume();
  }
}

/** A response whose head has arrived; read its body exactly one way. */
export class UndiciResponse {
  private taken = false;

  constructor(
    private readonly exchange: Exchange,
    readonly statusCode: number,
    readonly headers: Record<string, string>,
    readonly contentLength: number | null,
  ) {
    exchange.headed = true;
  }

  private take(): void {
    if (this.taken) throw new TypeError('the response body was already taken');
    this.taken = true;
  }

  stream(): Readable {
    this.take();
    return this.exchange.startStream();
  }

  receiveInto(dest: Buffer, progress: (received: number) => void): Promise<void> {
    if (this.contentLength === null || dest.length !== this.contentLength) {
      throw new TypeError(`receiveInto needs a buffer of the declared length (${this.contentLength})`);
    }
    this.take();
    return this.exchange.startDirect(dest, progress, null);
  }

  receiveWindows(window: Buffer, onFull: (filled: Buffer) => Promise<void>): Promise<void> {
    if (this.contentLength === null) throw new TypeError('receiveWindows needs a declared Content-Length');
    if (window.length === 0) throw new TypeError('receiveWindows needs a non-empty window');
    this.take();
    return this.exchange.startDirect(window, () => {}, onFull);
  }

  discard(): void {
    if (this.taken) return;
    this.taken = true;
    this.exchange.discard(this.contentLength);
  }

  abort(): void {
    this.taken = true;
    this.exchange.abort(new TransportError('CLOSED', 'body abandoned'));
  }
}

export class UndiciOriginClient implements OriginTransport {
  private readonly pools = new Map<string, Pool>();
  private closed = false;

  constructor(private readonly options: H1ClientOptions) {}

  private pool(req: H1Request): Pool {
    // Per site, not only per address: a connection is never shared between two Host names.
    const key = `${req.secure ? 's' : 'p'}|${req.host}|${req.port}|${req.servername ?? ''}|${req.hostHeader}`;
    let pool = this.pools.get(key);
    if (pool === undefined) {
      if (this.pools.size >= MAX_POOLS) this.prune();
      const host = req.host.includes(':') ? `[${req.host}]` : req.host;
      pool = new Pool(`${req.secure ? 'https' : 'http'}://${host}:${req.port}`, {
        connections: 32,
        pipelining: 1,
        headersTimeout: this.options.headersTimeoutMs,
        bodyTimeout: 0, // the fetcher's deadline covers the body
        keepAliveTimeout: this.options.keepAliveTimeoutMs,
        keepAliveMaxTimeout: this.options.keepAliveTimeoutMs,
        maxHeaderSize: MAX_HEAD_BYTES,
        connect: {
          timeout: this.options.connectTimeoutMs,
          ...(req.servername !== undefined ? { servername: req.servername } : {}),
          ...(this.options.tls ?? {}),
        },
      });
      this.pools.set(key, pool);
    }
    return pool;
  }

  private prune(): void {
    for (const [key, pool] of this.pools) {
      const s = pool.stats;
      if (s.connected === 0 && s.pending === 0 && s.running === 0) {
        this.pools.delete(key);
        void pool.close().catch(() => {});
      }
    }
  }

  async request(req: H1Request): Promise<UndiciResponse> {
    if (this.closed) throw new TransportError('CLOSED', 'the origin client is closed');
    for (let attempt = 0; ; attempt++) {
      req.signal.throwIfAborted();
      const pool = this.pool(req);
      let retry = false;
      try {
        return await new Promise<UndiciResponse>((resolve, reject) => {
          const ex = new Exchange(req.signal, resolve, (e, retryable) => {
            retry = retryable;
            reject(e);
          });
          pool.dispatch(
            {
              origin: undefined,
              path: req.path,
              method: 'GET',
              headers: { host: req.hostHeader, ...req.headers },
              ...(req.servername !== undefined ? { servername: req.servername } : {}),
            } as Dispatcher.DispatchOptions,
            ex,
          );
        });
      } catch (e) {
        if (attempt === 0 && retry) continue;
        throw e;
      }
    }
  }

  idleCount(): number {
    let n = 0;
    for (const pool of this.pools.values()) n += pool.stats.free;
    return n;
  }

  close(): void {
    this.closed = true;
    for (const pool of this.pools.values()) void pool.close().catch(() => {});
  }

  destroy(): void {
    this.closed = true;
    for (const pool of this.pools.values()) void pool.destroy(new TransportError('CLOSED', 'the origin client was destroyed')).catch(() => {});
    this.pools.clear();
  }
}
