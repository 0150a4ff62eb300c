/**
 * Container images (`kind: oci`, issue 36): unit tests of the path grammar,
 * the manifest, tag list and challenge parsers and the error JSON; then the
 * REAL distribution registry (Debian's docker-registry) on 127.0.0.1 as the
 * upstream, images pushed to it with the REAL skopeo from OCI layouts made
 * here, and a real `vouch serve` whose `/v2/` route stands in front of it
 * with a chain endorsing tags (canonical base https://registry.example.test/).
 * Pulls go through the gateway with skopeo (inspect, copy to an OCI layout):
 * an endorsed tag, a multi-platform index, a tag moved upstream (the endorsed
 * digest is served), a blob swapped in the registry's storage (refused with
 * vouch's message), an unendorsed tag, a revoked tag, tags/list, a pass
 * route picked by containerd's `?ns=`, the REAL podman with a registries.conf
 * mirror (its fallback location a closed port on 127.0.0.1), a 1 GiB layer
 * within the memory budget (VmHWM of the gateway), and the upstream down
 * with the mirror warm on a fresh gateway.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  base64Encode,
  buildAuthorityBlock,
  buildCheckpoint,
  buildEndorseBlock,
  buildRevokeBlock,
  formatBlockFile,
  formatCheckpointFile,
  type Block,
} from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import {
  DOCKER_MANIFEST,
  MANIFEST_ACCEPT,
  OCI_INDEX as OCI_INDEX_TYPE,
  manifestUrl,
  ociErrorBody,
  pageOf,
  parseChallenge,
  parseManifest,
  parseOciPath,
  parseTagList,
} from '../../gateway/ecosystems/oci.ts';
import { parseRange } from '../../gateway/ecosystems/oci-route.ts';
import { VouchError } from '../../chain/errors.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { initAuthorityChain, runAsync, vouchAsync } from '../helpers/processes.ts';
import { createKeyFile } from '../../platform/key-file.ts';
import { blockPath } from '../../chain/layout.ts';
import { imageSemver, parseImageRef, readImageRefs, refUrl } from '../../tools/lockfiles/oci.ts';
import { testSigner } from '../helpers/chain-fixture.ts';
import { Layout, Registry, push, skopeo, smallLayer, tarImage, type Descriptor } from '../helpers/oci-registry.ts';
import { chainFile } from '../helpers/chain-files.ts';

const CANONICAL = 'https://registry.example.test/';
/** The canonical base of the registry behind the token-auth front (a private upstream). */
const PRIVATE = 'https://private.example.test/';
const PRIVATE_PASSWORD = 'pw-' + 'p'.repeat(24);
const MiB = 1024 * 1024;
const MEMORY = 64 * MiB;
const BUDGET = 128 * MiB;
const BIG = 1024 * MiB;
const work = mkdtempSync(join(tmpdir(), 'vouch-eco-oci-'));
let registry: Registry;
let gw: GatewayProcess;
/** A token-auth front of the registry (the spec's bearer flow, basic credentials at the realm). */
let authFront: Server;
let authUrl = '';
const issued = new Set<string>();
const authSeen: string[] = [];
let gwHost = '';
/** Tag -> the digest the registry gave it when the chain endorsed it. */
const digests = new Map<string, string>();
const layers = new Map<string, Descriptor>();

// ---------------------------------------------------------------------------
// Unit tests

test('request paths: base, manifests by tag and digest, blobs, tags/list; anything else is not the API', () => {
  const d = `sha256:${'a'.repeat(64)}`;
  assert.equal(parseOciPath(''), { type: 'base' });
  assert.equal(parseOciPath('library/app/manifests/1.4'), { type: 'manifest', repo: 'library/app', ref: '1.4', byDigest: false });
  assert.equal(parseOciPath(`app/manifests/${d}`), { type: 'manifest', repo: 'app', ref: d, byDigest: true });
  assert.equal(parseOciPath(`a/b/c/blobs/${d}`), { type: 'blob', repo: 'a/b/c', digest: d });
  assert.equal(parseOciPath('app/tags/list'), { type: 'tags', repo: 'app' });
  for (const bad of [
    'app',
    'app/manifests/',
    'App/manifests/1',
    'app/manifests/-x',
    'app/blobs/1.0',
    `app/blobs/sha256:${'A'.repeat(64)}`,
    'app/tags/other',
    'app//manifests/1',
    'app/manifests/1/x',
    '_catalog',
    `app/blobs/${d}/x`,
    `${'a/'.repeat(300)}x/manifests/1`,
    'a..b/manifests/1',
    `app/manifests/${'t'.repeat(129)}`,
    'app/blobs/uploads/',
  ]) {
    assert.is(parseOciPath(bad), null, bad);
  }
  assert.is(manifestUrl('https://registry-1.docker.io', 'library/alpine', '3.20'), 'https://registry-1.docker.io/v2/library/alpine/manifests/3.20');
});

test('manifests and indexes: media type, what they reach; bounded; schema 1 and junk refused', () => {
  const d = (c: string) => `sha256:${c.repeat(64)}`;
  const m = parseManifest(
    Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: DOCKER_MANIFEST,
        config: { digest: d('c'), size: 7 },
        layers: [
          { digest: d('1'), size: 2 ** 30 },
          { digest: d('2'), size: -1 },
        ],
      }),
    ),
  );
  // Declared sizes (only for scheduling what is fetched ahead): a size that is no byte count is null.
  assert.equal(m, { mediaType: DOCKER_MANIFEST, manifests: [], blobs: [d('c'), d('1'), d('2')], blobSizes: [7, 2 ** 30, null] });
  const i = parseManifest(Buffer.from(JSON.stringify({ schemaVersion: 2, manifests: [{ digest: d('a') }] })));
  assert.equal(i, { mediaType: OCI_INDEX_TYPE, manifests: [d('a')], blobs: [], blobSizes: [] });
  const refused = (b: Buffer | string) => {
    try {
      parseManifest(Buffer.isBuffer(b) ? b : Buffer.from(b));
      return null;
    } catch (e) {
      assert.instance(e, VouchError);
      return (e as VouchError).code;
    }
  };
  assert.is(refused('{"schemaVersion":1,"fsLayers":[]}'), 'bad_request');
  assert.is(refused('not json'), 'bad_request');
  assert.is(refused('{"schemaVersion":2,"layers":[{"digest":"md5:00"}]}'), 'bad_request');
  assert.is(refused('{"schemaVersion":2,"mediaType":"text/html","layers":[]}'), 'bad_request');
  assert.is(refused('['.repeat(100_000)), 'too_large');
  assert.is(refused(Buffer.alloc(4 * MiB + 1, 0x20)), 'too_large');
  assert.is(refused(JSON.stringify({ schemaVersion: 2, layers: Array.from({ length: 10_001 }, () => ({ digest: d('1') })) })), 'too_large');
});

test('tag lists, pages, challenges, ranges and the error JSON', () => {
  assert.equal(parseTagList(Buffer.from('{"name":"app","tags":["1.0","bad tag","2.0"]}')), { name: 'app', tags: ['1.0', '2.0'] });
  assert.equal(parseTagList(Buffer.from('{"name":"app","tags":null}')), { name: 'app', tags: [] });
  assert.throws(
    () => parseTagList(Buffer.from('{"tags":[]}')),
    (e: unknown) => e instanceof VouchError && e.code === 'bad_request',
  );
  assert.equal(pageOf(['a', 'b', 'c'], 2, null), { tags: ['a', 'b'], more: true });
  assert.equal(pageOf(['a', 'b', 'c'], 2, 'b'), { tags: ['c'], more: false });
  assert.equal(pageOf(['a', 'b', 'c'], null, 'a'), { tags: ['b', 'c'], more: false });
  const ch = parseChallenge('Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull"');
  assert.equal(
    [ch.scheme, ch.params.realm, ch.params.service, ch.params.scope],
    ['bearer', 'https://auth.example/token', 'registry.example', 'repository:a/b:pull'],
  );
  assert.is(parseChallenge('Basic realm="x"').scheme, 'basic');
  assert.throws(
    () => parseChallenge('x'.repeat(5000)),
    (e: unknown) => e instanceof VouchError && e.code === 'too_large',
  );
  assert.equal(parseRange('bytes=0-9', 100), { start: 0, end: 9 });
  assert.equal(parseRange('bytes=90-', 100), { start: 90, end: 99 });
  assert.equal(parseRange('bytes=-10', 100), { start: 90, end: 99 });
  assert.is(parseRange('bytes=100-', 100), 'bad');
  assert.is(parseRange('bytes=0-1,5-6', 100), null);
  assert.is(parseRange(undefined, 100), null);
  assert.equal(JSON.parse(ociErrorBody(404, 'vouch: no', 'blob')), { errors: [{ code: 'BLOB_UNKNOWN', message: 'vouch: no', detail: null }] });
  assert.is(JSON.parse(ociErrorBody(410, 'vouch: revoked', 'manifest')).errors[0].code, 'DENIED');
});

test("image references: Docker's defaults, registries with ports, digests, http://; files of references and compose / Kubernetes image fields", () => {
  const r = (t: string) => {
    const x = parseImageRef(t);
    return [x.registry, x.repo, x.tag, x.digest, refUrl(x)];
  };
  const d = `sha256:${'b'.repeat(64)}`;
  assert.equal(r('alpine'), ['docker.io', 'library/alpine', 'latest', null, 'https://registry-1.docker.io/v2/library/alpine/manifests/latest']);
  assert.equal(r('bitnami/redis:7.2'), ['docker.io', 'bitnami/redis', '7.2', null, 'https://registry-1.docker.io/v2/bitnami/redis/manifests/7.2']);
  assert.equal(r('ghcr.io/acme/app:1.4@' + d), ['ghcr.io', 'acme/app', '1.4', d, 'https://ghcr.io/v2/acme/app/manifests/1.4']);
  assert.equal(r('localhost:5000/app@' + d), ['localhost:5000', 'app', null, d, `https://localhost:5000/v2/app/manifests/${d}`]);
  assert.equal(r('http://127.0.0.1:5000/a/b:v1'), ['127.0.0.1:5000', 'a/b', 'v1', null, 'http://127.0.0.1:5000/v2/a/b/manifests/v1']);
  for (const bad of ['', 'App:1', 'a b', 'app:', 'app@sha256:12', 'http://app', 'reg.io/app:-x', `app:${'t'.repeat(129)}`]) {
    assert.throws(
      () => parseImageRef(bad),
      (e: unknown) => e instanceof VouchError && e.code === 'bad_request',
      bad,
    );
  }
  assert.is(imageSemver('v1.4.2', d), '1.4.2');
  assert.is(imageSemver('latest', d), '0.0.0-sha256.bbbbbbbbbbbb');
  assert.equal(readImageRefs('# images\nalpine:3.20\n\nghcr.io/a/b:1 # pinned\nalpine:3.20\n', 'images.txt'), ['alpine:3.20', 'ghcr.io/a/b:1']);
  const compose = 'services:\n  web:\n    image: nginx:1.27\n  db:\n    image: "postgres:16"\n    environment: {image: not-a-field-of-a-service}\n';
  assert.equal(readImageRefs(compose, 'compose.yaml'), ['nginx:1.27', 'postgres:16', 'not-a-field-of-a-service']);
  const k8s =
    'apiVersion: v1\nkind: Pod\nspec:\n  initContainers: [{name: i, image: busybox:1.36}]\n  containers:\n  - name: a\n    image: ghcr.io/acme/app:1.4\n---\nkind: Deployment\nspec: {template: {spec: {containers: [{image: redis:7}]}}}\n';
  assert.equal(readImageRefs(k8s, 'pod.yaml'), ['busybox:1.36', 'ghcr.io/acme/app:1.4', 'redis:7']);
  assert.throws(
    () => readImageRefs('a: [' + '['.repeat(200) + ']'.repeat(200) + ']\n', 'deep.yaml'),
    (e: unknown) => e instanceof VouchError,
  );
  assert.throws(
    () => readImageRefs('\n# nothing\n', 'empty.txt'),
    (e: unknown) => e instanceof VouchError && e.code === 'bad_request',
  );
});

// ---------------------------------------------------------------------------
// The registry, the images, the chain, the gateway

/** The digest the registry serves for `repo:tag` now (by its own answer, checked against the bytes). */
async function registryDigest(repo: string, tag: string): Promise<string> {
  const r = await fetch(`${registry.url}/v2/${repo}/manifests/${tag}`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(r.status, 200, `${repo}:${tag} at the registry`);
  const bytes = Buffer.from(await r.arrayBuffer());
  const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  assert.is(r.headers.get('docker-content-digest'), digest);
  return digest;
}

function buildLayouts(): void {
  const l = new Layout(join(work, 'layout'));
  const image = (name: string, n: number) => {
    const ls = Array.from({ length: n }, (_, i) => smallLayer(l, `${name} layer ${i}`));
    ls.forEach((d, i) => layers.set(`${name}/${i}`, d));
    return l.image(ls);
  };
  l.tag(image('app', 2), 'app');
  l.tag(l.index([image('multi-amd64', 1), { ...l.image([smallLayer(l, 'multi arm64 layer')], { architecture: 'arm64', os: 'linux' }) }]), 'multi');
  l.tag(image('moved', 1), 'moved');
  l.tag(image('moved-later', 1), 'moved-later');
  l.tag(image('swapped', 1), 'swapped');
  l.tag(image('unendorsed', 1), 'unendorsed');
  l.tag(image('revoked', 1), 'revoked');
  l.tag(tarImage(l, { 'hello.txt': 'hello from an endorsed image\n' }).manifest, 'podman');
}

async function buildChain(dir: string): Promise<string> {
  const signer = testSigner();
  const t = Date.now() - 3_600_000;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now: t, uns: 'acme/images' })];
  const endorse = (repo: string, tag: string) => {
    const block = buildEndorseBlock({
      prev: blocks.at(-1)!,
      signer,
      backend: nodeBackend,
      now: t + blocks.length * 1000,
      entries: [{ url: manifestUrl(CANONICAL, repo, tag), artifactHash: digests.get(`${repo}:${tag}`)!, name: `oci/${repo}`, semver: '1.0.0', license: 'MIT' }],
    });
    blocks.push(block);
    return block;
  };
  for (const repo of ['app', 'multi', 'moved', 'swapped', 'podman', 'docker']) endorse(repo, '1.0');
  const revoked = endorse('revoked', '1.0');
  blocks.push(buildRevokeBlock({ prev: blocks.at(-1)!, target: revoked, signer, backend: nodeBackend, now: t + blocks.length * 1000 }));
  if (digests.has('big:1.0')) endorse('big', '1.0');
  blocks.push(
    buildEndorseBlock({
      prev: blocks.at(-1)!,
      signer,
      backend: nodeBackend,
      now: t + blocks.length * 1000,
      entries: [{ url: manifestUrl(PRIVATE, 'app', '1.0'), artifactHash: digests.get('app:1.0')!, name: 'oci/private-app', semver: '1.0.0', license: 'MIT' }],
    }),
  );
  const checkpoint = buildCheckpoint({ head: blocks.at(-1)!, signer, now: t + blocks.length * 1000 });
  await ChainRepo.init(
    dir,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(checkpoint),
    { message: 'oci fixture\n', authorName: 't', authorEmail: 't@vouch.invalid', timestamp: Math.floor(t / 1000) },
  );
  return base64Encode(signer.publicKey);
}

/** A gateway on the fixture chain; `diskDir`: with a disk mirror there (which survives a restart). */
async function startGateway(diskDir?: string): Promise<void> {
  const publicKey = await buildChain(join(work, 'chain'));
  const cfg = writeConfig(work, {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: join(work, 'chain'), public_key: publicKey },
    // A fetch's whole deadline: the 1 GiB layer must arrive within it on a loaded machine too (10 s was not enough at load 30).
    origin: { allow_private: true, timeout: 60 },
    mirror: { memory_bytes: MEMORY, budget_bytes: BUDGET, ...(diskDir !== undefined ? { disk_dir: diskDir } : {}) },
    proxy: {
      routes: [
        { prefix: '/v2/', kind: 'oci', origin: registry.url, canonical: CANONICAL, unendorsed: 'deny' },
        { prefix: '/v2/pass.local/', kind: 'oci', origin: registry.url, canonical: CANONICAL, unendorsed: 'pass' },
        { prefix: '/v2/private.local/', kind: 'oci', origin: authUrl, canonical: PRIVATE, credentials_file: join(work, 'private.cred') },
      ],
    },
  });
  gw = await startGatewayProcess(['--config', cfg]);
  gwHost = new URL(gw.url).host;
}

/**
 * The registry behind the spec's token flow: /v2/ requests need a bearer
 * token the realm /token issues for basic credentials; they are then passed
 * to the registry.
 */
async function startAuthFront(): Promise<void> {
  writeFileSync(join(work, 'private.cred'), `puller:${PRIVATE_PASSWORD}\n`, { mode: 0o600 });
  authFront = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    if (url.pathname === '/token') {
      authSeen.push(`${req.headers.authorization ?? ''} ${url.searchParams.get('scope')}`);
      // Anonymous pulls get a token; given credentials must be right.
      if (req.headers.authorization !== undefined && req.headers.authorization !== `Basic ${Buffer.from(`puller:${PRIVATE_PASSWORD}`).toString('base64')}`) {
        res.writeHead(401).end();
        return;
      }
      const token = `tok-${Math.random().toString(36).slice(2)}`;
      issued.add(token);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token, expires_in: 300 }));
      return;
    }
    const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (bearer === undefined || !issued.has(bearer)) {
      res.writeHead(401, {
        'www-authenticate': `Bearer realm="${authUrl}/token",service="vouch-test",scope="repository:app:pull"`,
        'content-type': 'application/json',
      });
      res.end('{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}');
      return;
    }
    fetch(registry.url + req.url, { method: req.method, headers: { accept: req.headers.accept ?? '*/*' } }).then(
      async (up) => {
        const headers: Record<string, string> = {};
        for (const k of ['content-type', 'content-length', 'docker-content-digest']) {
          const v = up.headers.get(k);
          if (v !== null) headers[k] = v;
        }
        res.writeHead(up.status, headers);
        res.end(Buffer.from(await up.arrayBuffer()));
      },
      () => res.writeHead(502).end(),
    );
  });
  await new Promise<void>((r) => authFront.listen(0, '127.0.0.1', r));
  authUrl = `http://127.0.0.1:${(authFront.address() as { port: number }).port}`;
}

/** A new gateway process (an empty memory mirror) on the fixture chain made again. */
async function restartGateway(diskDir?: string): Promise<void> {
  await gw.stop();
  rmSync(join(work, 'chain'), { recursive: true, force: true });
  await startGateway(diskDir);
}

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
  buildLayouts();
  const layout = join(work, 'layout');
  for (const [repo, tag] of [
    ['app', 'app'],
    ['moved', 'moved'],
    ['swapped', 'swapped'],
    ['unendorsed', 'unendorsed'],
    ['revoked', 'revoked'],
    ['podman', 'podman'],
  ]) {
    await push(layout, tag!, registry, repo!);
  }
  await push(layout, 'multi', registry, 'multi', true);
  await push(layout, 'moved-later', registry, 'moved');
  // A Docker schema 2 image (skopeo converts the OCI manifest on the way).
  const v2s2 = await skopeo(['copy', '--format', 'v2s2', '--dest-tls-verify=false', `oci:${layout}:app`, `docker://${registry.host}/docker:docker`]);
  assert.is(v2s2.status, 0, v2s2.stderr);
  // skopeo pushed `repo:<layout tag>`; the tests use `repo:1.0`.
  for (const repo of ['app', 'multi', 'moved', 'swapped', 'unendorsed', 'revoked', 'podman', 'docker']) {
    const r = await skopeo([
      'copy',
      '--all',
      '--src-tls-verify=false',
      '--dest-tls-verify=false',
      `docker://${registry.host}/${repo}:${repo}`,
      `docker://${registry.host}/${repo}:1.0`,
    ]);
    assert.is(r.status, 0, r.stderr);
    digests.set(`${repo}:1.0`, await registryDigest(repo, '1.0'));
  }
  await startAuthFront();
  await startGateway();
});

test.after(async () => {
  await gw?.stop();
  await registry?.stop();
  await new Promise((r) => (authFront ? authFront.close(r) : r(null)));
  rmSync(work, { recursive: true, force: true });
  if (podmanRun) rmSync(podmanRun, { recursive: true, force: true });
});

/** skopeo copy of `repo:tag` through the gateway into a fresh OCI layout; the run and the layout's directory. */
async function pull(ref: string, extra: string[] = []): Promise<{ status: number | null; stderr: string; dir: string }> {
  const dir = mkdtempSync(join(work, 'pull-'));
  const r = await skopeo(['copy', ...extra, '--src-tls-verify=false', `docker://${gwHost}/${ref}`, `oci:${dir}:x`], 180_000);
  return { status: r.status, stderr: r.stderr, dir };
}

/** Every blob of a pulled layout matches its name (skopeo checks too; this says so in the test). */
function layoutIsIntact(dir: string): string[] {
  const names = readdirSync(join(dir, 'blobs', 'sha256'));
  for (const hex of names)
    assert.is(
      createHash('sha256')
        .update(readFileSync(join(dir, 'blobs', 'sha256', hex)))
        .digest('hex'),
      hex,
    );
  return names.map((h) => `sha256:${h}`);
}

test('an endorsed tag pulls with skopeo through the gateway: the endorsed manifest, verified layers', async () => {
  const inspect = await skopeo(['inspect', '--tls-verify=false', '--raw', `docker://${gwHost}/app:1.0`]);
  assert.is(inspect.status, 0, inspect.stderr);
  assert.is(`sha256:${createHash('sha256').update(inspect.stdout).digest('hex')}`, digests.get('app:1.0'));
  const p = await pull('app:1.0');
  assert.is(p.status, 0, p.stderr);
  const blobs = layoutIsIntact(p.dir);
  assert.ok(blobs.includes(digests.get('app:1.0')!), 'the endorsed manifest is in the pulled layout');
  for (const i of [0, 1]) assert.ok(blobs.includes(layers.get(`app/${i}`)!.digest), `layer ${i}`);
  // HEAD by tag: the digest header the clients resolve tags with.
  const head = await fetch(`${gw.url}/v2/app/manifests/1.0`, { method: 'HEAD', headers: { accept: MANIFEST_ACCEPT } });
  assert.is(head.status, 200);
  assert.is(head.headers.get('docker-content-digest'), digests.get('app:1.0'));
  // A blob in ranges.
  const layer = layers.get('app/0')!;
  const part = await fetch(`${gw.url}/v2/app/blobs/${layer.digest}`, { headers: { range: 'bytes=10-19' } });
  assert.is(part.status, 206);
  assert.is(part.headers.get('content-range'), `bytes 10-19/${layer.size}`);
  assert.equal(Buffer.from(await part.arrayBuffer()), readFileSync(join(work, 'layout', 'blobs', 'sha256', layer.digest.slice(7))).subarray(10, 20));
});

test("HEAD of a blob the mirror does not hold: the upstream's HEAD answers (size, digest); no byte fetched, nothing counted as verified", async () => {
  // HEAD of the manifest: reachability learnt, nothing fetched ahead (a GET would fetch its blobs ahead).
  const m = await fetch(`${gw.url}/v2/podman/manifests/1.0`, { method: 'HEAD', headers: { accept: MANIFEST_ACCEPT } });
  assert.is(m.status, 200);
  const manifest = JSON.parse(readFileSync(join(work, 'layout', 'blobs', 'sha256', digests.get('podman:1.0')!.slice(7)), 'utf8')) as {
    layers: { digest: string; size: number }[];
  };
  const layer = manifest.layers[0]!;
  const bytes0 = await metric(/^vouch_origin_fetch_bytes_total$/);
  const verified0 = await metric(/^vouch_proxy_requests_total\{outcome="verified"\}$/);
  const head = await fetch(`${gw.url}/v2/podman/blobs/${layer.digest}`, { method: 'HEAD' });
  assert.is(head.status, 200);
  assert.is(head.headers.get('content-length'), String(layer.size));
  assert.is(head.headers.get('docker-content-digest'), layer.digest);
  assert.match(head.headers.get('x-vouch-unverified') ?? '', /HEAD answered from the upstream/);
  assert.is(await metric(/^vouch_origin_fetch_bytes_total$/), bytes0, 'the HEAD fetched the blob');
  assert.is(await metric(/^vouch_proxy_requests_total\{outcome="verified"\}$/), verified0, 'the HEAD counted as verified');
  // A blob the upstream does not have: 404 with the reason, in the status line too (a HEAD has no body).
  const missing = `sha256:${'0'.repeat(64)}`;
  const none = await fetch(`${gw.url}/v2/podman/blobs/${missing}`, { method: 'HEAD' });
  assert.is(none.status, 404);
  assert.match(none.statusText, /^vouch: blob sha256:0{64} of podman is not reachable from an endorsed tag, refused$/);
  // A GET then fetches and checks the bytes (and counts them as verified).
  const get = await fetch(`${gw.url}/v2/podman/blobs/${layer.digest}`);
  assert.is(get.status, 200);
  assert.is(
    `sha256:${createHash('sha256')
      .update(Buffer.from(await get.arrayBuffer()))
      .digest('hex')}`,
    layer.digest,
  );
  assert.is(await metric(/^vouch_proxy_requests_total\{outcome="verified"\}$/), verified0 + 1);
});

test('a Docker schema 2 manifest: served as it is stored, with its media type and digest', async () => {
  const head = await fetch(`${gw.url}/v2/docker/manifests/1.0`, { method: 'HEAD', headers: { accept: MANIFEST_ACCEPT } });
  assert.is(head.status, 200);
  assert.is(head.headers.get('content-type'), DOCKER_MANIFEST);
  assert.is(head.headers.get('docker-content-digest'), digests.get('docker:1.0'));
  const p = await pull('docker:1.0');
  assert.is(p.status, 0, p.stderr);
  layoutIsIntact(p.dir);
});

test('a multi-platform index: the index is endorsed, each platform manifest is reachable through it', async () => {
  const p = await pull('multi:1.0', ['--all']);
  assert.is(p.status, 0, p.stderr);
  const blobs = layoutIsIntact(p.dir);
  assert.ok(blobs.includes(digests.get('multi:1.0')!), 'the endorsed index');
  assert.ok(blobs.includes(layers.get('multi-amd64/0')!.digest));
  const arm = await pull('multi:1.0', ['--override-arch', 'arm64']);
  assert.is(arm.status, 0, arm.stderr);
  // A platform manifest by digest from another repository is not reachable there.
  const index = JSON.parse(readFileSync(join(p.dir, 'blobs', 'sha256', digests.get('multi:1.0')!.slice(7)), 'utf8')) as { manifests: { digest: string }[] };
  const other = await fetch(`${gw.url}/v2/unendorsed/manifests/${index.manifests[0]!.digest}`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(other.status, 404);
});

test('a tag moved upstream still gets the endorsed digest, fetched by digest from the registry', async () => {
  const r = await skopeo([
    'copy',
    '--src-tls-verify=false',
    '--dest-tls-verify=false',
    `docker://${registry.host}/moved:moved-later`,
    `docker://${registry.host}/moved:1.0`,
  ]);
  assert.is(r.status, 0, r.stderr);
  const now = await registryDigest('moved', '1.0');
  assert.is.not(now, digests.get('moved:1.0'), 'the tag moved at the registry');
  const inspect = await skopeo(['inspect', '--tls-verify=false', '--raw', `docker://${gwHost}/moved:1.0`]);
  assert.is(inspect.status, 0, inspect.stderr);
  assert.is(`sha256:${createHash('sha256').update(inspect.stdout).digest('hex')}`, digests.get('moved:1.0'));
  const p = await pull('moved:1.0');
  assert.is(p.status, 0, p.stderr);
  assert.ok(layoutIsIntact(p.dir).includes(layers.get('moved/0')!.digest));
  assert.not.ok(layoutIsIntact(p.dir).includes(layers.get('moved-later/0')!.digest));
});

test("a blob swapped in the registry's storage is refused before any byte; skopeo prints vouch's message", async () => {
  const layer = layers.get('swapped/0')!;
  const file = registry.blobFile(layer.digest);
  assert.ok(existsSync(file), file);
  const bytes = readFileSync(file);
  bytes[bytes.length >> 1] = bytes[bytes.length >> 1]! ^ 0xff;
  writeFileSync(file, bytes);
  const p = await pull('swapped:1.0');
  assert.is.not(p.status, 0);
  // skopeo prints a blob's status only (containers/image reads no error body for blobs) ...
  assert.match(p.stderr, /reading blob sha256:[0-9a-f]{64}: .*409/);
  // ... so the image's manifest is refused with the reason while the mismatch is fresh: a retry shows it.
  const again = await pull('swapped:1.0');
  assert.is.not(again.status, 0);
  assert.match(again.stderr, new RegExp(`vouch: the upstream's bytes for ${layer.digest} do not match the digest \\(blob swapped\\), refused`));
  const direct = await fetch(`${gw.url}/v2/swapped/blobs/${layer.digest}`);
  assert.is(direct.status, 409);
  assert.is((await direct.json()).errors[0].code, 'DENIED');
  // The reason in the status line too: what containerd prints for a blob, and containers/image for a 5xx.
  assert.is(direct.statusText, `vouch: the upstream's bytes for ${layer.digest} do not match the digest (blob swapped), refused`);
  const head = await fetch(`${gw.url}/v2/swapped/blobs/${layer.digest}`, { method: 'HEAD' });
  assert.is(head.status, 409);
  assert.match(head.statusText, /^vouch: the upstream's bytes for sha256:[0-9a-f]{64} do not match the digest/);
});

test("an unendorsed tag is refused (MANIFEST_UNKNOWN with vouch's reason); on a pass route, picked by ?ns=, it passes marked", async () => {
  const p = await pull('unendorsed:1.0');
  assert.is.not(p.status, 0);
  assert.match(p.stderr, /vouch: https:\/\/registry\.example\.test\/v2\/unendorsed\/manifests\/1\.0 is not endorsed by the authority, refused/);
  const r = await fetch(`${gw.url}/v2/unendorsed/manifests/1.0`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(r.status, 404);
  assert.is((await r.json()).errors[0].code, 'MANIFEST_UNKNOWN');
  // By digest it is not reachable from anything endorsed either.
  const byDigest = await fetch(`${gw.url}/v2/unendorsed/manifests/${digests.get('unendorsed:1.0')}`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(byDigest.status, 404);
  const blob = await fetch(`${gw.url}/v2/unendorsed/blobs/${layers.get('unendorsed/0')!.digest}`);
  assert.is(blob.status, 404);
  assert.is((await blob.json()).errors[0].code, 'BLOB_UNKNOWN');
  for (const path of ['/v2/pass.local/unendorsed/manifests/1.0', '/v2/unendorsed/manifests/1.0?ns=pass.local']) {
    const passed = await fetch(gw.url + path, { headers: { accept: MANIFEST_ACCEPT } });
    assert.is(passed.status, 200, path);
    assert.is(passed.headers.get('x-vouch-unendorsed'), 'passed unverified');
    assert.is(passed.headers.get('docker-content-digest'), digests.get('unendorsed:1.0'));
    await passed.arrayBuffer();
  }
  // A namespace no route serves is refused, not answered from the default registry's repository of that name.
  const elsewhere = await fetch(`${gw.url}/v2/app/manifests/1.0?ns=ghcr.io`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(elsewhere.status, 404);
  assert.match((await elsewhere.json()).errors[0].message, /^vouch: no route of this gateway serves the registry ghcr\.io/);
  const own = await fetch(`${gw.url}/v2/app/manifests/1.0?ns=registry.example.test`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(own.status, 200);
  await own.arrayBuffer();
  const viaPass = await pull('pass.local/unendorsed:1.0');
  assert.is(viaPass.status, 0, viaPass.stderr);
});

test('a revoked tag is refused with a message naming the revocation', async () => {
  const p = await pull('revoked:1.0');
  assert.is.not(p.status, 0);
  assert.match(
    p.stderr,
    /vouch: https:\/\/registry\.example\.test\/v2\/revoked\/manifests\/1\.0 \(sha256:[0-9a-f]{64}\) is revoked by the authority in block \d+ \([0-9a-f]{64}\), refused/,
  );
  const r = await fetch(`${gw.url}/v2/revoked/manifests/1.0`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(r.status, 410);
  assert.is((await r.json()).errors[0].code, 'DENIED');
});

test("tags/list lists only endorsed tags in force, with the spec's pagination; the base answers", async () => {
  const base = await fetch(`${gw.url}/v2/`);
  assert.is(base.status, 200);
  assert.is(base.headers.get('docker-distribution-api-version'), 'registry/2.0');
  const upstream = (await (await fetch(`${registry.url}/v2/app/tags/list`)).json()) as { tags: string[] };
  assert.equal(upstream.tags.sort(), ['1.0', 'app']);
  const r = await fetch(`${gw.url}/v2/app/tags/list`);
  assert.equal(await r.json(), { name: 'app', tags: ['1.0'] });
  const revoked = await (await fetch(`${gw.url}/v2/revoked/tags/list`)).json();
  assert.equal(revoked, { name: 'revoked', tags: [] });
  const paged = await fetch(`${gw.url}/v2/pass.local/app/tags/list?n=1`);
  assert.equal(await paged.json(), { name: 'app', tags: ['1.0'] });
  assert.is(paged.headers.get('link'), '</v2/pass.local/app/tags/list?n=1&last=1.0>; rel="next"');
  const list = await skopeo(['list-tags', '--tls-verify=false', `docker://${gwHost}/app`]);
  assert.is(list.status, 0, list.stderr);
  assert.equal(JSON.parse(list.stdout).Tags, ['1.0']);
});

test('a private upstream behind the bearer-token flow: the credentials file answers the realm; neither it nor the token is logged', async () => {
  const p = await pull('private.local/app:1.0');
  assert.is(p.status, 0, p.stderr);
  assert.ok(layoutIsIntact(p.dir).includes(digests.get('app:1.0')!));
  assert.ok(
    authSeen.some((a) => a.startsWith('Basic ') && a.endsWith(' repository:app:pull')),
    authSeen.join('\n'),
  );
  const logs = gw.stdout() + gw.stderr();
  assert.not.ok(logs.includes(PRIVATE_PASSWORD), 'the password was logged');
  for (const t of issued) assert.not.ok(logs.includes(t), 'a token was logged');
  // Wrong credentials: refused by the realm, a 5xx with the reason in the body, nothing served.
  authSeen.length = 0;
  writeFileSync(join(work, 'private.cred'), 'puller:wrong\n');
  issued.clear();
  const r = await fetch(`${gw.url}/v2/private.local/app/tags/list`);
  assert.is(r.status, 502);
  assert.match((await r.json()).errors[0].message, /the token service answered 401/);
  writeFileSync(join(work, 'private.cred'), `puller:${PRIVATE_PASSWORD}\n`);
});

/**
 * podman with a registries.conf that mirrors registry.example.test to the
 * gateway; the registry's own location is a closed port on 127.0.0.1, so a
 * fallback stays on loopback. Storage (vfs) in the work dir; the run dir in
 * a short one of its own (podman refuses a runroot longer than 50 characters,
 * which the work dir under a test runner's TMPDIR can be).
 */
let podmanRun = '';
async function podman(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const dir = join(work, 'podman');
  podmanRun ||= mkdtempSync(join(tmpdir(), 'p-'));
  const conf = join(work, 'registries.conf');
  writeFileSync(
    conf,
    [
      'unqualified-search-registries = []',
      '[[registry]]',
      'prefix = "registry.example.test"',
      'location = "127.0.0.1:1"',
      'insecure = true',
      '[[registry.mirror]]',
      `location = "${gwHost}"`,
      'insecure = true',
      '',
    ].join('\n'),
  );
  return runAsync(
    'podman',
    ['--root', join(dir, 'root'), '--runroot', podmanRun, '--storage-driver', 'vfs', '--cgroup-manager', 'cgroupfs', '--events-backend', 'none', ...args],
    { env: { ...process.env, CONTAINERS_REGISTRIES_CONF: conf, HOME: dir } },
  );
}

test("podman pull with a registries.conf mirror: the endorsed image, by its endorsed digest; an unendorsed one refused with vouch's reason", async () => {
  const ok = await podman(['pull', 'registry.example.test/podman:1.0']);
  assert.is(ok.status, 0, ok.stderr);
  const inspect = await podman(['image', 'inspect', '--format', '{{.Digest}}', 'registry.example.test/podman:1.0']);
  assert.is(inspect.stdout.trim(), digests.get('podman:1.0'), inspect.stderr);
  const refused = await podman(['pull', 'registry.example.test/unendorsed:1.0']);
  assert.is.not(refused.status, 0);
  assert.match(refused.stderr, /vouch: https:\/\/registry\.example\.test\/v2\/unendorsed\/manifests\/1\.0 is not endorsed by the authority, refused/);
});

/** Peak RSS (VmHWM) and current RSS of a process, in bytes. */
function memoryOf(pid: number): { hwm: number; rss: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (f: string) => Number(new RegExp(`^${f}:\\s+(\\d+) kB$`, 'm').exec(s)![1]) * 1024;
  return { hwm: kb('VmHWM'), rss: kb('VmRSS') };
}

/** GETs `path` from the gateway, hashing the body as it streams (never held); status and digest. */
function streamDigest(path: string): Promise<{ status: number; digest: string; bytes: number }> {
  return new Promise((resolve, reject) => {
    const u = new URL(gw.url);
    const req = httpRequest({ host: u.hostname, port: u.port, path, agent: false }, (res) => {
      const h = createHash('sha256');
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        h.update(c);
        bytes += c.length;
      });
      res.on('end', () => resolve({ status: res.statusCode!, digest: `sha256:${h.digest('hex')}`, bytes }));
      res.on('error', reject);
    });
    req.setTimeout(300_000, () => req.destroy(new Error('no progress in 300 s')));
    req.on('error', reject);
    req.end();
  });
}

test("a 1 GiB layer: verified while it streams, served in bounded memory (the gateway's peak RSS within the budget)", async () => {
  const l = new Layout(join(work, 'big-layout'));
  const layer = await l.bigLayer(BIG, 7);
  l.tag(l.image([layer]), 'big');
  await push(join(work, 'big-layout'), 'big', registry, 'big');
  const r = await skopeo([
    'copy',
    '--src-tls-verify=false',
    '--dest-tls-verify=false',
    `docker://${registry.host}/big:big`,
    `docker://${registry.host}/big:1.0`,
  ]);
  assert.is(r.status, 0, r.stderr);
  rmSync(join(work, 'big-layout'), { recursive: true, force: true });
  digests.set('big:1.0', await registryDigest('big', '1.0'));
  await restartGateway(); // its chain endorses big:1.0 too (the same fixture, one block more)
  const before = memoryOf(gw.child.pid!);
  const m = await fetch(`${gw.url}/v2/big/manifests/1.0`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(m.status, 200);
  const manifest = (await m.json()) as { layers: { digest: string; size: number }[] };
  assert.is(manifest.layers[0]!.digest, layer.digest);
  const got = await streamDigest(`/v2/big/blobs/${layer.digest}`);
  assert.equal(got, { status: 200, digest: layer.digest, bytes: layer.size });
  const after = memoryOf(gw.child.pid!);
  if (process.env.VOUCH_OCI_MEMORY === '1')
    console.error(`1 GiB layer: gateway RSS before ${Math.round(before.rss / MiB)} MiB, peak ${Math.round(after.hwm / MiB)} MiB`);
  const growth = after.hwm - before.rss;
  assert.ok(
    growth < BUDGET + 64 * MiB,
    `the gateway's peak RSS grew ${Math.round(growth / MiB)} MiB serving a ${Math.round(layer.size / MiB)} MiB layer (budget ${BUDGET / MiB} MiB)`,
  );
  assert.ok(after.hwm < 600 * MiB, `peak RSS ${Math.round(after.hwm / MiB)} MiB`);
});

test('vouch endorse --oci (offline): tags resolved at the registry, endorsed as their canonical URLs with the manifest / index digests, in one block', async () => {
  const dir = join(work, 'endorse');
  const key = join(dir, 'authority.pem');
  const chain = join(dir, 'chain');
  mkdirSync(dir, { recursive: true });
  await initAuthorityChain({ key, chain, signer: 'oci-test', uns: 'acme/images' });
  writeFileSync(
    join(work, 'compose.yaml'),
    'services:\n  web:\n    image: registry.example.test/app:1.0\n  multi:\n    image: registry.example.test/multi:1.0\n',
  );
  const args = ['endorse', '--chain', chain, '--key', key, '--license', 'MIT', '--origin', `${CANONICAL}=${registry.url}/`, '--json'];
  const r = await vouchAsync([...args, '--oci-file', join(work, 'compose.yaml'), '--oci', `registry.example.test/moved:moved-later`]);
  assert.is(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.is(out.status, 'posted');
  assert.equal(out.blocks.length, 1);
  const byRef = Object.fromEntries(out.images.map((i: { ref: string; url: string; digest: string }) => [i.ref, i]));
  assert.equal(byRef['registry.example.test/app:1.0'], {
    ref: 'registry.example.test/app:1.0',
    url: `${CANONICAL}v2/app/manifests/1.0`,
    digest: digests.get('app:1.0'),
    media_type: 'application/vnd.oci.image.manifest.v1+json',
  });
  assert.is(byRef['registry.example.test/multi:1.0'].digest, digests.get('multi:1.0'));
  assert.is(byRef['registry.example.test/multi:1.0'].media_type, 'application/vnd.oci.image.index.v1+json');
  const block = JSON.parse(chainFile(chain, blockPath(out.blocks[0].index)));
  assert.equal(
    block.payload.endorsements.map((e: { artifact_url: string; artifact_hash: string }) => [e.artifact_url, e.artifact_hash]).sort(),
    [
      [`${CANONICAL}v2/app/manifests/1.0`, digests.get('app:1.0')],
      [`${CANONICAL}v2/moved/manifests/moved-later`, await registryDigest('moved', 'moved-later')],
      [`${CANONICAL}v2/multi/manifests/1.0`, digests.get('multi:1.0')],
    ].sort(),
  );
  // Again: nothing new.
  const again = await vouchAsync([...args, '--oci-file', join(work, 'compose.yaml')]);
  assert.is(again.status, 0, again.stderr);
  assert.is(JSON.parse(again.stdout).status, 'unchanged');
  // A digest the tag does not have is refused, nothing appended.
  const wrong = await vouchAsync([...args, '--oci', `registry.example.test/app:1.0@${digests.get('multi:1.0')}`]);
  assert.is(wrong.status, 1, wrong.stderr);
  assert.match(wrong.stderr, /the tag 1\.0 is sha256:[0-9a-f]{64} at the registry, not the digest named/);
});

test("vouch endorse --oci through a running authority: the authority fetches the manifest itself (a registry's token flow too) and checks the claimed digest", async () => {
  const dir = join(work, 'authority');
  const keyFile = join(dir, 'authority.pem');
  const tokenFile = join(dir, 'submit.token');
  mkdirSync(dir, { recursive: true });
  createKeyFile(keyFile);
  writeFileSync(tokenFile, 'oci-token-' + 'c'.repeat(32), { mode: 0o600 });
  const authority = await startGatewayProcess([
    '--config',
    writeConfig(dir, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: join(dir, 'chain') },
      authority: { key_file: keyFile, signer: 'oci-authority', submit_token_file: tokenFile },
      origin: { allow_private: true },
    }),
  ]);
  try {
    const r = await vouchAsync([
      'endorse',
      '--gateway',
      authority.url,
      '--token-file',
      tokenFile,
      '--license',
      'MIT',
      '--json',
      '--oci',
      `http://${registry.host}/multi:1.0`,
      '--oci',
      `http://${registry.host}/app:1.0`,
      '--oci',
      `${authUrl}/app:1.0`,
    ]);
    assert.is(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.is(out.status, 'posted');
    const block = (await (await fetch(`${authority.url}/v1/block?index=${out.blocks[0].index}`)).json()) as {
      payload: { endorsements: { artifact_url: string; artifact_hash: string }[] };
    };
    assert.equal(
      block.payload.endorsements.map((e) => [e.artifact_url, e.artifact_hash]).sort(),
      [
        [`${registry.url}/v2/app/manifests/1.0`, digests.get('app:1.0')],
        [`${registry.url}/v2/multi/manifests/1.0`, digests.get('multi:1.0')],
        // Behind the token flow (anonymous): the CLI and the authority each asked the realm for a pull token.
        [`${authUrl}/v2/app/manifests/1.0`, digests.get('app:1.0')],
      ].sort(),
    );
    assert.ok(authSeen.filter((a) => a === ' repository:app:pull').length >= 2, authSeen.join('\n'));
  } finally {
    await authority.stop();
  }
});

test("vouch endorse --oci --registry-auth: a private registry (the distribution registry with htpasswd auth), Docker's config.json or one line user:password; never echoed", async () => {
  const dir = join(work, 'private-registry');
  mkdirSync(dir, { recursive: true });
  const password = 'reg-' + 'q'.repeat(20);
  const hp = await runAsync('htpasswd', ['-nbB', 'puller', password]);
  assert.is(hp.status, 0, `htpasswd (apache2-utils): ${hp.stderr}`);
  writeFileSync(join(dir, 'htpasswd'), hp.stdout.trim() + '\n');
  const locked = await Registry.start(join(dir, 'registry'), { htpasswd: join(dir, 'htpasswd') });
  try {
    const anonymous = await fetch(`${locked.url}/v2/`);
    assert.is(anonymous.status, 401);
    assert.match(anonymous.headers.get('www-authenticate') ?? '', /^Basic /);
    const pushed = await skopeo([
      'copy',
      '--dest-tls-verify=false',
      '--dest-creds',
      `puller:${password}`,
      `oci:${join(work, 'layout')}:app`,
      `docker://${locked.host}/team/app:1.0`,
    ]);
    assert.is(pushed.status, 0, pushed.stderr);
    const key = join(dir, 'authority.pem');
    const chain = join(dir, 'chain');
    await initAuthorityChain({ key, chain, signer: 'oci-private', uns: 'acme/images' });
    const ref = `http://${locked.host}/team/app:1.0`;
    const args = ['endorse', '--chain', chain, '--key', key, '--license', 'MIT', '--json', '--oci', ref];
    const without = await vouchAsync(args);
    assert.is.not(without.status, 0);
    assert.match(without.stderr, /the registry asks for a user and password: give them with --registry-auth FILE/);
    writeFileSync(
      join(dir, 'config.json'),
      JSON.stringify({
        auths: {
          [`http://${locked.host}`]: { auth: Buffer.from(`puller:${password}`).toString('base64') },
          'https://index.docker.io/v1/': { auth: Buffer.from('other:secret').toString('base64') },
        },
      }),
      { mode: 0o600 },
    );
    const viaConfig = await vouchAsync([...args, '--registry-auth', join(dir, 'config.json')]);
    assert.is(viaConfig.status, 0, viaConfig.stderr);
    const out = JSON.parse(viaConfig.stdout);
    assert.is(out.status, 'posted');
    assert.equal(
      out.images.map((i: { url: string; digest: string }) => [i.url, i.digest]),
      [[`${locked.url}/v2/team/app/manifests/1.0`, digests.get('app:1.0')]],
    );
    // The gateway's credentials_file form: one line.
    writeFileSync(join(dir, 'cred'), `puller:${password}\n`, { mode: 0o600 });
    const viaLine = await vouchAsync([...args, '--registry-auth', join(dir, 'cred')]);
    assert.is(viaLine.status, 0, viaLine.stderr);
    assert.is(JSON.parse(viaLine.stdout).status, 'unchanged');
    writeFileSync(join(dir, 'cred'), 'puller:wrong\n');
    const wrong = await vouchAsync([...args, '--registry-auth', join(dir, 'cred')]);
    assert.is.not(wrong.status, 0);
    assert.match(wrong.stderr, /answered 401 .*\(the credentials of --registry-auth were refused\)/);
    for (const r of [without, viaConfig, viaLine, wrong]) assert.not.ok((r.stdout + r.stderr).includes(password), 'the password was echoed');
    // One line for references to two registries is refused (which registry would get it?).
    const two = await vouchAsync([...args, '--oci', `http://${registry.host}/app:1.0`, '--registry-auth', join(dir, 'cred')]);
    assert.is.not(two.status, 0);
    assert.match(two.stderr, /the one-line form \(user:password\) is for one registry/);
  } finally {
    await locked.stop();
  }
});

test('the registry down, the mirror warm: an endorsed tag still pulls; after a restart too, by tag and by digest (the reachability record)', async () => {
  const disk = join(work, 'disk-mirror');
  await restartGateway(disk);
  const warm = await pull('app:1.0');
  assert.is(warm.status, 0, warm.stderr);
  await registry.stop();
  const p = await pull('app:1.0');
  assert.is(p.status, 0, p.stderr);
  assert.ok(layoutIsIntact(p.dir).includes(digests.get('app:1.0')!));
  // What the mirror does not hold (this gateway process never served it) fails: 502, vouch's reason in the status line (skopeo prints a 5xx's status line, not its body) and in the body.
  const cold = await pull('multi:1.0');
  assert.is.not(cold.status, 0);
  assert.match(
    cold.stderr,
    /reading manifest 1\.0 in [^:]+:\d+\/multi: received unexpected HTTP status: 502 vouch: upstream error for manifest sha256:[0-9a-f]{64} of multi/,
  );
  const r = await fetch(`${gw.url}/v2/multi/manifests/1.0`, { headers: { accept: MANIFEST_ACCEPT } });
  assert.is(r.status, 502);
  assert.match((await r.json()).errors[0].message, /^vouch: upstream error for manifest sha256:[0-9a-f]{64} of multi/);

  // A new gateway process on the same disk mirror, the registry still down: what was reachable is still served.
  const record = join(disk, 'oci-reachable.jsonl');
  const lines = readFileSync(record, 'utf8').trim().split('\n');
  assert.ok(
    lines.some((l) => l.includes(digests.get('app:1.0')!)),
    'the endorsed manifest is recorded',
  );
  writeFileSync(record, readFileSync(record, 'utf8') + 'not an entry\n{"route":1}\n');
  await restartGateway(disk);
  const byDigest = await pull(`app@${digests.get('app:1.0')}`);
  assert.is(byDigest.status, 0, byDigest.stderr);
  assert.ok(layoutIsIntact(byDigest.dir).includes(layers.get('app/1')!.digest));
  const blob = await fetch(`${gw.url}/v2/app/blobs/${layers.get('app/0')!.digest}`, { method: 'HEAD' });
  assert.is(blob.status, 200);
  assert.is(blob.headers.get('x-vouch-unverified'), null, 'mirrored: answered from the checked bytes');
  const byTag = await pull('app:1.0');
  assert.is(byTag.status, 0, byTag.stderr);
  // The broken lines were dropped, the entries kept.
  await gw.stop();
  const after = readFileSync(record, 'utf8').trim().split('\n');
  assert.not.ok(
    after.some((l) => l === 'not an entry' || l === '{"route":1}'),
    'the record was rebuilt',
  );
  assert.ok(after.some((l) => l.includes(digests.get('app:1.0')!)));
});

test.run();
