/**
 * The completeness index's trie hash computed the slow, obvious way
 * (docs/spec/index.md): split the leaves at the first bit where they
 * differ, recursively. The reference the index-tree and index-layout tests
 * check the real tree against.
 */
import type { CryptoBackend } from '../../chain/crypto-backend.ts';
import { encodeEvent, foldEvent, leafHash, nodeHash, type IndexEvent } from '../../chain/index-tree.ts';

export interface NaiveLeaf {
  key: Uint8Array;
  events: IndexEvent[];
}

const bitOf = (k: Uint8Array, b: number) => (k[b >> 3]! >> (7 - (b & 7))) & 1;

/** The trie hash of these leaves (distinct keys, at least one), from bit `from` on. */
export function naiveTrie(c: CryptoBackend, ls: readonly NaiveLeaf[], from = 0): Uint8Array {
  if (ls.length === 1) {
    let acc: Uint8Array = new Uint8Array(32);
    for (const e of ls[0]!.events) acc = foldEvent(c, acc, encodeEvent(e));
    return leafHash(c, ls[0]!.key, ls[0]!.events.length, acc);
  }
  for (let b = from; b < 256; b++) {
    const l = ls.filter((x) => bitOf(x.key, b) === 0);
    const r = ls.filter((x) => bitOf(x.key, b) === 1);
    if (l.length > 0 && r.length > 0) return nodeHash(c, b, naiveTrie(c, l, b + 1), naiveTrie(c, r, b + 1));
  }
  throw new Error('duplicate keys');
}
