/**
 * Proxy routes (docs/spec/design.md §3.6) through a real `vouch serve` process with
 * `proxy.routes` in its configuration and a real loopback origin: verified
 * bytes with UNS and the origin's headers (from the origin, the memory tier
 * and, after a restart, the disk tier), enforce and audit on a tampered and
 * a revoked artifact, deny and pass for unendorsed URLs (pass streams, passes
 * status and headers, and a client that leaves cancels the origin request),
 * every path-escape form refused with 400 before the origin sees anything,
 * Host routes, longest prefix, and the gateway's own /v1 paths first.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildCheckpoint, buildRevokeBlock, type Block } from '../../chain/index.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { createKeyFile, readKeyFile } from '../../platform/key-file.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { OriginServer, digestOf, pattern } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouchAsync } from '../helpers/processes.ts';
import { rawRequest, type RawAnswer } from '../helpers/raw-http.ts';
import { chainFile } from '../helpers/chain-files.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-proxy-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'proxy-token-' + 'x'.repeat(32);
const chainDir = join(work, 'chain');
let origin: OriginServer;
let gw: GatewayProcess;
let O = ''; // the origin, http://127.0.0.1:port

const LIB = Buffer.from('lib 1.0.0 tarball bytes \u0000\u00ff\n', 'latin1');
const LIB_HEADERS = {
  'content-disposition': 'attachment; filename="lib-1.0.0.tgz"',
  'last-modified': 'Wed, 21 Oct 2015 07:28:00 GMT',
  'cache-control': 'public, max-age=300',
  'x-origin-only': 'not kept',
  'set-cookie': 'session=origin',
};
const GOOD = 'good bytes of tampered.tgz';
const REVOKED = 'bytes of revoked.tgz';
const UNSIGNED = 'an unendorsed file, passed through';
const idx: Record<string, number> = {};

function config() {
  return {
    listen: { host: '127.0.0.1', port: 0 },
    service_name: 'vouch-test',
    chain: { dir: chainDir },
    authority: { key_file: keyFile, signer: 'test-authority', submit_token_file: tokenFile },
    origin: { allow_private: true, timeout: 3 },
    mirror: { memory_bytes: 8 * 1024 * 1024, disk_dir: join(work, 'mirror') },
    proxy: {
      routes: [
        { prefix: '/enforce/', origin: `${O}/pkg/`, unendorsed: 'deny' },
        { prefix: '/pass/', origin: `${O}/pkg`, unendorsed: 'pass' },
        { prefix: '/pass/deep/', origin: `${O}/other/`, unendorsed: 'deny' },
        { prefix: '/audit/', origin: `${O}/pkg/`, unendorsed: 'deny', mode: 'audit' },
        { host: 'registry.test', origin: `${O}/pkg/`, unendorsed: 'deny' },
        { host: 'pinned.test:8443', origin: `${O}/pkg/`, unendorsed: 'pass' },
      ],
    },
  };
}

type Answer = RawAnswer;

/** A request with the path sent exactly as given (no URL normalization) and an optional Host. */
function raw(path: string, opts: { method?: string; host?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  return rawRequest(gw.url, path, opts);
}

/** Bytes written on a plain socket (for request lines an HTTP client refuses to send); the status code answered. */
function rawSocket(text: string): Promise<number> {
  const u = new URL(gw.url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname);
    let got = '';
    s.setEncoding('latin1');
    s.on('data', (d: string) => {
      got += d;
    });
    s.on('error', reject);
    s.on('close', () => {
      const m = /^HTTP\/1\.1 (\d{3})/.exec(got);
      if (m === null) reject(new Error(`no HTTP answer: ${JSON.stringify(got.slice(0, 200))}`));
      else resolve(Number(m[1]));
    });
    s.write(text, 'latin1');
  });
}

async function submit(url: string, name: string): Promise<number> {
  return (await submitEntry(gw.url, token, { url, name, semver: '1.0.0', license: 'MIT' })).index;
}

const storedBlock = (i: number): Block => JSON.parse(chainFile(chainDir, `blocks/000/000/${String(i).padStart(9, '0')}.json`));

function expectEmpty(r: Answer, status: number, what = '') {
  assert.is(r.status, status, `${what}: status ${r.status}`);
  assert.is(r.body.length, 0, `${what}: status ${status} had a body`);
}

function expectVerified(r: Answer, body: Buffer | string, block: number, what = '') {
  assert.is(r.status, 200, what);
  assert.ok(r.body.equals(Buffer.isBuffer(body) ? body : Buffer.from(body)), `${what}: other bytes`);
  const stored = storedBlock(block);
  assert.equal(JSON.parse(String(r.headers['uns'])), { 'vouch-test': { endorsement: stored } }, what);
  assert.is(r.headers['etag'], `"${stored.payload.endorsements[0]!.artifact_hash}"`);
  assert.is(r.headers['x-content-type-options'], 'nosniff');
  assert.is(r.headers['content-security-policy'], 'sandbox');
  assert.ok(r.headers['vibecode'], 'no VIBECODE header');
}

function expectLibHeaders(r: Answer, what: string) {
  assert.is(r.headers['content-type'], 'application/gzip', what);
  assert.is(r.headers['content-disposition'], LIB_HEADERS['content-disposition'], what);
  assert.is(r.headers['last-modified'], LIB_HEADERS['last-modified'], what);
  assert.is(r.headers['cache-control'], LIB_HEADERS['cache-control'], what);
  // Only the kept, client-independent headers travel with verified bytes.
  assert.is(r.headers['x-origin-only'], undefined, what);
  assert.is(r.headers['set-cookie'], undefined, what);
}

/** The gateway's JSON log lines with this message. */
function logLines(msg: string): Array<Record<string, any>> {
  return gw
    .stderr()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .filter((l) => l.msg === msg);
}

test.before(async () => {
  createKeyFile(keyFile);
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  O = origin.origin;
  origin.route('/pkg/lib-1.0.0.tgz', { body: LIB, contentType: 'application/gzip', headers: LIB_HEADERS });
  origin.route('/pkg/tampered.tgz', { body: GOOD, contentType: 'application/x-tar' });
  origin.route('/pkg/revoked.tgz', { body: REVOKED });
  origin.route('/pkg/unsigned.bin', {
    body: UNSIGNED,
    contentType: 'text/x-unsigned',
    headers: { 'x-origin': 'yes', 'set-cookie': 'pass=through', 'keep-alive': 'timeout=5', connection: 'x-hop', 'x-hop': 'dropped' },
  });
  origin.route('/pkg/moved', { redirect: '/pkg/unsigned.bin', status: 301 });
  origin.route('/pkg/stream.bin', { body: pattern(8 * 1024 * 1024, 5), trickle: { bytes: 64 * 1024, everyMs: 20 } });
  gw = await startGatewayProcess(['--config', writeConfig(work, config())]);
  idx.lib = await submit(`${O}/pkg/lib-1.0.0.tgz`, 'acme/lib');
  idx.tampered = await submit(`${O}/pkg/tampered.tgz`, 'acme/tampered');
  idx.revoked = await submit(`${O}/pkg/revoked.tgz`, 'acme/revoked');
  idx.query = await submit(`${O}/pkg/lib-1.0.0.tgz?v=1`, 'acme/lib-query');
  origin.route('/pkg/tampered.tgz', { body: GOOD, contentType: 'application/x-tar', tamper: true });
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

test('endorsed through a prefix route: verified bytes, UNS and the origin headers, from the origin and then the mirror', async () => {
  const before = origin.requests('/pkg/lib-1.0.0.tgz');
  const first = await raw('/enforce/lib-1.0.0.tgz');
  expectVerified(first, LIB, idx.lib!, 'first');
  expectLibHeaders(first, 'first (origin)');
  assert.is(first.headers['content-length'], String(LIB.length));
  assert.is(origin.requests('/pkg/lib-1.0.0.tgz') - before, 1);
  const second = await raw('/enforce/lib-1.0.0.tgz');
  expectVerified(second, LIB, idx.lib!, 'second');
  expectLibHeaders(second, 'second (mirror hit)');
  assert.is(origin.requests('/pkg/lib-1.0.0.tgz') - before, 1, 'the second request went to the origin');
  // HEAD, If-None-Match, and the same URL through the pass route (endorsed: verified, not passed).
  const head = await raw('/enforce/lib-1.0.0.tgz', { method: 'HEAD' });
  assert.is(head.status, 200);
  assert.is(head.body.length, 0);
  assert.is(head.headers['content-length'], String(LIB.length));
  assert.is(head.headers['content-disposition'], LIB_HEADERS['content-disposition']);
  expectEmpty(await raw('/enforce/lib-1.0.0.tgz', { headers: { 'if-none-match': String(first.headers['etag']) } }), 304);
  const viaPass = await raw('/pass/lib-1.0.0.tgz');
  expectVerified(viaPass, LIB, idx.lib!, 'pass route, endorsed');
  expectLibHeaders(viaPass, 'pass route, endorsed');
  assert.is(origin.requests('/pkg/lib-1.0.0.tgz') - before, 1);
});

test('the query string is part of the artifact URL, exactly', async () => {
  const q = await raw('/enforce/lib-1.0.0.tgz?v=1');
  expectVerified(q, LIB, idx.query!, '?v=1');
  assert.is(storedBlock(idx.query!).payload.endorsements[0]!.artifact_url, `${O}/pkg/lib-1.0.0.tgz?v=1`);
  expectEmpty(await raw('/enforce/lib-1.0.0.tgz?v=2'), 404, '?v=2 is not endorsed');
  expectEmpty(await raw('/enforce/lib-1.0.0.tgz?'), 404, 'a bare ? is another URL');
});

test('tampered: 409 and empty on an enforce route; served, counted and logged on an audit route', async () => {
  const before = origin.requests('/pkg/tampered.tgz');
  expectEmpty(await raw('/enforce/tampered.tgz'), 409, 'enforce');
  expectEmpty(await raw('/enforce/tampered.tgz', { method: 'HEAD' }), 409, 'enforce HEAD');
  const refused = logLines('proxy: hash mismatch: refused to serve');
  assert.is(refused.length, 2);
  assert.is(refused[0]!.url, `${O}/pkg/tampered.tgz`);

  const tampered = Buffer.from(GOOD);
  tampered[0] = tampered[0]! ^ 0xff;
  const a1 = await raw('/audit/tampered.tgz');
  assert.is(a1.status, 200);
  assert.ok(a1.body.equals(tampered), "audit did not serve the origin's bytes");
  assert.is(a1.headers['x-vouch-audit'], 'mismatch');
  assert.is(a1.headers['content-type'], 'application/x-tar');
  assert.is(a1.headers['uns'], undefined, 'unverified bytes carried a UNS header');
  const a2 = await raw('/audit/tampered.tgz');
  assert.ok(a2.body.equals(tampered));
  const lines = logLines("proxy audit: hash mismatch; serving the origin's bytes");
  assert.is(lines.length, 2);
  const expected = storedBlock(idx.tampered!).payload.endorsements[0]!.artifact_hash;
  assert.equal(
    { url: lines[1]!.url, expected: lines[1]!.expected, actual: lines[1]!.actual, count: lines[1]!.audit_mismatches, route: lines[1]!.route },
    { url: `${O}/pkg/tampered.tgz`, expected, actual: digestOf(tampered), count: 2, route: 'prefix /audit/' },
  );
  // Mismatching bytes are never cached: every request went to the origin (audit: twice each).
  assert.is(origin.requests('/pkg/tampered.tgz') - before, 2 + 2 * 2);
  // Audit with matching bytes is the verified answer.
  const ok = await raw('/audit/lib-1.0.0.tgz');
  expectVerified(ok, LIB, idx.lib!, 'audit, matching');
  assert.is(ok.headers['x-vouch-audit'], undefined);
  expectEmpty(await raw('/audit/unsigned.bin'), 404, 'audit route, unendorsed, deny');
});

test('unendorsed on a deny route: 404 with an empty body; the origin is not asked', async () => {
  const before = origin.log.length;
  expectEmpty(await raw('/enforce/unsigned.bin'), 404);
  expectEmpty(await raw('/enforce/unsigned.bin', { method: 'HEAD' }), 404);
  expectEmpty(await raw('/enforce/'), 404);
  // Longest prefix: /pass/deep/ is a deny route inside the pass route.
  expectEmpty(await raw('/pass/deep/unsigned.bin'), 404);
  assert.is(origin.log.length, before);
});

test("unendorsed on a pass route: the origin's status, headers and bytes, minus hop-by-hop headers", async () => {
  const r = await raw('/pass/unsigned.bin');
  assert.is(r.status, 200);
  assert.is(r.body.toString(), UNSIGNED);
  assert.is(r.headers['content-type'], 'text/x-unsigned');
  assert.is(r.headers['content-length'], String(UNSIGNED.length));
  assert.is(r.headers['x-origin'], 'yes');
  assert.equal(r.headers['set-cookie'], ['pass=through']);
  assert.is(r.headers['x-hop'], undefined, 'a header named in Connection was passed');
  assert.is(r.headers['keep-alive'], undefined);
  assert.is(r.headers['uns'], undefined);
  const head = await raw('/pass/unsigned.bin', { method: 'HEAD' });
  assert.is(head.status, 200);
  assert.is(head.body.length, 0);
  assert.is(head.headers['content-length'], String(UNSIGNED.length));
  // Origin statuses pass as they are; a Location under the origin becomes the gateway's path.
  const missing = await raw('/pass/missing.bin');
  assert.is(missing.status, 404);
  assert.is(missing.body.toString(), 'not found');
  assert.is(missing.headers['content-type'], 'text/plain');
  const moved = await raw('/pass/moved');
  assert.is(moved.status, 301);
  assert.is(moved.headers['location'], '/pass/unsigned.bin');
  // /pass/deepx is not under /pass/deep/: it passes.
  assert.is((await raw('/pass/deepx')).status, 404);
  assert.is(origin.requests('/pkg/deepx'), 1);
  // Request headers reach the origin (not the hop-by-hop ones); only GET and HEAD.
  await raw('/pass/unsigned.bin', { headers: { 'x-client': 'c1', connection: 'x-secret', 'x-secret': 's' } });
  const rec = origin.records('/pkg/unsigned.bin').at(-1)!;
  assert.is(rec.headers['x-client'], 'c1');
  assert.is(rec.headers['x-secret'], undefined);
  assert.is(rec.headers['host'], `127.0.0.1:${origin.port}`);
  const post = await raw('/pass/unsigned.bin', { method: 'POST' });
  expectEmpty(post, 405, 'POST');
  assert.is(post.headers['allow'], 'GET, HEAD');
  assert.is(origin.records('/pkg/unsigned.bin').filter((x) => x.method !== 'GET' && x.method !== 'HEAD').length, 0);
});

test('pass-through streams, and a client that leaves mid-stream cancels the origin request', async () => {
  const before = origin.clientCloses('/pkg/stream.bin');
  const firstChunk = await new Promise<number>((resolve, reject) => {
    const u = new URL(gw.url);
    const req = httpRequest({ host: u.hostname, port: u.port, path: '/pass/stream.bin', agent: false });
    req.on('response', (res) => {
      assert.is(res.statusCode, 200);
      assert.is(res.headers['content-length'], String(8 * 1024 * 1024));
      res.once('data', (c: Buffer) => {
        resolve(c.length);
        req.destroy();
      });
    });
    req.on('error', () => {});
    setTimeout(() => reject(new Error('no first chunk')), 5_000);
    req.end();
  });
  assert.ok(firstChunk > 0);
  await origin.waitForClientClose('/pkg/stream.bin', before + 1, 5_000);
  const rec = origin.records('/pkg/stream.bin').at(-1)!;
  assert.ok(rec.bytesSent < 8 * 1024 * 1024, 'the origin sent everything');
});

test('targets that would escape the route answer 400 and never reach the origin', async () => {
  const attempts = [
    '/pass/../secret',
    '/pass/a/../../secret',
    '/pass/..',
    '/pass/./unsigned.bin',
    '/pass/%2e%2e/secret',
    '/pass/%2E%2E/secret',
    '/pass/.%2e/secret',
    '/pass/%2e./secret',
    '/pass/%2e/unsigned.bin',
    '/pass/a%2fb',
    '/pass/..%2fsecret',
    '/pass/a%2F..%2F..%2Fsecret',
    '/pass/a%5cb',
    '/pass/..%5Csecret',
    '/pass/a\\b',
    '/pass/..\\secret',
    '/pass/\\\\evil.example/x',
    '/pass//evil.example/x',
    '/pass/a//b',
    '/pass/http://evil.example/x',
    '/pass/https:%2f%2fevil.example/x',
    '/pass/http:evil.example',
    '/pass/a%00b',
    '/pass/%00',
    '/pass/a%0d%0aX-Injected:%201',
    '/pass/a%7f',
    '/pass/a%1fb',
    '/pass/%zz',
    '/pass/a%2',
    '/pass/a%',
    '/pass/%252e%252e/secret',
    '/pass/a%252fb',
    '/pass/a#b',
    '/enforce/../pass/unsigned.bin',
    '/enforce/%2e%2e/unsigned.bin',
  ];
  const before = origin.log.length;
  for (const path of attempts) expectEmpty(await raw(path), 400, path);
  for (const path of ['//evil.example/x', '/../x', '/%2e%2e/x', '/a%2fb', '/http://evil.example/']) {
    expectEmpty(await raw(path, { host: 'pinned.test:8443' }), 400, `host route ${path}`);
  }
  // Raw control characters in the request line, and absolute-form targets under a route.
  for (const line of [
    'GET /pass/a\u0001b HTTP/1.1',
    'GET /pass/a\u007fb HTTP/1.1',
    'GET /pass/a\tb HTTP/1.1',
    `GET http://evil.example/pass/unsigned.bin HTTP/1.1`,
    `GET http://pinned.test:8443/unsigned.bin HTTP/1.1`,
  ]) {
    assert.is(await rawSocket(`${line}\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`), 400, JSON.stringify(line));
  }
  assert.is(await rawSocket('GET http://evil.example/elsewhere HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'), 404);
  assert.is(
    origin.log.length,
    before,
    `the origin saw: ${origin.log
      .slice(before)
      .map((r) => r.path)
      .join(', ')}`,
  );
});

test('Host routes: case-insensitive, port-aware; a wrong Host falls through to 404 JSON; /v1 paths first', async () => {
  expectVerified(await raw('/lib-1.0.0.tgz', { host: 'registry.test' }), LIB, idx.lib!, 'registry.test');
  expectVerified(await raw('/lib-1.0.0.tgz', { host: 'REGISTRY.Test:9999' }), LIB, idx.lib!, 'no port configured: any port');
  expectEmpty(await raw('/unsigned.bin', { host: 'registry.test' }), 404, 'host route, deny');
  // Host routes come before prefix routes: this is registry.test's /enforce/... (not endorsed).
  expectEmpty(await raw('/enforce/lib-1.0.0.tgz', { host: 'registry.test' }), 404, 'host first');
  const pinned = await raw('/unsigned.bin', { host: 'pinned.test:8443' });
  assert.is(pinned.status, 200);
  assert.is(pinned.body.toString(), UNSIGNED);
  for (const host of ['pinned.test', 'pinned.test:9999', 'other.test', 'registry.test.evil']) {
    const r = await raw('/unsigned.bin', { host });
    assert.is(r.status, 404, host);
    const j = JSON.parse(r.body.toString());
    assert.equal([j.success, j.status], [false, 'not_found'], host);
  }
  const api = await raw('/v1/authority', { host: 'registry.test' });
  assert.is(api.status, 200);
  assert.is(JSON.parse(api.body.toString()).index, 0);
});

test("the gateway's own paths keep working; unrouted paths are 404 JSON", async () => {
  const dl = await raw(`/v1/download?url=${encodeURIComponent(`${O}/pkg/lib-1.0.0.tgz`)}`);
  expectVerified(dl, LIB, idx.lib!, '/v1/download');
  const lookup = await raw(`/v1/endorsement?url=${encodeURIComponent(`${O}/pkg/tampered.tgz`)}`);
  assert.is(lookup.status, 200);
  assert.is(JSON.parse(lookup.body.toString()).index, idx.tampered);
  for (const path of ['/enforce', '/nope/lib-1.0.0.tgz', '/v1/nothing']) {
    const r = await raw(path);
    assert.is(r.status, 404, path);
    assert.is(JSON.parse(r.body.toString()).status, 'not_found', path);
  }
});

test('a route the gateway cannot serve safely stops the start with a message naming it', async () => {
  for (const [route, message] of [
    [{ prefix: '/v1/x/', origin: `${O}/` }, /proxy\.routes\[0\]\.prefix must not be under \/v1\//],
    [{ prefix: '/a/', origin: `${O}/?x=1` }, /proxy\.routes\[0\]\.origin must not have a query/],
    [{ prefix: '/a/%2e/', origin: `${O}/` }, /proxy\.routes\[0\]\.prefix must not contain/],
  ] as const) {
    const cfg = writeConfig(join(work, 'bad'), { ...config(), chain: { dir: join(work, 'bad', 'chain') }, mirror: {}, proxy: { routes: [route] } });
    const r = await vouchAsync(['serve', '--config', cfg], {}, 30_000);
    assert.is(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
  }
});

test('after a restart: 503 until ready, a revoked version is 410 (enforce) or served and counted (audit), disk hits keep the headers', async () => {
  assert.is(await gw.stop(), 0);
  const repo = await ChainRepo.open(chainDir);
  const signer = nodeSigner('test-authority', readKeyFile(keyFile));
  const head = JSON.parse(repo.readBlockFile(repo.size - 1)) as Block;
  const revoke = buildRevokeBlock({ prev: head, target: storedBlock(idx.revoked!), signer, backend: nodeBackend, now: Date.now() });
  await appendSigned(repo, [revoke], buildCheckpoint({ head: revoke, signer, now: Date.now() }), Date.now());
  gw = await startGatewayProcess(['--config', join(work, 'vouch.yaml')], { env: { VOUCH_TEST_READY_DELAY_MS: '1000' }, waitFor: /listening on/ });
  expectEmpty(await raw('/enforce/lib-1.0.0.tgz'), 503, 'not ready');
  const until = Date.now() + 30_000;
  while (!/^ready: /m.test(gw.stdout()) && Date.now() < until) await new Promise((r) => setTimeout(r, 20));

  expectEmpty(await raw('/enforce/revoked.tgz'), 410, 'enforce, revoked');
  const audited = await raw('/audit/revoked.tgz');
  expectVerified(audited, REVOKED, idx.revoked!, 'audit, revoked');
  assert.is(audited.headers['x-vouch-audit'], 'revoked');
  const lines = logLines('proxy audit: serving a revoked version');
  assert.is(lines.length, 1);
  assert.equal([lines[0]!.url, lines[0]!.revoked_by, lines[0]!.audit_revoked], [`${O}/pkg/revoked.tgz`, revoke.record_hash, 1]);

  // The memory tier is gone; the disk tier kept the bytes and the origin's headers.
  const before = origin.requests('/pkg/lib-1.0.0.tgz');
  const hit = await raw('/enforce/lib-1.0.0.tgz');
  expectVerified(hit, LIB, idx.lib!, 'disk hit');
  expectLibHeaders(hit, 'disk hit');
  assert.is(origin.requests('/pkg/lib-1.0.0.tgz'), before, 'not a mirror hit');
});

test.run();
