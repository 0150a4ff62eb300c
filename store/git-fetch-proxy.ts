/**
 * A bounding HTTP proxy on 127.0.0.1 (port 0) between a stock `git`
 * subprocess and one git smart-HTTP remote (the mirror's clone,
 * ./git-clone.ts; the gitops bench). It forwards only `GET
 * info/refs?service=git-upload-pack` and `POST git-upload-pack` under a
 * secret path, through the fetch's own client (./upload-pack.ts, undici):
 * FETCH_LIMITS' bytes, time and silence per answer, the advertisement's
 * checks (refs, pkt-line size), and on the answer the pkt-lines, shallow
 * lines and the pack header's object count.
 * Owns: its listener and connections, the first failure (`failure`), the
 * advertised main. Trusts: nothing from git (requests bounded in size and
 * number) or the remote. Must hold: loopback only; FetchOptions.headers
 * (credentials) go upstream only, never into a message or to git.
 */
import { randomBytes } from 'node:crypto';
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { VouchError } from '../chain/errors.ts';
import { FETCH_LIMITS } from './fetch-limits.ts';
import { BRANCH_REF } from './git-objects.ts';
import { PktReader, protocolError } from './pkt-line.ts';
import { gitUrl, remoteText, shownUrl } from './smart-http.ts';
import { type FetchOptions, discoverRefs, fetchExchange } from './upload-pack.ts';
import { drainedOrClosed } from '../platform/drained.ts';

/** Largest request body git may send (a clone's wants and deepen: a few hundred bytes; a fetch's haves: a few KiB). */
const REQUEST_BYTES = 1 << 20;
const ADVERT_TYPE = 'application/x-git-upload-pack-advertisement';
const RESULT_TYPE = 'application/x-git-upload-pack-result';

/** Checks an upload-pack answer as it streams to git: pkt-lines, shallow lines, errors, the pack's declared object count. */
class ResultMonitor {
  private shallow = 0;
  private head = Buffer.alloc(0);
  private readonly reader = new PktReader((line) => this.line(line), FETCH_LIMITS.resultPktLines);

  push(chunk: Buffer): void {
    this.reader.push(chunk);
  }

  private line(line: Buffer | null): void {
    if (line === null || line.length === 0) return;
    const b = line[0]!;
    if (b === 1) {
      if (this.head.length < 12) {
        this.head = Buffer.concat([this.head, line.subarray(1, 1 + 12 - this.head.length)]);
        if (this.head.length === 12) {
          const count = this.head.readUInt32BE(8);
          if (this.head.toString('latin1', 0, 4) !== 'PACK') throw protocolError('bad pack: no PACK signature');
          if (count > FETCH_LIMITS.objects) throw protocolError(`bad pack: the pack declares ${count} objects, more than ${FETCH_LIMITS.objects}`);
        }
      }
    } else if (b === 3) throw new VouchError('io_error', `the remote failed: ${remoteText(line.toString('utf8', 1))}`);
    else if (b !== 2) {
      const text = line.toString('utf8').trim();
      if (text.startsWith('shallow ') || text.startsWith('unshallow ')) {
        if (++this.shallow > FETCH_LIMITS.shallowLines)
          throw new VouchError('io_error', `the remote sent more than ${FETCH_LIMITS.shallowLines} shallow lines`);
      } else if (text.startsWith('ERR ')) throw new VouchError('io_error', `the remote refused: ${remoteText(text.slice(4))}`);
    }
  }
}

export class GitFetchProxy {
  /** The first failure of an exchange with the remote (a bound passed, a refusal): what a failed git run is put as. */
  failure: VouchError | null = null;
  /** Answers cut (a failure while git was still listening). */
  cut = 0;
  /** `refs/heads/main` as last advertised (null: none; undefined: no advertisement passed yet). */
  main: string | null | undefined = undefined;
  /** Bytes of upload-pack answers forwarded to git. */
  received = 0;
  private requests = 0;
  private readonly token = randomBytes(16).toString('hex');
  private readonly closing = new AbortController();
  private server: Server | null = null;
  private port = 0;

  private constructor(
    private readonly upstream: string,
    private readonly opts: FetchOptions,
    private readonly maxRequests: number,
  ) {}

  /**
   * Listen on 127.0.0.1 for git, forwarding to the remote at `url` with the
   * fetch's options (headers, dispatcher, timeoutMs, stallMs, maxBytes, signal).
   * `maxRequests`: HTTP requests served in all (a depth-1 clone makes three).
   */
  static async start(url: string, opts: FetchOptions = {}, maxRequests = 32): Promise<GitFetchProxy> {
    const p = new GitFetchProxy(url, opts, maxRequests);
    const server = createServer({ maxHeaderSize: 16 * 1024 }, (req, res) => {
      p.handle(req, res).catch((e: unknown) => {
        p.record(e);
        res.destroy();
      });
    });
    server.maxConnections = 8;
    server.headersTimeout = 10_000;
    server.requestTimeout = 0; // a clone's answer streams for as long as the fetch bounds allow
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    p.server = server;
    p.port = (server.address() as AddressInfo).port;
    return p;
  }

  /** The URL git is given (no credentials: they stay with the proxy). */
  get url(): string {
    return `http://127.0.0.1:${this.port}/${this.token}/chain.git`;
  }

  /** The remote's URL as messages show it (no credentials). */
  get shown(): string {
    return shownUrl(this.upstream);
  }

  /** Stop listening, cut every connection and every exchange in progress. */
  close(): Promise<void> {
    this.closing.abort();
    const s = this.server;
    if (!s) return Promise.resolve();
    this.server = null;
    return new Promise((resolve) => {
      s.closeAllConnections();
      s.close(() => resolve());
    });
  }

  private record(e: unknown): void {
    if (this.closing.signal.aborted) return;
    this.cut++;
    this.failure ??=
      e instanceof VouchError ? e : new VouchError('io_error', `the fetch from ${this.shown} failed: ${(e as Error)?.message ?? String(e)}`, { cause: e });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.on('error', () => {});
    const refuse = (status: number) => {
      req.resume();
      if (!res.headersSent) res.writeHead(status, { 'content-length': '0', connection: 'close' });
      res.end();
    };
    const base = `/${this.token}/chain.git/`;
    const target = req.url ?? '';
    if (++this.requests > this.maxRequests) return refuse(429);
    const kind =
      req.method === 'GET' && target === `${base}info/refs?service=git-upload-pack`
        ? 'refs'
        : req.method === 'POST' && target === `${base}git-upload-pack`
          ? 'pack'
          : null;
    if (kind === null) return refuse(404);
    // git hung up (it failed or was killed): the exchange for it stops, and is not the failure.
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const signals = [gone.signal, this.closing.signal, ...(this.opts.signal ? [this.opts.signal] : [])];
    const opts: FetchOptions = { ...this.opts, signal: AbortSignal.any(signals) };
    const failed = (e: unknown) => {
      if (!gone.signal.aborted) this.record(e);
      if (res.headersSent) res.destroy();
      else refuse(502);
    };
    if (kind === 'refs') {
      req.resume();
      const chunks: Buffer[] = [];
      try {
        const { refs } = await discoverRefs(this.upstream, opts, (c) => chunks.push(c));
        this.main = refs.get(BRANCH_REF) ?? null;
      } catch (e) {
        return failed(e);
      }
      res.writeHead(200, { 'content-type': ADVERT_TYPE, 'cache-control': 'no-cache' });
      res.end(Buffer.concat(chunks));
      return;
    }
    let body: Buffer;
    try {
      body = await readBody(req);
    } catch {
      return refuse(413);
    }
    const monitor = new ResultMonitor();
    const headers: Record<string, string> = { 'content-type': 'application/x-git-upload-pack-request', accept: RESULT_TYPE };
    const enc = req.headers['content-encoding'];
    if (enc === 'gzip' || enc === 'deflate') headers['content-encoding'] = enc;
    const bounds = {
      timeoutMs: this.opts.timeoutMs ?? FETCH_LIMITS.exchangeMs,
      maxBytes: this.opts.maxBytes ?? FETCH_LIMITS.packBytes,
      msPerMiB: FETCH_LIMITS.packMsPerMiB,
    };
    try {
      await fetchExchange(opts, bounds, gitUrl(this.upstream, 'git-upload-pack'), 'POST', headers, body, RESULT_TYPE, (chunk) => {
        monitor.push(chunk);
        this.received += chunk.length;
        if (!res.headersSent) res.writeHead(200, { 'content-type': RESULT_TYPE, 'cache-control': 'no-cache' });
        if (res.write(chunk)) return;
        return drainedOrClosed(res);
      });
    } catch (e) {
      return failed(e);
    }
    if (!res.headersSent) res.writeHead(200, { 'content-type': RESULT_TYPE, 'cache-control': 'no-cache' });
    res.end();
  }
}

/** git's request body, at most REQUEST_BYTES. */
function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let n = 0;
    req.on('data', (c: Buffer) => {
      n += c.length;
      if (n > REQUEST_BYTES) {
        req.destroy();
        reject(new Error('request too large'));
      } else parts.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}
