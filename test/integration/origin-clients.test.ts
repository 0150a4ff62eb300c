/**
 * The origin fetcher's client seam and the gateway bench's side-by-side
 * clients (issue 33 item 2, docs/decisions/h1-client.md): the fetcher runs
 * over the transport it is given; artifacts/h1, undici and node:http each
 * deliver the fetcher's whole surface (stream, receiveInto, receiveWindows,
 * redirects), so the bench compares like with like; and the framing matrix
 * (bench/origin-clients/framing.ts): h1, the shipped client, refuses every
 * hostile answer, node:http with its head checks too, undici lets the
 * HTTP/1.0 chunked and the HTTP/2.0 answers through. Loopback only.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { OriginFetcher, type OriginFetcherOptions } from '../../artifacts/origin-fetcher.ts';
import { H1Client } from '../../artifacts/h1/pool.ts';
import { BAD_FRAMING, GOOD_FRAMING, framingOutcomes } from '../../bench/origin-clients/framing.ts';
import { ORIGIN_CLIENTS } from '../../bench/origin-clients/serve.ts';
import { OriginServer, digestOf, pattern, patternBytes } from '../helpers/origin-server.ts';

let origin: OriginServer;
const SIZE = 3 * 1024 * 1024 + 17;

test.before(async () => {
  origin = await OriginServer.start();
  origin.route('/big.bin', { body: pattern(SIZE, 7) });
  origin.route('/moved', { redirect: '/big.bin', status: 302 });
});
test.after(() => origin.close());

test('the fetcher fetches over the transport it is given (the bench swaps clients through it)', async () => {
  let requests = 0;
  const f = new OriginFetcher({
    timeoutMs: 10_000,
    transport: (o) => {
      const h1 = new H1Client(o);
      return {
        request: (req) => {
          requests++;
          return h1.request(req);
        },
        close: () => h1.close(),
        destroy: () => h1.destroy(),
      };
    },
  });
  const res = await f.fetch(origin.url('/moved'));
  const parts: Buffer[] = [];
  for await (const c of res.body) parts.push(c as Buffer);
  assert.is(digestOf(Buffer.concat(parts)), digestOf(pattern(SIZE, 7)));
  assert.is(requests, 2, 'the redirect and its target, both over the given transport');
  await f.destroy();
});

for (const [name, transport] of Object.entries(ORIGIN_CLIENTS) as [string, OriginFetcherOptions['transport']][]) {
  test(`${name}: stream, receiveInto and receiveWindows deliver the same bytes, after a redirect`, async () => {
    const f = new OriginFetcher({ timeoutMs: 10_000, ...(transport ? { transport } : {}) });
    const want = Buffer.from(patternBytes(pattern(SIZE, 7)));
    try {
      const a = await f.fetch(origin.url('/moved'));
      const parts: Buffer[] = [];
      for await (const c of a.body) parts.push(c as Buffer);
      assert.ok(Buffer.concat(parts).equals(want), 'stream');

      const b = await f.fetch(origin.url('/big.bin'));
      const dest = Buffer.alloc(b.contentLength!);
      let last = 0;
      await b.receiveInto(dest, (n) => {
        assert.ok(n >= last);
        last = n;
      });
      assert.ok(dest.equals(want), 'receiveInto');
      assert.is(last, SIZE);

      const c = await f.fetch(origin.url('/big.bin'));
      const windows: Buffer[] = [];
      await c.receiveWindows(Buffer.alloc(256 * 1024 + 3), async (filled) => {
        windows.push(Buffer.from(filled));
        await new Promise((r) => setImmediate(r));
      });
      assert.ok(Buffer.concat(windows).equals(want), 'receiveWindows');
    } finally {
      await f.destroy();
    }
  });
}

test('framing matrix: h1 and node:http (with its head checks) refuse every hostile answer; undici lets HTTP/1.0 chunked and HTTP/2.0 through', async () => {
  const bad = Object.keys(BAD_FRAMING);
  const good = Object.keys(GOOD_FRAMING);
  const through = (o: Record<string, string>) => bad.filter((k) => !o[k]!.startsWith('refused'));
  const h1 = await framingOutcomes(undefined);
  assert.equal(through(h1), [], 'h1 lets nothing through');
  for (const k of good) assert.is(h1[k], 'accepted "hello"', `h1 ${k}`);
  const node = await framingOutcomes(ORIGIN_CLIENTS['node-http']);
  assert.equal(through(node), [], 'node:http lets nothing through');
  for (const k of good) assert.is(node[k], 'accepted "hello"', `node:http ${k}`);
  const undici = await framingOutcomes(ORIGIN_CLIENTS.undici);
  assert.equal(through(undici), ['/te-http10', '/version-2'], 'what undici 7 lets through (its handler API never tells the version)');
  assert.is(undici['/good-continue'], 'refused (origin_error)', 'undici fails a 100 Continue before the answer');
});

test.run();
