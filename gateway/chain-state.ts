/**
 * The gateway's verified, in-memory chain: loading at start, the index the
 * lookups and downloads read, and applying appended blocks.
 *
 * Loading:
 * - cold: every block is verified (signatures on all cores, DESIGN 1.7),
 *   then read into the index;
 * - warm: a snapshot written after the last verification names the verified
 *   size, head and verifier state, plus a hash chain over the raw bytes of
 *   every verified block file (D_i = sha256(D_{i-1} || sha256(file_i))). If
 *   the files still hash to it, they are byte-identical to what was verified,
 *   so only newer blocks are verified; anything else falls back to cold.
 * The snapshot lives in `.git/vouch-snapshot.json` of the chain directory,
 * with the verified texts in one file (`.git/vouch-blocks.cache`) so a warm
 * start need not open every block file: never in the working tree, never
 * committed, and used only when it hashes to the snapshot's digest.
 *
 * Trusts: the local disk as much as the chain directory itself.
 * Must hold: only verified blocks are ever in the index; the index, the
 * verifier state and the checkpoint always describe the same head; a
 * verifier resumed from a state checks revoke targets against the index
 * (`endorsedBefore`), and texts are parsed as I-JSON (`readJson`), as a
 * cold verification does.
 */
import { createHash } from 'node:crypto';
import { appendFileSync, readFileSync, renameSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { readJson, utf8Text, type Block, type Checkpoint } from '../chain/block.ts';
import { ChainIndex } from '../chain/select.ts';
import { ChainVerifier, type VerifierState } from '../chain/verify.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { verifyDirectory } from '../store/parallel-verify.ts';
import { blockPath, type ChainRepo } from '../store/chain-repo.ts';

const SNAPSHOT_VERSION = 1;
const ZERO = Buffer.alloc(32);

interface Snapshot {
  version: number;
  state: VerifierState;
  files_digest: string;
  pinned_public_key: string | null;
}

function stepDigest(prev: Buffer<ArrayBufferLike>, fileText: string): Buffer<ArrayBufferLike> {
  const inner = createHash('sha256').update(fileText).digest();
  return createHash('sha256').update(prev).update(inner).digest();
}

/**
 * The texts of the verified block files, in order, in one append-only file
 * (`.git/vouch-blocks.cache`: records of a 4-byte big-endian length and the
 * UTF-8 text). A warm start reads it in one go instead of opening every block
 * file; what it holds counts only if it hashes to the snapshot's digest.
 */
class BlockTextCache {
  /** Byte length of the records known to be good (what appends follow). */
  private goodBytes = 0;

  constructor(private readonly path: string) {}

  /** The first `count` texts, or null when the file is missing or short. */
  read(count: number): string[] | null {
    let buf: Buffer;
    try {
      buf = readFileSync(this.path);
    } catch {
      return null;
    }
    const texts: string[] = [];
    let off = 0;
    while (texts.length < count && off + 4 <= buf.length) {
      const len = buf.readUInt32BE(off);
      if (off + 4 + len > buf.length) break;
      texts.push(buf.toString('utf8', off + 4, off + 4 + len));
      off += 4 + len;
    }
    if (texts.length < count) return null;
    this.goodBytes = off;
    return texts;
  }

  private static encode(texts: readonly string[]): Buffer {
    const parts: Buffer[] = [];
    for (const t of texts) {
      const b = Buffer.from(t, 'utf8');
      const len = Buffer.alloc(4);
      len.writeUInt32BE(b.length);
      parts.push(len, b);
    }
    return Buffer.concat(parts);
  }

  /** Replaces the whole cache. */
  rewrite(texts: readonly string[]): void {
    const tmp = `${this.path}.${process.pid}.tmp`;
    const data = BlockTextCache.encode(texts);
    writeFileSync(tmp, data);
    renameSync(tmp, this.path);
    this.goodBytes = data.length;
  }

  /** Appends texts after the good records (dropping anything a crash left after them). */
  append(texts: readonly string[]): void {
    try {
      truncateSync(this.path, this.goodBytes);
    } catch {
      return; // no cache yet: the next cold load writes it
    }
    const data = BlockTextCache.encode(texts);
    appendFileSync(this.path, data);
    this.goodBytes += data.length;
  }
}

export interface LoadReport {
  mode: 'cold' | 'warm';
  blocks: number;
  /** Blocks whose signatures were checked in this load. */
  verified: number;
  ms: number;
}

export class ChainState {
  readonly index = new ChainIndex();
  private verifier!: ChainVerifier;
  private digest: Buffer<ArrayBufferLike> = ZERO;
  private cp: Checkpoint | null = null;
  private cpJson: Record<string, unknown> | null = null;

  private readonly cache: BlockTextCache;

  private constructor(readonly repo: ChainRepo, private readonly pinnedPublicKey: string | null) {
    this.cache = new BlockTextCache(join(repo.dir, '.git', 'vouch-blocks.cache'));
  }

  get size(): number {
    return this.index.size;
  }

  get head(): Block {
    return this.index.head!;
  }

  get authority(): Block {
    return this.index.authority!;
  }

  get checkpoint(): Checkpoint | null {
    return this.cp;
  }

  get verifierState(): VerifierState {
    return this.verifier.state;
  }

  /** Whether a served block is an endorse block with this record_hash (what a new revoke must name). */
  endorsedBefore(recordHash: string): boolean {
    return this.index.blockByHash(recordHash)?.payload.intent === 'endorse';
  }

  /** A verifier resumed from `state`, checking revoke targets against the blocks already indexed. */
  private resumed(state: VerifierState): ChainVerifier {
    return new ChainVerifier({
      backend: nodeBackend, pinnedPublicKey: this.pinnedPublicKey, state,
      endorsedBefore: (h) => this.endorsedBefore(h),
    });
  }

  private get snapshotPath(): string {
    return join(this.repo.dir, '.git', 'vouch-snapshot.json');
  }

  /** Loads and verifies the chain in `repo` (warm when a valid snapshot allows). */
  static async load(repo: ChainRepo, options: { pinnedPublicKey?: string | null; onProgress?: (done: number, total: number) => void } = {}): Promise<{ state: ChainState; report: LoadReport }> {
    const t0 = performance.now();
    const s = new ChainState(repo, options.pinnedPublicKey ?? null);
    const warm = s.tryWarm();
    let verified: number;
    if (warm !== null) verified = warm;
    else {
      await s.loadCold(options.onProgress);
      verified = s.size;
    }
    s.writeSnapshot();
    return { state: s, report: { mode: warm !== null ? 'warm' : 'cold', blocks: s.size, verified, ms: performance.now() - t0 } };
  }

  private readSnapshot(): Snapshot | null {
    try {
      const snap = JSON.parse(readFileSync(this.snapshotPath, 'utf8')) as Snapshot;
      if (snap.version !== SNAPSHOT_VERSION || typeof snap.files_digest !== 'string' || !snap.state?.authority) return null;
      if ((snap.pinned_public_key ?? null) !== this.pinnedPublicKey && this.pinnedPublicKey !== null) return null;
      return snap;
    } catch {
      return null;
    }
  }

  /** Warm path; returns the number of blocks verified, or null to go cold. */
  private tryWarm(): number | null {
    const snap = this.readSnapshot();
    const total = this.repo.size;
    if (snap === null || snap.state.size > total || snap.state.size === 0) return null;
    let digest: Buffer<ArrayBufferLike> = ZERO;
    const blocks: Block[] = [];
    const n = snap.state.size;
    try {
      // The one-file cache when it is there and whole; else the block files one by one.
      let texts = this.cache.read(n);
      if (texts !== null && texts[n - 1] !== this.repo.readBlockFile(n - 1)) texts = null;
      const cached = texts !== null;
      texts ??= Array.from({ length: n }, (_, i) => this.repo.readBlockFile(i));
      for (const text of texts) {
        digest = stepDigest(digest, text);
        blocks.push(JSON.parse(text) as Block); // byte-identical to a strictly parsed, verified file
      }
      if (!cached && digest.toString('hex') === snap.files_digest) this.cache.rewrite(texts);
    } catch {
      return null;
    }
    if (digest.toString('hex') !== snap.files_digest || blocks[blocks.length - 1]!.record_hash !== snap.state.head) return null;
    try {
      this.verifier = this.resumed(snap.state);
    } catch {
      return null; // the pinned key changed: verify from scratch (and report there)
    }
    for (const b of blocks) this.index.add(b);
    this.digest = digest;
    const newer: string[] = [];
    for (let i = snap.state.size; i < total; i++) {
      const text = this.repo.readBlockFile(i);
      newer.push(text);
      const json = readJson(text);
      if (json.error !== null) throw new VouchError('malformed', `malformed at block ${i}: ${json.error}`, { index: i });
      this.index.add(this.verifier.add(json.value));
      this.digest = stepDigest(this.digest, text);
    }
    this.loadCheckpoint();
    if (newer.length) this.cache.append(newer);
    return total - snap.state.size;
  }

  private async loadCold(onProgress?: (done: number, total: number) => void): Promise<void> {
    const result = await verifyDirectory(this.repo, { pinnedPublicKey: this.pinnedPublicKey, ...(onProgress ? { onProgress } : {}) });
    this.verifier = this.resumed(result.state);
    let digest: Buffer<ArrayBufferLike> = ZERO;
    const texts: string[] = [];
    for (let i = 0; i < result.state.size; i++) {
      const text = this.repo.readBlockFile(i);
      texts.push(text);
      digest = stepDigest(digest, text);
      this.index.add(JSON.parse(text) as Block);
    }
    if (this.index.head?.record_hash !== result.state.head) {
      throw new VouchError('history_rewritten', 'the chain changed on disk while it was being verified', { index: null });
    }
    this.digest = digest;
    this.loadCheckpoint();
    try {
      this.cache.rewrite(texts);
    } catch {
      // An optimisation only: a read-only chain directory still serves.
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
  }

  private writeSnapshot(): void {
    const snap: Snapshot = {
      version: SNAPSHOT_VERSION,
      state: this.verifier.state,
      files_digest: this.digest.toString('hex'),
      pinned_public_key: this.pinnedPublicKey,
    };
    const tmp = `${this.snapshotPath}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, JSON.stringify(snap));
      renameSync(tmp, this.snapshotPath);
    } catch {
      // A snapshot is an optimisation only: a read-only chain directory still serves.
    }
  }

  /**
   * Re-reads every block file in the background and compares it with the
   * verified text served (after a warm start from the cache, nothing else
   * looked at them). Resolves with the first index whose file differs, or null.
   */
  async recheckFiles(): Promise<number | null> {
    const { readFile } = await import('node:fs/promises');
    const n = this.size;
    const verified = this.cache.read(n);
    if (verified === null) return null; // nothing cached: the load itself read the files
    const BATCH = 256;
    for (let start = 0; start < n; start += BATCH) {
      const ids = Array.from({ length: Math.min(BATCH, n - start) }, (_, k) => start + k);
      // Decoded strictly: a byte changed into an invalid one must not read back as the U+FFFD verified.
      const texts = await Promise.all(ids.map((i) => readFile(join(this.repo.dir, blockPath(i))).then((b) => utf8Text(b), () => null)));
      for (let k = 0; k < ids.length; k++) {
        const b = this.index.block(ids[k]!)!;
        const t = texts[k];
        // Cheap first: the record hash must appear; then the exact text the index was built from.
        if (t === null || t === undefined || !t.includes(b.record_hash) || t !== verified[ids[k]!]) return ids[k]!;
      }
    }
    return null;
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
   * writer's own, so a working tree that lags behind the branch does not
   * matter); without them the files are read from the working tree.
   * @throws VouchError when they do not verify (state left unchanged).
   */
  applyCommitted(blocks: readonly Block[], checkpointText: string | null, blockTexts?: readonly string[]): void {
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
    this.verifier = probe;
    parsed.forEach((b, i) => {
      if (this.index.size === b.index) this.index.add(blocks[i]!);
      this.digest = stepDigest(this.digest, texts[i]!);
    });
    try {
      this.cache.append(texts);
    } catch {
      // An optimisation only.
    }
    this.cp = cp;
    this.cpJson = cpJson;
    this.writeSnapshot();
  }
}
