/**
 * The chain repository's reads: what branch main commits (`committedFiles`,
 * for verifiers), blocks read from git objects (the one layout keeps no
 * block file in the working tree), the root files. One part of
 * ./chain-repo.ts, over the shared ./repo-state.ts.
 * Owns: the read API of `ChainReads` (./chain-api.ts).
 * Trusts: the root files only through the bounded reader of
 * ./verify-worker-impl.ts (docs/spec/design.md §1.7 "Reading a chain").
 * Must hold: reads never write; a path that is not a block path of
 * chain/layout.ts is reported, never read as a block.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { LIMITS, utf8Text } from '../chain/block.ts';
import { CHECKPOINT, CHECKPOINT_NOTE, SHARD_RE, blockPath, parseBlockPath } from '../chain/layout.ts';
import { bytesOf, readChainFile } from './verify-worker-impl.ts';
import { TREE_MODE, type TreeEntry, isRegularMode, modeName, parseTree } from './git-objects.ts';
import type { BlockObjects, CommittedFiles } from './chain-api.ts';
import type { RepoState } from './repo-state.ts';

/** Largest checkpoint.note read (a signed note is at most 1 MiB: chain/note.ts MAX_NOTE_CHARS). */
const MAX_NOTE_BYTES = 1 << 20;

export class RepoReader {
  constructor(private readonly s: RepoState) {}

  // -------------------------------------------------------------------------
  // Reads

  /**
   * What branch main commits under `blocks/` and as `checkpoint.json`, read
   * from git objects (the trees of the head commit; no blob is read): the
   * blocks `vouch verify` and the gateway's cold start read, blob id by
   * blob id, and the checkpoint.json of the working tree is checked against.
   */
  async committedFiles(): Promise<CommittedFiles> {
    const root = this.s.dirs.get('')!;
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
          else await walk(this.s.dirs.get(path) ?? (await this.s.objects.readTree(e.oid)), path);
        } else {
          strays.push({ path, why: `is not a block file's path (on branch main${isRegularMode(e.mode) ? '' : `, ${modeName(e.mode)}`})` });
        }
      }
    };
    // A leaf shard `blocks/TTT/MMM` read straight from the tree's bytes, byte by byte in JS (its
    // ~1000 entries are nearly all blocks: no entry objects, strings or calls per entry); anything
    // unusual goes through `walk`.
    const leaf = async (oid: string, path: string): Promise<void> => {
      const o = await this.s.objects.read(oid);
      if (o.type !== 'tree') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a tree`);
      const body = o.body;
      const end = body.length;
      const base = Number(path.slice(7, 10)) * 1_000_000 + Number(path.slice(11, 14)) * 1000;
      const p0 = path.charCodeAt(7),
        p1 = path.charCodeAt(8),
        p2 = path.charCodeAt(9);
      const p3 = path.charCodeAt(11),
        p4 = path.charCodeAt(12),
        p5 = path.charCodeAt(13);
      const others: TreeEntry[] = [];
      let off = 0;
      while (off < end) {
        let sp = off;
        while (sp < end && body[sp] !== 0x20) sp++;
        let nul = sp + 1;
        while (nul < end && body[nul] !== 0) nul++;
        if (nul + 21 > end) throw new VouchError('io_error', `tree ${oid} is corrupt: truncated entry`);
        // `100644 DDDDDDDDD.json` (or 100755): a regular file whose name's first six digits are the shard's.
        let n = -1;
        if (
          sp - off === 6 &&
          nul - sp === 15 &&
          body[off] === 0x31 &&
          body[off + 1] === 0x30 &&
          body[off + 2] === 0x30 &&
          ((body[off + 3] === 0x36 && body[off + 4] === 0x34 && body[off + 5] === 0x34) ||
            (body[off + 3] === 0x37 && body[off + 4] === 0x35 && body[off + 5] === 0x35)) &&
          body[sp + 1] === p0 &&
          body[sp + 2] === p1 &&
          body[sp + 3] === p2 &&
          body[sp + 4] === p3 &&
          body[sp + 5] === p4 &&
          body[sp + 6] === p5 &&
          body[sp + 10] === 0x2e &&
          body[sp + 11] === 0x6a &&
          body[sp + 12] === 0x73 &&
          body[sp + 13] === 0x6f &&
          body[sp + 14] === 0x6e
        ) {
          const a = body[sp + 7]! - 48,
            b = body[sp + 8]! - 48,
            c = body[sp + 9]! - 48;
          if (a >= 0 && a <= 9 && b >= 0 && b <= 9 && c >= 0 && c <= 9) n = a * 100 + b * 10 + c;
        }
        if (n >= 0) add(base + n, body, nul + 1);
        else others.push({ mode: body.toString('latin1', off, sp), name: body.toString('utf8', sp + 1, nul), oid: body.toString('hex', nul + 1, nul + 21) });
        off = nul + 21;
      }
      if (others.length > 0) await walk(others, path);
    };
    const top = root.find((e) => e.name === 'blocks');
    if (top && top.mode === TREE_MODE) await walk(this.s.dirs.get('blocks') ?? (await this.s.objects.readTree(top.oid)), 'blocks');
    else if (top) strays.push({ path: 'blocks', why: `is ${modeName(top.mode)} on branch main, not a directory` });
    return {
      commit: this.s.head,
      count,
      checkpoint,
      strays,
      indexes: () => {
        const out: number[] = [];
        for (const shard of [...leaves.keys()].sort((a, b) => a - b)) {
          const src = leaves.get(shard)!.src;
          for (let k = 0; k < 1000; k++) if (src[k] !== undefined) out.push(shard * 1000 + k);
        }
        return out;
      },
      oidOf: (index) => {
        const l = leaves.get(Math.floor(index / 1000));
        const src = l?.src[index % 1000];
        if (src === undefined) return null;
        const at = l!.at[index % 1000]!;
        return src.toString('hex', at, at + 20);
      },
      copyOid: (index, out, to) => {
        const l = leaves.get(Math.floor(index / 1000));
        const src = l?.src[index % 1000];
        if (src === undefined) return false;
        const at = l!.at[index % 1000]!;
        out.set(src.subarray(at, at + 20), to);
        return true;
      },
    };
  }

  checkRange(index: number): string {
    const p = blockPath(index);
    if (index >= this.s.size) throw new VouchError('not_found', `block ${index} is not on the chain (size ${this.s.size})`, { index });
    return p;
  }

  /**
   * The text of block `index`, read from git objects (the one layout keeps
   * no block file in the working tree): `readBlockObject`.
   */
  readBlockFile(index: number): string {
    return this.readBlockObject(index, this.checkRange(index));
  }

  /**
   * The working-tree checkpoint text, or null when there is none; a link, a
   * file that is not regular or larger than 16 MiB, or not valid UTF-8 is
   * `checkpoint_mismatch`.
   */
  readCheckpoint(): string | null {
    const read = readChainFile(join(this.s.dir, CHECKPOINT), LIMITS.blockFileBytes);
    if (read.error !== null) {
      if (read.kind === 'missing') return null;
      if (read.kind === 'refused')
        throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT} ${read.why}`, { index: null, resource: CHECKPOINT });
      throw new VouchError('io_error', `cannot read ${CHECKPOINT}: it ${read.why}`, { resource: CHECKPOINT });
    }
    const text = utf8Text(bytesOf(read));
    if (text === null)
      throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT} is not valid UTF-8`, { index: null, resource: CHECKPOINT });
    return text;
  }

  /**
   * The working-tree `checkpoint.note` (the signed tlog checkpoint, issue
   * 17), or null when there is none (older chains); read by the rules of
   * `readCheckpoint`: a regular file of at most 1 MiB, valid UTF-8, else
   * `checkpoint_mismatch`.
   */
  readCheckpointNote(): string | null {
    const read = readChainFile(join(this.s.dir, CHECKPOINT_NOTE), MAX_NOTE_BYTES);
    if (read.error !== null) {
      if (read.kind === 'missing') return null;
      if (read.kind === 'refused')
        throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT_NOTE} ${read.why}`, { index: null, resource: CHECKPOINT_NOTE });
      throw new VouchError('io_error', `cannot read ${CHECKPOINT_NOTE}: it ${read.why}`, { resource: CHECKPOINT_NOTE });
    }
    const text = utf8Text(bytesOf(read));
    if (text === null)
      throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT_NOTE} is not valid UTF-8`, { index: null, resource: CHECKPOINT_NOTE });
    return text;
  }

  /**
   * The `checkpoint.note` branch main commits (from git objects, not the
   * working tree: what `vouch verify` checks), or null when the head has
   * none; a note that is not a regular file, larger than 1 MiB or not
   * valid UTF-8 is `checkpoint_mismatch`.
   */
  async committedNote(): Promise<string | null> {
    const e = this.s.dirs.get('')!.find((x) => x.name === CHECKPOINT_NOTE);
    if (e === undefined) return null;
    const bad = (why: string) =>
      new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT_NOTE} on branch main ${why}`, { index: null, resource: CHECKPOINT_NOTE });
    if (!isRegularMode(e.mode)) throw bad(`is ${modeName(e.mode)}, not a regular file`);
    const bytes = await this.s.objects.readBlob(e.oid);
    if (bytes.length > MAX_NOTE_BYTES) throw bad(`is larger than ${MAX_NOTE_BYTES} bytes`);
    const text = utf8Text(bytes);
    if (text === null) throw bad('is not valid UTF-8');
    return text;
  }

  /**
   * Block `index`'s text from git objects, synchronously (the sparse
   * layout's `readBlockFile`): its leaf tree (kept for the next reads of the
   * shard), then the blob, at most 16 MiB, strictly UTF-8.
   */
  readBlockObject(index: number, p: string): string {
    const e = this.blockEntry(index, p);
    const o = this.s.objects.readSync(e.oid);
    if (o.type !== 'blob') throw new VouchError('io_error', `object ${e.oid} (${p}) is a ${o.type}, expected a blob`);
    return strictBlockText(o.body, index, p);
  }

  /**
   * How the packs store the blob of every `step`-th block (issue 33): a
   * chain that went through `git clone`, `git gc` or a git server's pack
   * holds its block blobs as deltas of each other; one vouch packed holds
   * them whole. Counts blobs in no pack (loose) as neither.
   */
  blockStorage(samples: number): { sampled: number; deltas: number } {
    const n = this.s.size;
    const step = Math.max(1, Math.floor(n / Math.max(1, samples)));
    let sampled = 0;
    let deltas = 0;
    for (let i = 0; i < n && sampled < samples; i += step) {
      const d = this.s.objects.disk.storedAsDelta(this.blockEntry(i, this.checkRange(i)).oid);
      if (d === null) continue;
      sampled++;
      if (d) deltas++;
    }
    return { sampled, deltas };
  }

  /** The tree entry of block `index` (path `p`) on branch main, checked to be a regular file. */
  private blockEntry(index: number, p: string): TreeEntry {
    const leafPath = p.slice(0, 14);
    const current = this.s.dirs.get(leafPath); // the last shard: changes with every append
    let entry: TreeEntry | undefined;
    if (current) entry = current.find((x) => x.name === p.slice(15));
    else {
      const known = this.s.blobOids.get(index);
      if (known !== null) return { mode: '100644', name: p.slice(15), oid: known };
      let body = this.s.leaves.get(leafPath);
      if (!body) {
        let entries = this.s.dirs.get('')!;
        let oid = '';
        for (const [dirPath, name] of [
          ['blocks', 'blocks'],
          [p.slice(0, 10), p.slice(7, 10)],
          [leafPath, p.slice(11, 14)],
        ] as const) {
          const e: TreeEntry | undefined = entries.find((x) => x.name === name);
          if (!e || e.mode !== TREE_MODE) throw new VouchError('not_found', `${p} is not on branch main`, { index });
          oid = e.oid;
          if (dirPath !== leafPath) entries = this.s.dirs.get(dirPath) ?? this.treeSync(e.oid);
        }
        const o = this.s.objects.readSync(oid);
        if (o.type !== 'tree') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a tree`);
        body = o.body;
        if (this.s.leaves.size >= 16) this.s.leaves.delete(this.s.leaves.keys().next().value!);
        this.s.leaves.set(leafPath, body);
        this.s.blobOids.learnShard(index - (index % 1000), body);
      }
      // The ids the shard's tree yields by position were learnt with it (./blob-oids.ts); anything else by a strict reading.
      const learnt = this.s.blobOids.get(index);
      if (learnt !== null) return { mode: '100644', name: p.slice(15), oid: learnt };
      entry = parseTree(body, 'leaf').find((x) => x.name === p.slice(15));
    }
    const e = entry;
    if (!e) throw new VouchError('not_found', `${p} is not on branch main`, { index });
    if (!isRegularMode(e.mode))
      throw new VouchError('malformed', `malformed at block ${index}: ${p} is ${modeName(e.mode)} on branch main, not a regular file`, { index, resource: p });
    return e;
  }

  private treeSync(oid: string): TreeEntry[] {
    const o = this.s.objects.readSync(oid);
    if (o.type !== 'tree') throw new VouchError('not_a_chain', `object ${oid} is a ${o.type}, expected a tree`);
    return parseTree(o.body, oid);
  }

  /** Where the blocks' objects are, for a verifier reading them from the packs (the sparse layout). */
  blockObjects(): BlockObjects {
    return {
      packDir: join(this.s.gitdir, 'objects', 'pack'),
      where: (key) => this.s.objects.disk.where(key),
      read: (oid) => this.s.objects.readSync(oid),
    };
  }

  /** The text of block `index` from the branch's objects (audits, repair). */
  async readBlockFromGit(index: number): Promise<string> {
    const p = this.checkRange(index);
    const parts = p.split('/');
    let entries = this.s.dirs.get('')!;
    for (let k = 0; k < parts.length; k++) {
      const dirPath = parts.slice(0, k + 1).join('/');
      const e = entries.find((x) => x.name === parts[k]);
      if (!e) throw new VouchError('not_found', `${p} is not on branch main`, { index });
      if (k === parts.length - 1) return strictBlockText(await this.s.objects.readBlob(e.oid), index, p);
      entries = this.s.dirs.get(dirPath) ?? (await this.s.objects.readTree(e.oid));
    }
    throw new VouchError('not_found', `${p} is not on branch main`, { index });
  }
}

/** A directory's entries, or null when it cannot be listed (missing, not a directory, no access). */
export function direntsOf(dir: string): fs.Dirent[] | null {
  try {
    return fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return null;
  }
}

/** A block file's bytes from git as text: at most 16 MiB, strictly UTF-8, else `malformed` at `index`. */
export function strictBlockText(bytes: Buffer, index: number, path: string): string {
  const text = bytes.length > LIMITS.blockFileBytes ? null : utf8Text(bytes);
  if (text === null) {
    throw new VouchError(
      'malformed',
      `malformed at block ${index}: ${path} is ${bytes.length > LIMITS.blockFileBytes ? `larger than ${LIMITS.blockFileBytes} bytes` : 'not valid UTF-8'}`,
      { index, resource: path },
    );
  }
  return text;
}
