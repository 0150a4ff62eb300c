/**
 * Verifies a chain directory with signature checks spread over all cores:
 * block 0 on the calling thread, the rest in batches to worker threads
 * (`verify-worker-impl.ts`), linked in chain order with `ChainVerifier`, so
 * the first failure and its code are those of a sequential check
 * (docs/spec/design.md §1.7). Flat as the chain grows: per block the
 * calling thread builds no string and keeps nothing; `onVerified` and
 * `onLeaves` hand each block's text, facts or leaf hash on in order.
 * What is verified is what the branch commits: the blobs its trees name,
 * read from git objects (docs/decisions/one-layout.md).
 * Trusts: nothing in the chain directory (a forged checkpoint size plans
 * nothing).
 * Must hold: the outcome never depends on the number of threads; every
 * failure about a block names its index.
 */
import { Worker } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import { sep } from 'node:path';
import { ChainVerifier, type BlockFacts, type TrustedAuthority, type VerifierState } from '../chain/verify.ts';
import { hash } from 'node:crypto';
import { blockPath } from '../chain/layout.ts';
import type { ChainReads, CommittedFiles } from './chain-api.ts';
import { VouchError } from '../chain/errors.ts';
import { readJson, type Checkpoint } from '../chain/block.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import {
  closeObjectRead,
  examineObject,
  leafOfRecordHash,
  objectReadOf,
  type Examined,
  type KeyNotice,
  type ObjectRead,
  type VerifyTask,
  type VerifyTaskResult,
} from './verify-worker-impl.ts';
import { startBundleWorker, workerBundle } from '../platform/worker-bundle.ts';
import { indexFactsOf, type IndexFacts } from '../chain/index-facts.ts';
import { initialKeyState, type KeyState } from '../chain/key-events.ts';

/** What a chain repository offers to the verifier (ChainReads): what branch main commits, and where its objects are. */
export type BlockSource = Pick<ChainReads, 'dir' | 'readCheckpoint' | 'committedFiles' | 'blockObjects'>;

export interface DirVerifyOptions {
  pinnedPublicKey?: string | null;
  /** Worker threads; default: available cores. 0 = inline. */
  threads?: number;
  /**
   * Blocks per worker task; default 500: the last tasks end at most about
   * 0.15 s of CPU apart, so little of the run is one worker finishing alone.
   */
  batchSize?: number;
  onProgress?: (done: number, total: number) => void;
  /**
   * Called in chain order with the blocks that passed every check before
   * them in chain order: `texts[i]` is the exact text of block `start + i`'s
   * file, `facts[i]` its `indexFactsOf`. Block 0 comes first, then each
   * batch as soon as it is linked; nothing is kept after the call (a caller
   * building an index from them never re-reads a file). A failure later in
   * the chain still makes `verifyDirectory` throw (the caller then discards
   * what it got); nothing past the failing block is ever handed over.
   */
  onVerified?: (start: number, texts: string[], facts: IndexFacts[]) => void;
  /** With `onVerified`: only the facts are wanted; `texts` is then empty (the workers send no text back). */
  factsOnly?: boolean;
  /**
   * Called in chain order with the RFC 6962 leaf hashes (SHA-256(0x00 ‖
   * record hash), 32 bytes each, back to back) of the blocks that passed
   * every check before them, `start` being the first one's index; as
   * `onVerified`, nothing past a failing block is handed over.
   */
  onLeaves?: (start: number, leaves: Uint8Array) => void;
}

export interface DirVerifyResult {
  state: VerifierState;
  checkpoint: Checkpoint | null;
}

const INLINE_BELOW = 2_000;
/** Largest block count a chain can have (block paths have 9 digits). */
const MAX_BLOCKS = 1_000_000_000;

/**
 * Block count a checkpoint's text claims (a hint only: it is verified at the
 * end), 0 when it is not a plausible count. The caller uses it only when it
 * equals what git holds.
 */
function sizeHint(cpText: string | null): number {
  try {
    const size = (JSON.parse(cpText ?? 'null') as { size?: unknown } | null)?.size;
    return typeof size === 'number' && Number.isSafeInteger(size) && size > 0 && size <= MAX_BLOCKS ? size : 0;
  } catch {
    return 0;
  }
}

/** The git blob id of a file with this text (strictly decoded text re-encodes to the same bytes). */
function blobIdOfText(text: string): string {
  const body = Buffer.from(text, 'utf8');
  return hash('sha1', Buffer.concat([Buffer.from(`blob ${body.length}\0`, 'latin1'), body]), 'hex');
}

/** An error a worker raised before its batches were handed out (reported when they are). */
const startErrors = new WeakMap<Worker, Error>();

async function startWorkers(count: number): Promise<Worker[]> {
  const bundle = await workerBundle(new URL('./verify-worker-impl.ts', import.meta.url));
  const options = { workerData: { vouch: 'verify-worker' } };
  return Array.from({ length: count }, () => {
    // The fallback entry inherits the process's flags.
    const w = bundle ? startBundleWorker(bundle, options) : new Worker(new URL('./verify-worker.js', import.meta.url), options);
    w.once('error', (e) => startErrors.set(w, e));
    return w;
  });
}

/**
 * Stops a worker between two of its tasks (it exits when told: see
 * verify-worker-impl.ts), not in the middle of one: `terminate()` while a
 * task inflates a git object can abort the whole process (Node's zlib:
 * "close before init"). Terminated after 5 s if it has not exited.
 */
function stopWorker(w: Worker): Promise<void> {
  return new Promise((resolve) => {
    if (w.threadId === -1) return resolve(); // already exited
    const late = setTimeout(
      () =>
        void w.terminate().then(
          () => resolve(),
          () => resolve(),
        ),
      5000,
    );
    w.once('exit', () => {
      clearTimeout(late);
      resolve();
    });
    w.postMessage({ stop: true });
  });
}

/** A batch before its paths are written out (they are, when it is handed to a worker). */
interface Batch {
  id: number;
  start: number;
  count: number;
}

/**
 * Splits blocks 1..total-1 into batches: `batch` blocks each, then quarter
 * batches for the last stretch, so no worker idles long while another
 * finishes a full batch at the end.
 */
function planBatches(total: number, batch: number, threads: number): Batch[] {
  const batches: Batch[] = [];
  const small = Math.max(1, Math.ceil(batch / 4));
  for (let start = 1; start < total; ) {
    const count = Math.min(total - start, total - start > 2 * threads * batch ? batch : small);
    batches.push({ id: batches.length, start, count });
    start += count;
  }
  return batches;
}

/**
 * Hands a batch's result to the chain verifier (in chain order); throws the
 * chain's first failure. True when nothing was linked: the batch was handed
 * out before a key block changed the key in force, and goes out again.
 */
type Link = (r: VerifyTaskResult, b: Batch) => boolean;

/** A run of batches on the workers (`runBatches`). */
interface Run {
  /** Settles when every batch needed is linked (or with the first failure, in chain order). */
  done: Promise<void>;
  /** Starts linking results (held until then: a speculative run is linked only once it is confirmed). */
  begin(link: Link): void;
}

/**
 * Runs the batches on the workers (two in flight per worker, the next handed
 * out as one is answered, never more than `window` batches past the first
 * one not yet linked, so results waiting for an earlier batch stay few) and
 * links each result in chain order as soon as every batch before it is
 * linked, then drops it: nothing is held until the end. Once a batch reports
 * a failure, later batches are not handed out: the earlier ones still run,
 * as the first failure in chain order is the one reported.
 */
function runBatches(
  workers: Worker[],
  batches: Batch[],
  task: (b: Batch) => { task: VerifyTask; transfer: ArrayBuffer[] },
  sequenceNow: () => number,
  ahead: (n: KeyNotice) => void,
): Run {
  const waiting = new Map<number, VerifyTaskResult>();
  /** The key sequence each batch was last handed out with (-1: its answer is superseded, it goes out again). */
  const sentWith = new Map<number, number>();
  /** Batches to hand out again (handed out before a key block changed the key), before any new one. */
  const redo: number[] = [];
  /** One counter a batch, shared with the workers: raised when the batch is superseded, so a run of it still going stops early. */
  const gens = new Int32Array(new SharedArrayBuffer(4 * Math.max(1, batches.length)));
  const supersede = (id: number): void => {
    sentWith.set(id, -1);
    waiting.delete(id);
    Atomics.add(gens, id, 1);
  };
  const window = 4 * workers.length + 2;
  let next = 0;
  let last = batches.length - 1; // the last batch still needed
  let contiguous = 0; // batches linked
  let link: Link | null = null;
  const idle: Worker[] = [];
  let settle!: (e?: unknown) => void;
  const done = new Promise<void>((resolve, reject) => {
    let settled = false;
    settle = (e?: unknown) => {
      if (settled) return;
      settled = true;
      if (e) reject(e);
      else resolve();
    };
  });
  const send = (w: Worker, id: number): void => {
    const t = task(batches[id]!);
    sentWith.set(id, t.task.keys.sequence);
    t.task.cancel = gens;
    t.task.gen = Atomics.load(gens, id);
    w.postMessage(t.task, t.transfer);
  };
  const feed = (w: Worker): void => {
    if (redo.length > 0) return send(w, redo.shift()!);
    if (next > last || next >= contiguous + window) {
      idle.push(w);
      return;
    }
    send(w, next++);
  };
  const drain = (): void => {
    if (link === null) return;
    try {
      while (contiguous <= last && waiting.has(contiguous)) {
        const r = waiting.get(contiguous)!;
        waiting.delete(contiguous);
        if (!link(r, batches[contiguous]!)) {
          contiguous++;
          continue;
        }
        // Handed out before a key block changed the key in force: it and every later batch
        // handed out with an older key state go out again now (their answers are dropped).
        const now = sequenceNow();
        for (let id = contiguous; id < next; id++) {
          if (sentWith.get(id) === now || sentWith.get(id) === -1) continue;
          supersede(id);
          redo.push(id);
        }
        last = batches.length - 1; // a failure seen with the old key does not count
        break;
      }
    } catch (e) {
      return settle(e);
    }
    if (contiguous > last) return settle();
    while (idle.length > 0 && (redo.length > 0 || (next <= last && next < contiguous + window))) feed(idle.pop()!);
  };
  for (const w of workers) {
    w.on('message', (r: VerifyTaskResult | KeyNotice) => {
      if ('notice' in r) {
        // A worker walked a key block that changes the online key: batches after it go out with the new key state,
        // and those already handed out with an older one go out again now (the link still checks every one).
        ahead(r);
        for (let id = r.id + 1; id < next; id++) {
          const sent = sentWith.get(id);
          if (sent === undefined || sent === -1 || sent >= r.keys.sequence) continue;
          supersede(id);
          if (!redo.includes(id)) redo.push(id);
        }
        if (last < batches.length - 1) last = batches.length - 1;
        while (idle.length > 0 && (redo.length > 0 || (next <= last && next < contiguous + window))) feed(idle.pop()!);
        return;
      }
      if (r.aborted !== true && sentWith.get(r.id) === r.sequence) {
        waiting.set(r.id, r);
        if ((r.first.malformed !== null || r.failure !== null) && r.id < last && r.sequence === sequenceNow()) last = r.id;
      } // else: a superseded answer (the batch went out again with a newer key state)
      feed(w);
      drain();
    });
    w.on('error', (e) => settle(e));
    w.on('exit', (code) => settle(new VouchError('internal_error', `a verification worker stopped (exit code ${code})`)));
    const early = startErrors.get(w);
    if (early) {
      settle(early);
      break;
    }
    feed(w);
    feed(w);
  }
  return {
    done,
    begin(l: Link) {
      link = l;
      drain();
    },
  };
}

/**
 * Links one batch's result into `verifier` (see verify-worker-impl.ts): its
 * first block checked against the chain so far, the walked state adopted
 * (its deferred revokes checked), the failing block replayed for the exact
 * error; hands the blocks that passed to `onVerified` before throwing.
 */
function linkBatch(
  verifier: ChainVerifier,
  r: VerifyTaskResult,
  b: Batch,
  onVerified: DirVerifyOptions['onVerified'],
  onLeaves: DirVerifyOptions['onLeaves'] | undefined,
): boolean {
  const keys = verifier.keys!;
  if (r.sequence !== keys.sequence) {
    // Handed out before a key block was linked. Still good when that event left the online key
    // as it was (a root adopted or rotated) and the batch holds no key block and no failure:
    // its blocks were checked with the key in force. Then its walked state takes the current keys.
    const clean =
      r.key === keys.online.publicKey &&
      r.failure === null &&
      r.first.malformed === null &&
      r.first.keyEvent === null &&
      r.walked !== null &&
      r.walked.keys!.sequence === r.sequence;
    if (!clean) return true; // it goes out again
    r.walked = { ...r.walked!, keys, authority: { signer: keys.online.signer, publicKey: keys.online.publicKey } };
  }
  verifier.addFacts(r.first);
  let failed: unknown = null;
  if (r.walked) {
    try {
      verifier.advanceTo(r.walked, r.walk ?? undefined);
    } catch (e) {
      failed = e;
    }
  }
  if (onVerified) {
    const passed = verifier.size - b.start;
    const texts = r.texts ?? [];
    const facts = r.facts ?? [];
    const factsOnly = r.texts === undefined;
    if ((!factsOnly && texts.length < passed) || facts.length < passed)
      throw new VouchError('internal_error', `a verification worker returned ${texts.length} texts and ${facts.length} facts for ${passed} blocks`);
    onVerified(b.start, factsOnly ? [] : passed === texts.length ? texts : texts.slice(0, passed), passed === facts.length ? facts : facts.slice(0, passed));
  }
  if (onLeaves) {
    const passed = verifier.size - b.start;
    const leaves = r.leaves ?? new Uint8Array(0);
    if (leaves.length < 32 * passed)
      throw new VouchError('internal_error', `a verification worker returned ${leaves.length / 32} leaf hashes for ${passed} blocks`);
    onLeaves(b.start, leaves.length === 32 * passed ? leaves : leaves.subarray(0, 32 * passed));
  }
  if (failed !== null) throw failed;
  if (r.failure) verifier.addFacts(r.failure);
  return false;
}

/** Hands examined blocks that passed to `onVerified` (block 0, and the inline path's blocks). */
function deliver(onVerified: DirVerifyOptions['onVerified'], start: number, blocks: Examined[]): void {
  if (!onVerified || blocks.length === 0) return;
  onVerified(
    start,
    blocks.map((x) => x.text!),
    blocks.map((x) => indexFactsOf(x.block!)),
  );
}

/** Block 0's facts pass the checks of block 0 (so a speculative run is worth starting). */
function acceptable(facts0: BlockFacts, pinned: string | null | undefined): facts0 is BlockFacts & { malformed: null; authority: TrustedAuthority } {
  if (facts0.malformed !== null || facts0.authority === null) return false;
  try {
    new ChainVerifier({ backend: nodeBackend, pinnedPublicKey: pinned ?? null }).addFacts(facts0);
    return true;
  } catch {
    return false;
  }
}

/** The branch commits exactly the block files 0..size-1 and nothing else under blocks/ (the sparse layout's listing). */
function exactIndexes(committed: CommittedFiles, size: number): boolean {
  if (committed.count !== size || committed.strays.length > 0) return false;
  const list = committed.indexes();
  return list.length === size && list[size - 1] === size - 1;
}

/** Something under blocks/ that is no block file, with the index it would hold. */
interface Stray {
  index: number;
  path: string;
  why: string;
}

/**
 * The index a file that is not a block's would hold: the one its name claims
 * (`000000042.json` in the wrong directory), else its place among the block
 * files in path order (what a reader taking the listing as it is would make
 * of it).
 */
function wouldHold(path: string, blockPaths: readonly string[]): number {
  const name = path.slice(path.lastIndexOf('/') + 1);
  if (/^\d{9}\.json$/.test(name)) return Number(name.slice(0, 9));
  let lo = 0;
  let hi = blockPaths.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (blockPaths[mid]! < path) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Verifies every block file of `source` and its checkpoint.
 * @throws VouchError with an integrity code and the block index on failure.
 */
export async function verifyDirectory(source: BlockSource, options: DirVerifyOptions = {}): Promise<DirVerifyResult> {
  const threads = Math.max(0, options.threads ?? availableParallelism());
  const batch = options.batchSize ?? 500;
  const progress = options.onProgress ?? (() => {});
  const onVerified = options.onVerified;
  const onLeaves = options.onLeaves;
  /** A block checked on this thread passed: its leaf hash to onLeaves. */
  const leafOf = onLeaves ? (p: number, x: Examined) => onLeaves(p, leafOfRecordHash((x.facts as { recordHash: string }).recordHash)) : null;
  const base = source.dir.endsWith(sep) ? source.dir : source.dir + sep;
  let pool: Promise<Worker[]> | null = null;
  let poolUsed = false;
  let mainRead: ObjectRead | null = null;
  const stopPool = async () => {
    const p = pool;
    pool = null;
    poolUsed = false;
    if (p) await Promise.all((await p.catch(() => [] as Worker[])).map(stopWorker));
  };
  // checkpoint.json is read once: its size plans the work, its text is checked at the end
  // (a read error is reported there, after the blocks, as before).
  let cpText: string | null = null;
  let cpError: unknown = null;
  try {
    cpText = source.readCheckpoint();
  } catch (e) {
    cpError = e;
  }
  try {
    // A large chain starts before the branch's trees are read: the checkpoint's
    // size (a hint here; it is verified at the end), when it is exactly the
    // number of block files the branch commits, plans the batches over the
    // paths the blocks must have, the workers start on them, and the
    // branch's block indexes must then be exactly those (`exactIndexes`).
    // Their results are linked only once they are. If they are not (only a
    // broken chain), the speculative run is dropped and the chain verified
    // from the branch's listing, so every outcome is the listing's.
    const claimed = threads > 0 ? sizeHint(cpText) : 0;
    if (claimed >= INLINE_BELOW) pool = startWorkers(threads); // they start while git's trees are read
    const committed = await source.committedFiles();
    // The blocks, read from git objects where the branch's trees name them.
    const objects = source.blockObjects();
    const gitdir = base + '.git' + sep;
    /** Block `p`, read and examined on this thread (block 0, small chains). */
    const examineAt = (p: number, authority: TrustedAuthority | null, retired?: readonly string[]): Examined => {
      const oid = expect(p);
      if (!oid) return { facts: { position: p, malformed: `${blockPath(p)} is not on branch main` }, text: null, block: null };
      const at = objects.where(oid);
      mainRead ??= objectReadOf(gitdir, objects.packDir);
      return examineObject(mainRead, p, authority, oid, at?.pack ?? null, at?.offset ?? -1, undefined, retired);
    };
    /** The blob id the branch commits for block `i` (null: none). */
    const expect = (i: number): Uint8Array | null => {
      const oid = new Uint8Array(20);
      return committed.copyOid(i, oid, 0) ? oid : null;
    };
    // The key state batches are handed out with: block 0's, then the newest linked (a batch handed out before a key block is verified again here).
    let current: { authority: TrustedAuthority; keys: KeyState } | null = null;
    // A key block a worker walked ahead of the linking (a KeyNotice): batches after it are handed out with its state.
    let early: { index: number; authority: TrustedAuthority; keys: KeyState } | null = null;
    const onNotice = (n: KeyNotice): void => {
      if (early === null || n.keys.sequence > early.keys.sequence) early = { index: n.index, authority: n.authority, keys: n.keys };
    };
    const taskOf = (b: Batch): { task: VerifyTask; transfer: ArrayBuffer[] } => {
      const use = early !== null && b.start > early.index && early.keys.sequence > current!.keys.sequence ? early : current!;
      // The batch's blob ids in one buffer (20 bytes a block), handed over, not copied. Batches cover
      // only blocks the branch commits (before its first gap or stray): each has its id.
      const oids = new Uint8Array(20 * b.count);
      for (let i = 0; i < b.count; i++) committed.copyOid(b.start + i, oids, 20 * i);
      // Where each block's object is (pack number, offset), found here in the packs' indexes.
      const where = new Float64Array(2 * b.count);
      const packs: string[] = [];
      for (let i = 0; i < b.count; i++) {
        const at = objects.where(oids.subarray(20 * i, 20 * i + 20));
        let k = -1;
        if (at !== null) {
          k = packs.indexOf(at.pack);
          if (k < 0) k = packs.push(at.pack) - 1;
        }
        where[2 * i] = k;
        where[2 * i + 1] = at?.offset ?? -1;
      }
      const task: VerifyTask = {
        id: b.id,
        start: b.start,
        count: b.count,
        authority: use.authority,
        keys: use.keys,
        oids,
        objects: { gitdir, packDir: objects.packDir, packs, where },
      };
      if (onVerified) {
        task.texts = true;
        if (options.factsOnly === true) task.noTexts = true;
      }
      if (onLeaves) task.leaves = true;
      return { task, transfer: [oids.buffer, where.buffer] };
    };
    const hint = committed.strays.length === 0 && claimed === committed.count ? claimed : 0;
    let speculative: { size: number; head: Examined; run: Run } | null = null;
    if (hint >= INLINE_BELOW && pool !== null) {
      const head = examineAt(0, null);
      if (acceptable(head.facts, options.pinnedPublicKey)) {
        poolUsed = true;
        const a = head.facts.authority;
        current = { authority: a, keys: initialKeyState(head.facts.recordHash, a.signer, a.publicKey) };
        const run = runBatches(await pool, planBatches(hint, batch, threads), taskOf, () => current!.keys.sequence, onNotice);
        run.done.catch(() => {}); // awaited below, or dropped with the pool
        speculative = { size: hint, head, run };
      }
    }

    // The cheap names-only check first; the branch's full listing only when it fails (and for every error message).
    // Both are synchronous: no worker's answer is looked at before they are done.
    const confirmed = speculative !== null && exactIndexes(committed, speculative.size);
    const files: { index: number; path: string }[] = confirmed ? [] : committed.indexes().map((index) => ({ index, path: blockPath(index) }));
    const verifier = new ChainVerifier({ backend: nodeBackend, pinnedPublicKey: options.pinnedPublicKey ?? null });
    let total: number;
    /** Verifies blocks from..to-1 on this thread, each with the key in force as it comes; handed to onVerified a thousand at a time once they passed. */
    const inline = (from: number, to: number, total: number): void => {
      let passed: Examined[] = [];
      for (let p = from; p < to; p++) {
        const x = examineAt(p, verifier.authority, verifier.keys!.retired);
        try {
          verifier.addFacts(x.facts);
        } catch (e) {
          deliver(onVerified, p - passed.length, passed);
          throw e;
        }
        if (onVerified) passed.push(x);
        leafOf?.(p, x);
        if (p % 1000 === 0) {
          deliver(onVerified, p + 1 - passed.length, passed);
          passed = [];
          progress(p, total);
        }
      }
      deliver(onVerified, to - passed.length, passed);
    };
    const link = (r: VerifyTaskResult, b: Batch): boolean => {
      const again = linkBatch(verifier, r, b, onVerified, onLeaves);
      current = { authority: verifier.authority!, keys: verifier.keys! };
      if (!again) progress(b.start + b.count, total);
      return again;
    };

    if (speculative && confirmed) {
      total = speculative.size;
      verifier.addFacts(speculative.head.facts);
      deliver(onVerified, 0, [speculative.head]);
      leafOf?.(0, speculative.head);
      speculative.run.begin(link);
      await speculative.run.done;
    } else {
      if (poolUsed) await stopPool();
      // Block files by position (the branch's); anything else it commits under blocks/ is a stray.
      const blockFiles = files;
      const blockPaths = blockFiles.map((f) => f.path);
      const strays: Stray[] = committed.strays.map((f) => ({ index: wouldHold(f.path, blockPaths), path: f.path, why: f.why }));
      strays.sort((a, b) => a.index - b.index || (a.path < b.path ? -1 : 1));
      const stray = strays[0];
      // The first position whose file is missing (the listing then jumps past it).
      let gapAt = 0;
      while (gapAt < blockFiles.length && blockFiles[gapAt]!.index === gapAt) gapAt++;
      if (blockFiles.length === 0 && !stray) throw new VouchError('malformed', 'malformed at block 0: the chain has no blocks', { index: 0 });
      // Blocks before the first stray or gap are verified first: a failure among them comes first in chain order.
      // Block p's file is then at blockPath(p) (a listed path naming an index is that index's one spelling).
      total = Math.min(gapAt, stray ? stray.index : Infinity);
      if (total > 0) {
        // Paths by plain concatenation: path.join costs ~2 µs a call, 100 ms on 50,000 blocks.
        const head = examineAt(0, null);
        verifier.addFacts(head.facts);
        deliver(onVerified, 0, [head]);
        leafOf?.(0, head);
        if (threads === 0 || total < INLINE_BELOW) {
          inline(1, total, total);
        } else {
          const batches = planBatches(total, batch, threads);
          if (pool === null) pool = startWorkers(Math.min(threads, batches.length));
          poolUsed = true;
          current = { authority: verifier.authority!, keys: verifier.keys! };
          const run = runBatches(await pool, batches, taskOf, () => current!.keys.sequence, onNotice);
          run.begin(link);
          await run.done;
        }
      }
      if (stray && stray.index <= gapAt) {
        const own = blockPath(Math.min(stray.index, 999_999_999));
        const what =
          stray.path === own
            ? `${stray.path} ${stray.why}`
            : `unexpected file ${stray.path} in the chain's blocks/ directory: it ${stray.why} (block ${stray.index} is the index it would hold; that block's file is ${own})`;
        throw new VouchError('malformed', `malformed at block ${stray.index}: ${what}`, {
          index: stray.index,
          resource: stray.path,
        });
      }
      if (gapAt < blockFiles.length) {
        throw new VouchError('index_gap', `index_gap at block ${gapAt}: there is no ${blockPath(gapAt)} (the next block file is ${blockFiles[gapAt]!.path})`, {
          index: gapAt,
          resource: blockPath(gapAt),
          evidence: { missing: blockPath(gapAt), next: blockFiles[gapAt]!.path },
        });
      }
      // Past both checks, total is the branch's block count (committed.count: its listing has no gap and no stray).
    }
    progress(total, total);
    // The workers' work is done: they are told to stop, not waited for (about 10 ms).
    void stopPool().catch(() => {});
    if (cpError !== null) throw cpError;
    return { state: verifier.state, checkpoint: checkCheckpoint(cpText, verifier, committed) };
  } finally {
    closeObjectRead(mainRead);
    await stopPool();
  }
}

function checkCheckpoint(cpText: string | null, verifier: ChainVerifier, committed: CommittedFiles | null): Checkpoint | null {
  const fail = (message: string): never => {
    throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${message}`, { index: null });
  };
  if (committed) {
    const here = cpText === null ? null : blobIdOfText(cpText);
    const there = committed.checkpoint;
    if (here !== there) {
      if (there === null) fail('checkpoint.json is not on branch main (an untracked file: clones do not get it)');
      else if (!/^[0-9a-f]{40}$/.test(there)) fail(`branch main commits checkpoint.json as ${there}, not a regular file`);
      else if (here === null) fail('branch main commits a checkpoint.json the working tree does not have: verify a clean checkout (git status)');
      else fail(`checkpoint.json is not what branch main commits (git blob ${there}; the file is blob ${here}): verify a clean checkout (git status)`);
    }
  }
  if (cpText === null) return null;
  const json = readJson(cpText);
  if (json.error !== null) fail(`malformed checkpoint: ${json.error}`);
  return verifier.verifyCheckpoint(json.value);
}
