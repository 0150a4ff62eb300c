/**
 * The CLI's signed append (`vouch endorse`, `revoke`, `reendorse`, `root`):
 * blocks after a trusted head, with the checkpoint note of the new size
 * signed by the authority key the command holds. The authority's half of
 * an append; storage (store/chain-append.ts `appendSigned`) is handed the
 * note's signer and signs nothing itself.
 * Owns: the note's origin and root for a CLI append, and keeping the new
 * tree edge in `.git` for the next one.
 * Trusts: `trusted` (store/chain-append.ts `trustedHead`) and the signer to
 * be the key in force.
 * Must hold: a committed note opens with the key in force and names the
 * chain's size.
 */
import type { Block, Checkpoint } from '../chain/block.ts';
import type { Signer } from '../chain/crypto-backend.ts';
import { noteSigner } from '../platform/note-signer.ts';
import type { ChainStore } from '../store/chain-api.ts';
import {
  type Committed,
  type EdgeSeed,
  type EdgeSource,
  type IndexRootWith,
  type TrustedHead,
  appendSigned,
  defaultOrigin,
  entryOf,
  headEdge,
  noteOrigin,
  scanIndexRootWith,
  scanRecordHashes,
} from '../store/chain-append.ts';
import { indexExtensionLine } from '../chain/index-proof.ts';
import { writeEdgeFile } from '../store/tree-edge.ts';

/**
 * Appends signed blocks after a trusted head with the checkpoint note of the
 * new size: origin as `noteOrigin` says (default `vouch/<signer>`), root from
 * the head's tree edge (`headEdge`: the kept edge file when it agrees with
 * the committed note, else `seed`'s (`vouch endorse` hands over the edge of
 * the gateway's tree image and the record hashes after it), else
 * `recordHashes`: by default every block file's record hash; `vouch
 * endorse` hands over those of the verified index image it used) plus the
 * new blocks' record hashes; the new edge is kept for the next append. The
 * note carries the completeness index's `vouch-index/v1` line
 * (docs/spec/index.md 5), as the gateway's do: `indexRootWith` (the tools
 * hand over tools/offline-index.ts's, from the gateway's image when there is
 * one), else every block file's facts.
 */
export async function appendWithNote(
  repo: ChainStore,
  trusted: TrustedHead,
  signer: Signer,
  blocks: readonly Block[],
  checkpoint: Checkpoint,
  nowMs: number,
  recordHashes: () => Iterable<string> = () => scanRecordHashes(repo),
  seed?: EdgeSeed,
  indexRootWith: IndexRootWith = scanIndexRootWith(repo),
): Promise<Committed & { edgeSource: EdgeSource }> {
  const origin = noteOrigin(trusted.note, null, defaultOrigin(trusted.authority.signer));
  const { edge, source } = headEdge(repo, trusted.note, recordHashes, seed);
  const next = edge.clone();
  for (const b of blocks) next.append(entryOf(b.record_hash));
  const extensions = [indexExtensionLine(indexRootWith(blocks))];
  const committed = await appendSigned(repo, blocks, checkpoint, nowMs, { signer: noteSigner(signer), origin, root: next.root(), extensions });
  writeEdgeFile(repo.dir, next);
  return { ...committed, edgeSource: source };
}
