/**
 * Hashing artifact bytes for the CLI: a local file (streamed), or a URL
 * fetched with a timeout, a size cap enforced while reading and a bounded
 * number of redirects.
 *
 * Must hold: memory stays bounded (bytes are hashed as they stream, never
 * collected); every failure is a VouchError with one clear line.
 */
import { createReadStream } from 'node:fs';
import { VouchError } from '../chain/errors.ts';
import type { HashAlgorithm } from '../chain/crypto-backend.ts';
import { hexEncode } from '../chain/encoding.ts';
import { formatArtifactHash } from '../chain/hash-algorithms.ts';
import { nodeBackend } from './node-crypto.ts';

export interface DigestResult { artifactHash: string; bytes: number }

export async function digestFile(path: string, algorithm: HashAlgorithm): Promise<DigestResult> {
  const h = nodeBackend.createHash(algorithm);
  let bytes = 0;
  try {
    for await (const chunk of createReadStream(path)) {
      h.update(chunk as Buffer);
      bytes += (chunk as Buffer).length;
    }
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new VouchError('io_error', `cannot read ${path}: ${err.code === 'ENOENT' ? 'no such file' : err.code ?? err.message}`);
  }
  return { artifactHash: formatArtifactHash(algorithm, hexEncode(h.digest())), bytes };
}

export interface FetchLimits { timeoutMs: number; maxBytes: number; maxRedirects: number }

export const DEFAULT_FETCH_LIMITS: FetchLimits = { timeoutMs: 30_000, maxBytes: 2 * 1024 ** 3, maxRedirects: 5 };

export async function digestUrl(url: string, algorithm: HashAlgorithm, limits: FetchLimits = DEFAULT_FETCH_LIMITS): Promise<DigestResult> {
  const signal = AbortSignal.timeout(limits.timeoutMs);
  let current = url;
  try {
    for (let hop = 0; ; hop++) {
      const res = await fetch(current, { redirect: 'manual', signal });
      if (res.status >= 300 && res.status < 400 && res.headers.has('location')) {
        await res.body?.cancel();
        if (hop >= limits.maxRedirects) throw new VouchError('origin_error', `${url}: more than ${limits.maxRedirects} redirects`, { resource: url });
        current = new URL(res.headers.get('location')!, current).href;
        if (!/^https?:/.test(current)) throw new VouchError('origin_error', `${url}: redirect to a non-http(s) URL`, { resource: url });
        continue;
      }
      if (!res.ok || res.body === null) {
        await res.body?.cancel();
        throw new VouchError('origin_error', `${current}: HTTP ${res.status}`, { resource: url });
      }
      const declared = Number(res.headers.get('content-length') ?? NaN);
      if (declared > limits.maxBytes) throw new VouchError('too_large', `${current}: ${declared} bytes is over the ${limits.maxBytes}-byte limit`, { resource: url });
      const h = nodeBackend.createHash(algorithm);
      let bytes = 0;
      for await (const chunk of res.body) {
        bytes += chunk.length;
        if (bytes > limits.maxBytes) throw new VouchError('too_large', `${current}: more than ${limits.maxBytes} bytes`, { resource: url });
        h.update(chunk);
      }
      if (!Number.isNaN(declared) && declared !== bytes) throw new VouchError('origin_error', `${current}: body cut short (${bytes} of ${declared} bytes)`, { resource: url });
      return { artifactHash: formatArtifactHash(algorithm, hexEncode(h.digest())), bytes };
    }
  } catch (e) {
    if (e instanceof VouchError) throw e;
    const err = e as Error;
    if (err.name === 'TimeoutError') throw new VouchError('origin_timeout', `${url}: no complete answer within ${limits.timeoutMs / 1000} s`, { resource: url });
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new VouchError('origin_error', `${url}: ${cause?.code ?? cause?.message ?? err.message}`, { resource: url });
  }
}
