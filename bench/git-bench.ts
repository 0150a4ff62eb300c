/**
 * `npm run bench -- git [--quick] [--sizes=A,B] [--runs=N] [--rows=cold,lookups]`
 * (issue 33, "Stock git, measured side by side"): the store's reads by the
 * hand-written pack reader (store/git-pack.ts) and by stock git
 * (store/git-cat-file.ts), in one run, on the sparse chain packed by vouch
 * and the same chain repacked by git (bench/scale/chains.ts
 * `gitPackedSource`: block blobs as deltas, as a clone holds them).
 * Rows, each side by side (`VOUCH_PACK_READER=vouch|git`, interleaved):
 * reads (block order; 20,000 random), verify (blocks/s vs raw ed25519 x
 * cores, and CPU time vs raw CPU), cold start (and its ratio to verify),
 * lookups (random URLs vs bare node:http, wrk). `--rows=` names which of
 * cold and lookups run. Whole processes on 127.0.0.1, link copies under
 * bench/out/scale-tmp.
 */
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { mkdirSync, readFileSync } from 'node:fs';
import { base64Encode } from '../chain/encoding.ts';
import { buildLongChain, testSigner } from '../test/helpers/chain-fixture.ts';
import { median, root, stopAll } from './gateway-harness.ts';
import { rawVerifyRate, signedMessages } from './raw-verify.ts';
import { chainFor, gitPackedFacts, gitPackedSource, linkCopy, removeTree, scaleTmp, sparseSource } from './scale/chains.ts';
import { coldStart, lookups, withGateway, type LookupFigures } from './scale/gateway-rows.ts';
import { killAll, say, timed } from './scale/procs.ts';
import { measureReads, type ReadFigures } from './git-reads.ts';

const MIN = 60_000;
const READERS = ['vouch', 'git'] as const;
type Reader = (typeof READERS)[number];

interface Side {
  verify: { rate: number; ratio: number; wallMs: number; cpuRatio: number; cpuS: number }[];
  cold: number[];
  lookups?: LookupFigures;
}
interface ChainFigures {
  name: string;
  n: number;
  reads: ReadFigures;
  sides: Record<Reader, Side>;
  failed: string[];
}

const flag = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

async function measureChain(
  name: string,
  src: string,
  n: number,
  runs: number,
  quick: boolean,
  tmp: string,
  withCold: boolean,
  withLookups: boolean,
): Promise<ChainFigures> {
  const ro = join(tmp, `git-${name}-${n}`);
  const work = join(tmp, `git-work-${name}-${n}`);
  await removeTree(work);
  mkdirSync(work, { recursive: true });
  say(`=== ${name}, ${n.toLocaleString('en')} blocks: link copy of ${src}`);
  await linkCopy(src, ro);
  const f: ChainFigures = {
    name,
    n,
    reads: await measureReads(ro, quick ? 5_000 : 20_000),
    sides: { vouch: { verify: [], cold: [] }, git: { verify: [], cold: [] } },
    failed: [],
  };
  say(`  store reads: ${JSON.stringify(f.reads)}`);
  const { blocks: sample, signer } = buildLongChain(Math.min(n, 20_001));
  const msgs = signedMessages(sample);
  const cores = availableParallelism();
  const setup = { dir: ro, blocks: n, publicKey: base64Encode(testSigner().publicKey), work, startTimeoutMs: Math.max(10 * MIN, (n / 1_000_000) * 40 * MIN) };
  const before = process.env.VOUCH_PACK_READER;
  try {
    for (let r = 0; r < runs; r++) {
      for (const reader of r % 2 === 0 ? READERS : [...READERS].reverse()) {
        process.env.VOUCH_PACK_READER = reader;
        const cpu0 = process.cpuUsage();
        const w0 = performance.now();
        const raw = rawVerifyRate(signer, msgs);
        const c0 = process.cpuUsage(cpu0);
        // CPU µs a raw verify costs (one thread): steadier than a rate on shared, loaded cores.
        const rawCpuUs = (c0.user + c0.system) / (raw * ((performance.now() - w0) / 1000));
        const cpuFile = join(work, 'verify.time');
        const v = await timed(
          '/usr/bin/time',
          ['-f', '%U %S', '-o', cpuFile, process.execPath, join(root, 'tools', 'vouch.js'), 'verify', '--chain', ro, '--json'],
          { timeoutMs: 60 * MIN },
        );
        const [u, sy] = readFileSync(cpuFile, 'utf8').trim().split('\n').pop()!.split(' ').map(Number);
        const cpuS = u! + sy!; // the vouch process, its worker threads and the git processes it started
        const res = JSON.parse(v.stdout) as { blocks: number; blocks_per_second: number };
        if (res.blocks !== n) throw new Error(`bench: vouch verify saw ${res.blocks} blocks, not ${n}`);
        const cpuRatio = (rawCpuUs * (n - 1)) / (cpuS * 1e6);
        f.sides[reader].verify.push({ rate: res.blocks_per_second, ratio: res.blocks_per_second / (raw * cores), wallMs: v.ms, cpuRatio, cpuS });
        say(
          `  [${reader}] verify ${res.blocks_per_second}/s, ratio ${(res.blocks_per_second / (raw * cores)).toFixed(2)} (raw ${Math.round(raw)}/s × ${cores}), ${(v.ms / 1000).toFixed(1)} s; CPU ${cpuS.toFixed(1)} s, CPU ratio ${cpuRatio.toFixed(2)} (raw ${rawCpuUs.toFixed(0)} µs CPU a verify)`,
        );
        if (withCold) f.sides[reader].cold.push((await coldStart(setup)).ms);
      }
    }
    for (const reader of withLookups ? READERS : []) {
      process.env.VOUCH_PACK_READER = reader;
      try {
        f.sides[reader].lookups = await withGateway(setup, (g) =>
          lookups(setup, g, quick ? { urls: 10_000, runs: 2, seconds: 3, warmup: 1 } : { urls: 20_000, runs: 3, seconds: 5, warmup: 2 }),
        );
      } catch (e) {
        f.failed.push(`lookups [${reader}]: ${(e as Error).message.split('\n')[0]}`);
      }
    }
  } finally {
    if (before === undefined) delete process.env.VOUCH_PACK_READER;
    else process.env.VOUCH_PACK_READER = before;
    await removeTree(ro);
    await removeTree(work);
  }
  return f;
}

const int = (x: number) => Math.round(x).toLocaleString('en');
const sec = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const label = (n: number) => (n >= 1_000_000 ? `${n / 1_000_000}M` : `${n / 1000}k`);

function table(all: ChainFigures[]): string {
  const lines = [
    '| Chain | Row | hand-written (`VOUCH_PACK_READER=vouch`) | stock git (`VOUCH_PACK_READER=git`, the default) | Target |',
    '|---|---|---|---|---|',
  ];
  for (const f of all) {
    const c = `${f.name}, ${label(f.n)}`;
    const r = f.reads;
    lines.push(
      `| ${c} | store: every block blob in block order, objects/s | DiskPacks ${int(r.sweep.disk)}/s | cat-file --batch (pipelined 32) ${int(r.sweep.catFile)}/s; --batch-all-objects --unordered ${int(r.sweep.allObjects)}/s (${int(r.sweep.allObjectsCount)} objects) | — |`,
    );
    lines.push(
      `| ${c} | store: ${int(r.random.n)} random block blobs, objects/s | DiskPacks ${int(r.random.disk)}/s | cat-file --batch ${int(r.random.catFile1)}/s one at a time, ${int(r.random.catFileDepth)}/s pipelined ${r.random.depth} | — |`,
    );
    const v = (s: Side) =>
      s.verify.length
        ? `${int(median(s.verify.map((x) => x.rate)))}/s, **${median(s.verify.map((x) => x.ratio)).toFixed(2)}** (runs ${s.verify.map((x) => x.ratio.toFixed(2)).join(', ')})`
        : 'not measured';
    lines.push(`| ${c} | \`vouch verify\`: blocks/s, ratio to raw × cores (wall) | ${v(f.sides.vouch)} | ${v(f.sides.git)} | ≥ 0.75 |`);
    const vc = (s: Side) =>
      s.verify.length
        ? `${median(s.verify.map((x) => x.cpuS)).toFixed(1)} s CPU, **${median(s.verify.map((x) => x.cpuRatio)).toFixed(2)}** (runs ${s.verify.map((x) => x.cpuRatio.toFixed(2)).join(', ')})`
        : 'not measured';
    lines.push(
      `| ${c} | \`vouch verify\`: CPU (process, workers, git), ratio raw CPU a verify × blocks / that | ${vc(f.sides.vouch)} | ${vc(f.sides.git)} | (≥ 0.75 on idle cores) |`,
    );
    if (!f.sides.vouch.cold.length && !f.sides.git.cold.length) {
      /* not asked */
    } else {
      const cold = (s: Side) =>
        s.cold.length
          ? `${sec(median(s.cold))}, **${(median(s.cold) / median(s.verify.map((x) => x.wallMs))).toFixed(2)} × verify** (runs ${s.cold.map(sec).join(', ')})`
          : 'not measured';
      lines.push(`| ${c} | cold start to ready | ${cold(f.sides.vouch)} | ${cold(f.sides.git)} | ≤ 1.2 × verify |`);
    }
    const lk = (s: Side) =>
      s.lookups
        ? `${int(s.lookups.gateway)}/s vs bare ${int(s.lookups.bare)}/s: **${s.lookups.ratio.toFixed(2)}** (runs ${s.lookups.range.map((x) => x.toFixed(2)).join('–')}; ${int(s.lookups.urls)} URLs)`
        : 'not measured';
    if (f.sides.vouch.lookups || f.sides.git.lookups)
      lines.push(`| ${c} | lookups/s, random URLs of the whole chain vs bare node:http | ${lk(f.sides.vouch)} | ${lk(f.sides.git)} | ≥ 0.5 × bare |`);
  }
  return lines.join('\n');
}

export async function runGitBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const sizes = flag('sizes')?.split(',').map(Number) ?? (quick ? [5_000] : [50_000]);
  const runs = Number(flag('runs') ?? (quick ? 1 : 3));
  const rows = new Set(flag('rows')?.split(',') ?? ['cold', 'lookups']);
  const load0 = loadavg()[0]!;
  const t0 = performance.now();
  const tmp = scaleTmp();
  const all: ChainFigures[] = [];
  try {
    for (const n of sizes) {
      const sparse = await sparseSource(await chainFor(n), n);
      const git = await gitPackedSource(sparse, n);
      all.push(await measureChain('packed by git', git, n, runs, quick, tmp, rows.has('cold'), rows.has('lookups')));
      all.push(await measureChain('packed by vouch', sparse, n, runs, quick, tmp, rows.has('cold'), rows.has('lookups')));
    }
  } finally {
    killAll();
    await stopAll();
  }
  const notes = [
    'Sparse layout. "hand-written": today\'s reads, `VOUCH_PACK_READER=vouch` (store/git-pack.ts DiskPacks resolves each delta base by base; whole objects through PackWindow). "stock git": `VOUCH_PACK_READER=git`, the default: the verify workers read whole objects through PackWindow as before and hand the blocks their pack stores as deltas to one long-lived `git cat-file --batch` per worker (store/git-cat-file.ts), a batch at a time; the gateway\'s lookups read through the same worker path only at start, so that row is expected to be the same on both sides. Verify and cold start interleaved run by run, the raw ed25519 rate (node:crypto, one thread) measured before each verify.',
    ...all.map((f) => (f.failed.length ? `${f.name}, ${label(f.n)}: ${f.failed.join('; ')}` : '')).filter(Boolean),
    ...sizes
      .map((n) => {
        const g = gitPackedFacts(join(scaleTmp(), '..', `chain-${n}-sparse-gitpacked`));
        return g
          ? `Packed by git at ${label(n)}: \`git repack -a -d -f\` in ${sec(g.repackMs)}: ${g.packs} pack, ${(g.packBytes / 2 ** 20).toFixed(0)} MiB, ${int(g.deltas)} of ${int(g.objects)} objects stored as deltas.`
          : '';
      })
      .filter(Boolean),
    `Load average (1 min): ${load0.toFixed(2)} at the start, ${loadavg()[0]!.toFixed(2)} at the end, on 2 cores shared with other work: the ratios, measured side by side, are the figures; absolute rates are indicative. Total ${((performance.now() - t0) / MIN).toFixed(0)} min.`,
    ...(quick ? ['**--quick**: a smoke test of the harness, not figures.'] : []),
  ];
  return { title: 'Stock git under the store, side by side (issue 33)', markdown: [table(all), ...notes].join('\n\n') };
}
