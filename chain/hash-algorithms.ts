/**
 * The artifact hash algorithms of docs/spec/design.md §1.4 and the `<algorithm>:<hex>`
 * form of `artifact_hash`.
 *
 * Must hold: one registry. An algorithm is known here or nowhere; digest
 * lengths are exact; digests are lowercase hex.
 */
import type { HashAlgorithm } from './crypto-backend.ts';

export const HASH_ALGORITHMS: Readonly<Record<HashAlgorithm, { hexLength: number }>> = {
  sha256: { hexLength: 64 },
  sha512: { hexLength: 128 },
  'sha3-256': { hexLength: 64 },
  blake3: { hexLength: 64 },
};

export const DEFAULT_HASH_ALGORITHM: HashAlgorithm = 'sha256';

export function isHashAlgorithm(name: string): name is HashAlgorithm {
  return Object.hasOwn(HASH_ALGORITHMS, name);
}

export interface ArtifactHash {
  algorithm: HashAlgorithm;
  hex: string;
}

/**
 * Parses `<algorithm>:<lowercase hex digest>`. Returns the reason as a string
 * when the value is not acceptable (for `bad_artifact_hash` messages).
 */
export function parseArtifactHash(value: string): ArtifactHash | string {
  const colon = value.indexOf(':');
  if (colon <= 0) return 'artifact_hash is not <algorithm>:<hex>';
  const algorithm = value.slice(0, colon);
  const hex = value.slice(colon + 1);
  if (!isHashAlgorithm(algorithm)) return `unknown hash algorithm ${JSON.stringify(algorithm)}`;
  if (!/^[0-9a-f]*$/.test(hex)) return 'digest is not lowercase hex';
  const want = HASH_ALGORITHMS[algorithm].hexLength;
  if (hex.length !== want) return `${algorithm} digest has ${hex.length} hex digits, expected ${want}`;
  return { algorithm, hex };
}

export function formatArtifactHash(algorithm: HashAlgorithm, hex: string): string {
  return `${algorithm}:${hex}`;
}
