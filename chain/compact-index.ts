/**
 * The facts a lookup must find fast, for every block of a verified chain, in
 * typed arrays (issue 16: an index that does not hold the chain): intent,
 * effective date and record hash per block; record hash -> index; URL ->
 * (block, entry) candidates by a 53-bit hash (URLs are not kept: the caller
 * confirms each candidate, so a collision costs a read, never a wrong
 * answer); unit names; revoke targets; the binary image (`toImage` /
 * `fromImage`).
 * Trusts: the caller to add verified blocks only, in chain order.
 * Must hold: pure (browser-safe); `fromImage` rejects a partial image or one
 * of another URL hash; an image read back answers exactly as its source.
 */
import type { Intent } from './block.ts';
import type { IndexFacts } from './index-facts.ts';

/** 53-bit non-cryptographic string hash (cyrb53, public domain). */
export function cyrb53(s: string): number {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < s.length; i++) {
    const ch = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

/** A string hash returning a non-negative integer below 2^53. */
export type UrlHash = (url: string) => number;

const INTENTS: readonly Intent[] = ['authority', 'endorse', 'revoke', 'key'];
const MAGIC = 0x56494458; // "VIDX"
const IMAGE_VERSION = 2;
const HEADER_WORDS = 12;
const NONE: readonly number[] = Object.freeze([]);

function pow2AtLeast(n: number): number {
  let c = 16;
  while (c < n) c *= 2;
  return c;
}

/** `a` with room for exactly `need` elements (itself when it has them): every array of a kind keeps the same capacity. */
function fit<T extends Int32Array | Uint32Array | Uint8Array>(a: T, need: number): T {
  if (need <= a.length) return a;
  const next = new (a.constructor as new (n: number) => T)(need);
  next.set(a);
  return next;
}

/** `fit`, at least doubling. */
function grow<T extends Int32Array | Uint32Array | Uint8Array>(a: T, need: number): T {
  return need <= a.length ? a : fit(a, Math.max(need, a.length * 2, 64));
}

function hexNibble(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  return -1;
}

/** `YYYY-MM-DD` as yyyymmdd, or 0 when it is not one. */
export function dateNumber(d: string): number {
  if (d.length !== 10 || d[4] !== '-' || d[7] !== '-') return 0;
  const n = Number(d.slice(0, 4)) * 10000 + Number(d.slice(5, 7)) * 100 + Number(d.slice(8, 10));
  return Number.isInteger(n) ? n : 0;
}

export class CompactIndex {
  private n = 0;
  private intents = new Uint8Array(0);
  private dates = new Int32Array(0);
  private hashes = new Uint8Array(0);
  /** block index + 1 per slot, 0 = empty. */
  private hashTable = new Int32Array(16);

  private nodeCount = 0;
  private nodeHi = new Uint32Array(0);
  private nodeLo = new Uint32Array(0);
  private nodeBlock = new Int32Array(0);
  private nodeEntry = new Int32Array(0);
  /** The previous node with the same URL key, or -1. */
  private nodePrev = new Int32Array(0);
  /** newest node + 1 per slot, 0 = empty. */
  private urlTable = new Int32Array(16);
  private urlKeys = 0;

  private names: string[] = [];
  private nameIds = new Map<string, number>();
  /** Name id per block (-1 unless an endorse block). */
  private blockName = new Int32Array(0);
  /** The previous endorse block of the same name, or -1. */
  private namePrev = new Int32Array(0);
  private nameLast = new Int32Array(0);
  private nameCounts = new Int32Array(0);

  private revocations = new Map<number, number[]>();
  private revokePairs: number[] = [];
  /** Void block ranges declared by compromise key blocks, as inclusive [from, to] pairs flattened. */
  private voidPairs: number[] = [];

  private readonly scratch = new Uint8Array(32);

  constructor(
    private readonly urlHash: UrlHash = cyrb53,
    private readonly urlHashId = 'cyrb53',
  ) {}

  get size(): number {
    return this.n;
  }

  intentOf(i: number): Intent {
    return INTENTS[this.intents[i]!]!;
  }

  /** yyyymmdd of block i's effective_date. */
  dateOf(i: number): number {
    return this.dates[i]!;
  }

  /** record_hash of block i (64 hex digits). */
  recordHashOf(i: number): string {
    let s = '';
    for (let k = i * 32; k < i * 32 + 32; k++) s += this.hashes[k]!.toString(16).padStart(2, '0');
    return s;
  }

  /** record_hash of block i as its 32 bytes (a view into the index: copy it to keep it). */
  recordHashBytes(i: number): Uint8Array {
    if (!(i >= 0 && i < this.n)) throw new RangeError(`index: no block ${i}`);
    return this.hashes.subarray(i * 32, i * 32 + 32);
  }

  /**
   * Makes room for `blocks` blocks (and as many URL entries, the least they
   * hold) in one allocation per array: adding a known number of blocks (a
   * cold start) then leaves no outgrown copies for the collector. The two
   * hash tables still grow as they do without it: their sizes are part of
   * the image, which stays a function of the blocks added.
   */
  reserve(blocks: number): void {
    // All per-block arrays share one capacity (`add` grows them together when `intents` is full); so do the node arrays.
    if (blocks > this.intents.length) {
      this.intents = fit(this.intents, blocks);
      this.dates = fit(this.dates, blocks);
      this.hashes = fit(this.hashes, blocks * 32);
      this.blockName = fit(this.blockName, blocks);
      this.namePrev = fit(this.namePrev, blocks);
    }
    if (blocks > this.nodeHi.length) {
      this.nodeHi = fit(this.nodeHi, blocks);
      this.nodeLo = fit(this.nodeLo, blocks);
      this.nodeBlock = fit(this.nodeBlock, blocks);
      this.nodeEntry = fit(this.nodeEntry, blocks);
      this.nodePrev = fit(this.nodePrev, blocks);
    }
  }

  /** Adds the facts of the next verified block. */
  add(f: IndexFacts): void {
    const i = this.n;
    const intent = INTENTS.indexOf(f.intent);
    if (intent < 0) throw new TypeError(`index: unknown intent ${f.intent}`);
    if (!this.hexInto(f.recordHash)) throw new TypeError(`index: bad record hash at block ${i}`);
    if (i >= this.intents.length) {
      const cap = Math.max(1024, this.intents.length * 2);
      this.intents = grow(this.intents, cap);
      this.dates = grow(this.dates, cap);
      this.hashes = grow(this.hashes, cap * 32);
      this.blockName = grow(this.blockName, cap);
      this.namePrev = grow(this.namePrev, cap);
    }
    this.intents[i] = intent;
    this.dates[i] = dateNumber(f.effectiveDate);
    this.hashes.set(this.scratch, i * 32);
    this.blockName[i] = -1;
    this.namePrev[i] = -1;
    this.n = i + 1;
    if (this.n * 2 > this.hashTable.length) this.rehashHashes(pow2AtLeast(this.n * 4));
    else this.insertHash(i);
    if (f.intent === 'endorse') {
      f.urls.forEach((url, entry) => this.addUrl(url, i, entry));
      let id = this.nameIds.get(f.uns);
      if (id === undefined) {
        id = this.names.length;
        this.names.push(f.uns);
        this.nameIds.set(f.uns, id);
        this.nameLast = grow(this.nameLast, id + 1);
        this.nameCounts = grow(this.nameCounts, id + 1);
        this.nameLast[id] = -1;
      }
      this.blockName[i] = id;
      this.namePrev[i] = this.nameLast[id]!;
      this.nameLast[id] = i;
      this.nameCounts[id]!++;
    } else if (f.intent === 'key' && f.voids !== null) {
      this.voidPairs.push(f.voids[0], f.voids[1]);
    } else if (f.intent === 'revoke' && f.target !== null) {
      const t = this.indexOfHash(f.target);
      if (t >= 0 && this.intents[t] === 1) {
        let list = this.revocations.get(t);
        if (list === undefined) this.revocations.set(t, (list = []));
        list.push(i);
        this.revokePairs.push(t, i);
      }
    }
  }

  /** Parses 64 lowercase hex digits into `scratch`; false when it is not that. */
  private hexInto(hex: string): boolean {
    if (hex.length !== 64) return false;
    for (let k = 0; k < 32; k++) {
      const a = hexNibble(hex.charCodeAt(2 * k));
      const b = hexNibble(hex.charCodeAt(2 * k + 1));
      if (a < 0 || b < 0) return false;
      this.scratch[k] = (a << 4) | b;
    }
    return true;
  }

  private hashSlot(i: number): number {
    const h = this.hashes;
    const o = i * 32;
    return ((h[o]! << 24) | (h[o + 1]! << 16) | (h[o + 2]! << 8) | h[o + 3]!) >>> 0;
  }

  private insertHash(i: number): void {
    const mask = this.hashTable.length - 1;
    let s = this.hashSlot(i) & mask;
    while (this.hashTable[s] !== 0) s = (s + 1) & mask;
    this.hashTable[s] = i + 1;
  }

  private rehashHashes(cap: number): void {
    this.hashTable = new Int32Array(cap);
    for (let i = 0; i < this.n; i++) this.insertHash(i);
  }

  /** The index of the block with this record_hash, or -1. */
  indexOfHash(recordHash: string): number {
    if (!this.hexInto(recordHash)) return -1;
    const sc = this.scratch;
    const key = ((sc[0]! << 24) | (sc[1]! << 16) | (sc[2]! << 8) | sc[3]!) >>> 0;
    const mask = this.hashTable.length - 1;
    for (let s = key & mask; ; s = (s + 1) & mask) {
      const v = this.hashTable[s]!;
      if (v === 0) return -1;
      const o = (v - 1) * 32;
      let same = true;
      for (let k = 0; k < 32; k++)
        if (this.hashes[o + k] !== sc[k]) {
          same = false;
          break;
        }
      if (same) return v - 1;
    }
  }

  private addUrl(url: string, block: number, entry: number): void {
    const h = this.urlHash(url);
    const hi = Math.floor(h / 4294967296) >>> 0;
    const lo = h >>> 0;
    const node = this.nodeCount;
    if (node >= this.nodeHi.length) {
      const cap = Math.max(1024, this.nodeHi.length * 2);
      this.nodeHi = grow(this.nodeHi, cap);
      this.nodeLo = grow(this.nodeLo, cap);
      this.nodeBlock = grow(this.nodeBlock, cap);
      this.nodeEntry = grow(this.nodeEntry, cap);
      this.nodePrev = grow(this.nodePrev, cap);
    }
    this.nodeHi[node] = hi;
    this.nodeLo[node] = lo;
    this.nodeBlock[node] = block;
    this.nodeEntry[node] = entry;
    this.nodeCount = node + 1;
    const s = this.urlSlot(hi, lo);
    const head = this.urlTable[s]!;
    this.nodePrev[node] = head - 1;
    this.urlTable[s] = node + 1;
    if (head === 0) {
      this.urlKeys++;
      if (this.urlKeys * 2 > this.urlTable.length) this.rehashUrls(this.urlTable.length * 4);
    }
  }

  /** The slot holding key (hi, lo), or the empty slot where it goes. */
  private urlSlot(hi: number, lo: number): number {
    const t = this.urlTable;
    const mask = t.length - 1;
    for (let s = (lo ^ Math.imul(hi, 0x9e3779b1)) & mask; ; s = (s + 1) & mask) {
      const v = t[s]!;
      if (v === 0 || (this.nodeLo[v - 1] === lo && this.nodeHi[v - 1] === hi)) return s;
    }
  }

  private rehashUrls(cap: number): void {
    const old = this.urlTable;
    this.urlTable = new Int32Array(cap);
    for (let s = 0; s < old.length; s++) {
      const v = old[s]!;
      if (v !== 0) this.urlTable[this.urlSlot(this.nodeHi[v - 1]!, this.nodeLo[v - 1]!)] = v;
    }
  }

  /**
   * Where the URL may be endorsed, oldest first, as [block, entry] pairs
   * flattened. Unconfirmed: the caller checks each block's artifact_url.
   */
  urlCandidates(url: string): number[] {
    const h = this.urlHash(url);
    const hi = Math.floor(h / 4294967296) >>> 0;
    const lo = h >>> 0;
    const v = this.urlTable[this.urlSlot(hi, lo)]!;
    if (v === 0) return [];
    const out: number[] = [];
    for (let node = v - 1; node >= 0; node = this.nodePrev[node]!) {
      if (this.voidPairs.length === 0 || !this.isVoid(this.nodeBlock[node]!)) out.push(this.nodeEntry[node]!, this.nodeBlock[node]!);
    }
    return out.reverse();
  }

  /** Whether block i is void (signed by a compromised key after its last good block): never selected. */
  isVoid(i: number): boolean {
    const v = this.voidPairs;
    for (let k = 0; k < v.length; k += 2) if (i >= v[k]! && i <= v[k + 1]!) return true;
    return false;
  }

  /** The void ranges, inclusive [from, to] each, in chain order. */
  voids(): [number, number][] {
    const out: [number, number][] = [];
    for (let k = 0; k < this.voidPairs.length; k += 2) out.push([this.voidPairs[k]!, this.voidPairs[k + 1]!]);
    return out;
  }

  /** Endorse blocks of the unit, oldest first. */
  blocksOfName(uns: string): number[] {
    const id = this.nameIds.get(uns);
    if (id === undefined) return [];
    const out: number[] = new Array(this.nameCounts[id]!);
    let k = out.length;
    for (let b = this.nameLast[id]!; b >= 0; b = this.namePrev[b]!) out[--k] = b;
    return this.voidPairs.length === 0 ? out : out.filter((b) => !this.isVoid(b));
  }

  /** Revoke blocks naming endorse block i, in chain order. */
  revocationsOf(i: number): readonly number[] {
    const list = this.revocations.get(i) ?? NONE;
    return this.voidPairs.length === 0 || list.length === 0 ? list : list.filter((r) => !this.isVoid(r)); // a void revoke revokes nothing
  }

  // ------------------------------------------------------------------ image

  /** The whole index as one binary image. */
  toImage(): Uint8Array {
    const n = this.n;
    const m = this.nodeCount;
    const names = new TextEncoder().encode(JSON.stringify({ names: this.names, hash: this.urlHashId }));
    const sections: ArrayBufferView[] = [
      this.intents.subarray(0, n),
      this.dates.subarray(0, n),
      this.hashes.subarray(0, n * 32),
      this.blockName.subarray(0, n),
      this.namePrev.subarray(0, n),
      this.nodeHi.subarray(0, m),
      this.nodeLo.subarray(0, m),
      this.nodeBlock.subarray(0, m),
      this.nodeEntry.subarray(0, m),
      this.nodePrev.subarray(0, m),
      this.hashTable,
      this.urlTable,
      this.nameLast.subarray(0, this.names.length),
      this.nameCounts.subarray(0, this.names.length),
      Int32Array.from(this.revokePairs),
      Int32Array.from(this.voidPairs),
      names,
    ];
    const pad = (x: number) => (x + 7) & ~7;
    let total = HEADER_WORDS * 4;
    for (const s of sections) total = pad(total + s.byteLength);
    const out = new Uint8Array(total);
    const header = new Uint32Array(out.buffer, 0, HEADER_WORDS);
    header.set([
      MAGIC,
      IMAGE_VERSION,
      n,
      m,
      this.hashTable.length,
      this.urlTable.length,
      this.urlKeys,
      this.names.length,
      this.revokePairs.length,
      names.length,
      total,
      this.voidPairs.length,
    ]);
    let off = HEADER_WORDS * 4;
    for (const s of sections) {
      out.set(new Uint8Array(s.buffer, s.byteOffset, s.byteLength), off);
      off = pad(off + s.byteLength);
    }
    return out;
  }

  /** The index an image holds; throws TypeError when the image is not one (or not whole). */
  static fromImage(image: Uint8Array, urlHash: UrlHash = cyrb53, urlHashId = 'cyrb53'): CompactIndex {
    const bad = (why: string) => new TypeError(`index image: ${why}`);
    if (image.byteLength < HEADER_WORDS * 4) throw bad('too short');
    const aligned = image.byteOffset % 8 === 0 ? image : image.slice();
    const h = new Uint32Array(aligned.buffer, aligned.byteOffset, HEADER_WORDS);
    const [magic, version, n, m, hashCap, urlCap, urlKeys, nameCount, pairCount, namesLen, total, voidCount] = h as unknown as number[];
    if (magic !== MAGIC || version !== IMAGE_VERSION) throw bad('not an index image');
    if (total !== aligned.byteLength) throw bad('not whole');
    const pow2 = (x: number) => x >= 16 && (x & (x - 1)) === 0;
    if (!pow2(hashCap!) || !pow2(urlCap!) || hashCap! < n! * 2 || urlCap! < urlKeys! * 2) throw bad('bad table sizes');
    const idx = new CompactIndex(urlHash, urlHashId);
    let off = HEADER_WORDS * 4;
    const pad = (x: number) => (x + 7) & ~7;
    const take = <T>(ctor: { new (b: ArrayBufferLike, o: number, l: number): T; BYTES_PER_ELEMENT: number }, count: number, cap: number): T => {
      const bytes = count * ctor.BYTES_PER_ELEMENT;
      if (off + bytes > aligned.byteLength) throw bad('not whole');
      const copy = new Uint8Array(Math.max(cap, count) * ctor.BYTES_PER_ELEMENT);
      copy.set(aligned.subarray(off, off + bytes));
      off = pad(off + bytes);
      return new ctor(copy.buffer, 0, Math.max(cap, count));
    };
    const cap = n! + (n! >> 3) + 1024;
    const ncap = m! + (m! >> 3) + 1024;
    idx.intents = take(Uint8Array, n!, cap);
    idx.dates = take(Int32Array, n!, cap);
    idx.hashes = take(Uint8Array, n! * 32, cap * 32);
    idx.blockName = take(Int32Array, n!, cap);
    idx.namePrev = take(Int32Array, n!, cap);
    idx.nodeHi = take(Uint32Array, m!, ncap);
    idx.nodeLo = take(Uint32Array, m!, ncap);
    idx.nodeBlock = take(Int32Array, m!, ncap);
    idx.nodeEntry = take(Int32Array, m!, ncap);
    idx.nodePrev = take(Int32Array, m!, ncap);
    idx.hashTable = take(Int32Array, hashCap!, hashCap!);
    idx.urlTable = take(Int32Array, urlCap!, urlCap!);
    idx.nameLast = take(Int32Array, nameCount!, nameCount!);
    idx.nameCounts = take(Int32Array, nameCount!, nameCount!);
    const pairs = take(Int32Array, pairCount!, pairCount!);
    if (voidCount! % 2 !== 0) throw bad('bad void ranges');
    idx.voidPairs = Array.from(take(Int32Array, voidCount!, voidCount!));
    if (off + namesLen! > aligned.byteLength) throw bad('not whole');
    const meta = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(aligned.subarray(off, off + namesLen!))) as { names: string[]; hash: string };
    if (meta.hash !== urlHashId) throw bad(`made with URL hash ${meta.hash}, not ${urlHashId}`);
    if (!Array.isArray(meta.names) || meta.names.length !== nameCount) throw bad('bad names');
    idx.n = n!;
    idx.nodeCount = m!;
    idx.urlKeys = urlKeys!;
    idx.names = meta.names;
    meta.names.forEach((name, id) => idx.nameIds.set(name, id));
    for (let k = 0; k < pairs.length; k += 2) {
      const t = pairs[k]!;
      let list = idx.revocations.get(t);
      if (list === undefined) idx.revocations.set(t, (list = []));
      list.push(pairs[k + 1]!);
      idx.revokePairs.push(t, pairs[k + 1]!);
    }
    return idx;
  }
}
