/**
 * The gateway's transparency-log view of its verified chain (issue 17): the
 * Merkle tree of block record hashes (chain/merkle-tree.ts), fed from the
 * index (`catchUp`); its image `.git/vouch-tree.bin` (named in the snapshot)
 * for warm starts; the committed checkpoint note as served (`setNote`:
 * opened with the authority key, root equal to the tree's, else
 * `checkpoint_mismatch`); `rootWith` for the submitter's next note.
 * Trusts: the index to hold verified blocks; its own image when it hashes
 * to what the snapshot says (a note that disagrees makes the caller rebuild).
 * Must hold: the tree never exceeds the index; a note is served only when
 * its signature and root check out.
 */
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { VouchError } from '../../chain/errors.ts';
import { base64Encode } from '../../chain/encoding.ts';
import type { CryptoBackend } from '../../chain/crypto-backend.ts';
import { equalHashes, leafHash, nodeHash, type Hash } from '../../chain/merkle.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { openCheckpoint, type Checkpoint } from '../../chain/tlog-checkpoint.ts';
import type { ChainIndex } from '../../chain/select.ts';

/** What the gateway's snapshot says of a tree image: the entries it holds and its sha256. */
export interface TreeImageRef {
  size: number;
  sha256: string;
}

/** A checkpoint note as served: its text and what it says. */
export interface ServedNote {
  text: string;
  checkpoint: Checkpoint;
}

export class LogTree {
  private _tree: MerkleTree;
  /** The image on disk (what the snapshot names). */
  image: TreeImageRef | null = null;
  private imageAt = 0;
  private imageWriting = false;
  private _note: ServedNote | null = null;

  constructor(
    private readonly c: CryptoBackend,
    private readonly imagePath: string | null,
  ) {
    this._tree = new MerkleTree(c);
  }

  get tree(): MerkleTree {
    return this._tree;
  }

  get size(): number {
    return this._tree.size;
  }

  get note(): ServedNote | null {
    return this._note;
  }

  /** Drops every entry (the index was rebuilt from nothing). */
  reset(): void {
    this._tree = new MerkleTree(this.c);
  }

  /** Makes room for a tree of `size` entries (a cold start: the chain's size is known before its blocks are). */
  reserve(size: number): void {
    this._tree.reserve(size);
  }

  /** Appends the record hashes of the blocks the index holds and the tree does not yet. */
  catchUp(index: ChainIndex): void {
    if (this._tree.size > index.size) this.reset();
    for (let i = this._tree.size; i < index.size; i++) this._tree.append(index.recordHashBytes(i));
  }

  /**
   * Reads the image `ref` names when it hashes to its sha256 and holds at most
   * `maxSize` entries; true when the tree now holds it (else it is empty).
   */
  loadImage(ref: TreeImageRef | null | undefined, maxSize: number): boolean {
    this.reset();
    this.image = null;
    if (this.imagePath === null || !ref || !(ref.size > 0 && ref.size <= maxSize)) return false;
    try {
      const bytes = readFileSync(this.imagePath);
      if (createHash('sha256').update(bytes).digest('hex') !== ref.sha256) return false;
      const tree = MerkleTree.fromImage(this.c, bytes);
      if (tree.size !== ref.size) return false;
      this._tree = tree;
      this.image = { size: ref.size, sha256: ref.sha256 };
      this.imageAt = Date.now();
      return true;
    } catch {
      return false;
    }
  }

  /** Writes the image now (end of a load); an optimisation only, failures are ignored. */
  writeImageNow(): void {
    if (this.imagePath === null || this.image?.size === this._tree.size) return;
    const bytes = this._tree.toImage();
    const tmp = `${this.imagePath}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, bytes);
      renameSync(tmp, this.imagePath);
      this.image = { size: this._tree.size, sha256: createHash('sha256').update(bytes).digest('hex') };
      this.imageAt = Date.now();
    } catch {
      // An optimisation only.
    }
  }

  /**
   * After appends: a new image in the background once `policy.blocks`
   * entries are not in the last one (or it is `policy.ms` old and some are
   * not); `written` is called (to rewrite the snapshot) once it is in place.
   */
  maybeWriteImage(policy: { blocks: number; ms: number }, written: () => void): void {
    const behind = this._tree.size - (this.image?.size ?? 0);
    if (this.imageWriting || this.imagePath === null || behind <= 0) return;
    if (behind < policy.blocks && Date.now() - this.imageAt < policy.ms) return;
    this.imageWriting = true;
    const path = this.imagePath;
    setImmediate(() => {
      const size = this._tree.size;
      const bytes = this._tree.toImage();
      const sha256 = createHash('sha256').update(bytes).digest('hex');
      const tmp = `${path}.${process.pid}.tmp`;
      writeFile(tmp, bytes)
        .then(() => {
          renameSync(tmp, path);
          this.image = { size, sha256 };
          this.imageAt = Date.now();
          written();
        })
        .catch(() => {})
        .finally(() => {
          this.imageWriting = false;
        });
    });
  }

  /**
   * Opens `text` (a committed checkpoint.note) as a note to serve once the
   * tree holds `pending` (record hashes about to be appended) too: it must
   * carry the signature of `authorityKey` (the online key in force at its
   * size, docs/spec/key-events.md; other lines, a rollover's previous key or
   * witnesses, are not judged) under its origin, name at most that many
   * entries, and have the tree's root at its size.
   * @throws VouchError checkpoint_mismatch
   */
  openNote(text: string, authorityKey: Uint8Array, pending: readonly Uint8Array[] = []): ServedNote {
    const { checkpoint } = openCheckpoint(this.c, text, { publicKey: authorityKey });
    const n = this._tree.size;
    if (checkpoint.size > n + pending.length) {
      throw new VouchError(
        'checkpoint_mismatch',
        `checkpoint_mismatch: checkpoint.note names ${checkpoint.size} entries, the verified chain has ${n + pending.length}`,
        { index: null },
      );
    }
    const root = checkpoint.size <= n ? this._tree.root(checkpoint.size) : this.rootWith(pending.slice(0, checkpoint.size - n));
    if (!equalHashes(checkpoint.root, root)) {
      throw new VouchError(
        'checkpoint_mismatch',
        `checkpoint_mismatch: checkpoint.note's root at size ${checkpoint.size} is not the Merkle root of the verified chain's record hashes`,
        {
          index: null,
          evidence: { size: checkpoint.size, note_root: base64Encode(checkpoint.root), tree_root: base64Encode(root) },
        },
      );
    }
    return { text, checkpoint };
  }

  /** Serves `note` (from `openNote`, checked against this tree or one it since grew into), or none. */
  serve(note: ServedNote | null): void {
    if (note !== null && note.checkpoint.size > this._tree.size) throw new RangeError('a note beyond the tree');
    this._note = note;
  }

  /**
   * The root of the tree with `entries` (32-byte record hashes) appended,
   * the tree left as it is: O(log n + entries) hashes. The tree's right
   * border (one complete subtree a set bit of its size) is read off the
   * inclusion proof of its last leaf, the new leaves are merged onto it, and
   * the border is folded right to left (RFC 6962 MTH).
   */
  rootWith(entries: readonly Uint8Array[]): Hash {
    const n = this._tree.size;
    if (entries.length === 0) return this._tree.root(n);
    const border: { hash: Hash; width: number }[] = [];
    if (n > 0) {
      const proof = this._tree.inclusionProof(n - 1, n);
      let t = 0; // the last complete subtree has 2^t leaves: t = the lowest set bit of n
      while (Math.floor(n / 2 ** t) % 2 === 0) t++;
      let last = this._tree.leafHashAt(n - 1);
      for (let i = 0; i < t; i++) last = nodeHash(this.c, proof[i]!, last);
      // The rest of the path: the other complete subtrees, smallest first.
      const widths: number[] = [];
      for (let b = 52; b > t; b--) if (Math.floor(n / 2 ** b) % 2 === 1) widths.push(2 ** b);
      const rest = proof.slice(t).reverse();
      if (rest.length !== widths.length) throw new Error(`tree border: ${rest.length} hashes for ${widths.length} subtrees`);
      rest.forEach((hash, i) => border.push({ hash, width: widths[i]! }));
      border.push({ hash: last, width: 2 ** t });
    }
    for (const e of entries) {
      let node = { hash: leafHash(this.c, e), width: 1 };
      while (border.length > 0 && border[border.length - 1]!.width === node.width) {
        const left = border.pop()!;
        node = { hash: nodeHash(this.c, left.hash, node.hash), width: 2 * node.width };
      }
      border.push(node);
    }
    let acc = border[border.length - 1]!.hash;
    for (let i = border.length - 2; i >= 0; i--) acc = nodeHash(this.c, border[i]!.hash, acc);
    return acc;
  }
}
