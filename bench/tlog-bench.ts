/**
 * `npm run bench -- tlog` (issue 17): the in-memory Merkle tree
 * (chain/merkle-tree.ts) on the server's backend (platform/node-crypto.ts):
 * (a) append cost per entry at 50,000 and at 1,000,000 entries — the time to
 *     append the last 10,000 entries after building the tree to that size;
 *     target: the ratio 1M / 50k about 1 (flat);
 * (b) inclusion and consistency proofs generated per second at 1M, random
 *     indexes (and inclusion proofs verified per second, for scale);
 * (c) memory: image bytes per entry at 1M;
 * (d) proof sizes in bytes at 1M.
 * Medians of 3 runs; each run builds fresh trees. Entries are distinct 32-byte
 * values (record hashes are 32 bytes), made before the timed part.
 */
import { MerkleTree } from '../chain/merkle-tree.ts';
import { verifyInclusion } from '../chain/merkle.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { loadavg } from 'node:os';

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
};
const LAST = 10_000;

function entry(i: number): Uint8Array {
  const e = new Uint8Array(32);
  new DataView(e.buffer).setUint32(0, i);
  e[31] = 0x5a;
  return e;
}

/** Deterministic xorshift32 so every run asks for the same indexes. */
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

/** Builds to size - LAST, then times appending the last LAST entries; µs per entry. */
function appendCost(size: number): { tree: MerkleTree; usPerEntry: number; batchUs: number; buildSeconds: number } {
  const tree = new MerkleTree(nodeBackend);
  const t0 = performance.now();
  for (let i = 0; i < size - LAST; i++) tree.append(entry(i));
  const buildSeconds = (performance.now() - t0) / 1000;
  const last = Array.from({ length: LAST }, (_, k) => entry(size - LAST + k));
  // Timed in 10 batches of 1,000 as well: the batch median shows what a
  // garbage collection or another process's burst adds to the total.
  const batches: number[] = [];
  const t1 = performance.now();
  for (let b = 0; b < 10; b++) {
    const tb = performance.now();
    for (let k = b * (LAST / 10); k < (b + 1) * (LAST / 10); k++) tree.append(last[k]!);
    batches.push(((performance.now() - tb) * 1000) / (LAST / 10));
  }
  const usPerEntry = ((performance.now() - t1) * 1000) / LAST;
  return { tree, usPerEntry, batchUs: median(batches), buildSeconds };
}

function rate(count: number, fn: (k: number) => void): number {
  const t0 = performance.now();
  for (let k = 0; k < count; k++) fn(k);
  return count / ((performance.now() - t0) / 1000);
}

export async function runTlogBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const SMALL = quick ? 20_000 : 50_000;
  const BIG = quick ? 100_000 : 1_000_000;
  const RUNS = quick ? 1 : 3;
  const PROOFS = quick ? 5_000 : 50_000;
  const loadStart = loadavg()[0]!;
  const small: number[] = [];
  const big: number[] = [];
  const smallBatch: number[] = [];
  const bigBatch: number[] = [];
  const builds: number[] = [];
  const incl: number[] = [];
  const cons: number[] = [];
  const ver: number[] = [];
  let bytesPerEntry = 0;
  let inclSizes: number[] = [];
  let consSizes: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    const a = appendCost(SMALL);
    small.push(a.usPerEntry);
    smallBatch.push(a.batchUs);
    const b = appendCost(BIG);
    big.push(b.usPerEntry);
    bigBatch.push(b.batchUs);
    builds.push(b.buildSeconds);
    const tree = b.tree;
    const n = tree.size;
    const root = tree.root();
    const rand = rng(17 + r);
    const idx = Array.from({ length: PROOFS }, () => Math.floor(rand() * n));
    const from = Array.from({ length: PROOFS }, () => 1 + Math.floor(rand() * (n - 1)));
    const proofs: Uint8Array[][] = new Array(PROOFS);
    incl.push(
      rate(PROOFS, (k) => {
        proofs[k] = tree.inclusionProof(idx[k]!, n);
      }),
    );
    cons.push(
      rate(PROOFS, (k) => {
        tree.consistencyProof(from[k]!, n);
      }),
    );
    const leaves = idx.map((i) => tree.leafHashAt(i));
    ver.push(
      rate(PROOFS, (k) => {
        if (!verifyInclusion(nodeBackend, idx[k]!, n, leaves[k]!, proofs[k]!, root)) throw new Error('proof failed');
      }),
    );
    bytesPerEntry = tree.toImage().length / n;
    inclSizes = proofs.map((p) => p.length * 32);
    consSizes = from.slice(0, 2000).map((f) => tree.consistencyProof(f, n).length * 32);
    console.log(
      `run ${r + 1}: append ${small[r]!.toFixed(2)} µs/entry at ${SMALL}, ${big[r]!.toFixed(2)} at ${BIG} (build ${b.buildSeconds.toFixed(1)} s); ` +
        `inclusion ${Math.round(incl[r]!)}/s, consistency ${Math.round(cons[r]!)}/s, verify ${Math.round(ver[r]!)}/s; ${bytesPerEntry.toFixed(1)} B/entry`,
    );
  }
  const loadEnd = loadavg()[0]!;
  const ratio = median(big) / median(small);
  const k = (x: number): string => Math.round(x).toLocaleString('en-US');
  const rows = [
    `| Figure | ${SMALL.toLocaleString('en-US')} | ${BIG.toLocaleString('en-US')} | Target |`,
    '|---|---|---|---|',
    `| Append, µs per entry (last ${LAST.toLocaleString('en-US')} appends) | ${median(small).toFixed(2)} | ${median(big).toFixed(2)} | ratio ≈ 1: **${ratio.toFixed(2)}** |`,
    `| Append, µs per entry, median of the 10 batches of 1,000 | ${median(smallBatch).toFixed(2)} | ${median(bigBatch).toFixed(2)} | ratio ≈ 1: **${(median(bigBatch) / median(smallBatch)).toFixed(2)}** |`,
    `| Build to size − ${LAST.toLocaleString('en-US')}, s | | ${median(builds).toFixed(2)} | |`,
    `| Inclusion proofs generated /s (random index, size = n) | | ${k(median(incl))} | |`,
    `| Consistency proofs generated /s (random from, to = n) | | ${k(median(cons))} | |`,
    `| Inclusion proofs verified /s (chain/merkle.ts) | | ${k(median(ver))} | |`,
    `| Memory: image bytes per entry | | ${bytesPerEntry.toFixed(1)} | ≈ 64 |`,
    `| Inclusion proof bytes (median / max) | | ${median(inclSizes)} / ${Math.max(...inclSizes)} | |`,
    `| Consistency proof bytes (median / max of 2,000) | | ${median(consSizes)} / ${Math.max(...consSizes)} | |`,
  ];
  const markdown =
    `Medians of ${RUNS} runs (each builds fresh trees; ${PROOFS.toLocaleString('en-US')} proofs per figure), platform/node-crypto.ts backend. ` +
    `Per-run figures: append µs/entry ${small.map((x) => x.toFixed(2)).join(', ')} at ${SMALL.toLocaleString('en-US')} and ${big.map((x) => x.toFixed(2)).join(', ')} at ${BIG.toLocaleString('en-US')}.\n\n` +
    rows.join('\n') +
    `\n\nLoad average (1 min) of the machine: ${loadStart.toFixed(2)} at the start, ${loadEnd.toFixed(2)} at the end (2 cores; other helpers' work shares them).\n`;
  return { title: 'Transparency log Merkle tree (issue 17)', markdown };
}
