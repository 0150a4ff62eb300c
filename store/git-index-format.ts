/**
 * The bytes of git's index file (gitformat-index): entries, stat data, path
 * order, the sparse index's `sdir` extension (a split index's `link` is only
 * recognised: the caller rewrites such an index). Pure codecs;
 * ./sparse-layout.ts owns the file.
 * Owns: reading versions 2, 3 and 4 (unknown extensions skipped), writing
 * version 2 (3 with extended flags), git's path order (`comparePaths`).
 * Trusts: nothing it reads: an index that does not parse is `io_error`
 * ("corrupt index: ...") and the caller rebuilds it from the branch.
 * Must hold: entries sorted by path then stage; the trailing SHA-1 covers
 * every byte before it; `parseIndex(serializeIndex(e))` gives back `e`.
 */
import { createHash } from 'node:crypto';
import type { BigIntStats } from 'node:fs';
import { VouchError } from '../chain/errors.ts';

// ---------------------------------------------------------------------------
// Entries

export interface IndexEntry {
  /** Path relative to the work tree, '/'-separated. */
  path: string;
  /** Object id (hex) of the blob. */
  oid: string;
  /** git mode, e.g. 0o100644. */
  mode: number;
  ctimeSec: number;
  ctimeNsec: number;
  mtimeSec: number;
  mtimeNsec: number;
  dev: number;
  ino: number;
  uid: number;
  gid: number;
  size: number;
  /** On-disk 16-bit flags without the name-length bits (assume-valid, extended, stage). */
  flags: number;
  /** Extended flags (index v3+); 0 when none. */
  extFlags: number;
}

const U32 = 0xffffffffn;
const NS = 1_000_000_000n;
export const ZERO_OID = '0'.repeat(40);

/** The index entry git would record for `path` after `lstat` gave `st`. */
export function entryFromStat(path: string, oid: string, st: BigIntStats): IndexEntry {
  const isLink = (Number(st.mode) & 0o170000) === 0o120000;
  const exec = (Number(st.mode) & 0o100) !== 0;
  return {
    path,
    oid,
    mode: isLink ? 0o120000 : exec ? 0o100755 : 0o100644,
    ctimeSec: Number((st.ctimeNs / NS) & U32),
    ctimeNsec: Number(st.ctimeNs % NS),
    mtimeSec: Number((st.mtimeNs / NS) & U32),
    mtimeNsec: Number(st.mtimeNs % NS),
    dev: Number(st.dev & U32),
    ino: Number(st.ino & U32),
    uid: Number(st.uid & U32),
    gid: Number(st.gid & U32),
    size: Number(st.size & U32),
    flags: 0,
    extFlags: 0,
  };
}

/** True when `st` still describes the file the entry was recorded from (git's stat check, nanoseconds included). */
export function statMatches(e: IndexEntry, st: BigIntStats): boolean {
  const f = entryFromStat(e.path, e.oid, st);
  return (
    f.mtimeSec === e.mtimeSec &&
    f.mtimeNsec === e.mtimeNsec &&
    f.ctimeSec === e.ctimeSec &&
    f.ctimeNsec === e.ctimeNsec &&
    f.size === e.size &&
    f.ino === e.ino &&
    f.dev === e.dev &&
    f.uid === e.uid &&
    f.gid === e.gid &&
    f.mode === e.mode
  );
}

/** git's path order: bytewise over UTF-8, i.e. by code point. */
export function comparePaths(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    // UTF-16 order equals code point order except surrogates vs U+E000..U+FFFF.
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys) return xs ? 1 : -1;
    return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

// ---------------------------------------------------------------------------
// Whole index files

export interface ParsedIndex {
  version: number;
  entries: IndexEntry[];
  /** The index is git's split index (`link` extension, core.splitIndex): its entries are only part of the index; the caller rewrites it. */
  split: boolean;
  /** Trailing SHA-1 (hex); all zeros when git skipped the hash. */
  checksum: string;
  /** The index is a sparse index (`sdir` extension): a directory entry may stand for a whole tree (./sparse-layout.ts). */
  sparse: boolean;
}

function sha1(...parts: Buffer[]): Buffer {
  const h = createHash('sha1');
  for (const p of parts) h.update(p);
  return h.digest();
}

export function corrupt(what: string): never {
  throw new VouchError('io_error', `corrupt index: ${what}`);
}

/** Walk the entries of an index buffer, calling `visit` with each entry's fields; returns the offset after the entries. */
function walkEntries(
  buf: Buffer,
  visit: (pos: number, start: number, path: string, flags: number, extFlags: number) => void,
): { version: number; count: number; end: number } {
  if (buf.length < 32 || buf.toString('latin1', 0, 4) !== 'DIRC') corrupt('no DIRC signature');
  const version = buf.readUInt32BE(4);
  if (version < 2 || version > 4) corrupt(`unsupported version ${version}`);
  const count = buf.readUInt32BE(8);
  const limit = buf.length - 20;
  let off = 12;
  let prev: Buffer = Buffer.alloc(0);
  for (let pos = 0; pos < count; pos++) {
    const start = off;
    if (off + 62 > limit) corrupt('truncated entry');
    const flags = buf.readUInt16BE(off + 60);
    let extFlags = 0;
    let nameOff = off + 62;
    if (flags & 0x4000) {
      if (version < 3) corrupt('extended flags in a version 2 index');
      extFlags = buf.readUInt16BE(nameOff);
      nameOff += 2;
    }
    let name: Buffer;
    if (version === 4) {
      let p = nameOff;
      let c = buf[p++]!;
      let strip = c & 127;
      while (c & 128) {
        c = buf[p++]!;
        strip = (strip + 1) * 128 + (c & 127);
      }
      const nul = buf.indexOf(0, p);
      if (nul < 0 || nul >= limit || strip > prev.length) corrupt('bad v4 path');
      name = Buffer.concat([prev.subarray(0, prev.length - strip), buf.subarray(p, nul)]);
      off = nul + 1;
      prev = name;
    } else {
      const len = flags & 0xfff;
      const nameEnd = len < 0xfff ? nameOff + len : buf.indexOf(0, nameOff);
      if (nameEnd < 0 || nameEnd > limit) corrupt('bad path');
      name = buf.subarray(nameOff, nameEnd);
      off = start + ((nameEnd - start + 8) & ~7);
    }
    visit(pos, start, name.toString('utf8'), flags & 0xf000, extFlags);
  }
  return { version, count, end: off };
}

/** Parse a whole index file (any of versions 2-4), verifying its trailing SHA-1 unless it is zero. */
export function parseIndex(buf: Buffer): ParsedIndex {
  if (buf.length < 32) corrupt('too short');
  const checksum = buf.subarray(buf.length - 20).toString('hex');
  if (checksum !== ZERO_OID && !sha1(buf.subarray(0, buf.length - 20)).equals(buf.subarray(buf.length - 20))) {
    corrupt('checksum mismatch');
  }
  const entries: IndexEntry[] = [];
  const { version, end } = walkEntries(buf, (_pos, s, path, flags, extFlags) => {
    entries.push({
      path,
      oid: buf.toString('hex', s + 40, s + 60),
      mode: buf.readUInt32BE(s + 24),
      ctimeSec: buf.readUInt32BE(s),
      ctimeNsec: buf.readUInt32BE(s + 4),
      mtimeSec: buf.readUInt32BE(s + 8),
      mtimeNsec: buf.readUInt32BE(s + 12),
      dev: buf.readUInt32BE(s + 16),
      ino: buf.readUInt32BE(s + 20),
      uid: buf.readUInt32BE(s + 28),
      gid: buf.readUInt32BE(s + 32),
      size: buf.readUInt32BE(s + 36),
      flags,
      extFlags,
    });
  });
  let split = false;
  let sparse = false;
  let off = end;
  const limit = buf.length - 20;
  while (off + 8 <= limit) {
    const sig = buf.toString('latin1', off, off + 4);
    const size = buf.readUInt32BE(off + 4);
    const data = off + 8;
    if (data + size > limit) corrupt(`truncated ${sig} extension`);
    if (sig === 'link') {
      split = true;
    } else if (sig === 'sdir') {
      sparse = true;
    }
    off = data + size;
  }
  return { version, entries, split, checksum, sparse };
}

/** On-disk bytes of one entry in a version 2/3 index. */
export function serializeEntry(e: IndexEntry): Buffer {
  const name = Buffer.from(e.path, 'utf8');
  const ext = e.extFlags !== 0;
  const nameOff = ext ? 64 : 62;
  const size = (nameOff + name.length + 8) & ~7;
  const b = Buffer.alloc(size);
  b.writeUInt32BE(e.ctimeSec >>> 0, 0);
  b.writeUInt32BE(e.ctimeNsec >>> 0, 4);
  b.writeUInt32BE(e.mtimeSec >>> 0, 8);
  b.writeUInt32BE(e.mtimeNsec >>> 0, 12);
  b.writeUInt32BE(e.dev >>> 0, 16);
  b.writeUInt32BE(e.ino >>> 0, 20);
  b.writeUInt32BE(e.mode >>> 0, 24);
  b.writeUInt32BE(e.uid >>> 0, 28);
  b.writeUInt32BE(e.gid >>> 0, 32);
  b.writeUInt32BE(e.size >>> 0, 36);
  if (!/^[0-9a-f]{40}$/.test(e.oid)) throw new VouchError('io_error', `bad object id in index entry ${e.path}`);
  b.write(e.oid, 40, 'hex');
  const flags = (e.flags & 0xb000) | (ext ? 0x4000 : 0) | Math.min(name.length, 0xfff);
  b.writeUInt16BE(flags, 60);
  if (ext) b.writeUInt16BE(e.extFlags, 62);
  name.copy(b, nameOff);
  return b;
}

/** A complete index file: header, the given entry bytes, the empty `sdir` extension of a sparse index when asked, trailing SHA-1. */
export function buildIndexFile(entryBufs: Buffer[], count: number, extended: boolean, sdir?: 'sdir'): Buffer {
  const header = Buffer.alloc(12);
  header.write('DIRC', 0, 'latin1');
  header.writeUInt32BE(extended ? 3 : 2, 4);
  header.writeUInt32BE(count, 8);
  const parts = [header, ...entryBufs];
  if (sdir === 'sdir') {
    const h = Buffer.alloc(8);
    h.write('sdir', 0, 'latin1');
    parts.push(h);
  }
  const body = Buffer.concat(parts);
  return Buffer.concat([body, sha1(body)]);
}

/** An index file holding `entries` (sorted by the caller). */
export function serializeIndex(entries: readonly IndexEntry[]): Buffer {
  return buildIndexFile(
    entries.map((e) => serializeEntry(e)),
    entries.length,
    entries.some((e) => e.extFlags !== 0),
  );
}
