/**
 * The disk mirror's copies of bytes in shared memory (the byte pool's),
 * written by one worker thread at the lowest CPU priority (`copy-worker.ts`)
 * instead of the libuv pool's threads at the process's own: a copy written
 * behind a pull competes less with the transfers on the same cores.
 * Owns: the worker (started by the first copy, kept referenced only while a
 * copy is in flight), its queue of copies, one at a time.
 * Must hold: `write` resolves only once the file holds every byte, and
 * rejects otherwise; bytes not over shared memory, or with no worker to be
 * had (or a worker that died), are written on the libuv pool as before.
 */
import { unlink, writeFile } from 'node:fs/promises';
import { Worker } from 'node:worker_threads';
import { workerBundle } from '../platform/worker-bundle.ts';
import { COPY_READY, type CopyAnswer, type CopyJob } from './copy-worker.ts';

export interface CopyWriterStats {
  /** Copies written by the low-priority worker / on the libuv pool. */
  worker: number;
  pool: number;
  /** The worker thread's nice value, as it last reported it (null: none yet). */
  nice: number | null;
}

/** The worker stopped (or never booted): its copies are written on the pool instead. */
class WorkerGone extends Error {}

interface Queued {
  job: CopyJob;
  resolve: () => void;
  reject: (e: Error) => void;
}

export class CopyWriter {
  private worker: Worker | null = null;
  private starting: Promise<Worker | null> | null = null;
  private unavailable = false;
  private readonly queue: Queued[] = [];
  private current: Queued | null = null;
  private nextId = 1;
  private readonly counters: CopyWriterStats = { worker: 0, pool: 0, nice: null };

  /** Writes `bytes` into a new file at `path` (flag `wx`). */
  async write(path: string, bytes: Buffer): Promise<void> {
    const worker = bytes.buffer instanceof SharedArrayBuffer && bytes.byteOffset === 0 && !this.unavailable ? await this.start() : null;
    if (worker !== null) {
      try {
        await new Promise<void>((resolve, reject) => {
          this.queue.push({ job: { id: this.nextId++, path, data: bytes.buffer as SharedArrayBuffer, length: bytes.length }, resolve, reject });
          this.pump();
        });
        this.counters.worker++;
        return;
      } catch (e) {
        if (!(e instanceof WorkerGone)) throw e;
        await unlink(path).catch(() => {}); // what the worker may have written of it
      }
    }
    await writeFile(path, bytes, { flag: 'wx' });
    this.counters.pool++;
  }

  stats(): CopyWriterStats {
    return { ...this.counters };
  }

  /** Stops the worker; copies in flight or queued fail. */
  async close(): Promise<void> {
    this.unavailable = true;
    await this.starting;
    const w = this.worker;
    this.worker = null;
    if (w !== null) await w.terminate();
    this.failAll(new WorkerGone('copy writer closed'));
  }

  private start(): Promise<Worker | null> {
    this.starting ??= (async () => {
      const entry = await workerBundle(new URL('./copy-worker.ts', import.meta.url)).catch(() => null);
      if (entry === null || this.unavailable) {
        this.unavailable = true;
        return null;
      }
      const worker = new Worker(entry);
      worker.unref();
      const booted = await new Promise<boolean>((resolve) => {
        worker.on('message', (a: CopyAnswer | typeof COPY_READY) => {
          if (a === COPY_READY) return resolve(true);
          this.answer(a);
        });
        const fail = (e: Error) => {
          resolve(false);
          this.unavailable = true;
          if (this.worker === worker) this.worker = null;
          this.failAll(e);
        };
        worker.on('error', (e) => fail(new WorkerGone(`copy worker failed: ${e.message}`)));
        worker.on('exit', (code) => fail(new WorkerGone(`copy worker stopped (exit code ${code})`)));
      });
      if (!booted) return null;
      this.worker = worker;
      return worker;
    })();
    return this.starting;
  }

  private pump(): void {
    if (this.current !== null || this.worker === null) return;
    const next = this.queue.shift();
    if (next === undefined) {
      this.worker.unref();
      return;
    }
    this.current = next;
    this.worker.ref(); // a copy in flight keeps the process alive, like the pool's writes
    this.worker.postMessage(next.job);
  }

  private answer(a: CopyAnswer): void {
    const q = this.current;
    if (q === null || q.job.id !== a.id) return;
    this.current = null;
    if ('error' in a) q.reject(new Error(`copy worker: ${a.error}`));
    else {
      this.counters.nice = a.nice;
      q.resolve();
    }
    this.pump();
  }

  private failAll(e: Error): void {
    const all = this.current === null ? this.queue.splice(0) : [this.current, ...this.queue.splice(0)];
    this.current = null;
    for (const q of all) q.reject(e);
  }
}
