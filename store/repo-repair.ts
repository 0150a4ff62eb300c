/**
 * How the chain repository gets back to a state where the branch, the
 * working tree, `.git/index` and `.git/vouch-state.json` agree: after a
 * crash (`open()`), after a commit whose working-tree write failed, and for
 * a fast-forward (the catch-up path). One part of ./chain-repo.ts.
 * Owns: the root files' catch-up writes, the sparse index, the conversion
 * of a chain checked out in full, the diff of two commits' trees, removing
 * temporaries (the branch move and the state file are ./repo-state.ts's).
 * Trusts: git objects on disk; the caller to hold the chain lock.
 * Must hold: a block exists only once its commit is on the branch; a repair
 * finishes or undoes what a crash interrupted, recorded in `repairs`; after
 * it `git status --porcelain` is empty; a checked-out file is removed only
 * when it equals the branch's blob.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { CHECKPOINT, CHECKPOINT_NOTE } from '../chain/layout.ts';
import { type IndexEntry, entryFromStat, statMatches } from './git-index-format.ts';
import { acquireLock, commitLock, hashFile, lstatOrNull } from './git-files.ts';
import { TREE_MODE, type TreeEntry } from './git-objects.ts';
import type { RepairAction } from './chain-api.ts';
import { direntsOf } from './repo-reader.ts';
import { STATE_FILE, TMP_SUFFIX, type RepoState, type State } from './repo-state.ts';
import { ensurePatterns, ensureSparseConfig, readSparseIndex, sparseIndexBytes } from './sparse-layout.ts';

export class RepoRepair {
  constructor(private readonly s: RepoState) {}

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
    // A pack without its index: a pack write (./pack-file-writer.ts, git) names the pack first, its index last; interrupted in between.
    const orphan = (name: string) => /^pack-[0-9a-f]{40}\.pack$/.test(name) && !packNames.has(`${name.slice(0, -5)}.idx`);
    // git's own temporaries too (`tmp_pack_*` of pack-objects, `.tmp-<pid>-pack-*` of an interrupted `git repack`).
    sweep(
      join(objects, 'pack'),
      'pack/',
      (name) => name.startsWith('tmp_') || name.startsWith('.tmp-') || /^pack-[0-9a-f]{40}\.(pack|idx)\.vouch-\d+\.tmp$/.test(name) || orphan(name),
    );
    return loose;
  }

  // -------------------------------------------------------------------------
  // Repair

  /**
   * Bring the working tree, `.git/index` and the state file in line with
   * the branch head: the sparse layout's catch-up (`syncSparse`), which
   * also converts a chain found in the full layout of earlier versions or
   * as a plain `git clone` checks it out (`convert`).
   */
  async repair(_state: State | null): Promise<void> {
    for (const p of [join(this.s.dir, CHECKPOINT + TMP_SUFFIX), join(this.s.dir, CHECKPOINT_NOTE + TMP_SUFFIX), join(this.s.gitdir, STATE_FILE + TMP_SUFFIX)])
      this.removeIfExists(p, 'temporary file of an interrupted write');
    await this.syncSparse(true);
    this.s.writeState();
    this.s.consistent = true;
  }

  /**
   * The working tree's directories (the full layout's `blocks/`), checked
   * file by file against the branch before any is removed: every file must
   * be the branch's blob at its path (or a temporary file of an interrupted
   * write). Returns the directories to remove; throws `io_error` naming the
   * first file that differs or is not on the branch (nothing removed).
   * Cost: one read and hash of every checked-out file, once per chain.
   */
  async checkCheckedOut(): Promise<string[]> {
    const dirs: string[] = [];
    const refuse = (rel: string, why: string): never => {
      throw new VouchError(
        'io_error',
        `${this.s.dir}: ${rel} ${why}; vouch keeps the chain's directories in git objects only and removes checked-out copies only when they equal branch main (docs/spec/repository.md "Layouts"): move the file away or restore it with git checkout, then open again`,
        { resource: rel },
      );
    };
    const walk = async (abs: string, rel: string, tree: TreeEntry[] | null): Promise<void> => {
      const byName = new Map((tree ?? []).map((e) => [e.name, e]));
      for (const d of direntsOf(abs) ?? []) {
        const r = `${rel}/${d.name}`;
        const e = byName.get(d.name);
        if (d.isDirectory()) {
          await walk(join(abs, d.name), r, e?.mode === TREE_MODE ? await this.s.objects.readTree(e.oid) : null);
        } else if (d.name.endsWith(TMP_SUFFIX) && d.isFile()) {
          // an interrupted write's temporary file: removed with its directory
        } else if (!e || e.mode === TREE_MODE) refuse(r, 'is not on branch main');
        else if (!d.isFile() || !/^100(644|755)$/.test(e.mode)) refuse(r, `is not a regular file of branch main (${e.mode})`);
        else if (hashFile(join(abs, d.name)) !== e.oid) refuse(r, 'differs from branch main');
      }
    };
    const root = new Map(this.s.dirs.get('')!.map((e) => [e.name, e]));
    for (const d of direntsOf(this.s.dir) ?? []) {
      if (d.name === '.git' || !d.isDirectory()) continue;
      const e = root.get(d.name);
      await walk(join(this.s.dir, d.name), d.name, e?.mode === TREE_MODE ? await this.s.objects.readTree(e.oid) : null);
      dirs.push(d.name);
    }
    return dirs;
  }

  /**
   * The sparse layout's catch-up (./sparse-layout.ts), for a repair, a
   * fast-forward and after an append: the root files of the branch in the
   * working tree, and a sparse index naming the head's root trees; with
   * `full`, first the conversion of a chain checked out in full (the full
   * layout of earlier versions, a plain `git clone`): its checked-out
   * directories checked against the branch (`checkCheckedOut`, which
   * refuses before anything changes), git's sparse-checkout configuration
   * and pattern file, the directories removed, no shared index of the old
   * split index. Each change is recorded in `repairs` when `repairing`.
   * Cost: the root's few files, whatever the chain's size (a conversion
   * reads each checked-out file once).
   */
  async syncSparse(repairing: boolean, full = true): Promise<void> {
    const note = (action: RepairAction['action'], path: string, reason: string): void => {
      if (repairing) this.s.repairs.push({ action, path, reason });
    };
    if (full) {
      const remove = await this.checkCheckedOut();
      if (ensureSparseConfig(this.s.gitdir)) note('restored', '.git/config', 'core.sparseCheckout: vouch keeps one layout, the sparse one');
      if (!ensurePatterns(this.s.gitdir)) note('restored', '.git/info/sparse-checkout', 'the sparse layout checks out the root files only');
      for (const name of fs.readdirSync(this.s.gitdir)) {
        if (name.startsWith('sharedindex.') || name.startsWith('sharedindex_vouch_')) fs.rmSync(join(this.s.gitdir, name), { force: true });
      }
      for (const name of remove) {
        fs.rmSync(join(this.s.dir, name), { recursive: true, force: true });
        note(
          'removed',
          name,
          'equal to branch main; the sparse layout keeps the chain\'s directories in git objects only (git show, git log; docs/spec/repository.md "Layouts")',
        );
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
}
