/**
 * What a push must send, found by walking the local repository: the
 * first-parent commits from the local head back to the remote's head, and
 * for each only the tree entries that differ from its parent's.
 * Owns: the walk (`firstParentChain`, `objectsToSend`) and `PushObjects`
 * (parsed trees cached, the event loop given a turn every 256 reads).
 * Trusts: the local objects; git's connectivity guarantee (subtrees equal to
 * the parent's are not opened).
 * Must hold: a push reads O(new commits) objects; a merge commit is refused
 * (`not_a_chain`), never flattened.
 */
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { BRANCH_REF, type CommitHead, GITLINK_MODE, OID_RE, TREE_MODE, type TreeEntry, parseCommitHead, parseTree } from './git-objects.ts';
import type { ObjType, PackEntry } from './git-pack-writer.ts';
import { ObjectStore } from './object-store.ts';

/**
 * The local objects a push reads: the repository's ObjectStore (loose, then
 * packed), parsed trees kept for a walk (each tree is read as a child, then
 * as a parent), and a turn of the event loop every 256 reads.
 */
export class PushObjects {
  private reads = 0;
  private readonly trees = new Map<string, TreeEntry[]>();

  constructor(private readonly store: ObjectStore) {}

  async read(oid: string): Promise<{ type: string; body: Buffer }> {
    if (++this.reads % 256 === 0) await new Promise((r) => setImmediate(r));
    try {
      return await this.store.read(oid);
    } catch (e) {
      if (!(await this.store.has(oid))) throw new VouchError('not_found', `object ${oid} is not in the local repository`, { cause: e });
      throw e;
    }
  }

  has(oid: string): Promise<boolean> {
    return this.store.has(oid);
  }

  async commit(oid: string): Promise<CommitHead> {
    const o = await this.read(oid);
    if (o.type !== 'commit') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a commit`);
    return parseCommitHead(o.body, oid);
  }

  /** Parsed tree; the few most recent are kept. */
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

/** One PushObjects per `cache` token (a ChainPusher keeps one across pushes), else a fresh one. */
const byCache = new WeakMap<object, PushObjects>();
export function pushObjects(gitdir: string, cache: object | undefined): PushObjects {
  if (!cache) return new PushObjects(new ObjectStore(gitdir));
  let o = byCache.get(cache);
  if (!o) byCache.set(cache, (o = new PushObjects(new ObjectStore(gitdir))));
  return o;
}

/** The commit the local `main` points at (loose ref, then packed-refs, as git resolves them; read asynchronously, as isomorphic-git did), or null when it has none. */
export async function localBranchHead(dir: string): Promise<string | null> {
  const gitdir = join(resolve(dir), '.git');
  try {
    const loose = (await readFile(join(gitdir, BRANCH_REF), 'latin1')).trim();
    if (OID_RE.test(loose)) return loose;
  } catch {
    /* no loose ref: packed-refs */
  }
  let packed: string;
  try {
    packed = await readFile(join(gitdir, 'packed-refs'), 'utf8');
  } catch {
    return null;
  }
  for (const line of packed.split('\n')) {
    const [oid, name] = line.split(' ');
    if (name === BRANCH_REF && oid !== undefined && OID_RE.test(oid)) return oid;
  }
  return null;
}

/**
 * Commits on the first-parent chain from `from` back to `stopAt` (exclusive),
 * newest first. `found` is false when the walk reached a root commit (or
 * `cap` commits) without meeting `stopAt` (when `stopAt` is null, reaching the
 * root is the goal and `found` is true).
 */
export async function firstParentChain(
  objects: PushObjects,
  from: string,
  stopAt: string | null,
  cap = Infinity,
): Promise<{ commits: CommitHead[]; found: boolean }> {
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

/**
 * What to send for `commits` (newest first, each the first parent's child):
 * per commit, the commit and the tree entries that differ from its parent's
 * tree, recursively. Subtrees equal (by oid) to the parent's at the same path
 * are already on the remote and are not opened.
 */
export async function objectsToSend(objects: PushObjects, commits: CommitHead[]): Promise<PackEntry[]> {
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
      else if (e.mode === GITLINK_MODE)
        continue; // a submodule's commit lives elsewhere
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
