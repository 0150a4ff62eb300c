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

export interface RunResult {
  runs: number;
  ms: number;
  failure: { input: Buffer; message: string; seed: number; path: string } | null;
}

export async function timedCheck(t: FuzzTarget, input: Buffer, slowMs: number): Promise<void> {
  const start = performance.now();
  await t.check(input);
  const ms = performance.now() - start;
  if (ms > slowMs) throw new Error(`took ${ms.toFixed(0)} ms on ${input.length} bytes (bound ${slowMs} ms)`);
}

export async function runTarget(
  t: FuzzTarget,
  o: { seed: number; runs?: number; seconds?: number; slowMs?: number; onInput?: (b: Buffer) => void },
): Promise<RunResult> {
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
    numRuns: o.seconds !== undefined ? Number.MAX_SAFE_INTEGER : (o.runs ?? t.runs ?? 300),
    interruptAfterTimeLimit: o.seconds !== undefined ? o.seconds * 1000 : undefined,
    markInterruptAsFailure: false,
    endOnFailure: false,
  });
  const ms = performance.now() - start;
  if (!r.failed || r.counterexample === null) return { runs: count, ms, failure: null };
  return {
    runs: count,
    ms,
    failure: { input: r.counterexample[0] as Buffer, message: describe(r.errorInstance), seed: r.seed, path: r.counterexamplePath ?? '' },
  };
}

/**
 * Growth: a piece of a genuine seed repeated in place until the input is
 * `small` then 8 × `small` bytes; the larger must not take more than 24
 * times as long (linear work takes 8 times, quadratic 64) plus `slackMs`
 * (250 ms), in each of three measurements.
 * Fuzzed inputs are small, so this is what finds a parser that is quadratic
 * in some construct (a hang on a large hostile input). Returns a failure
 * message, or null.
 */
export async function growthCheck(
  t: FuzzTarget,
  seed: number,
  o: { small?: number; pieces?: number; slackMs?: number; onInput?: (b: Buffer) => void } = {},
): Promise<string | null> {
  const seeds = corpusOf(t.name)
    .filter((c) => !c.file.includes('/regress-'))
    .map((c) => c.bytes)
    .filter((b) => b.length > 0);
  const small = o.small ?? 8 << 10;
  const slackMs = o.slackMs ?? 250;
  const rnd = fc.sample(fc.tuple(fc.nat(seeds.length - 1), fc.nat(), fc.integer({ min: 1, max: 48 })), { seed, numRuns: o.pieces ?? 4 });
  for (const [i, at0, len0] of rnd) {
    const s = seeds[i]!;
    const at = at0 % s.length;
    const piece = s.subarray(at, Math.min(s.length, at + len0));
    const grown = (size: number) => Buffer.concat([s.subarray(0, at), ...Array<Buffer>(Math.ceil(size / piece.length)).fill(piece), s.subarray(at)]);
    const time = async (b: Buffer) => {
      o.onInput?.(b);
      let best = Infinity;
      for (let k = 0; k < 3; k++) {
        const start = performance.now();
        try {
          await t.check(b);
        } catch {
          /* the property is checked elsewhere: only time here */
        }
        best = Math.min(best, performance.now() - start);
      }
      return best;
    };
    // Measured again when over the bound (a busy machine stalls a process now and then): all three must be over.
    let why: string | null = null;
    for (let attempt = 0; attempt < 3; attempt++) {
      const t1 = await time(grown(small));
      const t8 = await time(grown(8 * small));
      why =
        t8 > 24 * t1 + slackMs
          ? `repeating ${JSON.stringify(piece.toString('latin1'))} of ${t.name} seed ${i}: ${small} bytes take ${t1.toFixed(1)} ms, ${8 * small} bytes ${t8.toFixed(1)} ms`
          : null;
      if (why === null) break;
    }
    if (why !== null) return why;
  }
  return null;
}
