/**
 * The packs vouch writes into its own repository: the one pack of
 * `ChainRepo.init`, incremental packs of the last appends' loose objects
 * (trees as deltas of their previous version), and geometric consolidation
 * (as `git repack --geometric=2`), so there are O(log n) packs.
 * Owns: `PackFileWriter` (pack + `.idx` v2 to temporary files, fsynced,
 * renamed pack first), what goes into a pack, when packs merge, removing
 * what a pack made redundant. Hand-written: the store writes git without a
 * git binary and must know each tree's previous version.
 * Trusts: the repository's objects; the caller as its single writer.
 * Must hold: every object is readable at every instant; loose objects and
 * old packs are removed only once a durable pack holds them; every pack
 * passes `git verify-pack`, deltas are REF_DELTA within the pack, at most
 * MAX_DELTA_DEPTH deep.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { crc32, deflateSync } from 'node:zlib';
import { VouchError } from '../chain/errors.ts';
import { fsyncDir } from '../platform/durable-file.ts';
import { loosePath, readLoose } from './git-objects.ts';
import { OBJ_TYPES, OFS_DELTA, REF_DELTA, encodeObjectHeader, idxCount, idxOffset, parseObjectHeader } from './git-pack.ts';
import { type IdxEntry, idxV2 } from './git-pack-index.ts';
import { makeDelta } from './git-pack-writer.ts';

/** Longest delta chain an incremental pack makes (git's own default pack.depth). */
const MAX_DELTA_DEPTH = 50;
/** Trees of unknown path tried as delta bases of the next one (git's pack.window is 10). */
const PATHLESS_WINDOW = 8;
/** Trees of unknown path held at once to be sorted by size before they are written (their order on disk is random). */
const HELD_TREE_BYTES = 16 << 20;
/** Packs merge when one holds fewer than GEOMETRIC_FACTOR times the objects of the next smaller ones together (git repack --geometric=2). */
const GEOMETRIC_FACTOR = 2;
const TYPE_CODE: Record<string, number> = { commit: 1, tree: 2, blob: 3, tag: 4 };

/** Test hook: VOUCH_CRASH_POINT=repack-<step> kills the process at that step of a repack (see ./git-files.ts crashPoint). */
export function repackCrashPoint(name: 'repack-pack-named' | 'repack-indexed' | 'repack-loose-half' | 'merge-indexed' | 'merge-old-half'): void {
  if (process.env.VOUCH_CRASH_POINT === name) process.kill(process.pid, 'SIGKILL');
}

let tmpSeq = 0;

/**
 * A pack written to a temporary file as its entries come, then named
 * `pack-<checksum>.pack` with its `.idx` beside it, durably. With `count`
 * given up front the checksum is computed as the bytes go; without it the
 * header's count is filled in at the end and the file hashed once more.
 */
export class PackFileWriter {
  private readonly tmpPack: string;
  private readonly fd: number;
  private readonly hash = createHash('sha1');
  private buf: Buffer[] = [];
  private bufBytes = 0;
  private offset = 12;
  private readonly entries: IdxEntry[] = [];
  private readonly seen = new Set<string>();
  private closed = false;

  constructor(
    private readonly packDir: string,
    private readonly count: number | null = null,
  ) {
    fs.mkdirSync(packDir, { recursive: true });
    this.tmpPack = join(packDir, `tmp_pack_vouch_${process.pid}_${tmpSeq++}`);
    this.fd = fs.openSync(this.tmpPack, 'w+', 0o444);
    const header = Buffer.alloc(12);
    header.write('PACK', 0, 'latin1');
    header.writeUInt32BE(2, 4);
    header.writeUInt32BE(count ?? 0, 8);
    this.put(header);
  }

  get objects(): number {
    return this.entries.length;
  }

  has(oid: string): boolean {
    return this.seen.has(oid);
  }

  private put(b: Buffer): void {
    if (this.count !== null) this.hash.update(b);
    this.buf.push(b);
    this.bufBytes += b.length;
    if (this.bufBytes >= 1 << 20) this.flush();
  }

  private flush(): void {
    const data = Buffer.concat(this.buf, this.bufBytes);
    for (let off = 0; off < data.length; ) off += fs.writeSync(this.fd, data, off, data.length - off);
    this.buf = [];
    this.bufBytes = 0;
  }

  /** Add an entry given as its bytes in the pack (header, base id of a REF_DELTA, zlib data). Ignored when `oid` is in already. */
  addRaw(oid: string, raw: Buffer[], crc?: number): void {
    if (this.seen.has(oid)) return;
    this.seen.add(oid);
    let c = 0;
    let n = 0;
    for (const r of raw) {
      if (crc === undefined) c = crc32(r, c);
      this.put(r);
      n += r.length;
    }
    this.entries.push({ oid, offset: this.offset, crc: crc ?? c });
    this.offset += n;
  }

  /** Add a whole object. */
  addWhole(oid: string, type: string, body: Buffer): void {
    const code = TYPE_CODE[type];
    if (code === undefined) throw new VouchError('io_error', `cannot pack an object of type ${type}`);
    if (!this.seen.has(oid)) this.addRaw(oid, [encodeObjectHeader(code, body.length), deflateSync(body, { level: 1 })]);
  }

  /** Add an object as a REF_DELTA of `base`, which must be in this pack. */
  addDelta(oid: string, base: string, delta: Buffer): void {
    if (!this.seen.has(base)) throw new VouchError('io_error', `delta base ${base} is not in the pack`);
    if (!this.seen.has(oid)) this.addRaw(oid, [encodeObjectHeader(REF_DELTA, delta.length), Buffer.from(base, 'hex'), deflateSync(delta, { level: 1 })]);
  }

  /**
   * Write the trailer, fsync, write the index (fsynced), rename the pack
   * then its index into place and fsync the directory. Returns the pack's
   * name (`pack-<checksum>`); the objects are readable from the instant the
   * index is named.
   */
  finish(onNamed?: () => void): string {
    if (this.count !== null && this.count !== this.entries.length) {
      throw new VouchError('io_error', `pack of ${this.entries.length} objects announced ${this.count}`);
    }
    this.flush();
    let sum: Buffer;
    if (this.count !== null) sum = this.hash.digest();
    else {
      const head = Buffer.alloc(4);
      head.writeUInt32BE(this.entries.length, 0);
      fs.writeSync(this.fd, head, 0, 4, 8);
      const h = createHash('sha1');
      const chunk = Buffer.allocUnsafe(4 << 20);
      for (let at = 0; at < this.offset; ) {
        const got = fs.readSync(this.fd, chunk, 0, Math.min(chunk.length, this.offset - at), at);
        if (got <= 0) throw new VouchError('io_error', `${this.tmpPack} is shorter than written`);
        h.update(chunk.subarray(0, got));
        at += got;
      }
      sum = h.digest();
    }
    fs.writeSync(this.fd, sum, 0, 20, this.offset);
    fs.fsyncSync(this.fd);
    fs.closeSync(this.fd);
    this.closed = true;
    const name = `pack-${sum.toString('hex')}`;
    const tmpIdx = join(this.packDir, `tmp_idx_vouch_${process.pid}_${tmpSeq++}`);
    const idx = idxV2(this.entries, sum);
    const fd = fs.openSync(tmpIdx, 'w', 0o444);
    try {
      for (let off = 0; off < idx.length; ) off += fs.writeSync(fd, idx, off, idx.length - off);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    const base = join(this.packDir, name);
    if (fs.existsSync(`${base}.idx`)) {
      // The same pack is stored already (same objects in the same order).
      fs.unlinkSync(this.tmpPack);
      fs.unlinkSync(tmpIdx);
      return name;
    }
    fs.renameSync(this.tmpPack, `${base}.pack`);
    onNamed?.();
    fs.renameSync(tmpIdx, `${base}.idx`);
    fsyncDir(this.packDir);
    return name;
  }

  /** Give up: remove the temporary file. */
  abort(): void {
    if (!this.closed) {
      try {
        fs.closeSync(this.fd);
      } catch {
        /* closed */
      }
      this.closed = true;
    }
    try {
      fs.unlinkSync(this.tmpPack);
    } catch {
      /* gone */
    }
  }
}

/**
 * A loose object to pack; `path`: the tree's directory in the chain (its
 * previous version is its delta base); `type` and `body` when the writer
 * still holds them (no read back from the loose file).
 */
export interface LooseObject {
  oid: string;
  path?: string;
  type?: string;
  body?: Buffer;
}

/**
 * Pack the loose objects `list` (in the order written: a tree's previous
 * version comes before it) into one pack: trees with a `path` as deltas of
 * the previous tree of the same path in this pack, trees without one
 * (sorted by size, largest first, HELD_TREE_BYTES at a time) as deltas of
 * the best of the last PATHLESS_WINDOW such trees (chains of at most
 * MAX_DELTA_DEPTH), everything else whole. Objects already in a pack
 * (`packed`) or gone are left out. Returns the pack's name (null: nothing
 * to pack; the pack and its index are durable) and the loose objects now
 * redundant, for `removeLoose`.
 */
export function packLoose(gitdir: string, list: readonly LooseObject[], packed: (oid: string) => boolean): { pack: string | null; redundant: string[] } {
  const packDir = join(gitdir, 'objects', 'pack');
  const taken: string[] = [];
  const redundant: string[] = [];
  // Streamed: one object in memory at a time, plus the last tree of each path (the next one's delta base).
  const w = new PackFileWriter(packDir);
  let name: string | null = null;
  try {
    type Base = { oid: string; body: Buffer; depth: number };
    const last = new Map<string, Base>();
    /** Trees of unknown path (fetched, or found loose at open): the last few written, tried as bases (an unrelated one fails within a few bytes). */
    const recent: Base[] = [];
    /** Such trees waiting, to be written largest first (git's order: the smaller versions become copy-only deltas), a bounded number at a time. */
    let held: { oid: string; body: Buffer }[] = [];
    const heldIds = new Set<string>();
    let heldBytes = 0;
    const put = (oid: string, type: string, body: Buffer, path: string | undefined): void => {
      let base: Base | undefined;
      let delta: Buffer | null = null;
      if (type === 'tree') {
        const candidates = path !== undefined ? [last.get(path)] : recent;
        for (const c of candidates) {
          if (!c || c.depth >= MAX_DELTA_DEPTH) continue;
          const d = makeDelta(c.body, body);
          if (d && (!delta || d.length < delta.length)) {
            delta = d;
            base = c;
          }
        }
      }
      if (delta) w.addDelta(oid, base!.oid, delta);
      else w.addWhole(oid, type, body);
      if (type === 'tree') {
        const mine = { oid, body, depth: delta ? base!.depth + 1 : 0 };
        if (path !== undefined) last.set(path, mine);
        else {
          recent.push(mine);
          if (recent.length > PATHLESS_WINDOW) recent.shift();
        }
      }
      taken.push(oid);
    };
    const flushHeld = (): void => {
      held.sort((a, b) => b.body.length - a.body.length);
      for (const t of held) put(t.oid, 'tree', t.body, undefined);
      held = [];
      heldIds.clear();
      heldBytes = 0;
    };
    for (const o of list) {
      if (w.has(o.oid) || heldIds.has(o.oid)) continue;
      if (packed(o.oid)) {
        redundant.push(o.oid);
        continue;
      }
      const obj = o.body && o.type ? { type: o.type, body: o.body } : readLoose(gitdir, o.oid);
      if (!obj) continue; // gone meanwhile (packed by git)
      if (obj.type === 'tree' && o.path === undefined) {
        held.push({ oid: o.oid, body: obj.body });
        heldIds.add(o.oid);
        heldBytes += obj.body.length;
        if (heldBytes > HELD_TREE_BYTES) flushHeld();
      } else put(o.oid, obj.type, obj.body, o.path);
    }
    flushHeld();
    if (w.objects > 0) name = w.finish(() => repackCrashPoint('repack-pack-named'));
    else w.abort();
  } catch (e) {
    w.abort();
    throw e;
  }
  if (name) repackCrashPoint('repack-indexed');
  // The pack and its index are durable: the loose copies are redundant now.
  return { pack: name, redundant: [...taken, ...redundant] };
}

/**
 * Remove loose files whose objects a durable pack holds (the list
 * `packLoose` returns), a few at a time off the event loop: it need not
 * finish before the next writer (an append finding such a file still
 * there finds the object, and a later pack skips it). Returns how many
 * files were removed.
 */
export async function removeLoose(gitdir: string, oids: readonly string[]): Promise<number> {
  let removed = 0;
  for (let at = 0; at < oids.length; at += 16) {
    if (at > 0 && at >= oids.length / 2 && at - 16 < oids.length / 2) repackCrashPoint('repack-loose-half');
    const done = await Promise.all(
      oids.slice(at, at + 16).map((oid) =>
        fs.promises.unlink(loosePath(gitdir, oid)).then(
          () => 1,
          () => 0,
        ),
      ),
    );
    removed += done.reduce((a: number, b: number) => a + b, 0);
  }
  return removed;
}

/** A stored pack's name and object count (version-2 index, no `.keep`). */
interface PackInfo {
  name: string;
  n: number;
}

function listPacks(packDir: string): PackInfo[] {
  let names: string[];
  try {
    names = fs.readdirSync(packDir);
  } catch {
    return [];
  }
  const set = new Set(names);
  const out: PackInfo[] = [];
  for (const f of names) {
    const m = /^(pack-[0-9a-f]{40})\.idx$/.exec(f);
    if (!m || !set.has(`${m[1]}.pack`) || set.has(`${m[1]}.keep`) || set.has(`${m[1]}.promisor`)) continue;
    const fd = fs.openSync(join(packDir, f), 'r');
    try {
      const head = Buffer.alloc(8 + 1024);
      if (fs.readSync(fd, head, 0, head.length, 0) < head.length) continue;
      if (head.readUInt32BE(0) !== 0xff744f63 || head.readUInt32BE(4) !== 2) continue;
      out.push({ name: m[1]!, n: head.readUInt32BE(8 + 255 * 4) });
    } finally {
      fs.closeSync(fd);
    }
  }
  return out;
}

/**
 * The packs to merge so the object counts form a geometric progression of
 * factor 2 (git's `repack --geometric`, split_pack_geometry): the smallest
 * packs up to the first that holds at least twice the one below it, then
 * every larger pack that holds fewer than twice what is merged so far.
 */
export function geometricSplit(counts: readonly number[]): number {
  const sorted = [...counts].sort((a, b) => a - b);
  let i = sorted.length - 1;
  for (; i > 0; i--) if (sorted[i]! < GEOMETRIC_FACTOR * sorted[i - 1]!) break;
  let split = i > 0 ? i + 1 : 0;
  let total = 0;
  for (let k = 0; k < split; k++) total += sorted[k]!;
  for (let k = split; k < sorted.length; k++) {
    if (sorted[k]! < GEOMETRIC_FACTOR * total) {
      split++;
      total += sorted[k]!;
    } else break;
  }
  return split;
}

/**
 * Merge the packs under `objects/pack` that break the geometric
 * progression into one (entries copied with their compressed bytes; each
 * object once), then remove the merged packs. Returns the merged pack's
 * name and the names removed (none when the progression holds).
 */
export function consolidatePacks(gitdir: string): { pack: string | null; merged: string[] } {
  const packDir = join(gitdir, 'objects', 'pack');
  const packs = listPacks(packDir).sort((a, b) => a.n - b.n);
  const split = geometricSplit(packs.map((p) => p.n));
  if (split < 2) return { pack: null, merged: [] };
  const sources = packs.slice(0, split).reverse(); // largest first: most of the copy is one sequential read
  const name = mergePacks(
    packDir,
    sources.map((p) => p.name),
  );
  repackCrashPoint('merge-indexed');
  const merged = sources.map((p) => p.name).filter((n) => n !== name);
  merged.forEach((old, k) => {
    if (k === Math.floor(merged.length / 2)) repackCrashPoint('merge-old-half');
    // The index first: from then on no reader finds the pack (git's order too).
    for (const ext of ['idx', 'pack', 'rev', 'bitmap', 'mtimes']) {
      try {
        fs.unlinkSync(join(packDir, `${old}.${ext}`));
      } catch {
        /* none */
      }
    }
  });
  return { pack: name, merged };
}

/** The objects of a stored pack in pack order: id, offset, CRC-32, and where the entry ends. */
function packEntries(packDir: string, name: string): { entries: (IdxEntry & { end: number })[]; byOffset: Map<number, string> } {
  const idx = fs.readFileSync(join(packDir, `${name}.idx`));
  const n = idxCount(idx);
  if (n < 0) throw new VouchError('io_error', `${name}.idx is not a version-2 pack index`);
  const packSize = fs.statSync(join(packDir, `${name}.pack`)).size;
  const entries: (IdxEntry & { end: number })[] = [];
  for (let k = 0; k < n; k++) {
    const at = 8 + 1024 + k * 20;
    entries.push({ oid: idx.toString('hex', at, at + 20), offset: idxOffset(idx, n, k), crc: idx.readUInt32BE(8 + 1024 + n * 20 + k * 4), end: 0 });
  }
  entries.sort((a, b) => a.offset - b.offset);
  for (let k = 0; k < n; k++) entries[k]!.end = k + 1 < n ? entries[k + 1]!.offset : packSize - 20;
  return { entries, byOffset: new Map(entries.map((e) => [e.offset, e.oid])) };
}

/** One pack of every object of `names` (first copy of each id kept), written as a new pack; returns its name. */
export function mergePacks(packDir: string, names: readonly string[]): string {
  const lists = names.map((name) => ({ name, ...packEntries(packDir, name) }));
  const unique = new Set<string>();
  for (const l of lists) for (const e of l.entries) unique.add(e.oid);
  const w = new PackFileWriter(packDir, unique.size);
  try {
    for (const l of lists) {
      const fd = fs.openSync(join(packDir, `${l.name}.pack`), 'r');
      try {
        let chunk = Buffer.alloc(0);
        let chunkAt = 0;
        const bytes = (from: number, to: number): Buffer => {
          if (from < chunkAt || to > chunkAt + chunk.length) {
            chunk = Buffer.allocUnsafe(Math.max(4 << 20, to - from));
            const got = fs.readSync(fd, chunk, 0, chunk.length, from);
            chunk = chunk.subarray(0, got);
            chunkAt = from;
            if (to > chunkAt + chunk.length) throw new VouchError('io_error', `${l.name}.pack is truncated`);
          }
          return chunk.subarray(from - chunkAt, to - chunkAt);
        };
        for (const e of l.entries) {
          if (w.has(e.oid)) continue;
          const raw = bytes(e.offset, e.end);
          const h = parseObjectHeader(
            raw,
            0,
            raw.length,
            (why) => {
              throw new VouchError('io_error', `${l.name}.pack: ${why}`);
            },
            e.offset,
          );
          if (h.kind === OFS_DELTA) {
            // Offsets change in the merged pack: name the base by its id instead.
            const base = l.byOffset.get(e.offset - h.baseDistance);
            if (!base) throw new VouchError('io_error', `${l.name}.pack: object at ${e.offset} has no base`);
            w.addRaw(e.oid, [encodeObjectHeader(REF_DELTA, h.size), Buffer.from(base, 'hex'), Buffer.from(raw.subarray(h.dataAt - e.offset))]);
          } else {
            if (h.kind !== REF_DELTA && !OBJ_TYPES[h.kind]) throw new VouchError('io_error', `${l.name}.pack: object type ${h.kind}`);
            w.addRaw(e.oid, [Buffer.from(raw)], e.crc);
          }
        }
      } finally {
        fs.closeSync(fd);
      }
    }
    return w.finish();
  } catch (e) {
    w.abort();
    throw e;
  }
}
