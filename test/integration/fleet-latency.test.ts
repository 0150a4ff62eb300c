/**
 * The hinted sync path's latency (issue 35, bench `fleet`), with real
 * processes on 127.0.0.1: an authority pushing to git http-backend, a mirror
 * told by authority.notify. A push after our own push is one request (no
 * GET info/refs; a remote moved behind the pusher's back is read and pushed
 * from); the push is over at the remote's report, not after the git host's
 * hooks; the hint names the pushed head and the mirror asks for it at once
 * (one request); a hint naming a commit the remote does not serve, or an
 * old one, changes nothing and is never a refusal.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OriginServer } from '../helpers/origin-server.ts';
import { PushingAuthority, submitEntry, until, type GatewayProcess } from '../helpers/gateway-process.ts';
import { git } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-fleet-latency-'));
const token = 'fleet-latency-token-' + 'l'.repeat(24);
const syncToken = 'fleet-latency-sync-' + 's'.repeat(24);
const syncTokenFile = join(work, 'sync.token');
let live: PushingAuthority;
let origin: OriginServer;
let n = 0;

const lookupPath = (url: string) => `/v1/endorsement?url=${encodeURIComponent(url)}`;
async function status(base: string, path: string): Promise<number> {
  const r = await fetch(base + path);
  await r.arrayBuffer();
  return r.status;
}
async function submitNew(): Promise<string> {
  const path = `/l-${++n}-${Math.random().toString(36).slice(2)}.tgz`;
  origin.route(path, { body: `fleet latency artifact ${n}` });
  await submitEntry(live.authority.url, token, { url: origin.url(path), name: 'acme/latency', semver: `1.0.${n}`, license: 'MIT' });
  return origin.url(path);
}
const remoteHead = () => git(['-C', live.bareDir, 'rev-parse', 'main']).stdout.trim();
const localHead = () => git(['-C', live.chainDir, 'rev-parse', 'HEAD']).stdout.trim();
const pushed = () => until('the push', async () => remoteHead() === localHead(), 60_000);
const postReceive = () => join(live.bareDir, 'hooks', 'post-receive');

test.before(async () => {
  origin = await OriginServer.start();
  writeFileSync(syncTokenFile, syncToken, { mode: 0o600 });
  live = await PushingAuthority.start(work, { signer: 'fleet-latency', token });
  await submitNew();
  await pushed();
});

test.after(async () => {
  await live?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

test('a push after our own push is one request (no GET info/refs); a remote moved behind the pusher is read and pushed from', async () => {
  live.gitServer.requests.length = 0;
  await submitNew();
  await pushed();
  await submitNew();
  await pushed();
  const seen = live.gitServer.requests.filter((r) => r.includes('chain.git'));
  assert.equal(seen, ['POST /chain.git/git-receive-pack', 'POST /chain.git/git-receive-pack'], seen.join('\n'));
  // The remote's main moved back (as an operator's reset would): the compare-and-swap from where we left it is refused,
  // the refs are read and the push goes from there.
  const back = git(['-C', live.bareDir, 'rev-parse', 'main~1']).stdout.trim();
  git(['-C', live.bareDir, 'update-ref', 'refs/heads/main', back]);
  live.gitServer.requests.length = 0;
  await submitNew();
  await pushed();
  const again = live.gitServer.requests.filter((r) => r.includes('chain.git'));
  assert.ok(again.includes('GET /chain.git/info/refs'), again.join('\n'));
  assert.is(git(['-C', live.bareDir, 'rev-list', '--count', 'main']).stdout.trim(), git(['-C', live.chainDir, 'rev-list', '--count', 'HEAD']).stdout.trim());
});

let mirror: GatewayProcess;

test("the hint comes at the remote's report, not after its hooks, names the head, and the mirror asks for it at once", async () => {
  mirror = await live.startMirror(join(work, 'm'), {
    more: { chain: { dir: join(work, 'm', 'chain'), remote: live.remote, public_key: live.pub, sync_interval: 300, sync_token_file: syncTokenFile } },
  });
  await live.restart({ notify: [{ url: mirror.url, token_file: syncTokenFile }] });
  // A git host whose post-receive hook takes 8 s (a slow mail or CI hook): the push's report comes before it runs.
  writeFileSync(postReceive(), '#!/bin/sh\nsleep 8\n');
  chmodSync(postReceive(), 0o755);
  try {
    const warm = await submitNew(); // the restarted authority's first push reads the refs; the next ones do not
    await until('the mirror to catch up', async () => (await status(mirror.url, lookupPath(warm))) === 200, 60_000);
    await new Promise((r) => setTimeout(r, 500)); // a sync still winding down is not counted below
    live.gitServer.timeline = [];
    const url = await submitNew();
    const t0 = Date.now();
    await until('the mirror to serve the new block', async () => (await status(mirror.url, lookupPath(url))) === 200, 60_000);
    const ms = Date.now() - t0;
    assert.ok(ms < 5_000, `the mirror answered ${ms} ms after the 201, with an 8 s post-receive hook on the git host`);
    const asked = live.gitServer.timeline.filter((e) => e.request.includes('upload-pack')).map((e) => e.request.replace(/^.*chain\.git\//, ''));
    assert.equal(asked, ['git-upload-pack'], `the mirror's requests: ${asked.join(', ')}`);
  } finally {
    rmSync(postReceive(), { force: true });
    live.gitServer.timeline = null;
  }
});

test('a hint naming a commit the remote does not serve, or an old one, changes nothing and is never a refusal; a malformed one is 400', async () => {
  const post = (body: unknown) =>
    fetch(`${mirror.url}/v1/sync`, {
      method: 'POST',
      headers: { authorization: `Bearer ${syncToken}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  let r = await post({ size: 1, head: 'not-a-commit' });
  assert.is(r.status, 400, await r.text());
  const metric = async () => {
    const m = await (await fetch(`${mirror.url}/metrics`)).text();
    return Number(/^vouch_chain_sync_notifications_total (\d+)$/m.exec(m)?.[1]);
  };
  const syncs = async () => {
    const h = (await (await fetch(`${mirror.url}/healthz`)).json()) as any;
    return JSON.stringify(h);
  };
  const before = await metric();
  const first = git(['-C', live.bareDir, 'rev-list', '--max-parents=0', 'main']).stdout.trim();
  for (const head of ['0123456789abcdef0123456789abcdef01234567', first]) {
    r = await post({ size: 1, head });
    assert.is(r.status, 202, await r.text());
  }
  await until('the hints to be taken', async () => (await metric()) >= before + 2, 30_000);
  // Then a real block, hinted by the authority: served as ever.
  const url = await submitNew();
  await until('the mirror to serve the new block', async () => (await status(mirror.url, lookupPath(url))) === 200, 60_000);
  const logs = mirror.stderr();
  assert.not.match(logs, /refused the remote head|still at a refused head/, logs.slice(-2000));
  assert.not.match(await syncs(), /history_rewritten/);
});

test.run();
