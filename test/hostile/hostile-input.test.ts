/**
 * Hostile input, table-driven, against a real gateway process: query
 * strings, paths, methods, Accept values, submit bodies and headers,
 * including requests node:http itself cannot parse (sent over a raw socket).
 * Every answer is the documented status with a JSON error body (empty for
 * downloads), and the server is still healthy afterwards.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:net';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-hostile-'));
const token = 'hostile-token-' + 'q'.repeat(30);
const agent = new Agent();
let gw: GatewayProcess;
let origin: OriginServer;
let endorsed = '';

test.before(async () => {
  createKeyFile(join(work, 'authority.pem'));
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  origin = await OriginServer.start();
  origin.route('/ok.txt', { body: 'fine' });
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { port: 0 },
      chain: { dir: join(work, 'chain') },
      authority: { key_file: join(work, 'authority.pem'), signer: 'hostile', submit_token_file: join(work, 'submit.token') },
      origin: { allow_private: true },
    }),
  ]);
  endorsed = origin.url('/ok.txt');
  const r = await send('POST', '/v1/submit', { body: JSON.stringify({ url: endorsed, name: 'acme/ok', semver: '1.0.0', license: 'MIT' }), headers: auth() });
  assert.is(r.status, 201);
});

test.after(async () => {
  await gw.stop();
  await origin.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

const auth = () => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });

async function send(method: string, path: string, opts: { headers?: Record<string, string>; body?: string | Buffer } = {}) {
  const r = await request(gw.url + path, { method: method as 'GET', headers: opts.headers ?? {}, body: opts.body ?? null, dispatcher: agent });
  const body = Buffer.from(await r.body.arrayBuffer());
  return { status: r.statusCode, headers: r.headers, body };
}

/** Sends raw bytes and returns the raw answer (for requests a client library refuses to send). */
function raw(bytes: string | Buffer): Promise<string> {
  const { port } = new URL(gw.url);
  return new Promise((resolve) => {
    const s = connect(Number(port), '127.0.0.1');
    let out = '';
    s.on('data', (d) => {
      out += d.toString('latin1');
    });
    s.on('close', () => resolve(out));
    s.on('error', () => resolve(out));
    s.setTimeout(5000, () => s.destroy());
    s.end(bytes);
  });
}

function jsonError(r: { status: number; headers: any; body: Buffer }, status: number, code: string, what: string) {
  assert.is(r.status, status, `${what}: ${r.body.toString().slice(0, 200)}`);
  assert.match(String(r.headers['content-type']), /^application\/json/, what);
  const j = JSON.parse(r.body.toString());
  assert.is(j.success, false, what);
  assert.is(j.status, code, what);
  assert.type(j.message, 'string');
  assert.not.match(r.body.toString(), /\n\s+at |node:internal|\/work\//, `${what}: internal detail leaked`);
}

const enc = encodeURIComponent;
const longUrl = `https://a.example/${'x'.repeat(100_000)}`;
const queries: [string, number, string][] = [
  ['', 400, 'missing url'],
  ['url=', 400, 'empty url'],
  [`url=${enc('https://a.example/x')}&url=${enc('https://b.example/y')}`, 400, 'repeated url'],
  [`url=${enc('https://a.example/x')}&semver=1.0.0&semver=2.0.0`, 400, 'repeated semver'],
  ['url=%zz', 400, 'invalid percent-encoding'],
  ['url=https%3A%2F%2Fa.example%2F%E0%A4%A', 400, 'truncated UTF-8 percent-encoding'],
  [`url=${enc('https://a.example/\u0000x')}`, 400, 'NUL in url'],
  [`url=${enc('https://a.example/x\r\nSet-Cookie: a=b')}`, 400, 'CR/LF in url'],
  [`url=${enc('javascript:alert(1)')}`, 400, 'javascript: scheme'],
  [`url=${enc('file:///etc/passwd')}`, 400, 'file: scheme'],
  [`url=${enc('data:text/plain,hi')}`, 400, 'data: scheme'],
  [`url=${enc('ftp://a.example/x')}`, 400, 'ftp: scheme'],
  [`url=${enc('//a.example/x')}`, 400, 'scheme-relative'],
  [`url=${enc('https://')}`, 400, 'no host'],
  [`url=${enc('https://bücher.example/x.tgz')}`, 404, 'IDN host (valid, not on file)'],
  [`url=${enc('https://xn--bcher-kva.example/x.tgz')}`, 404, 'punycode host'],
  [`url=${enc(longUrl)}`, 400, '100 KB url'],
  [`url=${enc('https://a.example/x')}&semver=${enc('1.0.0\u0000')}`, 400, 'NUL in semver'],
  [`url=${enc('https://a.example/x')}&at=2026-02-30`, 400, 'impossible date'],
  [`url=${enc('https://a.example/x')}&at=${'9'.repeat(50)}`, 400, 'long date'],
];

for (const [q, status, what] of queries) {
  test(`query: ${what} -> ${status} (JSON lookup, empty download)`, async () => {
    const r = await send('GET', `/v1/endorsement?${q}`);
    if (r.status === 431 || q.length > 60_000) {
      // Over the header limit: refused before routing, still JSON.
      assert.ok([400, 414, 431].includes(r.status), `${what}: ${r.status}`);
      assert.match(String(r.headers['content-type']), /^application\/json/);
    } else jsonError(r, status, status === 404 ? 'not_found' : 'bad_request', what);
    const d = await send('GET', `/v1/download?${q}`);
    assert.ok(d.status === status || (q.length > 60_000 && [400, 414, 431].includes(d.status)), `${what}: download ${d.status}`);
    if (q.length <= 60_000) assert.is(d.body.length, 0, `${what}: download error had a body`);
  });
}

test('paths and methods: 404 / 405 JSON with Allow', async () => {
  for (const p of [
    '//v1/endorsement',
    '/V1/ENDORSEMENT',
    '/v1/endorsement/',
    '/v1',
    '/%00',
    '/v1/skills/../../etc/passwd',
    '/.git/config',
    `/${'a'.repeat(5000)}`,
  ]) {
    jsonError(await send('GET', p), 404, 'not_found', p);
  }
  for (const m of ['PUT', 'DELETE', 'PATCH', 'OPTIONS', 'POST']) {
    const r = await send(m, `/v1/endorsement?url=${enc(endorsed)}`, m === 'POST' || m === 'PUT' || m === 'PATCH' ? { body: '{}' } : {});
    jsonError(r, 405, 'method_not_allowed', m);
    assert.match(String(r.headers['allow']), /GET/);
  }
  // Dot segments are not resolved by the server (a client library would normalise them, so send raw).
  const dots = await raw(`GET /v1/../v1/endorsement?url=${enc(endorsed)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  assert.match(dots, /^HTTP\/1\.1 404 /);
  assert.match(dots, /"status":"not_found"/);
  for (const m of ['GET', 'PUT', 'DELETE']) jsonError(await send(m, '/v1/submit'), 405, 'method_not_allowed', `${m} /v1/submit`);
});

test('Accept values', async () => {
  const path = `/v1/endorsement?url=${enc(endorsed)}`;
  for (const a of ['text/html', 'image/png', 'application/xml', 'application/json;q=0', 'text/*, image/*', 'application/json;q=0, */*;q=1']) {
    jsonError(await send('GET', path, { headers: { accept: a } }), 406, 'not_acceptable', a);
  }
  for (const a of [
    '*/*',
    'application/json',
    'application/*',
    'text/html;q=0.9, application/json;q=0.1',
    'application/json; charset=utf-8',
    ';;;,,,',
    'application/json;q=abc, */*',
  ]) {
    const r = await send('GET', path, { headers: { accept: a } });
    assert.ok(r.status === 200 || r.status === 406, `${a}: ${r.status}`);
    assert.match(String(r.headers['content-type']), /^application\/json/);
  }
});

test('submit bodies: not JSON, deep nesting, 10 MB, wrong types, extra fields', async () => {
  const cases: [string | Buffer, number, string][] = [
    ['not json', 400, 'bad_request'],
    ['', 400, 'bad_request'],
    [Buffer.from([0xff, 0xfe, 0x00, 0x7b]), 400, 'bad_request'],
    ['['.repeat(10_000) + ']'.repeat(10_000), 400, 'bad_request'],
    ['{"a":'.repeat(5000) + '1' + '}'.repeat(5000), 400, 'bad_request'],
    [Buffer.alloc(10 * 1024 * 1024, 0x20), 413, 'too_large'],
    [JSON.stringify({ url: 5, name: 'a/b', semver: '1.0.0', license: 'MIT' }), 400, 'bad_request'],
    [JSON.stringify({ url: endorsed, name: ['a/b'], semver: '1.0.0', license: 'MIT' }), 400, 'bad_request'],
    [JSON.stringify({ url: endorsed, name: 'a/b', semver: 1, license: 'MIT' }), 400, 'bad_request'],
    [JSON.stringify({ url: endorsed, name: 'a/b', semver: '1.0.0', license: 'MIT', admin: true }), 400, 'bad_request'],
    [JSON.stringify({ url: endorsed, name: 'a/b', semver: '1.0.0', license: 'MIT', tags: { x: 'yes' } }), 400, 'bad_request'],
    [JSON.stringify({ uns: 'a/b', semver: '1.0.0', endorsements: 'many' }), 400, 'bad_request'],
    [JSON.stringify([{ url: endorsed }]), 400, 'bad_request'],
    ['null', 400, 'bad_request'],
  ];
  for (const [body, status, code] of cases) {
    const what = typeof body === 'string' ? body.slice(0, 40) : `${body.length} bytes`;
    jsonError(await send('POST', '/v1/submit', { headers: auth(), body }), status, code, what);
  }
  jsonError(
    await send('POST', '/v1/submit', { headers: { ...auth(), 'content-type': 'text/plain' }, body: '{}' }),
    415,
    'unsupported_media_type',
    'text/plain',
  );
  jsonError(await send('POST', '/v1/submit', { headers: { 'content-type': 'application/json' }, body: '{}' }), 401, 'unauthorized', 'no token');
  jsonError(await send('POST', '/v1/submit', { headers: { ...auth(), authorization: `Bearer ${token}x` }, body: '{}' }), 401, 'unauthorized', 'token + 1 char');
  jsonError(
    await send('POST', '/v1/submit', { headers: { ...auth(), authorization: `Basic ${Buffer.from('a:' + token).toString('base64')}` }, body: '{}' }),
    401,
    'unauthorized',
    'basic auth',
  );
});

test('requests node:http cannot parse still get a JSON 4xx, and the server stays healthy', async () => {
  const answers = [
    await raw('GET /v1/authority HTTP/1.1\r\nHost: x\r\nX-Big: ' + 'a'.repeat(100_000) + '\r\n\r\n'),
    await raw('GARBAGE\r\n\r\n'),
    await raw('GET /v1/authority HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n'),
    await raw('GET /v1/auth\u0000ority HTTP/1.1\r\nHost: x\r\n\r\n'),
    await raw('GET /v1/authority HTTP/1.1\r\nBad Header\r\n\r\n'),
    await raw(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00])), // a TLS hello to a plain port
  ];
  for (const a of answers) {
    assert.match(a, /^HTTP\/1\.1 4\d\d /, JSON.stringify(a.slice(0, 80)));
    assert.match(a, /content-type: application\/json/i);
    const body = a.slice(a.indexOf('\r\n\r\n') + 4);
    assert.is(JSON.parse(body).success, false);
  }
  assert.match(answers[0]!, /^HTTP\/1\.1 431 /);
  const ok = await send('GET', '/v1/authority');
  assert.is(ok.status, 200);
  const d = await send('GET', `/v1/download?url=${enc(endorsed)}`);
  assert.is(d.body.toString(), 'fine');
  assert.is(gw.child.exitCode, null, 'the gateway died');
});

test.run();
