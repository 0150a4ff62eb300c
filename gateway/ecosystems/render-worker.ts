/**
 * The render worker's entry (a worker thread; render-pool.ts starts it):
 * reads origin metadata bodies (decode, structure caps, parse) and writes
 * the answers back, so that the parse and the serialization of a large
 * document never hold the gateway's event loop. Protocol per job:
 *   main -> { type: 'job', id, job, body, unendorsed }
 *   worker -> { type: 'urls', id, urls, logs }  (or 'done' at once for a refusal)
 *   main -> { type: 'decisions', id, decisions }
 *   worker -> { type: 'done', id, rendered, logs }  (a body as transferred bytes)
 *   worker -> { type: 'error', id, message }  (a fault, not the document's)
 * Must hold: one job's parsed document is dropped once it is answered; a
 * RangeError (too deep, too large to write) is the document's: a 502.
 */
import { parentPort } from 'node:worker_threads';
import type { Rendered, RenderView } from './ecosystem.ts';
import { finishJob, prepareJob, urlsOf, viewOf, type Decision, type Parsed, type RenderJob } from './render-job.ts';

interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string;
  fields: Record<string, unknown>;
}

const waiting = new Map<number, { job: RenderJob; parsed: Parsed; unendorsed: 'deny' | 'pass' }>();

function collector(lines: LogLine[]): RenderView['log'] {
  const at =
    (level: LogLine['level']) =>
    (msg: string, fields: Record<string, unknown> = {}) => {
      lines.push({ level, msg, fields });
    };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

function tooMuch(e: RangeError, logs: LogLine[]): Rendered {
  logs.push({ level: 'warn', msg: 'proxy: origin metadata cannot be handled', fields: { error: e.message } });
  return { ok: false, status: 502, message: `vouch: the origin's metadata cannot be handled (${e.message})` };
}

function done(id: number, rendered: Rendered, logs: LogLine[]): void {
  if (!rendered.ok || typeof rendered.body !== 'string') {
    parentPort!.postMessage({ type: 'done', id, rendered, logs });
    return;
  }
  const bytes = new TextEncoder().encode(rendered.body);
  parentPort!.postMessage({ type: 'done', id, rendered: { ...rendered, body: bytes }, logs }, [bytes.buffer]);
}

parentPort!.on(
  'message',
  (
    m:
      | { type: 'job'; id: number; job: RenderJob; body: Uint8Array; unendorsed: 'deny' | 'pass' }
      | { type: 'decisions'; id: number; decisions: Array<[string, Decision]> },
  ) => {
    const logs: LogLine[] = [];
    try {
      if (m.type === 'job') {
        let p: Parsed | Rendered;
        try {
          p = prepareJob(m.job, m.body, collector(logs));
        } catch (e) {
          if (!(e instanceof RangeError)) throw e;
          p = tooMuch(e, logs);
        }
        if ('ok' in p) return done(m.id, p, logs);
        waiting.set(m.id, { job: m.job, parsed: p, unendorsed: m.unendorsed });
        parentPort!.postMessage({ type: 'urls', id: m.id, urls: urlsOf(p), logs });
        return;
      }
      const w = waiting.get(m.id);
      waiting.delete(m.id);
      if (w === undefined) throw new Error(`render worker: no job ${m.id}`);
      let rendered: Rendered;
      try {
        rendered = finishJob(w.job, w.parsed, viewOf(m.decisions, w.unendorsed, collector(logs)));
      } catch (e) {
        if (!(e instanceof RangeError)) throw e;
        rendered = tooMuch(e, logs);
      }
      done(m.id, rendered, logs);
    } catch (e) {
      waiting.delete(m.id);
      parentPort!.postMessage({ type: 'error', id: m.id, message: (e as Error)?.stack ?? String(e), logs });
    }
  },
);
