/**
 * Where a chain's files live in its repository, each path format beside its
 * bounds-checked parser: `blocks/<d[0:3]>/<d[3:6]>/<d>.json` (d the index,
 * 9 digits zero-padded; block 42 is `blocks/000/000/000000042.json`),
 * `checkpoint.json`, `checkpoint.note`, shard names (`\d{3}`), and the
 * largest index (999,999,999).
 * Trusts: nothing; pure (no fs, no network), runs in the browser too.
 * Must hold: `parseBlockPath(blockPath(i)) === i` for every index, and
 * `parseBlockPath` returns null for every other string; no tree holds more
 * than 1000 entries.
 */
import { VouchError } from './errors.ts';

/** The largest block index a path can name (nine digits). */
export const MAX_INDEX = 999_999_999;
/** Path of the checkpoint file, at the root of the repository. */
export const CHECKPOINT = 'checkpoint.json';
/** Path of the signed tlog checkpoint note (origin, size, RFC 6962 root), at the root beside checkpoint.json. */
export const CHECKPOINT_NOTE = 'checkpoint.note';
/** A shard directory's name: three digits. */
export const SHARD_RE = /^\d{3}$/;

/** Repository path of block `index`: `blocks/000/000/000000042.json`. */
export function blockPath(index: number): string {
  if (!Number.isSafeInteger(index) || index < 0 || index > MAX_INDEX) {
    throw new VouchError('bad_request', `block index ${String(index)} is not an integer in 0..${MAX_INDEX}`);
  }
  const d = String(index).padStart(9, '0');
  return `blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`;
}

/** The block index a repository path names, or null when it is not a well-formed block path. */
export function parseBlockPath(path: string): number | null {
  // `blocks/DDD/DDD/DDDDDDDDD.json`, the shard directories repeating the first six digits.
  // Character by character: it runs once per block file on every listing.
  if (path.length !== 29 || !path.startsWith('blocks/') || path.charCodeAt(10) !== 47 || path.charCodeAt(14) !== 47 || !path.endsWith('.json')) return null;
  let n = 0;
  for (let i = 15; i < 24; i++) {
    const c = path.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return null;
    n = n * 10 + c;
  }
  for (let i = 0; i < 3; i++) {
    if (path.charCodeAt(7 + i) !== path.charCodeAt(15 + i) || path.charCodeAt(11 + i) !== path.charCodeAt(18 + i)) return null;
  }
  return n;
}
