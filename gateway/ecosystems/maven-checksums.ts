/**
 * The checksum side files of the Maven route (`.md5`, `.sha1`, `.sha256`,
 * `.sha512`), made from verified bytes: the digest of an artifact the
 * mirror handed out after its hash check, kept by its signed artifact_hash.
 *
 * Owns: hashing a verified artifact (in memory or a file) under Maven's
 * algorithms, and the small cache of those digests.
 * Trusts: the caller to pass only an artifact `ArtifactSource.obtain`
 * resolved (bytes that hashed to the signed artifact_hash): a digest is
 * kept under that hash and handed to every later asker.
 * Must hold: a checksum answered never comes from the origin's side file.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { LRUCache } from 'lru-cache';
import type { StoredArtifactLike } from '../context.ts';

export type ChecksumAlgorithm = 'md5' | 'sha1' | 'sha256' | 'sha512';
export const CHECKSUM_ALGORITHMS: readonly ChecksumAlgorithm[] = ['md5', 'sha1', 'sha256', 'sha512'];

/** Digests kept (a few hundred bytes each with their keys). */
const kept = new LRUCache<string, string>({ max: 20_000 });

/** A digest already known for a signed artifact_hash: kept, or the signed hash itself when it is of that algorithm. */
export function knownDigest(artifactHash: string, algorithm: ChecksumAlgorithm): string | null {
  if (artifactHash.startsWith(`${algorithm}:`)) return artifactHash.slice(algorithm.length + 1);
  return kept.get(`${artifactHash} ${algorithm}`) ?? null;
}

/** The lower-case hex digest of a verified artifact's bytes (read from its file when not in memory), kept under `artifactHash`. */
export async function digestOfVerified(artifact: StoredArtifactLike, artifactHash: string, algorithm: ChecksumAlgorithm): Promise<string> {
  const h = createHash(algorithm);
  if (artifact.bytes !== undefined) h.update(artifact.bytes);
  else if (artifact.path !== undefined) for await (const chunk of createReadStream(artifact.path)) h.update(chunk as Buffer);
  else throw new TypeError('a verified artifact without bytes or a path');
  const hex = h.digest('hex');
  kept.set(`${artifactHash} ${algorithm}`, hex);
  return hex;
}

/** The hex digests of a small text under every checksum algorithm (for metadata the route writes itself). */
export function digestsOfText(text: string | Buffer): Record<ChecksumAlgorithm, string> {
  const out = {} as Record<ChecksumAlgorithm, string>;
  for (const a of CHECKSUM_ALGORITHMS) out[a] = createHash(a).update(text).digest('hex');
  return out;
}
