/**
 * Mirrors and authority push end to end (docs/spec/design.md §4), with real processes: a
 * real git smart-HTTP server (git http-backend), an authority gateway that
 * pushes to it, a plain `git clone` audited with `vouch verify`, and a mirror
 * gateway that clones, verifies against its pinned key, serves the same
 * answers, follows new submits, refuses a rewritten remote while serving its
 * last verified head, and survives the remote going down.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { PushingAuthority, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { git, gitAsync, vouch, vouchAsync } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-mirror-'));
const token = 'mirror-test-token-' + 'y'.repeat(24);
const agent = new Agent();
let live: PushingAuthority;
let origin: OriginServer;
let authority: GatewayProcess;
let mirror: GatewayProcess;
let pub = '';
let remote = '';

const enc = encodeURIComponent;
async function getJson(base: string, path: string) {
  const r = await request(base + path, { dispatcher: agent });
  return { status: r.statusCode, json: (await r.body.json()) as any };
}
const submit = (url: string, semver: string) => live.submit({ url, name: 'acme/mirrored', semver, license: 'MIT' });
const remoteHead = () => git(['-C', live.bareDir, 'rev-parse', 'main']).stdout.trim();

test.before(async () => {
  origin = await OriginServer.start();
  for (let i = 1; i <= 3; i++) origin.route(`/m-${i}.tgz`, { body: `mirrored artifact ${i}` });
  live = await PushingAuthority.start(work, { signer: 'mirror-test', token });
  ({ authority, pub, remote } = live);
});

test.after(async () => {
  await live?.stop(); // the mirror, the authority, the git server
  await origin?.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

test('the authority pushes its appends; a plain git clone of the remote verifies', async () => {
  await submit(origin.url('/m-1.tgz'), '1.0.0');
  await submit(origin.url('/m-2.tgz'), '2.0.0');
  const localHead = git(['-C', live.chainDir, 'rev-parse', 'HEAD']).stdout.trim();
  await until('the push', async () => remoteHead() === localHead);
  const clone = join(work, 'audit-clone');
  assert.is((await gitAsync(['clone', '-q', remote, clone])).status, 0);
  const v = await vouchAsync(['verify', '--chain', clone, '--public-key', pub, '--json']);
  assert.is(v.status, 0, v.stderr);
  assert.is(JSON.parse(v.stdout).blocks, 3);
  assert.is(git(['-C', live.bareDir, 'fsck', '--strict']).status, 0);
});

test('a mirror without a pinned key, or with the wrong one, refuses to start', async () => {
  const noKey = writeConfig(join(work, 'm0'), { listen: { port: 0 }, chain: { dir: join(work, 'm0', 'chain'), remote } });
  let r = await vouchAsync(['serve', '--config', noKey]);
  assert.is(r.status, 2);
  assert.is(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /chain\.public_key/);
  const otherPub = createKeyFile(join(work, 'other.pem')).publicKeyB64;
  const wrong = writeConfig(join(work, 'm1'), { listen: { port: 0 }, chain: { dir: join(work, 'm1', 'chain'), remote, public_key: otherPub } });
  r = await vouchAsync(['serve', '--config', wrong]);
  assert.is(r.status, 1);
  assert.match(r.stderr, /untrusted_authority/);
});

test('a mirror clones, verifies, serves the same lookups, and picks up a new submit within a sync interval', async () => {
  mirror = await live.startMirror(join(work, 'm'));
  for (const path of [`/v1/endorsement?url=${enc(origin.url('/m-1.tgz'))}`, '/v1/authority', '/v1/checkpoint']) {
    const a = await getJson(authority.url, path);
    const m = await getJson(mirror.url, path);
    assert.is(m.status, 200, path);
    assert.equal(m.json, a.json, path);
  }
  const d = await request(`${mirror.url}/v1/download?url=${enc(origin.url('/m-2.tgz'))}`, { dispatcher: agent });
  assert.is(d.statusCode, 200);
  assert.is(await d.body.text(), 'mirrored artifact 2');
  const posted = await submit(origin.url('/m-3.tgz'), '3.0.0');
  const started = Date.now();
  const seen = await until('the mirror to serve the new block', async () => {
    const r = await getJson(mirror.url, `/v1/endorsement?url=${enc(origin.url('/m-3.tgz'))}`);
    return r.status === 200 ? r.json : null;
  });
  assert.is(seen.record_hash, posted.record_hash);
  assert.ok(Date.now() - started < 10_000, `took ${Date.now() - started} ms`);
  const ready = await getJson(mirror.url, '/readyz');
  assert.is(ready.status, 200);
  assert.is(ready.json.success, true);
  assert.is(ready.json.chain.size, 4);
  assert.type(ready.json.sync.stale_seconds, 'number');
});

test('a force-pushed rewrite of the remote is refused; the mirror keeps serving its verified head', async () => {
  const before = await getJson(mirror.url, '/v1/checkpoint');
  const evil = join(work, 'evil');
  assert.is((await gitAsync(['clone', '-q', remote, evil])).status, 0);
  const f = join(evil, 'blocks/000/000/000000002.json');
  writeFileSync(f, readFileSync(f, 'utf8').replace('"license": "MIT"', '"license": "GPL-3.0"'));
  assert.is(git(['-C', evil, '-c', 'user.name=m', '-c', 'user.email=m@x.invalid', 'commit', '-qam', 'relicense']).status, 0);
  assert.is((await gitAsync(['-C', evil, 'push', '-q', '--force', remote, 'main'])).status, 0);
  await until('the mirror to report the rewrite', async () => {
    const r = await getJson(mirror.url, '/readyz');
    return r.json.sync?.last_error?.code ? r.json.sync.last_error : null;
  });
  const after = await getJson(mirror.url, '/v1/checkpoint');
  assert.equal(after.json, before.json, 'the mirror moved to a rewritten head');
  assert.match(mirror.stderr(), /history_rewritten|record_hash_mismatch/);
  // Dropping the newest block is refused too.
  git(['-C', evil, 'reset', '-q', '--hard', 'HEAD~2']);
  assert.is((await gitAsync(['-C', evil, 'push', '-q', '--force', remote, 'main'])).status, 0);
  await new Promise((r) => setTimeout(r, 2500));
  assert.equal((await getJson(mirror.url, '/v1/checkpoint')).json, before.json);
  assert.match(mirror.stderr(), /history_rewritten/);
});

test('the remote going down and coming back is survived', async () => {
  // Restore the honest history on the remote (as the authority's next push would).
  const honest = git(['-C', live.chainDir, 'rev-parse', 'HEAD']).stdout.trim();
  assert.is((await gitAsync(['-C', live.chainDir, 'push', '-q', '--force', remote, 'main'])).status, 0);
  assert.is(remoteHead(), honest);
  live.gitServer.down = true;
  live.gitServer.dropConnections();
  origin.route('/m-4.tgz', { body: 'mirrored artifact 4' });
  await submit(origin.url('/m-4.tgz'), '4.0.0'); // acknowledged while the remote is down: pushed later
  await new Promise((r) => setTimeout(r, 2500));
  const during = await getJson(mirror.url, '/readyz');
  assert.ok(during.json.sync.consecutive_failures >= 1, JSON.stringify(during.json));
  assert.is((await getJson(mirror.url, `/v1/endorsement?url=${enc(origin.url('/m-1.tgz'))}`)).status, 200, 'stopped serving while the remote was down');
  live.gitServer.down = false;
  const last = await getJson(authority.url, '/v1/checkpoint');
  await until(
    'the mirror to catch up',
    async () => {
      const r = await getJson(mirror.url, '/v1/checkpoint');
      return r.json.head === last.json.head;
    },
    60_000,
  );
  assert.is((await getJson(mirror.url, `/v1/endorsement?url=${enc(origin.url('/m-4.tgz'))}`)).status, 200);
  const v = vouch(['verify', '--chain', join(work, 'm', 'chain'), '--public-key', pub]);
  assert.is(v.status, 0, v.stderr);
  assert.is(git(['-C', join(work, 'm', 'chain'), 'status', '--porcelain']).stdout, '');
});

test.run();
