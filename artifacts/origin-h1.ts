/**
 * HTTP/1.1 GET for the origin fetcher, on net and tls sockets that read with
 * `onread`: every read lands in a buffer this module chooses, so a body of
 * declared length goes straight from the kernel into the caller's buffer
 * (`H1Response.receiveInto`), with no allocation per read and no copy in JS.
 *
 * Why not undici or node:http for this: both allocate a fresh 64 KiB buffer
 * per socket read, and both copy every body chunk once more (undici into its
 * WASM parser, node:http out of its parser). For a 16 MiB body that measured
 * 15–25 ms of CPU and, on a small heap, a major GC every other download;
 * reading into the caller's buffer measured 2.7 ms and no GC (bench/RESULTS.md).
 * Whatever this parser accepts is hashed by the caller before any byte is
 * served, so a framing bug can fail a download but never pass wrong bytes.
 *
 * Owns: connections (a keep-alive pool per connect target with an idle
 * timeout, idle sockets unref'd; one retry of a request whose reused
 * connection closed before any response byte), the request head, response
 * parsing (status line, header fields, 1xx skipped, bodies framed by
 * Content-Length, chunked transfer coding or connection close), and the
 * connect and headers timeouts. The caller's signal destroys the connection.
 * Fairness to everyone else on the event loop: at most 16 interim (1xx)
 * responses per exchange; a chunked body's small pieces are gathered into
 * one 64 KiB buffer, handed on when it fills and once a read is parsed (never
 * per chunk); at most 4096 framing lines are parsed per turn of the event
 * loop, the rest of that read parsed after a setImmediate, reading paused
 * meanwhile. There is no byte-rate floor: a slow body is the fetcher's
 * deadline's to cut.
 *
 * Must hold: a body ends only when its framing says it is complete, else it
 * fails with an `H1Error` (or the socket's own error code); parsing is strict
 * and bounded (status line, field syntax, no obs-fold, one Content-Length
 * value, all heads of one exchange together ≤ 64 KiB, ≤ 16 interim
 * responses, chunk lines ≤ 4 KiB; no control character but HTAB
 * in the reason phrase, header and trailer fields or chunk extensions;
 * Transfer-Encoding exactly `chunked` and only in HTTP/1.1, so what is
 * handed over is never transfer-coded); a connection is reused only
 * after a complete response whose framing allows it and with no byte beyond
 * it seen, and only for the same Host (bytes past a body read exactly in
 * place surface in the next exchange, which fails to parse and is retried
 * once on a new connection); a buffer given to `receiveInto` is never written after the promise
 * settles (on failure the socket is destroyed before the rejection); body
 * bytes reach the sink in order, also across a deferred slice (the socket
 * stays paused and an end of the connection waits until the slice is parsed).
 */
import net from 'node:net';
import { Readable } from 'node:stream';
import tls from 'node:tls';

export type H1ErrorCode = 'CONNECT_TIMEOUT' | 'HEADERS_TIMEOUT' | 'HEADERS_OVERFLOW' | 'BAD_RESPONSE' | 'CLOSED';

/** A transport failure with a stable `code`; socket errors keep their own codes (ECONNREFUSED, …). */
export class H1Error extends Error {
  constructor(readonly code: H1ErrorCode, message: string) {
    super(message);
    this.name = 'H1Error';
  }
}

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

const SCRATCH_BYTES = 64 * 1024;
const MAX_HEAD_BYTES = 64 * 1024;
const MAX_LINE_BYTES = 4 * 1024;
const MAX_TRAILER_BYTES = 16 * 1024;
const MAX_IDLE_PER_TARGET = 32;
/** Interim (1xx) responses skipped before the final one at most; all heads together stay within MAX_HEAD_BYTES. */
const MAX_INTERIM = 16;
/** Small pieces of a chunked body are gathered into one buffer of this size before they are handed over. */
const GATHER_BYTES = 64 * 1024;
/** A piece at least this long is handed over as it is (after what was gathered before it). */
const GATHER_DIRECT = 16 * 1024;
/** Framing lines (chunk sizes, CRLFs after data, trailers) parsed in one turn; the rest of the read is parsed in later turns. */
const CHUNK_LINES_PER_SLICE = 4096;
/** A redirect's or an error page's body up to this size is read to keep the connection. */
const DRAIN_LIMIT = 64 * 1024;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** RFC 9112 4: the reason phrase is HTAB, SP, VCHAR or obs-text (no NUL or other control character). */
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: [\t\x20-\x7e\x80-\xff]*)?$/;
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** A chunk size line: hex size, then extensions without control characters (HTAB aside). */
const CHUNK_SIZE_LINE = /^([0-9A-Fa-f]{1,12})[ \t]*(?:;[\t\x20-\x7e\x80-\xff]*)?$/;
const CRLF2 = Buffer.from('\r\n\r\n', 'latin1');
/** Value of a hex digit by byte, -1 for any other byte. */
const HEX = new Int8Array(256).fill(-1);
for (let c = 0; c < 16; c++) {
  HEX['0123456789abcdef'.charCodeAt(c)] = c;
  HEX['0123456789ABCDEF'.charCodeAt(c)] = c;
}

/** A field line (header or trailer) of valid syntax: token name, colon, value of visible characters, SP, HTAB and obs-text. */
function validField(line: string): boolean {
  const colon = line.indexOf(':');
  if (colon <= 0 || !TOKEN.test(line.slice(0, colon))) return false;
  return FIELD_VALUE.test(line.slice(colon + 1));
}

type BodyMode = 'none' | 'length' | 'chunked' | 'close';
type ChunkPhase = 'size' | 'data' | 'data-end' | 'trailer';

/** Receives body bytes in stream mode; `view` is only valid during the call. */
interface Sink {
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

/** One socket and the exchange (if any) it is carrying. */
class Conn {
  socket!: net.Socket;
  readonly scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
  /** Where the next read lands: the scratch buffer, or the rest of a `receiveInto` buffer. */
  next: Uint8Array = this.scratch;
  exchange: Exchange | null = null;
  exchanges = 0;
  dead = false;
  idleTimer: NodeJS.Timeout | null = null;
  idleMs = 0;

  constructor(readonly key: string, private readonly client: H1Client) {}

  readOptions() {
    return {
      buffer: () => this.next,
      callback: (n: number, buf: Uint8Array): boolean => {
        if (this.exchange === null) {
          this.destroy(); // an idle connection must say nothing
          return false;
        }
        return this.exchange.read(n, buf);
      },
    };
  }

  attach(socket: net.Socket): void {
    this.socket = socket;
    socket.on('error', (e) => this.gone(e));
    socket.on('end', () => this.gone(null));
    socket.on('close', () => this.gone(null));
  }

  private gone(e: Error | null): void {
    const ex = this.exchange;
    this.dead = true;
    this.client.forget(this);
    if (ex !== null) ex.eof(e);
  }

  destroy(e?: Error): void {
    this.dead = true;
    this.next = this.scratch;
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.client.forget(this);
    this.socket.destroy(e);
  }
}

/** One request and its response on one connection. */
class Exchange {
  phase: 'head' | 'wait' | 'body' | 'done' = 'head';
  /** Any response byte seen (a failure before that on a reused connection may be retried). */
  responded = false;
  private head: Buffer = Buffer.alloc(0);
  /** Interim responses skipped, and the bytes of their heads. */
  private interim = 0;
  private interimBytes = 0;
  private headTimer: NodeJS.Timeout | null = null;
  /** Body bytes that came with the head, copied out of the scratch buffer. */
  private stash: Buffer | null = null;
  private mode: BodyMode = 'none';
  private remaining = 0;
  private reusable = false;
  private chunkPhase: ChunkPhase = 'size';
  private line = '';
  private trailerBytes = 0;
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
    private readonly client: H1Client,
    private readonly signal: AbortSignal,
    private readonly onHead: (res: H1Response) => void,
    private readonly onHeadError: (e: Error, retryable: boolean) => void,
  ) {
    this.onAbort = () => this.fail(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  start(req: H1Request, headersTimeoutMs: number): void {
    let head = `GET ${req.path} HTTP/1.1\r\nhost: ${req.hostHeader}\r\n`;
    for (const [k, v] of Object.entries(req.headers)) head += `${k}: ${v}\r\n`;
    this.headTimer = setTimeout(() => this.fail(new H1Error('HEADERS_TIMEOUT', `no response headers within ${headersTimeoutMs} ms`)), headersTimeoutMs);
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
    let from = Math.max(0, this.head.length - 3);
    this.head = this.head.length === 0 ? Buffer.from(view) : Buffer.concat([this.head, view]);
    for (;;) {
      const end = this.head.indexOf(CRLF2, from);
      if (end < 0) {
        if (this.interimBytes + this.head.length > MAX_HEAD_BYTES) this.fail(new H1Error('HEADERS_OVERFLOW', `response head over ${MAX_HEAD_BYTES} bytes`));
        return true;
      }
      if (this.interimBytes + end > MAX_HEAD_BYTES) {
        this.fail(new H1Error('HEADERS_OVERFLOW', `response head over ${MAX_HEAD_BYTES} bytes`));
        return false;
      }
      const rest = this.head.subarray(end + 4);
      let res: H1Response;
      try {
        res = this.parseHead(this.head.toString('latin1', 0, end));
      } catch (e) {
        this.fail(e as Error);
        return false;
      }
      if (res.statusCode >= 100 && res.statusCode < 200) {
        // An interim response: the real one follows. A flood of them is refused (each is parsed and
        // its rest copied, so an unbounded number would hold the event loop for the whole fetch).
        this.interim++;
        this.interimBytes += end + 4;
        if (this.interim > MAX_INTERIM) {
          this.fail(new H1Error('BAD_RESPONSE', `more than ${MAX_INTERIM} interim (1xx) responses`));
          return false;
        }
        this.head = rest; // a view of this exchange's own copy (never of the read buffer)
        from = 0;
        if (this.head.length === 0) return true;
        continue;
      }
      if (this.headTimer !== null) clearTimeout(this.headTimer);
      this.phase = 'wait';
      this.head = Buffer.alloc(0);
      if (this.mode === 'none') {
        if (rest.length > 0) this.reusable = false;
        this.complete();
        this.onHead(res);
        return true; // the connection is idle (or closed) again
      }
      if (rest.length > 0) this.stash = Buffer.from(rest);
      this.onHead(res);
      return false; // paused until the caller chooses how to read the body
    }
  }

  /** Status line and fields; sets the body framing and whether the connection may be reused. */
  private parseHead(text: string): H1Response {
    const lines = text.split('\r\n');
    const status = STATUS_LINE.exec(lines[0]!);
    if (status === null) throw new H1Error('BAD_RESPONSE', `malformed status line ${JSON.stringify(lines[0]!.slice(0, 80))}`);
    const minor = Number(status[1]);
    const statusCode = Number(status[2]);
    if (statusCode === 101) throw new H1Error('BAD_RESPONSE', 'unexpected protocol switch (101)');
    const headers: Record<string, string> = {};
    const lengths: string[] = [];
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(':');
      const name = colon > 0 ? line.slice(0, colon) : '';
      if (!TOKEN.test(name)) throw new H1Error('BAD_RESPONSE', `malformed header field ${JSON.stringify(line.slice(0, 80))}`);
      const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, '');
      if (!FIELD_VALUE.test(value)) throw new H1Error('BAD_RESPONSE', `bad characters in header ${name}`);
      const key = name.toLowerCase();
      if (key === 'content-length') lengths.push(...value.split(',').map((v) => v.trim()));
      headers[key] = key in headers ? `${headers[key]}, ${value}` : value;
    }
    if (statusCode < 200) return new H1Response(this, statusCode, headers, null);
    const connection = (headers['connection'] ?? '').toLowerCase().split(',').map((t) => t.trim());
    this.reusable = minor === 1 ? !connection.includes('close') : connection.includes('keep-alive');
    const te = headers['transfer-encoding'];
    let contentLength: number | null = null;
    if (te !== undefined) {
      // Only `chunked`, once, in HTTP/1.1: the bytes hashed must be the body itself. An HTTP/1.0
      // answer with Transfer-Encoding (RFC 9112 6.1 would read it to the close, chunk framing
      // and all), `chunked, chunked`, or another coding (`gzip, chunked`, `identity`: not
      // undone here) would hand over transfer-coded bytes, so they are refused.
      if (minor !== 1) throw new H1Error('BAD_RESPONSE', 'Transfer-Encoding in an HTTP/1.0 response');
      if (te.trim().toLowerCase() !== 'chunked') throw new H1Error('BAD_RESPONSE', `unsupported Transfer-Encoding ${JSON.stringify(te.slice(0, 80))} (only chunked)`);
      // Transfer-Encoding wins over Content-Length (RFC 9112 6.3); such a message ends the connection.
      this.mode = 'chunked';
      if (lengths.length > 0) this.reusable = false;
    } else if (lengths.length > 0) {
      if (!lengths.every((v) => /^\d{1,16}$/.test(v) && v === lengths[0])) throw new H1Error('BAD_RESPONSE', `bad Content-Length ${JSON.stringify(headers['content-length']!.slice(0, 80))}`);
      contentLength = Number(lengths[0]);
      this.mode = contentLength === 0 ? 'none' : 'length';
      this.remaining = contentLength;
    } else {
      this.mode = 'close';
      this.reusable = false;
    }
    if (statusCode === 204 || statusCode === 304) {
      this.mode = 'none';
      contentLength = 0;
    }
    const ka = /(?:^|,)\s*timeout=(\d{1,6})/i.exec(headers['keep-alive'] ?? '');
    if (ka !== null) this.conn.idleMs = Math.max(0, Number(ka[1]) * 1000 - 500);
    return new H1Response(this, statusCode, headers, contentLength);
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

  /**
   * Parses chunked framing. Data is handed to the sink gathered (small pieces
   * into one buffer, handed over when it fills and once the whole read is
   * parsed), so a body of 1-byte chunks costs no work per chunk downstream; at
   * most `CHUNK_LINES_PER_SLICE` framing lines are parsed per turn of the
   * event loop, the rest of the read waiting (socket paused) for the next.
   */
  private readChunked(view: Buffer): boolean {
    let more = true;
    let i = 0;
    let lines = 0;
    while (i < view.length && !this.finished) {
      if (this.chunkPhase === 'data') {
        const take = Math.min(view.length - i, this.remaining);
        more = this.emit(view.subarray(i, i + take)) && more;
        this.remaining -= take;
        i += take;
        if (this.remaining === 0) this.chunkPhase = 'data-end';
        continue;
      }
      if (++lines > CHUNK_LINES_PER_SLICE) {
        this.defer(view.subarray(i)); // what is gathered so far waits for the end of this read
        return false;
      }
      if (this.line === '') {
        // The common lines whole within this read: CRLF after data, and a bare hex size.
        if (this.chunkPhase === 'data-end' && view[i] === 13 && view[i + 1] === 10) {
          this.chunkPhase = 'size';
          i += 2;
          continue;
        }
        if (this.chunkPhase === 'size') {
          let j = i;
          let size = 0;
          for (; j < view.length && j - i < 12 && HEX[view[j]!]! >= 0; j++) size = size * 16 + HEX[view[j]!]!;
          if (j > i && view[j] === 13 && view[j + 1] === 10) {
            this.remaining = size;
            this.chunkPhase = size === 0 ? 'trailer' : 'data';
            i = j + 2;
            continue;
          }
        }
      }
      const nl = view.indexOf(10, i);
      const stop = nl < 0 ? view.length : nl + 1;
      this.line += view.toString('latin1', i, stop);
      i = stop;
      if (this.line.length > MAX_LINE_BYTES) return this.badChunk('chunk line too long');
      if (nl < 0) break;
      const line = this.line;
      this.line = '';
      if (!line.endsWith('\r\n')) return this.badChunk('chunk line not ended by CRLF');
      const text = line.slice(0, -2);
      if (this.chunkPhase === 'data-end') {
        if (text !== '') return this.badChunk('chunk data longer than its size');
        this.chunkPhase = 'size';
      } else if (this.chunkPhase === 'size') {
        const size = CHUNK_SIZE_LINE.exec(text);
        if (size === null) return this.badChunk(`bad chunk size line ${JSON.stringify(text.slice(0, 40))}`);
        this.remaining = parseInt(size[1]!, 16);
        this.chunkPhase = this.remaining === 0 ? 'trailer' : 'data';
      } else {
        this.trailerBytes += line.length;
        if (this.trailerBytes > MAX_TRAILER_BYTES) return this.badChunk('trailer section too large');
        if (text !== '' && !validField(text)) return this.badChunk(`malformed trailer field ${JSON.stringify(text.slice(0, 40))}`);
        if (text === '') {
          if (i < view.length) this.reusable = false;
          more = this.flushGather() && more;
          this.complete();
        }
      }
    }
    if (!this.finished) more = this.flushGather() && more;
    return more;
  }

  /** Hands body bytes to the sink: small pieces gathered, long ones as they are (after the gathered ones). */
  private emit(view: Buffer): boolean {
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

  private badChunk(why: string): boolean {
    this.fail(new H1Error('BAD_RESPONSE', why));
    return false;
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
    d.onFull!(filled).then(() => {
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
    }, (e: Error) => this.fail(e));
    return false;
  }
  /** Reads (and drops) a small rest of body to keep the connection, or closes it. */
  discard(): void {
    if (this.phase === 'done') return;
    const pending = this.mode === 'length' ? this.remaining - (this.stash?.length ?? 0) : Infinity;
    if (pending > DRAIN_LIMIT) {
      this.fail(new H1Error('CLOSED', 'body discarded'));
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
    const closed = new H1Error('CLOSED', 'the connection closed before the response was complete');
    const err = e !== null && typeof (e as { code?: unknown }).code === 'string' ? e : closed;
    this.fail(err);
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
    if (this.reusable && !this.conn.dead) this.client.release(this.conn);
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
      const stale = !this.responded || (e instanceof H1Error && e.code === 'BAD_RESPONSE');
      this.onHeadError(e, stale && this.conn.exchanges > 1 && !this.signal.aborted);
      return;
    }
    if (this.direct !== null) this.direct.reject(e);
    else this.sink?.fail(e);
  }
}

/** A response whose head has arrived; read its body exactly one way. */
export class H1Response {
  private taken = false;

  constructor(
    private readonly exchange: Exchange,
    readonly statusCode: number,
    /** Lower-case names; repeated fields joined with ", ". */
    readonly headers: Record<string, string>,
    /** Declared length when the body is framed by Content-Length (0 for no body), else null. */
    readonly contentLength: number | null,
  ) {}

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
        if (ex.phase !== 'done') ex.fail(err ?? new H1Error('CLOSED', 'body abandoned'));
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
    this.exchange.fail(new H1Error('CLOSED', 'body abandoned'));
  }
}

export class H1Client {
  private readonly idle = new Map<string, Conn[]>();
  private readonly live = new Set<Conn>();
  private closed = false;

  constructor(private readonly options: H1ClientOptions) {}

  /** Sends a GET and resolves when the final response's head arrived. */
  async request(req: H1Request): Promise<H1Response> {
    if (this.closed) throw new H1Error('CLOSED', 'the origin client is closed');
    for (let attempt = 0; ; attempt++) {
      req.signal.throwIfAborted();
      const conn = attempt === 0 ? this.takeIdle(req) ?? (await this.connect(req)) : await this.connect(req);
      let retry = false;
      try {
        return await new Promise<H1Response>((resolve, reject) => {
          const ex = new Exchange(conn, this, req.signal, resolve, (e, retryable) => {
            retry = retryable;
            reject(e);
          });
          conn.exchange = ex;
          conn.exchanges++;
          if (conn.dead) return ex.fail(new H1Error('CLOSED', 'the connection closed before the request was sent'));
          ex.start(req, this.options.headersTimeoutMs);
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
      ? tls.connect({ host: req.host, port: req.port, servername: req.servername, ALPNProtocols: ['http/1.1'], onread, ...this.options.tls } as tls.ConnectionOptions)
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
      const onClose = () => done(new H1Error('CLOSED', 'the connection closed while connecting'));
      const onAbort = () => done(req.signal.reason instanceof Error ? req.signal.reason : new Error('aborted'));
      const timer = setTimeout(() => done(new H1Error('CONNECT_TIMEOUT', `could not connect within ${ms} ms`)), ms);
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
    for (const conn of [...this.live]) conn.destroy(new H1Error('CLOSED', 'the origin client was destroyed'));
  }
}
