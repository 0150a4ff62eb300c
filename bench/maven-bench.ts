/**
 * `npm run bench -- maven` (issue 38): what Maven pays for a Maven route,
 * run as users run it. Row M1: whole `mvn dependency:resolve` processes
 * (Debian's maven) of a project with DEPS dependencies, a fresh local
 * repository each, through the route (settings.xml mirror of `*`; cold and
 * warm gateway) vs straight at the repository, interleaved, medians. The
 * repository is the tests' fixture (test/helpers/maven-repo.ts) on
 * 127.0.0.1.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  artifactHashOf,
  buildAuthorityBlock,
  buildCheckpoint,
  buildEndorseBlock,
  formatBlockFile,
  formatCheckpointFile,
  type EndorsementInput,
} from '../chain/index.ts';
import { ChainRepo } from '../store/chain-repo.ts';
import { appendSigned, commitFor } from '../store/chain-append.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { testSigner } from '../test/helpers/chain-fixture.ts';
import { OriginServer } from '../test/helpers/origin-server.ts';
import {
  artifactPath,
  jarOf,
  mirrorSettings,
  mvn,
  pomXml,
  publish,
  publishMetadata,
  seededLocalRepo,
  writeProject,
  type Coordinates,
  type MavenArtifact,
} from '../test/helpers/maven-repo.ts';
import { assertLoopback, median, spawnGateway, stopAll, type Proc } from './gateway-harness.ts';

const CANON = 'https://repo.example.org/maven2/';
const GROUP = 'org.example.bench';

export async function runMavenBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const DEPS = quick ? 12 : 40;
  const ROUNDS = quick ? 2 : 7;
  const OLDER = 20; // listed older versions of each ranged dependency, unendorsed
  const load0 = loadavg()[0]!;
  const work = mkdtempSync(join(tmpdir(), 'vouch-bench-maven-'));
  const origin = await OriginServer.start();
  const gateways: Proc[] = [];
  try {
    const artifacts: MavenArtifact[] = [];
    const wanted: Coordinates[] = [];
    for (let i = 0; i < DEPS; i++) {
      const c = { groupId: GROUP, artifactId: `lib-${i}`, version: '1.0' };
      const jar = jarOf(c.artifactId, [[`org/example/bench/lib${i}/data.txt`, Buffer.alloc(8 * 1024 + i * 512, i)]]);
      const a = { ...c, pom: pomXml(c), jar };
      artifacts.push(a);
      publish(origin, '/repo/', a);
      if (i % 4 === 0) {
        publishMetadata(origin, '/repo/', GROUP, c.artifactId, [...Array.from({ length: OLDER }, (_, v) => `0.${v + 1}`), '1.0']);
        wanted.push({ ...c, version: '[1.0,2.0)' });
      } else {
        wanted.push(c);
      }
    }
    const chainDir = join(work, 'chain');
    const signer = testSigner();
    let now = Date.UTC(2026, 0, 1);
    const authority = buildAuthorityBlock({ signer, backend: nodeBackend, now, uns: 'bench/chain' });
    const repo = await ChainRepo.init(
      chainDir,
      [{ index: 0, content: formatBlockFile(authority) }],
      formatCheckpointFile(buildCheckpoint({ head: authority, signer, now })),
      commitFor([authority], now),
    );
    const entries: EndorsementInput[] = artifacts.flatMap((a) =>
      (['pom', 'jar'] as const).map((ext) => ({
        url: CANON + artifactPath(a, ext),
        artifactHash: artifactHashOf(nodeBackend, 'sha256', ext === 'pom' ? Buffer.from(a.pom) : a.jar!),
        name: `maven/${a.groupId}+${a.artifactId}`,
        semver: '1.0.0',
        license: 'MIT',
      })),
    );
    now += 1000;
    const block = buildEndorseBlock({ prev: authority, signer, backend: nodeBackend, now, entries, uns: 'bench/deps', semver: '1.0.0' });
    await appendSigned(repo, [block], buildCheckpoint({ head: block, signer, now }), now);
    const config = join(work, 'vouch.yaml');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        chain: { dir: chainDir },
        authority: null,
        origin: { allow_private: true },
        proxy: { routes: [{ prefix: '/maven/', kind: 'maven', origin: `${origin.origin}/repo/`, canonical: CANON }] },
      }),
    );

    let n = 0;
    const resolve = async (url: string, label: string): Promise<number> => {
      const k = ++n;
      const dir = writeProject(join(work, `${label}-${k}`), wanted, null);
      const settings = mirrorSettings(join(work, `settings-${k}.xml`), url);
      const local = seededLocalRepo(join(work, `m2-${k}`));
      const r = await mvn(['-q', 'org.apache.maven.plugins:maven-dependency-plugin:3.5.0:resolve'], { cwd: dir, settings, repo: local, timeoutMs: 300_000 });
      if (r.status !== 0) throw new Error(`mvn (${label}) failed:\n${r.output.slice(-3000)}`);
      rmSync(dir, { recursive: true, force: true });
      rmSync(local, { recursive: true, force: true });
      return r.ms;
    };
    const direct: number[] = [];
    const cold: number[] = [];
    const warm: number[] = [];
    await resolve(`${origin.origin}/repo/`, 'jvm-warmup'); // the page cache holds Maven's own jars for every measured run
    for (let round = 0; round < ROUNDS; round++) {
      process.stdout.write(`M1 round ${round + 1}/${ROUNDS}\n`);
      const g = await spawnGateway(`gateway-${round}`, config);
      gateways.push(g);
      assertLoopback(g.url);
      const order = [
        async () => direct.push(await resolve(`${origin.origin}/repo/`, 'direct')),
        async () => {
          cold.push(await resolve(`${g.url}/maven/`, 'cold'));
          warm.push(await resolve(`${g.url}/maven/`, 'warm'));
        },
      ];
      if (round % 2 === 1) order.reverse();
      for (const step of order) await step();
      await g.stop();
    }
    const load1 = loadavg()[0]!;
    const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    const ranged = wanted.filter((w) => w.version.startsWith('[')).length;
    const rows = [
      '| Figure | Through the gateway | Straight at the repository (same runs) | Ratio (repository / gateway time) |',
      '|---|---|---|---|',
      `| M1. \`mvn dependency:resolve\` of ${DEPS} dependencies (${ranged} version ranges), fresh local repository, cold gateway (new process: every pom, jar, checksum and metadata fetched, verified) | ${fmt(median(cold))} (runs ${cold.map(fmt).join(', ')}) | ${fmt(median(direct))} (runs ${direct.map(fmt).join(', ')}) | **${(median(direct) / median(cold)).toFixed(2)}** |`,
      `| M1w. the same resolve again on the warm gateway (metadata cache and mirror filled) | ${fmt(median(warm))} (runs ${warm.map(fmt).join(', ')}) | ${fmt(median(direct))} | **${(median(direct) / median(warm)).toFixed(2)}** |`,
    ];
    const notes = [
      `Each run is a whole \`mvn -B -q dependency:resolve\` process (Debian's maven 3.8, its plugins seeded into the fresh local repository from /usr/share/maven-repo, so only the ${DEPS} dependencies travel over HTTP: a pom, a jar and a .sha1 each, and a maven-metadata.xml for each range), ${ROUNDS} rounds, gateway and direct runs interleaved (order alternated per round), after one unmeasured run; every round starts a new gateway process. The chain endorses each dependency's 1.0 pom and jar (sha256) under \`${CANON}\` in one block; the ${OLDER} older versions listed for each ranged one are unendorsed and removed from its metadata. JVM start-up is in every run, as users see it.`,
      `Load average (1 min): ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end.`,
    ];
    return { title: 'Maven through a Maven route (issue 38)', markdown: `${rows.join('\n')}\n\n${notes.join('\n')}\n` };
  } finally {
    for (const g of gateways) await g.stop().catch(() => {});
    await stopAll();
    await origin.close();
    rmSync(work, { recursive: true, force: true });
  }
}
