/**
 * The gateway's verified chain: loading at start, the index lookups and
 * downloads read, the Merkle tree of the transparency routes, and applying
 * appended blocks. The index holds facts; blocks are read on demand from
 * the verified texts of gateway/cache/block-text-cache.ts.
 * Loading is cold (every block verified on all cores) or warm (from the
 * snapshot `.git/vouch-snapshot.json`, its index and tree images, and the
 * text cache, each checked against the sha256 the snapshot names; anything
 * that does not match falls back to cold).
 * Trusts: the local disk as much as the chain directory itself.
 * Must hold: only verified blocks are in the index and the tree; index,
 * verifier state and checkpoint describe the same head; a served note names
 * no more blocks than the tree holds and opens with the key in force; no
 * file is used that does not hash to what the snapshot says.
 */
import { CompletenessIndex } from '../../chain/index-tree.ts';
import { indexRootOf } from '../../chain/index-proof.ts';
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { VouchError } from '../../chain/errors.ts';
import { readJson, type Block, type Checkpoint } from '../../chain/block.ts';
import { indexFactsOf, type IndexFacts } from '../../chain/index-facts.ts';
import { ChainIndex } from '../../chain/select.ts';
import { ChainVerifier, type VerifierState } from '../../chain/verify.ts';
import type { KeyState } from '../../chain/key-events.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import type { ChainReads } from '../../store/chain-repo.ts';
import { TreeEdge } from '../../store/tree-edge.ts';
import { BlockTextCache } from '../cache/block-text-cache.ts';
import { AnswerStore } from '../cache/answer-store.ts';
import { base64Decode, base64Encode, bytesEqual } from '../../chain/encoding.ts';
import { LogTree, type ServedNote, type TreeImageRef } from '../transparency/merkle-log.ts';
import type { MerkleTree } from '../../chain/merkle-tree.ts';

/** What routes read of the tree (no appends: the state feeds it). */
export type MerkleTreeView = Pick<MerkleTree, 'size' | 'root' | 'leafHashAt' | 'inclusionProof' | 'consistencyProof' | 'tile'>;

/** 4: the verifier state carries the key state (docs/spec/key-events.md). */
const SNAPSHOT_VERSION = 4;
/**
 * An index image is rewritten after appends once `blocks` blocks are not in
 * it, or when it is `ms` old and some are not (tests lower them).
 */
export const IMAGE_POLICY = { blocks: 10_000, ms: 10 * 60_000 };

interface Snapshot {
  version: number;
  state: VerifierState;
  pinned_public_key: string | null;
  /** The text cache: `state.size` verified texts in its first `length` bytes, named by the digest of its index file. */
  cache: { length: number; digest: string };
  /** The index image and the number of blocks it holds. */
  image: { size: number; sha256: string } | null;
  /** The Merkle tree's image and the number of entries it holds (absent in snapshots before issue 17: the tree is rebuilt from the index). */
  tree?: TreeImageRef | null;
  /** The completeness index's image (`.git/vouch-completeness.bin`), the blocks it holds and the record hash of its last (absent before issue 37's warm start: the index is rebuilt from the blocks). */
  completeness?: CompletenessImageRef | null;
}

/** A completeness-index image: the number of blocks it holds, the record hash of the last of them, and the sha256 of its bytes. */
export interface CompletenessImageRef {
  size: number;
  head: string;
  sha256: string;
}

/** The inclusion proof of one block against the served checkpoint (the `Vouch-Proof` header, `proof` of a lookup). */
export interface BlockProof {
  index: number;
  size: number;
  /** Base64 hashes, leaf upwards (RFC 9162 PATH). */
  proof: string[];
  /** The signed checkpoint note of `size`, as `/checkpoint` serves it. */
  checkpoint: string;
}

export interface LoadReport {
  mode: 'cold' | 'warm';
  blocks: number;
  /** Blocks whose signatures were checked in this load. */
  verified: number;
  /** Blocks of a warm start indexed from the text cache (not in the index image). */
  indexed: number;
  /** Blocks added to the completeness index in this load (not read from its image). */
  completenessIndexed: number;
  ms: number;
}

const snapshotPathOf = (dir: string): string => join(dir, '.git', 'vouch-snapshot.json');
const imagePathOf = (dir: string): string => join(dir, '.git', 'vouch-index.bin');
const treePathOf = (dir: string): string => join(dir, '.git', 'vouch-tree.bin');
const completenessPathOf = (dir: string): string => join(dir, '.git', 'vouch-completeness.bin');
const hexBytes = (hex: string): Uint8Array => new Uint8Array(Buffer.from(hex, 'hex'));

/** The snapshot in `dir` when it is one of this format; else null (nothing checked against the chain). */
function readSnapshotAt(dir: string): Snapshot | null {
  try {
    const snap = JSON.parse(readFileSync(snapshotPathOf(dir), 'utf8')) as Snapshot;
    if (
      snap.version !== SNAPSHOT_VERSION ||
      !snap.state?.authority ||
      !snap.state.keys ||
      typeof snap.cache?.digest !== 'string' ||
      !Number.isSafeInteger(snap.cache.length)
    )
      return null;
    return snap;
  } catch {
    return null;
  }
}

/** The index image the snapshot names, when it hashes to what the snapshot says; else null. */
function readImageAt(dir: string, snap: Snapshot): Uint8Array | null {
  if (snap.image === null || !(snap.image.size > 0 && snap.image.size <= snap.state.size)) return null;
  try {
    const bytes = readFileSync(imagePathOf(dir));
    if (createHash('sha256').update(bytes).digest('hex') !== snap.image.sha256) return null;
    return bytes;
  } catch {
    return null;
  }
}

/** The completeness index the snapshot names, when its image hashes to what the snapshot says and reads back whole; else null. */
function readCompletenessAt(dir: string, snap: Snapshot): { index: CompletenessIndex; ref: CompletenessImageRef } | null {
  const ref = snap.completeness;
  if (!ref || !(ref.size > 0 && ref.size <= snap.state.size) || typeof ref.head !== 'string') return null;
  try {
    const bytes = readFileSync(completenessPathOf(dir));
    if (createHash('sha256').update(bytes).digest('hex') !== ref.sha256) return null;
    const index = CompletenessIndex.fromImage(nodeBackend, bytes);
    return index !== null && index.size === ref.size ? { index, ref } : null;
  } catch {
    return null;
  }
}

/**
 * For an offline writer (tools/offline-index.ts): the completeness index a
 * gateway of this directory last wrote, with the number of blocks it holds
 * and the record hash of its last block; null when there is none that
 * hashes to what the snapshot names. The caller ties it to its chain.
 */
export function lastVerifiedCompleteness(dir: string): { index: CompletenessIndex; size: number; head: string } | null {
  const snap = readSnapshotAt(dir);
  if (snap === null) return null;
  const c = readCompletenessAt(dir, snap);
  return c === null ? null : { index: c.index, size: c.ref.size, head: c.ref.head };
}

/**
 * For a tool that reads the last verified state without loading it (`vouch
 * endorse`, tools/endorse-history.ts): the index image the snapshot in `dir`
 * names, with the number of blocks it holds, when the snapshot is of this
 * format and the image hashes to the sha256 it names; else null. Nothing is
 * checked against the chain here: the caller ties the image to its head.
 */
export function lastVerifiedImage(dir: string): { image: Uint8Array; size: number; verifiedSize: number } | null {
  const snap = readSnapshotAt(dir);
  if (snap === null || snap.image === null) return null;
  const image = readImageAt(dir, snap);
  return image === null ? null : { image, size: snap.image.size, verifiedSize: snap.state.size };
}

/**
 * The right edge of the Merkle tree the snapshot in `dir` names (its image
 * `.git/vouch-tree.bin`, written by a gateway over the blocks it verified),
 * when the image hashes to the sha256 and holds the size the snapshot names;
 * else null. For `vouch endorse` (tools/endorse-history.ts): the Merkle root
 * of its note without folding every record hash. Nothing is checked
 * against the chain here: the caller ties it to its head.
 */
export function lastVerifiedTreeEdge(dir: string): TreeEdge | null {
  const ref = readSnapshotAt(dir)?.tree;
  if (!ref) return null;
  try {
    const bytes = readFileSync(treePathOf(dir));
    if (createHash('sha256').update(bytes).digest('hex') !== ref.sha256) return null;
    const edge = TreeEdge.fromImage(nodeBackend, bytes);
    return edge !== null && edge.size === ref.size ? edge : null;
  } catch {
    return null;
  }
}

export class ChainState {
  private _index: ChainIndex;
  /** The completeness index (docs/spec/index.md) of the indexed blocks. */
  private _completeness = new CompletenessIndex(nodeBackend);
  private verifier!: ChainVerifier;
  private cp: Checkpoint | null = null;
  private cpJson: Record<string, unknown> | null = null;
  private readonly cache: BlockTextCache;
  /** The image on disk (what the snapshot names). */
  private image: { size: number; sha256: string } | null = null;
  /** The completeness index's image on disk (what the snapshot names). */
  private completenessImage: CompletenessImageRef | null = null;
  /** Blocks the completeness index held when read from its image at load (0: built from the blocks). */
  private completenessFromImage = 0;
  private imageAt = 0;
  private imageWriting = false;
  /** Set when the text cache could not take appended blocks: they stay in memory from then on. */
  private cacheBroken = false;
  private indexedFromCache = 0;
  /** The Merkle tree over the indexed blocks' record hashes, and the served checkpoint note. */
  private readonly log: LogTree;
  /** Inclusion proofs against the served note, by block index (cleared when the note changes). */
  private proofs = new Map<number, BlockProof>();
  private proofsOf: string | null = null;
  /** The lookup answers of the blocks (gateway/cache/answer-store.ts), built after ready by `buildAnswers`. */
  private readonly answers: AnswerStore;
  private answersBuilding = false;

  private constructor(
    readonly repo: ChainReads,
    private readonly pinnedPublicKey: string | null,
  ) {
    // The sparse layout's texts are read from git objects: the cache keeps their lengths and hashes only.
    this.cache = new BlockTextCache(join(repo.dir, '.git', 'vouch-blocks.cache'), (i) => repo.readBlockFile(i));
    this._index = this.newIndex();
    this.log = new LogTree(nodeBackend, treePathOf(repo.dir));
    const git = join(repo.dir, '.git');
    this.answers = new AnswerStore(join(git, 'vouch-answers.lz4'), [join(git, 'vouch-answers'), join(git, 'vouch-answers.idx')]);
  }

  /** The verified text of block i: from the cache, else from its block file if that still hashes alike. */
  private verifiedText(i: number): string {
    const cached = this.cache.text(i);
    if (cached !== null) return cached;
    const file = (() => {
      try {
        return this.repo.readBlockFile(i);
      } catch {
        return null;
      }
    })();
    if (file !== null && this.cache.isText(i, file)) return file;
    throw new VouchError('io_error', `block ${i}: neither the text cache nor the block file holds the verified text; restart the gateway`, { index: i });
  }

  private readonly readBlock = (i: number): Block => JSON.parse(this.verifiedText(i)) as Block;

  private newIndex(image?: Uint8Array): ChainIndex {
    return image ? ChainIndex.fromImage(image, { reader: this.readBlock }) : new ChainIndex({ reader: this.readBlock });
  }

  /** The completeness index of the served chain (docs/spec/index.md), at the size of `index`. */
  get completeness(): CompletenessIndex {
    return this._completeness;
  }

  /** Brings the completeness index up to the chain index (blocks read through it). */
  private completenessCatchUp(): void {
    if (this._completeness.size > this._index.size) this._completeness = new CompletenessIndex(nodeBackend);
    // The writer's trial of the blocks it committed (indexRootWith), when these are they: kept, not added again.
    const from = this._completeness.size;
    const gap = this._index.size - from;
    if (gap > 0 && gap <= 4096) {
      const hashes = Array.from({ length: gap }, (_, k) => Buffer.from(this._index.recordHashBytes(from + k)).toString('hex'));
      if (this._completeness.takePending(from, hashes)) return;
    }
    for (let i = this._completeness.size; i < this._index.size; i++) this._completeness.addBlock(this._index.block(i)!, this.targetOf);
  }

  private readonly targetOf = (recordHash: string): number => this._index.indexOfHash(recordHash);

  /** The completeness index root once `blocks` follow the head (the index left as it is): what the writer's note commits. */
  indexRootWith(blocks: readonly Block[]): Uint8Array {
    this.completenessCatchUp();
    return this._completeness.rootWith(blocks, this.targetOf);
  }

  /**
   * A note's `vouch-index/v1` line against the completeness index with
   * `blocks` added (kept when the line agrees, or there is none, or the note
   * is of another size).
   * @throws VouchError checkpoint_mismatch (the index left as it was)
   */
  private takeIndexLine(note: ServedNote | null, blocks: readonly Block[]): void {
    this.completenessCatchUp();
    const line = note === null ? null : indexRootOf(note.checkpoint.extensions);
    if (line !== null && 'malformed' in line)
      throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: checkpoint.note: ${line.malformed}`, { index: null });
    const fresh = blocks.filter((b) => b.index >= this._completeness.size);
    const size = this._completeness.size + fresh.length;
    const judge = (r: Uint8Array) => line === null || note!.checkpoint.size !== size || bytesEqual(r, line);
    let agrees = true;
    const root = fresh.length === 0 ? this._completeness.root() : this._completeness.rootWith(fresh, this.targetOf, (r) => (agrees = judge(r)));
    if (fresh.length === 0) agrees = judge(root);
    if (!agrees) {
      throw new VouchError(
        'checkpoint_mismatch',
        `checkpoint_mismatch: checkpoint.note's vouch-index/v1 root at size ${size} is not the completeness index of the verified chain`,
        {
          index: null,
          evidence: { size, note_index_root: base64Encode(line as Uint8Array), index_root: base64Encode(root) },
        },
      );
    }
  }

  /**
   * The completeness-index proof (docs/spec/index.md 6) for a URL or unit
   * name against the served checkpoint note; null when that note commits no
   * index or is of another size than the index (the note lags an append).
   */
  indexProof(kind: 'url' | 'unit', name: string): Uint8Array | null {
    const note = this.log.note;
    if (note === null || note.checkpoint.size !== this._completeness.size) return null;
    const line = indexRootOf(note.checkpoint.extensions);
    if (!(line instanceof Uint8Array)) return null;
    return this._completeness.prove(kind, name);
  }

  /** The index of the served chain (one object for the life of the state). */
  get index(): ChainIndex {
    return this._index;
  }

  get size(): number {
    return this._index.size;
  }

  get head(): Block {
    return this._index.head!;
  }

  get authority(): Block {
    return this._index.authority!;
  }

  get checkpoint(): Checkpoint | null {
    return this.cp;
  }

  get verifierState(): VerifierState {
    return this.verifier.state;
  }

  /** Whether a served block is an endorse block with this record_hash (what a new revoke must name). */
  endorsedBefore(recordHash: string): boolean {
    const i = this._index.indexOfHash(recordHash);
    return i >= 0 && this._index.intentOf(i) === 'endorse';
  }

  /** A verifier resumed from `state`, checking revoke targets against the blocks already indexed. */
  private resumed(state: VerifierState): ChainVerifier {
    return new ChainVerifier({
      backend: nodeBackend,
      pinnedPublicKey: this.pinnedPublicKey,
      state,
      endorsedBefore: (h) => this.endorsedBefore(h),
    });
  }

  private get snapshotPath(): string {
    return snapshotPathOf(this.repo.dir);
  }

  private get imagePath(): string {
    return imagePathOf(this.repo.dir);
  }

  /** Loads and verifies the chain in `repo` (warm when a valid snapshot allows). */
  static async load(
    repo: ChainReads,
    options: { pinnedPublicKey?: string | null; onProgress?: (done: number, total: number) => void } = {},
  ): Promise<{ state: ChainState; report: LoadReport }> {
    const t0 = performance.now();
    const s = new ChainState(repo, options.pinnedPublicKey ?? null);
    const warm = s.tryWarm();
    let verified: number;
    if (warm !== null) verified = warm;
    else {
      await s.loadCold(options.onProgress);
      verified = s.size;
    }
    if (s.image?.size !== s.size || s.log.image?.size !== s.size || s.completenessImage?.size !== s.size) s.writeImageNow();
    s.writeSnapshot();
    return {
      state: s,
      report: {
        mode: warm !== null ? 'warm' : 'cold',
        blocks: s.size,
        verified,
        indexed: s.indexedFromCache,
        completenessIndexed: s._completeness.size - s.completenessFromImage,
        ms: performance.now() - t0,
      },
    };
  }

  private readSnapshot(): Snapshot | null {
    const snap = readSnapshotAt(this.repo.dir);
    if (snap === null) return null;
    if ((snap.pinned_public_key ?? null) !== this.pinnedPublicKey && this.pinnedPublicKey !== null) return null;
    return snap;
  }

  /** The index image the snapshot names, when it hashes to what the snapshot says; else null. */
  private readImage(snap: Snapshot): Uint8Array | null {
    return readImageAt(this.repo.dir, snap);
  }

  /** Rebuilds the text cache from the block files; true when it hashes to the snapshot's digest. */
  private rebuildCacheFromFiles(snap: Snapshot): boolean {
    const n = snap.state.size;
    this.cache.beginRewrite();
    const BATCH = 1000;
    for (let start = 0; start < n; start += BATCH) {
      const texts: string[] = [];
      for (let i = start; i < Math.min(n, start + BATCH); i++) texts.push(this.repo.readBlockFile(i));
      this.cache.append(texts);
    }
    if (this.cache.length !== snap.cache.length || this.cache.digest() !== snap.cache.digest) return false;
    this.cache.commitRewrite();
    return true;
  }

  /** Warm path; returns the number of blocks verified, or null to go cold. */
  private tryWarm(): number | null {
    const snap = this.readSnapshot();
    const total = this.repo.size;
    if (snap === null || snap.state.size > total || snap.state.size === 0) return null;
    const n = snap.state.size;
    try {
      let ok = this.cache.scan(n, snap.cache.digest) && this.cache.length === snap.cache.length;
      // The snapshot describes this chain only while the head block file still holds the verified text.
      if (ok && (!this.cache.isText(n - 1, this.repo.readBlockFile(n - 1)) || this.cache.text(n - 1) === null)) ok = false;
      if (!ok && !this.rebuildCacheFromFiles(snap)) return null;
    } catch {
      return null;
    }
    try {
      this.verifier = this.resumed(snap.state);
    } catch {
      return null; // the pinned key changed: verify from scratch (and report there)
    }
    const image = this.readImage(snap);
    try {
      this._index = this.newIndex(image ?? undefined);
      this.image = image !== null ? snap.image : null;
      // Its age counts from its load, as the Merkle log's does: the next appends write a new one only by IMAGE_POLICY.
      if (image !== null) this.imageAt = Date.now();
    } catch {
      this._index = this.newIndex();
      this.image = null;
    }
    this.indexedFromCache = n - this._index.size;
    try {
      for (let i = this._index.size; i < n; i++) this._index.addFacts(indexFactsOf(this.readBlock(i)));
    } catch {
      return null;
    }
    if (this._index.size !== n || this._index.indexOfHash(snap.state.head) !== n - 1) return null;
    // The completeness index from its image when it is of this chain (its last block's record hash is the index's); else from the blocks.
    const ci = readCompletenessAt(this.repo.dir, snap);
    if (ci !== null && Buffer.from(this._index.recordHashBytes(ci.ref.size - 1)).toString('hex') === ci.ref.head) {
      this._completeness = ci.index;
      this.completenessImage = ci.ref;
      this.completenessFromImage = ci.ref.size;
    }
    const newer: string[] = [];
    for (let i = n; i < total; i++) {
      const text = this.repo.readBlockFile(i);
      newer.push(text);
      const json = readJson(text);
      if (json.error !== null) throw new VouchError('malformed', `malformed at block ${i}: ${json.error}`, { index: i });
      this._index.add(this.verifier.add(json.value));
    }
    this.log.loadImage(snap.tree, this._index.size);
    this.log.catchUp(this._index);
    this.appendTexts(newer); // before the completeness index reads them (their verified texts)
    try {
      this.completenessCatchUp();
    } catch (e) {
      // A block whose verified text is in neither the cache nor its file: served blocks still refuse it one by
      // one (verifiedText), and the index stays behind (no index proof is served) until the next append retries.
      if (!(e instanceof VouchError && e.code === 'io_error')) throw e;
    }
    this.loadCheckpoint();
    return total - n;
  }

  private async loadCold(onProgress?: (done: number, total: number) => void): Promise<void> {
    try {
      await this.loadColdInto(onProgress);
    } catch (e) {
      this.cache.abandonRewrite();
      throw e;
    }
  }

  private async loadColdInto(onProgress?: (done: number, total: number) => void): Promise<void> {
    this.image = null;
    this._index = this.newIndex();
    this._completeness = new CompletenessIndex(nodeBackend);
    this.completenessImage = null;
    this.completenessFromImage = 0;
    this.log.reset();
    this.cache.beginRewrite();
    // The chain's size is known before its blocks: every array is made at its final length, with no outgrown copies left for the collector.
    const expected = this.repo.size;
    this._index.reserve(expected);
    this.log.reserve(expected);
    this.cache.reserve(expected);
    let streamed = 0;
    let outOfOrder = false;
    const onVerified = (start: number, texts: string[], facts: IndexFacts[]): void => {
      if (outOfOrder || start !== streamed || texts.length !== facts.length) {
        outOfOrder = true;
        return;
      }
      try {
        this.cache.append(texts);
        for (const f of facts) {
          if (this._completeness.size === this._index.size) this._completeness.addFacts(f, this.targetOf);
          this._index.addFacts(f);
        }
        this.log.catchUp(this._index);
        streamed += texts.length;
      } catch {
        outOfOrder = true; // taken up again below, where a failure is the load's
      }
    };
    const result = await verifyDirectory(this.repo, { pinnedPublicKey: this.pinnedPublicKey, onVerified, ...(onProgress ? { onProgress } : {}) });
    this.verifier = this.resumed(result.state);
    if (outOfOrder) {
      this._index = this.newIndex();
      this._completeness = new CompletenessIndex(nodeBackend);
      this.cache.beginRewrite();
      streamed = 0;
    }
    // What the verifier did not hand over: read and parse as before.
    const n = result.state.size;
    const BATCH = 1000;
    for (let start = this._index.size; start < n; start += BATCH) {
      const texts: string[] = [];
      for (let i = start; i < Math.min(n, start + BATCH); i++) texts.push(this.repo.readBlockFile(i));
      this.cache.append(texts);
      for (const t of texts) this._index.addFacts(indexFactsOf(JSON.parse(t) as Block));
    }
    if (this._index.size !== n || (n > 0 && this._index.indexOfHash(result.state.head) !== n - 1)) {
      throw new VouchError('history_rewritten', 'the chain changed on disk while it was being verified', { index: null });
    }
    this.log.catchUp(this._index);
    this.completenessCatchUp();
    this.cache.commitRewrite();
    this.loadCheckpoint();
  }

  /** Appends verified texts to the cache; the blocks held in the index are then read from it. */
  private appendTexts(texts: readonly string[]): void {
    if (texts.length === 0 || this.cacheBroken) return;
    if (this.cache.count + texts.length !== this._index.size) {
      this.cacheBroken = true; // blocks in the index without their texts: keep holding them
      return;
    }
    try {
      this.cache.append(texts);
      this._index.settled();
    } catch {
      this.cacheBroken = true; // the index keeps holding blocks added from now on
    }
  }

  private loadCheckpoint(): void {
    const text = this.repo.readCheckpoint();
    if (text === null) {
      this.cp = null;
      this.cpJson = null;
      return;
    }
    const json = readJson(text);
    if (json.error !== null) throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: malformed checkpoint: ${json.error}`, { index: null });
    this.cp = this.verifier.verifyCheckpoint(json.value);
    this.cpJson = json.value as Record<string, unknown>;
    this.loadNote(this.repo.readCheckpointNote());
  }

  /** The key state of the verified chain (root, online key in force, retired and compromised keys, void ranges). */
  get keys(): KeyState {
    return this.verifier.state.keys!;
  }

  /**
   * The raw ed25519 key a checkpoint note of the chain in `state` is opened
   * with: the online key in force at its size (docs/spec/key-events.md), block
   * 0's while no key event changed it.
   */
  private noteKey(state: VerifierState = this.verifier.state): Uint8Array {
    return base64Decode(state.keys?.online.publicKey ?? this.authority.payload.authority!.public_key)!;
  }

  /**
   * Takes a committed checkpoint.note at load. A note whose root is not the
   * tree's may mean a damaged tree image: the tree is rebuilt from the index's
   * record hashes and the note checked once more.
   */
  private loadNote(text: string | null): void {
    if (text === null) return this.log.serve(null);
    let note: ServedNote;
    try {
      note = this.log.openNote(text, this.noteKey());
    } catch (e) {
      if (this.log.image === null || (e as VouchError).code !== 'checkpoint_mismatch') throw e;
      this.log.loadImage(null, 0);
      this.log.catchUp(this._index);
      note = this.log.openNote(text, this.noteKey());
    }
    this.takeIndexLine(note, []);
    this.log.serve(note);
  }

  private writeSnapshot(): void {
    if (!this.cache.persistent || this.cacheBroken || this.cache.count !== this.size) return;
    const snap: Snapshot = {
      version: SNAPSHOT_VERSION,
      state: this.verifier.state,
      pinned_public_key: this.pinnedPublicKey,
      cache: { length: this.cache.length, digest: this.cache.digest() },
      image: this.image,
      tree: this.log.image,
      completeness: this.completenessImage,
    };
    const tmp = `${this.snapshotPath}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, JSON.stringify(snap));
      renameSync(tmp, this.snapshotPath);
    } catch {
      // A snapshot is an optimisation only: a read-only chain directory still serves.
    }
  }

  /** Writes the index image now (end of a load). */
  private writeImageNow(): void {
    if (!this.cache.persistent) return;
    const bytes = this._index.toImage();
    const tmp = `${this.imagePath}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, bytes);
      renameSync(tmp, this.imagePath);
      this.image = { size: this.size, sha256: createHash('sha256').update(bytes).digest('hex') };
      this.imageAt = Date.now();
    } catch {
      // An optimisation only.
    }
    this.writeCompletenessImage();
    this.log.writeImageNow();
  }

  /** Writes the completeness index's image when it holds every indexed block (an optimisation only: failures are ignored). */
  private writeCompletenessImage(): void {
    const size = this._completeness.size;
    if (!this.cache.persistent || size === 0 || size !== this._index.size) return;
    const path = completenessPathOf(this.repo.dir);
    const tmp = `${path}.${process.pid}.tmp`;
    try {
      const bytes = this._completeness.toImage();
      writeFileSync(tmp, bytes);
      renameSync(tmp, path);
      const head = Buffer.from(this._index.recordHashBytes(size - 1)).toString('hex');
      this.completenessImage = { size, head, sha256: createHash('sha256').update(bytes).digest('hex') };
    } catch {
      // An optimisation only.
    }
  }

  /** After appends: a new image in the background, once enough blocks are not in the last one. */
  private maybeWriteImage(): void {
    if (this.cache.persistent) this.log.maybeWriteImage(IMAGE_POLICY, () => this.writeSnapshot());
    const behind = this.size - (this.image?.size ?? 0);
    if (this.imageWriting || !this.cache.persistent || behind <= 0) return;
    if (behind < IMAGE_POLICY.blocks && Date.now() - this.imageAt < IMAGE_POLICY.ms) return;
    this.imageWriting = true;
    setImmediate(() => {
      const size = this.size;
      const bytes = this._index.toImage();
      const sha256 = createHash('sha256').update(bytes).digest('hex');
      const tmp = `${this.imagePath}.${process.pid}.tmp`;
      writeFile(tmp, bytes)
        .then(() => {
          // The rename and the snapshot naming the new image, in one step of the event loop.
          renameSync(tmp, this.imagePath);
          this.image = { size, sha256 };
          this.imageAt = Date.now();
          this.writeCompletenessImage();
          this.writeSnapshot();
        })
        .catch(() => {})
        .finally(() => {
          this.imageWriting = false;
        });
    });
  }

  /**
   * Re-reads every block from git objects in the background and compares it
   * with the verified text served (after a warm start from the cache, nothing
   * else looked at them). Resolves with the first index whose bytes differ, or
   * null. Reads in batches: memory stays bounded at any chain size.
   */
  async recheckFiles(): Promise<number | null> {
    const n = Math.min(this.size, this.cache.count);
    // Block reads from git objects are synchronous (~70 us a block from the pack): small batches, each after a
    // turn of the event loop, so requests are answered meanwhile (a million blocks take about a minute).
    const BATCH = 32;
    for (let start = 0; start < n; start += BATCH) {
      const ids = Array.from({ length: Math.min(BATCH, n - start) }, (_, k) => start + k);
      await new Promise((r) => setImmediate(r));
      // The raw bytes against the verified text's sha256: a byte changed into an invalid one differs too.
      const files = ids.map((i) => {
        try {
          return Buffer.from(this.repo.readBlockFile(i), 'utf8');
        } catch {
          return null;
        }
      });
      for (let k = 0; k < ids.length; k++) {
        const f = files[k];
        if (f === null || f === undefined || !this.cache.isText(ids[k]!, f)) return ids[k]!;
      }
    }
    return null;
  }

  /**
   * The answer of a lookup of `url` with no `semver=` or `at=` (the newest
   * block endorsing it), as `{ index, text, length, recordHash }` (`text`:
   * what `plainAnswerText` makes of that block, of `length` UTF-8 bytes;
   * `recordHash`: the block's, hex), read from the answer store;
   * undefined when the store cannot tell (a candidate block not in it yet,
   * any candidate with a revoke block naming it, a record that did not read
   * back as written): the caller selects through the index then.
   */
  storedAnswer(url: string): { index: number; text: string; length: number; recordHash: string } | undefined {
    const a = this.answers;
    if (a.count === 0) return undefined;
    const c = this._index.urlCandidates(url);
    if (c.length === 0) return undefined;
    for (let k = 0; k < c.length; k += 2) if (c[k]! >= a.count || this._index.hasRevocations(c[k]!)) return undefined;
    // Newest first: with no revocation, selection takes the newest block that endorses the URL (chain/select.ts).
    for (let k = c.length - 2; k >= 0; k -= 2) {
      const text = a.answerFor(c[k]!, c[k + 1]!, url);
      if (text === undefined) {
        if (a.corrupted) this.answersCorrupt();
        return undefined;
      }
      if (text !== null) return { index: c[k]!, text, length: a.answerBytes, recordHash: a.answerHash };
    }
    return undefined;
  }

  /** Blocks the answer store holds, and its bytes on disk. */
  get answerStore(): { blocks: number; bytes: number; building: boolean } {
    return { blocks: this.answers.count, bytes: this.answers.opened ? this.answers.bytes : 0, building: this.answersBuilding };
  }

  /** Called back when the store was dropped for a record that did not read back as written (then rebuilt). */
  onAnswersCorrupt: ((blocks: number) => void) | null = null;

  private answersCorrupt(): void {
    const had = this.answers.count;
    this.answers.corrupted = false;
    try {
      this.answers.reset();
    } catch {
      this.answers.close();
    }
    this.onAnswersCorrupt?.(had);
    if (this.answers.opened) void this.buildAnswers().catch(() => {});
  }

  /**
   * Opens the answer store and brings it up to the served chain: records of
   * the blocks it lacks, made from their verified texts, in small batches,
   * each after a turn of the event loop (lookups are answered meanwhile).
   * Resolves with the blocks added, or null when another build runs or the
   * store cannot be written (a read-only chain directory: lookups take the
   * index path). Stops early when `signal` is aborted.
   */
  async buildAnswers(signal?: AbortSignal): Promise<{ added: number; ms: number } | null> {
    if (this.answersBuilding) return null;
    this.answersBuilding = true;
    const t0 = performance.now();
    try {
      if (!this.answers.opened) {
        try {
          this.answers.open(this.size, (i) => this._index.recordHashBytes(i));
        } catch {
          this.answers.close();
          return null;
        }
      }
      const from = this.answers.count;
      const BATCH = 64;
      while (this.answers.opened && this.answers.count < this.size && !signal?.aborted) {
        await new Promise((r) => setImmediate(r));
        const start = this.answers.count;
        const end = Math.min(this.size, start + BATCH);
        const blocks: Block[] = [];
        for (let i = start; i < end; i++) blocks.push(this.readBlock(i));
        if (this.answers.count === start) this.answers.append(blocks);
      }
      return { added: this.answers.count - from, ms: performance.now() - t0 };
    } catch {
      this.answers.close(); // a write failed: lookups take the index path
      return null;
    } finally {
      this.answersBuilding = false;
    }
  }

  /** Brings the answer store up to appended blocks (`texts`: verified texts of blocks first..); a build in progress takes them itself. */
  private extendAnswers(texts: readonly string[], first: number): void {
    if (this.answersBuilding || !this.answers.opened || this.cacheBroken) return;
    const from = this.answers.count;
    if (this.size - from > 4096) {
      void this.buildAnswers().catch(() => {});
      return;
    }
    try {
      const blocks: Block[] = [];
      for (let i = from; i < this.size; i++) blocks.push(i >= first && i - first < texts.length ? (JSON.parse(texts[i - first]!) as Block) : this.readBlock(i));
      this.answers.append(blocks);
    } catch {
      this.answers.close(); // lookups take the index path
    }
  }

  /** The Merkle tree over the served blocks' record hashes (entry i = block i's record_hash): roots, proofs, tiles. */
  get tree(): MerkleTreeView {
    return this.log.tree;
  }

  /** Root of the tree of the first `size` blocks (default: all). */
  root(size?: number): Uint8Array {
    return this.log.tree.root(size);
  }

  /**
   * The root the tree will have once blocks with these record hashes (32
   * bytes each, the tree's entries) follow the served head; the tree is left
   * as it is: O(log n + entries) hashes. For a writer that signs the
   * checkpoint of blocks it has yet to commit (the submitter), and a sync
   * checking the fetched note before it moves anything.
   */
  rootWith(entries: readonly Uint8Array[]): Uint8Array {
    return this.log.rootWith(entries);
  }

  /** The served checkpoint note and what it says (null when the chain has no checkpoint.note). */
  get note(): ServedNote | null {
    return this.log.note;
  }

  /**
   * An authority with witnesses (gateway/transparency/cosigner.ts): the committed note
   * followed by the cosignature lines held for that exact checkpoint.
   * Must be cheap (it is asked on every proof-carrying answer).
   */
  withCosignatures: ((note: string) => string) | null = null;

  /**
   * The text `GET /checkpoint` serves: the committed checkpoint.note (its
   * size <= the served chain's, its root the tree's at that size), or null,
   * with the witness cosignature lines held for it (`withCosignatures`).
   */
  servedCheckpointNote(): string | null {
    const text = this.log.note?.text ?? null;
    return text === null || this.withCosignatures === null ? text : this.withCosignatures(text);
  }

  /**
   * Block `index`'s inclusion proof against the served checkpoint, with that
   * note; null when there is no note or it does not cover the block yet.
   * Kept per note (the last 4,096 blocks asked).
   */
  proofFor(index: number): BlockProof | null {
    const note = this.log.note;
    const text = this.servedCheckpointNote();
    if (note === null || text === null || !(index >= 0 && index < note.checkpoint.size)) return null;
    if (this.proofsOf !== text) {
      this.proofs.clear();
      this.proofsOf = text;
    }
    let p = this.proofs.get(index);
    if (p === undefined) {
      const size = note.checkpoint.size;
      p = { index, size, proof: this.log.tree.inclusionProof(index, size).map(base64Encode), checkpoint: text };
      if (this.proofs.size >= 4096) this.proofs.clear();
      this.proofs.set(index, p);
    }
    return p;
  }

  /** The checkpoint exactly as stored (for GET /v1/checkpoint). */
  checkpointJson(): Record<string, unknown> | null {
    return this.cpJson;
  }

  /**
   * Takes in blocks that were appended and committed after the current head
   * (by the submitter, or a sync), with the committed checkpoint text. They
   * are verified like any other; blocks the writer already put in the index
   * are not added twice. `blockTexts`: the blocks' files as committed (the
   * writer's own); without them they are read from git objects
   * (`readBlockFile`).
   * @throws VouchError when they do not verify (state left unchanged).
   */
  applyCommitted(blocks: readonly Block[], checkpointText: string | null, blockTexts?: readonly string[], noteText?: string | null): void {
    const probe = this.resumed(this.verifier.state);
    const parsed = blocks.map((b) => probe.add(structuredClone(b)));
    let cpJson: Record<string, unknown> | null = null;
    let cp: Checkpoint | null = null;
    if (checkpointText !== null) {
      const json = readJson(checkpointText);
      if (json.error !== null) throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: malformed checkpoint: ${json.error}`, { index: null });
      cpJson = json.value as Record<string, unknown>;
      cp = probe.verifyCheckpoint(cpJson);
    }
    // The snapshot hashes the files as they are committed, byte for byte; they are I-JSON too
    // (a sync's caller may have parsed them with JSON.parse, which hides a repeated member name).
    const texts = parsed.map((b, i) => blockTexts?.[i] ?? this.repo.readBlockFile(b.index));
    texts.forEach((text, i) => {
      const json = readJson(text);
      if (json.error !== null) throw new VouchError('malformed', `malformed at block ${parsed[i]!.index}: ${json.error}`, { index: parsed[i]!.index });
    });
    // The committed note (read from the working tree when the caller has none), checked against the tree with the new entries.
    const note = noteText === undefined ? this.repo.readCheckpointNote() : noteText;
    const pending = parsed.filter((b) => b.index >= this.log.size).map((b) => hexBytes(b.record_hash));
    // Signed by the key in force after these blocks (a key block among them changed it).
    const served = note === null ? null : this.log.openNote(note, this.noteKey(probe.state), pending);
    this.takeIndexLine(served, parsed);
    this.verifier = probe;
    parsed.forEach((b, i) => {
      if (this._index.size === b.index) this._index.add(blocks[i]!);
    });
    this.log.catchUp(this._index);
    this.completenessCatchUp();
    this.log.serve(served);
    this.appendTexts(texts);
    if (parsed.length > 0) this.extendAnswers(texts, parsed[0]!.index);
    this.cp = cp;
    this.cpJson = cpJson;
    this.writeSnapshot();
    this.maybeWriteImage();
  }
}
