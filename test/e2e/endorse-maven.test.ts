/**
 * `vouch endorse --lockfile` for Maven: what a real `mvn` build resolved
 * from a fixture maven2 repository on 127.0.0.1 (`dependency:list
 * -DoutputFile=…`, and the local repository it filled) is endorsed in one
 * block, offline (with `--origin` mapping the canonical repository URL to
 * the fixture) and through a running authority gateway, whose Maven route
 * then serves that build to a fresh `mvn`. Parent POMs are followed,
 * Debian's symlinked plugins and installed files are skipped, a file whose
 * bytes contradict the repository's .sha1 (or the local file) fails the run
 * and appends nothing. Unit tests: the dependency-list reader, the Maven
 * version -> SemVer rule, side files.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { vouchAsync, initAuthorityChain } from '../helpers/processes.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import {
  artifactPath,
  compileJava,
  jarOf,
  mirrorSettings,
  mvn,
  pomXml,
  publish,
  seededLocalRepo,
  writeProject,
  type Coordinates,
  type MavenArtifact,
} from '../helpers/maven-repo.ts';
import { mavenSemver, parseSideFile, readDependencyList } from '../../tools/lockfiles/maven.ts';
import { chainFile } from '../helpers/chain-files.ts';

const CANON = 'https://repo.example.org/maven2/';
const G = 'org.example.vouch';
const work = mkdtempSync(join(tmpdir(), 'vouch-endorse-maven-'));
const key = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
let origin: OriginServer;
let gw: GatewayProcess;
let A: Record<string, MavenArtifact>;
let deps = '';
let localRepo = '';

const sha256 = (b: string | Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const size = (chain: string) => JSON.parse(readFileSync(join(chain, 'checkpoint.json'), 'utf8')).size as number;
const block = (chain: string, i: number) => {
  const d = String(i).padStart(9, '0');
  return JSON.parse(chainFile(chain, `blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`));
};
const entriesOf = (chain: string, i: number) =>
  (block(chain, i).payload.endorsements as any[])
    .map((e) => ({ url: e.artifact_url, hash: e.artifact_hash, name: e.name, semver: e.semver, license: e.license }))
    .sort((a, b) => (a.url < b.url ? -1 : 1));

test('dependency:list output: files and their POMs; classifiers, types, module notes and file names read past', () => {
  const text =
    '\nThe following files have been resolved:\n' +
    '   org.example:a:jar:1.0:compile -- module a (auto)\n' +
    '   org.example:b:test-jar:2.0:test\n' +
    '   org.example:c:jar:linux-x86_64:3.0:runtime (optional)\n' +
    '   org.example:d:pom:4.0:import\n' +
    '   org.example:e:jar:5.0:compile:/home/u/.m2/repository/org/example/e/5.0/e-5.0.jar\n' +
    '   none\n';
  assert.equal(
    readDependencyList(text, 'deps.txt').map((f) => f.path),
    [
      'org/example/a/1.0/a-1.0.jar',
      'org/example/a/1.0/a-1.0.pom',
      'org/example/b/2.0/b-2.0-tests.jar',
      'org/example/b/2.0/b-2.0.pom',
      'org/example/c/3.0/c-3.0-linux-x86_64.jar',
      'org/example/c/3.0/c-3.0.pom',
      'org/example/d/4.0/d-4.0.pom',
      'org/example/e/5.0/e-5.0.jar',
      'org/example/e/5.0/e-5.0.pom',
    ],
  );
  for (const bad of ['org.example:a:1.0', 'org/x:a:jar:1.0:compile', 'org.example:a:jar:1.0/../x:compile', 'a:b:c:d:e:f:g']) {
    try {
      readDependencyList(bad, 'deps.txt');
      assert.unreachable(bad);
    } catch (e) {
      assert.match((e as Error).message, /deps\.txt line 1/);
    }
  }
});

test('Maven versions as SemVer: padded numbers, pre-release qualifiers, others as build metadata', () => {
  const cases: Array<[string, string]> = [
    ['1.0', '1.0.0'],
    ['1.2.3', '1.2.3'],
    ['2.0.0-M1', '2.0.0-M1'],
    ['1.0-beta-2', '1.0.0-beta.2'],
    ['31.1-jre', '31.1.0+jre'],
    ['5.3.20.Final', '5.3.20+Final'],
    ['1.2.3.4', '1.2.3+rel.4'],
    ['1.0-SNAPSHOT', '1.0.0-SNAPSHOT'],
    ['1.0-rc01', '1.0.0-rc01'],
  ];
  for (const [v, s] of cases) assert.equal(mavenSemver(v), { ok: true, value: s }, v);
  for (const v of ['latest', 'r09', '1.0-x_y', '']) assert.is(mavenSemver(v).ok, false, v);
  assert.is(parseSideFile('DA39A3EE5E6B4B0D3255BFEF95601890AFD80709  x.jar\n', 'sha1'), 'da39a3ee5e6b4b0d3255bfef95601890afd80709');
  assert.is(parseSideFile('<html>', 'sha1'), null);
});

test.before(async () => {
  try {
    await setup();
  } catch (e) {
    console.error(e);
    throw e;
  }
});
async function setup() {
  const classes = compileJava(join(work, 'javac'), {
    'org/example/util/Util.java': 'package org.example.util; public class Util { public static String name() { return "util"; } }',
    'org/example/greet/Greet.java': 'package org.example.greet; public class Greet { public static String hello() { return org.example.util.Util.name(); } }',
  });
  const pick = (prefix: string) => [...classes].filter(([n]) => n.startsWith(prefix));
  const at = (artifactId: string, version: string): Coordinates => ({ groupId: G, artifactId, version });
  const parent = at('parent', '7');
  const util = at('util', '1.0');
  A = {
    parent: { ...parent, pom: pomXml(parent).replace('<packaging>jar</packaging>', '<packaging>pom</packaging>'), jar: null },
    util: {
      ...util,
      pom: pomXml(util, [], `<parent><groupId>${G}</groupId><artifactId>parent</artifactId><version>7</version></parent>`),
      jar: jarOf('util', pick('org/example/util/')),
    },
    greet: { ...at('greet', '1.0'), pom: pomXml(at('greet', '1.0'), [util]), jar: jarOf('greet', pick('org/example/greet/')) },
    nosum: { ...at('nosum', '1.0'), pom: pomXml(at('nosum', '1.0')), jar: jarOf('nosum', []) },
    badsum: { ...at('badsum', '1.0'), pom: pomXml(at('badsum', '1.0')), jar: jarOf('badsum', []) },
  };
  origin = await OriginServer.start();
  for (const k of ['parent', 'util', 'greet', 'nosum']) publish(origin, '/repo/', A[k]!);
  publish(origin, '/repo/', A.badsum!, { jarSha1: '1'.repeat(40) });
  for (const ext of ['pom', 'jar']) {
    // no side files at all
    origin.route(`/repo/${artifactPath(A.nosum!, ext)}.sha1`, { status: 404 });
    origin.route(`/repo/${artifactPath(A.nosum!, ext)}.md5`, { status: 404 });
  }
  // What a build resolves, straight from the repository: the list and the local repository it filled.
  const project = writeProject(join(work, 'project'), [A.greet!, A.nosum!], null);
  localRepo = seededLocalRepo(join(work, 'm2'));
  const settings = mirrorSettings(join(work, 'settings.xml'), `${origin.origin}/repo/`);
  deps = join(work, 'deps.txt');
  const r = await mvn(['org.apache.maven.plugins:maven-dependency-plugin:3.5.0:list', `-DoutputFile=${deps}`], {
    cwd: project,
    settings,
    repo: localRepo,
    timeoutMs: 150_000,
    shortJvm: true,
  });
  assert.is(r.status, 0, r.output);

  await initAuthorityChain({ key, chain: join(work, 'offline'), signer: 'maven-authority' });
  const init = await vouchAsync(['init', '--chain', join(work, 'offline-dir'), '--key', key, '--signer', 'maven-authority', '--uns', 'acme/deps']);
  assert.is(init.status, 0, init.stderr);
  writeFileSync(tokenFile, 'maven-submit-token\n', { mode: 0o600 });
  const config = writeConfig(join(work, 'gw'), {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: join(work, 'gw', 'chain') },
    authority: { key_file: key, signer: 'maven-authority', submit_token_file: tokenFile },
    origin: { allow_private: true, timeout: 5 },
    proxy: { routes: [{ prefix: '/maven/', kind: 'maven', origin: `${origin.origin}/repo/`, unendorsed: 'deny' }] },
  });
  gw = await startGatewayProcess(['--config', config]);
}

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

/** The entries a block should hold for the resolved build under `base`. */
function expected(base: string) {
  const files: Array<[MavenArtifact, string, string | Buffer]> = [];
  for (const k of ['greet', 'util', 'nosum']) files.push([A[k]!, 'jar', A[k]!.jar!], [A[k]!, 'pom', A[k]!.pom]);
  files.push([A.parent!, 'pom', A.parent!.pom]);
  return files
    .map(([a, ext, bytes]) => ({
      url: base + artifactPath(a, ext),
      hash: sha256(bytes),
      name: `maven/${G}+${a.artifactId}`,
      semver: a.version === '7' ? '7.0.0' : '1.0.0',
      license: 'Apache-2.0',
    }))
    .sort((a, b) => (a.url < b.url ? -1 : 1));
}

const common = ['--license', 'Apache-2.0', '--name', 'acme/app', '--semver', '1.0.0'];

test('offline: the dependency list (and the parent POM it implies) endorsed in one block under the canonical URL', async () => {
  const chain = join(work, 'offline');
  const r = await vouchAsync([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--lockfile',
    deps,
    '--maven-repo',
    CANON,
    '--origin',
    `${CANON}=${origin.origin}/repo/`,
    ...common,
  ]);
  assert.is(r.status, 0, r.stderr + r.stdout);
  assert.is(size(chain), 2);
  assert.equal(entriesOf(chain, 1), expected(CANON));
  assert.match(r.stderr, /1 parent or imported POMs added/);
  assert.match(r.stderr, /2 files have no \.sha256 or \.sha1/);
  // Again: everything unchanged, nothing appended.
  const again = await vouchAsync([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--lockfile',
    deps,
    '--maven-repo',
    CANON,
    '--origin',
    `${CANON}=${origin.origin}/repo/`,
    ...common,
  ]);
  assert.is(again.status, 0, again.stderr);
  assert.is(size(chain), 2);
});

test("offline: the local repository the build filled gives the same block (Debian's symlinked plugins skipped)", async () => {
  const chain = join(work, 'offline-dir');
  const r = await vouchAsync([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--lockfile',
    localRepo,
    '--maven-repo',
    CANON,
    '--origin',
    `${CANON}=${origin.origin}/repo/`,
    ...common,
    '--json',
  ]);
  assert.is(r.status, 0, r.stderr + r.stdout);
  assert.equal(entriesOf(chain, 1), expected(CANON));
  assert.ok(JSON.parse(r.stdout).skipped_by_reason.symlinked > 100, r.stdout);
});

test("a file whose bytes contradict the repository's .sha1, or a local file the repository disagrees with: exit 1, nothing appended", async () => {
  const chain = join(work, 'offline');
  const list = join(work, 'bad.txt');
  writeFileSync(list, `The following files have been resolved:\n   ${G}:badsum:jar:1.0:compile\n`);
  const r = await vouchAsync(['endorse', '--chain', chain, '--key', key, '--lockfile', list, '--maven-repo', `${origin.origin}/repo/`, ...common]);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, new RegExp(`${G}:badsum:jar:1.0: .* does not match the repository's \\.sha1`));
  assert.is(size(chain), 2);
  // The local repository holds other bytes than the repository's .sha1 says.
  const jar = join(localRepo, artifactPath(A.greet!, 'jar'));
  const kept = readFileSync(jar);
  writeFileSync(jar, Buffer.concat([kept, Buffer.from('x')]));
  try {
    const d = await vouchAsync(['endorse', '--chain', chain, '--key', key, '--lockfile', localRepo, '--maven-repo', `${origin.origin}/repo/`, ...common]);
    assert.is(d.status, 1, d.stderr);
    assert.match(d.stderr, /the local file .* has sha1 .*, the repository's \.sha1 says/);
    assert.is(size(chain), 2);
  } finally {
    writeFileSync(jar, kept);
  }
});

test('through a running authority: the same entries, then its Maven route serves the build to a fresh mvn', async () => {
  const base = `${origin.origin}/repo/`;
  const r = await vouchAsync(['endorse', '--gateway', gw.url, '--token-file', tokenFile, '--lockfile', deps, '--maven-repo', base, ...common]);
  assert.is(r.status, 0, r.stderr + r.stdout);
  const chain = join(work, 'gw', 'chain');
  assert.equal(entriesOf(chain, size(chain) - 1), expected(base));
  const project = writeProject(join(work, 'consumer'), [A.greet!, A.nosum!], null);
  const settings = mirrorSettings(join(work, 'settings-gw.xml'), `${gw.url}/maven/`);
  const b = await mvn(['-C', 'org.apache.maven.plugins:maven-dependency-plugin:3.5.0:resolve'], {
    cwd: project,
    settings,
    repo: seededLocalRepo(join(work, 'm2-gw')),
    timeoutMs: 150_000,
    shortJvm: true,
  });
  assert.is(b.status, 0, b.output);
});

test.run();
