/**
 * The fleet recipe of docs/guide/fleet.md, run as written (issue 35 item
 * 4): Debian's haproxy with deploy/fleet/haproxy.cfg (only its ports
 * replaced) in front of two real mirror gateways following an authority
 * that pushes to git http-backend; all on 127.0.0.1. Shows: a submit read
 * through the balancer right after its 201 with Vouch-Min-Tree-Size never
 * gets a 404; a mirror SIGKILLed under load loses no request; the git host
 * down longer than the staleness bound still serves verified answers; a
 * tampered origin gives the same answer from every mirror (shared tier:
 * mirror.upstream_gateway). deploy/fleet/nginx.conf is checked with nginx -t.
 * Skipped (reported as skipped) only when haproxy is not installed; .ci/run
 * installs it.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { freePort } from '../helpers/free-port.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { OriginServer } from '../helpers/origin-server.ts';
import { PushingAuthority, startGatewayProcess, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { git } from '../helpers/processes.ts';
import { repoRoot } from '../helpers/vectors.ts';

const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy', '/usr/local/sbin/haproxy'].find((p) => existsSync(p)) ?? null;
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p)) ?? null;

const work = mkdtempSync(join(tmpdir(), 'vouch-fleet-haproxy-'));
const token = 'fleet-lb-token-' + 'h'.repeat(24);
const agent = new Agent({ connections: 64 });
let live: PushingAuthority;
let origin: OriginServer;
let haproxy: ChildProcess | null = null;
let haproxyOut = '';
let lb = '';
const ports: number[] = [];
const mirrors: (GatewayProcess | null)[] = [null, null];
let n = 0;

const enc = encodeURIComponent;
const lookupPath = (url: string) => `/v1/endorsement?url=${enc(url)}`;

async function get(base: string, path: string, headers: Record<string, string> = {}) {
  const r = await request(base + path, { dispatcher: agent, headers });
  const text = await r.body.text();
  return { status: r.statusCode, headers: r.headers, text };
}

async function submitNew(body = `lb artifact ${++n}`): Promise<{ url: string; size: number }> {
  const path = `/lb-${n}-${Math.random().toString(36).slice(2)}.tgz`;
  origin.route(path, { body });
  const res = await request(`${live.authority.url}/v1/submit`, {
    dispatcher: agent,
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: origin.url(path), name: 'acme/lb', semver: `1.0.${n}`, license: 'MIT' }),
  });
  const json = (await res.body.json()) as any;
  assert.is(res.statusCode, 201, JSON.stringify(json));
  return { url: origin.url(path), size: Number(res.headers['vouch-tree-size']) };
}

function mirrorConfig(i: number): string {
  const dir = join(work, `m${i}`);
  return writeConfig(dir, {
    listen: { host: '127.0.0.1', port: ports[i + 1] },
    // A small staleness bound, so that (c) outlasts it; stale mirrors stay in rotation (the default).
    chain: { dir: join(dir, 'chain'), remote: live.remote, public_key: live.pub, sync_interval: 1, max_staleness: 2 },
    origin: { allow_private: true },
    // The fleet's shared tier: the authority is the origin shield.
    mirror: { upstream_gateway: live.authority.url },
  });
}

async function startMirror(i: number): Promise<GatewayProcess> {
  const gw = await startGatewayProcess(['--config', mirrorConfig(i)]);
  mirrors[i] = gw;
  return gw;
}

/** deploy/fleet/haproxy.cfg with its three ports replaced, nothing else. */
function recipe(): string {
  const text = readFileSync(join(repoRoot, 'deploy', 'fleet', 'haproxy.cfg'), 'utf8');
  const out = text
    .replace('127.0.0.1:8080', `127.0.0.1:${ports[0]}`)
    .replace('127.0.0.1:8081', `127.0.0.1:${ports[1]}`)
    .replace('127.0.0.1:8082', `127.0.0.1:${ports[2]}`);
  assert.not.ok(/127\.0\.0\.1:808[012]\b/.test(out), 'the recipe names other ports than the three replaced');
  return out;
}

async function upMirrors(): Promise<number> {
  const r = await fetch(`${lb}/readyz`).catch(() => null);
  return r?.status ?? 0;
}

if (HAPROXY === null) {
  test.skip('haproxy is not installed (apt-get install haproxy; .ci/run installs it)', () => {});
} else {
  test.before(async () => {
    try {
      await setup();
    } catch (e) {
      // uvu reports a failed hook with no message: say why.
      console.error('fleet-haproxy setup failed:', e, haproxyOut);
      throw e;
    }
  });

  async function setup(): Promise<void> {
    origin = await OriginServer.start();
    live = await PushingAuthority.start(work, { signer: 'fleet-lb', token });
    for (let i = 0; i < 3; i++) ports.push(await freePort());
    await submitNew();
    await startMirror(0);
    await startMirror(1);
    const cfg = join(work, 'haproxy.cfg');
    writeFileSync(cfg, recipe());
    const proc = spawn(HAPROXY!, ['-db', '-f', cfg], { stdio: ['ignore', 'pipe', 'pipe'] });
    haproxy = proc;
    proc.stdout.on('data', (d) => {
      haproxyOut += d;
    });
    proc.stderr.on('data', (d) => {
      haproxyOut += d;
    });
    lb = `http://127.0.0.1:${ports[0]}`;
    await until(
      'haproxy to answer',
      async () => {
        if (haproxy!.exitCode !== null) throw new Error(`haproxy exited: ${haproxyOut}`);
        for (let k = 0; k < 4; k++) if ((await upMirrors()) !== 200) return false;
        return true;
      },
      30_000,
    );
    // Both servers up in haproxy's eyes (rise 2 at inter 1 s) before the tests count on them.
    await new Promise((r) => setTimeout(r, 2_500));
  }

  test.after(async () => {
    haproxy?.kill('SIGTERM');
    for (const m of mirrors) await m?.stop();
    await live?.stop();
    await origin?.close();
    await agent.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('the recipe: haproxy -c accepts deploy/fleet/haproxy.cfg, nginx -t deploy/fleet/nginx.conf', () => {
    const c = spawnSync(HAPROXY, ['-c', '-f', join(repoRoot, 'deploy', 'fleet', 'haproxy.cfg')], { encoding: 'utf8' });
    assert.is(c.status, 0, c.stdout + c.stderr);
    if (NGINX !== null) {
      const prefix = join(work, 'nginx') + '/';
      spawnSync('mkdir', ['-p', join(prefix, 'logs')]);
      const t = spawnSync(NGINX, ['-t', '-p', prefix, '-e', 'stderr', '-g', `pid ${prefix}nginx.pid;`, '-c', join(repoRoot, 'deploy', 'fleet', 'nginx.conf')], {
        encoding: 'utf8',
      });
      assert.is(t.status, 0, t.stdout + t.stderr);
    }
  });

  test('(a) a submit read through the balancer right after its 201, with Vouch-Min-Tree-Size, never gets a 404', async () => {
    const statuses: Record<number, number> = {};
    for (let k = 0; k < 25; k++) {
      const a = await submitNew();
      assert.ok(a.size > 0);
      // Both mirrors in turn (round robin): at once after the 201, before any push or sync could be counted on.
      for (let j = 0; j < 2; j++) {
        const r = await get(lb, lookupPath(a.url), { 'vouch-min-tree-size': String(a.size) });
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
        assert.is(r.status, 200, `iteration ${k}: ${r.status} ${r.text}`);
        assert.ok(Number(r.headers['vouch-tree-size']) >= a.size);
      }
    }
    assert.equal(statuses, { 200: 50 });
  });

  test('(b) a mirror SIGKILLed under load loses no request', async () => {
    const a = await submitNew();
    await until('both mirrors', async () => {
      for (const m of mirrors) if ((await get(m!.url, lookupPath(a.url))).status !== 200) return false;
      return true;
    });
    let ok = 0;
    const failed: string[] = [];
    let stop = false;
    const worker = async () => {
      while (!stop) {
        try {
          const r = await get(lb, lookupPath(a.url));
          if (r.status === 200) ok++;
          else failed.push(`${r.status} ${r.text.slice(0, 100)}`);
        } catch (e) {
          failed.push(String((e as Error).message));
        }
      }
    };
    const workers = Array.from({ length: 8 }, worker);
    await new Promise((r) => setTimeout(r, 1_000));
    mirrors[1]!.child.kill('SIGKILL');
    await mirrors[1]!.exited;
    await new Promise((r) => setTimeout(r, 3_000));
    stop = true;
    await Promise.all(workers);
    assert.equal(failed, [], `${failed.length} of ${ok + failed.length} requests failed`);
    assert.ok(ok > 100, `only ${ok} requests`);
    // Restarted on the same port: it catches up and comes back into rotation.
    await startMirror(1);
    await until('the restarted mirror behind the balancer', async () => (await get(mirrors[1]!.url, lookupPath(a.url))).status === 200);
  });

  test('(c) the git host down longer than the staleness bound: verified answers go on through the balancer', async () => {
    const a = await submitNew();
    await until('both mirrors', async () => {
      for (const m of mirrors) if ((await get(m!.url, lookupPath(a.url))).status !== 200) return false;
      return true;
    });
    live.gitServer.down = true;
    live.gitServer.dropConnections();
    try {
      await new Promise((r) => setTimeout(r, 5_000)); // max_staleness is 2 s
      for (const m of mirrors) {
        const rz = await get(m!.url, '/readyz');
        assert.is(rz.status, 200, rz.text);
        assert.is(JSON.parse(rz.text).status, 'degraded');
      }
      for (let k = 0; k < 20; k++) {
        const r = await get(lb, lookupPath(a.url));
        assert.is(r.status, 200, `${r.status} ${r.text}`);
        assert.ok(Number(r.headers['vouch-sync-age']) >= 4, `sync age ${String(r.headers['vouch-sync-age'])}`);
        assert.is(Number(r.headers['vouch-tree-size']), a.size);
      }
    } finally {
      live.gitServer.down = false;
    }
    const head = git(['-C', live.chainDir, 'rev-parse', 'HEAD']).stdout.trim();
    await until('the push after the outage', async () => git(['-C', live.bareDir, 'rev-parse', 'main']).stdout.trim() === head, 30_000);
  });

  test('(d) a tampered origin gives the same answer from every mirror (shared tier)', async () => {
    const a = await submitNew('the bytes that were signed');
    const path = new URL(a.url).pathname;
    // Fetched once, through the balancer (one mirror, through the shield).
    let r = await get(lb, `/v1/download?url=${enc(a.url)}`, { 'vouch-min-tree-size': String(a.size) });
    assert.is(r.status, 200);
    origin.route(path, { body: 'the bytes of an attacker' });
    const answers = new Set<string>();
    for (const m of mirrors) {
      r = await get(m!.url, `/v1/download?url=${enc(a.url)}`, { 'vouch-min-tree-size': String(a.size) });
      answers.add(`${r.status} ${r.text}`);
    }
    for (let k = 0; k < 10; k++) {
      r = await get(lb, `/v1/download?url=${enc(a.url)}`);
      answers.add(`${r.status} ${r.text}`);
    }
    assert.equal([...answers], ['200 the bytes that were signed']);
  });
}

test.run();
