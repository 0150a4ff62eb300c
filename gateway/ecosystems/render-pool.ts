/**
 * The render worker from the main thread: hands it an origin body and a job,
 * answers its questions about the chain (`decide`, on this thread, where the
 * chain index is), and resolves with the answer it made. One worker, started
 * on first use and again after it died; jobs wait their turn in it. A
 * worker idle for IDLE_MS is stopped, giving the heap a large document grew
 * back to the system.
 *
 * Owns: the worker and the pending jobs.
 * Trusts: render-worker.ts for the protocol (see there).
 * Must hold: every job settles: with the worker's answer, a 502 when the
 * worker died under it (out of memory on a document past what it may use),
 * or null when no worker can run here (the caller renders on this thread).
 */
import type { Worker } from 'node:worker_threads';
import { startBundleWorker, workerBundle } from '../../platform/worker-bundle.ts';
import type { Rendered } from './ecosystem.ts';
import type { Decision, RenderJob } from './render-job.ts';

/** Heap a worker may use; a document that needs more kills it and is answered 502. */
const WORKER_HEAP_MB = 1024;
/** A worker with no job this long is stopped. */
const IDLE_MS = 2_000;

export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string;
  fields: Record<string, unknown>;
}
export interface Rendering {
  rendered: Rendered;
  logs: LogLine[];
}

interface Pending {
  decide: (urls: string[]) => Array<[string, Decision]>;
  resolve: (r: Rendering) => void;
  reject: (e: Error) => void;
  logs: LogLine[];
  /** The worker the job was posted to: only its death answers the job. */
  worker: Worker;
}

export class RenderPool {
  private worker: Worker | null = null;
  private entry: Promise<URL | null> | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private closed = false;
  private idle: NodeJS.Timeout | null = null;

  /**
   * Renders `job` from `body` in the worker; `decide` answers its questions
   * about the chain. Null when no worker can run here.
   * @throws Error when the worker faults on the job (a bug, not the document).
   */
  async render(job: RenderJob, body: Uint8Array, unendorsed: 'deny' | 'pass', decide: Pending['decide']): Promise<Rendering | null> {
    const w = await this.start();
    if (w === null) return null;
    const id = ++this.nextId;
    if (this.idle !== null) clearTimeout(this.idle);
    this.idle = null;
    const settled = () => {
      if (this.pending.size > 0 || this.worker !== w) return;
      this.idle = setTimeout(() => {
        this.idle = null;
        if (this.pending.size === 0 && this.worker === w) {
          this.worker = null;
          void w.terminate();
        }
      }, IDLE_MS);
      this.idle.unref();
    };
    return new Promise<Rendering>((resolve, reject) => {
      this.pending.set(id, {
        decide,
        resolve: (r) => {
          resolve(r);
          settled();
        },
        reject: (e) => {
          reject(e);
          settled();
        },
        logs: [],
        worker: w,
      });
      w.postMessage({ type: 'job', id, job, body, unendorsed });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.idle !== null) clearTimeout(this.idle);
    const w = this.worker;
    this.worker = null;
    await w?.terminate();
  }

  private async start(): Promise<Worker | null> {
    if (this.worker !== null) return this.worker;
    this.entry ??= workerBundle(new URL('./render-worker.ts', import.meta.url)).catch(() => null);
    const entry = await this.entry;
    if (entry === null || this.closed) return null;
    if (this.worker !== null) return this.worker;
    const w = startBundleWorker(entry, { resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB } });
    w.unref();
    w.on('message', (m: { type: string; id: number; urls?: string[]; rendered?: Rendered; logs: LogLine[]; message?: string }) => this.onMessage(w, m));
    w.on('error', (e) => this.died(w, e));
    w.on('exit', () => this.died(w, new Error('the render worker exited')));
    this.worker = w;
    return w;
  }

  private onMessage(w: Worker, m: { type: string; id: number; urls?: string[]; rendered?: Rendered; logs: LogLine[]; message?: string }): void {
    const p = this.pending.get(m.id);
    if (p === undefined) return;
    p.logs.push(...m.logs);
    if (m.type === 'urls') {
      let decisions: Array<[string, Decision]>;
      try {
        decisions = p.decide(m.urls!);
      } catch (e) {
        this.pending.delete(m.id);
        w.postMessage({ type: 'decisions', id: m.id, decisions: [] }); // lets the worker drop the job
        p.reject(e as Error);
        return;
      }
      w.postMessage({ type: 'decisions', id: m.id, decisions });
      return;
    }
    this.pending.delete(m.id);
    if (m.type === 'done') {
      const r = m.rendered!;
      p.resolve({
        rendered: r.ok && r.body instanceof Uint8Array ? { ...r, body: Buffer.from(r.body.buffer, r.body.byteOffset, r.body.byteLength) } : r,
        logs: p.logs,
      });
    } else {
      p.reject(new Error(`render worker: ${m.message}`));
    }
  }

  /**
   * The worker is gone: its jobs are answered 502 (a document it could not
   * handle), the next job starts another. Jobs already posted to a newer
   * worker (one an idle worker's late `exit` finds) are not its to answer.
   */
  private died(w: Worker, e: Error): void {
    if (this.worker === w) this.worker = null;
    for (const [id, p] of this.pending) {
      if (p.worker !== w) continue;
      this.pending.delete(id);
      p.resolve({
        rendered: { ok: false, status: 502, message: `vouch: the origin's metadata cannot be handled (${e.message})` },
        logs: [...p.logs, { level: 'warn', msg: 'proxy: the render worker died on origin metadata', fields: { error: e.message } }],
      });
    }
  }
}
