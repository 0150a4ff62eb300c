/**
 * `vouch` start-up loads only what the command run needs (issue 16: a
 * `vouch endorse` spent ~1.3 s of its 2 s loading the gateway's packages).
 *
 * - The module graph, split where esbuild splits dist/ (tools/build.mjs:
 *   `splitting`, at every dynamic `import()`): what `vouch --help` loads
 *   before any command is chosen holds tools/cli.ts and the command list
 *   only; what `vouch endorse` loads (its chunk and everything that chunk
 *   imports statically) holds no gateway module but the verified state it
 *   reads (gateway/chain/verified-state.ts, its block-text cache and its Merkle tree, gateway/transparency/merkle-log.ts) and no package
 *   but @noble and spdx-expression-parse: no HTTP server, pino, undici,
 *   prom-client, isomorphic-git, yaml, lockfile readers or explorer; what
 *   `vouch get` loads before it fetches holds no undici.
 * - The real process: `vouch --help` and a real `vouch endorse --file` on
 *   a new chain, run through tools/vouch.js (dist/ when built and fresh,
 *   else the sources through tsx) under a module-resolution hook
 *   (helpers/load-recorder.mjs) recording every module loaded; a built
 *   piece of dist/ counts as the source files its source map names.
 * - Each command list entry names its module's command, with the first
 *   sentence of its summary.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Metafile } from 'esbuild';
import { repoRoot } from '../helpers/vectors.ts';
import { COMMANDS, firstSentence } from '../../tools/command-list.ts';

/** The gateway modules `vouch endorse` may load: the last verified state it reads (tools/endorse-history.ts). */
const ENDORSE_GATEWAY = new Set([
  'gateway/chain/verified-state.ts',
  'gateway/cache/block-text-cache.ts',
  'gateway/cache/answer-store.ts',
  'gateway/transparency/merkle-log.ts',
]);
/** The packages `vouch endorse` may load. */
const ENDORSE_PACKAGES = /^(@noble\/(ed25519|hashes)|spdx-expression-parse|spdx-exceptions|spdx-license-ids|lz4-napi)(\/|$)/;
/** The TypeScript loader's packages (tools/vouch.js running the sources when dist/ is not fresh). */
const TS_LOADER = new Set(['tsx', 'esbuild', 'get-tsconfig', 'resolve-pkg-maps']);
/** Source files `vouch --help` may load. */
const HELP_SOURCES = new Set(['tools/vouch.js', 'tools/build.mjs', 'tools/cli.ts', 'tools/command-list.ts']);

/** A package's name from an import path or a node_modules file path. */
function packageOf(path: string): string {
  const rest = path.includes('node_modules/') ? path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length) : path;
  const parts = rest.split('/');
  return rest.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
}

interface Loaded {
  sources: Set<string>;
  packages: Set<string>;
}

/** What the output `start` of a split build loads: it and every output it imports statically, transitively. */
function staticClosure(meta: Metafile, start: string): Loaded {
  const sources = new Set<string>();
  const packages = new Set<string>();
  const seen = new Set<string>();
  const todo = [start];
  while (todo.length > 0) {
    const out = todo.pop()!;
    if (seen.has(out)) continue;
    seen.add(out);
    const o = meta.outputs[out];
    assert.ok(o, `no output ${out} in the metafile`);
    for (const f of Object.keys(o!.inputs)) sources.add(f);
    for (const imp of o!.imports) {
      if (imp.kind !== 'import-statement') continue;
      if (imp.external) {
        if (!imp.path.startsWith('node:')) packages.add(packageOf(imp.path));
      } else todo.push(imp.path);
    }
  }
  return { sources, packages };
}

let meta: Metafile;
const outputOf = (entry: string) => {
  const found = Object.entries(meta.outputs).find(([, o]) => o.entryPoint === entry);
  assert.ok(found, `no output for ${entry}`);
  return found![0];
};

test.before(async () => {
  const r = await build({
    absWorkingDir: repoRoot,
    entryPoints: ['tools/cli.ts'],
    bundle: true,
    write: false,
    metafile: true,
    splitting: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    outdir: join(repoRoot, '.startup-out'),
    logLevel: 'silent',
  });
  meta = r.metafile;
});

test('the split build: `vouch --help` loads the command list only, no command and no package', () => {
  const help = staticClosure(meta, outputOf('tools/cli.ts'));
  assert.equal([...help.sources].sort(), ['tools/cli.ts', 'tools/command-list.ts']);
  assert.equal([...help.packages], []);
});

test('the split build: `vouch endorse` loads no gateway module but the verified state, no package of the gateway or the lockfile readers', () => {
  const endorse = staticClosure(meta, outputOf('tools/commands/endorse.ts'));
  assert.ok(endorse.sources.has('tools/commands/endorse.ts'));
  assert.ok(endorse.sources.has('store/chain-repo.ts'), 'the closure misses what endorse does import');
  const gateway = [...endorse.sources].filter((f) => f.startsWith('gateway/') && !ENDORSE_GATEWAY.has(f));
  assert.equal(gateway, [], `vouch endorse loads ${gateway.join(', ')}`);
  const lockfile = [...endorse.sources].filter((f) => /^tools\/(lockfiles\/(?!licenses|defaults)|commands\/endorse-lockfile)/.test(f));
  assert.equal(lockfile, [], `vouch endorse loads the lockfile mode: ${lockfile.join(', ')}`);
  const packages = [...endorse.packages].filter((p) => !ENDORSE_PACKAGES.test(p));
  assert.equal(packages, [], `vouch endorse loads the packages ${packages.join(', ')}`);
  // The lockfile mode and the gateway are still there, behind their own dynamic imports.
  const lockfileMode = staticClosure(meta, outputOf('tools/commands/endorse-lockfile.ts'));
  assert.ok(
    lockfileMode.sources.has('tools/lockfiles/npm.ts'),
    'the lockfile mode should load the lockfile readers (the check above would then prove nothing)',
  );
  // Its HTTP client (undici) only when it fetches: a run through a gateway (--gateway) never loads it.
  assert.not.ok(lockfileMode.packages.has('undici'), 'the lockfile mode loads undici before it fetches');
  assert.ok(staticClosure(meta, outputOf('tools/lockfiles/http.ts')).packages.has('undici'));
  const serve = staticClosure(meta, outputOf('gateway/gateway.ts'));
  assert.ok(serve.packages.has('pino') && serve.sources.has('gateway/http/server.ts'), 'the gateway chunk should hold pino and the HTTP server');
});

test('the split build: `vouch get` loads its HTTP client (undici) when it fetches, not for --help or a usage error', () => {
  const get = staticClosure(meta, outputOf('tools/commands/get.ts'));
  assert.ok(get.sources.has('tools/commands/get.ts'));
  assert.not.ok(get.packages.has('undici') || get.sources.has('tools/client/verified-get.ts'), 'vouch get loads undici before it fetches');
  assert.ok(staticClosure(meta, outputOf('tools/client/verified-get.ts')).packages.has('undici'));
});

test('every command list entry loads its command, with the first sentence of its summary', async () => {
  for (const entry of COMMANDS) {
    const cmd = await entry.load();
    assert.is(cmd.name, entry.name);
    assert.is(entry.short, firstSentence(cmd.summary), `${entry.name}: tools/command-list.ts short is not its summary's first sentence`);
  }
});

// ---- the real process ----

const work = mkdtempSync(join(tmpdir(), 'vouch-startup-'));
test.after(() => rmSync(work, { recursive: true, force: true }));

/** The source files a loaded module URL stands for: itself, or for a built piece of dist/, what its source map names. */
function sourcesOfUrl(url: string): string[] {
  const path = fileURLToPath(url);
  if (!path.startsWith(join(repoRoot, 'dist') + '/')) return [relative(repoRoot, path)];
  const map = JSON.parse(readFileSync(`${path}.map`, 'utf8')) as { sources: string[] };
  return map.sources.map((s) => relative(repoRoot, join(dirname(path), s)));
}

/** Runs tools/vouch.js with the load recorder; returns its run and what it loaded. */
function recorded(args: string[]): { status: number | null; stdout: string; stderr: string; loaded: Loaded } {
  const log = join(work, `load-${Date.now()}-${Math.random().toString(36).slice(2)}.log`);
  writeFileSync(log, '');
  const r = spawnSync(process.execPath, ['--import', join(repoRoot, 'test', 'helpers', 'load-recorder.mjs'), join(repoRoot, 'tools', 'vouch.js'), ...args], {
    cwd: repoRoot,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, VOUCH_LOAD_LOG: log },
  });
  const sources = new Set<string>();
  const packages = new Set<string>();
  for (const url of new Set(
    readFileSync(log, 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('file:')),
  )) {
    for (const f of sourcesOfUrl(url)) {
      if (f.includes('node_modules/')) {
        const p = packageOf(f);
        if (!TS_LOADER.has(p)) packages.add(p);
      } else sources.add(f);
    }
  }
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, loaded: { sources, packages } };
}

test('the process: `vouch --help` loads no command module and no package', () => {
  const r = recorded(['--help']);
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /endorse/);
  assert.ok(r.loaded.sources.has('tools/cli.ts'), `the recorder saw ${[...r.loaded.sources].join(', ')}`);
  const extra = [...r.loaded.sources].filter((f) => !HELP_SOURCES.has(f));
  assert.equal(extra, [], `vouch --help loads ${extra.join(', ')}`);
  assert.equal([...r.loaded.packages], []);
});

test('the process: `vouch endorse --file` appends a block without loading the gateway, its packages or the lockfile mode', () => {
  const key = join(work, 'authority.pem');
  const chain = join(work, 'chain');
  const file = join(work, 'artifact.tgz');
  writeFileSync(file, 'bytes to endorse\n');
  const k = recorded(['keygen', '--out', key]);
  assert.is(k.status, 0, k.stderr);
  assert.ok(!k.loaded.sources.has('store/chain-repo.ts'), 'vouch keygen loads the store');
  const i = recorded(['init', '--chain', chain, '--key', key, '--signer', 'acme-authority']);
  assert.is(i.status, 0, i.stderr);
  const r = recorded([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    'https://a.example/x-1.0.0.tgz',
    '--file',
    file,
    '--name',
    'acme/x',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
  ]);
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /^1 [0-9a-f]{64}\n$/);
  assert.ok(
    r.loaded.sources.has('tools/commands/endorse.ts') && r.loaded.sources.has('store/chain-repo.ts'),
    `the recorder saw ${[...r.loaded.sources].join(', ')}`,
  );
  const gateway = [...r.loaded.sources].filter((f) => f.startsWith('gateway/') && !ENDORSE_GATEWAY.has(f));
  assert.equal(gateway, [], `vouch endorse loads ${gateway.join(', ')}`);
  const lockfile = [...r.loaded.sources].filter((f) => /^tools\/(lockfiles\/(?!licenses|defaults)|commands\/endorse-lockfile)/.test(f));
  assert.equal(lockfile, [], `vouch endorse loads the lockfile mode: ${lockfile.join(', ')}`);
  const packages = [...r.loaded.packages].filter((p) => !ENDORSE_PACKAGES.test(p));
  assert.equal(packages, [], `vouch endorse loads the packages ${packages.join(', ')}`);
});

test.run();
