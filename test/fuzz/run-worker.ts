/** The child of ./run.ts: runs one target, writing each input where the watchdog finds it after a hang or a crash. */
import { writeFileSync } from 'node:fs';
import { targetNamed } from './targets/index.ts';
import { runTarget } from './run-target.ts';

const [target, seed, seconds, current] = process.argv.slice(2) as [string, string, string, string];
const r = await runTarget(targetNamed(target)!, { seed: Number(seed), seconds: Number(seconds), slowMs: 10_000, onInput: (b) => writeFileSync(current, b) });
process.send!({ ...r, failure: r.failure && { ...r.failure, input: r.failure.input.toString('base64') } }, () => process.exit(0));
