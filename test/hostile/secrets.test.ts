/**
 * Secrets stay secret: the authority key and the submit token are never
 * served, never logged (stdout or stderr, whatever the requests), and the
 * files are refused when readable by others; the token comparison is
 * constant-time (hash-then-timingSafeEqual), also for wrong lengths.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouchAsync } from '../helpers/processes.ts';
import { repoRoot } from '../helpers/vectors.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-secrets-'));
const agent = new Agent();
const token = 'secret-token-' + 's'.repeat(30);
let gw: GatewayProcess;
let keyPem = '';
let configFile = '';

test.before(async () => {
  createKeyFile(join(work, 'authority.pem'));
  keyPem = readFileSync(join(work, 'authority.pem'), 'utf8');
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  configFile = writeConfig(work, {
    listen: { port: 0 },
    chain: { dir: join(work, 'chain') },
    authority: { key_file: join(work, 'authority.pem'), signer: 'secrets', submit_token_file: join(work, 'submit.token') },
  });
  gw = await startGatewayProcess(['--config', configFile], { env: { VOUCH_LOG_LEVEL: 'debug' } });
});

test.after(async () => {
  await gw?.stop();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

const keyBody = () =>
  keyPem
    .split('\n')
    .filter((l) => l && !l.startsWith('-----'))
    .join('');

test('the key and the token are not reachable over HTTP', async () => {
  for (const p of [
    '/authority.pem',
    '/var/authority.pem',
    `/${join(work, 'authority.pem')}`,
    '/submit.token',
    '/../authority.pem',
    '/v1/skills/../../authority.pem',
    '/.git/config',
    '/v1/openapi.json',
    '/v1/authority',
    '/v1/checkpoint',
  ]) {
    const r = await request(gw.url + p, { dispatcher: agent });
    const text = await r.body.text();
    assert.not.ok(text.includes(keyBody()), `${p} served the key`);
    assert.not.ok(text.includes(token), `${p} served the token`);
  }
});

test('neither secret appears in any log line, whatever the requests', async () => {
  const headers = { 'content-type': 'application/json' };
  const wrong = [token.slice(0, -1), token + 'x', token.toUpperCase(), '', `${token} ${token}`];
  for (const t of wrong) {
    const r = await request(gw.url + '/v1/submit', { method: 'POST', dispatcher: agent, headers: { ...headers, authorization: `Bearer ${t}` }, body: '{}' });
    assert.is(r.statusCode, 401);
    await r.body.dump();
  }
  const r = await request(gw.url + '/v1/submit', {
    method: 'POST',
    dispatcher: agent,
    headers: { ...headers, authorization: `Bearer ${token}` },
    body: '{"url":"http://127.0.0.1:1/x","name":"a/b","semver":"1.0.0","license":"MIT"}',
  });
  assert.is(r.statusCode, 400); // loopback refused: allow_private is off
  await r.body.dump();
  await gw.stop();
  const logs = gw.stdout() + gw.stderr();
  assert.ok(logs.length > 0);
  assert.not.ok(logs.includes(token), 'the submit token was logged');
  for (const t of wrong.filter((x) => x.length > 8)) assert.not.ok(logs.includes(t), 'a presented token was logged');
  assert.not.ok(logs.includes(keyBody()), 'the key was logged');
});

test('key and token files readable by others are refused at start', async () => {
  chmodSync(join(work, 'submit.token'), 0o644);
  let r = await vouchAsync(['serve', '--config', configFile]);
  assert.is(r.status, 2);
  assert.match(r.stderr, /submit token file .* accessible by group or others/);
  chmodSync(join(work, 'submit.token'), 0o600);
  chmodSync(join(work, 'authority.pem'), 0o640);
  r = await vouchAsync(['serve', '--config', configFile]);
  assert.is(r.status, 2);
  assert.match(r.stderr, /accessible by group or others/);
  assert.not.ok(r.stderr.includes(keyBody()));
  chmodSync(join(work, 'authority.pem'), 0o600);
});

test('the token is compared in constant time: both sides hashed, then timingSafeEqual', () => {
  const src = readFileSync(join(repoRoot, 'gateway', 'http', 'server.ts'), 'utf8');
  const fn = src.slice(src.indexOf('function bearerMatches'), src.indexOf('const submit: Handler'));
  assert.match(fn, /createHash\('sha256'\)/);
  assert.match(fn, /timingSafeEqual\(/);
  assert.not.match(fn, /===\s*expected|expected\s*===/);
});

test.run();
