/**
 * Revocation (issue 32 item 1): `vouch revoke` offline and `POST /v1/revoke`
 * on a running authority gateway, real processes throughout. Offline: by
 * URL, by URL + semver, by block, with a future effective date (at= before
 * it still selects), and every refusal appending nothing (chain size and
 * `vouch verify` after). Through the gateway: 201, then the lookup's
 * revoked_by, the download's 410, an npm route's packument without the
 * version and `latest` recomputed (test/helpers/npm-registry.ts), a PyPI
 * route's simple page (HTML and JSON) without the file and a Go route's
 * `@v/list` without the version and `@latest` moved to the one before
 * (test/helpers/pypi-fixture.ts, go-modules.ts), on `unendorsed: pass`
 * routes as on deny routes, `vouch get`
 * exit 1 naming the revocation; 401 / 404 / 409 / 400 / 415; revokes and
 * submits racing through the one writer; `vouch verify` on a git clone.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { NpmRegistry } from '../helpers/npm-registry.ts';
import { PypiHost, buildDists, distFilename, sha256Hex, type DistSpec } from '../helpers/pypi-fixture.ts';
import { modVersion } from '../helpers/go-modules.ts';
import { git, vouchAsync, type Run } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-revoke-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'revoke-token-' + 'r'.repeat(32);
const offline = join(work, 'offline');
const served = join(work, 'served');
let pub = '';
let origin: OriginServer;
let reg: NpmRegistry;
let pypiIndex: PypiHost;
let pypiFiles: PypiHost;
let goOrigin: OriginServer;
let gw: GatewayProcess;
const today = new Date().toISOString().slice(0, 10);

const file = (name: string, text: string) => {
  const p = join(work, name);
  writeFileSync(p, text);
  return p;
};
const U = (p: string) => `https://artifacts.example.org${p}`;
const vouch = (...args: string[]) => vouchAsync(args);
const ok = (r: Run) => {
  assert.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
  return r;
};

async function size(chain: string): Promise<number> {
  const r = ok(await vouch('verify', '--chain', chain, '--public-key', pub, '--json'));
  return JSON.parse(r.stdout).blocks as number;
}

async function endorseOffline(url: string, semver: string, text: string, more: string[] = []): Promise<number> {
  const r = ok(
    await vouch(
      'endorse',
      '--chain',
      offline,
      '--key',
      keyFile,
      '--url',
      url,
      '--name',
      'acme/widget',
      '--semver',
      semver,
      '--license',
      'MIT',
      '--file',
      file(`f-${semver}-${url.split('/').pop()}`, text),
      ...more,
    ),
  );
  return Number(r.stdout.split(' ')[0]);
}

const post = (path: string, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }) =>
  fetch(gw.url + path, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });

async function revokeApi(body: unknown): Promise<{ status: number; json: Record<string, any>; type: string | null }> {
  const r = await post('/v1/revoke', body);
  return { status: r.status, json: (await r.json()) as Record<string, any>, type: r.headers.get('content-type') };
}

test.before(async () => {
  pub = createKeyFile(keyFile).publicKeyB64;
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  reg = await NpmRegistry.start(work);
  pypiIndex = await PypiHost.start();
  pypiFiles = await PypiHost.start();
  goOrigin = await OriginServer.start();
  ok(await vouch('init', '--chain', offline, '--key', keyFile, '--signer', 'revoke-test', '--uns', 'acme/releases'));
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: served },
      authority: { key_file: keyFile, signer: 'revoke-test', submit_token_file: tokenFile },
      origin: { allow_private: true, timeout: 5 },
      proxy: {
        routes: [
          { prefix: '/npm/', kind: 'npm', origin: `${reg.url}/`, canonical: `${reg.url}/`, metadata_ttl: 0 },
          { prefix: '/pypi/', kind: 'pypi', origin: `${pypiIndex.origin}/`, canonical: `${pypiIndex.origin}/`, metadata_ttl: 0 },
          { prefix: '/pypi-files/', kind: 'pypi', origin: `${pypiFiles.origin}/`, canonical: `${pypiFiles.origin}/` },
          { prefix: '/go/', kind: 'goproxy', origin: `${goOrigin.origin}/`, canonical: `${goOrigin.origin}/`, metadata_ttl: 0 },
          // The same origins on pass routes: unendorsed versions pass through, a revoked one is still never offered.
          { prefix: '/npm-pass/', kind: 'npm', origin: `${reg.url}/`, canonical: `${reg.url}/`, metadata_ttl: 0, unendorsed: 'pass' },
          { prefix: '/pypi-pass/', kind: 'pypi', origin: `${pypiIndex.origin}/`, canonical: `${pypiIndex.origin}/`, metadata_ttl: 0, unendorsed: 'pass' },
          { prefix: '/go-pass/', kind: 'goproxy', origin: `${goOrigin.origin}/`, canonical: `${goOrigin.origin}/`, metadata_ttl: 0, unendorsed: 'pass' },
        ],
      },
    }),
  ]);
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  await reg?.close().catch(() => {});
  await pypiIndex?.close();
  await pypiFiles?.close();
  await goOrigin?.close();
  rmSync(work, { recursive: true, force: true });
});

// ---------------------------------------------------------------- offline

test('offline: --url revokes the version selected today; --semver names an exact one; vouch check follows', async () => {
  const w = U('/widget.js');
  const b1 = await endorseOffline(w, '1.0.0', 'widget one');
  const b2 = await endorseOffline(w, '2.0.0', 'widget two');
  const one = join(work, 'f-1.0.0-widget.js');
  const two = join(work, 'f-2.0.0-widget.js');
  ok(await vouch('check', '--chain', offline, '--url', w, two));
  // By URL: the newest in force, block b2.
  let r = ok(await vouch('revoke', '--chain', offline, '--key', keyFile, '--url', w, '--json'));
  const j = JSON.parse(r.stdout);
  assert.is(j.status, 'revoked');
  assert.is(j.revokes.index, b2);
  assert.is(j.effective_date, today);
  assert.equal(j.revokes.urls, [w]);
  // Lookups now select 1.0.0; 2.0.0 asked for exactly is revoked (exit 1 naming the revoke block).
  ok(await vouch('check', '--chain', offline, '--url', w, one));
  r = await vouch('check', '--chain', offline, '--url', w, '--semver', '2.0.0', two);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, new RegExp(`revoked by block ${j.index} from ${today}`));
  // By URL + semver: block b1; then every version of the URL is revoked.
  r = ok(await vouch('revoke', '--chain', offline, '--key', keyFile, '--url', w, '--semver', '1.0.0', '--comment', 'leaked build key'));
  assert.match(r.stdout, new RegExp(`^\\d+ [0-9a-f]{64} revokes block ${b1} \\(acme/widget 1\\.0\\.0, 1 artifact\\) from ${today}\\n$`));
  r = await vouch('check', '--chain', offline, '--url', w, one);
  assert.is(r.status, 1);
  assert.match(r.stderr, /revoked/);
  assert.is(await size(offline), b2 + 3);
});

test('offline: --block revokes a whole multi-artifact block; a --url into it is refused and names the block', async () => {
  const a = U('/pair-a.js');
  const b = U('/pair-b.js');
  const r0 = ok(
    await vouch(
      'endorse',
      '--chain',
      offline,
      '--key',
      keyFile,
      '--url',
      a,
      '--url',
      b,
      '--name',
      'acme/pair',
      '--semver',
      '1.0.0',
      '--license',
      'MIT',
      '--file',
      file('pa', 'pair a'),
      '--file',
      file('pb', 'pair b'),
    ),
  );
  const n = Number(r0.stdout.split(' ')[0]);
  const before = await size(offline);
  let r = await vouch('revoke', '--chain', offline, '--key', keyFile, '--url', a);
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr, new RegExp(`endorsed in block ${n} with 1 other artifact; .*revoke block ${n} by its index`));
  assert.is(await size(offline), before);
  r = ok(await vouch('revoke', '--chain', offline, '--key', keyFile, '--block', String(n), '--json'));
  assert.equal(JSON.parse(r.stdout).revokes.urls, [a, b]);
  assert.is(await size(offline), before + 1);
});

test('offline: a future effective date is not in force today; at= before it still selects, at= after it is revoked', async () => {
  const w = U('/later.js');
  const text = 'later one';
  await endorseOffline(w, '1.0.0', text);
  ok(await vouch('revoke', '--chain', offline, '--key', keyFile, '--url', w, '--effective-date', '2099-01-01'));
  const f = join(work, 'f-1.0.0-later.js');
  ok(await vouch('check', '--chain', offline, '--url', w, f));
  ok(await vouch('check', '--chain', offline, '--url', w, '--at', '2098-12-31', f));
  const r = await vouch('check', '--chain', offline, '--url', w, '--at', '2099-01-01', f);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /revoked by block \d+ from 2099-01-01/);
});

test('offline refusals append nothing: block 0, a revoke block, nothing endorsed, already revoked, unknown block, bad input', async () => {
  const w = U('/once.js');
  const b = await endorseOffline(w, '1.0.0', 'once');
  const rv = JSON.parse(ok(await vouch('revoke', '--chain', offline, '--key', keyFile, '--block', String(b), '--json')).stdout).index as number;
  const before = await size(offline);
  const cases: [string[], number, RegExp][] = [
    [['--block', '0'], 2, /^vouch revoke: block 0 is the authority block: it cannot be revoked\n$/],
    [['--block', String(rv)], 2, new RegExp(`block ${rv} is a revoke block: only endorse blocks can be revoked`)],
    [['--url', U('/never.js')], 2, /nothing is endorsed for https:\/\/artifacts\.example\.org\/never\.js: nothing to revoke/],
    [['--url', w, '--semver', '9.9.9'], 2, /nothing is endorsed for .*once\.js 9\.9\.9/],
    [['--block', String(b)], 1, new RegExp(`block ${b} is already revoked by block ${rv} \\(effective ${today}\\)`)],
    [['--url', w], 1, /already revoked/],
    [['--block', '99999'], 2, new RegExp(`block 99999 does not exist: the chain has ${before} blocks`)],
    [['--block', '-1'], 2, /--block|argument/],
    [['--block', '1x'], 2, /--block must be a block index/],
    [['--url', w, '--effective-date', '2026-13-45'], 2, /--effective-date must be a date YYYY-MM-DD/],
    [['--url', w, '--block', '1'], 2, /give --url URL .* or --block N/],
    [[], 2, /give --url URL .* or --block N/],
    [['--semver', '1.0.0', '--block', '1'], 2, /--semver applies only with --url/],
  ];
  for (const [args, exit, message] of cases) {
    const r = await vouch('revoke', '--chain', offline, '--key', keyFile, ...args);
    assert.is(r.status, exit, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
    assert.is(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
    assert.is(r.stdout, '');
  }
  assert.is(await size(offline), before, 'a refused revoke appended a block');
});

test('offline: a git clone of the chain verifies after the revocations, pinned', async () => {
  const clone = join(work, 'offline-clone');
  assert.is(git(['clone', '-q', offline, clone]).status, 0);
  const r = ok(await vouch('verify', '--chain', clone, '--public-key', pub, '--json'));
  assert.is(JSON.parse(r.stdout).blocks, await size(offline));
});

test('offline: a chain that does not verify is refused (exit 1, the first broken block), nothing appended', async () => {
  const bad = join(work, 'offline-tampered');
  assert.is(git(['clone', '-q', offline, bad]).status, 0);
  const f = join(bad, 'blocks', '000', '000', '000000001.json');
  writeFileSync(f, readFileSync(f, 'utf8').replace('"comment": "acme/widget 1.0.0"', '"comment": "tampered"'));
  assert.is(git(['-C', bad, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qam', 'tamper']).status, 0);
  const commits = git(['-C', bad, 'rev-list', '--count', 'HEAD']).stdout;
  const r = await vouch('revoke', '--chain', bad, '--key', keyFile, '--block', '2');
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^vouch revoke: record_hash_mismatch at block 1: /);
  assert.is(git(['-C', bad, 'rev-list', '--count', 'HEAD']).stdout, commits);
});

test('offline revoke is refused while the authority gateway holds the chain, pointing at POST /v1/revoke', async () => {
  const r = await vouch('revoke', '--chain', served, '--key', keyFile, '--block', '1');
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr, /is in use by a running gateway \(pid \d+.*\): revoke through it \(POST \/v1\/revoke\) or stop it first/);
});

// ---------------------------------------------------------------- through the gateway

test('POST /v1/revoke: 201 once committed; lookup revoked_by, download 410, npm packument drops the version, latest recomputed', async () => {
  const [t1, t2] = await Promise.all([
    reg.publish('leftpad', '1.0.0', { 'index.js': 'module.exports = 1;\n' }, { latest: false }),
    reg.publish('leftpad', '1.1.0', { 'index.js': 'module.exports = 11;\n' }, { latest: true }),
  ]);
  assert.ok(t1 && t2);
  const url = (v: string) => `${reg.url}${NpmRegistry.tarballPath('leftpad', v)}`;
  await submitEntry(gw.url, token, { url: url('1.0.0'), name: 'npm/leftpad', semver: '1.0.0', license: 'MIT' });
  const s2 = await submitEntry(gw.url, token, { url: url('1.1.0'), name: 'npm/leftpad', semver: '1.1.0', license: 'MIT' });
  const packument = async () =>
    (await (await fetch(`${gw.url}/npm/leftpad`)).json()) as { versions: Record<string, unknown>; 'dist-tags': Record<string, string> };
  let p = await packument();
  assert.equal(Object.keys(p.versions).sort(), ['1.0.0', '1.1.0']);
  assert.is(p['dist-tags'].latest, '1.1.0');
  const dl = async (v: string) => (await fetch(`${gw.url}/v1/download?url=${encodeURIComponent(url(v))}`)).status;
  assert.is(await dl('1.1.0'), 200);

  const r = await revokeApi({ url: url('1.1.0'), comment: 'compromised maintainer account' });
  assert.is(r.status, 201, JSON.stringify(r.json));
  assert.match(r.type ?? '', /^application\/json/);
  assert.is(r.json.success, true);
  assert.is(r.json.status, 'revoked');
  assert.is(r.json.index, s2.index + 1);
  assert.match(r.json.record_hash, /^[0-9a-f]{64}$/);
  assert.equal(r.json.revokes, { index: s2.index, record_hash: s2.record_hash, urls: [url('1.1.0')] });
  // Answered once committed: the block is served right away.
  const blk = (await (await fetch(`${gw.url}/v1/block?index=${r.json.index}`)).json()) as Record<string, any>;
  assert.is(blk.record_hash, r.json.record_hash);
  assert.is(blk.payload.intent, 'revoke');
  assert.is(blk.payload.target_hash, s2.record_hash);
  assert.is(blk.comment, 'compromised maintainer account');

  const look = (await (await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(url('1.1.0'))}&semver=1.1.0`)).json()) as Record<string, any>;
  assert.equal(look.revoked_by, { index: r.json.index, record_hash: r.json.record_hash, effective_date: today });
  assert.is(await dl('1.1.0'), 410);
  // Without semver the lookup now selects 1.0.0, in force.
  const live = (await (await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(url('1.1.0'))}`)).json()) as Record<string, any>;
  assert.is(live.revoked_by, undefined);
  p = await packument();
  assert.equal(Object.keys(p.versions), ['1.0.0']);
  assert.is(p['dist-tags'].latest, '1.0.0');

  // vouch get: exit 1, naming the revocation.
  const out = join(work, 'got.tgz');
  const g = await vouch(
    'get',
    '--gateway',
    gw.url,
    '--url',
    url('1.1.0'),
    '--semver',
    '1.1.0',
    '--public-key',
    pub,
    '-o',
    out,
    '--state',
    join(work, 'state.json'),
  );
  assert.is(g.status, 1, g.stderr);
  assert.is(g.stderr, `http_410: HTTP 410: ${url('1.1.0')} 1.1.0 (block ${s2.index}) is revoked by block ${r.json.index} from ${today}\n`);
  assert.not.ok(existsSync(out), 'a revoked artifact was written');
});

test('POST /v1/revoke refusals: 401, 415, 400, 404, 409, with the JSON error contract and nothing appended', async () => {
  origin.route('/api-one.js', { body: 'api one' });
  const s = await submitEntry(gw.url, token, { url: origin.url('/api-one.js'), name: 'acme/api', semver: '1.0.0', license: 'MIT' });
  const headBefore = async () => Number(JSON.parse(await (await fetch(`${gw.url}/v1/checkpoint`)).text()).size);
  const first = await revokeApi({ block: s.index });
  assert.is(first.status, 201, JSON.stringify(first.json));
  const before = await headBefore();
  const noAuth = await post('/v1/revoke', { block: s.index }, { 'content-type': 'application/json' });
  assert.is(noAuth.status, 401);
  assert.is(((await noAuth.json()) as any).status, 'unauthorized');
  const wrong = await post('/v1/revoke', { block: s.index }, { authorization: 'Bearer nope', 'content-type': 'application/json' });
  assert.is(wrong.status, 401);
  await wrong.body?.cancel();
  const text = await post('/v1/revoke', 'block=1', { authorization: `Bearer ${token}`, 'content-type': 'text/plain' });
  assert.is(text.status, 415);
  await text.body?.cancel();
  const cases: [unknown, number, string, RegExp][] = [
    [{ block: 0 }, 400, 'bad_request', /block 0 is the authority block/],
    [{ block: first.json.index }, 400, 'bad_request', /is a revoke block/],
    [{ block: s.index }, 409, 'already_revoked', new RegExp(`block ${s.index} is already revoked by block ${first.json.index}`)],
    [{ url: origin.url('/api-one.js') }, 409, 'already_revoked', /already revoked/],
    [{ url: origin.url('/never.js') }, 404, 'not_found', /nothing is endorsed for .*: nothing to revoke/],
    [{ block: 1_000_000 }, 404, 'not_found', /block 1000000 does not exist/],
    [{}, 400, 'bad_request', /missing url \(or block\)/],
    [{ block: -1 }, 400, 'bad_request', /block must be a block index/],
    [{ block: '1' }, 400, 'bad_request', /block must be a block index/],
    [{ block: 1, url: origin.url('/api-one.js') }, 400, 'bad_request', /either block or url/],
    [{ url: 'ftp://x/y' }, 400, 'bad_request', /url must be an absolute http\(s\) URL/],
    [{ url: origin.url('/api-one.js'), semver: 'v1' }, 400, 'bad_request', /semver must be a SemVer/],
    [{ block: s.index, effective_date: '2026-02-30x' }, 400, 'bad_request', /effective_date must be a date/],
    [{ block: s.index, force: true }, 400, 'bad_request', /unknown member "force"/],
    [[1], 400, 'bad_request', /must be a JSON object/],
  ];
  for (const [body, status, code, message] of cases) {
    const r = await revokeApi(body);
    assert.is(r.status, status, `${JSON.stringify(body)}: ${JSON.stringify(r.json)}`);
    assert.match(r.type ?? '', /^application\/json/);
    assert.is(r.json.success, false);
    assert.is(r.json.status, code, JSON.stringify(r.json));
    assert.match(r.json.message, message, JSON.stringify(body));
  }
  const bad = await post('/v1/revoke', '{"block":', { authorization: `Bearer ${token}`, 'content-type': 'application/json' });
  assert.is(bad.status, 400);
  assert.is(((await bad.json()) as any).status, 'bad_request');
  assert.is(await headBefore(), before, 'a refused revoke appended a block');
});

test('POST /v1/revoke with a future effective_date: in force from then; at= before it still selects', async () => {
  origin.route('/future.js', { body: 'future' });
  const u = origin.url('/future.js');
  await submitEntry(gw.url, token, { url: u, name: 'acme/future', semver: '1.0.0', license: 'MIT' });
  const r = await revokeApi({ url: u, semver: '1.0.0', effective_date: '2099-01-01' });
  assert.is(r.status, 201, JSON.stringify(r.json));
  assert.is(r.json.effective_date, '2099-01-01');
  const look = async (q: string) => (await (await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(u)}${q}`)).json()) as Record<string, any>;
  assert.is((await look('')).revoked_by, undefined);
  assert.is((await look('&at=2098-12-31')).revoked_by, undefined);
  assert.is((await look('&semver=1.0.0&at=2098-12-31')).revoked_by, undefined);
  assert.is((await look('&semver=1.0.0&at=2099-01-01')).revoked_by.index, r.json.index);
  // Without semver, at= from the effective date on: nothing in force (404, saying why).
  assert.match((await look('&at=2099-01-01')).message, /every endorsement in force is revoked/);
  assert.is((await fetch(`${gw.url}/v1/download?url=${encodeURIComponent(u)}`)).status, 200);
  // Already named by a revoke, whatever its date.
  assert.is((await revokeApi({ url: u })).status, 409);
});

test('revokes and submits racing through the one writer: every answer committed, one revoke per block, the clone verifies', async () => {
  const paths = Array.from({ length: 6 }, (_, i) => `/race-${i}.js`);
  for (const p of paths) origin.route(p, { body: `race ${p}` });
  const targets = await Promise.all(
    paths.slice(0, 3).map((p) => submitEntry(gw.url, token, { url: origin.url(p), name: 'acme/race', semver: '1.0.0', license: 'MIT' })),
  );
  const answers = await Promise.all([
    ...paths.slice(3).map((p) =>
      post('/v1/submit', { url: origin.url(p), name: 'acme/race', semver: '1.0.0', license: 'MIT' }).then(async (r) => ({
        status: r.status,
        json: (await r.json()) as any,
      })),
    ),
    ...targets.map((t) => revokeApi({ block: t.index })),
    ...targets.map((t) => revokeApi({ block: t.index })),
  ]);
  const statuses = answers.map((a) => a.status);
  assert.equal(statuses.slice(0, 3), [201, 201, 201], JSON.stringify(answers));
  // Each target revoked exactly once: one 201 and one 409 per block.
  for (let k = 0; k < 3; k++) {
    const pair = [answers[3 + k]!.status, answers[6 + k]!.status].sort();
    assert.equal(pair, [201, 409], JSON.stringify(answers));
  }
  const indexes = answers.filter((a) => a.status === 201).map((a) => a.json.index as number);
  assert.is(new Set(indexes).size, 6);
  const size = Number(JSON.parse(await (await fetch(`${gw.url}/v1/checkpoint`)).text()).size);
  assert.is(Math.max(...indexes) + 1, size);
  const clone = join(work, 'served-clone');
  assert.is(git(['clone', '-q', served, clone]).status, 0);
  const v = ok(await vouch('verify', '--chain', clone, '--public-key', pub, '--json'));
  assert.is(JSON.parse(v.stdout).blocks, size);
  // Every 201 of POST /v1/revoke in this file is counted (3 before this test, 3 here).
  const metrics = await (await fetch(`${gw.url}/metrics`)).text();
  assert.match(metrics, /^vouch_submits_total\{outcome="revoked"\} 6$/m);
});

test('npm pass route: the revoked version is dropped and latest recomputed, as on a deny route; an unendorsed one stays, marked', async () => {
  const [a, b, c] = await Promise.all([
    reg.publish('rightpad', '1.0.0', { 'index.js': 'module.exports = 1;\n' }, { latest: false }),
    reg.publish('rightpad', '1.1.0', { 'index.js': 'module.exports = 11;\n' }, { latest: true }),
    reg.publish('rightpad', '0.9.0', { 'index.js': 'module.exports = 9;\n' }, { latest: false }),
  ]);
  assert.ok(a && b && c);
  const url = (v: string) => `${reg.url}${NpmRegistry.tarballPath('rightpad', v)}`;
  for (const v of ['1.0.0', '1.1.0']) await submitEntry(gw.url, token, { url: url(v), name: 'npm/rightpad', semver: v, license: 'MIT' });
  const packument = async (route: string) =>
    (await (await fetch(`${gw.url}/${route}/rightpad`)).json()) as { versions: Record<string, { deprecated?: string }>; 'dist-tags': Record<string, string> };
  let p = await packument('npm-pass');
  assert.equal(Object.keys(p.versions).sort(), ['0.9.0', '1.0.0', '1.1.0']);
  assert.is(p['dist-tags'].latest, '1.1.0');
  const r = await revokeApi({ url: url('1.1.0') });
  assert.is(r.status, 201, JSON.stringify(r.json));
  for (const route of ['npm', 'npm-pass']) {
    p = await packument(route);
    assert.equal(Object.keys(p.versions).sort(), route === 'npm' ? ['1.0.0'] : ['0.9.0', '1.0.0'], route);
    assert.is(p['dist-tags'].latest, '1.0.0', `${route}: latest still names the revoked version`);
  }
  assert.ok(p.versions['0.9.0']!.deprecated, 'the unendorsed version is not marked');
  assert.is(p.versions['1.0.0']!.deprecated, undefined);
  assert.is((await fetch(`${gw.url}/npm-pass${NpmRegistry.tarballPath('rightpad', '1.1.0')}`)).status, 410);
});

test('PyPI routes: the simple page (HTML and JSON) drops the revoked file and its version, on a pass route too; the one before stays; the file answers 410', async () => {
  // 0.9.0 is listed by the index and never endorsed: offered on the pass route only.
  const specs: DistSpec[] = ['1.0.0', '1.1.0', '0.9.0'].map((version) => ({ kind: 'wheel', name: 'revoke-demo', version }));
  const dists = buildDists(specs);
  const paths = specs.map((d, i) => `/packages/${i}/${distFilename(d)}`);
  dists.forEach((b, i) => pypiFiles.file(paths[i]!, b));
  pypiIndex.project(
    'revoke-demo',
    specs.map((d, i) => ({ href: pypiFiles.url(paths[i]!), sha256: sha256Hex(dists[i]!), filename: distFilename(d), version: d.version })),
  );
  for (let i = 0; i < 2; i++)
    await submitEntry(gw.url, token, { url: pypiFiles.url(paths[i]!), name: 'pypi/revoke-demo', semver: specs[i]!.version, license: 'MIT' });
  const html = async (route = 'pypi') => (await fetch(`${gw.url}/${route}/simple/revoke-demo/`, { headers: { accept: 'text/html' } })).text();
  const json = async (route = 'pypi') =>
    (await (await fetch(`${gw.url}/${route}/simple/revoke-demo/`, { headers: { accept: 'application/vnd.pypi.simple.v1+json' } })).json()) as {
      versions: string[];
      files: { filename: string; url: string }[];
    };
  const [f0, f1, f9] = specs.map(distFilename) as [string, string, string];
  let page = await html();
  assert.ok(page.includes(`>${f0}</a>`) && page.includes(`>${f1}</a>`), page);
  let j = await json();
  assert.equal(j.versions, ['1.0.0', '1.1.0']);
  assert.equal(
    j.files.map((f) => f.filename),
    [f0, f1],
  );
  assert.equal((await json('pypi-pass')).versions, ['1.0.0', '1.1.0', '0.9.0']);
  const file = async (i: number) => (await fetch(`${gw.url}/pypi-files${paths[i]}`)).status;
  assert.is(await file(1), 200);

  const r = await revokeApi({ url: pypiFiles.url(paths[1]!) });
  assert.is(r.status, 201, JSON.stringify(r.json));
  page = await html();
  assert.ok(page.includes(`>${f0}</a>`), page);
  assert.not.ok(page.includes(f1), `the revoked file is still offered:\n${page}`);
  j = await json();
  assert.equal(j.versions, ['1.0.0'], 'PEP 700 versions still list the revoked version');
  assert.equal(
    j.files.map((f) => f.filename),
    [f0],
  );
  // A pass route offers what is not endorsed, never what the authority revoked.
  page = await html('pypi-pass');
  assert.ok(page.includes(`>${f0}</a>`) && page.includes(`>${f9}</a>`), page);
  assert.not.ok(page.includes(f1), `the pass route still offers the revoked file:\n${page}`);
  j = await json('pypi-pass');
  assert.equal(j.versions, ['1.0.0', '0.9.0']);
  assert.equal(
    j.files.map((f) => f.filename),
    [f0, f9],
  );
  assert.is(await file(1), 410);
  assert.is(await file(0), 200);
});

test('Go routes: @v/list drops the revoked version, @latest moves to the one before, on a pass route too; its .info is a 404 and its zip a 410', async () => {
  const mod = 'example.com/revoked';
  const versions = ['v1.0.0', 'v1.1.0'].map((v, i) => modVersion(mod, v, `2026-0${i + 1}-01T00:00:00Z`));
  for (const m of versions) {
    goOrigin
      .route(`/${mod}/@v/${m.version}.zip`, { body: m.zip, contentType: 'application/zip' })
      .route(`/${mod}/@v/${m.version}.mod`, { body: m.mod, contentType: 'text/plain' })
      .route(`/${mod}/@v/${m.version}.info`, { body: m.info, contentType: 'application/json' });
  }
  // v0.9.0 is listed by the origin and never endorsed: offered on the pass route only.
  const unendorsed = modVersion(mod, 'v0.9.0', '2025-12-01T00:00:00Z');
  goOrigin.route(`/${mod}/@v/v0.9.0.info`, { body: unendorsed.info, contentType: 'application/json' });
  goOrigin
    .route(`/${mod}/@v/list`, { body: 'v0.9.0\nv1.0.0\nv1.1.0\n', contentType: 'text/plain' })
    .route(`/${mod}/@latest`, { body: versions[1]!.info, contentType: 'application/json' });
  const zip = (v: string) => goOrigin.url(`/${mod}/@v/${v}.zip`);
  for (const m of versions)
    await submitEntry(gw.url, token, { url: zip(m.version), name: 'go/example.com+revoked', semver: m.version.slice(1), license: 'MIT' });
  const get = async (p: string, route = 'go') => {
    const res = await fetch(`${gw.url}/${route}/${mod}/${p}`);
    return { status: res.status, text: await res.text() };
  };
  assert.equal(await get('@v/list'), { status: 200, text: 'v1.0.0\nv1.1.0\n' });
  assert.equal(await get('@v/list', 'go-pass'), { status: 200, text: 'v0.9.0\nv1.0.0\nv1.1.0\n' });
  let latest = await get('@latest');
  assert.is(latest.status, 200, latest.text);
  assert.is(JSON.parse(latest.text).Version, 'v1.1.0');
  assert.is(JSON.parse((await get('@latest', 'go-pass')).text).Version, 'v1.1.0');

  const r = await revokeApi({ url: zip('v1.1.0') });
  assert.is(r.status, 201, JSON.stringify(r.json));
  assert.equal(await get('@v/list'), { status: 200, text: 'v1.0.0\n' });
  latest = await get('@latest');
  assert.is(latest.status, 200, latest.text);
  assert.is(JSON.parse(latest.text).Version, 'v1.0.0', 'a revoked version is still @latest');
  assert.is((await get('@v/v1.1.0.info')).status, 404);
  // The pass route: unendorsed versions listed, the revoked one not; @latest the newest not revoked (the origin's names the revoked one).
  assert.equal(await get('@v/list', 'go-pass'), { status: 200, text: 'v0.9.0\nv1.0.0\n' });
  latest = await get('@latest', 'go-pass');
  assert.is(latest.status, 200, latest.text);
  assert.is(JSON.parse(latest.text).Version, 'v1.0.0', 'a revoked version is still @latest on the pass route');
  assert.is((await get('@v/v1.1.0.info', 'go-pass')).status, 404);
  assert.is((await get('@v/v1.1.0.mod', 'go-pass')).status, 404);
  assert.is((await get('@v/v1.1.0.zip', 'go-pass')).status, 410);
  assert.is((await get('@v/v0.9.0.info', 'go-pass')).status, 200);
  const z = await get('@v/v1.1.0.zip');
  assert.is(z.status, 410);
  assert.match(z.text, /is revoked by the authority, refused/);
  assert.is((await get('@v/v1.0.0.zip')).status, 200);
});

test('the openapi document names POST /v1/revoke', async () => {
  const doc = (await (await fetch(`${gw.url}/v1/openapi.json`)).json()) as any;
  assert.ok(doc.paths['/v1/revoke']?.post, 'no POST /v1/revoke in the OpenAPI document');
  assert.ok(readFileSync(join(work, 'vouch.yaml'), 'utf8').length > 0);
});

test.run();
