/**
 * chain-repo: the one module that owns git for the chain repository
 * (DESIGN section 2). It stores files; it never parses blocks.
 *
 * Owns: branch `main` (one commit per append), the git objects it writes,
 * the tree layout `blocks/<d[0:3]>/<d[3:6]>/<d>.json` + `checkpoint.json`,
 * the working-tree copies of those files, `.git/index` (through
 * ./git-index.ts, in split-index form) and `.git/vouch-state.json` (the
 * commit the working tree and index reflect).
 *
 * Trusts: callers to hand over block texts in order and to be the single
 * writer of the repository; git objects already on disk (they are only ever
 * written whole, through a temporary file and a rename); isomorphic-git to
 * read packed objects (a plain `git clone`).
 *
 * Must always hold:
 * - A block exists only once its commit is on the branch. An append writes
 *   objects, then moves `refs/heads/main` atomically (the commit point), then
 *   the working-tree files, then `.git/index`, then the state file; `open()`
 *   finishes or undoes whatever a crash interrupted (see `repairs`).
 * - An append costs the same at any chain size: it rewrites the four trees on
 *   the path of its blocks (leaf shard, middle shard, `blocks`, root), kept
 *   in memory between appends, and a bounded split index.
 * - No tree holds more than 1000 entries (sharding by the padded index).
 * - After every append and every `open()`, `git status --porcelain` is empty
 *   and `git fsck --strict` finds nothing wrong.
 * - Reads of blocks go to the working tree with plain `fs` (fast path); reads
 *   from git objects are for audits and repair.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { deflateSync, inflateSync } from 'node:zlib';
import git from 'isomorphic-git';
import { VouchError } from '../chain/errors.ts';
import {
  type IndexEntry,
  type IndexHint,
  SplitIndex,
  acquireLock,
  commitLock,
  comparePaths,
  entryFromStat,
  releaseLock,
  statMatches,
} from './git-index.ts';

export interface BlockFile {
  index: number;
  /** The exact file text (pretty JSON + trailing "\n"), written byte for byte (UTF-8). */
  content: string;
}

export interface CommitInfo {
  /** Full commit message (`block <i>: <intent> <uns> <semver>`, blank line, URLs); a final "\n" is added if missing. */
  message: string;
  authorName: string;
  authorEmail: string;
  /** Unix seconds; author and committer time, timezone +0000. */
  timestamp: number;
}

/** Something `open()` (or a later catch-up) changed to bring the working tree and index in line with the branch. */
export interface RepairAction {
  action: 'removed' | 'restored' | 'reindexed' | 'lock_removed';
  /** Repository-relative path ('.git/index' for index rebuilds). */
  path: string;
  reason: string;
}

const MAX_INDEX = 999_999_999;
const BRANCH_REF = 'refs/heads/main';
const TMP_SUFFIX = '.vouch-tmp';
const STATE_FILE = 'vouch-state.json';
const CHECKPOINT = 'checkpoint.json';
const OID_RE = /^[0-9a-f]{40}$/;
const BLOCK_PATH_RE = /^blocks\/(\d{3})\/(\d{3})\/(\d{9})\.json$/;
const SHARD_RE = /^\d{3}$/;

/** Repository path of block `index`: `blocks/000/000/000000042.json`. */
export function blockPath(index: number): string {
  if (!Number.isSafeInteger(index) || index < 0 || index > MAX_INDEX) {
    throw new VouchError('bad_request', `block index ${String(index)} is not an integer in 0..${MAX_INDEX}`);
  }
  const d = String(index).padStart(9, '0');
  return `blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`;
}

/** The block index a repository path names, or null when it is not a well-formed block path. */
export function parseBlockPath(path: string): number | null {
  const m = BLOCK_PATH_RE.exec(path);
  if (!m || m[3]!.slice(0, 3) !== m[1] || m[3]!.slice(3, 6) !== m[2]) return null;
  return Number(m[3]);
}

// ---------------------------------------------------------------------------
// Git objects

interface TreeEntry {
  mode: string; // '100644', '40000', ...
  name: string;
  oid: string;
}

const TREE_MODE = '40000';
const FILE_MODE = '100644';

function treeKey(e: TreeEntry): string {
  return e.mode === TREE_MODE ? `${e.name}/` : e.name;
}

function compareTreeEntries(a: TreeEntry, b: TreeEntry): number {
  return comparePaths(treeKey(a), treeKey(b));
}

/** Insert or replace `e` in a sorted tree entry list (appending at the end is the common, O(1) case). */
function setTreeEntry(list: TreeEntry[], e: TreeEntry): void {
  const last = list[list.length - 1];
  if (!last || compareTreeEntries(last, e) < 0) { list.push(e); return; }
  const at = list.findIndex((x) => x.name === e.name);
  if (at >= 0) { list[at] = e; return; }
  list.push(e);
  list.sort(compareTreeEntries);
}

function treeBody(entries: readonly TreeEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    parts.push(Buffer.from(`${e.mode} ${e.name}\0`, 'utf8'), Buffer.from(e.oid, 'hex'));
  }
  return Buffer.concat(parts);
}

function parseTree(body: Buffer): TreeEntry[] {
  const out: TreeEntry[] = [];
  let off = 0;
  while (off < body.length) {
    const sp = body.indexOf(0x20, off);
    const nul = body.indexOf(0, sp);
    if (sp < 0 || nul < 0 || nul + 21 > body.length) throw new Error('corrupt tree object');
    out.push({
      mode: body.toString('latin1', off, sp),
      name: body.toString('utf8', sp + 1, nul),
      oid: body.toString('hex', nul + 1, nul + 21),
    });
    off = nul + 21;
  }
  return out;
}

function objectId(type: string, body: Buffer): string {
  return createHash('sha1').update(`${type} ${body.length}\0`).update(body).digest('hex');
}

/** Loose-object writer and reader; packed objects are read through isomorphic-git. */
class ObjectStore {
  private knownDirs = new Set<string>();
  private cache = {};
  private seq = 0;

  constructor(readonly gitdir: string) {}

  private path(oid: string): string {
    return join(this.gitdir, 'objects', oid.slice(0, 2), oid.slice(2));
  }

  /** Write an object (whole: temporary file + rename) unless it already exists; returns its id. */
  write(type: 'blob' | 'tree' | 'commit', body: Buffer): string {
    const header = Buffer.from(`${type} ${body.length}\0`, 'latin1');
    const oid = createHash('sha1').update(header).update(body).digest('hex');
    const file = this.path(oid);
    if (fs.existsSync(file)) return oid;
    const dir = dirname(file);
    if (!this.knownDirs.has(dir)) {
      fs.mkdirSync(dir, { recursive: true });
      this.knownDirs.add(dir);
    }
    const tmp = join(dir, `tmp_obj_vouch_${process.pid}_${this.seq++}`);
    fs.writeFileSync(tmp, deflateSync(Buffer.concat([header, body]), { level: 1 }), { mode: 0o444 });
    fs.renameSync(tmp, file);
    return oid;
  }

  async read(oid: string): Promise<{ type: string; body: Buffer }> {
    let raw: Buffer | null = null;
    try {
      raw = fs.readFileSync(this.path(oid));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw ioError(`cannot read object ${oid}`, e);
    }
    if (raw) {
      try {
        const data = inflateSync(raw);
        const nul = data.indexOf(0);
        const [type] = data.toString('latin1', 0, nul).split(' ');
        return { type: type ?? '', body: data.subarray(nul + 1) };
      } catch (e) {
        throw ioError(`object ${oid} is corrupt`, e);
      }
    }
    try {
      const r = await git.readObject({ fs, gitdir: this.gitdir, oid, format: 'content', cache: this.cache });
      if (r.format !== 'content') throw new Error(`unexpected format ${r.format}`);
      return { type: r.type, body: Buffer.from(r.object) };
    } catch (e) {
      throw ioError(`cannot read object ${oid}`, e);
    }
  }

  async has(oid: string): Promise<boolean> {
    if (!OID_RE.test(oid)) return false;
    if (fs.existsSync(this.path(oid))) return true;
    try {
      await git.readObject({ fs, gitdir: this.gitdir, oid, format: 'deflated', cache: this.cache });
      return true;
    } catch {
      return false;
    }
  }

  async readTree(oid: string): Promise<TreeEntry[]> {
    const o = await this.read(oid);
    if (o.type !== 'tree') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a tree`);
    try {
      return parseTree(o.body);
    } catch (e) {
      throw ioError(`tree ${oid} is corrupt`, e);
    }
  }

  async readCommitTree(oid: string): Promise<string> {
    const o = await this.read(oid);
    if (o.type !== 'commit') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a commit`);
    const m = /^tree ([0-9a-f]{40})$/m.exec(o.body.toString('latin1', 0, Math.min(o.body.length, 100)));
    if (!m) throw new VouchError('io_error', `commit ${oid} has no tree`);
    return m[1]!;
  }

  async readBlob(oid: string): Promise<Buffer> {
    const o = await this.read(oid);
    if (o.type !== 'blob') throw new VouchError('io_error', `object ${oid} is a ${o.type}, expected a blob`);
    return o.body;
  }
}

function ioError(what: string, cause: unknown): VouchError {
  const msg = cause instanceof Error ? cause.message.split('\n')[0] : String(cause);
  return new VouchError('io_error', `${what}: ${msg}`, { cause });
}

// ---------------------------------------------------------------------------
// Refs, state, files

/** The commit `main` points at (loose ref first, then packed-refs), or null when it has none. Throws when HEAD is not on main. */
function readBranch(gitdir: string): string | null {
  let head: string;
  try {
    head = fs.readFileSync(join(gitdir, 'HEAD'), 'utf8').trim();
  } catch {
    throw new VouchError('not_a_chain', `${gitdir} has no HEAD: not a git repository`);
  }
  if (head !== `ref: ${BRANCH_REF}`) throw new VouchError('not_a_chain', `HEAD of ${gitdir} is not branch main (${head.slice(0, 60)})`);
  try {
    const oid = fs.readFileSync(join(gitdir, BRANCH_REF), 'utf8').trim();
    if (!OID_RE.test(oid)) throw new VouchError('io_error', `${BRANCH_REF} holds no object id`);
    return oid;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e instanceof VouchError ? e : ioError(`cannot read ${BRANCH_REF}`, e);
  }
  let packed = '';
  try {
    packed = fs.readFileSync(join(gitdir, 'packed-refs'), 'utf8');
  } catch {
    return null;
  }
  for (const line of packed.split('\n')) {
    const [oid, name] = line.split(' ');
    if (name === BRANCH_REF && oid && OID_RE.test(oid)) return oid;
  }
  return null;
}

interface State {
  version: 1;
  /** Commit the working tree and the index reflect. */
  commit: string;
  size: number;
  index: IndexHint | null;
}

function isDir(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}

function lstatOrNull(p: string): BigIntStats | null {
  try {
    return fs.lstatSync(p, { bigint: true });
  } catch {
    return null;
  }
}

function hashFile(p: string): string | null {
  try {
    return objectId('blob', fs.readFileSync(p));
  } catch {
    return null;
  }
}

/** Test hook: VOUCH_CRASH_POINT=after-objects|after-ref|after-files|after-index kills the process there. */
function crashPoint(name: 'after-objects' | 'after-ref' | 'after-files' | 'after-index'): void {
  if (process.env.VOUCH_CRASH_POINT === name) process.kill(process.pid, 'SIGKILL');
}

function checkCommitInfo(c: CommitInfo): void {
  if (!c || typeof c !== 'object') throw new VouchError('bad_request', 'commit info is missing');
  if (typeof c.message !== 'string' || c.message.includes('\0')) throw new VouchError('bad_request', 'commit message must be a string without NUL');
  for (const [k, v] of [['author name', c.authorName], ['author email', c.authorEmail]] as const) {
    if (typeof v !== 'string' || v.trim() === '' || /[<>\n\0]/.test(v)) {
      throw new VouchError('bad_request', `commit ${k} must be a non-empty string without <, >, newline or NUL`);
    }
  }
  if (!Number.isSafeInteger(c.timestamp) || c.timestamp < 0) throw new VouchError('bad_request', 'commit timestamp must be non-negative unix seconds');
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

function commitBody(tree: string, parent: string | null, c: CommitInfo): Buffer {
  const who = `${c.authorName} <${c.authorEmail}> ${c.timestamp} +0000`;
  const msg = c.message.endsWith('\n') ? c.message : `${c.message}\n`;
  return Buffer.from(`tree ${tree}\n${parent ? `parent ${parent}\n` : ''}author ${who}\ncommitter ${who}\n\n${msg}`, 'utf8');
}

// ---------------------------------------------------------------------------

export class ChainRepo {
  readonly dir: string;
  /** What `open()` and any later catch-up changed in the working tree and index, for callers to log. */
  readonly repairs: RepairAction[] = [];
  /** Problems after a commit point (the append succeeded, the working tree or index lags and is caught up next time). */
  readonly warnings: string[] = [];

  private readonly gitdir: string;
  private readonly objects: ObjectStore;
  private _head = '';
  private _size = 0;
  /** Trees on the path to the last block: '' (root), 'blocks', 'blocks/T', 'blocks/T/M'. */
  private dirs = new Map<string, TreeEntry[]>();
  private index: SplitIndex;
  private consistent = false;
  private canRepair = true;
  private knownDirs = new Set<string>();
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(dir: string, hint: IndexHint | null = null) {
    this.dir = dir;
    this.gitdir = join(dir, '.git');
    this.objects = new ObjectStore(this.gitdir);
    this.index = new SplitIndex(this.gitdir, hint);
  }

  /** Number of blocks on the branch (last block index + 1). */
  get size(): number {
    return this._size;
  }

  /** Commit id `main` points at. */
  get head(): string {
    return this._head;
  }

  /**
   * True when the working tree and `.git/index` reflect the branch head
   * (always after `open()` with repair and after a clean append). False after
   * `open({ repair: false })` of a repository an append was interrupted in:
   * the newest block files may then be missing from the working tree.
   */
  get inSync(): boolean {
    return this.consistent;
  }

  /** Diagnostics of the split index (tests, benches): shared indexes written by this instance, split-part size, shared index name. */
  indexStats(): { sharedWrites: number; splitSize: number; shared: string | null } {
    return { sharedWrites: this.index.sharedWrites, splitSize: this.index.splitSize, shared: this.index.baseName };
  }

  /**
   * Create a chain repository in `dir` (created if missing) holding `blocks`
   * (indexes 0, 1, ...) and `checkpoint`, as one commit. Refuses with
   * `chain_exists` if `dir` holds a git repository or anything else.
   */
  static async init(dir: string, blocks: BlockFile[], checkpoint: string, commit: CommitInfo): Promise<ChainRepo> {
    const abs = resolve(dir);
    let created = false;
    if (fs.existsSync(abs)) {
      if (!isDir(abs)) throw new VouchError('chain_exists', `${abs} exists and is not a directory`);
      if (fs.existsSync(join(abs, '.git'))) throw new VouchError('chain_exists', `${abs} already holds a git repository`);
      if (fs.readdirSync(abs).length > 0) throw new VouchError('chain_exists', `${abs} is not empty`);
    }
    checkBlocks(blocks, 0, checkpoint);
    checkCommitInfo(commit);
    try {
      if (!fs.existsSync(abs)) { fs.mkdirSync(abs, { recursive: true }); created = true; }
      const gitdir = join(abs, '.git');
      for (const d of ['objects/info', 'objects/pack', 'refs/heads', 'refs/tags']) fs.mkdirSync(join(gitdir, d), { recursive: true });
      fs.writeFileSync(join(gitdir, 'HEAD'), `ref: ${BRANCH_REF}\n`);
      fs.writeFileSync(join(gitdir, 'config'), '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n');
      fs.writeFileSync(join(gitdir, 'description'), 'vouch chain repository\n');
      const repo = new ChainRepo(abs);
      repo.dirs.set('', []);
      repo.consistent = true;
      await repo.commitBlocks(blocks, checkpoint, commit, null);
      return repo;
    } catch (e) {
      // Leave nothing half-made behind: the directory was empty (or absent) before.
      for (const p of ['.git', 'blocks', CHECKPOINT, CHECKPOINT + TMP_SUFFIX]) fs.rmSync(join(abs, p), { recursive: true, force: true });
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
    const head = readBranch(gitdir);
    if (!head) throw new VouchError('not_a_chain', `${abs}: branch main has no commit`);
    const state = readState(gitdir);
    const repo = new ChainRepo(abs, state?.index ?? null);
    await repo.loadBranch(head);
    repo.canRepair = opts.repair ?? true;
    if (repo.canRepair) await repo.repair(state);
    else repo.consistent = state?.commit === head && fs.existsSync(join(gitdir, 'index'));
    return repo;
  }

  /** Read the branch head: the trees on the path to its last well-formed block file, and the chain size. */
  private async loadBranch(head: string): Promise<void> {
    const rootOid = await this.objects.readCommitTree(head);
    const root = await this.objects.readTree(rootOid);
    const blocks = root.find((e) => e.name === 'blocks' && e.mode === TREE_MODE);
    if (!blocks) throw new VouchError('not_a_chain', `${this.dir}: no blocks/ directory on branch main`);
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
          this._head = head;
          this._size = index + 1;
          this.dirs = new Map([
            ['', root],
            ['blocks', blocksTree],
            [`blocks/${top.name}`, topTree],
            [`blocks/${top.name}/${mid.name}`, leaf],
          ]);
          return;
        }
      }
    }
    throw new VouchError('not_a_chain', `${this.dir}: no block file on branch main`);
  }

  private serialize<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * Append `blocks` (indexes size, size+1, ... in order) and the new
   * checkpoint text as one commit. Throws `bad_request` (nothing written)
   * for wrong indexes or input. Once the commit is on the branch the append
   * has happened: later trouble with the working tree or index is recorded in
   * `warnings` and caught up before the next append (or by `open()`).
   */
  append(blocks: BlockFile[], checkpoint: string, commit: CommitInfo): Promise<{ commit: string }> {
    return this.serialize(async () => {
      checkBlocks(blocks, this._size, checkpoint);
      checkCommitInfo(commit);
      if (!this.consistent) {
        if (!this.canRepair) {
          throw new VouchError('io_error', `${this.dir}: working tree or index lags behind branch main; open with repair to append`);
        }
        await this.repair(readState(this.gitdir));
      }
      return { commit: await this.commitBlocks(blocks, checkpoint, commit, this._head) };
    });
  }

  private async commitBlocks(blocks: BlockFile[], checkpoint: string, info: CommitInfo, parent: string | null): Promise<string> {
    // 1. Objects: blobs, the changed trees (bottom up), the commit.
    const bytes = blocks.map((b) => Buffer.from(b.content, 'utf8'));
    const paths = blocks.map((b) => blockPath(b.index));
    let oids: string[];
    let cpBytes: Buffer;
    let cpOid: string;
    const modified = new Map<string, TreeEntry[]>();
    let commitOid: string;
    try {
      oids = bytes.map((b) => this.objects.write('blob', b));
      cpBytes = Buffer.from(checkpoint, 'utf8');
      cpOid = this.objects.write('blob', cpBytes);
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
      // Bottom up, level by level: writing a level marks its parents modified.
      const depth = (d: string) => (d === '' ? 0 : d.split('/').length);
      for (let level = 3; level >= 1; level--) {
        for (const d of [...modified.keys()].filter((k) => depth(k) === level)) {
          const oid = this.objects.write('tree', treeBody(modified.get(d)!));
          const cut = d.lastIndexOf('/');
          setTreeEntry(await entriesOf(cut < 0 ? '' : d.slice(0, cut)), { mode: TREE_MODE, name: d.slice(cut + 1), oid });
        }
      }
      const rootOid = this.objects.write('tree', treeBody(modified.get('')!));
      commitOid = this.objects.write('commit', commitBody(rootOid, parent, info));
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

    // 3-5. Working tree, index, state: a failure here leaves them to catch up.
    try {
      const entries: IndexEntry[] = [];
      for (let k = 0; k < blocks.length; k++) {
        entries.push(entryFromStat(paths[k]!, oids[k]!, this.writeWorkFile(paths[k]!, bytes[k]!)));
      }
      const cpEntry = entryFromStat(CHECKPOINT, cpOid, this.writeWorkFile(CHECKPOINT, cpBytes));
      crashPoint('after-files');
      await this.index.update((idx) => {
        for (const e of entries) idx.addNew(e);
        idx.upsert(cpEntry);
      }, (p) => this.noteStaleLock(p));
      crashPoint('after-index');
      this.writeState();
      this.consistent = true;
    } catch (e) {
      this.consistent = false;
      this.warnings.push(`commit ${commitOid} is on branch main, but the working tree or index is not updated yet: ${(e as Error).message}`);
    }
    return commitOid;
  }

  private noteStaleLock(path: string): void {
    this.repairs.push({ action: 'lock_removed', path: path.slice(this.dir.length + 1), reason: 'stale lock left by a crashed process' });
  }

  /** Compare-and-swap `main` from `expected` to `oid` through `main.lock`. */
  private async moveBranch(oid: string, expected: string | null): Promise<void> {
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
    commitLock(fd, lock, ref, `${oid}\n`);
  }

  /** Write a working-tree file whole (temporary file + rename) and return its stat. */
  private writeWorkFile(rel: string, data: Buffer): BigIntStats {
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

  private writeState(): void {
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
  private async repair(state: State | null): Promise<void> {
    for (const p of [join(this.dir, CHECKPOINT + TMP_SUFFIX), join(this.gitdir, STATE_FILE + TMP_SUFFIX)]) this.removeIfExists(p, 'temporary file of an interrupted write');
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
    } else if (indexOk && state && await this.objects.has(state.commit)) {
      await this.applyChanges(await this.diffCommits(state.commit, this._head));
    } else {
      await this.fullSync(indexOk);
    }
    this.cleanTail();
    this.writeState();
    this.consistent = true;
  }

  private removeIfExists(abs: string, reason: string): boolean {
    try {
      fs.unlinkSync(abs);
    } catch {
      return false;
    }
    this.repairs.push({ action: 'removed', path: abs.slice(this.dir.length + 1), reason });
    return true;
  }

  /** File-level differences between two commits: path and new blob (null = gone). Only differing subtrees are read. */
  private async diffCommits(from: string, to: string): Promise<{ path: string; oid: string | null; mode: string }[]> {
    const out: { path: string; oid: string | null; mode: string }[] = [];
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
        if (x && !xt && !(y && !yt)) out.push({ path, oid: null, mode: x.mode });
        if (y && !yt) out.push({ path, oid: y.oid, mode: y.mode });
      }
    };
    const [ta, tb] = await Promise.all([this.objects.readCommitTree(from), this.objects.readCommitTree(to)]);
    await walk(await this.objects.readTree(ta), await this.objects.readTree(tb), '');
    return out;
  }

  /** Apply file changes between the state commit and the head to the working tree and the index. */
  private async applyChanges(changes: { path: string; oid: string | null; mode: string }[]): Promise<void> {
    const upserts: IndexEntry[] = [];
    const removes: string[] = [];
    const dirs = new Set<string>();
    for (const c of changes) {
      const abs = join(this.dir, c.path);
      dirs.add(dirname(abs));
      if (c.oid === null) {
        this.removeIfExists(abs, 'not on branch main');
        removes.push(c.path);
        continue;
      }
      if (c.mode === '120000' || c.mode === '160000') continue; // symlinks and submodules are not ours to write
      if (hashFile(abs) !== c.oid) {
        this.writeWorkFile(c.path, await this.objects.readBlob(c.oid));
        if (c.mode === '100755') fs.chmodSync(abs, 0o755);
        this.repairs.push({ action: 'restored', path: c.path, reason: 'on branch main but missing or different in the working tree' });
      }
      upserts.push(entryFromStat(c.path, c.oid, fs.lstatSync(abs, { bigint: true })));
    }
    for (const d of dirs) this.removeTemps(d);
    if (upserts.length === 0 && removes.length === 0) return;
    await this.index.update((idx) => {
      idx.preparePositions([...upserts.map((e) => e.path), ...removes]);
      for (const p of removes) idx.remove(p);
      for (const e of upserts) idx.upsert(e);
    }, (p) => this.noteStaleLock(p));
  }

  private removeTemps(absDir: string): void {
    let names: string[];
    try {
      names = fs.readdirSync(absDir);
    } catch {
      return;
    }
    for (const n of names) if (n.endsWith(TMP_SUFFIX)) this.removeIfExists(join(absDir, n), 'temporary file of an interrupted write');
  }

  /** Every file on the branch, by path. */
  private async walkBranch(): Promise<Map<string, { oid: string; mode: string }>> {
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
  private async fullSync(indexLoaded: boolean): Promise<void> {
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
      const abs = join(this.dir, path);
      const st = lstatOrNull(abs);
      if (st?.isFile() && e && e.oid === f.oid && statMatches(e, st)) {
        entries.push(e);
        continue;
      }
      changed = true;
      if (!(st?.isFile() && hashFile(abs) === f.oid)) {
        if (st?.isDirectory()) fs.rmSync(abs, { recursive: true, force: true });
        this.writeWorkFile(path, await this.objects.readBlob(f.oid));
        if (f.mode === '100755') fs.chmodSync(abs, 0o755);
        this.repairs.push({ action: 'restored', path, reason: 'on branch main but missing or different in the working tree' });
      }
      entries.push(entryFromStat(path, f.oid, fs.lstatSync(abs, { bigint: true })));
    }
    for (const path of current.keys()) if (!files.has(path)) changed = true;
    for (const f of this.listBlockFiles()) {
      if (files.has(f.path)) continue;
      if (f.index !== null) this.removeIfExists(join(this.dir, f.path), 'block file not on branch main');
      else if (f.path.endsWith(TMP_SUFFIX)) this.removeIfExists(join(this.dir, f.path), 'temporary file of an interrupted write');
    }
    if (!changed) return;
    await this.index.update((idx) => idx.replaceAll(entries), (p) => this.noteStaleLock(p), { reload: false });
    this.repairs.push({ action: 'reindexed', path: '.git/index', reason: 'rebuilt from branch main and the working tree' });
  }

  /** Remove block files (and temporary files) beyond the last block: they are not on the branch. */
  private cleanTail(): void {
    const last = blockPath(this._size - 1);
    const top = last.slice(7, 10);
    const mid = last.slice(11, 14);
    const blocksDir = join(this.dir, 'blocks');
    const list = (d: string): fs.Dirent[] => {
      try {
        return fs.readdirSync(d, { withFileTypes: true });
      } catch {
        return [];
      }
    };
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

  // -------------------------------------------------------------------------
  // Reads

  /** Every file under blocks/ in the working tree, sorted by path; index null when the path is not a well-formed block path. */
  listBlockFiles(): { index: number | null; path: string }[] {
    const out: { index: number | null; path: string }[] = [];
    const walk = (abs: string, rel: string): void => {
      let entries: fs.Dirent[];
      try {
        entries = fs.readdirSync(abs, { withFileTypes: true });
      } catch (e) {
        if (rel === 'blocks' && (e as NodeJS.ErrnoException).code === 'ENOENT') return;
        throw ioError(`cannot list ${rel}`, e);
      }
      for (const e of entries) {
        const r = `${rel}/${e.name}`;
        if (e.isDirectory()) walk(join(abs, e.name), r);
        else out.push({ index: parseBlockPath(r), path: r });
      }
    };
    walk(join(this.dir, 'blocks'), 'blocks');
    return out.sort((a, b) => comparePaths(a.path, b.path));
  }

  private checkRange(index: number): string {
    const p = blockPath(index);
    if (index >= this._size) throw new VouchError('not_found', `block ${index} is not on the chain (size ${this._size})`, { index });
    return p;
  }

  /** The working-tree text of block `index` (plain fs read). */
  readBlockFile(index: number): string {
    const p = this.checkRange(index);
    try {
      return fs.readFileSync(join(this.dir, p), 'utf8');
    } catch (e) {
      const lag = this.consistent ? '' : ' (the working tree lags behind branch main: open with repair)';
      throw ioError(`cannot read ${p}${lag}`, e);
    }
  }

  /** The working-tree checkpoint text, or null when there is none. */
  readCheckpoint(): string | null {
    try {
      return fs.readFileSync(join(this.dir, CHECKPOINT), 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw ioError(`cannot read ${CHECKPOINT}`, e);
    }
  }

  /** The text of block `index` from the branch's objects (audits, repair). */
  async readBlockFromGit(index: number): Promise<string> {
    const p = this.checkRange(index);
    const parts = p.split('/');
    let entries = this.dirs.get('')!;
    for (let k = 0; k < parts.length; k++) {
      const dirPath = parts.slice(0, k + 1).join('/');
      const e = entries.find((x) => x.name === parts[k]);
      if (!e) throw new VouchError('not_found', `${p} is not on branch main`, { index });
      if (k === parts.length - 1) return (await this.objects.readBlob(e.oid)).toString('utf8');
      entries = this.dirs.get(dirPath) ?? await this.objects.readTree(e.oid);
    }
    throw new VouchError('not_found', `${p} is not on branch main`, { index });
  }
}

function readState(gitdir: string): State | null {
  try {
    const s = JSON.parse(fs.readFileSync(join(gitdir, STATE_FILE), 'utf8')) as State;
    if (s && s.version === 1 && typeof s.commit === 'string' && OID_RE.test(s.commit)) return s;
  } catch { /* missing or unreadable: treated as no state */ }
  return null;
}
