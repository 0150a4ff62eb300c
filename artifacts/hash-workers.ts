/**
 * Hashing beside the receiving: while the main thread writes an origin's
 * body into a shared buffer (`byte-pool.ts`) or a spool file, a worker
 * thread hashes what is already there, so the first byte can be served
 * sooner and the event loop is not held by hashing.
 * Owns: a few hash workers (bundles from platform/worker-bundle.ts, started
 * on first use, unref'd), at most one job each, and each job's control
 * words. With no idle worker or no bundle, `start` answers null and the
 * caller hashes on its own thread (same result, slower).
 * Must hold: a digest covers exactly bytes [0, n) for the last `advance(n)`
 * before `finish`; a worker whose job was abandoned is busy until it says
 * so; a worker that dies fails its job (never a wrong digest) and is not
 * used again.
 */
import type { Worker } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import type { HashAlgorithm } from '../chain/crypto-backend.ts';
import { startBundleWorker, workerBundle } from '../platform/worker-bundle.ts';
import { ABANDONED, COMPLETE, CONTROL_WORDS, READY, SLEEPING, STATE, WRITTEN, type HashAnswer, type HashJob, type HashSource } from './hash-worker.ts';

/** Bytes written beyond the last wake-up before a sleeping worker is woken again (`SharedHash.advance`). */
export const NOTIFY_STEP = 1024 * 1024;

interface Slot {
  worker: Worker;
  /** Resolves once the worker said it listens for jobs, or stopped. */
  booted: Promise<void>;
  busy: boolean;
  jobId: number;
  answer: ((a: HashAnswer | Error) => void) | null;
}

/** One body being hashed by a worker while it is written. */
export class SharedHash {
  private readonly control = new BigInt64Array(new SharedArrayBuffer(8 * CONTROL_WORDS));
  private ended = false;
  /** `length` of the last `advance` that woke the worker. */
  private woken = 0;
  /** Times `advance` woke the worker. */
  wakeUps = 0;

  /** @internal made by `HashWorkers.start` / `startFile` */
  constructor(
    readonly id: number,
    private readonly capacity: number,
    private readonly result: Promise<HashAnswer | Error>,
  ) {}

  /** The control words the worker is sent. */
  get controlWords(): BigInt64Array {
    return this.control;
  }

  /**
   * Bytes [0, length) of the buffer (or file) are written and will not
   * change. A sleeping worker is woken once NOTIFY_STEP more bytes wait for
   * it (and by `finish`), not for each socket read: a wake-up is a system
   * call here and a thread switch there.
   */
  advance(length: number): void {
    if (this.ended) throw new Error('shared hash: advance after the end');
    if (length > this.capacity) throw new RangeError('shared hash: past the buffer');
    Atomics.store(this.control, WRITTEN, BigInt(length));
    if (length - this.woken >= NOTIFY_STEP && Atomics.load(this.control, SLEEPING) === 1n) {
      this.woken = length;
      this.wakeUps++;
      Atomics.notify(this.control, WRITTEN);
    }
  }

  /** The digest of the bytes [0, n) of the last `advance(n)`. */
  async finish(): Promise<Uint8Array> {
    this.end(COMPLETE);
    const a = await this.result;
    if (a instanceof Error) throw a;
    if ('digest' in a) return a.digest;
    throw new Error('error' in a ? `hash worker: ${a.error}` : 'hash worker: the job was abandoned');
  }

  /** Gives the worker back without a digest (failure paths). Idempotent. */
  abandon(): void {
    this.end(ABANDONED);
  }

  private end(state: bigint): void {
    if (this.ended) return;
    this.ended = true;
    Atomics.store(this.control, STATE, state);
    Atomics.notify(this.control, WRITTEN);
  }
}

export class HashWorkers {
  private readonly slots: Slot[] = [];
  private starting: Promise<void> | null = null;
  private unavailable = false;
  private nextId = 1;

  /**
   * `size`: workers (default: the cores, at least 4 and at most 8). More
   * workers than cores on purpose: a body that finds no idle worker is
   * hashed on the main thread, which then stalls every other transfer (4
   * concurrent cold downloads on 2 cores: 0.62–0.66 of the proxy with 2
   * workers, 0.68–0.77 with 4). An idle worker only sleeps.
   */
  constructor(private readonly size: number = Math.min(8, Math.max(4, availableParallelism()))) {}

  /** Starts the workers (once). Never rejects: without workers, `start` answers null. */
  warm(): Promise<void> {
    this.starting ??= (async () => {
      const entry = await workerBundle(new URL('./hash-worker.ts', import.meta.url)).catch(() => null);
      if (entry === null || this.unavailable) {
        this.unavailable = true;
        return;
      }
      for (let i = 0; i < this.size; i++) this.slots.push(this.spawn(entry));
    })();
    return this.starting;
  }

  /**
   * Starts the workers and resolves once each one has booted (loaded its
   * bundle and listens for jobs), failed, or `timeoutMs` passed. Never
   * rejects. Booting costs each worker a Node isolate's start-up: a server
   * awaits this before it says it is ready, so no first request pays it.
   */
  async booted(timeoutMs = 10_000): Promise<void> {
    await this.warm();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
      timer.unref();
    });
    await Promise.race([Promise.all(this.slots.map((s) => s.booted)), late]);
    clearTimeout(timer);
  }

  /** Workers alive and not yet asked to stop. */
  get workers(): number {
    return this.slots.length;
  }

  /**
   * A job hashing `data` (a view from offset 0 over a SharedArrayBuffer)
   * with `algorithm` as it is written, or null when no worker is idle (or
   * none can run). The first call starts the workers and answers null.
   */
  start(algorithm: HashAlgorithm, data: Buffer): SharedHash | null {
    if (!(data.buffer instanceof SharedArrayBuffer) || data.byteOffset !== 0) return null;
    return this.begin(algorithm, { kind: 'memory', data: data.buffer }, data.length);
  }

  /**
   * A job hashing the file at `path` as it is appended to (`advance(n)`
   * once bytes [0, n) are written to it, e.g. after each awaited write), or
   * null as for `start`. The file must not change below what was advanced.
   */
  startFile(algorithm: HashAlgorithm, path: string): SharedHash | null {
    return this.begin(algorithm, { kind: 'file', path }, Number.MAX_SAFE_INTEGER);
  }

  private begin(algorithm: HashAlgorithm, source: HashSource, capacity: number): SharedHash | null {
    if (this.unavailable) return null;
    if (this.starting === null) {
      void this.warm();
      return null;
    }
    const slot = this.slots.find((s) => !s.busy);
    if (slot === undefined) return null;
    const id = this.nextId++;
    slot.busy = true;
    slot.jobId = id;
    const result = new Promise<HashAnswer | Error>((resolve) => {
      slot.answer = (a) => {
        slot.busy = false;
        slot.answer = null;
        resolve(a);
      };
    });
    const job = new SharedHash(id, capacity, result);
    slot.worker.postMessage({ id, algorithm, control: job.controlWords, source } satisfies HashJob);
    return job;
  }

  /** Stops the workers; jobs in progress fail. */
  async close(): Promise<void> {
    this.unavailable = true;
    await this.starting;
    const slots = this.slots.splice(0);
    await Promise.all(slots.map((s) => s.worker.terminate()));
  }

  private spawn(entry: URL): Slot {
    const worker = startBundleWorker(entry);
    worker.unref();
    let boot!: () => void;
    const booted = new Promise<void>((resolve) => {
      boot = resolve;
    });
    const slot: Slot = { worker, booted, busy: false, jobId: 0, answer: null };
    worker.on('message', (a: HashAnswer | typeof READY) => {
      if (a === READY) boot();
      else if (a.id === slot.jobId) slot.answer?.(a);
    });
    const fail = (e: Error) => {
      boot();
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots.splice(i, 1); // a dead worker is not used again
      slot.answer?.(e);
      slot.busy = true;
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`hash worker stopped (exit code ${code})`)));
    return slot;
  }
}
