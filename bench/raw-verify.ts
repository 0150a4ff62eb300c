/**
 * The raw signature rates the verify rows compare against, on ONE thread,
 * over the chain's own block payloads, for `ms` milliseconds (bench -- chain
 * and bench -- scale): node:crypto (OpenSSL) ed25519 `verify`, the baseline
 * the targets are set against (≥ 0.75 × raw × cores), and libsodium's, which
 * `vouch` asks first (platform/node-crypto.ts), reported beside it so the
 * rows show how close verification comes to its own signature checks too.
 */
import { payloadMessage, base64Decode, type Block } from '../chain/index.ts';
import type { Signer } from '../chain/crypto-backend.ts';
import { libsodiumVerify, opensslVerify } from '../platform/node-crypto.ts';

/** Signed messages of `blocks` (block 0 excluded), ready to verify. */
export function signedMessages(blocks: readonly Block[]): { m: Uint8Array; s: Uint8Array }[] {
  return blocks.slice(1).map((b) => ({ m: payloadMessage(b.payload), s: base64Decode(b.signature)! }));
}

/** Verifications per second on this thread, by OpenSSL (node:crypto; the default) or libsodium (null: not loaded). */
export function rawVerifyRate(
  signer: Pick<Signer, 'publicKey'>,
  msgs: readonly { m: Uint8Array; s: Uint8Array }[],
  ms = 2_000,
  engine: 'openssl' | 'libsodium' = 'openssl',
): number {
  if (engine === 'libsodium' && libsodiumVerify(signer.publicKey, msgs[0]!.m, msgs[0]!.s) === null) return NaN;
  const verify = engine === 'openssl' ? opensslVerify : libsodiumVerify;
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    const x = msgs[n % msgs.length]!;
    if (verify(signer.publicKey, x.m, x.s) !== true) throw new Error(`bench: signature did not verify (${engine})`);
    n++;
  }
  return n / ((performance.now() - t0) / 1000);
}
