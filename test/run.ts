/**
 * Test runner: runs every `test/**\/*.test.ts` file in its own process with
 * uvu, bounded in time, and ends with the plain line `N passed, N failed`
 * that CI reads. Exits non-zero when any test failed, a file crashed or timed
 * out, or no test ran at all.
 *
 * Usage: tsx test/run.ts [substring filter...]
 */
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const FILE_TIMEOUT_MS = Number(process.env.VOUCH_TEST_FILE_TIMEOUT_MS ?? 10 * 60_000);

function findTests(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...findTests(p));
    else if (name.endsWith('.test.ts')) out.push(p);
  }
  return out;
}

interface FileResult { file: string; passed: number; failed: number; skipped: number; crashed: string | null; ms: number }

function runFile(file: string): Promise<FileResult> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, FORCE_COLOR: '0' },
      detached: true,
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => { out += d; process.stdout.write(d); });
    child.stderr.on('data', (d: Buffer) => { out += d; process.stderr.write(d); });
    const timer = setTimeout(() => {
      try { process.kill(-child.pid!, 'SIGKILL'); } catch { /* already gone */ }
    }, FILE_TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const total = Number(/Total:\s+(\d+)/.exec(out)?.[1] ?? NaN);
      const passed = Number(/Passed:\s+(\d+)/.exec(out)?.[1] ?? NaN);
      const skipped = Number(/Skipped:\s+(\d+)/.exec(out)?.[1] ?? 0);
      let crashed: string | null = null;
      if (signal) crashed = `killed by ${signal} (timeout ${FILE_TIMEOUT_MS} ms?)`;
      else if (Number.isNaN(total)) crashed = `exited ${code} without a uvu summary`;
      // uvu's Total counts the tests that ran; `test.skip` ones are only in Skipped.
      const failed = Number.isNaN(total) ? 0 : total - passed;
      if (!crashed && code !== 0 && failed === 0) crashed = `exited ${code} after its tests`;
      resolve({ file, passed: Number.isNaN(passed) ? 0 : passed, failed, skipped, crashed, ms: Date.now() - started });
    });
  });
}

const filters = process.argv.slice(2);
const files = findTests(join(root, 'test')).filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)));
let passed = 0;
let failed = 0;
let skipped = 0;
const problems: string[] = [];
for (const file of files) {
  const name = relative(root, file);
  console.log(`\n=== ${name}`);
  const r = await runFile(file);
  passed += r.passed;
  failed += r.failed;
  skipped += r.skipped;
  if (r.crashed) { failed += 1; problems.push(`${name}: ${r.crashed}`); }
  else if (r.failed) problems.push(`${name}: ${r.failed} failed`);
  console.log(`=== ${name}: ${r.passed} passed, ${r.failed} failed${r.skipped ? `, ${r.skipped} skipped` : ''} (${(r.ms / 1000).toFixed(1)} s)`);
}
console.log('');
for (const p of problems) console.log(`FAILED ${p}`);
if (passed + failed === 0) {
  console.log('no test ran');
  console.log('0 passed, 1 failed');
  process.exit(1);
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed === 0 ? 0 : 1);
