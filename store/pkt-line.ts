/**
 * git's pkt-line framing (gitprotocol-common), the one encoder and reader for
 * every git conversation vouch has: 4 hex digits of length (included), then
 * the payload; "0000" flush ("0001", "0002" read as flushes); lengths above
 * 65520 refused. `pktLine('# service=git-upload-pack\n')` is
 * `'001e# service=git-upload-pack\n'`.
 * Owns: the encoding, the streaming `PktReader` and `parsePktLines`, with
 * the same bounds (isomorphic-git's reader has none).
 * Trusts: nothing it reads: bad lengths, truncation, too many lines are
 * `io_error` (reason `protocol`).
 * Must hold: the reader holds at most one unfinished pkt-line
 * (FETCH_LIMITS.pktLineBytes) besides what it was handed.
 */
import { VouchError } from '../chain/errors.ts';
import { FETCH_LIMITS } from './fetch-limits.ts';

export const FLUSH = Buffer.from('0000', 'latin1');

/** A git wire-protocol error: `io_error` with evidence `reason: 'protocol'`. */
export function protocolError(message: string, evidence: Record<string, unknown> = {}): VouchError {
  return new VouchError('io_error', message, { evidence: { reason: 'protocol', ...evidence } });
}

/** One pkt-line holding `payload` (a string is sent as UTF-8). */
export function pktLine(payload: string | Buffer): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  if (body.length + 4 > FETCH_LIMITS.pktLineBytes) throw new VouchError('bad_request', 'pkt-line too long');
  return Buffer.concat([Buffer.from((body.length + 4).toString(16).padStart(4, '0'), 'latin1'), body]);
}

/** The 4 hex digits of a pkt-line length at `pos`, or -1. */
function pktLength(buf: Buffer, pos: number): number {
  let n = 0;
  for (let i = pos; i < pos + 4; i++) {
    const c = buf[i]!;
    const v = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
    if (v < 0) return -1;
    n = n * 16 + v;
  }
  return n;
}

/**
 * Splits a pkt-line stream that arrives in chunks; `onLine` gets each line
 * (null for a flush-pkt). At most `maxLines` pkt-lines (flushes included),
 * each at most FETCH_LIMITS.pktLineBytes; past that, `tooMany` says why.
 * `who` starts each error message ("the remote", "info/refs of <url>").
 */
export class PktReader {
  /** Bytes of an unfinished pkt-line: a view of `store`, which grows by doubling (a line sent a byte a read costs linear time). */
  private rest: Buffer = Buffer.alloc(0);
  private store: Buffer = Buffer.alloc(0);
  private lines = 0;

  constructor(
    private readonly onLine: (line: Buffer | null) => void,
    private readonly maxLines: number,
    private readonly tooMany = `sent more than ${maxLines} pkt-lines`,
    private readonly who = 'the remote',
  ) {}

  push(chunk: Buffer): void {
    let buf = chunk;
    const inStore = this.rest.length > 0;
    if (inStore) {
      const len = this.rest.length;
      if (len + chunk.length > this.store.length) {
        const grown = Buffer.allocUnsafe(Math.max(len + chunk.length, Math.min(2 * this.store.length, FETCH_LIMITS.pktLineBytes)));
        this.rest.copy(grown);
        this.store = grown;
      }
      chunk.copy(this.store, len);
      buf = this.store.subarray(0, len + chunk.length);
    }
    let pos = 0;
    while (buf.length - pos >= 4) {
      const len = pktLength(buf, pos);
      if (len < 0 || len === 3) throw protocolError(`${this.who} sent a bad pkt-line (starts ${JSON.stringify(buf.toString('latin1', pos, pos + 16))})`);
      if (len > FETCH_LIMITS.pktLineBytes) throw protocolError(`${this.who} sent a pkt-line of ${len} bytes (git's limit is ${FETCH_LIMITS.pktLineBytes})`);
      if (len >= 4 && buf.length - pos < len) break;
      if (++this.lines > this.maxLines) throw protocolError(`${this.who} ${this.tooMany}`);
      if (len < 4) {
        // flush, delim, response-end
        pos += 4;
        this.onLine(null);
        continue;
      }
      this.onLine(buf.subarray(pos + 4, pos + len));
      pos += len;
    }
    buf = buf.subarray(pos);
    if (buf.length === 0) {
      this.rest = Buffer.alloc(0);
    } else if (inStore && pos === 0) {
      this.rest = buf; // still in the store, where it is
    } else {
      // A new unfinished line: into a store of its own (lines handed on may be views of the old one).
      this.store = Buffer.allocUnsafe(Math.max(buf.length, 256));
      buf.copy(this.store);
      this.rest = this.store.subarray(0, buf.length);
    }
  }

  end(): void {
    if (this.rest.length > 0) throw protocolError(`${this.who} sent a truncated pkt-line`);
  }
}

/** Every pkt-line of a whole answer (null for a flush), read with the bounds of PktReader. */
export function parsePktLines(buf: Buffer, who: string, maxLines: number = FETCH_LIMITS.resultPktLines): (Buffer | null)[] {
  const out: (Buffer | null)[] = [];
  const reader = new PktReader(
    (line) => {
      out.push(line);
    },
    maxLines,
    undefined,
    who,
  );
  reader.push(buf);
  reader.end();
  return out;
}
