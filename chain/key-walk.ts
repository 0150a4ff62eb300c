/**
 * A client following a log's key events (docs/spec/key-events.md): `vouch get`
 * and the witness walk the key blocks `GET /v1/keys` gives, each proven in a
 * checkpoint's tree. Pure: no I/O.
 * Owns: the `/v1/keys` answer's form (strict, bounded), the trail a client
 * keeps (`KeyState`, which online key from which index), and the walk
 * (block 0 bound to the pin, each key block proven, signed by the key its
 * statement names, applied with `applyKeyEvent`; MAX_WALKED_KEY_EVENTS).
 * Trusts: nothing beyond proofs and signatures; the caller checks the
 * checkpoint's note with the key the walk ends with.
 * Must hold: a trail changes only through a proven, applied key event; a pin
 * is never left behind silently.
 */
import type { CryptoBackend } from './crypto-backend.ts';
import { parseBlock, type Block } from './block.ts';
import { computeRecordHash, payloadMessage } from './build.ts';
import { base64Decode, hexDecode } from './encoding.ts';
import { applyKeyEvent, initialKeyState, isVoid, KeyEventError, MAX_WALKED_KEY_EVENTS, type KeyState, type RootSpec } from './key-events.ts';
import { leafHash, verifyInclusion } from './merkle.ts';

/** Why a walk or an answer was refused (`code`: the catalogue code a caller reports). */
export class KeyWalkError extends Error {
  constructor(
    readonly code: 'bad_answer' | 'bad_proof' | 'bad_key_event' | 'key_walk_limit' | 'untrusted_authority',
    message: string,
  ) {
    super(message);
    this.name = 'KeyWalkError';
  }
}

/** One online key and the first index it signs (its key block, or 0). */
export interface OnlineSpan {
  since: number;
  signer: string;
  publicKey: string;
}

/** What a client remembers of a log's keys: the state after the walked events, and every online key's span. */
export interface KeyTrail {
  state: KeyState;
  spans: OnlineSpan[] /** Index of the last key block walked (-1: none). */;
  last: number;
}

export interface ProvenBlock {
  index: number;
  sequence: number;
  block: unknown;
  proof: Uint8Array[];
}
export interface KeysAnswer {
  chain: string;
  size: number;
  checkpoint: string;
  firstBlock: { block: unknown; proof: Uint8Array[] };
  events: ProvenBlock[];
  verifierKeys: string[];
}

const MAX_HASHES = 128;
const MAX_EVENTS_ANSWERED = 1024;

function hashes(v: unknown, what: string): Uint8Array[] {
  if (!Array.isArray(v) || v.length > MAX_HASHES) throw new KeyWalkError('bad_answer', `${what}: "proof" is not a list of at most ${MAX_HASHES} hashes`);
  return v.map((h, i) => {
    const b = typeof h === 'string' ? base64Decode(h) : null;
    if (b === null || b.length !== 32) throw new KeyWalkError('bad_answer', `${what}: proof hash ${i} is not base64 of 32 bytes`);
    return b;
  });
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const nat = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Strict read of a `GET /v1/keys` answer (bounded). @throws KeyWalkError bad_answer */
export function parseKeysAnswer(v: unknown, source: string): KeysAnswer {
  const bad = (why: string): never => {
    throw new KeyWalkError('bad_answer', `${source}: the /v1/keys answer ${why}`);
  };
  if (!isObj(v)) bad('is not a JSON object');
  const o = v as Record<string, unknown>;
  if (typeof o.chain !== 'string' || !/^[0-9a-f]{64}$/.test(o.chain)) bad('has no "chain" (record_hash of block 0)');
  if (!nat(o.size)) bad('has no "size"');
  if (typeof o.checkpoint !== 'string' || o.checkpoint.length > 1 << 20) bad('has no "checkpoint" note');
  if (!isObj(o.first_block)) bad('has no "first_block"');
  const fb = o.first_block as Record<string, unknown>;
  if (!Array.isArray(o.events) || o.events.length > MAX_EVENTS_ANSWERED) bad(`has no "events" list of at most ${MAX_EVENTS_ANSWERED}`);
  const events = (o.events as unknown[]).map((e, i) => {
    if (!isObj(e) || !nat(e.index) || !nat(e.sequence) || !isObj(e.block)) bad(`event ${i} is not {index, sequence, block, proof}`);
    const x = e as Record<string, unknown>;
    return { index: x.index as number, sequence: x.sequence as number, block: x.block, proof: hashes(x.proof, `${source}: event ${i}`) };
  });
  const vk = Array.isArray(o.verifier_keys) ? o.verifier_keys.filter((k): k is string => typeof k === 'string' && k.length < 512).slice(0, 64) : [];
  return {
    chain: o.chain as string,
    size: o.size as number,
    checkpoint: o.checkpoint as string,
    firstBlock: { block: fb.block, proof: hashes(fb.proof, `${source}: first_block`) },
    events,
    verifierKeys: vk,
  };
}

function proven(c: CryptoBackend, raw: unknown, index: number, proof: Uint8Array[], tree: { size: number; root: Uint8Array }, what: string): Block {
  let block: Block;
  try {
    block = parseBlock(raw, index);
  } catch (e) {
    throw new KeyWalkError('bad_answer', `${what}: ${(e as Error).message}`);
  }
  if (block.index !== index) throw new KeyWalkError('bad_answer', `${what}: the block is index ${block.index}, not ${index}`);
  if (computeRecordHash(block, c) !== block.record_hash) throw new KeyWalkError('bad_answer', `${what}: its record_hash does not match its content`);
  if (index >= tree.size || !verifyInclusion(c, index, tree.size, leafHash(c, hexDecode(block.record_hash)!), proof, tree.root)) {
    throw new KeyWalkError('bad_proof', `${what}: its inclusion proof does not verify against the checkpoint of size ${tree.size}`);
  }
  return block;
}

/** The trail of a log whose block 0 (proven at index 0 of `tree`) declares `pinned` (base64); null pin: block 0's key, unpinned (a root pin binds later). */
export function startTrail(c: CryptoBackend, answer: KeysAnswer, tree: { size: number; root: Uint8Array }, pinned: string | null, source: string): KeyTrail {
  const b0 = proven(c, answer.firstBlock.block, 0, answer.firstBlock.proof, tree, `${source}: block 0`);
  const a = b0.payload.authority;
  if (b0.payload.intent !== 'authority' || !a) throw new KeyWalkError('bad_answer', `${source}: block 0 is not the authority block`);
  if (pinned !== null && a.public_key !== pinned)
    throw new KeyWalkError('untrusted_authority', `${source}: block 0 declares key ${a.public_key}, not the pinned key ${pinned}`);
  if (b0.record_hash !== answer.chain) throw new KeyWalkError('bad_answer', `${source}: "chain" is not block 0's record_hash`);
  return { state: initialKeyState(b0.record_hash, a.signer, a.public_key), spans: [{ since: 0, signer: a.signer, publicKey: a.public_key }], last: -1 };
}

/**
 * Walks `events` (sequence order, each proven in `tree`) from `trail`;
 * events at or before the trail's sequence are skipped. More than `max` new
 * events: refused (`key_walk_limit`), the trail unchanged.
 * @throws KeyWalkError
 */
export function walkKeyEvents(
  c: CryptoBackend,
  trail: KeyTrail,
  events: readonly ProvenBlock[],
  tree: { size: number; root: Uint8Array },
  source: string,
  max = MAX_WALKED_KEY_EVENTS,
): KeyTrail {
  const fresh = events.filter((e) => e.sequence > trail.state.sequence);
  if (fresh.length > max) {
    throw new KeyWalkError(
      'key_walk_limit',
      `${source}: ${fresh.length} key events since the last one this client verified (sequence ${trail.state.sequence}); a client walks at most ${max} in one update: pin the log's current root or key afresh (docs/spec/key-events.md)`,
    );
  }
  let t: KeyTrail = { state: trail.state, spans: [...trail.spans], last: trail.last };
  for (const e of fresh) {
    const what = `${source}: key event ${e.sequence} (block ${e.index})`;
    if (e.index <= t.last || e.index <= t.state.online.since) throw new KeyWalkError('bad_answer', `${what}: not after the key block before it`);
    const block = proven(c, e.block, e.index, e.proof, tree, what);
    const p = block.payload;
    if (p.intent !== 'key' || !p.statement || !p.signatures) throw new KeyWalkError('bad_answer', `${what}: not a key block`);
    if (p.statement.sequence !== e.sequence) throw new KeyWalkError('bad_answer', `${what}: its statement is sequence ${p.statement.sequence}`);
    const online = p.statement.online;
    const sig = base64Decode(block.signature);
    if (block.signer !== online.signer || sig === null || sig.length !== 64 || !c.verify(base64Decode(online.public_key)!, payloadMessage(p), sig)) {
      throw new KeyWalkError('bad_key_event', `${what}: not signed by the online key its statement names (${online.public_key})`);
    }
    let state: KeyState;
    try {
      state = applyKeyEvent(c, t.state, { statement: p.statement, signatures: p.signatures }, e.index);
    } catch (err) {
      if (err instanceof KeyEventError) throw new KeyWalkError('bad_key_event', `${what}: ${err.why}`);
      throw err;
    }
    const spans =
      state.online.publicKey !== t.state.online.publicKey
        ? [...t.spans, { since: e.index, signer: state.online.signer, publicKey: state.online.publicKey }]
        : t.spans;
    t = { state, spans, last: e.index };
  }
  return t;
}

/** Whether the root in force `a` is the pinned root `b` (same threshold, same key set). */
export function sameRoot(a: RootSpec | null, b: { threshold: number; keys: readonly string[] }): boolean {
  return a !== null && a.threshold === b.threshold && a.keys.length === b.keys.length && b.keys.every((k) => a.keys.includes(k));
}

/** The online key in force at block `index` under `trail` (past the trail's last key block: the key in force); null when the block is void. */
export function keyAt(trail: KeyTrail, index: number): OnlineSpan | null {
  if (isVoid(trail.state, index)) return null;
  let span = trail.spans[0]!;
  for (const s of trail.spans) if (s.since <= index) span = s;
  return span;
}

const KEY_B64 = /^[A-Za-z0-9+/]{43}=$/;
const isKey = (k: unknown): k is string => typeof k === 'string' && KEY_B64.test(k);
const keyList = (v: unknown): boolean => Array.isArray(v) && v.length <= 10_000 && v.every(isKey);

/** A trail as stored (plain JSON), and read back strictly (every member's form, bounded); null when it is not one. */
export function parseTrail(v: unknown): KeyTrail | null {
  if (!isObj(v) || !isObj(v.state) || !Array.isArray(v.spans) || v.spans.length === 0 || v.spans.length > 10_000 || !Number.isSafeInteger(v.last)) return null;
  const s = v.state as Record<string, unknown>;
  const online = s.online as Record<string, unknown> | undefined;
  if (
    typeof s.chain !== 'string' ||
    !/^[0-9a-f]{64}$/.test(s.chain) ||
    !isKey(s.first) ||
    !nat(s.sequence) ||
    !isObj(online) ||
    !isKey(online.publicKey) ||
    typeof online.signer !== 'string' ||
    !nat(online.since) ||
    !keyList(s.retired) ||
    !keyList(s.compromised) ||
    !Array.isArray(s.voids) ||
    s.voids.length > 10_000
  )
    return null;
  for (const r of s.voids as unknown[]) if (!Array.isArray(r) || r.length !== 2 || !nat(r[0]) || !nat(r[1]) || r[0] > r[1]) return null;
  const root = s.root;
  if (root !== null && !(isObj(root) && nat(root.version) && nat(root.threshold) && keyList(root.keys))) return null;
  for (const sp of v.spans as unknown[]) if (!isObj(sp) || !nat(sp.since) || !isKey(sp.publicKey) || typeof sp.signer !== 'string') return null;
  return v as unknown as KeyTrail;
}
