/**
 * Reading the committed `checkpoint.note` (issue 17) from a chain's working
 * tree, with the rules `checkpoint.json` is read by (store/chain-repo-files.ts
 * `readCheckpoint`): a regular file, bounded (a signed note is at most 1 MiB),
 * valid UTF-8.
 *
 * Trusts nothing it reads: the caller opens the note against the authority
 * key and the Merkle tree (gateway/log-tree.ts).
 * Must hold: a missing note is null (older chains have none); anything else
 * that is not a readable note is `checkpoint_mismatch` or `io_error`.
 */
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { MAX_NOTE_CHARS } from '../chain/note.ts';
import { bytesOf, readChainFile } from '../store/verify-worker-impl.ts';

export const CHECKPOINT_NOTE = 'checkpoint.note';

/** The working-tree checkpoint.note of the chain in `dir`, or null when there is none. */
export function readNoteFile(dir: string): string | null {
  const read = readChainFile(join(dir, CHECKPOINT_NOTE), MAX_NOTE_CHARS * 4);
  if (read.error !== null) {
    if (read.kind === 'missing') return null;
    if (read.kind === 'refused') throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT_NOTE} ${read.why}`, { index: null, resource: CHECKPOINT_NOTE });
    throw new VouchError('io_error', `cannot read ${CHECKPOINT_NOTE}: it ${read.why}`, { resource: CHECKPOINT_NOTE });
  }
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytesOf(read));
  } catch {
    throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${CHECKPOINT_NOTE} is not valid UTF-8`, { index: null, resource: CHECKPOINT_NOTE });
  }
}
