/**
 * The server's crypto backend on node:crypto: sha256, sha512, sha3-256
 * natively, blake3 through @noble/hashes; ed25519 verify asks libsodium
 * (sodium-native, past a process's first 256 checks) first and OpenSSL second
 * (bench/RESULTS.md "Chain core", rows "raw `crypto.verify`" and "raw
 * libsodium verify"). libsodium accepts a subset of what OpenSSL accepts,
 * and a refusal is handed to OpenSSL, whose answer stands: `verify` accepts
 * exactly what OpenSSL accepts
 * (test/integration/ed25519-engines.test.ts). Without sodium-native, or with
 * VOUCH_ED25519=openssl, OpenSSL alone checks.
 * Must hold: `verify` never throws, returns false for bad input; chain/
 * refuses weak (small-order) authority keys before any signature is
 * checked (docs/spec/design.md §1.7 step 5).
 */
import { createRequire } from 'node:module';
import { createHash, hash as oneShotHash, createPrivateKey, createPublicKey, sign as nodeSign, verify as nodeVerify, type KeyObject } from 'node:crypto';
import { blake3 } from '@noble/hashes/blake3.js';
import type { CryptoBackend, HashAlgorithm, IncrementalHash, Signer } from '../chain/crypto-backend.ts';

const SPKI_ED25519_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
const keyCache = new Map<string, KeyObject | null>();
const KEY_CACHE_MAX = 1024;

// The key verified last (a chain has one authority): compared byte by byte, no encoding.
let lastRaw: Buffer | null = null;
let lastKey: KeyObject | null = null;

export function publicKeyObject(raw: Uint8Array): KeyObject | null {
  if (lastRaw?.equals(raw)) return lastKey;
  const id = Buffer.from(raw).toString('base64');
  let key = keyCache.get(id);
  if (key === undefined) {
    try {
      key = raw.length === 32 ? createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, raw]), format: 'der', type: 'spki' }) : null;
    } catch {
      key = null;
    }
    if (keyCache.size >= KEY_CACHE_MAX) keyCache.clear();
    keyCache.set(id, key);
  }
  lastRaw = Buffer.from(raw);
  lastKey = key;
  return key;
}

interface Sodium {
  crypto_sign_verify_detached(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
  crypto_hash_sha256(out: Uint8Array, message: Uint8Array): void;
}

function loadSodium(): Sodium | null {
  if (process.env.VOUCH_ED25519 === 'openssl') return null;
  try {
    const sodium = createRequire(import.meta.url)('sodium-native') as Sodium;
    return typeof sodium.crypto_sign_verify_detached === 'function' ? sodium : null;
  } catch {
    return null;
  }
}

/**
 * sodium-native, loaded on the first signature check (undefined: not yet;
 * null: unavailable or turned off): loading it takes some 30 ms, which a
 * command that checks no signature (`vouch endorse`, `--help`) does not pay.
 */
let sodiumLoaded: Sodium | null | undefined;

/**
 * Signature checks OpenSSL answers alone before sodium-native is loaded (unless something loaded it
 * already): loading it (~30 ms) costs more than it saves (~70 µs a check) below some 400 checks, and
 * most commands (`vouch get`, `root`, a small chain's `verify`) check a handful.
 */
let checksBeforeSodium = 256;

function sodium(): Sodium | null {
  if (sodiumLoaded === undefined) sodiumLoaded = loadSodium();
  return sodiumLoaded;
}

/**
 * libsodium's SHA-256 for `sha256To` (the completeness index's node and leaf
 * hashes: ~0.7 µs a 66-byte call against ~1.1 µs for node:crypto's one-shot
 * `hash`, bench/RESULTS.md "Completeness index"; docs/decisions/index-hashing.md). Not
 * turned off by VOUCH_ED25519 (which picks a signature engine); node:crypto
 * when sodium-native is absent, and for a process's first 50,000 calls
 * (then it is loaded).
 */
let sodiumHash: ((out: Uint8Array, message: Uint8Array) => void) | null | undefined;
/** Calls node:crypto answers before sodium-native is loaded for them: the load (~30 ms) pays back past ~75,000 (~0.4 µs each). */
let hashesBeforeSodium = 50_000;

function sha256To(data: Uint8Array, out: Uint8Array): void {
  if (sodiumHash === undefined && hashesBeforeSodium > 0) {
    hashesBeforeSodium--;
    out.set(oneShotHash('sha256', data, 'buffer') as Buffer);
    return;
  }
  if (sodiumHash === undefined) {
    try {
      const s = createRequire(import.meta.url)('sodium-native') as Sodium;
      sodiumHash = typeof s.crypto_hash_sha256 === 'function' ? s.crypto_hash_sha256.bind(s) : null;
    } catch {
      sodiumHash = null;
    }
  }
  if (sodiumHash !== null) sodiumHash(out, data);
  else out.set(oneShotHash('sha256', data, 'buffer') as Buffer);
}

/** Which code checks ed25519 signatures first: 'libsodium' (then OpenSSL for what it refuses) or 'openssl' alone. */
export function ed25519Engine(): 'libsodium' | 'openssl' {
  return sodium() === null ? 'openssl' : 'libsodium';
}

/** libsodium's answer alone (null: sodium-native is not loaded); tests and the raw-rate benches use it. */
export function libsodiumVerify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean | null {
  const s = sodium();
  if (s === null) return null;
  return signature.length === 64 && publicKey.length === 32 && sodiumVerify(s, publicKey, message, signature);
}

/** OpenSSL's answer alone (the reference `verify` must equal; tests compare the two). */
export function opensslVerify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  if (signature.length !== 64) return false;
  const key = publicKeyObject(publicKey);
  if (key === null) return false;
  try {
    return nodeVerify(null, message, key, signature);
  } catch {
    return false;
  }
}

function sodiumVerify(s: Sodium, publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  try {
    return s.crypto_sign_verify_detached(signature, message, publicKey);
  } catch {
    return false;
  }
}

export const nodeBackend: CryptoBackend = {
  name: 'node',
  createHash(algorithm: HashAlgorithm): IncrementalHash {
    if (algorithm === 'blake3') {
      const h = blake3.create();
      return { update: (d) => void h.update(d), digest: () => h.digest() };
    }
    const h = createHash(algorithm);
    return { update: (d) => void h.update(d), digest: () => new Uint8Array(h.digest()) };
  },
  digest(algorithm, data) {
    if (algorithm === 'blake3') return blake3(data);
    return new Uint8Array(oneShotHash(algorithm, data, 'buffer') as Buffer);
  },
  sha256To,
  digestHex(algorithm, data) {
    if (algorithm === 'blake3') return Buffer.from(blake3(data)).toString('hex');
    return oneShotHash(algorithm, data, 'hex');
  },
  verify(publicKey, message, signature) {
    if (signature.length !== 64 || publicKey.length !== 32) return false;
    let s: Sodium | null = null;
    // OpenSSL alone (its answer stands either way) until sodium-native is worth its load.
    if (checksBeforeSodium > 0 && sodiumLoaded === undefined) checksBeforeSodium--;
    else s = sodium();
    if (s !== null && sodiumVerify(s, publicKey, message, signature)) return true;
    return opensslVerify(publicKey, message, signature);
  },
};

/** Raw 32-byte public key of an ed25519 KeyObject (private or public). */
export function rawPublicKey(key: KeyObject): Uint8Array {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  const der = pub.export({ format: 'der', type: 'spki' });
  return new Uint8Array(der.subarray(der.length - 32));
}

/** A signer over a node:crypto ed25519 private key. */
export function nodeSigner(id: string, privateKey: KeyObject): Signer {
  if (privateKey.asymmetricKeyType !== 'ed25519' || privateKey.type !== 'private') {
    throw new TypeError('an ed25519 private key is required');
  }
  const publicKey = rawPublicKey(privateKey);
  return { id, publicKey, sign: (m) => new Uint8Array(nodeSign(null, m, privateKey)) };
}

/** KeyObject for a raw 32-byte ed25519 seed (tests and vectors). */
export function privateKeyFromSeed(seed: Uint8Array): KeyObject {
  const PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
  return createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' });
}
