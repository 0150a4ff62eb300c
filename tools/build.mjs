#!/usr/bin/env node
/**
 * `npm run build`: bundles the TypeScript sources into dist/ with esbuild so
 * `vouch` runs without a TypeScript loader; run by `npm ci` (prepare),
 * `npm start`, `npm test` and `npm run bench`. Without esbuild (`--omit=dev`)
 * it keeps an up-to-date dist/ and otherwise fails saying how to install.
 * Owns dist/: `cli.mjs` split at every dynamic `import()` (a command loads
 * only its own modules: test/cli-startup), the self-contained worker entries,
 * the explorer's browser bundle, source maps, and `manifest.json` (inputs,
 * each one's sha256 and stat as read, outputs).
 * Must hold: dist/ counts as built (`distState`) only while every input has
 * the content it was built from and every output exists (an input whose
 * stat differs, or is racy, is hashed again: git's index rule); files are
 * replaced by rename, pieces before their importers; pieces a new build
 * drops are deleted only RETIRE_MS after their last write.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const DIST = join(ROOT, 'dist');
const MANIFEST = 'manifest.json';

/** The command line: output name in dist/ → source; split at its dynamic imports. */
const CLI_ENTRIES = { cli: 'tools/cli.ts' };
/** Worker entry points, one self-contained file each: output name in dist/ (the source's base name, .mjs) → source. */
const WORKER_ENTRIES = {
  'hash-worker': 'artifacts/hash-worker.ts',
  'verify-worker-impl': 'store/verify-worker-impl.ts',
  'render-worker': 'gateway/ecosystems/render-worker.ts',
};
/** Pieces of an earlier build no longer made are deleted this long after they were retired. */
const RETIRE_MS = 3_600_000;
/** Files copied as they are: dist/ path → source. */
const COPIES = {
  'explorer/index.html': 'gateway/explorer/index.html',
  'explorer/explorer.css': 'gateway/explorer/explorer.css',
};

/**
 * An input's stat as a build records it and a start compares it: size,
 * mtime, ctime and inode (what git's index compares). A write sets ctime to
 * the clock and no one can set it back, so an edit that keeps the size and
 * restores the mtime still differs. Null when it cannot be read.
 */
function statKey(path) {
  const s = statSync(path, { throwIfNoEntry: false });
  return s === undefined ? null : `${s.size}:${s.mtimeMs}:${s.ctimeMs}:${s.ino}`;
}

/**
 * A write in the same clock tick as the build's read leaves the times as
 * they were (coarse file-system clocks; 2 s on FAT): an input whose mtime or
 * ctime is not this much older than that read ("racy", as git calls it) is
 * hashed on every check.
 */
const RACY_MS = 3_000;

/** Reads the inputs (paths relative to the repository) for a manifest: each one's sha256 and, unless racy or changing while read, its stat key. */
export function recordInputs(inputs) {
  const files = {};
  for (const f of inputs) {
    const path = join(ROOT, f);
    const s = statSync(path);
    const before = statKey(path);
    const sha256 = createHash('sha256').update(readFileSync(path)).digest('hex');
    const settled = Date.now() - RACY_MS;
    const stable = before === statKey(path) && s.mtimeMs < settled && s.ctimeMs < settled;
    files[f] = { sha256, stat: stable ? before : null };
  }
  return files;
}

/** True while the input `f` has the content `rec` (from recordInputs) says: by its stat when that matches, else by its hash. */
function inputUnchanged(f, rec) {
  if (typeof rec?.sha256 !== 'string') return false;
  const path = ROOT + f; // ROOT ends with a separator; not path.join: on every start, for some hundred inputs
  try {
    if (typeof rec.stat === 'string' && statKey(path) === rec.stat) return true;
    return createHash('sha256').update(readFileSync(path)).digest('hex') === rec.sha256;
  } catch {
    return false;
  }
}

/**
 * 'fresh' when dist/ (or `dist`) holds a complete build of the sources as
 * they are now; 'missing' when there is no build; 'stale' when an input
 * changed (or an output is gone) since. Reads only the inputs whose stat
 * differs from the build's, or was racy then.
 */
export function distState(dist = DIST) {
  let m;
  try {
    m = JSON.parse(readFileSync(join(dist, MANIFEST), 'utf8'));
  } catch {
    return 'missing';
  }
  if (!Array.isArray(m?.inputs) || !Array.isArray(m?.outputs) || typeof m?.files !== 'object' || m.files === null) return 'stale';
  const dir = `${dist}/`;
  if (!m.outputs.every((f) => typeof f === 'string' && existsSync(dir + f))) return 'stale';
  return m.inputs.every((f) => typeof f === 'string' && inputUnchanged(f, m.files[f])) ? 'fresh' : 'stale';
}

/** Writes `path` by a rename, unless it already holds exactly `contents`. */
function put(path, contents) {
  try {
    if (readFileSync(path).equals(Buffer.from(contents))) return;
  } catch {
    /* absent */
  }
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, contents);
  renameSync(tmp, path);
}

/** Paths of the files under dir, relative to it, with '/' separators. */
function filesUnder(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true })
    .map((f) => String(f))
    .filter((f) => statSync(join(dir, f)).isFile())
    .map((f) => f.split(sep).join('/'));
}

/** The outputs the manifest in `dist` lists (the last build's), or none. */
function lastOutputs(dist) {
  try {
    const m = JSON.parse(readFileSync(join(dist, MANIFEST), 'utf8'));
    return new Set(Array.isArray(m?.outputs) ? m.outputs : []);
  } catch {
    return new Set();
  }
}

/**
 * Packages are bundled into dist/ rather than loaded from node_modules: a
 * package loads as tens or hundreds of files resolved and read one by one
 * (undici alone: twice the CPU of one bundled piece; yaml, pino, prom-client
 * and the rest: a quarter of `vouch serve`'s start; docs/decisions/cli-start.md).
 * Each one's licence is copied to dist/licenses/ (`licencesOf`). External:
 * sodium-native and lz4-napi (native addons, found beside their packages at
 * run time: lz4-napi's prebuilt binary is an optional dependency per
 * platform) and esbuild (a dev dependency, with its own binary: the explorer's and worker
 * bundles in development).
 */
const EXTERNAL = /^(?:sodium-native|lz4-napi|esbuild)(\/|$)/;
const LICENCE_FILE = /^(?:licen[cs]e|copying)(?:\.(?:md|txt))?$/i;

/** dist/licenses/<package>.txt → the licence file of each package the bundles hold (node_modules/<package>/LICENSE…, else its package.json). */
function licencesOf(inputs) {
  const out = {};
  for (const f of inputs) {
    const m = /^(.*?node_modules\/)((?:@[^/]+\/)?[^/]+)\//.exec(f.split(sep).join('/'));
    if (m === null) continue;
    const key = `licenses/${m[2].replace('/', '__')}.txt`;
    if (key in out) continue;
    const dir = `${m[1]}${m[2]}`;
    let file = readdirSync(join(ROOT, dir))
      .sort()
      .find((n) => LICENCE_FILE.test(n));
    // A package without a licence file (public-domain dedications such as CC0): its package.json, which names it.
    if (file === undefined && typeof JSON.parse(readFileSync(join(ROOT, dir, 'package.json'), 'utf8')).license === 'string') file = 'package.json';
    if (file === undefined) throw new Error(`${dir} has no licence to copy into dist/licenses: keep the package external (EXTERNAL in tools/build.mjs)`);
    out[key] = `${dir}/${file}`;
  }
  return out;
}

/**
 * What `import … from 'undici'` in the sources gets: Agent, request and
 * interceptors, made as undici's index.js makes them, without the rest of
 * the package (index.js loads fetch, WebSocket, the caches, the mocks and
 * cookies, which read globalThis.Headers and so load Node's own copy of
 * undici too, on every import; docs/decisions/cli-start.md). An ES module:
 * a source importing any other name fails the build ("No matching export").
 */
function undiciEntry() {
  const interceptors = Object.keys(createRequire(join(ROOT, 'package.json'))('undici').interceptors);
  const file = (k) => k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
  const missing = interceptors.filter((k) => !existsSync(join(ROOT, 'node_modules', 'undici', 'lib', 'interceptor', `${file(k)}.js`)));
  if (missing.length > 0) throw new Error(`undici's interceptors changed (${missing.join(', ')}): update undiciEntry in tools/build.mjs`);
  return `import Agent from 'undici/lib/dispatcher/agent';
import Dispatcher from 'undici/lib/dispatcher/dispatcher';
import api from 'undici/lib/api';
import util from 'undici/lib/core/util';
import { InvalidArgumentError } from 'undici/lib/core/errors';
import { getGlobalDispatcher } from 'undici/lib/global';
Object.assign(Dispatcher.prototype, api);
// undici/index.js's makeDispatcher, as it is there.
function makeDispatcher(fn) {
  return (url, opts, handler) => {
    if (typeof opts === 'function') {
      handler = opts;
      opts = null;
    }
    if (!url || (typeof url !== 'string' && typeof url !== 'object' && !(url instanceof URL))) throw new InvalidArgumentError('invalid url');
    if (opts != null && typeof opts !== 'object') throw new InvalidArgumentError('invalid opts');
    if (opts && opts.path != null) {
      if (typeof opts.path !== 'string') throw new InvalidArgumentError('invalid opts.path');
      let path = opts.path;
      if (!opts.path.startsWith('/')) path = \`/\${path}\`;
      url = new URL(util.parseOrigin(url).origin + path);
    } else {
      if (!opts) opts = typeof url === 'object' ? url : {};
      url = util.parseURL(url);
    }
    const { agent, dispatcher = getGlobalDispatcher() } = opts;
    if (agent) throw new InvalidArgumentError('unsupported opts.agent. Did you mean opts.client?');
    return fn.call(dispatcher, { ...opts, origin: url.origin, path: url.search ? \`\${url.pathname}\${url.search}\` : url.pathname, method: opts.method || (opts.body ? 'PUT' : 'GET') }, handler);
  };
}
export { Agent };
export const request = makeDispatcher(api.request);
// Each interceptor loads on first use.
export const interceptors = {};
${interceptors.map((k) => `Object.defineProperty(interceptors, ${JSON.stringify(k)}, { enumerable: true, get: () => require(${JSON.stringify(`undici/lib/interceptor/${file(k)}`)}) });`).join('\n')}
`;
}

const undiciSlim = {
  name: 'undici-slim',
  setup(b) {
    b.onResolve({ filter: /^undici$/ }, (a) => (a.kind === 'entry-point' ? undefined : { path: 'undici', namespace: 'undici-slim' }));
    b.onLoad({ filter: /.*/, namespace: 'undici-slim' }, () => ({ contents: undiciEntry(), loader: 'js', resolveDir: ROOT }));
  },
};

/** The external packages: loaded from node_modules as installed. */
const externalPackages = {
  name: 'external-packages',
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, (a) => (!EXTERNAL.test(a.path) && a.kind !== 'entry-point' ? undefined : { path: a.path, external: true }));
  },
};

/** Options of the Node bundles (cli and workers). */
const NODE_OPTIONS = {
  outExtension: { '.js': '.mjs' },
  platform: 'node',
  format: 'esm',
  target: 'node20',
  plugins: [undiciSlim, externalPackages],
  // The bundled CommonJS requires Node's modules: `require` in an ES module.
  banner: { js: "import { createRequire as __vouchCreateRequire } from 'node:module';\nconst require = __vouchCreateRequire(import.meta.url);" },
  sourcemap: 'linked',
  define: { __VOUCH_BUILT__: 'true' },
};

const entriesOf = (entries) => Object.entries(entries).map(([out, src]) => ({ in: src, out }));

/** Builds into dist/ (or `dist`: the tests build elsewhere); returns the outputs, relative to it. */
export async function build(dist = DIST) {
  const { build: esbuild } = await import('esbuild');
  const common = { bundle: true, write: false, metafile: true, logLevel: 'warning', absWorkingDir: ROOT };
  const cli = await esbuild({
    ...common,
    ...NODE_OPTIONS,
    outdir: dist,
    entryPoints: entriesOf(CLI_ENTRIES),
    splitting: true,
    chunkNames: '[name]-[hash]',
  });
  const workers = await esbuild({ ...common, ...NODE_OPTIONS, outdir: dist, entryPoints: entriesOf(WORKER_ENTRIES) });
  // Same options as gateway/explorer.ts buildBundle.
  const browser = await esbuild({
    ...common,
    entryPoints: [{ in: 'gateway/explorer/app.ts', out: 'explorer/explorer' }],
    outdir: dist,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    minify: true,
    legalComments: 'none',
  });
  const results = [cli, workers, browser];
  const sources = new Set();
  // The undici entry is made here (an input by tools/build.mjs itself and undici's own files).
  for (const r of results) for (const f of Object.keys(r.metafile.inputs)) if (!f.startsWith('undici-slim:')) sources.add(f);
  const copies = { ...COPIES, ...licencesOf(sources) };
  const inputs = new Set(['tools/build.mjs', ...Object.values(copies), ...sources]);
  const sorted = [...inputs].sort();
  let recorded;
  try {
    recorded = recordInputs(sorted);
  } catch {
    throw new Error('an input vanished while building');
  }
  // One name for this build's inputs: sha256 over their names and hashes.
  const digest = sorted.reduce((h, f) => h.update(`${f}\0${recorded[f].sha256}\0`), createHash('sha256')).digest('hex');

  const previous = lastOutputs(dist);
  const rel = (path) => relative(dist, path).split(sep).join('/');
  const entryNames = new Set([...Object.keys(CLI_ENTRIES), ...Object.keys(WORKER_ENTRIES)].flatMap((e) => [`${e}.mjs`, `${e}.mjs.map`]));
  const files = results.flatMap((r) => r.outputFiles);
  // Pieces (and maps) first, then the entries that import them.
  files.sort((a, b) => Number(entryNames.has(rel(a.path))) - Number(entryNames.has(rel(b.path))));
  const outputs = [];
  for (const f of files) {
    put(f.path, f.contents);
    outputs.push(rel(f.path));
  }
  for (const [out, src] of Object.entries(copies)) {
    put(join(dist, out), readFileSync(join(ROOT, src)));
    outputs.push(out);
  }
  put(join(dist, MANIFEST), JSON.stringify({ inputs: sorted, digest, files: recorded, outputs: outputs.sort() }, null, 1) + '\n');
  // Files this build did not make: pieces of the build before it (retired now: kept an hour from
  // now, for a process started from it that has yet to import them), and older ones.
  const keep = new Set([...outputs, MANIFEST]);
  const now = Date.now();
  for (const f of filesUnder(dist)) {
    if (keep.has(f) || f.endsWith('.tmp')) continue;
    const path = join(dist, f);
    try {
      if (previous.has(f)) utimesSync(path, new Date(now), new Date(now));
      else if (now - statSync(path).mtimeMs >= RETIRE_MS) rmSync(path, { force: true });
    } catch {
      /* another build removed it */
    }
  }
  return outputs;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    await import('esbuild');
  } catch {
    // `npm ci --omit=dev` runs `prepare` too, without esbuild (a dev dependency):
    // it fails here unless dist/ came built (a copied checkout).
    if (distState() === 'fresh') {
      process.stderr.write('vouch build: esbuild is not installed; dist/ is up to date, kept as it is\n');
      process.exit(0);
    }
    process.stderr.write(
      'vouch build: esbuild is not installed (a dev dependency): install with the dev dependencies (`npm ci`, which builds), then `npm prune --omit=dev` if they must not stay\n',
    );
    process.exit(1);
  }
  try {
    const outputs = await build();
    const code = outputs.filter((f) => !f.endsWith('.map'));
    const named = code.filter((f) => !/-[A-Z0-9]{8}\.mjs$/.test(f));
    process.stderr.write(`vouch build: dist/ holds ${named.join(', ')}, and ${code.length - named.length} pieces of cli.mjs loaded on demand\n`);
  } catch (e) {
    process.stderr.write(`vouch build: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  }
}
