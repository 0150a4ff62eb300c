/**
 * Plain-JavaScript bundles of worker entry points, so a worker thread
 * starts without loading the TypeScript loader and transpiling every module
 * again. Built code (dist/, `__VOUCH_BUILT__`) uses the bundles the build
 * wrote; from sources (tsx: tests, `vouch` before a build) esbuild, a dev
 * dependency, is imported only when a bundle must be made.
 * Owns: the bundle cache in `node_modules/.cache/vouch/` (one `.mjs` per
 * entry plus a manifest of its inputs and their sha256).
 * Must hold: a bundle is used only while every input has the content it was
 * built from (checked on every call), so an edited source never runs stale;
 * without a writable cache or esbuild, the caller falls back to its
 * loader-based entry. A worker on a bundle starts through
 * `startBundleWorker`: no preload or loader flag of the process (tsx's, the
 * test runner's) is loaded again in it.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker, type WorkerOptions } from 'node:worker_threads';

/** Defined (true) by esbuild only in the built code in dist/ (tools/build.mjs). */
declare const __VOUCH_BUILT__: boolean | undefined;
/** True when this code runs from dist/, built by `npm run build`. */
export const BUILT = typeof __VOUCH_BUILT__ !== 'undefined' && __VOUCH_BUILT__ === true;

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const CACHE_DIR = join(ROOT, 'node_modules', '.cache', 'vouch');

interface Manifest {
  inputs: string[];
  digest: string;
}

function digestOf(inputs: string[]): string | null {
  const h = createHash('sha256');
  try {
    for (const f of inputs)
      h.update(f)
        .update('\0')
        .update(readFileSync(join(ROOT, f)))
        .update('\0');
  } catch {
    return null;
  }
  return h.digest('hex');
}

function fresh(name: string): URL | null {
  try {
    const m = JSON.parse(readFileSync(join(CACHE_DIR, `${name}.json`), 'utf8')) as Manifest;
    if (!Array.isArray(m.inputs) || digestOf(m.inputs) !== m.digest) return null;
    return pathToFileURL(join(CACHE_DIR, `${name}-${m.digest.slice(0, 16)}.mjs`));
  } catch {
    return null;
  }
}

async function build(entry: string, name: string): Promise<URL> {
  const { build: esbuild } = await import('esbuild');
  const r = await esbuild({
    entryPoints: [entry],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    write: false,
    metafile: true,
    logLevel: 'silent',
    absWorkingDir: ROOT,
  });
  const inputs = Object.keys(r.metafile!.inputs).sort();
  const digest = digestOf(inputs);
  if (digest === null) throw new Error('an input vanished while bundling');
  mkdirSync(CACHE_DIR, { recursive: true });
  const out = join(CACHE_DIR, `${name}-${digest.slice(0, 16)}.mjs`);
  const tmp = `${out}.${process.pid}.tmp`;
  writeFileSync(tmp, r.outputFiles![0]!.contents);
  renameSync(tmp, out);
  const mtmp = join(CACHE_DIR, `${name}.json.${process.pid}.tmp`);
  writeFileSync(mtmp, JSON.stringify({ inputs, digest } satisfies Manifest));
  renameSync(mtmp, join(CACHE_DIR, `${name}.json`));
  // Bundles of older sources: removed once nothing can still be starting from them.
  for (const f of readdirSync(CACHE_DIR)) {
    const old = join(CACHE_DIR, f);
    if (f.startsWith(`${name}-`) && old !== out) {
      try {
        if (Date.now() - statSync(old).mtimeMs > 3_600_000) unlinkSync(old);
      } catch {
        /* another process removed it */
      }
    }
  }
  return pathToFileURL(out);
}

/**
 * URL of a plain-JS bundle of the TypeScript module `entry` (a file URL),
 * built on first use and rebuilt when any input changed; null when no bundle
 * can be had (the caller then uses its loader-based entry). In the built
 * code, the build's own bundle beside it: `dist/<entry's base name>.mjs`
 * (`entry`, made from the bundle's `import.meta.url`, names dist/ there).
 */
export async function workerBundle(entry: URL): Promise<URL | null> {
  const path = fileURLToPath(entry);
  if (BUILT) return pathToFileURL(join(dirname(path), basename(path).replace(/\.[cm]?ts$/, '.mjs')));
  const name = path
    .slice(ROOT.length + 1)
    .replace(/\.[cm]?ts$/, '')
    .replace(/[^A-Za-z0-9_-]+/g, '_');
  const url = fresh(name);
  if (url !== null) return url;
  try {
    return await build(path, name);
  } catch {
    return null;
  }
}

/** Flags of `execArgv` that preload a module or register a loader; each takes a value (`--import x` or `--import=x`). */
const PRELOAD_FLAGS = new Set(['--import', '--require', '-r', '--loader', '--experimental-loader']);

/**
 * `argv` (the process's `execArgv`) without its preload and loader flags;
 * undefined when it has none (a worker then inherits the process's options
 * as it does by default). Every other flag stays.
 */
export function bundleExecArgv(argv: readonly string[] = process.execArgv): string[] | undefined {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const eq = a.indexOf('=');
    if (PRELOAD_FLAGS.has(a)) {
      i++; // and its value
    } else if (!(eq > 0 && PRELOAD_FLAGS.has(a.slice(0, eq)))) out.push(a);
  }
  return out.length === argv.length ? undefined : out;
}

/**
 * A worker on a bundle of `workerBundle`, started without the process's
 * preload and loader flags (`bundleExecArgv`). A worker inherits them and
 * loads them again on each start (under the test runner: tsx's loader and
 * the runner's preloads, in every worker: docs/testing.md "Where the CPU
 * goes"), though the bundle is plain JavaScript that needs none. A flag a
 * worker may not be given explicitly (`--max-old-space-size`, `--expose-gc`
 * and other V8 or process-wide options: ERR_WORKER_INVALID_EXEC_ARGV) makes
 * it start as before, inheriting everything.
 */
export function startBundleWorker(entry: URL, options: WorkerOptions = {}): Worker {
  const execArgv = bundleExecArgv();
  if (execArgv !== undefined) {
    try {
      return new Worker(entry, { ...options, execArgv });
    } catch (e) {
      if ((e as { code?: unknown }).code !== 'ERR_WORKER_INVALID_EXEC_ARGV') throw e;
    }
  }
  return new Worker(entry, options);
}
