/**
 * The build (tools/build.mjs) into a directory of its own (never dist/,
 * which other tests run): dist/ split into pieces must stay one consistent,
 * runnable whole.
 *
 * - Every piece a built file imports (statically or by `import()`) is an
 *   output the manifest lists, so `distState` (tools/vouch.js's freshness
 *   check) sees a build with a piece missing as stale; the worker entries
 *   import no piece (a worker reads one file).
 * - The built command line runs from that directory: `--help`, and `vouch
 *   verify` of a 2,500-block chain, which starts the verify workers from the
 *   bundle it locates beside the piece that asks (`import.meta.url`).
 * - Files a build does not make: one the previous build listed is kept (its
 *   time reset: a process started from that build may still import it);
 *   older ones go an hour after they were last written, not before.
 * - Every package but sodium-native, lz4-napi and esbuild is bundled, each one's
 *   licence copied to licenses/; undici as one piece, without its index.js.
 * - The freshness check reads an input only when its stat (size, mtime,
 *   ctime, inode) differs from the build's or was racy then; an edit that
 *   keeps the size and restores the mtime is still seen (ctime).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { builtinModules } from 'node:module';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, unlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { buildLongChain } from '../helpers/chain-fixture.ts';
import { repoRoot } from '../helpers/vectors.ts';

// Under the repository, so the built code finds the packages in node_modules as dist/ does.
const out = mkdtempSync(join(repoRoot, '.build-test-'));
const work = mkdtempSync(join(tmpdir(), 'vouch-build-'));
test.after(() => {
  rmSync(out, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
});

// An input of its own for the freshness check (every real input is a source other tests run):
// written now, so it has settled (older than the racy window) when the last test records it.
const probe = join(out, 'probe-input.txt');
writeFileSync(probe, 'aaaa\n');
const probeWritten = Date.now();

const buildMjs = pathToFileURL(join(repoRoot, 'tools', 'build.mjs')).href;

/** Runs an ES module snippet with `build`/`distState`/`recordInputs` of tools/build.mjs in scope; returns its stdout. */
function withBuild(code: string): string {
  const r = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', `import { build, distState, recordInputs } from ${JSON.stringify(buildMjs)};\n${code}`, out],
    {
      cwd: repoRoot,
      encoding: 'utf8',
      timeout: 120_000,
    },
  );
  assert.is(r.status, 0, r.stderr);
  return r.stdout;
}

interface Manifest {
  inputs: string[];
  digest: string;
  files: Record<string, { sha256: string; stat: string | null }>;
  outputs: string[];
}
const manifest = (): Manifest => JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')) as Manifest;

/** The relative module specifiers a built file imports, statically or by import(). */
function relativeImports(file: string): string[] {
  const text = readFileSync(join(out, file), 'utf8');
  const found = [...text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^import\s*)"(\.\/[^"]+)"/gm)].map((m) => m[1]!.slice(2));
  return [...new Set(found)];
}

test('a build lists every piece its files import; the workers import none; a missing piece makes it stale', () => {
  withBuild('await build(process.argv[1]);');
  const m = manifest();
  for (const f of ['cli.mjs', 'hash-worker.mjs', 'verify-worker-impl.mjs', 'explorer/explorer.js', 'explorer/index.html', 'explorer/explorer.css']) {
    assert.ok(m.outputs.includes(f), `the manifest misses ${f}`);
  }
  const listed = new Set(m.outputs);
  const code = m.outputs.filter((f) => f.endsWith('.mjs'));
  const pieces = code.filter((f) => /-[A-Z0-9]{8}\.mjs$/.test(f));
  assert.ok(pieces.length >= 8, `expected the command line split into pieces, got ${pieces.join(', ')}`);
  assert.ok(
    relativeImports('cli.mjs').some((f) => f.startsWith('endorse-')),
    'cli.mjs does not import the endorse command on demand',
  );
  for (const f of code) {
    for (const imp of relativeImports(f)) assert.ok(listed.has(imp), `${f} imports ${imp}, which the manifest does not list`);
    assert.ok(listed.has(`${f}.map`), `${f} has no source map`);
  }
  for (const w of ['hash-worker.mjs', 'verify-worker-impl.mjs']) assert.equal(relativeImports(w), [], `${w} imports pieces`);
  assert.is(withBuild('process.stdout.write(distState(process.argv[1]));'), 'fresh');

  const piece = pieces.find((f) => f.startsWith('endorse-'))!;
  const saved = readFileSync(join(out, piece));
  unlinkSync(join(out, piece));
  assert.is(withBuild('process.stdout.write(distState(process.argv[1]));'), 'stale');
  writeFileSync(join(out, piece), saved);
  assert.is(withBuild('process.stdout.write(distState(process.argv[1]));'), 'fresh');
});

test('undici is bundled into dist/ (one piece, not a hundred files from node_modules), with its licence beside', () => {
  const m = manifest();
  const code = m.outputs.filter((f) => f.endsWith('.mjs'));
  const importsUndici = code.filter((f) => /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\(\s*)"undici(?:\/[^"]*)?"/.test(readFileSync(join(out, f), 'utf8')));
  assert.equal(importsUndici, [], `these built files load undici from node_modules: ${importsUndici.join(', ')}`);
  const holder = code.filter((f) => readFileSync(join(out, f), 'utf8').includes('node_modules/undici/lib/dispatcher/agent.js'));
  assert.is(holder.length, 1, `undici's Agent should be in one piece, found in ${holder.join(', ')}`);
  assert.ok(m.outputs.includes('licenses/undici.txt'));
  assert.match(readFileSync(join(out, 'licenses', 'undici.txt'), 'utf8'), /Undici contributors/);
  assert.ok(
    m.inputs.some((f) => /(^|\/)node_modules\/undici\/lib\/dispatcher\/agent\.js$/.test(f)),
    'the bundled package is not an input: an update of it would not make dist/ stale',
  );
});

test('every package is bundled but sodium-native, lz4-napi and esbuild, each with its licence; undici without fetch, WebSocket or cookies', () => {
  const m = manifest();
  const code = m.outputs.filter((f) => f.endsWith('.mjs'));
  const external = new Set<string>();
  const bare = /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\(\s*)"((?:@[a-z0-9._-]+\/)?[a-z0-9][a-z0-9._-]*)(?:\/[^"]*)?"/g;
  for (const f of code) for (const x of readFileSync(join(out, f), 'utf8').matchAll(bare)) if (!builtinModules.includes(x[1]!)) external.add(x[1]!);
  // sodium-native is required by a name made at run time (platform/node-crypto.ts), so not seen here; lz4-napi is a native addon too.
  assert.equal([...external].sort(), ['esbuild', 'lz4-napi'], 'packages the built files load from node_modules');
  const bundled = new Set(m.inputs.flatMap((f) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(f)?.[1] ?? []));
  for (const name of ['yaml', 'pino', 'prom-client', 'semver', 'lru-cache', 'htmlparser2', 'undici']) assert.ok(bundled.has(name), `${name} is not bundled`);
  for (const name of bundled) assert.ok(m.outputs.includes(`licenses/${name.replace('/', '__')}.txt`), `no licence of ${name} in dist/licenses`);
  assert.match(readFileSync(join(out, 'licenses', 'yaml.txt'), 'utf8'), /Eemeli Aro/);
  // The 'undici' the sources import: Agent, request and interceptors, not the whole package's index.js.
  assert.not.ok(
    m.inputs.some((f) => /node_modules\/undici\/(index\.js|lib\/web\/(websocket|cookies)\/)/.test(f)),
    'undici/index.js or its web parts are bundled',
  );
});

test('the built command line runs from its directory: --help, and verify with its worker threads', async () => {
  const help = spawnSync(process.execPath, [join(out, 'cli.mjs'), '--help'], { encoding: 'utf8', timeout: 60_000 });
  assert.is(help.status, 0, help.stderr);
  assert.match(help.stdout, /^ {2}endorse +Appends one endorsement block/m);

  const { blocks, checkpoint } = buildLongChain(2_500); // above parallel-verify's inline limit (2,000): workers run
  const dir = join(work, 'chain');
  await ChainRepo.init(
    dir,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(checkpoint),
    { message: 'bulk\n', authorName: 't', authorEmail: 't@vouch.invalid', timestamp: 1_790_000_000 },
  );
  const verify = spawnSync(process.execPath, [join(out, 'cli.mjs'), 'verify', '--chain', dir, '--json'], { encoding: 'utf8', timeout: 120_000 });
  assert.is(verify.status, 0, verify.stderr);
  assert.is((JSON.parse(verify.stdout) as { blocks: number }).blocks, 2_500);

  // Without the worker bundle beside the pieces, the same run fails: the workers did load it.
  const worker = join(out, 'verify-worker-impl.mjs');
  const saved = readFileSync(worker);
  unlinkSync(worker);
  try {
    const broken = spawnSync(process.execPath, [join(out, 'cli.mjs'), 'verify', '--chain', dir], { encoding: 'utf8', timeout: 120_000 });
    assert.is.not(broken.status, 0, 'vouch verify passed without the worker bundle: the workers were not used');
  } finally {
    writeFileSync(worker, saved);
  }
});

test("a rebuild keeps the previous build's files an hour, and removes older leftovers", () => {
  const hourAgo = (Date.now() - 2 * 3_600_000) / 1000;
  const m = manifest();
  // As if the previous build had made `retiring` (listed), and long ago `stale` (not listed, old) and `recent` (not listed, new).
  const [retiring, stale, recent] = ['chunk-RETIRING.mjs', 'chunk-OLDLEFT0.mjs', 'chunk-NEWLEFT0.mjs'].map((f) => join(out, f));
  for (const f of [retiring!, stale!, recent!]) writeFileSync(f, 'export {};\n');
  utimesSync(retiring!, hourAgo, hourAgo);
  utimesSync(stale!, hourAgo, hourAgo);
  writeFileSync(join(out, 'manifest.json'), JSON.stringify({ ...m, outputs: [...m.outputs, 'chunk-RETIRING.mjs'].sort() }));

  withBuild('await build(process.argv[1]);');
  assert.ok(existsSync(retiring!), 'a file of the previous build was removed at once');
  assert.ok(Date.now() - statSync(retiring!).mtimeMs < 600_000, 'its time was not reset when it was retired');
  assert.not.ok(existsSync(stale!), 'a leftover written over an hour ago was kept');
  assert.ok(existsSync(recent!), 'a leftover written within the hour was removed');
  assert.not.ok(manifest().outputs.includes('chunk-RETIRING.mjs'));
  assert.is(withBuild('process.stdout.write(distState(process.argv[1]));'), 'fresh');
});

test('the freshness check trusts an unchanged stat, hashes a changed or racy one: same size and restored mtime is still stale', async () => {
  const state = () => withBuild('process.stdout.write(distState(process.argv[1]));');
  const rel = relative(repoRoot, probe).split(sep).join('/');
  /** The manifest with the probe as one more input, recorded as a build records its inputs. */
  const withProbe = (edit: (m: Manifest) => void = () => {}) => {
    const m = manifest();
    m.files[rel] = JSON.parse(withBuild(`process.stdout.write(JSON.stringify(recordInputs([${JSON.stringify(rel)}])[${JSON.stringify(rel)}]));`));
    if (!m.inputs.includes(rel)) m.inputs.push(rel);
    edit(m);
    writeFileSync(join(out, 'manifest.json'), JSON.stringify(m));
    return m;
  };
  // Written within the racy window: no stat recorded, hashed on every check.
  writeFileSync(join(out, 'racy.txt'), 'r\n');
  const racy = JSON.parse(withBuild(`process.stdout.write(JSON.stringify(recordInputs([${JSON.stringify(`${rel.split('/')[0]}/racy.txt`)}])));`));
  assert.is(Object.values(racy as Record<string, { stat: unknown }>)[0]!.stat, null, 'a file written just now was trusted by its stat');

  await new Promise((r) => setTimeout(r, Math.max(0, probeWritten + 3_500 - Date.now())));
  const m = withProbe();
  assert.type(m.files[rel]!.stat, 'string', 'a settled input got no stat');
  assert.is(state(), 'fresh');
  // The stat is what is compared: a recorded hash that no longer matches goes unread while the stat matches...
  withProbe((x) => (x.files[rel]!.sha256 = '0'.repeat(64)));
  assert.is(state(), 'fresh', 'an input whose stat matched was read anyway');
  // ... and is read when there is no stat to trust (racy at build time).
  withProbe((x) => {
    x.files[rel]!.sha256 = '0'.repeat(64);
    x.files[rel]!.stat = null;
  });
  assert.is(state(), 'stale');

  withProbe();
  // The mtime kept to the nanosecond by touch -r (Node's utimes takes a double).
  const keep = join(out, 'mtime-ref');
  assert.is(spawnSync('touch', ['-r', probe, keep]).status, 0);
  const before = statSync(probe, { bigint: true });
  writeFileSync(probe, 'bbbb\n'); // same size
  assert.is(spawnSync('touch', ['-r', keep, probe]).status, 0); // mtime restored; ctime moved on
  assert.is(statSync(probe, { bigint: true }).mtimeNs, before.mtimeNs);
  assert.is(statSync(probe, { bigint: true }).size, before.size);
  assert.is(state(), 'stale', 'an edit keeping the size and the mtime ran a stale build');
  writeFileSync(probe, 'aaaa\n');
  assert.is(state(), 'fresh', 'the content the build was made from, with another stat, is fresh');
  unlinkSync(probe);
  assert.is(state(), 'stale', 'a missing input is fresh');
});

test.run();
