/**
 * git's object model as the chain repository uses it: object ids
 * (`sha1("<type> <size>\0" + body)`), loose objects (`objects/<2>/<38>`,
 * zlib), the tree and commit codecs, `ioError`, and the names every git
 * module shares. Hand-written so an append rewrites four in-memory trees
 * without a read-back (bench/RESULTS.md "Chain core").
 * Trusts: nothing it parses: a bad body is `io_error`, never a wrong answer.
 * Must hold: `treeBody(parseTree(b))` is `b` for every tree git writes;
 * `objectId` is git's id (`git fsck --strict` after every append in tests).
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { inflateSync } from 'node:zlib';
import { VouchError } from '../chain/errors.ts';
import { comparePaths } from './git-index-format.ts';

export const BRANCH_REF = 'refs/heads/main';
export const OID_RE = /^[0-9a-f]{40}$/;
export const ZERO_OID = '0'.repeat(40);
export const TREE_MODE = '40000';
export const FILE_MODE = '100644';
export const GITLINK_MODE = '160000';

export interface TreeEntry {
  mode: string; // '100644', '40000', ...
  name: string;
  oid: string;
}

/** Author and message of a commit vouch writes (author = committer). */
export interface CommitInfo {
  /** Full commit message (`block <i>: <intent> <uns> <semver>`, blank line, URLs); a final "\n" is added if missing. */
  message: string;
  authorName: string;
  authorEmail: string;
  /** Unix seconds; author and committer time, timezone +0000. */
  timestamp: number;
}

/** A commit's object id, tree and parents. */
export interface CommitHead {
  oid: string;
  tree: string;
  parents: string[];
}

/** A failed read or a corrupt object, as `io_error` (first line of the cause in the message). */
export function ioError(what: string, cause: unknown): VouchError {
  const msg = cause instanceof Error ? cause.message.split('\n')[0] : String(cause);
  return new VouchError('io_error', `${what}: ${msg}`, { cause });
}

export function objectId(type: string, body: Buffer): string {
  return createHash('sha1').update(`${type} ${body.length}\0`).update(body).digest('hex');
}

export function isRegularMode(mode: string): boolean {
  return mode === FILE_MODE || mode === '100755';
}

export function modeName(mode: string): string {
  return mode === TREE_MODE ? 'a directory' : mode === '120000' ? 'a symbolic link' : mode === GITLINK_MODE ? 'a submodule' : `an entry of mode ${mode}`;
}

function treeKey(e: TreeEntry): string {
  return e.mode === TREE_MODE ? `${e.name}/` : e.name;
}

export function compareTreeEntries(a: TreeEntry, b: TreeEntry): number {
  return comparePaths(treeKey(a), treeKey(b));
}

/** Insert or replace `e` in a sorted tree entry list (appending at the end is the common, O(1) case). */
export function setTreeEntry(list: TreeEntry[], e: TreeEntry): void {
  const last = list[list.length - 1];
  if (!last || compareTreeEntries(last, e) < 0) {
    list.push(e);
    return;
  }
  const at = list.findIndex((x) => x.name === e.name);
  if (at >= 0) {
    list[at] = e;
    return;
  }
  list.push(e);
  list.sort(compareTreeEntries);
}

export function treeBody(entries: readonly TreeEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    parts.push(Buffer.from(`${e.mode} ${e.name}\0`, 'utf8'), Buffer.from(e.oid, 'hex'));
  }
  return Buffer.concat(parts);
}

/** A tree body's entries; `io_error` naming `oid` when it does not parse. */
export function parseTree(body: Buffer, oid: string): TreeEntry[] {
  const out: TreeEntry[] = [];
  let off = 0;
  while (off < body.length) {
    const sp = body.indexOf(0x20, off);
    const nul = sp < 0 ? -1 : body.indexOf(0, sp);
    if (sp < 0 || nul < 0 || nul + 21 > body.length) throw new VouchError('io_error', `tree ${oid} is corrupt: corrupt tree object`);
    out.push({
      mode: body.toString('latin1', off, sp),
      name: body.toString('utf8', sp + 1, nul),
      oid: body.toString('hex', nul + 1, nul + 21),
    });
    off = nul + 21;
  }
  return out;
}

export function commitBody(tree: string, parent: string | null, c: CommitInfo): Buffer {
  const who = `${c.authorName} <${c.authorEmail}> ${c.timestamp} +0000`;
  const msg = c.message.endsWith('\n') ? c.message : `${c.message}\n`;
  return Buffer.from(`tree ${tree}\n${parent ? `parent ${parent}\n` : ''}author ${who}\ncommitter ${who}\n\n${msg}`, 'utf8');
}

/** A commit body's tree and parents (its header, up to the blank line); `io_error` when they are not object ids. */
export function parseCommitHead(body: Buffer, oid: string): CommitHead {
  const end = body.indexOf('\n\n');
  const head = body.toString('utf8', 0, end < 0 ? body.length : end);
  let tree = '';
  const parents: string[] = [];
  for (const line of head.split('\n')) {
    if (line.startsWith('tree ')) tree = line.slice(5);
    else if (line.startsWith('parent ')) parents.push(line.slice(7));
  }
  if (!OID_RE.test(tree)) throw new VouchError('io_error', `commit ${oid} has no tree`);
  if (!parents.every((p) => OID_RE.test(p))) throw new VouchError('io_error', `commit ${oid} is corrupt`);
  return { oid, tree, parents };
}

/** Path of a loose object. */
export function loosePath(gitdir: string, oid: string): string {
  return join(gitdir, 'objects', oid.slice(0, 2), oid.slice(2));
}

/** A loose object's type and body, or null when there is no such file; `io_error` when it is unreadable or corrupt. */
export function readLoose(gitdir: string, oid: string): { type: string; body: Buffer } | null {
  let raw: Buffer;
  try {
    raw = fs.readFileSync(loosePath(gitdir, oid));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw ioError(`cannot read object ${oid}`, e);
  }
  let data: Buffer;
  try {
    data = inflateSync(raw);
  } catch (e) {
    throw ioError(`object ${oid} is corrupt`, e);
  }
  const nul = data.indexOf(0);
  const [type, size] = data.toString('latin1', 0, Math.max(0, nul)).split(' ');
  const body = data.subarray(nul + 1);
  if (nul < 0 || Number(size) !== body.length) throw new VouchError('io_error', `object ${oid} is corrupt (bad header)`);
  return { type: type ?? '', body };
}
