/**
 * `npm run bench -- ecosystem` (issue 13): what a package manager pays for an
 * npm ecosystem route, run as users run it, on 127.0.0.1, against the tests'
 * registry fixture (test/helpers/npm-registry.ts).
 * Row E1: whole `npm install` processes through the route (cold and warm
 * gateway) vs straight at the registry, interleaved, medians.
 * Row E2: packument answers under wrk, rotating PACKAGES packuments of
 * VERSIONS versions, gateway vs registry.
 * Row E3: tarball answers from the warm gateway (mirror hits) vs the
 * registry.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import {
  artifactHashOf,
  buildAuthorityBlock,
  buildCheckpoint,
  buildEndorseBlock,
  formatBlockFile,
  formatCheckpointFile,
  type Block,
  type EndorsementInput,
} from '../chain/index.ts';
import { ChainRepo } from '../store/chain-repo.ts';
import { appendSigned, commitFor } from '../store/chain-append.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { testSigner } from '../test/helpers/chain-fixture.ts';
import { NpmRegistry, cleanNpmEnv, runNpm, ABBREVIATED } from '../test/helpers/npm-registry.ts';
import { rawHead } from '../test/helpers/raw-http.ts';
import { assertLoopback, ensureWrk, median, rotationScript, spawnGateway, stopAll, wrk, type Proc, type WrkResult } from './gateway-harness.ts';

const CANON = 'https://registry.example.org/';

function packageName(i: number): string {
  return i % 5 === 0 ? `@bench/pkg-${i}` : `bench-pkg-${i}`;
}

async function buildChain(dir: string, reg: NpmRegistry, names: string[], version: string): Promise<void> {
  const signer = testSigner();
  let now = Date.UTC(2026, 0, 1);
  const authority = buildAuthorityBlock({ signer, backend: nodeBackend, now, uns: 'bench/chain' });
  const repo = await ChainRepo.init(
    dir,
    [{ index: 0, content: formatBlockFile(authority) }],
    formatCheckpointFile(buildCheckpoint({ head: authority, signer, now })),
    commitFor([authority], now),
  );
  const entries: EndorsementInput[] = names.map((name) => ({
    url: CANON + NpmRegistry.tarballPath(name, version).slice(1),
    artifactHash: artifactHashOf(nodeBackend, 'sha512', reg.tarball(name, version)),
    name: name.startsWith('@') ? name : `npm/${name}`,
    semver: version,
    license: 'MIT',
  }));
  now += 1000;
  const block: Block = buildEndorseBlock({ prev: authority, signer, backend: nodeBackend, now, entries, uns: 'bench/deps', semver: '1.0.0' });
  await appendSigned(repo, [block], buildCheckpoint({ head: block, signer, now }), now);
}

export async function runEcosystemBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const PACKAGES = quick ? 12 : 40;
  const VERSIONS = quick ? 20 : 60; // listed per package; only 1.0.0 is endorsed and packed
  const ROUNDS = quick ? 2 : 5;
  const SECONDS = quick ? 3 : 6;
  const load0 = loadavg()[0]!;
  const work = mkdtempSync(join(tmpdir(), 'vouch-bench-eco-'));
  const reg = await NpmRegistry.start(work);
  const gateways: Proc[] = [];
  try {
    ensureWrk();
    const names = Array.from({ length: PACKAGES }, (_, i) => packageName(i));
    process.stdout.write(`packing ${PACKAGES} packages with npm pack...\n`);
    for (const name of names) {
      await reg.publish(name, '1.0.0', { 'index.js': `module.exports = ${JSON.stringify(name)};\n` });
      // Older and newer versions listed with the same tarball: a packument of realistic length.
      for (let v = 1; v < VERSIONS; v++) reg.alias(name, `0.${v}.0`, '1.0.0');
    }
    const chainDir = join(work, 'chain');
    await buildChain(chainDir, reg, names, '1.0.0');
    const config = join(work, 'vouch.yaml');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        chain: { dir: chainDir },
        authority: null,
        proxy: { routes: [{ prefix: '/npm/', kind: 'npm', origin: `${reg.url}/`, canonical: CANON }] },
      }),
    );
    const startGateway = async () => {
      const g = await spawnGateway(`gateway-${gateways.length}`, config);
      gateways.push(g);
      assertLoopback(g.url);
      return g;
    };

    // ---- E1: whole npm install processes
    const project = (label: string) => {
      const dir = mkdtempSync(join(work, `${label}-`));
      writeFileSync(
        join(dir, 'package.json'),
        JSON.stringify({
          name: 'bench-app',
          version: '1.0.0',
          private: true,
          dependencies: Object.fromEntries(names.map((n) => [n, '^1.0.0'])),
        }),
      );
      return dir;
    };
    const install = async (registry: string, label: string): Promise<number> => {
      const dir = project(label);
      const env = cleanNpmEnv({
        NPM_CONFIG_USERCONFIG: join(dir, '.npmrc'),
        NPM_CONFIG_CACHE: join(dir, '.cache'),
        NPM_CONFIG_REGISTRY: registry,
        NPM_CONFIG_UPDATE_NOTIFIER: 'false',
        NPM_CONFIG_FUND: 'false',
        NPM_CONFIG_AUDIT: 'false',
      });
      const t0 = performance.now();
      const r = await runNpm(['install', '--no-audit', '--no-fund'], { cwd: dir, env, timeoutMs: 300_000 });
      const ms = performance.now() - t0;
      if (r.status !== 0) throw new Error(`npm install (${label}) failed:\n${r.stderr.slice(-2000)}`);
      rmSync(dir, { recursive: true, force: true });
      return ms;
    };
    const direct: number[] = [];
    const cold: number[] = [];
    const warm: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      process.stdout.write(`E1 round ${round + 1}/${ROUNDS}\n`);
      const g = await startGateway();
      const order = [
        async () => direct.push(await install(`${reg.url}/`, 'direct')),
        async () => {
          cold.push(await install(`${g.url}/npm/`, 'cold'));
          warm.push(await install(`${g.url}/npm/`, 'warm'));
        },
      ];
      if (round % 2 === 1) order.reverse();
      for (const step of order) await step();
      await g.stop();
    }

    // ---- E2: packument answers per second
    const g = await startGateway();
    const paths = names.map((n) => `/${n.replace('/', '%2f')}`);
    const headers = { accept: `${ABBREVIATED}; q=1.0, application/json; q=0.8, */*` };
    const gwRates: number[] = [];
    const regRates: number[] = [];
    const checked = (r: WrkResult, what: string) => {
      if (r.non2xx > 0 || r.socketErrors > 0) throw new Error(`bench: ${what} answered ${r.non2xx} non-2xx, ${r.socketErrors} socket errors`);
      return r.rps;
    };
    const withAccept = (script: string) => `wrk.headers["Accept"] = "${headers.accept}"\n${script}`;
    const gwScript = join(work, 'packuments-gateway.lua');
    const regScript = join(work, 'packuments-registry.lua');
    writeFileSync(gwScript, withAccept(rotationScript(paths.map((p) => `/npm${p}`))));
    writeFileSync(regScript, withAccept(rotationScript(paths)));
    for (let round = 0; round < ROUNDS; round++) {
      process.stdout.write(`E2 round ${round + 1}/${ROUNDS}\n`);
      const order = [
        async () => gwRates.push(checked(await wrk(g.url, { threads: 1, connections: 8, seconds: SECONDS, script: gwScript }), 'gateway')),
        async () => regRates.push(checked(await wrk(reg.url, { threads: 1, connections: 8, seconds: SECONDS, script: regScript }), 'registry')),
      ];
      if (round % 2 === 1) order.reverse();
      for (const step of order) await step();
    }
    // ---- E3: tarballs/s from the warm gateway (mirror hits): each answer carries the UNS header of the one 40-entry block
    const tarballs = names.map((n) => NpmRegistry.tarballPath(n, '1.0.0'));
    for (const t of tarballs) {
      const r = await fetch(`${g.url}/npm${t}`);
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`bench: warming ${t} answered ${r.status}`);
    }
    const head = (await rawHead(g.url, `/npm${tarballs[0]}`)).bytes;
    const tarGw: number[] = [];
    const tarReg: number[] = [];
    const tarGwScript = join(work, 'tarballs-gateway.lua');
    const tarRegScript = join(work, 'tarballs-registry.lua');
    writeFileSync(tarGwScript, rotationScript(tarballs.map((t) => `/npm${t}`)));
    writeFileSync(tarRegScript, rotationScript(tarballs));
    for (let round = 0; round < ROUNDS; round++) {
      process.stdout.write(`E3 round ${round + 1}/${ROUNDS}\n`);
      const order = [
        async () => tarGw.push(checked(await wrk(g.url, { threads: 1, connections: 8, seconds: SECONDS, script: tarGwScript }), 'gateway tarballs')),
        async () => tarReg.push(checked(await wrk(reg.url, { threads: 1, connections: 8, seconds: SECONDS, script: tarRegScript }), 'registry tarballs')),
      ];
      if (round % 2 === 1) order.reverse();
      for (const step of order) await step();
    }
    const load1 = loadavg()[0]!;
    const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    const rows = [
      `| Figure | Through the gateway | Straight at the registry (same runs) | Ratio (registry / gateway time, or gateway / registry rate) |`,
      `|---|---|---|---|`,
      `| E1. \`npm install\` of ${PACKAGES} packages (${Math.ceil(PACKAGES / 5)} scoped), fresh npm cache, cold gateway (new process: every packument and tarball fetched, verified) | ${fmt(median(cold))} (runs ${cold.map(fmt).join(', ')}) | ${fmt(median(direct))} (runs ${direct.map(fmt).join(', ')}) | **${(median(direct) / median(cold)).toFixed(2)}** |`,
      `| E1w. the same install again on the warm gateway (metadata cache and mirror filled) | ${fmt(median(warm))} (runs ${warm.map(fmt).join(', ')}) | ${fmt(median(direct))} | **${(median(direct) / median(warm)).toFixed(2)}** |`,
      `| E2. abbreviated packuments/s, ${PACKAGES} packages × ${VERSIONS} versions rotated (wrk -t1 -c8, ${SECONDS} s) | ${Math.round(median(gwRates))} /s (runs ${gwRates.map(Math.round).join(', ')}) | ${Math.round(median(regRates))} /s | **${(median(gwRates) / median(regRates)).toFixed(2)}** |`,
      `| E3. tarballs/s from the warm gateway (mirror hits), the ${PACKAGES} rotated (wrk -t1 -c8, ${SECONDS} s); the gateway's answer head: ${head} bytes | ${Math.round(median(tarGw))} /s (runs ${tarGw.map(Math.round).join(', ')}) | ${Math.round(median(tarReg))} /s | **${(median(tarGw) / median(tarReg)).toFixed(2)}** |`,
    ];
    const notes = [
      `Each E1 run is a whole \`npm install --no-audit --no-fund\` process (the npm that ships with Node, ${PACKAGES} direct dependencies, no lockfile, a fresh cache and project directory), ${ROUNDS} rounds, gateway and direct runs interleaved (order alternated per round); every round starts a new gateway process. The chain endorses each package's 1.0.0 tarball (sha512) under \`${CANON}\`; the ${VERSIONS - 1} other listed versions of each are unendorsed and removed from the packuments by the gateway.`,
      `E2: the registry builds each packument per request; the gateway reads the registry's answer from its metadata cache (default \`metadata_ttl\` 60 s), rewrites it against the chain (versions filtered, tarball links and integrity replaced) once per origin body, chain state and client form, and serves that answer to every request until one of them changes, logging each request at \`info\` (the default).`,
      `E3: the ${PACKAGES} endorsements are one block (as \`vouch endorse --lockfile\` made them before it packed blocks to fit a header); every tarball answer carries its \`UNS\` header, \`Vouch-Proof\` and \`VIBECODE\` (the head size is of one answer, status line to the empty line). The registry serves the tarballs from memory.`,
      `Load average (1 min): ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end.`,
    ];
    return { title: 'Package managers through an npm ecosystem route (issue 13)', markdown: `${rows.join('\n')}\n\n${notes.join('\n')}\n` };
  } finally {
    for (const g of gateways) await g.stop().catch(() => {});
    await stopAll();
    await reg.close();
    rmSync(work, { recursive: true, force: true });
  }
}
