/**
 * Attacks on the gateway's HTTP server, through real `vouch serve` processes
 * on 127.0.0.1 and real loopback origins (issue 14):
 *
 * - climbs out of a pass route in the spellings origin servers honour
 *   (`;` path parameters, overlong UTF-8, full-width dots, dot segments with
 *   trailing spaces or extra dots) answer 400 and never reach the origin,
 *   while the spellings package managers send still do;
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

// ---------------------------------------------------------------------------
// Item 5: climbs out of a pass route

test('pass routes refuse every spelling of a climb out of the route, before the origin sees it', async () => {
  const attempts = [
    // `;` path parameters (Tomcat, Jetty, Spring: `..;` is `..`)
    '/pass/..;/secret', '/pass/a/..;/..;/secret', '/pass/%2e%2e;/secret', '/pass/.;/unsigned.bin', '/pass/..%3b/secret',
    '/pass/..%3B/secret', '/pass/a;b', '/pass/a%3bb', '/pass/a;jsessionid=1/x',
    // overlong UTF-8 for `.` and `/` (and invalid UTF-8 generally)
    '/pass/%c0%ae%c0%ae/secret', '/pass/%C0%AE%C0%AE/secret', '/pass/%e0%80%ae%e0%80%ae/secret', '/pass/%f0%80%80%ae%f0%80%80%ae/secret',
    '/pass/a%c0%afb', '/pass/%c0%2e%c0%2e/secret', '/pass/%c1%9c', '/pass/%ed%a0%80', '/pass/%f4%90%80%80', '/pass/%ff', '/pass/%e2%82',
    // full-width and other dots and slashes that Unicode normalization folds into ASCII
    '/pass/%ef%bc%8e%ef%bc%8e/secret', '/pass/%EF%BC%8E%EF%BC%8E/secret', '/pass/a%ef%bc%8fb', '/pass/a%ef%bc%bcb',
    '/pass/%e2%80%a5/secret', '/pass/%e2%80%a4%e2%80%a4/secret', '/pass/%ef%b9%92%ef%b9%92/secret', '/pass/%ef%bc%9b',
    // dot segments with trailing spaces or extra dots (Windows, IIS)
    '/pass/..%20/secret', '/pass/..%20%20/secret', '/pass/.%20/unsigned.bin', '/pass/%20../secret', '/pass/.../secret',
    '/pass/..../secret', '/pass/%2e%2e%2e/secret', '/pass/..%2e/secret', '/pass/.%20./secret',
    // other characters origins treat specially, encoded
    '/pass/a%3fb', '/pass/a%23b', '/pass/a%22b', '/pass/a%3cb', '/pass/a%7cb', '/pass/a%c2%85b', '/pass/a%e2%80%aeb', '/pass/a%c2%a0b',
  ];
  const before = originA.log.length;
  for (const path of attempts) {
    const r = await get(gw.url, path);
    assert.is(r.status, 400, `${path}: ${r.status}`);
    assert.is(r.body.length, 0, `${path}: a body`);
    const h = await get(gw.url, path.slice('/pass'.length), { host: 'registry.test' });
    assert.is(h.status, 400, `host route ${path}: ${h.status}`);
  }
  for (const line of ['GET /pass/a|b HTTP/1.1', 'GET /pass/a^b HTTP/1.1', 'GET /pass/a\u00e9b HTTP/1.1']) {
    const answer = await rawExchange(gw.url, `${line}\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    assert.is(statusOf(answer), 400, JSON.stringify(line));
  }
  assert.is(originA.log.length, before, `the origin saw: ${originA.log.slice(before).map((r) => r.path).join(', ')}`);
});

test('a route prefix must pass the same check', () => {
  const route = { host: null, origin: 'https://r.example/', canonical: null, kind: 'plain' as const, unendorsed: 'deny' as const, mode: 'enforce' as const, metadata_ttl: 60, metadata_max_stale: 60 };
  for (const prefix of ['/a;b/', '/..;/', '/a|b/', '/.../']) {
    assert.throws(() => compileRoutes([{ ...route, prefix }]), /prefix must not contain/, prefix);
  }
  assert.is(compileRoutes([{ ...route, prefix: '/@scope/x+y/' }]).length, 1);
});

test('the spellings package managers send still pass: scoped npm paths, pip\'s %2B, Go\'s !, queries, UTF-8 names', async () => {
  const ok = [
    '/pass/@acme/util/-/util-1.0.0.tgz', '/pass/leftpad/-/leftpad-1.0.0.tgz',
    '/pass/packages/ab/cd/x-1.0%2Blocal-py3-none-any.whl', '/pass/packages/x-1.0+local.tar.gz',
    '/pass/github.com/!azure/azure-sdk/@v/v1.0.0+incompatible.zip', '/pass/example.com/m/@v/v1.0.0.info',
    '/pass/a.tgz?x=../..;%2e%2e&y=%c0%ae', '/pass/release%20notes.txt', '/pass/Gr%C3%BC%C3%9Fe-%E4%B8%96%E7%95%8C.zip',
    '/pass/a~b_c.d-e!$&\'()*+,=:@', '/pass/dir/', '/pass/1.0/..x/x..', '/pass/.well-known/x', '/pass/a..b',
  ];
  for (const path of ok) {
    const before = originA.log.length;
    const r = await get(gw.url, path);
    assert.is(r.status, 404, `${path}: ${r.status} (the origin answers 404 for what it does not have)`);
    assert.is(r.body.toString(), 'not found', path);
    assert.is(originA.log.length, before + 1, `${path} did not reach the origin`);
  }
});

test.run();
