/**
 * How a mirror's chain repository follows its authority's (git smart HTTP):
 * the depth-1 clone (its transfer by stock git, ./git-clone.ts), the fetch
 * into `refs/remotes/origin/main`, read-only views of a fetched commit, and
 * the fast-forward. One part of ./chain-repo.ts, over ./repo-state.ts.
 * Owns: received packs (kept as git would, or as loose objects when small),
 * `.git/shallow`, the remote-tracking ref, the clone marker.
 * Trusts: nothing a remote sends (ids recomputed, everything bounded by
 * FETCH_LIMITS of ./fetch-limits.ts).
 * Must hold: a fetch never touches the branch, the working tree or the
 * index; a fast-forward only ever adds block files (else
 * `history_rewritten`, nothing changed); a failed clone leaves the
 * directory as it found it.
 */
import * as fs from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { LIMITS, readJson, utf8Text } from '../chain/block.ts';
import { CHECKPOINT, blockPath } from '../chain/layout.ts';
import type { ChainSnapshot, FetchOptions, FetchResult, FileChange } from './chain-api.ts';
import { fsyncDir, writeDurably } from '../platform/durable-file.ts';
import { isDir, readRef, readShallow, writeFileAtomic } from './git-files.ts';
import { BRANCH_REF, OID_RE, TREE_MODE, ioError } from './git-objects.ts';
import type { PackData } from './git-pack-index.ts';
import { PackFileWriter } from './pack-file-writer.ts';
import { strictBlockText } from './repo-reader.ts';
import type { RepoRepair } from './repo-repair.ts';
import { type RepoState, readState } from './repo-state.ts';
import type { RepoWriter } from './repo-writer.ts';
import { SPARSE_CONFIG, SPARSE_INDEX_CONFIG } from './sparse-layout.ts';

const REMOTE_REF = 'refs/remotes/origin/main';
/** The file a clone in progress leaves in `.git` (removed once it completed): `open()` refuses such a directory. */
export const CLONE_MARKER = 'vouch-clone-incomplete';
/** Packs with fewer objects are stored as loose objects, like git's transfer.unpackLimit. */
const UNPACK_LIMIT = 100;

/** True when `dir` holds a clone that was interrupted (crash or kill) before it completed. */
export function isInterruptedClone(dir: string): boolean {
  return fs.existsSync(join(resolve(dir), '.git', CLONE_MARKER));
}

export class RepoReplicator {
  /** The capabilities the remote advertised at the last fetch from it (a hinted fetch reuses them). */
  private remoteCaps: { url: string; caps: Set<string> } | null = null;

  constructor(
    private readonly s: RepoState,
    private readonly repairer: RepoRepair,
    private readonly writer: RepoWriter,
  ) {}

  /**
   * Clone the chain at `url` (git smart HTTP) into the state's `dir`, which must be
   * missing or empty: branch `main` at depth 1 (trust comes from the chain's
   * hash links and signatures, not from git history), fetched by stock git
   * behind the bounding proxy (./git-clone.ts), then the working tree, `.git/index` and the state file written
   * directly, so the result opens without repairs and `git status` is
   * clean. `origin` is configured, so plain `git fetch` works in it too.
   * A failed clone leaves `dir` as it found it; a crashed one leaves
   * `.git/vouch-clone-incomplete`, which `open()` refuses.
   */
  async clone(url: string, opts: FetchOptions = {}): Promise<void> {
    const abs = this.s.dir;
    const existed = fs.existsSync(abs);
    if (existed) {
      if (!isDir(abs)) throw new VouchError('chain_exists', `${abs} exists and is not a directory`);
      if (fs.readdirSync(abs).length > 0) throw new VouchError('chain_exists', `${abs} is not empty`);
    }
    const shown = url.replace(/\/\/[^@/]*@/, '//');
    try {
      const gitdir = join(abs, '.git');
      for (const d of ['objects/info', 'objects/pack', 'refs/heads', 'refs/tags', 'refs/remotes/origin']) fs.mkdirSync(join(gitdir, d), { recursive: true });
      fs.writeFileSync(join(gitdir, CLONE_MARKER), `cloning ${shown}\n`);
      fs.writeFileSync(join(gitdir, 'HEAD'), `ref: ${BRANCH_REF}\n`);
      fs.writeFileSync(join(gitdir, 'description'), 'vouch chain repository (mirror)\n');
      fs.writeFileSync(
        join(gitdir, 'config'),
        '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n' +
          SPARSE_CONFIG +
          SPARSE_INDEX_CONFIG +
          `[remote "origin"]\n\turl = ${url.replace(/[\\"\n]/g, '')}\n\tfetch = +refs/heads/main:${REMOTE_REF}\n` +
          '[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n',
      );
      // The transfer: stock git behind the bounding proxy (./git-clone.ts); the rest is vouch's layout, as before.
      const { gitFetchClone } = await import('./git-clone.ts'); // with undici: only when cloning
      const want = await gitFetchClone(abs, url, opts);
      if (readRef(gitdir, REMOTE_REF) !== want) throw new VouchError('io_error', `git did not store ${shown}'s main (${want}) at ${REMOTE_REF}`);
      fs.mkdirSync(join(gitdir, 'objects', 'pack'), { recursive: true }); // git removes it when it stored the objects loose
      this.s.objects.resetCache();
      await this.s.loadBranch(want);
      await this.repairer.syncSparse(false);
      await this.s.moveBranch(want, null);
      this.s.writeState();
      this.s.consistent = true;
      fs.rmSync(join(gitdir, CLONE_MARKER));
    } catch (e) {
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
    return this.s.serialize(async () => {
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
      if (await this.s.objects.has(want)) {
        if (want === hinted) return { commit: want, objects: 0, bytes: 0 };
        this.writeRemoteRef(want);
        return { commit: want, objects: 0, bytes: 0 };
      }
      const haves = [this.s.head];
      const tracked = readRef(this.s.gitdir, REMOTE_REF);
      if (tracked && tracked !== this.s.head && (await this.s.objects.has(tracked))) haves.push(tracked);
      const got = await fetchPack(url, opts, caps, want, haves, readShallow(this.s.gitdir), join(this.s.gitdir, 'objects', 'pack'), (oid) =>
        this.s.objects.read(oid).catch(() => null),
      );
      const pack = got.pack;
      try {
        await this.storePack(pack);
        await this.updateShallow(got.shallow, got.unshallow);
        this.writeRemoteRef(want);
      } catch (e) {
        throw e instanceof VouchError ? e : ioError('cannot store the fetched objects', e);
      }
      this.writer.schedulePack(); // a mirror stores small fetches as loose objects: packed as an authority's appends are
      return { commit: want, objects: pack.count, bytes: got.bytes };
    });
  }

  /** Forget the in-memory pack of the last fetch and any pack read since (the objects stay on disk). */
  dropFetched(): void {
    this.s.objects.fetched = null;
    this.s.objects.resetCache();
  }

  /**
   * Keep a received pack (its temporary file, indexed by fetchPack): named
   * as a pack + index (as git stores it), rewritten whole when it came thin,
   * or as loose objects when small (the file removed). It stays readable
   * (`objects.fetched`) until dropped. On failure the file is removed.
   */
  async storePack(pack: PackData): Promise<void> {
    const dir = join(this.s.gitdir, 'objects', 'pack');
    try {
      if (pack.unique < UNPACK_LIMIT) {
        // Commits last: a commit on disk means its trees and blobs are too.
        const order = [...pack.uniqueEntries()].sort((a, b) => Number(pack.typeOf(a) === 'commit') - Number(pack.typeOf(b) === 'commit'));
        for (const k of order) this.s.objects.write(pack.typeOf(k) as 'blob' | 'tree' | 'commit' | 'tag', pack.resolve(k));
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
    this.s.objects.fetched = pack;
  }

  /** Apply the remote's shallow lines to `.git/shallow` (a commit is shallow only if we lack one of its parents). */
  async updateShallow(add: string[], remove: string[]): Promise<void> {
    const before = readShallow(this.s.gitdir);
    const set = new Set(before);
    for (const oid of add) {
      if (set.has(oid)) continue;
      const parents = await this.s.objects.readCommitParents(oid);
      const have = await Promise.all(parents.map((p) => this.s.objects.has(p)));
      if (!have.every(Boolean)) set.add(oid);
    }
    for (const oid of remove) set.delete(oid);
    if (set.size === before.length && before.every((o) => set.has(o))) return;
    const file = join(this.s.gitdir, 'shallow');
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

  writeRemoteRef(oid: string): void {
    const file = join(this.s.gitdir, REMOTE_REF);
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
    const found = await this.s.locate(commit, `commit ${commit}`);
    const trees = new Map(found.dirs);
    const readPath = async (path: string): Promise<Buffer | null> => {
      const parts = path.split('/');
      let entries = trees.get('')!;
      for (let k = 0; k < parts.length; k++) {
        const e = entries.find((x) => x.name === parts[k]);
        if (!e) return null;
        if (k === parts.length - 1) return e.mode === TREE_MODE ? null : this.s.objects.readBlob(e.oid);
        if (e.mode !== TREE_MODE) return null;
        const dirPath = parts.slice(0, k + 1).join('/');
        let next = trees.get(dirPath);
        if (!next) {
          next = await this.s.objects.readTree(e.oid);
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
    const diff = await this.repairer.diffCommits(this.s.head, commit);
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
    return this.s.serialize(async () => {
      if (!OID_RE.test(commit)) throw new VouchError('bad_request', `${commit} is not a commit id`);
      if (!this.s.consistent) {
        if (!this.s.canRepair)
          throw new VouchError('io_error', `${this.s.dir}: working tree or index lags behind branch main; open with repair to fast-forward`);
        await this.repairer.repair(readState(this.s.gitdir));
      }
      const from = this.s.head;
      if (commit === from) return { from, to: commit, size: this.s.size };
      const target = await this.s.locate(commit, `commit ${commit}`);
      const changes = await this.repairer.diffCommits(from, commit);
      const lost = changes.filter((c) => c.path.startsWith('blocks/') && (c.oid === null || c.before !== null));
      if (lost.length > 0 || target.size < this.s.size) {
        throw new VouchError(
          'history_rewritten',
          `history_rewritten: commit ${commit} ${lost.length > 0 ? `changes or removes ${lost.length} existing file(s) under blocks/, first ${lost[0]!.path}` : `has ${target.size} blocks, the branch ${this.s.size}`}`,
          {
            index: null,
            evidence: { from, to: commit, paths: lost.slice(0, 10).map((c) => c.path), size: this.s.size, target_size: target.size },
          },
        );
      }
      await this.s.moveBranch(commit, from);
      this.s.head = commit;
      this.s.size = target.size;
      this.s.dirs = target.dirs;
      await this.s.pinHead();
      this.s.forgetLeaves();
      try {
        await this.repairer.syncSparse(false, false);
        this.s.writeState();
        this.s.consistent = true;
      } catch (e) {
        this.s.consistent = false;
        this.s.warnings.push(`commit ${commit} is on branch main, but the working tree or index is not updated yet: ${(e as Error).message}`);
      }
      return { from, to: commit, size: this.s.size };
    });
  }
}
