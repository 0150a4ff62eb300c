/**
 * The answer store (docs/decisions/gateway-hot-path.md "The answer store",
 * "Compressed"): each block's plain lookup answer, LZ4-compressed (lz4-napi)
 * against DICTIONARY plus the block's hashes and URLs, and its URLs as they
 * are, in `.git/vouch-answers.lz4` after a header naming format and
 * dictionary; `.idx` beside it: per record its length, sha256, record_hash.
 * Records are decoded here (`lz4Into`), into a buffer kept for the next.
 * Owns: both files, the offsets and digests in memory.
 * Trusts: its caller to append the verified texts of blocks in chain order.
 * Must hold: a record is decoded only when its sha256 is the one computed
 * when written, with the dictionary it was written with, to the bounded
 * length it names; records are taken back at `open` only for blocks whose
 * record_hash is the served chain's, from a file with this header; a crash's
 * leftovers are cut, never read; a file with other hard links is never written.
 */
import { hash } from 'node:crypto';
import { closeSync, constants, fstatSync, ftruncateSync, openSync, rmSync, unlinkSync } from 'node:fs';
import { compressSync } from 'lz4-napi';
import type { Block } from '../../chain/block.ts';
import { preadAll, pwriteAll } from '../../platform/durable-file.ts';

/** Index record: u32 record length, sha256 of the record, the block's record_hash. */
export const IDX_RECORD = 68;
const REC = IDX_RECORD;
/** Records read into one reused buffer up to this size (larger ones get their own). */
const SCRATCH = 64 * 1024;
/** An answer longer than this is never decoded (a block's text is far shorter). */
const MAX_ANSWER = 16 * 1024 * 1024;

const sha256 = (b: Uint8Array | string): Buffer => hash('sha256', b, 'buffer') as Buffer;

/**
 * The fixed part of every record's dictionary: an endorse block's answer of
 * the common shape with placeholder values (its keys, their order, the
 * constant strings). Changing it changes DICTIONARY_ID: a store written with
 * another one is dropped and rebuilt at `open`, never decoded with this one.
 */
export const DICTIONARY = Buffer.from(
  JSON.stringify({
    success: true,
    comment: 'acme/pkg 1.0.0',
    index: 0,
    prev_hash: '',
    posted: '2026-01-01T00:00:00Z',
    signer: 'vouch',
    payload: {
      effective_date: '2026-01-01',
      endorsements: [
        {
          artifact_hash: 'sha256:',
          artifact_url: 'https://',
          comment: '',
          endorsement: 'provenance',
          license: 'MIT',
          name: 'acme/pkg',
          semver: '1.0.0',
          signature_algorithm: 'ed25519',
        },
      ],
      grammar: { hash: '7920c0fd6aaf9642da4ab5f0a3557860afe8a1df7cb3c97e867844f7b9da5a0a', version: '1.0' },
      intent: 'endorse',
      semver: '1.0.0',
      tags: {},
      target_hash: 'self',
      uns: 'acme/pkg',
      vibecode: { endorsement: 'provenance', intent: 'endorse', license: 'MIT', signer: 'vouch', uns: 'acme/pkg', semver: '1.0.0' },
    },
    signature: '',
    record_hash: '',
  }),
  'utf8',
);
export const DICTIONARY_ID = sha256(DICTIONARY);
/** The data file's header: magic, format 2 (LZ4 records), the dictionary's sha256. */
export const HEADER = Buffer.concat([Buffer.from('vouchans', 'latin1'), Buffer.from([0, 0, 0, 2]), DICTIONARY_ID]);
const ZERO_HASH = new Uint8Array(32);
const HEX = Buffer.from('0123456789abcdef', 'latin1');

/** Writes 32 bytes as lowercase hex into `into` at `at`; returns the new end. */
function hexInto(into: Buffer, at: number, h: Uint8Array): number {
  for (let k = 0; k < 32; k++) {
    into[at++] = HEX[h[k]! >> 4]!;
    into[at++] = HEX[h[k]! & 15]!;
  }
  return at;
}

/**
 * Record i's dictionary in `into` (DICTIONARY already at its start), then
 * block i-1's and i's record_hash as hex (the answer's prev_hash and
 * record_hash) and the URLs of the record `rec` (its first `urlEnd`
 * bytes); returns its length. Writer and reader build it alike.
 */
function dictionaryOf(into: Buffer, prev: Uint8Array, own: Uint8Array, rec: Buffer, urlEnd: number): number {
  let at = hexInto(into, hexInto(into, DICTIONARY.length, prev), own);
  for (let e = 0, u = 4, n = rec.readUInt32BE(0); e < n; e++) {
    const len = rec.readUInt32BE(u);
    // Byte by byte: a URL is short, and Buffer#copy makes a view of its source each call.
    for (let k = u + 4, stop = Math.min(u + 4 + len, urlEnd); k < stop; k++) into[at++] = rec[k]!;
    u += 4 + len;
  }
  return at;
}

/** What a lookup of block i answers when no revocation is shown (gateway/http/server.ts). */
export function plainAnswerText(block: Block): string {
  return JSON.stringify({ success: true, ...block });
}

/**
 * One block's record: u32 entry count, per entry u32 length + its
 * artifact_url (UTF-8), then the answer (UTF-8) LZ4-compressed with its
 * dictionary (lz4-napi's block form: u32 little-endian answer length first).
 */
export function answerRecord(block: Block, dict: Buffer = Buffer.allocUnsafe(SCRATCH)): Buffer {
  const urls = block.payload.intent === 'endorse' ? block.payload.endorsements.map((e) => Buffer.from(e.artifact_url, 'utf8')) : [];
  let n = 4;
  for (const u of urls) n += 4 + u.length;
  if (n + DICTIONARY.length + 128 > dict.length) dict = Buffer.allocUnsafe(n + DICTIONARY.length + 128);
  DICTIONARY.copy(dict, 0);
  const head = Buffer.allocUnsafe(n);
  head.writeUInt32BE(urls.length, 0);
  let at = 4;
  for (const u of urls) {
    head.writeUInt32BE(u.length, at);
    u.copy(head, at + 4);
    at += 4 + u.length;
  }
  const prev = block.index === 0 ? ZERO_HASH : Buffer.from(block.prev_hash, 'hex');
  const d = dict.subarray(0, dictionaryOf(dict, prev, Buffer.from(block.record_hash, 'hex'), head, n));
  return Buffer.concat([head, compressSync(Buffer.from(plainAnswerText(block), 'utf8'), d)]);
}

/** Whether bytes from..from+n of `buf` are `url` in UTF-8 (compared as they are when `url` is ASCII). */
function sameUrl(buf: Buffer, from: number, n: number, url: string): boolean {
  if (n === url.length) {
    let k = 0;
    for (; k < n; k++) {
      const c = url.charCodeAt(k);
      if (c >= 0x80 || buf[from + k] !== c) break;
    }
    if (k === n) return true;
  }
  return n === Buffer.byteLength(url, 'utf8') && buf.toString('utf8', from, from + n) === url;
}

/**
 * Decodes the LZ4 block `src[s..end)` (the block format lz4-napi's
 * compressSync writes after its u32 length) into `out` at `at`, its
 * dictionary being `out[0..at)`, to exactly `want` bytes. False when the
 * block is malformed or decodes to another length; never reads or writes
 * outside `src[s..end)` and `out[0..at + want)`.
 */
export function lz4Into(src: Uint8Array, s: number, end: number, out: Uint8Array, at: number, want: number): boolean {
  const stop = at + want;
  // A block holds one sequence at least (an empty input compresses to one token).
  if (!(at >= 0 && stop <= out.length && s >= 0 && s < end && end <= src.length)) return false;
  let o = at;
  while (s < end) {
    const token = src[s++]!;
    let lit = token >>> 4;
    if (lit === 15) {
      for (let b = 255; b === 255; lit += b) {
        if (s >= end) return false;
        b = src[s++]!;
      }
    }
    if (lit > end - s || lit > stop - o) return false;
    if (lit < 32) for (const e = s + lit; s < e; ) out[o++] = src[s++]!;
    else {
      out.set(src.subarray(s, s + lit), o);
      s += lit;
      o += lit;
    }
    if (s === end) break; // the last sequence: literals only
    if (end - s < 2) return false;
    const off = src[s]! | (src[s + 1]! << 8);
    s += 2;
    if (off === 0 || off > o) return false;
    let m = token & 15;
    if (m === 15) {
      for (let b = 255; b === 255; m += b) {
        if (s >= end) return false;
        b = src[s++]!;
      }
    }
    m += 4;
    if (m > stop - o) return false;
    let r = o - off;
    if (off >= m && m >= 32) {
      out.copyWithin(o, r, r + m);
      o += m;
    } else for (const e = o + m; o < e; ) out[o++] = out[r++]!; // overlapping: byte by byte, as LZ4 means
  }
  return o === stop;
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
  /** DICTIONARY, then the record's own part (dictionaryOf). */
  private dict = Buffer.allocUnsafe(SCRATCH);
  private recordHashOf: (i: number) => Uint8Array = () => new Uint8Array(32);

  /**
   * `path`: the data file; the index file is `path + '.idx'`. `retired`: the
   * files of an earlier format, removed at `open` (a new name, so an older
   * version never takes these records for its own).
   */
  constructor(
    readonly path: string,
    private readonly retired: readonly string[] = [],
  ) {
    DICTIONARY.copy(this.dict, 0);
    this.offsets[0] = HEADER.length;
  }

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
   * is not or is cut short; what follows is cut. A data file whose header
   * is not HEADER (another format or dictionary) is emptied, both files.
   * Throws when the files cannot be opened for writing (a read-only chain directory).
   */
  open(size: number, recordHashOf: (i: number) => Uint8Array): void {
    this.close();
    this.count = 0;
    this.offsets[0] = HEADER.length;
    this.recordHashOf = recordHashOf;
    for (const p of this.retired) rmSync(p, { force: true });
    const flags = constants.O_RDWR | constants.O_CREAT;
    for (const p of [this.path, `${this.path}.idx`]) {
      const fd = openSync(p, flags, 0o644);
      const linked = fstatSync(fd).nlink > 1;
      closeSync(fd);
      if (linked) unlinkSync(p); // another copy's file: start a file of our own
    }
    this.dataFd = openSync(this.path, flags, 0o644);
    this.idxFd = openSync(`${this.path}.idx`, flags, 0o644);
    let dataBytes = fstatSync(this.dataFd).size;
    const head = Buffer.alloc(HEADER.length);
    if (dataBytes < HEADER.length || !preadAll(this.dataFd, head, 0) || !head.equals(HEADER)) {
      ftruncateSync(this.idxFd, 0);
      ftruncateSync(this.dataFd, 0);
      pwriteAll(this.dataFd, HEADER, 0);
      dataBytes = HEADER.length;
    }
    const n = Math.min(size, Math.floor(fstatSync(this.idxFd).size / REC));
    const idx = Buffer.allocUnsafe(n * REC);
    this.room(size); // the served chain's size: one allocation, no outgrown copies
    if (!preadAll(this.idxFd, idx, 0)) throw new Error('answer store: short read of its index');
    let at = HEADER.length;
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
    this.offsets[0] = HEADER.length;
    if (this.opened) this.cut();
  }

  /** Appends the records of blocks count.. (`blocks[0].index === count`), parsed from their verified texts. */
  append(blocks: readonly Block[]): void {
    if (blocks.length === 0) return;
    if (!this.opened) throw new Error('answer store is not open');
    if (blocks[0]!.index !== this.count) throw new TypeError(`answer store expects block ${this.count}, got ${blocks[0]!.index}`);
    const recs = blocks.map((b) => answerRecord(b, this.dict));
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
   * as written or did not decode to the length it names (the caller takes
   * the slow path, and drops the store on the latter: `corrupt`). Decoded
   * only when the URL matches.
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
    // The digest as a latin1 ('binary') string, one character a byte: no Buffer with its own memory made per read.
    const d = hash('sha256', buf, 'binary');
    const o = i * 32;
    for (let k = 0; k < 32; k++) if (d.charCodeAt(k) !== this.digests[o + k]) return this.corrupt();
    const entries = buf.readUInt32BE(0);
    let at = 4;
    let found = false;
    for (let e = 0; e < entries; e++) {
      const n = buf.readUInt32BE(at);
      if (e === entry) found = sameUrl(buf, at + 4, n, url);
      at += 4 + n;
    }
    if (!found) return null;
    // lz4-napi's block form names the answer's length: bounded before anything is decoded.
    const want = at + 4 <= len ? buf.readUInt32LE(at) : -1;
    if (want < 0 || want > MAX_ANSWER || want > (len - at) * 255) return this.corrupt();
    // The answer is decoded right after its dictionary, in the same buffer (its matches reach back into it).
    const room = DICTIONARY.length + 128 + at + want;
    let into = this.dict;
    if (room > into.length) {
      into = Buffer.allocUnsafe(room);
      DICTIONARY.copy(into, 0);
      if (room <= SCRATCH * 4) this.dict = into;
    }
    const prev = i === 0 ? ZERO_HASH : this.recordHashOf(i - 1);
    const end = dictionaryOf(into, prev, this.recordHashOf(i), buf, at);
    if (!lz4Into(buf, at + 4, len, into, end, want)) return this.corrupt();
    this.answerBytes = want;
    // Block i's record_hash as its dictionary holds it (hex): the lookup's ETag.
    this.answerHash = into.toString('latin1', DICTIONARY.length + 64, DICTIONARY.length + 128);
    return into.toString('utf8', end, end + want);
  }

  /** The UTF-8 length of the answer `answerFor` returned last. */
  answerBytes = 0;
  /** The record_hash (hex) of the block whose answer `answerFor` returned last. */
  answerHash = '';

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
