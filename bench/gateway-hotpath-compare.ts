/**
 * `VOUCH_BENCH_HOTPATH_COMPARE=1 npm run bench -- gateway [--quick]` (issue 33
 * item 5): row 1 of the gateway bench (lookups on the 50,000-block chain,
 * default logging into a file) with each hand-written hot-path part and its
 * alternative side by side in one run: lru-cache vs the CLOCK cache,
 * batched answers vs one write each, the log sink vs pino.destination
 * (sonic-boom, async and sync). Every gateway from the sources
 * (bench/origin-clients/serve.ts), interleaved wrk runs against bare
 * node:http, medians. Figures are printed and written by the runner.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Encode } from '../chain/encoding.ts';
import { testSigner } from '../test/helpers/chain-fixture.ts';
import { writeConfig } from '../test/helpers/gateway-process.ts';
import { blockTexts } from './block-texts.ts';
import { benchChainDir } from './chain-dir.ts';
import {
  countInFile,
  ensureWrk,
  median,
  root,
  rotationScript,
  spawnGateway,
  spawnNode,
  spawnServer,
  stopAll,
  waitIdle,
  wrk,
  type Proc,
  type WrkResult,
} from './gateway-harness.ts';

const fmt = (x: number, d = 1) => x.toFixed(d);
const int = (x: number) => Math.round(x).toLocaleString('en');

/** Each variant: the parts given to serve.ts, and what it stands for. */
const VARIANTS: { name: string; parts: string[]; what: string }[] = [
  { name: 'today', parts: [], what: 'today: lru-cache, the answers of a turn written together, the log sink' },
  { name: 'clock', parts: ['cache=clock'], what: 'the CLOCK cache lru-cache replaced (bench/hot-path/clock-cache.ts)' },
  {
    name: 'unbatched',
    parts: ['batch=off'],
    what: 'each answer written when made, instead of the answers of a turn together (gateway/http/answer-batch.ts; the default from 2026-11-29 to 2026-11-30)',
  },
  {
    name: 'pino-async',
    parts: ['sink=pino-async'],
    what: 'pino.destination({ sync: false, minLength: 4096 }) (its documented async form) instead of the log sink',
  },
  { name: 'pino-sync', parts: ['sink=pino-sync'], what: 'pino.destination({ sync: true }) (its default) instead of the log sink' },
  { name: 'today-2', parts: [], what: 'a second gateway as `today`, started last: the spread between two equal gateways' },
];

export async function runHotPathCompare(quick: boolean): Promise<{ title: string; markdown: string; key: string }> {
  const p = quick
    ? { chainBlocks: 5_000, lookupUrls: 2_000, runs: 2, seconds: 3, warmupSeconds: 2 }
    : { chainBlocks: 50_000, lookupUrls: 10_000, runs: 7, seconds: 6, warmupSeconds: 2 };
  const load = { threads: 2, connections: 32 };
  ensureWrk();
  const loadBefore = loadavg()[0]!;
  const work = mkdtempSync(join(tmpdir(), 'vouch-hotpath-compare-'));
  const childTmp = join(work, 'tmp');
  mkdirSync(childTmp);
  const rows: string[] = [];
  const notes: string[] = [];
  try {
    const chainDir = await benchChainDir(p.chainBlocks);
    const cfg = writeConfig(work, { listen: { port: 0 }, chain: { dir: chainDir, public_key: base64Encode(testSigner().publicKey) } }, 'lookup.yaml');
    // A first start writes the snapshot: every measured gateway then starts warm, as row 1's does.
    await (await spawnGateway('gateway (snapshot)', cfg, { TMPDIR: childTmp })).stop();
    const gws: Record<string, Proc> = {};
    for (const v of VARIANTS) {
      // Default logging (level info) into a file, as the gateway bench's row 1.
      gws[v.name] = await spawnNode(`gateway (${v.name})`, ['--import', 'tsx', join(root, 'bench', 'origin-clients', 'serve.ts'), 'h1', cfg, ...v.parts], {
        waitFor: /^ready: .*$/m,
        env: { TMPDIR: childTmp },
        timeoutMs: 600_000,
        stderrFile: join(work, `${v.name}.log`),
      });
    }
    for (const g of Object.values(gws)) if (!/\(warm start/.test(g.match[0])) throw new Error(`bench: ${g.name} did not start warm: ${g.match[0]}`);
    for (const g of Object.values(gws)) if (!(await waitIdle(g.pid))) notes.push(`${g.name} was still busy 120 s after its start; measured anyway.`);
    const N = p.chainBlocks;
    const paths = blockTexts(
      chainDir,
      Array.from({ length: p.lookupUrls }, (_, k) => 1 + Math.floor((k * (N - 1)) / p.lookupUrls)),
    ).map(
      (t) =>
        `/v1/endorsement?url=${encodeURIComponent((JSON.parse(t) as { payload: { endorsements: { artifact_url: string }[] } }).payload.endorsements[0]!.artifact_url)}`,
    );
    const samples: { text: string; etag: string }[] = [];
    for (const path of paths.filter((_, k) => k % 40 === 0)) {
      for (const g of Object.values(gws)) {
        const res = await fetch(g.url + path);
        const text = await res.text();
        if (res.status !== 200) throw new Error(`bench: ${g.name} ${path}: ${res.status}`);
        if (g === gws.today) samples.push({ text, etag: res.headers.get('etag')! });
      }
    }
    samples.sort((a, b) => a.text.length - b.text.length);
    const typical = samples[Math.floor(samples.length / 2)]!;
    const bodyFile = join(work, 'body.json');
    writeFileSync(bodyFile, typical.text);
    const bare = await spawnServer('bare node:http', ['bare', bodyFile, typical.etag]);
    const script = join(work, 'lookups.lua');
    writeFileSync(script, rotationScript(paths));
    const targets = [{ name: 'bare', url: bare.url }, ...VARIANTS.map((v) => ({ name: v.name, url: gws[v.name]!.url }))];
    const results: Record<string, WrkResult[]> = Object.fromEntries(targets.map((t) => [t.name, []]));
    const offsets = new Map(targets.map((t) => [t.name, 0]));
    const once = async (t: (typeof targets)[number], seconds: number) => {
      const r = await wrk(t.url, { ...load, seconds, script, offset: offsets.get(t.name)! });
      offsets.set(t.name, r.nextOffset);
      return r;
    };
    console.log(`lookups over ${int(p.lookupUrls)} URLs on ${int(N)} blocks: bare vs ${VARIANTS.map((v) => v.name).join(' vs ')}, ${p.runs} runs...`);
    for (const t of targets) await once(t, p.warmupSeconds);
    for (let r = 0; r < p.runs; r++) {
      for (const t of targets.map((_, i) => targets[(i + r) % targets.length]!)) {
        const res = await once(t, p.seconds);
        results[t.name]!.push(res);
        console.log(`  run ${r + 1} ${t.name}: ${int(res.rps)} req/s, p50 ${fmt(res.p50Ms, 2)} ms, p99 ${fmt(res.p99Ms, 2)} ms`);
      }
    }
    await Promise.all([bare.stop(), ...Object.values(gws).map((g) => g.stop())]);
    for (const v of VARIANTS) {
      const lines = countInFile(join(work, `${v.name}.log`), '"msg":"request"');
      const asked = results[v.name]!.reduce((n, r) => n + r.requests, 0);
      if (lines < asked) throw new Error(`bench: ${v.name}: ${asked}+ lookups measured but only ${lines} request lines logged`);
    }
    const rps = (name: string) => median(results[name]!.map((r) => r.rps));
    const b = rps('bare');
    const t = rps('today');
    for (const v of VARIANTS) {
      const g = rps(v.name);
      const range = results[v.name]!.map((x, i) => x.rps / results.bare![i]!.rps);
      const vsToday = results[v.name]!.map((x, i) => x.rps / results.today![i]!.rps);
      rows.push(
        `| 1 (${v.name}). ${v.what} | ${int(g)} /s (p50 ${fmt(median(results[v.name]!.map((r) => r.p50Ms)), 2)} ms, p99 ${fmt(median(results[v.name]!.map((r) => r.p99Ms)), 2)} ms) | ${int(b)} /s | **${fmt(g / b, 2)}** (runs ${fmt(Math.min(...range), 2)}–${fmt(Math.max(...range), 2)}) | ${v.name === 'today' ? '1' : `**${fmt(g / t, 2)}** (runs ${fmt(Math.min(...vsToday), 2)}–${fmt(Math.max(...vsToday), 2)})`} | ≥ 0.8 | ${g / b >= 0.8 ? '✅' : '❌'} |`,
      );
    }
    notes.push(
      `Row 1 of the gateway bench, each variant its own gateway process on the same ${int(N)}-block chain, run from the sources (\`bench/origin-clients/serve.ts h1 CONFIG PART\`), default configuration and logging (level info, a JSON line per request, stderr appended to a file; every measured lookup's line was checked in each file). wrk \`-t${load.threads} -c${load.connections}\`, ${int(p.lookupUrls)} distinct URLs rotated, ${p.seconds} s per run after a ${p.warmupSeconds} s warm-up per target, ${p.runs} runs per target interleaved (order rotated each run); value = median; "vs today" = median ratio to the \`today\` gateway in the same rounds, with the range of per-round ratios.`,
      `Load average (1 min) of the machine: ${fmt(loadBefore, 2)} at the start, ${fmt(loadavg()[0]!, 2)} at the end (2 cores; anything above ~0.1 is other work sharing them).`,
    );
    if (quick) notes.push('**--quick**: short runs on a small chain; a smoke test, not the figures.');
  } finally {
    await stopAll();
    rmSync(work, { recursive: true, force: true });
  }
  const markdown = [
    '| Row | Value | Bare node:http (same rounds) | Ratio to bare | vs today | Target | |',
    '|---|---|---|---|---|---|---|',
    ...rows,
    '',
    ...notes,
  ].join('\n');
  return { title: 'Gateway: hot-path parts side by side (issue 33 item 5)', markdown, key: 'gateway-hot-path' };
}
