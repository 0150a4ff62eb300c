/**
 * The injected crypto of the chain: hashing and ed25519.
 *
 * Owns: the two narrow interfaces `chain/` computes with. `chain/` never
 * imports a crypto implementation itself; callers pass a `CryptoBackend`:
 * `platform/node-crypto.ts` (node:crypto, fast) on the server and in the CLI,
 * `chain/backend-noble.ts` (@noble, portable) in the browser and as the
 * reference in tests.
 *
 * Must hold: `verify` is RFC 8032 ed25519 over the exact message bytes and
 * returns a boolean — it never throws for a bad key or signature. Low-level
 * crypto answers yes/no; the verifier above turns a no into a coded error.
 */
import { hexEncode } from './encoding.ts';

export type HashAlgorithm = 'sha256' | 'sha512' | 'sha3-256' | 'blake3';

export interface IncrementalHash {
  update(data: Uint8Array): void;
  /** Finishes the hash; the object must not be used afterwards. */
  digest(): Uint8Array;
}

export interface CryptoBackend {
  readonly name: string;
  createHash(algorithm: HashAlgorithm): IncrementalHash;
  /** One-shot digest, when the backend has a faster path than createHash. */
  digest?(algorithm: HashAlgorithm, data: Uint8Array): Uint8Array;
  /**
   * SHA-256 of `data` written into `out` (32 bytes), when the backend has a
   * path without an allocation (the completeness index's hot loop).
   */
  sha256To?(data: Uint8Array, out: Uint8Array): void;
  /** One-shot lowercase hex digest, when the backend can skip the round trip through bytes. */
  digestHex?(algorithm: HashAlgorithm, data: Uint8Array): string;
  /** ed25519 verify; false for any malformed key or signature. */
  verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean;
}

/** Something that signs for the authority: holds (or reaches) the private key. */
export interface Signer {
  /** The signer id written into blocks (`signer`). */
  readonly id: string;
  /** Raw 32-byte ed25519 public key. */
  readonly publicKey: Uint8Array;
  sign(message: Uint8Array): Uint8Array;
}

/** Lowercase hex digest of the UTF-8 bytes of `text`. */
export function hashHex(backend: CryptoBackend, algorithm: HashAlgorithm, data: Uint8Array): string {
  if (backend.digestHex) return backend.digestHex(algorithm, data);
  return hexEncode(hashBytes(backend, algorithm, data));
}

export function hashBytes(backend: CryptoBackend, algorithm: HashAlgorithm, data: Uint8Array): Uint8Array {
  if (backend.digest) return backend.digest(algorithm, data);
  const h = backend.createHash(algorithm);
  h.update(data);
  return h.digest();
}
