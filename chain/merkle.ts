/**
 * RFC 6962 / RFC 9162 Merkle tree hashing and proof verification: leaf
 * hash SHA-256(0x00 ‖ entry), node hash SHA-256(0x01 ‖ left ‖ right), the
 * reference root of a list, and the inclusion (RFC 9162 2.1.3.2) and
 * consistency (2.1.4.2) verifiers. Entry i of vouch's log is block i's
 * record hash.
 * Trusts: the injected `CryptoBackend`'s sha256.
 * Must hold: the verifiers never throw: anything malformed (hash length,
 * unsafe integers, index >= size, proof length) answers false; as Go's
 * tlog.CheckTree, a consistency proof from an empty tree is refused, and
 * from = to needs an empty proof and equal roots.
 */
import type { CryptoBackend } from './crypto-backend.ts';

export type Hash = Uint8Array; // 32 bytes

export const HASH_SIZE = 32;
/** Longest proof any tree of at most 2^64 entries has (inclusion 64, consistency 2·64). */
const MAX_PROOF = 128;

// One scratch buffer for the one-shot path: 0x01 ‖ left ‖ right, or 0x00 ‖ entry32.
const scratch = new Uint8Array(1 + 2 * HASH_SIZE);
const scratchNode = scratch;
const scratchLeaf32 = scratch.subarray(0, 1 + HASH_SIZE);

function sha256(c: CryptoBackend, data: Uint8Array): Hash {
  if (c.digest) return c.digest('sha256', data);
  const h = c.createHash('sha256');
  h.update(data);
  return h.digest();
}

/** SHA-256(0x00 ‖ entry): RFC 6962 2.1 leaf hash. */
export function leafHash(c: CryptoBackend, entry: Uint8Array): Hash {
  if (c.digest && entry.length === HASH_SIZE) {
    scratch[0] = 0x00;
    scratch.set(entry, 1);
    return c.digest('sha256', scratchLeaf32);
  }
  const buf = new Uint8Array(1 + entry.length);
  buf.set(entry, 1);
  return sha256(c, buf);
}

/** SHA-256(0x01 ‖ left ‖ right): RFC 6962 2.1 interior node hash. */
export function nodeHash(c: CryptoBackend, left: Hash, right: Hash): Hash {
  scratchNode[0] = 0x01;
  scratchNode.set(left, 1);
  scratchNode.set(right, 1 + HASH_SIZE);
  if (c.digest) return c.digest('sha256', scratchNode);
  return sha256(c, scratchNode.slice());
}

/**
 * Node hash of the 64 bytes `pair` (left ‖ right) taken at `offset` in a
 * level buffer: the tree's append path, without making a view per hash.
 */
export function nodeHashOfPair(c: CryptoBackend, level: Uint8Array, offset: number): Hash {
  scratchNode[0] = 0x01;
  for (let i = 0; i < 2 * HASH_SIZE; i++) scratchNode[1 + i] = level[offset + i]!;
  if (c.digest) return c.digest('sha256', scratchNode);
  return sha256(c, scratchNode.slice());
}

/** Largest power of two strictly below n (n >= 2). */
export function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** RFC 6962 root of a list of entries (reference; O(n)). Empty list: SHA-256 of "". */
export function rootOfEntries(c: CryptoBackend, entries: readonly Uint8Array[]): Hash {
  if (entries.length === 0) return sha256(c, new Uint8Array(0));
  // Fold level by level; an odd last hash is carried up unchanged (RFC 6962's
  // split at the largest power of two gives exactly this tree).
  let level: Hash[] = entries.map((e) => leafHash(c, e));
  while (level.length > 1) {
    const next: Hash[] = [];
    for (let i = 0; i + 1 < level.length; i += 2) next.push(nodeHash(c, level[i]!, level[i + 1]!));
    if (level.length % 2 === 1) next.push(level[level.length - 1]!);
    level = next;
  }
  return level[0]!;
}

function isHash(h: unknown): h is Hash {
  return h instanceof Uint8Array && h.length === HASH_SIZE;
}

function isCount(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

function isProof(p: unknown): p is readonly Hash[] {
  return Array.isArray(p) && p.length <= MAX_PROOF && p.every(isHash);
}

export function equalHashes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}

const half = (n: number): number => Math.floor(n / 2);
const odd = (n: number): boolean => n % 2 === 1;

/** true iff `proof` proves leaf hash `leaf` at `index` in the tree of `size` with root `root`. Never throws. */
export function verifyInclusion(c: CryptoBackend, index: number, size: number, leaf: Hash, proof: readonly Hash[], root: Hash): boolean {
  try {
    if (!isCount(index) || !isCount(size) || index >= size) return false;
    if (!isHash(leaf) || !isHash(root) || !isProof(proof)) return false;
    // RFC 9162 2.1.3.2
    let fn = index;
    let sn = size - 1;
    let r: Hash = leaf;
    for (const p of proof) {
      if (sn === 0) return false;
      if (odd(fn) || fn === sn) {
        r = nodeHash(c, p, r);
        if (!odd(fn))
          while (!odd(fn) && fn !== 0) {
            fn = half(fn);
            sn = half(sn);
          }
      } else {
        r = nodeHash(c, r, p);
      }
      fn = half(fn);
      sn = half(sn);
    }
    return sn === 0 && equalHashes(r, root);
  } catch {
    return false;
  }
}

/** true iff `proof` proves the tree (`from`, `oldRoot`) is a prefix of (`to`, `newRoot`). from=0 or from=to rules as RFC 9162 / Go tlog.CheckTree. */
export function verifyConsistency(c: CryptoBackend, from: number, to: number, oldRoot: Hash, newRoot: Hash, proof: readonly Hash[]): boolean {
  try {
    if (!isCount(from) || !isCount(to) || from < 1 || from > to) return false;
    if (!isHash(oldRoot) || !isHash(newRoot) || !isProof(proof)) return false;
    if (from === to) return proof.length === 0 && equalHashes(oldRoot, newRoot);
    if (proof.length === 0) return false;
    // RFC 9162 2.1.4.2
    const path: readonly Hash[] = isPowerOfTwo(from) ? [oldRoot, ...proof] : proof;
    let fn = from - 1;
    let sn = to - 1;
    while (odd(fn)) {
      fn = half(fn);
      sn = half(sn);
    }
    let fr: Hash = path[0]!;
    let sr: Hash = path[0]!;
    for (let i = 1; i < path.length; i++) {
      const p = path[i]!;
      if (sn === 0) return false;
      if (odd(fn) || fn === sn) {
        fr = nodeHash(c, p, fr);
        sr = nodeHash(c, p, sr);
        if (!odd(fn))
          while (!odd(fn) && fn !== 0) {
            fn = half(fn);
            sn = half(sn);
          }
      } else {
        sr = nodeHash(c, sr, p);
      }
      fn = half(fn);
      sn = half(sn);
    }
    return sn === 0 && equalHashes(fr, oldRoot) && equalHashes(sr, newRoot);
  } catch {
    return false;
  }
}

function isPowerOfTwo(n: number): boolean {
  let k = 1;
  while (k < n) k *= 2;
  return k === n;
}
