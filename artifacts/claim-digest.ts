/**
 * The hashes a submit's claims are checked with, and the endorsed hash,
 * all from ONE fetch of the artifact (never a claim checked on one fetch
 * and other bytes signed from another).
 *
 * Owns: the kinds: an artifact hash algorithm, `sha1` and `sha384` (old
 * npm integrity, pip pins), and Go's `h1:` (go-h1.ts; the file is spooled
 * to a private temporary directory, removed afterwards).
 * Trusts: `fetcher` for the bytes and its bounds. Must hold: every value is
 * of the same bytes; a failure is a VouchError and nothing partial is returned.
 */
import { createHash, type Hash } from 'node:crypto';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HashAlgorithm } from '../chain/crypto-backend.ts';
import { hexEncode } from '../chain/encoding.ts';
import { formatArtifactHash } from '../chain/hash-algorithms.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { goH1OfSpooled } from './go-h1.ts';
import type { OriginFetcher } from './origin-fetcher.ts';

/** What a claim is hashed under. */
export type ClaimKind = HashAlgorithm | 'sha1' | 'sha384' | 'h1';

/** Fetches `url` once and returns `<kind>:<hex>` (or `h1:<base64>`) for every kind asked. */
export async function claimDigestsUrl(
  url: string,
  kinds: readonly ClaimKind[],
  options: { fetcher: OriginFetcher; guardPrivate: boolean; signal?: AbortSignal },
): Promise<Map<ClaimKind, string>> {
  const hashers: [ClaimKind, { update(b: Uint8Array): void; hex(): string }][] = [];
  for (const k of new Set(kinds)) {
    if (k === 'h1') continue;
    if (k === 'sha1' || k === 'sha384') {
      const h: Hash = createHash(k);
      hashers.push([k, { update: (b) => h.update(b), hex: () => h.digest('hex') }]);
    } else {
      const h = nodeBackend.createHash(k);
      hashers.push([k, { update: (b) => h.update(b), hex: () => hexEncode(h.digest()) }]);
    }
  }
  const res = await options.fetcher.fetch(url, { guardPrivate: options.guardPrivate, ...(options.signal ? { signal: options.signal } : {}) });
  const out = new Map<ClaimKind, string>();
  const finish = () => {
    for (const [k, h] of hashers) out.set(k, k === 'sha1' || k === 'sha384' ? `${k}:${h.hex()}` : formatArtifactHash(k as HashAlgorithm, h.hex()));
  };
  if (!kinds.includes('h1')) {
    for await (const chunk of res.body) for (const [, h] of hashers) h.update(chunk as Uint8Array);
    finish();
    return out;
  }
  const dir = mkdtempSync(join(tmpdir(), 'vouch-claim-'));
  try {
    const file = join(dir, 'artifact');
    const sink = createWriteStream(file, { mode: 0o600 });
    try {
      for await (const chunk of res.body) {
        for (const [, h] of hashers) h.update(chunk as Uint8Array);
        if (!sink.write(chunk)) await once(sink, 'drain');
      }
    } finally {
      sink.end();
      await once(sink, 'close');
    }
    finish();
    out.set('h1', await goH1OfSpooled(file, url));
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
