/**
 * `npm run fuzz -- NAME|all [--seconds N] [--seed S] [--replay FILE]`: a long
 * run of one target (or of each in turn), in a child process under a
 * watchdog. A property failure, an input that runs for 30 s without end,
 * or one that ends the process (1 GiB of heap exhausted, a V8 fatal error)
 * is printed with the seed and saved as test/fuzz/corpus/NAME/regress-<hash>,
 * which the suite then runs every time; then the growth check on more
 * pieces than the suite's (printed, not saved: its input is the piece).
 * `--replay FILE` runs one input and prints the outcome.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { saveRegression, describe } from './target.ts';
import { TARGETS, targetNamed } from './targets/index.ts';
import { timedCheck } from './run-target.ts';

const HANG_MS = 30_000;

function usage(msg: string): never {
  console.error(`${msg}\nusage: npm run fuzz -- NAME|all [--seconds N] [--seed S] [--replay FILE]\ntargets: ${TARGETS.map((t) => t.name).join(' ')}`);
  process.exit(2);
}

const args = process.argv.slice(2);
const name = args[0];
if (!name || name.startsWith('-')) usage('name a target');
const opt = (flag: string): string | undefined => {
  const i = args.indexOf(flag);
  return i < 0 ? undefined : (args[i + 1] ?? usage(`${flag} needs a value`));
};
const seconds = Number(opt('--seconds') ?? 60);
const seed = Number(opt('--seed') ?? Math.floor(Math.random() * 2 ** 31));
const replay = opt('--replay');
const targets = name === 'all' ? TARGETS : [targetNamed(name) ?? usage(`no target ${name}`)];

if (replay !== undefined) {
  try {
    await timedCheck(targets[0]!, readFileSync(replay), 30_000);
    console.log(`${name} ${replay}: passes`);
  } catch (e) {
    console.log(`${name} ${replay}: FAILS: ${describe(e)}`);
    process.exitCode = 1;
  }
} else {
  let failed = 0;
  for (const t of targets) if (!(await runOne(t.name))) failed++;
  process.exitCode = failed === 0 ? 0 : 1;
}

/** One target in a child process; true when it ran clean. */
function runOne(target: string): Promise<boolean> {
  console.log(`fuzz ${target}: ${seconds} s from seed ${seed}`);
  // The input being checked, rewritten before each check: what a hang or a crash leaves.
  const current = join(mkdtempSync(join(tmpdir(), 'vouch-fuzz-run-')), 'current');
  const child = spawn(
    process.execPath,
    [
      '--max-old-space-size=1024',
      '--import',
      'tsx',
      fileURLToPath(new URL('./run-worker.ts', import.meta.url)),
      target,
      String(seed),
      String(seconds),
      current,
    ],
    {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  const lastInput = (): Buffer | null => {
    try {
      return readFileSync(current);
    } catch {
      return null;
    }
  };
  const report = (why: string, input: Buffer | null) => {
    if (input === null) {
      console.log(`FAILED ${target} (seed ${seed}): ${why}\n  (before any input: nothing saved)`);
      return;
    }
    const file = saveRegression(target, input);
    console.log(
      `FAILED ${target} (seed ${seed}): ${why}\n  input: ${input.length} bytes, saved as ${file}\n  replay: npm run fuzz -- ${target} --replay ${file}`,
    );
  };
  return new Promise((resolve) => {
    let done = false;
    const finish = (ok: boolean) => {
      if (done) return;
      done = true;
      clearInterval(watch);
      child.kill('SIGKILL');
      rmSync(dirname(current), { recursive: true, force: true });
      resolve(ok);
    };
    const watch = setInterval(() => {
      let age = 0;
      try {
        age = Date.now() - statSync(current).mtimeMs;
      } catch {
        return;
      }
      if (age >= HANG_MS) {
        report(`one input ran for ${HANG_MS / 1000} s`, lastInput());
        finish(false);
      }
    }, 1000);
    child.on('message', (m: { runs: number; ms: number; growth: string | null; failure: { input: string; message: string; path: string } | null }) => {
      console.log(`fuzz ${target}: ${m.runs} runs in ${(m.ms / 1000).toFixed(1)} s`);
      if (m.growth !== null) {
        console.log(`FAILED ${target} (seed ${seed}): super-linear: ${m.growth}`);
        finish(false);
      } else if (m.failure) {
        report(`${m.failure.message}\n  (fast-check path ${m.failure.path})`, Buffer.from(m.failure.input, 'base64'));
        finish(false);
      } else finish(true);
    });
    child.on('exit', (code, signal) => {
      if (!done) {
        report(`the process died (${signal ?? `exit ${code}`})`, lastInput());
        finish(false);
      }
    });
  });
}
