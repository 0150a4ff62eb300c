/**
 * The gateway through a real `vouch serve` process on 127.0.0.1 and a real
 * origin server: every row of docs/spec/design.md §3.1 and §3.2, the selection rules of
 * 3.3, submit (3.5), the mirror's single flight and cancellation, a 64 MiB
 * artifact, and a warm restart that serves the same answers without
 * re-verifying old blocks.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { Agent, request } from 'undici';
import { parseBlock, computeRecordHash, payloadMessage, base64Decode, buildRevokeBlock, buildCheckpoint, type Block } from '../../chain/index.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { createKeyFile, readKeyFile } from '../../platform/key-file.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { OriginServer, pattern, digestOf } from '../helpers/origin-server.ts';
import { postSubmit, startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouchAsync } from '../helpers/processes.ts';
import { chainFile } from '../helpers/chain-files.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-gw-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'test-token-' + 'x'.repeat(32);
const chainDir = join(work, 'chain');
let pub = '';
let origin: OriginServer;
let gw: GatewayProcess;
const agent = new Agent({ keepAliveTimeout: 1000 });

function config(extra: Record<string, unknown> = {}) {
  return {
    listen: { host: '127.0.0.1', port: 0 },
    service_name: 'vouch-test',
    chain: { dir: chainDir },
    authority: { key_file: keyFile, signer: 'test-authority', submit_token_file: tokenFile },
    origin: { allow_private: true, timeout: 1.5, max_redirects: 3 },
    mirror: { memory_bytes: 32 * 1024 * 1024 },
    ...extra,
  };
}

async function get(path: string, headers: Record<string, string> = {}, method = 'GET') {
  const res = await request(gw.url + path, { method: method as 'GET', headers, dispatcher: agent });
  const body = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, headers: res.headers as Record<string, string>, body, json: () => JSON.parse(body.toString('utf8')) };
}
async function submit(body: unknown, headers: Record<string, string> = {}) {
  const r = await postSubmit(gw.url, token, body, headers);
  return { status: r.status, json: r.json };
}
const enc = encodeURIComponent;
const storedBlock = (i: number): Block => JSON.parse(chainFile(chainDir, `blocks/000/000/${String(i).padStart(9, '0')}.json`));
function verifiesWithAuthority(block: Block): boolean {
  const b = parseBlock(block, block.index);
  return computeRecordHash(b, nodeBackend) === b.record_hash && nodeBackend.verify(base64Decode(pub)!, payloadMessage(b.payload), base64Decode(b.signature)!);
}
function expectJsonError(r: { status: number; headers: Record<string, string>; json: () => any }, status: number, code: string) {
  assert.is(r.status, status);
  assert.match(r.headers['content-type'] ?? '', /^application\/json/);
  const j = r.json();
  assert.is(j.success, false);
  assert.is(j.status, code);
  assert.type(j.message, 'string');
  return j;
}
function expectEmpty(r: { status: number; body: Buffer }, status: number) {
  assert.is(r.status, status);
  assert.is(r.body.length, 0, `status ${status} had a body`);
}

const T = {
  text: 'console.log("hello 1.0.0");\n',
  textUrl: '',
  bin: Buffer.from([0, 1, 2, 3, 250, 251, 252, 0, 255]),
  binUrl: '',
  big: pattern(64 * 1024 * 1024, 7),
  bigUrl: '',
};

test.before(async () => {
  pub = createKeyFile(keyFile).publicKeyB64;
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  origin.route('/lib-1.0.0.js', { body: T.text, contentType: 'text/javascript; charset=utf-8' });
  origin.route('/lib.bin', { body: T.bin, contentType: 'application/x-custom' });
  origin.route('/big.bin', { body: T.big });
  T.textUrl = origin.url('/lib-1.0.0.js');
  T.binUrl = origin.url('/lib.bin');
  T.bigUrl = origin.url('/big.bin');
  gw = await startGatewayProcess(['--config', writeConfig(work, config())]);
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

test('startup prints where it listens and the authority key; never the token', () => {
  assert.match(gw.stdout(), /listening on http:\/\/127\.0\.0\.1:\d+/);
  assert.ok(gw.stdout().includes(pub));
  assert.not.ok(gw.stdout().includes(token) || gw.stderr().includes(token), 'the submit token was printed');
});

test('submit: 401 without or with a wrong token; 415, 413, 400 on bad bodies', async () => {
  const body = JSON.stringify({ url: T.textUrl, name: 'acme/lib', semver: '1.0.0', license: 'MIT' });
  let r = await request(gw.url + '/v1/submit', { method: 'POST', body, headers: { 'content-type': 'application/json' }, dispatcher: agent });
  assert.is(r.statusCode, 401);
  assert.is(((await r.body.json()) as any).status, 'unauthorized');
  r = await request(gw.url + '/v1/submit', {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json', authorization: 'Bearer wrong' },
    dispatcher: agent,
  });
  assert.is(r.statusCode, 401);
  await r.body.dump();
  let s = await submit(body, { 'content-type': 'text/plain' });
  assert.is(s.status, 415);
  s = await submit('{"url":"' + 'a'.repeat(1024 * 1024 + 10) + '"}');
  assert.is(s.status, 413);
  assert.is(s.json.status, 'too_large');
  for (const bad of [
    '{',
    '[]',
    '{"url":"ftp://x/y","name":"a/b","semver":"1.0.0","license":"MIT"}',
    JSON.stringify({ url: T.textUrl, name: 'acme/lib', semver: 'one', license: 'MIT' }),
    JSON.stringify({ url: T.textUrl, name: 'acme/lib', semver: '1.0.0', license: 'MIT', extra: 1 }),
  ]) {
    s = await submit(bad);
    assert.is(s.status, 400, bad);
    assert.is(s.json.success, false);
    assert.is(s.json.status, 'bad_request');
  }
});

test('submit: 201 posted, 200 unchanged, 409 semver_conflict, 502 when the origin fails', async () => {
  let s = await submit({ url: T.textUrl, name: 'acme/lib', semver: '1.0.0', license: 'MIT', comment: 'Grüße, 世界 — “1.0” 🎉', effective_date: '2026-01-10' });
  assert.is(s.status, 201, JSON.stringify(s.json));
  assert.equal([s.json.success, s.json.status, s.json.url, s.json.index], [true, 'posted', T.textUrl, 1]);
  assert.match(s.json.record_hash, /^[0-9a-f]{64}$/);
  const again = await submit({ url: T.textUrl, name: 'acme/lib', semver: '1.0.0', license: 'MIT' });
  assert.is(again.status, 200);
  assert.equal([again.json.status, again.json.record_hash], ['unchanged', s.json.record_hash]);
  origin.route('/lib-1.0.0.js', { body: 'console.log("changed");\n' });
  const conflict = await submit({ url: T.textUrl, name: 'acme/lib', semver: '1.0.0', license: 'MIT' });
  assert.is(conflict.status, 409);
  assert.equal([conflict.json.success, conflict.json.status, conflict.json.resource], [false, 'semver_conflict', T.textUrl]);
  origin.route('/lib-1.0.0.js', { body: T.text, contentType: 'text/javascript; charset=utf-8' });
  const dead = await submit({ url: origin.url('/missing.tgz'), name: 'acme/lib', semver: '1.0.0', license: 'MIT' });
  assert.is(dead.status, 502);
  assert.is(dead.json.status, 'origin_error');
  s = await submit({ url: T.binUrl, name: 'acme/lib', semver: '1.0.0', license: 'MIT', algorithm: 'sha512', effective_date: '2026-01-10' });
  assert.is(s.status, 201);
  s = await submit({ url: T.bigUrl, name: 'acme/big', semver: '1.0.0', license: 'MIT', effective_date: '2026-01-10' });
  assert.is(s.status, 201);
  assert.is(s.json.index, 3);
});

test('lookup: the body equals the stored block plus success and verifies with the authority key', async () => {
  for (const path of ['/v1/endorsement', '/v1/object']) {
    const r = await get(`${path}?url=${enc(T.textUrl)}`);
    assert.is(r.status, 200);
    const j = r.json();
    assert.is(j.success, true);
    const { success, ...block } = j;
    assert.equal(block, storedBlock(1));
    assert.ok(verifiesWithAuthority(block));
  }
  const a = (await get('/v1/authority')).json();
  assert.is(a.index, 0);
  assert.is(a.payload.authority.public_key, pub);
  const cp = await get('/v1/checkpoint');
  const { success, ...checkpoint } = cp.json();
  assert.is(success, true);
  assert.equal(checkpoint, JSON.parse(readFileSync(join(chainDir, 'checkpoint.json'), 'utf8')));
});

test('JSON errors: 400, 404 (with resource), 404 unknown path, 405, 406 — all JSON with success false', async () => {
  expectJsonError(await get('/v1/endorsement'), 400, 'bad_request');
  expectJsonError(await get('/v1/endorsement?url=relative/path'), 400, 'bad_request');
  expectJsonError(await get(`/v1/endorsement?url=${enc('ftp://x.example/y')}`), 400, 'bad_request');
  expectJsonError(await get(`/v1/endorsement?url=${enc(T.textUrl)}&semver=1.0`), 400, 'bad_request');
  expectJsonError(await get(`/v1/endorsement?url=${enc(T.textUrl)}&at=2026-13-01`), 400, 'bad_request');
  expectJsonError(await get(`/v1/endorsement?url=${enc(T.textUrl)}&url=${enc(T.binUrl)}`), 400, 'bad_request');
  // The URL is looked up before its form is checked; the answers are those of checking it first.
  assert.match(expectJsonError(await get(`/v1/endorsement?url=${enc('ftp://x.example/y')}&semver=1.0`), 400, 'bad_request').message, /^url must be/);
  assert.match(
    expectJsonError(await get(`/v1/endorsement?semver=1.0.0&url=${enc('ftp://x.example/y')}&at=2026-01-01`), 400, 'bad_request').message,
    /^url must be/,
  );
  assert.match(expectJsonError(await get(`/v1/endorsement?url=${enc(T.textUrl)}&semver=1.0`), 400, 'bad_request').message, /^semver must be/);
  const nf = expectJsonError(await get(`/v1/endorsement?url=${enc('https://nothing.example/x.tgz')}`), 404, 'not_found');
  assert.is(nf.resource, 'https://nothing.example/x.tgz');
  assert.match(nf.message, /no provenance block is on file/);
  expectJsonError(await get('/no/such/path'), 404, 'not_found');
  expectJsonError(await get('/v1/endorsementx?url=x'), 404, 'not_found');
  const m = await get(`/v1/endorsement?url=${enc(T.textUrl)}`, {}, 'DELETE');
  expectJsonError(m, 405, 'method_not_allowed');
  assert.match(m.headers['allow'] ?? '', /GET/);
  expectJsonError(await get('/v1/submit'), 405, 'method_not_allowed');
  expectJsonError(await get(`/v1/endorsement?url=${enc(T.textUrl)}`, { accept: 'text/html' }), 406, 'not_acceptable');
  expectJsonError(await get('/v1/authority', { accept: 'application/json;q=0, */*' }), 406, 'not_acceptable');
  assert.is((await get(`/v1/endorsement?url=${enc(T.textUrl)}`, { accept: 'text/html, application/json;q=0.5' })).status, 200);
  assert.is((await get('/v1/authority', { accept: '*/*' })).status, 200);
});

test('download: verified bytes with every docs/spec/design.md §3.2 header; UNS equals the block served, pure ASCII', async () => {
  const r = await get(`/v1/download?url=${enc(T.textUrl)}`);
  assert.is(r.status, 200);
  assert.is(r.body.toString('utf8'), T.text);
  assert.is(r.headers['content-type'], 'text/javascript; charset=utf-8');
  assert.is(r.headers['content-length'], String(Buffer.byteLength(T.text)));
  assert.is(r.headers['x-content-type-options'], 'nosniff');
  assert.is(r.headers['content-security-policy'], 'sandbox');
  const stored = storedBlock(1);
  assert.is(r.headers['etag'], `"${stored.payload.endorsements[0]!.artifact_hash}"`);
  const uns = r.headers['uns']!;
  assert.match(uns, /^[\x20-\x7e]+$/, 'UNS is not pure ASCII');
  assert.ok(uns.includes('\\u00fc'), 'the Unicode comment was not escaped');
  assert.equal(JSON.parse(uns), { 'vouch-test': { endorsement: stored } });
  const vc = JSON.parse(r.headers['vibecode']!);
  assert.is(vc.spec, `${gw.url}/v1/openapi.json`);
  assert.ok(Array.isArray(vc.skills) && vc.skills.length >= 1);
  const spec = await get(new URL(vc.spec).pathname);
  assert.is(spec.json().openapi, '3.1.0');
  const skill = await get(new URL(vc.skills[0]).pathname);
  assert.is(skill.status, 200);
  assert.match(skill.body.toString(), /Verify a download/);
  // ETag and 304; HEAD; binary with its own content type
  const cond = await get(`/v1/download?url=${enc(T.textUrl)}`, { 'if-none-match': r.headers['etag']! });
  expectEmpty(cond, 304);
  const head = await get(`/v1/download?url=${enc(T.textUrl)}`, {}, 'HEAD');
  assert.is(head.status, 200);
  assert.is(head.body.length, 0);
  assert.is(head.headers['content-length'], String(Buffer.byteLength(T.text)));
  const bin = await get(`/v1/download?url=${enc(T.binUrl)}`);
  assert.is(bin.status, 200);
  assert.ok(bin.body.equals(T.bin));
  assert.is(bin.headers['content-type'], 'application/x-custom');
});

test('download failures: empty bodies with 400, 404, 409 (not cached), 502, 504', async () => {
  expectEmpty(await get('/v1/download'), 400);
  expectEmpty(await get(`/v1/download?url=${enc(T.textUrl)}&semver=bad`), 400);
  expectEmpty(await get(`/v1/download?url=${enc('https://nothing.example/x')}`), 404);
  expectEmpty(await get(`/v1/download?url=${enc(T.textUrl)}&semver=9.9.9`), 404);
  // A tampered origin: 409, empty, and the bad bytes are not cached.
  const s = await submit({ url: origin.url('/tamper.js'), name: 'acme/t', semver: '1.0.0', license: 'MIT' });
  assert.is(s.status, 502); // not served yet at submit time
  origin.route('/tamper.js', { body: 'good bytes' });
  assert.is((await submit({ url: origin.url('/tamper.js'), name: 'acme/t', semver: '1.0.0', license: 'MIT' })).status, 201);
  origin.route('/tamper.js', { body: 'good bytes', tamper: true });
  const before = origin.requests('/tamper.js');
  expectEmpty(await get(`/v1/download?url=${enc(origin.url('/tamper.js'))}`), 409);
  expectEmpty(await get(`/v1/download?url=${enc(origin.url('/tamper.js'))}`), 409);
  assert.is(origin.requests('/tamper.js') - before, 2, 'a mismatching artifact was served from a cache');
  origin.route('/tamper.js', { body: 'good bytes' });
  assert.is((await get(`/v1/download?url=${enc(origin.url('/tamper.js'))}`)).body.toString(), 'good bytes');
  // Origin failures: error status, truncated body, reset, stall (504).
  assert.is((await submit({ url: origin.url('/flaky.bin'), name: 'acme/f', semver: '1.0.0', license: 'MIT' })).status, 502);
  origin.route('/flaky.bin', { body: 'x'.repeat(5000) });
  assert.is((await submit({ url: origin.url('/flaky.bin'), name: 'acme/f', semver: '1.0.0', license: 'MIT' })).status, 201);
  const u = `/v1/download?url=${enc(origin.url('/flaky.bin'))}`;
  origin.route('/flaky.bin', { status: 500, body: 'oops' });
  expectEmpty(await get(u), 502);
  origin.route('/flaky.bin', { body: 'x'.repeat(5000), truncate: 100 });
  expectEmpty(await get(u), 502);
  origin.route('/flaky.bin', { body: 'x'.repeat(5000), reset: 100 });
  expectEmpty(await get(u), 502);
  origin.route('/flaky.bin', { body: 'x'.repeat(5000), stall: 'headers' });
  expectEmpty(await get(u), 504);
  origin.route('/flaky.bin', { body: 'x'.repeat(5000) });
  assert.is((await get(u)).status, 200);
});

test('a 64 MiB artifact downloads intact', async () => {
  const res = await request(gw.url + `/v1/download?url=${enc(T.bigUrl)}`, { dispatcher: agent });
  assert.is(res.statusCode, 200);
  const h = createHash('sha256');
  let n = 0;
  for await (const chunk of res.body) {
    h.update(chunk);
    n += chunk.length;
  }
  assert.is(n, 64 * 1024 * 1024);
  assert.is(`sha256:${h.digest('hex')}`, digestOf(T.big));
});

test('a memory-tier hit of several MiB arrives intact at a slow reader; a client leaving mid-body does not disturb the next', async () => {
  const p = pattern(5 * 1024 * 1024 + 12_345, 21); // not a whole number of send pieces
  origin.route('/hit.bin', { body: p });
  assert.is((await submit({ url: origin.url('/hit.bin'), name: 'acme/hit', semver: '1.0.0', license: 'MIT' })).status, 201);
  const path = `/v1/download?url=${enc(origin.url('/hit.bin'))}`;
  const memoryHits = async () => Number(/^vouch_mirror_hits_total\{tier="memory"\} (\d+)$/m.exec((await get('/metrics')).body.toString())?.[1] ?? NaN);
  const first = await get(path);
  assert.is(first.status, 200);
  const hitsBefore = await memoryHits();
  // A reader that takes 64 KiB every few ms keeps the socket full, so the gateway waits for drain between pieces.
  const slow = await new Promise<{ n: number; digest: string }>((resolve, reject) => {
    const req = httpRequest(gw.url + path, (res) => {
      const h = createHash('sha256');
      let n = 0;
      res.on('readable', function read() {
        const chunk = res.read(64 * 1024) ?? res.read();
        if (chunk === null) return;
        h.update(chunk);
        n += chunk.length;
        setTimeout(read, 2);
      });
      res.on('end', () => resolve({ n, digest: `sha256:${h.digest('hex')}` }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
  assert.is(slow.n, p.size);
  assert.is(slow.digest, digestOf(p));
  // Leave after the first bytes, mid-body.
  await new Promise<void>((resolve, reject) => {
    const req = httpRequest(gw.url + path, (res) => {
      res.once('data', () => {
        req.destroy();
        resolve();
      });
    });
    req.on('error', () => resolve());
    req.end();
    setTimeout(() => reject(new Error('no body byte within 5 s')), 5000).unref();
  });
  const again = await get(path);
  assert.is(again.status, 200);
  assert.is(`sha256:${createHash('sha256').update(again.body).digest('hex')}`, digestOf(p));
  assert.is((await memoryHits()) - hitsBefore, 3, 'all three later downloads were memory-tier hits');
});

test('50 concurrent downloads of one cold artifact cause one origin fetch', async () => {
  origin.route('/cold.bin', { body: pattern(2 * 1024 * 1024, 3), delayMs: 200 });
  assert.is((await submit({ url: origin.url('/cold.bin'), name: 'acme/cold', semver: '1.0.0', license: 'MIT' })).status, 201);
  const before = origin.requests('/cold.bin');
  const all = await Promise.all(Array.from({ length: 50 }, () => get(`/v1/download?url=${enc(origin.url('/cold.bin'))}`)));
  assert.ok(all.every((r) => r.status === 200 && r.body.length === 2 * 1024 * 1024));
  assert.is(origin.requests('/cold.bin') - before, 1);
});

test('a client that disconnects mid-download cancels the origin fetch', async () => {
  origin.route('/slow.bin', { body: 'y'.repeat(4000) });
  assert.is((await submit({ url: origin.url('/slow.bin'), name: 'acme/slow', semver: '1.0.0', license: 'MIT' })).status, 201);
  origin.route('/slow.bin', { body: 'z'.repeat(4000), trickle: { bytes: 100, everyMs: 100 } });
  origin.resetCounters();
  await new Promise<void>((resolve) => {
    const req = httpRequest(`${gw.url}/v1/download?url=${enc(origin.url('/slow.bin'))}`);
    req.on('error', () => resolve());
    req.end();
    origin.waitForRequests('/slow.bin', 1, 5000).then(() => {
      req.destroy();
      resolve();
    });
  });
  await origin.waitForClientClose('/slow.bin', 1, 5000);
  assert.is(origin.clientCloses('/slow.bin'), 1);
});

test('selection through the gateway: default, semver, at with ties, semver+at', async () => {
  const U = origin.url('/sel.tgz');
  const post = async (body: string, semver: string, date: string) => {
    origin.route('/sel.tgz', { body });
    const r = await submit({ url: U, name: 'acme/sel', semver, license: 'MIT', effective_date: date });
    assert.is(r.status, 201, JSON.stringify(r.json));
    return r.json.index as number;
  };
  const i1 = await post('v1', '1.0.0', '2026-02-01');
  const i2 = await post('v2', '1.1.0', '2026-03-01');
  const i3 = await post('v3', '1.0.1', '2026-03-01');
  const i4 = await post('v4', '0.9.0', '2026-01-01');
  const idx = async (q: string) => {
    const r = await get(`/v1/endorsement?url=${enc(U)}${q}`);
    return r.status === 200 ? r.json().index : r.status;
  };
  assert.is(await idx(''), i4);
  assert.is(await idx('&semver=1.1.0'), i2);
  assert.is(await idx('&at=2026-03-01'), i3);
  assert.is(await idx('&at=2026-02-15'), i1);
  assert.is(await idx('&at=2025-12-31'), 404);
  assert.is(await idx('&semver=1.1.0&at=2026-02-15'), 404);
  assert.is(await idx('&semver=1.0.0&at=2026-02-15'), i1);
  // The origin now serves v4's bytes: the newest version downloads, the one selected by date no longer matches.
  assert.is((await get(`/v1/download?url=${enc(U)}`)).body.toString(), 'v4');
  expectEmpty(await get(`/v1/download?url=${enc(U)}&at=2026-03-01`), 409);
});

test('vouch get verifies the UNS block and the bytes itself; a wrong key or a lying gateway is refused', async () => {
  const out = join(work, 'got.js');
  const getState = join(work, 'get-state.json'); // never the user's own state file
  let r = await vouchAsync(['get', '--gateway', gw.url, '--url', T.textUrl, '--public-key', pub, '-o', out, '--state', getState]);
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /^ok: .* acme\/lib 1\.0\.0, block 1 /);
  assert.is(readFileSync(out, 'utf8'), T.text);
  const other = join(work, 'other.pem');
  const otherPub = createKeyFile(other).publicKeyB64;
  const out2 = join(work, 'got2.js');
  r = await vouchAsync(['get', '--gateway', gw.url, '--url', T.textUrl, '--public-key', otherPub, '-o', out2, '--state', getState]);
  assert.is(r.status, 1);
  assert.match(r.stderr, /bad_signature: the UNS block is not signed by the pinned authority key/);
  assert.not.ok(existsSync(out2), 'a refused download left a file');
  r = await vouchAsync(['get', '--gateway', gw.url, '--url', origin.url('/nothing.bin'), '--public-key', pub, '-o', out2, '--state', getState]);
  assert.is(r.status, 1);
  assert.match(r.stderr, /HTTP 404/);
  // A lying "gateway": the real UNS, Vouch-Proof and Vouch-Index-Proof headers with other bytes.
  const liar = createServer(async (_req, res) => {
    const real = await request(`${gw.url}/v1/download?url=${enc(T.textUrl)}`, { dispatcher: agent });
    await real.body.dump();
    res.writeHead(200, {
      uns: String(real.headers['uns']),
      'vouch-proof': String(real.headers['vouch-proof']),
      'vouch-index-proof': String(real.headers['vouch-index-proof']),
      'content-type': 'text/javascript',
    });
    res.end('console.log("evil");\n');
  });
  await new Promise<void>((ok) => liar.listen(0, '127.0.0.1', ok));
  try {
    r = await vouchAsync([
      'get',
      '--gateway',
      `http://127.0.0.1:${(liar.address() as AddressInfo).port}`,
      '--url',
      T.textUrl,
      '--public-key',
      pub,
      '-o',
      out2,
      '--state',
      getState,
    ]);
    assert.is(r.status, 1);
    assert.match(r.stderr, /hash_mismatch/);
    assert.not.ok(existsSync(out2));
  } finally {
    liar.close();
  }
});

test('restart: warm start serves the same answers without re-verifying old blocks; a revocation answers 410', async () => {
  const before = await get(`/v1/endorsement?url=${enc(T.textUrl)}`);
  const cpBefore = (await get('/v1/checkpoint')).json();
  assert.is(await gw.stop(), 0);
  // Append a revocation of block 2 (the binary) offline with the authority key.
  const repo = await ChainRepo.open(chainDir);
  const signer = nodeSigner('test-authority', readKeyFile(keyFile));
  const head = JSON.parse(repo.readBlockFile(repo.size - 1)) as Block;
  const revoke = buildRevokeBlock({ prev: head, target: storedBlock(2), signer, backend: nodeBackend, now: Date.now(), effectiveDate: '2026-01-01' });
  await appendSigned(repo, [revoke], buildCheckpoint({ head: revoke, signer, now: Date.now() }), Date.now());
  gw = await startGatewayProcess(['--config', join(work, 'vouch.yaml')]);
  assert.match(gw.stdout(), /warm start, 1 verified/);
  const after = await get(`/v1/endorsement?url=${enc(T.textUrl)}`);
  assert.equal(after.json(), before.json());
  assert.is((await get('/v1/checkpoint')).json().size, cpBefore.size + 1);
  expectEmpty(await get(`/v1/download?url=${enc(T.binUrl)}`), 410);
  const exact = await get(`/v1/endorsement?url=${enc(T.binUrl)}&semver=1.0.0`);
  assert.is(exact.status, 200);
  assert.is(exact.json().revoked_by.index, revoke.index);
  expectJsonError(await get(`/v1/endorsement?url=${enc(T.binUrl)}`), 404, 'not_found');
  assert.is((await get(`/v1/download?url=${enc(T.textUrl)}`)).body.toString(), T.text);
});

test('not ready: JSON 503 and empty download 503; submit refuses loopback unless allowed', async () => {
  const dir2 = join(work, 'second');
  const cfg = writeConfig(dir2, { ...config(), chain: { dir: join(dir2, 'chain') }, origin: { allow_private: false, timeout: 2 } });
  const g2 = await startGatewayProcess(['--config', cfg], { env: { VOUCH_TEST_READY_DELAY_MS: '1500' }, waitFor: /listening on/ });
  try {
    const r0 = await request(`${g2.url}/v1/endorsement?url=${enc('ftp://x.example/y')}`, { dispatcher: agent });
    assert.is(r0.statusCode, 400, 'a malformed url is refused before readiness counts');
    assert.is(((await r0.body.json()) as any).status, 'bad_request');
    const r1 = await request(`${g2.url}/v1/endorsement?url=${enc(T.textUrl)}`, { dispatcher: agent });
    assert.is(r1.statusCode, 503);
    const j = (await r1.body.json()) as any;
    assert.equal([j.success, j.status], [false, 'not_ready']);
    const r2 = await request(`${g2.url}/v1/download?url=${enc(T.textUrl)}`, { dispatcher: agent });
    assert.is(r2.statusCode, 503);
    assert.is((await r2.body.arrayBuffer()).byteLength, 0);
    const until = Date.now() + 30_000;
    while (!/^ready: /m.test(g2.stdout()) && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    const fetchedBefore = origin.requests('/lib-1.0.0.js');
    for (const u of [
      T.textUrl,
      T.textUrl.replace('127.0.0.1', 'localhost'),
      T.textUrl.replace('127.0.0.1', '[::1]'),
      T.textUrl.replace('127.0.0.1', '0x7f000001'),
    ]) {
      const s = await request(`${g2.url}/v1/submit`, {
        method: 'POST',
        dispatcher: agent,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url: u, name: 'acme/lib', semver: '1.0.0', license: 'MIT' }),
      });
      assert.is(s.statusCode, 400, u);
      const b = (await s.body.json()) as any;
      assert.is(b.status, 'bad_request');
      assert.match(b.message, /not allowed|loopback|private/i);
    }
    assert.is(origin.requests('/lib-1.0.0.js'), fetchedBefore, 'a refused address was fetched');
  } finally {
    await g2.stop();
  }
});

test.run();
