/**
 * Digests for `vouch endorse --lockfile`: several hashes of one byte stream
 * in one pass, and the hash notations lockfiles use (SRI for npm, pip's
 * `--hash=<alg>:<hex>`).
 *
 * Owns: which digest names are understood (the vouch algorithms of
 * chain/hash-algorithms.ts, plus sha1 and sha384 that lockfiles use only
 * for checking) and the choice of the algorithm an entry is endorsed with.
 * Must hold: a digest is lowercase hex; SRI parsing never throws and reads
 * at most `SRI_MAX_TOKENS` tokens (a longer value is refused, not scanned).
 */
import { createHash } from 'node:crypto';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import { hexEncode } from '../../chain/encoding.ts';
import { isHashAlgorithm, DEFAULT_HASH_ALGORITHM } from '../../chain/hash-algorithms.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';

/** A vouch algorithm, or one a lockfile may check with. */
export type DigestName = HashAlgorithm | 'sha1' | 'sha384';

const HEX_LENGTH: Record<string, number> = { sha1: 40, sha256: 64, sha384: 96, sha512: 128 };

/** Hashes chunks under several algorithms at once. */
export class MultiHash {
  private readonly hashes = new Map<DigestName, { update(d: Uint8Array): void; digest(): Uint8Array }>();
  bytes = 0;

  constructor(names: Iterable<DigestName>) {
    for (const n of names) {
      if (this.hashes.has(n)) continue;
      if (isHashAlgorithm(n)) this.hashes.set(n, nodeBackend.createHash(n));
      else {
        const h = createHash(n);
        this.hashes.set(n, { update: (d) => void h.update(d), digest: () => new Uint8Array(h.digest()) });
      }
    }
  }

  update(chunk: Uint8Array): void {
    this.bytes += chunk.length;
    for (const h of this.hashes.values()) h.update(chunk);
  }

  /** Lowercase hex per algorithm (call once). */
  digests(): Map<DigestName, string> {
    const out = new Map<DigestName, string>();
    for (const [n, h] of this.hashes) out.set(n, hexEncode(h.digest()));
    return out;
  }
}

export interface SriHash {
  algorithm: 'sha1' | 'sha256' | 'sha384' | 'sha512';
  hex: string;
}

const SRI_STRENGTH = ['sha1', 'sha256', 'sha384', 'sha512'] as const;

/** The most tokens an SRI value may have (npm writes one or two; a few algorithms with a few hashes each pass). */
export const SRI_MAX_TOKENS = 64;

/**
 * Parses an SRI string (`sha512-<base64> sha1-<base64>?opt ...`). Tokens of
 * other algorithms are ignored. Refused, with the reason: more than
 * `SRI_MAX_TOKENS` tokens, a token of a known algorithm that is not base64
 * of the right length, or no known token.
 */
export function parseSri(value: string): { ok: true; hashes: SriHash[] } | { ok: false; reason: string } {
  const out: SriHash[] = [];
  const tokens = /\S+/g;
  let count = 0;
  for (let m = tokens.exec(value); m !== null; m = tokens.exec(value)) {
    if (++count > SRI_MAX_TOKENS) return { ok: false, reason: `has more than ${SRI_MAX_TOKENS} hash tokens` };
    const token = m[0];
    const dash = token.indexOf('-');
    if (dash <= 0) continue;
    const algorithm = token.slice(0, dash).toLowerCase();
    if (!(SRI_STRENGTH as readonly string[]).includes(algorithm)) continue;
    const b64 = token.slice(dash + 1).replace(/\?.*$/, '');
    const hex = /^[A-Za-z0-9+/]+={0,2}$/.test(b64) ? Buffer.from(b64, 'base64').toString('hex') : '';
    if (hex.length !== HEX_LENGTH[algorithm]) return { ok: false, reason: `has a ${algorithm} token that is not base64 of a ${algorithm} digest` };
    out.push({ algorithm: algorithm as SriHash['algorithm'], hex });
  }
  return out.length ? { ok: true, hashes: out } : { ok: false, reason: 'is not an SRI hash of sha1, sha256, sha384 or sha512' };
}

/** The hashes of the strongest algorithm listed: what npm (ssri) checks. */
export function strongestSri(hashes: readonly SriHash[]): SriHash[] {
  const rank = (h: SriHash) => SRI_STRENGTH.indexOf(h.algorithm);
  let best = -1;
  for (const h of hashes) best = Math.max(best, rank(h));
  return hashes.filter((h) => rank(h) === best);
}

/** `sha512-<base64>`, as npm writes it. */
export function sriOf(algorithm: string, hex: string): string {
  return `${algorithm}-${Buffer.from(hex, 'hex').toString('base64')}`;
}

/** The algorithm an entry checked with `checked` is endorsed with: itself when vouch knows it, else the default (sha256). */
export function endorseAlgorithmFor(checked: string): HashAlgorithm {
  return isHashAlgorithm(checked) ? checked : DEFAULT_HASH_ALGORITHM;
}

/** pip's `--hash=<alg>:<hex>` for the algorithms pip accepts (sha256, sha384, sha512); null otherwise. */
export function parsePipHash(value: string): { algorithm: 'sha256' | 'sha384' | 'sha512'; hex: string } | null {
  const m = /^(sha256|sha384|sha512):([0-9a-fA-F]+)$/.exec(value);
  if (!m || m[2]!.length !== HEX_LENGTH[m[1]!]) return null;
  return { algorithm: m[1] as 'sha256' | 'sha384' | 'sha512', hex: m[2]!.toLowerCase() };
}
