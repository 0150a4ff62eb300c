/**
 * Append latency of the chain repository (store/chain-repo.ts) at given chain
 * sizes: builds each chain in a temporary directory with one group commit of
 * synthetic blocks, then times single-block appends.
 *
 * Owns: nothing persistent (its temporary directories are removed).
 * Trusts: ChainRepo; synthetic block texts stand in for real blocks (the
 * repository stores files, it does not parse them).
 * Must hold: every timed append is a real single-block commit with working
 * tree, sparse index and state updated, as in production.
 *
 * Usage: tsx bench/chain-append.ts [size...]   (default 1000 50000)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ChainRepo, type BlockFile, type CommitInfo } from '../store/chain-repo.ts';

export interface AppendFigures {
  size: number;
  samples: number;
  /** Time to build the chain of `size` blocks (one group commit). */
  buildMs: number;
  medianMs: number;
  p90Ms: number;
  maxMs: number;
  meanMs: number;
}

const PAD = 'x'.repeat(300);
const block = (i: number): BlockFile => ({ index: i, content: `${JSON.stringify({ index: i, pad: PAD }, null, 2)}\n` });
const info = (i: number): CommitInfo => ({
  message: `block ${i}: endorse bench/unit 1.0.${i}\n\nhttps://example.invalid/${i}.tgz\n`,
  authorName: 'vouch bench',
  authorEmail: 'bench@vouch.invalid',
  timestamp: 1_790_000_000 + i,
});
const checkpoint = (n: number) => `${JSON.stringify({ size: n, head: 'bench' }, null, 2)}\n`;

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Build chains of the given sizes and time `samples` single-block appends on each. */
export async function benchAppend(opts: { sizes: number[]; samples: number }): Promise<AppendFigures[]> {
  const out: AppendFigures[] = [];
  for (const size of opts.sizes) {
    const dir = mkdtempSync(join(tmpdir(), `vouch-bench-append-${size}-`));
    try {
      const t0 = performance.now();
      const blocks: BlockFile[] = [];
      for (let i = 0; i < size; i++) blocks.push(block(i));
      const repo = await ChainRepo.init(join(dir, 'chain'), blocks, checkpoint(size), info(0));
      const buildMs = performance.now() - t0;
      const times: number[] = [];
      for (let k = 0; k < opts.samples; k++) {
        const i = repo.size;
        const t = performance.now();
        await repo.append([block(i)], checkpoint(i + 1), info(i));
        times.push(performance.now() - t);
      }
      if (repo.warnings.length) throw new Error(`bench: append warnings: ${repo.warnings.join('; ')}`);
      const sorted = [...times].sort((a, b) => a - b);
      const figures: AppendFigures = {
        size,
        samples: opts.samples,
        buildMs: Math.round(buildMs),
        medianMs: quantile(sorted, 0.5),
        p90Ms: quantile(sorted, 0.9),
        maxMs: sorted[sorted.length - 1] ?? 0,
        meanMs: times.reduce((a, b) => a + b, 0) / Math.max(1, times.length),
      };
      out.push(figures);
      console.log(
        `append at ${size} blocks: median ${figures.medianMs.toFixed(2)} ms, p90 ${figures.p90Ms.toFixed(2)} ms, ` +
          `max ${figures.maxMs.toFixed(1)} ms (${opts.samples} samples; build ${(buildMs / 1000).toFixed(1)} s)`,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return out;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const sizes = process.argv
    .slice(2)
    .map(Number)
    .filter((n) => n > 0);
  await benchAppend({ sizes: sizes.length ? sizes : [1_000, 50_000], samples: 200 });
}
