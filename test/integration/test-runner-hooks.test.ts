/**
 * test/run.ts and a throwing uvu hook (issue 33 item 4): uvu 0.5 alone prints nothing when a
 * `before` hook throws (its tests show "(0 / 1)", a file with no test passes, the exit code is
 * 0), loses the summary when `after` throws and the error when `after.each` does. Runs the real
 * runner over fixture test files in a copy of the test tree (test/run.ts and its preloads,
 * node_modules linked) and checks each hook's message and stack are in the file's block, each
 * counts as a failure, the run goes on past `after`, and the run exits non-zero.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { copyFileSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runAsync, type Run } from '../helpers/processes.ts';
import { repoRoot } from '../helpers/vectors.ts';

const FIXTURES: Record<string, string> = {
  'unit/before.test.ts': `import { test } from 'uvu';
import * as assert from 'uvu/assert';
test.before(() => {
  throw new Error('fixture: the before hook broke');
});
test('never runs', () => assert.ok(true));
test.run();
`,
  // No test at all: the run's only sign of the broken hook is the hook's own failure.
  'unit/empty.test.ts': `import { test } from 'uvu';
test.before(async () => {
  await Promise.resolve();
  throw new Error('fixture: the async before hook of an empty file broke');
});
test.run();
`,
  'unit/after.test.ts': `import { suite } from 'uvu';
import * as assert from 'uvu/assert';
const cleanup = suite('cleanup');
cleanup.after(() => {
  throw new Error('fixture: the after hook broke');
});
cleanup('passes before its after hook', () => assert.ok(true));
cleanup.run();
const each = suite('each');
each.after.each(() => {
  throw new Error('fixture: the after.each hook broke');
});
each('passes before its after.each hook', () => assert.ok(true));
each.run();
const later = suite('later');
later('runs after the suites whose hooks broke', () => assert.ok(true));
later.run();
`,
  'unit/fine.test.ts': `import { test } from 'uvu';
import * as assert from 'uvu/assert';
test('passes', () => assert.ok(true));
test.run();
`,
};

let tree = '';
let run: Run;

test.before(async () => {
  tree = mkdtempSync(join(tmpdir(), 'runner-hooks-'));
  mkdirSync(join(tree, 'test', 'helpers'), { recursive: true });
  mkdirSync(join(tree, 'test', 'unit'));
  copyFileSync(join(repoRoot, 'test', 'run.ts'), join(tree, 'test', 'run.ts'));
  for (const f of ['file-tmpdir.mjs', 'uvu-hooks.mjs']) copyFileSync(join(repoRoot, 'test', 'helpers', f), join(tree, 'test', 'helpers', f));
  for (const [name, text] of Object.entries(FIXTURES)) writeFileSync(join(tree, 'test', name), text);
  writeFileSync(join(tree, 'package.json'), '{ "type": "module", "private": true }\n');
  symlinkSync(realpathSync(join(repoRoot, 'node_modules')), join(tree, 'node_modules'));
  run = await runAsync(process.execPath, ['--import', 'tsx', join(tree, 'test', 'run.ts'), '--jobs=2'], {
    cwd: tree,
    timeoutMs: 120_000,
  });
});

test.after(() => {
  if (tree) rmSync(tree, { recursive: true, force: true });
});

/** The block test/run.ts printed for one file: from its `=== name` line to its `=== name: …` line. */
function block(name: string): string {
  const start = run.stdout.indexOf(`\n=== test/${name}`);
  assert.ok(start >= 0, `no block for ${name} in:\n${run.stdout}${run.stderr}`);
  const end = run.stdout.indexOf(`\n=== test/${name}: `, start);
  assert.ok(end > start, `no summary line for ${name} in:\n${run.stdout}`);
  return run.stdout.slice(start, run.stdout.indexOf('\n', end + 1));
}

test('a throwing before hook: its message and stack in the block, one failure more than its tests', () => {
  const b = block('unit/before.test.ts');
  assert.match(b, /^=== test\/unit\/before\.test\.ts FAILED$/m);
  assert.match(b, /FAIL {2}hook test\.before threw \(its tests did not run\)\n {4}fixture: the before hook broke\n {4}at .*before\.test\.ts:4:/);
  assert.match(b, /^=== test\/unit\/before\.test\.ts: 0 passed, 2 failed \(1 of them hooks that threw\)/m);
});

test('a file with no test whose before hook throws fails (uvu alone: 0 passed, 0 failed)', () => {
  const b = block('unit/empty.test.ts');
  assert.match(b, /^=== test\/unit\/empty\.test\.ts FAILED$/m);
  assert.match(b, /hook test\.before threw.*\n {4}fixture: the async before hook of an empty file broke\n {4}at .*empty\.test\.ts:4:/);
  assert.match(b, /^=== test\/unit\/empty\.test\.ts: 0 passed, 1 failed \(1 of them hooks that threw\)/m);
});

test('throwing after and after.each hooks: reported, counted, and the file goes on to its next suites', () => {
  const b = block('unit/after.test.ts');
  assert.match(b, /hook suite "cleanup"\.after threw\n {4}fixture: the after hook broke\n {4}at .*after\.test\.ts:5:/);
  assert.match(b, /hook suite "each"\.after\.each \(after "passes before its after\.each hook"\) threw\n {4}fixture: the after\.each hook broke/);
  // uvu's own summary is there: the after hook's rejection no longer ends the process before it.
  assert.match(b, /Total: {5}3\n {2}Passed: {4}3/);
  assert.match(b, /^=== test\/unit\/after\.test\.ts: 3 passed, 2 failed \(2 of them hooks that threw\)/m);
});

test('a file whose hooks hold: unchanged', () => {
  const b = block('unit/fine.test.ts');
  assert.not.match(b, /FAILED|hook/);
  assert.match(b, /^=== test\/unit\/fine\.test\.ts: 1 passed, 0 failed/m);
});

test('the run lists the files, counts every hook, and exits non-zero', () => {
  assert.equal(run.status, 1, run.stdout + run.stderr);
  assert.match(run.stdout, /^FAILED test\/unit\/before\.test\.ts: 2 failed \(1 of them hooks that threw\)$/m);
  assert.match(run.stdout, /^FAILED test\/unit\/empty\.test\.ts: 1 failed \(1 of them hooks that threw\)$/m);
  assert.match(run.stdout, /^FAILED test\/unit\/after\.test\.ts: 2 failed \(2 of them hooks that threw\)$/m);
  assert.match(run.stdout, /\n4 passed, 5 failed\n$/);
});

test.run();
