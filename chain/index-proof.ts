/**
 * Checking completeness-index proofs (docs/spec/index.md 6-7): parse a proof,
 * recompute the index root it implies for a URL or unit name, and redo the
 * version selection (chain/select.ts semantics) or the unit listing from the
 * events it carries.
 *
 * Owns: the proof parser (bounded: size, depth, event count), `verifyIndexProof`,
 * `selectFromEvents`, `unitVersions`, and the checkpoint extension line.
 * Trusts: the injected `CryptoBackend`'s sha256; nothing in the proof.
 * Must hold: pure (runs in a browser); never throws on hostile bytes (answers
 * `{ ok: false, reason }`); a proof is accepted only if it recomputes exactly
 * the expected root at the expected size.
 */
import type { CryptoBackend } from './crypto-backend.ts';
import { base64Decode, base64Encode, bytesEqual } from './encoding.ts';
import {
  EMPTY_TRIE,
  foldEvent,
  indexKey,
  indexRoot,
  INDEX_EXTENSION,
  keyBit,
  leafHash,
  nodeHash,
  readU16,
  readU32,
  readU64,
  type IndexEvent,
  type KeyKind,
} from './index-tree.ts';

/** Largest proof accepted (a unit with tens of thousands of versions stays below). */
export const MAX_PROOF_BYTES = 4 * 1024 * 1024;
const MAX_EVENTS = 200_000;
const MAX_VOIDS = 65_536;

export interface IndexProofResult {
  /** The log size the proof is for. */
  size: number;
  /** Whether the key has a leaf; its events when it does (else []). */
  present: boolean;
  events: IndexEvent[];
  voids: [number, number][];
}

export type Checked<T> = { ok: true; value: T } | { ok: false; reason: string };

const fail = (reason: string): { ok: false; reason: string } => ({ ok: false, reason });

/**
 * Checks `proof` for the key (kind, name) against the committed index root
 * of a checkpoint of `size` blocks.
 */
export function verifyIndexProof(
  c: CryptoBackend,
  proof: Uint8Array,
  kind: KeyKind,
  name: string,
  expected: { root: Uint8Array; size: number },
): Checked<IndexProofResult> {
  if (proof.length > MAX_PROOF_BYTES) return fail(`index proof of ${proof.length} bytes is over ${MAX_PROOF_BYTES}`);
  if (proof.length < 10 || proof[0] !== 0x01) return fail('index proof: not a vouch-index/v1 proof');
  const form = proof[1]!;
  const size = readU64(proof, 2);
  if (size !== expected.size) return fail(`index proof is for log size ${size}, the checkpoint is ${expected.size}`);
  const key = indexKey(c, kind, name);
  let o = 10;
  const need = (n: number) => o + n <= proof.length;
  let trie: Uint8Array;
  let present = false;
  const events: IndexEvent[] = [];
  if (form === 0x00) {
    if (!need(1) || proof[o] !== 0) return fail('index proof: bad empty-tree form');
    o += 1;
    trie = EMPTY_TRIE;
  } else if (form === 0x01 || form === 0x02) {
    if (!need(1)) return fail('index proof: truncated');
    const depth = proof[o++]!;
    if (!need(33 * depth)) return fail('index proof: truncated path');
    const bits: number[] = [];
    const sibs: Uint8Array[] = [];
    let last = -1;
    for (let i = 0; i < depth; i++) {
      const b = proof[o]!;
      if (b <= last) return fail('index proof: path bits not increasing');
      last = b;
      bits.push(b);
      sibs.push(proof.subarray(o + 1, o + 33));
      o += 33;
    }
    let h: Uint8Array;
    if (form === 0x01) {
      if (!need(4)) return fail('index proof: truncated');
      const count = readU32(proof, o);
      o += 4;
      if (count === 0 || count > MAX_EVENTS) return fail(`index proof: ${count} events`);
      let acc: Uint8Array = new Uint8Array(32);
      for (let i = 0; i < count; i++) {
        const start = o;
        const ev = parseEvent(proof, o);
        if (ev === null) return fail('index proof: bad event');
        o = ev.end;
        events.push(ev.event);
        acc = foldEvent(c, acc, proof.subarray(start, o));
      }
      h = leafHash(c, key, count, acc);
      present = true;
    } else {
      if (!need(68)) return fail('index proof: truncated leaf');
      const other = proof.subarray(o, o + 32);
      if (bytesEqual(other, key)) return fail("index proof: absence shown by the key's own leaf");
      for (const b of bits) if (keyBit(other, 0, b) !== keyBit(key, 0, b)) return fail('index proof: the leaf shown is not where the key leads');
      h = leafHash(c, other, readU32(proof, o + 32), proof.subarray(o + 36, o + 68));
      o += 68;
    }
    for (let i = depth - 1; i >= 0; i--) {
      h = keyBit(key, 0, bits[i]!) === 1 ? nodeHash(c, bits[i]!, sibs[i]!, h) : nodeHash(c, bits[i]!, h, sibs[i]!);
    }
    trie = h;
  } else {
    return fail(`index proof: unknown form ${form}`);
  }
  if (!need(4)) return fail('index proof: truncated voids');
  const nv = readU32(proof, o);
  o += 4;
  if (nv > MAX_VOIDS || !need(16 * nv)) return fail('index proof: bad void list');
  const voids: [number, number][] = [];
  for (let i = 0; i < nv; i++) {
    voids.push([readU64(proof, o), readU64(proof, o + 8)]);
    o += 16;
  }
  if (o !== proof.length) return fail('index proof: trailing bytes');
  const root = indexRoot(c, size, trie, voids);
  if (!bytesEqual(root, expected.root)) return fail(`index proof for ${kind} ${JSON.stringify(name.slice(0, 200))} does not lead to the committed index root`);
  return { ok: true, value: { size, present, events, voids } };
}

const DATE = /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/;

function parseEvent(b: Uint8Array, o: number): { event: IndexEvent; end: number } | null {
  const ascii = (p: number) => String.fromCharCode(...b.subarray(p, p + 10));
  if (b[o] === 0x52) {
    if (o + 27 > b.length) return null;
    const date = ascii(o + 17);
    if (!DATE.test(date)) return null;
    return { event: { kind: 'revoke', block: readU64(b, o + 1), target: readU64(b, o + 9), date }, end: o + 27 };
  }
  if (b[o] === 0x45) {
    if (o + 21 > b.length) return null;
    const sl = readU16(b, o + 19);
    if (o + 21 + sl > b.length) return null;
    const date = ascii(o + 9);
    if (!DATE.test(date)) return null;
    let semver: string;
    try {
      semver = new TextDecoder('utf-8', { fatal: true }).decode(b.subarray(o + 21, o + 21 + sl));
    } catch {
      return null;
    }
    return { event: { kind: 'endorse', block: readU64(b, o + 1), date, semver }, end: o + 21 + sl };
  }
  return null;
}

function isVoid(voids: readonly (readonly [number, number])[], i: number): boolean {
  for (const [a, b] of voids) if (i >= a && i <= b) return true;
  return false;
}

export interface EventSelection {
  block: number;
  semver: string;
  date: string;
  /** The revoke block in force for it (index and effective date), or null. */
  revokedBy: { block: number; date: string } | null;
}

/**
 * The selection of chain/select.ts redone from a URL's events: newest block;
 * `semver` exact; `at` greatest effective date <= at (ties to the highest
 * index); revoked versions skipped unless asked by exact semver, the best
 * one flagged when every candidate is revoked; void blocks (and void
 * revokes) ignored.
 */
export function selectFromEvents(
  events: readonly IndexEvent[],
  voids: readonly (readonly [number, number])[],
  q: { semver?: string | undefined; at?: string | undefined; today: string },
): EventSelection | null {
  const byDate = q.at !== undefined;
  const ref = q.at ?? q.today;
  const revokes = events.filter((e): e is Extract<IndexEvent, { kind: 'revoke' }> => e.kind === 'revoke' && !isVoid(voids, e.block));
  const revocationOf = (block: number): { block: number; date: string } | null => {
    let best: { block: number; date: string } | null = null;
    for (const r of revokes) if (r.target === block && r.date <= ref && (best === null || r.date < best.date)) best = { block: r.block, date: r.date };
    return best;
  };
  type V = Extract<IndexEvent, { kind: 'endorse' }>;
  const better = (a: V, b: V | null) => b === null || (byDate && a.date !== b.date ? a.date > b.date : a.block > b.block);
  let best: V | null = null;
  let bestLive: V | null = null;
  for (const e of events) {
    if (e.kind !== 'endorse' || isVoid(voids, e.block)) continue;
    if (q.semver !== undefined && e.semver !== q.semver) continue;
    if (q.at !== undefined && e.date > q.at) continue;
    if (better(e, best)) best = e;
    if (q.semver === undefined && revocationOf(e.block) === null && better(e, bestLive)) bestLive = e;
  }
  const chosen = bestLive ?? best;
  if (chosen === null) return null;
  return { block: chosen.block, semver: chosen.semver, date: chosen.date, revokedBy: revocationOf(chosen.block) };
}

export interface UnitVersion {
  semver: string;
  block: number;
  date: string;
  /** The revoke in force on `today`, or null. */
  revokedBy: { block: number; date: string } | null;
}

/** Every endorsed version of a unit from its events (void blocks left out), oldest first. */
export function unitVersions(events: readonly IndexEvent[], voids: readonly (readonly [number, number])[], today: string): UnitVersion[] {
  const out: UnitVersion[] = [];
  for (const e of events) {
    if (e.kind !== 'endorse' || isVoid(voids, e.block)) continue;
    let revokedBy: { block: number; date: string } | null = null;
    for (const r of events) {
      if (r.kind === 'revoke' && r.target === e.block && !isVoid(voids, r.block) && r.date <= today && (revokedBy === null || r.date < revokedBy.date))
        revokedBy = { block: r.block, date: r.date };
    }
    out.push({ semver: e.semver, block: e.block, date: e.date, revokedBy });
  }
  return out;
}

// ------------------------------------------------------------ checkpoint line

/** The checkpoint extension line committing the index root: `vouch-index/v1 <base64 root>`. */
export function indexExtensionLine(root: Uint8Array): string {
  return `${INDEX_EXTENSION} ${base64Encode(root)}`;
}

/** The index root a checkpoint's extension lines commit, null when none does, or a reason when the line is malformed or repeated. */
export function indexRootOf(extensions: readonly string[]): Uint8Array | null | { malformed: string } {
  let found: Uint8Array | null = null;
  for (const e of extensions) {
    if (!e.startsWith(INDEX_EXTENSION + ' ')) continue;
    if (found !== null) return { malformed: 'two vouch-index/v1 lines' };
    const r = base64Decode(e.slice(INDEX_EXTENSION.length + 1));
    if (r === null || r.length !== 32) return { malformed: 'vouch-index/v1 line is not a base64 32-byte root' };
    found = r;
  }
  return found;
}
