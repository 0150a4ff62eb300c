/**
 * `GET /v1/keys[?since=S]` (docs/spec/key-events.md "Interfaces"): the log's key
 * events for a client that follows them (`vouch get`, a witness, a C2SP
 * client): block 0 and every key block with sequence > S, each with its RFC
 * 6962 inclusion proof in the tree of the served checkpoint note, the key
 * state of the served chain and each online key's note verifier key.
 *
 * Owns: where the key blocks are (`keyBlocksOf`: the index's intents,
 * scanned once and then only for blocks added since, per index object), and
 * the answer's form.
 * Trusts: the chain state's index, tree and note (verified blocks only).
 * Must hold: no pass over the chain per request; a proof is always against
 * the note served in the same answer; key blocks beyond it are left out.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { VouchError } from '../../chain/errors.ts';
import { base64Decode, base64Encode } from '../../chain/encoding.ts';
import { initialKeyState, type KeyState } from '../../chain/key-events.ts';
import { isValidKeyName, SIG_ED25519, verifierKey } from '../../chain/note.ts';
import type { ChainIndex } from '../../chain/select.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { sendJson } from '../http/http-util.ts';
import type { GatewayContext } from '../context.ts';
import { intParams } from './transparency.ts';

const scans = new WeakMap<ChainIndex, { scanned: number; keys: number[] }>();

/** Indices of the key blocks among the first `index.size` blocks (one byte read per block, once per index object). */
export function keyBlocksOf(index: ChainIndex): readonly number[] {
  let s = scans.get(index);
  if (s === undefined || s.scanned > index.size) {
    s = { scanned: 0, keys: [] };
    scans.set(index, s);
  }
  for (let i = s.scanned; i < index.size; i++) if (index.intentOf(i) === 'key') s.keys.push(i);
  s.scanned = index.size;
  return s.keys;
}

/** Each online key's note verifier key under `origin`: the key in force first, then the earlier ones not compromised, newest first. */
export function verifierKeysOf(keys: KeyState, origin: string | null): string[] {
  if (origin === null || !isValidKeyName(origin)) return [];
  const all = [keys.online.publicKey, ...[...keys.retired].reverse().filter((k) => !keys.compromised.includes(k))];
  return [...new Set(all)].map((k) => verifierKey(nodeBackend, origin, SIG_ED25519, base64Decode(k)!));
}

export function handleKeys(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse, search: string): void {
  const { since } = intParams(search, ['since']);
  const state = ctx.state;
  if (state === null) throw new VouchError('not_ready', 'the chain is not loaded yet; retry shortly');
  const note = state.note;
  if (note === null) throw new VouchError('not_found', 'this chain has no checkpoint.note yet: key events are proven against it', { resource: '/v1/keys' });
  const text = state.servedCheckpointNote()!;
  const size = note.checkpoint.size;
  const a = state.authority.payload.authority!;
  // A state resumed from a snapshot made before key events has none: the chain had no key event then.
  const keys = state.verifierState.keys ?? initialKeyState(state.authority.record_hash, a.signer, a.public_key);
  const proof = (i: number) => state.tree.inclusionProof(i, size).map(base64Encode);
  const events: { index: number; sequence: number; block: unknown; proof: string[] }[] = [];
  for (const i of keyBlocksOf(state.index)) {
    if (i >= size) break;
    const block = state.index.block(i)!;
    const sequence = block.payload.statement!.sequence;
    if (sequence > (since ?? 0)) events.push({ index: i, sequence, block, proof: proof(i) });
  }
  sendJson(res, 200, {
    success: true,
    chain: state.authority.record_hash,
    first: { signer: a.signer, public_key: a.public_key },
    first_block: { block: state.authority, proof: proof(0) },
    state: keys,
    checkpoint: text,
    size,
    events,
    verifier_keys: verifierKeysOf(keys, note.checkpoint.origin),
  });
}
