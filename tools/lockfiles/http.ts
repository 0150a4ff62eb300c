/**
 * HTTP for `vouch endorse --lockfile`: bounded GETs over undici, with the
 * `--origin CANONICAL=FETCH` mapping (fetch from a mirror, endorse the
 * canonical URL). Not artifacts/artifact-digest.ts: that sends no Accept
 * (PEP 691 needs one), knows no origin map and hashes one algorithm.
 * Owns: the origin map; per request connect, headers and idle-body timeouts
 * and a byte cap; at most 5 redirects, each mapped again; one VouchError
 * line per failure naming the canonical URL (and the URL asked).
 * Trusts: nothing it receives.
 * Must hold: a body is handed over only for a final 2xx and never yields
 * more than `maxBytes`; a caller that stops early has the socket closed.
 */
import { Agent, request, type Dispatcher } from 'undici';
import { VouchError } from '../../chain/errors.ts';
import { isArtifactUrl } from '../../chain/block.ts';
import type { OriginMap } from './origin-map.ts';

export { MiB, hasCredentials, OriginMap } from './origin-map.ts';

export interface GetOptions {
  maxBytes: number;
  accept?: string;
  signal?: AbortSignal;
}

export interface Answer {
  /** The canonical URL asked for. */
  url: string;
  /** The canonical form of the URL that answered (differs after a redirect). */
  finalUrl: string;
  contentType: string;
  /** The body, at most `maxBytes` bytes; iterate it once, to the end or not. */
  body: AsyncIterable<Uint8Array>;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const MAX_REDIRECTS = 5;

export class Http {
  private readonly agent: Agent;

  constructor(
    private readonly origins: OriginMap,
    limits = { connectTimeoutMs: 10_000, headersTimeoutMs: 30_000, bodyIdleTimeoutMs: 30_000 },
  ) {
    this.agent = new Agent({
      connect: { timeout: limits.connectTimeoutMs },
      headersTimeout: limits.headersTimeoutMs,
      bodyTimeout: limits.bodyIdleTimeoutMs,
      keepAliveTimeout: 4_000,
    });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  /** GET `url` (canonical), following redirects; fails unless the final answer is 2xx. */
  async get(url: string, options: GetOptions): Promise<Answer> {
    let current = url;
    for (let hop = 0; ; hop++) {
      const asked = this.origins.fetchUrl(current);
      const where = () => (asked === url ? url : `${url} (from ${asked})`);
      let res: Dispatcher.ResponseData;
      try {
        res = await request(asked, {
          method: 'GET',
          dispatcher: this.agent,
          headers: { 'user-agent': 'vouch-endorse-lockfile', ...(options.accept ? { accept: options.accept } : {}) },
          ...(options.signal ? { signal: options.signal } : {}),
        });
      } catch (e) {
        throw transportError(e, where(), options.signal);
      }
      const location = header(res.headers, 'location');
      if (REDIRECTS.has(res.statusCode) && location !== undefined) {
        discard(res.body);
        if (hop >= MAX_REDIRECTS) throw new VouchError('origin_error', `GET ${where()}: more than ${MAX_REDIRECTS} redirects`, { resource: url });
        let next: string;
        try {
          next = new URL(location, asked).href;
        } catch {
          throw new VouchError('origin_error', `GET ${where()}: bad redirect Location ${JSON.stringify(location.slice(0, 200))}`, { resource: url });
        }
        if (!isArtifactUrl(next)) throw new VouchError('origin_error', `GET ${where()}: redirect to a non-http(s) URL`, { resource: url });
        current = this.origins.canonicalUrl(next);
        continue;
      }
      if (res.statusCode < 200 || res.statusCode > 299) {
        discard(res.body);
        throw new VouchError('origin_error', `GET ${where()}: HTTP ${res.statusCode}`, { resource: url });
      }
      const declared = Number(header(res.headers, 'content-length') ?? NaN);
      if (Number.isFinite(declared) && declared > options.maxBytes) {
        discard(res.body);
        throw new VouchError('too_large', `GET ${where()}: ${declared} bytes, more than the limit of ${options.maxBytes}`, { resource: url });
      }
      return {
        url,
        finalUrl: current,
        contentType: (header(res.headers, 'content-type') ?? '').toLowerCase(),
        body: bounded(res.body, options.maxBytes, where(), url, options.signal),
      };
    }
  }

  /** GET `url` and collect the body (at most `maxBytes` bytes). */
  async bytes(url: string, options: GetOptions): Promise<{ bytes: Buffer; answer: Answer }> {
    const answer = await this.get(url, options);
    const parts: Buffer[] = [];
    for await (const chunk of answer.body) parts.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    return { bytes: Buffer.concat(parts), answer };
  }
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Drops an answer's body unread (its destruction under a signal emits an abort error nobody else listens for). */
function discard(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => {});
  body.destroy();
}

async function* bounded(body: Dispatcher.ResponseData['body'], maxBytes: number, where: string, url: string, signal?: AbortSignal): AsyncGenerator<Uint8Array> {
  let seen = 0;
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      seen += chunk.length;
      if (seen > maxBytes) throw new VouchError('too_large', `GET ${where}: more than the limit of ${maxBytes} bytes`, { resource: url });
      yield chunk;
    }
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw transportError(e, where, signal);
  } finally {
    if (!body.destroyed) body.destroy();
  }
}

function transportError(e: unknown, where: string, signal?: AbortSignal): unknown {
  if (signal?.aborted) return signal.reason ?? e;
  const err = e as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = err?.code ?? '';
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new VouchError(
      'origin_timeout',
      `GET ${where}: ${code === 'UND_ERR_CONNECT_TIMEOUT' ? 'connect' : code === 'UND_ERR_HEADERS_TIMEOUT' ? 'response headers' : 'body'} timed out`,
    );
  }
  const detail = err?.cause?.code ?? err?.cause?.message ?? (code || err?.message || String(e));
  return new VouchError('origin_error', `GET ${where}: ${String(detail).split('\n')[0]}`);
}
