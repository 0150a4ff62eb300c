/**
 * A hostile origin cannot starve everyone else (issue 14, item 12): while a
 * real gateway process downloads an endorsed URL from a scripted hostile
 * origin, other clients' `/healthz` latency stays near idle.
 *
 * Attacks (a raw TCP origin on 127.0.0.1, run in a worker thread so that its
 * own writing does not slow this process's measuring):
 * - `/continue`: an endless flood of `100 Continue` interim responses;
 * - `/chunked`: a 4 MiB chunked body in 1-byte chunks (`1\r\nX\r\n`), written
 *   as fast as the socket takes them;
 * - `/trickle`: a 4 MiB Content-Length body in 1-byte TCP writes (no delay).
 * Each URL is endorsed with a hash its bytes never match, so nothing enters
 * the mirror and downloads are restarted back to back for the whole
 * measurement (the attack never stops while we measure).
 *
 * Rule: the p50 of 50 sequential `/healthz` requests during an attack is at
 * most max(2 × idle p50, idle p50 + 5 ms), idle p50 measured the same way
 * just before (idle on loopback is ~1 ms, hence the absolute floor).
 * Owns: nothing outside this file; cleans up the gateway, worker and files.
 * test-run: exclusive (it compares latencies: no other test file runs beside it).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { stopWorker } from '../helpers/processes.ts';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint, buildEndorseBlock } from '../../chain/build.ts';
import type { Block } from '../../chain/block.ts';
import { base64Encode } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { initChainRepo, testSigner } from '../helpers/chain-fixture.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-starvation-'));
const BODY = 4 * 1024 * 1024;
const SAMPLES = 50;

/** The hostile origin: plain JS run in a worker thread; posts its port. */
const ORIGIN_SOURCE = `
const net = require('node:net');
const { parentPort, workerData } = require('node:worker_threads');
const BODY = workerData.body;
const pump = (s, piece, total, done) => {
  // Writes total/piece.length copies of piece as fast as the socket drains.
  let left = total;
  const go = () => {
    while (left > 0 && !s.destroyed) {
      left--;
      if (!s.write(piece)) return s.once('drain', go);
    }
    if (!s.destroyed && done) done();
  };
  go();
};
const server = net.createServer((s) => {
  s.setNoDelay(true);
  s.on('error', () => {});
  let head = '';
  s.on('data', (d) => {
    if (head === null) return;
    head += d.toString('latin1');
    if (!head.includes('\\r\\n\\r\\n')) return;
    const path = /^GET (\\S+)/.exec(head)[1];
    head = null;
    if (path.startsWith('/continue')) {
      const interim = Buffer.from('HTTP/1.1 100 Continue\\r\\n\\r\\n'.repeat(512), 'latin1');
      pump(s, interim, Infinity, null);
    } else if (path.startsWith('/chunked')) {
      s.write('HTTP/1.1 200 OK\\r\\ntransfer-encoding: chunked\\r\\n\\r\\n');
      const piece = Buffer.from('1\\r\\nX\\r\\n'.repeat(16384), 'latin1');
      pump(s, piece, BODY / 16384, () => s.end('0\\r\\n\\r\\n'));
    } else if (path.startsWith('/trickle')) {
      s.write('HTTP/1.1 200 OK\\r\\ncontent-length: ' + BODY + '\\r\\n\\r\\n');
      pump(s, Buffer.from('X'), BODY, () => s.end());
    } else {
      s.end('HTTP/1.1 404 Not Found\\r\\ncontent-length: 0\\r\\n\\r\\n');
    }
  });
});
server.listen(0, '127.0.0.1', () => parentPort.postMessage(server.address().port));
parentPort.on('message', () => server.close(() => process.exit(0)));
`;

let worker: Worker;
let port = 0;
let gw: GatewayProcess;
const agent = new Agent({ keepAlive: true, maxSockets: 1 });
const originUrl = (path: string) => `http://127.0.0.1:${port}${path}`;

test.before(async () => {
  worker = new Worker(ORIGIN_SOURCE, { eval: true, workerData: { body: BODY } });
  port = await new Promise<number>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  const signer = testSigner('starvation');
  const now = Date.now() - 60_000;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now, uns: 'acme/starvation' })];
  const wrong = artifactHashOf(nodeBackend, 'sha256', Buffer.from('not what any attack sends')); // never mirrored
  for (const path of ['/continue', '/chunked', '/trickle']) {
    blocks.push(
      buildEndorseBlock({
        prev: blocks[blocks.length - 1]!,
        signer,
        backend: nodeBackend,
        now: now + blocks.length,
        entries: [{ url: originUrl(path), artifactHash: wrong, name: `acme${path}`, semver: '1.0.0', license: 'MIT' }],
      }),
    );
  }
  const chainDir = join(work, 'chain');
  await initChainRepo(chainDir, blocks, buildCheckpoint({ head: blocks[blocks.length - 1]!, signer, now: now + blocks.length }), {
    timestamp: Math.floor(now / 1000),
  });
  gw = await startGatewayProcess([
    '--config',
    writeConfig(join(work, 'gw'), {
      listen: { port: 0 },
      chain: { dir: chainDir, public_key: base64Encode(signer.publicKey) },
      origin: { timeout: 20 },
    }),
  ]);
});

test.after(async () => {
  agent.destroy();
  await gw?.stop();
  await stopWorker(worker);
  rmSync(work, { recursive: true, force: true });
});

/** One GET; resolves with status and elapsed ms (the body read and dropped). */
function get(path: string, signal?: AbortSignal, useAgent = true): Promise<{ status: number; ms: number }> {
  const u = new URL(gw.url);
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path, agent: useAgent ? agent : false, signal }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode!, ms: performance.now() - t0 }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

async function healthzP50(): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const r = await get('/healthz');
    assert.is(r.status, 200);
    ms.push(r.ms);
  }
  ms.sort((a, b) => a - b);
  return ms[Math.floor(ms.length / 2)]!;
}

/** Idle p50, then p50 while downloads of `path` run back to back; returns both and the downloads' answers. */
async function measure(path: string): Promise<{ idle: number; busy: number; answers: number[] }> {
  for (let i = 0; i < 10; i++) await get('/healthz'); // warm up
  const idle = await healthzP50();
  const stop = new AbortController();
  const answers: number[] = [];
  const attack = (async () => {
    while (!stop.signal.aborted) {
      try {
        answers.push((await get(`/v1/download?url=${encodeURIComponent(originUrl(path))}`, stop.signal, false)).status);
      } catch {
        if (!stop.signal.aborted) answers.push(0);
      }
      // A download refused at once is restarted after a short pause: what is measured is the
      // origin's misbehaviour, not the load of a client hammering the gateway itself.
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  let busy: number;
  try {
    await new Promise((r) => setTimeout(r, 300)); // the attack is under way
    busy = await healthzP50();
  } finally {
    stop.abort();
    await attack;
  }
  console.log(`${path}: idle p50 ${idle.toFixed(2)} ms, during attack p50 ${busy.toFixed(2)} ms, downloads ${JSON.stringify(answers)}`);
  return { idle, busy, answers };
}

const bound = (idle: number) => Math.max(2 * idle, idle + 5);

test('a flood of 100 Continue does not starve other clients, and is refused as origin_error', async () => {
  const { idle, busy, answers } = await measure('/continue');
  assert.ok(busy <= bound(idle), `p50 ${busy.toFixed(2)} ms during the flood, idle ${idle.toFixed(2)} ms`);
  assert.ok(answers.length > 0 && answers.every((s) => s === 502 || s === 0), `answers ${answers}`);
});

test('a 4 MiB chunked body in 1-byte chunks does not starve other clients', async () => {
  const { idle, busy } = await measure('/chunked');
  assert.ok(busy <= bound(idle), `p50 ${busy.toFixed(2)} ms during the attack, idle ${idle.toFixed(2)} ms`);
});

test('a 4 MiB Content-Length body in 1-byte TCP writes does not starve other clients', async () => {
  const { idle, busy } = await measure('/trickle');
  assert.ok(busy <= bound(idle), `p50 ${busy.toFixed(2)} ms during the attack, idle ${idle.toFixed(2)} ms`);
});

test.run();
