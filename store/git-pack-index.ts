/**
 * git-pack-index: indexing a pack a remote sent (what `git index-pack`
 * does): every object parsed, inflated, its deltas resolved and its id
 * recomputed, in one pass with node's zlib and sha1; the `.idx` (version 2)
 * of a pack to store; a thin pack rewritten self-contained.
 *
 * Owns: `PackData`, a received pack held in memory and indexed by id and
 * offset, with a bounded cache of resolved bodies (first in, first out).
 *
 * Trusts: nothing in the pack. The trailer is checked, each object id is
 * recomputed from its bytes, and every bound of FETCH_LIMITS holds while it
 * parses: object count and size, delta depth, delta bases outside the pack,
 * and the total bytes it may inflate or rebuild (a delta bomb). What fails
 * is `io_error` "the remote sent a bad pack: ...".
 *
 * Must hold: an object is known by the id of its resolved bytes, never by
 * what the remote said; `idxFile()` is byte for byte what `git index-pack`
 * writes for the same pack.
 *
 * Hand-written, not isomorphic-git's `indexPack`: bench/RESULTS.md "mirror
 * bootstrap" rows — a clone of a 50,000-block chain took ~45 s with
 * isomorphic-git's JS indexer plus a per-object checkout, ~6 s with this
 * single pass; and `indexPack` has none of the hostile-remote bounds.
 */
import { createHash } from 'node:crypto';
import { crc32, deflateSync, inflateSync } from 'node:zlib';
import { VouchError } from '../chain/errors.ts';
import { CACHE_ENTRY_COST, FETCH_LIMITS } from './fetch-limits.ts';
import { objectId } from './git-objects.ts';
import { OBJ_TYPES, OFS_DELTA, applyDelta, encodeObjectHeader, inflateBounds, parseObjectHeader } from './git-pack.ts';

export interface PackEntry {
  offset: number;
  /** Raw type: 1-4, OFS_DELTA or REF_DELTA. */
  kind: number;
  /** Resolved object type. */
  type: string;
  /** Where the zlib stream starts. */
  dataAt: number;
  size: number;
  baseOffset: number;
  oid: string;
  crc: number;
  /** Deltas between this object and a whole one (0: whole). */
  depth: number;
}

/**
 * A received packfile, indexed in one pass: every object's id, type and
 * offset, with a byte-bounded cache of resolved objects (delta bases, and
 * the checkout right after). Bounded (FETCH_LIMITS): objects, object size,
 * delta depth, and the bytes it may ever inflate or rebuild from deltas, so
 * a delta chain that would be rebuilt again and again (objects too big for
 * the cache) fails instead of running for hours.
 */
export class PackData {
  readonly entries: PackEntry[] = [];
  private readonly byOid = new Map<string, PackEntry>();
  private readonly byOffset = new Map<number, PackEntry>();
  private cache = new Map<number, Buffer>();
  private cacheBytes = 0;
  /** Cached offsets in insertion order (first in, first out); `fifoHead` is the oldest. */
  private fifo: number[] = [];
  private fifoHead = 0;
  /** Delta bases found outside the pack (a thin pack): such a pack cannot be stored as it is. */
  private readonly externals = new Map<string, { type: string; body: Buffer }>();

  /** Bytes inflated or rebuilt from deltas so far, and the most allowed. */
  private work = 0;
  private readonly budget: number;

  private constructor(readonly pack: Buffer, private readonly cacheLimit: number) {
    this.budget = FETCH_LIMITS.resolveBase + FETCH_LIMITS.resolvePerPackByte * pack.length;
  }

  private spend(bytes: number): void {
    this.work += bytes;
    if (this.work > this.budget) {
      throw new VouchError('io_error', `the remote sent a bad pack: it needs more than ${this.budget} bytes of objects to resolve (a delta bomb?)`);
    }
  }

  get thin(): boolean {
    return this.externals.size > 0;
  }

  get checksum(): string {
    return this.pack.toString('hex', this.pack.length - 20);
  }

  has(oid: string): boolean {
    return this.byOid.has(oid);
  }

  offsetOf(oid: string): number | null {
    return this.byOid.get(oid)?.offset ?? null;
  }

  get(oid: string): { type: string; body: Buffer } | null {
    const e = this.byOid.get(oid);
    return e ? { type: e.type, body: this.resolve(e) } : null;
  }

  /**
   * Parse and index `pack`. `external` resolves REF_DELTA bases that are not
   * in the pack (objects we already have).
   */
  static async index(pack: Buffer, external: (oid: string) => Promise<{ type: string; body: Buffer } | null>, cacheLimit = 32 << 20): Promise<PackData> {
    const bad = (why: string): never => { throw new VouchError('io_error', `the remote sent a bad pack: ${why}`); };
    if (pack.length < 32 || pack.toString('latin1', 0, 4) !== 'PACK') bad('no PACK header');
    const version = pack.readUInt32BE(4);
    if (version !== 2 && version !== 3) bad(`version ${version}`);
    const count = pack.readUInt32BE(8);
    if (count > FETCH_LIMITS.objects) bad(`the pack declares ${count} objects, more than ${FETCH_LIMITS.objects}`);
    const end = pack.length - 20;
    if (createHash('sha1').update(pack.subarray(0, end)).digest('hex') !== pack.toString('hex', end)) bad('checksum mismatch');
    const p = new PackData(pack, cacheLimit);
    const pendingRef: { e: PackEntry; base: string; delta: Buffer }[] = [];
    /** External bases looked up and not found (each asked once). */
    const missing = new Set<string>();
    let pos = 12;
    for (let k = 0; k < count; k++) {
      if (pos >= end) bad('truncated');
      const offset = pos;
      const h = parseObjectHeader(pack, offset, end, bad);
      const { kind, size, baseOid } = h;
      let baseOffset = -1;
      if (kind === OFS_DELTA) {
        baseOffset = offset - h.baseDistance;
        if (baseOffset < 12 || !p.byOffset.has(baseOffset)) bad(`object at ${offset} names no earlier object as its base`);
      }
      pos = h.dataAt;
      const dataAt = pos;
      let data: Buffer;
      try {
        const r = inflateSync(pack.subarray(pos, end), { info: true, ...inflateBounds(size) }) as unknown as { buffer: Buffer; engine: { bytesWritten: number } };
        data = r.buffer;
        pos += r.engine.bytesWritten;
      } catch (e) {
        return bad(`object at ${offset} does not inflate (${(e as Error).message})`);
      }
      if (data.length !== size) bad(`object at ${offset} has ${data.length} bytes, its header says ${size}`);
      p.spend(size);
      const e: PackEntry = { offset, kind, type: '', dataAt, size, baseOffset, oid: '', crc: crc32(pack.subarray(offset, pos)), depth: 0 };
      p.entries.push(e);
      p.byOffset.set(offset, e);
      let body: Buffer | null = null;
      try {
        if (kind <= 4) {
          e.type = OBJ_TYPES[kind]!;
          body = data;
        } else if (kind === OFS_DELTA) {
          const base = p.byOffset.get(baseOffset)!;
          e.type = base.type;
          e.depth = p.deeper(base);
          body = p.rebuild(data, p.resolve(base));
        } else {
          const inPack = p.byOid.get(baseOid);
          let base = inPack ? { type: inPack.type, body: p.resolve(inPack) } : p.externals.get(baseOid) ?? null;
          if (!base && !missing.has(baseOid)) {
            if (missing.size >= FETCH_LIMITS.missingBases) bad(`more than ${FETCH_LIMITS.missingBases} delta bases are neither in the pack nor here`);
            base = await external(baseOid);
            if (base) p.externals.set(baseOid, base);
            else missing.add(baseOid);
          }
          if (base) {
            e.type = base.type;
            e.depth = inPack ? p.deeper(inPack) : 1;
            body = p.rebuild(data, base.body);
          } else pendingRef.push({ e, base: baseOid, delta: data });
        }
      } catch (err) {
        if (err instanceof VouchError && err.evidence?.reason !== 'bad_delta') throw err;
        bad(`object at ${offset}: ${(err as Error).message}`);
      }
      if (body) p.settle(e, body);
    }
    if (pos !== end) bad('trailing bytes after the last object');
    // REF_DELTA objects whose base came later in the pack: each resolved once its base is (linear, whatever the order).
    const waiting = new Map<string, typeof pendingRef>();
    for (const r of pendingRef) {
      const list = waiting.get(r.base);
      if (list) list.push(r);
      else waiting.set(r.base, [r]);
    }
    const ready = [...waiting.keys()].filter((oid) => p.byOid.has(oid));
    while (ready.length > 0) {
      const oid = ready.pop()!;
      const list = waiting.get(oid);
      if (!list) continue;
      waiting.delete(oid);
      const base = p.byOid.get(oid)!;
      for (const r of list) {
        r.e.type = base.type;
        r.e.depth = p.deeper(base);
        try {
          p.settle(r.e, p.rebuild(r.delta, p.resolve(base)));
        } catch (err) {
          if (err instanceof VouchError && err.evidence?.reason !== 'bad_delta') throw err;
          bad(`object at ${r.e.offset}: ${(err as Error).message}`);
        }
        if (waiting.has(r.e.oid)) ready.push(r.e.oid);
      }
    }
    for (const [oid] of waiting) bad(`delta base ${oid} is missing`);
    return p;
  }

  /** Depth of a delta on `base`; refuses chains deeper than git makes them. */
  private deeper(base: PackEntry): number {
    if (base.depth >= FETCH_LIMITS.deltaDepth) {
      throw new VouchError('io_error', `the remote sent a bad pack: a delta chain deeper than ${FETCH_LIMITS.deltaDepth}`);
    }
    return base.depth + 1;
  }

  /** A delta applied to its base, counted against the pack's budget. */
  private rebuild(delta: Buffer, base: Buffer): Buffer {
    const out = applyDelta(delta, base);
    this.spend(out.length);
    return out;
  }

  private settle(e: PackEntry, body: Buffer): void {
    e.oid = objectId(e.type, body);
    if (!this.byOid.has(e.oid)) this.byOid.set(e.oid, e);
    this.remember(e.offset, body);
  }

  private remember(offset: number, body: Buffer): void {
    if (body.length > this.cacheLimit / 4 || this.cache.has(offset)) return;
    this.cache.set(offset, body);
    this.fifo.push(offset);
    this.cacheBytes += body.length + CACHE_ENTRY_COST;
    while (this.cacheBytes > this.cacheLimit) {
      const k = this.fifo[this.fifoHead++]!;
      this.cacheBytes -= this.cache.get(k)!.length + CACHE_ENTRY_COST;
      this.cache.delete(k);
    }
    if (this.fifoHead > 4096 && this.fifoHead * 2 > this.fifo.length) {
      this.fifo = this.fifo.slice(this.fifoHead);
      this.fifoHead = 0;
    }
  }

  /** The object's content (inflating and applying deltas again if it left the cache). */
  resolve(e: PackEntry): Buffer {
    const hit = this.cache.get(e.offset);
    if (hit) return hit;
    this.spend(e.size);
    const data = inflateSync(this.pack.subarray(e.dataAt, this.pack.length - 20), inflateBounds(e.size));
    let body: Buffer;
    if (e.kind <= 4) body = data;
    else if (e.kind === OFS_DELTA) body = this.rebuild(data, this.resolve(this.byOffset.get(e.baseOffset)!));
    else {
      const baseOid = this.pack.toString('hex', e.dataAt - 20, e.dataAt);
      const base = this.byOid.get(baseOid);
      const ext = base ? null : this.externals.get(baseOid);
      if (!base && !ext) throw new VouchError('io_error', `delta base ${baseOid} is not in the pack`);
      body = this.rebuild(data, base ? this.resolve(base) : ext!.body);
    }
    this.remember(e.offset, body);
    return body;
  }

  /** The same objects as a self-contained pack (every object whole), for storing what came as a thin pack. */
  async selfContained(): Promise<PackData> {
    const unique = this.entries.filter((e) => this.byOid.get(e.oid) === e);
    const parts: Buffer[] = [Buffer.from('PACK\0\0\0\x02\0\0\0\0', 'latin1')];
    parts[0]!.writeUInt32BE(unique.length, 8);
    for (const e of unique) {
      const body = this.resolve(e);
      parts.push(encodeObjectHeader(OBJ_TYPES.indexOf(e.type as 'blob'), body.length), deflateSync(body, { level: 1 }));
    }
    const body = Buffer.concat(parts);
    return PackData.index(Buffer.concat([body, createHash('sha1').update(body).digest()]), async () => null, this.cacheLimit);
  }

  /** Pack index file, version 2 (as `git index-pack` writes it). */
  idxFile(): Buffer {
    const unique = this.entries.filter((e) => this.byOid.get(e.oid) === e);
    return idxV2(unique, this.pack.subarray(this.pack.length - 20));
  }
}


/** One object of a pack as its index names it. */
export interface IdxEntry { oid: string; offset: number; crc: number }

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
  for (const e of sorted) { buf.write(e.oid, o, 'hex'); o += 20; }
  for (const e of sorted) { buf.writeUInt32BE(e.crc >>> 0, o); o += 4; }
  let bigIndex = 0;
  for (const e of sorted) {
    buf.writeUInt32BE(e.offset >= 0x80000000 ? (0x80000000 | bigIndex++) >>> 0 : e.offset, o);
    o += 4;
  }
  for (const e of big) { buf.writeBigUInt64BE(BigInt(e.offset), o); o += 8; }
  packSum.copy(buf, o, 0, 20);
  o += 20;
  createHash('sha1').update(buf.subarray(0, o)).digest().copy(buf, o);
  return buf;
}
