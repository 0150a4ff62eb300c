/**
 * The Go module proxy route (`kind: goproxy`): unit tests of the GOPROXY
 * path parsing, case-encoding, version order and list filtering; then the
 * REAL go command (Debian's golang-go) against a real `vouch serve` process
 * whose route `/go/` stands in front of a fixture module proxy (node:http on
 * 127.0.0.1 serving module zips in Go's format, .mod, .info, @v/list and
 * @latest) with `canonical: https://goproxy.example.org/`, and a chain
 * endorsing the canonical .zip URLs (and the .mod of two modules): endorsed
 * modules download with go's h1 sums matching what was built, a tampered zip
 * or .mod fails with the reason in go's output, unendorsed versions are not
 * offered nor resolved, go never reaches the fixture itself, and with the
 * fixture stopped a fresh module cache still fills (stale metadata, mirror).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  artifactHashOf,
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
import type { MetadataIO } from '../../gateway/ecosystems/ecosystem.ts';
import {
  compareGoVersions,
  escapeGo,
  filterVersionList,
  formatVersionList,
  goproxy,
  isCanonicalVersion,
  latestOf,
  modulePathProblem,
  parseGoproxyPath,
  parseVersionList,
  unescapeGo,
  versionFitsPath,
} from '../../gateway/ecosystems/goproxy.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { hash1, modVersion, type ModVersion } from '../helpers/go-modules.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { testSigner } from '../helpers/chain-fixture.ts';
import { runAsync, type Run } from '../helpers/processes.ts';

const CANONICAL = 'https://goproxy.example.org/';
const work = mkdtempSync(join(tmpdir(), 'vouch-eco-go-'));
let origin: OriginServer;
let gw: GatewayProcess;
let originStopped = false;

// ---------------------------------------------------------------------------
// Unit tests

test('case-encoding: ! + lower case, and only that', () => {
  assert.is(escapeGo('github.com/BurntSushi/toml'), 'github.com/!burnt!sushi/toml');
  assert.is(escapeGo('v1.0.0-RC1'), 'v1.0.0-!r!c1');
  assert.is(unescapeGo('github.com/!burnt!sushi/toml'), 'github.com/BurntSushi/toml');
  for (const bad of ['github.com/BurntSushi', 'a!', 'a!B', 'a!!b', 'a!1', 'é', 'a b']) assert.is(unescapeGo(bad), null, bad);
});

test('module paths: the rules of module.CheckPath, bounded', () => {
  for (const ok of ['example.com/hello', 'github.com/BurntSushi/toml', 'example.com/m/v2', 'gopkg.in/yaml.v3', 'golang.org/x/mod', 'a.b/c~d_e-f.g']) {
    assert.is(modulePathProblem(ok), null, ok);
  }
  for (const bad of [
    '',
    'hello',
    'Example.com/x',
    '-x.com/a',
    'example.com//a',
    'example.com/a/',
    'example.com/.a',
    'example.com/a.',
    'example.com/..',
    'example.com/a b',
    'example.com/a+b',
    'example.com/m/v1',
    'example.com/m/v0',
    'example.com/m/v02',
    'example.com/m/v2.1',
    'gopkg.in/yaml',
    'example.com/con',
    'example.com/LPT1.txt',
    'example.com/abc~1',
    `example.com/${'a'.repeat(300)}`,
    'example.com/a@b',
  ]) {
    assert.not.equal(modulePathProblem(bad), null, bad);
  }
});

test('versions: canonical semver with v, pseudo-versions, +incompatible; the major suffix must fit', () => {
  for (const ok of ['v0.0.0', 'v1.2.3', 'v1.2.3-rc.1', 'v0.0.0-20260101000000-abcdefabcdef', 'v2.0.0+incompatible', 'v1.0.0-RC1']) {
    assert.ok(isCanonicalVersion(ok), ok);
  }
  for (const bad of ['1.2.3', 'v1.2', 'v01.2.3', 'v1.2.3-01', 'v1.2.3+build', 'v1.2.3-', 'v1.2.3-a..b', `v1.0.0-${'a'.repeat(130)}`, 'latest']) {
    assert.not.ok(isCanonicalVersion(bad), bad);
  }
  assert.ok(versionFitsPath('example.com/m', 'v1.9.0'));
  assert.ok(versionFitsPath('example.com/m', 'v3.0.0+incompatible'));
  assert.not.ok(versionFitsPath('example.com/m', 'v2.0.0'));
  assert.ok(versionFitsPath('example.com/m/v2', 'v2.1.0'));
  assert.not.ok(versionFitsPath('example.com/m/v2', 'v1.0.0'));
  assert.not.ok(versionFitsPath('example.com/m/v2', 'v2.0.0+incompatible'));
  assert.ok(versionFitsPath('gopkg.in/yaml.v3', 'v3.0.1'));
});

test('Go version order and what latest means (the highest release, else the highest pre-release)', () => {
  const sorted = [
    'v0.0.0-20200101000000-aaaaaaaaaaaa',
    'v0.9.0',
    'v1.0.0-alpha',
    'v1.0.0-alpha.1',
    'v1.0.0-alpha.beta',
    'v1.0.0-beta.2',
    'v1.0.0-beta.11',
    'v1.0.0-rc.1',
    'v1.0.0',
    'v1.2.0',
    'v1.10.0',
    'v10.0.0+incompatible',
  ];
  const shuffled = [...sorted].reverse();
  assert.equal([...shuffled].sort(compareGoVersions), sorted);
  assert.is(compareGoVersions('v2.0.0+incompatible', 'v2.0.0'), 0);
  assert.is(latestOf(['v1.1.0', 'v1.3.0-rc.1', 'v1.0.0']), 'v1.1.0');
  assert.is(latestOf(['v1.3.0-rc.1', 'v1.3.0-rc.2', 'v0.0.0-20260101000000-abcdefabcdef']), 'v1.3.0-rc.2');
  assert.is(latestOf([]), null);
});

test('request paths: list, latest, info/mod/zip; %21 read as !; anything else is not the protocol', () => {
  assert.equal(parseGoproxyPath('example.com/hello/@v/list'), { what: 'list', module: 'example.com/hello' });
  assert.equal(parseGoproxyPath('example.com/!cased/@latest'), { what: 'latest', module: 'example.com/Cased' });
  assert.equal(parseGoproxyPath('example.com/%21cased/@v/v1.0.0-%21r%21c1.zip'), {
    what: 'zip',
    module: 'example.com/Cased',
    version: 'v1.0.0-RC1',
    canonical: true,
  });
  assert.equal(parseGoproxyPath('example.com/hello/@v/v1.0.0.mod'), { what: 'mod', module: 'example.com/hello', version: 'v1.0.0', canonical: true });
  assert.equal(parseGoproxyPath('example.com/hello/@v/master.info'), { what: 'info', module: 'example.com/hello', version: 'master', canonical: false });
  for (const bad of [
    'sumdb/sum.golang.org/supported',
    'example.com/hello/@v/',
    'example.com/hello/@v/list/',
    'example.com/hello/@v/master.zip',
    'example.com/hello/@v/master.mod',
    'example.com/hello/@v/v1.0.zip',
    'example.com/hello/@v/v2.0.0.zip',
    'example.com/Cased/@v/list',
    'example.com/hello/@v/v1.0.0.tar',
    'example.com/hello/@v/.info',
    'example.com/hello/@v/v1.0.0%2e.zip',
    'hello/@v/list',
    'example.com/hello@v1.0.0/@v/list',
    `example.com/${'a'.repeat(400)}/@v/list`,
    'example.com/hello/@v/a/b.info',
    '@v/list',
  ]) {
    assert.is(parseGoproxyPath(bad), null, bad);
  }
  assert.is(goproxy.classify('example.com/hello/@v/v1.0.0.zip', '').type, 'artifact');
  assert.is(goproxy.classify('example.com/hello/@v/v1.0.0.zip', 'x=1').type, 'other');
  assert.is(goproxy.classify('example.com/hello/@v/v1.0.0.mod', '').type, 'metadata');
  assert.is(goproxy.classify('sumdb/sum.golang.org/lookup/x@v1.0.0', '').type, 'other');
  assert.is(goproxy.artifactTarget!('example.com/%21cased/@v/v1.0.0.zip'), 'example.com/!cased/@v/v1.0.0.zip');
  assert.is(goproxy.artifactTarget!('example.com/hello/@v/v1.0.0.zip'), null);
  assert.equal(goproxy.errorBody('vouch: refused\nsecond'), { contentType: 'text/plain; charset=utf-8', body: 'vouch: refused second\n' });
});

test('list filtering: canonical versions that fit the path; on deny only those with a .zip endorsed in force', () => {
  const body = 'v1.0.0\nv1.1.0 2026-01-02T03:04:05Z\r\nnot-a-version\nv2.0.0\nv1.2.0  \n\nv1.0.0\n' + `v1.3.0 ${'x'.repeat(600)}\nv1.3.0-rc.1 yesterday\n`;
  const lines = parseVersionList(body, 'example.com/hello');
  assert.equal(lines, [
    { version: 'v1.0.0', time: null },
    { version: 'v1.1.0', time: '2026-01-02T03:04:05Z' },
    { version: 'v1.2.0', time: null },
    { version: 'v1.3.0-rc.1', time: null },
  ]);
  const endorsed = new Set([`${CANONICAL}example.com/hello/@v/v1.0.0.zip`, `${CANONICAL}example.com/hello/@v/v1.3.0-rc.1.zip`]);
  const io = (unendorsed: 'deny' | 'pass') => ({
    unendorsed,
    originUrl: (rest: string) => `http://127.0.0.1:1/mod/${rest}`,
    artifactUrlOf: (url: string) => url.replace('http://127.0.0.1:1/mod/', CANONICAL),
    endorsed: (url: string) => (endorsed.has(url) ? ({} as ReturnType<MetadataIO['endorsed']>) : null),
  });
  assert.is(formatVersionList(filterVersionList(io('deny'), 'example.com/hello', lines)), 'v1.0.0\nv1.3.0-rc.1\n');
  assert.is(formatVersionList(filterVersionList(io('pass'), 'example.com/hello', lines)), 'v1.0.0\nv1.1.0 2026-01-02T03:04:05Z\nv1.2.0\nv1.3.0-rc.1\n');
  assert.is(formatVersionList([]), '');
});

// ---------------------------------------------------------------------------
// Fixture modules, the fixture module proxy, the chain

const M = {
  hello100: modVersion('example.com/hello', 'v1.0.0'),
  hello110: modVersion('example.com/hello', 'v1.1.0', '2026-02-01T00:00:00Z'),
  hello120: modVersion('example.com/hello', 'v1.2.0', '2026-03-01T00:00:00Z'), // the origin's newest: NOT endorsed
  hello130rc: modVersion('example.com/hello', 'v1.3.0-rc.1', '2026-04-01T00:00:00Z'), // endorsed pre-release
  hello090: modVersion('example.com/hello', 'v0.9.0'), // endorsed, then revoked
  cased: modVersion('example.com/Cased', 'v1.0.0'),
  tampered: modVersion('example.com/tampered', 'v1.0.0'),
  modtamper: modVersion('example.com/modtamper', 'v1.0.0'),
  pseudo: modVersion('example.com/pseudo', 'v0.0.0-20260101000000-abcdefabcdef'),
};
const esc = (mv: ModVersion, ext: string) => `${escapeGo(mv.module)}/@v/${escapeGo(mv.version)}.${ext}`;
const canonicalUrl = (mv: ModVersion, ext: string) => CANONICAL + esc(mv, ext);

function serveModule(
  o: OriginServer,
  versions: ModVersion[],
  list: string,
  latest: ModVersion | null,
  opts: { tamperZip?: boolean; tamperMod?: boolean } = {},
) {
  const base = `/mod/${escapeGo(versions[0]!.module)}`;
  o.route(`${base}/@v/list`, { body: list, contentType: 'text/plain; charset=utf-8' });
  if (latest !== null) o.route(`${base}/@latest`, { body: latest.info, contentType: 'application/json' });
  for (const mv of versions) {
    o.route(`/mod/${esc(mv, 'info')}`, { body: mv.info, contentType: 'application/json' });
    o.route(`/mod/${esc(mv, 'mod')}`, { body: mv.mod, contentType: 'text/plain; charset=utf-8', tamper: opts.tamperMod === true });
    o.route(`/mod/${esc(mv, 'zip')}`, { body: mv.zip, contentType: 'application/zip', tamper: opts.tamperZip === true });
  }
}

async function buildChain(dir: string): Promise<string> {
  const signer = testSigner();
  const t = Date.now() - 3_600_000;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now: t, uns: 'acme/go-chain' })];
  const endorse = (mv: ModVersion, exts: string[]) => {
    const block = buildEndorseBlock({
      prev: blocks.at(-1)!,
      signer,
      backend: nodeBackend,
      now: t + blocks.length * 1000,
      entries: exts.map((ext) => ({
        url: canonicalUrl(mv, ext),
        artifactHash: artifactHashOf(nodeBackend, 'sha256', ext === 'zip' ? mv.zip : Buffer.from(mv.mod)),
        name: `golang/${mv.module.split('/').at(-1)!.toLowerCase()}`,
        semver: mv.version.slice(1).replace('+incompatible', ''),
        license: 'MIT',
      })),
    });
    blocks.push(block);
    return block;
  };
  endorse(M.hello100, ['zip', 'mod']); // a lockfile endorser's block: the .mod too
  endorse(M.hello110, ['zip']);
  endorse(M.hello130rc, ['zip']);
  const revoked = endorse(M.hello090, ['zip']);
  blocks.push(buildRevokeBlock({ prev: blocks.at(-1)!, target: revoked, signer, backend: nodeBackend, now: t + blocks.length * 1000 }));
  endorse(M.cased, ['zip']);
  endorse(M.tampered, ['zip']);
  endorse(M.modtamper, ['zip', 'mod']);
  endorse(M.pseudo, ['zip']);
  const checkpoint = buildCheckpoint({ head: blocks.at(-1)!, signer, now: t + blocks.length * 1000 });
  await ChainRepo.init(
    dir,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(checkpoint),
    { message: 'go fixture\n', authorName: 't', authorEmail: 't@vouch.invalid', timestamp: Math.floor(t / 1000) },
  );
  return base64Encode(signer.publicKey);
}

// ---------------------------------------------------------------------------
// The go command

type GoRun = Run;

const consumer = join(work, 'consumer');
let goCacheN = 0;

/** The go command's environment, exactly as the README configures a client, isolated in temp dirs. */
function goEnv(modcache: string): Record<string, string> {
  const home = join(work, 'home');
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    GOPATH: join(work, 'gopath'),
    GOMODCACHE: modcache,
    GOCACHE: join(work, 'gocache'),
    GOFLAGS: '-modcacherw',
    GOTOOLCHAIN: 'local',
    GOPROXY: `${gw.url}/go/`,
    GOSUMDB: 'off',
    GONOPROXY: '',
    GOPRIVATE: '',
    GOINSECURE: '',
    GONOSUMDB: '',
    GO111MODULE: 'on',
  };
}

/** Runs the real go command without blocking this process (it serves the fixture origin). */
function go(args: string[], modcache = join(work, 'modcache'), timeoutMs = 30_000): Promise<GoRun> {
  return runAsync('go', args, { cwd: consumer, env: goEnv(modcache), timeoutMs });
}

/** `go mod download -json` of one module version: its JSON answer (go prints it on failure too). */
async function download(target: string, modcache?: string): Promise<{ run: GoRun; json: Record<string, string> }> {
  const run = await go(['mod', 'download', '-json', target], modcache);
  let json: Record<string, string> = {};
  try {
    json = JSON.parse(run.stdout);
  } catch {
    assert.unreachable(`go mod download -json ${target} printed no JSON: ${run.stdout}\n${run.stderr}`);
  }
  return { run, json };
}

function expectDownloaded(d: { run: GoRun; json: Record<string, string> }, mv: ModVersion, what: string) {
  assert.is(d.run.status, 0, `${what}: ${d.run.stdout}\n${d.run.stderr}`);
  assert.is(d.json.Version, mv.version, what);
  assert.is(d.json.Sum, hash1(Object.fromEntries(Object.entries(mv.files).map(([n, t]) => [`${mv.module}@${mv.version}/${n}`, t]))), `${what}: h1`);
  assert.is(d.json.GoModSum, hash1({ 'go.mod': mv.mod }), `${what}: go.mod h1`);
  for (const [name, text] of Object.entries(mv.files)) assert.is(readFileSync(join(d.json.Dir!, name), 'utf8'), text, `${what}: ${name}`);
}

/** A GET through the gateway. */
async function get(
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; type: string | null; uns: string | null; unendorsed: string | null; body: string }> {
  const r = await fetch(gw.url + path, { headers: { 'user-agent': 'test-client', ...headers } });
  return {
    status: r.status,
    type: r.headers.get('content-type'),
    uns: r.headers.get('uns'),
    unendorsed: r.headers.get('x-vouch-unendorsed'),
    body: await r.text(),
  };
}

function fixturePaths(): string[] {
  return origin.log.map((r) => r.path);
}

// ---------------------------------------------------------------------------

test.before(async () => {
  origin = await OriginServer.start();
  serveModule(
    origin,
    [M.hello090, M.hello100, M.hello110, M.hello120, M.hello130rc],
    'v1.0.0\nv1.1.0\nv1.2.0\nv1.3.0-rc.1\nv0.9.0\nnot a version\n',
    M.hello120,
  );
  serveModule(origin, [M.cased], 'v1.0.0\n', M.cased);
  serveModule(origin, [M.tampered], 'v1.0.0\n', M.tampered, { tamperZip: true });
  serveModule(origin, [M.modtamper], 'v1.0.0\n', M.modtamper, { tamperMod: true });
  serveModule(origin, [M.pseudo], '', M.pseudo); // no tagged version: go asks @latest
  const publicKey = await buildChain(join(work, 'chain'));
  const route = { kind: 'goproxy', origin: `${origin.origin}/mod/`, canonical: CANONICAL, metadata_ttl: 0 };
  const cfg = writeConfig(work, {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: join(work, 'chain'), public_key: publicKey },
    origin: { allow_private: true, timeout: 3 },
    mirror: { memory_bytes: 16 * 1024 * 1024 },
    proxy: {
      routes: [
        { prefix: '/go/', unendorsed: 'deny', ...route },
        { prefix: '/gopass/', unendorsed: 'pass', ...route },
      ],
    },
  });
  gw = await startGatewayProcess(['--config', cfg]);
  mkdirSync(consumer, { recursive: true });
  writeFileSync(join(consumer, 'go.mod'), 'module example.org/consumer\n\ngo 1.19\n\nrequire example.com/hello v1.0.0\n');
  writeFileSync(join(consumer, 'main.go'), 'package main\n\nimport "example.com/hello"\n\nfunc main() { println(hello.Version) }\n');
});

test.after(async () => {
  await gw?.stop();
  if (!originStopped) await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

test("go mod download of an endorsed module: verified zip, go's h1 sums and the extracted files match what was built", async () => {
  const d = await download('example.com/hello@v1.0.0');
  expectDownloaded(d, M.hello100, 'hello v1.0.0');
  // The consumer's requirement, as a project downloads it (go.sum is written from what vouch served).
  const all = await go(['mod', 'download']);
  assert.is(all.status, 0, all.stderr);
  const sum = readFileSync(join(consumer, 'go.sum'), 'utf8');
  assert.ok(sum.includes(`example.com/hello v1.0.0 ${d.json.Sum}`), sum);
  assert.ok(sum.includes(`example.com/hello v1.0.0/go.mod ${d.json.GoModSum}`), sum);
  // v1.1.0: its .mod is not endorsed itself, so it comes from the origin through the metadata cache.
  expectDownloaded(await download('example.com/hello@v1.1.0'), M.hello110, 'hello v1.1.0');
  // The endorsed .mod is a verified artifact (UNS header); the other one is metadata.
  const mod100 = await get('/go/example.com/hello/@v/v1.0.0.mod');
  assert.is(mod100.status, 200);
  assert.is(mod100.body, M.hello100.mod);
  assert.ok(mod100.uns, 'an endorsed .mod was not served through the verified path');
  const mod110 = await get('/go/example.com/hello/@v/v1.1.0.mod');
  assert.equal([mod110.status, mod110.body, mod110.uns], [200, M.hello110.mod, null]);
  const zip = await get('/go/example.com/hello/@v/v1.0.0.zip');
  assert.ok(zip.uns);
  // A package-manager route sends the compact UNS (issue 31): the entry served and the block's reference.
  assert.is(JSON.parse(zip.uns!)['vouch'].entry.artifact_url, canonicalUrl(M.hello100, 'zip'));
  assert.match(JSON.parse(zip.uns!)['vouch'].block.url, /\/v1\/block\?index=1$/);
});

test('case-encoded module paths: go sends %21, the artifact URL and the origin request spell it !', async () => {
  const before = origin.log.length;
  expectDownloaded(await download('example.com/Cased@v1.0.0'), M.cased, 'Cased');
  const seen = origin.log.slice(before).map((r) => r.path);
  assert.ok(seen.includes('/mod/example.com/!cased/@v/v1.0.0.zip'), seen.join(' '));
  assert.not.ok(
    seen.some((p) => p.includes('%21')),
    seen.join(' '),
  );
  // Either spelling is one artifact URL.
  const a = await get('/go/example.com/%21cased/@v/v1.0.0.zip');
  const b = await get('/go/example.com/!cased/@v/v1.0.0.zip');
  assert.equal([a.status, b.status], [200, 200]);
  assert.is(JSON.parse(a.uns!)['vouch'].entry.artifact_url, 'https://goproxy.example.org/example.com/!cased/@v/v1.0.0.zip');
});

test("a tampered zip or endorsed .mod: go fails and prints vouch's reason", async () => {
  const t = await download('example.com/tampered@v1.0.0');
  assert.is.not(t.run.status, 0);
  const out = t.json.Error ?? '';
  assert.match(out, /v1\.0\.0\.zip: 409 Conflict/);
  assert.ok(out.includes(`server response: vouch: hash mismatch for ${canonicalUrl(M.tampered, 'zip')}, refused (signed sha256:`), out);
  const m = await download('example.com/modtamper@v1.0.0');
  assert.is.not(m.run.status, 0);
  assert.ok((m.json.Error ?? '').includes(`server response: vouch: hash mismatch for ${canonicalUrl(M.modtamper, 'mod')}, refused`), m.json.Error);
  const direct = await get('/go/example.com/modtamper/@v/v1.0.0.mod');
  assert.is(direct.status, 409);
  assert.is(direct.type, 'text/plain; charset=utf-8');
  assert.match(direct.body, /^vouch: hash mismatch for .*\n$/);
});

test('unendorsed versions are not offered: list, download, @latest and the revoked version', async () => {
  const before = origin.log.length;
  const versions = await go(['list', '-m', '-versions', 'example.com/hello']);
  assert.is(versions.status, 0, versions.stderr);
  assert.is(versions.stdout.trim(), 'example.com/hello v1.0.0 v1.1.0 v1.3.0-rc.1');
  const v120 = await download('example.com/hello@v1.2.0');
  assert.is.not(v120.run.status, 0);
  assert.match(
    v120.json.Error ?? '',
    /v1\.2\.0\.info: 404 Not Found\n\tserver response: vouch: example\.com\/hello@v1\.2\.0 is not endorsed by the authority \(no endorsement in force for https:\/\/goproxy\.example\.org\/example\.com\/hello\/@v\/v1\.2\.0\.zip\), refused/,
  );
  // latest: the newest endorsed release (not the origin's v1.2.0, not the newer pre-release).
  const latest = await download('example.com/hello@latest');
  assert.is(latest.json.Version, 'v1.1.0', JSON.stringify(latest.json));
  // A module with no tagged version: go asks @latest, whose pseudo-version is endorsed.
  expectDownloaded(await download('example.com/pseudo@latest'), M.pseudo, 'pseudo');
  // The unendorsed and revoked versions' files were never asked of the origin.
  const asked = origin.log.slice(before).map((r) => r.path);
  assert.not.ok(
    asked.some((p) => p.includes('v1.2.0') || p.includes('v0.9.0')),
    asked.join(' '),
  );

  const list = await get('/go/example.com/hello/@v/list');
  assert.equal([list.status, list.type, list.body], [200, 'text/plain; charset=utf-8', 'v1.0.0\nv1.1.0\nv1.3.0-rc.1\n']);
  const at = await get('/go/example.com/hello/@latest');
  assert.equal([at.status, at.type, JSON.parse(at.body)], [200, 'application/json', { Version: 'v1.1.0', Time: '2026-02-01T00:00:00Z' }]);
  const info = await get('/go/example.com/hello/@v/v1.2.0.info');
  assert.equal([info.status, info.type], [404, 'text/plain; charset=utf-8']);
  const revoked = await get('/go/example.com/hello/@v/v0.9.0.zip');
  assert.is(revoked.status, 410);
  assert.match(
    revoked.body,
    /^vouch: https:\/\/goproxy\.example\.org\/example\.com\/hello\/@v\/v0\.9\.0\.zip \(0\.9\.0\) is revoked by the authority, refused\n$/,
  );
  assert.is((await get('/go/example.com/hello/@v/v0.9.0.mod')).status, 404);
  // A query the origin resolves to an unendorsed version.
  origin.route('/mod/example.com/hello/@v/main.info', { body: M.hello120.info, contentType: 'application/json' });
  const q = await get('/go/example.com/hello/@v/main.info');
  assert.equal([q.status, q.body], [404, 'vouch: example.com/hello@main resolves to v1.2.0, which is not endorsed by the authority, refused\n']);
  origin.route('/mod/example.com/hello/@v/stable.info', { body: M.hello110.info, contentType: 'application/json' });
  assert.equal(JSON.parse((await get('/go/example.com/hello/@v/stable.info')).body).Version, 'v1.1.0');
});

test('a pass route offers everything but what is revoked; unendorsed downloads pass through marked', async () => {
  // v0.9.0 is revoked: its zip answers 410 on every route, so no route lists it (issue 32).
  assert.is((await get('/gopass/example.com/hello/@v/list')).body, 'v1.0.0\nv1.1.0\nv1.2.0\nv1.3.0-rc.1\n');
  assert.is((await get('/gopass/example.com/hello/@v/v0.9.0.info')).status, 404);
  assert.is((await get('/gopass/example.com/hello/@v/v0.9.0.zip')).status, 410);
  const info = await get('/gopass/example.com/hello/@v/v1.2.0.info');
  assert.equal([info.status, JSON.parse(info.body).Version], [200, 'v1.2.0']);
  const zip = await get('/gopass/example.com/hello/@v/v1.2.0.zip');
  assert.equal([zip.status, zip.unendorsed, zip.uns], [200, 'passed unverified', null]);
  const ok = await get('/gopass/example.com/hello/@v/v1.0.0.zip');
  assert.ok(ok.uns, 'an endorsed zip on a pass route was not verified');
  assert.is((await get('/gopass/example.com/tampered/@v/v1.0.0.zip')).status, 409);
});

test('paths outside the protocol: 404 with a reason on a deny route, the origin not asked', async () => {
  const before = origin.log.length;
  for (const path of [
    '/go/sumdb/sum.golang.org/supported',
    '/go/example.com/Hello/@v/list',
    '/go/example.com/hello/@v/v1.0.zip',
    '/go/example.com/hello/@v/v2.0.0.zip',
    '/go/example.com/hello/@v/v1.0.0.zip?x=1',
    '/go/example.com/hello/v1/@v/list',
  ]) {
    const r = await get(path);
    assert.is(r.status, 404, path);
    assert.is(r.type, 'text/plain; charset=utf-8', path);
    assert.match(r.body, /^vouch: .* is not served through vouch \(not a goproxy package or artifact path\)\n$/, path);
  }
  const unknown = await get('/go/example.com/nothing/@v/list');
  assert.equal([unknown.status, unknown.body], [404, 'vouch: the origin has no version list for example.com/nothing (it answered 404)\n']);
  assert.equal(fixturePaths().slice(before), ['/mod/example.com/nothing/@v/list']);
});

test('go never reached the fixture: every request it saw came from the gateway', async () => {
  assert.ok(origin.log.length > 20);
  const agents = new Set(origin.log.map((r) => String(r.headers['user-agent'])));
  for (const a of agents) assert.ok(['vouch', 'vouch-gateway', 'test-client'].includes(a), `the fixture saw user agent ${a}`);
  assert.ok(agents.has('vouch') && agents.has('vouch-gateway'));
});

test('with the fixture stopped, a fresh module cache still fills: stale metadata, mirrored zip and .mod', async () => {
  await origin.close();
  originStopped = true;
  const fresh = join(work, `modcache-${++goCacheN}`);
  expectDownloaded(await download('example.com/hello@v1.0.0', fresh), M.hello100, 'hello v1.0.0, origin down');
  expectDownloaded(await download('example.com/hello@v1.1.0', fresh), M.hello110, 'hello v1.1.0, origin down');
  assert.ok(existsSync(join(fresh, 'cache', 'download', 'example.com', 'hello', '@v', 'v1.1.0.zip')));
  const versions = await go(['list', '-m', '-versions', 'example.com/hello'], fresh);
  assert.is(versions.stdout.trim(), 'example.com/hello v1.0.0 v1.1.0 v1.3.0-rc.1', versions.stderr);
  assert.match(gw.stderr(), /the origin failed; serving metadata from the cache/);
  // What was never fetched cannot be served: a clear failure, not a hang.
  const never = await get('/go/example.com/never/@v/list');
  assert.is(never.status, 502);
  assert.match(never.body, /^vouch: cannot read goproxy metadata for /);
});

test.run();
