/**
 * test/durations.json, the table test/run.ts starts the longest files first by
 * on a fresh clone (CI): it names every test file and no file that is gone, so
 * a new or moved file is not taken for a long one (or a long one for a short one).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { repoRoot } from '../helpers/vectors.ts';

const SKIP = new Set(['helpers', 'fuzz', 'vectors', 'node_modules', 'out']);
function testFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (!SKIP.has(name)) out.push(...testFiles(p));
    } else if (name.endsWith('.test.ts')) out.push(relative(repoRoot, p));
  }
  return out.sort();
}

test('every test file has a duration, and every duration a test file (refresh: npx tsx test/run.ts --record)', () => {
  const table = JSON.parse(readFileSync(join(repoRoot, 'test', 'durations.json'), 'utf8')) as Record<string, number>;
  const files = testFiles(join(repoRoot, 'test'));
  assert.equal(
    files.filter((f) => !(f in table)),
    [],
    'files without a duration',
  );
  assert.equal(
    Object.keys(table).filter((f) => !files.includes(f)),
    [],
    'durations of files that are gone',
  );
  for (const [f, ms] of Object.entries(table)) assert.ok(Number.isInteger(ms) && ms > 0, `${f}: ${ms}`);
});

test.run();
