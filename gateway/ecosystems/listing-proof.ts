/**
 * The completeness proof a listing answer carries (docs/spec/index.md 11):
 * npm packuments, PyPI simple pages and Go `@v/list` / `@latest` answers get
 * the headers of chain/index-listing.ts `LISTING_HEADER` for their unit.
 * Owns: the header values and their size bounds (proof and note inline only
 * while they fit, the side route's path always).
 * Trusts: the chain state's index and served note.
 * Must hold: a proof is sent only against the note of the state the listing
 * was built from (the caller checks the state did not move); every value is
 * ASCII; the inline headers stay under LISTING_INLINE_MAX together.
 */
import { LISTING_HEADER } from '../../chain/index-listing.ts';
import type { ChainState } from '../chain/verified-state.ts';

/** Longest inline `Vouch-Index-Proof` (base64); past it the client fetches the side route. */
export const LISTING_PROOF_MAX = 3072;
/** Longest inline `Vouch-Index-Checkpoint` (base64 of the note); a note with many cosignatures goes by the side route. */
export const LISTING_NOTE_MAX = 3072;

/** The side route's path for a unit's proof (relative to the gateway's base URL). */
export function listingProofPath(unit: string): string {
  return `/v1/index/proof?unit=${encodeURIComponent(unit)}`;
}

/**
 * The headers for a listing of `unit` built from `state` as it is now; {}
 * when the served note commits no index or lags the index.
 */
export function listingHeaders(state: ChainState | null, unit: string): Record<string, string> {
  if (state === null) return {};
  const note = state.note;
  const text = state.servedCheckpointNote();
  const proof = state.indexProof('unit', unit);
  if (note === null || text === null || proof === null) return {};
  const headers: Record<string, string> = {
    [LISTING_HEADER.unit]: unit,
    [LISTING_HEADER.size]: String(note.checkpoint.size),
    [LISTING_HEADER.proofUrl]: listingProofPath(unit),
  };
  const p = Buffer.from(proof).toString('base64');
  const n = Buffer.from(text, 'utf8').toString('base64');
  if (p.length <= LISTING_PROOF_MAX && n.length <= LISTING_NOTE_MAX) {
    headers[LISTING_HEADER.proof] = p;
    headers[LISTING_HEADER.checkpoint] = n;
  }
  return headers;
}
