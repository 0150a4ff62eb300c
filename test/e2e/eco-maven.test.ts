/**
 * The Maven repository route (`kind: maven`): unit tests of the path
 * parsing and the metadata rewrite (bounded reader); then the REAL mvn
 * (Debian's maven 3.8, plugins from Debian's /usr/share/maven-repo seeded
 * into a fresh local repository per run) with a settings.xml mirror of `*`
 * at a real `vouch serve` process, whose route `/maven/` stands in front of
 * a fixture maven2 repository on 127.0.0.1 (jars of javac-compiled classes,
 * poms, .sha1 / .md5, maven-metadata.xml) with `canonical:
 * https://repo.example.org/maven2/`: endorsed dependencies resolve and the
 * build runs; `mvn -C` passes through vouch although the origin's .sha1 is
 * wrong; a jar swapped with its .sha1 fails with vouch's reason; an
 * unendorsed version is not offered by metadata (a range resolves the
 * endorsed one) and asking for it is refused; a revoked one is refused;
 * with the repository stopped a fresh local repository still fills.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { get as httpGet } from 'node:http';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
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
import { maven, parseMavenPath, rewriteMetadata } from '../../gateway/ecosystems/maven.ts';
import { MAX_DEPTH, MavenMetadataError, parseMavenMetadata, writeMavenMetadata } from '../../artifacts/maven-metadata.ts';
import type { Selection } from '../../chain/select.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { testSigner } from '../helpers/chain-fixture.ts';
import {
  artifactPath,
  compileJava,
  jarOf,
  mirrorSettings,
  mvn,
  pomXml,
  publish,
  publishMetadata,
  seededLocalRepo,
  sha1,
  writeProject,
  type Coordinates,
  type MavenArtifact,
} from '../helpers/maven-repo.ts';

const CANONICAL = 'https://repo.example.org/maven2/';
const G = 'org.example.vouch';
const DEP_RESOLVE = 'org.apache.maven.plugins:maven-dependency-plugin:3.5.0:resolve';
const work = mkdtempSync(join(tmpdir(), 'vouch-eco-maven-'));
let origin: OriginServer;
let gw: GatewayProcess;
let originStopped = false;

// ---------------------------------------------------------------------------
// Unit tests

test('request paths: artifacts, checksums, metadata, signatures; anything else is not the layout', () => {
  assert.equal(parseMavenPath('org/example/greet/1.0/greet-1.0.jar'), { what: 'artifact' });
  assert.equal(parseMavenPath('org/example/greet/1.0/greet-1.0-sources.jar'), { what: 'artifact' });
  assert.equal(parseMavenPath('org/example/greet/1.0/greet-1.0.jar.sha1'), {
    what: 'checksum',
    artifact: 'org/example/greet/1.0/greet-1.0.jar',
    checksum: 'sha1',
  });
  assert.equal(parseMavenPath('org/example/greet/1.0/greet-1.0.module.sha512'), {
    what: 'checksum',
    artifact: 'org/example/greet/1.0/greet-1.0.module',
    checksum: 'sha512',
  });
  assert.equal(parseMavenPath('org/example/greet/maven-metadata.xml'), { what: 'metadata', dir: ['org', 'example', 'greet'], checksum: null });
  assert.equal(parseMavenPath('org/example/maven-metadata.xml.md5'), { what: 'metadata', dir: ['org', 'example'], checksum: 'md5' });
  assert.equal(parseMavenPath('org/example/greet/1.0/greet-1.0.jar.asc'), { what: 'signature' });
  assert.equal(parseMavenPath('org/example/greet/1.0/greet-1.0.jar.asc.sha1'), { what: 'signature' });
  for (const bad of [
    'greet.jar',
    'org/greet.jar',
    'org/example/greet-1.0.jar',
    'org//greet/1.0/g.jar',
    'org/%2e%2e/x/1/a.jar',
    'org/ex ample/a/1/a.jar',
    'org/example/a/1/a.jar.sha1.sha1',
    '.hidden/a/1/a.jar',
    `org/${'a'.repeat(1100)}/a/1/a.jar`,
    'org/example/a/1/',
  ]) {
    assert.is(parseMavenPath(bad), null, bad);
  }
  assert.is(maven.classify('org/example/greet/1.0/greet-1.0.jar', '').type, 'artifact');
  assert.is(maven.classify('org/example/greet/1.0/greet-1.0.jar', 'x=1').type, 'other');
  assert.is(maven.classify('org/example/greet/maven-metadata.xml', '').type, 'metadata');
  const e = maven.errorBody('vouch: refused\nsecond');
  assert.equal(e, { contentType: 'text/plain; charset=utf-8', body: 'vouch: refused second\n', reason: 'vouch: refused second' });
});

test('maven-metadata.xml: parsed strictly and within bounds; written back as Maven lays it out', () => {
  const m = parseMavenMetadata(
    '<?xml version="1.0"?><metadata><groupId>g.h</groupId><artifactId>a</artifactId><versioning><latest>2</latest>' +
      '<release>2</release><versions><version>1</version><version> 2 </version><version>1</version></versions><lastUpdated>20260101000000</lastUpdated></versioning></metadata>',
  );
  assert.equal(m.versions, ['1', '2']);
  assert.is(m.lastUpdated, '20260101000000');
  assert.ok(writeMavenMetadata(m).includes('<version>2</version>'));
  const refused = (doc: string, why: RegExp) => {
    try {
      parseMavenMetadata(doc);
      assert.unreachable(doc.slice(0, 80));
    } catch (e) {
      assert.instance(e, MavenMetadataError);
      assert.match((e as Error).message, why);
    }
  };
  refused('<project/>', /not <metadata>/);
  refused('', /no root/);
  refused('<metadata><versioning><versions><version>1/../x</version></versions></versioning></metadata>', /version/);
  refused(`<metadata>${'<a>'.repeat(MAX_DEPTH + 2)}</metadata>`, /deeper/);
  refused(`<metadata><groupId>${'x'.repeat(2000)}</groupId></metadata>`, /longer/);
  refused('<!DOCTYPE m [<!ENTITY e "x">]><metadata><groupId>&e;</groupId></metadata>', /groupId/); // no DTD entities
});

const selAt = (posted: string) => ({ block: { posted }, entry: { semver: '1.0.0', artifact_hash: 'sha256:00' }, revokedBy: null }) as unknown as Selection;

test("metadata rewrite: only versions whose pom (or jar) is endorsed, in the origin's order; latest/release/lastUpdated recomputed", () => {
  const endorsed = new Map([
    [`${CANONICAL}g/h/a/1.0/a-1.0.pom`, selAt('2026-03-04T05:06:07Z')],
    [`${CANONICAL}g/h/a/1.2/a-1.2.jar`, selAt('2026-01-01T00:00:00Z')],
    [`${CANONICAL}g/h/a/2.0-SNAPSHOT/a-2.0-SNAPSHOT.pom`, selAt('2026-05-01T00:00:00Z')],
  ]);
  const view = {
    originUrl: (rest: string) => `http://127.0.0.1:1/repo/${rest}`,
    artifactUrlOf: (u: string) => u.replace('http://127.0.0.1:1/repo/', CANONICAL),
    endorsed: (u: string) => endorsed.get(u) ?? null,
  };
  const doc =
    '<metadata><groupId>g.h</groupId><artifactId>a</artifactId><versioning><latest>2.0-SNAPSHOT</latest><release>1.5</release>' +
    '<versions><version>1.0</version><version>1.2</version><version>1.5</version><version>2.0-SNAPSHOT</version></versions>' +
    '<lastUpdated>20270101000000</lastUpdated></versioning></metadata>';
  const a = rewriteMetadata(view, ['g', 'h', 'a'], doc);
  assert.ok(a.ok);
  if (!a.ok) return;
  const m = parseMavenMetadata(a.text);
  assert.equal([m.versions, m.latest, m.release, m.lastUpdated], [['1.0', '1.2'], '1.2', '1.2', '20260304050607']);
  assert.is(a.digests.sha1, sha1(a.text));
  // Another artifact's document, none endorsed, SNAPSHOT metadata, garbage: refused with the reason.
  const other = rewriteMetadata(view, ['g', 'h', 'b'], doc);
  assert.equal([other.ok, !other.ok && other.status], [false, 502]);
  const none = rewriteMetadata(view, ['g', 'h', 'a'], doc.replace(/<version>1\.[02]<\/version>/g, ''));
  assert.ok(!none.ok && none.status === 404 && /no version of g\.h:a is endorsed/.test(none.message));
  const snap = rewriteMetadata(
    view,
    ['g', 'h', 'a', '2.0-SNAPSHOT'],
    '<metadata><versioning><snapshot><timestamp>1</timestamp></snapshot></versioning></metadata>',
  );
  assert.ok(!snap.ok && snap.status === 404 && /SNAPSHOT/.test(snap.message));
  const bad = rewriteMetadata(view, ['g', 'h', 'a'], '<html>');
  assert.ok(!bad.ok && bad.status === 502);
  // Group level: plugin prefixes kept.
  const group = rewriteMetadata(
    view,
    ['g', 'h'],
    '<metadata><plugins><plugin><name>X</name><prefix>x</prefix><artifactId>x-maven-plugin</artifactId></plugin></plugins></metadata>',
  );
  assert.ok(group.ok && parseMavenMetadata(group.text).plugins?.[0]?.prefix === 'x');
});

// ---------------------------------------------------------------------------
// Fixture repository, chain and gateway

const at = (artifactId: string, version: string): Coordinates => ({ groupId: G, artifactId, version });
let A: Record<string, MavenArtifact>;

function buildArtifacts(): Record<string, MavenArtifact> {
  const classes = compileJava(join(work, 'javac'), {
    'org/example/util/Util.java': 'package org.example.util; public class Util { public static String name() { return "util 1.0"; } }',
    'org/example/greet/Greet.java':
      'package org.example.greet; public class Greet { public static String hello() { return "hello from " + org.example.util.Util.name(); } }',
    'org/example/greet/Greet11.java': 'package org.example.greet; public class Greet11 { }',
    'org/example/other/Other.java': 'package org.example.other; public class Other { public static int n() { return 7; } }',
  });
  const pick = (prefix: string) => [...classes].filter(([n]) => n.startsWith(prefix));
  const util = at('util', '1.0');
  const mk = (c: Coordinates, classesOf: string, deps: Coordinates[] = []): MavenArtifact => ({
    ...c,
    pom: pomXml(c, deps),
    jar: jarOf(`${c.artifactId}-${c.version}`, pick(classesOf)),
  });
  return {
    util: mk(util, 'org/example/util/'),
    greet10: mk(at('greet', '1.0'), 'org/example/greet/Greet.class', [util]),
    greet11: mk(at('greet', '1.1'), 'org/example/greet/Greet11', [util]), // served, NOT endorsed
    badsum: mk(at('badsum', '1.0'), 'org/example/other/'), // endorsed; the origin's .sha1 is wrong
    swapped: mk(at('swapped', '1.0'), 'org/example/other/'), // endorsed; the origin swaps jar and .sha1
    revoked: mk(at('revoked', '1.0'), 'org/example/other/'),
  };
}

async function buildChain(dir: string): Promise<string> {
  const signer = testSigner();
  const t = Date.now() - 3_600_000;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now: t, uns: 'acme/maven-chain' })];
  const endorse = (a: MavenArtifact) => {
    const files: Array<[string, string | Buffer]> = [['pom', a.pom], ...(a.jar === null ? [] : [['jar', a.jar] as [string, Buffer]])];
    const block = buildEndorseBlock({
      prev: blocks.at(-1)!,
      signer,
      backend: nodeBackend,
      now: t + blocks.length * 1000,
      entries: files.map(([ext, bytes]) => ({
        url: CANONICAL + artifactPath(a, ext),
        artifactHash: artifactHashOf(nodeBackend, 'sha256', typeof bytes === 'string' ? Buffer.from(bytes) : bytes),
        name: `maven/${a.groupId}+${a.artifactId}`,
        semver: `${a.version}.0`,
        license: 'MIT',
      })),
    });
    blocks.push(block);
    return block;
  };
  for (const k of ['util', 'greet10', 'badsum', 'swapped']) endorse(A[k]!);
  const revoked = endorse(A.revoked!);
  blocks.push(buildRevokeBlock({ prev: blocks.at(-1)!, target: revoked, signer, backend: nodeBackend, now: t + blocks.length * 1000 }));
  const checkpoint = buildCheckpoint({ head: blocks.at(-1)!, signer, now: t + blocks.length * 1000 });
  await ChainRepo.init(
    dir,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(checkpoint),
    { message: 'maven fixture\n', authorName: 't', authorEmail: 't@vouch.invalid', timestamp: Math.floor(t / 1000) },
  );
  return base64Encode(signer.publicKey);
}

let runs = 0;
/** Runs mvn in a fresh project with `deps` and a fresh local repository, mirror at `url` (the gateway's /maven/ by default). */
async function build(deps: Coordinates[], goals: string[], opts: { main?: string; url?: string } = {}) {
  const n = ++runs;
  const dir = writeProject(join(work, `p${n}`), deps, opts.main ?? null);
  const repo = seededLocalRepo(join(work, `m2-${n}`));
  const settings = mirrorSettings(join(work, `settings-${n}.xml`), opts.url ?? `${gw.url}/maven/`);
  const run = await mvn(goals, { cwd: dir, settings, repo, timeoutMs: 150_000, shortJvm: true });
  return { ...run, dir, repo };
}

const repoFile = (repo: string, c: Coordinates, ext: string) => join(repo, artifactPath(c, ext));

test.before(async () => {
  A = buildArtifacts();
  origin = await OriginServer.start();
  for (const k of ['util', 'greet10', 'greet11', 'revoked']) publish(origin, '/repo/', A[k]!);
  publish(origin, '/repo/', A.badsum!, { jarSha1: '0'.repeat(40) });
  const swappedJar = jarOf('swapped-1.0', [['evil/Evil.class', Buffer.from('not the endorsed bytes')]]);
  publish(origin, '/repo/', A.swapped!, { jar: swappedJar, jarSha1: sha1(swappedJar) });
  publishMetadata(origin, '/repo/', G, 'greet', ['1.0', '1.1']);
  origin.route(`/repo/${artifactPath(A.greet10!, 'jar')}.asc`, { body: '-----BEGIN PGP SIGNATURE-----\n', contentType: 'text/plain' });
  origin.route(`/repo/${G.replace(/\./g, '/')}/greet/1.2-SNAPSHOT/maven-metadata.xml`, { body: '<metadata/>', contentType: 'text/xml' });
  const publicKey = await buildChain(join(work, 'chain'));
  const route = { kind: 'maven', origin: `${origin.origin}/repo/`, canonical: CANONICAL, metadata_ttl: 0, metadata_max_stale: 86_400 };
  const cfg = writeConfig(work, {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: join(work, 'chain'), public_key: publicKey },
    origin: { allow_private: true, timeout: 5 },
    mirror: { memory_bytes: 16 * 1024 * 1024 },
    proxy: {
      routes: [
        { prefix: '/maven/', unendorsed: 'deny', ...route },
        { prefix: '/mavenpass/', unendorsed: 'pass', ...route },
      ],
    },
  });
  gw = await startGatewayProcess(['--config', cfg]);
});

test.after(async () => {
  await gw?.stop();
  if (!originStopped) await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

/** A GET through the gateway, with the status line's reason phrase (what Maven prints). */
function get(path: string): Promise<{ status: number; reason: string; type: string | null; uns: string | null; unendorsed: string | null; body: string }> {
  return new Promise((resolve, reject) => {
    httpGet(gw.url + path, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          reason: res.statusMessage ?? '',
          type: res.headers['content-type'] ?? null,
          uns: (res.headers['uns'] as string | undefined) ?? null,
          unendorsed: (res.headers['x-vouch-unendorsed'] as string | undefined) ?? null,
          body,
        }),
      );
    }).on('error', reject);
  });
}

test('mvn resolves endorsed dependencies (and their transitive ones) through vouch and the build runs', async () => {
  const main = 'package app; public class Main { public static void main(String[] a) { System.out.println(org.example.greet.Greet.hello()); } }';
  const r = await build([A.greet10!], ['package', '-DskipTests'], { main });
  assert.is(r.status, 0, r.output);
  for (const a of [A.greet10!, A.util!]) {
    assert.equal(readFileSync(repoFile(r.repo, a, 'jar')), a.jar, `${a.artifactId}: jar bytes`);
    assert.is(readFileSync(repoFile(r.repo, a, 'pom'), 'utf8'), a.pom);
  }
  const cp = [join(r.dir, 'target/classes'), repoFile(r.repo, A.greet10!, 'jar'), repoFile(r.repo, A.util!, 'jar')].join(':');
  const java = spawnSync('java', ['-cp', cp, 'app.Main'], { encoding: 'utf8', timeout: 60_000 });
  assert.is(java.stdout.trim(), 'hello from util 1.0', java.stderr);
  // The jar came through the verified path; its .sha1 is the digest of those bytes.
  const jar = await get(`/maven/${artifactPath(A.greet10!, 'jar')}`);
  assert.ok(jar.uns, 'no UNS header on an endorsed jar');
  assert.is((await get(`/maven/${artifactPath(A.greet10!, 'jar')}.sha1`)).body, sha1(A.greet10!.jar!));
  assert.is((await get(`/maven/${artifactPath(A.greet10!, 'jar')}.sha256`)).body, createHash('sha256').update(A.greet10!.jar!).digest('hex'));
  assert.is((await get(`/maven/${artifactPath(A.greet10!, 'jar')}.asc`)).body, '-----BEGIN PGP SIGNATURE-----\n');
});

test("mvn -C (strict checksums) passes through vouch on endorsed bytes although the origin's .sha1 is wrong; straight from the origin it fails", async () => {
  const through = await build([A.badsum!, A.greet10!], ['-C', DEP_RESOLVE]);
  assert.is(through.status, 0, through.output);
  assert.equal(readFileSync(repoFile(through.repo, A.badsum!, 'jar')), A.badsum!.jar);
  const straight = await build([A.badsum!], ['-C', DEP_RESOLVE], { url: `${origin.origin}/repo/` });
  assert.is.not(straight.status, 0, 'the control run (no vouch) did not fail on the wrong .sha1');
  assert.match(straight.output, /[Cc]hecksum/);
});

test("a jar swapped together with its .sha1 fails the build with vouch's reason", async () => {
  const r = await build([A.swapped!], [DEP_RESOLVE]);
  assert.is.not(r.status, 0, r.output);
  assert.ok(r.output.includes(`vouch: hash mismatch for ${CANONICAL}${artifactPath(A.swapped!, 'jar')}, refused (signed sha256:`), r.output);
  assert.not.ok(existsSync(repoFile(r.repo, A.swapped!, 'jar')), 'the swapped jar reached the local repository');
  const sum = await get(`/maven/${artifactPath(A.swapped!, 'jar')}.sha1`);
  assert.is(sum.status, 409);
});

test('an unendorsed version is not offered by the metadata (a range resolves the endorsed one) and asking for it is refused', async () => {
  const meta = await get(`/maven/${G.replace(/\./g, '/')}/greet/maven-metadata.xml`);
  assert.is(meta.status, 200);
  const m = parseMavenMetadata(meta.body);
  assert.equal([m.versions, m.latest, m.release], [['1.0'], '1.0', '1.0']);
  assert.is((await get(`/maven/${G.replace(/\./g, '/')}/greet/maven-metadata.xml.sha1`)).body, sha1(meta.body));
  // The pass route hands the origin's document through, and an unendorsed file with the origin's checksum (marked).
  assert.ok((await get(`/mavenpass/${G.replace(/\./g, '/')}/greet/maven-metadata.xml`)).body.includes('<version>1.1</version>'));
  assert.is((await get(`/mavenpass/${artifactPath(A.greet11!, 'jar')}.sha1`)).body, sha1(A.greet11!.jar!));
  const passed = await get(`/mavenpass/${artifactPath(A.greet11!, 'jar')}`);
  assert.equal([passed.status, passed.unendorsed], [200, 'passed unverified']);
  // An endorsed file on the pass route: still the digest of the verified bytes, not the origin's wrong .sha1.
  assert.is((await get(`/mavenpass/${artifactPath(A.badsum!, 'jar')}.sha1`)).body, sha1(A.badsum!.jar!));
  const snap = await get(`/maven/${G.replace(/\./g, '/')}/greet/1.2-SNAPSHOT/maven-metadata.xml`);
  assert.is(snap.status, 404);
  assert.match(snap.body, /SNAPSHOT/);

  const range = await build([{ ...at('greet', '[1.0,2.0)') }], [DEP_RESOLVE]);
  assert.is(range.status, 0, range.output);
  assert.ok(existsSync(repoFile(range.repo, A.greet10!, 'jar')));
  assert.not.ok(existsSync(repoFile(range.repo, A.greet11!, 'jar')), 'the unendorsed 1.1 was resolved');

  // A refusal by the chain is a 403 with the reason as the status line's phrase (Maven prints only that); Gradle's optional .module stays a 404.
  const refusedPom = await get(`/maven/${artifactPath(A.greet11!, 'pom')}`);
  const reason = `vouch: ${CANONICAL}${artifactPath(A.greet11!, 'pom')} is not endorsed by the authority, refused`;
  assert.equal([refusedPom.status, refusedPom.reason, refusedPom.body.trim()], [403, reason, reason]);
  assert.is((await get(`/maven/${artifactPath(A.greet11!, 'module')}`)).status, 404);
  assert.is((await get(`/maven/${artifactPath(A.greet11!, 'jar')}.sha1`)).status, 403);
  assert.is((await get(`/maven/${artifactPath(A.greet10!, 'jar')}?x=1`)).status, 404);
  const direct = await build([A.greet11!], [DEP_RESOLVE]);
  assert.is.not(direct.status, 0, direct.output);
  assert.ok(direct.output.includes(`vouch: ${CANONICAL}${artifactPath(A.greet11!, 'pom')} is not endorsed by the authority, refused`), direct.output);
});

test("a revoked version is refused with vouch's reason", async () => {
  const r = await build([A.revoked!], [DEP_RESOLVE]);
  assert.is.not(r.status, 0, r.output);
  assert.ok(r.output.includes('is revoked by the authority, refused'), r.output);
  const sum = await get(`/maven/${artifactPath(A.revoked!, 'jar')}.sha1`);
  assert.equal([sum.status, sum.body.includes('is revoked by the authority, refused')], [403, true]);
});

test('the repository down, the gateway warm: a fresh local repository still fills (mirror and stale metadata)', async () => {
  const warm = await build([at('greet', '[1.0,2.0)'), A.badsum!], [DEP_RESOLVE]);
  assert.is(warm.status, 0, warm.output);
  await origin.close();
  originStopped = true;
  const cold = await build([at('greet', '[1.0,2.0)'), A.badsum!], ['-C', DEP_RESOLVE]);
  assert.is(cold.status, 0, cold.output);
  assert.equal(readFileSync(repoFile(cold.repo, A.greet10!, 'jar')), A.greet10!.jar);
  assert.equal(readFileSync(repoFile(cold.repo, A.util!, 'jar')), A.util!.jar);
});

test.run();
