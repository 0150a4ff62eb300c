/**
 * The gateway bench's node:http origin client (issue 33 item 2): the origin
 * fetcher's transport surface (`OriginTransport`) on `http.request` with a
 * keep-alive Agent per site, to measure rows 2-4 side by side with
 * artifacts/h1 (never shipped).
 * Owns: the checks node:http leaves to its caller, made on the head before
 * any body byte is taken: HTTP/1.0 or 1.1 only, 1.1 for Transfer-Encoding (`httpVersion` is
 * known there), Transfer-Encoding exactly one `chunked`, no control character
 * in the reason phrase or trailers, at most 16 interim answers; copying the
 * body into the caller's buffer or window; connect and headers timeouts.
 * Trusts: node:http (llhttp, strict mode) for the rest of the framing.
 * Must hold: a body ends only when complete, else a `VouchError` or the
 * socket's own error; a buffer is never written after its promise settled.
 */
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { Readable } from 'node:stream';
import { VouchError } from '../../chain/errors.ts';
import type { OriginTransport, OriginTransportResponse } from '../../artifacts/origin-fetcher.ts';
import type { H1ClientOptions, H1Request } from '../../artifacts/h1/pool.ts';

const MAX_HEAD_BYTES = 64 * 1024;
const MAX_INTERIM = 16;
const DRAIN_LIMIT = 64 * 1024;
const FIELD = /^[\t\x20-\x7e\x80-\xff]*$/;

const malformed = (why: string) => new VouchError('origin_error', `malformed response: ${why}`);
const closed = (why = 'the connection closed before the response was complete') => new VouchError('origin_error', why);

/** node:http's parser and socket failures as the fetcher's errors; other socket errors keep their code. */
function mapError(e: unknown): unknown {
  const err = (e ?? {}) as Error & { code?: unknown };
  const code = typeof err.code === 'string' ? err.code : '';
  if (code === 'HPE_HEADER_OVERFLOW') return malformed(`response head over ${MAX_HEAD_BYTES} bytes`);
  if (code.startsWith('HPE_')) return malformed(String(err.message).split('\n')[0]!.slice(0, 200));
  if (code === 'ECONNRESET' && err.message === 'aborted') return closed();
  return e;
}

class NodeHttpResponse implements OriginTransportResponse {
  readonly statusCode: number;
  readonly headers: Record<string, string>;
  readonly contentLength: number | null;
  private taken = false;

  constructor(private readonly res: IncomingMessage) {
    this.statusCode = res.statusCode!;
    const joined: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) joined[k] = Array.isArray(v) ? v.join(', ') : v;
    this.headers = joined;
    const cl = res.headers['content-length'];
    this.contentLength =
      this.statusCode === 204 || this.statusCode === 304 ? 0 : res.headers['transfer-encoding'] === undefined && cl !== undefined ? Number(cl) : null;
  }

  private take(): void {
    if (this.taken) throw new TypeError('the response body was already taken');
    this.taken = true;
  }

  /** Trailers are known at 'end': refused there when they hold control characters. */
  private badTrailers(): boolean {
    return !Object.values(this.res.trailers).every((v) => v === undefined || FIELD.test(v));
  }

  stream(): Readable {
    this.take();
    const res = this.res;
    res.on('end', () => {
      if (this.badTrailers()) res.destroy(malformed('bad characters in a trailer field'));
    });
    return res;
  }

  receiveInto(dest: Buffer, progress: (received: number) => void): Promise<void> {
    if (this.contentLength === null || dest.length !== this.contentLength)
      throw new TypeError(`receiveInto needs a buffer of the declared length (${this.contentLength})`);
    this.take();
    return this.direct(dest, progress, null);
  }

  receiveWindows(window: Buffer, onFull: (filled: Buffer) => Promise<void>): Promise<void> {
    if (this.contentLength === null) throw new TypeError('receiveWindows needs a declared Content-Length');
    if (window.length === 0) throw new TypeError('receiveWindows needs a non-empty window');
    this.take();
    return this.direct(window, () => {}, onFull);
  }

  private direct(dest: Buffer, progress: (n: number) => void, onFull: ((filled: Buffer) => Promise<void>) | null): Promise<void> {
    const res = this.res;
    return new Promise<void>((resolve, reject) => {
      let got = 0;
      let total = 0;
      let busy = false;
      let ended = false;
      let settled = false;
      const extra: Buffer[] = [];
      const fail = (e: unknown) => {
        if (settled) return;
        settled = true;
        res.destroy();
        reject(mapError(e));
      };
      const finish = () => {
        if (settled || busy) return;
        if (onFull !== null && (got > 0 || extra.length > 0)) return handOut();
        if (this.badTrailers()) return fail(malformed('bad characters in a trailer field'));
        settled = true;
        resolve();
      };
      const handOut = () => {
        busy = true;
        res.pause();
        onFull!(dest.subarray(0, got)).then(() => {
          if (settled) return;
          busy = false;
          got = 0;
          while (extra.length > 0 && got < dest.length) {
            const b = extra.shift()!;
            const n = Math.min(b.length, dest.length - got);
            b.copy(dest, got, 0, n);
            got += n;
            if (n < b.length) extra.unshift(b.subarray(n));
          }
          if (got === dest.length && (extra.length > 0 || !ended)) return handOut();
          if (ended) return finish();
          res.resume();
        }, fail);
      };
      res.on('data', (chunk: Buffer) => {
        if (settled) return;
        total += chunk.length;
        const room = busy || extra.length > 0 ? 0 : dest.length - got;
        const now = Math.min(room, chunk.length);
        if (now > 0) {
          chunk.copy(dest, got, 0, now);
          got += now;
        }
        if (now < chunk.length) {
          if (onFull === null) return fail(closed('more body bytes than declared'));
          extra.push(chunk.subarray(now));
        }
        progress(total);
        if (onFull !== null && !busy && got === dest.length) handOut();
      });
      res.on('end', () => {
        ended = true;
        finish();
      });
      res.on('error', fail);
      res.on('close', () => {
        if (!ended) fail(closed());
      });
    });
  }

  discard(): void {
    if (this.taken) return;
    this.taken = true;
    if (this.contentLength !== null && this.contentLength <= DRAIN_LIMIT) {
      this.res.on('error', () => {});
      this.res.resume();
    } else this.res.destroy();
  }

  abort(): void {
    this.taken = true;
    this.res.on('error', () => {});
    this.res.destroy();
  }
}

export class NodeHttpOriginClient implements OriginTransport {
  private readonly agents = new Map<string, http.Agent>();
  private closed = false;

  constructor(private readonly options: H1ClientOptions) {}

  private agent(req: H1Request): http.Agent {
    // Per site, not only per address: a connection is never shared between two Host names.
    const key = `${req.secure ? 's' : 'p'}|${req.host}|${req.port}|${req.servername ?? ''}|${req.hostHeader}`;
    let agent = this.agents.get(key);
    if (agent === undefined) {
      const o = { keepAlive: true, maxFreeSockets: 32, timeout: this.options.keepAliveTimeoutMs, scheduling: 'lifo' as const };
      agent = req.secure ? new https.Agent({ ...o, ...(this.options.tls ?? {}) }) : new http.Agent(o);
      this.agents.set(key, agent);
    }
    return agent;
  }

  async request(req: H1Request): Promise<OriginTransportResponse> {
    if (this.closed) throw closed('the origin client is closed');
    for (let attempt = 0; ; attempt++) {
      req.signal.throwIfAborted();
      let retry = false;
      try {
        return await this.once(req, (r) => {
          retry = r;
        });
      } catch (e) {
        if (attempt === 0 && retry) continue;
        throw e;
      }
    }
  }

  private once(req: H1Request, retryable: (r: boolean) => void): Promise<OriginTransportResponse> {
    return new Promise<OriginTransportResponse>((resolve, reject) => {
      const mod = req.secure ? https : http;
      const cr = mod.request({
        host: req.host,
        port: req.port,
        path: req.path,
        method: 'GET',
        agent: this.agent(req),
        headers: { host: req.hostHeader, ...req.headers },
        maxHeaderSize: MAX_HEAD_BYTES,
        insecureHTTPParser: false,
        setHost: false,
        ...(req.servername !== undefined ? { servername: req.servername } : {}),
      });
      let interim = 0;
      let settled = false;
      const timers: NodeJS.Timeout[] = [];
      const done = () => {
        for (const t of timers) clearTimeout(t);
        req.signal.removeEventListener('abort', onAbort);
      };
      const fail = (e: unknown, canRetry = false) => {
        if (settled) return;
        settled = true;
        done();
        retryable(canRetry);
        cr.destroy();
        reject(mapError(e));
      };
      const onAbort = () => fail(req.signal.reason instanceof Error ? req.signal.reason : new Error('aborted'));
      req.signal.addEventListener('abort', onAbort, { once: true });
      timers.push(
        setTimeout(
          () => fail(new VouchError('origin_timeout', `no response headers within ${this.options.headersTimeoutMs} ms`)),
          this.options.headersTimeoutMs,
        ),
      );
      cr.on('socket', (s) => {
        s.setNoDelay(true);
        if ((s as { connecting?: boolean }).connecting) {
          const t = setTimeout(
            () => fail(new VouchError('origin_timeout', `could not connect within ${this.options.connectTimeoutMs} ms`)),
            this.options.connectTimeoutMs,
          );
          timers.push(t);
          s.once(req.secure ? 'secureConnect' : 'connect', () => clearTimeout(t));
        }
      });
      cr.on('information', () => {
        if (++interim > MAX_INTERIM) fail(malformed(`more than ${MAX_INTERIM} interim (1xx) responses`));
      });
      cr.on('upgrade', () => fail(malformed('unexpected protocol switch (101)')));
      cr.on('error', (e) => fail(e, cr.reusedSocket && (e as { code?: string }).code === 'ECONNRESET'));
      cr.on('response', (res) => {
        if (settled) return res.destroy();
        // Everything node:http accepts but the signer must not, refused on the head before the body.
        const te = res.headers['transfer-encoding'];
        let why: string | null = null;
        if (res.httpVersion !== '1.1' && res.httpVersion !== '1.0') why = `HTTP version ${res.httpVersion}`;
        else if (res.statusCode === 101) why = 'unexpected protocol switch (101)';
        else if (!FIELD.test(res.statusMessage ?? '')) why = 'control character in the reason phrase';
        else if (te !== undefined && res.httpVersion !== '1.1') why = 'Transfer-Encoding in an HTTP/1.0 response';
        else if (te !== undefined && te.trim().toLowerCase() !== 'chunked')
          why = `unsupported Transfer-Encoding ${JSON.stringify(te.slice(0, 80))} (only chunked)`;
        else if (res.rawHeaders.filter((_, i) => i % 2 === 0 && /^transfer-encoding$/i.test(res.rawHeaders[i]!)).length > 1) why = 'Transfer-Encoding repeated';
        if (why !== null) {
          res.on('error', () => {});
          return fail(malformed(why));
        }
        settled = true;
        done();
        // The deadline or the caller's abort while the body streams.
        req.signal.addEventListener('abort', () => res.destroy(req.signal.reason), { once: true });
        resolve(new NodeHttpResponse(res));
      });
      cr.end();
    });
  }

  close(): void {
    this.closed = true;
    for (const a of this.agents.values()) {
      for (const list of Object.values(a.freeSockets)) for (const s of list ?? []) s.destroy();
    }
  }

  destroy(): void {
    this.closed = true;
    for (const a of this.agents.values()) a.destroy();
    this.agents.clear();
  }
}
