/**
 * A registry cannot offer one package's endorsed bytes under another name
 * (issue 31, item 3), against a real `vouch serve` process:
 * - npm, with the real npm CLI: `@x/foo@1.0.0` and `@types/node@1.0.0`
 *   endorsed; the registry (test/helpers/npm-registry.ts) lists `foo@1.0.0`
 *   and `node@1.0.0` with their tarballs. Neither is offered (the tarball
 *   URL must be exactly `<name>/-/<basename>-<version>.tgz` under the route
 *   that serves it), so `npm install foo@1.0.0` fails with the gateway's
 *   reason, while `@x/foo` installs.
 * - PyPI, with real HTTP requests: the index names a file
 *   `widget-1.0.0.tar.gz` (anchor text, JSON `filename`) but links
 *   `.../widget-2.0.0.tar.gz`, which is endorsed; pip names a file by its
 *   URL, so the link is dropped from the page (with a warning), and the
 *   project's other files stay offered.
 * Owns: nothing outside this file; cleans up the gateway, servers and files.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint, buildEndorseBlock } from '../../chain/build.ts';
import type { Block } from '../../chain/block.ts';
import { base64Encode } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { initChainRepo, testSigner } from '../helpers/chain-fixture.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { NpmRegistry, cleanNpmEnv, runNpm, type NpmRun } from '../helpers/npm-registry.ts';
import { OriginServer } from '../helpers/origin-server.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-eco-confusion-'));
const CANON = 'https://registry.example.org/';
let reg: NpmRegistry;
let origin: OriginServer;
let gw: GatewayProcess;
const WIDGET_2 = Buffer.from('widget 2.0.0 sdist, endorsed under its own URL');
const WIDGET_15 = Buffer.from('widget 1.5.0 sdist');

test.before(async () => {
  reg = await NpmRegistry.start(work);
  const xfoo = await reg.publish('@x/foo', '1.0.0', { 'index.js': 'module.exports = "@x/foo";\n' });
  const types = await reg.publish('@types/node', '1.0.0', { 'index.js': 'module.exports = "@types/node";\n' });
  reg.alias('foo', '1.0.0', '1.0.0', { from: '@x/foo', latest: true });
  reg.alias('node', '1.0.0', '1.0.0', { from: '@types/node', latest: true });

  origin = await OriginServer.start();
  const o = origin.url('');
  const h = (b: Buffer) => artifactHashOf(nodeBackend, 'sha256', b).slice('sha256:'.length);
  origin.route('/pypi/simple/widget/', {
    contentType: 'text/html',
    body: `<html><body>
<a href="${o}/files/widget-2.0.0.tar.gz#sha256=${h(WIDGET_2)}">widget-1.0.0.tar.gz</a>
<a href="${o}/files/widget-1.5.0.tar.gz#sha256=${h(WIDGET_15)}">widget-1.5.0.tar.gz</a>
</body></html>`,
  });
  origin.route('/pypi/simple/gadget/', {
    contentType: 'application/vnd.pypi.simple.v1+json',
    body: JSON.stringify({
      meta: { 'api-version': '1.1' },
      name: 'gadget',
      files: [{ filename: 'widget-1.0.0.tar.gz', url: `${o}/files/widget-2.0.0.tar.gz`, hashes: {} }],
    }),
  });
  origin.route('/files/widget-2.0.0.tar.gz', { body: WIDGET_2 });
  origin.route('/files/widget-1.5.0.tar.gz', { body: WIDGET_15 });

  const signer = testSigner('eco-confusion');
  const now = Date.now() - 60_000;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now, uns: 'acme/confusion' })];
  const endorse = (url: string, bytes: Buffer, name: string, semver: string) =>
    blocks.push(
      buildEndorseBlock({
        prev: blocks.at(-1)!,
        signer,
        backend: nodeBackend,
        now: now + blocks.length,
        entries: [{ url, artifactHash: artifactHashOf(nodeBackend, 'sha512', bytes), name, semver, license: 'MIT' }],
      }),
    );
  endorse(`${CANON}@x/foo/-/foo-1.0.0.tgz`, xfoo, '@x/foo', '1.0.0');
  endorse(`${CANON}@types/node/-/node-1.0.0.tgz`, types, '@types/node', '1.0.0');
  // What a lockfile endorser that trusted the index's name would have signed: 2.0.0's URL as widget 1.0.0.
  endorse(`${o}/files/widget-2.0.0.tar.gz`, WIDGET_2, 'pypi/widget', '1.0.0');
  endorse(`${o}/files/widget-1.5.0.tar.gz`, WIDGET_15, 'pypi/widget', '1.5.0');
  const chainDir = join(work, 'chain');
  await initChainRepo(chainDir, blocks, buildCheckpoint({ head: blocks.at(-1)!, signer, now: now + blocks.length }), { timestamp: Math.floor(now / 1000) });
  gw = await startGatewayProcess(
    [
      '--config',
      writeConfig(join(work, 'gw'), {
        listen: { port: 0 },
        chain: { dir: chainDir, public_key: base64Encode(signer.publicKey) },
        origin: { timeout: 10, allow_private: true },
        proxy: {
          routes: [
            { prefix: '/npm/', kind: 'npm', origin: `${reg.url}/`, canonical: CANON, metadata_ttl: 0 },
            { prefix: '/pypi/', kind: 'pypi', origin: `${o}/pypi/`, metadata_ttl: 0 },
            { prefix: '/pypi-files/', kind: 'pypi', origin: `${o}/files/` },
          ],
        },
      }),
    ],
    { env: { VOUCH_LOG_FORMAT: 'json' } },
  );
});

test.after(async () => {
  await gw?.stop();
  await reg?.close().catch(() => {});
  await origin?.close().catch(() => {});
  rmSync(work, { recursive: true, force: true });
});

let projects = 0;
async function npmIn(args: string[]): Promise<{ run: NpmRun; dir: string }> {
  const dir = join(work, `project-${++projects}`);
  mkdirSync(dir);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `project-${projects}`, version: '1.0.0', private: true }));
  const env = cleanNpmEnv({
    NPM_CONFIG_USERCONFIG: join(dir, '.npmrc'),
    NPM_CONFIG_CACHE: join(dir, 'cache'),
    NPM_CONFIG_REGISTRY: `${gw.url}/npm/`,
    NPM_CONFIG_UPDATE_NOTIFIER: 'false',
    NPM_CONFIG_FUND: 'false',
    NPM_CONFIG_AUDIT: 'false',
    NPM_CONFIG_FETCH_RETRIES: '0',
  });
  return { run: await runNpm(args, { cwd: dir, env }), dir };
}

test("npm: foo listing @x/foo's endorsed tarball, node listing @types/node's: not offered, npm install fails with the reason", async () => {
  for (const [name, owner] of [
    ['foo', '@x/foo'],
    ['node', '@types/node'],
  ] as const) {
    const r = await fetch(`${gw.url}/npm/${name}`, { headers: { accept: 'application/json' } });
    const body = await r.text();
    assert.is(r.status, 404, `${name}: ${body.slice(0, 300)}`);
    assert.equal(JSON.parse(body), { error: `vouch: no endorsed version of ${name}` });
    const { run } = await npmIn(['install', `${name}@1.0.0`]);
    assert.is.not(run.status, 0, `npm installed ${name}@1.0.0 (the bytes of ${owner}):\n${run.stdout}`);
    assert.match(`${run.stdout}\n${run.stderr}`, `no endorsed version of ${name}`);
  }
  assert.match(gw.stderr(), /removed versions listing an endorsed tarball of another package or version/);
  // The packages that own those tarballs install.
  const { run, dir } = await npmIn(['install', '@x/foo@1.0.0']);
  assert.is(run.status, 0, run.stderr);
  assert.is(readFileSync(join(dir, 'node_modules', '@x', 'foo', 'index.js'), 'utf8'), 'module.exports = "@x/foo";\n');
});

test('PyPI: a link the index names widget-1.0.0.tar.gz but whose URL is widget-2.0.0.tar.gz is dropped; the other files stay', async () => {
  const html = await fetch(`${gw.url}/pypi/simple/widget/`, { headers: { accept: 'text/html' } });
  const page = await html.text();
  assert.is(html.status, 200, page);
  assert.not.match(page, /widget-2\.0\.0|widget-1\.0\.0/);
  assert.match(page, /pypi-files\/widget-1\.5\.0\.tar\.gz#sha512=[0-9a-f]{128}">widget-1\.5\.0\.tar\.gz</);
  const json = await fetch(`${gw.url}/pypi/simple/widget/`, { headers: { accept: 'application/vnd.pypi.simple.v1+json' } });
  assert.equal(
    (await json.json()).files.map((f: { filename: string }) => f.filename),
    ['widget-1.5.0.tar.gz'],
  );
  // A JSON index page whose only file is named otherwise than its URL: nothing left to offer, 404 with the reason.
  const gadget = await fetch(`${gw.url}/pypi/simple/gadget/`, { headers: { accept: 'application/vnd.pypi.simple.v1+json' } });
  assert.is(gadget.status, 404);
  assert.match(await gadget.text(), /1 named otherwise by the index than by their URL/);
  assert.match(gw.stderr(), /"level":"warn".*removed links the index names otherwise than their URL/);
});

test.run();
