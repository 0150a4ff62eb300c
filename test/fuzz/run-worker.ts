/**
 * The child of ./run.ts: runs one target (then its growth check on more
 * pieces than the suite's), writing each input where the watchdog finds it
 * after a hang or a crash.
 */
import { writeFileSync } from 'node:fs';
import { targetNamed } from './targets/index.ts';
import { growthCheck, runTarget } from './run-target.ts';

const [target, seed, seconds, current] = process.argv.slice(2) as [string, string, string, string];
const t = targetNamed(target)!;
const onInput = (b: Buffer) => writeFileSync(current, b);
const r = await runTarget(t, { seed: Number(seed), seconds: Number(seconds), slowMs: 10_000, onInput });
const growth = r.failure === null ? await growthCheck(t, Number(seed), { pieces: Math.max(8, Math.round(Number(seconds) / 2)), onInput }) : null;
process.send!({ ...r, growth, failure: r.failure && { ...r.failure, input: r.failure.input.toString('base64') } }, () => process.exit(0));
