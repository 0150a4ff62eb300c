/**
 * Indexing a pack a remote sends while it arrives (what `git index-pack
 * --stdin` does): objects parsed, inflated, deltas resolved, ids recomputed
 * in one pass, bytes to a temporary file; the `.idx` v2; thin packs made
 * self-contained. Hand-written for that single pass and the bounds below
 * (bench/RESULTS.md "Mirrors and push").
 * Owns: `PackReceiver` (the temporary file and the parse) and `PackData`
 * (per-object entries in typed arrays, an id table, a bounded body cache).
 * Trusts: nothing in the pack: trailer checked, ids recomputed, every
 * FETCH_LIMITS bound held (a delta bomb too); a failure is `io_error` and
 * removes the temporary file.
 * Must hold: memory is O(objects) small entries, never O(pack bytes); the
 * pack is named only once indexed, checked and fsynced; `idxFile()` is byte
 * for byte what `git index-pack` writes.
 */
import { createHash, type Hash } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { crc32, inflateSync } from 'node:zlib';
import { VouchError } from '../chain/errors.ts';
import { CACHE_ENTRY_COST, FETCH_LIMITS } from './fetch-limits.ts';
import { fsyncDir } from '../platform/durable-file.ts';
import { OBJ_TYPES, OFS_DELTA, REF_DELTA, applyDelta, inflateBounds, parseObjectHeader } from './git-pack.ts';

const bad = (why: string): never => {
  throw new VouchError('io_error', `the remote sent a bad pack: ${why}`);
};

/** An external delta base (an object we already have), as `external` answers. */
export type ExternalBase = (oid: string) => Promise<{ type: string; body: Buffer } | null>;

let tmpSeq = 0;

/** Write-behind of the received bytes: 1 MiB at a time, flushed before any read of the file. */
const WRITE_SLAB = 1 << 20;

/**
 * A received packfile, indexed: the objects' offsets, ids, CRC-32s, types
 * and depths in typed arrays, read back from its file through a byte-bounded
 * cache of resolved objects (delta bases, and the checkout right after).
 * Bounded (FETCH_LIMITS): objects, object size, delta depth, and the bytes
 * it may ever inflate or rebuild from deltas, so a delta chain that would be
 * rebuilt again and again (objects too big for the cache) fails instead of
 * running for hours.
 */
export class PackData {
  /** Objects parsed so far (all of them once received). */
  count = 0;
  /** Distinct objects (a pack may hold one twice: the first is the one indexed). */
  unique = 0;
  /** offsets[k]: where object k starts; offsets[k + 1]: where it ends (the last: where the trailer starts). */
  private offsets: Float64Array;
  private readonly oids: Uint8Array;
  private readonly crcs: Uint32Array;
  /** Resolved type (1-4), 0 until resolved. */
  private readonly types: Uint8Array;
  private readonly depths: Uint16Array;
  /** Open addressing by id: entry index + 1, 0 empty. */
  private readonly table: Int32Array;
  private readonly mask: number;
  private cache = new Map<number, Buffer>();
  private cacheBytes = 0;
  /** Cached entries in insertion order (first in, first out); `fifoHead` is the oldest. */
  private fifo: number[] = [];
  private fifoHead = 0;
  /** Delta bases found outside the pack (a thin pack): such a pack cannot be stored as it is. */
  readonly externals = new Map<string, { type: string; body: Buffer }>();
  /** Bytes inflated or rebuilt from deltas so far; the most allowed grows with the bytes received. */
  private work = 0;
  /** Pack bytes received (the budget's base), and the SHA-1 trailer once checked. */
  received = 0;
  private trailer: Buffer | null = null;
  /** Bytes received but not written to the file yet (copied into one slab: a flood of tiny pieces holds no more than its bytes). */
  private slab = Buffer.allocUnsafe(0);
  private slabUsed = 0;
  private written = 0;

  /** @internal: made by PackReceiver. */
  constructor(
    private fd: number,
    public path: string,
    readonly declared: number,
    private readonly cacheLimit: number,
  ) {
    this.offsets = new Float64Array(declared + 1);
    this.oids = new Uint8Array(declared * 20);
    this.crcs = new Uint32Array(declared);
    this.types = new Uint8Array(declared);
    this.depths = new Uint16Array(declared);
    let slots = 16;
    while (slots < declared * 2) slots *= 2;
    this.table = new Int32Array(slots);
    this.mask = slots - 1;
  }

  // --- the file ------------------------------------------------------------

  /** @internal: bytes received, in order (written behind, WRITE_SLAB at a time). */
  append(chunk: Buffer): void {
    this.received += chunk.length;
    if (chunk.length >= WRITE_SLAB) {
      this.flush();
      this.write(chunk);
      return;
    }
    if (this.slabUsed + chunk.length > this.slab.length) {
      this.flush();
      if (this.slab.length < WRITE_SLAB) this.slab = Buffer.allocUnsafe(WRITE_SLAB);
    }
    chunk.copy(this.slab, this.slabUsed);
    this.slabUsed += chunk.length;
  }

  private write(data: Buffer): void {
    for (let off = 0; off < data.length; ) off += fs.writeSync(this.fd, data, off, data.length - off, this.written + off);
    this.written += data.length;
  }

  /** @internal: write what is still in the slab. */
  flush(): void {
    if (this.slabUsed === 0) return;
    this.write(this.slab.subarray(0, this.slabUsed));
    this.slabUsed = 0;
  }

  private readRange(from: number, to: number): Buffer {
    if (this.fd < 0) throw new VouchError('io_error', 'the fetched pack was closed');
    if (to > this.written) this.flush();
    const buf = Buffer.allocUnsafe(to - from);
    for (let at = 0; at < buf.length; ) {
      const got = fs.readSync(this.fd, buf, at, buf.length - at, from + at);
      if (got <= 0) throw new VouchError('io_error', `${this.path} is shorter than received`);
      at += got;
    }
    return buf;
  }

  /**
   * Name the file `pack-<checksum>.pack` in `dir` (fsynced first; the
   * caller writes the `.idx` next). Returns false when that pack is stored
   * already (the file is then removed).
   */
  keep(dir: string): boolean {
    this.flush();
    fs.fsyncSync(this.fd);
    const dst = join(dir, `pack-${this.checksum}.pack`);
    if (fs.existsSync(join(dir, `pack-${this.checksum}.idx`))) {
      this.discard();
      return false;
    }
    fs.renameSync(this.path, dst);
    this.path = dst;
    fsyncDir(dir);
    return true;
  }

  /** Remove the file (reads go on through the open descriptor until `close()`). */
  discard(): void {
    if (this.path) fs.rmSync(this.path, { force: true });
    this.path = '';
  }

  /** Close the file: nothing can be read from this pack any more. */
  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
    this.cache = new Map();
    this.cacheBytes = 0;
  }

  // --- the index -----------------------------------------------------------

  get thin(): boolean {
    return this.externals.size > 0;
  }

  get checksum(): string {
    if (!this.trailer) throw new VouchError('io_error', 'the pack is not complete');
    return this.trailer.toString('hex');
  }

  /** @internal */
  setTrailer(sum: Buffer): void {
    this.trailer = Buffer.from(sum);
  }

  private slot(oid: Uint8Array, at: number): number {
    let s = ((oid[at]! << 24) | (oid[at + 1]! << 16) | (oid[at + 2]! << 8) | oid[at + 3]!) & this.mask;
    for (;;) {
      const k = this.table[s]! - 1;
      if (k < 0) return s;
      let same = true;
      const o = k * 20;
      for (let i = 0; i < 20; i++)
        if (this.oids[o + i] !== oid[at + i]) {
          same = false;
          break;
        }
      if (same) return s;
      s = (s + 1) & this.mask;
    }
  }

  /** The entry of `oid` (40 hex digits), or -1. */
  find(oid: string): number {
    if (this.unique === 0 || !/^[0-9a-f]{40}$/.test(oid)) return -1;
    const key = Buffer.from(oid, 'hex');
    return this.table[this.slot(key, 0)]! - 1;
  }

  has(oid: string): boolean {
    return this.find(oid) >= 0;
  }

  oidOf(k: number): string {
    return Buffer.from(this.oids.buffer, this.oids.byteOffset + k * 20, 20).toString('hex');
  }

  typeOf(k: number): string {
    return OBJ_TYPES[this.types[k]!]!;
  }

  offsetOf(oid: string): number | null {
    const k = this.find(oid);
    return k >= 0 ? this.offsets[k]! : null;
  }

  get(oid: string): { type: string; body: Buffer } | null {
    const k = this.find(oid);
    return k >= 0 ? { type: this.typeOf(k), body: this.resolve(k) } : null;
  }

  /** Each distinct object once, in pack order. */
  *uniqueEntries(): Generator<number> {
    for (let k = 0; k < this.count; k++) if (this.types[k] !== 0 && this.table[this.slot(this.oids, k * 20)]! - 1 === k) yield k;
  }

  /** Entry whose object starts at `offset`, or -1 (binary search: offsets grow with k). */
  atOffset(offset: number): number {
    let lo = 0;
    let hi = this.count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const o = this.offsets[mid]!;
      if (o === offset) return mid;
      if (o < offset) lo = mid + 1;
      else hi = mid;
    }
    return -1;
  }

  /** @internal: `bytes` inflated or rebuilt, counted against the budget. */
  spend(bytes: number): void {
    this.work += bytes;
    const budget = FETCH_LIMITS.resolveBase + FETCH_LIMITS.resolvePerPackByte * this.received;
    if (this.work > budget) bad(`it needs more than ${budget} bytes of objects to resolve (a delta bomb?)`);
  }

  /** Depth of a delta on entry `base` (-1: a base outside the pack); refuses chains deeper than git makes them. */
  private deeper(base: number): number {
    const d = base < 0 ? 0 : this.depths[base]!;
    if (d >= FETCH_LIMITS.deltaDepth) bad(`a delta chain deeper than ${FETCH_LIMITS.deltaDepth}`);
    return d + 1;
  }

  /** A delta applied to its base, counted against the pack's budget. */
  private rebuild(delta: Buffer, base: Buffer): Buffer {
    const out = applyDelta(delta, base);
    this.spend(out.length);
    return out;
  }

  /** @internal: object `k` parsed at [offset, end): its CRC-32. */
  record(k: number, offset: number, end: number, crc: number): void {
    this.offsets[k] = offset;
    this.offsets[k + 1] = end;
    this.crcs[k] = crc;
    this.count = k + 1;
  }

  /** @internal: object `k` resolved to `body` of `type` (1-4) at delta depth `depth`: its id, indexed unless seen already. */
  settle(k: number, type: number, depth: number, body: Buffer): void {
    this.types[k] = type;
    this.depths[k] = depth;
    const h = createHash('sha1').update(`${OBJ_TYPES[type]} ${body.length}\0`, 'latin1').update(body).digest();
    this.oids.set(h, k * 20);
    const s = this.slot(h, 0);
    if (this.table[s] === 0) {
      this.table[s] = k + 1;
      this.unique++;
    }
    this.remember(k, body);
  }

  private remember(k: number, body: Buffer): void {
    if (body.length > this.cacheLimit / 4 || this.cache.has(k)) return;
    this.cache.set(k, body);
    this.fifo.push(k);
    this.cacheBytes += body.length + CACHE_ENTRY_COST;
    while (this.cacheBytes > this.cacheLimit) {
      const old = this.fifo[this.fifoHead++]!;
      this.cacheBytes -= this.cache.get(old)!.length + CACHE_ENTRY_COST;
      this.cache.delete(old);
    }
    if (this.fifoHead > 4096 && this.fifoHead * 2 > this.fifo.length) {
      this.fifo = this.fifo.slice(this.fifoHead);
      this.fifoHead = 0;
    }
  }

  /** @internal: resolve the delta `data` of entry `k` (raw kind OFS/REF) on its base; false when a REF base is not known (yet). */
  resolveDelta(k: number, kind: number, baseAt: number, baseOid: string, data: Buffer): boolean {
    let base: number;
    let body: Buffer;
    if (kind === OFS_DELTA) {
      base = this.atOffset(baseAt);
      if (base < 0 || base >= k) bad(`object at ${this.offsets[k]} names no earlier object as its base`);
      if (this.types[base] === 0) return false; // on a REF_DELTA still waiting for its base
      body = this.resolve(base);
    } else {
      base = this.find(baseOid);
      if (base >= 0) body = this.resolve(base);
      else {
        const ext = this.externals.get(baseOid);
        if (!ext) return false;
        this.settle(k, OBJ_TYPES.indexOf(ext.type as 'blob'), this.deeper(-1), this.rebuildNamed(k, data, ext.body));
        return true;
      }
    }
    this.settle(k, this.types[base]!, this.deeper(base), this.rebuildNamed(k, data, body));
    return true;
  }

  private rebuildNamed(k: number, data: Buffer, base: Buffer): Buffer {
    try {
      return this.rebuild(data, base);
    } catch (err) {
      if (err instanceof VouchError && err.evidence?.reason !== 'bad_delta') throw err;
      return bad(`object at ${this.offsets[k]}: ${(err as Error).message}`);
    }
  }

  /** The raw kind, base and inflated data of entry `k`, read back from the file. */
  raw(k: number): { kind: number; baseAt: number; baseOid: string; data: Buffer } {
    const offset = this.offsets[k]!;
    const end = this.offsets[k + 1]!;
    const bytes = this.readRange(offset, end);
    const h = parseObjectHeader(bytes, 0, bytes.length, bad, offset);
    this.spend(h.size);
    const data = inflateSync(bytes.subarray(h.dataAt - offset), inflateBounds(h.size));
    return { kind: h.kind, baseAt: offset - h.baseDistance, baseOid: h.baseOid, data };
  }

  /** The object's content (read from the file, inflated and its deltas applied again if it left the cache). */
  resolve(k: number): Buffer {
    const hit = this.cache.get(k);
    if (hit) return hit;
    if (this.types[k] === 0) throw new VouchError('io_error', `object at ${this.offsets[k]} is not resolved`);
    const r = this.raw(k);
    let body: Buffer;
    if (r.kind <= 4) body = r.data;
    else if (r.kind === OFS_DELTA) body = this.rebuild(r.data, this.resolve(this.atOffset(r.baseAt)));
    else {
      const base = this.find(r.baseOid);
      const ext = base >= 0 ? null : this.externals.get(r.baseOid);
      if (base < 0 && !ext) throw new VouchError('io_error', `delta base ${r.baseOid} is not in the pack`);
      body = this.rebuild(r.data, base >= 0 ? this.resolve(base) : ext!.body);
    }
    this.remember(k, body);
    return body;
  }

  /** Pack index file, version 2 (as `git index-pack` writes it). */
  idxFile(): Buffer {
    const order = new Uint32Array(this.unique);
    let n = 0;
    for (const k of this.uniqueEntries()) order[n++] = k;
    return idxV2Typed(order.subarray(0, n), this.oids, this.crcs, this.offsets, this.trailer!);
  }
}

/**
 * Receives a pack as it arrives (`push`, chunk by chunk, after side-band
 * demultiplexing): writes it to `tmp_pack_vouch_<pid>_<n>` in `dir` and
 * indexes it on the way, so a broken or hostile pack fails at the first bad
 * object, not after its last byte. `finish()` checks the trailer and
 * resolves the deltas on bases outside the pack (`external`, asynchronous)
 * or later in it; `abort()` removes the file.
 */
export class PackReceiver {
  private readonly fd: number;
  readonly path: string;
  private data: PackData | null = null;
  /** Bytes not parsed yet: `win` (from pack offset `winAt`) and the chunks after it. */
  private win: Buffer = Buffer.alloc(0);
  private winAt = 0;
  /** Received after `win`, not parsed yet (copied into a buffer grown by doubling: tiny pieces cost their bytes). */
  private stage = Buffer.allocUnsafe(0);
  private partsLen = 0;
  /** Bytes the window must hold before the next parse attempt (one object's zlib data arrives in pieces: doubled each time). */
  private need = 12;
  private readonly hash: Hash = createHash('sha1');
  private declared = -1;
  private k = 0;
  /** REF_DELTA entries waiting for a base not seen yet, by base id; OFS_DELTA entries on such an entry, by its index. */
  private readonly waiting = new Map<string, number[]>();
  private readonly onEntry = new Map<number, number[]>();
  private done = false;

  constructor(
    dir: string,
    private readonly cacheLimit = 32 << 20,
  ) {
    fs.mkdirSync(dir, { recursive: true });
    this.path = join(dir, `tmp_pack_vouch_${process.pid}_${tmpSeq++}`);
    this.fd = fs.openSync(this.path, 'w+', 0o444);
  }

  /** Pack bytes received so far. */
  get bytes(): number {
    return this.winAt + this.win.length + this.partsLen;
  }

  push(chunk: Buffer): void {
    if (this.done) bad('data after the end');
    this.data?.append(chunk);
    if (this.partsLen + chunk.length > this.stage.length) {
      const grown = Buffer.allocUnsafe(Math.max(2 * this.stage.length, this.partsLen + chunk.length, 64 << 10));
      this.stage.copy(grown, 0, 0, this.partsLen);
      this.stage = grown;
    }
    chunk.copy(this.stage, this.partsLen);
    this.partsLen += chunk.length;
    if (this.win.length + this.partsLen >= this.need) this.parse(false);
  }

  private parse(atEnd: boolean): void {
    if (this.partsLen > 0) {
      this.win = Buffer.concat([this.win, this.stage.subarray(0, this.partsLen)]);
      this.partsLen = 0;
      if (this.stage.length > 4 << 20) this.stage = Buffer.allocUnsafe(0); // one big object's worth: let it go
    }
    const win = this.win;
    if (this.declared < 0) {
      if (win.length < 12) {
        if (atEnd) bad(win.length === 0 ? 'no pack' : 'truncated');
        return;
      }
      if (win.toString('latin1', 0, 4) !== 'PACK') bad('no PACK header');
      const version = win.readUInt32BE(4);
      if (version !== 2 && version !== 3) bad(`version ${version}`);
      const count = win.readUInt32BE(8);
      if (count > FETCH_LIMITS.objects) bad(`the pack declares ${count} objects, more than ${FETCH_LIMITS.objects}`);
      this.declared = count;
      this.data = new PackData(this.fd, this.path, count, this.cacheLimit);
      this.data.append(win); // everything so far (later chunks are appended as they come)
      this.hash.update(win.subarray(0, 12));
    }
    const p = this.data!;
    let pos = this.winAt === 0 ? 12 : 0; // the header, on the first pass
    const from = pos;
    for (; this.k < this.declared; this.k++) {
      const rest = win.length - pos;
      if (rest < 64 && !atEnd) {
        this.need = rest + 64;
        break;
      }
      if (rest === 0) bad('truncated');
      const offset = this.winAt + pos;
      const h = parseObjectHeader(win, pos, win.length, atEnd ? (why) => bad(/truncated/.test(why) ? 'truncated' : why) : bad, offset);
      const at = pos + (h.dataAt - offset);
      let data: Buffer;
      let used: number;
      try {
        const r = inflateSync(win.subarray(at), { info: true, ...inflateBounds(h.size) }) as unknown as { buffer: Buffer; engine: { bytesWritten: number } };
        data = r.buffer;
        used = r.engine.bytesWritten;
      } catch (e) {
        if ((e as { code?: string }).code === 'Z_BUF_ERROR') {
          if (atEnd) bad('truncated');
          // Not all here yet: wait for twice as much (at most one object's zlib data is held, and bounded).
          if (rest > 2 * h.size + (1 << 20)) bad(`object at ${offset}: more than ${2 * h.size + (1 << 20)} bytes of zlib data for ${h.size} bytes`);
          this.need = 2 * rest;
          break;
        }
        return bad(`object at ${offset} does not inflate (${(e as Error).message})`);
      }
      if (data.length !== h.size) bad(`object at ${offset} has ${data.length} bytes, its header says ${h.size}`);
      const end = at + used;
      const raw = win.subarray(pos, end);
      p.record(this.k, offset, this.winAt + end, crc32(raw));
      p.spend(h.size);
      if (h.kind <= 4) {
        p.settle(this.k, h.kind, 0, data);
        this.settled(this.k);
      } else if (p.resolveDelta(this.k, h.kind, offset - h.baseDistance, h.baseOid, data)) this.settled(this.k);
      else this.wait(h.kind, offset - h.baseDistance, h.baseOid);
      pos = end;
    }
    this.hash.update(win.subarray(from, pos)); // the objects parsed (the trailer is never hashed: it follows the last one)
    if (this.k === this.declared) {
      if (win.length - pos > 20) bad('trailing bytes after the last object');
      this.need = 21;
    }
    this.winAt += pos;
    // Keep only the unparsed rest (a copy when small, so the chunk it came from can go).
    this.win = win.length - pos < 4096 ? Buffer.from(win.subarray(pos)) : win.subarray(pos);
  }

  /** Entry `this.k` waits: on a REF base not seen yet, or an OFS base that itself waits. */
  private wait(kind: number, baseAt: number, baseOid: string): void {
    if (kind === REF_DELTA) {
      const list = this.waiting.get(baseOid);
      if (list) list.push(this.k);
      else this.waiting.set(baseOid, [this.k]);
    } else {
      const base = this.data!.atOffset(baseAt);
      const list = this.onEntry.get(base);
      if (list) list.push(this.k);
      else this.onEntry.set(base, [this.k]);
    }
  }

  /** Entry `k` was resolved: so can what waited on it (linear, whatever the order). */
  private settled(k: number): void {
    if (this.waiting.size === 0 && this.onEntry.size === 0) return;
    const p = this.data!;
    const ready = [k];
    while (ready.length > 0) {
      const e = ready.pop()!;
      const lists = [this.onEntry.get(e), this.waiting.get(p.oidOf(e))];
      this.onEntry.delete(e);
      this.waiting.delete(p.oidOf(e));
      for (const list of lists) {
        for (const w of list ?? []) {
          const r = p.raw(w);
          if (!p.resolveDelta(w, r.kind, r.baseAt, r.baseOid, r.data)) throw new VouchError('io_error', `object ${w} did not resolve`);
          ready.push(w);
        }
      }
    }
  }

  /**
   * The whole pack arrived: check its trailer, resolve what waits on bases
   * outside it (at most FETCH_LIMITS.missingBases asked of `external`),
   * and return the index.
   */
  async finish(external: ExternalBase = async () => null): Promise<PackData> {
    this.parse(true);
    this.done = true;
    if (this.k < this.declared) bad('truncated');
    const p = this.data!;
    const trailer = this.win;
    if (trailer.length !== 20 || !this.hash.digest().equals(trailer)) bad(trailer.length < 20 ? 'truncated' : 'checksum mismatch');
    p.setTrailer(trailer);
    p.flush();
    if (this.waiting.size > 0) {
      if (this.waiting.size > FETCH_LIMITS.missingBases) bad(`more than ${FETCH_LIMITS.missingBases} delta bases are neither in the pack nor here`);
      for (const oid of [...this.waiting.keys()]) {
        if (!this.waiting.has(oid) || p.has(oid)) continue;
        const base = await external(oid);
        if (!base) continue;
        p.externals.set(oid, base);
        const list = this.waiting.get(oid)!;
        this.waiting.delete(oid);
        for (const w of list) {
          const r = p.raw(w);
          if (!p.resolveDelta(w, r.kind, r.baseAt, r.baseOid, r.data)) throw new VouchError('io_error', `object ${w} did not resolve`);
          this.settled(w);
        }
      }
    }
    for (const [oid] of this.waiting) bad(`delta base ${oid} is missing`);
    if (this.onEntry.size > 0) bad('a delta base is missing');
    this.win = Buffer.alloc(0);
    return p;
  }

  /** Give up: close and remove the file (nothing named was written). */
  abort(): void {
    this.done = true;
    this.data?.close();
    if (!this.data) fs.closeSync(this.fd);
    this.data = null;
    fs.rmSync(this.path, { force: true });
  }
}

/**
 * `idxV2` for the typed tables of PackData: entries `order` (each id once)
 * sorted by id (a numeric sort of the first 31 bits, then the rare ties by
 * the whole id), without an object per entry.
 */
function idxV2Typed(order: Uint32Array, oids: Uint8Array, crcs: Uint32Array, offsets: Float64Array, packSum: Buffer): Buffer {
  const n = order.length;
  const keys = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const o = order[i]! * 20;
    const top = ((oids[o]! << 23) | (oids[o + 1]! << 15) | (oids[o + 2]! << 7) | (oids[o + 3]! >> 1)) >>> 0;
    keys[i] = top * 4194304 + i; // 31 + 22 bits: exact in a double
  }
  if (n > 4194304) throw new VouchError('io_error', 'too many objects for one index');
  keys.sort();
  const sorted = new Uint32Array(n);
  for (let i = 0; i < n; i++) sorted[i] = order[keys[i]! % 4194304]!;
  const cmp = (a: number, b: number): number => {
    for (let i = 0; i < 20; i++) {
      const d = oids[a * 20 + i]! - oids[b * 20 + i]!;
      if (d !== 0) return d;
    }
    return 0;
  };
  // Ties on the first 31 bits: a few, each sorted by insertion.
  for (let i = 1; i < n; i++) {
    for (let j = i; j > 0 && Math.floor(keys[j]! / 4194304) === Math.floor(keys[j - 1]! / 4194304) && cmp(sorted[j - 1]!, sorted[j]!) > 0; j--) {
      const t = sorted[j]!;
      sorted[j] = sorted[j - 1]!;
      sorted[j - 1] = t;
    }
  }
  let big = 0;
  for (let i = 0; i < n; i++) if (offsets[sorted[i]!]! >= 0x80000000) big++;
  const buf = Buffer.alloc(8 + 1024 + n * 28 + big * 8 + 40);
  buf.write('ff744f63', 0, 'hex');
  buf.writeUInt32BE(2, 4);
  const fan = new Uint32Array(256);
  for (let i = 0; i < n; i++) fan[oids[sorted[i]! * 20]!]!++;
  let acc = 0;
  for (let i = 0; i < 256; i++) {
    acc += fan[i]!;
    buf.writeUInt32BE(acc, 8 + i * 4);
  }
  let o = 8 + 1024;
  for (let i = 0; i < n; i++) {
    buf.set(oids.subarray(sorted[i]! * 20, sorted[i]! * 20 + 20), o);
    o += 20;
  }
  for (let i = 0; i < n; i++) {
    buf.writeUInt32BE(crcs[sorted[i]!]! >>> 0, o);
    o += 4;
  }
  let bigIndex = 0;
  const bigs: number[] = [];
  for (let i = 0; i < n; i++) {
    const off = offsets[sorted[i]!]!;
    if (off >= 0x80000000) bigs.push(off);
    buf.writeUInt32BE(off >= 0x80000000 ? (0x80000000 | bigIndex++) >>> 0 : off, o);
    o += 4;
  }
  for (const off of bigs) {
    buf.writeBigUInt64BE(BigInt(off), o);
    o += 8;
  }
  packSum.copy(buf, o, 0, 20);
  o += 20;
  createHash('sha1').update(buf.subarray(0, o)).digest().copy(buf, o);
  return buf;
}

/** One object of a pack as its index names it. */
export interface IdxEntry {
  oid: string;
  offset: number;
  crc: number;
}

/**
 * The pack index file, version 2 (gitformat-pack "Version 2 pack-*.idx"),
 * of a pack holding `entries` (each id once) with trailer `packSum`: fan-out
 * table, sorted ids, CRC-32s, 31-bit offsets with a 64-bit table for offsets
 * past 2 GiB, the pack's checksum and the index's own. Byte for byte what
 * `git index-pack` writes for the same pack.
 */
export function idxV2(entries: readonly IdxEntry[], packSum: Buffer): Buffer {
  const sorted = [...entries].sort((a, b) => (a.oid < b.oid ? -1 : a.oid > b.oid ? 1 : 0));
  const n = sorted.length;
  const big = sorted.filter((e) => e.offset >= 0x80000000);
  const buf = Buffer.alloc(8 + 1024 + n * 28 + big.length * 8 + 40);
  buf.write('ff744f63', 0, 'hex');
  buf.writeUInt32BE(2, 4);
  const fan = new Array<number>(256).fill(0);
  for (const e of sorted) fan[parseInt(e.oid.slice(0, 2), 16)]!++;
  let acc = 0;
  for (let i = 0; i < 256; i++) {
    acc += fan[i]!;
    buf.writeUInt32BE(acc, 8 + i * 4);
  }
  let o = 8 + 1024;
  for (const e of sorted) {
    buf.write(e.oid, o, 'hex');
    o += 20;
  }
  for (const e of sorted) {
    buf.writeUInt32BE(e.crc >>> 0, o);
    o += 4;
  }
  let bigIndex = 0;
  for (const e of sorted) {
    buf.writeUInt32BE(e.offset >= 0x80000000 ? (0x80000000 | bigIndex++) >>> 0 : e.offset, o);
    o += 4;
  }
  for (const e of big) {
    buf.writeBigUInt64BE(BigInt(e.offset), o);
    o += 8;
  }
  packSum.copy(buf, o, 0, 20);
  o += 20;
  createHash('sha1').update(buf.subarray(0, o)).digest().copy(buf, o);
  return buf;
}
