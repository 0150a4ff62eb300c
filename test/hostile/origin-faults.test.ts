/**
 * A fault-injecting origin behind a real gateway process: tampered bytes, a
 * body cut short, a reset mid-body, a wrong Content-Length, headers that
 * never come, a trickling body, an endless body, redirect loops, error
 * statuses and redirect chains. For each: the documented status, an empty
 * body (nothing partial ever sent), nothing cached; afterwards no leaked
 * sockets, file descriptors or temp files in the gateway process.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, mkdirSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer, pattern, type RouteSpec } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-faults-'));
const gwTmp = join(work, 'gateway-tmp');
const token = 'faults-token-' + 'f'.repeat(30);
const agent = new Agent();
let gw: GatewayProcess;
let origin: OriginServer;
const enc = encodeURIComponent;

async function submit(path: string, body: RouteSpec['body']) {
  origin.route(path, { body });
  await submitEntry(gw.url, token, { url: origin.url(path), name: 'acme/faults', semver: `1.0.${path.length}${path.charCodeAt(1)}`, license: 'MIT' });
}

async function download(path: string) {
  const r = await request(`${gw.url}/v1/download?url=${enc(origin.url(path))}`, { dispatcher: agent });
  const body = Buffer.from(await r.body.arrayBuffer());
  return { status: r.statusCode, length: r.headers['content-length'], body };
}

function fds(pid: number): { total: number; sockets: number } {
  const dir = `/proc/${pid}/fd`;
  const all = readdirSync(dir);
  let sockets = 0;
  for (const f of all) {
    try {
      if (readlinkSync(join(dir, f)).startsWith('socket:')) sockets++;
    } catch {
      /* closed meanwhile */
    }
  }
  return { total: all.length, sockets };
}

function tempFiles(): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) {
        if (!e.name.startsWith('tsx-')) walk(join(d, e.name)); // tsx's own transform cache, not vouch's
      } else out.push(join(d, e.name));
    }
  };
  walk(gwTmp);
  return out;
}

test.before(async () => {
  mkdirSync(gwTmp);
  createKeyFile(join(work, 'authority.pem'));
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  origin = await OriginServer.start();
  gw = await startGatewayProcess(
    [
      '--config',
      writeConfig(work, {
        listen: { port: 0 },
        chain: { dir: join(work, 'chain') },
        authority: { key_file: join(work, 'authority.pem'), signer: 'faults', submit_token_file: join(work, 'submit.token') },
        origin: { allow_private: true, timeout: 1.5, max_bytes: 4 * 1024 * 1024, max_redirects: 3 },
        mirror: { memory_bytes: 64 * 1024 * 1024 },
      }),
    ],
    { env: { TMPDIR: gwTmp } },
  );
});

test.after(async () => {
  await gw.stop();
  await origin.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

const SMALL = 'a'.repeat(20_000);
const LARGE = pattern(3 * 1024 * 1024, 9); // over the spool threshold? no: exercised as a multi-chunk body
const faults: [string, RouteSpec['body'], RouteSpec, number][] = [
  ['/tampered.bin', SMALL, { body: SMALL, tamper: true }, 409],
  ['/tampered-large.bin', LARGE, { body: LARGE, tamper: true }, 409],
  ['/cut-short.bin', SMALL, { body: SMALL, truncate: 5_000 }, 502],
  ['/reset.bin', LARGE, { body: LARGE, reset: 100_000 }, 502],
  // Declares more than it sends and keeps the connection open: the origin is too slow.
  ['/longer-length.bin', SMALL, { body: SMALL, contentLength: 30_000 }, 504],
  ['/shorter-length.bin', SMALL, { body: SMALL, contentLength: 10_000 }, 409],
  ['/no-headers.bin', SMALL, { body: SMALL, stall: 'headers' }, 504],
  ['/stall-body.bin', SMALL, { body: SMALL, stall: 5_000 }, 504],
  ['/trickle.bin', SMALL, { body: SMALL, trickle: { bytes: 100, everyMs: 50 } }, 504],
  ['/endless.bin', SMALL, { body: pattern(64 * 1024 * 1024, 2), contentLength: 'none' }, 502],
  ['/too-big-declared.bin', SMALL, { body: pattern(8 * 1024 * 1024, 3) }, 502],
  ['/redirect-loop.bin', SMALL, { redirect: '/redirect-loop.bin' }, 502],
  ['/status-404.bin', SMALL, { status: 404, body: 'gone' }, 502],
  ['/status-500.bin', SMALL, { status: 500, body: 'oops' }, 502],
  ['/redirect-chain.bin', SMALL, { redirect: '/hop-1' }, 502],
];

test('every origin fault: the documented status, an empty body, nothing cached, no leaks', async () => {
  origin.route('/hop-1', { redirect: '/hop-2', status: 301 });
  origin.route('/hop-2', { redirect: '/hop-3', status: 307 });
  origin.route('/hop-3', { redirect: '/hop-4', status: 308 });
  origin.route('/hop-4', { status: 500, body: 'end of chain' });
  for (const [path, good] of faults) await submit(path, good);
  // Warm up good downloads so pools, lazy modules and the hash workers (started by the first body of 1 MiB or more) exist before the baseline.
  await submit('/good.bin', 'good');
  assert.is((await download('/good.bin')).status, 200);
  await submit('/good-large.bin', pattern(2 * 1024 * 1024, 7));
  assert.is((await download('/good-large.bin')).status, 200);
  await new Promise((r) => setTimeout(r, 500));
  const before = fds(gw.child.pid!);

  for (const [path, , spec, status] of faults) {
    origin.route(path, spec);
    const countBefore = origin.requests(path);
    const r = await download(path);
    assert.is(r.status, status, path);
    assert.is(r.body.length, 0, `${path}: body sent with an error`);
    assert.ok(r.length === undefined || r.length === '0', `${path}: content-length ${r.length}`);
    // Nothing cached: asking again goes to the origin again and fails the same way.
    const again = await download(path);
    assert.is(again.status, status, `${path} (again)`);
    assert.ok(origin.requests(path) > countBefore + 1 || spec.redirect !== undefined, `${path}: the second request did not reach the origin`);
  }

  // Let the origin connections of failed fetches close, then count.
  await new Promise((r) => setTimeout(r, 6_000));
  const after = fds(gw.child.pid!);
  assert.ok(after.sockets <= before.sockets + 2, `sockets: ${before.sockets} -> ${after.sockets}`);
  assert.ok(after.total <= before.total + 2, `fds: ${before.total} -> ${after.total}`);
  assert.equal(tempFiles(), [], 'temp files left behind');
  // And the good artifact still downloads.
  assert.is((await download('/good.bin')).body.toString(), 'good');
});

test.run();
