/**
 * How a cold pull through a `kind: oci` route spends its time (issue 36,
 * item 5): the REAL distribution registry (Debian's docker-registry) on
 * 127.0.0.1, an image pushed with the REAL skopeo, a real `vouch serve` in
 * front of it, and skopeo copying the image through the gateway.
 * Must hold: the layers of a cold pull are hashed by the hash workers beside
 * their receiving (`vouch_origin_hashed_inline_bytes_total` stays 0: the
 * workers boot before the gateway says ready, not under the first layer); what
 * the client received is the endorsed image, byte for byte; layers larger
 * than the fetch-ahead window reach the upstream one after another (seen
 * by a relay between gateway and registry); an upstream that asked for no
 * credentials is sent no /v2/ probe. (The disk copy written behind the
 * sending: test/unit/mirror-write-behind.)
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildAuthorityBlock, buildCheckpoint, buildEndorseBlock, formatBlockFile, formatCheckpointFile } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned, commitFor } from '../../store/chain-append.ts';
import { MANIFEST_ACCEPT, manifestUrl } from '../../gateway/ecosystems/oci.ts';
import { PREFETCH_STAGGER_MS, PREFETCH_WINDOW } from '../../gateway/ecosystems/oci-route.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { testSigner } from '../helpers/chain-fixture.ts';
import { Layout, Registry, push, skopeo, type Descriptor } from '../helpers/oci-registry.ts';

const CANON = 'https://registry.example.test/';
const MiB = 1024 * 1024;
const work = mkdtempSync(join(tmpdir(), 'vouch-oci-speed-'));
let registry: Registry;
let gw: GatewayProcess;
const layers: Descriptor[] = [];
/** Layers larger than the fetch-ahead window, of a second image. */
const large: Descriptor[] = [];
/** Between the gateway and the registry: forwards, and records when each blob GET arrived and its answer was handed out. */
let relay: Server;
const blobGets: Array<{ digest: string; start: number; end: number }> = [];
/** Every request the relay forwarded, `METHOD path`. */
const upstreamRequests: string[] = [];

function startRelay(): Promise<string> {
  const up = new URL(registry.url);
  relay = createServer((req, res) => {
    const start = performance.now();
    upstreamRequests.push(`${req.method} ${req.url}`);
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: { ...req.headers, host: up.host } }, (answer) => {
      res.writeHead(answer.statusCode!, answer.headers);
      answer.pipe(res);
    });
    fwd.on('error', () => res.destroy());
    req.pipe(fwd);
    const blob = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(req.url ?? '');
    if (req.method === 'GET' && blob !== null) res.on('finish', () => blobGets.push({ digest: blob[1]!, start, end: performance.now() }));
  });
  return new Promise((resolve) => relay.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(relay.address() as AddressInfo).port}`)));
}
const signer = testSigner();

/** A counter of the gateway's /metrics (the sum of its series matching `series`). */
async function metric(series: RegExp): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => !l.startsWith('#') && series.test(l.split(' ')[0]!))
    .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
}

test.before(async () => {
  registry = await Registry.start(join(work, 'registry'));
  const layout = new Layout(join(work, 'layout'));
  // Large enough to be received into pooled buffers (>= 1 MiB), small enough for the memory tier.
  for (let i = 0; i < 3; i++) layers.push(await layout.bigLayer(6 * MiB, 7 + i));
  layout.tag(layout.image(layers), '1.0');
  await push(join(work, 'layout'), '1.0', registry, 'speed');
  const big = new Layout(join(work, 'layout-large'));
  for (let i = 0; i < 3; i++) large.push(await big.bigLayer(PREFETCH_WINDOW + 4 * MiB, 20 + i));
  big.tag(big.image(large), '1.0');
  await push(join(work, 'layout-large'), '1.0', registry, 'large');
  const digestOf = async (repo: string) => {
    const res = await fetch(`${registry.url}/v2/${repo}/manifests/1.0`, { headers: { accept: MANIFEST_ACCEPT } });
    await res.arrayBuffer();
    return res.headers.get('docker-content-digest')!;
  };
  const digest = await digestOf('speed');
  const largeDigest = await digestOf('large');
  const now = Date.UTC(2026, 0, 1);
  const authority = buildAuthorityBlock({ signer, backend: nodeBackend, now, uns: 'test/chain' });
  const repo = await ChainRepo.init(
    join(work, 'chain'),
    [{ index: 0, content: formatBlockFile(authority) }],
    formatCheckpointFile(buildCheckpoint({ head: authority, signer, now })),
    commitFor([authority], now),
  );
  const block = buildEndorseBlock({
    prev: authority,
    signer,
    backend: nodeBackend,
    now: now + 1000,
    uns: 'test/images',
    semver: '1.0.0',
    entries: [
      { url: manifestUrl(CANON, 'speed', '1.0'), artifactHash: digest, name: 'oci/speed', semver: '1.0.0', license: 'MIT' },
      { url: manifestUrl(CANON, 'large', '1.0'), artifactHash: largeDigest, name: 'oci/large', semver: '1.0.0', license: 'MIT' },
    ],
  });
  await appendSigned(repo, [block], buildCheckpoint({ head: block, signer, now: now + 1000 }), now + 1000);
  const cfg = writeConfig(join(work, 'gw'), {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: join(work, 'chain'), public_key: Buffer.from(signer.publicKey).toString('base64') },
    origin: { allow_private: true, timeout: 60 },
    mirror: { memory_bytes: 256 * MiB, disk_dir: join(work, 'mirror') },
    proxy: { routes: [{ prefix: '/v2/', kind: 'oci', origin: await startRelay(), canonical: CANON }] },
  });
  gw = await startGatewayProcess(['--config', cfg]);
});

test.after(async () => {
  await gw?.stop();
  await new Promise((r) => (relay ? relay.close(r) : r(null)));
  await registry?.stop();
  rmSync(work, { recursive: true, force: true });
});

test('a cold pull: every layer hashed by a worker beside its receiving, none on the event loop; the image arrives whole; an anonymous upstream is not probed', async () => {
  const out = join(work, 'pulled');
  const r = await skopeo(['copy', '--src-tls-verify=false', `docker://${new URL(gw.url).host}/speed:1.0`, `oci:${out}:x`], 300_000);
  assert.is(r.status, 0, r.stderr);
  for (const l of layers) {
    const file = join(out, 'blobs', 'sha256', l.digest.slice('sha256:'.length));
    assert.ok(existsSync(file), l.digest);
    assert.is(`sha256:${createHash('sha256').update(readFileSync(file)).digest('hex')}`, l.digest);
  }
  assert.ok((await metric(/^vouch_origin_fetch_bytes_total$/)) >= layers.reduce((n, l) => n + l.size, 0), 'the layers came from the registry');
  assert.is(await metric(/^vouch_origin_hashed_inline_bytes_total$/), 0);
  // No GET /v2/ for a challenge ahead of the first pull (a route without credentials learns one from a 401): that
  // probe went through another HTTP client whose parser's compile cost the first cold pull ~150 ms of CPU.
  assert.ok(upstreamRequests.length > 0);
  assert.equal(
    upstreamRequests.filter((r) => !/^(GET|HEAD) \/v2\/speed\/(manifests|blobs)\//.test(r)),
    [],
  );
});

test('layers larger than the fetch-ahead window are fetched one after another (the next once the one before arrived, or after the stagger)', async () => {
  const out = join(work, 'pulled-large');
  const r = await skopeo(['copy', '--src-tls-verify=false', `docker://${new URL(gw.url).host}/large:1.0`, `oci:${out}:x`], 300_000);
  assert.is(r.status, 0, r.stderr);
  const gets = large.map((l) => {
    const g = blobGets.filter((x) => x.digest === l.digest);
    assert.is(g.length, 1, `one upstream GET of ${l.digest}`);
    return g[0]!;
  });
  // In the manifest's order; each starts once the one before was handed out whole, or PREFETCH_STAGGER_MS after it
  // started (a slow machine): never beside it from the start, which made every layer arrive, and go out, only at the end.
  for (let k = 1; k < gets.length; k++) {
    const before = gets[k - 1]!;
    const at = gets[k]!.start;
    assert.ok(
      at >= before.end || at >= before.start + PREFETCH_STAGGER_MS - 50,
      `layer ${k} started ${(at - before.start).toFixed(0)} ms after layer ${k - 1}, which took ${(before.end - before.start).toFixed(0)} ms`,
    );
  }
  for (const l of large) assert.ok(existsSync(join(out, 'blobs', 'sha256', l.digest.slice('sha256:'.length))), l.digest);
});

test.run();
