/**
 * Hashing artifact bytes: a local file, a URL (through the gateway's origin
 * fetcher: timeout, size cap enforced while reading, bounded redirects,
 * optional private-address guard), or any byte stream.
 *
 * Must hold: memory stays bounded (bytes are hashed as they stream, never
 * collected); every failure is a VouchError with one clear line.
 */
import { createReadStream } from 'node:fs';
import { VouchError } from '../chain/errors.ts';
import type { HashAlgorithm } from '../chain/crypto-backend.ts';
import { hexEncode } from '../chain/encoding.ts';
import { formatArtifactHash } from '../chain/hash-algorithms.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { OriginFetcher, type OriginLimits } from './origin-fetcher.ts';

export interface DigestResult {
  artifactHash: string;
  bytes: number;
}

/** Hashes a stream of bytes as `<algorithm>:<hex>`. */
export async function digestStream(body: AsyncIterable<Uint8Array>, algorithm: HashAlgorithm): Promise<DigestResult> {
  const h = nodeBackend.createHash(algorithm);
  let bytes = 0;
  for await (const chunk of body) {
    h.update(chunk);
    bytes += chunk.length;
  }
  return { artifactHash: formatArtifactHash(algorithm, hexEncode(h.digest())), bytes };
}

export async function digestFile(path: string, algorithm: HashAlgorithm): Promise<DigestResult> {
  try {
    return await digestStream(createReadStream(path), algorithm);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new VouchError('io_error', `cannot read ${path}: ${err.code === 'ENOENT' ? 'no such file' : (err.code ?? err.message)}`);
  }
}

/**
 * Fetches a URL with `fetcher` (or a one-off fetcher with `limits`) and
 * hashes the body. `guardPrivate` refuses loopback and private addresses.
 */
export async function digestUrl(
  url: string,
  algorithm: HashAlgorithm,
  options: { fetcher?: OriginFetcher; limits?: Partial<OriginLimits>; guardPrivate?: boolean; signal?: AbortSignal } = {},
): Promise<DigestResult> {
  // The command line fetches for its operator (no server-side request forgery to guard against): redirect hops may go anywhere.
  const fetcher = options.fetcher ?? new OriginFetcher({ allowPrivate: true, ...(options.limits ?? {}) });
  try {
    const res = await fetcher.fetch(url, { guardPrivate: options.guardPrivate ?? false, ...(options.signal ? { signal: options.signal } : {}) });
    return await digestStream(res.body, algorithm);
  } finally {
    if (!options.fetcher) await fetcher.close();
  }
}
