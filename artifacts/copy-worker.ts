/**
 * Worker side of `copy-writer.ts`: writes the disk mirror's copies of
 * verified bytes held in shared memory, at the lowest CPU priority (nice
 * 19: on Linux a thread's own), so a copy runs on cores nobody else wants.
 * One job at a time: `{ id, path, data, length }` writes bytes [0, length)
 * of `data` into a new file at `path` (which must not exist); answers
 * `{ id, nice }` (the thread's priority) or `{ id, error }`. Posts `'ready'`
 * once it listens.
 * Must hold: the worker only reads `data`; a failed write leaves at most a
 * partial file at `path`, which the caller removes.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { parentPort } from 'node:worker_threads';

export interface CopyJob {
  id: number;
  path: string;
  data: SharedArrayBuffer;
  length: number;
}
export type CopyAnswer = { id: number; nice: number } | { id: number; error: string };
/** Posted once by a worker when it listens for jobs. */
export const COPY_READY = 'ready';
/** The nice value the worker's thread asks for. */
export const COPY_NICE = 19;
/** Bytes per write call. */
const PIECE = 4 * 1024 * 1024;

let nice = 0;
if (parentPort !== null) {
  // Only as a worker (the main thread imports this module for its types and constants).
  try {
    setPriority(COPY_NICE); // pid 0: this thread only (Linux)
    nice = getPriority();
  } catch {
    // not allowed here: the copies run at the process's priority
  }
}

export function runCopyJob(job: CopyJob): CopyAnswer {
  const bytes = new Uint8Array(job.data, 0, job.length);
  const fd = openSync(job.path, 'wx');
  try {
    for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at, Math.min(PIECE, bytes.length - at));
  } finally {
    closeSync(fd);
  }
  return { id: job.id, nice };
}

parentPort?.on('message', (job: CopyJob) => {
  let answer: CopyAnswer;
  try {
    answer = runCopyJob(job);
  } catch (e) {
    answer = { id: job.id, error: (e as NodeJS.ErrnoException).code ?? (e instanceof Error ? e.message : String(e)) };
  }
  parentPort!.postMessage(answer);
});
parentPort?.postMessage(COPY_READY);
