/**
 * chain-push: the authority's push of the chain repository to a git remote
 * over smart HTTP (DESIGN 4, authority mode), with a cost that does not grow
 * with the length of the history.
 *
 * Owns: the object walk that decides what a push sends (first-parent commits
 * from the local head back to the remote's head, and for each only the tree
 * entries that differ from its parent's), the packfile it sends (v2; whole
 * objects, except trees sent as a delta of their previous version, the only
 * objects that grow with the chain), the receive-pack exchange (`GET info/refs`, `POST
 * git-receive-pack`, report-status), and `ChainPusher`, the background loop
 * the gateway notifies after each append (coalescing, retries with
 * exponential backoff, status).
 *
 * Trusts: the local repository's objects (written by store/chain-repo.ts or by
 * git; loose objects are read here, packed ones through isomorphic-git);
 * git's connectivity guarantee on the remote (a remote that has commit X has
 * everything reachable from X); undici for HTTP framing.
 *
 * Must always hold:
 * - Never force: `refs/heads/main` on the remote only ever moves from a
 *   commit on the local first-parent chain to a descendant of it. A remote
 *   whose head is not on that chain (diverged, rewritten, someone else's
 *   commit) is refused with `history_rewritten` and reported; the POST names
 *   the remote's current head as old-oid, so the remote's own compare-and-swap
 *   refuses anything that moved in between.
 * - A push reads O(new commits) objects: the commits after the remote's head
 *   and, per commit, only the trees on changed paths (an append changes the
 *   root, `blocks`, two shard trees) and the new blobs. Only an empty remote
 *   makes a push walk the whole history (once).
 * - `ChainPusher.notify` never throws and never waits; nothing acknowledged is
 *   lost by a failed push (every commit stays in the local repository, and the
 *   next push sends everything since the remote's head).
 * - Credentials in the remote URL are sent as Basic auth and never appear in
 *   messages, logs or status.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { deflateSync, inflateSync } from 'node:zlib';
import git from 'isomorphic-git';
import { Agent, type Dispatcher, request } from 'undici';
import { VouchError } from '../chain/errors.ts';

const BRANCH_REF = 'refs/heads/main';
const ZERO_OID = '0'.repeat(40);
const OID_RE = /^[0-9a-f]{40}$/;
const TREE_MODE = '40000';
const GITLINK_MODE = '160000';
const USER_AGENT = 'git/vouch-0.1';
/** Pack bodies up to this size are sent with Content-Length; larger ones are streamed (chunked). */
const BUFFERED_PACK_BYTES = 1 << 20;
/** A report-status or ref advertisement larger than this is not a git server we can talk to. */
const MAX_RESPONSE_BYTES = 16 << 20;

// ---------------------------------------------------------------------------
// Options and results

export interface PushTimeouts {
  /** TCP connect. Default 10 s. */
  connectMs?: number;
  /** Whole `GET info/refs` exchange. Default 30 s. */
  refsMs?: number;
  /** Whole `POST git-receive-pack` exchange (pack upload, remote unpack, report). Default 10 min. */
  pushMs?: number;
  /** Silence while waiting for response headers or body bytes. Default 60 s. */
  idleMs?: number;
}

export interface PushNewOptions {
  /** The remote's `main` as we last knew it (null: none or unknown). Checked against the remote's advertisement. */
  remoteHead: string | null;
  /** The local commit to put on the remote's `main`. */
  localHead: string;
  timeouts?: PushTimeouts;
  /** undici dispatcher to use (default: a shared agent of this module). */
  dispatcher?: Dispatcher;
  /** isomorphic-git cache object, reused across pushes (keeps parsed pack indexes of a packed repository). */
  cache?: object;
  signal?: AbortSignal;
}

export interface PushResult {
  /** False when the remote already had `localHead` (nothing was sent). */
  pushed: boolean;
  /** The remote's `main` now (= localHead). */
  remoteHead: string;
  /** What the remote's `main` was before this push (null: no main). */
  previousRemoteHead: string | null;
  /** True when the remote had no `main` and the whole history was sent. */
  fullHistory: boolean;
  /** Commits sent. */
  commits: number;
  /** Objects in the pack. */
  objects: number;
  /** Pack size in bytes. */
  packBytes: number;
  /** POST body size in bytes (commands + pack). */
  requestBytes: number;
  /** Set when the remote was not where `remoteHead` said (and what was done about it). */
  note: string | null;
  timings: { refsMs: number; walkMs: number; postMs: number; totalMs: number };
}

/** What the remote advertises for receive-pack. */
export interface RemoteRefs {
  /** `refs/heads/main`, or null when the remote has none (an empty repository). */
  main: string | null;
  capabilities: Set<string>;
}

// ---------------------------------------------------------------------------
// Reading local objects

type ObjType = 'commit' | 'tree' | 'blob' | 'tag';
const TYPE_CODE: Record<ObjType, number> = { commit: 1, tree: 2, blob: 3, tag: 4 };

interface TreeEntry { mode: string; name: string; oid: string }
interface CommitHead { oid: string; tree: string; parents: string[] }

function parseTree(body: Buffer, oid: string): TreeEntry[] {
  const out: TreeEntry[] = [];
  let off = 0;
  while (off < body.length) {
    const sp = body.indexOf(0x20, off);
    const nul = sp < 0 ? -1 : body.indexOf(0, sp);
    if (sp < 0 || nul < 0 || nul + 21 > body.length) throw new VouchError('not_a_chain', `tree ${oid} is corrupt`);
    out.push({ mode: body.toString('latin1', off, sp), name: body.toString('utf8', sp + 1, nul), oid: body.toString('hex', nul + 1, nul + 21) });
    off = nul + 21;
  }
  return out;
}

function parseCommitHead(body: Buffer, oid: string): CommitHead {
  const end = body.indexOf('\n\n');
  const head = body.toString('utf8', 0, end < 0 ? body.length : end);
  let tree = '';
  const parents: string[] = [];
  for (const line of head.split('\n')) {
    if (line.startsWith('tree ')) tree = line.slice(5);
    else if (line.startsWith('parent ')) parents.push(line.slice(7));
  }
  if (!OID_RE.test(tree) || !parents.every((p) => OID_RE.test(p))) throw new VouchError('not_a_chain', `commit ${oid} is corrupt`);
  return { oid, tree, parents };
}

/** Local object reads: loose files directly, packed objects through isomorphic-git. Yields to the event loop now and then. */
class LocalObjects {
  private reads = 0;
  private readonly trees = new Map<string, TreeEntry[]>();

  constructor(readonly gitdir: string, readonly cache: object) {}

  private loosePath(oid: string): string {
    return join(this.gitdir, 'objects', oid.slice(0, 2), oid.slice(2));
  }

  async read(oid: string): Promise<{ type: string; body: Buffer }> {
    if (++this.reads % 256 === 0) await new Promise((r) => setImmediate(r));
    let raw: Buffer | null = null;
    try {
      raw = fs.readFileSync(this.loosePath(oid));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw ioError(`cannot read local object ${oid}`, e);
    }
    if (raw) {
      let data: Buffer;
      try {
        data = inflateSync(raw);
      } catch (e) {
        throw ioError(`local object ${oid} is corrupt`, e);
      }
      const nul = data.indexOf(0);
      const [type, size] = data.toString('latin1', 0, Math.max(0, nul)).split(' ');
      const body = data.subarray(nul + 1);
      if (nul < 0 || Number(size) !== body.length) throw new VouchError('io_error', `local object ${oid} is corrupt (bad header)`);
      return { type: type ?? '', body };
    }
    try {
      const r = await git.readObject({ fs, gitdir: this.gitdir, oid, format: 'content', cache: this.cache });
      return { type: r.type, body: Buffer.from(r.object as Uint8Array) };
    } catch (e) {
      throw new VouchError('not_found', `object ${oid} is not in the local repository`, { cause: e });
    }
  }

  async has(oid: string): Promise<boolean> {
    if (fs.existsSync(this.loosePath(oid))) return true;
    try {
      await git.readObject({ fs, gitdir: this.gitdir, oid, format: 'deflated', cache: this.cache });
      return true;
    } catch {
      return false;
    }
  }

  async commit(oid: string): Promise<CommitHead> {
    const o = await this.read(oid);
    if (o.type !== 'commit') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a commit`);
    return parseCommitHead(o.body, oid);
  }

  /** Parsed tree; the few most recent are kept (a walk reads each tree as child, then as parent). */
  async tree(oid: string): Promise<TreeEntry[]> {
    const hit = this.trees.get(oid);
    if (hit) return hit;
    const o = await this.read(oid);
    if (o.type !== 'tree') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a tree`);
    const entries = parseTree(o.body, oid);
    this.trees.set(oid, entries);
    if (this.trees.size > 64) this.trees.delete(this.trees.keys().next().value!);
    return entries;
  }
}

function ioError(what: string, cause: unknown): VouchError {
  const msg = cause instanceof Error ? cause.message.split('\n')[0] : String(cause);
  return new VouchError('io_error', `${what}: ${msg}`, { cause });
}

/** The commit the local `main` points at (loose or packed ref), or null when it has none. */
export async function localBranchHead(dir: string): Promise<string | null> {
  try {
    return await git.resolveRef({ fs, gitdir: join(resolve(dir), '.git'), ref: BRANCH_REF });
  } catch {
    return null;
  }
}

/**
 * Commits on the first-parent chain from `from` back to `stopAt` (exclusive),
 * newest first. `found` is false when the walk reached a root commit (or
 * `cap` commits) without meeting `stopAt` (when `stopAt` is null, reaching the
 * root is the goal and `found` is true).
 */
async function firstParentChain(objects: LocalObjects, from: string, stopAt: string | null, cap = Infinity): Promise<{ commits: CommitHead[]; found: boolean }> {
  const commits: CommitHead[] = [];
  let oid: string | undefined = from;
  while (oid !== undefined && oid !== stopAt) {
    if (commits.length >= cap) return { commits, found: false };
    const c = await objects.commit(oid);
    if (c.parents.length > 1) {
      throw new VouchError('not_a_chain', `commit ${oid} is a merge: a chain's history is one line of commits, refusing to push it`);
    }
    commits.push(c);
    oid = c.parents[0];
  }
  return { commits, found: oid === stopAt || (oid === undefined && stopAt === null) };
}

/** One object of the pack; a tree may name the previous version of itself (same path, parent commit) to be sent as a delta of. */
interface PackEntry { oid: string; type: ObjType; deltaBase?: string }

/**
 * What to send for `commits` (newest first, each the first parent's child):
 * per commit, the commit and the tree entries that differ from its parent's
 * tree, recursively. Subtrees equal (by oid) to the parent's at the same path
 * are already on the remote and are not opened.
 */
async function objectsToSend(objects: LocalObjects, commits: CommitHead[]): Promise<PackEntry[]> {
  const seen = new Set<string>();
  const out: PackEntry[] = [];
  const add = (oid: string, type: ObjType, deltaBase?: string): boolean => {
    if (seen.has(oid)) return false;
    seen.add(oid);
    out.push(deltaBase ? { oid, type, deltaBase } : { oid, type });
    return true;
  };
  const walk = async (treeOid: string, base: string | null): Promise<void> => {
    if (!add(treeOid, 'tree', base ?? undefined)) return;
    const entries = await objects.tree(treeOid);
    const old = base ? new Map((await objects.tree(base)).map((e) => [e.name, e])) : null;
    for (const e of entries) {
      const was = old?.get(e.name);
      if (was && was.oid === e.oid) continue;
      if (e.mode === TREE_MODE) await walk(e.oid, was?.mode === TREE_MODE ? was.oid : null);
      else if (e.mode === GITLINK_MODE) continue; // a submodule's commit lives elsewhere
      else add(e.oid, 'blob');
    }
  };
  // Oldest first, so that the parent's tree was just read (and is cached).
  for (let k = commits.length - 1; k >= 0; k--) {
    const c = commits[k]!;
    add(c.oid, 'commit');
    const parentTree = c.parents[0] ? (k + 1 < commits.length ? commits[k + 1]!.tree : (await objects.commit(c.parents[0])).tree) : null;
    if (parentTree !== c.tree) await walk(c.tree, parentTree);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Packfile (gitformat-pack: "PACK", version 2, count, objects, SHA-1 trailer)

function objectHeader(type: ObjType, size: number): Buffer {
  const bytes: number[] = [];
  let c = (TYPE_CODE[type] << 4) | (size & 0x0f);
  let rest = Math.floor(size / 16);
  while (rest > 0) {
    bytes.push(c | 0x80);
    c = rest & 0x7f;
    rest = Math.floor(rest / 128);
  }
  bytes.push(c);
  return Buffer.from(bytes);
}

const REF_DELTA = 7;
/** Longest delta chain we create (git's own default pack.depth). */
const MAX_DELTA_DEPTH = 50;

function deltaSize(n: number, out: number[]): void {
  do {
    let b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
}

/**
 * A git delta (gitformat-pack, "Deltified representation") turning `base`
 * into `target`: copy the common prefix, insert the middle, copy the common
 * suffix. That is all a tree needs between two versions that differ in a few
 * entries (an append adds one entry at the end of a shard tree). Null when it
 * would not be much smaller than the target itself.
 */
export function makeDelta(base: Buffer, target: Buffer): Buffer | null {
  const max = Math.min(base.length, target.length);
  let p = 0;
  while (p < max && base[p] === target[p]) p++;
  let q = 0;
  while (q < max - p && base[base.length - 1 - q] === target[target.length - 1 - q]) q++;
  const middle = target.length - p - q;
  if (middle > target.length / 2) return null;
  const out: number[] = [];
  deltaSize(base.length, out);
  deltaSize(target.length, out);
  const copy = (offset: number, size: number): void => {
    while (size > 0) {
      const n = Math.min(size, 0xffffff);
      let op = 0x80;
      const bytes: number[] = [];
      for (let k = 0; k < 4; k++) {
        const b = Math.floor(offset / 2 ** (8 * k)) & 0xff;
        if (b) { op |= 1 << k; bytes.push(b); }
      }
      for (let k = 0; k < 3; k++) {
        const b = (n >> (8 * k)) & 0xff;
        if (b) { op |= 1 << (4 + k); bytes.push(b); }
      }
      out.push(op, ...bytes);
      offset += n;
      size -= n;
    }
  };
  copy(0, p);
  for (let at = p; at < p + middle; at += 127) {
    const n = Math.min(127, p + middle - at);
    out.push(n);
    for (let k = 0; k < n; k++) out.push(target[at + k]!);
  }
  copy(base.length - q, q);
  return Buffer.from(out);
}

/**
 * The pack of `entries` in chunks of about 256 KiB. Trees with a `deltaBase`
 * go as REF_DELTA of it when that is smaller: bases in the same pack up to a
 * chain of MAX_DELTA_DEPTH, bases on the remote (a thin pack, completed by
 * the remote's index-pack --fix-thin) only when `thin` is allowed.
 */
async function* packChunks(objects: LocalObjects, entries: PackEntry[], thin: boolean): AsyncGenerator<Buffer> {
  const hash = createHash('sha1');
  const header = Buffer.alloc(12);
  header.write('PACK', 0, 'latin1');
  header.writeUInt32BE(2, 4);
  header.writeUInt32BE(entries.length, 8);
  let parts: Buffer[] = [header];
  let size = header.length;
  const inPack = new Set(entries.map((e) => e.oid));
  const depth = new Map<string, number>();
  for (const e of entries) {
    const o = await objects.read(e.oid);
    if (o.type !== e.type) throw new VouchError('not_a_chain', `object ${e.oid} is a ${o.type}, expected a ${e.type}`);
    let delta: Buffer | null = null;
    const base = e.deltaBase;
    const baseDepth = base === undefined ? Infinity : inPack.has(base) ? depth.get(base) ?? Infinity : thin ? 0 : Infinity;
    if (base !== undefined && baseDepth < MAX_DELTA_DEPTH) delta = makeDelta((await objects.read(base)).body, o.body);
    let h: Buffer;
    let z: Buffer;
    if (delta) {
      const th = objectHeader(e.type, delta.length);
      th[0] = (th[0]! & 0x8f) | (REF_DELTA << 4);
      h = Buffer.concat([th, Buffer.from(base!, 'hex')]);
      z = deflateSync(delta, { level: 1 });
      depth.set(e.oid, baseDepth + 1);
    } else {
      h = objectHeader(e.type, o.body.length);
      z = deflateSync(o.body, { level: 1 });
      depth.set(e.oid, 0);
    }
    parts.push(h, z);
    size += h.length + z.length;
    if (size >= 256 * 1024) {
      const chunk = Buffer.concat(parts, size);
      hash.update(chunk);
      yield chunk;
      parts = [];
      size = 0;
    }
  }
  const tail = Buffer.concat(parts, size);
  hash.update(tail);
  yield Buffer.concat([tail, hash.digest()]);
}

// ---------------------------------------------------------------------------
// pkt-line (gitprotocol-common)

function pktLine(payload: string | Buffer): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  if (body.length + 4 > 65520) throw new VouchError('bad_request', 'pkt-line too long');
  return Buffer.concat([Buffer.from((body.length + 4).toString(16).padStart(4, '0'), 'latin1'), body]);
}
const FLUSH = Buffer.from('0000', 'latin1');

/** pkt-lines of `buf`; null stands for a flush (or delim / response-end) packet. */
function parsePktLines(buf: Buffer, what: string): (Buffer | null)[] {
  const out: (Buffer | null)[] = [];
  let off = 0;
  while (off < buf.length) {
    if (off + 4 > buf.length) throw protocolError(`${what}: truncated pkt-line header`);
    const lenText = buf.toString('latin1', off, off + 4);
    if (!/^[0-9a-f]{4}$/.test(lenText)) throw protocolError(`${what}: not a pkt-line stream (starts ${JSON.stringify(buf.toString('latin1', off, off + 16))})`);
    const len = parseInt(lenText, 16);
    if (len < 4) {
      out.push(null);
      off += 4;
      continue;
    }
    if (off + len > buf.length) throw protocolError(`${what}: truncated pkt-line`);
    out.push(buf.subarray(off + 4, off + len));
    off += len;
  }
  return out;
}

function protocolError(message: string, evidence: Record<string, unknown> = {}): VouchError {
  return new VouchError('io_error', message, { evidence: { reason: 'protocol', ...evidence } });
}

// ---------------------------------------------------------------------------
// HTTP

interface Remote { base: string; shown: string; auth: string | null }

/** Splits credentials off a remote URL (sent as Basic auth, never shown). */
export function parseRemote(url: string): Remote {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new VouchError('bad_request', 'chain remote is not a URL');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new VouchError('bad_request', `chain remote must be an http(s) URL, not ${u.protocol}`);
  const auth = u.username || u.password
    ? `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64')}`
    : null;
  u.username = '';
  u.password = '';
  u.search = '';
  u.hash = '';
  const base = u.toString().replace(/\/+$/, '');
  return { base, shown: base, auth };
}

let sharedAgent: Agent | null = null;
function defaultDispatcher(connectMs: number): Dispatcher {
  sharedAgent ??= new Agent({ connect: { timeout: connectMs }, keepAliveTimeout: 4_000 });
  return sharedAgent;
}

function resolvedTimeouts(t: PushTimeouts = {}): Required<PushTimeouts> {
  return { connectMs: t.connectMs ?? 10_000, refsMs: t.refsMs ?? 30_000, pushMs: t.pushMs ?? 600_000, idleMs: t.idleMs ?? 60_000 };
}

function netError(remote: Remote, stage: string, e: unknown, totalMs: number, signal?: AbortSignal): VouchError {
  if (e instanceof VouchError) return e;
  const err = e as Error & { code?: string };
  if (signal?.aborted && !(signal.reason instanceof DOMException && signal.reason.name === 'TimeoutError')) {
    return new VouchError('io_error', `${stage} ${remote.shown}: cancelled`, { evidence: { reason: 'cancelled', stage }, cause: e });
  }
  const timeout = err?.name === 'TimeoutError' || err?.code === 'UND_ERR_HEADERS_TIMEOUT' || err?.code === 'UND_ERR_BODY_TIMEOUT' || err?.code === 'UND_ERR_CONNECT_TIMEOUT' || err?.name === 'AbortError';
  const what = timeout ? `timed out (limit ${totalMs} ms or idle)` : `failed: ${err?.code ? `${err.code} ` : ''}${(err?.message ?? String(e)).split('\n')[0]}`;
  return new VouchError('io_error', `${stage} ${remote.shown} ${what}`, { evidence: { reason: timeout ? 'timeout' : 'unreachable', stage }, cause: e });
}

async function readBody(body: AsyncIterable<Uint8Array>, limit: number, what: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of body) {
    n += c.length;
    if (n > limit) throw protocolError(`${what}: answer larger than ${limit} bytes`);
    parts.push(Buffer.from(c));
  }
  return Buffer.concat(parts, n);
}

function httpStatusError(remote: Remote, stage: string, status: number, text: string): VouchError {
  const hint = status === 401 || status === 403 ? ' (credentials missing or refused)'
    : status === 404 ? ' (no repository there, or pushes are not enabled)'
      : status >= 300 && status < 400 ? ' (redirects are not followed: use the final URL)' : '';
  const detail = text.trim().split('\n')[0]?.slice(0, 200) ?? '';
  return new VouchError('io_error', `${stage} ${remote.shown}: HTTP ${status}${hint}${detail ? `: ${detail}` : ''}`, { evidence: { reason: 'http_status', stage, httpStatus: status } });
}

function headers(remote: Remote, extra: Record<string, string>): Record<string, string> {
  const h: Record<string, string> = { 'user-agent': USER_AGENT, pragma: 'no-cache', ...extra };
  if (remote.auth) h.authorization = remote.auth;
  return h;
}

function combine(signals: (AbortSignal | undefined)[]): AbortSignal {
  return AbortSignal.any(signals.filter((s): s is AbortSignal => s !== undefined));
}

/** `GET <url>/info/refs?service=git-receive-pack`: the remote's `main` and capabilities. */
export async function lsRemote(remoteUrl: string, opts: { timeouts?: PushTimeouts; dispatcher?: Dispatcher; signal?: AbortSignal } = {}): Promise<RemoteRefs> {
  const remote = parseRemote(remoteUrl);
  const t = resolvedTimeouts(opts.timeouts);
  return fetchRefs(remote, t, opts.dispatcher ?? defaultDispatcher(t.connectMs), opts.signal);
}

async function fetchRefs(remote: Remote, t: Required<PushTimeouts>, dispatcher: Dispatcher, signal?: AbortSignal): Promise<RemoteRefs> {
  const stage = 'GET info/refs of';
  const sig = combine([AbortSignal.timeout(t.refsMs), signal]);
  let buf: Buffer;
  let status: number;
  let ctype: string;
  try {
    const res = await request(`${remote.base}/info/refs?service=git-receive-pack`, {
      method: 'GET', dispatcher, signal: sig, headersTimeout: t.idleMs, bodyTimeout: t.idleMs,
      headers: headers(remote, { accept: 'application/x-git-receive-pack-advertisement, */*' }),
    });
    status = res.statusCode;
    ctype = String(res.headers['content-type'] ?? '');
    buf = await readBody(res.body, MAX_RESPONSE_BYTES, `info/refs of ${remote.shown}`);
  } catch (e) {
    throw netError(remote, stage, e, t.refsMs, signal);
  }
  if (status !== 200) throw httpStatusError(remote, stage, status, buf.toString('utf8'));
  if (!ctype.startsWith('application/x-git-receive-pack-advertisement')) {
    throw protocolError(`${remote.shown} is not a smart-HTTP git server accepting pushes (info/refs answered ${ctype || 'no content type'})`);
  }
  const lines = parsePktLines(buf, `info/refs of ${remote.shown}`);
  let k = 0;
  if (lines[0] && lines[0].toString('latin1').startsWith('# service=')) {
    if (lines[0].toString('latin1').trim() !== '# service=git-receive-pack') throw protocolError(`info/refs of ${remote.shown}: wrong service ${lines[0].toString('latin1').trim()}`);
    k = 1;
    while (k < lines.length && lines[k] === null) k++;
  }
  let main: string | null = null;
  let capabilities = new Set<string>();
  let first = true;
  for (; k < lines.length; k++) {
    const line = lines[k];
    if (line === null || line === undefined) break;
    let text = line.toString('utf8');
    if (text.endsWith('\n')) text = text.slice(0, -1);
    if (first) {
      const nul = text.indexOf('\0');
      if (nul >= 0) {
        capabilities = new Set(text.slice(nul + 1).split(' ').filter(Boolean));
        text = text.slice(0, nul);
      }
      first = false;
    }
    if (text.startsWith('shallow ')) continue;
    const [oid, name] = text.split(' ');
    if (!oid || !OID_RE.test(oid)) throw protocolError(`info/refs of ${remote.shown}: bad ref line ${JSON.stringify(text.slice(0, 100))}`);
    if (name === BRANCH_REF && oid !== ZERO_OID) main = oid;
  }
  for (const cap of capabilities) {
    if (cap.startsWith('object-format=') && cap !== 'object-format=sha1') throw protocolError(`${remote.shown} uses ${cap}; vouch chains are sha1 repositories`);
  }
  return { main, capabilities };
}

/** The report-status answer: null when `refs/heads/main` was updated, else why not. */
function parseReport(buf: Buffer, remote: Remote): { unpack: string; ref: string | null } {
  const lines = parsePktLines(buf, `receive-pack answer of ${remote.shown}`).filter((l): l is Buffer => l !== null).map((l) => l.toString('utf8').replace(/\n$/, ''));
  const unpack = lines.find((l) => l.startsWith('unpack '));
  if (!unpack) throw protocolError(`receive-pack answer of ${remote.shown} has no unpack status: ${JSON.stringify(buf.toString('utf8').slice(0, 200))}`);
  const mine = lines.find((l) => l === `ok ${BRANCH_REF}` || l.startsWith(`ng ${BRANCH_REF} `) || l === `ng ${BRANCH_REF}`);
  return { unpack: unpack.slice(7), ref: mine === undefined ? 'no status for refs/heads/main in the report' : mine.startsWith('ok ') ? null : mine.slice(3 + BRANCH_REF.length).trim() || 'refused' };
}

/** Concatenates `first` and the rest of `gen` into one stream. */
function streamOf(first: Buffer[], gen: AsyncGenerator<Buffer>, onByte: (n: number) => void): Readable {
  async function* all(): AsyncGenerator<Buffer> {
    for (const c of first) yield c;
    for await (const c of gen) {
      onByte(c.length);
      yield c;
    }
  }
  return Readable.from(all(), { objectMode: false });
}

// ---------------------------------------------------------------------------
// pushNew

/**
 * Push `localHead` to the remote's `main`, sending only the objects the
 * remote lacks, found by walking the first-parent commits between the
 * remote's head and `localHead` (see the header). The remote's actual head is
 * read from its advertisement first: when it is an ancestor on our chain the
 * push starts from there (whatever `remoteHead` said); when it is anything
 * else the push is refused (`history_rewritten`), never forced. An empty
 * remote gets the whole history (a walk of every commit, once).
 */
export async function pushNew(dir: string, remoteUrl: string, opts: PushNewOptions): Promise<PushResult> {
  const t0 = performance.now();
  const { remoteHead: expected, localHead } = opts;
  if (!OID_RE.test(localHead)) throw new VouchError('bad_request', `local head ${JSON.stringify(localHead)} is not a commit id`);
  if (expected !== null && !OID_RE.test(expected)) throw new VouchError('bad_request', `remote head ${JSON.stringify(expected)} is not a commit id`);
  const remote = parseRemote(remoteUrl);
  const t = resolvedTimeouts(opts.timeouts);
  const dispatcher = opts.dispatcher ?? defaultDispatcher(t.connectMs);
  const objects = new LocalObjects(join(resolve(dir), '.git'), opts.cache ?? {});

  // 1. Where is the remote really?
  const refs = await fetchRefs(remote, t, dispatcher, opts.signal);
  const tRefs = performance.now();
  const actual = refs.main;
  const base = (ms: number) => ({ refsMs: tRefs - t0, walkMs: ms, postMs: 0, totalMs: performance.now() - t0 });
  if (actual === localHead) {
    return {
      pushed: false, remoteHead: localHead, previousRemoteHead: actual, fullHistory: false, commits: 0, objects: 0, packBytes: 0, requestBytes: 0,
      note: expected === actual ? null : `the remote already had ${short(localHead)} (expected ${expected ? short(expected) : 'no main'})`, timings: base(0),
    };
  }
  if (!refs.capabilities.has('report-status')) throw protocolError(`${remote.shown} does not offer report-status: cannot confirm a push there`);

  // 2. The commits to send: first parents from localHead back to the remote's head.
  await objects.commit(localHead); // a clear error when the local head is not here
  if (actual !== null && !(await objects.has(actual))) throw diverged(remote, actual, localHead, expected, 'the remote has a commit this repository does not have');
  const chain = await firstParentChain(objects, localHead, actual);
  // (Proving that costs a walk to the root: only on this error path.)
  if (!chain.found) throw diverged(remote, actual!, localHead, expected, 'it is not on the local first-parent chain (the remote is ahead of this repository, diverged or was rewritten)');
  const entries = await objectsToSend(objects, chain.commits);
  const tWalk = performance.now();

  let note: string | null = null;
  if (actual === null && expected !== null) note = `the remote had no main (expected ${short(expected)}): sent the whole history`;
  else if (actual === null) note = 'the remote had no main: sent the whole history (walks every commit once)';
  else if (actual !== expected) note = `the remote was at ${short(actual)}, not ${expected ? short(expected) : 'empty'} as expected: pushed from there`;

  // 3. POST the command and the pack.
  const caps = ['report-status', ...(refs.capabilities.has('agent') || [...refs.capabilities].some((c) => c.startsWith('agent=')) ? ['agent=vouch'] : [])];
  const command = Buffer.concat([pktLine(`${actual ?? ZERO_OID} ${localHead} ${BRANCH_REF}\0${caps.join(' ')}`), FLUSH]);
  const gen = packChunks(objects, entries, !refs.capabilities.has('no-thin'));
  const first: Buffer[] = [command];
  let packBytes = 0;
  let buffered = command.length;
  let done = false;
  while (buffered < BUFFERED_PACK_BYTES) {
    const r = await gen.next();
    if (r.done) { done = true; break; }
    first.push(r.value);
    buffered += r.value.length;
    packBytes += r.value.length;
  }
  let requestBytes = buffered;
  const body: Buffer | Readable = done ? Buffer.concat(first, buffered) : streamOf(first, gen, (n) => { packBytes += n; requestBytes += n; });
  const stage = 'POST git-receive-pack of';
  const sig = combine([AbortSignal.timeout(t.pushMs), opts.signal]);
  let status: number;
  let ctype: string;
  let answer: Buffer;
  try {
    const res = await request(`${remote.base}/git-receive-pack`, {
      method: 'POST', dispatcher, signal: sig, body, headersTimeout: t.idleMs, bodyTimeout: t.idleMs,
      headers: headers(remote, {
        'content-type': 'application/x-git-receive-pack-request',
        accept: 'application/x-git-receive-pack-result',
        ...(done ? { 'content-length': String(buffered) } : {}),
      }),
    });
    status = res.statusCode;
    ctype = String(res.headers['content-type'] ?? '');
    answer = await readBody(res.body, MAX_RESPONSE_BYTES, `receive-pack answer of ${remote.shown}`);
  } catch (e) {
    if (body instanceof Readable) body.destroy();
    throw netError(remote, stage, e, t.pushMs, opts.signal);
  }
  if (status !== 200) throw httpStatusError(remote, stage, status, answer.toString('utf8'));
  if (!ctype.startsWith('application/x-git-receive-pack-result')) throw protocolError(`${stage} ${remote.shown}: unexpected content type ${ctype || '(none)'}`);
  const report = parseReport(answer, remote);
  if (report.unpack !== 'ok') {
    throw new VouchError('io_error', `${remote.shown} could not unpack the pushed objects: ${report.unpack}`, { evidence: { reason: 'rejected', stage, unpack: report.unpack } });
  }
  if (report.ref !== null) {
    throw new VouchError('io_error', `${remote.shown} refused to move main from ${actual ? short(actual) : 'nothing'} to ${short(localHead)}: ${report.ref}`, {
      evidence: { reason: 'rejected', stage, refused: report.ref, remoteHead: actual, localHead },
    });
  }
  const end = performance.now();
  return {
    pushed: true, remoteHead: localHead, previousRemoteHead: actual, fullHistory: actual === null,
    commits: chain.commits.length, objects: entries.length, packBytes, requestBytes, note,
    timings: { refsMs: tRefs - t0, walkMs: tWalk - tRefs, postMs: end - tWalk, totalMs: end - t0 },
  };
}

function short(oid: string): string {
  return oid.slice(0, 12);
}

function diverged(remote: Remote, actual: string, local: string, expected: string | null, why: string): VouchError {
  return new VouchError('history_rewritten',
    `history_rewritten: ${remote.shown} has main at ${short(actual)}, and ${why}; refusing to push ${short(local)} — vouch never force-pushes, the remote needs an operator`,
    { evidence: { reason: 'diverged', remoteHead: actual, localHead: local, expectedRemoteHead: expected } });
}

// ---------------------------------------------------------------------------
// ChainPusher

/** Compatible with the gateway's structured logger. */
export interface PushLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  debug?(msg: string, fields?: Record<string, unknown>): void;
}

export interface ChainPusherOptions {
  /** The chain's working directory (the git repository with `.git/`). */
  dir: string;
  /** Smart-HTTP URL of the remote repository (credentials allowed, never shown). */
  remote: string;
  log?: PushLog;
  /** Backoff after a failed push: initialMs, doubling up to maxMs. Default 1 s .. 5 min. */
  retry?: { initialMs: number; maxMs: number };
  timeouts?: PushTimeouts;
}

export interface PushStatus {
  /** The remote URL without credentials. */
  remote: string;
  /** The remote's `main` as last seen on our chain (null: none, or not reached yet: see `remoteKnown`). */
  remoteHead: string | null;
  remoteKnown: boolean;
  /** The newest local head (notified, or read from the branch at start). */
  localHead: string | null;
  /** Local commits not yet on the remote (null until the remote has been reached once). */
  backlog: number | null;
  pushing: boolean;
  lastPush: { at: string; head: string; commits: number; objects: number; bytes: number; ms: number; fullHistory: boolean; note: string | null } | null;
  lastError: { at: string; code: string; reason: string | null; message: string } | null;
  consecutiveFailures: number;
  /** When the next attempt after a failure is due (ISO time), or null. */
  nextAttemptAt: string | null;
  stopped: boolean;
}

interface Waiter { seq: number; resolve: () => void; reject: (e: Error) => void }

const nullLog: PushLog = { info() {}, warn() {}, error() {} };

/**
 * Pushes the chain in the background after appends (see the header). One
 * loop: learn the remote's head (info/refs) and the local branch head, then
 * while the local head is not on the remote, push everything since the
 * remote's head in one push (appends made meanwhile go in the next one);
 * after a failure wait initialMs * 2^(n-1) (capped at maxMs, with jitter).
 */
export class ChainPusher {
  readonly dir: string;
  private readonly remote: Remote;
  private readonly remoteUrl: string;
  private readonly log: PushLog;
  private readonly retry: { initialMs: number; maxMs: number };
  private readonly timeouts: PushTimeouts;
  private readonly agent: Agent;
  private readonly cache = {};
  private readonly objects: LocalObjects;

  private remoteHead: string | null = null;
  private remoteKnown = false;
  private localHead: string | null = null;
  /** Increases with every notify that changes the local head. */
  private seq = 0;
  /** Local commits after the remote's head, newest first (exact once the remote is known). */
  private ahead: string[] = [];
  private aheadKnown = false;
  private tracking: Promise<void> = Promise.resolve();
  private loop: Promise<void> | null = null;
  private inflight: AbortController | null = null;
  private wake: (() => void) | null = null;
  private nextAttemptAt: number | null = null;
  private waiters: Waiter[] = [];
  private stopped = false;
  private lastPush: PushStatus['lastPush'] = null;
  private lastError: PushStatus['lastError'] = null;
  private lastErrorObj: Error | null = null;
  private failures = 0;

  constructor(opts: ChainPusherOptions) {
    this.dir = resolve(opts.dir);
    this.remoteUrl = opts.remote;
    this.remote = parseRemote(opts.remote);
    this.log = opts.log ?? nullLog;
    this.retry = opts.retry ?? { initialMs: 1_000, maxMs: 300_000 };
    if (!(this.retry.initialMs > 0) || !(this.retry.maxMs >= this.retry.initialMs)) throw new VouchError('bad_request', 'retry needs 0 < initialMs <= maxMs');
    this.timeouts = opts.timeouts ?? {};
    this.agent = new Agent({ connect: { timeout: resolvedTimeouts(this.timeouts).connectMs }, keepAliveTimeout: 4_000 });
    this.objects = new LocalObjects(join(this.dir, '.git'), this.cache);
    this.kick();
  }

  /** A new local head after an append. Returns at once; never throws. */
  notify(localHead: string): void {
    try {
      if (this.stopped) return;
      if (typeof localHead !== 'string' || !OID_RE.test(localHead)) {
        this.say('warn', 'chain push: ignored a notify without a commit id', { remote: this.remote.shown });
        return;
      }
      if (localHead === this.localHead) return;
      this.localHead = localHead;
      this.seq++;
      this.track();
      this.kick();
    } catch (e) {
      this.say('error', 'chain push: notify failed', { error: (e as Error)?.message });
    }
  }

  status(): PushStatus {
    return {
      remote: this.remote.shown,
      remoteHead: this.remoteHead,
      remoteKnown: this.remoteKnown,
      localHead: this.localHead,
      backlog: this.remoteKnown && this.aheadKnown ? this.ahead.length : null,
      pushing: this.inflight !== null,
      lastPush: this.lastPush,
      lastError: this.lastError,
      consecutiveFailures: this.failures,
      nextAttemptAt: this.nextAttemptAt === null ? null : new Date(this.nextAttemptAt).toISOString(),
      stopped: this.stopped,
    };
  }

  /**
   * Push now (a pending backoff is cut short) and resolve once the remote has
   * the local head as of this call; reject with the error of the next failed
   * attempt.
   */
  flush(): Promise<void> {
    if (this.stopped) return Promise.reject(new VouchError('io_error', `chain pusher for ${this.remote.shown} is stopped`));
    return new Promise<void>((resolve, reject) => {
      this.waiters.push({ seq: this.seq, resolve, reject });
      this.nextAttemptAt = null;
      this.wake?.();
      this.kick();
    });
  }

  /** Stop pushing (an in-flight push is cancelled); pending flushes reject. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.inflight?.abort(new Error('pusher stopped'));
    this.wake?.();
    const err = new VouchError('io_error', `chain pusher for ${this.remote.shown} stopped`);
    for (const w of this.waiters.splice(0)) w.reject(err);
    await this.loop?.catch(() => undefined);
    await this.tracking.catch(() => undefined);
    await this.agent.close().catch(() => undefined);
  }

  // -------------------------------------------------------------------------

  private kick(): void {
    if (this.loop || this.stopped) return;
    this.loop = this.run().catch(async (e) => {
      // Not expected (run() catches its own failures): log, and wait before looping again.
      this.say('error', 'chain push: loop failed', { remote: this.remote.shown, error: (e as Error)?.message });
      await this.sleep(this.retry.maxMs);
    }).finally(() => {
      this.loop = null;
      if (!this.stopped && (this.waiters.length > 0 || !this.inSync())) this.kick();
    });
  }

  private inSync(): boolean {
    return this.remoteKnown && this.localHead !== null && this.localHead === this.remoteHead;
  }

  /** Resolve the flushes made before the local head of sequence `pushedSeq` reached the remote. */
  private settle(pushedSeq: number): void {
    const keep: Waiter[] = [];
    for (const w of this.waiters) {
      if (w.seq <= pushedSeq) w.resolve();
      else keep.push(w);
    }
    this.waiters = keep;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        if (this.localHead === null) {
          const head = await localBranchHead(this.dir);
          if (head === null) throw new VouchError('not_a_chain', `${this.dir}: branch main has no commit to push`);
          if (this.localHead === null) this.localHead = head;
        }
        if (!this.remoteKnown) {
          const refs = await this.attempt((signal) => fetchRefs(this.remote, resolvedTimeouts(this.timeouts), this.agent, signal));
          this.remoteHead = refs.main;
          this.remoteKnown = true;
          this.retrack();
        }
        const target = this.localHead;
        const seq = this.seq;
        if (target === this.remoteHead) {
          await this.tracking;
          this.settle(seq);
          if (this.failures > 0) this.recovered();
          if (this.localHead === target) return;
          continue;
        }
        const r = await this.attempt((signal) => pushNew(this.dir, this.remoteUrl, {
          remoteHead: this.remoteHead, localHead: target, timeouts: this.timeouts, dispatcher: this.agent, cache: this.cache, signal,
        }));
        const before = this.remoteHead;
        this.remoteHead = r.remoteHead;
        this.lastPush = {
          at: new Date().toISOString(), head: r.remoteHead, commits: r.commits, objects: r.objects, bytes: r.requestBytes,
          ms: Math.round(r.timings.totalMs), fullHistory: r.fullHistory, note: r.note,
        };
        this.afterPush(target, before, r);
        await this.tracking;
        if (this.failures > 0) this.recovered();
        this.say('info', 'chain pushed', {
          remote: this.remote.shown, head: r.remoteHead, commits: r.commits, objects: r.objects, bytes: r.requestBytes,
          ms: Math.round(r.timings.totalMs), ...(r.note ? { note: r.note } : {}),
        });
        this.settle(seq);
      } catch (e) {
        if (this.stopped) return;
        const err = e instanceof Error ? e : new Error(String(e));
        this.failures++;
        this.lastErrorObj = err;
        const code = e instanceof VouchError ? e.code : 'internal_error';
        const reason = e instanceof VouchError && typeof e.evidence?.reason === 'string' ? e.evidence.reason : null;
        this.lastError = { at: new Date().toISOString(), code, reason, message: err.message };
        const delay = this.backoff(reason === 'diverged');
        const fields = { remote: this.remote.shown, code, reason, error: err.message, consecutiveFailures: this.failures, retryInMs: delay, backlog: this.status().backlog };
        if (reason === 'diverged') this.say('error', 'chain push refused: the remote diverged', fields);
        else this.say('warn', 'chain push failed', fields);
        for (const w of this.waiters.splice(0)) w.reject(err);
        await this.sleep(delay);
      }
    }
  }

  /** Logs through the caller's logger; a logger that throws never breaks the loop. */
  private say(level: 'info' | 'warn' | 'error', msg: string, fields: Record<string, unknown>): void {
    try {
      this.log[level](msg, fields);
    } catch { /* ignore */ }
  }

  private recovered(): void {
    this.say('info', 'chain push recovered', { remote: this.remote.shown, after: this.failures });
    this.failures = 0;
    this.lastError = null;
    this.lastErrorObj = null;
  }

  /** Runs one network step, cancellable by stop(). */
  private async attempt<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const ac = new AbortController();
    this.inflight = ac;
    try {
      return await fn(ac.signal);
    } finally {
      this.inflight = null;
    }
  }

  private backoff(permanent: boolean): number {
    const { initialMs, maxMs } = this.retry;
    const raw = permanent ? maxMs : Math.min(maxMs, initialMs * 2 ** Math.min(30, this.failures - 1));
    return Math.max(1, Math.round(raw * (0.8 + 0.2 * Math.random())));
  }

  private sleep(ms: number): Promise<void> {
    this.nextAttemptAt = Date.now() + ms;
    return new Promise<void>((resolve) => {
      // Unref'd: a pending retry never holds the process open (everything unpushed stays in the local repository).
      const timer = setTimeout(done, ms);
      timer.unref();
      const self = this;
      function done(): void {
        clearTimeout(timer);
        if (self.wake === done) self.wake = null;
        self.nextAttemptAt = null;
        resolve();
      }
      this.wake = done;
    });
  }

  // --- backlog: the local commits after the remote's head

  /** After a new local head: add the commits between the previous tip we counted and it. */
  private track(): void {
    this.tracking = this.tracking.then(async () => {
      if (!this.remoteKnown || !this.aheadKnown || this.localHead === null) return;
      const head = this.localHead;
      const stop = this.ahead[0] ?? this.remoteHead;
      if (head === stop) return;
      const r = await firstParentChain(this.objects, head, stop, 100_000);
      if (r.found) this.ahead = [...r.commits.map((c) => c.oid), ...this.ahead];
      else await this.recount();
    }).catch((e) => {
      this.aheadKnown = false;
      this.say('warn', 'chain push: cannot count the backlog', { error: (e as Error)?.message });
    });
  }

  /** After the remote's head changed outside a push of ours: count again from scratch. */
  private retrack(): void {
    this.tracking = this.tracking.then(() => this.recount()).catch((e) => {
      this.aheadKnown = false;
      this.say('warn', 'chain push: cannot count the backlog', { error: (e as Error)?.message });
    });
  }

  private async recount(): Promise<void> {
    if (!this.remoteKnown || this.localHead === null) return;
    if (this.localHead === this.remoteHead) {
      this.ahead = [];
      this.aheadKnown = true;
      return;
    }
    const r = await firstParentChain(this.objects, this.localHead, this.remoteHead);
    // Not found: the remote diverged; every local commit counts as not on it.
    this.ahead = r.commits.map((c) => c.oid);
    this.aheadKnown = true;
  }

  private afterPush(target: string, before: string | null, r: PushResult): void {
    this.tracking = this.tracking.then(async () => {
      const at = this.ahead.indexOf(target);
      if (at >= 0 && r.previousRemoteHead === before) this.ahead = this.ahead.slice(0, at);
      else await this.recount();
    }).catch((e) => {
      this.aheadKnown = false;
      this.say('warn', 'chain push: cannot count the backlog', { error: (e as Error)?.message });
    });
  }

  /** The error of the last failed attempt (null after a success). */
  get lastFailure(): Error | null {
    return this.lastErrorObj;
  }
}
