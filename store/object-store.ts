/**
 * The objects of one repository, read and written: loose objects (written
 * whole: temporary file, fsync, rename), the packs on disk (./git-pack.ts),
 * the pack of the last fetch while indexed, and a few pinned objects (head
 * commit and its trees). Writes go to loose files (an append) or, between
 * `startPack()` and `syncDirs()`, into one new pack (`ChainRepo.init`).
 * Hand-written writes fsync (bench/RESULTS.md "Chain core");
 * `git cat-file` (./git-cat-file.ts) is the fallback read.
 * Owns: the lookup order (pinned, fetched, loose, packed, git cat-file),
 * the directory fsyncs, the count of loose objects the next repack packs.
 * Trusts: objects on disk to be what their name says.
 * Must hold: `write` never leaves a partial object under an object's name;
 * a name is durable once `syncDirs()` returned, also when a repack beside
 * it removed its fan-out directory.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { dirname, join } from 'node:path';
import { deflateSync } from 'node:zlib';
import { VouchError } from '../chain/errors.ts';
import { type CommitHead, OID_RE, type TreeEntry, ioError, loosePath, objectId, parseCommitHead, parseTree, readLoose } from './git-objects.ts';
import { fsyncDir, writeDurably } from '../platform/durable-file.ts';
import { DiskPacks } from './git-pack.ts';
import { GitCatFile } from './git-cat-file.ts';
import type { PackData } from './git-pack-index.ts';
import { PackFileWriter } from './pack-file-writer.ts';

/** Loose-object writer and reader; packed objects are read through DiskPacks (stock git for old index versions). */
export class ObjectStore {
  private _fetched: PackData | null = null;
  private knownDirs = new Set<string>();
  /** The head commit and the trees on the path to its last block, so a sync's diff from the head never opens a big pack. */
  private pinned = new Map<string, { type: string; body: Buffer }>();
  private seq = 0;
  /** Directories that got new entries since the last `syncDirs()` (object fan-out dirs, and `objects/` for a new one). */
  private unsynced = new Set<string>();
  readonly disk: DiskPacks;
  /** Loose objects not packed yet (written since the last repack, or found on disk). */
  private loose = 0;
  /** The pack `write` adds to between `startPack()` and `syncDirs()`. */
  private packing: PackFileWriter | null = null;

  constructor(readonly gitdir: string) {
    this.disk = new DiskPacks(join(gitdir, 'objects', 'pack'));
  }

  /** The pack of the last fetch (indexed, read through its file): read from first (cheap) until dropped; replacing or dropping it closes its file. */
  get fetched(): PackData | null {
    return this._fetched;
  }

  set fetched(pack: PackData | null) {
    if (this._fetched && this._fetched !== pack) this._fetched.close();
    this._fetched = pack;
  }

  private path(oid: string): string {
    return loosePath(this.gitdir, oid);
  }

  /**
   * Write an object (whole: temporary file + rename) unless it already
   * exists; returns its id. `path`: a tree's directory in the chain (`''`
   * for the root).
   */
  write(type: 'blob' | 'tree' | 'commit' | 'tag', body: Buffer): string {
    const header = Buffer.from(`${type} ${body.length}\0`, 'latin1');
    const oid = createHash('sha1').update(header).update(body).digest('hex');
    if (this.packing) {
      this.packing.addWhole(oid, type, body);
      return oid;
    }
    const file = this.path(oid);
    if (fs.existsSync(file)) return oid;
    const dir = dirname(file);
    if (!this.knownDirs.has(dir)) {
      if (!fs.existsSync(dir)) {
        fs.mkdirSync(dir, { recursive: true });
        this.unsynced.add(dirname(dir)); // the new fan-out directory's own entry
      }
      this.knownDirs.add(dir);
    }
    const tmp = join(dir, `tmp_obj_vouch_${process.pid}_${this.seq++}`);
    const data = deflateSync(Buffer.concat([header, body]), { level: 1 });
    // Durable before it is named: the file's bytes reach the disk before the rename that makes
    // it the object, so a power loss never leaves an object file that comes back empty.
    for (let attempt = 1; ; attempt++) {
      try {
        writeDurably(tmp, data, 0o444);
        break;
      } catch (e) {
        // A repack running beside this append: git's prune-packed removed the fan-out directory it emptied
        // (./git-repack.ts). Made again and written again; once the temporary file is in it, git's rmdir fails.
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || attempt >= 3) throw e;
        fs.mkdirSync(dir, { recursive: true });
        this.unsynced.add(dirname(dir));
      }
    }
    fs.renameSync(tmp, file);
    this.unsynced.add(dir);
    this.loose++;
    return oid;
  }

  /** Until the next `syncDirs()`, `write` adds objects to one new pack (a temporary file until then) instead of loose files. */
  startPack(): void {
    this.packing ??= new PackFileWriter(join(this.gitdir, 'objects', 'pack'));
  }

  /** Drop the pack `startPack()` began, if any (its temporary file is removed). */
  abortPack(): void {
    this.packing?.abort();
    this.packing = null;
  }

  /**
   * fsyncs every directory an object was added to since the last call, so
   * the objects' names survive a power loss; called once per commit, before
   * the branch moves (the cost is per commit, not per object or submit).
   * After `startPack()`: writes the pack and its index, durably.
   */
  syncDirs(): void {
    if (this.packing) {
      const w = this.packing;
      this.packing = null;
      try {
        w.finish();
      } catch (e) {
        w.abort();
        throw e;
      }
      this.disk.refresh();
    }
    for (const dir of this.unsynced) {
      try {
        fsyncDir(dir);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
        // git's prune-packed emptied and removed it (a repack beside this append): it removes a loose object only once
        // a pack it made durable holds it, so every object named in it is in a pack.
        this.knownDirs.delete(dir);
      }
    }
    this.unsynced.clear();
  }

  /** Loose objects found on disk (at open, by ChainRepo's sweep of the fan-out directories): counted towards the next repack. */
  noteLoose(oids: readonly string[]): void {
    this.loose += oids.length;
  }

  /** How many loose objects wait to be packed. */
  get pendingLoose(): number {
    return this.loose;
  }

  /**
   * After stock git repacked (./git-repack.ts): the pack list read again,
   * the cached objects dropped, and the loose objects counted on disk (what
   * git left: those appends wrote while it ran, and all, if it failed
   * part-way). Synchronous: no write of this process falls between the
   * count and its use, so an object written meanwhile is counted once.
   */
  afterRepack(): void {
    this.disk.refresh();
    this.resetCache();
    const objects = join(this.gitdir, 'objects');
    let n = 0;
    let made = false;
    for (let b = 0; b < 256; b++) {
      const dir = join(objects, b.toString(16).padStart(2, '0'));
      try {
        for (const f of fs.readdirSync(dir)) if (f.length === 38 && /^[0-9a-f]{38}$/.test(f)) n++;
      } catch {
        // git's prune-packed removes the fan-out directories it empties: made again here, so appends never pay for one.
        this.knownDirs.delete(dir);
        try {
          fs.mkdirSync(dir);
          made = true;
        } catch {
          /* made meanwhile, or not possible: an append makes it */
        }
      }
    }
    if (made) fsyncDir(objects);
    this.loose = n;
  }

  /** Whether a pack (of the last listing) holds `oid`. */
  inPacks(oid: string): boolean {
    return this.disk.inPacks(oid);
  }

  async read(oid: string): Promise<{ type: string; body: Buffer }> {
    const f = this.pinned.get(oid) ?? this.fetched?.get(oid);
    if (f) return f;
    const loose = readLoose(this.gitdir, oid);
    if (loose) return loose;
    try {
      const d = this.disk.read(oid);
      if (d) return d;
    } catch (e) {
      throw ioError(`cannot read object ${oid} from a pack`, e);
    }
    // The fallback (packs with a version-1 index, an alternate): stock git, one process for this read.
    const git = new GitCatFile(this.gitdir);
    try {
      const r = await git.read(oid);
      if (r) return r;
    } catch (e) {
      throw ioError(`cannot read object ${oid}`, e);
    } finally {
      git.close();
    }
    throw new VouchError('io_error', `cannot read object ${oid}: not in the repository`);
  }

  /**
   * `read` without the git fallback (packs with a version-2
   * index, loose objects, the fetched pack, the pinned objects): synchronous,
   * for the block reads of the sparse layout. `io_error` when it is none of those.
   */
  readSync(oid: string): { type: string; body: Buffer } {
    const f = this.pinned.get(oid) ?? this.fetched?.get(oid);
    if (f) return f;
    // Packs first: nearly every block is packed, and a failed open of a loose path costs more than the pack read.
    let d: { type: string; body: Buffer } | null;
    try {
      d = this.disk.read(oid);
    } catch (e) {
      throw ioError(`cannot read object ${oid} from a pack`, e);
    }
    if (d) return d;
    const loose = readLoose(this.gitdir, oid);
    if (loose) return loose;
    // Packed by git between the two lookups: it names the pack before it prunes the loose file, so the pack is there now.
    try {
      d = this.disk.read(oid);
    } catch (e) {
      throw ioError(`cannot read object ${oid} from a pack`, e);
    }
    if (d) return d;
    throw new VouchError('io_error', `object ${oid} is missing (or in a pack with an old index: run git gc)`);
  }

  async has(oid: string): Promise<boolean> {
    if (!OID_RE.test(oid)) return false;
    // Packs with a pre-2008 (version 1) index are not consulted here: at worst an object is fetched again.
    return this.pinned.has(oid) || this.fetched?.has(oid) === true || fs.existsSync(this.path(oid)) || this.disk.has(oid);
  }

  /** Keep exactly these objects at hand (replacing the previous set). */
  pin(objects: { type: string; body: Buffer }[]): void {
    this.pinned = new Map(objects.map((o) => [objectId(o.type, o.body), o]));
  }

  /** Let go of the objects DiskPacks keeps. */
  resetCache(): void {
    this.disk.resetCache();
  }

  async readTree(oid: string): Promise<TreeEntry[]> {
    const o = await this.read(oid);
    if (o.type !== 'tree') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a tree`);
    return parseTree(o.body, oid);
  }

  /** A commit's tree and parents. */
  async readCommit(oid: string): Promise<CommitHead> {
    const o = await this.read(oid);
    if (o.type !== 'commit') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a commit`);
    return parseCommitHead(o.body, oid);
  }

  async readCommitTree(oid: string): Promise<string> {
    return (await this.readCommit(oid)).tree;
  }

  async readCommitParents(oid: string): Promise<string[]> {
    return (await this.readCommit(oid)).parents;
  }

  async readBlob(oid: string): Promise<Buffer> {
    const o = await this.read(oid);
    if (o.type !== 'blob') throw new VouchError('io_error', `object ${oid} is a ${o.type}, expected a blob`);
    return o.body;
  }
}
