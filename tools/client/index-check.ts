/**
 * What a client checks of the completeness index (docs/spec/index.md 8):
 * the `Vouch-Index-Proof` of an answer against the `vouch-index/v1` root of
 * the checkpoint note it already verified, and that the answer is the one
 * the log's index selects.
 *
 * Owns: `indexRootOfNote`, `checkSelection` (downloads, lookups, 404s).
 * Trusts: the caller to pass a note it verified (signature, origin, policy,
 * consistency); chain/index-proof.ts for the proof.
 * Must hold: every refusal is a `Refusal` naming the check that failed
 * (`no_proof`, `bad_proof`, `index_mismatch`: an older block, a false 404, a
 * hidden revocation); a note without the line checks nothing (an older log).
 */
import { base64Decode } from '../../chain/encoding.ts';
import { parseNote } from '../../chain/note.ts';
import { parseCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { indexRootOf, selectFromEvents, verifyIndexProof } from '../../chain/index-proof.ts';
import type { CryptoBackend } from '../../chain/crypto-backend.ts';
import { Refusal } from './tlog-client.ts';

/** The index root a verified note commits, or null when it commits none. */
export function indexRootOfNote(noteText: string): Uint8Array | null {
  const root = indexRootOf(parseCheckpoint(parseNote(noteText).text).extensions);
  if (root !== null && 'malformed' in root) throw new Refusal('bad_checkpoint', `the checkpoint note: ${root.malformed}`);
  return root;
}

/**
 * Checks an answer for `url` against the index committed by the verified
 * note of size `size`: `served` is the block index the gateway answered
 * with (and whether it said it is revoked), or null for a 404.
 */
export function checkSelection(
  c: CryptoBackend,
  note: { text: string; size: number },
  url: string,
  q: { semver?: string | undefined; at?: string | undefined; today: string },
  proofB64: string | undefined,
  served: { index: number; revoked: boolean } | null,
  gateway: string,
): void {
  const root = indexRootOfNote(note.text);
  if (root === null) return;
  if (proofB64 === undefined) {
    throw new Refusal(
      'no_proof',
      `${gateway} sent no Vouch-Index-Proof though its checkpoint (size ${note.size}) commits a completeness index: nothing shows no newer block or revocation names this URL`,
    );
  }
  const bytes = base64Decode(proofB64.trim());
  if (bytes === null) throw new Refusal('bad_proof', `${gateway}: Vouch-Index-Proof is not base64`);
  const r = verifyIndexProof(c, bytes, 'url', url, { root, size: note.size });
  if (!r.ok) throw new Refusal('bad_proof', `${gateway}: ${r.reason}`);
  const sel = selectFromEvents(r.value.events, r.value.voids, q);
  const asked = `${url}${q.semver ? ` semver=${q.semver}` : ''}${q.at ? ` at=${q.at}` : ''}`;
  if (served === null) {
    if (sel !== null && (sel.revokedBy === null || q.semver !== undefined)) {
      throw new Refusal(
        'index_mismatch',
        `false 404: ${gateway} answers 404 for ${asked}, but the log's index at size ${note.size} selects block ${sel.block}`,
      );
    }
    return;
  }
  if (sel === null)
    throw new Refusal('index_mismatch', `${gateway} served block ${served.index} for ${asked}, but the log's index at size ${note.size} selects no block`);
  if (sel.block !== served.index) {
    throw new Refusal(
      'index_mismatch',
      `older block: ${gateway} served block ${served.index} for ${asked}, but the log's index at size ${note.size} selects block ${sel.block} (semver ${sel.semver})`,
    );
  }
  if (sel.revokedBy !== null && !served.revoked) {
    throw new Refusal(
      'index_mismatch',
      `hidden revocation: ${gateway} served block ${served.index} for ${asked} as usable, but block ${sel.revokedBy.block} revokes it from ${sel.revokedBy.date}`,
    );
  }
}
