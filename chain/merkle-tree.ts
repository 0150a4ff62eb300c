/**
 * The in-memory Merkle tree over the log's entries, its proofs, tlog-tiles
 * and binary image. `MerkleTree` is an incremental RFC 6962 tree keeping
 * each level of complete subtrees in one growable byte array; roots of any
 * earlier size and every proof come from stored subtrees in O(log n). Also
 * the tlog-tiles path syntax and entry bundles.
 * Trusts: the injected sha256 (chain/merkle.ts); an image given to
 * `fromImage` for its hashes (its shape is checked; the gateway wrote it).
 * Must hold: inclusion and consistency proofs are RFC 9162's and verify with
 * chain/merkle.ts; root(s) is the RFC 6962 root of the first s entries;
 * tile level L holds tree level 8L. Image: "VOUCHMT\x01" ‖ uint64be size ‖
 * level 0 ‖ level 1 ‖ … (floor(size/2^l) hashes each).
 */
import type { CryptoBackend } from './crypto-backend.ts';
import { HASH_SIZE, leafHash, nodeHash, nodeHashOfPair, splitPoint, type Hash } from './merkle.ts';

const IMAGE_MAGIC = new Uint8Array([0x56, 0x4f, 0x55, 0x43, 0x48, 0x4d, 0x54, 0x01]); // "VOUCHMT\x01"
const IMAGE_HEADER = IMAGE_MAGIC.length + 8;
/**
 * The right edge of the tree an image holds (see `toImage`): its size and
 * the hashes of the complete subtrees [0, size) splits into, one per set
 * bit of size, largest first; null when the bytes do not have an image's
 * shape (magic, size, length). Read off the image in O(log n), without
 * loading the tree (store/tree-edge.ts).
 */
export function imageEdge(image: Uint8Array): { size: number; hashes: Hash[] } | null {
  if (image.length < IMAGE_HEADER) return null;
  for (let i = 0; i < IMAGE_MAGIC.length; i++) if (image[i] !== IMAGE_MAGIC[i]) return null;
  const big = new DataView(image.buffer, image.byteOffset, IMAGE_HEADER).getBigUint64(IMAGE_MAGIC.length);
  if (big > BigInt(Number.MAX_SAFE_INTEGER)) return null;
  const size = Number(big);
  const levelStart: number[] = [];
  let off = IMAGE_HEADER;
  for (let count = size; count > 0; count = Math.floor(count / 2)) {
    levelStart.push(off);
    off += count * HASH_SIZE;
  }
  if (image.length !== off) return null;
  const hashes: Hash[] = [];
  let start = 0;
  for (let k = levelStart.length - 1; k >= 0; k--) {
    const span = 2 ** k;
    if (Math.floor(size / span) % 2 === 1) {
      const at = levelStart[k]! + (start / span) * HASH_SIZE;
      hashes.push(image.slice(at, at + HASH_SIZE));
      start += span;
    }
  }
  return { size, hashes };
}

/** Tile height of tlog-tiles: a tile spans 8 tree levels, 256 hashes wide. */
export const TILE_HEIGHT = 8;
export const TILE_WIDTH = 256;

class Level {
  bytes: Uint8Array;
  count = 0;
  constructor(capacity: number) {
    this.bytes = new Uint8Array(Math.max(1, capacity) * HASH_SIZE);
  }
  push(h: Uint8Array): void {
    const end = (this.count + 1) * HASH_SIZE;
    if (end > this.bytes.length) {
      // Growth by an eighth (at least 4,096 hashes), not doubling: a level read back from an image is
      // exactly full, and the first append after a warm start would otherwise double it (~96 bytes an
      // entry at 1M instead of ~64; the gateway keeps the tree for the life of the process).
      const held = this.bytes.length / HASH_SIZE;
      this.reserve(Math.max(this.count + 1, held + Math.max(4096, Math.ceil(held / 8))));
    }
    this.bytes.set(h, this.count * HASH_SIZE);
    this.count++;
  }
  at(i: number): Hash {
    return this.bytes.slice(i * HASH_SIZE, (i + 1) * HASH_SIZE);
  }
  /** Makes room for `count` hashes in one allocation. */
  reserve(count: number): void {
    if (count * HASH_SIZE <= this.bytes.length) return;
    const grown = new Uint8Array(count * HASH_SIZE);
    grown.set(this.bytes.subarray(0, this.count * HASH_SIZE));
    this.bytes = grown;
  }
}

export class MerkleTree {
  private readonly c: CryptoBackend;
  private levels: Level[] = [new Level(1024)];
  private n = 0;
  /** The size `reserve` made room for: a level made later is sized for it. */
  private planned = 0;
  /**
   * Hashes of incomplete ranges [start, end) on the right border of the last
   * size asked for (at most log2 n of them): proofs at one size — the
   * current one, mostly — then cost lookups, no hashing. Append-only, so a
   * range's hash never changes once its end is in the tree.
   */
  private border: { end: number; hashes: Map<number, Hash> } = { end: -1, hashes: new Map() };

  constructor(c: CryptoBackend) {
    this.c = c;
  }

  get size(): number {
    return this.n;
  }

  /**
   * Makes room for a tree of `size` entries, each level in one allocation
   * of its final length: appending a known number of entries (a cold start
   * over a whole chain) then leaves no outgrown copies behind (growth by an
   * eighth would allocate some eight times each level's final length on the
   * way, garbage the collector reclaims late).
   */
  reserve(size: number): void {
    if (!(size > this.planned)) return;
    this.planned = size;
    this.levels.forEach((level, l) => level.reserve(Math.floor(size / 2 ** l)));
  }

  /** Appends entry `size` (vouch: a 32-byte record hash). */
  append(entry: Uint8Array): void {
    this.appendLeafHash(leafHash(this.c, entry));
  }

  /** Appends a leaf whose hash (SHA-256(0x00 ‖ entry)) the caller already has. */
  appendLeafHash(leaf: Hash): void {
    if (leaf.length !== HASH_SIZE) throw new RangeError('a leaf hash is 32 bytes');
    this.levels[0]!.push(leaf);
    // Close every complete subtree the new leaf ends: index i at level l is the
    // right child when odd; its parent is (i-1, i) at level l+1.
    let i = this.n;
    let l = 0;
    while (i % 2 === 1) {
      const level = this.levels[l]!;
      const parent = nodeHashOfPair(this.c, level.bytes, (i - 1) * HASH_SIZE);
      if (this.levels.length === l + 1) this.levels.push(new Level(Math.max(1, level.count >> 1, Math.floor(this.planned / 2 ** (l + 1)))));
      this.levels[l + 1]!.push(parent);
      i = (i - 1) / 2;
      l++;
    }
    this.n++;
  }

  /** Appends many leaf hashes given as one concatenation (a warm start). */
  appendLeafHashes(concatenated: Uint8Array): void {
    if (concatenated.length % HASH_SIZE !== 0) throw new RangeError('leaf hashes come in 32-byte units');
    for (let off = 0; off < concatenated.length; off += HASH_SIZE) this.appendLeafHash(concatenated.subarray(off, off + HASH_SIZE));
  }

  leafHashAt(index: number): Hash {
    if (!Number.isSafeInteger(index) || index < 0 || index >= this.n) throw new RangeError(`index ${index} outside the tree of size ${this.n}`);
    return this.levels[0]!.at(index);
  }

  /** Root of the tree of the first `size` entries (default: all); O(log n). */
  root(size: number = this.n): Hash {
    if (!Number.isSafeInteger(size) || size < 0 || size > this.n) throw new RangeError(`size ${size} outside 0..${this.n}`);
    if (size === 0) {
      const h = this.c.createHash('sha256');
      return h.digest();
    }
    return this.rangeHash(0, size);
  }

  /** RFC 9162 PATH(index, D[0:size]), leaf upwards. */
  inclusionProof(index: number, size: number): Hash[] {
    if (!Number.isSafeInteger(size) || size < 1 || size > this.n) throw new RangeError(`size ${size} outside 1..${this.n}`);
    if (!Number.isSafeInteger(index) || index < 0 || index >= size) throw new RangeError(`index ${index} outside 0..${size - 1}`);
    const proof: Hash[] = [];
    this.path(index, 0, size, proof);
    return proof;
  }

  /** RFC 9162 PROOF(from, D[0:to]); empty when from is 0 or from = to. */
  consistencyProof(from: number, to: number): Hash[] {
    if (!Number.isSafeInteger(to) || to < 0 || to > this.n) throw new RangeError(`size ${to} outside 0..${this.n}`);
    if (!Number.isSafeInteger(from) || from < 0 || from > to) throw new RangeError(`size ${from} outside 0..${to}`);
    const proof: Hash[] = [];
    if (from > 0 && from < to) this.subproof(from, 0, to, true, proof);
    return proof;
  }

  /**
   * tlog-tiles: the first `width` hashes of tile (level, index): tree level
   * 8·level, hashes index·256 … index·256+width-1, W×32 bytes.
   */
  tile(level: number, index: number, width: number): Uint8Array {
    if (!Number.isSafeInteger(level) || level < 0 || level > 63) throw new RangeError(`tile level ${level} outside 0..63`);
    if (!Number.isSafeInteger(index) || index < 0) throw new RangeError(`tile index ${index} is not a non-negative integer`);
    if (!Number.isSafeInteger(width) || width < 1 || width > TILE_WIDTH) throw new RangeError(`tile width ${width} outside 1..256`);
    const stored = this.levels[level * TILE_HEIGHT];
    const end = index * TILE_WIDTH + width;
    if (stored === undefined || end > stored.count) throw new RangeError(`tile ${level}/${index} of width ${width} needs more than the tree of size ${this.n}`);
    return stored.bytes.slice((end - width) * HASH_SIZE, end * HASH_SIZE);
  }

  /** Serialized image: magic ‖ uint64be size ‖ every non-empty level. */
  toImage(): Uint8Array {
    let total = IMAGE_HEADER;
    for (const level of this.levels) total += level.count * HASH_SIZE;
    const out = new Uint8Array(total);
    out.set(IMAGE_MAGIC, 0);
    new DataView(out.buffer).setBigUint64(IMAGE_MAGIC.length, BigInt(this.n));
    let off = IMAGE_HEADER;
    for (const level of this.levels) {
      out.set(level.bytes.subarray(0, level.count * HASH_SIZE), off);
      off += level.count * HASH_SIZE;
    }
    return out;
  }

  /** Inverse of toImage. Throws RangeError when the magic, size or any length does not fit; hashes are not checked. */
  static fromImage(c: CryptoBackend, image: Uint8Array): MerkleTree {
    if (image.length < IMAGE_HEADER) throw new RangeError('Merkle tree image shorter than its header');
    for (let i = 0; i < IMAGE_MAGIC.length; i++) if (image[i] !== IMAGE_MAGIC[i]) throw new RangeError('not a Merkle tree image (magic)');
    const big = new DataView(image.buffer, image.byteOffset, image.length).getBigUint64(IMAGE_MAGIC.length);
    if (big > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError('Merkle tree image size out of range');
    const size = Number(big);
    let expected = IMAGE_HEADER;
    for (let count = size; count > 0; count = Math.floor(count / 2)) expected += count * HASH_SIZE;
    if (image.length !== expected) throw new RangeError(`Merkle tree image of size ${size} is ${image.length} bytes, expected ${expected}`);
    const tree = new MerkleTree(c);
    tree.levels = [];
    let off = IMAGE_HEADER;
    for (let count = size; count > 0; count = Math.floor(count / 2)) {
      const level = new Level(count);
      level.bytes.set(image.subarray(off, off + count * HASH_SIZE));
      level.count = count;
      tree.levels.push(level);
      off += count * HASH_SIZE;
    }
    if (tree.levels.length === 0) tree.levels.push(new Level(1024));
    tree.n = size;
    return tree;
  }

  /** Stored hash of the complete subtree of 2^k entries starting at entry `start`. */
  private complete(k: number, start: number): Hash {
    return this.levels[k]!.at(start / 2 ** k);
  }

  /**
   * MTH(D[start:end]) for a node of the RFC 6962 tree (start a multiple of
   * the power of two >= end-start): its complete subtrees left to right,
   * folded right to left.
   */
  private rangeHash(start: number, end: number): Hash {
    let rest = end - start;
    let k = 0;
    while (2 ** (k + 1) <= rest) k++;
    if (2 ** k === rest) return this.complete(k, start);
    if (this.border.end !== end) this.border = { end, hashes: new Map() };
    const known = this.border.hashes.get(start);
    if (known !== undefined) return known.slice();
    const parts: Hash[] = [];
    let pos = start;
    for (; k >= 0 && rest > 0; k--) {
      const w = 2 ** k;
      if (rest >= w) {
        parts.push(this.complete(k, pos));
        pos += w;
        rest -= w;
      }
    }
    let acc = parts[parts.length - 1]!;
    if (parts.length === 1) return acc;
    for (let i = parts.length - 2; i >= 0; i--) acc = nodeHash(this.c, parts[i]!, acc);
    this.border.hashes.set(start, acc.slice());
    return acc;
  }

  // RFC 9162 2.1.3.1: PATH(m, D[n]) over the subtree [start, end).
  private path(m: number, start: number, end: number, out: Hash[]): void {
    const n = end - start;
    if (n === 1) return;
    const k = splitPoint(n);
    if (m < start + k) {
      this.path(m, start, start + k, out);
      out.push(this.rangeHash(start + k, end));
    } else {
      this.path(m, start + k, end, out);
      out.push(this.rangeHash(start, start + k));
    }
  }

  // RFC 9162 2.1.4.1: SUBPROOF(m, D[start:end], b), m counted from start.
  private subproof(m: number, start: number, end: number, b: boolean, out: Hash[]): void {
    const n = end - start;
    if (m === n) {
      if (!b) out.push(this.rangeHash(start, end));
      return;
    }
    const k = splitPoint(n);
    if (m <= k) {
      this.subproof(m, start, start + k, b, out);
      out.push(this.rangeHash(start + k, end));
    } else {
      this.subproof(m - k, start + k, end, false, out);
      out.push(this.rangeHash(start, start + k));
    }
  }
}

export type TileRef = { kind: 'hash'; level: number; index: number; width: number } | { kind: 'entries'; index: number; width: number };

const MAX_INDEX_GROUPS = 6; // up to 18 digits; the index must also be a safe integer
const LEVEL_RE = /^(0|[1-9][0-9]?)$/;
const WIDTH_RE = /^[1-9][0-9]{0,2}$/;
const GROUP_RE = /^[0-9]{3}$/;

/** tlog-tiles paths: parse `tile/<L>/<N>[.p/<W>]` and `tile/entries/<N>[.p/<W>]` (N in x-prefixed 3-digit groups). null when not a valid tile path. */
export function parseTilePath(path: string): TileRef | null {
  if (typeof path !== 'string' || path.length > 128) return null;
  const parts = path.split('/');
  if (parts[0] !== 'tile' || parts.length < 3) return null;
  let kind: 'hash' | 'entries';
  let level = 0;
  if (parts[1] === 'entries') kind = 'entries';
  else if (LEVEL_RE.test(parts[1]!) && Number(parts[1]) <= 63) {
    kind = 'hash';
    level = Number(parts[1]);
  } else return null;
  let groups = parts.slice(2);
  let width = TILE_WIDTH;
  // Partial: the last group ends in ".p" and is followed by the width.
  if (groups.length >= 2 && groups[groups.length - 2]!.endsWith('.p')) {
    const w = groups[groups.length - 1]!;
    if (!WIDTH_RE.test(w) || Number(w) > 255) return null;
    width = Number(w);
    groups = groups.slice(0, -1);
    groups[groups.length - 1] = groups[groups.length - 1]!.slice(0, -2);
  }
  if (groups.length < 1 || groups.length > MAX_INDEX_GROUPS) return null;
  let index = 0;
  for (let i = 0; i < groups.length; i++) {
    let g = groups[i]!;
    const last = i === groups.length - 1;
    if (!last) {
      if (g[0] !== 'x') return null;
      g = g.slice(1);
    }
    if (!GROUP_RE.test(g)) return null;
    // No leading zero groups: the first of several groups is not x000.
    if (i === 0 && !last && g === '000') return null;
    index = index * 1000 + Number(g);
  }
  if (!Number.isSafeInteger(index)) return null;
  return kind === 'hash' ? { kind, level, index, width } : { kind, index, width };
}

/** The tlog-tiles path of a tile or entry bundle; width 256 is a full tile (no `.p/`). Throws RangeError for values outside the spec. */
export function tilePath(t: TileRef): string {
  if (!Number.isSafeInteger(t.index) || t.index < 0) throw new RangeError(`tile index ${t.index} is not a non-negative integer`);
  if (!Number.isSafeInteger(t.width) || t.width < 1 || t.width > TILE_WIDTH) throw new RangeError(`tile width ${t.width} outside 1..256`);
  let head: string;
  if (t.kind === 'hash') {
    if (!Number.isSafeInteger(t.level) || t.level < 0 || t.level > 63) throw new RangeError(`tile level ${t.level} outside 0..63`);
    head = `tile/${t.level}`;
  } else {
    head = 'tile/entries';
  }
  const groups: string[] = [];
  let n = t.index;
  do {
    groups.unshift(String(n % 1000).padStart(3, '0'));
    n = Math.floor(n / 1000);
  } while (n > 0);
  const index = groups.map((g, i) => (i < groups.length - 1 ? 'x' + g : g)).join('/');
  return `${head}/${index}${t.width === TILE_WIDTH ? '' : `.p/${t.width}`}`;
}

/** tlog-tiles entry bundle: each entry as uint16be length ‖ bytes. Throws RangeError for an entry over 65535 bytes. */
export function entryBundle(entries: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const e of entries) {
    if (e.length > 0xffff) throw new RangeError(`entry of ${e.length} bytes does not fit a uint16 length`);
    total += 2 + e.length;
  }
  const out = new Uint8Array(total);
  let off = 0;
  for (const e of entries) {
    out[off] = e.length >> 8;
    out[off + 1] = e.length & 0xff;
    out.set(e, off + 2);
    off += 2 + e.length;
  }
  return out;
}
