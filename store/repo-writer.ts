/**
 * The chain repository's writes (docs/spec/design.md §2): creating a chain,
 * `append` (one commit per append), and packing the appends' loose objects.
 * One part of ./chain-repo.ts, over the shared ./repo-state.ts.
 * Owns: the objects of an append (blobs, the changed trees bottom up, the
 * commit), the working-tree and index writes after the commit point, the
 * repack schedule (LOOSE_PACK_THRESHOLD; the repack itself: ./git-repack.ts,
 * beside the appends, one repack at a time).
 * Trusts: callers to hand over block texts in order under the chain lock.
 * Must hold: a block exists only once its commit is on the branch; an
 * append costs the same at any size; after every write `git status` is
 * clean and `git fsck` passes.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { CHECKPOINT, CHECKPOINT_NOTE, MAX_INDEX, blockPath } from '../chain/layout.ts';
import { assertChainWritable } from './chain-lock.ts';
import type { BlockFile, CommitInfo, RootFiles } from './chain-api.ts';
import { fsyncDir } from '../platform/durable-file.ts';
import { crashPoint, failPoint, isDir } from './git-files.ts';
import { BRANCH_REF, FILE_MODE, TREE_MODE, type TreeEntry, commitBody, ioError, setTreeEntry, treeBody } from './git-objects.ts';
import type { RepoRepair } from './repo-repair.ts';
import { type RepoState, TMP_SUFFIX, readState } from './repo-state.ts';
import { SPARSE_CONFIG, SPARSE_INDEX_CONFIG, ensurePatterns } from './sparse-layout.ts';
import { looseIds, repackGeometric } from './git-repack.ts';

/** The packs in `packDir` (names without extension, those with an index). */
function listPacks(packDir: string): string[] {
  try {
    return fs
      .readdirSync(packDir)
      .filter((f) => /^pack-[0-9a-f]{40}\.idx$/.test(f))
      .map((f) => f.slice(0, -4));
  } catch {
    return [];
  }
}

/**
 * Loose objects that trigger a repack by stock git (./git-repack.ts): ~290
 * single-block appends (7 objects each: block, checkpoint, 4 trees, commit;
 * 8 with checkpoint.note). Fewer than git's gc.auto (6700) because an
 * append's loose leaf tree is up to ~35 KiB (a ~100-byte delta once packed):
 * the loose objects stay under ~15 MiB. More than a few dozen appends because
 * the repack's fixed costs (three or four git processes, their fsyncs) then fall on one
 * append in ~290, outside the p99 of a thousand (docs/spec/repository.md "Packs").
 */
export const LOOSE_PACK_THRESHOLD = 2048;
/** Longest a repack's git child may run before it is stopped (a backlog of loose objects is packed at once). */
const REPACK_TIMEOUT_MS = 30 * 60_000;

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

export class RepoWriter {
  constructor(
    private readonly s: RepoState,
    private readonly repairer: RepoRepair,
  ) {}

  /** A threshold repack is queued or running (reset once it ended and the loose objects were counted again). */
  private packQueued = false;
  /**
   * `VOUCH_REPACK_APPENDS=wait` (read when the chain is opened): a repack
   * holds the writer queue, so the append behind it waits, as before appends
   * went on beside git (kept for the side-by-side bench, bench/gitops-bench.ts).
   */
  private readonly appendsWait = process.env.VOUCH_REPACK_APPENDS === 'wait';
  /** Repacks run by this instance and their time (git's two children and the count after). */
  readonly packTimes = { count: 0, totalMs: 0, maxMs: 0 };

  /**
   * Create the chain repository in the state's `dir` (created if missing) holding `blocks`
   * (indexes 0, 1, ...) and `checkpoint`, as one commit. Refuses with
   * `chain_exists` if `dir` holds a git repository or anything else.
   */
  async create(blocks: BlockFile[], checkpoint: RootFiles, commit: CommitInfo): Promise<void> {
    const abs = this.s.dir;
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
        '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n' + SPARSE_CONFIG + SPARSE_INDEX_CONFIG,
      );
      fs.writeFileSync(join(gitdir, 'description'), 'vouch chain repository\n');
      ensurePatterns(gitdir);
      this.s.dirs.set('', []);
      this.s.consistent = true;
      // The 256 object fan-out directories, made once: the appends' loose objects then never create one (a mkdir and
      // an fsync of objects/ per append for the first ~200 appends otherwise). git's gc may remove them; appends recreate them.
      for (let b = 0; b < 256; b++) fs.mkdirSync(join(gitdir, 'objects', b.toString(16).padStart(2, '0')));
      fsyncDir(join(gitdir, 'objects'));
      this.s.objects.startPack(); // one pack, written durably before the branch names the commit: no loose object
      try {
        await this.commitBlocks(blocks, root, commit, null);
      } finally {
        this.s.objects.abortPack();
      }
    } catch (e) {
      // Leave nothing half-made behind: the directory was empty (or absent) before.
      for (const p of ['.git', 'blocks', CHECKPOINT, CHECKPOINT + TMP_SUFFIX, CHECKPOINT_NOTE, CHECKPOINT_NOTE + TMP_SUFFIX])
        fs.rmSync(join(abs, p), { recursive: true, force: true });
      if (created) fs.rmSync(abs, { recursive: true, force: true });
      throw e instanceof VouchError ? e : ioError(`cannot create chain in ${abs}`, e);
    }
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
    return this.s.serialize(async () => {
      const root = rootFiles(checkpoint);
      checkBlocks(blocks, this.s.size, root.json);
      checkCommitInfo(commit);
      assertChainWritable(this.s.dir); // refused while another process (a running authority gateway) owns the chain
      if (!this.s.consistent) {
        if (!this.s.canRepair) {
          throw new VouchError('io_error', `${this.s.dir}: working tree or index lags behind branch main; open with repair to append`);
        }
        await this.repairer.repair(readState(this.s.gitdir));
      }
      const done = { commit: await this.commitBlocks(blocks, root, commit, this.s.head) };
      this.schedulePack();
      return done;
    });
  }

  /**
   * Once LOOSE_PACK_THRESHOLD loose objects wait, start a repack (see
   * `repack`) beside the writers: appends go on while git runs (their new
   * objects stay loose, packed by the next repack). At most one is queued or
   * running; a failure is a warning, retried after a later append.
   */
  schedulePack(): void {
    if (this.packQueued || this.s.objects.pendingLoose < LOOSE_PACK_THRESHOLD) return;
    this.packQueued = true;
    const run = async () => {
      try {
        if (this.s.objects.pendingLoose >= LOOSE_PACK_THRESHOLD) await this.packNow(); // an explicit repack may have run first
      } catch (e) {
        this.s.warnings.push(`packing loose objects failed (they stay loose, readable; retried after the next append): ${(e as Error).message}`);
      } finally {
        this.packQueued = false;
      }
    };
    // Always the repack queue first, then the writer queue (never the other way round: no deadlock).
    if (this.appendsWait) void this.s.oneRepack(() => this.s.serialize(run));
    else void this.s.oneRepack(run);
  }

  /** The newest commit at or before `tip` that a pack holds (the repack packs what came after it); null when none within the loose ones. */
  private async packedBase(tip: string): Promise<string | null> {
    const objects = this.s.objects;
    objects.disk.refresh();
    let oid: string | undefined = tip;
    for (let k = 0; oid && k <= objects.pendingLoose + 1; k++) {
      if (objects.inPacks(oid)) return oid;
      oid = (await objects.readCommitParents(oid))[0];
    }
    return null;
  }

  /**
   * One repack by stock git, run in the repack queue (the event loop stays
   * free: reads are served, and appends go on unless `appendsWait`). Packs
   * what the head reaches and what is loose, both read between two appends
   * (the head's id, once: appends move the branch meanwhile); what appends
   * write after stays loose for the next one. The loose objects are counted on disk
   * after, whatever happened.
   */
  private async packNow(): Promise<{ pack: string | null; removed: number; merged: string[] }> {
    assertChainWritable(this.s.dir);
    const t0 = performance.now();
    const packDir = join(this.s.gitdir, 'objects', 'pack');
    const packsBefore = listPacks(packDir);
    const looseBefore = this.s.objects.pendingLoose;
    // The head and the loose objects at one instant with no append in flight (a turn of the writer queue, unless this holds it).
    const snapshot = () => ({ tip: this.s.head, loose: looseIds(this.s.gitdir) });
    try {
      const at = this.appendsWait ? snapshot() : await this.s.serialize(async () => snapshot());
      await repackGeometric(this.s.dir, this.s.gitdir, at, await this.packedBase(at.tip), { timeoutMs: REPACK_TIMEOUT_MS });
    } finally {
      this.s.objects.afterRepack();
      const ms = performance.now() - t0;
      this.packTimes.count++;
      this.packTimes.totalMs += ms;
      this.packTimes.maxMs = Math.max(this.packTimes.maxMs, ms);
    }
    const after = new Set(listPacks(packDir));
    const made = [...after].filter((p) => !packsBefore.includes(p));
    return { pack: made[0] ?? null, removed: Math.max(0, looseBefore - this.s.objects.pendingLoose), merged: packsBefore.filter((p) => !after.has(p)) };
  }

  /**
   * Pack every loose object now, by stock git (./git-repack.ts: trees as
   * deltas of their previous version, block files whole, packs merged so
   * their sizes stay a geometric progression, loose copies pruned), as
   * appends do on their own every LOOSE_PACK_THRESHOLD objects. Starts once
   * the writers queued before it and any running repack are done; appends
   * queued after it go on beside git (what they write stays loose, unless
   * `appendsWait`). Returns the new pack (null: none), the loose files
   * removed and the packs merged away. Safe if git or vouch is killed at any point.
   */
  async repack(): Promise<{ pack: string | null; removed: number; merged: string[] }> {
    if (this.appendsWait) return this.s.oneRepack(() => this.s.serialize(() => this.packNow()));
    await this.s.serialize(async () => undefined);
    return this.s.oneRepack(() => this.packNow());
  }

  /** Loose objects waiting for the next pack (tests, benches). */
  get pendingLoose(): number {
    return this.s.objects.pendingLoose;
  }

  async commitBlocks(blocks: BlockFile[], root: { json: string; note: string | null }, info: CommitInfo, parent: string | null): Promise<string> {
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
      oids = bytes.map((b) => this.s.objects.write('blob', b));
      cpBytes = Buffer.from(root.json, 'utf8');
      cpOid = this.s.objects.write('blob', cpBytes);
      if (root.note !== null) {
        noteBytes = Buffer.from(root.note, 'utf8');
        noteOid = this.s.objects.write('blob', noteBytes);
      }
      const entriesOf = async (dirPath: string): Promise<TreeEntry[]> => {
        const known = modified.get(dirPath);
        if (known) return known;
        const cached = this.s.dirs.get(dirPath);
        let list: TreeEntry[];
        if (cached) list = cached.slice();
        else {
          const cut = dirPath.lastIndexOf('/');
          const parentList = await entriesOf(cut < 0 ? '' : dirPath.slice(0, cut));
          const e = parentList.find((x) => x.name === dirPath.slice(cut + 1));
          if (e && e.mode !== TREE_MODE) throw new VouchError('io_error', `${dirPath} is a file on branch main, not a directory`);
          list = e ? await this.s.objects.readTree(e.oid) : [];
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
          const oid = this.s.objects.write('tree', treeBody(modified.get(d)!));
          const cut = d.lastIndexOf('/');
          setTreeEntry(await entriesOf(cut < 0 ? '' : d.slice(0, cut)), { mode: TREE_MODE, name: d.slice(cut + 1), oid });
        }
      }
      const rootOid = this.s.objects.write('tree', treeBody(modified.get('')!));
      commitOid = this.s.objects.write('commit', commitBody(rootOid, parent, info));
      this.s.objects.syncDirs();
    } catch (e) {
      throw e instanceof VouchError ? e : ioError('cannot write git objects', e);
    }
    crashPoint('after-objects');

    // 2. The commit point: move the branch.
    await this.s.moveBranch(commitOid, parent);
    crashPoint('after-ref');
    const last = paths[paths.length - 1]!;
    this.s.head = commitOid;
    this.s.size = blocks[blocks.length - 1]!.index + 1;
    const keep = ['', 'blocks', last.slice(0, 10), last.slice(0, 14)];
    this.s.dirs = new Map(keep.map((d) => [d, modified.get(d) ?? this.s.dirs.get(d) ?? []]));
    this.s.forgetLeaves();

    // 3-5. Working tree, index, state: a failure here leaves them to catch up.
    try {
      failPoint('working-tree');
      // The root files and a sparse index (./sparse-layout.ts); the blocks stay in git objects.
      this.s.writeWorkFile(CHECKPOINT, cpBytes);
      if (noteBytes !== null) this.s.writeWorkFile(CHECKPOINT_NOTE, noteBytes);
      else if (dropNote) fs.rmSync(join(this.s.dir, CHECKPOINT_NOTE), { force: true });
      crashPoint('after-files');
      await this.repairer.syncSparse(false, false);
      crashPoint('after-index');
      this.s.writeState();
      this.s.consistent = true;
    } catch (e) {
      this.s.consistent = false;
      this.s.warnings.push(`commit ${commitOid} is on branch main, but the working tree or index is not updated yet: ${(e as Error).message}`);
    }
    return commitOid;
  }
}
