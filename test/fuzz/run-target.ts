/**
 * One fuzz run of one target: fast-check over the target's generator from
 * its corpus, with a seed; used by the bounded test and by `npm run fuzz`.
 *
 * Must hold: the same seed and runs give the same inputs; an input that
 * takes longer than `slowMs` is a failure (a parser must be linear-ish in
 * its input, and these inputs are small).
 */
import fc from 'fast-check';
import { corpusOf, describe, type FuzzTarget } from './target.ts';

export interface RunResult { runs: number; ms: number; failure: { input: Buffer; message: string; seed: number; path: string } | null }

export async function timedCheck(t: FuzzTarget, input: Buffer, slowMs: number): Promise<void> {
  const start = performance.now();
  await t.check(input);
  const ms = performance.now() - start;
  if (ms > slowMs) throw new Error(`took ${ms.toFixed(0)} ms on ${input.length} bytes (bound ${slowMs} ms)`);
}

export async function runTarget(t: FuzzTarget, o: { seed: number; runs?: number; seconds?: number; slowMs?: number; onInput?: (b: Buffer) => void }): Promise<RunResult> {
  const seeds = corpusOf(t.name).map((c) => c.bytes);
  const slowMs = o.slowMs ?? 2000;
  let count = 0;
  const start = performance.now();
  const prop = fc.asyncProperty(t.arbitrary(seeds), async (input) => {
    count++;
    o.onInput?.(input);
    await timedCheck(t, input, slowMs);
  });
  const r = await fc.check(prop, {
    seed: o.seed,
    numRuns: o.seconds !== undefined ? Number.MAX_SAFE_INTEGER : o.runs ?? t.runs ?? 300,
    interruptAfterTimeLimit: o.seconds !== undefined ? o.seconds * 1000 : undefined,
    markInterruptAsFailure: false,
    endOnFailure: false,
  });
  const ms = performance.now() - start;
  if (!r.failed || r.counterexample === null) return { runs: count, ms, failure: null };
  return {
    runs: count, ms,
    failure: { input: r.counterexample[0] as Buffer, message: describe(r.errorInstance), seed: r.seed, path: r.counterexamplePath ?? '' },
  };
}
