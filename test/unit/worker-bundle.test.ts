/**
 * Worker bundles (platform/worker-bundle.ts): a worker runs a plain-JS bundle of
 * its TypeScript entry, and an edit to any file that went into the bundle is
 * picked up on the next call, never run stale.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { workerBundle } from '../../platform/worker-bundle.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dir = join(root, 'test', 'out', `worker-bundle-${process.pid}`);
const entry = join(dir, 'entry.ts');
const dep = join(dir, 'dep.ts');

test.after(() => {
  rmSync(dir, { recursive: true, force: true });
  const cache = join(root, 'node_modules', '.cache', 'vouch');
  for (const f of readdirSync(cache)) if (f.startsWith(`test_out_worker-bundle-${process.pid}_`)) rmSync(join(cache, f), { force: true });
});

function answer(url: URL): Promise<string> {
  return new Promise((resolve, reject) => {
    const w = new Worker(url);
    w.once('message', (m: string) => {
      void w.terminate();
      resolve(m);
    });
    w.once('error', reject);
  });
}

test('a bundle runs in a worker and is rebuilt when a file it was built from changes', async () => {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    entry,
    "import { parentPort } from 'node:worker_threads';\nimport { word } from './dep.ts';\nconst n: number = 1;\nparentPort!.postMessage(`${word} ${n}`);\n",
  );
  writeFileSync(dep, "export const word: string = 'first';\n");
  const a = await workerBundle(pathToFileURL(entry));
  assert.ok(a, 'no bundle was built');
  assert.ok(a!.pathname.endsWith('.mjs'), a!.href);
  assert.is(await answer(a!), 'first 1');
  assert.equal(await workerBundle(pathToFileURL(entry)), a, 'unchanged sources reuse the bundle');

  writeFileSync(dep, "export const word: string = 'second';\n"); // an imported file, not the entry
  const b = await workerBundle(pathToFileURL(entry));
  assert.ok(b && b.href !== a!.href, 'an edited dependency must give a new bundle');
  assert.is(await answer(b!), 'second 1');
});

test('the verify worker bundles, and a missing entry gives null (the caller falls back)', async () => {
  const v = await workerBundle(new URL('../../store/verify-worker-impl.ts', import.meta.url));
  assert.ok(v, 'the verify worker did not bundle');
  assert.is(await workerBundle(pathToFileURL(join(dir, 'missing.ts'))), null);
});

test.run();
