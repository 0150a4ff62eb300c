/**
 * How the chain repository gets back to a state where the branch, the
 * working tree, `.git/index` and `.git/vouch-state.json` agree: after a
 * crash (`open()`), after a commit whose working-tree write failed, and for
 * a fast-forward (the catch-up path).
 * Owns: the move of `refs/heads/main` (compare-and-swap through `main.lock`,
 * fsynced: the commit point), working-tree writes, the state file, the diff
 * of two commits' trees, removing temporaries and stray files.
 * Trusts: git objects on disk; the caller to hold the chain lock.
 * Must hold: a block exists only once its commit is on the branch; a repair
 * finishes or undoes what a crash interrupted, recorded in `repairs`; after
 * it `git status --porcelain` is empty.
 */
import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { dirname, join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { CHECKPOINT, CHECKPOINT_NOTE, SHARD_RE, blockPath, parseBlockPath } from '../chain/layout.ts';
import { type IndexEntry, type IndexHint, entryFromStat, statMatches } from './git-index.ts';
import { acquireLock, commitLock, hashFile, lstatOrNull, readBranch, releaseLock } from './git-files.ts';
import { BRANCH_REF, OID_RE, TREE_MODE, type TreeEntry, treeBody } from './git-objects.ts';
import { ChainRepoFiles, type RepairAction, direntsOf } from './chain-repo-files.ts';
import { ensurePatterns, readSparseIndex, sparseIndexBytes } from './sparse-layout.ts';

export const TMP_SUFFIX = '.vouch-tmp';
export const STATE_FILE = 'vouch-state.json';

export interface State {
  version: 1;
  /** Commit the working tree and the index reflect. */
  commit: string;
  size: number;
  index: IndexHint | null;
}

export class ChainRepoRepair extends ChainRepoFiles {
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
  protected removeObjectTemps(): string[] {
    const objects = join(this.gitdir, 'objects');
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
          this.repairs.push({
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

  /** Read the branch head: the trees on the path to its last well-formed block file, and the chain size. */
  protected async loadBranch(head: string): Promise<void> {
    const found = await this.locate(head, 'branch main');
    this._head = head;
    this._size = found.size;
    this.dirs = found.dirs;
    this.forgetLeaves();
    await this.pinHead();
  }

  /** Pin the head commit and the trees on the path to its last block (see ObjectStore.pin). */
  protected async pinHead(): Promise<void> {
    try {
      const commit = await this.objects.read(this._head);
      this.objects.pin([commit, ...[...this.dirs.values()].map((list) => ({ type: 'tree', body: treeBody(list) }))]);
    } catch {
      this.objects.pin([]); // an optimisation only
    }
  }

  /** The chain size at `commit` and the trees on the path to its last well-formed block file. */
  protected async locate(commit: string, what: string): Promise<{ size: number; dirs: Map<string, TreeEntry[]> }> {
    const rootOid = await this.objects.readCommitTree(commit);
    const root = await this.objects.readTree(rootOid);
    const blocks = root.find((e) => e.name === 'blocks' && e.mode === TREE_MODE);
    if (!blocks) throw new VouchError('not_a_chain', `${this.dir}: no blocks/ directory on ${what}`);
    const blocksTree = await this.objects.readTree(blocks.oid);
    const desc = (list: TreeEntry[]) => list.filter((e) => e.mode === TREE_MODE && SHARD_RE.test(e.name)).reverse();
    for (const top of desc(blocksTree)) {
      const topTree = await this.objects.readTree(top.oid);
      for (const mid of desc(topTree)) {
        const leaf = await this.objects.readTree(mid.oid);
        for (let k = leaf.length - 1; k >= 0; k--) {
          const e = leaf[k]!;
          const index = e.mode === TREE_MODE ? null : parseBlockPath(`blocks/${top.name}/${mid.name}/${e.name}`);
          if (index === null) continue;
          return {
            size: index + 1,
            dirs: new Map([
              ['', root],
              ['blocks', blocksTree],
              [`blocks/${top.name}`, topTree],
              [`blocks/${top.name}/${mid.name}`, leaf],
            ]),
          };
        }
      }
    }
    throw new VouchError('not_a_chain', `${this.dir}: no block file on ${what}`);
  }

  protected noteStaleLock(path: string): void {
    this.repairs.push({ action: 'lock_removed', path: path.slice(this.dir.length + 1), reason: 'stale lock left by a crashed process' });
  }

  /** Compare-and-swap `main` from `expected` to `oid` through `main.lock`. */
  protected async moveBranch(oid: string, expected: string | null): Promise<void> {
    const ref = join(this.gitdir, BRANCH_REF);
    const lock = `${ref}.lock`;
    fs.mkdirSync(dirname(ref), { recursive: true });
    const fd = await acquireLock(lock, (p) => this.noteStaleLock(p));
    let current: string | null;
    try {
      current = readBranch(this.gitdir);
    } catch (e) {
      releaseLock(fd, lock);
      throw e;
    }
    if (current !== expected) {
      releaseLock(fd, lock);
      throw new VouchError('io_error', `branch main moved outside vouch (expected ${expected ?? 'no commit'}, found ${current ?? 'none'}); reopen the chain`);
    }
    commitLock(fd, lock, ref, `${oid}\n`, { durable: true });
  }

  /** Write a working-tree file whole (temporary file + rename) and return its stat. */
  protected writeWorkFile(rel: string, data: Buffer): BigIntStats {
    const abs = join(this.dir, rel);
    const d = dirname(abs);
    if (!this.knownDirs.has(d)) {
      fs.mkdirSync(d, { recursive: true });
      this.knownDirs.add(d);
    }
    const tmp = abs + TMP_SUFFIX;
    fs.writeFileSync(tmp, data);
    fs.renameSync(tmp, abs);
    return fs.lstatSync(abs, { bigint: true });
  }

  protected writeState(): void {
    const state: State = { version: 1, commit: this._head, size: this._size, index: this.index.getHint() };
    const file = join(this.gitdir, STATE_FILE);
    fs.writeFileSync(file + TMP_SUFFIX, `${JSON.stringify(state)}\n`);
    fs.renameSync(file + TMP_SUFFIX, file);
  }

  // -------------------------------------------------------------------------
  // Repair

  /**
   * Bring the working tree, `.git/index` and the state file in line with
   * the branch head. Incremental when the state names a commit we still
   * have (a crash mid-append, a fast-forward by git); a full pass over the
   * branch otherwise (fresh clone, lost state, broken index).
   */
  protected async repair(state: State | null): Promise<void> {
    for (const p of [join(this.dir, CHECKPOINT + TMP_SUFFIX), join(this.dir, CHECKPOINT_NOTE + TMP_SUFFIX), join(this.gitdir, STATE_FILE + TMP_SUFFIX)])
      this.removeIfExists(p, 'temporary file of an interrupted write');
    if (this._sparse) {
      await this.syncSparse(true);
      this.writeState();
      this.consistent = true;
      return;
    }
    for (const name of fs.readdirSync(this.gitdir)) {
      if (name.startsWith('sharedindex_vouch_')) fs.rmSync(join(this.gitdir, name), { force: true });
    }
    let indexOk = fs.existsSync(join(this.gitdir, 'index'));
    if (indexOk) {
      try {
        this.index.load();
      } catch {
        indexOk = false;
      }
    }
    if (indexOk && state && state.commit === this._head) {
      // Nothing interrupted; git may have rewritten the index, which load() adopted.
    } else if (indexOk && state && (await this.objects.has(state.commit))) {
      await this.applyChanges(await this.diffCommits(state.commit, this._head));
    } else {
      await this.fullSync(indexOk);
    }
    this.cleanTail();
    this.writeState();
    this.consistent = true;
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
  protected async syncSparse(repairing: boolean, full = true): Promise<void> {
    const note = (action: RepairAction['action'], path: string, reason: string): void => {
      if (repairing) this.repairs.push({ action, path, reason });
    };
    if (full) {
      if (!ensurePatterns(this.gitdir)) note('restored', '.git/info/sparse-checkout', 'the sparse layout checks out the root files only');
      for (const name of fs.readdirSync(this.gitdir)) {
        if (name.startsWith('sharedindex.')) fs.rmSync(join(this.gitdir, name), { force: true });
      }
      for (const name of fs.readdirSync(this.dir)) {
        if (name === '.git' || !lstatOrNull(join(this.dir, name))?.isDirectory()) continue;
        fs.rmSync(join(this.dir, name), { recursive: true, force: true });
        note('removed', name, 'the sparse layout keeps the chain\'s directories in git objects only (git show, git log; docs/spec/repository.md "Layouts")');
      }
    }
    const current = readSparseIndex(this.gitdir);
    const dirs = new Map<string, string>();
    const entries: IndexEntry[] = [];
    let changed = current === null;
    for (const e of this.dirs.get('')!) {
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
      this.removeIfExists(join(this.dir, name), 'not on branch main');
    }
    if (current && current.dirs.size !== dirs.size) changed = true;
    if (!changed) return;
    const lock = join(this.gitdir, 'index.lock');
    const fd = await acquireLock(lock, (p) => this.noteStaleLock(p));
    commitLock(fd, lock, join(this.gitdir, 'index'), sparseIndexBytes(dirs, entries));
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
  protected async syncFile(
    path: string,
    oid: string,
    mode: string,
    known: IndexEntry | undefined,
    repairing: boolean,
  ): Promise<{ entry: IndexEntry; changed: boolean }> {
    const abs = join(this.dir, path);
    const st = lstatOrNull(abs);
    if (st?.isFile() && known && known.oid === oid && statMatches(known, st)) return { entry: known, changed: false };
    if (!(st?.isFile() && hashFile(abs) === oid)) {
      if (st?.isDirectory()) fs.rmSync(abs, { recursive: true, force: true });
      this.writeWorkFile(path, await this.objects.readBlob(oid));
      if (mode === '100755') fs.chmodSync(abs, 0o755);
      if (repairing) this.repairs.push({ action: 'restored', path, reason: 'on branch main but missing or different in the working tree' });
    }
    return { entry: entryFromStat(path, oid, fs.lstatSync(abs, { bigint: true })), changed: true };
  }

  protected removeIfExists(abs: string, reason: string): boolean {
    try {
      fs.unlinkSync(abs);
    } catch {
      return false;
    }
    this.repairs.push({ action: 'removed', path: abs.slice(this.dir.length + 1), reason });
    return true;
  }

  /** File-level differences between two commits: path and new blob (null = gone). Only differing subtrees are read. */
  protected async diffCommits(from: string, to: string): Promise<{ path: string; oid: string | null; mode: string; before: string | null }[]> {
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
          await walk(xt ? await this.objects.readTree(x!.oid) : [], yt ? await this.objects.readTree(y!.oid) : [], `${path}/`);
        }
        if (x && !xt && !(y && !yt)) out.push({ path, oid: null, mode: x.mode, before: x.oid });
        if (y && !yt) out.push({ path, oid: y.oid, mode: y.mode, before: x && !xt ? x.oid : null });
      }
    };
    const [ta, tb] = await Promise.all([this.objects.readCommitTree(from), this.objects.readCommitTree(to)]);
    await walk(await this.objects.readTree(ta), await this.objects.readTree(tb), '');
    return out;
  }

  /**
   * Apply file changes between the state commit and the head to the working
   * tree and the index. `repairing`: the changes catch up after a crash or a
   * change by git (recorded in `repairs`), not a fast-forward of our own.
   */
  protected async applyChanges(changes: { path: string; oid: string | null; mode: string }[], repairing = true): Promise<void> {
    const upserts: IndexEntry[] = [];
    const removes: string[] = [];
    const dirs = new Set<string>();
    for (const c of changes) {
      const abs = join(this.dir, c.path);
      dirs.add(dirname(abs));
      if (c.oid === null) {
        if (repairing) this.removeIfExists(abs, 'not on branch main');
        else fs.rmSync(abs, { force: true });
        removes.push(c.path);
        continue;
      }
      if (c.mode === '120000' || c.mode === '160000') continue; // symlinks and submodules are not ours to write
      if (hashFile(abs) !== c.oid) {
        this.writeWorkFile(c.path, await this.objects.readBlob(c.oid));
        if (c.mode === '100755') fs.chmodSync(abs, 0o755);
        if (repairing) this.repairs.push({ action: 'restored', path: c.path, reason: 'on branch main but missing or different in the working tree' });
      }
      upserts.push(entryFromStat(c.path, c.oid, fs.lstatSync(abs, { bigint: true })));
    }
    for (const d of dirs) this.removeTemps(d);
    if (upserts.length === 0 && removes.length === 0) return;
    await this.index.update(
      (idx) => {
        idx.preparePositions([...upserts.map((e) => e.path), ...removes]);
        for (const p of removes) idx.remove(p);
        for (const e of upserts) idx.upsert(e);
      },
      (p) => this.noteStaleLock(p),
    );
  }

  protected removeTemps(absDir: string): void {
    let names: string[];
    try {
      names = fs.readdirSync(absDir);
    } catch {
      return;
    }
    for (const n of names) if (n.endsWith(TMP_SUFFIX)) this.removeIfExists(join(absDir, n), 'temporary file of an interrupted write');
  }

  /** Every file on the branch, by path. */
  protected async walkBranch(): Promise<Map<string, { oid: string; mode: string }>> {
    const out = new Map<string, { oid: string; mode: string }>();
    const walk = async (entries: TreeEntry[], prefix: string): Promise<void> => {
      for (const e of entries) {
        if (e.mode === TREE_MODE) await walk(await this.objects.readTree(e.oid), `${prefix}${e.name}/`);
        else out.set(prefix + e.name, { oid: e.oid, mode: e.mode });
      }
    };
    await walk(this.dirs.get('')!, '');
    return out;
  }

  /** Full pass: every branch file checked against the working tree (stat, then hash), the index rebuilt if anything differs. */
  protected async fullSync(indexLoaded: boolean): Promise<void> {
    const files = await this.walkBranch();
    const current = new Map<string, IndexEntry>();
    if (indexLoaded) {
      try {
        for (const e of this.index.mergedEntries()) if (((e.flags >> 12) & 3) === 0) current.set(e.path, e);
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
    for (const f of this.listBlockFiles()) {
      if (files.has(f.path)) continue;
      if (f.index !== null) this.removeIfExists(join(this.dir, f.path), 'block file not on branch main');
      else if (f.path.endsWith(TMP_SUFFIX)) this.removeIfExists(join(this.dir, f.path), 'temporary file of an interrupted write');
    }
    if (!changed) return;
    await this.index.update(
      (idx) => idx.replaceAll(entries),
      (p) => this.noteStaleLock(p),
      { reload: false },
    );
    this.repairs.push({ action: 'reindexed', path: '.git/index', reason: 'rebuilt from branch main and the working tree' });
  }

  /** Remove block files (and temporary files) beyond the last block: they are not on the branch. */
  protected cleanTail(): void {
    const last = blockPath(this._size - 1);
    const top = last.slice(7, 10);
    const mid = last.slice(11, 14);
    const blocksDir = join(this.dir, 'blocks');
    const list = (d: string): fs.Dirent[] => direntsOf(d) ?? [];
    const purge = (absDir: string, rel: string): void => {
      for (const e of list(absDir)) {
        const abs = join(absDir, e.name);
        const r = `${rel}/${e.name}`;
        if (e.isDirectory()) purge(abs, r);
        else if ((parseBlockPath(r) ?? -1) >= this._size) this.removeIfExists(abs, 'block file not on branch main');
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
      if ((parseBlockPath(r) ?? -1) >= this._size) this.removeIfExists(join(leafDir, e.name), 'block file not on branch main');
      else if (e.name.endsWith(TMP_SUFFIX)) this.removeIfExists(join(leafDir, e.name), 'temporary file of an interrupted write');
    }
  }
}

export function readState(gitdir: string): State | null {
  try {
    const s = JSON.parse(fs.readFileSync(join(gitdir, STATE_FILE), 'utf8')) as State;
    if (s && s.version === 1 && typeof s.commit === 'string' && OID_RE.test(s.commit)) return s;
  } catch {
    /* missing or unreadable: treated as no state */
  }
  return null;
}
