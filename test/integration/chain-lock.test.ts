/**
 * One writer per chain (store/chain-lock.ts) with real processes: `vouch
 * endorse` on the chain of a running authority gateway is refused with one
 * line (exit 2) and leaves the chain untouched, so the gateway's submits
 * keep working; a second authority gateway on the directory refuses to
 * start; once the gateway stops the endorse works; a lock whose process is
 * gone is taken over. Origins are on 127.0.0.1 (`origin.allow_private`).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { acquireChainLock, assertChainWritable, lockPathOf } from '../../store/chain-lock.ts';
import { VouchError } from '../../chain/errors.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { postSubmit, startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { git, vouchAsync, vouchEndorse } from '../helpers/processes.ts';

const work = realpathSync(mkdtempSync(join(tmpdir(), 'vouch-lock-')));
const chain = join(work, 'chain');
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'lock-test-token-' + 'l'.repeat(30);
const lockFile = join(chain, '.git', 'vouch.lock');
const agent = new Agent();
let origin: OriginServer;
let gw: GatewayProcess | null = null;

const config = () => ({
  listen: { port: 0 },
  chain: { dir: chain },
  authority: { key_file: keyFile, signer: 'lock-test', submit_token_file: tokenFile },
  origin: { allow_private: true },
});

test.before(async () => {
  createKeyFile(keyFile);
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  writeFileSync(join(work, 'a.txt'), 'artifact a\n');
  origin = await OriginServer.start();
  for (const n of ['s1', 's2', 's3']) origin.route(`/${n}.txt`, { body: `submitted ${n}\n` });
  const init = await vouchAsync(['init', '--chain', chain, '--key', keyFile, '--signer', 'lock-test']);
  assert.is(init.status, 0, init.stderr);
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

async function submit(path: string): Promise<{ status: number; json: any }> {
  const r = await postSubmit(gw!.url, token, { url: origin.url(path), name: 'acme/lock', semver: `1.0.${path.charCodeAt(2)}`, license: 'MIT' });
  return { status: r.status, json: r.json };
}

const endorse = (url: string) =>
  vouchEndorse(chain, keyFile, ['--url', url, '--name', 'acme/cli', '--semver', '1.0.0', '--license', 'MIT', '--file', join(work, 'a.txt')]);

function gitClean(): void {
  const s = git(['-C', chain, 'status', '--porcelain']);
  assert.is(s.status, 0, s.stderr);
  assert.is(s.stdout, '', 'git status is not clean');
}

/** A pid that is certainly not running: a child that has exited and been reaped. */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return Number(r.stdout);
}

test('a running authority gateway holds the lock; vouch endorse on its chain is refused (exit 2, one line) and changes nothing', async () => {
  gw = await startGatewayProcess(['--config', writeConfig(work, config())]);
  assert.ok(existsSync(lockFile), 'no lock file');
  const lock = JSON.parse(readFileSync(lockFile, 'utf8'));
  assert.is(lock.pid, gw.child.pid);
  const head = git(['-C', chain, 'rev-parse', 'HEAD']).stdout;

  const r = await endorse('https://cdn.example/a.txt');
  assert.is(r.status, 2, r.stderr);
  assert.is(r.stdout, '');
  const lines = r.stderr.trim().split('\n');
  assert.is(lines.length, 1, r.stderr);
  assert.is(
    lines[0],
    `vouch endorse: chain ${chain} is in use by a running gateway (pid ${gw.child.pid}, lock ${lockFile}): endorse through it (vouch endorse --gateway URL --token-file FILE, i.e. POST /v1/submit) or stop it first`,
  );
  assert.is(git(['-C', chain, 'rev-parse', 'HEAD']).stdout, head, 'the branch moved');
  gitClean();
  assert.ok(existsSync(lockFile), 'the refused endorse removed the lock');
});

test('the gateway keeps accepting submits after a refused endorse, and /readyz stays true', async () => {
  for (const p of ['/s1.txt', '/s2.txt']) {
    const s = await submit(p);
    assert.is(s.status, 201, JSON.stringify(s.json));
    assert.is(s.json.success, true);
  }
  const ready = await request(`${gw!.url}/readyz`, { dispatcher: agent });
  assert.is(ready.statusCode, 200);
  await ready.body.dump();
  gitClean();
});

test('a second authority gateway on the same chain refuses to start (exit 2, one line); the first keeps serving', async () => {
  const r = await vouchAsync(['serve', '--config', writeConfig(work, config(), 'second.yaml')], {}, 60_000);
  assert.is(r.status, 2, r.stdout + r.stderr);
  const lines = r.stderr.trim().split('\n');
  assert.is(lines.length, 1, r.stderr);
  assert.is(
    lines[0],
    `vouch serve: chain ${chain} is in use by a running gateway (pid ${gw!.child.pid}, lock ${lockFile}): stop it first, or give this gateway another chain.dir`,
  );
  assert.not.match(r.stdout, /listening on/);
  assert.is(JSON.parse(readFileSync(lockFile, 'utf8')).pid, gw!.child.pid, 'the lock changed hands');
  const s = await submit('/s3.txt');
  assert.is(s.status, 201, JSON.stringify(s.json));
});

test('a read-only gateway takes no lock: it may run beside an authority', async () => {
  const ro = await startGatewayProcess(['--config', writeConfig(work, { listen: { port: 0 }, chain: { dir: chain } }, 'ro.yaml')]);
  try {
    assert.is(JSON.parse(readFileSync(lockFile, 'utf8')).pid, gw!.child.pid);
    const r = await request(`${ro.url}/v1/checkpoint`, { dispatcher: agent });
    assert.is(r.statusCode, 200);
    await r.body.dump();
  } finally {
    assert.is(await ro.stop(), 0);
  }
  assert.ok(existsSync(lockFile), "the read-only gateway removed the authority's lock");
});

test('once the gateway stops, the lock is gone and vouch endorse works', async () => {
  assert.is(await gw!.stop(), 0);
  gw = null;
  assert.not.ok(existsSync(lockFile), 'the lock outlived the gateway');
  const r = await endorse('https://cdn.example/a.txt');
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /^4 [0-9a-f]{64}\n$/);
  assert.not.ok(existsSync(lockFile), 'the endorse left its lock behind');
  gitClean();
  const v = await vouchAsync(['verify', '--chain', chain]);
  assert.is(v.status, 0, v.stderr);
});

test('a stale lock (its process is gone) does not stop vouch endorse, and a gateway takes it over', async () => {
  const stale = (pid: number) => writeFileSync(lockFile, JSON.stringify({ pid, host: hostname(), token: 'stale', since: '2026-01-01T00:00:00Z' }) + '\n');
  stale(deadPid());
  const r = await endorse('https://cdn.example/b.txt');
  assert.is(r.status, 0, r.stderr);

  stale(deadPid());
  gw = await startGatewayProcess(['--config', writeConfig(work, config())]);
  assert.is(JSON.parse(readFileSync(lockFile, 'utf8')).pid, gw.child.pid);
  const refused = await endorse('https://cdn.example/c.txt');
  assert.is(refused.status, 2);
  assert.match(refused.stderr, /is in use by a running gateway/);
  // A gateway killed outright leaves its lock; the next start takes it over.
  gw.child.kill('SIGKILL');
  await gw.exited;
  assert.ok(existsSync(lockFile));
  gw = await startGatewayProcess(['--config', writeConfig(work, config())]);
  assert.is(JSON.parse(readFileSync(lockFile, 'utf8')).pid, gw.child.pid);
  const s = await submit('/s1.txt');
  assert.ok(s.status === 200 || s.status === 201, JSON.stringify(s.json));
  assert.is(await gw.stop(), 0);
  gw = null;
  assert.not.ok(existsSync(lockFile));
});

test("in one process: the gateway's own writes pass its lock, a second hold is refused, another host's lock counts as held", async () => {
  const held = acquireChainLock(chain);
  try {
    const repo = await ChainRepo.open(chain); // repairs under the process's own lock
    assert.ok(repo.size > 1);
    assertChainWritable(chain);
    try {
      acquireChainLock(chain);
      assert.unreachable('a second gateway hold in one process was accepted');
    } catch (e) {
      assert.instance(e, VouchError);
      assert.match((e as Error).message, new RegExp(`in use by a running gateway \\(pid ${process.pid}, .*stop it first`));
    }
    assert.ok(existsSync(lockFile));
  } finally {
    held.release();
    held.release();
  }
  assert.not.ok(existsSync(lockFile));

  writeFileSync(lockFile, JSON.stringify({ pid: 1, host: 'elsewhere.invalid', token: 'far', since: '2026-01-01T00:00:00Z' }) + '\n');
  try {
    await ChainRepo.open(chain);
    assert.unreachable("opened for writing under another host's lock");
  } catch (e) {
    assert.ok((e as Error).message.includes(`pid 1 on elsewhere.invalid, lock ${lockPathOf(chain)})`), (e as Error).message);
    assert.ok((e as Error).message.endsWith(`if no such gateway runs, remove ${lockPathOf(chain)}`), (e as Error).message);
  }
  const ro = await ChainRepo.open(chain, { repair: false }); // reading needs no lock
  assert.ok(ro.size > 1);
  rmSync(lockFile);
});

test("the lock of a live process that is not a gateway of this chain still counts; only a gone process's is taken over", () => {
  const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)'], { stdio: 'ignore' });
  try {
    writeFileSync(lockFile, JSON.stringify({ pid: child.pid, host: hostname(), token: 'live', since: new Date().toISOString() }) + '\n');
    assert.throws(() => assertChainWritable(chain), new RegExp(`pid ${child.pid}`));
    assert.throws(() => acquireChainLock(chain), new RegExp(`pid ${child.pid}`));
    assert.is(JSON.parse(readFileSync(lockFile, 'utf8')).token, 'live', 'a live lock was taken over');
    writeFileSync(lockFile, 'not json');
    assert.throws(() => assertChainWritable(chain), /unreadable lock .*remove/);
  } finally {
    child.kill('SIGKILL');
    rmSync(lockFile, { force: true });
  }
  writeFileSync(lockFile, JSON.stringify({ pid: deadPid(), host: hostname(), token: 'dead', since: '2026-01-01T00:00:00Z' }) + '\n');
  assertChainWritable(chain);
  const lock = acquireChainLock(chain);
  assert.is(JSON.parse(readFileSync(lockFile, 'utf8')).pid, process.pid);
  lock.release();
  assert.not.ok(existsSync(lockFile));
});

test.run();
