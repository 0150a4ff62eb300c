/**
 * A route's `canonical` base apart from its `origin`: the chain endorses the
 * public URL (`https://cdn.example.org/dl/...`) while the bytes come from a
 * loopback mirror origin, so moving the host does not invalidate
 * endorsements. Through a real `vouch serve` process and a real origin: the
 * verified bytes and UNS name the canonical URL; an endorsement of the
 * origin's own URL does not count under the route; a tampered origin is
 * refused and logged with both URLs; nothing is ever sent to the canonical
 * host (it does not exist: every request lands on the loopback origin).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouch } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-canonical-'));
const key = join(work, 'authority.pem');
const chain = join(work, 'chain');
const CANON = 'https://cdn.example.org/dl/';
const A = Buffer.from('artifact a, version 1.0.0\n');
const B = Buffer.from('artifact b, endorsed under the origin URL only\n');
const C = Buffer.from('artifact c, which the origin will tamper with\n');
let origin: OriginServer;
let gw: GatewayProcess;

function endorse(url: string, bytes: Buffer, name: string): void {
  const f = join(work, name.replace('/', '_'));
  writeFileSync(f, bytes);
  const r = vouch(['endorse', '--chain', chain, '--key', key, '--url', url, '--file', f, '--name', name, '--semver', '1.0.0', '--license', 'MIT']);
  assert.is(r.status, 0, r.stderr);
}

test.before(async () => {
  assert.is(vouch(['keygen', '--out', key]).status, 0);
  assert.is(vouch(['init', '--chain', chain, '--key', key, '--signer', 'canon-test']).status, 0);
  origin = await OriginServer.start();
  origin.route('/mirror/a-1.0.0.tgz', { body: A, contentType: 'application/gzip' });
  origin.route('/mirror/b-1.0.0.tgz', { body: B });
  origin.route('/mirror/c-1.0.0.tgz', { body: C, tamper: true });
  endorse(`${CANON}a-1.0.0.tgz`, A, 'acme/a');
  endorse(origin.url('/mirror/b-1.0.0.tgz'), B, 'acme/b');
  endorse(`${CANON}c-1.0.0.tgz`, C, 'acme/c');
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: chain },
      proxy: { routes: [{ prefix: '/dl/', origin: origin.url('/mirror/'), canonical: CANON, unendorsed: 'deny' }] },
    }),
  ]);
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

test('the chain endorses the canonical URL; the bytes come from the origin and are verified', async () => {
  const res = await fetch(`${gw.url}/dl/a-1.0.0.tgz`);
  assert.is(res.status, 200);
  assert.ok(Buffer.from(await res.arrayBuffer()).equals(A));
  const uns = JSON.parse(res.headers.get('uns')!);
  assert.is(uns.vouch.endorsement.payload.endorsements[0].artifact_url, `${CANON}a-1.0.0.tgz`);
  assert.is(origin.requests('/mirror/a-1.0.0.tgz'), 1, 'fetched from the origin');
  // Every request the gateway made went to the loopback origin, under its path.
  for (const r of origin.log) assert.ok(r.path.startsWith('/mirror/'), r.path);
});

test('an endorsement of the origin URL itself does not count under a canonical route', async () => {
  const res = await fetch(`${gw.url}/dl/b-1.0.0.tgz`);
  assert.is(res.status, 404);
  assert.is((await res.arrayBuffer()).byteLength, 0, 'a plain route keeps empty failure bodies');
  assert.is(origin.requests('/mirror/b-1.0.0.tgz'), 0, 'a deny route does not ask the origin');
  // The same URL is still endorsed for /v1/download, which fetches the URL it names.
  const direct = await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(origin.url('/mirror/b-1.0.0.tgz'))}`);
  assert.is(direct.status, 200);
});

test('a tampered origin is refused (409) and logged with the canonical URL and where the bytes came from', async () => {
  const res = await fetch(`${gw.url}/dl/c-1.0.0.tgz`);
  assert.is(res.status, 409);
  assert.is((await res.arrayBuffer()).byteLength, 0);
  const line = gw
    .stderr()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .find((l) => l.msg === 'proxy: hash mismatch: refused to serve');
  assert.ok(line, 'no mismatch line');
  assert.is(line.url, `${CANON}c-1.0.0.tgz`);
  assert.is(line.fetched_from, origin.url('/mirror/c-1.0.0.tgz'));
});

test.run();
