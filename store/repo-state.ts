/**
 * The open chain repository's shared state, and the few steps every part of
 * ./chain-repo.ts takes on it: the branch head and its trees, the writer
 * queue and the repack queue, the compare-and-swap of `refs/heads/main` (the
 * commit point) and the state file. The reader, writer, replicator and
 * repair step (./repo-*.ts) each hold one `RepoState`.
 * Owns: the in-memory state (head, size, trees on the path to the last
 * block, leaf trees kept for reads), `.git/vouch-state.json`, the branch move.
 * Trusts: git objects on disk; callers to hold the chain lock for writes.
 * Must hold: head, size and dirs change together, only after the branch
 * names the commit; one writer at a time (`serialize`), one repack at a
 * time (`oneRepack`).
 */
import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { dirname, join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { SHARD_RE, parseBlockPath } from '../chain/layout.ts';
import type { RepairAction } from './chain-api.ts';
import { acquireLock, commitLock, readBranch, releaseLock } from './git-files.ts';
import { BRANCH_REF, OID_RE, TREE_MODE, type TreeEntry, treeBody } from './git-objects.ts';
import { ObjectStore } from './object-store.ts';
import { BlobOids } from './blob-oids.ts';

export const TMP_SUFFIX = '.vouch-tmp';
export const STATE_FILE = 'vouch-state.json';

export interface State {
  version: 1;
  /** Commit the working tree and the index reflect. */
  commit: string;
  size: number;
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

export class RepoState {
  readonly dir: string;
  readonly gitdir: string;
  readonly objects: ObjectStore;
  /** What `open()` and any later catch-up changed in the working tree and index, for callers to log. */
  readonly repairs: RepairAction[] = [];
  /** Problems after a commit point (the append succeeded, the working tree or index lags and is caught up next time). */
  readonly warnings: string[] = [];
  head = '';
  size = 0;
  /** Trees on the path to the last block: '' (root), 'blocks', 'blocks/T', 'blocks/T/M'. */
  dirs = new Map<string, TreeEntry[]>();
  /** The working tree and `.git/index` reflect the branch head. */
  consistent = false;
  canRepair = true;
  knownDirs = new Set<string>();
  /** Leaf trees read for block reads (blocks are read from git objects: ./sparse-layout.ts), by shard path (a few, most recent). */
  readonly leaves = new Map<string, Buffer>();
  /** Block blob ids learnt from those leaf trees, so a later read of the same shard skips its tree (./blob-oids.ts). */
  readonly blobOids = new BlobOids();
  private queue: Promise<unknown> = Promise.resolve();
  private repacks: Promise<unknown> = Promise.resolve();

  constructor(dir: string) {
    this.dir = dir;
    this.gitdir = join(dir, '.git');
    this.objects = new ObjectStore(this.gitdir);
  }

  /** Run `fn` after every writer queued before it (one writer at a time). */
  serialize<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * Run `fn` after every repack started before it (one repack at a time,
   * whatever kind: git's `repack -d` beside another repack can delete a pack
   * the other just named). Appends do not wait for it: ./repo-writer.ts.
   * Whoever needs both queues takes this one first, then `serialize`.
   */
  oneRepack<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.repacks.then(fn, fn);
    this.repacks = run.catch(() => undefined);
    return run;
  }

  /** Forget the leaf trees kept for block reads (the branch moved: a shard that was the last one may have grown). */
  forgetLeaves(): void {
    this.leaves.clear();
    this.blobOids.clear();
  }

  /** Read the branch head: the trees on the path to its last well-formed block file, and the chain size. */
  async loadBranch(head: string): Promise<void> {
    const found = await this.locate(head, 'branch main');
    this.head = head;
    this.size = found.size;
    this.dirs = found.dirs;
    this.forgetLeaves();
    await this.pinHead();
  }

  /** Pin the head commit and the trees on the path to its last block (see ObjectStore.pin). */
  async pinHead(): Promise<void> {
    try {
      const commit = await this.objects.read(this.head);
      this.objects.pin([commit, ...[...this.dirs.values()].map((list) => ({ type: 'tree', body: treeBody(list) }))]);
    } catch {
      this.objects.pin([]); // an optimisation only
    }
  }

  /** The chain size at `commit` and the trees on the path to its last well-formed block file. */
  async locate(commit: string, what: string): Promise<{ size: number; dirs: Map<string, TreeEntry[]> }> {
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

  noteStaleLock(path: string): void {
    this.repairs.push({ action: 'lock_removed', path: path.slice(this.dir.length + 1), reason: 'stale lock left by a crashed process' });
  }

  /** Compare-and-swap `main` from `expected` to `oid` through `main.lock`. */
  async moveBranch(oid: string, expected: string | null): Promise<void> {
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
  writeWorkFile(rel: string, data: Buffer): BigIntStats {
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

  writeState(): void {
    const state: State = { version: 1, commit: this.head, size: this.size };
    const file = join(this.gitdir, STATE_FILE);
    fs.writeFileSync(file + TMP_SUFFIX, `${JSON.stringify(state)}\n`);
    fs.renameSync(file + TMP_SUFFIX, file);
  }
}
