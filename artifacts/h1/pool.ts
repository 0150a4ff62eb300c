/**
 * The origin fetcher's HTTP/1.1 GET client: a keep-alive pool of `onread`
 * connections (`connection.ts`), one exchange at a time each (`exchange.ts`),
 * in the strict framing of `parser.ts`. Kept over undici (which reads an
 * HTTP/1.0 chunked answer) and node:http by the side-by-side rows of
 * docs/decisions/h1-client.md (VOUCH_BENCH_ORIGIN_COMPARE=1).
 * Owns: connections per connect target and Host (idle timeout, at most 32
 * idle per target), connecting (net or tls, ALPN http/1.1, timeouts, the
 * caller's abort), the request head, one retry on a dead reused connection.
 * Trusts: `origin-fetcher.ts` for what to connect to and for header values.
 * Must hold: a connection never serves two Host or TLS names; a body is
 * read exactly one way; every failure is a `VouchError`, a socket error or
 * the caller's abort reason.
 */
import net from 'node:net';
import { Readable } from 'node:stream';
import tls from 'node:tls';
import { VouchError } from '../../chain/errors.ts';
import { connectionClosed, Conn, SCRATCH_BYTES, type ConnOwner } from './connection.ts';
import { Exchange } from './exchange.ts';
import type { ResponseHead } from './parser.ts';

export interface H1ClientOptions {
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  /** Idle keep-alive connections are closed after this long (or the origin's shorter `Keep-Alive: timeout`). */
  keepAliveTimeoutMs: number;
  /** Extra TLS options (a test CA, for instance). */
  tls?: Pick<tls.ConnectionOptions, 'ca' | 'rejectUnauthorized'>;
}

export interface H1Request {
  secure: boolean;
  /** Address or name connected to. */
  host: string;
  port: number;
  /** TLS server name (the URL's host name; undefined for an IP literal). */
  servername: string | undefined;
  /** Host header value. */
  hostHeader: string;
  /** Request target: path and query. */
  path: string;
  /** Further request headers (lower-case names, values without CR or LF). */
  headers: Record<string, string>;
  signal: AbortSignal;
}

const MAX_IDLE_PER_TARGET = 32;

/** A response whose head has arrived; read its body exactly one way. */
export class H1Response {
  readonly statusCode: number;
  /** Lower-case names; repeated fields joined with ", ". */
  readonly headers: Record<string, string>;
  /** Declared length when the body is framed by Content-Length (0 for no body), else null. */
  readonly contentLength: number | null;
  private taken = false;

  constructor(
    private readonly exchange: Exchange,
    head: ResponseHead,
  ) {
    this.statusCode = head.statusCode;
    this.headers = head.headers;
    this.contentLength = head.contentLength;
  }

  private take(): void {
    if (this.taken) throw new TypeError('the response body was already taken');
    this.taken = true;
  }

  /** The body as a stream; destroying it before the end closes the connection. */
  stream(): Readable {
    this.take();
    const ex = this.exchange;
    const out = new Readable({
      highWaterMark: SCRATCH_BYTES,
      read: () => ex.resume(),
      destroy: (err, callback) => {
        if (ex.phase !== 'done') ex.fail(err ?? connectionClosed('body abandoned'));
        callback(err);
      },
    });
    ex.startStream({
      data: (view) => out.push(Buffer.from(view)),
      end: () => out.push(null),
      fail: (e) => out.destroy(e),
    });
    return out;
  }

  /**
   * Receives the whole body into `dest`, whose length must be the declared
   * Content-Length; `progress` gets the bytes received so far, in order.
   * Rejects (with the connection destroyed) when the body fails or is cut.
   */
  receiveInto(dest: Buffer, progress: (received: number) => void): Promise<void> {
    if (this.contentLength === null || dest.length !== this.contentLength) {
      throw new TypeError(`receiveInto needs a buffer of the declared length (${this.contentLength})`);
    }
    this.take();
    return this.exchange.startDirect(dest, progress, null);
  }

  /**
   * Receives a body of declared length window by window: `window` is filled
   * from the socket and handed to `onFull` when full or when the body ends
   * (a last, shorter view); reading waits for its promise. Resolves once the
   * last window's promise did; rejects (connection destroyed) as the body
   * fails or when `onFull` rejects.
   */
  receiveWindows(window: Buffer, onFull: (filled: Buffer) => Promise<void>): Promise<void> {
    if (this.contentLength === null) throw new TypeError('receiveWindows needs a declared Content-Length');
    if (window.length === 0) throw new TypeError('receiveWindows needs a non-empty window');
    this.take();
    return this.exchange.startDirect(window, () => {}, onFull);
  }

  /** Drops the body (a small one is read to keep the connection). */
  discard(): void {
    if (this.taken) return;
    this.taken = true;
    this.exchange.discard();
  }

  /** Closes the connection now. */
  abort(): void {
    this.taken = true;
    this.exchange.fail(connectionClosed('body abandoned'));
  }
}

export class H1Client implements ConnOwner {
  private readonly idle = new Map<string, Conn[]>();
  private readonly live = new Set<Conn>();
  private closed = false;

  constructor(private readonly options: H1ClientOptions) {}

  /** Sends a GET and resolves when the final response's head arrived. */
  async request(req: H1Request): Promise<H1Response> {
    if (this.closed) throw connectionClosed('the origin client is closed');
    let head = `GET ${req.path} HTTP/1.1\r\nhost: ${req.hostHeader}\r\n`;
    for (const [k, v] of Object.entries(req.headers)) head += `${k}: ${v}\r\n`;
    for (let attempt = 0; ; attempt++) {
      req.signal.throwIfAborted();
      const conn = attempt === 0 ? (this.takeIdle(req) ?? (await this.connect(req))) : await this.connect(req);
      let retry = false;
      try {
        return await new Promise<H1Response>((resolve, reject) => {
          const ex: Exchange = new Exchange(
            conn,
            req.signal,
            (h) => resolve(new H1Response(ex, h)),
            (e, retryable) => {
              retry = retryable;
              reject(e);
            },
          );
          conn.exchange = ex;
          conn.exchanges++;
          if (conn.dead) return ex.fail(connectionClosed('the connection closed before the request was sent'));
          ex.start(head, this.options.headersTimeoutMs);
        });
      } catch (e) {
        if (attempt === 0 && retry) continue;
        throw e;
      }
    }
  }

  private key(req: H1Request): string {
    // Per site, not only per address: a connection is never shared between two Host names.
    return `${req.secure ? 's' : 'p'}|${req.host}|${req.port}|${req.servername ?? ''}|${req.hostHeader}`;
  }

  private takeIdle(req: H1Request): Conn | null {
    const list = this.idle.get(this.key(req));
    while (list !== undefined && list.length > 0) {
      const conn = list.pop()!;
      if (conn.idleTimer !== null) clearTimeout(conn.idleTimer);
      conn.idleTimer = null;
      if (conn.dead || conn.socket.destroyed) continue;
      conn.socket.ref();
      return conn;
    }
    return null;
  }

  private connect(req: H1Request): Promise<Conn> {
    const conn = new Conn(this.key(req), this);
    const onread = conn.readOptions();
    const socket = req.secure
      ? tls.connect({
          host: req.host,
          port: req.port,
          servername: req.servername,
          ALPNProtocols: ['http/1.1'],
          onread,
          ...this.options.tls,
        } as tls.ConnectionOptions)
      : net.connect({ host: req.host, port: req.port, onread } as net.NetConnectOpts);
    conn.attach(socket);
    this.live.add(conn);
    socket.setNoDelay(true);
    const ms = this.options.connectTimeoutMs;
    return new Promise<Conn>((resolve, reject) => {
      const done = (e: Error | null) => {
        clearTimeout(timer);
        req.signal.removeEventListener('abort', onAbort);
        socket.off(req.secure ? 'secureConnect' : 'connect', onConnect);
        socket.off('error', done);
        socket.off('close', onClose);
        if (e === null) resolve(conn);
        else {
          conn.destroy();
          reject(e);
        }
      };
      const onConnect = () => done(null);
      const onClose = () => done(connectionClosed('the connection closed while connecting'));
      const onAbort = () => done(req.signal.reason instanceof Error ? req.signal.reason : new Error('aborted'));
      const timer = setTimeout(() => done(new VouchError('origin_timeout', `could not connect within ${ms} ms`)), ms);
      socket.once(req.secure ? 'secureConnect' : 'connect', onConnect);
      socket.once('error', done);
      socket.once('close', onClose);
      req.signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** A connection whose exchange completed and may carry another. */
  release(conn: Conn): void {
    const list = this.idle.get(conn.key) ?? [];
    if (this.closed || list.length >= MAX_IDLE_PER_TARGET) {
      conn.destroy();
      return;
    }
    list.push(conn);
    this.idle.set(conn.key, list);
    conn.socket.resume(); // an idle connection still reads, to notice the origin closing it
    conn.socket.unref();
    const ms = conn.idleMs > 0 ? Math.min(conn.idleMs, this.options.keepAliveTimeoutMs) : this.options.keepAliveTimeoutMs;
    conn.idleTimer = setTimeout(() => conn.destroy(), ms);
    conn.idleTimer.unref();
  }

  forget(conn: Conn): void {
    this.live.delete(conn);
    const list = this.idle.get(conn.key);
    const i = list?.indexOf(conn) ?? -1;
    if (i >= 0) list!.splice(i, 1);
  }

  /** Idle connections in the pool (for tests and metrics). */
  idleCount(): number {
    let n = 0;
    for (const list of this.idle.values()) n += list.length;
    return n;
  }

  /** Closes idle connections; requests in flight finish; new ones are refused. */
  close(): void {
    this.closed = true;
    for (const list of [...this.idle.values()]) for (const conn of [...list]) conn.destroy();
    this.idle.clear();
  }

  /** Destroys every connection, in flight or idle. */
  destroy(): void {
    this.close();
    for (const conn of [...this.live]) conn.destroy(connectionClosed('the origin client was destroyed'));
  }
}
