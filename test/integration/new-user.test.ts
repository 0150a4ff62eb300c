/**
 * What a new user hit (issue 13), fixed, through real `vouch` processes:
 * help texts and the README point to nothing a user does not have; a
 * refused loopback submit names `origin.allow_private`; the gateway says at
 * start which mode it runs in and which chain directory it uses (a config
 * file with `authority: null` is read-only); and the printed `try:` line works
 * with no network, run through `sh -c`. Traffic goes to 127.0.0.1 only.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { defaultConfig, loadConfigFile, resolveConfig } from '../../gateway/config.ts';
import { modeLine } from '../../gateway/gateway.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouch, vouchAsync } from '../helpers/processes.ts';
import { repoRoot } from '../helpers/vectors.ts';

const work = realpathSync(mkdtempSync(join(tmpdir(), 'vouch-new-user-')));
const token = 'new-user-token-' + 'n'.repeat(30);
const agent = new Agent();
let origin: OriginServer;
const running: GatewayProcess[] = [];

test.before(async () => {
  createKeyFile(join(work, 'authority.pem'));
  writeFileSync(join(work, 'submit.token'), token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  origin.route('/lib.js', { body: 'console.log(1);\n' });
});

test.after(async () => {
  for (const g of running) await g.stop();
  await origin?.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

async function start(dir: string, config: Record<string, unknown>): Promise<GatewayProcess> {
  const g = await startGatewayProcess(['--config', writeConfig(dir, config)]);
  running.push(g);
  return g;
}

const authorityConfig = (dir: string, extra: Record<string, unknown> = {}) => ({
  listen: { port: 0 },
  chain: { dir: join(dir, 'chain') },
  authority: { key_file: join(work, 'authority.pem'), signer: 'new-user', submit_token_file: join(work, 'submit.token') },
  ...extra,
});

const COMMANDS = [
  'keygen',
  'init',
  'endorse',
  'verify',
  'check',
  'serve',
  'get',
  'root init',
  'root sign',
  'root apply',
  'key rotate',
  'key compromise',
  'reendorse',
];

test('no help text and no README link points to developer-only documents', () => {
  const texts = [vouch(['--help']).stdout, ...COMMANDS.map((c) => vouch([...c.split(' '), '--help']).stdout)];
  for (const t of texts) {
    assert.ok(t.length > 0);
    assert.not.match(t, /DESIGN/, t);
    assert.not.match(t, /\.\.\/shared|shared\//, t);
  }
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
  assert.not.match(readme, /\.\.\/shared\/DESIGN|DESIGN\.md/);
});

test('vouch verify --help explains every verification code, in the order they are checked', () => {
  const help = vouch(['verify', '--help']).stdout;
  const order = [
    'malformed',
    'index_gap',
    'prev_hash_mismatch',
    'record_hash_mismatch',
    'weak_key',
    'untrusted_authority',
    'signer_mismatch',
    'bad_signature',
    'retired_key',
    'bad_key_event',
    'time_regression',
    'bad_artifact_hash',
    'checkpoint_mismatch',
  ];
  const at = order.map((code) => help.search(new RegExp(`^\\s*${code}\\s+\\S|\`${code}`, 'm')));
  for (const [i, code] of order.entries()) assert.ok(at[i]! >= 0, `${code} is not explained`);
  assert.equal(
    [...at].sort((a, b) => a - b),
    at,
    'not in the order they are checked',
  );
  // The spec's table (docs/spec/verification.md) lists the same codes in the same order.
  const spec = readFileSync(join(repoRoot, 'docs', 'spec', 'verification.md'), 'utf8');
  const table = spec.slice(spec.indexOf('# Verification codes'));
  const codes = [...table.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]).slice(0, order.length);
  assert.equal(codes, order);
});

test('a submit of a loopback URL is refused with a message naming origin.allow_private', async () => {
  const dir = join(work, 'guarded');
  const g = await start(dir, authorityConfig(dir));
  for (const url of [origin.url('/lib.js'), origin.url('/lib.js').replace('127.0.0.1', 'localhost')]) {
    const r = await request(`${g.url}/v1/submit`, {
      method: 'POST',
      dispatcher: agent,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url, name: 'acme/lib', semver: '1.0.0', license: 'MIT' }),
    });
    assert.is(r.statusCode, 400, url);
    const j = (await r.body.json()) as any;
    assert.is(j.status, 'bad_request');
    assert.match(j.message, /not allowed/);
    assert.ok(j.message.includes('origin.allow_private: true'), j.message);
  }
  assert.is(origin.requests('/lib.js'), 0, 'a refused address was fetched');
  await g.stop();
});

test('the start line names the mode and the resolved chain directory', () => {
  const embedded = defaultConfig('/srv/vouch');
  assert.is(modeLine(embedded), 'mode: authority (submit enabled, signer vouch-dev; the embedded default, used without --config); chain: /srv/vouch/var/chain');
  const onlyOrigin = resolveConfig({ origin: { allow_private: true }, authority: null }, '/etc/vouch', '/etc/vouch/vouch.yaml');
  assert.is(modeLine(onlyOrigin), 'mode: read-only (the config file sets authority: null); chain: /etc/vouch/var/chain');
  const withAuthority = resolveConfig({ authority: { signer: 'acme' } }, '/etc/vouch', '/etc/vouch/vouch.yaml');
  assert.match(
    modeLine(withAuthority),
    /^mode: authority \(submit enabled, signer acme; the config file's authority section\); chain: \/etc\/vouch\/var\/chain$/,
  );
  const mirror = resolveConfig({ chain: { remote: 'http://127.0.0.1:1/chain.git', public_key: 'A'.repeat(43) + '=' } }, '/m', '/m/vouch.yaml');
  assert.match(
    modeLine(mirror),
    /^mode: mirror of http:\/\/127\.0\.0\.1:1\/chain\.git \(read-only: a config file with chain\.remote gets an authority only from its own authority section/,
  );
});

test('a config file with authority: null runs read-only on ./var/chain next to the file, and says so', async () => {
  // An authority chain next to the file, as the embedded default would have made it there.
  const dir = join(work, 'only-origin');
  mkdirSync(dir, { recursive: true });
  const init = await vouchAsync(['init', '--chain', join(dir, 'var', 'chain'), '--key', join(work, 'authority.pem'), '--signer', 'new-user']);
  assert.is(init.status, 0, init.stderr);
  const file = writeConfig(dir, { listen: { port: 0 }, origin: { allow_private: true }, authority: null });
  assert.is(loadConfigFile(file).authority, null);
  const g = await startGatewayProcess(['--config', file], { cwd: work });
  running.push(g);
  const first = g.stdout().split('\n')[0];
  assert.is(first, `mode: read-only (the config file sets authority: null); chain: ${join(dir, 'var', 'chain')}`);
  const r = await request(`${g.url}/v1/submit`, {
    method: 'POST',
    dispatcher: agent,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: origin.url('/lib.js'), name: 'acme/lib', semver: '1.0.0', license: 'MIT' }),
  });
  assert.ok(r.statusCode >= 400 && r.statusCode < 500, `a read-only gateway answered ${r.statusCode} to a submit`);
  await r.body.dump();
  await g.stop();
});

/** Runs every printed `try:` line through `sh -c`; each must reach only 127.0.0.1 and answer success. */
function runTryLines(stdout: string): number {
  const lines = stdout
    .split('\n')
    .filter((l) => l.startsWith('try: '))
    .map((l) => l.slice('try: '.length));
  for (const cmd of lines) {
    const hosts = [...cmd.matchAll(/https?:\/\/([^/:'"\s]+)/g)].map((m) => m[1]);
    assert.ok(hosts.length > 0 && hosts.every((h) => h === '127.0.0.1'), `the try line goes elsewhere than the gateway: ${cmd}`);
    const r = spawnSync('sh', ['-c', cmd], { encoding: 'utf8', timeout: 20_000 });
    assert.is(r.status, 0, `${cmd}\n${r.stderr}`);
    const j = JSON.parse(r.stdout);
    assert.is(j.success, true, r.stdout);
  }
  return lines.length;
}

test('the printed try line works with no network: authority and read-only gateways', async () => {
  assert.is(spawnSync('sh', ['-c', 'command -v curl']).status, 0, 'curl is needed to run the printed line');
  const dir = join(work, 'try');
  const g = await start(dir, authorityConfig(dir));
  // Ready is not printed yet: the try and submit lines come after it on stdout, each its own write, later on a loaded machine.
  await until('the try and submit lines', async () => /^try: /m.test(g.stdout()) && /^to submit an artifact /m.test(g.stdout()));
  assert.is(runTryLines(g.stdout()), 1);
  // No line to try sends anything to the internet; the submit line is a template with placeholders.
  for (const l of g.stdout().split('\n')) assert.not.match(l, /example\.(org|com)|https:\/\/(?!<host>)/, l);
  assert.match(g.stdout(), /^to submit an artifact .*"url":"https:\/\/<host>\/<file>"/m);
  await g.stop();
  const ro = await start(dir, { listen: { port: 0 }, chain: { dir: join(dir, 'chain') } });
  await until('the try line', async () => /^try: /m.test(ro.stdout()));
  assert.is(runTryLines(ro.stdout()), 1);
  await ro.stop();
});

test.run();
