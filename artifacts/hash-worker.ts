/**
 * Worker side of `hash-workers.ts`: hashes an artifact's bytes while the main
 * thread still receives them, from the shared buffer (`memory`) or the spool
 * file (`file`). One job at a time: `{ id, algorithm, control, source }`,
 * `control` a BigInt64Array over shared memory: [0] bytes written, [1] state
 * (0 receiving, 1 complete, 2 abandoned), [2] 1 while the worker sleeps (the
 * writer wakes it only then). Answers `{ id, digest }`, `{ id, abandoned:
 * true }` or `{ id, error }`; posts `'ready'` once it listens for jobs.
 * Must hold: the digest covers exactly bytes [0, control[0]) as they were
 * when the state became complete; the worker only reads.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import type { HashAlgorithm } from '../chain/crypto-backend.ts';
import { nodeBackend } from '../platform/node-crypto.ts';

export type HashSource = { kind: 'memory'; data: SharedArrayBuffer } | { kind: 'file'; path: string };
export interface HashJob {
  id: number;
  algorithm: HashAlgorithm;
  control: BigInt64Array;
  source: HashSource;
}
export type HashAnswer = { id: number; digest: Uint8Array } | { id: number; abandoned: true } | { id: number; error: string };

export const WRITTEN = 0;
export const STATE = 1;
export const SLEEPING = 2;
export const CONTROL_WORDS = 3;
export const RECEIVING = 0n;
export const COMPLETE = 1n;
export const ABANDONED = 2n;
/** Posted once by a worker when it listens for jobs. */
export const READY = 'ready';

const READ_CHUNK = 1024 * 1024;
let readBuffer: Buffer | null = null;

/** Feeds bytes [from, to) of the source to `update`. */
type Reader = (from: number, to: number, update: (b: Uint8Array) => void) => void;

function memoryReader(data: SharedArrayBuffer): Reader {
  const bytes = new Uint8Array(data);
  return (from, to, update) => update(bytes.subarray(from, to));
}

function fileReader(fd: number): Reader {
  readBuffer ??= Buffer.allocUnsafe(READ_CHUNK);
  const buf = readBuffer;
  return (from, to, update) => {
    for (let at = from; at < to; ) {
      const n = readSync(fd, buf, 0, Math.min(buf.length, to - at), at);
      if (n === 0) throw new Error(`the spool file ends at ${at} bytes, ${to} were written`);
      update(buf.subarray(0, n));
      at += n;
    }
  };
}

export function runHashJob(job: HashJob): HashAnswer {
  const { source } = job;
  const fd = source.kind === 'file' ? openSync(source.path, 'r') : null;
  try {
    const read = source.kind === 'memory' ? memoryReader(source.data) : fileReader(fd!);
    const h = nodeBackend.createHash(job.algorithm);
    const update = (b: Uint8Array) => h.update(b);
    const c = job.control;
    let done = 0;
    for (;;) {
      const written = Number(Atomics.load(c, WRITTEN));
      if (written > done) {
        read(done, written, update);
        done = written;
        continue;
      }
      const state = Atomics.load(c, STATE);
      if (state === ABANDONED) return { id: job.id, abandoned: true };
      if (state === COMPLETE) {
        if (Number(Atomics.load(c, WRITTEN)) === done) return { id: job.id, digest: h.digest() };
        continue;
      }
      // Say so before sleeping, then look once more: a write between the two is seen either way.
      Atomics.store(c, SLEEPING, 1n);
      if (Number(Atomics.load(c, WRITTEN)) === written && Atomics.load(c, STATE) === RECEIVING) {
        // Woken by the writer's notify; the timeout only bounds a missed wake-up.
        Atomics.wait(c, WRITTEN, BigInt(written), 200);
      }
      Atomics.store(c, SLEEPING, 0n);
    }
  } finally {
    if (fd !== null) closeSync(fd);
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
parentPort?.postMessage(READY);
