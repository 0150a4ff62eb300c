/**
 * Key events (docs/spec/key-events.md): the root of trust, online-key rotation and
 * compromise declarations, kept in the log as `key` blocks (grammar 1.1).
 *
 * Owns: the statement format root holders sign, its strict parser, the
 * signed message, and the one transition `applyKeyEvent(state, event, at)`
 * every consumer runs (the verifier, the authority before it appends, `vouch
 * get` walking key blocks it was proven). A refused event is a `KeyEventError`
 * naming why; the caller gives it a code (`bad_key_event` in a chain,
 * `bad_statement`/`stale_statement` for a statement not yet applied).
 * Trusts: the injected `CryptoBackend`. Pure: no I/O, no clock.
 * Must hold: a state changes only through `applyKeyEvent`; it never accepts
 * an event without the root threshold(s), a key outside the root, a holder
 * counted twice, a weak key, a retired key, a stale or future sequence.
 */
import type { CryptoBackend, Signer } from './crypto-backend.ts';
import { base64Decode, base64Encode, utf8 } from './encoding.ts';
import { canonicalize } from './jcs.ts';
import { isFullOrderPublicKey } from './weak-key.ts';

/** The root: n holder keys (base64 raw ed25519) of which `threshold` must sign. */
export interface RootSpec {
  version: number;
  threshold: number;
  keys: string[];
}
/** The online key that signs blocks and checkpoints. */
export interface OnlineKey {
  signer: string;
  public_key: string;
}

export type Statement =
  | { action: 'root'; chain: string; sequence: number; online: OnlineKey; root: RootSpec }
  | { action: 'key'; chain: string; sequence: number; online: OnlineKey }
  | { action: 'compromise'; chain: string; sequence: number; online: OnlineKey; compromised: string; good_through: number };

export interface StatementSignature {
  public_key: string;
  signature: string;
}

/** A statement with the holders' signatures: a statement file, and what a key block carries. */
export interface SignedStatement {
  statement: Statement;
  signatures: StatementSignature[];
}

/** The keys in force after a prefix of the chain (plain data: structured-clone safe). */
export interface KeyState {
  /** record_hash of block 0: statements name it, so none is replayed on another chain. */
  chain: string;
  /** Block 0's key (base64): what a pinned key is compared with. */
  first: string;
  /** Key events applied (a statement must carry sequence + 1). */
  sequence: number;
  root: RootSpec | null;
  online: { signer: string; publicKey: string; since: number };
  /** Every earlier online key (base64), in order; a retired key never comes back. */
  retired: string[];
  /** Online keys declared compromised (base64). */
  compromised: string[];
  /** Inclusive index ranges of void blocks (signed by a compromised key after its last good block). */
  voids: [number, number][];
}

export const KEY_LIMITS = { rootKeys: 32, signatures: 64, maxSequence: 1_000_000 } as const;
/** Key events a client walks in one update before it asks for a fresh pin (docs/spec/key-events.md). */
export const MAX_WALKED_KEY_EVENTS = 32;

const DOMAIN = 'vouch key statement v1\n';

export class KeyEventError extends Error {
  constructor(
    readonly why: string,
    readonly stale = false,
  ) {
    super(why);
    this.name = 'KeyEventError';
  }
}

/** The bytes a root holder signs: a domain line, then JCS of the statement. */
export function statementMessage(s: Statement): Uint8Array {
  return utf8(DOMAIN + canonicalize(s));
}

export function initialKeyState(chain: string, signer: string, publicKey: string): KeyState {
  return { chain, first: publicKey, sequence: 0, root: null, online: { signer, publicKey, since: 0 }, retired: [], compromised: [], voids: [] };
}

/** Whether block `index` is void under `state`. */
export function isVoid(state: Pick<KeyState, 'voids'> | null | undefined, index: number): boolean {
  if (!state) return false;
  for (const [a, b] of state.voids) if (index >= a && index <= b) return true;
  return false;
}

// ------------------------------------------------------------------ parsing

const HEX64 = /^[0-9a-f]{64}$/;
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function bad(path: string, what: string): never {
  throw new KeyEventError(`${path}: ${what}`);
}

function obj(v: unknown, path: string, required: readonly string[]): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(path, 'must be an object');
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!required.includes(k)) bad(path, `unknown member ${JSON.stringify(k).slice(0, 80)}`);
  for (const k of required) if (!Object.hasOwn(o, k)) bad(path, `missing member ${JSON.stringify(k)}`);
  return o;
}

function int(v: unknown, path: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) bad(path, `must be an integer ${min}..${max}`);
  return v;
}

function key(v: unknown, path: string): string {
  if (typeof v !== 'string' || v.length !== 44) bad(path, 'must be base64 of a raw 32-byte ed25519 key');
  const raw = base64Decode(v);
  if (raw === null || raw.length !== 32) bad(path, 'must be base64 of a raw 32-byte ed25519 key');
  return v;
}

function signerLabel(v: unknown, path: string): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > 256 || CONTROL.test(v) || LONE_SURROGATE.test(v))
    bad(path, 'must be a non-empty single-line string of at most 256 characters');
  return v;
}

function parseOnline(v: unknown, path: string): OnlineKey {
  const o = obj(v, path, ['signer', 'public_key']);
  return { signer: signerLabel(o.signer, `${path}.signer`), public_key: key(o.public_key, `${path}.public_key`) };
}

/** Strict parse of a statement (exact members, bounded). @throws KeyEventError */
export function parseStatement(v: unknown, path = 'statement'): Statement {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(path, 'must be an object');
  const action = (v as Record<string, unknown>).action;
  const common = ['action', 'chain', 'sequence', 'online'];
  const members =
    action === 'root' ? [...common, 'root'] : action === 'key' ? common : action === 'compromise' ? [...common, 'compromised', 'good_through'] : null;
  if (members === null) bad(`${path}.action`, 'must be "root", "key" or "compromise"');
  const o = obj(v, path, members);
  const chain = o.chain;
  if (typeof chain !== 'string' || !HEX64.test(chain)) bad(`${path}.chain`, 'must be the record_hash of block 0 (64 lowercase hex digits)');
  const sequence = int(o.sequence, `${path}.sequence`, 1, KEY_LIMITS.maxSequence);
  const online = parseOnline(o.online, `${path}.online`);
  if (action === 'key') return { action, chain, sequence, online };
  if (action === 'compromise') {
    return {
      action,
      chain,
      sequence,
      online,
      compromised: key(o.compromised, `${path}.compromised`),
      good_through: int(o.good_through, `${path}.good_through`, 0, Number.MAX_SAFE_INTEGER),
    };
  }
  const r = obj(o.root, `${path}.root`, ['version', 'threshold', 'keys']);
  if (!Array.isArray(r.keys) || r.keys.length === 0 || r.keys.length > KEY_LIMITS.rootKeys)
    bad(`${path}.root.keys`, `must list 1..${KEY_LIMITS.rootKeys} keys`);
  const keys = (r.keys as unknown[]).map((k, i) => key(k, `${path}.root.keys[${i}]`));
  return {
    action: 'root',
    chain,
    sequence,
    online,
    root: {
      version: int(r.version, `${path}.root.version`, 1, KEY_LIMITS.maxSequence),
      threshold: int(r.threshold, `${path}.root.threshold`, 1, keys.length),
      keys,
    },
  };
}

/** Strict parse of the holders' signatures (bounded). @throws KeyEventError */
export function parseSignatures(v: unknown, path = 'signatures'): StatementSignature[] {
  if (!Array.isArray(v) || v.length > KEY_LIMITS.signatures) bad(path, `must be a list of at most ${KEY_LIMITS.signatures} signatures`);
  return v.map((s, i) => {
    const o = obj(s, `${path}[${i}]`, ['public_key', 'signature']);
    const sig = o.signature;
    if (typeof sig !== 'string' || sig.length !== 88 || base64Decode(sig)?.length !== 64)
      bad(`${path}[${i}].signature`, 'must be base64 of a 64-byte ed25519 signature');
    return { public_key: key(o.public_key, `${path}[${i}].public_key`), signature: sig };
  });
}

/** A statement file: `{statement, signatures}`. @throws KeyEventError */
export function parseSignedStatement(v: unknown): SignedStatement {
  const o = obj(v, 'statement file', ['statement', 'signatures']);
  return { statement: parseStatement(o.statement), signatures: parseSignatures(o.signatures) };
}

// --------------------------------------------------------------- transition

function rawKey(b64: string): Uint8Array {
  return base64Decode(b64)!;
}

function fullOrder(b64: string, what: string): void {
  if (!isFullOrderPublicKey(rawKey(b64))) throw new KeyEventError(`${what} ${b64} is not a full-order ed25519 key (small-order or non-canonical)`);
}

/**
 * The holders among `keys` with a valid signature, after refusing a
 * signature by a key outside `allowed`, a holder counted twice, or a
 * signature that does not verify.
 */
function validSigners(c: CryptoBackend, message: Uint8Array, signatures: readonly StatementSignature[], allowed: ReadonlySet<string>): Set<string> {
  const seen = new Set<string>();
  for (const s of signatures) {
    if (!allowed.has(s.public_key)) throw new KeyEventError(`signature by ${s.public_key}, which is not a key of the root`);
    if (seen.has(s.public_key)) throw new KeyEventError(`holder ${s.public_key} signed twice (each holder counts once)`);
    seen.add(s.public_key);
    if (!c.verify(rawKey(s.public_key), message, base64Decode(s.signature)!))
      throw new KeyEventError(`the signature by ${s.public_key} does not verify over this statement`);
  }
  return seen;
}

function threshold(root: RootSpec, signed: ReadonlySet<string>, which: string): void {
  const n = root.keys.filter((k) => signed.has(k)).length;
  if (n < root.threshold)
    throw new KeyEventError(
      `${which} root (version ${root.version}) needs ${root.threshold} of its ${root.keys.length} holders' signatures, the statement has ${n}`,
    );
}

/** Refuses a new online key that is retired, compromised, the current one (for a change) or a root key. */
function checkNewOnline(state: KeyState, online: OnlineKey, roots: RootSpec[]): void {
  fullOrder(online.public_key, 'the online key');
  if (state.retired.includes(online.public_key) || state.compromised.includes(online.public_key))
    throw new KeyEventError(`the online key ${online.public_key} was retired earlier: a retired key never signs again`);
  for (const r of roots)
    if (r.keys.includes(online.public_key)) throw new KeyEventError(`the online key ${online.public_key} is a root key: root keys stay offline`);
}

/**
 * The state after the key event `signed` at block `at` (the block that
 * carries it; the chain has `at` blocks before it).
 * @throws KeyEventError naming the refusal (`stale` set for a replayed or superseded sequence).
 */
export function applyKeyEvent(c: CryptoBackend, state: KeyState, signed: SignedStatement, at: number): KeyState {
  const s = signed.statement;
  if (s.chain !== state.chain) throw new KeyEventError(`the statement is for chain ${s.chain}, this chain's block 0 is ${state.chain}`);
  if (s.sequence <= state.sequence)
    throw new KeyEventError(
      `statement sequence ${s.sequence} was already used (this chain has applied ${state.sequence} key events): a replayed or superseded statement`,
      true,
    );
  if (s.sequence !== state.sequence + 1) throw new KeyEventError(`statement sequence ${s.sequence} skips ahead: the next key event is ${state.sequence + 1}`);
  const message = statementMessage(s);
  const next: KeyState = {
    ...state,
    sequence: s.sequence,
    retired: [...state.retired],
    compromised: [...state.compromised],
    voids: state.voids.map((v) => [v[0], v[1]]),
  };
  const changeOnline = (online: OnlineKey, roots: RootSpec[]): void => {
    if (online.public_key === state.online.publicKey) {
      if (online.signer !== state.online.signer)
        throw new KeyEventError('the statement renames the signer of the key in force; a new signer id comes with a new key');
      return;
    }
    checkNewOnline(state, online, roots);
    next.retired.push(state.online.publicKey);
    next.online = { signer: online.signer, publicKey: online.public_key, since: at };
  };
  if (s.action === 'root') {
    const r = s.root;
    if (new Set(r.keys).size !== r.keys.length) throw new KeyEventError('the root lists a key twice');
    for (const k of r.keys) fullOrder(k, 'root key');
    if (state.root === null) {
      if (r.version !== 1) throw new KeyEventError(`the first root of a chain is version 1, not ${r.version}`);
      if (s.online.public_key !== state.online.publicKey)
        throw new KeyEventError('adopting a root keeps the online key in force (its signature on the block is its consent); rotate in a later statement');
      threshold(r, validSigners(c, message, signed.signatures, new Set(r.keys)), 'the new');
    } else {
      if (r.version !== state.root.version + 1) throw new KeyEventError(`the next root is version ${state.root.version + 1}, not ${r.version}`);
      const signers = validSigners(c, message, signed.signatures, new Set([...state.root.keys, ...r.keys]));
      threshold(state.root, signers, 'the current');
      threshold(r, signers, 'the new');
    }
    if (r.keys.includes(state.online.publicKey) && s.online.public_key === state.online.publicKey)
      throw new KeyEventError('the online key in force cannot be a root key: root keys stay offline');
    changeOnline(s.online, state.root ? [state.root, r] : [r]);
    next.root = { version: r.version, threshold: r.threshold, keys: [...r.keys] };
    return next;
  }
  if (state.root === null) throw new KeyEventError(`a ${s.action} statement needs a root: this chain has none (adopt one with a root statement first)`);
  threshold(state.root, validSigners(c, message, signed.signatures, new Set(state.root.keys)), 'the');
  if (s.action === 'key') {
    if (s.online.public_key === state.online.publicKey) throw new KeyEventError(`the statement rotates to the key already in force (${s.online.public_key})`);
    changeOnline(s.online, [state.root]);
    return next;
  }
  if (s.compromised !== state.online.publicKey) {
    throw new KeyEventError(
      state.retired.includes(s.compromised)
        ? `${s.compromised} is already retired: it signs nothing after its retirement, so nothing of it is voided`
        : `${s.compromised} is not the online key in force (${state.online.publicKey})`,
    );
  }
  if (s.good_through < state.online.since)
    throw new KeyEventError(`good_through ${s.good_through} is before the compromised key's first block ${state.online.since}`);
  if (s.good_through > at - 1) throw new KeyEventError(`good_through ${s.good_through} is beyond the head (the last block is ${at - 1})`);
  if (s.online.public_key === s.compromised) throw new KeyEventError('the replacement key is the compromised key');
  changeOnline(s.online, [state.root]);
  next.compromised.push(s.compromised);
  if (s.good_through + 1 <= at - 1) next.voids.push([s.good_through + 1, at - 1]);
  return next;
}

// ---------------------------------------------------------------- statements

/** A root holder's signature added to a statement (one per holder: a second by the same key is refused). */
export function signStatement(signed: SignedStatement, holder: Signer): SignedStatement {
  const public_key = base64Encode(holder.publicKey);
  if (signed.signatures.some((s) => s.public_key === public_key)) throw new KeyEventError(`holder ${public_key} has already signed this statement`);
  const signature = base64Encode(holder.sign(statementMessage(signed.statement)));
  return { statement: signed.statement, signatures: [...signed.signatures, { public_key, signature }] };
}

/** The next statement's common members for a chain in `state`. */
function next(state: KeyState): { chain: string; sequence: number } {
  return { chain: state.chain, sequence: state.sequence + 1 };
}

/** Adopts (no root yet) or rotates the root; `online` defaults to the key in force. */
export function rootStatement(state: KeyState, root: { threshold: number; keys: string[] }, online?: OnlineKey): Statement {
  return {
    action: 'root',
    ...next(state),
    online: online ?? { signer: state.online.signer, public_key: state.online.publicKey },
    root: { version: (state.root?.version ?? 0) + 1, threshold: root.threshold, keys: [...root.keys] },
  };
}

/** Routine rotation of the online key. */
export function keyStatement(state: KeyState, online: OnlineKey): Statement {
  return { action: 'key', ...next(state), online };
}

/** Declares the online key in force compromised after block `goodThrough`, `online` taking over. */
export function compromiseStatement(state: KeyState, goodThrough: number, online: OnlineKey): Statement {
  return { action: 'compromise', ...next(state), online, compromised: state.online.publicKey, good_through: goodThrough };
}
