/**
 * What `vouch get` checks of a gateway's transparency proofs (issue 17): the
 * `Vouch-Proof` object, its signed checkpoint note, the block's inclusion,
 * consistency with remembered and other gateways' checkpoints, a policy's
 * witness quorum, and which gateway's selection decides (`decide`).
 * Owns: the proof object's form, the refusals and their wording, the
 * SECURITY ERROR evidence. No HTTP: the caller's callbacks fetch, and what
 * they return is untrusted.
 * Trusts: the pinned `--public-key`, `--origin`, `--policy`; the chain/
 * modules for the cryptography.
 * Must hold: a checkpoint is accepted only with a valid authority signature;
 * a block only when proven at its own index; a remembered checkpoint is
 * replaced only by a larger or equal one proven consistent, and a smaller
 * deciding one is refused.
 */
import { INDEX_EXTENSION } from '../../chain/index-tree.ts';
import { VouchError, type ErrorCode } from '../../chain/errors.ts';
import { base64Decode, base64Encode, bytesEqual, hexDecode, hexEncode } from '../../chain/encoding.ts';
import type { CryptoBackend } from '../../chain/crypto-backend.ts';
import type { Block } from '../../chain/block.ts';
import { leafHash, verifyConsistency, verifyInclusion } from '../../chain/merkle.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { noteKeyId, SIG_ED25519, type Note } from '../../chain/note.ts';
import { checkQuorum, type Policy } from '../../chain/tlog-policy.ts';

/**
 * A refusal of `vouch get`: exit 1, `code: line` on stderr, `evidence`
 * (multi-line text) before it when set. A VouchError of the catalogue's code
 * (chain/errors.ts, kind `answer`, or `revoked`), so it is caught, mapped
 * and logged as every other error; `line` is its message.
 */
export class Refusal extends VouchError {
  readonly line: string;
  /** Multi-line evidence printed before the line (the catalogue's record-shaped `evidence` holds it as `text`). */
  readonly evidenceText: string | undefined;
  constructor(code: ErrorCode, line: string, evidence?: string) {
    super(code, line, evidence === undefined ? {} : { evidence: { text: evidence } });
    this.name = 'Refusal';
    this.line = line;
    this.evidenceText = evidence;
  }
}

export interface ProofObject {
  index: number;
  size: number;
  proof: Uint8Array[];
  checkpoint: string;
}

/** The most hashes an inclusion or consistency proof has in a tree of 2^63 leaves (and some slack). */
const MAX_PROOF_HASHES = 128;
const MAX_NOTE_CHARS = 1 << 20;

function hashList(value: unknown, what: string): Uint8Array[] {
  if (!Array.isArray(value) || value.length > MAX_PROOF_HASHES)
    throw new Refusal('bad_proof', `${what}: "proof" is not a list of at most ${MAX_PROOF_HASHES} hashes`);
  return value.map((h, i) => {
    const b = typeof h === 'string' ? base64Decode(h) : null;
    if (b === null || b.length !== 32) throw new Refusal('bad_proof', `${what}: proof hash ${i} is not base64 of 32 bytes`);
    return b;
  });
}

/** Parses a proof object (from the `Vouch-Proof` header text or a lookup's `proof` member). */
export function parseProofObject(value: unknown, where: string): ProofObject {
  let v = value;
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v);
    } catch {
      throw new Refusal('bad_proof', `${where}: the proof is not JSON`);
    }
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Refusal('bad_proof', `${where}: the proof is not a JSON object`);
  const o = v as Record<string, unknown>;
  const int = (k: string) => {
    const n = o[k];
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) throw new Refusal('bad_proof', `${where}: proof "${k}" is not a non-negative integer`);
    return n;
  };
  const index = int('index');
  const size = int('size');
  if (typeof o.checkpoint !== 'string' || o.checkpoint.length > MAX_NOTE_CHARS)
    throw new Refusal('bad_proof', `${where}: proof "checkpoint" is not a note text`);
  return { index, size, proof: hashList(o.proof, where), checkpoint: o.checkpoint };
}

/** Parses `/v1/proof/consistency` JSON; `from`/`to` must be the ones asked. */
export function parseConsistencyAnswer(value: unknown, from: number, to: number, where: string): Uint8Array[] {
  const o = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
  if (o.from !== from || o.to !== to) throw new Refusal('bad_proof', `${where}: the consistency answer is not for ${from}..${to}`);
  return hashList(o.proof, where);
}

/** Parses `/v1/proof/inclusion` JSON; `index`/`size` must be the ones asked. */
export function parseInclusionAnswer(value: unknown, index: number, size: number, where: string): Uint8Array[] {
  const o = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
  if (o.index !== index || o.size !== size) throw new Refusal('bad_proof', `${where}: the inclusion answer is not for index ${index} in size ${size}`);
  return hashList(o.proof, where);
}

/** A checkpoint whose authority signature verified, and where it came from. */
export interface VerifiedCheckpoint {
  origin: string;
  size: number;
  root: Uint8Array;
  /** The signed note text as received. */
  text: string;
  note: Note;
  /** Who showed it: a gateway URL or the state file. */
  source: string;
}

export interface Authority {
  publicKey: Uint8Array;
  origin?: string;
}

/** Opens a checkpoint note against the authority; refusal `bad_checkpoint` naming `source` when it does not verify. */
export function openVerified(c: CryptoBackend, text: string, authority: Authority, source: string): VerifiedCheckpoint {
  try {
    const { checkpoint, note } = openCheckpoint(c, text, authority);
    // The one extension line vouch writes: the completeness index root (docs/spec/index.md 5), once.
    const known = checkpoint.extensions.filter((e) => e.startsWith(INDEX_EXTENSION + ' '));
    if (checkpoint.extensions.length > known.length || known.length > 1) {
      throw new Refusal('bad_checkpoint', `${source}: the checkpoint has extension lines other than one ${INDEX_EXTENSION} line`);
    }
    return { origin: checkpoint.origin, size: checkpoint.size, root: checkpoint.root, text, note, source };
  } catch (e) {
    if (e instanceof Refusal) throw e;
    if (e instanceof VouchError) throw new Refusal('bad_checkpoint', `${source}: ${e.message}`);
    throw e;
  }
}

/**
 * Checks a proof object for `block`: the checkpoint is the authority's, its
 * size is the proof's, the index is the block's, and the block's record_hash
 * is proven at that index.
 */
export function checkBlockProof(c: CryptoBackend, block: Block, p: ProofObject, authority: Authority, source: string): VerifiedCheckpoint {
  const cp = openVerified(c, p.checkpoint, authority, source);
  if (cp.size !== p.size) throw new Refusal('bad_proof', `${source}: the proof is for size ${p.size}, its checkpoint is size ${cp.size}`);
  if (p.index !== block.index) throw new Refusal('bad_proof', `${source}: the proof is for index ${p.index}, the block is ${block.index}`);
  if (block.index >= cp.size) throw new Refusal('bad_proof', `${source}: block ${block.index} is not in a tree of ${cp.size}`);
  const entry = hexDecode(block.record_hash)!;
  if (!verifyInclusion(c, block.index, cp.size, leafHash(c, entry), p.proof, cp.root)) {
    throw new Refusal(
      'bad_proof',
      `${source}: the inclusion proof of block ${block.index} (${block.record_hash}) does not verify against the checkpoint of size ${cp.size}`,
    );
  }
  return cp;
}

/** Requires the policy's quorum of witness cosignatures on `cp`, and that the policy names this log with the pinned key. */
export function checkPolicy(c: CryptoBackend, policy: Policy, cp: VerifiedCheckpoint, authority: Authority): void {
  const log = policy.logs.find((l) => l.name === cp.origin && bytesEqual(l.publicKey, authority.publicKey));
  if (log === undefined) {
    const keyId = hexEncode(noteKeyId(c, cp.origin, SIG_ED25519, authority.publicKey));
    throw new Refusal(
      'policy',
      `the policy has no "log" line for ${cp.origin}+${keyId} (the pinned --public-key under the checkpoint's origin); it names ${policy.logs.map((l) => l.vkey.split('+').slice(0, 2).join('+')).join(', ') || 'no log'}`,
    );
  }
  const q = checkQuorum(c, policy, cp.note);
  if (!q.ok) {
    const missing = [...policy.witnesses.keys()].filter((w) => !q.signed.includes(w));
    throw new Refusal(
      'quorum',
      `${cp.source}: the checkpoint of ${cp.origin} size ${cp.size} lacks the witness quorum: ${q.why ?? 'not met'}; missing cosignatures: ${missing.join(', ') || 'none'}`,
    );
  }
}

const indent = (text: string) =>
  text
    .replace(/\n$/, '')
    .split('\n')
    .map((l) => `\t${l}`)
    .join('\n');

/**
 * The self-contained evidence of a fork or rollback (after Go's sumdb
 * "SECURITY ERROR"): both signed notes in full, the proof, what failed,
 * what it means and what to do.
 */
export function securityError(o: {
  older: VerifiedCheckpoint;
  newer: VerifiedCheckpoint;
  proof?: { hashes: Uint8Array[]; source: string };
  failed: string;
  stateFile: string;
}): Refusal {
  const sameSize = o.older.size === o.newer.size;
  const text = [
    'SECURITY ERROR',
    `the transparency log ${JSON.stringify(o.newer.origin)} shows two histories that cannot both be true.`,
    '',
    `checkpoint seen before (size ${o.older.size}, from ${o.older.source}):`,
    indent(o.older.text),
    '',
    `checkpoint now (size ${o.newer.size}, from ${o.newer.source}):`,
    indent(o.newer.text),
    '',
    ...(o.proof
      ? [
          `consistency proof ${o.older.size} -> ${o.newer.size} (from ${o.proof.source}, ${o.proof.hashes.length} hashes):`,
          o.proof.hashes.length ? indent(o.proof.hashes.map(base64Encode).join('\n')) : '\t(empty)',
          '',
        ]
      : []),
    `what failed: ${o.failed}`,
    '',
    sameSize
      ? 'what it means: both notes carry valid signatures by the authority key and name the same tree size with different roots. ' +
        "This is proof, checkable by anyone with the authority's verifier key, that the log's key signed two different histories " +
        '(a fork: different clients are shown different chains), or that the key is in other hands.'
      : 'what it means: both notes carry valid signatures by the authority key, but the newer tree was not shown to extend the older one. ' +
        'Either the log forked or rewrote its history (its key signed both), or the gateway sent a wrong proof. ' +
        'Ask another gateway for /v1/proof/consistency?from=' +
        o.older.size +
        '&to=' +
        o.newer.size +
        ': if no correct proof exists, the notes above are the evidence.',
    '',
    `what to do: do not use artifacts from this log until it is explained. Keep this message; send it to the log's operator and to your security contact. ` +
      `Nothing was written; the state file ${o.stateFile} is unchanged.`,
  ].join('\n');
  return new Refusal('security_error', `the log ${o.newer.origin} is inconsistent: ${o.failed} (SECURITY ERROR above)`, text);
}

/**
 * Relates `newer` (at least as large) to `older`: same size → same root;
 * larger → a consistency proof, fetched by `fetchProof` (untrusted), must
 * verify. Throws the SECURITY ERROR otherwise.
 */
export async function proveExtends(
  c: CryptoBackend,
  older: VerifiedCheckpoint,
  newer: VerifiedCheckpoint,
  fetchProof: (from: number, to: number) => Promise<{ hashes: Uint8Array[]; source: string }>,
  stateFile: string,
): Promise<void> {
  if (newer.size < older.size) throw new Error('proveExtends: newer is smaller');
  if (newer.size === older.size) {
    if (!bytesEqual(newer.root, older.root)) {
      throw securityError({
        older,
        newer,
        failed: `two signed checkpoints of size ${newer.size} with different roots (${base64Encode(older.root)} and ${base64Encode(newer.root)})`,
        stateFile,
      });
    }
    return;
  }
  const proof = await fetchProof(older.size, newer.size);
  if (!verifyConsistency(c, older.size, newer.size, older.root, newer.root, proof.hashes)) {
    throw securityError({ older, newer, proof, failed: `the consistency proof from size ${older.size} to ${newer.size} does not verify`, stateFile });
  }
}

/** The refusal for a checkpoint older than the one remembered: a stale or replayed answer. */
export function staleCheckpoint(seen: VerifiedCheckpoint, got: VerifiedCheckpoint): Refusal {
  return new Refusal(
    'stale_checkpoint',
    `${got.source} answered with a checkpoint of size ${got.size}, older than the size ${seen.size} already seen for ${got.origin} (${seen.source}): ` +
      'a stale or replayed answer may hide newer blocks (a newer version, a revocation); refused. Try another gateway, or one that has caught up',
  );
}

export interface GatewayAnswer {
  gateway: string;
  block: Block;
  cp: VerifiedCheckpoint;
}

/**
 * What the deciding gateway shows for a block a smaller tree selects and it
 * does not: the revoke block it names (its signature and record_hash
 * already checked by the caller), and that block's inclusion proof in the
 * deciding checkpoint. Untrusted until `checkRevocation` passes.
 */
export interface RevocationEvidence {
  revoke: Block;
  proof: Uint8Array[];
}

/**
 * Requires `ev` to show `older`'s block revoked, on `date`, by a block
 * `older`'s tree could not hold (at or past its size) and that is in
 * `newest`'s tree. Returns why it does not, or null when it does.
 */
export function checkRevocation(c: CryptoBackend, older: GatewayAnswer, newest: GatewayAnswer, ev: RevocationEvidence, date: string): string | null {
  const r = ev.revoke;
  if (r.payload.intent !== 'revoke') return `block ${r.index}, named as its revocation, is not a revoke block`;
  if (r.payload.target_hash !== older.block.record_hash) return `block ${r.index} revokes ${r.payload.target_hash}, not block ${older.block.index}`;
  if (r.index < older.cp.size)
    return `its revocation, block ${r.index}, is inside the tree of size ${older.cp.size}, so that gateway should not select the block`;
  if (r.index >= newest.cp.size) return `its revocation, block ${r.index}, is not in the tree of size ${newest.cp.size}`;
  if (r.payload.effective_date > date) return `its revocation, block ${r.index}, takes effect ${r.payload.effective_date}, after ${date}`;
  if (!verifyInclusion(c, r.index, newest.cp.size, leafHash(c, hexDecode(r.record_hash)!), ev.proof, newest.cp.root)) {
    return `the inclusion proof of its revocation, block ${r.index}, does not verify against the checkpoint of size ${newest.cp.size}`;
  }
  return null;
}

/**
 * Which answer decides, among answers whose checkpoints are already proven
 * mutually consistent: the one with the largest checkpoint. Every gateway
 * with a checkpoint of that same size must select the same block. A gateway
 * with a smaller checkpoint may select another block when the blocks
 * between the two trees explain it: the deciding block is newer and beyond
 * its tree (a version it could not know yet), or its own block is newer and
 * the deciding gateway proves it revoked by a block beyond its tree on
 * `date` (`explain` fetches that evidence from the deciding gateway; null
 * when it shows none; `checkRevocation` judges it). Anything else is a
 * disagreement.
 */
export async function decide(
  answers: readonly GatewayAnswer[],
  date: string,
  explain: (older: GatewayAnswer, newest: GatewayAnswer) => Promise<RevocationEvidence | null>,
  c: CryptoBackend,
): Promise<GatewayAnswer> {
  const newest = answers.reduce((a, b) => (b.cp.size > a.cp.size ? b : a));
  for (const a of answers) {
    if (a.block.index === newest.block.index) continue;
    const what = `${a.gateway} selects block ${a.block.index} (checkpoint size ${a.cp.size}) but ${newest.gateway} selects block ${newest.block.index} (checkpoint size ${newest.cp.size})`;
    if (a.cp.size === newest.cp.size)
      throw new Refusal('gateways_disagree', `the gateways disagree on the same tree: ${what}; one of them hides a newer block or shows a superseded one`);
    if (a.block.index < newest.block.index && newest.block.index >= a.cp.size) continue; // a newer version, beyond the smaller tree
    if (a.block.index > newest.block.index) {
      // The smaller tree's block is newer: only a revocation the smaller tree does not hold explains it.
      const ev = await explain(a, newest);
      const why = ev === null ? `${newest.gateway} shows no revocation of block ${a.block.index}` : checkRevocation(c, a, newest, ev, date);
      if (why === null) continue;
      throw new Refusal('gateways_disagree', `the gateways disagree: ${what}, which the blocks between their checkpoints cannot explain: ${why}`);
    }
    throw new Refusal('gateways_disagree', `the gateways disagree: ${what}, which the blocks between their checkpoints cannot explain`);
  }
  return newest;
}
