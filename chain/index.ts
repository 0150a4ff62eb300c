/**
 * Public surface of `chain/`: the pure, portable chain core (formats, JCS,
 * hashing and signature interfaces, building, verification, selection, the
 * RFC 6962 Merkle tree over the chain and its proofs, signed notes, tlog
 * checkpoints and witness policies).
 * No fs, no network, no clock: it runs unchanged in a browser.
 */
export * from './errors.ts';
export * from './encoding.ts';
export * from './jcs.ts';
export * from './crypto-backend.ts';
export * from './hash-algorithms.ts';
export * from './block.ts';
export * from './schema.ts';
export * from './build.ts';
export * from './verify.ts';
export * from './select.ts';
export * from './revoke.ts';
export * from './key-events.ts';
export { isFullOrderPublicKey } from './weak-key.ts';
export * from './merkle.ts';
export * from './merkle-tree.ts';
export * from './note.ts';
// block.ts already exports `Checkpoint`/`parseCheckpoint` (checkpoint.json): the tlog ones are aliased here;
// import them from './tlog-checkpoint.ts' under their own names.
export {
  formatCheckpoint,
  openCheckpoint,
  signCheckpoint,
  parseCheckpoint as parseTlogCheckpoint,
  type Checkpoint as TlogCheckpoint,
} from './tlog-checkpoint.ts';
export * from './tlog-policy.ts';
