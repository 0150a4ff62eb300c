/**
 * git-index: the git index file (`.git/index`) of the chain repository, kept
 * in git's split-index form so that an append costs the same at block
 * 1,000,000 as at block 10.
 *
 * Owns: the on-disk index formats (reads versions 2, 3 and 4 with any
 * extensions, writes version 2, or 3 when an entry carries extended flags),
 * the split-index `link` extension with its EWAH bitmaps, the shared index
 * files `.git/sharedindex.<sha1>` this module writes or adopts, and the
 * `index.lock` protocol used to replace `.git/index`.
 *
 * Trusts: that the caller has written the working-tree files it hands in
 * (entries carry the stat data the caller took after writing them), that the
 * repository has a single vouch writer, and that git's own index files are
 * well formed once their trailing SHA-1 checks out.
 *
 * Must always hold:
 * - `.git/index` is only ever replaced by renaming a complete `index.lock`
 *   that this module created exclusively (O_EXCL), so git and vouch never
 *   interleave writes and a crash leaves either the old or the new index.
 * - A split `.git/index` only names a shared index that exists on disk; a
 *   shared index's trailing SHA-1 is its name.
 * - Replaced entries are written with empty names, in base order, before the
 *   added entries, which are sorted by path then stage (gitformat-index).
 * - The split part stays small: it is folded into a new shared index once it
 *   holds more than `splitLimit(base)` entries, so each write is O(limit),
 *   and the O(n) shared rewrite happens once per `limit` writes.
 * - Any index git writes (full or split, any version) is accepted: a full
 *   index is adopted as the new shared index by hard-linking it to
 *   `sharedindex.<its trailing sha1>`; nothing is rewritten to do so.
 */
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { dirname, join } from 'node:path';
import { VouchError } from '../chain/errors.ts';

// ---------------------------------------------------------------------------
// Entries

export interface IndexEntry {
  /** Path relative to the work tree, '/'-separated. Empty for a replacement read from a split index. */
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
const ZERO_OID = '0'.repeat(40);

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
  return f.mtimeSec === e.mtimeSec && f.mtimeNsec === e.mtimeNsec && f.ctimeSec === e.ctimeSec &&
    f.ctimeNsec === e.ctimeNsec && f.size === e.size && f.ino === e.ino && f.dev === e.dev &&
    f.uid === e.uid && f.gid === e.gid && f.mode === e.mode;
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

function stageOf(e: IndexEntry): number {
  return (e.flags >> 12) & 3;
}

function compareEntries(a: IndexEntry, b: IndexEntry): number {
  return comparePaths(a.path, b.path) || stageOf(a) - stageOf(b);
}

// ---------------------------------------------------------------------------
// EWAH bitmaps (ewah/ewah_io.c serialization, ewah/ewok_rlw.h word layout)

/** Serialize a set of bit positions (ascending, unique) as a git EWAH bitmap. */
export function ewahEncode(positions: readonly number[]): Buffer {
  const words: bigint[] = [];
  let rlwPos = 0;
  let nextWord = 0; // first bitmap word not yet emitted
  let i = 0;
  while (i < positions.length) {
    const first = Math.floor(positions[i]! / 64);
    let run = first - nextWord; // clean zero words before the literals
    while (run > 0xffffffff) { // a marker can carry 2^32-1 clean words
      rlwPos = words.length;
      words.push(BigInt(0xffffffff) << 1n);
      run -= 0xffffffff;
    }
    rlwPos = words.length;
    words.push(0n);
    const literals: bigint[] = [];
    let w = first;
    while (i < positions.length && Math.floor(positions[i]! / 64) === w && literals.length < 0x7fffffff) {
      let word = 0n;
      while (i < positions.length && Math.floor(positions[i]! / 64) === w) {
        word |= 1n << BigInt(positions[i]! % 64);
        i++;
      }
      literals.push(word);
      w++;
    }
    words[rlwPos] = (BigInt(literals.length) << 33n) | (BigInt(run) << 1n);
    words.push(...literals);
    nextWord = w;
  }
  if (words.length === 0) words.push(0n);
  const bitSize = positions.length ? positions[positions.length - 1]! + 1 : 0;
  const buf = Buffer.alloc(12 + words.length * 8);
  buf.writeUInt32BE(bitSize, 0);
  buf.writeUInt32BE(words.length, 4);
  words.forEach((w, k) => buf.writeBigUInt64BE(w, 8 + k * 8));
  buf.writeUInt32BE(rlwPos, 8 + words.length * 8);
  return buf;
}

/** Read a git EWAH bitmap at `offset`: its set bit positions and the offset after it. */
export function ewahDecode(buf: Buffer, offset: number): { positions: number[]; end: number } {
  if (offset + 8 > buf.length) throw new Error('corrupt ewah bitmap: truncated header');
  const count = buf.readUInt32BE(offset + 4);
  const end = offset + 8 + count * 8 + 4;
  if (end > buf.length) throw new Error('corrupt ewah bitmap: truncated words');
  const positions: number[] = [];
  let pos = 0;
  let k = 0;
  const word = (j: number): bigint => buf.readBigUInt64BE(offset + 8 + j * 8);
  while (k < count) {
    const rlw = word(k++);
    const runBit = rlw & 1n;
    const runLen = Number((rlw >> 1n) & U32) * 64;
    const literals = Number(rlw >> 33n);
    if (runBit) for (let j = 0; j < runLen; j++) positions.push(pos + j);
    pos += runLen;
    for (let l = 0; l < literals && k < count; l++) {
      let w = word(k++);
      for (let b = 0; w !== 0n; b++, w >>= 1n) if (w & 1n) positions.push(pos + b);
      pos += 64;
    }
  }
  return { positions, end };
}

// ---------------------------------------------------------------------------
// Whole index files

export interface LinkExtension {
  /** Name (trailing SHA-1) of the shared index. */
  base: string;
  /** Base positions removed by this index. */
  deleted: number[];
  /** Base positions replaced by the first `replaced.length` entries of this index. */
  replaced: number[];
}

export interface ParsedIndex {
  version: number;
  entries: IndexEntry[];
  link: LinkExtension | null;
  /** Trailing SHA-1 (hex); all zeros when git skipped the hash. */
  checksum: string;
}

function sha1(...parts: Buffer[]): Buffer {
  const h = createHash('sha1');
  for (const p of parts) h.update(p);
  return h.digest();
}

function corrupt(what: string): never {
  throw new Error(`corrupt index: ${what}`);
}

/** Walk the entries of an index buffer, calling `visit` with each entry's fields; returns the offset after the entries. */
function walkEntries(buf: Buffer, visit: (pos: number, start: number, path: string, flags: number, extFlags: number) => void): { version: number; count: number; end: number } {
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
        strip = ((strip + 1) * 128) + (c & 127);
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
  let link: LinkExtension | null = null;
  let off = end;
  const limit = buf.length - 20;
  while (off + 8 <= limit) {
    const sig = buf.toString('latin1', off, off + 4);
    const size = buf.readUInt32BE(off + 4);
    const data = off + 8;
    if (data + size > limit) corrupt(`truncated ${sig} extension`);
    if (sig === 'link') {
      if (size < 20) corrupt('short link extension');
      const base = buf.toString('hex', data, data + 20);
      let deleted: number[] = [];
      let replaced: number[] = [];
      if (size > 20) {
        const ext = buf.subarray(data, data + size);
        const d = ewahDecode(ext, 20);
        const r = ewahDecode(ext, d.end);
        if (r.end !== size) corrupt('garbage at the end of link extension');
        deleted = d.positions;
        replaced = r.positions;
      }
      link = { base, deleted, replaced };
    } else if (sig === 'sdir') {
      corrupt('sparse index is not supported');
    }
    off = data + size;
  }
  return { version, entries, link, checksum };
}

/** Positions (in `buf`, an index file) of the entries whose path is in `wanted`; absent paths map to -1. */
export function findPositions(buf: Buffer, wanted: Iterable<string>): Map<string, number> {
  const out = new Map<string, number>();
  for (const p of wanted) out.set(p, -1);
  walkEntries(buf, (pos, _s, path) => {
    if (out.get(path) === -1) out.set(path, pos);
  });
  return out;
}

/** On-disk bytes of one entry in a version 2/3 index; `stripName` writes an empty name (split-index replacement). */
export function serializeEntry(e: IndexEntry, stripName = false): Buffer {
  const name = stripName ? Buffer.alloc(0) : Buffer.from(e.path, 'utf8');
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
  if (!/^[0-9a-f]{40}$/.test(e.oid)) throw new Error(`bad object id in index entry ${e.path}`);
  b.write(e.oid, 40, 'hex');
  const flags = (e.flags & 0xb000) | (ext ? 0x4000 : 0) | Math.min(name.length, 0xfff);
  b.writeUInt16BE(flags, 60);
  if (ext) b.writeUInt16BE(e.extFlags, 62);
  name.copy(b, nameOff);
  return b;
}

/** A complete index file: header, the given entry bytes, optional link extension, trailing SHA-1. */
export function buildIndexFile(entryBufs: Buffer[], count: number, extended: boolean, link?: LinkExtension): Buffer {
  const header = Buffer.alloc(12);
  header.write('DIRC', 0, 'latin1');
  header.writeUInt32BE(extended ? 3 : 2, 4);
  header.writeUInt32BE(count, 8);
  const parts = [header, ...entryBufs];
  if (link) {
    const del = ewahEncode(link.deleted);
    const rep = ewahEncode(link.replaced);
    const h = Buffer.alloc(8 + 20);
    h.write('link', 0, 'latin1');
    h.writeUInt32BE(20 + del.length + rep.length, 4);
    h.write(link.base, 8, 'hex');
    parts.push(h, del, rep);
  }
  const body = Buffer.concat(parts);
  return Buffer.concat([body, sha1(body)]);
}

/** A full (non-split) index file holding `entries` (sorted by the caller). */
export function serializeIndex(entries: readonly IndexEntry[]): Buffer {
  return buildIndexFile(entries.map((e) => serializeEntry(e)), entries.length, entries.some((e) => e.extFlags !== 0));
}

// ---------------------------------------------------------------------------
// Locks

const STALE_LOCK_MS = 10_000;
const LOCK_WAIT_MS = 12_000;

/**
 * Create `lockPath` exclusively and return its descriptor. A lock held by
 * someone else is waited for; one older than 10 s is taken to be a crash
 * leftover and removed (`onStale` is told). Throws `io_error` on timeout.
 */
export async function acquireLock(lockPath: string, onStale?: (path: string) => void): Promise<number> {
  const started = Date.now();
  for (;;) {
    try {
      return fs.openSync(lockPath, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY, 0o644);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new VouchError('io_error', `cannot create ${lockPath}: ${(e as Error).message}`, { cause: e });
      }
    }
    let age = 0;
    try {
      age = Date.now() - fs.statSync(lockPath).mtimeMs;
    } catch {
      continue; // released meanwhile
    }
    if (age > STALE_LOCK_MS) {
      try {
        fs.unlinkSync(lockPath);
        onStale?.(lockPath);
      } catch { /* someone else removed it */ }
      continue;
    }
    if (Date.now() - started > LOCK_WAIT_MS) {
      throw new VouchError('io_error', `${lockPath} is held by another process (remove it if no git command is running)`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** fsyncs a directory, so the names created, renamed or removed in it survive a power loss. */
export function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Write `data` to the lock (descriptor `fd` at `lockPath`) and rename it onto
 * `target`. `durable`: the lock file is fsynced before the rename and the
 * directory after it, so the new content is what a power loss leaves (the
 * branch ref: the commit point of an acknowledged append).
 */
export function commitLock(fd: number, lockPath: string, target: string, data: Buffer | string, opts: { durable?: boolean } = {}): void {
  try {
    if (typeof data === 'string') fs.writeSync(fd, data);
    else fs.writeSync(fd, data);
    if (opts.durable) fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(lockPath, target);
    if (opts.durable) fsyncDir(dirname(target));
  } catch (e) {
    try { fs.closeSync(fd); } catch { /* already closed */ }
    try { fs.unlinkSync(lockPath); } catch { /* gone */ }
    throw new VouchError('io_error', `cannot write ${target}: ${(e as Error).message}`, { cause: e });
  }
}

export function releaseLock(fd: number, lockPath: string): void {
  try { fs.closeSync(fd); } catch { /* closed */ }
  try { fs.unlinkSync(lockPath); } catch { /* gone */ }
}

// ---------------------------------------------------------------------------
// The split index of one repository

/** Hint saved by the caller so a restart need not scan the shared index: base name and known positions. */
export interface IndexHint {
  base: string;
  positions: Record<string, number>;
}

/** Largest split part before it is folded into a new shared index: max(1000, 2*sqrt(n)). */
export function splitLimit(baseCount: number): number {
  return Math.max(1000, Math.ceil(2 * Math.sqrt(baseCount)));
}

function fileSignature(path: string): string | null {
  try {
    const st = fs.lstatSync(path, { bigint: true });
    return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } catch {
    return null;
  }
}

function readSharedCount(path: string): number {
  const fd = fs.openSync(path, 'r');
  try {
    const h = Buffer.alloc(12);
    if (fs.readSync(fd, h, 0, 12, 0) !== 12 || h.toString('latin1', 0, 4) !== 'DIRC') corrupt(`bad shared index ${path}`);
    return h.readUInt32BE(8);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * In-memory model of `.git/index` as base (shared index) + split part, and
 * its writer. Use `update()` for every change: it takes `index.lock`,
 * reloads the model if anything else rewrote `.git/index`, applies the
 * change, and writes the split index (or, past the limit, a new shared one).
 */
export class SplitIndex {
  readonly gitdir: string;
  private base: { name: string; count: number } | null = null;
  private replaced = new Map<number, IndexEntry>();
  private deleted = new Set<number>();
  private added: IndexEntry[] = [];
  private positions = new Map<string, number>();
  private signature: string | null = null;
  private bufs = new WeakMap<IndexEntry, Buffer>();
  private loaded = false;
  /** A shared index dropped by replaceAll(), deleted once the new index is in place. */
  private retired: string | null = null;
  /** Shared indexes no longer named by `.git/index` (the one we used before git rewrote the index); deleted under the lock. */
  private orphans = new Set<string>();
  /** Number of shared indexes written by this instance (for tests and benches). */
  sharedWrites = 0;

  constructor(gitdir: string, private hint: IndexHint | null = null) {
    this.gitdir = gitdir;
  }

  private get indexPath(): string {
    return join(this.gitdir, 'index');
  }

  private sharedPath(name: string): string {
    return join(this.gitdir, `sharedindex.${name}`);
  }

  /** Hint to persist so the next process can skip scanning the shared index. */
  getHint(): IndexHint | null {
    if (!this.base) return null;
    const positions: Record<string, number> = {};
    for (const [p, n] of this.positions) if (!p.startsWith('blocks/')) positions[p] = n;
    return { base: this.base.name, positions };
  }

  /** Size of the split part (replaced + deleted + added entries). */
  get splitSize(): number {
    return this.replaced.size + this.deleted.size + this.added.length;
  }

  get baseName(): string | null {
    return this.base?.name ?? null;
  }

  /**
   * (Re)load the model from `.git/index`. A full index is adopted as the
   * shared index (hard link, no rewrite). Throws on a corrupt index or a
   * missing shared index; a missing `.git/index` gives an empty model.
   */
  load(): void {
    if (this.base) this.orphans.add(this.base.name);
    if (this.hint) this.orphans.add(this.hint.base);
    this.base = null;
    this.replaced = new Map();
    this.deleted = new Set();
    this.added = [];
    this.positions = new Map();
    this.loaded = true;
    let buf: Buffer;
    let ino: bigint;
    let fd: number;
    try {
      fd = fs.openSync(this.indexPath, 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') { this.signature = null; return; }
      throw e;
    }
    try {
      ino = fs.fstatSync(fd, { bigint: true }).ino;
      buf = fs.readFileSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    this.signature = fileSignature(this.indexPath);
    const parsed = parseIndex(buf);
    if (parsed.link && parsed.link.base !== ZERO_OID) {
      const { base, deleted, replaced } = parsed.link;
      const count = readSharedCount(this.sharedPath(base));
      if (replaced.length > parsed.entries.length) corrupt('more replacements than entries');
      this.base = { name: base, count };
      replaced.forEach((pos, k) => this.replaced.set(pos, parsed.entries[k]!));
      for (const pos of deleted) this.deleted.add(pos);
      this.added = parsed.entries.slice(replaced.length).sort(compareEntries);
      if (this.hint && this.hint.base === base) {
        for (const [p, n] of Object.entries(this.hint.positions)) this.positions.set(p, n);
      }
      return;
    }
    if (parsed.checksum === ZERO_OID) {
      this.added = parsed.entries; // cannot be named by its hash: the next write makes a shared index
      return;
    }
    // A full index (git wrote it): adopt it as the shared index as it is.
    const name = parsed.checksum;
    const shared = this.sharedPath(name);
    try {
      fs.linkSync(this.indexPath, shared);
      if (fs.lstatSync(shared, { bigint: true }).ino !== ino) {
        // git renamed another index in meanwhile: that file must not carry this name.
        fs.unlinkSync(shared);
        this.added = parsed.entries;
        this.signature = null;
        return;
      }
      this.signature = fileSignature(this.indexPath); // the link changed its ctime
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') {
        this.added = parsed.entries;
        return;
      }
    }
    this.base = { name, count: parsed.entries.length };
    parsed.entries.forEach((e, pos) => {
      if (!e.path.includes('/')) this.positions.set(e.path, pos);
    });
  }

  /** Did anything other than this instance replace `.git/index` since we last read or wrote it? */
  isCurrent(): boolean {
    return this.loaded && fileSignature(this.indexPath) === this.signature;
  }

  private findAdded(path: string): number {
    let lo = 0;
    let hi = this.added.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const c = comparePaths(this.added[mid]!.path, path) || stageOf(this.added[mid]!);
      if (c < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private insertAdded(e: IndexEntry): void {
    const n = this.added.length;
    if (n === 0 || compareEntries(this.added[n - 1]!, e) < 0) { this.added.push(e); return; }
    const at = this.findAdded(e.path);
    if (at < n && this.added[at]!.path === e.path && stageOf(this.added[at]!) === stageOf(e)) this.added[at] = e;
    else this.added.splice(at, 0, e);
  }

  /** Learn the base positions of `paths` (one scan of the shared index for all unknown ones). */
  preparePositions(paths: Iterable<string>): void {
    if (!this.base) return;
    const unknown = [...paths].filter((p) => !this.positions.has(p));
    if (unknown.length === 0) return;
    const found = findPositions(fs.readFileSync(this.sharedPath(this.base.name)), unknown);
    for (const [p, n] of found) this.positions.set(p, n);
  }

  private basePosition(path: string): number {
    if (!this.base) return -1;
    if (!this.positions.has(path)) this.preparePositions([path]);
    return this.positions.get(path) ?? -1;
  }

  /** Add an entry for a path known to be absent from the index (a new block). */
  addNew(e: IndexEntry): void {
    this.insertAdded(e);
  }

  /** Add or replace the stage-0 entry of `e.path`. */
  upsert(e: IndexEntry): void {
    const at = this.findAdded(e.path);
    const hit = this.added[at];
    if (hit && hit.path === e.path && stageOf(hit) === 0) { this.added[at] = e; return; }
    const pos = this.basePosition(e.path);
    if (pos >= 0 && !this.deleted.has(pos)) this.replaced.set(pos, e);
    else this.insertAdded(e);
  }

  /** Remove every stage of `path`. */
  remove(path: string): void {
    this.added = this.added.filter((e) => e.path !== path);
    const pos = this.basePosition(path);
    if (pos >= 0) {
      this.replaced.delete(pos);
      this.deleted.add(pos);
    }
  }

  /** All entries of the index as git sees it (O(n): reads the shared index). */
  mergedEntries(): IndexEntry[] {
    let base: IndexEntry[] = [];
    if (this.base) base = parseIndex(fs.readFileSync(this.sharedPath(this.base.name))).entries;
    const kept: IndexEntry[] = [];
    base.forEach((e, pos) => {
      if (this.deleted.has(pos)) return;
      const r = this.replaced.get(pos);
      kept.push(r ? { ...r, path: e.path } : e);
    });
    const out: IndexEntry[] = [];
    let i = 0;
    let j = 0;
    while (i < kept.length || j < this.added.length) {
      if (j >= this.added.length) out.push(kept[i++]!);
      else if (i >= kept.length) out.push(this.added[j++]!);
      else {
        const c = compareEntries(kept[i]!, this.added[j]!);
        if (c < 0) out.push(kept[i++]!);
        else if (c > 0) out.push(this.added[j++]!);
        else { out.push(this.added[j++]!); i++; } // an added entry overrides its base twin
      }
    }
    return out;
  }

  /** Replace the whole content (repair path): a new shared index holding exactly `entries`. */
  replaceAll(entries: IndexEntry[]): void {
    if (this.base) this.retired = this.base.name;
    this.replaced = new Map();
    this.deleted = new Set();
    this.added = [...entries].sort(compareEntries);
    this.base = null; // forces a new shared index on write
    this.positions = new Map();
  }

  private entryBuf(e: IndexEntry, strip: boolean): Buffer {
    if (strip) return serializeEntry(e, true);
    let b = this.bufs.get(e);
    if (!b) { b = serializeEntry(e); this.bufs.set(e, b); }
    return b;
  }

  /**
   * The merged index as a full index file. For a version 2/3 base, unchanged
   * base entries are copied byte for byte (no parse, no re-serialization);
   * a version 4 base goes through mergedEntries().
   */
  private foldedFile(): { file: Buffer; rootPositions: Map<string, number> } {
    const rootPositions = new Map<string, number>();
    const baseBuf = this.base ? fs.readFileSync(this.sharedPath(this.base.name)) : null;
    if (baseBuf && baseBuf.readUInt32BE(4) === 4) {
      const merged = this.mergedEntries();
      merged.forEach((e, pos) => { if (!e.path.includes('/')) rootPositions.set(e.path, pos); });
      return { file: serializeIndex(merged), rootPositions };
    }
    const parts: Buffer[] = [];
    let extended = baseBuf !== null && baseBuf.readUInt32BE(4) === 3;
    const added = this.added.map((e) => ({ name: Buffer.from(e.path, 'utf8'), stage: stageOf(e), e }));
    let j = 0;
    const emit = (buf: Buffer, name: Buffer) => {
      if (!name.includes(0x2f)) rootPositions.set(name.toString('utf8'), parts.length);
      parts.push(buf);
    };
    const emitAdded = () => {
      const a = added[j++]!;
      extended ||= a.e.extFlags !== 0;
      emit(this.entryBuf(a.e, false), a.name);
    };
    if (baseBuf) {
      const count = baseBuf.readUInt32BE(8);
      const limit = baseBuf.length - 20;
      let off = 12;
      for (let pos = 0; pos < count; pos++) {
        const start = off;
        if (off + 62 > limit) corrupt('truncated entry');
        const flags = baseBuf.readUInt16BE(off + 60);
        const nameOff = off + ((flags & 0x4000) ? 64 : 62);
        const len = flags & 0xfff;
        const nameEnd = len < 0xfff ? nameOff + len : baseBuf.indexOf(0, nameOff);
        if (nameEnd < 0 || nameEnd > limit) corrupt('bad path');
        off = start + ((nameEnd - start + 8) & ~7);
        const name = baseBuf.subarray(nameOff, nameEnd);
        const stage = (flags >> 12) & 3;
        let c = -1;
        while (j < added.length && (c = Buffer.compare(added[j]!.name, name) || added[j]!.stage - stage) < 0) { emitAdded(); c = -1; }
        if (j < added.length && c === 0) { emitAdded(); continue; } // an added entry overrides its base twin
        if (this.deleted.has(pos)) continue;
        const r = this.replaced.get(pos);
        if (r) {
          extended ||= r.extFlags !== 0;
          emit(serializeEntry({ ...r, path: name.toString('utf8') }), name);
        } else emit(baseBuf.subarray(start, off), name);
      }
    }
    while (j < added.length) emitAdded();
    return { file: buildIndexFile(parts, parts.length, extended), rootPositions };
  }

  private writeShared(): string | null {
    const old = this.base?.name ?? this.retired;
    this.retired = null;
    const { file, rootPositions } = this.foldedFile();
    const name = file.subarray(file.length - 20).toString('hex');
    const tmp = join(this.gitdir, `sharedindex_vouch_${process.pid}_${randomBytes(4).toString('hex')}`);
    try {
      fs.writeFileSync(tmp, file, { mode: 0o644 });
      fs.renameSync(tmp, this.sharedPath(name));
    } catch (e) {
      try { fs.unlinkSync(tmp); } catch { /* gone */ }
      throw new VouchError('io_error', `cannot write shared index: ${(e as Error).message}`, { cause: e });
    }
    this.sharedWrites++;
    this.base = { name, count: file.readUInt32BE(8) };
    this.replaced = new Map();
    this.deleted = new Set();
    this.added = [];
    this.positions = rootPositions;
    return old !== name ? old : null;
  }

  /** The split `.git/index` bytes for the model, folding the split part into a new shared index first when due. */
  private build(): { file: Buffer; oldShared: string | null } {
    let oldShared: string | null = null;
    if (!this.base || this.splitSize > splitLimit(this.base.count)) oldShared = this.writeShared();
    const base = this.base!;
    const rep = [...this.replaced.entries()].sort((a, b) => a[0] - b[0]);
    const bufs: Buffer[] = [];
    let extended = false;
    for (const [, e] of rep) { bufs.push(this.entryBuf(e, true)); extended ||= e.extFlags !== 0; }
    for (const e of this.added) { bufs.push(this.entryBuf(e, false)); extended ||= e.extFlags !== 0; }
    const file = buildIndexFile(bufs, bufs.length, extended, {
      base: base.name,
      deleted: [...this.deleted].sort((a, b) => a - b),
      replaced: rep.map(([pos]) => pos),
    });
    return { file, oldShared };
  }

  /**
   * Change the index under `index.lock`: reload if someone else rewrote it
   * (unless `reload: false`, for a change that replaces everything), let
   * `change` edit the model, write the result. `onStale` is told about a
   * stale lock it removed.
   */
  async update(change: (idx: SplitIndex) => void, onStale?: (path: string) => void, opts: { reload?: boolean } = {}): Promise<void> {
    const lockPath = `${this.indexPath}.lock`;
    const fd = await acquireLock(lockPath, onStale);
    let built: { file: Buffer; oldShared: string | null };
    try {
      if (opts.reload !== false && !this.isCurrent()) this.load();
      change(this);
      built = this.build();
    } catch (e) {
      releaseLock(fd, lockPath);
      this.loaded = false; // the model may be half-changed: reload next time
      throw e;
    }
    try {
      commitLock(fd, lockPath, this.indexPath, built.file);
    } catch (e) {
      this.loaded = false;
      throw e;
    }
    this.signature = fileSignature(this.indexPath);
    if (built.oldShared) this.orphans.add(built.oldShared);
    for (const name of this.orphans) {
      if (name === this.base?.name) continue;
      try { fs.unlinkSync(this.sharedPath(name)); } catch { /* already gone */ }
    }
    this.orphans.clear();
  }
}
