/**
 * Worker side of `hash-workers.ts`: hashes an artifact's bytes while the
 * gateway's main thread is still receiving them into shared memory.
 *
 * Protocol (one job at a time): a message `{ id, algorithm, data, control }`,
 * `data` the SharedArrayBuffer the bytes are written to, `control` an
 * Int32Array over shared memory: [0] bytes written so far, [1] state
 * (0 receiving, 1 complete, 2 abandoned), [2] 1 while the worker sleeps (the
 * writer wakes it only then: no futex call per chunk while it is busy). The
 * worker hashes each new range, sleeps on control[0] while nothing new is
 * there, and answers
 * `{ id, digest }` once the state is complete and every written byte is
 * hashed, or `{ id, abandoned: true }`.
 * Must hold: the digest covers exactly bytes [0, control[0]) as they were
 * when the state became complete (the writer writes nothing after that).
 * The worker only reads `data`.
 */
import { parentPort } from 'node:worker_threads';
import type { HashAlgorithm } from '../chain/crypto-backend.ts';
import { nodeBackend } from '../lib/node-crypto.ts';

export interface HashJob { id: number; algorithm: HashAlgorithm; data: SharedArrayBuffer; control: Int32Array }
export type HashAnswer = { id: number; digest: Uint8Array } | { id: number; abandoned: true } | { id: number; error: string };

export const WRITTEN = 0;
export const STATE = 1;
export const SLEEPING = 2;
export const CONTROL_WORDS = 3;
export const COMPLETE = 1;
export const ABANDONED = 2;

export function runHashJob(job: HashJob): HashAnswer {
  const h = nodeBackend.createHash(job.algorithm);
  const bytes = new Uint8Array(job.data);
  const c = job.control;
  let done = 0;
  for (;;) {
    const written = Atomics.load(c, WRITTEN);
    if (written > done) {
      h.update(bytes.subarray(done, written));
      done = written;
      continue;
    }
    const state = Atomics.load(c, STATE);
    if (state === ABANDONED) return { id: job.id, abandoned: true };
    if (state === COMPLETE) {
      if (Atomics.load(c, WRITTEN) === done) return { id: job.id, digest: h.digest() };
      continue;
    }
    // Say so before sleeping, then look once more: a write between the two is seen either way.
    Atomics.store(c, SLEEPING, 1);
    if (Atomics.load(c, WRITTEN) === written && Atomics.load(c, STATE) === 0) {
      // Woken by the writer's notify; the timeout only bounds a missed wake-up.
      Atomics.wait(c, WRITTEN, written, 200);
    }
    Atomics.store(c, SLEEPING, 0);
  }
}

parentPort?.on('message', (job: HashJob) => {
  let answer: HashAnswer;
  try {
    answer = runHashJob(job);
  } catch (e) {
    answer = { id: job.id, error: e instanceof Error ? e.message : String(e) };
  }
  parentPort!.postMessage(answer);
});
