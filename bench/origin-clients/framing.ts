/**
 * Framing an origin may send that the signer must refuse (the cases of
 * test/hostile/hardening-origin.test.ts and origin-faults, and the classic
 * smuggling and version tricks), run through the origin fetcher over each
 * client of ./serve.ts: which of them each client refuses. Loopback only.
 * Owns: the cases and a raw TCP origin writing their exact bytes.
 */
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import { OriginFetcher, type OriginFetcherOptions } from '../../artifacts/origin-fetcher.ts';

const GZ = gzipSync(Buffer.from('hello, encoded'));
const ok = (head: string, body: string) => `HTTP/1.1 200 OK\r\n${head}\r\n${body}`;

/** Raw answers by path; each must be refused (an error, never a body). */
export const BAD_FRAMING: Record<string, string> = {
  '/te-http10': 'HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  '/te-chunked-twice': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\nf\r\n5\r\nhello\r\n0\r\n\r\n\r\n0\r\n\r\n',
  '/te-chunked-repeated': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  '/te-gzip-chunked': `HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n${GZ.length.toString(16)}\r\n${GZ.toString('latin1')}\r\n0\r\n\r\n`,
  '/te-gzip': `HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n${GZ.toString('latin1')}`,
  '/ext-nul': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;a=\u0000\r\nhello\r\n0\r\n\r\n',
  '/ext-esc': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;a="\u001b[2J"\r\nhello\r\n0\r\n\r\n',
  '/trailer-nul': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nx-t: a\u0000b\r\n\r\n',
  '/reason-nul': 'HTTP/1.1 200 O\u0000K\r\ncontent-length: 5\r\n\r\nhello',
  '/reason-esc': 'HTTP/1.1 200 \u001b[31mOK\r\ncontent-length: 5\r\n\r\nhello',
  '/cl-conflict': ok('content-length: 5\r\ncontent-length: 6\r\n', 'hello!'),
  '/cl-list-conflict': ok('content-length: 5, 6\r\n', 'hello!'),
  '/cl-negative': ok('content-length: -5\r\n', 'hello'),
  '/cl-plus': ok('content-length: +5\r\n', 'hello'),
  '/cl-cut-short': ok('content-length: 10\r\n', 'hello'),
  '/http09': 'hello',
  '/version-2': 'HTTP/2.0 200 OK\r\ncontent-length: 5\r\n\r\nhello',
  '/version-12': 'HTTP/1.2 200 OK\r\ncontent-length: 5\r\n\r\nhello',
  '/obs-fold': ok('content-length: 5\r\nx-a: b\r\n c\r\n', 'hello'),
  '/header-nul': ok('content-length: 5\r\nx-a: b\u0000c\r\n', 'hello'),
  '/header-space-name': ok('content-length: 5\r\nx-a : b\r\n', 'hello'),
  '/head-oversize': ok(`content-length: 5\r\nx-big: ${'a'.repeat(80 * 1024)}\r\n`, 'hello'),
  '/interim-20': `${'HTTP/1.1 100 Continue\r\n\r\n'.repeat(20)}${ok('content-length: 5\r\n', 'hello')}`,
  '/switch-101': 'HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\nhello',
  '/chunk-size-overflow': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1000000000000000005\r\nhello\r\n0\r\n\r\n',
  '/chunk-no-crlf': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloX0\r\n\r\n',
  '/chunk-cut-short': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n',
  '/chunk-bare-lf': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\nhello\n0\n\n',
};

/** Well-framed answers every client must deliver as `hello`. */
export const GOOD_FRAMING: Record<string, string> = {
  '/good-length': ok('content-length: 5\r\n', 'hello'),
  '/good-chunked': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2;x=y\r\nhe\r\n3\r\nllo\r\n0\r\nx-t: fine\r\n\r\n',
  '/good-close': 'HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello',
  '/good-continue': `HTTP/1.1 100 Continue\r\n\r\n${ok('content-length: 5\r\n', 'hello')}`,
  '/good-http10': 'HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\nhello',
};

/** What each case did: `refused` (a VouchError's code), or the body it let through. */
export async function framingOutcomes(transport: OriginFetcherOptions['transport']): Promise<Record<string, string>> {
  const all = { ...BAD_FRAMING, ...GOOD_FRAMING };
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    let head = '';
    s.on('data', (d) => {
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      const path = /^GET (\S+) /.exec(head)?.[1] ?? '';
      s.end(Buffer.from(all[path] ?? 'HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n', 'latin1'));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const fetcher = new OriginFetcher({ timeoutMs: 5_000, ...(transport ? { transport } : {}) });
  const out: Record<string, string> = {};
  try {
    for (const path of Object.keys(all)) {
      try {
        const res = await fetcher.fetch(base + path);
        const parts: Buffer[] = [];
        for await (const c of res.body) parts.push(c as Buffer);
        out[path] = `accepted ${JSON.stringify(Buffer.concat(parts).toString('latin1').slice(0, 40))}`;
      } catch (e) {
        out[path] = `refused (${(e as { code?: string }).code ?? (e as Error).name})`;
      }
    }
  } finally {
    await fetcher.destroy();
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  }
  return out;
}
