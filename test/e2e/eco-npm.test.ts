/**
 * The npm ecosystem route (`kind: npm`, issue 13) driven by the real npm CLI
 * that ships with Node, against a real `vouch serve` process and a fixture
 * npm registry (test/helpers/npm-registry.ts) on 127.0.0.1 whose packuments
 * name the registry itself in `dist.tarball`. The chain endorses the
 * canonical tarball URLs (https://registry.example.org/...), some with
 * sha512, some with sha256. Proven here: an endorsed package installs and its
 * lockfile points at the gateway; a tampered tarball (consistent registry)
 * fails with the gateway's reason in npm's output; unendorsed and lying
 * versions are not offered and `latest` falls back to the newest endorsed;
 * scoped packages; npm never reaches the registry itself; the registry down,
 * installs still work from the gateway's caches; a pass route installs an
 * unendorsed version marked deprecated. Plus units of the packument rewrite.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  artifactHashOf,
  buildAuthorityBlock,
  buildCheckpoint,
  buildEndorseBlock,
  formatBlockFile,
  formatCheckpointFile,
  type Block,
  type HashAlgorithm,
} from '../../chain/index.ts';
import type { Selection } from '../../chain/select.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned, commitFor } from '../../store/chain-append.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import type { MetadataIO, MetadataResponse, Rendered, RenderView } from '../../gateway/ecosystems/ecosystem.ts';
import { renderJob, type RenderJob } from '../../gateway/ecosystems/render-job.ts';
import { valid as semverValid } from 'semver';
import {
  BadPackument,
  PASS_MARK,
  integrityOf,
  isCanonicalSemver,
  npm,
  packumentName,
  rewritePackument,
  wantsAbbreviated,
  type RewriteIO,
} from '../../gateway/ecosystems/npm.ts';
import { testSigner } from '../helpers/chain-fixture.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { NpmRegistry, cleanNpmEnv, runNpm, type NpmRun } from '../helpers/npm-registry.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-eco-npm-'));
const chainDir = join(work, 'chain');
const CANON = 'https://registry.example.org/';
/** This test's own look at the registry (left out of what the registry saw from others). */
const TEST_UA = 'eco-npm-test';
let reg: NpmRegistry;
let gw: GatewayProcess;

const SRC = {
  left100: 'module.exports = (s, n) => " ".repeat(n) + s; // 1.0.0\n',
  left110: 'module.exports = (s, n) => s.padStart(n); // 1.1.0\n',
  left200: 'module.exports = "2.0.0, never endorsed";\n',
  util100: 'exports.util = "acme util 1.0.0";\n',
  good: 'module.exports = "the reviewed code";\n',
  evil: 'module.exports = "EVIL";\n',
};
const signedHash: Record<string, string> = {};

/** The canonical artifact URL of a version's tarball. */
const canonUrl = (name: string, version: string) => CANON + NpmRegistry.tarballPath(name, version).slice(1);

async function buildChain(entries: Array<{ name: string; version: string; bytes: Buffer; alg: HashAlgorithm }>): Promise<void> {
  const signer = testSigner();
  let now = Date.now() - 3_600_000;
  const authority = buildAuthorityBlock({ signer, backend: nodeBackend, now, uns: 'acme/chain' });
  const repo = await ChainRepo.init(
    chainDir,
    [{ index: 0, content: formatBlockFile(authority) }],
    formatCheckpointFile(buildCheckpoint({ head: authority, signer, now })),
    commitFor([authority], now),
  );
  let head: Block = authority;
  for (const e of entries) {
    now += 1000;
    const artifactHash = artifactHashOf(nodeBackend, e.alg, e.bytes);
    signedHash[`${e.name}@${e.version}`] = artifactHash;
    const block = buildEndorseBlock({
      prev: head,
      signer,
      backend: nodeBackend,
      now,
      entries: [{ url: canonUrl(e.name, e.version), artifactHash, name: e.name.startsWith('@') ? e.name : `npm/${e.name}`, semver: e.version, license: 'MIT' }],
    });
    await appendSigned(repo, [block], buildCheckpoint({ head: block, signer, now }), now);
    head = block;
  }
}

interface Project {
  dir: string;
  npm(args: string[]): Promise<NpmRun>;
}

let projects = 0;
/** A fresh project with its own npm user config (written by `npm config set registry ...`) and its own npm cache. */
async function project(prefix = '/npm/', base = gw.url): Promise<Project> {
  const dir = join(work, `project-${++projects}`);
  mkdirSync(dir);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `project-${projects}`, version: '1.0.0', private: true }));
  const env = cleanNpmEnv({
    NPM_CONFIG_USERCONFIG: join(dir, '.npmrc'),
    NPM_CONFIG_CACHE: join(dir, 'cache'),
    NPM_CONFIG_UPDATE_NOTIFIER: 'false',
    NPM_CONFIG_FUND: 'false',
    NPM_CONFIG_AUDIT: 'false',
  });
  // The README's client configuration, verbatim.
  const set = await runNpm(['config', 'set', 'registry', `${base}${prefix}`], { cwd: dir, env });
  assert.is(set.status, 0, set.stderr);
  assert.match(readFileSync(join(dir, '.npmrc'), 'utf8'), `registry=${base}${prefix}`);
  return { dir, npm: (args) => runNpm(args, { cwd: dir, env }) };
}

const installed = (p: Project, name: string, file = 'index.js') => readFileSync(join(p.dir, 'node_modules', name, file), 'utf8');
const lockEntry = (p: Project, name: string) => JSON.parse(readFileSync(join(p.dir, 'package-lock.json'), 'utf8')).packages[`node_modules/${name}`];
const out = (r: NpmRun) => `${r.stdout}\n${r.stderr}`;

test.before(async () => {
  reg = await NpmRegistry.start(work);
  const [l100, l110, , u100, good] = await Promise.all([
    reg.publish('leftpad', '1.0.0', { 'index.js': SRC.left100 }, { latest: false }),
    reg.publish('leftpad', '1.1.0', { 'index.js': SRC.left110 }, { latest: false }),
    reg.publish('leftpad', '2.0.0', { 'index.js': SRC.left200 }, { latest: true }),
    reg.publish('@acme/util', '1.0.0', { 'index.js': SRC.util100 }),
    reg.publish('tampered', '1.0.0', { 'index.js': SRC.good }),
    reg.publish('unsigned', '1.0.0', { 'index.js': SRC.left200 }),
  ]);
  reg.alias('leftpad', '9.9.9', '1.0.0'); // lists the endorsed 1.0.0 tarball as 9.9.9
  await buildChain([
    { name: 'leftpad', version: '1.0.0', bytes: l100!, alg: 'sha512' },
    { name: 'leftpad', version: '1.1.0', bytes: l110!, alg: 'sha256' },
    { name: '@acme/util', version: '1.0.0', bytes: u100!, alg: 'sha512' },
    { name: 'tampered', version: '1.0.0', bytes: good!, alg: 'sha256' },
  ]);
  const routes = [
    { prefix: '/npm/', kind: 'npm', origin: `${reg.url}/`, canonical: CANON, metadata_ttl: 0 },
    { prefix: '/npm-pass/', kind: 'npm', origin: `${reg.url}/`, canonical: CANON, unendorsed: 'pass', metadata_ttl: 0 },
  ];
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: chainDir },
      origin: { timeout: 5 },
      mirror: { memory_bytes: 16 * 1024 * 1024 },
      proxy: { routes },
    }),
  ]);
});

test.after(async () => {
  await gw?.stop();
  await reg?.close().catch(() => {});
  rmSync(work, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------
// Units of the packument rewrite (no processes)

function sel(semver: string, artifactHash: string): Selection {
  return {
    block: {} as Block,
    entry: {
      endorsement: 'provenance',
      artifact_url: '',
      artifact_hash: artifactHash,
      signature_algorithm: 'ed25519',
      name: 'npm/x',
      semver,
      license: 'MIT',
      comment: '',
    },
    revokedBy: null,
  };
}

const ORIGIN = 'http://origin.test/';
const GW = 'http://gw.test/npm/';
const SHA512 = `sha512:${'ab'.repeat(64)}`;
const SHA256 = `sha256:${'cd'.repeat(32)}`;

function fakeIO(unendorsed: 'deny' | 'pass', endorsements: Record<string, Selection>): RewriteIO {
  return {
    unendorsed,
    artifactUrlOf: (u) => (u.startsWith(ORIGIN) ? CANON + u.slice(ORIGIN.length) : u.startsWith(CANON) ? u : null),
    gatewayUrlOf: (u) => (u.startsWith(CANON) ? GW + u.slice(CANON.length) : null),
    artifactTailOf: (u) => (u.startsWith(CANON) ? u.slice(CANON.length) : null),
    endorsed: (u) => endorsements[u] ?? null,
  };
}

function version(name: string, v: string, tarball: string, extra: Record<string, unknown> = {}) {
  return { name, version: v, dist: { tarball, shasum: 'f'.repeat(40), integrity: 'sha512-origin', signatures: [{ keyid: 'k', sig: 's' }] }, ...extra };
}

test('packument rewrite: kept and removed versions, integrity, time, dist-tags', () => {
  const t = (v: string) => `${ORIGIN}pkg/-/pkg-${v}.tgz`;
  const doc = {
    _id: 'pkg',
    name: 'pkg',
    readme: 'kept as it is',
    'dist-tags': { latest: '3.0.0', next: '2.1.0-rc.1', old: '0.9.0', beta: '3.1.0-beta.1' },
    versions: {
      '0.9.0': version('pkg', '0.9.0', t('0.9.0')), // not endorsed
      '1.0.0': version('pkg', '1.0.0', t('1.0.0')), // sha512
      '2.0.0': version('pkg', '2.0.0', `${CANON}pkg/-/pkg-2.0.0.tgz`), // sha256, already canonical
      '2.1.0-rc.1': version('pkg', '2.1.0-rc.1', t('2.1.0-rc.1')), // endorsed prerelease
      '3.0.0': version('pkg', '3.0.0', t('1.0.0')), // lists the endorsed 1.0.0 tarball: another semver
      '3.1.0-beta.1': version('pkg', '3.1.0-beta.1', 'https://elsewhere.test/pkg-3.1.0-beta.1.tgz'), // no route
      '4.0.0': version('pkg', '4.0.0', `${ORIGIN}other/-/other-4.0.0.tgz`), // another package's endorsed tarball
      '5.0.0': version('pkg', '5.0.1', t('5.0.0')), // version field is not the key
    },
    time: {
      created: '2020-01-01T00:00:00.000Z',
      modified: '2024-01-01T00:00:00.000Z',
      '0.9.0': 'a',
      '1.0.0': 'b',
      '2.0.0': 'c',
      '2.1.0-rc.1': 'd',
      '3.0.0': 'e',
      '3.1.0-beta.1': 'f',
      '4.0.0': 'g',
      '5.0.0': 'h',
    },
  };
  const endorsements = {
    [`${CANON}pkg/-/pkg-1.0.0.tgz`]: sel('1.0.0', SHA512),
    [`${CANON}pkg/-/pkg-2.0.0.tgz`]: sel('2.0.0', SHA256),
    [`${CANON}pkg/-/pkg-2.1.0-rc.1.tgz`]: sel('2.1.0-rc.1', SHA256),
    [`${CANON}other/-/other-4.0.0.tgz`]: sel('4.0.0', SHA256),
    [`${CANON}pkg/-/pkg-5.0.0.tgz`]: sel('5.0.0', SHA256),
  };
  const r = rewritePackument(doc, 'pkg', fakeIO('deny', endorsements));
  // 3.0.0 and 4.0.0 list an endorsed tarball that is not pkg's of that version: removed as misnamed (on any route).
  assert.equal(r, {
    kept: 3,
    marked: 0,
    unendorsed: 1,
    unrouted: 1,
    misnamed: 2,
    malformed: 1,
    unroutedExample: 'https://elsewhere.test/pkg-3.1.0-beta.1.tgz',
    misnamedExample: t('1.0.0'),
  });
  assert.equal(Object.keys(doc.versions), ['1.0.0', '2.0.0', '2.1.0-rc.1']);
  const v = doc.versions as Record<string, any>;
  // sha512 signed: npm checks the signed hash; shasum and registry signatures of other bytes are gone.
  assert.equal(v['1.0.0'].dist, { tarball: `${GW}pkg/-/pkg-1.0.0.tgz`, integrity: integrityOf(SHA512) });
  assert.is(integrityOf(SHA512), `sha512-${Buffer.from('ab'.repeat(64), 'hex').toString('base64')}`);
  // sha256 signed: the origin's integrity stays (the gateway checks the sha256 itself).
  assert.equal(v['2.0.0'].dist, {
    tarball: `${GW}pkg/-/pkg-2.0.0.tgz`,
    shasum: 'f'.repeat(40),
    integrity: 'sha512-origin',
    signatures: [{ keyid: 'k', sig: 's' }],
  });
  assert.is(v['2.0.0'].deprecated, undefined);
  assert.equal(doc.time, { created: '2020-01-01T00:00:00.000Z', modified: '2024-01-01T00:00:00.000Z', '1.0.0': 'b', '2.0.0': 'c', '2.1.0-rc.1': 'd' });
  // latest pointed at a removed version: the highest kept release; tags at removed versions are gone.
  assert.equal(doc['dist-tags'], { latest: '2.0.0', next: '2.1.0-rc.1' });
  assert.is(doc.readme, 'kept as it is');

  // A kept latest is left as the registry set it; only prereleases kept: the highest of them.
  const doc2 = {
    name: 'pkg',
    'dist-tags': { latest: '1.0.0' },
    versions: { '1.0.0': version('pkg', '1.0.0', t('1.0.0')), '2.0.0': version('pkg', '2.0.0', t('2.0.0')) },
  };
  rewritePackument(doc2, 'pkg', fakeIO('deny', { ...endorsements, [`${CANON}pkg/-/pkg-2.0.0.tgz`]: sel('2.0.0', SHA256) }));
  assert.equal(doc2['dist-tags'], { latest: '1.0.0' });
  const doc4 = { name: 'pkg', 'dist-tags': {}, versions: { '2.0.0+b.7': version('pkg', '2.0.0+b.7', t('2.0.0+b.7')) } };
  rewritePackument(doc4, 'pkg', fakeIO('deny', { [`${CANON}pkg/-/pkg-2.0.0+b.7.tgz`]: sel('2.0.0+b.7', SHA256) }));
  assert.equal(doc4['dist-tags'], { latest: '2.0.0+b.7' });
  const doc3 = { name: 'pkg', versions: { '2.1.0-rc.1': version('pkg', '2.1.0-rc.1', t('2.1.0-rc.1')), '0.9.0': version('pkg', '0.9.0', t('0.9.0')) } };
  rewritePackument(doc3, 'pkg', fakeIO('deny', endorsements));
  assert.equal((doc3 as any)['dist-tags'], { latest: '2.1.0-rc.1' });
});

test('packument rewrite: abbreviated form, scoped names, pass marking', () => {
  const tb = `${ORIGIN}@acme/util/-/util-1.0.0.tgz`;
  const abbreviated = {
    name: '@acme/util',
    modified: '2024-01-01T00:00:00.000Z',
    'dist-tags': { latest: '2.0.0' },
    versions: {
      '1.0.0': { name: '@acme/util', version: '1.0.0', dist: { tarball: tb, integrity: 'sha512-origin', shasum: 'f'.repeat(40) } },
      '2.0.0': {
        name: '@acme/util',
        version: '2.0.0',
        dist: { tarball: `${ORIGIN}@acme/util/-/util-2.0.0.tgz`, integrity: 'sha512-two' },
        deprecated: 'origin says old',
      },
    },
  };
  const endorsements = { [`${CANON}@acme/util/-/util-1.0.0.tgz`]: sel('1.0.0', SHA512) };
  const denied = structuredClone(abbreviated);
  assert.equal(rewritePackument(denied, '@acme/util', fakeIO('deny', endorsements)).kept, 1);
  assert.equal(denied, {
    name: '@acme/util',
    modified: '2024-01-01T00:00:00.000Z',
    'dist-tags': { latest: '1.0.0' },
    versions: { '1.0.0': { name: '@acme/util', version: '1.0.0', dist: { tarball: `${GW}@acme/util/-/util-1.0.0.tgz`, integrity: integrityOf(SHA512)! } } },
  } as typeof denied);
  // On a pass route the unendorsed version stays, through the gateway, marked for npm to print.
  const passed = structuredClone(abbreviated);
  const r = rewritePackument(passed, '@acme/util', fakeIO('pass', endorsements));
  assert.equal([r.kept, r.marked], [2, 1]);
  assert.is(passed['dist-tags'].latest, '2.0.0');
  assert.equal(passed.versions['2.0.0'], {
    name: '@acme/util',
    version: '2.0.0',
    dist: { tarball: `${GW}@acme/util/-/util-2.0.0.tgz`, integrity: 'sha512-two' },
    deprecated: PASS_MARK,
  });
  assert.is((passed.versions['1.0.0'] as Record<string, unknown>).deprecated, undefined);
});

test('packument rewrite: shapes npm could not use are refused', () => {
  const io = fakeIO('deny', {});
  for (const [doc, reason] of [
    [[], /not a JSON object/],
    ['x', /not a JSON object/],
    [null, /not a JSON object/],
    [{ name: 'pkg', versions: [] }, /"versions" is not an object/],
    [{ name: 'pkg', versions: {}, 'dist-tags': 'latest' }, /"dist-tags"/],
    [{ name: 'pkg', versions: {}, time: 5 }, /"time"/],
    [{ name: 'other', versions: {} }, /another package/],
  ] as const) {
    try {
      rewritePackument(structuredClone(doc), 'pkg', io);
      assert.unreachable(JSON.stringify(doc));
    } catch (e) {
      assert.instance(e, BadPackument);
      assert.match((e as Error).message, reason);
    }
  }
});

test("paths: packuments, tarballs and the rest; the scoped spelling for the climb-out check; npm's error body", () => {
  const kind = (rest: string) => npm.classify(rest, '').type;
  for (const rest of ['leftpad', 'JSONStream', '@acme/util', '@acme%2futil', '@acme%2Futil', 'a.b-c_d~e', 'x'.repeat(214)])
    assert.is(kind(rest), 'metadata', rest);
  for (const rest of ['leftpad/-/leftpad-1.0.0.tgz', '@acme/util/-/util-1.0.0.tgz', 'leftpad/-/leftpad-1.0.0-rc.1+b.2.tgz'])
    assert.is(kind(rest), 'artifact', rest);
  for (const rest of [
    '',
    '-/v1/search',
    '-/npm/v1/security/advisories/bulk',
    '-/ping',
    'leftpad/1.0.0',
    'leftpad/latest',
    '.hidden',
    '_private',
    'node_modules',
    'x'.repeat(215),
    '@acme',
    '@acme/',
    '@acme/util/extra',
    'a b',
    'a%20b',
    'caf%C3%A9',
    'leftpad/-/leftpad-1.0.0.tar',
    '@acme%2futil/-/util-1.0.0.tgz',
    'a@b',
  ]) {
    assert.is(kind(rest), 'other', rest);
  }
  assert.equal(packumentName('@acme%2Futil'), { name: '@acme/util', upstream: '@acme%2futil' });
  assert.equal(packumentName('@acme/util'), { name: '@acme/util', upstream: '@acme%2futil' });
  assert.is(npm.checkedPath!('@acme%2Futil'), '@acme/util');
  assert.is(npm.checkedPath!('leftpad'), null);
  assert.is(npm.checkedPath!('@acme%2futil/-/util-1.0.0.tgz'), null);
  assert.ok(wantsAbbreviated('application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*'));
  assert.not.ok(wantsAbbreviated('application/json'));
  assert.not.ok(wantsAbbreviated('application/vnd.npm.install-v1+json;q=0, application/json'));
  // Version keys: SemVer 2.0.0 written canonically (what the semver library parses; build metadata allowed).
  for (const v of ['1.0.0', '0.0.0', '1.0.0-rc.1', '1.0.0-0a.b-c', '1.0.0+b.1', '1.0.0-rc.1+build.5', '9007199254740991.0.0']) {
    assert.ok(isCanonicalSemver(v), v);
    assert.is(semverValid(v), v.replace(/\+.*$/, ''), v);
  }
  for (const v of [
    'v1.0.0',
    '=1.0.0',
    '01.0.0',
    '1.0',
    '1.0.0-',
    '1.0.0-01',
    ' 1.0.0',
    '1.0.0 ',
    '9007199254740992.0.0',
    `1.0.0-${'a'.repeat(260)}`,
    '1.0.0+',
    '__proto__',
  ]) {
    assert.not.ok(isCanonicalSemver(v), v);
  }
  assert.equal(npm.errorBody('vouch: no'), { contentType: 'application/json', body: '{"error":"vouch: no"}' });
});

test('packument answer: the form asked upstream, the scoped spelling, content type, 404 and 502 with reasons', async () => {
  const asked: Array<{ rest: string; accept: string; form: string }> = [];
  const sent: Array<{ status: number; type: string; body: string; headers: Record<string, string> }> = [];
  const failed: Array<{ status: number; message: string }> = [];
  let answer: { status: number; type: string; body: string } = { status: 200, type: 'application/vnd.npm.install-v1+json', body: '' };
  let serial = 0;
  const io = (accept: string): MetadataIO =>
    ({
      ...fakeIO('deny', { [`${CANON}@acme/util/-/util-1.0.0.tgz`]: sel('1.0.0', SHA256) }),
      // Made for each request here (no cache): what the gateway keeps and sends.
      answer(_r: MetadataResponse, _form: string, make: (view: RenderView) => Rendered) {
        const out = make(this);
        if (out.ok) this.send(out.status, out.contentType, out.body, out.headers);
        else this.fail(out.status, out.message);
      },
      answerJob(r: MetadataResponse, form: string, job: RenderJob) {
        this.answer(r, form, (v) => renderJob(job, r.body, v));
        return Promise.resolve();
      },
      remember: (_r: MetadataResponse, _form: string, make: (view: RenderView) => { value: unknown }) => make(io(accept)).value,
      req: { headers: { accept } } as MetadataIO['req'],
      res: {} as MetadataIO['res'],
      rest: '',
      query: '',
      fetch: async (rest, opts): Promise<MetadataResponse> => {
        asked.push({ rest, ...opts });
        return { id: ++serial, status: answer.status, headers: { 'content-type': answer.type }, body: Buffer.from(answer.body), age: 0, stale: false };
      },
      originUrl: (rest) => ORIGIN + rest,
      send: (status, type, body, headers = {}) => {
        sent.push({ status, type, body: String(body), headers });
      },
      fail: (status, message) => {
        failed.push({ status, message });
      },
      passThrough: async () => {},
      serveArtifact: async () => false,
      verifiedDigest: async () => ({ ok: false, status: 404, message: 'not used' }),
      log: { debug() {}, info() {}, warn() {}, error() {} },
    }) as MetadataIO;
  const run = async (rest: string, accept: string) => {
    const c = npm.classify(rest, '');
    assert.is(c.type, 'metadata');
    if (c.type === 'metadata') await c.answer(io(accept));
  };
  const doc = {
    name: '@acme/util',
    'dist-tags': { latest: '1.0.0' },
    versions: { '1.0.0': version('@acme/util', '1.0.0', `${ORIGIN}@acme/util/-/util-1.0.0.tgz`) },
  };
  answer.body = JSON.stringify(doc);
  await run('@acme/util', 'application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*');
  assert.equal(asked.at(-1), { rest: '@acme%2futil', accept: 'application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*', form: 'abbreviated' });
  assert.equal([sent.at(-1)!.status, sent.at(-1)!.type], [200, 'application/vnd.npm.install-v1+json']);
  assert.is(JSON.parse(sent.at(-1)!.body).versions['1.0.0'].dist.tarball, `${GW}@acme/util/-/util-1.0.0.tgz`);
  answer = { ...answer, type: 'text/html' };
  await run('@acme%2Futil', 'application/json');
  assert.equal(asked.at(-1), { rest: '@acme%2futil', accept: 'application/json', form: 'full' });
  assert.is(sent.at(-1)!.type, 'application/json', 'a non-JSON content type of the origin was passed');
  answer = { status: 404, type: 'application/json', body: '{"error":"Not found"}' };
  await run('@acme/util', 'application/json');
  assert.equal(failed.at(-1), { status: 404, message: 'vouch: @acme/util is not in the registry (it answered 404)' });
  answer = { status: 200, type: 'application/json', body: '{"name":"@acme/util","versions":{' };
  await run('@acme/util', 'application/json');
  assert.is(failed.at(-1)!.status, 502);
  assert.match(failed.at(-1)!.message, /packument of @acme\/util is unusable: not JSON/);
  answer = {
    status: 200,
    type: 'application/json',
    body: JSON.stringify({ name: '@acme/util', versions: { '2.0.0': version('@acme/util', '2.0.0', `${ORIGIN}@acme/util/-/util-2.0.0.tgz`) } }),
  };
  await run('@acme/util', 'application/json');
  assert.equal(failed.at(-1), { status: 404, message: 'vouch: no endorsed version of @acme/util' });
  answer = { status: 503, type: 'text/plain', body: 'down' };
  await run('@acme/util', 'application/json');
  assert.is(failed.at(-1)!.status, 502);
  assert.is(sent.length, 2);
});

// ---------------------------------------------------------------------------
// The real npm CLI through a real gateway

test('an endorsed package installs through the gateway; the lockfile points at the gateway with the signed integrity', async () => {
  const p = await project();
  const r = await p.npm(['install', 'leftpad@1.0.0']);
  assert.is(r.status, 0, out(r));
  assert.is(installed(p, 'leftpad'), SRC.left100);
  const lock = lockEntry(p, 'leftpad');
  assert.is(lock.version, '1.0.0');
  assert.is(lock.resolved, `${gw.url}/npm/leftpad/-/leftpad-1.0.0.tgz`);
  assert.is(lock.integrity, integrityOf(signedHash['leftpad@1.0.0']!));
});

test('a gateway with no memory budget (mirror.memory_bytes: 0, artifacts spooled) still answers metadata, within its own reserve', async () => {
  // Metadata cannot spool as artifacts do: it is charged to a reserve of its own when the budget has no room.
  const dir = join(work, 'no-memory');
  mkdirSync(dir);
  const lean = await startGatewayProcess([
    '--config',
    writeConfig(dir, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: chainDir },
      origin: { timeout: 5 },
      mirror: { memory_bytes: 0 },
      proxy: { routes: [{ prefix: '/npm/', kind: 'npm', origin: `${reg.url}/`, canonical: CANON, metadata_ttl: 0 }] },
    }),
  ]);
  try {
    const p = await project('/npm/', lean.url);
    const r = await p.npm(['install', 'leftpad@1.0.0', '@acme/util@1.0.0']);
    assert.is(r.status, 0, out(r));
    assert.is(installed(p, 'leftpad'), SRC.left100);
    assert.is(installed(p, '@acme/util'), SRC.util100);
  } finally {
    await lean.stop();
  }
});

test("a tampered tarball (registry consistent with itself) fails npm install with the gateway's reason", async () => {
  await reg.tamper('tampered', '1.0.0', { 'index.js': SRC.evil });
  const p = await project();
  const r = await p.npm(['install', 'tampered@1.0.0']);
  assert.is.not(r.status, 0, out(r));
  assert.ok(out(r).includes(`vouch: hash mismatch for ${CANON}tampered/-/tampered-1.0.0.tgz`), out(r));
  assert.ok(out(r).includes('409'), out(r));
  assert.not.ok(existsSync(join(p.dir, 'node_modules', 'tampered')), 'something was installed');
});

test("unendorsed and lying versions are not offered; plain install takes the newest endorsed version, not the registry's latest", async () => {
  const direct = (await (await fetch(`${reg.url}/leftpad`, { headers: { 'user-agent': TEST_UA } })).json()) as {
    'dist-tags': { latest: string };
    versions: Record<string, unknown>;
  };
  assert.is(direct['dist-tags'].latest, '2.0.0');
  assert.equal(Object.keys(direct.versions).sort(), ['1.0.0', '1.1.0', '2.0.0', '9.9.9']);
  const p = await project();
  const view = await p.npm(['view', 'leftpad', 'versions', 'dist-tags', '--json']);
  assert.is(view.status, 0, out(view));
  assert.equal(JSON.parse(view.stdout), { versions: ['1.0.0', '1.1.0'], 'dist-tags': { latest: '1.1.0' } });
  for (const spec of ['leftpad@2.0.0', 'leftpad@9.9.9']) {
    const r = await p.npm(['install', spec]);
    assert.is.not(r.status, 0, out(r));
    assert.match(out(r), new RegExp(`No matching version found for ${spec.replace(/\./g, '\\.')}`));
  }
  const none = await p.npm(['install', 'unsigned']);
  assert.is.not(none.status, 0, out(none));
  assert.match(out(none), `404 Not Found - GET ${gw.url}/npm/unsigned - vouch: no endorsed version of unsigned`);
  const latest = await p.npm(['install', 'leftpad']);
  assert.is(latest.status, 0, out(latest));
  assert.is(installed(p, 'leftpad'), SRC.left110);
  assert.is(JSON.parse(installed(p, 'leftpad', 'package.json')).version, '1.1.0');
  // 1.1.0 is signed with sha256: npm checked the registry's integrity, the gateway the signed hash.
  assert.is(lockEntry(p, 'leftpad').integrity, `sha512-${createHash('sha512').update(reg.tarball('leftpad', '1.1.0')).digest('base64')}`);
});

test('a scoped package installs (@acme/util); the registry is asked for @acme%2futil', async () => {
  const p = await project();
  const r = await p.npm(['install', '@acme/util']);
  assert.is(r.status, 0, out(r));
  assert.is(installed(p, '@acme/util'), SRC.util100);
  assert.is(lockEntry(p, '@acme/util').resolved, `${gw.url}/npm/@acme/util/-/util-1.0.0.tgz`);
  assert.ok(reg.seen('/@acme%2futil').length > 0, 'the registry was not asked for @acme%2futil');
});

test('HTTP answers npm reads: content types, no-cache, reasons as {"error"}', async () => {
  const get = async (path: string, accept = 'application/json') => {
    const r = await fetch(`${gw.url}${path}`, { headers: { accept } });
    return { status: r.status, type: r.headers.get('content-type'), cache: r.headers.get('cache-control'), body: await r.text() };
  };
  const full = await get('/npm/leftpad');
  assert.equal([full.status, full.type, full.cache], [200, 'application/json', 'no-cache']);
  assert.equal(Object.keys(JSON.parse(full.body).time).sort(), ['1.0.0', '1.1.0', 'created', 'modified']);
  const abbr = await get('/npm/@acme%2Futil', 'application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*');
  assert.equal([abbr.status, abbr.type], [200, 'application/vnd.npm.install-v1+json']);
  assert.is(JSON.parse(abbr.body).versions['1.0.0'].dist.integrity, integrityOf(signedHash['@acme/util@1.0.0']!));
  const unknown = await get('/npm/no-such-package');
  assert.equal(
    [unknown.status, unknown.type, JSON.parse(unknown.body)],
    [404, 'application/json', { error: 'vouch: no-such-package is not in the registry (it answered 404)' }],
  );
  const search = await get('/npm/-/v1/search?text=x');
  assert.is(search.status, 404);
  assert.match(JSON.parse(search.body).error, /is not served through vouch/);
  const none = await get('/npm/leftpad/-/leftpad-2.0.0.tgz');
  assert.equal([none.status, JSON.parse(none.body).error], [404, `vouch: ${CANON}leftpad/-/leftpad-2.0.0.tgz is not endorsed by the authority, refused`]);
});

test("the registry never saw npm: metadata came from vouch-gateway, tarballs from the gateway's origin fetcher", () => {
  const seen = reg.requests.filter((r) => r.userAgent !== TEST_UA);
  assert.ok(seen.length > 0);
  const npmSeen = seen.filter((r) => /\bnpm\//.test(r.userAgent));
  assert.is(npmSeen.length, 0, `npm reached the registry: ${JSON.stringify(npmSeen.slice(0, 3))}`);
  const tarballs = seen.filter((r) => r.path.endsWith('.tgz'));
  const metadata = seen.filter((r) => !r.path.endsWith('.tgz'));
  assert.ok(tarballs.length > 0 && metadata.length > 0, `${tarballs.length} tarball, ${metadata.length} metadata requests`);
  assert.equal([...new Set(metadata.map((r) => r.userAgent))], ['vouch-gateway']);
  assert.equal([...new Set(tarballs.map((r) => r.userAgent))], ['vouch']);
});

test('a pass route installs an unendorsed version through the gateway, marked deprecated for npm to print', async () => {
  const p = await project('/npm-pass/');
  const r = await p.npm(['install', 'leftpad@2.0.0']);
  assert.is(r.status, 0, out(r));
  assert.match(out(r), `deprecated leftpad@2.0.0: ${PASS_MARK}`);
  assert.is(installed(p, 'leftpad'), SRC.left200);
  assert.is(lockEntry(p, 'leftpad').resolved, `${gw.url}/npm-pass/leftpad/-/leftpad-2.0.0.tgz`);
  // An endorsed version through the pass route is not marked.
  const ok = await p.npm(['install', 'leftpad@1.0.0']);
  assert.is(ok.status, 0, out(ok));
  assert.not.match(out(ok), 'deprecated');
  assert.is(installed(p, 'leftpad'), SRC.left100);
});

test('the registry down: a fresh project with a fresh npm cache still installs (stale metadata, mirrored tarball)', async () => {
  await reg.close();
  const refused = await fetch(`${reg.url}/leftpad`).then(
    () => false,
    () => true,
  );
  assert.ok(refused, 'the registry still answers');
  const p = await project();
  const r = await p.npm(['install', 'leftpad@1.0.0']);
  assert.is(r.status, 0, out(r));
  assert.is(installed(p, 'leftpad'), SRC.left100);
  // Nothing cached: the gateway's reason, in npm's form.
  const never = await fetch(`${gw.url}/npm/never-seen`);
  assert.is(never.status, 502);
  assert.match(((await never.json()) as { error: string }).error, /^vouch: cannot read npm metadata for https:\/\/registry\.example\.org\/never-seen/);
});

test.run();
