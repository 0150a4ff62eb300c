/**
 * The raw signature rate the verify rows compare against: node:crypto
 * ed25519 `verify` on ONE thread, over the chain's own block payloads, for
 * `ms` milliseconds (bench -- chain and bench -- scale).
 */
import { payloadMessage, base64Decode, type Block } from '../chain/index.ts';
import type { Signer } from '../chain/crypto-backend.ts';
import { nodeBackend } from '../platform/node-crypto.ts';

/** Signed messages of `blocks` (block 0 excluded), ready to verify. */
export function signedMessages(blocks: readonly Block[]): { m: Uint8Array; s: Uint8Array }[] {
  return blocks.slice(1).map((b) => ({ m: payloadMessage(b.payload), s: base64Decode(b.signature)! }));
}

/** Verifications per second on this thread. */
export function rawVerifyRate(signer: Pick<Signer, 'publicKey'>, msgs: readonly { m: Uint8Array; s: Uint8Array }[], ms = 2_000): number {
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    const x = msgs[n % msgs.length]!;
    if (!nodeBackend.verify(signer.publicKey, x.m, x.s)) throw new Error('bench: signature did not verify');
    n++;
  }
  return n / ((performance.now() - t0) / 1000);
}
