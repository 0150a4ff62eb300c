/**
 * The chain repository (docs/spec/design.md §2): `ChainRepo` composes a
 * reader, a writer, a replicator and a repair step over one shared state
 * (./repo-*.ts) and implements the narrow interfaces of ./chain-api.ts,
 * which gateway/ and tools/ depend on (`openChain`, `createChain`,
 * `openMirror`, `cloneChain` hand them out). It stores files; it never
 * parses blocks and never signs. Stock git (./git-cat-file.ts) is the
 * fallback read and the reader of delta blocks (docs/decisions/git-store.md).
 * Owns: opening a chain (the repair of an interrupted append first) and
 * which part serves which call.
 * Trusts: its parts; callers to hand over block texts in order under the
 * chain lock.
 * Must hold: `open()` repairs any interrupted append before anything reads.
 */
import * as fs from 'node:fs';
import { join, resolve } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import type {
  BlockFile,
  BlockObjects,
  ChainReads,
  ChainSnapshot,
  ChainStore,
  CommitInfo,
  CommittedFiles,
  FetchOptions,
  FetchResult,
  FileChange,
  MirrorStore,
  RepairAction,
  RootFiles,
} from './chain-api.ts';
import { assertChainWritable } from './chain-lock.ts';
import { type WholePackResult, repackWhole } from './whole-pack.ts';
import { isDir, readBranch } from './git-files.ts';
import { RepoReader } from './repo-reader.ts';
import { RepoRepair } from './repo-repair.ts';
import { CLONE_MARKER, RepoReplicator, isInterruptedClone } from './repo-replicator.ts';
import { RepoState, readState } from './repo-state.ts';
import { RepoWriter } from './repo-writer.ts';

export { blockPath, parseBlockPath } from '../chain/layout.ts';
export { FETCH_LIMITS } from './fetch-limits.ts';
export { isInterruptedClone } from './repo-replicator.ts';
export { LOOSE_PACK_THRESHOLD } from './repo-writer.ts';
export type * from './chain-api.ts';

export class ChainRepo implements MirrorStore {
  private readonly s: RepoState;
  private readonly reader: RepoReader;
  private readonly repairer: RepoRepair;
  private readonly writer: RepoWriter;
  private readonly replicator: RepoReplicator;

  private constructor(dir: string) {
    this.s = new RepoState(dir);
    this.reader = new RepoReader(this.s);
    this.repairer = new RepoRepair(this.s);
    this.writer = new RepoWriter(this.s, this.repairer);
    this.replicator = new RepoReplicator(this.s, this.repairer, this.writer);
  }

  /**
   * Create a chain repository in `dir` (created if missing) holding `blocks`
   * (indexes 0, 1, ...) and `checkpoint`, as one commit. Refuses with
   * `chain_exists` if `dir` holds a git repository or anything else. The
   * chain is in the sparse layout (./sparse-layout.ts), the only one.
   */
  static async init(dir: string, blocks: BlockFile[], checkpoint: RootFiles, commit: CommitInfo): Promise<ChainRepo> {
    const repo = new ChainRepo(resolve(dir));
    await repo.writer.create(blocks, checkpoint, commit);
    return repo;
  }

  /**
   * Open the chain repository in `dir`. Throws `not_a_chain` for a missing
   * or non-git directory, HEAD not on `main`, or no block on the branch.
   * With `repair` (default), first brings the working tree and index in line
   * with the branch after a crash or git rewriting the index, and converts a
   * chain checked out in full (the full layout of earlier versions, a plain
   * `git clone`) to the sparse layout, refusing with `io_error` before any
   * change when a checked-out file differs from the branch (see `repairs`);
   * without it nothing is written (blocks are read from git objects
   * whatever the working tree holds), and `append` refuses.
   */
  static async open(dir: string, opts: { repair?: boolean } = {}): Promise<ChainRepo> {
    const abs = resolve(dir);
    if (!fs.existsSync(abs)) throw new VouchError('not_a_chain', `${abs} does not exist`);
    if (!isDir(abs)) throw new VouchError('not_a_chain', `${abs} is not a directory`);
    const gitdir = join(abs, '.git');
    if (!isDir(gitdir)) throw new VouchError('not_a_chain', `${abs} is not a git repository (no .git directory)`);
    if (fs.existsSync(join(gitdir, CLONE_MARKER))) {
      throw new VouchError('not_a_chain', `${abs} holds an interrupted clone (.git/${CLONE_MARKER}); remove the directory to clone again`);
    }
    const head = readBranch(gitdir);
    if (!head) throw new VouchError('not_a_chain', `${abs}: branch main has no commit`);
    const state = readState(gitdir);
    const repo = new ChainRepo(abs);
    const s = repo.s;
    await s.loadBranch(head);
    s.canRepair = opts.repair ?? true;
    if (s.canRepair) {
      assertChainWritable(abs); // repair writes: refused while a running gateway owns the chain
      s.objects.noteLoose(repo.repairer.removeObjectTemps()); // packed with the appends' own once past the threshold
      await repo.repairer.repair(state);
    } else s.consistent = state?.commit === head && fs.existsSync(join(gitdir, 'index'));
    return repo;
  }

  /**
   * Clone the chain at `url` (git smart HTTP) into `dir`, which must be
   * missing or empty (./repo-replicator.ts `clone`). A failed clone leaves
   * `dir` as it found it; a crashed one leaves `.git/vouch-clone-incomplete`,
   * which `open()` refuses.
   */
  static async clone(url: string, dir: string, opts: FetchOptions = {}): Promise<ChainRepo> {
    const repo = new ChainRepo(resolve(dir));
    await repo.replicator.clone(url, opts);
    return repo;
  }

  /** True when `dir` holds a clone that was interrupted (crash or kill) before it completed. */
  static isInterruptedClone(dir: string): boolean {
    return isInterruptedClone(dir);
  }

  // -------------------------------------------------------------------------
  // State

  /** The chain directory (absolute). */
  get dir(): string {
    return this.s.dir;
  }

  /** What `open()` and any later catch-up changed in the working tree and index, for callers to log. */
  get repairs(): RepairAction[] {
    return this.s.repairs;
  }

  /** Problems after a commit point (the append succeeded, the working tree or index lags and is caught up next time). */
  get warnings(): string[] {
    return this.s.warnings;
  }

  /** Number of blocks on the branch (last block index + 1). */
  get size(): number {
    return this.s.size;
  }

  /**
   * Always true: the working tree holds the root files only, block files
   * are read from git objects (docs/spec/repository.md "Layouts", the one
   * layout).
   */
  get sparse(): true {
    return true;
  }

  /** Commit id `main` points at. */
  get head(): string {
    return this.s.head;
  }

  /**
   * True when the working tree and `.git/index` reflect the branch head
   * (always after `open()` with repair and after a clean append). False after
   * `open({ repair: false })` of a repository an append was interrupted in:
   * the newest block files may then be missing from the working tree.
   */
  get inSync(): boolean {
    return this.s.consistent;
  }

  // -------------------------------------------------------------------------
  // Reads (./repo-reader.ts)

  committedFiles(): Promise<CommittedFiles> {
    return this.reader.committedFiles();
  }

  readBlockFile(index: number): string {
    return this.reader.readBlockFile(index);
  }

  blockStorage(samples: number): { sampled: number; deltas: number } {
    return this.reader.blockStorage(samples);
  }

  /**
   * Rewrite the packs with every object whole, by stock git (./whole-pack.ts),
   * as the single writer and never beside another repack (a threshold repack
   * running is waited for). After it, as after any repack, the loose objects
   * are counted again and the fan-out directories git pruned made again.
   */
  repackWhole(opts: { timeoutMs: number; signal?: AbortSignal }): Promise<WholePackResult> {
    // The repack queue first, then the writer queue, as every repack takes them (a repack takes the writer queue for its start).
    return this.s.oneRepack(() =>
      this.s.serialize(async () => {
        try {
          return await repackWhole(this.s.dir, this.s.gitdir, opts);
        } finally {
          this.s.objects.afterRepack();
        }
      }),
    );
  }

  readCheckpoint(): string | null {
    return this.reader.readCheckpoint();
  }

  readCheckpointNote(): string | null {
    return this.reader.readCheckpointNote();
  }

  committedNote(): Promise<string | null> {
    return this.reader.committedNote();
  }

  blockObjects(): BlockObjects {
    return this.reader.blockObjects();
  }

  readBlockFromGit(index: number): Promise<string> {
    return this.reader.readBlockFromGit(index);
  }

  // -------------------------------------------------------------------------
  // Writes (./repo-writer.ts)

  append(blocks: BlockFile[], checkpoint: RootFiles, commit: CommitInfo): Promise<{ commit: string }> {
    return this.writer.append(blocks, checkpoint, commit);
  }

  repack(): Promise<{ pack: string | null; removed: number; merged: string[] }> {
    return this.writer.repack();
  }

  /** Loose objects waiting for the next pack (tests, benches). */
  get pendingLoose(): number {
    return this.s.objects.pendingLoose;
  }

  /** Packs made by this instance and the time they held the writer queue. */
  get packTimes(): { count: number; totalMs: number; maxMs: number } {
    return this.writer.packTimes;
  }

  // -------------------------------------------------------------------------
  // Mirroring (./repo-replicator.ts)

  fetch(url: string, opts: FetchOptions = {}, hinted: string | null = null): Promise<FetchResult> {
    return this.replicator.fetch(url, opts, hinted);
  }

  dropFetched(): void {
    this.replicator.dropFetched();
  }

  snapshotAt(commit: string): Promise<ChainSnapshot> {
    return this.replicator.snapshotAt(commit);
  }

  changesTo(commit: string): Promise<FileChange[]> {
    return this.replicator.changesTo(commit);
  }

  fastForward(commit: string): Promise<{ from: string; to: string; size: number }> {
    return this.replicator.fastForward(commit);
  }
}

/** Open the chain in `dir` for reading and appending (`ChainRepo.open`). */
export function openChain(dir: string, opts: { repair?: boolean } = {}): Promise<ChainStore> {
  return ChainRepo.open(dir, opts);
}

/** Open the chain in `dir` for reading only: nothing is written, not even a repair. */
export function openChainReadOnly(dir: string): Promise<ChainReads> {
  return ChainRepo.open(dir, { repair: false });
}

/** Create a chain in `dir` (`ChainRepo.init`). */
export function createChain(dir: string, blocks: BlockFile[], checkpoint: RootFiles, commit: CommitInfo): Promise<ChainStore> {
  return ChainRepo.init(dir, blocks, checkpoint, commit);
}

/** Open a mirror's chain in `dir` (`ChainRepo.open` with repair). */
export function openMirror(dir: string): Promise<MirrorStore> {
  return ChainRepo.open(dir);
}

/** Clone the chain at `url` into `dir` for a mirror (`ChainRepo.clone`). */
export function cloneChain(url: string, dir: string, opts: FetchOptions = {}): Promise<MirrorStore> {
  return ChainRepo.clone(url, dir, opts);
}
