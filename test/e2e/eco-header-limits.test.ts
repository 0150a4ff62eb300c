/**
 * Big lockfiles through the gateway with each client's DEFAULT limits
 * (issue 31 item 5): a 1,000-package package-lock.json, a 200-file pip
 * requirements file and a go.sum of 200 modules are endorsed with the real
 * `vouch endorse --lockfile`, then installed through a real `vouch serve`
 * by the real npm CLI, Debian's pip and the real go command, none with a
 * raised header limit. Before, the endorser put each lockfile in one block
 * and every artifact answer carried that block in its UNS header (npm:
 * HPE_HEADER_OVERFLOW). Also: every block the endorser wrote fits the UNS
 * bound, and raw answers of each route (counted off the socket) fit 8 KiB.
 * Fixtures are generated here (tarballs without `npm pack`, wheels in one
 * python run, go zips in-process) to keep the run short.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseBlockText } from '../../chain/block.ts';
import { UNS_FULL_MAX, parseUns } from '../../chain/uns-header.ts';
import { unsBytes } from '../../tools/lockfiles/blocks.ts';
import { NpmRegistry, cleanNpmEnv, runNpm, tinyTarball } from '../helpers/npm-registry.ts';
import { PypiHost, SYSTEM_PYTHON, buildDists, distFilename, sha256Hex, type DistSpec } from '../helpers/pypi-fixture.ts';
import { hash1, modVersion, type ModVersion } from '../helpers/go-modules.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { initAuthorityChain, runAsync, vouchEndorse } from '../helpers/processes.ts';
import { rawHead } from '../helpers/raw-http.ts';
import { chainFile } from '../helpers/chain-files.ts';

const NPM_PACKAGES = 1000;
const PIP_FILES = 200;
const GO_MODULES = 200;
const BUDGET = 8 * 1024;

const work = mkdtempSync(join(tmpdir(), 'vouch-eco-headers-'));
const chain = join(work, 'chain');
const key = join(work, 'authority.pem');
let reg: NpmRegistry;
let index: PypiHost;
let files: PypiHost;
let goOrigin: OriginServer;
let gw: GatewayProcess;
const started = Date.now();
const timings: string[] = [];
const timed = async <T>(what: string, fn: () => Promise<T>): Promise<T> => {
  const t = Date.now();
  const r = await fn();
  timings.push(`${what} ${((Date.now() - t) / 1000).toFixed(1)} s`);
  return r;
};

const npmName = (i: number) => `hl-pkg-${i}`;
const pySpecs: DistSpec[] = Array.from({ length: PIP_FILES }, (_, i) => ({ kind: 'wheel', name: `hl-py-${i}`, version: '1.0.0' }));
const mods: ModVersion[] = Array.from({ length: GO_MODULES }, (_, i) => modVersion(`example.com/hl/m${i}`, 'v1.0.0'));
const esc = (mv: ModVersion, ext: string) => `${mv.module}/@v/${mv.version}.${ext}`;

/** `vouch endorse --lockfile FILE --json`: the blocks it wrote, each checked against the UNS bound. */
async function endorse(file: string, extra: string[], entries: number): Promise<number[]> {
  const r = await vouchEndorse(chain, key, ['--lockfile', file, '--license', 'MIT', '--json', ...extra], {}, 300_000);
  assert.is(r.status, 0, r.stderr + r.stdout);
  const out = JSON.parse(r.stdout) as { entries: number; blocks: { index: number; entries: number }[] };
  assert.is(out.entries, entries);
  assert.ok(out.blocks.length > 1, `${file}: ${out.blocks.length} block(s): one block would not fit a header`);
  for (const b of out.blocks) {
    const d = String(b.index).padStart(9, '0');
    const block = parseBlockText(chainFile(chain, `blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`), b.index);
    assert.ok(unsBytes(block) <= UNS_FULL_MAX, `block ${b.index}: UNS of ${unsBytes(block)} bytes`);
  }
  timings.push(`${file.split('/').at(-1)}: ${entries} entries in ${out.blocks.length} blocks`);
  return out.blocks.map((b) => b.index);
}

test.before(async () => {
  const publicKey = await initAuthorityChain({ key, chain, signer: 'headers-authority' });

  // npm: 1,000 tiny packages and the package-lock.json that pins them.
  reg = await NpmRegistry.start(work);
  const packages: Record<string, unknown> = { '': { name: 'big-app', version: '1.0.0', dependencies: {} as Record<string, string> } };
  for (let i = 0; i < NPM_PACKAGES; i++) {
    const bytes = tinyTarball(npmName(i), '1.0.0', { 'index.js': `module.exports = ${i};\n` });
    reg.publishBytes(npmName(i), '1.0.0', bytes);
    (packages[''] as { dependencies: Record<string, string> }).dependencies[npmName(i)] = '1.0.0';
    packages[`node_modules/${npmName(i)}`] = {
      version: '1.0.0',
      resolved: reg.tarballUrl(npmName(i), '1.0.0'),
      license: 'MIT',
      integrity: `sha512-${createHash('sha512').update(bytes).digest('base64')}`,
    };
  }
  mkdirSync(join(work, 'npm'));
  writeFileSync(join(work, 'npm', 'package-lock.json'), JSON.stringify({ name: 'big-app', version: '1.0.0', lockfileVersion: 3, requires: true, packages }));

  // pip: 200 wheels on a files host, an index linking them, a requirements file in hash-checking mode.
  [index, files] = await Promise.all([PypiHost.start(), PypiHost.start()]);
  const dists = buildDists(pySpecs);
  const reqs: string[] = [];
  pySpecs.forEach((s, i) => {
    const path = `/packages/${i}/${distFilename(s)}`;
    files.file(path, dists[i]!);
    index.project(s.name, [{ href: files.url(path), sha256: sha256Hex(dists[i]!), filename: distFilename(s), version: s.version }]);
    reqs.push(`${s.name}==${s.version} --hash=sha256:${sha256Hex(dists[i]!)}`);
  });
  mkdirSync(join(work, 'pip'));
  writeFileSync(join(work, 'pip', 'requirements.txt'), reqs.join('\n') + '\n');

  // go: 200 modules on a module proxy, and the go.sum that pins them.
  goOrigin = await OriginServer.start();
  const sums: string[] = [];
  for (const mv of mods) {
    goOrigin.route(`/mod/${mv.module}/@v/list`, { body: `${mv.version}\n`, contentType: 'text/plain; charset=utf-8' });
    goOrigin.route(`/mod/${esc(mv, 'info')}`, { body: mv.info, contentType: 'application/json' });
    goOrigin.route(`/mod/${esc(mv, 'mod')}`, { body: mv.mod, contentType: 'text/plain; charset=utf-8' });
    goOrigin.route(`/mod/${esc(mv, 'zip')}`, { body: mv.zip, contentType: 'application/zip' });
    const named = Object.fromEntries(Object.entries(mv.files).map(([n, t]) => [`${mv.module}@${mv.version}/${n}`, t]));
    sums.push(`${mv.module} ${mv.version} ${hash1(named)}`, `${mv.module} ${mv.version}/go.mod ${hash1({ 'go.mod': mv.mod })}`);
  }
  mkdirSync(join(work, 'go'));
  writeFileSync(join(work, 'go', 'go.sum'), sums.join('\n') + '\n');

  // The real endorser, as docs/guide/endorsing-lockfiles.md runs it.
  await timed('endorse npm', () => endorse(join(work, 'npm', 'package-lock.json'), [], NPM_PACKAGES));
  await timed('endorse pip', () => endorse(join(work, 'pip', 'requirements.txt'), ['--index-url', `${index.origin}/simple/`], PIP_FILES));
  await timed('endorse go', () => endorse(join(work, 'go', 'go.sum'), ['--goproxy', `${goOrigin.origin}/mod/`], 2 * GO_MODULES));

  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: chain, public_key: publicKey },
      origin: { allow_private: true, timeout: 10 },
      mirror: { memory_bytes: 64 * 1024 * 1024 },
      proxy: {
        routes: [
          { prefix: '/npm/', kind: 'npm', origin: `${reg.url}/`, metadata_ttl: 300 },
          { prefix: '/pypi/', kind: 'pypi', origin: `${index.origin}/`, metadata_ttl: 300 },
          { prefix: '/pypi-files/', kind: 'pypi', origin: `${files.origin}/` },
          { prefix: '/go/', kind: 'goproxy', origin: `${goOrigin.origin}/mod/`, metadata_ttl: 300 },
        ],
      },
    }),
  ]);
});

test.after(async () => {
  await gw?.stop();
  await reg?.close().catch(() => {});
  await index?.close().catch(() => {});
  await files?.close().catch(() => {});
  await goOrigin?.close().catch(() => {});
  rmSync(work, { recursive: true, force: true });
  console.log(`eco-header-limits: ${timings.join(', ')}; total ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

test("every route's artifact answer, and /v1/download, has a head within 8 KiB", async () => {
  const mv = mods[7]!;
  const answers = {
    npm: await rawHead(gw.url, `/npm/${npmName(500)}/-/${npmName(500)}-1.0.0.tgz`),
    pypi: await rawHead(gw.url, `/pypi-files/packages/5/${distFilename(pySpecs[5]!)}`),
    goZip: await rawHead(gw.url, `/go/${esc(mv, 'zip')}`),
    goMod: await rawHead(gw.url, `/go/${esc(mv, 'mod')}`),
    download: await rawHead(gw.url, `/v1/download?url=${encodeURIComponent(reg.tarballUrl(npmName(999), '1.0.0'))}`),
  };
  timings.push(
    `heads: ${Object.entries(answers)
      .map(([what, a]) => `${what} ${a.bytes} B`)
      .join(', ')}`,
  );
  for (const [what, a] of Object.entries(answers)) {
    assert.is(a.status, 200, what);
    assert.ok(a.bytes < BUDGET, `${what}: head of ${a.bytes} bytes`);
    const uns = parseUns(a.headers.get('uns') ?? '');
    assert.ok(typeof uns !== 'string', `${what}: a UNS header`);
    // Package-manager routes send the compact form; /v1/download the whole block (the endorser made it fit).
    if (typeof uns !== 'string') assert.is(uns.form, what === 'download' ? 'full' : 'compact', what);
  }
});

test(`npm installs ${NPM_PACKAGES} packages through the gateway with its default header limit`, async () => {
  const dir = join(work, 'npm-project');
  mkdirSync(dir);
  const dependencies = Object.fromEntries(Array.from({ length: NPM_PACKAGES }, (_, i) => [npmName(i), '1.0.0']));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'big-app', version: '1.0.0', private: true, dependencies }));
  const env = cleanNpmEnv({
    NPM_CONFIG_USERCONFIG: join(dir, '.npmrc'),
    NPM_CONFIG_CACHE: join(dir, 'cache'),
    NPM_CONFIG_UPDATE_NOTIFIER: 'false',
    NPM_CONFIG_FUND: 'false',
    NPM_CONFIG_AUDIT: 'false',
  });
  assert.is((await runNpm(['config', 'set', 'registry', `${gw.url}/npm/`], { cwd: dir, env })).status, 0);
  const r = await timed('npm install', () => runNpm(['install', '--no-audit', '--no-fund', '--ignore-scripts'], { cwd: dir, env, timeoutMs: 240_000 }));
  assert.is(r.status, 0, `${r.stdout}\n${r.stderr}`.slice(-3000));
  assert.not.match(r.stderr, /HPE_HEADER_OVERFLOW/);
  assert.is(readdirSync(join(dir, 'node_modules')).filter((n) => n.startsWith('hl-pkg-')).length, NPM_PACKAGES);
  assert.is(readFileSync(join(dir, 'node_modules', npmName(777), 'index.js'), 'utf8'), 'module.exports = 777;\n');
  const lock = JSON.parse(readFileSync(join(dir, 'package-lock.json'), 'utf8'));
  assert.ok(lock.packages[`node_modules/${npmName(3)}`].resolved.startsWith(`${gw.url}/npm/`), 'downloaded through the gateway');
});

test(`pip downloads ${PIP_FILES} files through the gateway in hash-checking mode`, async () => {
  const dest = join(work, 'pip-dl');
  mkdirSync(join(work, 'home'), { recursive: true });
  const conf = join(work, 'pip.conf');
  writeFileSync(conf, `[global]\nindex-url = ${gw.url}/pypi/simple/\n`);
  const env = {
    PATH: '/usr/bin:/bin',
    HOME: join(work, 'home'),
    LANG: 'C.UTF-8',
    PIP_CONFIG_FILE: conf,
    PIP_DISABLE_PIP_VERSION_CHECK: '1',
    PIP_NO_CACHE_DIR: '1',
    PIP_NO_INPUT: '1',
    PYTHONDONTWRITEBYTECODE: '1',
  };
  const r = await timed('pip download', () =>
    runAsync(SYSTEM_PYTHON, ['-m', 'pip', 'download', '--no-deps', '--progress-bar', 'off', '-d', dest, '-r', join(work, 'pip', 'requirements.txt')], {
      env,
      timeoutMs: 240_000,
    }),
  );
  assert.is(r.status, 0, (r.stdout + r.stderr).slice(-3000));
  assert.is(readdirSync(dest).length, PIP_FILES);
  assert.ok(!index.log.some((l) => /pip/i.test(l.userAgent)) && !files.log.some((l) => /pip/i.test(l.userAgent)), 'pip went around the gateway');
});

test(`go downloads the ${GO_MODULES} modules of the go.sum through the gateway`, async () => {
  const dir = join(work, 'go-consumer');
  mkdirSync(dir);
  writeFileSync(join(dir, 'go.mod'), `module example.org/consumer\n\ngo 1.19\n\nrequire (\n${mods.map((m) => `\t${m.module} ${m.version}\n`).join('')})\n`);
  writeFileSync(join(dir, 'go.sum'), readFileSync(join(work, 'go', 'go.sum')));
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: join(work, 'home'),
    GOPATH: join(work, 'gopath'),
    GOMODCACHE: join(work, 'modcache'),
    GOCACHE: join(work, 'gocache'),
    GOFLAGS: '-modcacherw',
    GOTOOLCHAIN: 'local',
    GOPROXY: `${gw.url}/go/`,
    GOSUMDB: 'off',
    GONOPROXY: '',
    GOPRIVATE: '',
    GOINSECURE: '',
    GONOSUMDB: '',
    GO111MODULE: 'on',
  };
  const r = await timed('go mod download', () => runAsync('go', ['mod', 'download'], { cwd: dir, env, timeoutMs: 240_000 }));
  assert.is(r.status, 0, (r.stdout + r.stderr).slice(-3000));
  const cached = readdirSync(join(work, 'modcache', 'cache', 'download', 'example.com', 'hl'));
  assert.is(cached.length, GO_MODULES);
  assert.ok(
    goOrigin.log.every((l) => !/Go-http-client/i.test(l.headers['user-agent'] ?? '')),
    'go went around the gateway',
  );
});

test.run();
