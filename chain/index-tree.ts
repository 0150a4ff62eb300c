/**
 * The completeness index of the log (docs/spec/index.md): a crit-bit Merkle
 * tree keyed by SHA-256 of an artifact URL or a unit name, each leaf folding
 * the events of its key in chain order.
 * Owns: keys, event bytes, hashing, the tree in typed arrays (insert, lazy
 * rehash), per-key events, proofs (`prove`; checked in chain/index-proof.ts)
 * and the image (`toImage`/`fromImage`: no hash of a small subtree and no acc
 * in it, computed when first needed; docs/decisions/index-layout.md).
 * Trusts: the injected `CryptoBackend`'s sha256; the caller to add only
 * verified blocks, in chain order, and to resolve revoke targets.
 * Must hold: pure (no node: imports, runs in a browser); the root depends
 * only on the blocks added; `root()`/`prove()` always see current hashes (a
 * LAZY node's hash is computed before it is read).
 */
import type { Block } from './block.ts';
import type { CryptoBackend } from './crypto-backend.ts';
import { utf8 } from './encoding.ts';

const encoder = new TextEncoder();
import { indexFactsOf, type IndexFacts } from './index-facts.ts';

export const INDEX_VERSION = 'vouch-index/v1';
/** The checkpoint extension line's first word (docs/spec/index.md 5). */
export const INDEX_EXTENSION = 'vouch-index/v1';
export type KeyKind = 'url' | 'unit';

export type IndexEvent = { kind: 'endorse'; block: number; date: string; semver: string } | { kind: 'revoke'; block: number; target: number; date: string };

const KEY_PREFIX: Record<KeyKind, Uint8Array> = { url: utf8('vouch-index/v1 url\n'), unit: utf8('vouch-index/v1 unit\n') };
const E = 0x45; // 'E'
const R = 0x52; // 'R'
const NONE = 0xffffffff;
/** A node record (CompletenessIndex.node): its words and their offsets. */
const NS = 16;
const N_BIT = 0;
const N_LEFT = 1;
const N_RIGHT = 2;
/** N_DIRTY: 0 clean (hash current), 1 dirty (changed since its hash; so are its ancestors), LAZY. */
const N_DIRTY = 3;
/**
 * A node read back from an image without its hash (see `toImage`): not
 * current, but its ancestors' hashes are (computed from the true one before
 * the image was written). A leaf node in this state has no accumulator
 * either: its events are folded again before the acc is used.
 */
const LAZY = 2;
const N_HASH = 4;
/** A leaf record (CompletenessIndex.leaf): key (8 words), acc (8 words), count, first and last event, node. */
const LS = 20;
const L_KEY = 0;
const L_ACC = 8;
const L_COUNT = 16;
const L_HEAD = 17;
const L_TAIL = 18;
const L_NODE = 19;

export function sha256(c: CryptoBackend, data: Uint8Array): Uint8Array {
  if (c.sha256To) {
    const out = new Uint8Array(32);
    c.sha256To(data, out);
    return out;
  }
  if (c.digest) return c.digest('sha256', data);
  const h = c.createHash('sha256');
  h.update(data);
  return h.digest();
}

/** SHA-256 of `data` into `out` (32 bytes), without an allocation when the backend can. */
function sha256To(c: CryptoBackend, data: Uint8Array, out: Uint8Array): void {
  if (c.sha256To) c.sha256To(data, out);
  else out.set(sha256(c, data));
}

/** The tree key of a URL or unit name: SHA-256(prefix ‖ UTF-8 name). */
export function indexKey(c: CryptoBackend, kind: KeyKind, name: string): Uint8Array {
  const p = KEY_PREFIX[kind];
  const n = utf8(name);
  const buf = new Uint8Array(p.length + n.length);
  buf.set(p);
  buf.set(n, p.length);
  return sha256(c, buf);
}

function putU64(b: Uint8Array, off: number, v: number): void {
  const hi = Math.floor(v / 2 ** 32);
  const lo = v >>> 0;
  b[off] = hi >>> 24;
  b[off + 1] = (hi >>> 16) & 255;
  b[off + 2] = (hi >>> 8) & 255;
  b[off + 3] = hi & 255;
  b[off + 4] = lo >>> 24;
  b[off + 5] = (lo >>> 16) & 255;
  b[off + 6] = (lo >>> 8) & 255;
  b[off + 7] = lo & 255;
}

export function putU32(b: Uint8Array, off: number, v: number): void {
  b[off] = v >>> 24;
  b[off + 1] = (v >>> 16) & 255;
  b[off + 2] = (v >>> 8) & 255;
  b[off + 3] = v & 255;
}

function putAscii(b: Uint8Array, off: number, s: string): void {
  for (let i = 0; i < s.length; i++) b[off + i] = s.charCodeAt(i);
}

/** The bytes of one event (docs/spec/index.md 3). */
export function encodeEvent(ev: IndexEvent): Uint8Array {
  if (ev.date.length !== 10) throw new TypeError(`index: effective date ${JSON.stringify(ev.date)} is not YYYY-MM-DD`);
  if (ev.kind === 'revoke') {
    const b = new Uint8Array(27);
    b[0] = R;
    putU64(b, 1, ev.block);
    putU64(b, 9, ev.target);
    putAscii(b, 17, ev.date);
    return b;
  }
  const s = utf8(ev.semver);
  if (s.length > 0xffff) throw new TypeError('index: semver longer than 65535 bytes');
  const b = new Uint8Array(21 + s.length);
  b[0] = E;
  putU64(b, 1, ev.block);
  putAscii(b, 9, ev.date);
  b[19] = s.length >>> 8;
  b[20] = s.length & 255;
  b.set(s, 21);
  return b;
}

/** acc' = SHA-256(0x02 ‖ acc ‖ event). */
export function foldEvent(c: CryptoBackend, acc: Uint8Array, ev: Uint8Array): Uint8Array {
  const buf = new Uint8Array(33 + ev.length);
  buf[0] = 0x02;
  buf.set(acc, 1);
  buf.set(ev, 33);
  return sha256(c, buf);
}

const leafBuf = new Uint8Array(69);
/** SHA-256(0x00 ‖ key ‖ be32 count ‖ acc). */
export function leafHash(c: CryptoBackend, key: Uint8Array, count: number, acc: Uint8Array): Uint8Array {
  leafBuf[0] = 0x00;
  leafBuf.set(key, 1);
  putU32(leafBuf, 33, count);
  leafBuf.set(acc, 37);
  return sha256(c, c.digest ? leafBuf : leafBuf.slice());
}

const nodeBuf = new Uint8Array(66);
/** SHA-256(0x01 ‖ u8 bit ‖ left ‖ right). */
export function nodeHash(c: CryptoBackend, bit: number, left: Uint8Array, right: Uint8Array): Uint8Array {
  nodeBuf[0] = 0x01;
  nodeBuf[1] = bit;
  nodeBuf.set(left, 2);
  nodeBuf.set(right, 34);
  return sha256(c, c.digest ? nodeBuf : nodeBuf.slice());
}

/** The committed index root: SHA-256(0x03 ‖ "vouch-index/v1" ‖ be64 size ‖ trie root ‖ be32 n ‖ n × (be64 from ‖ be64 to)). */
const INDEX_VERSION_BYTES = utf8(INDEX_VERSION);
export function indexRoot(c: CryptoBackend, size: number, trieRoot: Uint8Array, voids: readonly (readonly [number, number])[]): Uint8Array {
  const v = INDEX_VERSION_BYTES;
  const buf = new Uint8Array(1 + v.length + 8 + 32 + 4 + 16 * voids.length);
  let o = 0;
  buf[o++] = 0x03;
  buf.set(v, o);
  o += v.length;
  putU64(buf, o, size);
  o += 8;
  buf.set(trieRoot, o);
  o += 32;
  putU32(buf, o, voids.length);
  o += 4;
  for (const [from, to] of voids) {
    putU64(buf, o, from);
    putU64(buf, o + 8, to);
    o += 16;
  }
  return sha256(c, buf);
}

export function keyBit(key: Uint8Array, off: number, bit: number): number {
  return (key[off + (bit >> 3)]! >> (7 - (bit & 7))) & 1;
}

export const EMPTY_TRIE = new Uint8Array(32);

/**
 * The index as of the blocks added so far. Nodes and leaves live in typed
 * arrays of records (no object per key): 64 B a node, 80 B a leaf plus its
 * events (docs/decisions/index-layout.md).
 */
export class CompletenessIndex {
  private readonly c: CryptoBackend;
  /**
   * Nodes, one record of NS words each (a cache line): bit (>= 0 interior,
   * -1 leaf), left child (a leaf's slot), right child, dirty, hash (8 words,
   * the digest's bytes as they are). A descent and a rehash touch one line a
   * node, not one in each of five arrays.
   */
  private node = new Int32Array(1024 * NS);
  private nodeBytes = new Uint8Array(this.node.buffer);
  private nodes = 0;
  private rootNode = -1;
  /** Leaves, one record of LS words each (key and acc as their bytes are). */
  private leaf = new Uint32Array(512 * LS);
  private leafBytes = new Uint8Array(this.leaf.buffer);
  private leaves = 0;
  // events: records of be32 next ‖ u16 length ‖ bytes
  private arena = new Uint8Array(1 << 16);
  private arenaUsed = 0;
  // blocks: for each endorse block, the leaf slots it touched (CSR)
  private blockStart = new Int32Array(1025);
  private blockLeaves = new Int32Array(1024);
  private blockLeafCount = 0;
  private blocks = 0;
  private voidList: [number, number][] = [];
  private readonly path = new Int32Array(260);
  /** The journal's saved hashes (one journal lives at a time: a trial, or the trial left pending). */
  private cleanBuf = new Uint32Array(64 * 8);
  /**
   * Hash inputs laid out so that every 32-byte field starts on a word:
   * a node (0x01 ‖ bit ‖ left ‖ right) from byte 2, a leaf (0x00 ‖ key ‖
   * count ‖ acc) from byte 3, a fold (0x02 ‖ acc ‖ event) from byte 3.
   */
  private readonly scratch = new Uint8Array(72);
  private readonly scratch32 = new Uint32Array(this.scratch.buffer);
  private readonly nodeMsg = this.scratch.subarray(2, 68);
  private readonly leafMsg = this.scratch.subarray(3, 72);
  private readonly out = new Uint8Array(32);
  private readonly out32 = new Uint32Array(this.out.buffer);
  private readonly keyOut = new Uint8Array(32);
  private keyBuf = new Uint8Array(512);
  private foldBuf = new Uint8Array(128);
  private foldBuf32 = new Uint32Array(this.foldBuf.buffer);

  /** Re-makes the byte views after node or leaf was replaced. */
  private views(): void {
    this.nodeBytes = new Uint8Array(this.node.buffer, this.node.byteOffset, this.node.byteLength);
    this.leafBytes = new Uint8Array(this.leaf.buffer, this.leaf.byteOffset, this.leaf.byteLength);
  }

  /** Unit keys computed lately (a unit's versions follow each other); cleared when full. */
  private readonly unitKeys = new Map<string, Uint8Array>();

  /** indexKey, into a buffer of this index (valid until the next call) or from `unitKeys`; never written to by the caller. */
  private keyOf(kind: KeyKind, name: string): Uint8Array {
    if (kind === 'unit') {
      const known = this.unitKeys.get(name);
      if (known !== undefined) return known;
    }
    const p = KEY_PREFIX[kind];
    // UTF-8 is at most 3 bytes a UTF-16 unit
    if (p.length + 3 * name.length > this.keyBuf.length) this.keyBuf = new Uint8Array(p.length + 3 * name.length + 64);
    const buf = this.keyBuf;
    buf.set(p);
    const { written } = encoder.encodeInto(name, buf.subarray(p.length));
    sha256To(this.c, buf.subarray(0, p.length + written), this.keyOut);
    if (kind === 'unit') {
      if (this.unitKeys.size >= 4096) this.unitKeys.clear();
      this.unitKeys.set(name, this.keyOut.slice());
    }
    return this.keyOut;
  }
  /** While `rootWith` tries blocks: what to put back. */
  private journal: {
    nodes: number;
    leaves: number;
    arenaUsed: number;
    blocks: number;
    blockLeafCount: number;
    voids: number;
    rootNode: number;
    saved: Map<number, { count: number; acc: Uint32Array; head: number; tail: number }>;
    /** (parent, 0 left | 1 right, old child) triples. */
    links: number[];
    /** Nodes that were clean when the trial first touched them, and their hashes then (32 B each, in order). */
    cleanNodes: number[];
    /** Nodes that were LAZY when the trial first touched them (LAZY again on rollback). */
    lazyNodes: number[];
    cleanHashes: Uint32Array;
  } | null = null;
  /**
   * A trial `rootWith` left applied (its journal kept) so that the writer's
   * commit of the same blocks (`rootWith(blocks, …, keep)` on the committed
   * note) takes it instead of adding them twice; anything else rolls it back
   * first (`settle`).
   */
  private pending: { journal: NonNullable<CompletenessIndex['journal']>; blocks: string; root: Uint8Array } | null = null;

  constructor(c: CryptoBackend) {
    this.c = c;
  }

  /** Blocks added (a pending trial's not counted). */
  get size(): number {
    return this.pending === null ? this.blocks : this.pending.journal.blocks;
  }

  get keyCount(): number {
    this.settle();
    return this.leaves;
  }

  voids(): readonly [number, number][] {
    this.settle();
    return this.voidList;
  }

  /** Rolls back a trial left pending (nothing when there is none). */
  private settle(): void {
    const p = this.pending;
    if (p === null) return;
    this.pending = null;
    this.rollback(p.journal);
  }

  /**
   * Adds the next verified block. `targetIndex` resolves a revoke's
   * target_hash to its block index (-1 when no block of the log has it).
   */
  addBlock(block: Block, targetIndex: (recordHash: string) => number): void {
    this.settle();
    if (block.index !== this.blocks) throw new TypeError(`completeness index expects block ${this.blocks}, got ${block.index}`);
    this.addFacts(indexFactsOf(block), targetIndex);
  }

  /**
   * Adds the facts of the next verified block (chain/index-facts.ts). Without
   * `targetIndex` a revoke's target is looked up among the endorse blocks
   * this index was given (a map it then keeps: ~100 B a block).
   */
  addFacts(f: IndexFacts, targetIndex?: (recordHash: string) => number): void {
    this.settle();
    const i = this.blocks;
    const touched: number[] = [];
    if (f.intent === 'endorse') {
      const { names, semvers } = f;
      if (names?.length !== f.urls.length || semvers?.length !== f.urls.length)
        throw new TypeError(`completeness index: the facts of block ${i} lack names or semvers`);
      for (let k = 0; k < f.urls.length; k++) {
        const ev = encodeEvent({ kind: 'endorse', block: i, date: f.effectiveDate, semver: semvers[k]! });
        touched.push(this.append(this.keyOf('url', f.urls[k]!), ev));
        touched.push(this.append(this.keyOf('unit', names[k]!), ev));
      }
      if (targetIndex === undefined) this.endorseHashes.set(f.recordHash, i);
    } else if (f.intent === 'revoke' && f.target !== null) {
      if (targetIndex === undefined && this.fromImageOnly) throw new TypeError('completeness index read from an image: a revoke needs targetIndex');
      const t = targetIndex !== undefined ? targetIndex(f.target) : (this.endorseHashes.get(f.target) ?? -1);
      if (t >= 0 && t < i) {
        const ev = encodeEvent({ kind: 'revoke', block: i, target: t, date: f.effectiveDate });
        const seen = new Set<number>();
        for (let k = this.blockStart[t]!; k < this.blockStart[t + 1]!; k++) {
          const leaf = this.blockLeaves[k]!;
          if (seen.has(leaf)) continue;
          seen.add(leaf);
          this.appendToLeaf(leaf, ev);
          this.markPath(leaf);
        }
      }
    } else if (f.voids !== null) {
      this.voidList.push(f.voids);
    }
    this.recordBlock(touched);
  }

  private readonly endorseHashes = new Map<string, number>();

  private recordBlock(touched: number[]): void {
    if (this.blocks + 2 > this.blockStart.length) this.blockStart = grow32(this.blockStart, more(this.blockStart.length));
    if (this.blockLeafCount + touched.length > this.blockLeaves.length)
      this.blockLeaves = grow32(this.blockLeaves, Math.max(more(this.blockLeaves.length), this.blockLeafCount + touched.length));
    for (const l of touched) this.blockLeaves[this.blockLeafCount++] = l;
    this.blocks++;
    this.blockStart[this.blocks] = this.blockLeafCount;
  }

  /** The trie root (recomputes what changed since the last call). */
  trieRoot(): Uint8Array {
    this.settle();
    if (this.rootNode < 0) return EMPTY_TRIE;
    this.rehash(this.rootNode);
    return this.hashOf(this.rootNode);
  }

  /** The committed index root at the current size (docs/spec/index.md 4). */
  root(): Uint8Array {
    this.settle();
    return indexRoot(this.c, this.blocks, this.trieRoot(), this.voidList);
  }

  /** The events of a key, in chain order ([] when absent). */
  events(kind: KeyKind, name: string): IndexEvent[] {
    this.settle();
    const key = indexKey(this.c, kind, name);
    const n = this.find(key);
    if (n < 0) return [];
    const out: IndexEvent[] = [];
    for (let r = this.leaf[this.node[n * NS + N_LEFT]! * LS + L_HEAD]!; r !== NONE; r = readU32(this.arena, r)) {
      out.push(decodeEventAt(this.arena, r + 6));
    }
    return out;
  }

  /** A proof for the key at the current size (docs/spec/index.md 6). */
  prove(kind: KeyKind, name: string): Uint8Array {
    this.settle();
    const key = indexKey(this.c, kind, name);
    if (this.rootNode >= 0) this.rehash(this.rootNode);
    const parts: Uint8Array[] = [];
    const head = new Uint8Array(10);
    head[0] = 0x01;
    putU64(head, 2, this.blocks);
    parts.push(head);
    if (this.rootNode < 0) {
      head[1] = 0x00;
      parts.push(new Uint8Array([0]));
    } else {
      const steps: number[] = [];
      const nd = this.node;
      let n = this.rootNode;
      while (nd[n * NS + N_BIT]! >= 0) {
        const b = nd[n * NS + N_BIT]!;
        const goRight = keyBit(key, 0, b) === 1;
        const sibling = nd[n * NS + (goRight ? N_LEFT : N_RIGHT)]!;
        // a sibling read back without its hash (LAZY) gets it now: its subtree's few hashes, once
        if (nd[sibling * NS + N_DIRTY] !== 0) this.rehash(sibling);
        steps.push(b, sibling);
        n = nd[n * NS + (goRight ? N_RIGHT : N_LEFT)]!;
      }
      if (nd[n * NS + N_DIRTY] !== 0) this.rehash(n); // the leaf's acc (an absence proof shows it)
      const pathBytes = new Uint8Array(1 + 33 * (steps.length / 2));
      pathBytes[0] = steps.length / 2;
      for (let i = 0; i < steps.length; i += 2) {
        pathBytes[1 + 33 * (i / 2)] = steps[i]!;
        const h = (steps[i + 1]! * NS + N_HASH) * 4;
        pathBytes.set(this.nodeBytes.subarray(h, h + 32), 2 + 33 * (i / 2));
      }
      parts.push(pathBytes);
      const s = nd[n * NS + N_LEFT]!;
      const lb = this.leafBytes;
      if (equalAt(lb, s * LS * 4, key)) {
        head[1] = 0x01;
        const count = new Uint8Array(4);
        putU32(count, 0, this.leaf[s * LS + L_COUNT]!);
        parts.push(count);
        for (let r = this.leaf[s * LS + L_HEAD]!; r !== NONE; r = readU32(this.arena, r)) {
          parts.push(this.arena.subarray(r + 6, r + 6 + readU16(this.arena, r + 4)));
        }
      } else {
        head[1] = 0x02;
        const leaf = new Uint8Array(68);
        const o = s * LS * 4;
        leaf.set(lb.subarray(o + L_KEY * 4, o + L_KEY * 4 + 32));
        putU32(leaf, 32, this.leaf[s * LS + L_COUNT]!);
        leaf.set(lb.subarray(o + L_ACC * 4, o + L_ACC * 4 + 32), 36);
        parts.push(leaf);
      }
    }
    const v = new Uint8Array(4 + 16 * this.voidList.length);
    putU32(v, 0, this.voidList.length);
    this.voidList.forEach(([from, to], i) => {
      putU64(v, 4 + 16 * i, from);
      putU64(v, 12 + 16 * i, to);
    });
    parts.push(v);
    let total = 0;
    for (const p of parts) total += p.length;
    const out = new Uint8Array(total);
    let o = 0;
    for (const p of parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  }

  // ------------------------------------------------------------ the tree

  private find(key: Uint8Array): number {
    let n = this.rootNode;
    if (n < 0) return -1;
    const nd = this.node;
    for (let b = nd[n * NS + N_BIT]!; b >= 0; b = nd[n * NS + N_BIT]!) n = nd[n * NS + N_LEFT + keyBit(key, 0, b)]!;
    return equalAt(this.leafBytes, nd[n * NS + N_LEFT]! * LS * 4, key) ? n : -1;
  }

  /** Appends an event to the key's leaf (made if new); returns the leaf slot. */
  private append(key: Uint8Array, ev: Uint8Array): number {
    let n = this.rootNode;
    if (n < 0) {
      const leaf = this.newLeaf(key);
      this.rootNode = this.newLeafNode(leaf);
      this.appendToLeaf(leaf, ev);
      return leaf;
    }
    let depth = 0;
    const path = this.path;
    const nd = this.node;
    for (let b = nd[n * NS + N_BIT]!; b >= 0; b = nd[n * NS + N_BIT]!) {
      path[depth++] = n;
      n = nd[n * NS + N_LEFT + keyBit(key, 0, b)]!;
    }
    const s = nd[n * NS + N_LEFT]!;
    const crit = firstDiff(this.leafBytes, s * LS * 4, key);
    if (crit < 0) {
      for (let i = 0; i < depth; i++) this.touch(path[i]!);
      this.appendToLeaf(s, ev);
      return s;
    }
    const leaf = this.newLeaf(key);
    const ln = this.newLeafNode(leaf);
    // insertion point: the first node on the path whose bit is beyond crit (bits grow down the path)
    let parent = -1;
    let d = 0;
    while (d < depth && this.node[path[d]! * NS + N_BIT]! < crit) {
      parent = path[d++]!;
      this.touch(parent);
    }
    n = d < depth ? path[d]! : n;
    const inner = this.newNode();
    const m = this.node; // newNode may have grown it
    m[inner * NS + N_BIT] = crit;
    if (keyBit(key, 0, crit) === 1) {
      m[inner * NS + N_LEFT] = n;
      m[inner * NS + N_RIGHT] = ln;
    } else {
      m[inner * NS + N_LEFT] = ln;
      m[inner * NS + N_RIGHT] = n;
    }
    if (parent < 0) this.rootNode = inner;
    else {
      const side = m[parent * NS + N_LEFT] === n ? 0 : 1;
      this.journal?.links.push(parent, side, n);
      m[parent * NS + N_LEFT + side] = inner;
    }
    this.appendToLeaf(leaf, ev);
    return leaf;
  }

  private appendToLeaf(slot: number, ev: Uint8Array): void {
    const j = this.journal;
    const lf = this.leaf;
    const o = slot * LS;
    if (this.node[lf[o + L_NODE]! * NS + N_DIRTY] === LAZY) this.refold(slot);
    if (j !== null && slot < j.leaves && !j.saved.has(slot)) {
      j.saved.set(slot, { count: lf[o + L_COUNT]!, acc: lf.slice(o + L_ACC, o + L_ACC + 8), head: lf[o + L_HEAD]!, tail: lf[o + L_TAIL]! });
    }
    this.fold(o, ev);
    lf[o + L_COUNT]!++;
    const need = this.arenaUsed + 6 + ev.length;
    if (need > this.arena.length) {
      const a = new Uint8Array(Math.max(need, more(this.arena.length)));
      a.set(this.arena.subarray(0, this.arenaUsed));
      this.arena = a;
    }
    const r = this.arenaUsed;
    putU32(this.arena, r, NONE);
    this.arena[r + 4] = ev.length >>> 8;
    this.arena[r + 5] = ev.length & 255;
    this.arena.set(ev, r + 6);
    this.arenaUsed = need;
    if (lf[o + L_TAIL] === NONE) lf[o + L_HEAD] = r;
    else putU32(this.arena, lf[o + L_TAIL]!, r);
    lf[o + L_TAIL] = r;
    // the path above the leaf is marked by the caller (its descent, or markPath)
    this.touch(lf[o + L_NODE]!);
  }

  /** acc' = SHA-256(0x02 ‖ acc ‖ event), as foldEvent, on the leaf record at word `o`. */
  private fold(o: number, ev: Uint8Array): void {
    const lf = this.leaf;
    if (36 + ev.length > this.foldBuf.length) {
      this.foldBuf = new Uint8Array(36 + ev.length + 64);
      this.foldBuf32 = new Uint32Array(this.foldBuf.buffer);
    }
    const fb = this.foldBuf;
    const f32 = this.foldBuf32;
    fb[3] = 0x02;
    for (let w = 0; w < 8; w++) f32[1 + w] = lf[o + L_ACC + w]!;
    fb.set(ev, 36);
    sha256To(this.c, fb.subarray(3, 36 + ev.length), this.out);
    for (let w = 0, o32 = this.out32; w < 8; w++) lf[o + L_ACC + w] = o32[w]!;
  }

  /** The acc of a leaf read back without it (its node LAZY): its events folded again from zero. */
  private refold(slot: number): void {
    const o = slot * LS;
    const lf = this.leaf;
    lf.fill(0, o + L_ACC, o + L_ACC + 8);
    const a = this.arena;
    for (let r = lf[o + L_HEAD]!; r !== NONE; r = readU32(a, r)) this.fold(o, a.subarray(r + 6, r + 6 + readU16(a, r + 4)));
  }

  private touch(n: number): void {
    const j = this.journal;
    if (j !== null) {
      if (n < j.nodes && this.node[n * NS + N_DIRTY] === LAZY) j.lazyNodes.push(n);
      else if (n < j.nodes && this.node[n * NS + N_DIRTY] === 0) {
        const k = j.cleanNodes.length;
        if (8 * (k + 1) > j.cleanHashes.length) {
          const more32 = new Uint32Array(16 * (k + 1));
          more32.set(j.cleanHashes);
          j.cleanHashes = more32;
          this.cleanBuf = more32;
        }
        const nd = this.node;
        const c32 = j.cleanHashes;
        for (let w = 0, o = n * NS + N_HASH, q = 8 * k; w < 8; w++) c32[q + w] = nd[o + w]!;
        j.cleanNodes.push(n);
      }
    }
    this.node[n * NS + N_DIRTY] = 1;
  }

  /**
   * The index root once `blocks` (the next blocks of the log) are added;
   * the index is left as it was. For a writer that signs the checkpoint of
   * blocks it has yet to commit, and a mirror checking a remote's note
   * before it takes its blocks. When `keep` answers true for that root,
   * the blocks stay added instead.
   */
  rootWith(blocks: readonly Block[], targetIndex?: (recordHash: string) => number, keep?: (root: Uint8Array) => boolean): Uint8Array {
    const ids = blocks.map((b) => `${b.index}:${b.record_hash}`).join(' ');
    const p = this.pending;
    if (p !== null && p.blocks === ids) {
      // the writer's commit of the blocks it tried: taken as they are, or rolled back
      if (keep === undefined) return p.root.slice();
      this.pending = null;
      if (!keep(p.root)) this.rollback(p.journal);
      else if (targetIndex === undefined) this.rememberEndorsements(blocks);
      return p.root.slice();
    }
    this.settle();
    if (blocks.length === 0) return this.root();
    // every hash current: only what the trial touches is rehashed, and restored on rollback
    if (this.rootNode >= 0) this.rehash(this.rootNode);
    this.journal = {
      nodes: this.nodes,
      leaves: this.leaves,
      arenaUsed: this.arenaUsed,
      blocks: this.blocks,
      blockLeafCount: this.blockLeafCount,
      voids: this.voidList.length,
      rootNode: this.rootNode,
      saved: new Map(),
      links: [],
      cleanNodes: [],
      lazyNodes: [],
      cleanHashes: this.cleanBuf,
    };
    const j = this.journal;
    let outcome: 'rollback' | 'keep' | 'pending' = 'rollback';
    try {
      const pendingIdx = new Map(blocks.map((b) => [b.record_hash, b.index]));
      const known = targetIndex ?? ((h: string) => this.endorseHashes.get(h) ?? -1);
      for (const b of blocks) this.addBlock(b, (h) => pendingIdx.get(h) ?? known(h));
      this.journal = null; // root() below must not settle the trial it is part of
      const root = this.rootNow();
      if (keep === undefined) {
        this.pending = { journal: j, blocks: ids, root: root.slice() };
        outcome = 'pending';
      } else if (keep(root)) {
        outcome = 'keep';
        if (targetIndex === undefined) this.rememberEndorsements(blocks);
      }
      return root;
    } finally {
      this.journal = null;
      if (outcome === 'rollback') this.rollback(j);
    }
  }

  /**
   * Keeps the pending trial when it is of exactly the blocks `from`,
   * `from + 1`, ... with these record hashes (a writer whose chain index took
   * the committed blocks first); true when kept, false (nothing changed)
   * otherwise.
   */
  takePending(from: number, recordHashes: readonly string[]): boolean {
    const p = this.pending;
    if (p === null || p.journal.blocks !== from) return false;
    if (p.blocks !== recordHashes.map((h, k) => `${from + k}:${h}`).join(' ')) return false;
    this.pending = null;
    return true;
  }

  /** Kept blocks whose revoke targets the index looks up itself (built without `targetIndex`). */
  private rememberEndorsements(blocks: readonly Block[]): void {
    for (const b of blocks) if (b.payload.intent === 'endorse') this.endorseHashes.set(b.record_hash, b.index);
  }

  /** The root without settling (inside a trial). */
  private rootNow(): Uint8Array {
    let t: Uint8Array = EMPTY_TRIE;
    if (this.rootNode >= 0) {
      this.rehash(this.rootNode);
      t = this.hashOf(this.rootNode);
    }
    return indexRoot(this.c, this.blocks, t, this.voidList);
  }

  private rollback(j: NonNullable<CompletenessIndex['journal']>): void {
    for (let k = j.links.length - 3; k >= 0; k -= 3) {
      this.node[j.links[k]! * NS + N_LEFT + j.links[k + 1]!] = j.links[k + 2]!;
    }
    this.rootNode = j.rootNode;
    for (const [slot, v] of j.saved) {
      const o = slot * LS;
      this.leaf[o + L_COUNT] = v.count;
      this.leaf.set(v.acc, o + L_ACC);
      this.leaf[o + L_HEAD] = v.head;
      this.leaf[o + L_TAIL] = v.tail;
      if (v.tail !== NONE) putU32(this.arena, v.tail, NONE);
    }
    this.nodes = j.nodes;
    this.leaves = j.leaves;
    this.arenaUsed = j.arenaUsed;
    this.blocks = j.blocks;
    this.blockLeafCount = j.blockLeafCount;
    this.voidList.length = j.voids;
    // every node was clean before the trial: the ones it touched get their hashes back
    for (let k = 0; k < j.cleanNodes.length; k++) {
      const n = j.cleanNodes[k]!;
      for (let w = 0; w < 8; w++) this.node[n * NS + N_HASH + w] = j.cleanHashes[8 * k + w]!;
      this.node[n * NS + N_DIRTY] = 0;
    }
    for (const n of j.lazyNodes) this.node[n * NS + N_DIRTY] = LAZY;
  }

  /** Marks every node from the root to the leaf dirty (a revoke's leaves are found by slot, not by descent). */
  private markPath(leaf: number): void {
    const key = this.leafBytes.subarray(leaf * LS * 4, leaf * LS * 4 + 32);
    let n = this.rootNode;
    for (let b = this.node[n * NS + N_BIT]!; b >= 0; b = this.node[n * NS + N_BIT]!) {
      this.touch(n);
      n = this.node[n * NS + N_LEFT + keyBit(key, 0, b)]!;
    }
  }

  private newLeaf(key: Uint8Array): number {
    if (this.leaves * LS === this.leaf.length) {
      this.leaf = grow32u(this.leaf, more(this.leaves) * LS);
      this.views();
    }
    const s = this.leaves++;
    const o = s * LS;
    this.leafBytes.set(key, (o + L_KEY) * 4);
    this.leaf.fill(0, o + L_ACC, o + L_ACC + 8); // a slot a rolled-back trial used
    this.leaf[o + L_COUNT] = 0;
    this.leaf[o + L_HEAD] = NONE;
    this.leaf[o + L_TAIL] = NONE;
    return s;
  }

  private newLeafNode(slot: number): number {
    const n = this.newNode();
    this.node[n * NS + N_BIT] = -1;
    this.node[n * NS + N_LEFT] = slot;
    this.leaf[slot * LS + L_NODE] = n;
    return n;
  }

  private newNode(): number {
    if (this.nodes * NS === this.node.length) {
      this.node = grow32(this.node, more(this.nodes) * NS);
      this.views();
    }
    const n = this.nodes++;
    this.node[n * NS + N_DIRTY] = 1;
    return n;
  }

  /** As leafHash / nodeHash, with 8-word copies into the scratch and the digest written in place. */
  private rehash(n: number): void {
    let nd = this.node;
    const o = n * NS;
    if (nd[o + N_DIRTY] === 0) return;
    const sc = this.scratch32;
    const bit = nd[o + N_BIT]!;
    if (bit < 0) {
      const q = nd[o + N_LEFT]! * LS;
      if (nd[o + N_DIRTY] === LAZY) this.refold(q / LS);
      const lf = this.leaf;
      this.scratch[3] = 0x00;
      for (let w = 0; w < 8; w++) {
        sc[1 + w] = lf[q + L_KEY + w]!;
        sc[10 + w] = lf[q + L_ACC + w]!;
      }
      putU32(this.scratch, 36, lf[q + L_COUNT]!);
      sha256To(this.c, this.leafMsg, this.out);
    } else {
      const lo = nd[o + N_LEFT]! * NS;
      const ro = nd[o + N_RIGHT]! * NS;
      if (nd[lo + N_DIRTY] !== 0) this.rehash(lo / NS);
      if (nd[ro + N_DIRTY] !== 0) this.rehash(ro / NS);
      nd = this.node;
      this.scratch[2] = 0x01;
      this.scratch[3] = bit;
      for (let w = 0; w < 8; w++) {
        sc[1 + w] = nd[lo + N_HASH + w]!;
        sc[9 + w] = nd[ro + N_HASH + w]!;
      }
      sha256To(this.c, this.nodeMsg, this.out);
    }
    const o32 = this.out32;
    for (let w = 0; w < 8; w++) nd[o + N_HASH + w] = o32[w]!;
    nd[o + N_DIRTY] = 0;
  }

  /** The 32 bytes of node n's hash (a copy). */
  private hashOf(n: number): Uint8Array {
    const h = (n * NS + N_HASH) * 4;
    return this.nodeBytes.slice(h, h + 32);
  }

  /** Every node under the root in post-order (children before their parent), and the leaves under each node (by node). */
  private postOrder(): { order: Int32Array; sizes: Int32Array } {
    const n = this.nodes;
    const nd = this.node;
    const order = new Int32Array(n);
    const sizes = new Int32Array(n);
    let m = 0;
    const stack: number[] = this.rootNode < 0 ? [] : [this.rootNode];
    while (stack.length > 0) {
      const k = stack[stack.length - 1]!;
      const o = k * NS;
      if (nd[o + N_BIT]! < 0 || sizes[k] === -1) {
        sizes[k] = nd[o + N_BIT]! < 0 ? 1 : sizes[nd[o + N_LEFT]!]! + sizes[nd[o + N_RIGHT]!]!;
        order[m++] = k;
        stack.pop();
      } else {
        sizes[k] = -1;
        stack.push(nd[o + N_RIGHT]!, nd[o + N_LEFT]!);
      }
    }
    if (m !== n) throw new Error(`completeness index: ${m} of ${n} nodes under the root`);
    return { order, sizes };
  }

  /**
   * The index as a byte image (a local cache in host byte order, not a
   * format of record): the gateway's warm start and the offline writers read
   * it back with `fromImage` instead of re-reading every block. It holds
   * the trie's shape (nodes in post-order), the keys, each key's events (the
   * arena and each list's head), the voids, and the hashes of the nodes with
   * more than `IMAGE_HASH_LEAVES` leaves under them. Left out and derived on
   * reading, without hashing: each leaf's count, last event and node, and
   * which leaves each block touched (from the endorse events). Left out and
   * computed when first needed (LAZY): the other nodes' hashes and every
   * leaf's acc; a proof's siblings are such subtrees, a few dozen hashes
   * each, once (bench/RESULTS.md "Completeness index image, version 2, at
   * 1M"). Revoke targets looked up without a `targetIndex` (addFacts) are
   * not in it: an index read back needs `targetIndex`.
   */
  toImage(): Uint8Array {
    this.root();
    const n = this.nodes;
    const l = this.leaves;
    // the nodes in post-order (children first), numbered anew: a reader sees each child before its parent
    const { order, sizes } = this.postOrder();
    const renumbered = new Int32Array(n);
    for (let j = 0; j < n; j++) renumbered[order[j]!] = j;
    const bit = new Int16Array(n);
    const left = new Int32Array(n);
    const right = new Int32Array(n);
    const nd = this.node;
    let stored = 0;
    for (let j = 0; j < n; j++) {
      const o = order[j]! * NS;
      bit[j] = nd[o + N_BIT]!;
      left[j] = bit[j]! < 0 ? nd[o + N_LEFT]! : renumbered[nd[o + N_LEFT]!]!;
      right[j] = bit[j]! < 0 ? nd[o + N_RIGHT]! : renumbered[nd[o + N_RIGHT]!]!;
      if (sizes[order[j]!]! > IMAGE_HASH_LEAVES) stored++;
    }
    const hash = new Int32Array(stored * 8);
    for (let j = 0, q = 0; j < n; j++) {
      const k = order[j]!;
      if (sizes[k]! <= IMAGE_HASH_LEAVES) continue;
      if (this.node[k * NS + N_DIRTY] !== 0) this.rehash(k);
      for (let w = 0, o = k * NS + N_HASH; w < 8; w++) hash[q++] = this.node[o + w]!;
    }
    const keys = new Uint32Array(l * 8);
    const heads = new Uint32Array(l);
    const lf = this.leaf;
    for (let k = 0, o = 0; k < l; k++, o += LS) {
      for (let w = 0; w < 8; w++) keys[8 * k + w] = lf[o + L_KEY + w]!;
      heads[k] = lf[o + L_HEAD]!;
    }
    const head = new Uint32Array([IMAGE_MAGIC, IMAGE_VERSION, n, n, l, this.arenaUsed, this.blocks, this.voidList.length, stored]);
    const parts: ArrayBufferView[] = [
      head,
      bit,
      left,
      right,
      hash,
      keys,
      heads,
      this.arena.subarray(0, this.arenaUsed),
      new Float64Array(this.voidList.flat()),
    ];
    let total = 0;
    for (const p of parts) total += pad8(p.byteLength);
    const out = new Uint8Array(total);
    let o = 0;
    for (const p of parts) {
      out.set(new Uint8Array(p.buffer, p.byteOffset, p.byteLength), o);
      o += pad8(p.byteLength);
    }
    return out;
  }

  /** An index read back from `toImage`; null when the bytes are not a whole image of this version. */
  static fromImage(c: CryptoBackend, image: Uint8Array): CompletenessIndex | null {
    if (image.byteLength < 40) return null;
    const a = image.byteOffset % 8 === 0 ? image : image.slice();
    const h = new Uint32Array(a.buffer, a.byteOffset, 9);
    const [magic, version, n, rootPlus1, l, arenaUsed, blocks, voids, stored] = h as unknown as number[];
    if (magic !== IMAGE_MAGIC || version !== IMAGE_VERSION || rootPlus1! > n! || l! > n! || stored! > n! || n! > 0 !== rootPlus1! > 0) return null;
    let off = pad8(36);
    const take = <T>(ctor: { new (b: ArrayBuffer, o: number, len: number): T; BYTES_PER_ELEMENT: number }, count: number, cap: number): T | null => {
      const bytes = count * ctor.BYTES_PER_ELEMENT;
      if (off + bytes > a.byteLength) return null;
      const copy = new Uint8Array(Math.max(cap, count) * ctor.BYTES_PER_ELEMENT);
      copy.set(a.subarray(off, off + bytes));
      off += pad8(bytes);
      return new ctor(copy.buffer, 0, Math.max(cap, count));
    };
    const view = <T>(ctor: { new (b: ArrayBuffer, o: number, len: number): T; BYTES_PER_ELEMENT: number }, count: number): T | null => {
      const bytes = count * ctor.BYTES_PER_ELEMENT;
      if (off + bytes > a.byteLength) return null;
      const v = new ctor(a.buffer as ArrayBuffer, a.byteOffset + off, count);
      off += pad8(bytes);
      return v;
    };
    const bit = view(Int16Array, n!);
    const left = view(Int32Array, n!);
    const right = view(Int32Array, n!);
    const hash = view(Int32Array, stored! * 8);
    const keys = view(Uint32Array, l! * 8);
    const heads = view(Uint32Array, l!);
    const arena = take(Uint8Array, arenaUsed!, more(arenaUsed!));
    const voidPairs = take(Float64Array, voids! * 2, voids! * 2);
    if (!bit || !left || !right || !hash || !keys || !heads || !arena || !voidPairs) return null;
    if (off !== a.byteLength) return null;
    // indices in range and one node a leaf slot: a damaged image is refused here, not followed later
    const leafNode = new Int32Array(l!).fill(-1);
    for (let k = 0; k < n!; k++) {
      if (bit[k]! >= 0) {
        if (bit[k]! > 255 || left[k]! >= n! || right[k]! >= n! || left[k]! < 0 || right[k]! < 0) return null;
      } else {
        const s = left[k]!;
        if (s >= l! || s < 0 || leafNode[s] !== -1) return null;
        leafNode[s] = k;
      }
    }
    for (let k = 0; k < l!; k++) if (leafNode[k] === -1) return null;
    const sizes = subtreeLeaves(bit, left, right, rootPlus1! - 1);
    if (sizes === null || (l! > 0 && (n !== 2 * l! - 1 || sizes[rootPlus1! - 1] !== l))) return null;
    let hashed = 0;
    for (let k = 0; k < n!; k++) if (sizes[k]! > IMAGE_HASH_LEAVES) hashed++;
    if (hashed !== stored) return null;
    // each key's events: its count, its last event, and which leaves each block touched (its endorse events, placed by block after)
    const counts = new Uint32Array(l!);
    const tails = new Uint32Array(l!);
    const touches = new Int32Array(blocks! + 2);
    const maxSteps = Math.floor(arenaUsed! / 27); // a record is at least 6 + 21 bytes
    const pairBlock = new Int32Array(maxSteps);
    const pairLeaf = new Int32Array(maxSteps);
    let pairs = 0;
    let steps = 0;
    for (let k = 0; k < l!; k++) {
      let last = NONE;
      for (let r = heads[k]!; r !== NONE; r = readU32(arena, r)) {
        const len = readU16(arena, r + 4);
        if (++steps > maxSteps || len < 21 || r + 6 + len > arenaUsed!) return null;
        const kind = arena[r + 6];
        if (kind === E) {
          const b = readU64(arena, r + 7);
          if (!(b < blocks!)) return null;
          touches[b + 2]!++;
          pairBlock[pairs] = b;
          pairLeaf[pairs++] = k;
        } else if (kind !== R) return null;
        counts[k]!++;
        last = r;
      }
      tails[k] = last;
    }
    // touches[b + 1] becomes block b's start, then its end as its leaves are placed: block b's start is touches[b] after
    for (let b = 0; b < blocks!; b++) touches[b + 2]! += touches[b + 1]!;
    const blockLeafCount = touches[blocks! + 1]!;
    const blockStart = new Int32Array(more(blocks! + 1));
    const blockLeaves = new Int32Array(more(blockLeafCount));
    for (let q = 0; q < pairs; q++) blockLeaves[touches[pairBlock[q]! + 1]!++] = pairLeaf[q]!;
    blockStart.set(touches.subarray(0, blocks! + 1));
    const node = new Int32Array(more(n!) * NS);
    for (let k = 0, o = 0, q = 0; k < n!; k++, o += NS) {
      node[o + N_BIT] = bit[k]!;
      node[o + N_LEFT] = left[k]!;
      node[o + N_RIGHT] = right[k]!;
      if (sizes[k]! > IMAGE_HASH_LEAVES) {
        for (let w = 0; w < 8; w++) node[o + N_HASH + w] = hash[q++]!;
      } else node[o + N_DIRTY] = LAZY;
    }
    const leaf = new Uint32Array(more(l!) * LS);
    for (let k = 0, o = 0; k < l!; k++, o += LS) {
      for (let w = 0; w < 8; w++) leaf[o + L_KEY + w] = keys[8 * k + w]!;
      leaf[o + L_COUNT] = counts[k]!;
      leaf[o + L_HEAD] = heads[k]!;
      leaf[o + L_TAIL] = tails[k]!;
      leaf[o + L_NODE] = leafNode[k]!;
    }
    const idx = new CompletenessIndex(c);
    Object.assign(idx, { node, leaf, arena, blockStart, blockLeaves });
    idx.views();
    idx.nodes = n!;
    idx.rootNode = rootPlus1! - 1;
    idx.leaves = l!;
    idx.arenaUsed = arenaUsed!;
    idx.blocks = blocks!;
    idx.blockLeafCount = blockLeafCount;
    idx.fromImageOnly = true;
    for (let k = 0; k < voids!; k++) idx.voidList.push([voidPairs[2 * k]!, voidPairs[2 * k + 1]!]);
    return idx;
  }

  /** Read back from an image: revoke targets need a `targetIndex` (the endorse blocks' hashes are not in it). */
  private fromImageOnly = false;

  /** Bytes held in typed arrays (for the memory budget). */
  bytes(): number {
    return this.node.byteLength + this.leaf.byteLength + this.arena.byteLength + this.blockStart.byteLength + this.blockLeaves.byteLength;
  }
}

const IMAGE_MAGIC = 0x78646963; // 'cidx'
/** 2: without the hashes of small subtrees, the accs and what the arena implies (1: every field). */
const IMAGE_VERSION = 2;
/**
 * The image keeps the hashes of nodes above this many leaves; the rest are
 * recomputed when a proof or an append first needs them (at most 2 × this
 * many node hashes and their leaves' folds a sibling).
 */
const IMAGE_HASH_LEAVES = 8;
const pad8 = (x: number): number => (x + 7) & ~7;

/** The next capacity: x1.5 (x2 left up to half the arrays unused at 1M keys). */
function more(n: number): number {
  return Math.ceil(n * 1.5) + 64;
}

/**
 * The number of leaves under each node of the trie rooted at `root`; null
 * when it is no crit-bit tree, as a damaged image. `toImage` numbers the
 * nodes in post-order, so one pass in node order sees every child first; a
 * child of a larger index, or of two parents, or whose bit is not beyond its
 * parent's, is refused.
 */
function subtreeLeaves(bit: Int16Array, left: Int32Array, right: Int32Array, root: number): Int32Array | null {
  const n = bit.length;
  const sizes = new Int32Array(n);
  const parents = new Uint8Array(n);
  for (let k = 0; k < n; k++) {
    const b = bit[k]!;
    if (b < 0) {
      sizes[k] = 1;
      continue;
    }
    const l = left[k]!;
    const r = right[k]!;
    if (l >= k || r >= k || l < 0 || r < 0 || parents[l]! !== 0 || parents[r]! !== 0 || l === r) return null;
    if ((bit[l]! >= 0 && bit[l]! <= b) || (bit[r]! >= 0 && bit[r]! <= b)) return null;
    parents[l] = 1;
    parents[r] = 1;
    sizes[k] = sizes[l]! + sizes[r]!;
  }
  if (root >= 0 && parents[root] !== 0) return null;
  return sizes;
}

function grow32(a: Int32Array, cap: number): Int32Array<ArrayBuffer> {
  const b = new Int32Array(cap);
  b.set(a);
  return b;
}
function grow32u(a: Uint32Array, cap: number): Uint32Array<ArrayBuffer> {
  const b = new Uint32Array(cap);
  b.set(a);
  return b;
}

function equalAt(a: Uint8Array, off: number, key: Uint8Array): boolean {
  for (let i = 0; i < 32; i++) if (a[off + i] !== key[i]) return false;
  return true;
}

/** First bit (MSB first) where the 32 bytes at `off` differ from `key`, or -1. */
function firstDiff(a: Uint8Array, off: number, key: Uint8Array): number {
  for (let i = 0; i < 32; i++) {
    const x = a[off + i]! ^ key[i]!;
    if (x !== 0) return i * 8 + Math.clz32(x) - 24;
  }
  return -1;
}

export function readU32(b: Uint8Array, off: number): number {
  return ((b[off]! << 24) >>> 0) + (b[off + 1]! << 16) + (b[off + 2]! << 8) + b[off + 3]!;
}
export function readU16(b: Uint8Array, off: number): number {
  return (b[off]! << 8) + b[off + 1]!;
}
export function readU64(b: Uint8Array, off: number): number {
  return readU32(b, off) * 2 ** 32 + readU32(b, off + 4);
}

/** Decodes the event of `len` bytes at `off` (bytes this module wrote). */
function decodeEventAt(b: Uint8Array, off: number): IndexEvent {
  const ascii = (o: number, n: number) => String.fromCharCode(...b.subarray(o, o + n));
  if (b[off] === R) return { kind: 'revoke', block: readU64(b, off + 1), target: readU64(b, off + 9), date: ascii(off + 17, 10) };
  const sl = readU16(b, off + 19);
  return { kind: 'endorse', block: readU64(b, off + 1), date: ascii(off + 9, 10), semver: new TextDecoder().decode(b.subarray(off + 21, off + 21 + sl)) };
}
