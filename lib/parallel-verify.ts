/**
 * Verifies a chain directory with signature checks spread over all cores.
 *
 * Block 0 is checked on the calling thread (it fixes the authority); the
 * other blocks go in batches to worker threads (plain-JS bundles, see
 * `worker-bundle.ts`), which examine and walk each batch on their own
 * (`verify-worker-impl.ts`); the calling thread links the batches in chain
 * order with `ChainVerifier` (first block checked, walked state adopted,
 * failing block replayed), so the first failure and its code are exactly
 * those of a sequential check (DESIGN 1.7). Small chains are checked inline.
 *
 * Must hold: the outcome never depends on the number of threads.
 */
import { Worker } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import { sep } from 'node:path';
import { ChainVerifier, type BlockFacts, type TrustedAuthority, type VerifierState } from '../chain/verify.ts';
import { blockPath } from './chain-repo.ts';
import { VouchError } from '../chain/errors.ts';
import type { Checkpoint } from '../chain/block.ts';
import { nodeBackend } from './node-crypto.ts';
import { examineFile, type VerifyTask, type VerifyTaskResult } from './verify-worker-impl.ts';
import { workerBundle } from './worker-bundle.ts';

/** What a chain directory offers to the verifier (ChainRepo implements it). */
export interface BlockSource {
  readonly dir: string;
  listBlockFiles(): { index: number | null; path: string }[];
  /** True only if the listing would show exactly the block files 0..size-1 (a cheaper check; optional). */
  hasExactlyBlocks?(size: number): boolean;
  readCheckpoint(): string | null;
}

export interface DirVerifyOptions {
  pinnedPublicKey?: string | null;
  /** Worker threads; default: available cores. 0 = inline. */
  threads?: number;
  batchSize?: number;
  onProgress?: (done: number, total: number) => void;
}

export interface DirVerifyResult {
  state: VerifierState;
  checkpoint: Checkpoint | null;
}

const INLINE_BELOW = 2_000;

/** Block count a checkpoint's text claims (a hint only: it is verified at the end), 0 when unknown. */
function sizeHint(cpText: string | null): number {
  try {
    const size = (JSON.parse(cpText ?? 'null') as { size?: unknown } | null)?.size;
    return typeof size === 'number' ? size : 0;
  } catch {
    return 0;
  }
}

/** An error a worker raised before its batches were handed out (reported when they are). */
const startErrors = new WeakMap<Worker, Error>();

async function startWorkers(count: number): Promise<Worker[]> {
  const entry = (await workerBundle(new URL('./verify-worker-impl.ts', import.meta.url))) ?? new URL('./verify-worker.js', import.meta.url);
  return Array.from({ length: count }, () => {
    const w = new Worker(entry);
    w.once('error', (e) => startErrors.set(w, e));
    return w;
  });
}

/** A batch before its paths are written out (they are, when it is handed to a worker). */
interface Batch { id: number; start: number; count: number }

/**
 * Splits blocks 1..total-1 into batches: `batch` blocks each, then quarter
 * batches for the last stretch, so no worker idles long while another
 * finishes a full batch at the end.
 */
function planBatches(total: number, batch: number, threads: number): Batch[] {
  const batches: Batch[] = [];
  const small = Math.max(1, Math.ceil(batch / 4));
  for (let start = 1; start < total;) {
    const count = Math.min(total - start, total - start > 2 * threads * batch ? batch : small);
    batches.push({ id: batches.length, start, count });
    start += count;
  }
  return batches;
}

/**
 * Runs the batches on the workers (two in flight per worker, the next handed
 * out as one is answered) and collects their results by batch. Once a batch
 * reports a failure, later batches are not handed out: the earlier ones still
 * run, as the first failure in chain order is the one reported.
 */
function runBatches(
  workers: Worker[], batches: Batch[], authority: TrustedAuthority, pathOf: (index: number) => string,
  onBlocks: (done: number) => void,
): Promise<VerifyTaskResult[]> {
  const results: VerifyTaskResult[] = new Array(batches.length);
  let next = 0;
  let last = batches.length - 1; // the last batch still needed
  let contiguous = 0;
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (e?: unknown) => {
      if (settled) return;
      settled = true;
      if (e) reject(e);
      else resolve(results.slice(0, last + 1));
    };
    const feed = (w: Worker) => {
      if (next > last) return;
      const b = batches[next++]!;
      const paths = new Array<string>(b.count);
      for (let i = 0; i < b.count; i++) paths[i] = pathOf(b.start + i);
      w.postMessage({ id: b.id, start: b.start, paths, authority } satisfies VerifyTask);
    };
    for (const w of workers) {
      w.on('message', (r: VerifyTaskResult) => {
        results[r.id] = r;
        if ((r.first.malformed !== null || r.failure !== null) && r.id < last) last = r.id;
        while (contiguous <= last && results[contiguous]) {
          const b = batches[contiguous++]!;
          onBlocks(b.start + b.count);
        }
        if (contiguous > last) finish();
        else feed(w);
      });
      w.on('error', (e) => finish(e));
      w.on('exit', (code) => finish(new Error(`a verification worker stopped (exit code ${code})`)));
      const early = startErrors.get(w);
      if (early) return finish(early);
      feed(w);
      feed(w);
    }
  });
}

/** Links the batches' results in chain order (see verify-worker-impl.ts); throws the first failure. */
function linkBatches(verifier: ChainVerifier, results: VerifyTaskResult[]): void {
  for (const r of results) {
    verifier.addFacts(r.first);
    if (r.walked) verifier.advanceTo(r.walked);
    if (r.failure) verifier.addFacts(r.failure);
  }
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

/** The listing shows exactly the block files 0..size-1 and nothing else. */
function exactly(files: { index: number | null }[], size: number): boolean {
  if (files.length !== size) return false;
  for (let i = 0; i < size; i++) if (files[i]!.index !== i) return false;
  return true;
}

/**
 * Verifies every block file of `source` and its checkpoint.
 * @throws VouchError with an integrity code and the block index on failure.
 */
export async function verifyDirectory(source: BlockSource, options: DirVerifyOptions = {}): Promise<DirVerifyResult> {
  const threads = Math.max(0, options.threads ?? availableParallelism());
  const batch = options.batchSize ?? 1_000;
  const progress = options.onProgress ?? (() => {});
  const base = source.dir.endsWith(sep) ? source.dir : source.dir + sep;
  let pool: Promise<Worker[]> | null = null;
  const stopPool = async () => {
    const p = pool;
    pool = null;
    if (p) await Promise.all((await p.catch(() => [] as Worker[])).map((w) => w.terminate()));
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
    // A large chain starts before its directory is listed: the checkpoint's
    // size (a hint here; it is verified at the end) plans the batches over
    // the paths the blocks must have, the workers start on them, and the
    // listing, made meanwhile, must then show exactly those files (checked
    // from the names first, `hasExactlyBlocks`; the full listing only when
    // that says no). If it does not (only a broken chain, or empty extra
    // directories), the speculative run is dropped and the chain verified
    // from the listing, so every outcome is the listing's.
    const hint = threads > 0 ? sizeHint(cpText) : 0;
    let speculative: { size: number; facts0: BlockFacts; run: Promise<VerifyTaskResult[]> } | null = null;
    if (hint >= INLINE_BELOW) {
      pool = startWorkers(threads);
      const facts0 = examineFile(base + blockPath(0), 0, null);
      if (acceptable(facts0, options.pinnedPublicKey)) {
        const run = runBatches(await pool, planBatches(hint, batch, threads), facts0.authority, (i) => base + blockPath(i), (done) => progress(done, hint));
        run.catch(() => {}); // awaited below, or dropped with the pool
        speculative = { size: hint, facts0, run };
      }
    }

    // The cheap names-only check first; the full listing only when it fails (and for every error message).
    const confirmed = speculative !== null && source.hasExactlyBlocks?.(speculative.size) === true;
    const files = confirmed ? [] : source.listBlockFiles();
    const stray = files.find((f) => f.index === null);
    if (stray) throw new VouchError('malformed', `malformed: unexpected file ${stray.path} in the chain's blocks/ directory`, { index: null, resource: stray.path });
    if (!confirmed && files.length === 0) throw new VouchError('malformed', 'malformed at block 0: the chain has no blocks', { index: 0 });
    const total = confirmed ? speculative!.size : files.length;
    const verifier = new ChainVerifier({ backend: nodeBackend, pinnedPublicKey: options.pinnedPublicKey ?? null });

    if (speculative && (confirmed || exactly(files, speculative.size))) {
      verifier.addFacts(speculative.facts0);
      linkBatches(verifier, await speculative.run);
    } else {
      if (speculative) await stopPool();
      // Plain concatenation: path.join costs ~2 µs a call, 100 ms on 50,000 blocks.
      const paths = files.map((f) => base + f.path);
      verifier.addFacts(examineFile(paths[0]!, 0, null));
      const authority = verifier.authority!;
      if (threads === 0 || total < INLINE_BELOW) {
        for (let p = 1; p < total; p++) {
          verifier.addFacts(examineFile(paths[p]!, p, authority));
          if (p % 1000 === 0) progress(p, total);
        }
      } else {
        const batches = planBatches(total, batch, threads);
        pool = startWorkers(Math.min(threads, batches.length));
        linkBatches(verifier, await runBatches(await pool, batches, authority, (i) => paths[i]!, (done) => progress(done, total)));
      }
    }
    progress(total, total);
    // The workers' work is done: they are told to stop, not waited for (about 10 ms).
    void stopPool().catch(() => {});
    if (cpError !== null) throw cpError;
    return { state: verifier.state, checkpoint: checkCheckpoint(cpText, verifier) };
  } finally {
    await stopPool();
  }
}

function checkCheckpoint(cpText: string | null, verifier: ChainVerifier): Checkpoint | null {
  if (cpText === null) return null;
  let value: unknown;
  try {
    value = JSON.parse(cpText);
  } catch {
    throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: checkpoint.json is not JSON', { index: null });
  }
  return verifier.verifyCheckpoint(value);
}
