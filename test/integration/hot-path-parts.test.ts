/**
 * The lookup path's swappable parts (issue 33 item 5,
 * docs/decisions/gateway-hot-path.md): a gateway given another answer cache
 * uses it for its lookup answers, and a gateway writing each answer when
 * made answers byte for byte as the default one (lru-cache, the answers of
 * a turn written together: the batch), pipelined requests included. Real gateways in this
 * process on 127.0.0.1, one chain.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Encode } from '../../chain/encoding.ts';
import { ClockCache } from '../../bench/hot-path/clock-cache.ts';
import { loadConfigFile } from '../../gateway/config.ts';
import { startGateway, type RunningGateway } from '../../gateway/gateway.ts';
import { createLogger } from '../../gateway/observability/logger.ts';
import type { AnswerCache } from '../../gateway/http/server.ts';
import { buildLongChain, initChainRepo } from '../helpers/chain-fixture.ts';
import { writeConfig } from '../helpers/gateway-process.ts';
import { rawRequest } from '../helpers/raw-http.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-hotpath-'));
const chain = buildLongChain(12);
const urls = chain.blocks.slice(1).map((b) => (b.payload as { endorsements: { artifact_url: string }[] }).endorsements[0]!.artifact_url);
const calls = { get: 0, hits: 0, set: 0 };
/** What the swapped cache says when asked whether it is full. */
let full = false;
let plain: RunningGateway;
let swapped: RunningGateway;

test.before(async () => {
  const dir = join(work, 'chain');
  await initChainRepo(dir, chain.blocks, chain.checkpoint);
  const config = loadConfigFile(
    writeConfig(work, { listen: { host: '127.0.0.1', port: 0 }, chain: { dir, public_key: base64Encode(chain.signer.publicKey) } }),
    {},
  );
  const quiet = { announce: () => {}, log: createLogger('silent') };
  plain = await startGateway(config, quiet);
  swapped = await startGateway(config, {
    ...quiet,
    hotPath: {
      batching: false,
      answerCache: <V extends { bytes: number; used: boolean }>(maxBytes: number): AnswerCache<V> => {
        const inner = new ClockCache<V>(maxBytes);
        return {
          get: (k) => {
            calls.get++;
            const v = inner.get(k);
            if (v !== undefined) calls.hits++;
            return v;
          },
          set: (k, v) => {
            calls.set++;
            inner.set(k, v);
          },
          full: () => full,
        };
      },
    },
  });
  await Promise.all([plain.ready, swapped.ready]);
});

test.after(async () => {
  await Promise.all([plain?.close(), swapped?.close()]);
  rmSync(work, { recursive: true, force: true });
});

test('a gateway given another answer cache keeps its lookup answers there', async () => {
  const path = `/v1/endorsement?url=${encodeURIComponent(urls[3]!)}`;
  for (let i = 0; i < 4; i++) assert.is((await fetch(swapped.url + path)).status, 200);
  assert.is(calls.set, 1, 'one answer kept, at the second ask (chain/doorkeeper.ts)');
  assert.ok(calls.hits >= 2, `later lookups answered from it (${calls.hits} hits of ${calls.get})`);
});

test('a full answer cache takes a query only when it was also asked in the window before; the answers are the same', async () => {
  const path = `/v1/endorsement?url=${encodeURIComponent(urls[5]!)}`;
  const before = calls.set;
  full = true;
  try {
    const plainText = await (await fetch(plain.url + path)).text();
    for (let i = 0; i < 4; i++) {
      const res = await fetch(swapped.url + path);
      assert.is(res.status, 200);
      assert.is(await res.text(), plainText);
    }
    assert.is(calls.set, before, 'not kept: this window is its first (chain/doorkeeper.ts, strict)');
  } finally {
    full = false;
  }
  await fetch(swapped.url + `/v1/endorsement?url=${encodeURIComponent(urls[6]!)}`);
  await fetch(swapped.url + `/v1/endorsement?url=${encodeURIComponent(urls[6]!)}`);
  assert.is(calls.set, before + 1, 'with room again, kept at its second ask');
});

test('with no batch, answers are the same bytes as the default gateway’s (the batch), one at a time and pipelined', async () => {
  for (const u of [...urls, 'https://nowhere.example/x.tgz']) {
    const path = `/v1/endorsement?url=${encodeURIComponent(u)}`;
    const [a, b] = await Promise.all([rawRequest(plain.url, path), rawRequest(swapped.url, path)]);
    assert.is(b.status, a.status, u);
    assert.is(b.body.toString('utf8'), a.body.toString('utf8'), u);
    assert.is(b.headers.etag, a.headers.etag, u);
  }
  // Many requests on one connection at once: every answer, in order.
  const paths = urls.map((u) => `/v1/endorsement?url=${encodeURIComponent(u)}`);
  const [pa, pb] = await Promise.all([pipelined(plain.url, paths), pipelined(swapped.url, paths)]);
  assert.is(pb, pa);
  assert.is(pb.split('HTTP/1.1 200 OK').length - 1, paths.length);
});

/** Every path as one write on one connection; the raw bytes answered, without dates. */
async function pipelined(base: string, paths: string[]): Promise<string> {
  const { connect } = await import('node:net');
  const { port } = new URL(base);
  const s = connect(Number(port), '127.0.0.1');
  s.write(paths.map((p) => `GET ${p} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`).join(''));
  let text = '';
  s.setEncoding('latin1');
  await new Promise<void>((resolve) => {
    s.on('data', (d) => {
      text += d;
      if (text.split('HTTP/1.1 ').length - 1 >= paths.length && /\}\s*$/.test(text)) {
        s.destroy();
        resolve();
      }
    });
  });
  return text.replace(/^date: .*\r\n/gim, '');
}

test.run();
