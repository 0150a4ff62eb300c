/**
 * chain-repo: the one module that owns git for the chain repository
 * (DESIGN section 2). It stores files; it never parses blocks.
 *
 * Owns: branch `main` (one commit per append), the git objects it writes,
 * the tree layout `blocks/<d[0:3]>/<d[3:6]>/<d>.json` + `checkpoint.json`,
 * the working-tree copies of those files, `.git/index` (through
 * ./git-index.ts, in split-index form) and `.git/vouch-state.json` (the
 * commit the working tree and index reflect). For mirrors (DESIGN 4): the
 * git smart-HTTP fetch (protocol v0 over isomorphic-git's `http/node`, depth
 * 1), the packs it stores (indexed here, `.idx` version 2), `.git/shallow`,
 * `refs/remotes/origin/main`, the clone and the fast-forward.
 *
 * Trusts: callers to hand over block texts in order and to be the single
 * writer of the repository (an append, and the repair of `open()`, check
 * the chain lock of ./chain-lock.ts: they are refused while a running
 * authority gateway of another process holds it); git objects already on
 * disk (they are only ever written whole, through a temporary file and a rename); nothing a remote
 * sends (object ids are recomputed from the bytes, the pack checksum is
 * checked; the chain code verifies the blocks) and nothing about how it
 * sends it: bytes, pkt-lines, refs, objects, object sizes, delta depth,
 * bytes inflated and time are bounded by `FETCH_LIMITS`.
 *
 * Must always hold:
 * - A block exists only once its commit is on the branch. An append writes
 *   objects, then moves `refs/heads/main` atomically (the commit point), then
 *   the working-tree files, then `.git/index`, then the state file; `open()`
 *   finishes or undoes whatever a crash interrupted (see `repairs`). A
 *   fast-forward is the same: objects (fetched earlier), ref move, then the
 *   catch-up path of the repair.
 * - An append costs the same at any chain size: it rewrites the four trees on
 *   the path of its blocks (leaf shard, middle shard, `blocks`, root), kept
 *   in memory between appends, and a bounded split index.
 * - No tree holds more than 1000 entries (sharding by the padded index).
 * - After every append, clone, fast-forward and `open()`,
 *   `git status --porcelain` is empty and `git fsck --strict` finds nothing
 *   wrong.
 * - A fetch never touches the branch, the working tree or the index; a
 *   fast-forward never changes or removes a block file of the current head.
 *   A clone or fetch refused for what the remote sent (a bad pack, a bound
 *   of `FETCH_LIMITS`) leaves the repository as it was: a fetch stores
 *   objects only once the whole pack is indexed, a clone removes what it
 *   made.
 * - Reads of blocks go to the working tree (fast path), through the bounded
 *   reader of ./verify-worker-impl.ts: a regular file only (no symbolic
 *   link, directory, FIFO or device), at most 16 MiB, decoded strictly as
 *   UTF-8 (DESIGN 1.7 "Reading a chain"); what the branch commits
 *   (`committedFiles()`) is what a verifier checks them against. Reads from
 *   git objects are for audits, repair and sync, and read packs on disk
 *   object by object (a fetched pack stays in memory only until
 *   `dropFetched()`).
 * - Opening for writing removes what interrupted object writes left behind
 *   (`tmp_obj_*` of a full disk or a crash), except files a live writer may
 *   still be writing.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { crc32, deflateSync, inflateSync } from 'node:zlib';
import git from 'isomorphic-git';
import nodeHttp, { type GitHttpRequest, type GitHttpResponse, type HttpClient } from 'isomorphic-git/http/node';
import { VouchError } from '../chain/errors.ts';
import { LIMITS, digitsAt, readJson, utf8Text } from '../chain/block.ts';
import { bytesOf, readChainFile } from './verify-worker-impl.ts';
import {
  type IndexEntry,
  type IndexHint,
  SplitIndex,
  acquireLock,
  commitLock,
  comparePaths,
  fsyncDir,
  entryFromStat,
  releaseLock,
  statMatches,
} from './git-index.ts';
import { assertChainWritable } from './chain-lock.ts';

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

/** The chain files at one commit, read from git objects (`ChainRepo.snapshotAt`). */
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
 * objects (`ChainRepo.committedFiles`): the input a verifier checks the
 * working tree against.
 */
export interface CommittedFiles {
  commit: string;
  /** Number of block files (regular files at well-formed block paths). */
  count: number;
  /** Git blob id (hex) of block `index`'s file, or null when the branch has none. */
  oidOf(index: number): string | null;
  /** Git blob id of checkpoint.json; a description when it is not a regular file; null when there is none. */
  checkpoint: string | null;
  /** Everything else under blocks/: other names, and links, submodules or directories at block paths. */
  strays: { path: string; why: string }[];
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

const MAX_INDEX = 999_999_999;
const BRANCH_REF = 'refs/heads/main';
const TMP_SUFFIX = '.vouch-tmp';
const STATE_FILE = 'vouch-state.json';
const CHECKPOINT = 'checkpoint.json';
const OID_RE = /^[0-9a-f]{40}$/;
const SHARD_RE = /^\d{3}$/;

/** Repository path of block `index`: `blocks/000/000/000000042.json`. */
export function blockPath(index: number): string {
  if (!Number.isSafeInteger(index) || index < 0 || index > MAX_INDEX) {
    throw new VouchError('bad_request', `block index ${String(index)} is not an integer in 0..${MAX_INDEX}`);
  }
  const d = String(index).padStart(9, '0');
  return `blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`;
}

/** What a directory entry that is not a regular file is, for messages. */
function direntKind(e: fs.Dirent): string {
  return e.isSymbolicLink() ? 'a symbolic link' : e.isDirectory() ? 'a directory' : e.isFIFO() ? 'a FIFO'
    : e.isCharacterDevice() || e.isBlockDevice() ? 'a device' : e.isSocket() ? 'a socket' : 'of an unknown type';
}

/** A directory's entries, or null when it cannot be listed (missing, not a directory, no access). */
function direntsOf(dir: string): fs.Dirent[] | null {
  try {
    return fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return null;
  }
}

/** The block index a repository path names, or null when it is not a well-formed block path. */
export function parseBlockPath(path: string): number | null {
  // `blocks/DDD/DDD/DDDDDDDDD.json`, the shard directories repeating the first six digits.
  // Character by character: it runs once per block file on every listing.
  if (path.length !== 29 || !path.startsWith('blocks/') || path.charCodeAt(10) !== 47 || path.charCodeAt(14) !== 47 || !path.endsWith('.json')) return null;
  let n = 0;
  for (let i = 15; i < 24; i++) {
    const c = path.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return null;
    n = n * 10 + c;
  }
  for (let i = 0; i < 3; i++) {
    if (path.charCodeAt(7 + i) !== path.charCodeAt(15 + i) || path.charCodeAt(11 + i) !== path.charCodeAt(18 + i)) return null;
  }
  return n;
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

function isRegularMode(mode: string): boolean {
  return mode === FILE_MODE || mode === '100755';
}

function modeName(mode: string): string {
  return mode === TREE_MODE ? 'a directory' : mode === '120000' ? 'a symbolic link' : mode === '160000' ? 'a submodule' : `an entry of mode ${mode}`;
}

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

/**
 * Packfiles on disk, read one object at a time through their version-2
 * `.idx` (binary search, then a bounded read at the offset), so a read never
 * loads a whole pack into memory. Other index versions are left to
 * isomorphic-git.
 */
class DiskPacks {
  private packs: { name: string; idx: Buffer; n: number }[] | null = null;
  private cache = new Map<string, { type: string; body: Buffer }>();
  private cacheBytes = 0;

  constructor(private readonly dir: string) {}

  /** (Re)list the packs; a pack index is read once. */
  private scan(): void {
    const old = new Map((this.packs ?? []).map((p) => [p.name, p]));
    const list: { name: string; idx: Buffer; n: number }[] = [];
    let names: string[] = [];
    try {
      names = fs.readdirSync(this.dir);
    } catch { /* no pack directory */ }
    for (const file of names) {
      if (!file.endsWith('.idx') || !file.startsWith('pack-')) continue;
      const name = file.slice(0, -4);
      const known = old.get(name);
      if (known) {
        list.push(known);
        continue;
      }
      try {
        const idx = fs.readFileSync(join(this.dir, file));
        if (idx.length < 8 + 1024 + 40 || idx.readUInt32BE(0) !== 0xff744f63 || idx.readUInt32BE(4) !== 2) continue;
        list.push({ name, idx, n: idx.readUInt32BE(8 + 255 * 4) });
      } catch { /* unreadable: skipped */ }
    }
    this.packs = list;
  }

  private find(oid: string): { name: string; offset: number } | null {
    const key = Buffer.from(oid, 'hex');
    for (const p of this.packs ?? []) {
      const b = key[0]!;
      let lo = b === 0 ? 0 : p.idx.readUInt32BE(8 + (b - 1) * 4);
      let hi = p.idx.readUInt32BE(8 + b * 4);
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        const at = 8 + 1024 + mid * 20;
        const c = p.idx.compare(key, 0, 20, at, at + 20);
        if (c === 0) {
          const o = p.idx.readUInt32BE(8 + 1024 + p.n * 24 + mid * 4);
          const offset = o & 0x80000000 ? Number(p.idx.readBigUInt64BE(8 + 1024 + p.n * 28 + (o & 0x7fffffff) * 8)) : o;
          return { name: p.name, offset };
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
      }
    }
    return null;
  }

  private locate(oid: string): { name: string; offset: number } | null {
    if (this.packs === null) this.scan();
    const hit = this.find(oid);
    if (hit) return hit;
    this.scan(); // a pack written since (by a fetch, or by git)
    return this.find(oid);
  }

  has(oid: string): boolean {
    return this.locate(oid) !== null;
  }

  read(oid: string): { type: string; body: Buffer } | null {
    let at = this.locate(oid);
    if (!at) return null;
    let fd: number;
    try {
      fd = fs.openSync(join(this.dir, `${at.name}.pack`), 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      this.scan(); // git repacked meanwhile
      at = this.find(oid);
      if (!at) return null;
      fd = fs.openSync(join(this.dir, `${at.name}.pack`), 'r');
    }
    try {
      const end = fs.fstatSync(fd).size - 20;
      return this.readAt(fd, end, at.name, at.offset, 0);
    } finally {
      fs.closeSync(fd);
    }
  }

  private readAt(fd: number, end: number, name: string, offset: number, depth: number): { type: string; body: Buffer } {
    const key = `${name}:${offset}`;
    const hit = this.cache.get(key);
    if (hit) return hit;
    if (depth > 5000) throw new Error('delta chain too deep');
    const head = Buffer.alloc(64);
    const got = fs.readSync(fd, head, 0, 64, offset);
    let pos = 0;
    let c = head[pos++]!;
    const kind = (c >> 4) & 7;
    let size = c & 15;
    let shift = 4;
    while (c & 0x80) {
      c = head[pos++]!;
      size += (c & 0x7f) * 2 ** shift;
      shift += 7;
    }
    let base: { type: string; body: Buffer } | null = null;
    if (kind === OFS_DELTA) {
      c = head[pos++]!;
      let rel = c & 0x7f;
      while (c & 0x80) {
        c = head[pos++]!;
        rel = (rel + 1) * 128 + (c & 0x7f);
      }
      base = this.readAt(fd, end, name, offset - rel, depth + 1);
    } else if (kind === REF_DELTA) {
      const baseOid = head.toString('hex', pos, pos + 20);
      pos += 20;
      const b = this.find(baseOid);
      if (!b || b.name !== name) throw new Error(`delta base ${baseOid} is not in ${name}.pack`);
      base = this.readAt(fd, end, name, b.offset, depth + 1);
    } else if (kind < 1 || kind > 4) throw new Error(`object type ${kind} at ${offset} in ${name}.pack`);
    if (pos > got || size > MAX_OBJECT_BYTES) throw new Error(`bad object header at ${offset} in ${name}.pack`);
    const dataAt = offset + pos;
    const inflateFrom = (len: number): Buffer => {
      const buf = Buffer.allocUnsafe(Math.max(0, Math.min(len, end - dataAt)));
      fs.readSync(fd, buf, 0, buf.length, dataAt);
      return inflateSync(buf, { maxOutputLength: Math.max(1, size) });
    };
    let data: Buffer;
    try {
      data = inflateFrom(size + (size >> 10) + 64); // deflate never grows data by more than this
    } catch {
      data = inflateFrom(end - dataAt);
    }
    const out = base ? { type: base.type, body: applyDelta(data, base.body) } : { type: OBJ_TYPES[kind]!, body: data };
    if (out.body.length < 1 << 20) {
      if (this.cacheBytes + out.body.length > 16 << 20) this.resetCache(); // bounded; delta bases are usually near
      this.cache.set(key, out);
      this.cacheBytes += out.body.length;
    }
    return out;
  }

  resetCache(): void {
    this.cache = new Map();
    this.cacheBytes = 0;
  }
}

/** Loose-object writer and reader; packed objects are read through DiskPacks (isomorphic-git for old index versions). */
class ObjectStore {
  /** The pack of the last fetch, indexed in memory: read from first (cheap) until dropped. */
  fetched: PackData | null = null;
  private knownDirs = new Set<string>();
  /** isomorphic-git's cache: holds whole packfiles once read; reset after each sync. */
  private cache = {};
  /** The head commit and the trees on the path to its last block, so a sync's diff from the head never opens a big pack. */
  private pinned = new Map<string, { type: string; body: Buffer }>();
  private seq = 0;
  /** Directories that got new entries since the last `syncDirs()` (object fan-out dirs, and `objects/` for a new one). */
  private unsynced = new Set<string>();
  readonly disk: DiskPacks;

  constructor(readonly gitdir: string) {
    this.disk = new DiskPacks(join(gitdir, 'objects', 'pack'));
  }

  private path(oid: string): string {
    return join(this.gitdir, 'objects', oid.slice(0, 2), oid.slice(2));
  }

  /** Write an object (whole: temporary file + rename) unless it already exists; returns its id. */
  write(type: 'blob' | 'tree' | 'commit' | 'tag', body: Buffer): string {
    const header = Buffer.from(`${type} ${body.length}\0`, 'latin1');
    const oid = createHash('sha1').update(header).update(body).digest('hex');
    const file = this.path(oid);
    if (fs.existsSync(file)) return oid;
    const dir = dirname(file);
    if (!this.knownDirs.has(dir)) {
      if (!fs.existsSync(dir)) {
        fs.mkdirSync(dir, { recursive: true });
        this.unsynced.add(dirname(dir)); // the new fan-out directory's own entry
      }
      this.knownDirs.add(dir);
    }
    const tmp = join(dir, `tmp_obj_vouch_${process.pid}_${this.seq++}`);
    // Durable before it is named: the file's bytes reach the disk before the rename that makes
    // it the object, so a power loss never leaves an object file that comes back empty.
    writeDurably(tmp, deflateSync(Buffer.concat([header, body]), { level: 1 }), 0o444);
    fs.renameSync(tmp, file);
    this.unsynced.add(dir);
    return oid;
  }

  /**
   * fsyncs every directory an object was added to since the last call, so
   * the objects' names survive a power loss; called once per commit, before
   * the branch moves (the cost is per commit, not per object or submit).
   */
  syncDirs(): void {
    for (const dir of this.unsynced) fsyncDir(dir);
    this.unsynced.clear();
  }

  async read(oid: string): Promise<{ type: string; body: Buffer }> {
    const f = this.pinned.get(oid) ?? this.fetched?.get(oid);
    if (f) return f;
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
      const d = this.disk.read(oid);
      if (d) return d;
    } catch (e) {
      throw ioError(`cannot read object ${oid} from a pack`, e);
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
    // Packs with a pre-2008 (version 1) index are not consulted here: at worst an object is fetched again.
    return this.pinned.has(oid) || this.fetched?.has(oid) === true || fs.existsSync(this.path(oid)) || this.disk.has(oid);
  }

  /** Keep exactly these objects at hand (replacing the previous set). */
  pin(objects: { type: string; body: Buffer }[]): void {
    this.pinned = new Map(objects.map((o) => [objectId(o.type, o.body), o]));
  }

  /** Let go of the packfiles isomorphic-git has read into memory. */
  resetCache(): void {
    this.cache = {};
    this.disk.resetCache();
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

  async readCommitParents(oid: string): Promise<string[]> {
    const o = await this.read(oid);
    if (o.type !== 'commit') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a commit`);
    const head = o.body.toString('latin1', 0, Math.max(0, o.body.indexOf('\n\n')));
    return [...head.matchAll(/^parent ([0-9a-f]{40})$/gm)].map((m) => m[1]!);
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
// Fetching over git smart HTTP (protocol v0, stateless RPC) and packfiles.
//
// The transport is isomorphic-git's `http/node` client; the upload-pack
// conversation, the pack indexer and the checkout are ours: one pass over
// the pack with node's zlib and sha1 (isomorphic-git's JS indexer plus a
// per-object checkout took ~45 s on a 50,000-block chain here; this, ~6 s).
// Nothing fetched is trusted: every object id is recomputed from its bytes,
// the pack trailer is checked, and the chain code verifies the blocks.

/** How fetches reach the remote. */
export interface FetchOptions {
  /** isomorphic-git style HTTP client (default: `isomorphic-git/http/node`). */
  http?: HttpClient;
  /** Cancels the network part (discovery, download). */
  signal?: AbortSignal;
  /** Bound on each HTTP exchange, headers and body (default 120 s; the ref advertisement: at most 20 s, FETCH_LIMITS). */
  timeoutMs?: number;
  /** Longest wait for the next byte of an answer, headers included (default 30 s; git servers send a keep-alive every 5 s). */
  stallMs?: number;
  /** Extra request headers (e.g. authorization); never logged. */
  headers?: Record<string, string>;
  /** Largest upload-pack answer accepted, the pack and its framing (default 64 MiB, FETCH_LIMITS.packBytes). */
  maxBytes?: number;
  /** Clone only: files written so far while checking out (for a progress bar). */
  onProgress?: (done: number, total: number) => void;
}

/** What a fetch brought in. */
export interface FetchResult {
  /** The remote's `refs/heads/main`, now in the local object store and at `refs/remotes/origin/main`. */
  commit: string;
  /** Objects received (0 when the commit was already here). */
  objects: number;
  /** Pack bytes received. */
  bytes: number;
}

const OBJ_TYPES = ['', 'commit', 'tree', 'blob', 'tag'] as const;
const OFS_DELTA = 6;
const REF_DELTA = 7;
const REMOTE_REF = 'refs/remotes/origin/main';
const CLONE_MARKER = 'vouch-clone-incomplete';
/** Packs with fewer objects are stored as loose objects, like git's transfer.unpackLimit. */
const UNPACK_LIMIT = 100;
const AGENT = 'vouch/0.1';
/**
 * What a remote may send in one clone or fetch, so that a hostile or broken
 * git server costs bounded memory, CPU and time (README "Limits",
 * SECURITY.md). A chain's pack takes ~420 bytes per block (50,000 blocks:
 * 20 MiB), so an honest remote stays inside them up to ~150,000 blocks in
 * one clone or fetch; a bigger chain is seeded with a plain `git clone` and
 * then fetched incrementally. Past any of them the clone or fetch fails with
 * `io_error`, having written nothing. A fetch holds at most about twice
 * `packBytes` (the pack, and what the sockets delivered until it is
 * collected), plus ~250 bytes per object.
 */
export const FETCH_LIMITS = Object.freeze({
  /** Largest pkt-line, its 4-byte length included (git's LARGE_PACKET_MAX). */
  pktLineBytes: 65520,
  /** The ref advertisement (`info/refs`): most bytes, most pkt-lines (refs), longest it may take. */
  advertisementBytes: 16 << 20,
  refs: 100_000,
  advertisementMs: 20_000,
  /** One upload-pack answer: most bytes (FetchOptions.maxBytes), pkt-lines, `shallow`/`unshallow` lines. */
  packBytes: 64 << 20,
  resultPktLines: 1_000_000,
  shallowLines: 1000,
  /** Delta bases a pack may name that are neither in it nor here (an honest thin pack: none). */
  missingBases: 1000,
  /** Most objects in a pack; the largest object, inflated (a block file is at most 16 MiB, a tree ~41 KiB). */
  objects: 200_000,
  objectBytes: 32 << 20,
  /** Deepest delta chain (git's own maximum). */
  deltaDepth: 4095,
  /** Bytes a pack may make the reader inflate or rebuild from deltas: 1 GiB plus 16 per pack byte (an honest pack needs ~5). */
  resolveBase: 1 << 30,
  resolvePerPackByte: 16,
  /** Each HTTP exchange in all (FetchOptions.timeoutMs), and the longest silence (FetchOptions.stallMs). */
  exchangeMs: 120_000,
  stallMs: 30_000,
});
/** Largest object accepted from a remote (a block file is a few KiB). */
const MAX_OBJECT_BYTES = FETCH_LIMITS.objectBytes;
/** What a cached object costs beyond its bytes (map entry, buffer object): a pack of empty objects fills the cache too. */
const CACHE_ENTRY_COST = 256;

/**
 * zlib options for an object of `size` bytes: never more output, and an
 * output buffer of its size (zlib's default 16 KiB chunk would stay behind
 * every small object kept in a cache: 16 KiB for a 1.5 KiB block).
 */
function inflateBounds(size: number): { maxOutputLength: number; chunkSize: number } {
  return { maxOutputLength: Math.max(1, size), chunkSize: Math.max(64, size) };
}

interface PackEntry {
  offset: number;
  /** Raw type: 1-4, OFS_DELTA or REF_DELTA. */
  kind: number;
  /** Resolved object type. */
  type: string;
  /** Where the zlib stream starts. */
  dataAt: number;
  size: number;
  baseOffset: number;
  oid: string;
  crc: number;
  /** Deltas between this object and a whole one (0: whole). */
  depth: number;
}

function applyDelta(delta: Buffer, base: Buffer): Buffer {
  let pos = 0;
  const varint = (): number => {
    let v = 0;
    let shift = 0;
    let c: number;
    do {
      if (pos >= delta.length) throw new Error('truncated delta header');
      c = delta[pos++]!;
      v += (c & 0x7f) * 2 ** shift;
      shift += 7;
    } while (c & 0x80);
    return v;
  };
  const srcSize = varint();
  if (srcSize !== base.length) throw new Error(`delta expects a base of ${srcSize} bytes, got ${base.length}`);
  const dstSize = varint();
  if (dstSize > MAX_OBJECT_BYTES) throw new Error(`delta result of ${dstSize} bytes is too large`);
  const out = Buffer.allocUnsafe(dstSize);
  let o = 0;
  while (pos < delta.length) {
    const op = delta[pos++]!;
    if (op & 0x80) {
      let off = 0;
      let len = 0;
      if (op & 0x01) off += delta[pos++]!;
      if (op & 0x02) off += delta[pos++]! * 0x100;
      if (op & 0x04) off += delta[pos++]! * 0x10000;
      if (op & 0x08) off += delta[pos++]! * 0x1000000;
      if (op & 0x10) len += delta[pos++]!;
      if (op & 0x20) len += delta[pos++]! * 0x100;
      if (op & 0x40) len += delta[pos++]! * 0x10000;
      if (len === 0) len = 0x10000;
      if (off + len > base.length || o + len > out.length) throw new Error('delta copy out of range');
      base.copy(out, o, off, off + len);
      o += len;
    } else if (op > 0) {
      if (pos + op > delta.length || o + op > out.length) throw new Error('delta insert out of range');
      delta.copy(out, o, pos, pos + op);
      pos += op;
      o += op;
    } else throw new Error('delta opcode 0');
  }
  if (o !== out.length) throw new Error('delta result has the wrong size');
  return out;
}

/**
 * A received packfile, indexed in one pass: every object's id, type and
 * offset, with a byte-bounded cache of resolved objects (delta bases, and
 * the checkout right after). Bounded (FETCH_LIMITS): objects, object size,
 * delta depth, and the bytes it may ever inflate or rebuild from deltas, so
 * a delta chain that would be rebuilt again and again (objects too big for
 * the cache) fails instead of running for hours.
 */
class PackData {
  readonly entries: PackEntry[] = [];
  private readonly byOid = new Map<string, PackEntry>();
  private readonly byOffset = new Map<number, PackEntry>();
  private cache = new Map<number, Buffer>();
  private cacheBytes = 0;
  /** Cached offsets in insertion order (first in, first out); `fifoHead` is the oldest. */
  private fifo: number[] = [];
  private fifoHead = 0;
  /** Delta bases found outside the pack (a thin pack): such a pack cannot be stored as it is. */
  private readonly externals = new Map<string, { type: string; body: Buffer }>();

  /** Bytes inflated or rebuilt from deltas so far, and the most allowed. */
  private work = 0;
  private readonly budget: number;

  private constructor(readonly pack: Buffer, private readonly cacheLimit: number) {
    this.budget = FETCH_LIMITS.resolveBase + FETCH_LIMITS.resolvePerPackByte * pack.length;
  }

  private spend(bytes: number): void {
    this.work += bytes;
    if (this.work > this.budget) {
      throw new VouchError('io_error', `the remote sent a bad pack: it needs more than ${this.budget} bytes of objects to resolve (a delta bomb?)`);
    }
  }

  get thin(): boolean {
    return this.externals.size > 0;
  }

  get checksum(): string {
    return this.pack.toString('hex', this.pack.length - 20);
  }

  has(oid: string): boolean {
    return this.byOid.has(oid);
  }

  offsetOf(oid: string): number | null {
    return this.byOid.get(oid)?.offset ?? null;
  }

  get(oid: string): { type: string; body: Buffer } | null {
    const e = this.byOid.get(oid);
    return e ? { type: e.type, body: this.resolve(e) } : null;
  }

  /**
   * Parse and index `pack`. `external` resolves REF_DELTA bases that are not
   * in the pack (objects we already have).
   */
  static async index(pack: Buffer, external: (oid: string) => Promise<{ type: string; body: Buffer } | null>, cacheLimit = 32 << 20): Promise<PackData> {
    const bad = (why: string): never => { throw new VouchError('io_error', `the remote sent a bad pack: ${why}`); };
    if (pack.length < 32 || pack.toString('latin1', 0, 4) !== 'PACK') bad('no PACK header');
    const version = pack.readUInt32BE(4);
    if (version !== 2 && version !== 3) bad(`version ${version}`);
    const count = pack.readUInt32BE(8);
    if (count > FETCH_LIMITS.objects) bad(`the pack declares ${count} objects, more than ${FETCH_LIMITS.objects}`);
    const end = pack.length - 20;
    if (createHash('sha1').update(pack.subarray(0, end)).digest('hex') !== pack.toString('hex', end)) bad('checksum mismatch');
    const p = new PackData(pack, cacheLimit);
    const pendingRef: { e: PackEntry; base: string; delta: Buffer }[] = [];
    /** External bases looked up and not found (each asked once). */
    const missing = new Set<string>();
    let pos = 12;
    for (let k = 0; k < count; k++) {
      if (pos >= end) bad('truncated');
      const offset = pos;
      let c = pack[pos++]!;
      const kind = (c >> 4) & 7;
      let size = c & 15;
      let shift = 4;
      while (c & 0x80) {
        if (shift > 53) bad(`object at ${offset} has an overlong size`);
        c = pack[pos++]!;
        size += (c & 0x7f) * 2 ** shift;
        shift += 7;
      }
      let baseOffset = -1;
      let baseOid = '';
      if (kind === OFS_DELTA) {
        c = pack[pos++]!;
        let rel = c & 0x7f;
        while (c & 0x80) {
          if (rel > end) bad(`object at ${offset} has an overlong base offset`);
          c = pack[pos++]!;
          rel = (rel + 1) * 128 + (c & 0x7f);
        }
        baseOffset = offset - rel;
        if (baseOffset < 12 || !p.byOffset.has(baseOffset)) bad(`object at ${offset} names no earlier object as its base`);
      } else if (kind === REF_DELTA) {
        baseOid = pack.toString('hex', pos, pos + 20);
        pos += 20;
      } else if (kind < 1 || kind > 4) bad(`object type ${kind} at ${offset}`);
      const dataAt = pos;
      if (size > MAX_OBJECT_BYTES) bad(`object at ${offset} has ${size} bytes, more than ${MAX_OBJECT_BYTES}`);
      let data: Buffer;
      try {
        const r = inflateSync(pack.subarray(pos, end), { info: true, ...inflateBounds(size) }) as unknown as { buffer: Buffer; engine: { bytesWritten: number } };
        data = r.buffer;
        pos += r.engine.bytesWritten;
      } catch (e) {
        return bad(`object at ${offset} does not inflate (${(e as Error).message})`);
      }
      if (data.length !== size) bad(`object at ${offset} has ${data.length} bytes, its header says ${size}`);
      p.spend(size);
      const e: PackEntry = { offset, kind, type: '', dataAt, size, baseOffset, oid: '', crc: crc32(pack.subarray(offset, pos)), depth: 0 };
      p.entries.push(e);
      p.byOffset.set(offset, e);
      let body: Buffer | null = null;
      try {
        if (kind <= 4) {
          e.type = OBJ_TYPES[kind]!;
          body = data;
        } else if (kind === OFS_DELTA) {
          const base = p.byOffset.get(baseOffset)!;
          e.type = base.type;
          e.depth = p.deeper(base);
          body = p.rebuild(data, p.resolve(base));
        } else {
          const inPack = p.byOid.get(baseOid);
          let base = inPack ? { type: inPack.type, body: p.resolve(inPack) } : p.externals.get(baseOid) ?? null;
          if (!base && !missing.has(baseOid)) {
            if (missing.size >= FETCH_LIMITS.missingBases) bad(`more than ${FETCH_LIMITS.missingBases} delta bases are neither in the pack nor here`);
            base = await external(baseOid);
            if (base) p.externals.set(baseOid, base);
            else missing.add(baseOid);
          }
          if (base) {
            e.type = base.type;
            e.depth = inPack ? p.deeper(inPack) : 1;
            body = p.rebuild(data, base.body);
          } else pendingRef.push({ e, base: baseOid, delta: data });
        }
      } catch (err) {
        if (err instanceof VouchError) throw err;
        bad(`object at ${offset}: ${(err as Error).message}`);
      }
      if (body) p.settle(e, body);
    }
    if (pos !== end) bad('trailing bytes after the last object');
    // REF_DELTA objects whose base came later in the pack: each resolved once its base is (linear, whatever the order).
    const waiting = new Map<string, typeof pendingRef>();
    for (const r of pendingRef) {
      const list = waiting.get(r.base);
      if (list) list.push(r);
      else waiting.set(r.base, [r]);
    }
    const ready = [...waiting.keys()].filter((oid) => p.byOid.has(oid));
    while (ready.length > 0) {
      const oid = ready.pop()!;
      const list = waiting.get(oid);
      if (!list) continue;
      waiting.delete(oid);
      const base = p.byOid.get(oid)!;
      for (const r of list) {
        r.e.type = base.type;
        r.e.depth = p.deeper(base);
        try {
          p.settle(r.e, p.rebuild(r.delta, p.resolve(base)));
        } catch (err) {
          if (err instanceof VouchError) throw err;
          bad(`object at ${r.e.offset}: ${(err as Error).message}`);
        }
        if (waiting.has(r.e.oid)) ready.push(r.e.oid);
      }
    }
    for (const [oid] of waiting) bad(`delta base ${oid} is missing`);
    return p;
  }

  /** Depth of a delta on `base`; refuses chains deeper than git makes them. */
  private deeper(base: PackEntry): number {
    if (base.depth >= FETCH_LIMITS.deltaDepth) {
      throw new VouchError('io_error', `the remote sent a bad pack: a delta chain deeper than ${FETCH_LIMITS.deltaDepth}`);
    }
    return base.depth + 1;
  }

  /** A delta applied to its base, counted against the pack's budget. */
  private rebuild(delta: Buffer, base: Buffer): Buffer {
    const out = applyDelta(delta, base);
    this.spend(out.length);
    return out;
  }

  private settle(e: PackEntry, body: Buffer): void {
    e.oid = objectId(e.type, body);
    if (!this.byOid.has(e.oid)) this.byOid.set(e.oid, e);
    this.remember(e.offset, body);
  }

  private remember(offset: number, body: Buffer): void {
    if (body.length > this.cacheLimit / 4 || this.cache.has(offset)) return;
    this.cache.set(offset, body);
    this.fifo.push(offset);
    this.cacheBytes += body.length + CACHE_ENTRY_COST;
    while (this.cacheBytes > this.cacheLimit) {
      const k = this.fifo[this.fifoHead++]!;
      this.cacheBytes -= this.cache.get(k)!.length + CACHE_ENTRY_COST;
      this.cache.delete(k);
    }
    if (this.fifoHead > 4096 && this.fifoHead * 2 > this.fifo.length) {
      this.fifo = this.fifo.slice(this.fifoHead);
      this.fifoHead = 0;
    }
  }

  /** The object's content (inflating and applying deltas again if it left the cache). */
  resolve(e: PackEntry): Buffer {
    const hit = this.cache.get(e.offset);
    if (hit) return hit;
    this.spend(e.size);
    const data = inflateSync(this.pack.subarray(e.dataAt, this.pack.length - 20), inflateBounds(e.size));
    let body: Buffer;
    if (e.kind <= 4) body = data;
    else if (e.kind === OFS_DELTA) body = this.rebuild(data, this.resolve(this.byOffset.get(e.baseOffset)!));
    else {
      const baseOid = this.pack.toString('hex', e.dataAt - 20, e.dataAt);
      const base = this.byOid.get(baseOid);
      const ext = base ? null : this.externals.get(baseOid);
      if (!base && !ext) throw new VouchError('io_error', `delta base ${baseOid} is not in the pack`);
      body = this.rebuild(data, base ? this.resolve(base) : ext!.body);
    }
    this.remember(e.offset, body);
    return body;
  }

  /** The same objects as a self-contained pack (every object whole), for storing what came as a thin pack. */
  async selfContained(): Promise<PackData> {
    const unique = this.entries.filter((e) => this.byOid.get(e.oid) === e);
    const parts: Buffer[] = [Buffer.from('PACK\0\0\0\x02\0\0\0\0', 'latin1')];
    parts[0]!.writeUInt32BE(unique.length, 8);
    for (const e of unique) {
      const body = this.resolve(e);
      const head: number[] = [];
      let size = body.length;
      let c = (OBJ_TYPES.indexOf(e.type as 'blob') << 4) | (size & 15);
      size = Math.floor(size / 16);
      while (size > 0) {
        head.push(c | 0x80);
        c = size & 0x7f;
        size = Math.floor(size / 128);
      }
      head.push(c);
      parts.push(Buffer.from(head), deflateSync(body, { level: 1 }));
    }
    const body = Buffer.concat(parts);
    return PackData.index(Buffer.concat([body, createHash('sha1').update(body).digest()]), async () => null, this.cacheLimit);
  }

  /** Pack index file, version 2 (as `git index-pack` writes it). */
  idxFile(): Buffer {
    const sorted = this.entries.filter((e) => this.byOid.get(e.oid) === e).sort((a, b) => (a.oid < b.oid ? -1 : a.oid > b.oid ? 1 : 0));
    const n = sorted.length;
    const big = sorted.filter((e) => e.offset >= 0x80000000);
    const buf = Buffer.alloc(8 + 1024 + n * 28 + big.length * 8 + 40);
    buf.write('ff744f63', 0, 'hex');
    buf.writeUInt32BE(2, 4);
    const fan = new Array<number>(256).fill(0);
    for (const e of sorted) fan[parseInt(e.oid.slice(0, 2), 16)]!++;
    let acc = 0;
    for (let i = 0; i < 256; i++) {
      acc += fan[i]!;
      buf.writeUInt32BE(acc, 8 + i * 4);
    }
    let o = 8 + 1024;
    for (const e of sorted) { buf.write(e.oid, o, 'hex'); o += 20; }
    for (const e of sorted) { buf.writeUInt32BE(e.crc >>> 0, o); o += 4; }
    let bigIndex = 0;
    for (const e of sorted) {
      buf.writeUInt32BE(e.offset >= 0x80000000 ? (0x80000000 | bigIndex++) >>> 0 : e.offset, o);
      o += 4;
    }
    for (const e of big) { buf.writeBigUInt64BE(BigInt(e.offset), o); o += 8; }
    this.pack.copy(buf, o, this.pack.length - 20);
    o += 20;
    createHash('sha1').update(buf.subarray(0, o)).digest().copy(buf, o);
    return buf;
  }
}

// pkt-line (gitprotocol-common)

function pktLine(s: string): Buffer {
  const body = Buffer.from(s, 'utf8');
  return Buffer.concat([Buffer.from((body.length + 4).toString(16).padStart(4, '0'), 'latin1'), body]);
}

const FLUSH = Buffer.from('0000', 'latin1');

function gitUrl(base: string, rest: string): string {
  return `${base.replace(/\/+$/, '')}/${rest}`;
}

/** Text from the remote for an error message: one line, at most 200 characters. */
function remoteText(text: string): string {
  const t = text.replace(/[\x00-\x1f\x7f]+/g, ' ').trim();
  return t.length > 200 ? `${t.slice(0, 200)}...` : t;
}

function abortError(signal: AbortSignal, shown: string, timeoutMs: number): VouchError {
  const r = signal.reason as unknown;
  if (r instanceof Error && r.name === 'StallError') return new VouchError('io_error', r.message, { cause: r });
  const timeout = r instanceof Error && r.name === 'TimeoutError';
  return new VouchError('io_error', timeout ? `${shown} did not answer in time (${timeoutMs / 1000} s)` : 'fetch cancelled', { cause: r });
}

/**
 * One HTTP exchange with the remote, bounded in time (`timeoutMs` for
 * headers and body together, `opts.stallMs` between two chunks), in bytes
 * (`maxBytes`), and cancellable; the body goes to `sink` chunk by chunk.
 */
async function httpExchange(
  opts: FetchOptions, bounds: { timeoutMs: number; maxBytes: number }, url: string, method: 'GET' | 'POST', headers: Record<string, string>, body: Buffer | null, expectType: string,
  sink: (chunk: Buffer) => void,
): Promise<void> {
  const shown = url.replace(/\/\/[^@/]*@/, '//');
  const { timeoutMs, maxBytes: limit } = bounds;
  const stallMs = opts.stallMs ?? FETCH_LIMITS.stallMs;
  const stall = new AbortController();
  // Only a silence shorter than the whole exchange's bound needs a timer of its own.
  const stallTimer = setTimeout(() => {
    stall.abort(Object.assign(new Error(`${shown} sent nothing for ${stallMs / 1000} s`), { name: 'StallError' }));
  }, stallMs < timeoutMs ? stallMs : 2 ** 31 - 1);
  const signal = AbortSignal.any([AbortSignal.timeout(timeoutMs), stall.signal, ...(opts.signal ? [opts.signal] : [])]);
  const client = opts.http ?? nodeHttp;
  let onAbort = (): void => {};
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(abortError(signal, shown, timeoutMs));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  aborted.catch(() => {});
  try {
    if (signal.aborted) throw abortError(signal, shown, timeoutMs);
    const req: GitHttpRequest = { url, method, headers: { 'user-agent': `git/${AGENT}`, ...opts.headers, ...headers }, signal } as GitHttpRequest;
    if (body) (req as unknown as { body: Buffer[] }).body = [body];
    let res: GitHttpResponse;
    try {
      res = await Promise.race([client.request(req), aborted]);
    } catch (e) {
      if (e instanceof VouchError) throw e;
      if (signal.aborted) throw abortError(signal, shown, timeoutMs);
      throw new VouchError('io_error', `cannot reach ${shown}: ${(e as Error).message}`, { cause: e });
    }
    const iter = res.body ? (res.body as AsyncIterableIterator<Uint8Array>)[Symbol.asyncIterator]() : null;
    try {
      if (res.statusCode !== 200) {
        throw new VouchError('io_error', `${shown} answered HTTP ${res.statusCode}${res.statusMessage ? ` ${res.statusMessage}` : ''}`);
      }
      const type = Object.entries(res.headers ?? {}).find(([k]) => k.toLowerCase() === 'content-type')?.[1] ?? '';
      if (!String(type).startsWith(expectType)) {
        throw new VouchError('io_error', `${shown} is not a git smart-HTTP server (content-type ${JSON.stringify(type)})`);
      }
      let total = 0;
      while (iter) {
        const r = await Promise.race([iter.next(), aborted]);
        stallTimer.refresh();
        if (r.value) {
          total += r.value.byteLength;
          if (total > limit) throw new VouchError('io_error', `${shown} sent more than ${limit} bytes`);
          sink(Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength));
        }
        if (r.done) break;
      }
    } catch (e) {
      try {
        await iter?.return?.();
      } catch { /* closing anyway */ }
      if (e instanceof VouchError) throw e;
      if (signal.aborted) throw abortError(signal, shown, timeoutMs);
      throw new VouchError('io_error', `the connection to ${shown} failed: ${(e as Error).message}`, { cause: e });
    }
  } finally {
    clearTimeout(stallTimer);
    signal.removeEventListener('abort', onAbort);
  }
}

/** Bytes received in pieces, copied into 1 MiB slabs (so a flood of tiny pieces holds no more than its bytes). */
class ByteSink {
  private readonly slabs: Buffer[] = [];
  private slab = Buffer.allocUnsafe(0);
  private used = 0;
  length = 0;

  push(piece: Buffer): void {
    for (let at = 0; at < piece.length;) {
      if (this.used === this.slab.length) {
        if (this.used > 0) this.slabs.push(this.slab);
        this.slab = Buffer.allocUnsafe(1 << 20);
        this.used = 0;
      }
      const n = piece.copy(this.slab, this.used, at);
      this.used += n;
      at += n;
    }
    this.length += piece.length;
  }

  /** Everything received, as one buffer. */
  take(): Buffer {
    const last = this.slab.subarray(0, this.used);
    return this.slabs.length === 0 ? last : Buffer.concat([...this.slabs, last], this.length);
  }
}

/** The 4 hex digits of a pkt-line length at `pos`, or -1. */
function pktLength(buf: Buffer, pos: number): number {
  let n = 0;
  for (let i = pos; i < pos + 4; i++) {
    const c = buf[i]!;
    const v = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
    if (v < 0) return -1;
    n = n * 16 + v;
  }
  return n;
}

/**
 * Splits a pkt-line stream that arrives in chunks; `onLine` gets each line
 * (null for a flush-pkt). At most `maxLines` pkt-lines (flushes included),
 * each at most FETCH_LIMITS.pktLineBytes; past that, `tooMany` says why.
 */
class PktReader {
  private rest: Buffer = Buffer.alloc(0);
  private lines = 0;

  constructor(private readonly onLine: (line: Buffer | null) => void, private readonly maxLines: number, private readonly tooMany = `sent more than ${maxLines} pkt-lines`) {}

  push(chunk: Buffer): void {
    let buf = this.rest.length > 0 ? Buffer.concat([this.rest, chunk]) : chunk;
    let pos = 0;
    while (buf.length - pos >= 4) {
      const len = pktLength(buf, pos);
      if (len < 0 || len === 3) throw new VouchError('io_error', 'the remote sent a bad pkt-line');
      if (len > FETCH_LIMITS.pktLineBytes) throw new VouchError('io_error', `the remote sent a pkt-line of ${len} bytes (git's limit is ${FETCH_LIMITS.pktLineBytes})`);
      if (len >= 4 && buf.length - pos < len) break;
      if (++this.lines > this.maxLines) throw new VouchError('io_error', `the remote ${this.tooMany}`);
      if (len < 4) { // flush, delim, response-end
        pos += 4;
        this.onLine(null);
        continue;
      }
      this.onLine(buf.subarray(pos + 4, pos + len));
      pos += len;
    }
    buf = buf.subarray(pos);
    this.rest = buf.length > 0 ? Buffer.from(buf) : Buffer.alloc(0);
  }

  end(): void {
    if (this.rest.length > 0) throw new VouchError('io_error', 'the remote sent a truncated pkt-line');
  }
}

/** The remote's refs and capabilities (`info/refs?service=git-upload-pack`). */
async function discoverRefs(url: string, opts: FetchOptions): Promise<{ refs: Map<string, string>; caps: Set<string> }> {
  /** Only the branch a chain lives on is kept: other refs are counted, not stored. */
  const refs = new Map<string, string>();
  const caps = new Set<string>();
  let first = true;
  const reader = new PktReader((line) => {
    if (line === null) return;
    let text = line.toString('utf8').replace(/\n$/, '');
    if (text.startsWith('# service=')) return;
    if (text.startsWith('ERR ')) throw new VouchError('io_error', `the remote refused: ${remoteText(text.slice(4))}`);
    const nul = text.indexOf('\0');
    if (nul >= 0) {
      if (first) for (const c of text.slice(nul + 1).split(' ')) if (c) caps.add(c);
      text = text.slice(0, nul);
    }
    first = false;
    const [oid, name] = text.split(' ');
    if (oid && name === BRANCH_REF && OID_RE.test(oid)) refs.set(name, oid);
  }, FETCH_LIMITS.refs + 8, `advertised more than ${FETCH_LIMITS.refs} refs`);
  const bounds = {
    timeoutMs: Math.min(opts.timeoutMs ?? FETCH_LIMITS.exchangeMs, FETCH_LIMITS.advertisementMs),
    maxBytes: Math.min(opts.maxBytes ?? Infinity, FETCH_LIMITS.advertisementBytes),
  };
  await httpExchange(opts, bounds, gitUrl(url, 'info/refs?service=git-upload-pack'), 'GET', { accept: '*/*' }, null, 'application/x-git-upload-pack-advertisement', (c) => reader.push(c));
  reader.end();
  return { refs, caps };
}

/** Ask upload-pack for `want` (depth 1), telling it what we have; returns the pack and the shallow updates. */
async function uploadPack(url: string, opts: FetchOptions, caps: Set<string>, want: string, haves: string[], shallows: string[]): Promise<{ pack: Buffer; shallow: string[]; unshallow: string[] }> {
  const band = caps.has('side-band-64k') ? 'side-band-64k' : caps.has('side-band') ? 'side-band' : null;
  if (!band) throw new VouchError('io_error', 'the remote does not offer side-band: not supported');
  if (!caps.has('shallow')) throw new VouchError('io_error', 'the remote does not offer shallow fetches: not supported');
  const ask = [band, 'shallow', 'thin-pack', ...(caps.has('ofs-delta') ? ['ofs-delta'] : []), ...(caps.has('no-progress') ? ['no-progress'] : []), `agent=${AGENT}`];
  const parts = [pktLine(`want ${want} ${ask.join(' ')}\n`), ...shallows.map((s) => pktLine(`shallow ${s}\n`)), pktLine('deepen 1\n'), FLUSH];
  for (const h of haves) parts.push(pktLine(`have ${h}\n`));
  parts.push(pktLine('done\n'));
  const pack = new ByteSink();
  const shallow: string[] = [];
  const unshallow: string[] = [];
  const reader = new PktReader((line) => {
    if (line === null || line.length === 0) return;
    const b = line[0]!;
    if (b === 1) pack.push(line.subarray(1));
    else if (b === 2) return; // progress
    else if (b === 3) throw new VouchError('io_error', `the remote failed: ${remoteText(line.toString('utf8', 1))}`);
    else {
      const text = line.toString('utf8').trim();
      if (text.startsWith('shallow ') || text.startsWith('unshallow ')) {
        if (shallow.length + unshallow.length >= FETCH_LIMITS.shallowLines) throw new VouchError('io_error', `the remote sent more than ${FETCH_LIMITS.shallowLines} shallow lines`);
        if (text.startsWith('shallow ')) shallow.push(text.slice(8));
        else unshallow.push(text.slice(10));
      } else if (text.startsWith('ERR ')) throw new VouchError('io_error', `the remote refused: ${remoteText(text.slice(4))}`);
      // NAK / ACK: nothing to do
    }
  }, FETCH_LIMITS.resultPktLines);
  const bounds = { timeoutMs: opts.timeoutMs ?? FETCH_LIMITS.exchangeMs, maxBytes: opts.maxBytes ?? FETCH_LIMITS.packBytes };
  await httpExchange(opts, bounds, gitUrl(url, 'git-upload-pack'), 'POST', {
    'content-type': 'application/x-git-upload-pack-request',
    accept: 'application/x-git-upload-pack-result',
  }, Buffer.concat(parts), 'application/x-git-upload-pack-result', (c) => reader.push(c));
  reader.end();
  if (pack.length === 0) throw new VouchError('io_error', 'the remote sent no pack');
  return { pack: pack.take(), shallow: shallow.filter((o) => OID_RE.test(o)), unshallow: unshallow.filter((o) => OID_RE.test(o)) };
}

function readShallow(gitdir: string): string[] {
  try {
    return fs.readFileSync(join(gitdir, 'shallow'), 'utf8').split('\n').filter((l) => OID_RE.test(l));
  } catch {
    return [];
  }
}

/** A loose ref's object id, or null. */
function readRef(gitdir: string, ref: string): string | null {
  try {
    const oid = fs.readFileSync(join(gitdir, ref), 'utf8').trim();
    return OID_RE.test(oid) ? oid : null;
  } catch {
    return null;
  }
}

/** Writes a new file whole and fsyncs it before returning (the caller renames it into place). */
function writeDurably(path: string, data: Buffer, mode: number): void {
  const fd = fs.openSync(path, 'w', mode);
  try {
    for (let off = 0; off < data.length;) off += fs.writeSync(fd, data, off, data.length - off);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

function writeFileAtomic(path: string, data: Buffer | string, mode?: number): void {
  const tmp = `${path}.vouch-${process.pid}.tmp`;
  fs.writeFileSync(tmp, data, mode === undefined ? undefined : { mode });
  fs.renameSync(tmp, path);
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

let failPointUsed = false;
/** Fault tests: `VOUCH_FAIL_POINT=working-tree` fails the working-tree write of one append (after its commit point), as a full disk would. */
function failPoint(name: 'working-tree'): void {
  if (process.env.VOUCH_FAIL_POINT === name && !failPointUsed) {
    failPointUsed = true;
    throw Object.assign(new Error('ENOSPC: no space left on device (VOUCH_FAIL_POINT)'), { code: 'ENOSPC' });
  }
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
    if (fs.existsSync(join(gitdir, CLONE_MARKER))) {
      throw new VouchError('not_a_chain', `${abs} holds an interrupted clone (.git/${CLONE_MARKER}); remove the directory to clone again`);
    }
    const head = readBranch(gitdir);
    if (!head) throw new VouchError('not_a_chain', `${abs}: branch main has no commit`);
    const state = readState(gitdir);
    const repo = new ChainRepo(abs, state?.index ?? null);
    await repo.loadBranch(head);
    repo.canRepair = opts.repair ?? true;
    if (repo.canRepair) {
      assertChainWritable(abs); // repair writes: refused while a running gateway owns the chain
      repo.removeObjectTemps();
      await repo.repair(state);
    } else repo.consistent = state?.commit === head && fs.existsSync(join(gitdir, 'index'));
    return repo;
  }

  /**
   * Removes what interrupted object writes left under `.git/objects` (a full
   * disk, a crash): `tmp_obj_*` files, and the temporary pack files of a
   * fetch. Nothing reuses them, and nothing else removes them. Run at open
   * for writing, when no other vouch process may write (the chain lock of an
   * authority gateway is held by this process or by none): still kept are
   * the files of another live vouch process (named with its pid) and git's
   * own younger than ten minutes (a git command run by hand meanwhile).
   */
  private removeObjectTemps(): void {
    const objects = join(this.gitdir, 'objects');
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
        if (!match(name)) continue;
        const ours = /^tmp_obj_vouch_(\d+)_\d+$|\.vouch-(\d+)\.tmp$/.exec(name);
        if (ours) {
          if (!writerGone(Number(ours[1] ?? ours[2]))) continue;
        } else {
          const st = lstatOrNull(join(dir, name));
          if (!st || now - Number(st.mtimeMs) < 10 * 60_000) continue;
        }
        try {
          fs.unlinkSync(join(dir, name));
          this.repairs.push({ action: 'removed', path: `.git/objects/${rel}${name}`, reason: 'temporary file of an interrupted object write (a full disk or a crash)' });
        } catch { /* gone meanwhile, or not ours to remove */ }
      }
    };
    const tmpObj = (name: string) => name.startsWith('tmp_obj_');
    sweep(objects, '', tmpObj);
    for (let b = 0; b < 256; b++) {
      const fan = b.toString(16).padStart(2, '0');
      sweep(join(objects, fan), `${fan}/`, tmpObj);
    }
    sweep(join(objects, 'pack'), 'pack/', (name) => name.startsWith('tmp_') || /^pack-[0-9a-f]{40}\.(pack|idx)\.vouch-\d+\.tmp$/.test(name));
  }

  /** Read the branch head: the trees on the path to its last well-formed block file, and the chain size. */
  private async loadBranch(head: string): Promise<void> {
    const found = await this.locate(head, 'branch main');
    this._head = head;
    this._size = found.size;
    this.dirs = found.dirs;
    await this.pinHead();
  }

  /** Pin the head commit and the trees on the path to its last block (see ObjectStore.pin). */
  private async pinHead(): Promise<void> {
    try {
      const commit = await this.objects.read(this._head);
      this.objects.pin([commit, ...[...this.dirs.values()].map((list) => ({ type: 'tree', body: treeBody(list) }))]);
    } catch {
      this.objects.pin([]); // an optimisation only
    }
  }

  /** The chain size at `commit` and the trees on the path to its last well-formed block file. */
  private async locate(commit: string, what: string): Promise<{ size: number; dirs: Map<string, TreeEntry[]> }> {
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
      assertChainWritable(this.dir); // refused while another process (a running authority gateway) owns the chain
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

    // 3-5. Working tree, index, state: a failure here leaves them to catch up.
    try {
      failPoint('working-tree');
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
  static async clone(url: string, dir: string, opts: FetchOptions = {}): Promise<ChainRepo> {
    const abs = resolve(dir);
    const existed = fs.existsSync(abs);
    if (existed) {
      if (!isDir(abs)) throw new VouchError('chain_exists', `${abs} exists and is not a directory`);
      if (fs.readdirSync(abs).length > 0) throw new VouchError('chain_exists', `${abs} is not empty`);
    }
    const shown = url.replace(/\/\/[^@/]*@/, '//');
    try {
      const { refs, caps } = await discoverRefs(url, opts);
      const want = refs.get(BRANCH_REF);
      if (!want) throw new VouchError('not_a_chain', `${shown} has no branch main`);
      const gitdir = join(abs, '.git');
      for (const d of ['objects/info', 'objects/pack', 'refs/heads', 'refs/tags', 'refs/remotes/origin']) fs.mkdirSync(join(gitdir, d), { recursive: true });
      fs.writeFileSync(join(gitdir, CLONE_MARKER), `cloning ${shown}\n`);
      fs.writeFileSync(join(gitdir, 'HEAD'), `ref: ${BRANCH_REF}\n`);
      fs.writeFileSync(join(gitdir, 'description'), 'vouch chain repository (mirror)\n');
      fs.writeFileSync(join(gitdir, 'config'), '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n' +
        `[remote "origin"]\n\turl = ${url.replace(/[\\"\n]/g, '')}\n\tfetch = +refs/heads/main:${REMOTE_REF}\n` +
        '[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n');
      const got = await uploadPack(url, opts, caps, want, [], []);
      const pack = await PackData.index(got.pack, async () => null);
      if (!pack.has(want)) throw new VouchError('io_error', `the pack from ${shown} does not hold commit ${want}`);
      const repo = new ChainRepo(abs);
      await repo.storePack(pack);
      await repo.updateShallow(got.shallow, got.unshallow);
      repo.writeRemoteRef(want);
      await repo.loadBranch(want);
      await repo.checkoutAll(pack, opts.onProgress);
      await repo.moveBranch(want, null);
      repo.writeState();
      repo.consistent = true;
      repo.objects.fetched = null;
      fs.rmSync(join(gitdir, CLONE_MARKER));
      return repo;
    } catch (e) {
      // Leave nothing half-made behind: the directory was empty (or absent) before.
      try {
        if (existed) for (const n of fs.readdirSync(abs)) fs.rmSync(join(abs, n), { recursive: true, force: true });
        else fs.rmSync(abs, { recursive: true, force: true });
      } catch { /* best effort */ }
      throw e instanceof VouchError ? e : ioError(`cannot clone ${shown} into ${abs}`, e);
    }
  }

  /** True when `dir` holds a clone that was interrupted (crash or kill) before it completed. */
  static isInterruptedClone(dir: string): boolean {
    return fs.existsSync(join(resolve(dir), '.git', CLONE_MARKER));
  }

  /** Write every file of the branch into an empty working tree (in pack order, for the delta cache), then the whole index. */
  private async checkoutAll(pack: PackData, onProgress?: (done: number, total: number) => void): Promise<void> {
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
    await this.index.update((idx) => idx.replaceAll(entries), (p) => this.noteStaleLock(p), { reload: false });
  }

  /**
   * Fetch the remote's branch `main` into `refs/remotes/origin/main`
   * (depth 1, telling the remote our head so only new objects come). Never
   * touches the branch, the working tree or the index. The pack stays
   * indexed in memory for cheap reads until `dropFetched()` or the next
   * fetch.
   */
  fetch(url: string, opts: FetchOptions = {}): Promise<FetchResult> {
    return this.serialize(async () => {
      const shown = url.replace(/\/\/[^@/]*@/, '//');
      const { refs, caps } = await discoverRefs(url, opts);
      const want = refs.get(BRANCH_REF);
      if (!want) throw new VouchError('not_a_chain', `${shown} has no branch main`);
      if (await this.objects.has(want)) {
        this.writeRemoteRef(want);
        return { commit: want, objects: 0, bytes: 0 };
      }
      const haves = [this._head];
      const tracked = readRef(this.gitdir, REMOTE_REF);
      if (tracked && tracked !== this._head && await this.objects.has(tracked)) haves.push(tracked);
      const got = await uploadPack(url, opts, caps, want, haves, readShallow(this.gitdir));
      const pack = await PackData.index(got.pack, (oid) => this.objects.read(oid).catch(() => null));
      if (!pack.has(want)) throw new VouchError('io_error', `the pack from ${shown} does not hold commit ${want}`);
      try {
        await this.storePack(pack);
        await this.updateShallow(got.shallow, got.unshallow);
        this.writeRemoteRef(want);
      } catch (e) {
        throw e instanceof VouchError ? e : ioError('cannot store the fetched objects', e);
      }
      return { commit: want, objects: pack.entries.length, bytes: got.pack.length };
    });
  }

  /** Forget the in-memory pack of the last fetch and any pack read since (the objects stay on disk). */
  dropFetched(): void {
    this.objects.fetched = null;
    this.objects.resetCache();
  }

  /** Keep a received pack: as a pack + index (as git stores it), or as loose objects when small. */
  private async storePack(received: PackData): Promise<void> {
    const pack = received.thin && received.entries.length >= UNPACK_LIMIT ? await received.selfContained() : received;
    if (pack.entries.length < UNPACK_LIMIT) {
      // Commits last: a commit on disk means its trees and blobs are too.
      const order = [...pack.entries].sort((a, b) => Number(a.type === 'commit') - Number(b.type === 'commit'));
      for (const e of order) this.objects.write(e.type as 'blob' | 'tree' | 'commit' | 'tag', pack.resolve(e));
    } else {
      const base = join(this.gitdir, 'objects', 'pack', `pack-${pack.checksum}`);
      fs.mkdirSync(dirname(base), { recursive: true });
      if (!fs.existsSync(`${base}.idx`)) {
        writeFileAtomic(`${base}.pack`, pack.pack, 0o444);
        writeFileAtomic(`${base}.idx`, pack.idxFile(), 0o444);
      }
    }
    this.objects.fetched = pack;
  }

  /** Apply the remote's shallow lines to `.git/shallow` (a commit is shallow only if we lack one of its parents). */
  private async updateShallow(add: string[], remove: string[]): Promise<void> {
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
    else writeFileAtomic(file, [...set].sort().map((o) => `${o}\n`).join(''));
  }

  private writeRemoteRef(oid: string): void {
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
          throw path === CHECKPOINT ? new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${why}`, { index: null }) : new VouchError('malformed', `malformed: ${why}`, { index: null, resource: path });
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
        throw new VouchError('history_rewritten', `history_rewritten: commit ${commit} ${lost.length > 0 ? `changes or removes ${lost.length} existing file(s) under blocks/, first ${lost[0]!.path}` : `has ${target.size} blocks, the branch ${this._size}`}`, {
          index: null, evidence: { from, to: commit, paths: lost.slice(0, 10).map((c) => c.path), size: this._size, target_size: target.size },
        });
      }
      await this.moveBranch(commit, from);
      this._head = commit;
      this._size = target.size;
      this.dirs = target.dirs;
      await this.pinHead();
      try {
        await this.applyChanges(changes, false);
        this.writeState();
        this.consistent = true;
      } catch (e) {
        this.consistent = false;
        this.warnings.push(`commit ${commit} is on branch main, but the working tree or index is not updated yet: ${(e as Error).message}`);
      }
      return { from, to: commit, size: this._size };
    });
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
    commitLock(fd, lock, ref, `${oid}\n`, { durable: true });
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
  private async diffCommits(from: string, to: string): Promise<{ path: string; oid: string | null; mode: string; before: string | null }[]> {
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
  private async applyChanges(changes: { path: string; oid: string | null; mode: string }[], repairing = true): Promise<void> {
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

  // -------------------------------------------------------------------------
  // Reads

  /**
   * What branch main commits under `blocks/` and as `checkpoint.json`, read
   * from git objects (the trees of the head commit; no blob is read): what
   * `vouch verify` and the gateway's cold start check the working tree's
   * files against, blob id by blob id.
   */
  async committedFiles(): Promise<CommittedFiles> {
    const root = this.dirs.get('')!;
    // Block files by leaf shard (index / 1000): per slot, the bytes holding its blob id and where.
    const leaves = new Map<number, { src: (Buffer | undefined)[]; at: Int32Array }>();
    let count = 0;
    const strays: { path: string; why: string }[] = [];
    const cp = root.find((e) => e.name === CHECKPOINT);
    const checkpoint = cp === undefined ? null : isRegularMode(cp.mode) ? cp.oid : modeName(cp.mode);
    const add = (index: number, body: Buffer, at: number): void => {
      const shard = Math.floor(index / 1000);
      let l = leaves.get(shard);
      if (!l) leaves.set(shard, (l = { src: new Array<Buffer | undefined>(1000), at: new Int32Array(1000) }));
      const k = index % 1000;
      if (l.src[k] !== undefined) {
        strays.push({ path: blockPath(index), why: 'is in its tree twice on branch main' });
        return;
      }
      count++;
      l.src[k] = body;
      l.at[k] = at;
    };
    const walk = async (entries: TreeEntry[], rel: string): Promise<void> => {
      for (const e of entries) {
        const path = `${rel}/${e.name}`;
        const index = parseBlockPath(path);
        if (index !== null) {
          if (isRegularMode(e.mode)) add(index, Buffer.from(e.oid, 'hex'), 0);
          else strays.push({ path, why: `is ${modeName(e.mode)} on branch main, not a regular file` });
        } else if (e.mode === TREE_MODE) {
          if (rel.length === 10 && SHARD_RE.test(e.name)) await leaf(e.oid, path);
          else await walk(this.dirs.get(path) ?? await this.objects.readTree(e.oid), path);
        } else {
          strays.push({ path, why: `is not a block file's path (on branch main${isRegularMode(e.mode) ? '' : `, ${modeName(e.mode)}`})` });
        }
      }
    };
    // A leaf shard `blocks/TTT/MMM` read straight from the tree's bytes, byte by byte in JS (its
    // ~1000 entries are nearly all blocks: no entry objects, strings or calls per entry); anything
    // unusual goes through `walk`.
    const leaf = async (oid: string, path: string): Promise<void> => {
      const o = await this.objects.read(oid);
      if (o.type !== 'tree') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a tree`);
      const body = o.body;
      const end = body.length;
      const base = Number(path.slice(7, 10)) * 1_000_000 + Number(path.slice(11, 14)) * 1000;
      const p0 = path.charCodeAt(7), p1 = path.charCodeAt(8), p2 = path.charCodeAt(9);
      const p3 = path.charCodeAt(11), p4 = path.charCodeAt(12), p5 = path.charCodeAt(13);
      const others: TreeEntry[] = [];
      let off = 0;
      while (off < end) {
        let sp = off;
        while (sp < end && body[sp] !== 0x20) sp++;
        let nul = sp + 1;
        while (nul < end && body[nul] !== 0) nul++;
        if (nul + 21 > end) throw ioError(`tree ${oid} is corrupt`, new Error('truncated entry'));
        // `100644 DDDDDDDDD.json` (or 100755): a regular file whose name's first six digits are the shard's.
        let n = -1;
        if (sp - off === 6 && nul - sp === 15 && body[off] === 0x31 && body[off + 1] === 0x30 && body[off + 2] === 0x30 &&
          ((body[off + 3] === 0x36 && body[off + 4] === 0x34 && body[off + 5] === 0x34) || (body[off + 3] === 0x37 && body[off + 4] === 0x35 && body[off + 5] === 0x35)) &&
          body[sp + 1] === p0 && body[sp + 2] === p1 && body[sp + 3] === p2 && body[sp + 4] === p3 && body[sp + 5] === p4 && body[sp + 6] === p5 &&
          body[sp + 10] === 0x2e && body[sp + 11] === 0x6a && body[sp + 12] === 0x73 && body[sp + 13] === 0x6f && body[sp + 14] === 0x6e) {
          const a = body[sp + 7]! - 48, b = body[sp + 8]! - 48, c = body[sp + 9]! - 48;
          if (a >= 0 && a <= 9 && b >= 0 && b <= 9 && c >= 0 && c <= 9) n = a * 100 + b * 10 + c;
        }
        if (n >= 0) add(base + n, body, nul + 1);
        else others.push({ mode: body.toString('latin1', off, sp), name: body.toString('utf8', sp + 1, nul), oid: body.toString('hex', nul + 1, nul + 21) });
        off = nul + 21;
      }
      if (others.length > 0) await walk(others, path);
    };
    const top = root.find((e) => e.name === 'blocks');
    if (top && top.mode === TREE_MODE) await walk(this.dirs.get('blocks') ?? await this.objects.readTree(top.oid), 'blocks');
    else if (top) strays.push({ path: 'blocks', why: `is ${modeName(top.mode)} on branch main, not a directory` });
    return {
      commit: this._head, count, checkpoint, strays,
      oidOf: (index) => {
        const l = leaves.get(Math.floor(index / 1000));
        const src = l?.src[index % 1000];
        if (src === undefined) return null;
        const at = l!.at[index % 1000]!;
        return src.toString('hex', at, at + 20);
      },
    };
  }

  /**
   * Whether `blocks/` holds exactly the block files 0..size-1 and nothing
   * else: what `listBlockFiles()` showing exactly those files means, checked
   * from the names alone (no per-file objects; about half its cost). False
   * for anything else, including errors: the caller then lists.
   */
  hasExactlyBlocks(size: number): boolean {
    if (!Number.isSafeInteger(size) || size < 1 || size - 1 > MAX_INDEX) return false;
    const last = size - 1;
    const list = direntsOf;
    // Exactly the directories `000`, `001`, ... up to `count - 1`.
    const shardDirs = (d: string, count: number): boolean => {
      const entries = list(d);
      if (entries === null || entries.length !== count) return false;
      const seen = new Uint8Array(count);
      for (const e of entries) {
        const n = e.name.length === 3 ? digitsAt(e.name, 0, 3) : -1;
        if (!e.isDirectory() || n < 0 || n >= count || seen[n]) return false;
        seen[n] = 1;
      }
      return true;
    };
    const blocksDir = join(this.dir, 'blocks');
    const lastTop = Math.floor(last / 1_000_000);
    if (!shardDirs(blocksDir, lastTop + 1)) return false;
    for (let top = 0; top <= lastTop; top++) {
      const topName = String(top).padStart(3, '0');
      const lastMid = top < lastTop ? 999 : Math.floor((last % 1_000_000) / 1000);
      if (!shardDirs(`${blocksDir}/${topName}`, lastMid + 1)) return false;
      for (let mid = 0; mid <= lastMid; mid++) {
        const midName = String(mid).padStart(3, '0');
        const base = top * 1_000_000 + mid * 1000;
        const count = Math.min(1000, size - base);
        const entries = list(`${blocksDir}/${topName}/${midName}`);
        if (entries === null || entries.length !== count) return false;
        // Names are unique in a directory: `count` names each naming a distinct index in range is the exact set.
        for (const e of entries) {
          const name = e.name;
          if (!e.isFile() || name.length !== 14 || !name.endsWith('.json')) return false;
          const n = digitsAt(name, 0, 9);
          if (n < base || n >= base + count) return false;
        }
      }
    }
    return true;
  }

  /**
   * Every file under blocks/ in the working tree, sorted by path; index null
   * when the path is not a well-formed block path. An entry at a block path
   * is listed whatever it is, never walked into; `why` says what is wrong
   * with one that is not a regular file (a symbolic link, a directory, a
   * FIFO, a device: the type readdir reports, as lstat would).
   */
  listBlockFiles(): { index: number | null; path: string; why?: string }[] {
    const out: { index: number | null; path: string; why?: string }[] = [];
    let strays = false;
    const walk = (abs: string, rel: string): void => {
      let entries: fs.Dirent[];
      try {
        entries = fs.readdirSync(abs, { withFileTypes: true });
      } catch (e) {
        if (rel === 'blocks' && (e as NodeJS.ErrnoException).code === 'ENOENT') return;
        throw ioError(`cannot list ${rel}`, e);
      }
      // Block files of one leaf directory sort by index; a slot per index puts them in order.
      const slots: ({ index: number; path: string; why?: string } | undefined)[] = [];
      let base = -1;
      const dirs: string[] = [];
      for (const e of entries) {
        const r = `${rel}/${e.name}`;
        const index = parseBlockPath(r);
        if (index === null && e.isDirectory()) {
          dirs.push(e.name);
          continue;
        }
        if (index === null) {
          strays = true;
          out.push({ index, path: r });
          continue;
        }
        if (base < 0) base = index - (index % 1000);
        slots[index - base] = e.isFile() ? { index, path: r } : { index, path: r, why: `is ${direntKind(e)}, not a regular file` };
      }
      for (const f of slots) if (f) out.push(f);
      for (const d of dirs.sort()) walk(`${abs}/${d}`, `${rel}/${d}`);
    };
    walk(join(this.dir, 'blocks'), 'blocks');
    // Without stray files every path is `blocks/DDD/DDD/DDDDDDDDD.json`, and the walk
    // above already produced path order; strays (any name) need the general sort.
    return strays ? out.sort((a, b) => comparePaths(a.path, b.path)) : out;
  }

  private checkRange(index: number): string {
    const p = blockPath(index);
    if (index >= this._size) throw new VouchError('not_found', `block ${index} is not on the chain (size ${this._size})`, { index });
    return p;
  }

  /**
   * The working-tree text of block `index`: a regular file of at most 16 MiB,
   * valid UTF-8 (else `malformed` at `index`); `io_error` when it is missing
   * or unreadable.
   */
  readBlockFile(index: number): string {
    const p = this.checkRange(index);
    const read = readChainFile(join(this.dir, p), LIMITS.blockFileBytes);
    if (read.error !== null) {
      if (read.kind === 'refused') throw new VouchError('malformed', `malformed at block ${index}: ${p} ${read.why}`, { index, resource: p });
      const lag = this.consistent ? '' : ' (the working tree lags behind branch main: open with repair)';
      throw new VouchError('io_error', `cannot read ${p}${lag}: it ${read.why}`, { resource: p });
    }
    const text = utf8Text(bytesOf(read));
    if (text === null) throw new VouchError('malformed', `malformed at block ${index}: ${p} is not valid UTF-8`, { index, resource: p });
    return text;
  }

  /**
   * The working-tree checkpoint text, or null when there is none; a link, a
   * file that is not regular or larger than 16 MiB, or not valid UTF-8 is
   * `checkpoint_mismatch`.
   */
  readCheckpoint(): string | null {
    const read = readChainFile(join(this.dir, CHECKPOINT), LIMITS.blockFileBytes);
    if (read.error !== null) {
      if (read.kind === 'missing') return null;
      if (read.kind === 'refused') throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT} ${read.why}`, { index: null, resource: CHECKPOINT });
      throw new VouchError('io_error', `cannot read ${CHECKPOINT}: it ${read.why}`, { resource: CHECKPOINT });
    }
    const text = utf8Text(bytesOf(read));
    if (text === null) throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT} is not valid UTF-8`, { index: null, resource: CHECKPOINT });
    return text;
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
      if (k === parts.length - 1) return strictBlockText(await this.objects.readBlob(e.oid), index, p);
      entries = this.dirs.get(dirPath) ?? await this.objects.readTree(e.oid);
    }
    throw new VouchError('not_found', `${p} is not on branch main`, { index });
  }
}

/** A block file's bytes from git as text: at most 16 MiB, strictly UTF-8, else `malformed` at `index`. */
function strictBlockText(bytes: Buffer, index: number, path: string): string {
  const text = bytes.length > LIMITS.blockFileBytes ? null : utf8Text(bytes);
  if (text === null) {
    throw new VouchError('malformed', `malformed at block ${index}: ${path} is ${bytes.length > LIMITS.blockFileBytes ? `larger than ${LIMITS.blockFileBytes} bytes` : 'not valid UTF-8'}`, { index, resource: path });
  }
  return text;
}

function readState(gitdir: string): State | null {
  try {
    const s = JSON.parse(fs.readFileSync(join(gitdir, STATE_FILE), 'utf8')) as State;
    if (s && s.version === 1 && typeof s.commit === 'string' && OID_RE.test(s.commit)) return s;
  } catch { /* missing or unreadable: treated as no state */ }
  return null;
}
