/**
 * `VOUCH_BENCH_ORIGIN_COMPARE=1 npm run bench -- gateway [--quick]` (issue 33
 * item 2): the origin rows of the gateway bench (2, 2′, 2r, 2rc, 4) with each
 * origin client of bench/origin-clients/serve.ts side by side in one run:
 * artifacts/h1 (shipped), undici 7 and node:http; every gateway from the
 * sources, same config, interleaved wrk runs, medians. Also the framing
 * matrix (bench/origin-clients/framing.ts): which hostile answers each
 * client refuses. Figures are printed and written by the runner.
 */
import { cpSync, mkdirSync, mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Encode } from '../chain/encoding.ts';
import { createKeyFile } from '../platform/key-file.ts';
import { privateKeyFromSeed } from '../platform/node-crypto.ts';
import { TEST_SEED, testSigner } from '../test/helpers/chain-fixture.ts';
import { writeConfig } from '../test/helpers/gateway-process.ts';
import { digestOf, pattern } from '../test/helpers/origin-server.ts';
import { benchChainDir } from './chain-dir.ts';
import {
  download,
  ensureWrk,
  median,
  memoryOf,
  root,
  rotationScript,
  sleep,
  spawnGateway,
  spawnNode,
  spawnServer,
  stopAll,
  wrk,
  type Proc,
  type WrkResult,
} from './gateway-harness.ts';
import { BAD_FRAMING, framingOutcomes } from './origin-clients/framing.ts';
import { ORIGIN_CLIENTS } from './origin-clients/serve.ts';

const MiB = 1024 * 1024;
const ARTIFACT = 16 * MiB;
const COLD_ARTIFACTS = 24;
const CLIENTS = ['h1', 'undici', 'node-http'] as const;
const fmt = (x: number, d = 1) => x.toFixed(d);
const ok = (pass: boolean) => (pass ? '✅' : '❌');

function spawnWith(client: string, name: string, config: string, env: Record<string, string>): Promise<Proc> {
  return spawnNode(`${name} [${client}]`, ['--import', 'tsx', join(root, 'bench', 'origin-clients', 'serve.ts'), client, config], {
    waitFor: /^ready: .*$/m,
    env,
    timeoutMs: 600_000,
  });
}

async function interleave(
  targets: { name: string; url: string; script: string; offset?: number }[],
  load: { threads: number; connections: number },
  p: { runs: number; seconds: number; warmupSeconds: number },
): Promise<Record<string, WrkResult[]>> {
  const results: Record<string, WrkResult[]> = Object.fromEntries(targets.map((t) => [t.name, []]));
  const offsets = new Map(targets.map((t) => [t.name, t.offset ?? 0]));
  const once = async (t: (typeof targets)[number], seconds: number) => {
    const r = await wrk(t.url, { ...load, seconds, script: t.script, offset: offsets.get(t.name)! });
    offsets.set(t.name, r.nextOffset);
    return r;
  };
  for (const t of targets) await once(t, p.warmupSeconds);
  for (let r = 0; r < p.runs; r++) {
    for (const t of targets.map((_, i) => targets[(i + r) % targets.length]!)) {
      const res = await once(t, p.seconds);
      results[t.name]!.push(res);
      console.log(`  run ${r + 1} ${t.name}: ${fmt((res.rps * ARTIFACT) / MiB)} MiB/s`);
    }
  }
  return results;
}

export async function runOriginCompare(quick: boolean): Promise<{ title: string; markdown: string; key: string }> {
  const p = quick
    ? { chainBlocks: 5_000, runs: 2, seconds: 3, warmupSeconds: 3, bigBytes: 256 * MiB, bigRuns: 1 }
    : { chainBlocks: 50_000, runs: 7, seconds: 6, warmupSeconds: 2, bigBytes: 1024 * MiB, bigRuns: 3 };
  ensureWrk();
  const loadBefore = loadavg()[0]!;
  const work = mkdtempSync(join(tmpdir(), 'vouch-origin-compare-'));
  const childTmp = join(work, 'tmp');
  mkdirSync(childTmp);
  const gwEnv = { TMPDIR: childTmp }; // default logging, as the gateway bench
  const rows: string[] = [];
  const notes: string[] = [];
  try {
    // The framing matrix first: a client that lets a case through is named in the table.
    const framing: Record<string, Record<string, string>> = {};
    for (const c of CLIENTS) framing[c] = await framingOutcomes(ORIGIN_CLIENTS[c]);
    const through = (c: string) => Object.keys(BAD_FRAMING).filter((k) => !framing[c]![k]!.startsWith('refused'));
    const goodRefused = (c: string) => Object.keys(framing[c]!).filter((k) => k.startsWith('/good') && framing[c]![k]!.startsWith('refused'));

    const routes: Record<string, { size: number; seed: number }> = {};
    for (let i = 1; i <= COLD_ARTIFACTS; i++) routes[`/a/${i}.bin`] = { size: ARTIFACT, seed: i };
    const s = statfsSync(childTmp);
    const bigFits = s.bavail * s.bsize > p.bigBytes + 512 * MiB;
    if (bigFits) routes['/big.bin'] = { size: p.bigBytes, seed: 1000 };
    const origin = await spawnServer('origin', ['origin', JSON.stringify(routes)]);
    const url = (path: string) => origin.url + path;

    // The artifacts endorsed on a copy of the long chain (rows 2r, 2rc) and on a chain of their own (rows 2, 2′, 4).
    const token = 'bench-token-' + 'x'.repeat(32);
    const tokenFile = join(work, 'submit.token');
    writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
    const block = {
      uns: 'bench/artifacts',
      semver: '1.0.0',
      endorsements: Object.keys(routes)
        .filter((r) => r !== '/big.bin')
        .map((path) => ({ url: url(path), name: 'bench/artifacts', semver: '1.0.0', license: 'MIT' })),
    };
    const submitAll = async (cfg: string, bodies: unknown[]) => {
      const a = await spawnGateway('authority', cfg, gwEnv);
      for (const body of bodies) {
        const res = await fetch(a.url + '/v1/submit', {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        if (res.status !== 201) throw new Error(`bench: submit answered ${res.status}: ${await res.text()}`);
      }
      await a.stop();
    };
    const keyFile = join(work, 'authority.pem');
    const pub = createKeyFile(keyFile).publicKeyB64;
    const small = { listen: { port: 0 }, chain: { dir: join(work, 'chain'), public_key: pub }, origin: { timeout: 600 } };
    await submitAll(
      writeConfig(
        work,
        { ...small, authority: { key_file: keyFile, signer: 'bench-authority', submit_token_file: tokenFile }, origin: { timeout: 600, allow_private: true } },
        'auth.yaml',
      ),
      [block, ...(bigFits ? [{ url: url('/big.bin'), name: 'bench/big', semver: '1.0.0', license: 'MIT' }] : [])],
    );
    const longChain = join(work, 'long-chain');
    cpSync(await benchChainDir(p.chainBlocks), longChain, { recursive: true });
    const testKey = join(work, 'test-authority.pem');
    writeFileSync(testKey, privateKeyFromSeed(TEST_SEED).export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    const long = { listen: { port: 0 }, chain: { dir: longChain, public_key: base64Encode(testSigner().publicKey) }, origin: { timeout: 600 } };
    await submitAll(
      writeConfig(
        work,
        { ...long, authority: { key_file: testKey, signer: testSigner().id, submit_token_file: tokenFile }, origin: { timeout: 600, allow_private: true } },
        'long-auth.yaml',
      ),
      [block],
    );

    const coldPaths = Array.from({ length: COLD_ARTIFACTS }, (_, i) => `/a/${i + 1}.bin`);
    const dl = (path: string) => `/v1/download?url=${encodeURIComponent(url(path))}`;
    const check = async (what: string, u: string) => {
      const r = await download(u);
      if (r.status !== 200 || r.bytes !== ARTIFACT || r.sha256 !== digestOf(pattern(ARTIFACT, 1)))
        throw new Error(`bench: ${what}: status ${r.status}, ${r.bytes} bytes`);
    };
    const coldDirect = join(work, 'cold-direct.lua');
    const coldGw = join(work, 'cold-gateway.lua');
    writeFileSync(coldDirect, rotationScript(coldPaths));
    writeFileSync(coldGw, rotationScript(coldPaths.map(dl)));
    const proxy = await spawnServer('proxy', ['proxy', origin.url]);
    const mibps = (r: WrkResult) => (r.rps * ARTIFACT) / MiB;
    const one = { threads: 1, connections: 1 };
    const four = { threads: 1, connections: 4 };
    const ratioRange = (a: WrkResult[], b: WrkResult[]) => {
      const xs = a.map((x, i) => mibps(x) / mibps(b[i]!));
      return `${fmt(Math.min(...xs), 2)}–${fmt(Math.max(...xs), 2)}`;
    };
    const rowOf = (label: string, target: number, rs: Record<string, WrkResult[]>, base: string) => {
      const b = med(rs[base]!);
      for (const c of CLIENTS) {
        const g = med(rs[c]!);
        rows.push(
          `| ${label} | ${c} | ${fmt(g)} MiB/s | ${fmt(b)} MiB/s | **${fmt(g / b, 2)}** (runs ${ratioRange(rs[c]!, rs[base]!)}) | ≥ ${target} | ${ok(g / b >= target)} |`,
        );
      }
    };
    const med = (rs: WrkResult[]) => median(rs.map(mibps));

    // Rows 2 and 2′: the artifacts' own chain, default mirror and memory_bytes 0.
    for (const [row, mirror] of [
      ['2. cold verified download, 16 MiB, default mirror', {}],
      ['2′. the same, `mirror.memory_bytes: 0` (spooled)', { memory_bytes: 0 }],
    ] as const) {
      const cfg = writeConfig(
        work,
        { ...small, ...(Object.keys(mirror).length ? { mirror } : {}) },
        `small-${row.startsWith('2′') ? 'spool' : 'default'}.yaml`,
      );
      const gws: Record<string, Proc> = {};
      for (const c of CLIENTS) {
        gws[c] = await spawnWith(c, row.slice(0, 2), cfg, gwEnv);
        await check(c, gws[c]!.url + dl(coldPaths[0]!));
      }
      console.log(`row ${row.slice(0, 2)}: proxy vs ${CLIENTS.join(' vs ')}, ${p.runs} runs...`);
      const rs = await interleave(
        [{ name: 'proxy', url: proxy.url, script: coldDirect }, ...CLIENTS.map((c) => ({ name: c, url: gws[c]!.url, script: coldGw, offset: 1 }))],
        one,
        p,
      );
      rowOf(row, 0.7, rs, 'proxy');
      await Promise.all(Object.values(gws).map((g) => g.stop()));
    }
    // Rows 2r and 2rc: the long chain.
    const longCfg = writeConfig(work, long, 'long.yaml');
    const gws: Record<string, Proc> = {};
    for (const c of CLIENTS) {
      gws[c] = await spawnWith(c, '2r', longCfg, gwEnv);
      await check(c, gws[c]!.url + dl(coldPaths[0]!));
    }
    for (const [row, load] of [
      [`2r. row 2 through a gateway on the ${p.chainBlocks.toLocaleString('en')}-block chain`, one],
      ['2rc. row 2r with 4 concurrent clients', four],
    ] as const) {
      console.log(`row ${row.slice(0, 3)}: proxy vs ${CLIENTS.join(' vs ')}, ${p.runs} runs...`);
      const rs = await interleave(
        [{ name: 'proxy', url: proxy.url, script: coldDirect }, ...CLIENTS.map((c) => ({ name: c, url: gws[c]!.url, script: coldGw, offset: 1 }))],
        load,
        p,
      );
      rowOf(row, 0.7, rs, 'proxy');
    }
    await Promise.all([...Object.values(gws).map((g) => g.stop()), proxy.stop()]);

    // Row 4: peak RSS over one big download, fresh gateways, the clients' order rotated.
    if (bigFits) {
      const big: Record<string, number[]> = Object.fromEntries(CLIENTS.map((c) => [c, []]));
      const cfg = writeConfig(work, small, 'big.yaml');
      for (let r = 0; r < p.bigRuns; r++) {
        for (const c of CLIENTS.map((_, i) => CLIENTS[(i + r) % CLIENTS.length]!)) {
          const g = await spawnWith(c, 'big', cfg, gwEnv);
          await sleep(1000);
          const idle = memoryOf(g.pid).rss;
          let peak = idle;
          const sampler = setInterval(() => {
            try {
              peak = Math.max(peak, memoryOf(g.pid).rss);
            } catch {
              /* gone */
            }
          }, 20);
          const res = await download(g.url + dl('/big.bin')).finally(() => clearInterval(sampler));
          peak = Math.max(peak, memoryOf(g.pid).hwm);
          await g.stop();
          if (res.status !== 200 || res.bytes !== p.bigBytes || res.sha256 !== digestOf(pattern(p.bigBytes, 1000)))
            throw new Error(`bench: big download via ${c}: ${res.status}`);
          big[c]!.push((peak - idle) / MiB);
          console.log(`  ${c}: ${fmt((peak - idle) / MiB)} MiB above idle, ${fmt(res.ms / 1000, 1)} s`);
        }
      }
      const label = p.bigBytes >= 1024 * MiB ? `${p.bigBytes / (1024 * MiB)} GiB` : `${p.bigBytes / MiB} MiB`;
      for (const c of CLIENTS) {
        const d = median(big[c]!);
        rows.push(
          `| 4. peak RSS above idle serving one ${label} artifact (median of ${p.bigRuns} fresh gateways: ${big[c]!.map((x) => fmt(x)).join(', ')}) | ${c} | **${fmt(d)} MiB** | | | ≤ 150 MiB | ${ok(d <= 150)} |`,
        );
      }
    }
    await origin.stop();

    const bad = Object.keys(BAD_FRAMING).length;
    for (const c of CLIENTS) {
      const t = through(c);
      const g = goodRefused(c);
      rows.push(
        `| framing: hostile answers refused (bench/origin-clients/framing.ts) | ${c} | **${bad - t.length} of ${bad}**${t.length ? `; let through: ${t.map((x) => `\`${x}\``).join(', ')}` : ''}${g.length ? `; well-formed refused: ${g.map((x) => `\`${x}\``).join(', ')}` : ''} | | | all | ${ok(t.length === 0 && g.length === 0)} |`,
      );
    }
    notes.push(
      `Every gateway runs from the sources (\`node --import tsx bench/origin-clients/serve.ts CLIENT CONFIG\`), default configuration and logging; only the origin fetcher's client differs. wrk \`-t1 -c1\` (rows 2, 2′, 2r) and \`-t1 -c4\` (2rc), ${p.seconds} s per run after a ${p.warmupSeconds} s warm-up per target, ${p.runs} runs per target interleaved (order rotated each run); value = median, ratio = median / median of the unverified proxy in the same rounds, "runs" = range of per-run ratios.`,
      `Load average (1 min) of the machine: ${fmt(loadBefore, 2)} at the start, ${fmt(loadavg()[0]!, 2)} at the end (2 cores; anything above ~0.1 is other work sharing them).`,
    );
    if (quick) notes.push('**--quick**: short runs on a small chain; a smoke test, not the figures.');
  } finally {
    await stopAll();
    rmSync(work, { recursive: true, force: true });
  }
  const markdown = ['| Row | Client | Value | Proxy (same runs) | Ratio | Target | |', '|---|---|---|---|---|---|---|', ...rows, '', ...notes].join('\n');
  return { title: 'Gateway: origin clients side by side (issue 33 item 2)', markdown, key: 'gateway-origin-clients' };
}
