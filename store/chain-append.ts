/**
 * The authority's view of a chain repository, between chain/ and
 * store/chain-repo.ts.
 * Owns: commit messages (docs/spec/design.md §2), the cheap trusted-head
 * check an append starts from, appending signed blocks with their
 * checkpoint and `checkpoint.note` (issue 17), signed by the `NoteSigner`
 * the caller hands over (platform/note-signer.ts: no key here), the origin
 * an append signs under (`noteOrigin`) and the tree edge it starts from
 * (`headEdge`).
 * Must hold: nothing is appended after a head that does not check out (the
 * head block hashes to what the checkpoint signed, the signing key is the
 * online key in force); a committed note opens with that key and names the
 * chain's size; a note's root comes from an edge that agrees with the
 * committed note, or from every record hash.
 */
import { VouchError } from '../chain/errors.ts';
import { type Block, type Checkpoint, formatBlockFile, formatCheckpointFile, parseBlockText, parseCheckpoint } from '../chain/block.ts';
import { checkpointMessage, computeRecordHash } from '../chain/build.ts';
import { base64Decode, base64Encode } from '../chain/encoding.ts';
import type { Signer } from '../chain/crypto-backend.ts';
import { isValidKeyName } from '../chain/note.ts';
import { type Checkpoint as LogCheckpoint, openCheckpoint } from '../chain/tlog-checkpoint.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import type { NoteSigner } from '../platform/note-signer.ts';
import type { KeyState } from '../chain/key-events.ts';
import type { ChainReads, ChainStore, CommitInfo } from './chain-api.ts';
import { TreeEdge, edgeMatches, readEdgeFile, writeEdgeFile } from './tree-edge.ts';
import { CompletenessIndex } from '../chain/index-tree.ts';
import { indexFactsOf } from '../chain/index-facts.ts';

/** `block <i>: <intent> <uns> <semver>` with the URLs in the body (docs/spec/design.md §2). */
export function commitFor(blocks: readonly Block[], timestampMs: number): CommitInfo {
  const line = (b: Block) => `block ${b.index}: ${b.payload.intent} ${b.payload.uns} ${b.payload.semver}`;
  const urls = (b: Block) => b.payload.endorsements.map((e) => e.artifact_url);
  let message: string;
  if (blocks.length === 1) {
    const b = blocks[0]!;
    const body = b.payload.intent === 'revoke' ? [`revokes ${b.payload.target_hash}`] : urls(b);
    message = line(b) + (body.length ? '\n\n' + body.join('\n') : '') + '\n';
  } else {
    const first = blocks[0]!;
    const last = blocks[blocks.length - 1]!;
    message =
      `blocks ${first.index}-${last.index}: ${blocks.length} blocks\n\n` +
      blocks.map((b) => [line(b), ...urls(b).map((u) => `  ${u}`)].join('\n')).join('\n') +
      '\n';
  }
  const signer = blocks[0]!.signer;
  return {
    message,
    authorName: signer,
    authorEmail: `${signer.replace(/[^A-Za-z0-9._-]/g, '_')}@vouch.invalid`,
    timestamp: Math.floor(timestampMs / 1000),
  };
}

export interface TrustedHead {
  head: Block;
  authority: Block;
  checkpoint: Checkpoint;
  /** The committed checkpoint.note, opened with the authority key; null when the chain has none yet (older chains). */
  note: LogCheckpoint | null;
}

/**
 * The head block, checked in constant time against the signed checkpoint
 * and the signer's key: the online key in force (docs/spec/key-events.md), as
 * `keys` (the verified chain's key state) says; without `keys`, block 0's
 * key (a chain whose key never changed). A compromised or retired key is
 * refused.
 */
export function trustedHead(repo: ChainReads, signer: Signer, keys?: Pick<KeyState, 'online' | 'retired' | 'compromised'> | null): TrustedHead {
  const authority = parseBlockText(repo.readBlockFile(0), 0);
  const a = authority.payload.authority!;
  const given = base64Encode(signer.publicKey);
  const inForce = keys ? { public_key: keys.online.publicKey, signer: keys.online.signer } : a;
  if (inForce.public_key !== given) {
    const why = keys?.compromised.includes(given) ? ': it was declared compromised' : keys?.retired.includes(given) ? ': it was retired by a key event' : '';
    throw new VouchError(
      'key_error',
      keys
        ? `this key is not the chain's online key in force (${inForce.public_key}, since block ${keys.online.since})${why}`
        : `this key is not the chain's authority key (${a.public_key})`,
    );
  }
  if (inForce.signer !== signer.id) {
    throw new VouchError('key_error', `the chain's authority signer is ${JSON.stringify(inForce.signer)}, not ${JSON.stringify(signer.id)}`);
  }
  const cpText = repo.readCheckpoint();
  if (cpText === null) throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: the chain has no checkpoint.json', { index: null });
  let cp: Checkpoint;
  try {
    cp = parseCheckpoint(JSON.parse(cpText));
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: checkpoint.json is not JSON', { index: null });
  }
  const sig = base64Decode(cp.signature);
  if (sig === null || !nodeBackend.verify(signer.publicKey, checkpointMessage(cp), sig)) {
    throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: the checkpoint is not signed by this authority', { index: null });
  }
  if (cp.size !== repo.size) {
    throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: checkpoint says ${cp.size} blocks, the repository has ${repo.size}`, { index: null });
  }
  const head = parseBlockText(repo.readBlockFile(cp.size - 1), cp.size - 1);
  if (head.record_hash !== cp.head || computeRecordHash(head, nodeBackend) !== cp.head) {
    throw new VouchError('record_hash_mismatch', `record_hash_mismatch at block ${head.index}: the head block is not the one the checkpoint signed`, {
      index: head.index,
    });
  }
  return { head, authority, checkpoint: cp, note: trustedNote(repo.readCheckpointNote(), signer.publicKey, repo.size) };
}

/**
 * A committed checkpoint.note opened with the authority key (key name = its
 * origin), naming `size` entries; null when there is none.
 * @throws VouchError checkpoint_mismatch when it does not open or names another size.
 */
export function trustedNote(text: string | null, publicKey: Uint8Array, size: number): LogCheckpoint | null {
  if (text === null) return null;
  let cp: LogCheckpoint;
  try {
    cp = openCheckpoint(nodeBackend, text, { publicKey }).checkpoint;
  } catch (e) {
    const err = e as VouchError;
    throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: checkpoint.note: ${err.message.replace(/^checkpoint_mismatch: /, '')}`, {
      index: null,
      ...(err.evidence ? { evidence: err.evidence } : {}),
    });
  }
  if (cp.size !== size) {
    throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: checkpoint.note names ${cp.size} entries, the chain has ${size} blocks`, { index: null });
  }
  return cp;
}

/** The origin of a chain created by `vouch init` without --origin. */
export function defaultOrigin(signerId: string): string {
  return `vouch/${signerId}`;
}

/**
 * The origin an append signs its note under: the committed note's (it never
 * changes once committed); `wanted` (configured) must then agree. A chain
 * without a note takes `wanted`, else `fallback`.
 * @throws VouchError usage when `wanted` differs from the committed origin or is no note key name.
 */
export function noteOrigin(note: LogCheckpoint | null, wanted: string | null, fallback: string, what = 'origin'): string {
  if (note !== null) {
    if (wanted !== null && wanted !== note.origin) {
      throw new VouchError(
        'usage',
        `${what} ${JSON.stringify(wanted)} differs from the origin of the committed checkpoint.note, ${JSON.stringify(note.origin)} (a log's origin never changes)`,
      );
    }
    return note.origin;
  }
  const origin = wanted ?? fallback;
  if (!isValidKeyName(origin))
    throw new VouchError('usage', `${what} ${JSON.stringify(origin)} cannot be a note key name (no spaces, "+" or control characters)`);
  return origin;
}

/** Block i's record hash as the 32 bytes of tree entry i. */
export function entryOf(recordHash: string): Uint8Array {
  const b = Buffer.from(recordHash, 'hex');
  if (b.length !== 32 || b.toString('hex') !== recordHash)
    throw new VouchError('malformed', `record_hash ${JSON.stringify(recordHash.slice(0, 80))} is not 64 lowercase hex digits`);
  return new Uint8Array(b.buffer, b.byteOffset, 32);
}

/**
 * A start for the edge that spares folding every record hash: the edge of
 * a prefix of the chain from a source the caller trusts as much as
 * `recordHashes` (the gateway's verified Merkle tree image), and the
 * record hashes of the blocks after it, in order.
 */
export type EdgeSeed = () => { edge: TreeEdge; rest: Iterable<string> } | null;

/**
 * The Merkle tree edge of the chain as it is (./tree-edge.ts): the one kept
 * in `.git` when it agrees with the committed, verified note (same size and
 * root); else `seed`'s, extended by the record hashes after it, when it
 * then holds every block and agrees with that note (if any); else recomputed from every block's record hash
 * (`recordHashes`, O(n): an older chain, a lost or stale file, no tree
 * image), which must then agree with the note when there is one.
 * @throws VouchError checkpoint_mismatch when the recomputed root is not the note's.
 */
export function headEdge(
  repo: ChainReads,
  note: LogCheckpoint | null,
  recordHashes: () => Iterable<string>,
  seed?: EdgeSeed,
): { edge: TreeEdge; source: EdgeSource } {
  const kept = readEdgeFile(nodeBackend, repo.dir);
  if (note !== null && edgeMatches(kept, note.size, note.root)) return { edge: kept, source: 'file' };
  const start = seed !== undefined ? seed() : null;
  if (start !== null && start.edge.size <= repo.size) {
    const edge = start.edge.clone();
    for (const h of start.rest) edge.append(entryOf(h));
    if (edge.size === repo.size && (note === null || edgeMatches(edge, note.size, note.root))) return { edge, source: 'image' };
  }
  const edge = TreeEdge.empty(nodeBackend);
  for (const h of recordHashes()) edge.append(entryOf(h));
  if (edge.size !== repo.size) throw new VouchError('internal_error', `tree edge: ${edge.size} record hashes for a chain of ${repo.size} blocks`);
  if (note !== null && !edgeMatches(edge, note.size, note.root)) {
    throw new VouchError(
      'checkpoint_mismatch',
      `checkpoint_mismatch: checkpoint.note's root is not the Merkle root of the ${repo.size} block files' record hashes`,
      { index: null },
    );
  }
  return { edge, source: 'scan' };
}

/** Where `headEdge` took the edge from: the kept file, a tree image plus the blocks after it, or every record hash. */
export type EdgeSource = 'file' | 'image' | 'scan';

/** Every block file's record_hash, in order, read as the full scan reads them (trusting the files: see headEdge). */
export function* scanRecordHashes(repo: ChainReads): Iterable<string> {
  for (let i = 0; i < repo.size; i++) yield parseBlockText(repo.readBlockFile(i), i).record_hash;
}

/** What one append committed: the commit, and the block, checkpoint and note texts exactly as they are on the branch. */
export interface Committed {
  commit: string;
  blockTexts: string[];
  checkpointText: string;
  /** The checkpoint.note committed (null: none was handed over, and the branch has none now). */
  noteText: string | null;
}

/** What the note of an append signs: the origin, and the tree's root at the new size. */
export interface NoteInput {
  /** Signs the note: the key in force; during a rollover (docs/spec/key-events.md) it first, then the previous key. */
  signer: NoteSigner;
  origin: string;
  root: Uint8Array;
  /** Extension lines of the note body (the completeness index root, docs/spec/index.md 5). */
  extensions?: readonly string[];
}

/**
 * Appends signed blocks, the checkpoint of the new head and (given `note`)
 * the signed checkpoint note of the new size in one commit (without `note`
 * a committed checkpoint.note is removed: it would name an older size). Resolves with
 * the texts committed, so a caller can take in the new state from what the
 * branch holds even when the working tree lags behind it.
 */
export async function appendSigned(
  repo: ChainStore,
  blocks: readonly Block[],
  checkpoint: Checkpoint,
  nowMs: number,
  note: NoteInput | null = null,
): Promise<Committed> {
  const files = blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) }));
  const checkpointText = formatCheckpointFile(checkpoint);
  const noteText = note === null ? null : note.signer.signNote(note.origin, checkpoint.size, note.root, note.extensions);
  const { commit } = await repo.append(files, { json: checkpointText, note: noteText }, commitFor(blocks, nowMs));
  return { commit, blockTexts: files.map((f) => f.content), checkpointText, noteText };
}

/**
 * Every earlier endorsement of the given URLs (oldest first), by scanning
 * block files. Files that cannot mention a URL are skipped without parsing.
 */
export function findEndorsements(repo: ChainReads, urls: readonly string[]): Map<string, { block: Block; artifactHash: string; semver: string }[]> {
  const out = new Map<string, { block: Block; artifactHash: string; semver: string }[]>(urls.map((u) => [u, []]));
  const needles = urls.map((u) => JSON.stringify(u));
  for (let i = 1; i < repo.size; i++) {
    const text = repo.readBlockFile(i);
    if (!needles.some((n) => text.includes(n))) continue;
    const block = parseBlockText(text, i);
    if (block.payload.intent !== 'endorse') continue;
    for (const e of block.payload.endorsements) {
      out.get(e.artifact_url)?.push({ block, artifactHash: e.artifact_hash, semver: e.semver });
    }
  }
  return out;
}

/** The completeness index root once given blocks follow the chain's (docs/spec/index.md 5); the chain is left as it is. */
export type IndexRootWith = (blocks: readonly Block[]) => Uint8Array;

/**
 * The completeness index of every block file, read as the full scan reads
 * them (trusting the files, as `scanRecordHashes`): the index an offline
 * writer commits when no verified image of it is at hand. Built on the first call.
 */
export function scanIndexRootWith(repo: ChainReads): IndexRootWith {
  let idx: CompletenessIndex | null = null;
  return (blocks) => {
    if (idx === null) {
      idx = new CompletenessIndex(nodeBackend);
      for (let i = 0; i < repo.size; i++) idx.addFacts(indexFactsOf(parseBlockText(repo.readBlockFile(i), i)));
    }
    return idx.rootWith(blocks);
  };
}

/**
 * The tree edge of a chain that a long-running writer (the authority
 * gateway's submitter, a mirror's sync) keeps in memory: built on first use
 * by `headEdge` (the kept file when it agrees with the committed note, else
 * every block file's record hash, once), advanced after each commit and
 * kept in `.git` for the CLI. A seam: once the gateway's own Merkle tree
 * answers `rootWith`, it is used instead (gateway/gateway.ts).
 */
export class HeadEdge {
  private edge: TreeEdge | null = null;

  /**
   * `note`: the committed checkpoint note of the chain as it is when the
   * edge is first needed (verified), or null. `recordHashes`: every block's
   * record_hash from a verified source, or null when it has none of this
   * size (then the block files are read).
   */
  constructor(
    private readonly repo: ChainReads,
    private readonly note: () => LogCheckpoint | null,
    private readonly recordHashes: (size: number) => (() => Iterable<string>) | null = () => null,
  ) {}

  private get(): TreeEdge {
    this.edge ??= headEdge(this.repo, this.note(), this.recordHashes(this.repo.size) ?? (() => scanRecordHashes(this.repo))).edge;
    return this.edge;
  }

  /** Root of the tree once `entries` (record hashes) follow the chain's; nothing changes. */
  rootWith(entries: readonly Uint8Array[]): Uint8Array {
    return this.get().rootWith(entries);
  }

  /** `entries` are committed: the edge follows (built first if it never was). */
  advance(entries: readonly Uint8Array[]): void {
    const e = this.edge;
    if (e === null) return; // built from the chain (which holds them now) when first needed
    if (e.size + entries.length !== this.repo.size) {
      this.edge = null; // out of step (an append outside this writer): rebuilt when next needed
      return;
    }
    for (const x of entries) e.append(x);
    writeEdgeFile(this.repo.dir, e);
  }
}
