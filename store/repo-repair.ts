/**
 * How the chain repository gets back to a state where the branch, the
 * working tree, `.git/index` and `.git/vouch-state.json` agree: after a
 * crash (`open()`), after a commit whose working-tree write failed, and for
 * a fast-forward (the catch-up path). One part of ./chain-repo.ts.
 * Owns: working-tree catch-up writes, the diff of two commits' trees,
 * removing temporaries and stray files (the branch move and the state
 * file are ./repo-state.ts's).
 * Trusts: git objects on disk; the caller to hold the chain lock.
 * Must hold: a block exists only once its commit is on the branch; a repair
 * finishes or undoes what a crash interrupted, recorded in `repairs`; after
 * it `git status --porcelain` is empty.
 */
import * as fs from 'node:fs';
import { dirname, join } from 'node:path';
import { CHECKPOINT, CHECKPOINT_NOTE, SHARD_RE, blockPath, parseBlockPath } from '../chain/layout.ts';
import { type IndexEntry, entryFromStat, statMatches } from './git-index.ts';
import { acquireLock, commitLock, hashFile, lstatOrNull } from './git-files.ts';
import { TREE_MODE, type TreeEntry } from './git-objects.ts';
import type { RepairAction } from './chain-api.ts';
import { direntsOf, type RepoReader } from './repo-reader.ts';
import { STATE_FILE, TMP_SUFFIX, type RepoState, type State } from './repo-state.ts';
import { ensurePatterns, readSparseIndex, sparseIndexBytes } from './sparse-layout.ts';

export class RepoRepair {
  constructor(
    private readonly s: RepoState,
    private readonly reader: RepoReader,
  ) {}

  /**
   * Removes what interrupted object writes left under `.git/objects` (a full
   * disk, a crash): `tmp_obj_*` files, and the temporary pack files of a
   * fetch. Nothing reuses them, and nothing else removes them. Run at open
   * for writing, when no other vouch process may write (the chain lock of an
   * authority gateway is held by this process or by none): still kept are
   * the files of another live vouch process (named with its pid) and git's
   * own younger than ten minutes (a git command run by hand meanwhile).
   * Returns the loose objects it saw (the same directory reads), for the
   * next pack.
   */
  removeObjectTemps(): string[] {
    const objects = join(this.s.gitdir, 'objects');
    const loose: string[] = [];
    const now = Date.now();
    const alive = new Map<number, boolean>();
    const writerGone = (pid: number): boolean => {
      if (pid === process.pid) return true; // a previous process with this pid: this one has written nothing yet
      let a = alive.get(pid);
      if (a === undefined) {
        try {
          process.kill(pid, 0);
          a = true;
        } catch (e) {
          a = (e as NodeJS.ErrnoException).code === 'EPERM';
        }
        alive.set(pid, a);
      }
      return !a;
    };
    const sweep = (dir: string, rel: string, match: (name: string) => boolean): void => {
      let names: string[];
      try {
        names = fs.readdirSync(dir);
      } catch {
        return;
      }
      for (const name of names) {
        if (rel.length === 3 && name.length === 38 && /^[0-9a-f]{38}$/.test(name)) loose.push(rel.slice(0, 2) + name);
        if (!match(name)) continue;
        const ours = /^tmp_(?:obj|pack|idx)_vouch_(\d+)_\d+$|\.vouch-(\d+)\.tmp$/.exec(name);
        if (ours) {
          if (!writerGone(Number(ours[1] ?? ours[2]))) continue;
        } else {
          const st = lstatOrNull(join(dir, name));
          if (!st || now - Number(st.mtimeMs) < 10 * 60_000) continue;
        }
        try {
          fs.unlinkSync(join(dir, name));
          this.s.repairs.push({
            action: 'removed',
            path: `.git/objects/${rel}${name}`,
            reason: 'temporary file of an interrupted object write (a full disk or a crash)',
          });
        } catch {
          /* gone meanwhile, or not ours to remove */
        }
      }
    };
    const tmpObj = (name: string) => name.startsWith('tmp_obj_');
    sweep(objects, '', tmpObj);
    for (let b = 0; b < 256; b++) {
      const fan = b.toString(16).padStart(2, '0');
      sweep(join(objects, fan), `${fan}/`, tmpObj);
    }
    let packNames: Set<string>;
    try {
      packNames = new Set(fs.readdirSync(join(objects, 'pack')));
    } catch {
      packNames = new Set();
    }
    // A pack without its index: a repack (./repack.ts names the pack first, its index last) or a git command interrupted in between.
    const orphan = (name: string) => /^pack-[0-9a-f]{40}\.pack$/.test(name) && !packNames.has(`${name.slice(0, -5)}.idx`);
    sweep(join(objects, 'pack'), 'pack/', (name) => name.startsWith('tmp_') || /^pack-[0-9a-f]{40}\.(pack|idx)\.vouch-\d+\.tmp$/.test(name) || orphan(name));
    return loose;
  }

  // -------------------------------------------------------------------------
  // Repair

  /**
   * Bring the working tree, `.git/index` and the state file in line with
   * the branch head. Incremental when the state names a commit we still
   * have (a crash mid-append, a fast-forward by git); a full pass over the
   * branch otherwise (fresh clone, lost state, broken index).
   */
  async repair(state: State | null): Promise<void> {
    for (const p of [join(this.s.dir, CHECKPOINT + TMP_SUFFIX), join(this.s.dir, CHECKPOINT_NOTE + TMP_SUFFIX), join(this.s.gitdir, STATE_FILE + TMP_SUFFIX)])
      this.removeIfExists(p, 'temporary file of an interrupted write');
    if (this.s.sparse) {
      await this.syncSparse(true);
      this.s.writeState();
      this.s.consistent = true;
      return;
    }
    for (const name of fs.readdirSync(this.s.gitdir)) {
      if (name.startsWith('sharedindex_vouch_')) fs.rmSync(join(this.s.gitdir, name), { force: true });
    }
    let indexOk = fs.existsSync(join(this.s.gitdir, 'index'));
    if (indexOk) {
      try {
        this.s.index.load();
      } catch {
        indexOk = false;
      }
    }
    if (indexOk && state && state.commit === this.s.head) {
      // Nothing interrupted; git may have rewritten the index, which load() adopted.
    } else if (indexOk && state && (await this.s.objects.has(state.commit))) {
      await this.applyChanges(await this.diffCommits(state.commit, this.s.head));
    } else {
      await this.fullSync(indexOk);
    }
    this.cleanTail();
    this.s.writeState();
    this.s.consistent = true;
  }

  /**
   * The sparse layout's catch-up (./sparse-layout.ts), for a repair, a
   * fast-forward and after an append: the root files of the branch in the
   * working tree, and a sparse index naming the head's root trees; with
   * `full`, also the pattern file, no `blocks/` in the working tree (a chain
   * converted from the full layout) and no shared index of the full
   * layout's split index. Each change is recorded in `repairs` when
   * `repairing`. Cost: the root's few files, whatever the chain's size.
   */
  async syncSparse(repairing: boolean, full = true): Promise<void> {
    const note = (action: RepairAction['action'], path: string, reason: string): void => {
      if (repairing) this.s.repairs.push({ action, path, reason });
    };
    if (full) {
      if (!ensurePatterns(this.s.gitdir)) note('restored', '.git/info/sparse-checkout', 'the sparse layout checks out the root files only');
      for (const name of fs.readdirSync(this.s.gitdir)) {
        if (name.startsWith('sharedindex.')) fs.rmSync(join(this.s.gitdir, name), { force: true });
      }
      for (const name of fs.readdirSync(this.s.dir)) {
        if (name === '.git' || !lstatOrNull(join(this.s.dir, name))?.isDirectory()) continue;
        fs.rmSync(join(this.s.dir, name), { recursive: true, force: true });
        note('removed', name, 'the sparse layout keeps the chain\'s directories in git objects only (git show, git log; docs/spec/repository.md "Layouts")');
      }
    }
    const current = readSparseIndex(this.s.gitdir);
    const dirs = new Map<string, string>();
    const entries: IndexEntry[] = [];
    let changed = current === null;
    for (const e of this.s.dirs.get('')!) {
      if (e.mode === TREE_MODE) {
        dirs.set(e.name, e.oid);
        if (current?.dirs.get(e.name) !== e.oid) changed = true;
        continue;
      }
      if (e.mode === '120000' || e.mode === '160000') continue; // symlinks and submodules are not ours to write
      const r = await this.syncFile(e.name, e.oid, e.mode, current?.files.get(e.name), repairing);
      entries.push(r.entry);
      if (r.changed) changed = true;
    }
    for (const [name] of current?.files ?? []) {
      if (entries.some((e) => e.path === name)) continue;
      changed = true;
      this.removeIfExists(join(this.s.dir, name), 'not on branch main');
    }
    if (current && current.dirs.size !== dirs.size) changed = true;
    if (!changed) return;
    const lock = join(this.s.gitdir, 'index.lock');
    const fd = await acquireLock(lock, (p) => this.s.noteStaleLock(p));
    commitLock(fd, lock, join(this.s.gitdir, 'index'), sparseIndexBytes(dirs, entries));
    note(
      'reindexed',
      '.git/index',
      current === null ? 'a sparse index written from branch main (the sparse layout)' : 'the sparse index caught up with branch main',
    );
  }

  /**
   * One working-tree file against the branch's blob `oid`: its index entry
   * `known` kept when the stat data still matches, else the file hashed, and
   * written from git objects when it differs (recorded in `repairs` when
   * `repairing`). `changed`: the index needs the returned entry.
   */
  async syncFile(path: string, oid: string, mode: string, known: IndexEntry | undefined, repairing: boolean): Promise<{ entry: IndexEntry; changed: boolean }> {
    const abs = join(this.s.dir, path);
    const st = lstatOrNull(abs);
    if (st?.isFile() && known && known.oid === oid && statMatches(known, st)) return { entry: known, changed: false };
    if (!(st?.isFile() && hashFile(abs) === oid)) {
      if (st?.isDirectory()) fs.rmSync(abs, { recursive: true, force: true });
      this.s.writeWorkFile(path, await this.s.objects.readBlob(oid));
      if (mode === '100755') fs.chmodSync(abs, 0o755);
      if (repairing) this.s.repairs.push({ action: 'restored', path, reason: 'on branch main but missing or different in the working tree' });
    }
    return { entry: entryFromStat(path, oid, fs.lstatSync(abs, { bigint: true })), changed: true };
  }

  removeIfExists(abs: string, reason: string): boolean {
    try {
      fs.unlinkSync(abs);
    } catch {
      return false;
    }
    this.s.repairs.push({ action: 'removed', path: abs.slice(this.s.dir.length + 1), reason });
    return true;
  }

  /** File-level differences between two commits: path and new blob (null = gone). Only differing subtrees are read. */
  async diffCommits(from: string, to: string): Promise<{ path: string; oid: string | null; mode: string; before: string | null }[]> {
    const out: { path: string; oid: string | null; mode: string; before: string | null }[] = [];
    const walk = async (a: TreeEntry[], b: TreeEntry[], prefix: string): Promise<void> => {
      const am = new Map(a.map((e) => [e.name, e]));
      const bm = new Map(b.map((e) => [e.name, e]));
      for (const name of new Set([...am.keys(), ...bm.keys()])) {
        const x = am.get(name);
        const y = bm.get(name);
        if (x && y && x.oid === y.oid && x.mode === y.mode) continue;
        const path = prefix + name;
        const xt = x?.mode === TREE_MODE;
        const yt = y?.mode === TREE_MODE;
        if (xt || yt) {
          await walk(xt ? await this.s.objects.readTree(x!.oid) : [], yt ? await this.s.objects.readTree(y!.oid) : [], `${path}/`);
        }
        if (x && !xt && !(y && !yt)) out.push({ path, oid: null, mode: x.mode, before: x.oid });
        if (y && !yt) out.push({ path, oid: y.oid, mode: y.mode, before: x && !xt ? x.oid : null });
      }
    };
    const [ta, tb] = await Promise.all([this.s.objects.readCommitTree(from), this.s.objects.readCommitTree(to)]);
    await walk(await this.s.objects.readTree(ta), await this.s.objects.readTree(tb), '');
    return out;
  }

  /**
   * Apply file changes between the state commit and the head to the working
   * tree and the index. `repairing`: the changes catch up after a crash or a
   * change by git (recorded in `repairs`), not a fast-forward of our own.
   */
  async applyChanges(changes: { path: string; oid: string | null; mode: string }[], repairing = true): Promise<void> {
    const upserts: IndexEntry[] = [];
    const removes: string[] = [];
    const dirs = new Set<string>();
    for (const c of changes) {
      const abs = join(this.s.dir, c.path);
      dirs.add(dirname(abs));
      if (c.oid === null) {
        if (repairing) this.removeIfExists(abs, 'not on branch main');
        else fs.rmSync(abs, { force: true });
        removes.push(c.path);
        continue;
      }
      if (c.mode === '120000' || c.mode === '160000') continue; // symlinks and submodules are not ours to write
      if (hashFile(abs) !== c.oid) {
        this.s.writeWorkFile(c.path, await this.s.objects.readBlob(c.oid));
        if (c.mode === '100755') fs.chmodSync(abs, 0o755);
        if (repairing) this.s.repairs.push({ action: 'restored', path: c.path, reason: 'on branch main but missing or different in the working tree' });
      }
      upserts.push(entryFromStat(c.path, c.oid, fs.lstatSync(abs, { bigint: true })));
    }
    for (const d of dirs) this.removeTemps(d);
    if (upserts.length === 0 && removes.length === 0) return;
    await this.s.index.update(
      (idx) => {
        idx.preparePositions([...upserts.map((e) => e.path), ...removes]);
        for (const p of removes) idx.remove(p);
        for (const e of upserts) idx.upsert(e);
      },
      (p) => this.s.noteStaleLock(p),
    );
  }

  removeTemps(absDir: string): void {
    let names: string[];
    try {
      names = fs.readdirSync(absDir);
    } catch {
      return;
    }
    for (const n of names) if (n.endsWith(TMP_SUFFIX)) this.removeIfExists(join(absDir, n), 'temporary file of an interrupted write');
  }

  /** Every file on the branch, by path. */
  async walkBranch(): Promise<Map<string, { oid: string; mode: string }>> {
    const out = new Map<string, { oid: string; mode: string }>();
    const walk = async (entries: TreeEntry[], prefix: string): Promise<void> => {
      for (const e of entries) {
        if (e.mode === TREE_MODE) await walk(await this.s.objects.readTree(e.oid), `${prefix}${e.name}/`);
        else out.set(prefix + e.name, { oid: e.oid, mode: e.mode });
      }
    };
    await walk(this.s.dirs.get('')!, '');
    return out;
  }

  /** Full pass: every branch file checked against the working tree (stat, then hash), the index rebuilt if anything differs. */
  async fullSync(indexLoaded: boolean): Promise<void> {
    const files = await this.walkBranch();
    const current = new Map<string, IndexEntry>();
    if (indexLoaded) {
      try {
        for (const e of this.s.index.mergedEntries()) if (((e.flags >> 12) & 3) === 0) current.set(e.path, e);
      } catch {
        indexLoaded = false;
      }
    }
    let changed = !indexLoaded;
    const entries: IndexEntry[] = [];
    for (const [path, f] of files) {
      const e = current.get(path);
      if (f.mode === '120000' || f.mode === '160000') {
        if (e) entries.push(e);
        continue;
      }
      const r = await this.syncFile(path, f.oid, f.mode, e, true);
      entries.push(r.entry);
      if (r.changed) changed = true;
    }
    for (const path of current.keys()) if (!files.has(path)) changed = true;
    for (const f of this.reader.listBlockFiles()) {
      if (files.has(f.path)) continue;
      if (f.index !== null) this.removeIfExists(join(this.s.dir, f.path), 'block file not on branch main');
      else if (f.path.endsWith(TMP_SUFFIX)) this.removeIfExists(join(this.s.dir, f.path), 'temporary file of an interrupted write');
    }
    if (!changed) return;
    await this.s.index.update(
      (idx) => idx.replaceAll(entries),
      (p) => this.s.noteStaleLock(p),
      { reload: false },
    );
    this.s.repairs.push({ action: 'reindexed', path: '.git/index', reason: 'rebuilt from branch main and the working tree' });
  }

  /** Remove block files (and temporary files) beyond the last block: they are not on the branch. */
  cleanTail(): void {
    const last = blockPath(this.s.size - 1);
    const top = last.slice(7, 10);
    const mid = last.slice(11, 14);
    const blocksDir = join(this.s.dir, 'blocks');
    const list = (d: string): fs.Dirent[] => direntsOf(d) ?? [];
    const purge = (absDir: string, rel: string): void => {
      for (const e of list(absDir)) {
        const abs = join(absDir, e.name);
        const r = `${rel}/${e.name}`;
        if (e.isDirectory()) purge(abs, r);
        else if ((parseBlockPath(r) ?? -1) >= this.s.size) this.removeIfExists(abs, 'block file not on branch main');
        else if (e.name.endsWith(TMP_SUFFIX)) this.removeIfExists(abs, 'temporary file of an interrupted write');
      }
      if (list(absDir).length === 0) fs.rmSync(absDir, { recursive: true, force: true });
    };
    for (const e of list(blocksDir)) {
      if (e.isDirectory() && SHARD_RE.test(e.name) && e.name > top) purge(join(blocksDir, e.name), `blocks/${e.name}`);
    }
    const topDir = join(blocksDir, top);
    for (const e of list(topDir)) {
      if (e.isDirectory() && SHARD_RE.test(e.name) && e.name > mid) purge(join(topDir, e.name), `blocks/${top}/${e.name}`);
    }
    const leafDir = join(topDir, mid);
    for (const e of list(leafDir)) {
      if (e.isDirectory()) continue;
      const r = `blocks/${top}/${mid}/${e.name}`;
      if ((parseBlockPath(r) ?? -1) >= this.s.size) this.removeIfExists(join(leafDir, e.name), 'block file not on branch main');
      else if (e.name.endsWith(TMP_SUFFIX)) this.removeIfExists(join(leafDir, e.name), 'temporary file of an interrupted write');
    }
  }
}
