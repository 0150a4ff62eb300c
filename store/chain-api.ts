/**
 * The narrow store interfaces gateway/ and tools/ depend on (as golang/mod's
 * `ClientOps`): `ChainReads` (what readers of a chain use), `ChainStore`
 * (plus the append an authority makes) and `MirrorStore` (plus the fetch and
 * fast-forward of a mirror), and the data they hand over. ./chain-repo.ts
 * implements all three over git (docs/spec/design.md §2).
 * Owns: the contract between storage and its callers; no code.
 * Trusts: nothing (types only).
 * Must hold: nothing here parses blocks or signs: the store stores files.
 */
import type { CommitInfo } from './git-objects.ts';
import type { FetchOptions, FetchResult } from './upload-pack.ts';

export type { CommitInfo } from './git-objects.ts';
export type { FetchOptions, FetchResult } from './upload-pack.ts';

export interface BlockFile {
  index: number;
  /** The exact file text (pretty JSON + trailing "\n"), written byte for byte (UTF-8). */
  content: string;
}

/** The chain files at one commit, read from git objects (`MirrorStore.snapshotAt`). */
export interface ChainSnapshot {
  commit: string;
  /** Blocks at that commit (last well-formed block path + 1). */
  size: number;
  /** Text of a file at a repository path, or null when there is none. */
  readFile(path: string): Promise<string | null>;
  /** Text of block `index`; throws `not_found` when its file is missing. */
  readBlock(index: number): Promise<string>;
}

/**
 * What branch main commits under `blocks/` and as `checkpoint.json`, from git
 * objects (`ChainReads.committedFiles`): the blocks a verifier reads (by
 * their blob ids), and the checkpoint.json it checks the working tree's against.
 */
export interface CommittedFiles {
  commit: string;
  /** Number of block files (regular files at well-formed block paths). */
  count: number;
  /** Git blob id (hex) of block `index`'s file, or null when the branch has none. */
  oidOf(index: number): string | null;
  /** Copies block `index`'s 20-byte blob id into `out` at `at` (no string); false when the branch has none. */
  copyOid(index: number, out: Uint8Array, at: number): boolean;
  /** Git blob id of checkpoint.json; a description when it is not a regular file; null when there is none. */
  checkpoint: string | null;
  /** Everything else under blocks/: other names, and links, submodules or directories at block paths. */
  strays: { path: string; why: string }[];
  /** The indexes of the block files, ascending (what a listing of them would show). */
  indexes(): number[];
}

/**
 * The objects of the sparse layout's blocks, for verifiers that read them
 * where they are (`ChainReads.blockObjects`): the pack directory, where a
 * pack holds an object (by its 20-byte id), and a read of any object.
 */
export interface BlockObjects {
  packDir: string;
  where(key: Uint8Array): { pack: string; offset: number } | null;
  read(oid: string): { type: string; body: Buffer };
}

/** One file-level difference between the branch head and another commit. */
export interface FileChange {
  path: string;
  change: 'added' | 'modified' | 'deleted';
}

/** Something `open()` (or a later catch-up) changed to bring the working tree and index in line with the branch. */
export interface RepairAction {
  action: 'removed' | 'restored' | 'reindexed' | 'lock_removed';
  /** Repository-relative path ('.git/index' for index rebuilds). */
  path: string;
  reason: string;
}

/**
 * The root files an append rewrites: `checkpoint.json`'s text, or it and
 * `checkpoint.note`'s (the signed tlog checkpoint of the new size; a chain
 * without one gains it with its next append that hands one over). An
 * append without a note removes a committed one: it would name an older
 * size (a committed note always names the chain's size, or there is none).
 */
export type RootFiles = string | { json: string; note?: string | null };

/** What readers of a chain use: `vouch verify`, the gateway's state, the CLI's history scans. */
export interface ChainReads {
  /** The chain directory (absolute). */
  readonly dir: string;
  /** Number of blocks on the branch (last block index + 1). */
  readonly size: number;
  /** Commit id `main` points at. */
  readonly head: string;
  /** Always true (the one layout, docs/spec/repository.md "Layouts"): block files are read from git objects, not the working tree. */
  readonly sparse: true;
  /** True when the working tree and `.git/index` reflect the branch head. */
  readonly inSync: boolean;
  /** What opening (or a later catch-up) changed in the working tree and index, for callers to log. */
  readonly repairs: readonly RepairAction[];
  /** Problems after a commit point (the write happened; the working tree or index lags), for callers to log and clear. */
  readonly warnings: string[];
  /** The text of block `index` (`not_found` past the end, `malformed`, `io_error`). */
  readBlockFile(index: number): string;
  /** The working-tree checkpoint.json text, or null when there is none. */
  readCheckpoint(): string | null;
  /** The working-tree checkpoint.note text, or null when there is none. */
  readCheckpointNote(): string | null;
  /** The checkpoint.note branch main commits, or null. */
  committedNote(): Promise<string | null>;
  /** What branch main commits under blocks/ and as checkpoint.json (blob ids, no blob read). */
  committedFiles(): Promise<CommittedFiles>;
  /** Where the blocks' objects are, for a verifier reading them from the packs. */
  blockObjects(): BlockObjects;
  /** How many of `samples` block blobs spread over the chain the packs store as deltas (a chain packed by git). */
  blockStorage(samples: number): { sampled: number; deltas: number };
  /** Rewrite the packs with every object whole by stock git, as the store's single writer (store/whole-pack.ts). */
  repackWhole(opts: { timeoutMs: number; signal?: AbortSignal }): Promise<{ ms: number; before: number; after: number }>;
}

/** A chain an authority appends to. */
export interface ChainStore extends ChainReads {
  /** Append `blocks` (indexes size, size+1, ...) and the root files as one commit. */
  append(blocks: BlockFile[], checkpoint: RootFiles, commit: CommitInfo): Promise<{ commit: string }>;
}

/** A chain a mirror keeps in step with its authority's. */
export interface MirrorStore extends ChainStore {
  /** Fetch the remote's branch main into refs/remotes/origin/main; never touches the branch. */
  fetch(url: string, opts?: FetchOptions, hinted?: string | null): Promise<FetchResult>;
  /** Forget the in-memory pack of the last fetch. */
  dropFetched(): void;
  /** Read-only view of the chain files at `commit`, from git objects. */
  snapshotAt(commit: string): Promise<ChainSnapshot>;
  /** File-level changes from the branch head to `commit`. */
  changesTo(commit: string): Promise<FileChange[]>;
  /** Move branch main to a fetched `commit` (`history_rewritten` when it loses a block file). */
  fastForward(commit: string): Promise<{ from: string; to: string; size: number }>;
}
