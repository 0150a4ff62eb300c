/**
 * The memory budget (issue 14, item 1: memory is bounded by configuration,
 * not by clients), through real `vouch serve` processes on 127.0.0.1 and a
 * real loopback origin:
 *
 * - concurrent cold downloads whose buffers would exceed `mirror.budget_bytes`
 *   spool to files instead of buffering (seen in /metrics: the budget's uses
 *   never exceed it, refused reservations, spool files), and every download
 *   still arrives byte-exact;
 * - clients that read nothing are torn down after `origin.timeout` and the
 *   buffers they held are released (the budget's `held` use back to 0).
 *
 * Artifacts are 12 MiB (a size class of its own: charged exactly), the
 * memory tier 48 MiB (spool threshold 12 MiB), the budget 96 MiB. Every
 * connection is to 127.0.0.1; every wait is bounded; processes, sockets and
 * files are cleaned up.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer, pattern, patternBytes } from '../helpers/origin-server.ts';
import { startGatewayProcess, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const MiB = 1024 * 1024;
const SIZE = 12 * MiB;
const MEMORY = 48 * MiB;
const BUDGET = 96 * MiB;
const work = mkdtempSync(join(tmpdir(), 'vouch-budget-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'budget-token-' + 'b'.repeat(32);
let origin: OriginServer;
const gateways: GatewayProcess[] = [];
const sockets: Socket[] = [];

async function startGateway(name: string, originTimeout: number): Promise<GatewayProcess> {
  const dir = join(work, name);
  const gw = await startGatewayProcess([
    '--config',
    writeConfig(dir, {
      listen: { host: '127.0.0.1', port: 0 },
      service_name: 'vouch-test',
      chain: { dir: join(dir, 'chain') },
      authority: { key_file: keyFile, signer: 'budget', submit_token_file: tokenFile },
      origin: { allow_private: true, timeout: originTimeout },
      mirror: { memory_bytes: MEMORY, budget_bytes: BUDGET },
    }),
  ]);
  gateways.push(gw);
  return gw;
}

function call(base: string, path: string, opts: { method?: string; body?: string } = {}): Promise<{ status: number; body: Buffer }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: u.hostname,
      port: u.port,
      path,
      method: opts.method ?? 'GET',
      agent: false,
      headers: { connection: 'close', authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    });
    req.setTimeout(20_000, () => req.destroy(new Error(`no answer to ${path} in 20 s`)));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** Signs `n` artifacts of SIZE bytes (seeds `seed0`...) under /`prefix`<i>.bin; their URLs and sha256 hex. */
async function endorse(
  gw: GatewayProcess,
  prefix: string,
  seed0: number,
  n: number,
): Promise<Array<{ url: string; path: string; seed: number; sha256: string }>> {
  const out = [];
  for (let i = 0; i < n; i++) {
    const path = `/${prefix}${i}.bin`;
    const seed = seed0 + i;
    origin.route(path, { body: pattern(SIZE, seed) });
    const url = origin.url(path);
    const r = await call(gw.url, '/v1/submit', {
      method: 'POST',
      body: JSON.stringify({ url, name: `budget/${prefix}${i}`, semver: '1.0.0', license: 'MIT' }),
    });
    assert.is(r.status, 201, r.body.toString());
    out.push({
      url,
      path,
      seed,
      sha256: createHash('sha256')
        .update(patternBytes(pattern(SIZE, seed)))
        .digest('hex'),
    });
  }
  return out;
}

interface Budget {
  in_flight: number;
  held: number;
  tier: number;
  limit: number;
  refused: number;
  spoolFiles: number;
}

async function budget(gw: GatewayProcess): Promise<Budget> {
  const text = (await call(gw.url, '/metrics')).body.toString();
  const val = (re: RegExp): number => {
    const m = re.exec(text);
    if (m === null) throw new Error(`no ${re} in /metrics`);
    return Number(m[1]);
  };
  return {
    in_flight: val(/^vouch_memory_budget_bytes\{use="in_flight"\} (\d+)$/m),
    held: val(/^vouch_memory_budget_bytes\{use="held"\} (\d+)$/m),
    tier: val(/^vouch_memory_budget_bytes\{use="tier"\} (\d+)$/m),
    limit: val(/^vouch_memory_budget_limit_bytes (\d+)$/m),
    refused: val(/^vouch_memory_budget_refused_total (\d+)$/m),
    spoolFiles: val(/^vouch_mirror_entries\{tier="spool"\} (\d+)$/m),
  };
}

const total = (b: Budget) => b.in_flight + b.held + b.tier;

/** A download whose body is not read until `read()`: resolves with the response once its head arrived. */
function pausedDownload(base: string, url: string): Promise<{ res: IncomingMessage; read: () => Promise<{ size: number; sha256: string }> }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: u.hostname,
      port: u.port,
      path: `/v1/download?url=${encodeURIComponent(url)}`,
      agent: false,
      headers: { connection: 'close' },
    });
    req.setTimeout(30_000, () => req.destroy(new Error('download: no progress in 30 s')));
    req.on('error', reject);
    req.on('response', (res) => {
      res.pause();
      resolve({
        res,
        read: () =>
          new Promise((done, fail) => {
            const h = createHash('sha256');
            let size = 0;
            res.on('data', (c: Buffer) => {
              h.update(c);
              size += c.length;
            });
            res.on('end', () => done({ size, sha256: h.digest('hex') }));
            res.on('error', fail);
            res.resume();
          }),
      });
    });
    req.end();
  });
}

test.before(async () => {
  createKeyFile(keyFile);
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
});

test.after(async () => {
  for (const s of sockets) s.destroy();
  for (const gw of gateways) await gw.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

test('concurrent cold downloads over mirror.budget_bytes spool instead of buffering, and all verify byte-exact', async () => {
  const gw = await startGateway('spool', 10);
  const arts = await endorse(gw, 'spool', 100, 12); // 144 MiB of buffers wanted at once, 96 MiB allowed
  // Slow origins: every fetch is under way (and has asked the budget) before any completes.
  for (const a of arts) origin.route(a.path, { body: pattern(SIZE, a.seed), trickle: { bytes: MiB, everyMs: 60 } });
  const before = await budget(gw);
  assert.is(before.limit, BUDGET);
  assert.is(total(before), 0);
  let peak = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, total(await budget(gw)));
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const downloads = await Promise.all(arts.map((a) => pausedDownload(gw.url, a.url)));
  sampling = false;
  await sampler;
  // Every answer has begun and no client has read yet: the pooled ones are charged, the rest are spool files.
  const mid = await budget(gw);
  assert.ok(peak <= BUDGET, `budget use peaked at ${peak / MiB} MiB`);
  assert.ok(total(mid) <= BUDGET, `budget use ${JSON.stringify(mid)}`);
  assert.is(mid.in_flight, 0);
  assert.is(total(mid), 8 * SIZE, `eight 12 MiB buffers: ${JSON.stringify(mid)}`);
  assert.ok(mid.tier <= MEMORY);
  assert.is(mid.refused - before.refused, 4);
  assert.is(mid.spoolFiles, 4);
  const got = await Promise.all(downloads.map((d) => d.read()));
  got.forEach((g, i) => {
    assert.is(g.size, SIZE, `download ${i}`);
    assert.is(g.sha256, arts[i]!.sha256, `download ${i}`);
  });
  // Readers done: held buffers released, spool files gone; the memory tier keeps what it holds.
  const after = await until(
    'held released',
    async () => {
      const b = await budget(gw);
      return b.held === 0 && b.spoolFiles === 0 ? b : null;
    },
    5_000,
  );
  assert.is(after.in_flight, 0);
  assert.ok(after.tier <= MEMORY);
});

test('clients that read nothing are torn down after origin.timeout and their buffers released', async () => {
  const TIMEOUT_S = 2;
  const gw = await startGateway('stall', TIMEOUT_S);
  const arts = await endorse(gw, 'stall', 200, 8);
  const port = Number(new URL(gw.url).port);
  // Raw clients that send a request and never read a byte of the answer; `Connection: close`, so a client whose
  // answer went whole into the socket buffers (not cut) also sees its connection end, not kept alive while idle.
  const clients = arts.map((a) => {
    const s = connect(port, '127.0.0.1');
    sockets.push(s);
    s.pause();
    let closed = false;
    s.on('close', () => {
      closed = true;
    });
    s.on('error', () => {});
    s.write(`GET /v1/download?url=${encodeURIComponent(a.url)} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    return { socket: s, closed: () => closed };
  });
  // All eight verified (fresh from the origin) and being sent: 4 in the memory tier, the others held.
  const stuck = await until(
    'all answers under way',
    async () => {
      const b = await budget(gw);
      return b.in_flight === 0 && total(b) === 8 * SIZE ? b : null;
    },
    15_000,
  );
  const stuckAt = Date.now();
  assert.ok(stuck.held >= 4 * SIZE, `held: ${JSON.stringify(stuck)}`);
  assert.ok(total(stuck) <= BUDGET);
  // Nothing taken for origin.timeout: torn down, the held buffers released.
  const freed = await until(
    'held buffers released',
    async () => {
      const b = await budget(gw);
      return b.held === 0 ? b : null;
    },
    TIMEOUT_S * 1000 + 8_000,
  );
  const after = Date.now() - stuckAt;
  assert.ok(after >= TIMEOUT_S * 1000 * 0.5, `released after ${after} ms, before origin.timeout`);
  assert.ok(freed.tier <= MEMORY);
  assert.is(freed.in_flight, 0);
  // The clients see their connections end before the whole body.
  let received = 0;
  for (const c of clients) {
    c.socket.on('data', (d: Buffer) => {
      received += d.length;
    });
    c.socket.resume();
  }
  await until('clients see the close', () => clients.every((c) => c.closed()), 10_000);
  assert.ok(received < arts.length * SIZE, `received ${received} bytes`);
  // The gateway answers as before.
  const again = await call(gw.url, '/v1/authority');
  assert.is(again.status, 200);
});

test.run();
