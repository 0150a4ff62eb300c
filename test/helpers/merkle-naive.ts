/**
 * A naive recursive RFC 6962 / RFC 9162 Merkle tree, written straight from
 * the RFC's definitions (MTH, PATH, PROOF / SUBPROOF) with node:crypto's
 * sha256 and no code shared with chain/merkle*.ts: the reference the
 * differential tests compare the real tree and verifiers against. MTH is
 * remembered per leaves array and range (the same recursion, each subtree
 * hashed once), and handed out as a copy.
 */
import { createHash } from 'node:crypto';

const sha = (...parts: Uint8Array[]): Uint8Array => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};

export const naiveLeaf = (entry: Uint8Array): Uint8Array => sha(new Uint8Array([0]), entry);
export const naiveNode = (l: Uint8Array, r: Uint8Array): Uint8Array => sha(new Uint8Array([1]), l, r);

function k(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** MTH of D[lo:hi] of each leaves array already computed, by `lo * 2^32 + hi`; the arrays are never changed. */
const mthMemo = new WeakMap<readonly Uint8Array[], Map<number, Uint8Array>>();

/** MTH over leaf hashes D[lo:hi]. */
export function naiveMth(leaves: readonly Uint8Array[], lo = 0, hi = leaves.length): Uint8Array {
  return mth(leaves, lo, hi).slice();
}

function mth(leaves: readonly Uint8Array[], lo: number, hi: number): Uint8Array {
  const n = hi - lo;
  if (n === 0) return sha();
  if (n === 1) return leaves[lo]!;
  let memo = mthMemo.get(leaves);
  if (memo === undefined) mthMemo.set(leaves, (memo = new Map()));
  const key = lo * 2 ** 32 + hi;
  let h = memo.get(key);
  if (h === undefined) {
    const s = k(n);
    h = naiveNode(mth(leaves, lo, lo + s), mth(leaves, lo + s, hi));
    memo.set(key, h);
  }
  return h;
}

/** PATH(m, D[lo:hi]) */
export function naivePath(leaves: readonly Uint8Array[], m: number, lo = 0, hi = leaves.length): Uint8Array[] {
  const n = hi - lo;
  if (n === 1) return [];
  const s = k(n);
  if (m < s) return [...naivePath(leaves, m, lo, lo + s), naiveMth(leaves, lo + s, hi)];
  return [...naivePath(leaves, m - s, lo + s, hi), naiveMth(leaves, lo, lo + s)];
}

/** PROOF(m, D[lo:hi]) = SUBPROOF(m, D, true) */
export function naiveProof(leaves: readonly Uint8Array[], m: number, lo = 0, hi = leaves.length, b = true): Uint8Array[] {
  const n = hi - lo;
  if (m === n) return b ? [] : [naiveMth(leaves, lo, hi)];
  const s = k(n);
  if (m <= s) return [...naiveProof(leaves, m, lo, lo + s, b), naiveMth(leaves, lo + s, hi)];
  return [...naiveProof(leaves, m - s, lo + s, hi, false), naiveMth(leaves, lo, lo + s)];
}

/** Deterministic 32-byte entries (stand-ins for record hashes). */
export function entries(n: number): Uint8Array[] {
  return Array.from({ length: n }, (_, i) => sha(new TextEncoder().encode(`entry ${i}`)));
}

/** Length of PATH(m, D[n]) by the same recursion, without hashing. */
export function naivePathLength(m: number, n: number): number {
  if (n === 1) return 0;
  const s = k(n);
  return 1 + (m < s ? naivePathLength(m, s) : naivePathLength(m - s, n - s));
}

/** Length of SUBPROOF(m, D[n], b) by the same recursion, without hashing. */
export function naiveProofLength(m: number, n: number, b = true): number {
  if (m === n) return b ? 0 : 1;
  const s = k(n);
  return 1 + (m <= s ? naiveProofLength(m, s, b) : naiveProofLength(m - s, n - s, false));
}
