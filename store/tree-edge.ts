/**
 * The right edge of the chain's RFC 6962 Merkle tree (a compact range of
 * [0, size): one subtree hash per set bit, at most 53) and its file
 * `.git/vouch-tree-edge`: an append computes the new root (what
 * `checkpoint.note` signs) in O(log n) without reading the chain, and
 * `vouch verify` folds every block into one in constant memory.
 * Owns: `TreeEdge`, its text form and its file.
 * Trusts: chain/merkle.ts; nothing read from the file: callers use an edge
 * only once its root equals the committed signed note's (`edgeMatches`).
 * Must hold: `root()` equals `rootOfEntries` of the entries appended;
 * `rootWith` leaves the edge as it is.
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import type { CryptoBackend } from '../chain/crypto-backend.ts';
import { base64Decode, base64Encode, bytesEqual } from '../chain/encoding.ts';
import { HASH_SIZE, type Hash, leafHash, nodeHash } from '../chain/merkle.ts';
import { imageEdge } from '../chain/merkle-tree.ts';

/** Where the edge of the chain's head is kept (an optimisation: checked against the signed note before use). */
export const EDGE_FILE = 'vouch-tree-edge';
const EDGE_MAGIC = 'vouch-tree-edge v1';

/** The tree's view the edge is read off (chain/merkle-tree.ts MerkleTree). */
export interface TreeLike {
  readonly size: number;
  inclusionProof(index: number, size: number): Hash[];
  leafHashAt(index: number): Hash;
}

function popcount(n: number): number {
  let c = 0;
  for (let m = n; m > 0; m = Math.floor(m / 2)) c += m % 2;
  return c;
}

export class TreeEdge {
  private constructor(
    private readonly c: CryptoBackend,
    private n: number,
    private readonly hashes: Hash[],
  ) {}

  /** The edge of the empty tree. */
  static empty(c: CryptoBackend): TreeEdge {
    return new TreeEdge(c, 0, []);
  }

  /**
   * The edge of a whole tree, in O(log n): the inclusion proof of its last
   * leaf is the edge of size-1 (its complete subtrees, smallest first), and
   * the last leaf is then folded onto it.
   */
  static fromTree(c: CryptoBackend, tree: TreeLike): TreeEdge {
    const n = tree.size;
    if (n === 0) return TreeEdge.empty(c);
    const proof = tree.inclusionProof(n - 1, n);
    if (proof.length !== popcount(n - 1)) throw new RangeError(`tree edge: ${proof.length} hashes for size ${n - 1}`);
    const edge = new TreeEdge(c, n - 1, proof.slice().reverse());
    edge.appendLeafHash(tree.leafHashAt(n - 1));
    return edge;
  }

  /**
   * The edge of the tree whose image (chain/merkle-tree.ts `toImage`) is
   * `image`, read off it in O(log n); null when it does not have an
   * image's shape. Trusted for its hashes as far as the caller trusts the
   * image (gateway/chain/verified-state.ts `lastVerifiedTreeEdge`: the one the
   * gateway's snapshot names, by sha256).
   */
  static fromImage(c: CryptoBackend, image: Uint8Array): TreeEdge | null {
    const e = imageEdge(image);
    return e === null ? null : new TreeEdge(c, e.size, e.hashes);
  }

  /** Entries of the tree this is the edge of. */
  get size(): number {
    return this.n;
  }

  /** Appends entry `size` (a block's 32-byte record hash). */
  append(entry: Uint8Array): void {
    this.appendLeafHash(leafHash(this.c, entry));
  }

  appendLeafHash(leaf: Hash): void {
    let h = leaf;
    // Each trailing set bit of the old size is a complete subtree the new leaf's closes.
    for (let m = this.n; m % 2 === 1; m = (m - 1) / 2) h = nodeHash(this.c, this.hashes.pop()!, h);
    this.hashes.push(h);
    this.n++;
  }

  /** RFC 6962 root of the tree (SHA-256 of nothing when empty). */
  root(): Hash {
    if (this.n === 0) {
      if (this.c.digest) return this.c.digest('sha256', new Uint8Array(0));
      return this.c.createHash('sha256').digest();
    }
    let acc = this.hashes[this.hashes.length - 1]!;
    for (let i = this.hashes.length - 2; i >= 0; i--) acc = nodeHash(this.c, this.hashes[i]!, acc);
    return acc;
  }

  /** The root once `entries` are appended; this edge is left as it is. */
  rootWith(entries: Iterable<Uint8Array>): Hash {
    const e = this.clone();
    for (const x of entries) e.append(x);
    return e.root();
  }

  clone(): TreeEdge {
    return new TreeEdge(this.c, this.n, this.hashes.slice());
  }

  /** `vouch-tree-edge v1`, the size, then one base64 hash a line, largest subtree first. */
  toText(): string {
    return [EDGE_MAGIC, String(this.n), ...this.hashes.map((h) => base64Encode(h))].join('\n') + '\n';
  }

  /** Inverse of toText; null for anything that is not exactly an edge's shape. */
  static parse(c: CryptoBackend, text: string): TreeEdge | null {
    const lines = text.split('\n');
    if (lines.pop() !== '' || lines[0] !== EDGE_MAGIC || !/^(0|[1-9][0-9]{0,15})$/.test(lines[1] ?? '')) return null;
    const n = Number(lines[1]);
    if (!Number.isSafeInteger(n) || lines.length - 2 !== popcount(n)) return null;
    const hashes: Hash[] = [];
    for (const l of lines.slice(2)) {
      const h = base64Decode(l);
      if (h === null || h.length !== HASH_SIZE) return null;
      hashes.push(h);
    }
    return new TreeEdge(c, n, hashes);
  }
}

/** Whether `edge` is the edge of the tree a (verified) checkpoint of `size` and `root` names. */
export function edgeMatches(edge: TreeEdge | null, size: number, root: Uint8Array): edge is TreeEdge {
  return edge !== null && edge.size === size && bytesEqual(edge.root(), root);
}

/** The edge kept in `<dir>/.git`, or null when there is none or it is not one (never trusted unchecked: see edgeMatches). */
export function readEdgeFile(c: CryptoBackend, dir: string): TreeEdge | null {
  try {
    const text = fs.readFileSync(join(dir, '.git', EDGE_FILE), 'utf8');
    return text.length > 8192 ? null : TreeEdge.parse(c, text);
  } catch {
    return null;
  }
}

/** Keeps `edge` in `<dir>/.git` (temporary file + rename); an optimisation only, failures are ignored. */
export function writeEdgeFile(dir: string, edge: TreeEdge): void {
  const file = join(dir, '.git', EDGE_FILE);
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(tmp, edge.toText());
    fs.renameSync(tmp, file);
  } catch {
    try {
      fs.rmSync(tmp, { force: true });
    } catch {
      /* best effort */
    }
  }
}
