/**
 * The answer store (docs/decisions/gateway-hot-path.md "The answer store",
 * "Compressed", "Format 3"): each block's plain lookup answer, LZ4-compressed
 * against DICTIONARY plus the record's own values (URLs; sha256 artifact
 * hashes and the signature kept as bytes), in `.git/vouch-answers.lz4`; `.idx`
 * beside it: per record its length, digest and record_hash prefix.
 * Owns: both files, the offsets and digests in memory; decoding (`lz4Into`).
 * Trusts: its caller to append the verified texts of blocks in chain order.
 * Must hold: a record is decoded only when its digest is the one written for
 * the served block's whole record_hash, with its dictionary, to the bounded
 * length it names; the answer is the decoded text itself; records are taken
 * back at `open` only for blocks whose record_hash begins with the bytes
 * kept, from a file with this header; a crash's leftovers are cut, never
 * read; a file with other hard links is never written.
 */
import { hash } from 'node:crypto';
import { closeSync, constants, fstatSync, ftruncateSync, openSync, rmSync, unlinkSync } from 'node:fs';
import { compressSync } from 'lz4-napi';
import type { Block } from '../../chain/block.ts';
import { preadAll, pwriteAll } from '../../platform/durable-file.ts';

/** Index record: u32 record length, the record's digest (DIGEST bytes), the block's record_hash's first PREFIX bytes. */
export const IDX_RECORD = 20;
const REC = IDX_RECORD;
/** Bytes of sha256(record_hash || record) kept: the check a record read back as written, for that block. */
const DIGEST = 12;
/** Bytes of the block's record_hash in the index: what `open` compares to take a record back. */
const PREFIX = 4;
/** Where an index record's record_hash prefix begins (after the length and the digest). */
export const IDX_PREFIX_AT = 4 + DIGEST;
/** Records read into one reused buffer up to this size (larger ones get their own). */
const SCRATCH = 64 * 1024;
/** An answer longer than this is never decoded (a block's text is far shorter). */
const MAX_ANSWER = 16 * 1024 * 1024;

const sha256 = (b: Uint8Array | string): Buffer => hash('sha256', b, 'buffer') as Buffer;

// Placeholders of the template's value slots (the values of each record are written over them).
const SLOT_PREV = 'P'.repeat(64);
const SLOT_HASH = 'H'.repeat(64);
const SLOT_SIG = 'S'.repeat(88);
const SLOT_OWN = 'R'.repeat(64);

/**
 * Every record's dictionary begins with this: an endorse block's answer of
 * the common shape, its keys in their order and constant strings, with slots
 * where each record's prev_hash, first artifact_hash (after `sha256:`),
 * signature and record_hash are written (`dictionaryOf`), and cut where the
 * first artifact_url goes (the URL follows the template in the dictionary:
 * the part after it keeps a fixed place). Changing it changes DICTIONARY_ID:
 * a store written with another one is dropped and rebuilt at `open`, never
 * decoded with this one.
 */
export const DICTIONARY = Buffer.from(
  JSON.stringify({
    success: true,
    comment: 'acme/pkg 1.0.0',
    index: 0,
    prev_hash: SLOT_PREV,
    posted: '2026-01-01T00:00:00Z',
    signer: 'vouch',
    payload: {
      effective_date: '2026-01-01',
      endorsements: [
        {
          artifact_hash: `sha256:${SLOT_HASH}`,
          artifact_url: '',
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
    signature: SLOT_SIG,
    record_hash: SLOT_OWN,
  }),
  'latin1',
);
export const DICTIONARY_ID = sha256(DICTIONARY);
/** The data file's header: magic, format 3 (binary hashes and signature, LZ4 records), the dictionary's sha256. */
export const HEADER = Buffer.concat([Buffer.from('vouchans', 'latin1'), Buffer.from([0, 0, 0, 3]), DICTIONARY_ID]);
const ZERO_HASH = new Uint8Array(32);
const HEX = Buffer.from('0123456789abcdef', 'latin1');
const B64 = Buffer.from('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/', 'latin1');

/** How a value is kept in the record's head: as bytes (its text re-made exactly from them), or left in the answer as text. */
const TEXT = 0;
const BINARY = 1;
const SHA256_TEXT = /^sha256:[0-9a-f]{64}$/;
const SIGNATURE_BYTES = 64;

// The JSON around the values of entries after the first, as the answer has them: a match runs across a value and its keys.
const latin1 = (s: string): Buffer => Buffer.from(s, 'latin1');
const G_HASH = latin1('{"artifact_hash":"sha256:');
const G_URL = latin1('","artifact_url":"');
const G_COMMENT = latin1('","comment":"');
/** The value slots in DICTIONARY. */
const AT_PREV = DICTIONARY.indexOf(SLOT_PREV, 0, 'latin1');
const AT_HASH = DICTIONARY.indexOf(SLOT_HASH, 0, 'latin1');
const AT_SIG = DICTIONARY.indexOf(SLOT_SIG, 0, 'latin1');
const AT_OWN = DICTIONARY.indexOf(SLOT_OWN, 0, 'latin1');
/** The dictionary's part after DICTIONARY, per entry: its URL and at most this much. */
const OWN_ENTRY = G_HASH.length + 64 + G_URL.length + G_COMMENT.length;
/** A value kept as text has its slot filled with these (the reader does alike). */
const NO_SIGNATURE = latin1('A'.repeat(86) + '==');
const NO_HASH = latin1('0'.repeat(64));

/** A buffer of `size` bytes (at least DICTIONARY's) holding DICTIONARY. */
function dictionaryBuffer(size: number): Buffer {
  const b = Buffer.allocUnsafe(Math.max(size, DICTIONARY.length));
  DICTIONARY.copy(b, 0);
  return b;
}

/** Copies the constant `from` into `into` at `at` byte by byte (short: Buffer#copy makes a view of its source each call); returns the new end. */
function put(into: Uint8Array, at: number, from: Buffer): number {
  for (let k = 0; k < from.length; k++) into[at++] = from[k]!;
  return at;
}

// Lookup tables for the encoders below (per byte its two hex digits; per 12 bits their two base64 characters): the
// dictionary's own part is made on every read, so these loops are kept short.
const HEX_HI = Uint8Array.from({ length: 256 }, (_, b) => HEX[b >> 4]!);
const HEX_LO = Uint8Array.from({ length: 256 }, (_, b) => HEX[b & 15]!);
const B64_HI = Uint8Array.from({ length: 4096 }, (_, v) => B64[v >> 6]!);
const B64_LO = Uint8Array.from({ length: 4096 }, (_, v) => B64[v & 63]!);

/** Writes the 32 bytes of `src` from `s` as lowercase hex into `into` at `at`; returns the new end. */
function hexInto(into: Uint8Array, at: number, src: Uint8Array, s = 0): number {
  for (let k = s, e = s + 32; k < e; k++) {
    const c = src[k]!;
    into[at] = HEX_HI[c]!;
    into[at + 1] = HEX_LO[c]!;
    at += 2;
  }
  return at;
}

/** Writes the 64 bytes at `s` of `b` as canonical base64 (88 characters, `==` at the end) into `into` at `at`. */
function base64Into(into: Uint8Array, at: number, b: Buffer, s: number): void {
  let k = s;
  for (const e = s + 63; k < e; k += 3) {
    const n = (b[k]! << 16) | (b[k + 1]! << 8) | b[k + 2]!;
    const hi = n >> 12;
    const lo = n & 4095;
    into[at] = B64_HI[hi]!;
    into[at + 1] = B64_LO[hi]!;
    into[at + 2] = B64_HI[lo]!;
    into[at + 3] = B64_LO[lo]!;
    at += 4;
  }
  const last = b[k]! << 4;
  into[at] = B64_HI[last]!;
  into[at + 1] = B64_LO[last]!;
  into[at + 2] = 61;
  into[at + 3] = 61;
}

/** Reads an unsigned LEB128 number of at most 4 bytes from `b` at `vat`, before `end`; leaves `vat` past it. -1 when malformed. */
let vat = 0;
function varint(b: Uint8Array, end: number): number {
  let v = 0;
  for (let shift = 0; shift < 28; shift += 7) {
    if (vat >= end) return -1;
    const c = b[vat++]!;
    v |= (c & 127) << shift;
    if (c < 128) return v;
  }
  return -1;
}

/** Writes `v` as unsigned LEB128 into `into` at `at`; returns the new end. */
function varintInto(into: Buffer, at: number, v: number): number {
  while (v >= 128) {
    into[at++] = (v & 127) | 128;
    v = Math.floor(v / 128);
  }
  into[at++] = v;
  return at;
}

/**
 * Record i's dictionary in `into` (`dictionaryBuffer`: DICTIONARY already
 * there): its slots filled with block i-1's and i's record_hash as hex (the
 * answer's prev_hash and record_hash), the signature's base64 and entry 0's
 * artifact_hash hex (each when kept as bytes in the record's head
 * `rec[0..headEnd)`), then entry 0's artifact_url, then per further entry
 * its artifact_hash text (when kept as bytes) and artifact_url with the JSON
 * the answer has around them. Returns its length. Writer and reader build
 * it alike. The head must be well formed (the reader checked it, or the
 * writer made it).
 */
function dictionaryOf(into: Buffer, prev: Uint8Array, own: Uint8Array, rec: Buffer, headEnd: number): number {
  hexInto(into, AT_PREV, prev);
  hexInto(into, AT_OWN, own);
  let at = DICTIONARY.length;
  let r = 0;
  let n = 0;
  // LEB128 numbers, inline (a local position, not `varint`'s shared one: this runs on every read).
  for (let c = 128, shift = 0; c >= 128 && shift < 28 && r < headEnd; shift += 7) n |= ((c = rec[r++]!) & 127) << shift;
  for (let e = 0; e < n; e++) {
    let len = 0;
    for (let c = 128, shift = 0; c >= 128 && shift < 28 && r < headEnd; shift += 7) len |= ((c = rec[r++]!) & 127) << shift;
    const stop = r + len;
    const binary = rec[stop] === BINARY;
    if (e === 0) {
      if (binary) hexInto(into, AT_HASH, rec, stop + 1);
      else put(into, AT_HASH, NO_HASH);
    } else {
      if (binary) {
        at = put(into, at, G_HASH);
        at = hexInto(into, at, rec, stop + 1);
      }
      at = put(into, at, G_URL);
    }
    // The URL byte by byte: it is short, and Buffer#copy makes a view of its source each call.
    while (r < stop) into[at++] = rec[r++]!;
    if (e > 0) at = put(into, at, G_COMMENT);
    r = stop + (binary ? 33 : 1);
  }
  if (n === 0) put(into, AT_HASH, NO_HASH);
  if (rec[r] === BINARY) base64Into(into, AT_SIG, rec, r + 1);
  else put(into, AT_SIG, NO_SIGNATURE);
  return at;
}

/** What a lookup of block i answers when no revocation is shown (gateway/http/server.ts). */
export function plainAnswerText(block: Block): string {
  return JSON.stringify({ success: true, ...block });
}

/** The 32 bytes of a `sha256:` + 64 lowercase hex artifact_hash; null for any other form (kept as text). */
function sha256Bytes(h: string): Buffer | null {
  return SHA256_TEXT.test(h) ? Buffer.from(h.slice(7), 'hex') : null;
}

/** The 64 bytes of a signature that is their canonical base64 (88 characters with its padding); null otherwise (kept as text). */
function signatureBytes(s: string): Buffer | null {
  if (s.length !== 88) return null;
  const b = Buffer.from(s, 'base64');
  return b.length === SIGNATURE_BYTES && b.toString('base64') === s ? b : null;
}

/**
 * One block's record. Its head: the entry count (LEB128), per entry its
 * artifact_url's UTF-8 length (LEB128) and bytes, then a kind byte, BINARY
 * followed by the 32 bytes of a `sha256:` + lowercase hex artifact_hash, or
 * TEXT (any other form: left in the answer); then the signature's kind byte,
 * BINARY followed by its 64 bytes when it is their canonical base64, or
 * TEXT. After the head: the answer's UTF-8 length (LEB128) and the answer
 * LZ4-compressed (block format, lz4-napi) with the record's dictionary.
 */
export function answerRecord(block: Block, dict: Buffer = dictionaryBuffer(SCRATCH)): Buffer {
  const entries = block.payload.intent === 'endorse' ? block.payload.endorsements : [];
  const urls = entries.map((e) => Buffer.from(e.artifact_url, 'utf8'));
  let bound = 5 + 1 + SIGNATURE_BYTES;
  let own = 0;
  for (const u of urls) {
    bound += 5 + u.length + 1 + 32;
    own += OWN_ENTRY + u.length;
  }
  const head = Buffer.allocUnsafe(bound);
  let at = varintInto(head, 0, entries.length);
  entries.forEach((e, k) => {
    at = varintInto(head, at, urls[k]!.length);
    at += urls[k]!.copy(head, at);
    const h = sha256Bytes(e.artifact_hash);
    head[at++] = h === null ? TEXT : BINARY;
    if (h !== null) at += h.copy(head, at);
  });
  const sig = signatureBytes(block.signature);
  head[at++] = sig === null ? TEXT : BINARY;
  if (sig !== null) at += sig.copy(head, at);
  if (DICTIONARY.length + own > dict.length) dict = dictionaryBuffer(DICTIONARY.length + own);
  const prev = block.index === 0 ? ZERO_HASH : Buffer.from(block.prev_hash, 'hex');
  const d = dict.subarray(0, dictionaryOf(dict, prev, Buffer.from(block.record_hash, 'hex'), head, at));
  const answer = Buffer.from(plainAnswerText(block), 'utf8');
  const lz4 = compressSync(answer, d); // u32 little-endian length first: ours is a LEB128
  const rec = Buffer.allocUnsafe(at + 5 + lz4.length - 4);
  head.copy(rec, 0, 0, at);
  at = varintInto(rec, at, answer.length);
  at += lz4.copy(rec, at, 4);
  return rec.subarray(0, at);
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

/** Whether bytes at..at+PREFIX of `idx` are the first PREFIX bytes of `h`. */
function samePrefix(idx: Uint8Array, at: number, h: Uint8Array): boolean {
  for (let k = 0; k < PREFIX; k++) if (idx[at + k] !== h[k]) return false;
  return true;
}

export class AnswerStore {
  private dataFd = -1;
  private idxFd = -1;
  /** Blocks 0..count-1 have records. */
  count = 0;
  /** Record i spans offsets[i]..offsets[i+1] of the data file. */
  private offsets = new Float64Array(1024);
  /** Per record its digest (DIGEST bytes): sha256 of the block's record_hash then the record. */
  private digests = new Uint8Array(1024 * DIGEST);
  /** The block's record_hash, then a record read (up to SCRATCH bytes): hashed together. */
  private readonly scratch = Buffer.allocUnsafe(32 + SCRATCH);
  /** DICTIONARY, then the record's own part (dictionaryOf). */
  private dict = dictionaryBuffer(SCRATCH);
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
    const d = new Uint8Array(cap * DIGEST);
    d.set(this.digests.subarray(0, this.count * DIGEST));
    this.digests = d;
  }

  /**
   * Opens (or creates) the files and takes back the records of blocks
   * 0..size-1 whose record_hash begins with the index's PREFIX bytes, up to
   * the first that does not or is cut short; what follows is cut. (A record
   * taken back for a block whose record_hash only shares those bytes is
   * never served: its digest covers the whole record_hash, checked on read.) A data file whose header
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
      if (at + len > dataBytes || !samePrefix(idx, o + IDX_PREFIX_AT, recordHashOf(k))) break;
      this.digests.set(idx.subarray(o + 4, o + 4 + DIGEST), k * DIGEST);
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
      const own = Buffer.from(blocks[k]!.record_hash, 'hex');
      idx.writeUInt32BE(r.length, k * REC);
      sha256(Buffer.concat([own, r])).copy(idx, k * REC + 4, 0, DIGEST);
      own.copy(idx, k * REC + IDX_PREFIX_AT, 0, PREFIX);
    });
    // The data first, then the index that names it: an index record never names bytes not yet written.
    pwriteAll(this.dataFd, Buffer.concat(recs), at);
    pwriteAll(this.idxFd, idx, this.count * REC);
    recs.forEach((r, k) => {
      this.digests.set(idx.subarray(k * REC + 4, k * REC + 4 + DIGEST), (this.count + k) * DIGEST);
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
    // The block's record_hash, then the record: the digest binds the record to the served block.
    const both = len <= SCRATCH ? this.scratch.subarray(0, 32 + len) : Buffer.allocUnsafe(32 + len);
    const own = this.recordHashOf(i);
    for (let k = 0; k < 32; k++) both[k] = own[k]!;
    const buf = both.subarray(32);
    try {
      if (!preadAll(this.dataFd, buf, from)) return this.corrupt();
    } catch {
      return this.corrupt();
    }
    // The digest as a latin1 ('binary') string, one character a byte: no Buffer with its own memory made per read.
    const d = hash('sha256', both, 'binary');
    const o = i * DIGEST;
    for (let k = 0; k < DIGEST; k++) if (d.charCodeAt(k) !== this.digests[o + k]) return this.corrupt();
    // The head (answerRecord): found the entry's URL, and the bytes of the record's own dictionary part.
    vat = 0;
    const entries = varint(buf, len);
    if (entries < 0) return this.corrupt();
    let found = false;
    let ownPart = 0;
    for (let e = 0; e < entries; e++) {
      const n = varint(buf, len);
      if (n < 0 || vat + n >= len) return this.corrupt();
      if (e === entry) found = sameUrl(buf, vat, n, url);
      vat += n;
      const kind = buf[vat++]!;
      if (kind === BINARY) vat += 32;
      else if (kind !== TEXT) return this.corrupt();
      ownPart += OWN_ENTRY + n;
    }
    if (!found) return null;
    if (vat >= len) return this.corrupt();
    const sig = buf[vat++]!;
    if (sig === BINARY) vat += SIGNATURE_BYTES;
    else if (sig !== TEXT) return this.corrupt();
    const headEnd = vat;
    const want = varint(buf, len);
    // Bounded before anything is decoded.
    if (want < 0 || want > MAX_ANSWER || want > (len - vat) * 255) return this.corrupt();
    const lz4At = vat;
    // The answer is decoded right after its dictionary, in the same buffer (its matches reach back into it).
    const room = DICTIONARY.length + ownPart + want;
    let into = this.dict;
    if (room > into.length) {
      into = dictionaryBuffer(room);
      if (room <= SCRATCH * 4) this.dict = into;
    }
    const prev = i === 0 ? ZERO_HASH : this.recordHashOf(i - 1);
    const end = dictionaryOf(into, prev, own, buf, headEnd);
    if (!lz4Into(buf, lz4At, len, into, end, want)) return this.corrupt();
    this.answerBytes = want;
    // Block i's record_hash as its dictionary holds it (hex): the lookup's ETag.
    this.answerHash = into.toString('latin1', AT_OWN, AT_OWN + 64);
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
