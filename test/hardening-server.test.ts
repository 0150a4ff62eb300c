/**
 * Attacks on the gateway's HTTP server, through real `vouch serve` processes
 * on 127.0.0.1 and real loopback origins (issue 14):
 *
 * - a slow tampered origin for one URL does not fail a download of the same
 *   bytes from another URL;
 *
 * Every connection is to 127.0.0.1; every wait is bounded; processes,
 * sockets, mounts and files are cleaned up.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { createKeyFile } from '../lib/key-file.ts';
import { OriginServer, pattern } from './helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from './helpers/gateway-process.ts';
import { repoRoot } from './helpers/vectors.ts';
import { vouch } from './helpers/processes.ts';
import { resolveConfig } from '../gateway/config.ts';
import { compileRoutes } from '../gateway/proxy-routes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-harden-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'harden-token-' + 'h'.repeat(32);
let originA: OriginServer;
let originB: OriginServer;
/** The gateway of most tests: default client limits, proxy routes. */
let gw: GatewayProcess;
/** A gateway with a short request timeout and few connections (slow-client tests). */
let tight = null as GatewayProcess | null;
const REQUEST_TIMEOUT_S = 2;
const MAX_CONNECTIONS = 40;

const SAME = 'the same bytes, published at two URLs\n'.repeat(200);
const SLOW_BODY = pattern(512 * 1024, 9);

function baseConfig(dir: string): Record<string, unknown> {
  return {
    listen: { host: '127.0.0.1', port: 0 },
    service_name: 'vouch-test',
    chain: { dir: join(dir, 'chain') },
    authority: { key_file: keyFile, signer: 'harden', submit_token_file: tokenFile },
    origin: { allow_private: true, timeout: 10 },
    mirror: { memory_bytes: 16 * 1024 * 1024 },
    proxy: {
      routes: [
        { prefix: '/pass/', origin: `${originA.origin}/pkg/`, unendorsed: 'pass' },
        { host: 'registry.test', origin: `${originA.origin}/pkg/`, unendorsed: 'pass' },
      ],
    },
  };
}

interface Answer { status: number; headers: IncomingHttpHeaders; body: Buffer }

/** One request on its own connection (no keep-alive: connection counts stay exact), the path sent as given. */
function get(base: string, path: string, opts: { method?: string; host?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Answer> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: u.hostname, port: u.port, path, method: opts.method ?? 'GET', agent: false,
      headers: { connection: 'close', ...(opts.host !== undefined ? { host: opts.host } : {}), ...opts.headers },
    });
    req.setTimeout(20_000, () => req.destroy(new Error(`no answer to ${path} in 20 s`)));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

async function submit(base: string, url: string, name: string): Promise<void> {
  const r = await get(base, '/v1/submit', {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url, name, semver: '1.0.0', license: 'MIT' }),
  });
  assert.is(r.status, 201, r.body.toString());
}

/** A raw connection that records what it received and when it was closed. */
interface RawClient {
  socket: Socket;
  opened: number;
  received: () => string;
  /** ms after `opened` at which the connection closed; null while open. */
  closedAfter: () => number | null;
  closed: Promise<void>;
}

function rawClient(base: string): RawClient {
  const u = new URL(base);
  const socket = connect(Number(u.port), u.hostname);
  const opened = Date.now();
  let got = '';
  let closedAt: number | null = null;
  socket.setEncoding('latin1');
  socket.on('data', (d: string) => { got += d; });
  socket.on('error', () => {});
  const closed = new Promise<void>((r) => socket.on('close', () => { closedAt = Date.now(); r(); }));
  return { socket, opened, received: () => got, closedAfter: () => (closedAt === null ? null : closedAt - opened), closed };
}

/** Writes `text` on a fresh connection and resolves with all that came back once it closes (bounded). */
function rawExchange(base: string, text: string, timeoutMs = 5_000): Promise<string> {
  const c = rawClient(base);
  c.socket.write(text, 'latin1');
  const t = setTimeout(() => c.socket.destroy(), timeoutMs);
  return c.closed.then(() => { clearTimeout(t); return c.received(); });
}

const statusOf = (answer: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Writes one byte every `everyMs` until the socket closes or `max` bytes went out. */
function trickle(c: RawClient, everyMs: number, byte = 'a', max = 10_000): void {
  let n = 0;
  const timer = setInterval(() => {
    if (c.socket.destroyed || c.socket.writableEnded || n++ >= max) { clearInterval(timer); return; }
    c.socket.write(byte);
  }, everyMs);
  void c.closed.then(() => clearInterval(timer));
}

test.before(async () => {
  createKeyFile(keyFile);
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  originA = await OriginServer.start();
  originB = await OriginServer.start();
  originA.route('/pkg/same.bin', { body: SAME });
  originB.route('/pkg/same.bin', { body: SAME });
  originA.route('/pkg/slow.bin', { body: SLOW_BODY, trickle: { bytes: 32 * 1024, everyMs: 200 } });
  originA.route('/pkg/stream.bin', { body: SLOW_BODY, trickle: { bytes: 32 * 1024, everyMs: 200 } });
  gw = await startGatewayProcess(['--config', writeConfig(join(work, 'main'), baseConfig(join(work, 'main')))]);
});

test.after(async () => {
  await gw?.stop();
  await tight?.stop();
  await originA?.close();
  await originB?.close();
  rmSync(work, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------
// Item 7: single flight per URL

test('a slow tampered origin for one URL does not fail a download of the same bytes from another URL', async () => {
  const urlA = originA.url('/pkg/same.bin');
  const urlB = originB.url('/pkg/same.bin');
  await submit(gw.url, urlA, 'acme/same-a');
  await submit(gw.url, urlB, 'acme/same-b');
  // A now serves other bytes of the same length, slowly: its fetch is in flight while B is asked for.
  originA.route('/pkg/same.bin', { body: SAME, tamper: true, trickle: { bytes: 1024, everyMs: 100 } });
  const beforeA = originA.requests('/pkg/same.bin');
  const beforeB = originB.requests('/pkg/same.bin');
  const a = get(gw.url, `/v1/download?url=${encodeURIComponent(urlA)}`);
  await originA.waitForRequests('/pkg/same.bin', beforeA + 1, 5_000);
  const b = await get(gw.url, `/v1/download?url=${encodeURIComponent(urlB)}`);
  assert.is(b.status, 200, 'the honest URL failed with the tampered one');
  assert.is(b.body.toString(), SAME);
  assert.is(originB.requests('/pkg/same.bin') - beforeB, 1, 'the honest origin was not asked');
  const ra = await a;
  assert.is(ra.status, 409);
  assert.is(ra.body.length, 0);
  const mismatches = gw.stderr().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
    .filter((l) => l.msg === 'hash mismatch: refused to serve');
  assert.equal(mismatches.map((l) => l.url), [urlA], 'the mismatch log names another URL than the tampered one');
  originA.route('/pkg/same.bin', { body: SAME });
});

test.run();
