/**
 * The completeness index (docs/spec/index.md) an offline writer (`vouch
 * endorse`, `revoke`, `reendorse`, `root apply`) commits in the note it
 * signs, as the gateway does: from the image a gateway over this directory
 * last wrote (gateway/chain/verified-state.ts `lastVerifiedCompleteness`), tied to
 * the chain by its last block's record hash and the chain index image for
 * revoke targets, plus the block files after it; else from every block file
 * (store/chain-append.ts `scanIndexRootWith`).
 * Trusts: the local disk as much as the chain directory (as the full scan).
 * Must hold: the same root as the index built from every block file.
 */
import { parseBlockText } from '../chain/block.ts';
import { indexFactsOf } from '../chain/index-facts.ts';
import { ChainIndex } from '../chain/select.ts';
import type { CompletenessIndex } from '../chain/index-tree.ts';
import { lastVerifiedCompleteness, lastVerifiedImage } from '../gateway/chain/verified-state.ts';
import type { ChainReads } from '../store/chain-api.ts';
import { type IndexRootWith, scanIndexRootWith } from '../store/chain-append.ts';

/** The index and revoke-target lookup from the gateway's images and the block files after them; null when they do not fit this chain. */
function fromImages(repo: ChainReads): { idx: CompletenessIndex; targetOf: (h: string) => number } | null {
  const found = lastVerifiedCompleteness(repo.dir);
  const image = lastVerifiedImage(repo.dir);
  if (found === null || image === null || found.size > repo.size || image.size > repo.size) return null;
  const read = (i: number) => parseBlockText(repo.readBlockFile(i), i);
  if (read(found.size - 1).record_hash !== found.head) return null;
  const chain = ChainIndex.fromImage(image.image, { reader: read });
  const last = read(image.size - 1);
  if (chain.size !== image.size || chain.indexOfHash(last.record_hash) !== image.size - 1) return null;
  // the chain index up to the head, for revoke targets; the completeness index up to the head
  for (let i = chain.size; i < repo.size; i++) chain.addFacts(indexFactsOf(read(i)));
  const targetOf = (h: string) => chain.indexOfHash(h);
  const idx = found.index;
  for (let i = idx.size; i < repo.size; i++) idx.addBlock(read(i), targetOf);
  return { idx, targetOf };
}

/** The completeness root once given blocks follow the chain in `repo` (built on the first call). */
export function offlineIndexRootWith(repo: ChainReads): IndexRootWith {
  let fn: IndexRootWith | null = null;
  return (blocks) => {
    if (fn === null) {
      let got: ReturnType<typeof fromImages> = null;
      try {
        got = fromImages(repo);
      } catch {
        got = null; // an image that does not read: the block files decide
      }
      if (got === null) fn = scanIndexRootWith(repo);
      else {
        const { idx, targetOf } = got;
        fn = (b) => idx.rootWith(b, targetOf);
      }
    }
    return fn(blocks);
  };
}
