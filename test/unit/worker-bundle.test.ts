/**
 * Worker bundles (platform/worker-bundle.ts): a worker runs a plain-JS bundle of
 * its TypeScript entry, and an edit to any file that went into the bundle is
 * picked up on the next call, never run stale; started by `startBundleWorker`
 * it loads none of the process's preloads (this file runs under tsx).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { bundleExecArgv, startBundleWorker, workerBundle } from '../../platform/worker-bundle.ts';

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
  assert.is(bundleExecArgv([]), undefined, 'nothing to drop: the worker inherits');
  assert.is(bundleExecArgv(['--max-old-space-size=512', '--cpu-prof']), undefined);
});

/** What a worker on `url` reports: its execArgv and whether tsx's loader was loaded in it. */
function report(w: Worker): Promise<{ argv: string; tsx: boolean }> {
  return new Promise((resolve, reject) => {
    w.once('message', (m: string) => {
      void w.terminate();
      const [argv, tsx] = m.split('|');
      resolve({ argv: argv!, tsx: tsx === 'true' });
    });
    w.once('error', reject);
  });
}

test('a bundle started by startBundleWorker runs without the loader this process preloads; with a flag a worker may not be given, as before', async () => {
  assert.ok(
    process.execArgv.some((a) => a.includes('tsx')),
    `this file runs under tsx: ${process.execArgv.join(' ')}`,
  );
  mkdirSync(dir, { recursive: true });
  const probe = join(dir, 'probe.ts');
  // tsx's loader, once loaded, leaves its modules in the CommonJS cache: the worker reports whether it was loaded.
  writeFileSync(
    probe,
    "import { parentPort } from 'node:worker_threads';\nimport { createRequire } from 'node:module';\nconst req = createRequire(import.meta.url);\nconst loaded = Object.keys(req.cache).some((k) => /[\\/]tsx[\\/]/.test(k));\nparentPort!.postMessage(`${process.execArgv.join(' ')}|${loaded}`);\n",
  );
  const url = await workerBundle(pathToFileURL(probe));
  assert.ok(url, 'no bundle was built');
  const inherited = await report(new Worker(url!));
  assert.ok(inherited.argv.includes('tsx') && inherited.tsx, `by default a worker inherits tsx: ${JSON.stringify(inherited)}`);
  assert.equal(await report(startBundleWorker(url!)), { argv: bundleExecArgv()!.join(' '), tsx: false });
  // A V8 flag in execArgv (as `node --max-old-space-size=… dist/cli.mjs serve` has): given explicitly, a worker
  // refuses it (ERR_WORKER_INVALID_EXEC_ARGV); the worker starts as before, inheriting.
  const own = process.execArgv;
  process.execArgv = [...own, '--max-old-space-size=4096'];
  try {
    assert.throws(() => new Worker(url!, { execArgv: bundleExecArgv() }), /invalid execArgv/);
    const w = await report(startBundleWorker(url!));
    assert.ok(w.argv.includes('tsx') && w.tsx, `inherited: ${JSON.stringify(w)}`);
  } finally {
    process.execArgv = own;
  }
});

test.run();
