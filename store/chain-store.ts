/**
 * The authority's view of a chain repository: the glue between the pure
 * chain core (`chain/`) and the git module (`store/chain-repo.ts`).
 *
 * Owns: commit messages (DESIGN 2), the cheap trusted-head check an append
 * starts from, and appending signed blocks with their checkpoint.
 * Must hold: nothing is appended after a head that does not check out: the
 * head block must hash to what the checkpoint signed, and the signing key
 * must be the chain's authority.
 */
import { VouchError } from '../chain/errors.ts';
import { type Block, type Checkpoint, formatBlockFile, formatCheckpointFile, parseBlockText, parseCheckpoint } from '../chain/block.ts';
import { checkpointMessage, computeRecordHash } from '../chain/build.ts';
import { base64Decode, base64Encode } from '../chain/encoding.ts';
import type { Signer } from '../chain/crypto-backend.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { ChainRepo, type CommitInfo } from './chain-repo.ts';

/** `block <i>: <intent> <uns> <semver>` with the URLs in the body (DESIGN 2). */
export function commitFor(blocks: readonly Block[], timestampMs: number): CommitInfo {
  const line = (b: Block) => `block ${b.index}: ${b.payload.intent} ${b.payload.uns} ${b.payload.semver}`;
  const urls = (b: Block) => b.payload.endorsements.map((e) => e.artifact_url);
  let message: string;
  if (blocks.length === 1) {
    const b = blocks[0]!;
    const body = b.payload.intent === 'revoke' ? [`revokes ${b.payload.target_hash}`] : urls(b);
    message = line(b) + (body.length ? '\n\n' + body.join('\n') : '') + '\n';
  } else {
    const first = blocks[0]!;
    const last = blocks[blocks.length - 1]!;
    message = `blocks ${first.index}-${last.index}: ${blocks.length} blocks\n\n` +
      blocks.map((b) => [line(b), ...urls(b).map((u) => `  ${u}`)].join('\n')).join('\n') + '\n';
  }
  const signer = blocks[0]!.signer;
  return {
    message,
    authorName: signer,
    authorEmail: `${signer.replace(/[^A-Za-z0-9._-]/g, '_')}@vouch.invalid`,
    timestamp: Math.floor(timestampMs / 1000),
  };
}

export interface TrustedHead { head: Block; authority: Block; checkpoint: Checkpoint }

/**
 * The head block, checked in constant time against the signed checkpoint
 * and the signer's key (the authority block must name this key).
 */
export function trustedHead(repo: ChainRepo, signer: Signer): TrustedHead {
  const authority = parseBlockText(repo.readBlockFile(0), 0);
  const a = authority.payload.authority!;
  if (a.public_key !== base64Encode(signer.publicKey)) {
    throw new VouchError('key_error', `this key is not the chain's authority key (${a.public_key})`);
  }
  if (a.signer !== signer.id) {
    throw new VouchError('key_error', `the chain's authority signer is ${JSON.stringify(a.signer)}, not ${JSON.stringify(signer.id)}`);
  }
  const cpText = repo.readCheckpoint();
  if (cpText === null) throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: the chain has no checkpoint.json', { index: null });
  let cp: Checkpoint;
  try {
    cp = parseCheckpoint(JSON.parse(cpText));
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: checkpoint.json is not JSON', { index: null });
  }
  const sig = base64Decode(cp.signature);
  if (sig === null || !nodeBackend.verify(signer.publicKey, checkpointMessage(cp), sig)) {
    throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: the checkpoint is not signed by this authority', { index: null });
  }
  if (cp.size !== repo.size) {
    throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: checkpoint says ${cp.size} blocks, the repository has ${repo.size}`, { index: null });
  }
  const head = parseBlockText(repo.readBlockFile(cp.size - 1), cp.size - 1);
  if (head.record_hash !== cp.head || computeRecordHash(head, nodeBackend) !== cp.head) {
    throw new VouchError('record_hash_mismatch', `record_hash_mismatch at block ${head.index}: the head block is not the one the checkpoint signed`, { index: head.index });
  }
  return { head, authority, checkpoint: cp };
}

/** What one append committed: the commit, and the block and checkpoint texts exactly as they are on the branch. */
export interface Committed {
  commit: string;
  blockTexts: string[];
  checkpointText: string;
}

/**
 * Appends signed blocks and the checkpoint of the new head in one commit.
 * Resolves with the texts committed, so a caller can take in the new state
 * from what the branch holds even when the working tree lags behind it.
 */
export async function appendSigned(repo: ChainRepo, blocks: readonly Block[], checkpoint: Checkpoint, nowMs: number): Promise<Committed> {
  const files = blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) }));
  const checkpointText = formatCheckpointFile(checkpoint);
  const { commit } = await repo.append(files, checkpointText, commitFor(blocks, nowMs));
  return { commit, blockTexts: files.map((f) => f.content), checkpointText };
}

/**
 * Every earlier endorsement of the given URLs (oldest first), by scanning
 * block files. Files that cannot mention a URL are skipped without parsing.
 */
export function findEndorsements(repo: ChainRepo, urls: readonly string[]): Map<string, { block: Block; artifactHash: string; semver: string }[]> {
  const out = new Map<string, { block: Block; artifactHash: string; semver: string }[]>(urls.map((u) => [u, []]));
  const needles = urls.map((u) => JSON.stringify(u));
  for (let i = 1; i < repo.size; i++) {
    const text = repo.readBlockFile(i);
    if (!needles.some((n) => text.includes(n))) continue;
    const block = parseBlockText(text, i);
    if (block.payload.intent !== 'endorse') continue;
    for (const e of block.payload.endorsements) {
      out.get(e.artifact_url)?.push({ block, artifactHash: e.artifact_hash, semver: e.semver });
    }
  }
  return out;
}
