/**
 * One request and its response on one connection (`connection.ts`): head
 * written, response head and body read as reads arrive.
 * Owns: the exchange's lifecycle, the headers timeout, the caller's abort,
 * body delivery (stream, whole buffer or window by window), and fairness:
 * at most 16 interim responses, small chunks gathered into one buffer, at
 * most 4096 framing lines per turn (the rest after a setImmediate, reading
 * paused). A slow body is the fetcher's deadline's to cut.
 * Trusts: `parser.ts`; the pool to take a connection back only on `release`.
 * Must hold: a body ends only when its framing says it is complete; a
 * connection is released only after a complete reusable response with no
 * extra byte; a direct-receive buffer is never written after its promise
 * settles; body bytes reach the sink in order.
 */
import { VouchError } from '../../chain/errors.ts';
import { connectionClosed, type Conn, type ConnReader } from './connection.ts';
import { ChunkedDecoder, HeadReader, type BodyMode, type ResponseHead } from './parser.ts';

/** Small pieces of a chunked body are gathered into one buffer of this size before they are handed over. */
const GATHER_BYTES = 64 * 1024;
/** A piece at least this long is handed over as it is (after what was gathered before it). */
const GATHER_DIRECT = 16 * 1024;
/** A redirect's or an error page's body up to this size is read to keep the connection. */
const DRAIN_LIMIT = 64 * 1024;
/** Thrown out of a chunked decode when the exchange ended meanwhile. */
const HALT = Symbol('halt');

/** Receives body bytes in stream mode; `view` is only valid during the call. */
export interface Sink {
  data(view: Buffer): boolean;
  end(): void;
  fail(e: Error): void;
}

/** A body being received into the caller's buffer: the whole of it, or window after window. */
interface Direct {
  /** The buffer (or the current window) bytes land in. */
  dest: Buffer;
  /** Bytes in `dest`. */
  got: number;
  /** Body bytes received so far. */
  total: number;
  /** The window is with `onFull`: nothing may land in it. */
  busy: boolean;
  /** Bytes that arrived while the window was full or busy, next in order. */
  extra: Buffer | null;
  onFull: ((filled: Buffer) => Promise<void>) | null;
  progress: (received: number) => void;
  resolve: () => void;
  reject: (e: Error) => void;
}
/** One request and its response on one connection. */
export class Exchange implements ConnReader {
  phase: 'head' | 'wait' | 'body' | 'done' = 'head';
  /** Any response byte seen (a failure before that on a reused connection may be retried). */
  responded = false;
  private readonly heads = new HeadReader();
  private headTimer: NodeJS.Timeout | null = null;
  /** The head did not parse (on a reused connection: maybe bytes an origin sent past its last response). */
  private malformedHead = false;
  /** Body bytes that came with the head, copied out of the scratch buffer. */
  private stash: Buffer | null = null;
  private mode: BodyMode = 'none';
  private remaining = 0;
  private reusable = false;
  private readonly chunked = new ChunkedDecoder();
  /** Small body pieces gathered for the sink (`GATHER_BYTES`), and how many bytes of it are used. */
  private gather: Buffer | null = null;
  private gathered = 0;
  /** The rest of a read left for a later turn of the event loop (many tiny chunks), and an end of the connection seen meanwhile. */
  private deferred: Buffer | null = null;
  private deferredEof: { e: Error | null } | null = null;
  private sink: Sink | null = null;
  private direct: Direct | null = null;
  private failure: Error | null = null;
  private readonly onAbort: () => void;

  constructor(
    readonly conn: Conn,
    private readonly signal: AbortSignal,
    private readonly onHead: (head: ResponseHead) => void,
    private readonly onHeadError: (e: Error, retryable: boolean) => void,
  ) {
    this.onAbort = () => this.fail(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  /** Writes the request head (`head` without its final CRLF) and starts the headers timeout. */
  start(head: string, headersTimeoutMs: number): void {
    this.headTimer = setTimeout(() => this.fail(new VouchError('origin_timeout', `no response headers within ${headersTimeoutMs} ms`)), headersTimeoutMs);
    this.conn.socket.write(`${head}\r\n`, 'latin1');
  }

  get finished(): boolean {
    return this.phase === 'done';
  }

  /** The onread callback while this exchange owns the connection; false pauses the socket. */
  read(n: number, buf: Uint8Array): boolean {
    if (this.phase === 'done') return false;
    this.responded = true;
    const d = this.direct;
    if (d !== null) {
      if (!d.busy && buf.buffer === d.dest.buffer && buf.byteOffset === d.dest.byteOffset + d.got) {
        // Read straight into place (a window's free part may be longer than the body's rest).
        const body = Math.min(n, this.remaining);
        if (n > body) this.reusable = false;
        d.got += body;
        d.total += body;
        this.remaining -= body;
      } else {
        this.directTake(Buffer.from(buf.buffer, buf.byteOffset, n));
      }
      return this.directStep();
    }
    const view = Buffer.from(buf.buffer, buf.byteOffset, n);
    if (this.deferred !== null) {
      // Bytes a TLS layer had already decrypted when reading paused: after the rest still to parse.
      this.deferred = Buffer.concat([this.deferred, view]);
      return false;
    }
    if (this.phase === 'wait') {
      // Bytes a TLS layer had already decrypted when reading paused: kept for the body.
      this.stash = this.stash === null ? Buffer.from(view) : Buffer.concat([this.stash, view]);
      return false;
    }
    const more = this.phase === 'head' ? this.readHead(view) : this.readBody(view);
    return more || this.finished; // a finished exchange leaves its connection reading
  }

  private readHead(view: Buffer): boolean {
    let found;
    try {
      found = this.heads.push(view);
    } catch (e) {
      this.malformedHead = !this.heads.overflowed;
      this.fail(e as Error);
      return false;
    }
    if (found === null) return true;
    const { head, rest } = found;
    if (this.headTimer !== null) clearTimeout(this.headTimer);
    this.phase = 'wait';
    this.mode = head.mode;
    this.reusable = head.reusable;
    this.remaining = head.mode === 'length' ? head.contentLength! : 0;
    if (head.idleMs > 0) this.conn.idleMs = head.idleMs;
    if (this.mode === 'none') {
      if (rest.length > 0) this.reusable = false;
      this.complete();
      this.onHead(head);
      return true; // the connection is idle (or closed) again
    }
    if (rest.length > 0) this.stash = Buffer.from(rest);
    this.onHead(head);
    return false; // paused until the caller chooses how to read the body
  }

  private readBody(view: Buffer): boolean {
    switch (this.mode) {
      case 'length': {
        const take = Math.min(view.length, this.remaining);
        if (view.length > take) this.reusable = false;
        this.remaining -= take;
        const more = this.sink!.data(view.subarray(0, take));
        if (this.remaining === 0) this.complete();
        return more;
      }
      case 'close':
        return this.sink!.data(view);
      case 'chunked':
        return this.readChunked(view);
      default:
        this.reusable = false;
        return true;
    }
  }

  /** Decodes chunked framing; the rest of a read past the slice's line budget waits for the next turn. */
  private readChunked(view: Buffer): boolean {
    let stop;
    try {
      stop = this.chunked.decode(view, (data) => this.emit(data));
    } catch (e) {
      if (e !== HALT) this.fail(e as Error);
      return false;
    }
    if (stop.state === 'sliced') {
      this.defer(view.subarray(stop.at)); // what is gathered so far waits for the end of this read
      return false;
    }
    const more = this.flushGather() && stop.more;
    if (stop.state === 'complete') {
      if (stop.at < view.length) this.reusable = false;
      this.complete();
    }
    return more;
  }

  /** Hands body bytes to the sink: small pieces gathered, long ones as they are (after the gathered ones). */
  private emit(view: Buffer): boolean {
    if (this.finished) throw HALT; // the sink failed the exchange: the rest of the read is dropped
    if (view.length >= GATHER_DIRECT) {
      const more = this.flushGather();
      return this.sink!.data(view) && more;
    }
    let more = true;
    if (this.gathered + view.length > GATHER_BYTES) more = this.flushGather();
    this.gather ??= Buffer.allocUnsafe(GATHER_BYTES);
    view.copy(this.gather, this.gathered);
    this.gathered += view.length;
    return more;
  }

  private flushGather(): boolean {
    if (this.gathered === 0) return true;
    const n = this.gathered;
    this.gathered = 0;
    return this.sink!.data(this.gather!.subarray(0, n)); // the sink copies: the buffer is reused
  }

  /** Parses `rest` (copied: the read buffer is reused) in the next turn of the event loop; reading stays paused until then. */
  private defer(rest: Buffer): void {
    this.deferred = Buffer.from(rest);
    setImmediate(() => {
      const bytes = this.deferred;
      this.deferred = null;
      if (bytes === null || this.finished) return;
      const more = this.readChunked(bytes);
      if (this.deferred !== null || this.finished) return;
      const end = this.deferredEof;
      this.deferredEof = null;
      if (end !== null) this.eof(end.e);
      else if (more) this.resume();
    });
  }

  /** The caller reads the body as a stream of (copied) chunks. */
  startStream(sink: Sink): void {
    if (this.phase === 'done') {
      if (this.failure !== null) sink.fail(this.failure);
      else sink.end();
      return;
    }
    this.sink = sink;
    this.phase = 'body';
    const stash = this.stash;
    this.stash = null;
    if (stash !== null && this.readBody(stash) === false) return;
    this.resume();
  }

  /**
   * The caller takes the body into `dest`: the whole body (exactly the
   * declared length, `onFull` null), or window after window of it, each
   * handed to `onFull` when full or when the body ends (reading pauses until
   * its promise settles, then the window is filled again from its start).
   */
  startDirect(dest: Buffer, progress: (received: number) => void, onFull: ((filled: Buffer) => Promise<void>) | null): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.failure !== null) return reject(this.failure);
      const d: Direct = { dest, got: 0, total: 0, busy: false, extra: null, onFull, progress, resolve, reject };
      this.direct = d;
      this.phase = 'body';
      const stash = this.stash;
      this.stash = null;
      if (stash !== null) this.directTake(stash);
      if (this.directStep()) this.resume();
    });
  }

  /** Copies body bytes that did not land in place: into the window's free part, the rest kept (in order) for the next window. */
  private directTake(bytes: Buffer): void {
    const d = this.direct!;
    const body = Math.min(bytes.length, this.remaining);
    if (bytes.length > body) this.reusable = false;
    this.remaining -= body;
    d.total += body;
    const room = d.busy || d.extra !== null ? 0 : d.dest.length - d.got;
    const now = Math.min(body, room);
    bytes.copy(d.dest, d.got, 0, now);
    d.got += now;
    if (body > now) {
      const rest = bytes.subarray(now, body);
      d.extra = d.extra === null ? Buffer.from(rest) : Buffer.concat([d.extra, rest]);
    }
  }

  /** After bytes arrived: progress, the window handed out when full, the end. Returns whether to keep reading. */
  private directStep(): boolean {
    const d = this.direct!;
    if (d.busy) return false;
    d.progress(d.total);
    const full = d.got === d.dest.length;
    if (this.remaining === 0) {
      this.conn.next = this.conn.scratch;
      if (d.onFull === null || (d.got === 0 && d.extra === null)) {
        this.complete();
        return true;
      }
    } else if (!full || d.onFull === null) {
      this.conn.next = d.dest.subarray(d.got);
      return true;
    }
    // Hand the window out; nothing lands in it until its promise settles.
    d.busy = true;
    this.conn.next = this.conn.scratch;
    const filled = d.dest.subarray(0, d.got);
    d.onFull!(filled).then(
      () => {
        if (this.phase === 'done') return;
        d.busy = false;
        d.got = 0;
        const extra = d.extra;
        if (extra !== null) {
          d.got = Math.min(extra.length, d.dest.length);
          extra.copy(d.dest, 0, 0, d.got);
          d.extra = d.got < extra.length ? extra.subarray(d.got) : null;
        }
        if (this.directStep()) this.resume();
      },
      (e: Error) => this.fail(e),
    );
    return false;
  }

  /** Reads (and drops) a small rest of body to keep the connection, or closes it. */
  discard(): void {
    if (this.phase === 'done') return;
    const pending = this.mode === 'length' ? this.remaining - (this.stash?.length ?? 0) : Infinity;
    if (pending > DRAIN_LIMIT) {
      this.fail(connectionClosed('body discarded'));
      return;
    }
    this.startStream({ data: () => true, end: () => {}, fail: () => {} });
  }

  /** Restarts reading after the onread callback returned false (net.Socket#resume does that for onread sockets). */
  resume(): void {
    if (this.phase !== 'done' && this.deferred === null) this.conn.socket.resume();
  }

  /** The socket ended, closed or failed. */
  eof(e: Error | null): void {
    if (this.phase === 'done') return;
    if (this.deferred !== null) {
      this.deferredEof = { e }; // the bytes before it are parsed first
      return;
    }
    if (e === null && this.phase === 'body' && this.mode === 'close') {
      this.reusable = false;
      this.complete();
      return;
    }
    this.fail(e !== null && typeof (e as { code?: unknown }).code === 'string' ? e : connectionClosed());
  }

  private settle(): void {
    this.phase = 'done';
    if (this.headTimer !== null) clearTimeout(this.headTimer);
    this.signal.removeEventListener('abort', this.onAbort);
    this.conn.exchange = null;
  }

  private complete(): void {
    if (this.phase === 'done') return;
    const wasWaiting = this.phase === 'wait' || this.phase === 'head';
    this.settle();
    this.conn.next = this.conn.scratch;
    if (this.reusable && !this.conn.dead) this.conn.owner.release(this.conn);
    else this.conn.destroy();
    if (wasWaiting) return; // an empty body: nothing is reading yet
    const d = this.direct;
    if (d !== null) d.resolve();
    else this.sink?.end();
  }

  fail(e: Error): void {
    if (this.phase === 'done') return;
    const before = this.phase === 'head';
    this.settle();
    this.failure = e;
    this.conn.destroy(); // before anyone hears of it: nothing more lands in a caller's buffer
    if (before) {
      // A reused connection that closed unanswered, or whose answer does not parse (bytes an origin
      // sent past its last response arrive only now): the request is tried once more on a new one.
      const stale = !this.responded || this.malformedHead;
      this.onHeadError(e, stale && this.conn.exchanges > 1 && !this.signal.aborted);
      return;
    }
    if (this.direct !== null) this.direct.reject(e);
    else this.sink?.fail(e);
  }
}
