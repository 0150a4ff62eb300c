/**
 * How a cold pull through a `kind: oci` route spends its time (issue 36,
 * item 5): the REAL distribution registry (Debian's docker-registry) on
 * 127.0.0.1, an image pushed with the REAL skopeo, a real `vouch serve` in
 * front of it, and skopeo copying the image through the gateway.
 * Must hold: the layers of a cold pull are hashed by the hash workers beside
 * their receiving (`vouch_origin_hashed_inline_bytes_total` stays 0: the
 * workers boot when the gateway listens, not under the first layer); what
 * the client received is the endorsed image, byte for byte. (The disk copy
 * written behind the sending: test/unit/mirror-write-behind.)
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildAuthorityBlock, buildCheckpoint, buildEndorseBlock, formatBlockFile, formatCheckpointFile } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned, commitFor } from '../../store/chain-append.ts';
import { MANIFEST_ACCEPT, manifestUrl } from '../../gateway/ecosystems/oci.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { testSigner } from '../helpers/chain-fixture.ts';
import { Layout, Registry, push, skopeo, type Descriptor } from '../helpers/oci-registry.ts';

const CANON = 'https://registry.example.test/';
const MiB = 1024 * 1024;
const work = mkdtempSync(join(tmpdir(), 'vouch-oci-speed-'));
let registry: Registry;
let gw: GatewayProcess;
const layers: Descriptor[] = [];
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
  const res = await fetch(`${registry.url}/v2/speed/manifests/1.0`, { headers: { accept: MANIFEST_ACCEPT } });
  const digest = res.headers.get('docker-content-digest')!;
  await res.arrayBuffer();
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
    entries: [{ url: manifestUrl(CANON, 'speed', '1.0'), artifactHash: digest, name: 'oci/speed', semver: '1.0.0', license: 'MIT' }],
  });
  await appendSigned(repo, [block], buildCheckpoint({ head: block, signer, now: now + 1000 }), now + 1000);
  const cfg = writeConfig(join(work, 'gw'), {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: join(work, 'chain'), public_key: Buffer.from(signer.publicKey).toString('base64') },
    origin: { allow_private: true, timeout: 60 },
    mirror: { memory_bytes: 256 * MiB, disk_dir: join(work, 'mirror') },
    proxy: { routes: [{ prefix: '/v2/', kind: 'oci', origin: registry.url, canonical: CANON }] },
  });
  gw = await startGatewayProcess(['--config', cfg]);
});

test.after(async () => {
  await gw?.stop();
  await registry?.stop();
  rmSync(work, { recursive: true, force: true });
});

test('a cold pull: every layer hashed by a worker beside its receiving, none on the event loop; the image arrives whole', async () => {
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
});

test.run();
