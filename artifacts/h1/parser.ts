/**
 * HTTP/1.1 response framing for the origin client (RFC 9112), pure: a head's
 * text to status, fields and body framing, and a chunked decoder.
 * Owns: the grammar accepted from origins and its bounds: `HTTP/1.x` status
 * lines, field values without control characters, no obs-fold, one
 * Content-Length (repeats agree), Transfer-Encoding only `chunked` and only
 * in HTTP/1.1 (an HTTP/1.0 chunked answer is refused: a signer and another
 * client would disagree on the bytes), bounded chunk lines and trailers.
 * Trusts: nothing it parses; the caller hands whole heads and ordered bytes.
 * Must hold: every refusal is `origin_error` "malformed response ..."; body
 * data handed on is never transfer-coded; at most CHUNK_LINES_PER_SLICE
 * framing lines per `decode`, so tiny chunks cannot hold the event loop.
 */
import { VouchError } from '../../chain/errors.ts';

/** All heads of one exchange (interim ones included) together. */
const MAX_HEAD_BYTES = 64 * 1024;
/** Interim (1xx) responses skipped before the final one at most. */
const MAX_INTERIM = 16;
/** Framing lines (chunk sizes, CRLFs after data, trailers) parsed in one `decode` call. */
export const CHUNK_LINES_PER_SLICE = 4096;
const MAX_LINE_BYTES = 4 * 1024;
const MAX_TRAILER_BYTES = 16 * 1024;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** RFC 9112 4: the reason phrase is HTAB, SP, VCHAR or obs-text (no NUL or other control character). */
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: [\t\x20-\x7e\x80-\xff]*)?$/;
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** A chunk size line: hex size, then extensions without control characters (HTAB aside). */
const CHUNK_SIZE_LINE = /^([0-9A-Fa-f]{1,12})[ \t]*(?:;[\t\x20-\x7e\x80-\xff]*)?$/;
/** The end of a head. */
const CRLF2 = Buffer.from('\r\n\r\n', 'latin1');
/** Value of a hex digit by byte, -1 for any other byte. */
const HEX = new Int8Array(256).fill(-1);
for (let c = 0; c < 16; c++) {
  HEX['0123456789abcdef'.charCodeAt(c)] = c;
  HEX['0123456789ABCDEF'.charCodeAt(c)] = c;
}

/** The refusal of bytes that are not a response this client accepts. */
export function malformed(why: string): VouchError {
  return new VouchError('origin_error', `malformed response: ${why}`);
}

/** How a body is delimited: not at all, by Content-Length, by chunked coding, or by the connection's end. */
export type BodyMode = 'none' | 'length' | 'chunked' | 'close';

export interface ResponseHead {
  statusCode: number;
  /** Lower-case names; repeated fields joined with ", ". */
  headers: Record<string, string>;
  /** Declared length when the body is framed by Content-Length (0 for no body), else null. */
  contentLength: number | null;
  mode: BodyMode;
  /** The framing lets the connection carry another exchange after this one. */
  reusable: boolean;
  /** The origin's `Keep-Alive: timeout`, less half a second, in ms (0: none given). */
  idleMs: number;
}

/** A field line (header or trailer) of valid syntax: token name, colon, value of visible characters, SP, HTAB and obs-text. */
function validField(line: string): boolean {
  const colon = line.indexOf(':');
  if (colon <= 0 || !TOKEN.test(line.slice(0, colon))) return false;
  return FIELD_VALUE.test(line.slice(colon + 1));
}

/** Parses a head (without its final CRLFCRLF). Throws `malformed` for anything outside the grammar above. */
export function parseHead(text: string): ResponseHead {
  const lines = text.split('\r\n');
  const status = STATUS_LINE.exec(lines[0]!);
  if (status === null) throw malformed(`status line ${JSON.stringify(lines[0]!.slice(0, 80))}`);
  const minor = Number(status[1]);
  const statusCode = Number(status[2]);
  if (statusCode === 101) throw malformed('unexpected protocol switch (101)');
  const headers: Record<string, string> = {};
  const lengths: string[] = [];
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon) : '';
    if (!TOKEN.test(name)) throw malformed(`header field ${JSON.stringify(line.slice(0, 80))}`);
    const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, '');
    if (!FIELD_VALUE.test(value)) throw malformed(`bad characters in header ${name}`);
    const key = name.toLowerCase();
    if (key === 'content-length') lengths.push(...value.split(',').map((v) => v.trim()));
    headers[key] = key in headers ? `${headers[key]}, ${value}` : value;
  }
  const head: ResponseHead = { statusCode, headers, contentLength: null, mode: 'none', reusable: false, idleMs: 0 };
  if (statusCode < 200) return head;
  const connection = (headers['connection'] ?? '')
    .toLowerCase()
    .split(',')
    .map((t) => t.trim());
  head.reusable = minor === 1 ? !connection.includes('close') : connection.includes('keep-alive');
  const te = headers['transfer-encoding'];
  if (te !== undefined) {
    // Only `chunked`, once, in HTTP/1.1: the bytes hashed must be the body itself. An HTTP/1.0
    // answer with Transfer-Encoding, `chunked, chunked`, or another coding (`gzip, chunked`,
    // `identity`: not undone here) would hand over transfer-coded bytes, so they are refused.
    if (minor !== 1) throw malformed('Transfer-Encoding in an HTTP/1.0 response');
    if (te.trim().toLowerCase() !== 'chunked') throw malformed(`unsupported Transfer-Encoding ${JSON.stringify(te.slice(0, 80))} (only chunked)`);
    // Transfer-Encoding wins over Content-Length (RFC 9112 6.3); such a message ends the connection.
    head.mode = 'chunked';
    if (lengths.length > 0) head.reusable = false;
  } else if (lengths.length > 0) {
    if (!lengths.every((v) => /^\d{1,16}$/.test(v) && v === lengths[0]))
      throw malformed(`bad Content-Length ${JSON.stringify(headers['content-length']!.slice(0, 80))}`);
    head.contentLength = Number(lengths[0]);
    head.mode = head.contentLength === 0 ? 'none' : 'length';
  } else {
    head.mode = 'close';
    head.reusable = false;
  }
  if (statusCode === 204 || statusCode === 304) {
    head.mode = 'none';
    head.contentLength = 0;
  }
  const ka = /(?:^|,)\s*timeout=(\d{1,6})/i.exec(headers['keep-alive'] ?? '');
  if (ka !== null) head.idleMs = Math.max(0, Number(ka[1]) * 1000 - 500);
  return head;
}

/**
 * Collects one exchange's heads from its reads: interim (1xx) heads are
 * parsed and skipped, at most `MAX_INTERIM` of them, all heads together
 * within `MAX_HEAD_BYTES`.
 */
export class HeadReader {
  /** The last refusal was the size bound (not a malformed head). */
  overflowed = false;
  /** The bytes held (a view of `store`, which grows by doubling: a head sent a byte a read costs linear time). */
  private buf: Buffer = Buffer.alloc(0);
  private store: Buffer = Buffer.alloc(0);
  private interim = 0;
  private interimBytes = 0;

  private hold(view: Buffer): void {
    const len = this.buf.length;
    if (len + view.length > this.store.length) {
      const grown = Buffer.allocUnsafe(Math.max(2 * this.store.length, len + view.length, 1024));
      this.buf.copy(grown);
      this.store = grown;
    }
    view.copy(this.store, len);
    this.buf = this.store.subarray(0, len + view.length);
  }

  /**
   * Adds a read (copied: read buffers are reused). Returns the final head and
   * the bytes after it, or null while it is incomplete. Throws `malformed`,
   * or an `origin_error` for heads over the bound.
   */
  push(view: Buffer): { head: ResponseHead; rest: Buffer } | null {
    let from = Math.max(0, this.buf.length - 3);
    this.hold(view);
    for (;;) {
      const end = this.buf.indexOf(CRLF2, from);
      if (this.interimBytes + (end < 0 ? this.buf.length : end) > MAX_HEAD_BYTES) {
        this.overflowed = true;
        throw new VouchError('origin_error', `response head over ${MAX_HEAD_BYTES} bytes`);
      }
      if (end < 0) return null;
      const rest = this.buf.subarray(end + 4);
      const head = parseHead(this.buf.toString('latin1', 0, end));
      if (head.statusCode >= 200) {
        this.buf = Buffer.alloc(0);
        this.store = Buffer.alloc(0); // `rest` is a view of it
        return { head, rest };
      }
      // An interim response: the real one follows. A flood of them is refused (each is parsed and
      // its rest copied, so an unbounded number would hold the event loop for the whole fetch).
      this.interim++;
      this.interimBytes += end + 4;
      if (this.interim > MAX_INTERIM) throw malformed(`more than ${MAX_INTERIM} interim (1xx) responses`);
      this.store = Buffer.from(rest); // this reader's own copy (never of the read buffer)
      this.buf = this.store;
      from = 0;
      if (this.buf.length === 0) return null;
    }
  }
}

/** Where a `decode` call stopped: all bytes taken, the line budget spent at `at`, or the body complete at `at`. */
export type DecodeStop = { state: 'partial'; more: boolean } | { state: 'sliced' | 'complete'; at: number; more: boolean };

type ChunkPhase = 'size' | 'data' | 'data-end' | 'trailer';

/** The chunked transfer coding, decoded read after read. */
export class ChunkedDecoder {
  private phase: ChunkPhase = 'size';
  /** Data bytes left in the current chunk. */
  private remaining = 0;
  /** A framing line begun in an earlier read. */
  private line = '';
  private trailerBytes = 0;

  /**
   * Decodes `view` (the next bytes of the body), handing data to `emit` in
   * order (`emit` returns false to ask for no more reads). Throws `malformed`.
   */
  decode(view: Buffer, emit: (data: Buffer) => boolean): DecodeStop {
    let more = true;
    let i = 0;
    let lines = 0;
    while (i < view.length) {
      if (this.phase === 'data') {
        const take = Math.min(view.length - i, this.remaining);
        more = emit(view.subarray(i, i + take)) && more;
        this.remaining -= take;
        i += take;
        if (this.remaining === 0) this.phase = 'data-end';
        continue;
      }
      if (++lines > CHUNK_LINES_PER_SLICE) return { state: 'sliced', at: i, more };
      if (this.line === '') {
        // The common lines whole within this read: CRLF after data, and a bare hex size.
        if (this.phase === 'data-end' && view[i] === 13 && view[i + 1] === 10) {
          this.phase = 'size';
          i += 2;
          continue;
        }
        if (this.phase === 'size') {
          let j = i;
          let size = 0;
          for (; j < view.length && j - i < 12 && HEX[view[j]!]! >= 0; j++) size = size * 16 + HEX[view[j]!]!;
          if (j > i && view[j] === 13 && view[j + 1] === 10) {
            this.remaining = size;
            this.phase = size === 0 ? 'trailer' : 'data';
            i = j + 2;
            continue;
          }
        }
      }
      const nl = view.indexOf(10, i);
      const stop = nl < 0 ? view.length : nl + 1;
      this.line += view.toString('latin1', i, stop);
      i = stop;
      if (this.line.length > MAX_LINE_BYTES) throw malformed('chunk line too long');
      if (nl < 0) break;
      const line = this.line;
      this.line = '';
      if (!line.endsWith('\r\n')) throw malformed('chunk line not ended by CRLF');
      const text = line.slice(0, -2);
      if (this.phase === 'data-end') {
        if (text !== '') throw malformed('chunk data longer than its size');
        this.phase = 'size';
      } else if (this.phase === 'size') {
        const size = CHUNK_SIZE_LINE.exec(text);
        if (size === null) throw malformed(`bad chunk size line ${JSON.stringify(text.slice(0, 40))}`);
        this.remaining = parseInt(size[1]!, 16);
        this.phase = this.remaining === 0 ? 'trailer' : 'data';
      } else {
        this.trailerBytes += line.length;
        if (this.trailerBytes > MAX_TRAILER_BYTES) throw malformed('trailer section too large');
        if (text !== '' && !validField(text)) throw malformed(`trailer field ${JSON.stringify(text.slice(0, 40))}`);
        if (text === '') return { state: 'complete', at: i, more };
      }
    }
    return { state: 'partial', more };
  }
}
