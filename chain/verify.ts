/**
 * Chain verification (docs/spec/design.md §1.7): offline, and by every
 * gateway before it serves. Two layers, so signatures spread over threads:
 * `examineBlock` checks what needs only the block and the authority key
 * (parsing, record hash, signature, artifact hash forms) into plain
 * `BlockFacts`; `ChainVerifier` walks facts in chain order (index,
 * prev_hash, signer, time, revoke targets) and reports the first failure
 * with its stable code in the order §1.7 fixes; then `verifyCheckpoint`.
 * Trusts: the injected `CryptoBackend`; a pinned key when given (else block
 * 0's, reported); a resumed verifier, the caller's `endorsedBefore`.
 * Must hold: a chain is accepted only if every block passes every check;
 * the state after N blocks is enough to resume at block N.
 */
import { VouchError, type IntegrityCode } from './errors.ts';
import type { CryptoBackend } from './crypto-backend.ts';
import { base64Decode, base64Encode, bytesEqual } from './encoding.ts';
import { type Block, type Checkpoint, ZERO_HASH, parseBlock, parseCheckpoint } from './block.ts';
import { checkpointMessage, parsedPayloadJcs, recordJcsAround } from './build.ts';
import { hashHex } from './crypto-backend.ts';
import { parseArtifactHash } from './hash-algorithms.ts';
import { isFullOrderPublicKey } from './weak-key.ts';
import { DigestList, DigestSet, hexOf } from './digest-set.ts';
import { applyKeyEvent, initialKeyState, KeyEventError, type KeyState, type SignedStatement } from './key-events.ts';

/** The authority in force: signer id and raw public key. */
export interface TrustedAuthority {
  signer: string;
  publicKey: string;
}

/** What `examineBlock` found; plain data (structured-clone safe). */
export type BlockFacts =
  | { position: number; malformed: string }
  | {
      position: number;
      malformed: null;
      index: number;
      /** The record_hash a revoke block names (null for other intents). */
      revokes: string | null;
      /** An endorse block (a revoke may name it). */
      endorse: boolean;
      /**
       * Set by the file reader: the file is not what the chain's branch
       * commits (checked last, reported as `malformed`). Null: it is, or
       * the reader has no branch to compare with.
       */
      fileError: string | null;
      prevHash: string;
      recordHash: string;
      computedRecordHash: string;
      posted: string;
      signer: string;
      /** null: not checked (no authority known yet). */
      signatureOk: boolean | null;
      artifactHashError: string | null;
      /** Block 0 only: the authority it declares. */
      authority: TrustedAuthority | null;
      /** A key block's statement and holders' signatures (checked when walked: they need the key state). */
      keyEvent: SignedStatement | null;
      /** When the signature fails with the key in force but verifies with a retired key: that key. */
      retiredKey: string | null;
    };

// The key decoded last (a chain has one authority key): strings are immutable, so the memo is exact.
let lastKeyB64: string | null = null;
let lastKeyRaw: Uint8Array | null = null;

function decodeKey(b64: string): Uint8Array | null {
  if (b64 === lastKeyB64) return lastKeyRaw === null ? null : lastKeyRaw.slice();
  const raw = base64Decode(b64);
  lastKeyB64 = b64;
  lastKeyRaw = raw !== null && raw.length === 32 ? raw : null;
  return lastKeyRaw === null ? null : lastKeyRaw.slice();
}

// One UTF-8 encoding per examined block, into a reused buffer: the record's
// JCS (hashed for record_hash), whose middle is the payload's JCS (the
// signed message). Valid until the next call; nothing keeps a view of it.
// A rare larger block gets a buffer of its own, so none stays held after it.
const encoder = new TextEncoder();
const scratch = new Uint8Array(64 * 1024);

function encodeRecord(before: string, payloadJcs: string, after: string): { record: Uint8Array; payload: Uint8Array } {
  const most = 3 * (before.length + payloadJcs.length + after.length); // UTF-8 bytes per UTF-16 unit: at most 3
  const buf = most <= scratch.length ? scratch : new Uint8Array(most);
  const a = encoder.encodeInto(before, buf).written;
  const b = a + encoder.encodeInto(payloadJcs, buf.subarray(a)).written;
  const c = b + encoder.encodeInto(after, buf.subarray(b)).written;
  return { record: buf.subarray(0, c), payload: buf.subarray(a, b) };
}

function signatureValid(backend: CryptoBackend, publicKey: Uint8Array, message: Uint8Array, signature: string): boolean {
  const sig = base64Decode(signature);
  return sig !== null && sig.length === 64 && backend.verify(publicKey, message, sig);
}

/** The retired key (base64) a signature that failed verifies with, or null (run only on a failure). */
function retiredSigner(backend: CryptoBackend, retired: readonly string[] | undefined, message: Uint8Array, sig: Uint8Array | null): string | null {
  if (!retired || sig === null) return null;
  for (const k of retired) {
    const raw = decodeKey(k);
    if (raw !== null && backend.verify(raw, message, sig)) return k;
  }
  return null;
}

/**
 * Checks a block on its own. `authority` is the authority in force (null
 * for block 0, which is checked against the key it declares).
 */
export function examineBlock(
  value: unknown,
  position: number,
  authority: TrustedAuthority | null,
  backend: CryptoBackend,
  retired?: readonly string[],
): { facts: BlockFacts; block: Block | null } {
  let block: Block;
  try {
    block = parseBlock(value, position);
  } catch (e) {
    if (e instanceof VouchError && e.code === 'malformed') return { facts: { position, malformed: e.message }, block: null };
    throw e;
  }
  return { facts: examineParsed(block, position, authority, backend, undefined, retired), block };
}

/**
 * Signature checks put off until a batch of blocks has been examined, then
 * made one after another (`check`): ed25519 verification runs at the raw
 * loop's rate only while its code and tables stay in the CPU's caches, and
 * parsing a block between two checks costs each check ~10% more
 * (bench/RESULTS.md "vouch verify"). The facts a batch holds say
 * `signatureOk: null` until `check` has set it; nothing may read them
 * before. The signed messages are copied (the examiner's buffer is reused).
 */
export class SignatureBatch {
  private facts: { signatureOk: boolean | null; retiredKey?: string | null }[] = [];
  private retired: (readonly string[] | undefined)[] = [];
  private keys: Uint8Array[] = [];
  private sigs: (Uint8Array | null)[] = [];
  private ends: number[] = [];
  private arena = new Uint8Array(64 * 1024);
  private used = 0;

  get size(): number {
    return this.facts.length;
  }

  add(
    facts: { signatureOk: boolean | null; retiredKey?: string | null },
    key: Uint8Array,
    message: Uint8Array,
    signature: string,
    retired?: readonly string[],
  ): void {
    if (this.used + message.length > this.arena.length) {
      const grown = new Uint8Array(Math.max(2 * this.arena.length, this.used + message.length));
      grown.set(this.arena.subarray(0, this.used));
      this.arena = grown;
    }
    this.arena.set(message, this.used);
    this.used += message.length;
    this.facts.push(facts);
    this.retired.push(retired !== undefined && retired.length > 0 ? retired : undefined);
    this.keys.push(key);
    const sig = base64Decode(signature);
    this.sigs.push(sig !== null && sig.length === 64 ? sig : null);
    this.ends.push(this.used);
  }

  /** Makes every check put off, sets each block's `signatureOk`, and empties the batch. */
  check(backend: CryptoBackend): void {
    let from = 0;
    for (let i = 0; i < this.facts.length; i++) {
      const sig = this.sigs[i]!;
      const to = this.ends[i]!;
      const f = this.facts[i]!;
      f.signatureOk = sig !== null && backend.verify(this.keys[i]!, this.arena.subarray(from, to), sig);
      if (!f.signatureOk && this.retired[i] !== undefined) f.retiredKey = retiredSigner(backend, this.retired[i], this.arena.subarray(from, to), sig);
      from = to;
    }
    this.facts.length = this.keys.length = this.sigs.length = this.ends.length = this.retired.length = 0;
    this.used = 0;
  }
}

/**
 * `examineBlock` of a block `parseBlock` returned (a reader that parsed it
 * itself: `parseBlockFile`). With `batch`, the signature check is put off
 * to `batch.check` (the facts say `signatureOk: null` until then).
 */
export function examineParsed(
  block: Block,
  position: number,
  authority: TrustedAuthority | null,
  backend: CryptoBackend,
  batch?: SignatureBatch,
  retired?: readonly string[],
): BlockFacts {
  const declared = position === 0 && block.payload.authority ? { signer: block.payload.authority.signer, publicKey: block.payload.authority.public_key } : null;
  // A key block is signed by the online key its statement puts in force (docs/spec/key-events.md).
  const p0 = block.payload;
  const keyEvent = p0.intent === 'key' ? { statement: p0.statement!, signatures: p0.signatures! } : null;
  const keyB64 = position === 0 ? declared?.publicKey : keyEvent !== null ? keyEvent.statement.online.public_key : authority?.publicKey;
  const key = keyB64 === undefined ? null : decodeKey(keyB64);
  let artifactHashError: string | null = null;
  for (const e of block.payload.endorsements) {
    const parsed = parseArtifactHash(e.artifact_hash);
    if (typeof parsed === 'string') {
      artifactHashError = `${e.artifact_url}: ${parsed}`;
      break;
    }
  }
  const [before, after] = recordJcsAround(block);
  const { record, payload } = encodeRecord(before, parsedPayloadJcs(block.payload), after);
  const facts: BlockFacts = {
    position,
    malformed: null,
    index: block.index,
    revokes: block.payload.intent === 'revoke' ? block.payload.target_hash : null,
    endorse: block.payload.intent === 'endorse',
    fileError: null,
    prevHash: block.prev_hash,
    recordHash: block.record_hash,
    computedRecordHash: hashHex(backend, 'sha256', record),
    posted: block.posted,
    signer: block.signer,
    signatureOk: key === null || batch !== undefined ? null : signatureValid(backend, key, payload, block.signature),
    artifactHashError,
    authority: declared,
    keyEvent,
    retiredKey: null,
  };
  if (facts.signatureOk === false && keyEvent === null) facts.retiredKey = retiredSigner(backend, retired, payload, base64Decode(block.signature));
  if (key !== null && batch !== undefined) batch.add(facts, key, payload, block.signature, keyEvent === null ? retired : undefined);
  return facts;
}

/** Enough to resume verification after `size` blocks. */
export interface VerifierState {
  size: number;
  /** record_hash of block size-1 (ZERO_HASH when size is 0). */
  head: string;
  /** `posted` of block size-1 ('' when size is 0). */
  lastPosted: string;
  /** The online key in force (after key events: the current one). */
  authority: TrustedAuthority | null;
  /** Root, online key, retired keys and void ranges (docs/spec/key-events.md); null only before block 0. */
  keys: KeyState | null;
}

export const EMPTY_STATE: VerifierState = { size: 0, head: ZERO_HASH, lastPosted: '', authority: null, keys: null };

export interface VerifierOptions {
  backend: CryptoBackend;
  /** Pinned authority public key (base64 or raw). */
  pinnedPublicKey?: string | Uint8Array | null;
  /** Resume after an already verified prefix. */
  state?: VerifierState;
  /**
   * With `state`: whether a block before it is an endorse block with this
   * record_hash (a revoke must name one). Without it, a resumed verifier
   * defers a revoke whose target it has not seen itself (`deferredRevokes`,
   * for the caller to check); one that starts at block 0 has seen every
   * earlier block and refuses it.
   */
  endorsedBefore?: (recordHash: string) => boolean;
  /**
   * Record what the walk learns (`walk`), for a verifier that will adopt
   * this one's state (`advanceTo`): a verification worker's walker.
   */
  recordWalk?: boolean;
}

/** A revoke a resumed verifier could not check: its target would be before the state it started from. */
export interface DeferredRevoke {
  position: number;
  target: string;
}

/** What a verifier walking a stretch of the chain learned that the one adopting its state needs (`advanceTo`). */
export interface WalkRecord {
  /** record_hashes of the endorse blocks it accepted, as bytes, 32 each (`DigestList`: one buffer, not a string each). */
  endorsed: Uint8Array;
  /** Revokes whose targets it could not check, in chain order. */
  deferred: readonly DeferredRevoke[];
}

export class ChainVerifier {
  readonly backend: CryptoBackend;
  private readonly pinned: Uint8Array | null;
  private s: VerifierState;
  /** The state size it started from (0: it sees every block a revoke can name). */
  private readonly startedAt: number;
  private readonly endorsedBefore: ((recordHash: string) => boolean) | null;
  /** record_hashes of the endorse blocks it knows: accepted, learned, or adopted with a walk (32 bytes each, not strings). */
  private readonly endorsed = new DigestSet();
  /** With `recordWalk`: the endorse blocks it accepted or adopted (`walk`). */
  private readonly acceptedEndorse: DigestList | null;
  private readonly deferred: DeferredRevoke[] = [];

  constructor(options: VerifierOptions) {
    this.backend = options.backend;
    const p = options.pinnedPublicKey;
    if (p === undefined || p === null) this.pinned = null;
    else if (typeof p === 'string') {
      const raw = decodeKey(p);
      if (raw === null) throw new VouchError('key_error', 'the pinned public key is not base64 of a 32-byte ed25519 key');
      this.pinned = raw;
    } else this.pinned = p;
    this.s = { ...(options.state ?? EMPTY_STATE) };
    this.startedAt = this.s.size;
    this.endorsedBefore = options.endorsedBefore ?? null;
    this.acceptedEndorse = options.recordWalk === true ? new DigestList() : null;
    const first = this.s.keys?.first ?? this.s.authority?.publicKey;
    if (this.pinned && first !== undefined && !bytesEqual(decodeKey(first) ?? new Uint8Array(), this.pinned)) {
      throw new VouchError('untrusted_authority', 'the verified chain was signed by a different authority than the pinned key', {
        index: 0,
        evidence: { pinned: base64Encode(this.pinned), chain: first },
      });
    }
  }

  get state(): VerifierState {
    return { ...this.s };
  }

  get size(): number {
    return this.s.size;
  }

  get authority(): TrustedAuthority | null {
    return this.s.authority;
  }

  /** The key state (root, online key, retired keys, voids); null before block 0. */
  get keys(): KeyState | null {
    return this.s.keys;
  }

  /** Parses, checks and appends the next block; returns it parsed. */
  add(value: unknown): Block {
    const { facts, block } = examineBlock(value, this.s.size, this.s.authority, this.backend, this.s.keys?.retired);
    this.addFacts(facts);
    return block!;
  }

  /**
   * What this verifier's walk learned, for the one that adopts its state
   * (`advanceTo`). Only with `recordWalk` (a TypeError otherwise).
   */
  get walk(): WalkRecord {
    if (this.acceptedEndorse === null) throw new TypeError('this verifier does not record its walk (recordWalk)');
    return { endorsed: this.acceptedEndorse.bytes, deferred: this.deferred };
  }

  /** Revokes it could not check (resumed without `endorsedBefore`), in chain order. */
  get deferredRevokes(): readonly DeferredRevoke[] {
    return this.deferred;
  }

  /** Endorse blocks before its state that a revoke it checks may name (a worker's batch start). */
  learnEndorsed(recordHashes: Iterable<string>): void {
    for (const h of recordHashes) this.endorsed.addHex(h);
  }

  /**
   * Takes over a state another verifier reached by walking on from this
   * one's current state (a worker that checked a batch): same authority,
   * further along. The caller vouches that the walk started from `state`.
   * `walk`: what that verifier learned (`ChainVerifier.walk`); the revokes it
   * deferred are checked here first, against the blocks before the walk.
   * @throws VouchError `malformed` at the first deferred revoke that names no earlier endorse block.
   */
  advanceTo(state: VerifierState, walk?: WalkRecord): void {
    const a = this.s.authority;
    const rotated = (state.keys?.sequence ?? 0) > (this.s.keys?.sequence ?? 0); // a key event in the walk
    if (
      a === null ||
      state.authority === null ||
      (!rotated && (state.authority.publicKey !== a.publicKey || state.authority.signer !== a.signer)) ||
      state.size < this.s.size ||
      state.keys?.chain !== this.s.keys?.chain ||
      (state.keys?.sequence ?? 0) < (this.s.keys?.sequence ?? 0)
    ) {
      throw new TypeError(`cannot advance from block ${this.s.size} to a state of another authority or an earlier block`);
    }
    if (walk) {
      for (const d of walk.deferred) {
        if (d.position < this.s.size || d.position >= state.size) throw new TypeError(`a deferred revoke at block ${d.position} is outside the walk`);
        const known = this.targetKnown(d.target);
        if (known === false) throw badRevoke(d.position, d.target);
        if (known === null) this.deferred.push(d); // this verifier was resumed too: its caller checks
      }
      if (this.acceptedEndorse === null) this.endorsed.addAll(walk.endorsed);
      else for (let at = 0; at < walk.endorsed.length; at += 32) this.remember(hexOf(walk.endorsed, at));
    }
    this.s = { ...state };
  }

  /** Whether `target` names an endorse block before the current state: null when this verifier cannot tell. */
  private targetKnown(target: string): boolean | null {
    if (this.endorsed.hasHex(target)) return true;
    if (this.endorsedBefore !== null) return this.endorsedBefore(target);
    return this.startedAt === 0 ? false : null;
  }

  private remember(recordHash: string): void {
    if (this.endorsed.addHex(recordHash)) this.acceptedEndorse?.pushHex(recordHash);
  }

  /** Appends the next block from facts computed elsewhere (e.g. a worker). */
  addFacts(f: BlockFacts): void {
    const p = this.s.size;
    const fail = (code: IntegrityCode, message: string, evidence?: Record<string, unknown>): never => {
      throw new VouchError(code, `${code} at block ${p}: ${message}`, { index: p, ...(evidence ? { evidence } : {}) });
    };
    if (f.position !== p) throw new TypeError(`facts for position ${f.position} given at position ${p}`);
    // 1. malformed
    if (f.malformed !== null) return fail('malformed', f.malformed.replace(/^block \d+: /, ''));
    // ... including a revoke that names no earlier endorse block (the authority block, another revoke, nothing)
    const target = f.revokes === null ? true : this.targetKnown(f.revokes);
    if (target === false) throw badRevoke(p, f.revokes!);
    // 2. index_gap
    if (f.index !== p) fail('index_gap', `block at position ${p} has index ${f.index}`, { expected: p, actual: f.index });
    // 3. prev_hash_mismatch
    if (f.prevHash !== this.s.head) fail('prev_hash_mismatch', 'prev_hash does not name the previous block', { expected: this.s.head, actual: f.prevHash });
    // 4. record_hash_mismatch
    if (f.recordHash !== f.computedRecordHash) {
      fail('record_hash_mismatch', 'record_hash does not match the block content', { stored: f.recordHash, computed: f.computedRecordHash });
    }
    let authority = this.s.authority;
    let keys = this.s.keys;
    if (p === 0) {
      // 5. weak_key, then untrusted_authority
      const declared = f.authority!;
      const raw = decodeKey(declared.publicKey)!;
      if (!isFullOrderPublicKey(raw)) fail('weak_key', 'the authority public key is not a full-order ed25519 key', { public_key: declared.publicKey });
      if (this.pinned && !bytesEqual(raw, this.pinned)) {
        fail('untrusted_authority', 'the authority key differs from the pinned key', { pinned: base64Encode(this.pinned), chain: declared.publicKey });
      }
      authority = declared;
      keys = initialKeyState(f.recordHash, declared.signer, declared.publicKey);
    }
    // A key block is signed by the online key its statement puts in force.
    const signing = f.keyEvent !== null ? { signer: f.keyEvent.statement.online.signer, publicKey: f.keyEvent.statement.online.public_key } : authority!;
    // 6. signer_mismatch
    if (f.signer !== signing.signer) fail('signer_mismatch', `signed by ${JSON.stringify(f.signer)}, the authority is ${JSON.stringify(signing.signer)}`);
    // 7. bad_signature (retired_key: it verifies with a key retired earlier, which signs nothing after its retirement)
    if (f.signatureOk === null) throw new TypeError(`signature of block ${p} was not checked`);
    if (!f.signatureOk && f.retiredKey) {
      fail('retired_key', `signed by the retired key ${f.retiredKey}; the key in force since block ${keys!.online.since} is ${signing.publicKey}`, {
        retired_key: f.retiredKey,
        public_key: signing.publicKey,
        since: keys!.online.since,
      });
    }
    if (!f.signatureOk)
      fail(
        'bad_signature',
        f.keyEvent !== null ? 'the key block is not signed by the online key its statement names' : 'the signature does not verify with the authority key',
        { public_key: signing.publicKey },
      );
    // 7b. bad_key_event: the statement against the key state (root threshold, sequence, keys)
    if (f.keyEvent !== null) {
      try {
        keys = applyKeyEvent(this.backend, keys!, f.keyEvent, p);
      } catch (e) {
        if (!(e instanceof KeyEventError)) throw e;
        fail('bad_key_event', e.why, { sequence: f.keyEvent.statement.sequence, action: f.keyEvent.statement.action });
      }
      authority = { signer: keys!.online.signer, publicKey: keys!.online.publicKey };
    }
    // 8. time_regression
    if (f.posted < this.s.lastPosted) fail('time_regression', `posted ${f.posted} is earlier than the previous block's ${this.s.lastPosted}`);
    // 9. bad_artifact_hash
    if (f.artifactHashError !== null) fail('bad_artifact_hash', f.artifactHashError);
    // Last: the file the block was read from is not what the branch commits.
    if (f.fileError !== null) fail('malformed', f.fileError);
    if (target === null) this.deferred.push({ position: p, target: f.revokes! });
    if (f.endorse) this.remember(f.recordHash);
    this.s = { size: p + 1, head: f.recordHash, lastPosted: f.posted, authority, keys };
  }

  /**
   * Checks a checkpoint against the verified chain: signer, signature, size, head.
   * @throws VouchError `checkpoint_mismatch` with index null.
   */
  verifyCheckpoint(value: unknown): Checkpoint {
    const cp = parseCheckpoint(value);
    const a = this.s.authority;
    const fail = (message: string, evidence?: Record<string, unknown>): never => {
      throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${message}`, { index: null, ...(evidence ? { evidence } : {}) });
    };
    if (a === null) fail('no verified chain to compare the checkpoint with');
    if (cp.signer !== a!.signer) fail(`signed by ${JSON.stringify(cp.signer)}, the authority is ${JSON.stringify(a!.signer)}`);
    if (!signatureValid(this.backend, decodeKey(a!.publicKey)!, checkpointMessage(cp), cp.signature)) fail('the checkpoint signature does not verify');
    if (cp.size !== this.s.size) fail(`checkpoint says ${cp.size} blocks, the chain has ${this.s.size}`, { checkpoint_size: cp.size, chain_size: this.s.size });
    if (cp.head !== this.s.head) fail('checkpoint head is not the chain head', { checkpoint_head: cp.head, chain_head: this.s.head });
    return cp;
  }
}

function badRevoke(position: number, target: string): VouchError {
  return new VouchError(
    'malformed',
    `malformed at block ${position}: payload.target_hash: revokes ${target}, which is not an earlier endorse block of this chain`,
    {
      index: position,
      evidence: { target_hash: target },
    },
  );
}

export type VerifyResult =
  | { ok: true; size: number; head: string; authority: TrustedAuthority; keys: KeyState; checkpoint: Checkpoint | null }
  | { ok: false; code: IntegrityCode; index: number | null; message: string; error: VouchError };

/** Verifies a whole chain held in memory (blocks as parsed JSON values). */
export function verifyChain(blocks: readonly unknown[], options: VerifierOptions & { checkpoint?: unknown }): VerifyResult {
  try {
    const v = new ChainVerifier(options);
    if (blocks.length === 0 && v.size === 0) throw new VouchError('malformed', 'malformed at block 0: the chain has no blocks', { index: 0 });
    for (const b of blocks) v.add(b);
    const checkpoint = options.checkpoint === undefined || options.checkpoint === null ? null : v.verifyCheckpoint(options.checkpoint);
    const s = v.state;
    return { ok: true, size: s.size, head: s.head, authority: s.authority!, keys: s.keys!, checkpoint };
  } catch (e) {
    if (e instanceof VouchError && e.kind === 'integrity') {
      return { ok: false, code: e.code as IntegrityCode, index: e.index ?? null, message: e.message, error: e };
    }
    throw e;
  }
}
