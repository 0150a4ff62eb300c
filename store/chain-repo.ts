/**
 * The chain repository (docs/spec/design.md §2): `ChainRepo`, all that
 * gateway/ and tools/ use of git. It stores files; it never parses blocks.
 * Owns: branch `main` (one commit per append), the tree layout of
 * chain/layout.ts, `open` / `init` / `append`, and for mirrors the clone,
 * the depth-1 fetch and the fast-forward. The pieces beside it each own one
 * concern (git-objects, object-store, git-pack, git-files, git-index,
 * chain-repo-files, chain-repo-repair); stock git (./git-cat-file.ts) is
 * the fallback read and the reader of delta blocks (docs/decisions/git-store.md).
 * Trusts: callers to hand over block texts in order under the chain lock;
 * nothing a remote sends (ids recomputed, everything bounded by FETCH_LIMITS).
 * Must hold: a block exists only once its commit is on the branch, and
 * `open()` repairs any interrupted append; an append costs the same at any
 * size; after every write `git status` is clean and `git fsck` passes.
 */
import * as fs from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { LIMITS, readJson, utf8Text } from '../chain/block.ts';
import { CHECKPOINT, CHECKPOINT_NOTE, MAX_INDEX, blockPath } from '../chain/layout.ts';
import { assertChainWritable } from './chain-lock.ts';
import { type IndexEntry, entryFromStat } from './git-index.ts';
import { crashPoint, failPoint, fsyncDir, isDir, readBranch, readRef, readShallow, writeDurably, writeFileAtomic } from './git-files.ts';
import { BRANCH_REF, type CommitInfo, FILE_MODE, OID_RE, TREE_MODE, type TreeEntry, commitBody, ioError, setTreeEntry, treeBody } from './git-objects.ts';
import type { PackData } from './git-pack-index.ts';
import { PackFileWriter } from './repack.ts';
import type { FetchOptions, FetchResult } from './upload-pack.ts';
import { type BlockFile, type ChainSnapshot, type FileChange, strictBlockText } from './chain-repo-files.ts';
import { ChainRepoRepair, TMP_SUFFIX, readState } from './chain-repo-repair.ts';
import { SPARSE_CONFIG, SPARSE_INDEX_CONFIG, ensurePatterns, isSparse } from './sparse-layout.ts';

export { blockPath, parseBlockPath } from '../chain/layout.ts';
export { FETCH_LIMITS } from './fetch-limits.ts';
export type { FetchOptions, FetchResult } from './upload-pack.ts';
export type { BlockFile, ChainSnapshot, CommitInfo, CommittedFiles, FileChange, RepairAction } from './chain-repo-files.ts';

const REMOTE_REF = 'refs/remotes/origin/main';
const CLONE_MARKER = 'vouch-clone-incomplete';
/** Packs with fewer objects are stored as loose objects, like git's transfer.unpackLimit. */
const UNPACK_LIMIT = 100;
/**
 * Loose objects that trigger a pack of them: ~290 single-block appends (7
 * objects each: block, checkpoint, 4 trees, commit; 8 with checkpoint.note). Fewer than git's
 * gc.auto (6700) because an append's loose leaf tree is up to ~35 KiB (a
 * ~100-byte delta once packed): the loose objects stay under ~15 MiB. More
 * than a few dozen appends because the pack's fixed costs (two fsyncs, the
 * merge check) then fall on one append in ~290, outside the p99 of a
 * thousand (docs/spec/repository.md "Packs").
 */
export const LOOSE_PACK_THRESHOLD = 2048;
/**
 * Most loose objects one pack after an append takes: a repository with a
 * backlog (one written before packing: 1M loose objects at 1M blocks)
 * catches up over many appends, each paying a pack of this size (~1 s) at
 * most, or at once with `repack()`.
 */
const MAX_PACK_OBJECTS = 16_384;

function checkCommitInfo(c: CommitInfo): void {
  if (!c || typeof c !== 'object') throw new VouchError('bad_request', 'commit info is missing');
  if (typeof c.message !== 'string' || c.message.includes('\0')) throw new VouchError('bad_request', 'commit message must be a string without NUL');
  for (const [k, v] of [
    ['author name', c.authorName],
    ['author email', c.authorEmail],
  ] as const) {
    if (typeof v !== 'string' || v.trim() === '' || /[<>\n\0]/.test(v)) {
      throw new VouchError('bad_request', `commit ${k} must be a non-empty string without <, >, newline or NUL`);
    }
  }
  if (!Number.isSafeInteger(c.timestamp) || c.timestamp < 0) throw new VouchError('bad_request', 'commit timestamp must be non-negative unix seconds');
}

/**
 * The root files an append rewrites: `checkpoint.json`'s text, or it and
 * `checkpoint.note`'s (the signed tlog checkpoint of the new size; a chain
 * without one gains it with its next append that hands one over). An
 * append without a note removes a committed one: it would name an older
 * size (a committed note always names the chain's size, or there is none).
 */
export type RootFiles = string | { json: string; note?: string | null };

function rootFiles(r: RootFiles): { json: string; note: string | null } {
  if (typeof r === 'string') return { json: r, note: null };
  if (!r || typeof r !== 'object') throw new VouchError('bad_request', 'checkpoint text is not a string');
  if (r.note !== undefined && r.note !== null && typeof r.note !== 'string') throw new VouchError('bad_request', 'checkpoint note is not a string');
  return { json: r.json, note: r.note ?? null };
}

function checkBlocks(blocks: BlockFile[], from: number, checkpoint: string): void {
  if (!Array.isArray(blocks) || blocks.length === 0) throw new VouchError('bad_request', 'an append needs at least one block');
  blocks.forEach((b, k) => {
    const want = from + k;
    if (!b || b.index !== want) {
      throw new VouchError('bad_request', `expected block ${want} (chain size ${from}), got ${String(b?.index)}`, { index: want });
    }
    if (want > MAX_INDEX) throw new VouchError('bad_request', `block index ${want} exceeds ${MAX_INDEX}`);
    if (typeof b.content !== 'string') throw new VouchError('bad_request', `block ${want} content is not a string`, { index: want });
  });
  if (typeof checkpoint !== 'string') throw new VouchError('bad_request', 'checkpoint text is not a string');
}

export class ChainRepo extends ChainRepoRepair {
  /** A pack of the loose objects is queued behind the current writer. */
  private packQueued = false;
  /** The removal of the loose files the last pack made redundant (runs beside later writers). */
  private removal: Promise<number> = Promise.resolve(0);
  private lastPack: { pack: string | null; merged: string[] } = { pack: null, merged: [] };
  /** The capabilities the remote advertised at the last fetch from it (a hinted fetch reuses them). */
  private remoteCaps: { url: string; caps: Set<string> } | null = null;
  /** Packs made by this instance and the time they held the writer queue (without the loose files' removal, which runs beside it). */
  readonly packTimes = { count: 0, totalMs: 0, maxMs: 0, cpuMs: 0 };

  /**
   * Create a chain repository in `dir` (created if missing) holding `blocks`
   * (indexes 0, 1, ...) and `checkpoint`, as one commit. Refuses with
   * `chain_exists` if `dir` holds a git repository or anything else.
   */
  static async init(dir: string, blocks: BlockFile[], checkpoint: RootFiles, commit: CommitInfo, opts: { sparse?: boolean } = {}): Promise<ChainRepo> {
    const abs = resolve(dir);
    let created = false;
    if (fs.existsSync(abs)) {
      if (!isDir(abs)) throw new VouchError('chain_exists', `${abs} exists and is not a directory`);
      if (fs.existsSync(join(abs, '.git'))) throw new VouchError('chain_exists', `${abs} already holds a git repository`);
      if (fs.readdirSync(abs).length > 0) throw new VouchError('chain_exists', `${abs} is not empty`);
    }
    const root = rootFiles(checkpoint);
    checkBlocks(blocks, 0, root.json);
    checkCommitInfo(commit);
    try {
      if (!fs.existsSync(abs)) {
        fs.mkdirSync(abs, { recursive: true });
        created = true;
      }
      const gitdir = join(abs, '.git');
      for (const d of ['objects/info', 'objects/pack', 'refs/heads', 'refs/tags']) fs.mkdirSync(join(gitdir, d), { recursive: true });
      fs.writeFileSync(join(gitdir, 'HEAD'), `ref: ${BRANCH_REF}\n`);
      fs.writeFileSync(
        join(gitdir, 'config'),
        '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n' +
          (opts.sparse ? SPARSE_CONFIG + SPARSE_INDEX_CONFIG : ''),
      );
      fs.writeFileSync(join(gitdir, 'description'), 'vouch chain repository\n');
      if (opts.sparse) ensurePatterns(gitdir);
      const repo = new ChainRepo(abs);
      repo._sparse = opts.sparse === true;
      repo.dirs.set('', []);
      repo.consistent = true;
      // The 256 object fan-out directories, made once: the appends' loose objects then never create one (a mkdir and
      // an fsync of objects/ per append for the first ~200 appends otherwise). git's gc may remove them; appends recreate them.
      for (let b = 0; b < 256; b++) fs.mkdirSync(join(gitdir, 'objects', b.toString(16).padStart(2, '0')));
      fsyncDir(join(gitdir, 'objects'));
      repo.objects.startPack(); // one pack, written durably before the branch names the commit: no loose object
      try {
        await repo.commitBlocks(blocks, root, commit, null);
      } finally {
        repo.objects.abortPack();
      }
      return repo;
    } catch (e) {
      // Leave nothing half-made behind: the directory was empty (or absent) before.
      for (const p of ['.git', 'blocks', CHECKPOINT, CHECKPOINT + TMP_SUFFIX, CHECKPOINT_NOTE, CHECKPOINT_NOTE + TMP_SUFFIX])
        fs.rmSync(join(abs, p), { recursive: true, force: true });
      if (created) fs.rmSync(abs, { recursive: true, force: true });
      throw e instanceof VouchError ? e : ioError(`cannot create chain in ${abs}`, e);
    }
  }

  /**
   * Open the chain repository in `dir`. Throws `not_a_chain` for a missing
   * or non-git directory, HEAD not on `main`, or no block on the branch.
   * With `repair` (default), first brings the working tree and index in line
   * with the branch after a crash, a plain `git clone` or git rewriting the
   * index (see `repairs`); without it nothing is written, and `append`
   * refuses if they lag behind the branch.
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
    const repo = new ChainRepo(abs, state?.index ?? null);
    repo._sparse = isSparse(gitdir);
    await repo.loadBranch(head);
    repo.canRepair = opts.repair ?? true;
    if (repo.canRepair) {
      assertChainWritable(abs); // repair writes: refused while a running gateway owns the chain
      repo.objects.noteLoose(repo.removeObjectTemps()); // packed with the appends' own once past the threshold
      await repo.repair(state);
    } else repo.consistent = state?.commit === head && fs.existsSync(join(gitdir, 'index'));
    return repo;
  }

  protected serialize<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * Append `blocks` (indexes size, size+1, ... in order) and the new
   * checkpoint text (and the signed checkpoint note, when given) as one
   * commit. Without a note, a committed `checkpoint.note` is removed (see
   * `RootFiles`). Throws `bad_request` (nothing written)
   * for wrong indexes or input. Once the commit is on the branch the append
   * has happened: later trouble with the working tree or index is recorded in
   * `warnings` and caught up before the next append (or by `open()`).
   */
  append(blocks: BlockFile[], checkpoint: RootFiles, commit: CommitInfo): Promise<{ commit: string }> {
    return this.serialize(async () => {
      const root = rootFiles(checkpoint);
      checkBlocks(blocks, this._size, root.json);
      checkCommitInfo(commit);
      assertChainWritable(this.dir); // refused while another process (a running authority gateway) owns the chain
      if (!this.consistent) {
        if (!this.canRepair) {
          throw new VouchError('io_error', `${this.dir}: working tree or index lags behind branch main; open with repair to append`);
        }
        await this.repair(readState(this.gitdir));
      }
      const done = { commit: await this.commitBlocks(blocks, root, commit, this._head) };
      this.schedulePack();
      return done;
    });
  }

  /**
   * Once LOOSE_PACK_THRESHOLD loose objects wait, queue a pack of them
   * behind the current writer (so it runs after the append that crossed the
   * threshold returned, and before the next writer): see `repack`.
   */
  protected schedulePack(): void {
    if (this.packQueued || this.objects.pendingLoose < LOOSE_PACK_THRESHOLD) return;
    this.packQueued = true;
    void this.serialize(async () => {
      this.packQueued = false;
      try {
        this.packNow(MAX_PACK_OBJECTS);
      } catch (e) {
        this.warnings.push(`packing loose objects failed (they stay loose, readable; retried after the next append): ${(e as Error).message}`);
      }
    });
  }

  /** Pack, merge, and start removing the loose files packed (awaited by `repack()` and the next pack, not by appends). */
  private packNow(max: number): Promise<number> {
    assertChainWritable(this.dir);
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    const r = this.objects.packPending(max);
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(c0);
    this.packTimes.cpuMs += (cpu.user + cpu.system) / 1000;
    this.packTimes.count++;
    this.packTimes.totalMs += ms;
    this.packTimes.maxMs = Math.max(this.packTimes.maxMs, ms);
    const removal = this.removal.then(() => r.removal).catch(() => 0);
    this.removal = removal;
    this.lastPack = { pack: r.pack, merged: r.merged };
    return removal;
  }

  /**
   * Pack every loose object not packed yet into one pack (trees as deltas of
   * their previous version), remove the loose files once it is durable, and
   * merge packs so their sizes stay a geometric progression (O(log n) packs),
   * as appends do on their own every LOOSE_PACK_THRESHOLD objects. Safe at
   * any crash point (./repack.ts).
   */
  repack(): Promise<{ pack: string | null; removed: number; merged: string[] }> {
    return this.serialize(async () => {
      const removed = await this.packNow(Infinity);
      return { ...this.lastPack, removed };
    });
  }

  /** Loose objects waiting for the next pack (tests, benches). */
  get pendingLoose(): number {
    return this.objects.pendingLoose;
  }

  protected async commitBlocks(blocks: BlockFile[], root: { json: string; note: string | null }, info: CommitInfo, parent: string | null): Promise<string> {
    // 1. Objects: blobs, the changed trees (bottom up), the commit.
    const bytes = blocks.map((b) => Buffer.from(b.content, 'utf8'));
    const paths = blocks.map((b) => blockPath(b.index));
    let oids: string[];
    let cpBytes: Buffer;
    let cpOid: string;
    let noteBytes: Buffer | null = null;
    let noteOid: string | null = null;
    /** An append without a note removes the committed one (it would name an older size). */
    let dropNote = false;
    const modified = new Map<string, TreeEntry[]>();
    let commitOid: string;
    try {
      oids = bytes.map((b) => this.objects.write('blob', b));
      cpBytes = Buffer.from(root.json, 'utf8');
      cpOid = this.objects.write('blob', cpBytes);
      if (root.note !== null) {
        noteBytes = Buffer.from(root.note, 'utf8');
        noteOid = this.objects.write('blob', noteBytes);
      }
      const entriesOf = async (dirPath: string): Promise<TreeEntry[]> => {
        const known = modified.get(dirPath);
        if (known) return known;
        const cached = this.dirs.get(dirPath);
        let list: TreeEntry[];
        if (cached) list = cached.slice();
        else {
          const cut = dirPath.lastIndexOf('/');
          const parentList = await entriesOf(cut < 0 ? '' : dirPath.slice(0, cut));
          const e = parentList.find((x) => x.name === dirPath.slice(cut + 1));
          if (e && e.mode !== TREE_MODE) throw new VouchError('io_error', `${dirPath} is a file on branch main, not a directory`);
          list = e ? await this.objects.readTree(e.oid) : [];
        }
        modified.set(dirPath, list);
        return list;
      };
      for (let k = 0; k < blocks.length; k++) {
        const p = paths[k]!;
        setTreeEntry(await entriesOf(p.slice(0, 14)), { mode: FILE_MODE, name: p.slice(15), oid: oids[k]! });
      }
      setTreeEntry(await entriesOf(''), { mode: FILE_MODE, name: CHECKPOINT, oid: cpOid });
      if (noteOid !== null) setTreeEntry(await entriesOf(''), { mode: FILE_MODE, name: CHECKPOINT_NOTE, oid: noteOid });
      else {
        const root = await entriesOf('');
        const at = root.findIndex((e) => e.name === CHECKPOINT_NOTE);
        if (at >= 0) {
          root.splice(at, 1);
          dropNote = true;
        }
      }
      // Bottom up, level by level: writing a level marks its parents modified.
      const depth = (d: string) => (d === '' ? 0 : d.split('/').length);
      for (let level = 3; level >= 1; level--) {
        for (const d of [...modified.keys()].filter((k) => depth(k) === level)) {
          const oid = this.objects.write('tree', treeBody(modified.get(d)!), d);
          const cut = d.lastIndexOf('/');
          setTreeEntry(await entriesOf(cut < 0 ? '' : d.slice(0, cut)), { mode: TREE_MODE, name: d.slice(cut + 1), oid });
        }
      }
      const rootOid = this.objects.write('tree', treeBody(modified.get('')!), '');
      commitOid = this.objects.write('commit', commitBody(rootOid, parent, info));
      this.objects.syncDirs();
    } catch (e) {
      throw e instanceof VouchError ? e : ioError('cannot write git objects', e);
    }
    crashPoint('after-objects');

    // 2. The commit point: move the branch.
    await this.moveBranch(commitOid, parent);
    crashPoint('after-ref');
    const last = paths[paths.length - 1]!;
    this._head = commitOid;
    this._size = blocks[blocks.length - 1]!.index + 1;
    const keep = ['', 'blocks', last.slice(0, 10), last.slice(0, 14)];
    this.dirs = new Map(keep.map((d) => [d, modified.get(d) ?? this.dirs.get(d) ?? []]));
    this.forgetLeaves();

    // 3-5. Working tree, index, state: a failure here leaves them to catch up.
    try {
      failPoint('working-tree');
      if (this._sparse) {
        // The sparse layout: the root files and a sparse index (./sparse-layout.ts); the blocks stay in git objects.
        this.writeWorkFile(CHECKPOINT, cpBytes);
        if (noteBytes !== null) this.writeWorkFile(CHECKPOINT_NOTE, noteBytes);
        else if (dropNote) fs.rmSync(join(this.dir, CHECKPOINT_NOTE), { force: true });
        crashPoint('after-files');
        await this.syncSparse(false, false);
      } else {
        const entries: IndexEntry[] = [];
        for (let k = 0; k < blocks.length; k++) {
          entries.push(entryFromStat(paths[k]!, oids[k]!, this.writeWorkFile(paths[k]!, bytes[k]!)));
        }
        const cpEntry = entryFromStat(CHECKPOINT, cpOid, this.writeWorkFile(CHECKPOINT, cpBytes));
        const noteEntry = noteBytes === null ? null : entryFromStat(CHECKPOINT_NOTE, noteOid!, this.writeWorkFile(CHECKPOINT_NOTE, noteBytes));
        if (dropNote) fs.rmSync(join(this.dir, CHECKPOINT_NOTE), { force: true });
        crashPoint('after-files');
        await this.index.update(
          (idx) => {
            for (const e of entries) idx.addNew(e);
            idx.upsert(cpEntry);
            if (noteEntry !== null) idx.upsert(noteEntry);
            else if (dropNote) idx.remove(CHECKPOINT_NOTE);
          },
          (p) => this.noteStaleLock(p),
        );
      }
      crashPoint('after-index');
      this.writeState();
      this.consistent = true;
    } catch (e) {
      this.consistent = false;
      this.warnings.push(`commit ${commitOid} is on branch main, but the working tree or index is not updated yet: ${(e as Error).message}`);
    }
    return commitOid;
  }

  // -------------------------------------------------------------------------
  // Mirroring: clone, fetch, fast-forward

  /**
   * Clone the chain at `url` (git smart HTTP) into `dir`, which must be
   * missing or empty: branch `main` at depth 1 (trust comes from the chain's
   * hash links and signatures, not from git history), the pack stored as git
   * would, the working tree, `.git/index` and the state file written
   * directly, so the result opens without repairs and `git status` is
   * clean. `origin` is configured, so plain `git fetch` works in it too.
   * A failed clone leaves `dir` as it found it; a crashed one leaves
   * `.git/vouch-clone-incomplete`, which `open()` refuses.
   */
  static async clone(url: string, dir: string, opts: FetchOptions & { sparse?: boolean } = {}): Promise<ChainRepo> {
    const abs = resolve(dir);
    const existed = fs.existsSync(abs);
    if (existed) {
      if (!isDir(abs)) throw new VouchError('chain_exists', `${abs} exists and is not a directory`);
      if (fs.readdirSync(abs).length > 0) throw new VouchError('chain_exists', `${abs} is not empty`);
    }
    const shown = url.replace(/\/\/[^@/]*@/, '//');
    let repo: ChainRepo | null = null;
    try {
      const { discoverRefs, fetchPack } = await import('./upload-pack.ts'); // with undici: only when fetching
      const { refs, caps } = await discoverRefs(url, opts);
      const want = refs.get(BRANCH_REF);
      if (!want) throw new VouchError('not_a_chain', `${shown} has no branch main`);
      const gitdir = join(abs, '.git');
      for (const d of ['objects/info', 'objects/pack', 'refs/heads', 'refs/tags', 'refs/remotes/origin']) fs.mkdirSync(join(gitdir, d), { recursive: true });
      fs.writeFileSync(join(gitdir, CLONE_MARKER), `cloning ${shown}\n`);
      fs.writeFileSync(join(gitdir, 'HEAD'), `ref: ${BRANCH_REF}\n`);
      fs.writeFileSync(join(gitdir, 'description'), 'vouch chain repository (mirror)\n');
      fs.writeFileSync(
        join(gitdir, 'config'),
        '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n' +
          (opts.sparse ? SPARSE_CONFIG + SPARSE_INDEX_CONFIG : '') +
          `[remote "origin"]\n\turl = ${url.replace(/[\\"\n]/g, '')}\n\tfetch = +refs/heads/main:${REMOTE_REF}\n` +
          '[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n',
      );
      const got = await fetchPack(url, opts, caps, want, [], [], join(gitdir, 'objects', 'pack'));
      const pack = got.pack;
      repo = new ChainRepo(abs);
      repo._sparse = opts.sparse === true;
      await repo.storePack(pack);
      await repo.updateShallow(got.shallow, got.unshallow);
      repo.writeRemoteRef(want);
      await repo.loadBranch(want);
      if (repo._sparse) await repo.syncSparse(false);
      else await repo.checkoutAll(pack, opts.onProgress);
      await repo.moveBranch(want, null);
      repo.writeState();
      repo.consistent = true;
      repo.objects.fetched = null;
      fs.rmSync(join(gitdir, CLONE_MARKER));
      return repo;
    } catch (e) {
      if (repo) repo.objects.fetched = null; // closes the received pack's file
      // Leave nothing half-made behind: the directory was empty (or absent) before.
      try {
        if (existed) for (const n of fs.readdirSync(abs)) fs.rmSync(join(abs, n), { recursive: true, force: true });
        else fs.rmSync(abs, { recursive: true, force: true });
      } catch {
        /* best effort */
      }
      throw e instanceof VouchError ? e : ioError(`cannot clone ${shown} into ${abs}`, e);
    }
  }

  /** True when `dir` holds a clone that was interrupted (crash or kill) before it completed. */
  static isInterruptedClone(dir: string): boolean {
    return fs.existsSync(join(resolve(dir), '.git', CLONE_MARKER));
  }

  /** Write every file of the branch into an empty working tree (in pack order, for the delta cache), then the whole index. */
  protected async checkoutAll(pack: PackData, onProgress?: (done: number, total: number) => void): Promise<void> {
    const files = [...(await this.walkBranch())].map(([path, f]) => ({ path, ...f, at: pack.offsetOf(f.oid) ?? Number.MAX_SAFE_INTEGER }));
    files.sort((a, b) => a.at - b.at);
    const entries: IndexEntry[] = [];
    let done = 0;
    for (const f of files) {
      if (onProgress && ++done % 500 === 0) onProgress(done, files.length);
      if (f.mode === '120000' || f.mode === '160000') {
        this.warnings.push(`${f.path}: symlinks and submodules are not checked out`);
        continue;
      }
      const abs = join(this.dir, f.path);
      const d = dirname(abs);
      if (!this.knownDirs.has(d)) {
        fs.mkdirSync(d, { recursive: true });
        this.knownDirs.add(d);
      }
      fs.writeFileSync(abs, await this.objects.readBlob(f.oid), { mode: f.mode === '100755' ? 0o755 : 0o644 });
      entries.push(entryFromStat(f.path, f.oid, fs.lstatSync(abs, { bigint: true })));
    }
    onProgress?.(files.length, files.length);
    await this.index.update(
      (idx) => idx.replaceAll(entries),
      (p) => this.noteStaleLock(p),
      { reload: false },
    );
  }

  /**
   * Fetch the remote's branch `main` into `refs/remotes/origin/main`
   * (depth 1, telling the remote our head so only new objects come). Never
   * touches the branch, the working tree or the index. The pack stays
   * indexed in memory for cheap reads until `dropFetched()` or the next
   * fetch. `hinted`: a commit a sync hint named, asked for without reading
   * the refs first when their capabilities are known from an earlier fetch
   * of `url` (what comes is verified by the caller as any fetch).
   */
  fetch(url: string, opts: FetchOptions = {}, hinted: string | null = null): Promise<FetchResult> {
    return this.serialize(async () => {
      const shown = url.replace(/\/\/[^@/]*@/, '//');
      const { discoverRefs, fetchPack } = await import('./upload-pack.ts'); // with undici: only when fetching
      let want: string | undefined;
      let caps: Set<string>;
      if (hinted !== null && this.remoteCaps?.url === url) {
        // A commit named by a sync hint, asked for straight away (the remote refuses one that is not its ref's tip).
        want = hinted;
        caps = this.remoteCaps.caps;
      } else {
        const found = await discoverRefs(url, opts);
        this.remoteCaps = { url, caps: found.caps };
        caps = found.caps;
        want = found.refs.get(BRANCH_REF);
      }
      if (!want) throw new VouchError('not_a_chain', `${shown} has no branch main`);
      if (await this.objects.has(want)) {
        if (want === hinted) return { commit: want, objects: 0, bytes: 0 };
        this.writeRemoteRef(want);
        return { commit: want, objects: 0, bytes: 0 };
      }
      const haves = [this._head];
      const tracked = readRef(this.gitdir, REMOTE_REF);
      if (tracked && tracked !== this._head && (await this.objects.has(tracked))) haves.push(tracked);
      const got = await fetchPack(url, opts, caps, want, haves, readShallow(this.gitdir), join(this.gitdir, 'objects', 'pack'), (oid) =>
        this.objects.read(oid).catch(() => null),
      );
      const pack = got.pack;
      try {
        await this.storePack(pack);
        await this.updateShallow(got.shallow, got.unshallow);
        this.writeRemoteRef(want);
      } catch (e) {
        throw e instanceof VouchError ? e : ioError('cannot store the fetched objects', e);
      }
      this.schedulePack(); // a mirror stores small fetches as loose objects: packed as an authority's appends are
      return { commit: want, objects: pack.count, bytes: got.bytes };
    });
  }

  /** Forget the in-memory pack of the last fetch and any pack read since (the objects stay on disk). */
  dropFetched(): void {
    this.objects.fetched = null;
    this.objects.resetCache();
  }

  /**
   * Keep a received pack (its temporary file, indexed by fetchPack): named
   * as a pack + index (as git stores it), rewritten whole when it came thin,
   * or as loose objects when small (the file removed). It stays readable
   * (`objects.fetched`) until dropped. On failure the file is removed.
   */
  protected async storePack(pack: PackData): Promise<void> {
    const dir = join(this.gitdir, 'objects', 'pack');
    try {
      if (pack.unique < UNPACK_LIMIT) {
        // Commits last: a commit on disk means its trees and blobs are too.
        const order = [...pack.uniqueEntries()].sort((a, b) => Number(pack.typeOf(a) === 'commit') - Number(pack.typeOf(b) === 'commit'));
        for (const k of order) this.objects.write(pack.typeOf(k) as 'blob' | 'tree' | 'commit' | 'tag', pack.resolve(k));
        pack.discard();
      } else if (pack.thin) {
        const w = new PackFileWriter(dir, pack.unique);
        try {
          for (const k of pack.uniqueEntries()) w.addWhole(pack.oidOf(k), pack.typeOf(k), pack.resolve(k));
          w.finish();
        } catch (e) {
          w.abort();
          throw e;
        }
        pack.discard();
      } else if (pack.keep(dir)) {
        // The index last, durably: the pack is an object store's once its index is named.
        const tmp = join(dir, `tmp_idx_vouch_${process.pid}_${Date.now()}`);
        writeDurably(tmp, pack.idxFile(), 0o444);
        fs.renameSync(tmp, join(dir, `pack-${pack.checksum}.idx`));
        fsyncDir(dir);
      }
    } catch (e) {
      pack.discard();
      pack.close();
      throw e;
    }
    this.objects.fetched = pack;
  }

  /** Apply the remote's shallow lines to `.git/shallow` (a commit is shallow only if we lack one of its parents). */
  protected async updateShallow(add: string[], remove: string[]): Promise<void> {
    const before = readShallow(this.gitdir);
    const set = new Set(before);
    for (const oid of add) {
      if (set.has(oid)) continue;
      const parents = await this.objects.readCommitParents(oid);
      const have = await Promise.all(parents.map((p) => this.objects.has(p)));
      if (!have.every(Boolean)) set.add(oid);
    }
    for (const oid of remove) set.delete(oid);
    if (set.size === before.length && before.every((o) => set.has(o))) return;
    const file = join(this.gitdir, 'shallow');
    if (set.size === 0) fs.rmSync(file, { force: true });
    else
      writeFileAtomic(
        file,
        [...set]
          .sort()
          .map((o) => `${o}\n`)
          .join(''),
      );
  }

  protected writeRemoteRef(oid: string): void {
    const file = join(this.gitdir, REMOTE_REF);
    fs.mkdirSync(dirname(file), { recursive: true });
    writeFileAtomic(file, `${oid}\n`);
  }

  /**
   * Read-only view of the chain files at `commit` (e.g. a fetched one),
   * from git objects, never from the working tree.
   * @throws VouchError `not_a_chain` when the commit holds no block file.
   */
  async snapshotAt(commit: string): Promise<ChainSnapshot> {
    if (!OID_RE.test(commit)) throw new VouchError('bad_request', `${commit} is not a commit id`);
    const found = await this.locate(commit, `commit ${commit}`);
    const trees = new Map(found.dirs);
    const readPath = async (path: string): Promise<Buffer | null> => {
      const parts = path.split('/');
      let entries = trees.get('')!;
      for (let k = 0; k < parts.length; k++) {
        const e = entries.find((x) => x.name === parts[k]);
        if (!e) return null;
        if (k === parts.length - 1) return e.mode === TREE_MODE ? null : this.objects.readBlob(e.oid);
        if (e.mode !== TREE_MODE) return null;
        const dirPath = parts.slice(0, k + 1).join('/');
        let next = trees.get(dirPath);
        if (!next) {
          next = await this.objects.readTree(e.oid);
          trees.set(dirPath, next);
        }
        entries = next;
      }
      return null;
    };
    return {
      commit,
      size: found.size,
      readFile: async (path) => {
        const b = await readPath(path);
        if (b === null) return null;
        const text = b.length > LIMITS.blockFileBytes ? null : utf8Text(b);
        if (text === null) {
          const why = `${path} at commit ${commit} is ${b.length > LIMITS.blockFileBytes ? `larger than ${LIMITS.blockFileBytes} bytes` : 'not valid UTF-8'}`;
          throw path === CHECKPOINT
            ? new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${why}`, { index: null })
            : new VouchError('malformed', `malformed: ${why}`, { index: null, resource: path });
        }
        return text;
      },
      readBlock: async (index) => {
        const p = blockPath(index);
        const b = index < found.size ? await readPath(p) : null;
        if (!b) throw new VouchError('not_found', `${p} is not in commit ${commit}`, { index });
        const text = strictBlockText(b, index, p);
        // I-JSON: a repeated member name is malformed (JSON.parse, which readers use, keeps the last silently).
        const json = readJson(text);
        if (json.error !== null) throw new VouchError('malformed', `malformed at block ${index}: ${json.error}`, { index, resource: p });
        return text;
      },
    };
  }

  /** File-level changes from the branch head to `commit`, each marked added, modified or deleted. */
  async changesTo(commit: string): Promise<FileChange[]> {
    const diff = await this.diffCommits(this._head, commit);
    return diff.map((c) => ({ path: c.path, change: c.oid === null ? 'deleted' : c.before === null ? 'added' : 'modified' }));
  }

  /**
   * Move branch `main` to `commit` (fetched earlier) and bring the working
   * tree, the index and the state file along, through the same path as the
   * repair after a crash. The ref move is a compare-and-swap against the
   * head we know; it is the commit point.
   * @throws VouchError `history_rewritten` (nothing changed) when `commit`
   *   deletes or changes a block file of the current head: the branch only
   *   ever gains block files.
   */
  fastForward(commit: string): Promise<{ from: string; to: string; size: number }> {
    return this.serialize(async () => {
      if (!OID_RE.test(commit)) throw new VouchError('bad_request', `${commit} is not a commit id`);
      if (!this.consistent) {
        if (!this.canRepair) throw new VouchError('io_error', `${this.dir}: working tree or index lags behind branch main; open with repair to fast-forward`);
        await this.repair(readState(this.gitdir));
      }
      const from = this._head;
      if (commit === from) return { from, to: commit, size: this._size };
      const target = await this.locate(commit, `commit ${commit}`);
      const changes = await this.diffCommits(from, commit);
      const lost = changes.filter((c) => c.path.startsWith('blocks/') && (c.oid === null || c.before !== null));
      if (lost.length > 0 || target.size < this._size) {
        throw new VouchError(
          'history_rewritten',
          `history_rewritten: commit ${commit} ${lost.length > 0 ? `changes or removes ${lost.length} existing file(s) under blocks/, first ${lost[0]!.path}` : `has ${target.size} blocks, the branch ${this._size}`}`,
          {
            index: null,
            evidence: { from, to: commit, paths: lost.slice(0, 10).map((c) => c.path), size: this._size, target_size: target.size },
          },
        );
      }
      await this.moveBranch(commit, from);
      this._head = commit;
      this._size = target.size;
      this.dirs = target.dirs;
      await this.pinHead();
      this.forgetLeaves();
      try {
        if (this._sparse) await this.syncSparse(false, false);
        else await this.applyChanges(changes, false);
        this.writeState();
        this.consistent = true;
      } catch (e) {
        this.consistent = false;
        this.warnings.push(`commit ${commit} is on branch main, but the working tree or index is not updated yet: ${(e as Error).message}`);
      }
      return { from, to: commit, size: this._size };
    });
  }
}
