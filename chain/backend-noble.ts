/**
 * Portable crypto backend on @noble: pure JavaScript, runs in browsers.
 *
 * Trusts: @noble/ed25519 and @noble/hashes. Verification is RFC 8032 strict
 * (`zip215: false`): non-canonical encodings are refused. About 18x slower
 * than node:crypto for verify, so the server uses `platform/node-crypto.ts`.
 */
import * as ed from '@noble/ed25519';
import { sha256, sha512 } from '@noble/hashes/sha2.js';
import { sha3_256 } from '@noble/hashes/sha3.js';
import { blake3 } from '@noble/hashes/blake3.js';
import type { CryptoBackend, HashAlgorithm, IncrementalHash, Signer } from './crypto-backend.ts';

ed.hashes.sha512 = sha512;

const CONSTRUCTORS = { sha256, sha512, 'sha3-256': sha3_256, blake3 } as const;

export const nobleBackend: CryptoBackend = {
  name: 'noble',
  createHash(algorithm: HashAlgorithm): IncrementalHash {
    const h = CONSTRUCTORS[algorithm].create();
    return { update: (d) => void h.update(d), digest: () => h.digest() };
  },
  verify(publicKey, message, signature) {
    if (publicKey.length !== 32 || signature.length !== 64) return false;
    try {
      return ed.verify(signature, message, publicKey, { zip215: false });
    } catch {
      return false;
    }
  },
};

/** A signer holding a raw 32-byte ed25519 seed in memory (tests, browser). */
export function nobleSigner(id: string, seed: Uint8Array): Signer {
  const publicKey = ed.getPublicKey(seed);
  return { id, publicKey, sign: (m) => ed.sign(m, seed) };
}

export { blake3 as nobleBlake3 };
