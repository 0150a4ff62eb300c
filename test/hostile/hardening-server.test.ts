/**
 * Attacks on the gateway's HTTP server, through real `vouch serve` processes
 * on 127.0.0.1 and real loopback origins (issue 14):
 *
 * - slow clients: bodies and headers trickled a byte at a time are cut after
 *   `clients.request_timeout` (408, or closed after an early 401), while the
 *   gateway keeps answering others; long downloads and pass-through streams
 *   (responses) are not cut; at most `clients.max_connections` connections
 *   are held, more are closed on arrival;
 * - climbs out of a pass route in the spellings origin servers honour
 *   (`;` path parameters, overlong UTF-8, full-width dots, dot segments with
 *   trailing spaces or extra dots) answer 400 and never reach the origin,
 *   while the spellings package managers send still do;
 * - a slow tampered origin for one URL does not fail a download of the same
 *   bytes from another URL;
 * - duplicate `Host` headers, and a Host with an invalid port, answer 400 on
 *   every path;
 * - an authority gateway on a read-only chain directory exits 2 with one
 *   line naming the directory.
 *
 * Every connection is to 127.0.0.1; every wait is bounded; processes,
 * sockets, mounts and files are cleaned up.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer, pattern } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { repoRoot } from '../helpers/vectors.ts';
import { vouch } from '../helpers/processes.ts';
import { resolveConfig } from '../../gateway/config.ts';
import { compileRoutes } from '../../gateway/routes/proxy-route-table.ts';
import { rawRequest, type RawAnswer, type RawOptions } from '../helpers/raw-http.ts';

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
const KEEP_ALIVE_S = 2;

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

type Answer = RawAnswer;

/** One request on its own connection (no keep-alive: connection counts stay exact), the path sent as given. */
function get(base: string, path: string, opts: RawOptions = {}): Promise<Answer> {
  return rawRequest(base, path, { ...opts, headers: { connection: 'close', ...opts.headers }, timeoutMs: 20_000 });
}

async function submit(base: string, url: string, name: string): Promise<void> {
  await submitEntry(base, token, { url, name, semver: '1.0.0', license: 'MIT' });
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
  socket.on('data', (d: string) => {
    got += d;
  });
  socket.on('error', () => {});
  const closed = new Promise<void>((r) =>
    socket.on('close', () => {
      closedAt = Date.now();
      r();
    }),
  );
  return { socket, opened, received: () => got, closedAfter: () => (closedAt === null ? null : closedAt - opened), closed };
}

/** Writes `text` on a fresh connection and resolves with all that came back once it closes (bounded). */
function rawExchange(base: string, text: string, timeoutMs = 5_000): Promise<string> {
  const c = rawClient(base);
  c.socket.write(text, 'latin1');
  const t = setTimeout(() => c.socket.destroy(), timeoutMs);
  return c.closed.then(() => {
    clearTimeout(t);
    return c.received();
  });
}

const statusOf = (answer: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Writes one byte every `everyMs` until the socket closes or `max` bytes went out. */
function trickle(c: RawClient, everyMs: number, byte = 'a', max = 10_000): void {
  let n = 0;
  const timer = setInterval(() => {
    if (c.socket.destroyed || c.socket.writableEnded || n++ >= max) {
      clearInterval(timer);
      return;
    }
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
  const mismatches = gw
    .stderr()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .filter((l) => l.msg === 'hash mismatch: refused to serve');
  assert.equal(
    mismatches.map((l) => l.url),
    [urlA],
    'the mismatch log names another URL than the tampered one',
  );
  originA.route('/pkg/same.bin', { body: SAME });
});

// ---------------------------------------------------------------------------
// Item 5: climbs out of a pass route

test('pass routes refuse every spelling of a climb out of the route, before the origin sees it', async () => {
  const attempts = [
    // `;` path parameters (Tomcat, Jetty, Spring: `..;` is `..`)
    '/pass/..;/secret',
    '/pass/a/..;/..;/secret',
    '/pass/%2e%2e;/secret',
    '/pass/.;/unsigned.bin',
    '/pass/..%3b/secret',
    '/pass/..%3B/secret',
    '/pass/a;b',
    '/pass/a%3bb',
    '/pass/a;jsessionid=1/x',
    // overlong UTF-8 for `.` and `/` (and invalid UTF-8 generally)
    '/pass/%c0%ae%c0%ae/secret',
    '/pass/%C0%AE%C0%AE/secret',
    '/pass/%e0%80%ae%e0%80%ae/secret',
    '/pass/%f0%80%80%ae%f0%80%80%ae/secret',
    '/pass/a%c0%afb',
    '/pass/%c0%2e%c0%2e/secret',
    '/pass/%c1%9c',
    '/pass/%ed%a0%80',
    '/pass/%f4%90%80%80',
    '/pass/%ff',
    '/pass/%e2%82',
    // full-width and other dots and slashes that Unicode normalization folds into ASCII
    '/pass/%ef%bc%8e%ef%bc%8e/secret',
    '/pass/%EF%BC%8E%EF%BC%8E/secret',
    '/pass/a%ef%bc%8fb',
    '/pass/a%ef%bc%bcb',
    '/pass/%e2%80%a5/secret',
    '/pass/%e2%80%a4%e2%80%a4/secret',
    '/pass/%ef%b9%92%ef%b9%92/secret',
    '/pass/%ef%bc%9b',
    // dot segments with trailing spaces or extra dots (Windows, IIS)
    '/pass/..%20/secret',
    '/pass/..%20%20/secret',
    '/pass/.%20/unsigned.bin',
    '/pass/%20../secret',
    '/pass/.../secret',
    '/pass/..../secret',
    '/pass/%2e%2e%2e/secret',
    '/pass/..%2e/secret',
    '/pass/.%20./secret',
    // other characters origins treat specially, encoded
    '/pass/a%3fb',
    '/pass/a%23b',
    '/pass/a%22b',
    '/pass/a%3cb',
    '/pass/a%7cb',
    '/pass/a%c2%85b',
    '/pass/a%e2%80%aeb',
    '/pass/a%c2%a0b',
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
  assert.is(
    originA.log.length,
    before,
    `the origin saw: ${originA.log
      .slice(before)
      .map((r) => r.path)
      .join(', ')}`,
  );
});

test('a route prefix must pass the same check', () => {
  const route = {
    host: null,
    origin: 'https://r.example/',
    canonical: null,
    kind: 'plain' as const,
    unendorsed: 'deny' as const,
    mode: 'enforce' as const,
    metadata_ttl: 60,
    metadata_max_stale: 60,
  };
  for (const prefix of ['/a;b/', '/..;/', '/a|b/', '/.../']) {
    assert.throws(() => compileRoutes([{ ...route, prefix }]), /prefix must not contain/, prefix);
  }
  assert.is(compileRoutes([{ ...route, prefix: '/@scope/x+y/' }]).length, 1);
});

test("the spellings package managers send still pass: scoped npm paths, pip's %2B, Go's !, queries, UTF-8 names", async () => {
  const ok = [
    '/pass/@acme/util/-/util-1.0.0.tgz',
    '/pass/leftpad/-/leftpad-1.0.0.tgz',
    '/pass/packages/ab/cd/x-1.0%2Blocal-py3-none-any.whl',
    '/pass/packages/x-1.0+local.tar.gz',
    '/pass/github.com/!azure/azure-sdk/@v/v1.0.0+incompatible.zip',
    '/pass/example.com/m/@v/v1.0.0.info',
    '/pass/a.tgz?x=../..;%2e%2e&y=%c0%ae',
    '/pass/release%20notes.txt',
    '/pass/Gr%C3%BC%C3%9Fe-%E4%B8%96%E7%95%8C.zip',
    "/pass/a~b_c.d-e!$&'()*+,=:@",
    '/pass/dir/',
    '/pass/1.0/..x/x..',
    '/pass/.well-known/x',
    '/pass/a..b',
  ];
  for (const path of ok) {
    const before = originA.log.length;
    const r = await get(gw.url, path);
    assert.is(r.status, 404, `${path}: ${r.status} (the origin answers 404 for what it does not have)`);
    assert.is(r.body.toString(), 'not found', path);
    assert.is(originA.log.length, before + 1, `${path} did not reach the origin`);
  }
});

// ---------------------------------------------------------------------------
// Item 8: duplicate Host headers, read-only chain directory

test('duplicate Host headers answer 400 on every path, and the connection is closed', async () => {
  const dl = `/v1/download?url=${encodeURIComponent(originA.url('/pkg/same.bin'))}`;
  const before = originA.log.length;
  for (const [path, method] of [
    ['/v1/authority', 'GET'],
    [dl, 'GET'],
    ['/v1/submit', 'POST'],
    ['/pass/unsigned.bin', 'GET'],
    ['/unsigned.bin', 'GET'],
    ['/nope', 'GET'],
    ['/healthz', 'GET'],
    ['/', 'GET'],
  ] as const) {
    for (const hosts of [
      ['127.0.0.1', 'evil.example'],
      ['registry.test', 'registry.test'],
      ['a', 'A'],
    ]) {
      const what = `${method} ${path} with Host ${hosts.join(' + ')}`;
      const head = `${method} ${path} HTTP/1.1\r\nHost: ${hosts[0]}\r\nX-Between: 1\r\nhost: ${hosts[1]}\r\n`;
      const answer = await rawExchange(gw.url, head + (method === 'POST' ? 'Content-Length: 2\r\n\r\n{}' : '\r\n'));
      assert.is(statusOf(answer), 400, `${what}: ${JSON.stringify(answer.slice(0, 120))}`);
      assert.match(answer, /\r\nconnection: close\r\n/i, what);
      const body = answer.slice(answer.indexOf('\r\n\r\n') + 4);
      const proxied = path.startsWith('/pass/') || (hosts[0] === 'registry.test' && !path.startsWith('/v1/') && path !== '/healthz');
      if (path === dl || proxied) assert.is(body, '', `${what}: a body`);
      else assert.is(JSON.parse(body).status, 'bad_request', what);
    }
  }
  assert.is(originA.log.length, before, 'a request with two Host headers reached the origin');
  // One Host is fine, in any case.
  assert.is(statusOf(await rawExchange(gw.url, 'GET /v1/authority HTTP/1.1\r\nhOsT: 127.0.0.1\r\nConnection: close\r\n\r\n')), 200);
});

test('a Host whose port is out of range, not a number or otherwise invalid answers 400 on every path (empty on byte and proxy paths), before any route', async () => {
  const dl = `/v1/download?url=${encodeURIComponent(originA.url('/pkg/same.bin'))}`;
  const before = originA.log.length;
  for (const [path, method] of [
    ['/v1/authority', 'GET'],
    [dl, 'GET'],
    ['/v1/submit', 'POST'],
    ['/pass/unsigned.bin', 'GET'],
    ['/unsigned.bin', 'GET'],
    ['/nope', 'GET'],
    ['/healthz', 'GET'],
    ['/tile/0/000', 'GET'],
  ] as const) {
    for (const host of [
      'registry.test:99999',
      'registry.test:65536',
      'registry.test:http',
      'registry.test:80:80',
      '127.0.0.1:1x',
      '[::1]:99999',
      'reg istry.test',
      'registry.test:0000099999',
    ]) {
      const what = `${method} ${path} with Host ${host}`;
      const answer = await rawExchange(
        gw.url,
        `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n` + (method === 'POST' ? 'Content-Length: 2\r\n\r\n{}' : '\r\n'),
      );
      assert.is(statusOf(answer), 400, `${what}: ${JSON.stringify(answer.slice(0, 120))}`);
      const body = answer.slice(answer.indexOf('\r\n\r\n') + 4);
      // The host route registry.test takes every path but the gateway's own (and the prefix route /pass/): empty-bodied there.
      const proxied =
        path.startsWith('/pass/') || (host.startsWith('registry.test') && !path.startsWith('/v1/') && path !== '/healthz' && !path.startsWith('/tile/'));
      if (path === dl || path.startsWith('/tile/') || proxied) assert.is(body, '', `${what}: a body`);
      else {
        assert.is(JSON.parse(body).status, 'bad_request', what);
        assert.match(JSON.parse(body).message, /Host header/, what);
      }
    }
  }
  assert.is(originA.log.length, before, 'a request with an invalid Host reached the origin');
  // Valid ports, an IPv6 literal, no port: served as before (the host route still matches its name).
  for (const host of ['127.0.0.1', '127.0.0.1:65535', '[::1]:8080', 'localhost:1']) {
    assert.is(statusOf(await rawExchange(gw.url, `GET /v1/authority HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`)), 200, host);
  }
  assert.is(
    statusOf(await rawExchange(gw.url, 'GET /same.bin HTTP/1.1\r\nHost: registry.test:8080\r\nConnection: close\r\n\r\n')),
    200,
    'the host route with a valid port',
  );
});

/**
 * Makes `dir` read-only for this test's gateway, as honestly as the machine
 * allows: a read-only bind mount in a private mount namespace (EROFS, as a
 * read-only volume gives; root ignores mode bits), else the immutable
 * attribute (EPERM), else (not root) mode 0555 (EACCES).
 */
function readOnlyRunner(dir: string): { how: string; command: (args: string[]) => [string, string[]]; undo: () => void } | null {
  const node = process.execPath;
  const cli = join(repoRoot, 'tools', 'vouch.js');
  if (process.getuid?.() !== 0) {
    spawnSync('chmod', ['0555', dir]);
    return {
      how: 'mode 0555',
      command: (args) => [node, [cli, ...args]],
      undo: () => {
        spawnSync('chmod', ['0755', dir]);
      },
    };
  }
  const script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"';
  const probe = spawnSync('unshare', ['-m', 'sh', '-c', script, 'sh', dir, 'sh', '-c', '! touch "$0/.probe" 2>/dev/null', dir], { timeout: 10_000 });
  if (probe.status === 0) {
    return { how: 'read-only bind mount', command: (args) => ['unshare', ['-m', 'sh', '-c', script, 'sh', dir, node, cli, ...args]], undo: () => {} };
  }
  if (spawnSync('chattr', ['+i', dir]).status === 0) {
    return {
      how: 'chattr +i',
      command: (args) => [node, [cli, ...args]],
      undo: () => {
        spawnSync('chattr', ['-i', dir]);
      },
    };
  }
  return null;
}

function runBounded(cmd: string, args: string[], timeoutMs: number): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

test('an authority gateway on a read-only chain directory exits 2 with one line naming the directory', async () => {
  const existing = join(work, 'ro-existing');
  mkdirSync(existing);
  const init = vouch(['init', '--chain', join(existing, 'chain'), '--key', keyFile, '--signer', 'harden']);
  assert.is(init.status, 0, init.stderr);
  const fresh = join(work, 'ro-fresh');
  mkdirSync(join(fresh, 'chain'), { recursive: true });
  for (const dir of [existing, fresh]) {
    const chain = join(dir, 'chain');
    const cfg = writeConfig(dir, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: chain },
      authority: { key_file: keyFile, signer: 'harden', submit_token_file: tokenFile },
    });
    const ro = readOnlyRunner(chain);
    if (ro === null) throw new Error('no way to make a directory read-only here (no mount namespace, no chattr, root)');
    try {
      const [cmd, args] = ro.command(['serve', '--config', cfg]);
      const r = await runBounded(cmd, args, 30_000);
      const what = `${dir === existing ? 'existing chain' : 'new chain'} (${ro.how})`;
      assert.is(r.status, 2, `${what}: exit ${r.status}\n${r.stdout}\n${r.stderr}`);
      const lines = r.stderr.split('\n').filter((l) => l !== '' && !l.startsWith('{'));
      assert.is(lines.length, 1, `${what}: ${JSON.stringify(lines)}`);
      assert.match(lines[0]!, new RegExp(`^vouch serve: chain\\.dir ${chain.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is not writable`), what);
      assert.not.match(lines[0]!, /internal error/, what);
      assert.not.match(r.stdout, /listening on|created a new chain/, `${what}: went on after finding it read-only`);
    } finally {
      ro.undo();
    }
  }
});

// ---------------------------------------------------------------------------
// Item 3: slow clients, long responses, the number of connections

test('clients: request_timeout 30 s, max_connections 4096 and keep_alive_timeout 65 s by default; checked like every key', () => {
  assert.equal(resolveConfig(null, '/x', null).clients, { request_timeout: 30, max_connections: 4096, keep_alive_timeout: 65 });
  assert.equal(resolveConfig({ clients: { request_timeout: 2.5 } }, '/x', null).clients, {
    request_timeout: 2.5,
    max_connections: 4096,
    keep_alive_timeout: 65,
  });
  assert.throws(() => resolveConfig({ clients: { keep_alive_timeout: 0 } }, '/x', null), /clients\.keep_alive_timeout must be from 0\.1/);
  assert.throws(() => resolveConfig({ clients: { request_timeout: 0 } }, '/x', null), /clients\.request_timeout must be from 0\.1/);
  assert.throws(() => resolveConfig({ clients: { max_connections: 1.5 } }, '/x', null), /clients\.max_connections must be an integer/);
  assert.throws(() => resolveConfig({ clients: { max_conections: 5 } }, '/x', null), /clients\.max_conections is not a known key/);
});

async function startTight(): Promise<GatewayProcess> {
  if (tight !== null) return tight;
  const dir = join(work, 'tight');
  tight = await startGatewayProcess([
    '--config',
    writeConfig(dir, {
      ...baseConfig(dir),
      clients: { request_timeout: REQUEST_TIMEOUT_S, max_connections: MAX_CONNECTIONS, keep_alive_timeout: KEEP_ALIVE_S },
    }),
  ]);
  return tight;
}

/** Sends a GET on an open connection and resolves once the connection has received `answers` answers in all. */
async function getOn(c: RawClient, path: string, answers: number): Promise<void> {
  c.socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  const until = Date.now() + 5_000;
  while ((c.received().match(/HTTP\/1\.1 \d{3}/g)?.length ?? 0) < answers && c.closedAfter() === null && Date.now() < until) await sleep(20);
}

test("an idle keep-alive connection is kept clients.keep_alive_timeout (65 s by default, past node's 5 s), announced, then closed", async () => {
  // A client's pool reuses a connection it last used seconds ago (npm after resolving a large tree): a close
  // racing that reuse is a reset request. Kept past node's 5 s default, the reuse is answered.
  const c = rawClient(gw.url);
  await getOn(c, '/healthz', 1);
  assert.is(statusOf(c.received()), 200);
  assert.match(c.received(), /\r\nKeep-Alive: timeout=65\r\n/i);
  await sleep(6_000);
  assert.is(c.closedAfter(), null, 'the idle connection was closed within 6 s');
  await getOn(c, '/healthz', 2);
  assert.is(c.received().match(/HTTP\/1\.1 200/g)?.length, 2, JSON.stringify(c.received().slice(-200)));
  c.socket.destroy();
  // A shorter configured bound closes an idle connection after it.
  const g = await startTight();
  const t = rawClient(g.url);
  await getOn(t, '/healthz', 1);
  assert.match(t.received(), new RegExp(`\\r\\nKeep-Alive: timeout=${KEEP_ALIVE_S}\\r\\n`, 'i'));
  const answeredAt = Date.now() - t.opened;
  await Promise.race([t.closed, sleep(KEEP_ALIVE_S * 1000 + 3_000)]);
  const closedAfter = t.closedAfter();
  t.socket.destroy();
  assert.ok(closedAfter !== null, `an idle connection outlived keep_alive_timeout ${KEEP_ALIVE_S} s by 3 s`);
  assert.ok(closedAfter - answeredAt >= KEEP_ALIVE_S * 1000 - 100, `closed ${closedAfter - answeredAt} ms after its answer`);
});

test('slow bodies and headers are cut after clients.request_timeout, also after an early 401; others are answered throughout', async () => {
  const g = await startTight();
  const bound = REQUEST_TIMEOUT_S * 1000;
  const submitHead = (auth: boolean) =>
    'POST /v1/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
    `${auth ? `Authorization: Bearer ${token}\r\n` : ''}Content-Length: 100000\r\n\r\n{`;
  const authed = Array.from({ length: 8 }, () => rawClient(g.url));
  const unauthed = Array.from({ length: 8 }, () => rawClient(g.url));
  const proxied = Array.from({ length: 4 }, () => rawClient(g.url));
  const slowHeaders = Array.from({ length: 4 }, () => rawClient(g.url));
  const silent = Array.from({ length: 4 }, () => rawClient(g.url));
  for (const c of authed) {
    c.socket.write(submitHead(true));
    trickle(c, 300, ' ');
  }
  for (const c of unauthed) {
    c.socket.write(submitHead(false));
    trickle(c, 300, ' ');
  }
  for (const c of proxied) {
    c.socket.write('GET /pass/unsigned.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n');
    trickle(c, 300);
  }
  for (const c of slowHeaders) {
    c.socket.write('GET /v1/authority HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
    trickle(c, 300);
  }
  const slow = [...authed, ...unauthed, ...proxied, ...slowHeaders, ...silent];
  // Others are answered promptly while the slow ones hold their connections.
  const until = Date.now() + bound + 2_500;
  let answered = 0;
  while (slow.some((c) => c.closedAfter() === null) && Date.now() < until) {
    const t = Date.now();
    const r = await get(g.url, '/v1/authority');
    assert.is(r.status, 200);
    assert.ok(Date.now() - t < 1_000, `a normal request took ${Date.now() - t} ms`);
    answered++;
    await sleep(200);
  }
  assert.ok(answered >= 3, `only ${answered} normal requests ran`);
  for (const c of slow) c.socket.destroy(); // those still open fail below
  const still = slow.filter((c) => c.closedAfter() === null || c.closedAfter()! > bound + 2_500);
  assert.is(still.length, 0, `${still.length} of ${slow.length} slow connections outlived the ${bound} ms bound`);
  for (const c of authed) {
    assert.is(statusOf(c.received()), 408, `authed slow body: ${JSON.stringify(c.received().slice(0, 80))}`);
    assert.is(JSON.parse(c.received().slice(c.received().indexOf('\r\n\r\n') + 4)).success, false);
  }
  for (const c of unauthed) {
    assert.is(statusOf(c.received()), 401, JSON.stringify(c.received().slice(0, 80)));
    assert.is(c.received().match(/HTTP\/1\.1 \d{3}/g)!.length, 1, `a second answer after the 401: ${JSON.stringify(c.received())}`);
  }
  for (const c of proxied) assert.is(c.received().match(/HTTP\/1\.1 \d{3}/g)?.length ?? 0, 1, `proxied: ${JSON.stringify(c.received().slice(0, 200))}`);
  for (const c of slowHeaders) assert.is(statusOf(c.received()), 408, JSON.stringify(c.received().slice(0, 80)));
  assert.is((await get(g.url, '/v1/authority')).status, 200);
  assert.is(g.child.exitCode, null);
});

test('long downloads and pass-through streams (responses) are not cut by the request timeout', async () => {
  const g = await startTight();
  const url = originA.url('/pkg/slow.bin');
  await submit(g.url, url, 'acme/slow'); // the submit's own fetch takes over 3 s too
  const t = Date.now();
  const dl = await get(g.url, `/v1/download?url=${encodeURIComponent(url)}`);
  assert.is(dl.status, 200);
  assert.is(dl.body.length, SLOW_BODY.size);
  const pass = await get(g.url, '/pass/stream.bin');
  assert.is(pass.status, 200);
  assert.is(pass.body.length, SLOW_BODY.size);
  assert.ok(Date.now() - t > 2 * REQUEST_TIMEOUT_S * 1000, `the slow origin was fast (${Date.now() - t} ms): nothing was tested`);
});

test('at most clients.max_connections connections are held; more are closed on arrival, and served again once slots free', async () => {
  const g = await startTight();
  await sleep(300); // connections of earlier tests are gone
  const held = Array.from({ length: MAX_CONNECTIONS }, () => rawClient(g.url));
  await sleep(300);
  const extra = Array.from({ length: 5 }, () => rawClient(g.url));
  await Promise.race([Promise.all(extra.map((c) => c.closed)), sleep(1_500)]);
  const dropped = extra.filter((c) => c.closedAfter() !== null && c.received() === '');
  assert.is(dropped.length, 5, `${dropped.length} of 5 connections over the bound were closed`);
  assert.is(held.filter((c) => c.closedAfter() !== null).length, 0, 'a held connection was closed early');
  // The held connections send nothing: cut by the header bound, then there is room again.
  await Promise.race([Promise.all(held.map((c) => c.closed)), sleep(REQUEST_TIMEOUT_S * 1000 + 3_000)]);
  assert.is(held.filter((c) => c.closedAfter() === null).length, 0, 'idle connections were not cut');
  assert.is((await get(g.url, '/v1/authority')).status, 200);
  assert.match(g.stderr(), /clients\.max_connections/);
  for (const c of [...held, ...extra]) c.socket.destroy();
});

test.run();
