/**
 * The git index file (`.git/index`) of the chain repository, kept in git's
 * split-index form so an append costs the same at any chain size
 * (isomorphic-git rewrites the whole index; bench/RESULTS.md "Chain core").
 * The byte format is ./git-index-format.ts.
 * Owns: the split-index `link` extension and its EWAH bitmaps, the shared
 * index files `.git/sharedindex.<sha1>`, the `index.lock` protocol.
 * Trusts: the caller wrote the working-tree files it hands in; one vouch
 * writer; git's index files once their trailing SHA-1 checks.
 * Must hold: `.git/index` is replaced only by renaming a complete,
 * exclusively created `index.lock`; a split index names an existing shared
 * index; the split part is folded once it exceeds `splitLimit(base)`; any
 * index git writes is accepted (a full one adopted by hard link).
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import {
  type IndexEntry,
  ZERO_OID,
  buildIndexFile,
  compareEntries,
  comparePaths,
  corrupt,
  findPositions,
  parseIndex,
  serializeEntry,
  serializeIndex,
  stageOf,
} from './git-index-format.ts';
import { acquireLock, commitLock, releaseLock } from './git-files.ts';

export { type IndexEntry, comparePaths, entryFromStat, statMatches } from './git-index-format.ts';

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

  constructor(
    gitdir: string,
    private hint: IndexHint | null = null,
  ) {
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
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
        this.signature = null;
        return;
      }
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
    if (parsed.sparse) corrupt('a sparse index (git sparse-checkout) where the chain keeps its block files checked out');
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
    if (n === 0 || compareEntries(this.added[n - 1]!, e) < 0) {
      this.added.push(e);
      return;
    }
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
    if (hit && hit.path === e.path && stageOf(hit) === 0) {
      this.added[at] = e;
      return;
    }
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
        else {
          out.push(this.added[j++]!);
          i++;
        } // an added entry overrides its base twin
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
    if (!b) {
      b = serializeEntry(e);
      this.bufs.set(e, b);
    }
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
      merged.forEach((e, pos) => {
        if (!e.path.includes('/')) rootPositions.set(e.path, pos);
      });
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
        const nameOff = off + (flags & 0x4000 ? 64 : 62);
        const len = flags & 0xfff;
        const nameEnd = len < 0xfff ? nameOff + len : baseBuf.indexOf(0, nameOff);
        if (nameEnd < 0 || nameEnd > limit) corrupt('bad path');
        off = start + ((nameEnd - start + 8) & ~7);
        const name = baseBuf.subarray(nameOff, nameEnd);
        const stage = (flags >> 12) & 3;
        let c = -1;
        while (j < added.length && (c = Buffer.compare(added[j]!.name, name) || added[j]!.stage - stage) < 0) {
          emitAdded();
          c = -1;
        }
        if (j < added.length && c === 0) {
          emitAdded();
          continue;
        } // an added entry overrides its base twin
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
      try {
        fs.unlinkSync(tmp);
      } catch {
        /* gone */
      }
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
    for (const [, e] of rep) {
      bufs.push(this.entryBuf(e, true));
      extended ||= e.extFlags !== 0;
    }
    for (const e of this.added) {
      bufs.push(this.entryBuf(e, false));
      extended ||= e.extFlags !== 0;
    }
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
      try {
        fs.unlinkSync(this.sharedPath(name));
      } catch {
        /* already gone */
      }
    }
    this.orphans.clear();
  }
}
