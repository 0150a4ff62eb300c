/**
 * A bounding HTTP proxy on 127.0.0.1 in front of a git smart-HTTP remote, so
 * a `git fetch`/`git clone` subprocess keeps the byte and time bounds of
 * store/fetch-limits.ts: each answer is cut (connection destroyed) past
 * FETCH_LIMITS.advertisementBytes (`info/refs`) or packBytes (upload-pack),
 * past exchangeMs (+ packMsPerMiB per MiB received) or after stallMs of
 * silence. The per-object bounds (objects, objectBytes, delta depth, resolve
 * work) have no git setting and are NOT kept. For the gitops bench.
 * Owns: its server and the requests it forwards. Trusts: the remote URL it is given (loopback).
 */
import { type IncomingMessage, type ServerResponse, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { FETCH_LIMITS } from '../../store/fetch-limits.ts';

type BoundKey = 'advertisementBytes' | 'packBytes' | 'advertisementMs' | 'exchangeMs' | 'packMsPerMiB' | 'stallMs';

export class BoundingProxy {
  /** Answers cut because they passed a bound. */
  cut = 0;
  private constructor(
    private readonly server: ReturnType<typeof createServer>,
    readonly port: number,
  ) {}

  /** `limits`: FETCH_LIMITS unless a test hands smaller bounds. */
  static async start(target: string, limits: Pick<typeof FETCH_LIMITS, BoundKey> = FETCH_LIMITS): Promise<BoundingProxy> {
    const t = new URL(target);
    let self: BoundingProxy | null = null;
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const isRefs = (req.url ?? '').includes('/info/refs');
      const maxBytes = isRefs ? limits.advertisementBytes : limits.packBytes;
      const baseMs = isRefs ? limits.advertisementMs : limits.exchangeMs;
      const t0 = performance.now();
      let got = 0;
      let stall: NodeJS.Timeout | null = null;
      const up = request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode ?? 502, ur.headers);
        const fail = () => {
          if (self) self.cut++;
          ur.destroy();
          res.destroy();
        };
        const arm = () => {
          if (stall) clearTimeout(stall);
          stall = setTimeout(fail, limits.stallMs);
        };
        arm();
        ur.on('data', (chunk: Buffer) => {
          got += chunk.length;
          arm();
          if (got > maxBytes || performance.now() - t0 > baseMs + (got / 2 ** 20) * limits.packMsPerMiB) return fail();
          if (!res.write(chunk)) {
            ur.pause();
            res.once('drain', () => ur.resume());
          }
        });
        ur.on('end', () => {
          if (stall) clearTimeout(stall);
          res.end();
        });
        ur.on('error', () => res.destroy());
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    self = new BoundingProxy(server, (server.address() as AddressInfo).port);
    return self;
  }

  /** The proxied URL of `path` on the remote. */
  url(path: string): string {
    return `http://127.0.0.1:${this.port}/${path}`;
  }

  close(): Promise<void> {
    return new Promise((r) => {
      this.server.closeAllConnections();
      this.server.close(() => r());
    });
  }
}
