/**
 * A real, configurable origin HTTP server for tests (node:http on loopback).
 * Owns: registered paths with scripted behaviours (bodies, large patterns
 * streamed, statuses, redirects, tampering, truncation, resets, stalls,
 * trickles) and a record per path: requests, bytes sent, and whether the
 * client closed before the body ended (proof that a cancellation arrived).
 * Must hold: it only listens on loopback; `close()` destroys every socket.
 * Usage:
 *   const origin = await OriginServer.start();
 *   origin.route('/a.tgz', { body: 'hello', contentType: 'application/gzip' });
 *   origin.route('/hang', { body: pattern(1 << 20), stall: 'body' });
 *   fetch(origin.url('/a.tgz'));  ...  origin.requests('/a.tgz') === 1
 *   await origin.waitForClientClose('/hang'); await origin.close();
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import { hexEncode } from '../../chain/encoding.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { drainedOrClosed } from '../../platform/drained.ts';

// ---------------------------------------------------------------------------
// Deterministic pattern bodies

/** A generated body of `size` bytes; the same (size, seed) always gives the same bytes. */
export interface PatternBody {
  kind: 'pattern';
  size: number;
  seed: number;
}

export function pattern(size: number, seed = 1): PatternBody {
  return { kind: 'pattern', size, seed };
}

const BLOCK = 1024 * 1024;
const blockCache = new Map<number, Buffer>();

function patternBlock(seed: number): Buffer {
  let block = blockCache.get(seed);
  if (block === undefined) {
    block = Buffer.allocUnsafe(BLOCK);
    let x = (seed * 2654435761) >>> 0 || 1;
    for (let i = 0; i < BLOCK; i += 4) {
      x ^= x << 13;
      x >>>= 0;
      x ^= x >>> 17;
      x ^= x << 5;
      x >>>= 0;
      block.writeUInt32LE(x, i);
    }
    blockCache.set(seed, block);
  }
  return block;
}

/**
 * The pattern as chunks: each 1 MiB block is one shared random block whose
 * first 8 bytes are replaced by the block number, so no two blocks are equal.
 * Only the 8-byte headers are allocated; the rest are views of one buffer.
 */
export function* patternChunks(p: PatternBody): Generator<Buffer> {
  const block = patternBlock(p.seed);
  for (let i = 0, offset = 0; offset < p.size; i++, offset += BLOCK) {
    const remain = Math.min(BLOCK, p.size - offset);
    const head = Buffer.alloc(8);
    head.writeUInt32LE(i, 0);
    head.writeUInt32LE(p.seed, 4);
    yield head.subarray(0, Math.min(8, remain));
    if (remain > 8) yield block.subarray(8, remain);
  }
}

/** The whole pattern in memory (for small patterns). */
export function patternBytes(p: PatternBody): Buffer {
  return Buffer.concat([...patternChunks(p)]);
}

/** `<alg>:<hex>` of a body, computed without holding a pattern in memory. */
export function digestOf(body: string | Uint8Array | PatternBody, algorithm: HashAlgorithm = 'sha256'): string {
  const h = nodeBackend.createHash(algorithm);
  for (const chunk of bodyChunks(body)) h.update(chunk);
  return `${algorithm}:${hexEncode(h.digest())}`;
}

function bodyChunks(body: string | Uint8Array | PatternBody): Iterable<Buffer> {
  if (typeof body === 'string') return [Buffer.from(body)];
  if (body instanceof Uint8Array) return [Buffer.from(body.buffer, body.byteOffset, body.byteLength)];
  return patternChunks(body);
}

function bodySize(body: string | Uint8Array | PatternBody): number {
  if (typeof body === 'string') return Buffer.byteLength(body);
  if (body instanceof Uint8Array) return body.byteLength;
  return body.size;
}

// ---------------------------------------------------------------------------
// Routes

export interface RouteSpec {
  /** Text, bytes, or a `pattern(size, seed)`; default empty. */
  body?: string | Uint8Array | PatternBody;
  /** Default 200 (302 for `redirect`). */
  status?: number;
  /** Default `application/octet-stream`; null sends no Content-Type. */
  contentType?: string | null;
  /** Extra response headers. */
  headers?: Record<string, string>;
  /** `exact` (default): the real length; `none`: chunked; a number: declare that length (a lie). */
  contentLength?: 'exact' | 'none' | number;
  /** Serve other bytes of the same length (the first byte flipped). */
  tamper?: boolean;
  /** Declare the full length, send only this many body bytes, then close the connection cleanly. */
  truncate?: number;
  /** Send this many body bytes, then reset the connection (TCP RST). */
  reset?: number;
  /**
   * `headers`: accept the request and never answer; `body`: send the headers
   * and then nothing; a number: send that many body bytes and then nothing.
   */
  stall?: 'headers' | 'body' | number;
  /** Send the body `bytes` at a time, one piece every `everyMs`. */
  trickle?: { bytes: number; everyMs: number };
  /** Answer with this Location (a path or absolute URL), status `status` or 302. */
  redirect?: string;
  /** Wait this long before answering. */
  delayMs?: number;
}

/** What happened to one request. */
export interface RequestRecord {
  path: string;
  method: string;
  headers: IncomingMessage['headers'];
  /** Body bytes handed to the socket. */
  bytesSent: number;
  /** The response was completely written. */
  finished: boolean;
  /** The client closed the connection before the response was finished. */
  clientClosed: boolean;
  /** Resolves when the request's connection or response is over, either way. */
  closed: Promise<void>;
}

export interface OriginServerOptions {
  /** A loopback address: 127.0.0.1 (default), another 127.x.y.z, or ::1. */
  host?: string;
  /** Port; default 0 (any free port). */
  port?: number;
}

export class OriginServer {
  /** Every request, in arrival order. */
  readonly log: RequestRecord[] = [];
  /** TCP connections accepted so far. */
  connections = 0;
  private readonly routes = new Map<string, RouteSpec>();
  private readonly sockets = new Set<Socket>();
  private closing = false;

  private constructor(
    private readonly server: Server,
    readonly host: string,
    readonly port: number,
  ) {}

  /** Starts a server on a loopback address (127.0.0.1:0 by default). */
  static async start(options: OriginServerOptions = {}): Promise<OriginServer> {
    const host = options.host ?? '127.0.0.1';
    if (!/^127\.\d+\.\d+\.\d+$/.test(host) && host !== '::1') throw new Error(`origin-server: ${host} is not loopback`);
    const server = createServer();
    server.keepAliveTimeout = 5_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const origin = new OriginServer(server, host, (server.address() as AddressInfo).port);
    server.on('connection', (s: Socket) => {
      origin.connections++;
      origin.sockets.add(s);
      s.on('close', () => origin.sockets.delete(s));
    });
    server.on('request', (req, res) => origin.handle(req, res));
    return origin;
  }

  /** `http://host:port` (IPv6 in brackets). */
  get origin(): string {
    return `http://${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.port}`;
  }

  /** Absolute URL of `path` on this server. */
  url(path: string): string {
    return this.origin + path;
  }

  /** Registers (or replaces) what `path` answers. Unregistered paths answer 404. */
  route(path: string, spec: RouteSpec): this {
    this.routes.set(path, spec);
    return this;
  }

  /** Requests received for `path` (query ignored). */
  requests(path: string): number {
    return this.log.filter((r) => r.path === path).length;
  }

  /** Records of the requests for `path`. */
  records(path: string): RequestRecord[] {
    return this.log.filter((r) => r.path === path);
  }

  /** Requests for `path` whose client went away before the response was finished. */
  clientCloses(path: string): number {
    return this.records(path).filter((r) => r.clientClosed).length;
  }

  /**
   * Resolves when `count` requests for `path` have been closed by the client
   * before their response finished; rejects after `timeoutMs`.
   */
  async waitForClientClose(path: string, count = 1, timeoutMs = 5_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (this.clientCloses(path) < count) {
      if (Date.now() > until) throw new Error(`origin-server: ${path}: ${this.clientCloses(path)} client closes after ${timeoutMs} ms, wanted ${count}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** Resolves when `count` requests for `path` have arrived; rejects after `timeoutMs`. */
  async waitForRequests(path: string, count = 1, timeoutMs = 5_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (this.requests(path) < count) {
      if (Date.now() > until) throw new Error(`origin-server: ${path}: ${this.requests(path)} requests after ${timeoutMs} ms, wanted ${count}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** Forgets the request log and the connection count (routes stay). */
  resetCounters(): void {
    this.log.length = 0;
    this.connections = 0;
  }

  /** Stops listening and destroys every connection. */
  async close(): Promise<void> {
    this.closing = true;
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    let markClosed!: () => void;
    const record: RequestRecord = {
      path,
      method: req.method ?? 'GET',
      headers: req.headers,
      bytesSent: 0,
      finished: false,
      clientClosed: false,
      closed: new Promise<void>((r) => {
        markClosed = r;
      }),
    };
    this.log.push(record);
    let serverEnded = false;
    res.on('finish', () => {
      record.finished = true;
    });
    res.on('close', () => {
      if (!record.finished && !serverEnded && !this.closing) record.clientClosed = true;
      markClosed();
    });
    const spec = this.routes.get(path);
    if (spec === undefined) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    void this.answer(spec, req, res, record, () => {
      serverEnded = true;
    }).catch(() => {
      serverEnded = true;
      res.destroy();
    });
  }

  private async answer(spec: RouteSpec, req: IncomingMessage, res: ServerResponse, record: RequestRecord, serverEnds: () => void): Promise<void> {
    if (spec.delayMs) await sleep(spec.delayMs);
    if (spec.stall === 'headers') return; // never answer
    const headers: Record<string, string> = { ...spec.headers };
    const contentType = spec.contentType === undefined ? 'application/octet-stream' : spec.contentType;
    if (contentType !== null) headers['content-type'] = contentType;
    if (spec.redirect !== undefined) {
      headers['location'] = spec.redirect;
      headers['content-length'] = '0';
      res.writeHead(spec.status ?? 302, headers).end();
      return;
    }
    const body = spec.body ?? '';
    const size = bodySize(body);
    if (spec.contentLength === undefined || spec.contentLength === 'exact') headers['content-length'] = String(size);
    else if (typeof spec.contentLength === 'number') headers['content-length'] = String(spec.contentLength);
    res.writeHead(spec.status ?? 200, headers);
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    if (spec.stall === 'body') {
      res.flushHeaders();
      return;
    }

    let limit = size;
    if (spec.truncate !== undefined) limit = Math.min(limit, spec.truncate);
    if (spec.reset !== undefined) limit = Math.min(limit, spec.reset);
    if (typeof spec.stall === 'number') limit = Math.min(limit, spec.stall);
    let first = true;
    let sent = 0;
    for (const whole of bodyChunks(body)) {
      for (const piece of split(whole, spec.trickle?.bytes)) {
        if (sent >= limit || res.destroyed) break;
        let chunk = piece.subarray(0, limit - sent);
        if (spec.tamper && first && chunk.length > 0) {
          chunk = Buffer.from(chunk);
          chunk[0] = chunk[0]! ^ 0xff;
        }
        first = false;
        if (spec.trickle) await sleep(spec.trickle.everyMs);
        await write(res, chunk);
        sent += chunk.length;
        record.bytesSent = sent;
      }
      if (sent >= limit || res.destroyed) break;
    }
    if (res.destroyed) return;
    if (spec.truncate !== undefined && sent < size) {
      serverEnds();
      res.socket?.end(); // FIN after what was written: a clean close, mid-body
      return;
    }
    if (spec.reset !== undefined && sent < size) {
      serverEnds();
      await sleep(20); // let the bytes leave before the RST
      res.socket?.resetAndDestroy();
      return;
    }
    if (typeof spec.stall === 'number') return; // keep the connection open, send nothing more
    res.end();
  }
}

function* split(buf: Buffer, size: number | undefined): Generator<Buffer> {
  if (!size) {
    yield buf;
    return;
  }
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}

function write(res: ServerResponse, chunk: Buffer): Promise<void> {
  return res.write(chunk) ? Promise.resolve() : drainedOrClosed(res);
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
