/**
 * Worker bundles (platform/worker-bundle.ts): a worker runs a plain-JS bundle of
 * its TypeScript entry, and an edit to any file that went into the bundle is
 * picked up on the next call, never run stale; started with `bundleExecArgv()`
 * it loads none of the process's preloads (this file runs under tsx).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { bundleExecArgv, workerBundle } from '../../platform/worker-bundle.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dir = join(root, 'test', 'out', `worker-bundle-${process.pid}`);
const entry = join(dir, 'entry.ts');
const dep = join(dir, 'dep.ts');

test.after(() => {
  rmSync(dir, { recursive: true, force: true });
  const cache = join(root, 'node_modules', '.cache', 'vouch');
  for (const f of readdirSync(cache)) if (f.startsWith(`test_out_worker-bundle-${process.pid}_`)) rmSync(join(cache, f), { force: true });
});

function answer(url: URL, execArgv?: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const w = new Worker(url, { execArgv });
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

test('bundleExecArgv drops preload and loader flags with their values, and keeps every other flag', () => {
  assert.equal(
    bundleExecArgv([
      '--import',
      'tsx',
      '--cpu-prof',
      '--import=/x/file-tmpdir.mjs',
      '-r',
      './otel.cjs',
      '--require=a.cjs',
      '--max-old-space-size=512',
      '--loader',
      'ts-node/esm',
      '--experimental-loader=x.mjs',
      '--cpu-prof-dir=/tmp/p',
    ]),
    ['--cpu-prof', '--max-old-space-size=512', '--cpu-prof-dir=/tmp/p'],
  );
  assert.equal(bundleExecArgv([]), []);
});

test('a bundle started with bundleExecArgv runs without the loader this process preloads', async () => {
  assert.ok(
    process.execArgv.some((a) => a.includes('tsx')),
    `this file runs under tsx: ${process.execArgv.join(' ')}`,
  );
  mkdirSync(dir, { recursive: true });
  const probe = join(dir, 'probe.ts');
  // tsx's loader, once loaded, leaves its hooks' module in the cache: the worker reports whether it was loaded.
  writeFileSync(
    probe,
    "import { parentPort } from 'node:worker_threads';\nimport { createRequire } from 'node:module';\nconst req = createRequire(import.meta.url);\nconst loaded = Object.keys(req.cache).some((k) => /[\\/]tsx[\\/]/.test(k));\nparentPort!.postMessage(`${process.execArgv.join(' ')}|${loaded}`);\n",
  );
  const url = await workerBundle(pathToFileURL(probe));
  assert.ok(url, 'no bundle was built');
  const [inherited, inheritedLoaded] = (await answer(url!)).split('|');
  assert.ok(inherited!.includes('tsx') && inheritedLoaded === 'true', `by default a worker inherits tsx: ${inherited} ${inheritedLoaded}`);
  assert.is(await answer(url!, bundleExecArgv()), `${bundleExecArgv().join(' ')}|false`);
});

test.run();
