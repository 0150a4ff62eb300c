/**
 * Packfiles (gitformat-pack v2/v3) as bytes: the one parser and writer of a
 * pack object's header, the delta codec, and `DiskPacks`, which reads stored
 * packs object by object through their v2 `.idx` (isomorphic-git loads a
 * whole pack per read; bench/RESULTS.md "Mirrors and push"). Packs with a
 * v1 `.idx` go to `git cat-file` (./object-store.ts).
 * Owns: the object header varint and OFS/REF delta bases, git's delta format.
 * Trusts: packs on disk to be whole; reads are still bounded (object size,
 * delta depth 5000) and what does not parse is `io_error`.
 * Must hold: `applyDelta` never writes outside its output, which must be
 * exactly filled.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { inflateSync } from 'node:zlib';
import { VouchError } from '../chain/errors.ts';
import { MAX_OBJECT_BYTES } from './fetch-limits.ts';

export const OBJ_TYPES = ['', 'commit', 'tree', 'blob', 'tag'] as const;
export const OFS_DELTA = 6;
export const REF_DELTA = 7;

/** An object's header in a pack, parsed: raw kind (1-4, OFS_DELTA, REF_DELTA), inflated size, base, where the zlib data starts. */
export interface PackObjectHeader {
  kind: number;
  size: number;
  /** OFS_DELTA: how far before this object its base starts. */
  baseDistance: number;
  /** REF_DELTA: the base's object id. */
  baseOid: string;
  /** Offset of the zlib stream. */
  dataAt: number;
}

/**
 * The header of the object at `at` in `buf` (`limit`: how far in `buf` it
 * may reach). `offset` is the object's offset in its pack (for messages, and
 * the farthest back a base can be: the pack's start). Calls `bad` for what
 * git never writes: an overlong size or base distance, a type out of range,
 * a header past `limit`, a size over FETCH_LIMITS.objectBytes.
 */
export function parseObjectHeader(buf: Buffer, at: number, limit: number, bad: (why: string) => never, offset = at): PackObjectHeader {
  let pos = at;
  const next = (): number => {
    if (pos >= limit) bad(`object at ${offset} has a truncated header`);
    return buf[pos++]!;
  };
  let c = next();
  const kind = (c >> 4) & 7;
  let size = c & 15;
  let shift = 4;
  while (c & 0x80) {
    if (shift > 53) bad(`object at ${offset} has an overlong size`);
    c = next();
    size += (c & 0x7f) * 2 ** shift;
    shift += 7;
  }
  let baseDistance = 0;
  let baseOid = '';
  if (kind === OFS_DELTA) {
    c = next();
    baseDistance = c & 0x7f;
    while (c & 0x80) {
      if (baseDistance > Math.max(offset, limit)) bad(`object at ${offset} has an overlong base offset`);
      c = next();
      baseDistance = (baseDistance + 1) * 128 + (c & 0x7f);
    }
  } else if (kind === REF_DELTA) {
    if (pos + 20 > limit) bad(`object at ${offset} has a truncated header`);
    baseOid = buf.toString('hex', pos, pos + 20);
    pos += 20;
  } else if (kind < 1 || kind > 4) bad(`object type ${kind} at ${offset}`);
  if (size > MAX_OBJECT_BYTES) bad(`object at ${offset} has ${size} bytes, more than ${MAX_OBJECT_BYTES}`);
  return { kind, size, baseDistance, baseOid, dataAt: offset + (pos - at) };
}

/** The header of a whole object (`type` 1-4) or a delta (`kind` OFS_DELTA / REF_DELTA) of `size` bytes. */
export function encodeObjectHeader(kind: number, size: number): Buffer {
  const bytes: number[] = [];
  let c = (kind << 4) | (size & 0x0f);
  let rest = Math.floor(size / 16);
  while (rest > 0) {
    bytes.push(c | 0x80);
    c = rest & 0x7f;
    rest = Math.floor(rest / 128);
  }
  bytes.push(c);
  return Buffer.from(bytes);
}

/** A stored pack as DiskPacks knows it: its `.idx` (version 2) in memory (n = -1: not read yet), object count, and the pack file's descriptor once opened. */
interface StoredPack {
  name: string;
  idx: Buffer;
  n: number;
  fd: number | null;
  end: number;
}

/** Index of `key` (20 bytes) in a version-2 `.idx` of `n` objects, or -1. */
export function idxFind(idx: Buffer, n: number, key: Buffer): number {
  const b = key[0]!;
  // The fan-out is the file's word: a hostile or broken one must not send the search outside the n ids.
  let lo = b === 0 ? 0 : Math.min(n, idx.readUInt32BE(8 + (b - 1) * 4));
  let hi = Math.min(n, idx.readUInt32BE(8 + b * 4));
  // Bytes 1-4 as a number first: most steps of the search end there, without a native compare.
  const k4 = key.readUInt32BE(1);
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const at = 8 + 1024 + mid * 20;
    const m4 = idx.readUInt32BE(at + 1);
    const c = m4 !== k4 ? (m4 < k4 ? -1 : 1) : idx.compare(key, 0, 20, at, at + 20);
    if (c === 0) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/** The pack offset of the `k`-th object (in id order) of a version-2 `.idx` of `n` objects; -1 when its 64-bit offset is not in the file. */
export function idxOffset(idx: Buffer, n: number, k: number): number {
  const o = idx.readUInt32BE(8 + 1024 + n * 24 + k * 4);
  if (!(o & 0x80000000)) return o;
  const at = 8 + 1024 + n * 28 + (o & 0x7fffffff) * 8;
  return at + 8 + 40 <= idx.length ? Number(idx.readBigUInt64BE(at)) : -1;
}

/** A version-2 `.idx` file's object count, or -1 when it is not one (too short, other magic or version). */
export function idxCount(idx: Buffer): number {
  if (idx.length < 8 + 1024 + 40 || idx.readUInt32BE(0) !== 0xff744f63 || idx.readUInt32BE(4) !== 2) return -1;
  const n = idx.readUInt32BE(8 + 255 * 4);
  return idx.length >= 8 + 1024 + n * 28 + 40 ? n : -1;
}

/**
 * Packfiles on disk, read one object at a time through their version-2
 * `.idx` (held in memory; binary search, then a bounded read at the offset
 * through a descriptor kept open), so a read never loads a whole pack into
 * memory nor opens a file. Packs written or removed since (by a repack, a
 * fetch, or git) are seen at the next miss: a removed pack stays readable
 * through its open descriptor until then. Other index versions are left to
 * `git cat-file` (./object-store.ts).
 */
export class DiskPacks {
  private packs: StoredPack[] | null = null;
  private cache = new Map<string, { type: string; body: Buffer }>();
  private cacheBytes = 0;
  /** The first read of an object: its header, and the whole of a small object (reused: nothing keeps it). */
  private readonly scratch = Buffer.allocUnsafe(8192);
  /** Packs opened by name for `readAtOffset` (their `.idx` read only when needed). */
  private byOffset = new Map<string, StoredPack>();

  constructor(readonly dir: string) {}

  /** (Re)list the packs; a pack index is read once; descriptors of packs gone are closed. */
  private scan(): void {
    const old = new Map((this.packs ?? []).map((p) => [p.name, p]));
    const list: StoredPack[] = [];
    let names: string[] = [];
    try {
      names = fs.readdirSync(this.dir);
    } catch {
      /* no pack directory */
    }
    for (const file of names) {
      if (!file.endsWith('.idx') || !file.startsWith('pack-')) continue;
      const name = file.slice(0, -4);
      const known = old.get(name);
      if (known) {
        list.push(known);
        old.delete(name);
        continue;
      }
      try {
        const idx = fs.readFileSync(join(this.dir, file));
        const n = idxCount(idx);
        if (n >= 0) list.push({ name, idx, n, fd: null, end: 0 });
      } catch {
        /* unreadable: skipped */
      }
    }
    for (const gone of old.values()) if (gone.fd !== null) fs.closeSync(gone.fd);
    // Largest first: most objects live there (a clone's pack, the consolidated packs).
    this.packs = list.sort((a, b) => b.n - a.n);
  }

  private find(oid: string): { pack: StoredPack; offset: number } | null {
    const key = Buffer.from(oid, 'hex');
    for (const p of this.packs ?? []) {
      const k = idxFind(p.idx, p.n, key);
      if (k >= 0) return { pack: p, offset: idxOffset(p.idx, p.n, k) };
    }
    return null;
  }

  private locate(oid: string): { pack: StoredPack; offset: number } | null {
    if (this.packs === null) this.scan();
    const hit = this.find(oid);
    if (hit) return hit;
    this.scan(); // a pack written since (by a repack, a fetch, or git)
    return this.find(oid);
  }

  /** The pack's descriptor, opened once; null when the pack file is gone (removed by a repack since the scan). */
  private open(p: StoredPack): number | null {
    if (p.fd !== null) return p.fd;
    try {
      p.fd = fs.openSync(join(this.dir, `${p.name}.pack`), 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      return null;
    }
    p.end = fs.fstatSync(p.fd).size - 20;
    return p.fd;
  }

  has(oid: string): boolean {
    return this.locate(oid) !== null;
  }

  /** List the packs again now (after a pack was written), so `inPacks` sees them. */
  refresh(): void {
    this.scan();
  }

  /** Whether a pack of the last scan holds `oid` (no directory read on a miss). */
  inPacks(oid: string): boolean {
    if (this.packs === null) this.scan();
    return this.find(oid) !== null;
  }

  /**
   * Where a pack holds the object `key` (20 bytes): the pack's name and the
   * offset (the verify workers read it there: `readAtOffset`); null when no
   * pack of the last scan holds it.
   */
  where(key: Uint8Array): { pack: string; offset: number } | null {
    if (this.packs === null) this.scan();
    const k = Buffer.from(key.buffer, key.byteOffset, 20);
    for (const p of this.packs ?? []) {
      const at = idxFind(p.idx, p.n, k);
      if (at >= 0) return { pack: p.name, offset: idxOffset(p.idx, p.n, at) };
    }
    return null;
  }

  /**
   * The object at `offset` of pack `name` (as `where` gave it), without
   * scanning the directory: the pack's `.idx` is read only if the object is
   * a delta naming its base by id. Throws `io_error` when the pack is gone.
   */
  readAtOffset(name: string, offset: number): { type: string; body: Buffer } {
    let p = (this.packs ?? []).find((x) => x.name === name) ?? this.byOffset.get(name);
    if (!p) {
      p = { name, idx: Buffer.alloc(0), n: -1, fd: null, end: 0 };
      this.byOffset.set(name, p);
    }
    if (this.open(p) === null) throw new VouchError('io_error', `${name}.pack is gone (repacked meanwhile)`);
    return this.readAt(p, offset, 0);
  }

  /**
   * Whether a pack stores `oid` as a delta (true) or whole (false); null when
   * no pack holds it. Reads the object's header only.
   */
  storedAsDelta(oid: string): boolean | null {
    const at = this.locate(oid);
    if (!at || this.open(at.pack) === null) return null;
    const head = Buffer.alloc(64);
    const got = fs.readSync(at.pack.fd!, head, 0, Math.min(64, at.pack.end - at.offset), at.offset);
    const h = parseObjectHeader(
      head,
      0,
      got,
      (why) => {
        throw new VouchError('io_error', `bad object header in ${at.pack.name}.pack: ${why}`);
      },
      at.offset,
    );
    return h.kind === OFS_DELTA || h.kind === REF_DELTA;
  }

  read(oid: string): { type: string; body: Buffer } | null {
    let at = this.locate(oid);
    if (!at) return null;
    if (this.open(at.pack) === null) {
      this.scan(); // repacked meanwhile
      at = this.find(oid);
      if (!at || this.open(at.pack) === null) return null;
    }
    return this.readAt(at.pack, at.offset, 0);
  }

  private readAt(p: StoredPack, offset: number, depth: number): { type: string; body: Buffer } {
    const key = `${p.name}:${offset}`;
    const hit = this.cache.get(key);
    if (hit) return hit;
    if (depth > 5000) throw new VouchError('io_error', 'delta chain too deep');
    const fd = p.fd!;
    const end = p.end;
    const name = p.name;
    // An offset the index or a delta names is checked before it is read: inside the objects of this pack.
    if (!Number.isSafeInteger(offset) || offset < 12 || offset >= end) throw new VouchError('io_error', `bad object offset ${offset} in ${name}.pack`);
    // One read for the header and, for a small object stored whole, its deflated bytes too.
    const head = this.scratch;
    const got = fs.readSync(fd, head, 0, Math.min(head.length, end - offset), offset);
    const bad = (why: string): never => {
      throw new VouchError('io_error', `bad object header in ${name}.pack: ${why}`);
    };
    const h = parseObjectHeader(head, 0, got, bad, offset);
    const size = h.size;
    let base: { type: string; body: Buffer } | null = null;
    if (h.kind === OFS_DELTA) {
      if (h.baseDistance === 0) bad(`object at ${offset} is its own delta base`);
      base = this.readAt(p, offset - h.baseDistance, depth + 1);
    } else if (h.kind === REF_DELTA) {
      if (p.n < 0) {
        p.idx = fs.readFileSync(join(this.dir, `${name}.idx`));
        p.n = idxCount(p.idx);
        if (p.n < 0) throw new VouchError('io_error', `${name}.idx is not a version-2 pack index`);
      }
      const k = idxFind(p.idx, p.n, Buffer.from(h.baseOid, 'hex'));
      if (k < 0) throw new VouchError('io_error', `delta base ${h.baseOid} is not in ${name}.pack`);
      base = this.readAt(p, idxOffset(p.idx, p.n, k), depth + 1);
    }
    const kind = h.kind;
    const dataAt = h.dataAt;
    const inflateFrom = (len: number): Buffer => {
      const want = Math.max(0, Math.min(len, end - dataAt));
      // Still in the first read (no delta base was read into the scratch buffer since).
      if (base === null && dataAt - offset + want <= got) return inflateSync(head.subarray(dataAt - offset, dataAt - offset + want), inflateBounds(size));
      const buf = Buffer.allocUnsafe(want);
      fs.readSync(fd, buf, 0, buf.length, dataAt);
      return inflateSync(buf, inflateBounds(size));
    };
    let data: Buffer;
    try {
      data = inflateFrom(size + (size >> 10) + 64); // deflate never grows data by more than this
    } catch {
      try {
        data = inflateFrom(end - dataAt);
      } catch (e) {
        throw new VouchError('io_error', `object at ${offset} of ${name}.pack does not inflate: ${(e as Error).message}`);
      }
    }
    if (data.length !== size) bad(`object at ${offset} inflates to ${data.length} bytes, its header says ${size}`);
    const out = base ? { type: base.type, body: applyDelta(data, base.body) } : { type: OBJ_TYPES[kind]!, body: data };
    // A blob is kept only as a delta base: a block read at random is not read again soon, and keeping it costs the collector.
    if (out.body.length < 1 << 20 && (depth > 0 || out.type !== 'blob')) {
      if (this.cacheBytes + out.body.length > 16 << 20) this.resetCache(); // bounded; delta bases are usually near
      this.cache.set(key, out);
      this.cacheBytes += out.body.length;
    }
    return out;
  }

  resetCache(): void {
    this.cache = new Map();
    this.cacheBytes = 0;
  }

  /** Close every pack descriptor and forget the list (the next read scans again). */
  close(): void {
    for (const p of [...(this.packs ?? []), ...this.byOffset.values()]) if (p.fd !== null) fs.closeSync(p.fd);
    this.packs = null;
    this.byOffset.clear();
  }
}

/**
 * Whole objects of one pack read in pack order through a window (1 MiB,
 * one read for many small objects): the verify workers' read of the sparse
 * layout's blocks, which a pack holds one after another. `read` gives null
 * for a delta (the caller reads it through DiskPacks, which resolves bases).
 */
export class PackWindow {
  private fd: number | null = null;
  private end = 0;
  private buf = Buffer.allocUnsafe(1 << 20);
  private from = 0;
  private to = 0;

  constructor(readonly path: string) {}

  read(offset: number): { type: string; body: Buffer } | null {
    if (this.fd === null) {
      this.fd = fs.openSync(this.path, 'r');
      this.end = fs.fstatSync(this.fd).size - 20;
    }
    const name = this.path;
    const bad = (why: string): never => {
      throw new VouchError('io_error', `bad object header in ${name}: ${why}`);
    };
    if (offset < 12 || offset >= this.end) bad(`offset ${offset} is outside the pack`);
    this.fill(offset, 32);
    const h = parseObjectHeader(this.buf, offset - this.from, this.to - this.from, bad, offset);
    if (h.kind === OFS_DELTA || h.kind === REF_DELTA) return null;
    const want = Math.min(h.size + (h.size >> 10) + 64, this.end - h.dataAt); // deflate never grows data by more than this
    this.fill(h.dataAt, want);
    const at = h.dataAt - this.from;
    const body = inflateSync(this.buf.subarray(at, at + Math.min(want, this.to - h.dataAt)), { maxOutputLength: Math.max(1, h.size) });
    if (body.length !== h.size) bad(`object at ${offset} inflates to ${body.length} bytes, not ${h.size}`);
    return { type: OBJ_TYPES[h.kind]!, body };
  }

  /** Makes the window hold [at, at + len) (or up to the pack's end). */
  private fill(at: number, len: number): void {
    if (at >= this.from && at + len <= this.to) return;
    if (len > this.buf.length) this.buf = Buffer.allocUnsafe(len);
    const n = fs.readSync(this.fd!, this.buf, 0, Math.min(this.buf.length, this.end + 20 - at), at);
    this.from = at;
    this.to = at + n;
  }

  close(): void {
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }
}

/**
 * zlib options for an object of `size` bytes: never more output, and an
 * output buffer of its size (zlib's default 16 KiB chunk would stay behind
 * every small object kept in a cache: 16 KiB for a 1.5 KiB block).
 */
export function inflateBounds(size: number): { maxOutputLength: number; chunkSize: number } {
  return { maxOutputLength: Math.max(1, size), chunkSize: Math.max(64, size + 1) };
}

/** A delta that does not apply (marked, so the pack indexer can name the object it came with). */
function deltaError(why: string): VouchError {
  return new VouchError('io_error', why, { evidence: { reason: 'bad_delta' } });
}

export function applyDelta(delta: Buffer, base: Buffer): Buffer {
  let pos = 0;
  const varint = (): number => {
    let v = 0;
    let shift = 0;
    let c: number;
    do {
      if (pos >= delta.length) throw deltaError('truncated delta header');
      c = delta[pos++]!;
      v += (c & 0x7f) * 2 ** shift;
      shift += 7;
    } while (c & 0x80);
    return v;
  };
  const srcSize = varint();
  if (srcSize !== base.length) throw deltaError(`delta expects a base of ${srcSize} bytes, got ${base.length}`);
  const dstSize = varint();
  if (dstSize > MAX_OBJECT_BYTES) throw deltaError(`delta result of ${dstSize} bytes is too large`);
  const out = Buffer.allocUnsafe(dstSize);
  let o = 0;
  while (pos < delta.length) {
    const op = delta[pos++]!;
    if (op & 0x80) {
      let off = 0;
      let len = 0;
      // The argument bytes the opcode announces must be there (a missing one would read as NaN).
      let args = 0;
      for (let bit = 0; bit < 7; bit++) if (op & (1 << bit)) args++;
      if (pos + args > delta.length) throw deltaError('truncated delta copy');
      if (op & 0x01) off += delta[pos++]!;
      if (op & 0x02) off += delta[pos++]! * 0x100;
      if (op & 0x04) off += delta[pos++]! * 0x10000;
      if (op & 0x08) off += delta[pos++]! * 0x1000000;
      if (op & 0x10) len += delta[pos++]!;
      if (op & 0x20) len += delta[pos++]! * 0x100;
      if (op & 0x40) len += delta[pos++]! * 0x10000;
      if (len === 0) len = 0x10000;
      if (off + len > base.length || o + len > out.length) throw deltaError('delta copy out of range');
      base.copy(out, o, off, off + len);
      o += len;
    } else if (op > 0) {
      if (pos + op > delta.length || o + op > out.length) throw deltaError('delta insert out of range');
      delta.copy(out, o, pos, pos + op);
      pos += op;
      o += op;
    } else throw deltaError('delta opcode 0');
  }
  if (o !== out.length) throw deltaError('delta result has the wrong size');
  return out;
}
