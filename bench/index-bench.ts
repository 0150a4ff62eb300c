/**
 * `npm run bench -- index` (issue 37): the completeness index
 * (chain/index-tree.ts) on the server's backend, at 50,000 and 1,000,000
 * blocks of one endorsement each (URLs distinct; 10 versions a unit):
 * (a) build rate; per-block update with the root after every block (the
 *     worst case), once per 100 blocks, and on the gateway's append path
 *     (trial `rootWith`, then the commit of the same block with `keep`);
 * (b) proofs at 1M: generated and verified per second, sizes;
 * (c) memory: typed-array bytes, heap + external growth;
 * (d) its image (warm snapshot): size, write, read back (sha256 + fromImage);
 * (e) sha256 through node:crypto and through sha256To, side by side; `vouch
 *     verify` of bench/out/chain-50000 with `--index` and `--no-index`.
 * Blocks are the facts the index reads (index, intent, effective date,
 * endorsement URL, name, semver), unsigned: signing is not what is measured.
 */
import type { Block } from '../chain/block.ts';
import { CompletenessIndex } from '../chain/index-tree.ts';
import { verifyIndexProof } from '../chain/index-proof.ts';
import { nodeBackend as c } from '../platform/node-crypto.ts';
import { loadavg, tmpdir } from 'node:os';
import { createHash, hash as oneShotHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { root as repoRoot } from './gateway-harness.ts';

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
};
const LAST = 10_000;
const ROUNDS = 5;

/** A timed loop's cost a block, in µs: medians over ROUNDS rounds of CPU time (this process) and of wall time. */
type Cost = { cpu: number; wall: number };
function timed(blocks: number, round: (r: number) => void): Cost {
  const cpu: number[] = [];
  const wall: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    round(r);
    const u = process.cpuUsage(c0);
    wall.push(((performance.now() - t0) * 1000) / (blocks / ROUNDS));
    cpu.push((u.user + u.system) / (blocks / ROUNDS));
  }
  return { cpu: median(cpu), wall: median(wall) };
}

function block(i: number): Block {
  const unit = Math.floor(i / 10);
  return {
    index: i,
    payload: {
      intent: 'endorse',
      effective_date: '2026-11-29',
      endorsements: [
        { artifact_url: `https://registry.npmjs.org/pkg-${unit}/-/pkg-${unit}-1.${i % 10}.0.tgz`, name: `npm/pkg-${unit}`, semver: `1.${i % 10}.0` },
      ],
    },
  } as unknown as Block;
}

function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 2 ** 32;
  };
}

const none = () => -1;

function run(size: number): { idx: CompletenessIndex; buildPerS: number; usEach: Cost; usPer100: Cost; usGateway: Cost } {
  const idx = new CompletenessIndex(c);
  const t0 = performance.now();
  for (let i = 0; i < size - 2 * LAST; i++) idx.addBlock(block(i), none);
  idx.root();
  const buildPerS = (size - 2 * LAST) / ((performance.now() - t0) / 1000);
  // the blocks of the timed loops made first: what is timed is the index's work
  const each = Array.from({ length: LAST }, (_, k) => block(size - 2 * LAST + k));
  const per100 = Array.from({ length: LAST }, (_, k) => block(size - LAST + k));
  const tried = Array.from({ length: LAST }, (_, k) => ({ ...block(size + k), record_hash: `h${size + k}` }) as Block);
  const committed = tried.map((b) => structuredClone(b));
  const part = LAST / ROUNDS;
  const usEach = timed(LAST, (r) => {
    for (let k = r * part; k < (r + 1) * part; k++) {
      idx.addBlock(each[k]!, none);
      idx.root();
    }
  });
  const usPer100 = timed(LAST, (r) => {
    for (let k = r * part; k < (r + 1) * part; k++) {
      const b = per100[k]!;
      idx.addBlock(b, none);
      if (b.index % 100 === 99) idx.root();
    }
    idx.root();
  });
  // the gateway's append path (gateway/chain/submitter.ts then chain-state.ts takeIndexLine): trial, then the commit of the same block
  const usGateway = timed(LAST, (r) => {
    for (let k = r * part; k < (r + 1) * part; k++) {
      idx.rootWith([tried[k]!], none);
      idx.rootWith([committed[k]!], none, () => true);
    }
  });
  return { idx, buildPerS, usEach, usPer100, usGateway };
}

/** sha256 calls per block at `size` (root after every block), counted on a wrapped backend; and one call's cost now, in µs. */
function hashCost(size: number): { perBlock: number; usPerHash: number } {
  let calls = 0;
  const counting = {
    ...c,
    digest: (a: Parameters<NonNullable<typeof c.digest>>[0], d: Uint8Array) => {
      calls++;
      return c.digest!(a, d);
    },
    sha256To: (d: Uint8Array, out: Uint8Array) => {
      calls++;
      c.sha256To!(d, out);
    },
  };
  const idx = new CompletenessIndex(counting);
  for (let i = 0; i < size; i++) idx.addBlock(block(i), none);
  idx.root();
  calls = 0;
  for (let i = size; i < size + 1000; i++) {
    idx.addBlock(block(i), none);
    idx.root();
  }
  const perBlock = calls / 1000;
  const buf = new Uint8Array(66);
  const t = performance.now();
  const out = new Uint8Array(32);
  for (let i = 0; i < 100_000; i++) c.sha256To!(buf, out);
  return { perBlock, usPerHash: ((performance.now() - t) * 1000) / 100_000 };
}

/** One 66-byte sha256 (a node hash) through node:crypto's one-shot `hash` and through the backend's `sha256To`: µs a call, medians of 5 interleaved rounds. */
function bindings(): { node: number; to: number } {
  const buf = new Uint8Array(66).map((_, i) => i);
  const out = new Uint8Array(32);
  const n = 200_000;
  const node: number[] = [];
  const to: number[] = [];
  for (let r = 0; r < 5; r++) {
    let t = performance.now();
    for (let i = 0; i < n; i++) oneShotHash('sha256', buf, 'buffer');
    node.push(((performance.now() - t) * 1000) / n);
    t = performance.now();
    for (let i = 0; i < n; i++) c.sha256To!(buf, out);
    to.push(((performance.now() - t) * 1000) / n);
  }
  return { node: median(node), to: median(to) };
}

/** `vouch verify` of `dir` with `--index` and with `--no-index`, 3 interleaved rounds: median wall s and CPU s (process, workers, git) each; null without the fixture. */
function verifySideBySide(dir: string): { index: [number, number]; none: [number, number] } | null {
  if (!existsSync(join(dir, 'checkpoint.json'))) return null;
  const work = mkdtempSync(join(tmpdir(), 'vouch-index-bench-'));
  const rows = { index: [[], []] as number[][], none: [[], []] as number[][] };
  try {
    for (let r = 0; r < 3; r++) {
      for (const [side, flag] of [
        ['none', '--no-index'],
        ['index', '--index'],
      ] as const) {
        const timeFile = join(work, 'time');
        const t = performance.now();
        const v = spawnSync(
          '/usr/bin/time',
          ['-f', '%U %S', '-o', timeFile, process.execPath, join(repoRoot, 'tools', 'vouch.js'), 'verify', '--chain', dir, '--json', flag],
          {
            encoding: 'utf8',
            maxBuffer: 1 << 24,
          },
        );
        if (v.status !== 0) throw new Error(`vouch verify ${flag}: ${v.stderr}`);
        const [u, sy] = readFileSync(timeFile, 'utf8').trim().split('\n').pop()!.split(' ').map(Number);
        rows[side][0]!.push((performance.now() - t) / 1000);
        rows[side][1]!.push(u! + sy!);
      }
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return {
    index: [median(rows.index[0]!), median(rows.index[1]!)],
    none: [median(rows.none[0]!), median(rows.none[1]!)],
  };
}

export async function runIndexBench(quick = false): Promise<{ title: string; markdown: string }> {
  const big = quick ? 200_000 : 1_000_000;
  const small = 50_000;
  const rows: string[] = [];
  const smallRuns = [0, 1, 2].map(() => run(small));
  const hc = hashCost(small);
  const bind = bindings();
  const heap0 = process.memoryUsage();
  const bigRun = run(big);
  const heap1 = process.memoryUsage();
  const idx = bigRun.idx;
  const root = idx.root();
  const r = rng(37);
  const urls = Array.from({ length: 20_000 }, () => block(Math.floor(r() * big)).payload);
  const urlOf = (p: Block['payload']) => (p as { endorsements: { artifact_url: string }[] }).endorsements[0]!.artifact_url;
  const genRates: number[] = [];
  const sizes: number[] = [];
  let proofs: Uint8Array[] = [];
  for (let rep = 0; rep < 3; rep++) {
    proofs = [];
    const t = performance.now();
    for (const p of urls) proofs.push(idx.prove('url', urlOf(p)));
    genRates.push(urls.length / ((performance.now() - t) / 1000));
  }
  for (const p of proofs) sizes.push(p.length);
  let t = performance.now();
  let bad = 0;
  for (let k = 0; k < 5000; k++) if (!verifyIndexProof(c, proofs[k]!, 'url', urlOf(urls[k]!), { root, size: idx.size }).ok) bad++;
  const verifyRate = 5000 / ((performance.now() - t) / 1000);
  if (bad > 0) throw new Error(`${bad} proofs did not verify`);
  const absent = Array.from({ length: 2000 }, (_, k) => idx.prove('url', `https://nowhere.example/${k}`).length);
  const units = Array.from({ length: 2000 }, (_, k) => idx.prove('unit', `npm/pkg-${Math.floor((r() * big) / 10)}`).length + 0 * k);
  const tImg = performance.now();
  const image = idx.toImage();
  const imgWrite = performance.now() - tImg;
  const reads: number[] = [];
  for (let rep = 0; rep < 3; rep++) {
    const t1 = performance.now();
    createHash('sha256').update(image).digest('hex');
    const back = CompletenessIndex.fromImage(c, image);
    reads.push(performance.now() - t1);
    if (back === null || Buffer.compare(back.root(), idx.root()) !== 0) throw new Error('the image did not read back');
  }
  t = performance.now();
  const s50 = median(smallRuns.map((x) => x.usEach.cpu));
  const us = (x: Cost) => `**${fmt(x.cpu)} µs** CPU (${fmt(x.wall)} µs wall)`;
  const ok = (x: Cost) => (x.cpu <= 50 ? '✅' : '❌');
  const fmt = (x: number) => x.toLocaleString('en-US', { maximumFractionDigits: 1 });
  const mib = (b: number) => (b / 2 ** 20).toFixed(0);
  rows.push('| figure | value | target | |');
  rows.push('|---|---|---|---|');
  rows.push(`| build, ${fmt(big)} blocks (1 URL + 1 unit key each) | ${fmt(bigRun.buildPerS)} blocks/s | | |`);
  rows.push(`| per-block update at ${fmt(small)}, root after every block (median of 3 builds) | ${fmt(s50)} µs CPU | | |`);
  rows.push(`| per-block update at ${fmt(big)}, root after every block | ${us(bigRun.usEach)} | ≤ 50 µs | ${ok(bigRun.usEach)} |`);
  rows.push(`| per-block update at ${fmt(big)}, root once per 100 blocks | ${fmt(bigRun.usPer100.cpu)} µs CPU (${fmt(bigRun.usPer100.wall)} µs wall) | | |`);
  const g50 = median(smallRuns.map((x) => x.usGateway.cpu));
  rows.push(
    `| gateway append path (trial root, then the commit of the same block), a block a checkpoint, at ${fmt(small)} (median of 3 builds) / at ${fmt(big)} | ${fmt(g50)} µs CPU / ${us(bigRun.usGateway)} | ≤ 50 µs | ${ok(bigRun.usGateway)} |`,
  );
  rows.push(
    `| sha256 calls a block at ${fmt(small)} (root every block); one \`sha256To\` call (66 B) measured alongside | ${fmt(hc.perBlock)} calls; ${hc.usPerHash.toFixed(2)} µs a call | | |`,
  );
  rows.push(`| ratio ${fmt(big)} / ${fmt(small)} (root every block, CPU) | ${(bigRun.usEach.cpu / s50).toFixed(2)} | flat (log depth) | |`);
  rows.push(
    `| URL proofs generated at ${fmt(big)} (median of 3 × 20,000 random URLs) | **${fmt(median(genRates))} /s** | ≥ 10,000/s | ${median(genRates) >= 10_000 ? '✅' : '❌'} |`,
  );
  rows.push(`| URL proofs verified | ${fmt(verifyRate)} /s | | |`);
  rows.push(
    `| URL proof size (present) median / max | **${median(sizes)} / ${Math.max(...sizes)} B** | ≤ 2 KiB | ${Math.max(...sizes) <= 2048 ? '✅' : '❌'} |`,
  );
  rows.push(`| URL proof size (absent) median / max | ${median(absent)} / ${Math.max(...absent)} B | ≤ 2 KiB | ${Math.max(...absent) <= 2048 ? '✅' : '❌'} |`);
  rows.push(`| unit proof size, 10 versions, median / max | ${median(units)} / ${Math.max(...units)} B | | |`);
  rows.push(
    `| index typed arrays at ${fmt(big)} | ${mib(idx.bytes())} MiB (${(idx.bytes() / big).toFixed(0)} B a block, ${(idx.bytes() / idx.keyCount).toFixed(0)} B a key, ${fmt(idx.keyCount)} keys) | | |`,
  );
  rows.push(
    `| heap + external growth while building it | ${mib(heap1.heapUsed + heap1.external + heap1.arrayBuffers - heap0.heapUsed - heap0.external - heap0.arrayBuffers)} MiB | | |`,
  );
  rows.push(
    `| its image (warm snapshot) at ${fmt(big)}: size; toImage; sha256 + fromImage (median of 3) | ${mib(image.length)} MiB; ${imgWrite.toFixed(0)} ms; **${median(reads).toFixed(0)} ms** | (warm restart ≤ 5 s) | |`,
  );
  rows.push(
    `| sha256 of 66 B (a node hash), one call: node:crypto \`hash\` / the backend's \`sha256To\` (libsodium), medians of 5 interleaved rounds | ${bind.node.toFixed(2)} µs / **${bind.to.toFixed(2)} µs** | | |`,
  );
  const vs = verifySideBySide(join(repoRoot, 'bench', 'out', `chain-${small}`));
  if (vs !== null) {
    rows.push(
      `| \`vouch verify\` of bench/out/chain-${small}, without / with the index (\`--no-index\` / \`--index\`), median of 3 interleaved: wall; CPU (process and workers) | ${vs.none[0].toFixed(1)} s / ${vs.index[0].toFixed(1)} s (**×${(vs.index[0] / vs.none[0]).toFixed(2)}**); ${vs.none[1].toFixed(1)} s / ${vs.index[1].toFixed(1)} s CPU (**×${(vs.index[1] / vs.none[1]).toFixed(2)}**) | unchanged within noise | |`,
    );
  }
  const markdown = [
    'Setup: chain/index-tree.ts with platform/node-crypto.ts on one core; blocks of one endorsement each, distinct URLs, 10 versions a unit (so 1.1 keys a block); each size built fresh. "Root after every block" is a checkpoint signed after every append (the gateway\'s worst case); the root is otherwise recomputed lazily, once per checkpoint. Per-block costs: 10,000 blocks a row in 5 rounds of 2,000, medians of the rounds; CPU time of this process (the index runs on one thread, so on a quiet machine it is the wall time; on a shared one the wall time also counts time the process waited for a core), wall time alongside.',
    '',
    ...rows,
    '',
    `Load average during the run: ${loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}.`,
  ].join('\n');
  return { title: 'Completeness index (issue 37)', markdown };
}
