/**
 * Test runner: every `*.test.ts` under test/ (the kind folders unit/,
 * integration/, e2e/, hostile/, and files still flat in test/), one uvu file
 * per child process, a pool of them in parallel (VOUCH_TEST_JOBS, default
 * twice os.availableParallelism(): most files wait on the processes and
 * sockets they drive, about half a core each). A file's output is printed as one block when it
 * ends; each file is bounded in time (VOUCH_TEST_FILE_TIMEOUT_MS) and a file
 * that overruns is killed and counted as a failure. Ends with the plain line
 * `N passed, N failed` (tests, as uvu counts them, and uvu hooks that threw:
 * test/helpers/uvu-hooks.mjs) that CI reads; exits non-zero when any test
 * failed, a hook threw, a file crashed or timed out, or none ran.
 *
 * Longest files first (test/durations.json, refreshed by --record); files marked
 * `test-run: exclusive` run alone before the pool. Temp folders on tmpfs when there is room
 * (tempRoot), but for files marked `test-run: disk`.
 * Usage: tsx test/run.ts [--kind=unit,integration,e2e,hostile] [--jobs=N] [--record] [substring filter...]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, statfsSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const KINDS = ['unit', 'integration', 'e2e', 'hostile'] as const;
const SKIP_DIRS = new Set(['helpers', 'fuzz', 'vectors', 'node_modules']);
const root = fileURLToPath(new URL('..', import.meta.url));
const testDir = join(root, 'test');
// Per checkout (test/out/ is ignored by git; node_modules may be shared between worktrees).
const TIMES_FILE = join(testDir, 'out', 'test-times.json');
const CPU_FILE = join(testDir, 'out', 'test-cpu.json');
/** Committed durations (ms) of a full run, so a fresh clone (CI) also starts the longest files first. */
const DURATIONS_FILE = join(testDir, 'durations.json');
const PRELOAD = join(testDir, 'helpers', 'file-tmpdir.mjs');
/** Makes a throwing uvu hook a failure with its message (uvu drops `before`'s error and exits 0). */
const HOOKS_PRELOAD = join(testDir, 'helpers', 'uvu-hooks.mjs');

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

function parseArgs(argv: string[]): { kinds: string[] | null; jobs: number; filters: string[]; record: boolean } {
  let kinds: string[] | null = null;
  let record = false;
  let jobs = Number(process.env.VOUCH_TEST_JOBS || 2 * availableParallelism());
  const filters: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--record') {
      record = true;
      continue;
    }
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
  return { kinds, jobs, filters, record };
}

function usage(why: string): never {
  console.error(`test/run.ts: ${why}\nusage: tsx test/run.ts [--kind=${KINDS.join(',')}] [--jobs=N] [--record] [substring filter...]`);
  process.exit(2);
}

interface FileResult {
  name: string;
  passed: number;
  failed: number;
  skipped: number;
  crashed: string | null;
  /** uvu hooks (`before`, `after`, `after.each`) that threw, each also counted in `failed`. */
  hookErrors: number;
  ms: number;
  /** CPU seconds of the file's process and the children it reaped; null when it did not say. */
  cpuS: number | null;
  output: string;
}

const FILE_TIMEOUT_MS = Number(process.env.VOUCH_TEST_FILE_TIMEOUT_MS ?? 10 * 60_000);

/** Room a RAM-backed temp root needs, free in it and in memory: the largest files take ~3 GiB at once (eco-oci's 1 GiB layer). */
const TMPFS_ROOM = 8 * 1024 ** 3;

/**
 * Where each file's own temp folder is made: VOUCH_TEST_TMP_ROOT when set; else /dev/shm when it is a
 * tmpfs with TMPFS_ROOM free and as much memory available; else the system's. The files write,
 * rename and fsync thousands of small files (chains, git objects, packs): on a disk file system that
 * costs kernel CPU and waits on the journal (chain-pack: 28 s of CPU and 150 s on ext4, 16 s and 23 s
 * on tmpfs), on tmpfs an fsync is nothing. No test needs a disk: a process killed loses no page either way.
 */
function tempRoot(): string {
  const set = process.env.VOUCH_TEST_TMP_ROOT;
  if (set) return set;
  try {
    const mounted = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .some((l) => /^\S+ \/dev\/shm tmpfs /.test(l));
    const fs = statfsSync('/dev/shm');
    const available = Number(/^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? 0) * 1024;
    if (mounted && fs.bavail * fs.bsize >= TMPFS_ROOM && available >= TMPFS_ROOM) return '/dev/shm';
  } catch {
    /* not Linux */
  }
  return tmpdir();
}
const TMP_ROOT = tempRoot();
const running = new Set<ChildProcess>();

/** Runs one file in its own process group with its own TMPDIR; resolves with uvu's counts and all it printed. */
function runFile(file: string): Promise<FileResult> {
  const name = relative(root, file);
  const started = Date.now();
  const tmp = mkdtempSync(join(onDisk(file) ? tmpdir() : TMP_ROOT, 'vt-'));
  return new Promise((resolve) => {
    // tsx keeps its transform cache under the TMPDIR it starts with: the shared one, so each module is
    // compiled once per checkout, not once per file; the preload then hands the file its own TMPDIR.
    const child = spawn(process.execPath, ['--import', 'tsx', '--import', PRELOAD, '--import', HOOKS_PRELOAD, file], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, FORCE_COLOR: '0', VOUCH_TEST_TMPDIR: tmp, VOUCH_TEST_CPU_FILE: `${tmp}.cpu`, VOUCH_TEST_HOOKS_FILE: `${tmp}.hooks` },
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
      let cpuS: number | null = null;
      try {
        cpuS = Number(readFileSync(`${tmp}.cpu`, 'utf8'));
        rmSync(`${tmp}.cpu`, { force: true });
      } catch {
        /* killed, or not Linux */
      }
      let hookErrors = 0;
      try {
        hookErrors = readFileSync(`${tmp}.hooks`, 'utf8').split('\n').filter(Boolean).length;
        rmSync(`${tmp}.hooks`, { force: true });
      } catch {
        /* no hook threw */
      }
      const total = Number(/Total:\s+(\d+)/.exec(out)?.[1] ?? NaN);
      const passed = Number(/Passed:\s+(\d+)/.exec(out)?.[1] ?? NaN);
      const skipped = Number(/Skipped:\s+(\d+)/.exec(out)?.[1] ?? 0);
      let crashed: string | null = null;
      if (timedOut) crashed = `timed out after ${FILE_TIMEOUT_MS} ms (VOUCH_TEST_FILE_TIMEOUT_MS), killed`;
      else if (signal) crashed = `killed by ${signal}`;
      else if (Number.isNaN(total)) crashed = `exited ${code} without a uvu summary`;
      // uvu's Total counts the tests that ran; `test.skip` ones are only in Skipped. A hook that threw
      // is one failure more (a `before`'s tests did not run: uvu counts them as not passed).
      const failed = (Number.isNaN(total) ? 0 : total - passed) + hookErrors;
      if (!crashed && code !== 0 && failed === 0) crashed = `exited ${code} after its tests`;
      resolve({ name, passed: Number.isNaN(passed) ? 0 : passed, failed, skipped, crashed, hookErrors, ms: Date.now() - started, cpuS, output: out });
    });
  });
}

function readJson(path: string): Record<string, number> {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Record<string, number>;
  } catch {
    return {};
  }
}

/** Saved after every file, so an interrupted run still orders the next one. */
function saveJson(path: string, table: Record<string, number>): void {
  try {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, `${JSON.stringify(table, null, 1)}\n`);
  } catch {
    /* only an ordering hint */
  }
}

/**
 * A file whose first 2,000 characters say `test-run: exclusive` measures wall-clock time against
 * a bound (latency under load, a stall's timeout): it runs alone, before the pool starts.
 */
function isExclusive(file: string): boolean {
  return /\btest-run: exclusive\b/.test(readFileSync(file, 'utf8').slice(0, 2_000));
}

/**
 * A file whose first 2,000 characters say `test-run: disk` weighs the speed of file writes against
 * git's (appends beside a repack): its temp folder stays on the system's temp directory, never tmpfs.
 */
function onDisk(file: string): boolean {
  return /\btest-run: disk\b/.test(readFileSync(file, 'utf8').slice(0, 2_000));
}

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

const { kinds, jobs, filters, record } = parseArgs(process.argv.slice(2));
const all = findTests(testDir);
const flat = all.filter((f) => kindOf(f) === null);
const files = all.filter((f) => kinds === null || kinds.includes(kindOf(f) ?? '')).filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)));
// Longest first (times of earlier runs on this checkout, else the committed table), so the pool does
// not end on one long file; a file in neither is taken for a long one.
const times = readJson(TIMES_FILE);
const expected = { ...readJson(DURATIONS_FILE), ...times };
const byLength = [...files].sort((a, b) => (expected[relative(root, b)] ?? 60_000) - (expected[relative(root, a)] ?? 60_000));
const alone = byLength.filter(isExclusive);
const order = byLength.filter((f) => !alone.includes(f));

const startedAt = Date.now();
console.log(
  `${files.length} test file${files.length === 1 ? '' : 's'}, ${Math.min(jobs, Math.max(files.length, 1))} at a time${kinds ? ` (${kinds.join(', ')})` : ''}${alone.length ? `; ${alone.length} alone first (test-run: exclusive)` : ''}`,
);
if (kinds && flat.length) console.log(`not in a kind folder, so not run with --kind: ${flat.map((f) => relative(root, f)).join(', ')}`);

let passed = 0;
let failed = 0;
let skipped = 0;
const problems: string[] = [];
let cpuTotal = 0;
const cpu: Record<string, number> = readJson(CPU_FILE);
let next = 0;
async function worker(queue: string[]): Promise<void> {
  while (next < queue.length) {
    const r = await runFile(queue[next++]!);
    times[r.name] = r.ms;
    saveJson(TIMES_FILE, times);
    if (r.cpuS !== null) {
      cpu[r.name] = r.cpuS;
      cpuTotal += r.cpuS;
      saveJson(CPU_FILE, cpu);
    }
    passed += r.passed;
    failed += r.failed;
    skipped += r.skipped;
    if (r.crashed) {
      failed += 1;
      problems.push(`${r.name}: ${r.crashed}`);
    } else if (r.failed) problems.push(`${r.name}: ${r.failed} failed${r.hookErrors ? ` (${r.hookErrors} of them hooks that threw)` : ''}`);
    const bad = r.crashed !== null || r.failed > 0;
    const head = `=== ${r.name}: ${r.passed} passed, ${r.failed} failed${r.hookErrors ? ` (${r.hookErrors} of them hooks that threw)` : ''}${r.skipped ? `, ${r.skipped} skipped` : ''}${r.crashed ? ` (${r.crashed})` : ''} (${(r.ms / 1000).toFixed(1)} s)`;
    // One write per file so blocks of files ending together never interleave.
    process.stdout.write(`\n=== ${r.name}${bad ? ' FAILED' : ''}\n${r.output}${r.output.endsWith('\n') || !r.output ? '' : '\n'}${head}\n`);
  }
}
await worker(alone);
next = 0;
await Promise.all(Array.from({ length: Math.min(jobs, Math.max(order.length, 1)) }, () => worker(order)));

if (record) {
  // The committed table: this run's times of the files that ran, the others' as they were.
  const table = readJson(DURATIONS_FILE);
  for (const f of files) table[relative(root, f)] = times[relative(root, f)]!;
  for (const name of Object.keys(table)) if (!all.some((f) => relative(root, f) === name)) delete table[name];
  const sorted = Object.fromEntries(Object.entries(table).sort(([a], [b]) => (a < b ? -1 : 1)));
  writeFileSync(DURATIONS_FILE, `${JSON.stringify(sorted, null, 1)}\n`);
}
console.log(
  `\n${files.length} file${files.length === 1 ? '' : 's'} in ${((Date.now() - startedAt) / 1000).toFixed(1)} s with ${jobs} jobs` +
    `; ${cpuTotal.toFixed(1)} s of CPU in the files and their children, temp folders in ${TMP_ROOT}, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
);
for (const p of problems) console.log(`FAILED ${p}`);
if (passed + failed === 0) {
  console.log('no test ran');
  console.log('0 passed, 1 failed');
  process.exit(1);
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed === 0 ? 0 : 1);
