/**
 * Verifies a chain directory with signature checks spread over all cores.
 *
 * Block 0 is checked on the calling thread (it fixes the authority); the
 * other blocks go in batches to worker threads, which examine them on their
 * own (`examineBlock`); the calling thread walks the results in chain order
 * with `ChainVerifier`, so the first failure and its code are exactly those
 * of a sequential check (DESIGN 1.7). Small chains are checked inline.
 *
 * Must hold: the outcome never depends on the number of threads.
 */
import { Worker } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { ChainVerifier, type VerifierState } from '../chain/verify.ts';
import { VouchError } from '../chain/errors.ts';
import type { Checkpoint } from '../chain/block.ts';
import { nodeBackend } from './node-crypto.ts';
import { examineFile, type VerifyTask, type VerifyTaskResult } from './verify-worker-impl.ts';

/** What a chain directory offers to the verifier (ChainRepo implements it). */
export interface BlockSource {
  readonly dir: string;
  listBlockFiles(): { index: number | null; path: string }[];
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

/**
 * Verifies every block file of `source` and its checkpoint.
 * @throws VouchError with an integrity code and the block index on failure.
 */
export async function verifyDirectory(source: BlockSource, options: DirVerifyOptions = {}): Promise<DirVerifyResult> {
  const files = source.listBlockFiles();
  const stray = files.find((f) => f.index === null);
  if (stray) throw new VouchError('malformed', `malformed: unexpected file ${stray.path} in the chain's blocks/ directory`, { index: null, resource: stray.path });
  const paths = files.map((f) => join(source.dir, f.path));
  if (paths.length === 0) throw new VouchError('malformed', 'malformed at block 0: the chain has no blocks', { index: 0 });
  const total = paths.length;
  const verifier = new ChainVerifier({ backend: nodeBackend, pinnedPublicKey: options.pinnedPublicKey ?? null });
  const progress = options.onProgress ?? (() => {});

  verifier.addFacts(examineFile(paths[0]!, 0, null));
  const authority = verifier.authority!;
  const threads = Math.max(0, options.threads ?? availableParallelism());

  if (threads === 0 || total < INLINE_BELOW) {
    for (let p = 1; p < total; p++) {
      verifier.addFacts(examineFile(paths[p]!, p, authority));
      if (p % 1000 === 0) progress(p, total);
    }
  } else {
    const batch = options.batchSize ?? 1_000;
    const tasks: VerifyTask[] = [];
    for (let start = 1, id = 0; start < total; start += batch, id++) {
      tasks.push({ id, start, paths: paths.slice(start, start + batch), authority });
    }
    const results = new Map<number, VerifyTaskResult>();
    let nextTask = 0;
    let nextWalk = 0;
    let failure: unknown = null;
    const workers: Worker[] = [];
    await new Promise<void>((resolve, reject) => {
      const finish = (e?: unknown) => (e ? reject(e) : resolve());
      const walk = () => {
        try {
          while (results.has(nextWalk)) {
            const r = results.get(nextWalk)!;
            results.delete(nextWalk);
            for (const f of r.facts) verifier.addFacts(f);
            nextWalk++;
            progress(Math.min(total, 1 + nextWalk * batch), total);
          }
        } catch (e) {
          failure = e;
        }
        if (failure || nextWalk === tasks.length) finish(failure ?? undefined);
      };
      const feed = (w: Worker) => {
        // Keep at most a few batches ahead of the walker (bounded memory).
        if (failure || nextTask >= tasks.length || nextTask - nextWalk > threads * 4) return false;
        w.postMessage(tasks[nextTask++]);
        return true;
      };
      const idle: Worker[] = [];
      for (let i = 0; i < Math.min(threads, tasks.length); i++) {
        const w = new Worker(new URL('./verify-worker.js', import.meta.url));
        workers.push(w);
        w.on('message', (r: VerifyTaskResult) => {
          results.set(r.id, r);
          walk();
          if (!feed(w)) idle.push(w);
          while (idle.length && feed(idle[0]!)) idle.shift();
        });
        w.on('error', (e) => finish(e));
        if (!feed(w)) idle.push(w);
      }
    }).finally(() => Promise.all(workers.map((w) => w.terminate())));
  }
  progress(total, total);
  const cpText = source.readCheckpoint();
  let checkpoint: Checkpoint | null = null;
  if (cpText !== null) {
    let value: unknown;
    try {
      value = JSON.parse(cpText);
    } catch {
      throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: checkpoint.json is not JSON', { index: null });
    }
    checkpoint = verifier.verifyCheckpoint(value);
  }
  return { state: verifier.state, checkpoint };
}
