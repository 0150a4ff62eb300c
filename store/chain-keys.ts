/**
 * The online key in force of a chain directory, for an offline writer
 * (`vouch endorse`, `vouch revoke`, `vouch reendorse`) that does not verify
 * every block: which key may sign the next block (docs/key-events.md).
 *
 * Owns: the key state read from the key blocks' files (`keyStateOfFiles`),
 * and the signer an append uses for a private key (`signerForChain`).
 * Trusts: block 0's file as the chain's identity (as `trustedHead` does);
 * nothing else: every key block's statement goes through `applyKeyEvent`,
 * so no file can put a key in force without the root holders' signatures.
 * Must hold: a retired or compromised key, or one the chain never named,
 * gets no signer; only chains whose key is not block 0's pay the scan.
 */
import type { KeyObject } from 'node:crypto';
import { parseBlockText } from '../chain/block.ts';
import type { Signer } from '../chain/crypto-backend.ts';
import { base64Encode } from '../chain/encoding.ts';
import { VouchError } from '../chain/errors.ts';
import { applyKeyEvent, initialKeyState, KeyEventError, type KeyState } from '../chain/key-events.ts';
import { nodeBackend, nodeSigner, rawPublicKey } from '../platform/node-crypto.ts';
import type { ChainRepo } from './chain-repo.ts';

/** The key state after every key block of the chain's files (each statement checked by applyKeyEvent). @throws VouchError bad_key_event */
export function keyStateOfFiles(repo: ChainRepo): KeyState {
  const first = parseBlockText(repo.readBlockFile(0), 0);
  const a = first.payload.authority!;
  let state = initialKeyState(first.record_hash, a.signer, a.public_key);
  for (let i = 1; i < repo.size; i++) {
    const text = repo.readBlockFile(i);
    if (!text.includes('"vouch/keys"')) continue; // every key block's uns; other blocks rarely mention it
    const block = parseBlockText(text, i);
    if (block.payload.intent !== 'key') continue;
    try {
      state = applyKeyEvent(nodeBackend, state, { statement: block.payload.statement!, signatures: block.payload.signatures! }, i);
    } catch (e) {
      if (!(e instanceof KeyEventError)) throw e;
      throw new VouchError('bad_key_event', `bad_key_event at block ${i}: ${e.why}`, { index: i });
    }
  }
  return state;
}

/** Why `publicKey` may not sign for a chain in `keys`. */
export function notInForce(keys: KeyState, publicKey: string): string {
  if (keys.sequence === 0) return `this key is not the chain's authority key (${keys.online.publicKey})`; // no key events: as before them
  const inForce = `the online key in force is ${keys.online.publicKey} (since block ${keys.online.since})`;
  if (keys.compromised.includes(publicKey)) return `this key (${publicKey}) was declared compromised; ${inForce}`;
  if (keys.retired.includes(publicKey)) return `this key (${publicKey}) was retired; ${inForce}`;
  if (keys.root?.keys.includes(publicKey)) return `this key (${publicKey}) is a root holder's key, which never signs blocks; ${inForce}`;
  return `this key (${publicKey}) is not the chain's authority key: ${inForce}`;
}

/**
 * The signer an append uses for `key`: block 0's signer id when it is block
 * 0's key (`keys` null: the checkpoint, signed by the key in force, decides
 * in `trustedHead`), else the key in force's signer id with the key state
 * it was found in.
 * @throws VouchError key_error when the key is not the one in force
 */
export function signerForChain(repo: ChainRepo, key: KeyObject): { signer: Signer; keys: KeyState | null } {
  const pub = base64Encode(rawPublicKey(key));
  const a = parseBlockText(repo.readBlockFile(0), 0).payload.authority!;
  if (pub === a.public_key) return { signer: nodeSigner(a.signer, key), keys: null };
  const keys = keyStateOfFiles(repo);
  if (keys.online.publicKey !== pub) throw new VouchError('key_error', notInForce(keys, pub));
  return { signer: nodeSigner(keys.online.signer, key), keys };
}
