/**
 * The online key in force of a chain directory, for an offline writer
 * (`vouch endorse`, `vouch revoke`, `vouch reendorse`) that does not verify
 * every block: which key may sign the next block (docs/spec/key-events.md).
 *
 * Owns: the key state read from the key blocks' files (`keyStateOfFiles`,
 * kept in `.git/vouch-keys.json` so the next run reads only the blocks
 * after it), and the signer an append uses for a private key (`signerForChain`).
 * Trusts: block 0's file as the chain's identity (as `trustedHead` does);
 * nothing else: every key block's statement goes through `applyKeyEvent`,
 * so no file can put a key in force without the root holders' signatures.
 * Must hold: a retired or compromised key, or one the chain never named,
 * gets no signer; only chains whose key is not block 0's pay the scan.
 */
import type { KeyObject } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseBlockText, parseCheckpoint } from '../chain/block.ts';
import { checkpointMessage } from '../chain/build.ts';
import type { Signer } from '../chain/crypto-backend.ts';
import { base64Decode, base64Encode } from '../chain/encoding.ts';
import { VouchError } from '../chain/errors.ts';
import { applyKeyEvent, initialKeyState, KeyEventError, type KeyState } from '../chain/key-events.ts';
import { nodeBackend, nodeSigner, rawPublicKey } from '../platform/node-crypto.ts';
import type { ChainReads } from '../store/chain-api.ts';

/** Where the key state of a prefix of the chain is kept between runs (`.git`: as trusted as the gateway's snapshot). */
const CACHE = 'vouch-keys.json';

/** The kept key state when it is of a prefix of this chain (the block it ends at has the record_hash it names); else null. */
function keptState(repo: ChainReads, chain: string): { size: number; keys: KeyState } | null {
  try {
    const kept = JSON.parse(readFileSync(join(repo.dir, '.git', CACHE), 'utf8')) as { size: number; head: string; keys: KeyState };
    if (!Number.isSafeInteger(kept.size) || kept.size < 1 || kept.size > repo.size || kept.keys?.chain !== chain) return null;
    if (parseBlockText(repo.readBlockFile(kept.size - 1), kept.size - 1).record_hash !== kept.head) return null;
    return { size: kept.size, keys: kept.keys };
  } catch {
    return null;
  }
}

function keep(repo: ChainReads, size: number, head: string, keys: KeyState): void {
  const path = join(repo.dir, '.git', CACHE);
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    writeFileSync(tmp, JSON.stringify({ size, head, keys }) + '\n');
    renameSync(tmp, path);
  } catch {
    // best effort: the next run scans again
  }
}

/**
 * The key state after every key block of the chain's files (each statement
 * checked by applyKeyEvent): from the state kept in .git by the last run
 * when it is of a prefix of this chain, the blocks after it read.
 * @throws VouchError bad_key_event
 */
export function keyStateOfFiles(repo: ChainReads): KeyState {
  const first = parseBlockText(repo.readBlockFile(0), 0);
  const a = first.payload.authority!;
  const kept = keptState(repo, first.record_hash);
  let state = kept?.keys ?? initialKeyState(first.record_hash, a.signer, a.public_key);
  let last = first.record_hash;
  for (let i = kept?.size ?? 1; i < repo.size; i++) {
    const text = repo.readBlockFile(i);
    if (i === repo.size - 1) last = parseBlockText(text, i).record_hash;
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
  if (kept === null || kept.size < repo.size) keep(repo, repo.size, repo.size === 1 ? first.record_hash : last, state);
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

/** Whether checkpoint.json parses and is signed by `publicKey` (anything else is left to trustedHead to report). */
function checkpointSignedBy(repo: ChainReads, publicKey: Uint8Array): boolean {
  try {
    const text = repo.readCheckpoint();
    if (text === null) return true;
    const cp = parseCheckpoint(JSON.parse(text));
    const sig = base64Decode(cp.signature);
    return sig !== null && nodeBackend.verify(publicKey, checkpointMessage(cp), sig);
  } catch {
    return true;
  }
}

/**
 * The signer an append uses for `key`: block 0's signer id when it is block
 * 0's key and signed the checkpoint (`keys` null: no key event changed it),
 * else the key in force's signer id with the key state it was found in.
 * @throws VouchError key_error when the key is not the one in force
 */
export function signerForChain(repo: ChainReads, key: KeyObject): { signer: Signer; keys: KeyState | null } {
  const pub = base64Encode(rawPublicKey(key));
  const a = parseBlockText(repo.readBlockFile(0), 0).payload.authority!;
  if (pub === a.public_key) {
    // Block 0's key: in force unless key events changed it, which the checkpoint (signed by the key in force) tells in O(1).
    if (checkpointSignedBy(repo, rawPublicKey(key))) return { signer: nodeSigner(a.signer, key), keys: null };
    const keys = keyStateOfFiles(repo);
    if (keys.online.publicKey !== pub) throw new VouchError('key_error', notInForce(keys, pub));
    return { signer: nodeSigner(keys.online.signer, key), keys };
  }
  const keys = keyStateOfFiles(repo);
  if (keys.online.publicKey !== pub) throw new VouchError('key_error', notInForce(keys, pub));
  return { signer: nodeSigner(keys.online.signer, key), keys };
}
