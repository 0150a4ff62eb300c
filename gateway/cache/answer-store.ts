/**
 * The answer store (docs/decisions/gateway-hot-path.md "The answer store"):
 * each block's plain lookup answer (`plainAnswerText`) and its endorsed URLs,
 * in one append-only file (`.git/vouch-answers`), so a lookup that misses
 * every cache reads one record instead of inflating, parsing and
 * serializing its block. `.git/vouch-answers.idx` keeps, per record, its
 * length, its sha256 and the block's record_hash.
 * Owns: both files, the offsets and digests in memory.
 * Trusts: its caller to append the verified texts of blocks in chain order.
 * Must hold: `read(i)` returns only a record whose sha256 is the one
 * computed when it was written; records are only taken back at `open` for
 * blocks whose record_hash is the served chain's; a crash's leftovers (past
 * the last whole record) are cut, never read; a file with other hard links
 * is never written.
 */
import { hash } from 'node:crypto';
import { closeSync, constants, fstatSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import type { Block } from '../../chain/block.ts';

/** Index record: u32 record length, sha256 of the record, the block's record_hash. */
const REC = 68;
/** Records read into one reused buffer up to this size (larger ones get their own). */
const SCRATCH = 64 * 1024;

const sha256 = (b: Uint8Array | string): Buffer => hash('sha256', b, 'buffer') as Buffer;

/** What a lookup of block i answers when no revocation is shown (gateway/http/server.ts). */
export function plainAnswerText(block: Block): string {
  return JSON.stringify({ success: true, ...block });
}

/** One block's record: u32 entry count, per entry u32 length + its artifact_url (UTF-8), then the answer (UTF-8). */
export function answerRecord(block: Block): Buffer {
  const urls = block.payload.intent === 'endorse' ? block.payload.endorsements.map((e) => Buffer.from(e.artifact_url, 'utf8')) : [];
  const answer = Buffer.from(plainAnswerText(block), 'utf8');
  let n = 4 + answer.length;
  for (const u of urls) n += 4 + u.length;
  const out = Buffer.allocUnsafe(n);
  out.writeUInt32BE(urls.length, 0);
  let at = 4;
  for (const u of urls) {
    out.writeUInt32BE(u.length, at);
    u.copy(out, at + 4);
    at += 4 + u.length;
  }
  answer.copy(out, at);
  return out;
}

function preadAll(fd: number, buf: Buffer, pos: number): boolean {
  let off = 0;
  while (off < buf.length) {
    const got = readSync(fd, buf, off, buf.length - off, pos + off);
    if (got <= 0) return false;
    off += got;
  }
  return true;
}

function pwriteAll(fd: number, buf: Uint8Array, pos: number): void {
  let off = 0;
  while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off, pos + off);
}

export class AnswerStore {
  private dataFd = -1;
  private idxFd = -1;
  /** Blocks 0..count-1 have records. */
  count = 0;
  /** Record i spans offsets[i]..offsets[i+1] of the data file. */
  private offsets = new Float64Array(1024);
  private digests = new Uint8Array(1024 * 32);
  private readonly scratch = Buffer.allocUnsafe(SCRATCH);

  /** `path`: the data file; the index file is `path + '.idx'`. */
  constructor(readonly path: string) {}

  get opened(): boolean {
    return this.dataFd >= 0;
  }

  /** Bytes of both files. */
  get bytes(): number {
    return this.offsets[this.count]! + this.count * REC;
  }

  private room(count: number): void {
    if (count + 1 < this.offsets.length) return;
    const cap = Math.max(count + 2, this.offsets.length * 2);
    const o = new Float64Array(cap);
    o.set(this.offsets.subarray(0, this.count + 1));
    this.offsets = o;
    const d = new Uint8Array(cap * 32);
    d.set(this.digests.subarray(0, this.count * 32));
    this.digests = d;
  }

  /**
   * Opens (or creates) the files and takes back the records of blocks
   * 0..size-1 whose record_hash is `recordHashOf(i)`, up to the first that
   * is not or is cut short; what follows is cut. Throws when the files
   * cannot be opened for writing (a read-only chain directory).
   */
  open(size: number, recordHashOf: (i: number) => Uint8Array): void {
    this.close();
    this.count = 0;
    this.offsets[0] = 0;
    const flags = constants.O_RDWR | constants.O_CREAT;
    for (const p of [this.path, `${this.path}.idx`]) {
      const fd = openSync(p, flags, 0o644);
      const linked = fstatSync(fd).nlink > 1;
      closeSync(fd);
      if (linked) unlinkSync(p); // another copy's file: start a file of our own
    }
    this.dataFd = openSync(this.path, flags, 0o644);
    this.idxFd = openSync(`${this.path}.idx`, flags, 0o644);
    const dataBytes = fstatSync(this.dataFd).size;
    const n = Math.min(size, Math.floor(fstatSync(this.idxFd).size / REC));
    const idx = Buffer.allocUnsafe(n * REC);
    this.room(size); // the served chain's size: one allocation, no outgrown copies
    if (!preadAll(this.idxFd, idx, 0)) throw new Error('answer store: short read of its index');
    let at = 0;
    let k = 0;
    for (; k < n; k++) {
      const o = k * REC;
      const len = idx.readUInt32BE(o);
      if (at + len > dataBytes || !idx.subarray(o + 36, o + REC).equals(recordHashOf(k))) break;
      this.digests.set(idx.subarray(o + 4, o + 36), k * 32);
      at += len;
      this.offsets[k + 1] = at;
    }
    this.count = k;
    this.cut();
  }

  /** Cuts both files after the records known good (a crash's leftovers, records of another chain). */
  private cut(): void {
    ftruncateSync(this.idxFd, this.count * REC);
    ftruncateSync(this.dataFd, this.offsets[this.count]!);
  }

  /** Drops every record (a record that did not read back as written). */
  reset(): void {
    this.count = 0;
    this.offsets[0] = 0;
    if (this.opened) this.cut();
  }

  /** Appends the records of blocks count.. (`blocks[0].index === count`), parsed from their verified texts. */
  append(blocks: readonly Block[]): void {
    if (blocks.length === 0) return;
    if (!this.opened) throw new Error('answer store is not open');
    if (blocks[0]!.index !== this.count) throw new TypeError(`answer store expects block ${this.count}, got ${blocks[0]!.index}`);
    const recs = blocks.map(answerRecord);
    const idx = Buffer.allocUnsafe(blocks.length * REC);
    this.room(this.count + blocks.length);
    let at = this.offsets[this.count]!;
    recs.forEach((r, k) => {
      const d = sha256(r);
      idx.writeUInt32BE(r.length, k * REC);
      d.copy(idx, k * REC + 4);
      Buffer.from(blocks[k]!.record_hash, 'hex').copy(idx, k * REC + 36);
    });
    // The data first, then the index that names it: an index record never names bytes not yet written.
    pwriteAll(this.dataFd, Buffer.concat(recs), at);
    pwriteAll(this.idxFd, idx, this.count * REC);
    recs.forEach((r, k) => {
      this.digests.set(idx.subarray(k * REC + 4, k * REC + 36), (this.count + k) * 32);
      at += r.length;
      this.offsets[this.count + k + 1] = at;
    });
    this.count += blocks.length;
  }

  /**
   * Block i's answer when its entry `entry` endorses `url`; null when it
   * does not; undefined when the record is not there or did not read back
   * as written (the caller takes the slow path, and drops the store on the latter: `corrupt`).
   */
  answerFor(i: number, entry: number, url: string): string | null | undefined {
    if (!(i >= 0 && i < this.count)) return undefined;
    const from = this.offsets[i]!;
    const len = this.offsets[i + 1]! - from;
    const buf = len <= SCRATCH ? this.scratch.subarray(0, len) : Buffer.allocUnsafe(len);
    try {
      if (!preadAll(this.dataFd, buf, from)) return this.corrupt();
    } catch {
      return this.corrupt();
    }
    const d = sha256(buf);
    const o = i * 32;
    for (let k = 0; k < 32; k++) if (d[k] !== this.digests[o + k]) return this.corrupt();
    const entries = buf.readUInt32BE(0);
    let at = 4;
    let found = false;
    for (let e = 0; e < entries; e++) {
      const n = buf.readUInt32BE(at);
      if (e === entry) found = n === Buffer.byteLength(url, 'utf8') && buf.toString('utf8', at + 4, at + 4 + n) === url;
      at += 4 + n;
    }
    return found ? buf.toString('utf8', at) : null;
  }

  /** Set when a record did not read back as written. */
  corrupted = false;

  private corrupt(): undefined {
    this.corrupted = true;
    return undefined;
  }

  close(): void {
    for (const fd of [this.dataFd, this.idxFd]) {
      if (fd < 0) continue;
      try {
        closeSync(fd);
      } catch {
        /* already closed */
      }
    }
    this.dataFd = -1;
    this.idxFd = -1;
  }
}
