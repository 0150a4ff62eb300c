/**
 * Test runner: every `*.test.ts` under test/ (the kind folders unit/,
 * integration/, e2e/, hostile/, and files still flat in test/), one uvu file
 * per child process, a pool of them in parallel (VOUCH_TEST_JOBS, default
 * os.availableParallelism()). A file's output is printed as one block when it
 * ends; each file is bounded in time (VOUCH_TEST_FILE_TIMEOUT_MS) and a file
 * that overruns is killed and counted as a failure. Ends with the plain line
 * `N passed, N failed` (tests, as uvu counts them) that CI reads; exits
 * non-zero when any test failed, a file crashed or timed out, or none ran.
 *
 * Usage: tsx test/run.ts [--kind=unit,integration,e2e,hostile] [--jobs=N] [substring filter...]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const KINDS = ['unit', 'integration', 'e2e', 'hostile'] as const;
const SKIP_DIRS = new Set(['helpers', 'fuzz', 'vectors', 'node_modules']);
const root = fileURLToPath(new URL('..', import.meta.url));
const testDir = join(root, 'test');
const TIMES_FILE = join(root, 'node_modules', '.cache', 'vouch-test-times.json');

/** Every test file below `dir`, sorted; the helper, fuzz-harness and vector folders hold none. */
function findTests(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (!SKIP_DIRS.has(name)) out.push(...findTests(p));
    } else if (name.endsWith('.test.ts')) out.push(p);
  }
  return out;
}

/** The kind folder a file is in, or null for a file still flat in test/. */
function kindOf(file: string): string | null {
  const first = relative(testDir, file).split(sep)[0]!;
  return (KINDS as readonly string[]).includes(first) ? first : null;
}

function parseArgs(argv: string[]): { kinds: string[] | null; jobs: number; filters: string[] } {
  let kinds: string[] | null = null;
  let jobs = Number(process.env.VOUCH_TEST_JOBS || availableParallelism());
  const filters: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const m = /^--(kind|jobs)(?:=(.*))?$/.exec(a);
    if (!m) {
      filters.push(a);
      continue;
    }
    const v = m[2] ?? argv[++i];
    if (v === undefined) usage(`${a} needs a value`);
    if (m[1] === 'kind') {
      kinds = v.split(',').filter(Boolean);
      for (const k of kinds) if (!(KINDS as readonly string[]).includes(k)) usage(`unknown kind "${k}" (${KINDS.join(', ')})`);
    } else jobs = Number(v);
  }
  if (!Number.isInteger(jobs) || jobs < 1) usage(`jobs must be a whole number ≥ 1 (VOUCH_TEST_JOBS or --jobs), not "${jobs}"`);
  return { kinds, jobs, filters };
}

function usage(why: string): never {
  console.error(`test/run.ts: ${why}\nusage: tsx test/run.ts [--kind=${KINDS.join(',')}] [--jobs=N] [substring filter...]`);
  process.exit(2);
}

interface FileResult {
  name: string;
  passed: number;
  failed: number;
  skipped: number;
  crashed: string | null;
  ms: number;
  output: string;
}

const FILE_TIMEOUT_MS = Number(process.env.VOUCH_TEST_FILE_TIMEOUT_MS ?? 10 * 60_000);
const running = new Set<ChildProcess>();

/** Runs one file in its own process group with its own TMPDIR; resolves with uvu's counts and all it printed. */
function runFile(file: string): Promise<FileResult> {
  const name = relative(root, file);
  const started = Date.now();
  const tmp = mkdtempSync(join(tmpdir(), 'vt-'));
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, FORCE_COLOR: '0', TMPDIR: tmp },
      detached: true,
    });
    running.add(child);
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d;
    });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }, FILE_TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      running.delete(child);
      // Whatever the file's children left running in its group goes with it.
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* none left */
      }
      rmSync(tmp, { recursive: true, force: true, maxRetries: 3 });
      const total = Number(/Total:\s+(\d+)/.exec(out)?.[1] ?? NaN);
      const passed = Number(/Passed:\s+(\d+)/.exec(out)?.[1] ?? NaN);
      const skipped = Number(/Skipped:\s+(\d+)/.exec(out)?.[1] ?? 0);
      let crashed: string | null = null;
      if (timedOut) crashed = `timed out after ${FILE_TIMEOUT_MS} ms (VOUCH_TEST_FILE_TIMEOUT_MS), killed`;
      else if (signal) crashed = `killed by ${signal}`;
      else if (Number.isNaN(total)) crashed = `exited ${code} without a uvu summary`;
      // uvu's Total counts the tests that ran; `test.skip` ones are only in Skipped.
      const failed = Number.isNaN(total) ? 0 : total - passed;
      if (!crashed && code !== 0 && failed === 0) crashed = `exited ${code} after its tests`;
      resolve({ name, passed: Number.isNaN(passed) ? 0 : passed, failed, skipped, crashed, ms: Date.now() - started, output: out });
    });
  });
}

function readTimes(): Record<string, number> {
  try {
    return JSON.parse(readFileSync(TIMES_FILE, 'utf8')) as Record<string, number>;
  } catch {
    return {};
  }
}

/** Saved after every file, so an interrupted run still orders the next one. */
function saveTimes(times: Record<string, number>): void {}

for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    for (const c of running) {
      try {
        process.kill(-c.pid!, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    process.exit(130);
  });
}

const { kinds, jobs, filters } = parseArgs(process.argv.slice(2));
const all = findTests(testDir);
const flat = all.filter((f) => kindOf(f) === null);
const files = all.filter((f) => kinds === null || kinds.includes(kindOf(f) ?? '')).filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)));
// Longest first (times of earlier runs on this checkout), so the pool does not end on one long file.
const times = readTimes();
const order = [...files].sort((a, b) => (times[relative(root, b)] ?? 60_000) - (times[relative(root, a)] ?? 60_000));

const startedAt = Date.now();
console.log(
  `${files.length} test file${files.length === 1 ? '' : 's'}, ${Math.min(jobs, Math.max(files.length, 1))} at a time${kinds ? ` (${kinds.join(', ')})` : ''}`,
);
if (kinds && flat.length) console.log(`not in a kind folder, so not run with --kind: ${flat.map((f) => relative(root, f)).join(', ')}`);

let passed = 0;
let failed = 0;
let skipped = 0;
const problems: string[] = [];
let next = 0;
async function worker(): Promise<void> {
  while (next < order.length) {
    const r = await runFile(order[next++]!);
    times[r.name] = r.ms;
    saveTimes(times);
    passed += r.passed;
    failed += r.failed;
    skipped += r.skipped;
    if (r.crashed) {
      failed += 1;
      problems.push(`${r.name}: ${r.crashed}`);
    } else if (r.failed) problems.push(`${r.name}: ${r.failed} failed`);
    const bad = r.crashed !== null || r.failed > 0;
    const head = `=== ${r.name}: ${r.passed} passed, ${r.failed} failed${r.skipped ? `, ${r.skipped} skipped` : ''}${r.crashed ? ` (${r.crashed})` : ''} (${(r.ms / 1000).toFixed(1)} s)`;
    // One write per file so blocks of files ending together never interleave.
    process.stdout.write(`\n=== ${r.name}${bad ? ' FAILED' : ''}\n${r.output}${r.output.endsWith('\n') || !r.output ? '' : '\n'}${head}\n`);
  }
}
await Promise.all(Array.from({ length: Math.min(jobs, Math.max(order.length, 1)) }, worker));

console.log(`\n${files.length} file${files.length === 1 ? '' : 's'} in ${((Date.now() - startedAt) / 1000).toFixed(1)} s with ${jobs} jobs`);
for (const p of problems) console.log(`FAILED ${p}`);
if (passed + failed === 0) {
  console.log('no test ran');
  console.log('0 passed, 1 failed');
  process.exit(1);
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed === 0 ? 0 : 1);
