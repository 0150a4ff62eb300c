/**
 * `npm run bench -- keys` (issue 32): what key events cost a verifier.
 * `vouch verify` (whole processes, default configuration) on a chain whose
 * online key is rotated every EVERY blocks, against the same chain with no
 * key events, run alternately; the ratio of their rates per pair, median of
 * the pairs. Target: ≥ 0.95 (within noise). Chains are built once into
 * bench/out (bench/keys/build-chain.ts).
 */
import { join } from 'node:path';
import { median, root } from './gateway-harness.ts';
import { say, timed, vouch } from './scale/procs.ts';

const MIN = 60_000;

async function chainDir(n: number, every: number): Promise<string> {
  const r = await timed(process.execPath, ['--max-old-space-size=14000', '--import', 'tsx', join(root, 'bench', 'keys', 'build-chain.ts'), String(n), String(every)], { timeoutMs: 120 * MIN });
  return r.stdout.trim().split('\n').pop()!;
}

interface Row { n: number; every: number; rotations: number; plain: number[]; rotated: number[]; ratios: number[] }

async function row(n: number, every: number, runs: number): Promise<Row> {
  const plainDir = await chainDir(n, 0);
  const rotDir = await chainDir(n, every);
  const out: Row = { n, every, rotations: Math.floor((n - 1) / every), plain: [], rotated: [], ratios: [] };
  const rate = async (dir: string): Promise<number> => {
    const v = await vouch(['verify', '--chain', dir, '--json'], 60 * MIN);
    const res = JSON.parse(v.stdout) as { blocks: number; blocks_per_second: number };
    if (res.blocks !== n) throw new Error(`bench: vouch verify saw ${res.blocks} blocks, not ${n}`);
    return res.blocks_per_second;
  };
  for (let r = 0; r < runs; r++) {
    // Alternate which goes first, so neither always finds the page cache warmer.
    const first = r % 2 === 0;
    const a = await rate(first ? plainDir : rotDir);
    const b = await rate(first ? rotDir : plainDir);
    const [p, k] = first ? [a, b] : [b, a];
    out.plain.push(p);
    out.rotated.push(k);
    out.ratios.push(k / p);
    say(`verify ${n.toLocaleString('en')} blocks, run ${r + 1}/${runs}: no key events ${Math.round(p)}/s, rotation every ${every.toLocaleString('en')} ${Math.round(k)}/s, ratio ${(k / p).toFixed(3)}`);
  }
  return out;
}

export async function runKeysBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const plan: [number, number, number][] = quick ? [[5_000, 1_000, 3]] : [[50_000, 100_000, 7], [50_000, 10_000, 7], [1_000_000, 100_000, 3]];
  const rows: Row[] = [];
  for (const [n, every, runs] of plan) rows.push(await row(n, every, runs));
  const f = (x: number) => Math.round(x).toLocaleString('en');
  const lines = rows.map((r) => `| \`vouch verify\` on ${r.n.toLocaleString('en')} blocks, online key rotated every ${r.every.toLocaleString('en')} (${r.rotations} key blocks + the root's) vs the same chain without key events | ${f(median(r.rotated))}/s vs ${f(median(r.plain))}/s: **${median(r.ratios).toFixed(3)}** (pairs ${r.ratios.map((x) => x.toFixed(3)).join(', ')}) | ≥ 0.95 | ${median(r.ratios) >= 0.95 ? '✅' : '❌'} |`);
  return {
    title: 'Key events: verification cost (issue 32)',
    markdown: [
      'Each run is a whole `vouch verify --chain DIR --json` process (default configuration, all cores), the two chains verified alternately (which goes first alternates); the ratio is per pair, the figure the median of the pairs. The chains are built by bench/keys/build-chain.ts from test/helpers/key-fixture.ts: the same endorse blocks, one with a 2-of-3 root adopted at block 1 and the online key rotated every EVERY blocks, one with neither.',
      '',
      '| row | figure | target | |',
      '|---|---|---|---|',
      ...lines,
    ].join('\n'),
  };
}
