/**
 * Signs tlog checkpoint notes (chain/tlog-checkpoint.ts) with the
 * authority's keys on node:crypto: `signNoteText`, and the `NoteSigner` an
 * authority hands the store with an append (store/chain-append.ts
 * `appendSigned`), so storage holds no key and signs nothing itself.
 * Owns: which backend signs a note (./node-crypto.ts).
 * Trusts: the signers handed over to be the keys in force (the caller's
 * check: store/chain-append.ts `trustedHead`, the gateway's key state).
 * Must hold: during a key rollover the key in force signs first.
 */
import type { Signer } from '../chain/crypto-backend.ts';
import { signCheckpoint } from '../chain/tlog-checkpoint.ts';
import { nodeBackend } from './node-crypto.ts';

/** What the store is handed to sign an append's checkpoint note. */
export interface NoteSigner {
  /** The signed note text of a tree: origin, size, root, and the body's extension lines. */
  signNote(origin: string, size: number, root: Uint8Array, extensions?: readonly string[]): string;
}

/** The signed checkpoint note of a tree: origin, size, root; key name = origin (several signers during a key rollover, the key in force first). */
export function signNoteText(signer: Signer | readonly Signer[], origin: string, size: number, root: Uint8Array, extensions: readonly string[] = []): string {
  return signCheckpoint(nodeBackend, { origin, size, root, extensions: [...extensions] }, signer);
}

/** A `NoteSigner` over `signer` (or the keys of a rollover, the key in force first). */
export function noteSigner(signer: Signer | readonly Signer[]): NoteSigner {
  return { signNote: (origin, size, root, extensions = []) => signNoteText(signer, origin, size, root, extensions) };
}
