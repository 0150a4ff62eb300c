/**
 * `npm run bench -- chain` (issue 2): append latency at 1,000 and at 50,000
 * blocks (the second within the target ratio of the first); `vouch verify`
 * on a 50,000-block chain beside the raw single-thread `crypto.verify` rate
 * of the same run, × cores; time and peak RSS to read and index 50,000
 * blocks. Targets in bench/RESULTS.md; medians of several runs (this machine
 * is small and noisy).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatBlockFile, formatCheckpointFile } from '../chain/index.ts';
import { ChainRepo } from '../store/chain-repo.ts';
import { buildLongChain } from '../test/helpers/chain-fixture.ts';
import { benchAppend } from './chain-append.ts';
import { rawVerifyRate, signedMessages } from './raw-verify.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
};
const fmt = (x: number, d = 1) => x.toFixed(d);

export async function runChainBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const N = quick ? 5_000 : 50_000;
  const runs = quick ? 1 : 5;
  const out: string[] = [];
  const cores = availableParallelism();

  // --- append latency
  console.log(`append latency at 1,000 and ${N} blocks...`);
  const append = await benchAppend({ sizes: [1_000, N], samples: quick ? 20 : 100 });
  console.log(append);

  // --- a 50k chain directory (built once, kept in bench/out)
  const dir = join(root, 'bench', 'out', `chain-${N}`);
  console.log(`building ${N}-block chain at ${dir}...`);
  const { blocks, checkpoint, signer } = buildLongChain(N);
  if (!existsSync(join(dir, 'checkpoint.json'))) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(join(root, 'bench', 'out'), { recursive: true });
    await ChainRepo.init(
      dir,
      blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
      formatCheckpointFile(checkpoint),
      { message: `bench chain of ${N} blocks\n`, authorName: 'bench', authorEmail: 'bench@vouch.invalid', timestamp: 1_790_000_000 },
    );
  }

  // --- raw crypto.verify rate, one thread, on the chain's own messages
  const msgs = signedMessages(blocks.slice(0, 20_001));
  const rawRates: number[] = [];
  const sodiumRates: number[] = [];
  const verifyRates: number[] = [];
  const verifySeconds: number[] = [];
  for (let r = 0; r < runs; r++) {
    rawRates.push(rawVerifyRate(signer, msgs));
    sodiumRates.push(rawVerifyRate(signer, msgs, 2_000, 'libsodium'));
    const v = spawnSync(process.execPath, [join(root, 'tools', 'vouch.js'), 'verify', '--chain', dir, '--json'], { encoding: 'utf8' });
    if (v.status !== 0) throw new Error(`vouch verify failed: ${v.stderr}`);
    const res = JSON.parse(v.stdout);
    verifyRates.push(res.blocks_per_second);
    verifySeconds.push(res.seconds);
    console.log(`run ${r + 1}: raw ${Math.round(rawRates[r]!)}/s per thread, vouch verify ${res.blocks_per_second} blocks/s (${res.seconds} s)`);
  }

  // --- read + index time and peak RSS (child process each run)
  const reads: { ms: number; maxRssMiB: number }[] = [];
  for (let r = 0; r < runs; r++) {
    const c = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'bench', 'read-index.ts'), dir], { encoding: 'utf8', cwd: root });
    if (c.status !== 0) throw new Error(`read-index failed: ${c.stderr}`);
    reads.push(JSON.parse(c.stdout.trim().split('\n').pop()!));
  }

  const raw = median(rawRates);
  const vr = median(verifyRates);
  const target = 0.75 * raw * cores;
  const a1 = append.find((a) => a.size === 1_000)!;
  const aN = append.find((a) => a.size === N)!;
  out.push('| Figure | Value | Target |', '|---|---|---|');
  out.push(`| append latency at 1,000 blocks (median / p90) | ${fmt(a1.medianMs)} ms / ${fmt(a1.p90Ms)} ms | |`);
  out.push(`| append latency at ${N.toLocaleString('en')} blocks (median / p90) | ${fmt(aN.medianMs)} ms / ${fmt(aN.p90Ms)} ms | |`);
  out.push(
    `| ratio ${N.toLocaleString('en')} / 1,000 (median) | **${fmt(aN.medianMs / a1.medianMs, 2)}×** | ≤ 1.5× ${aN.medianMs / a1.medianMs <= 1.5 ? '✅' : '❌'} |`,
  );
  out.push(`| raw \`crypto.verify\` (OpenSSL), one thread | ${Math.round(raw)} /s | |`);
  out.push(
    `| raw libsodium verify (asked first by \`vouch\`, platform/node-crypto.ts), one thread | ${Math.round(median(sodiumRates))} /s; verify / (libsodium raw × cores) ${fmt(vr / (median(sodiumRates) * cores), 2)} | |`,
  );
  out.push(
    `| \`vouch verify\` on ${N.toLocaleString('en')} blocks (${cores} cores, median of ${runs}) | ${Math.round(vr)} blocks/s (${fmt(median(verifySeconds), 2)} s) | ≥ 0.75 × raw × cores = ${Math.round(target)} /s ${vr >= target ? '✅' : '❌'} |`,
  );
  const perRun = verifyRates.map((v, i) => v / (rawRates[i]! * cores));
  out.push(
    `| ratio verify / (raw × cores) | **${fmt(vr / (raw * cores), 2)}** (runs ${fmt(Math.min(...perRun), 3)}–${fmt(Math.max(...perRun), 3)}, each against its own raw rate) | ≥ 0.75 |`,
  );
  out.push(
    `| read + parse + index ${N.toLocaleString('en')} blocks | ${fmt(median(reads.map((r) => r.ms)) / 1000, 2)} s, peak RSS ${Math.round(median(reads.map((r) => r.maxRssMiB)))} MiB | |`,
  );
  out.push('', `Runs: append ${quick ? 20 : 100} samples per size; verify and read+index ${runs} runs each (medians).`);
  return { title: 'Chain core (issue 2)', markdown: out.join('\n') };
}
