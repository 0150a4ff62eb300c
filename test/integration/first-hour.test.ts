/**
 * The first hour of a new user (issue 34, item 4), through real `vouch`
 * processes: `vouch serve --dev` submits a loopback artifact and says why it
 * may; a config file is merged over the embedded default and `vouch config
 * init` writes that default; each message on the way off the happy path says
 * what to do next; `vouch serve` checks chain, key and port before it says it
 * is listening; the banner lists routes and witnesses; a lookup cut at an
 * unencoded `&` says so; the printed curl lines fail visibly. 127.0.0.1 only.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { defaultConfig, loadConfigFile, mergeDocs } from '../../gateway/config.ts';
import { COMMANDS } from '../../tools/command-list.ts';
import { SIG_COSIGNATURE_V1, verifierKey } from '../../chain/note.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { postSubmit, startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouch, vouchAsync } from '../helpers/processes.ts';

const work = realpathSync(mkdtempSync(join(tmpdir(), 'vouch-first-hour-')));
let origin: OriginServer;
const running: GatewayProcess[] = [];

test.before(async () => {
  origin = await OriginServer.start();
  origin.route('/lib.js', { body: 'console.log(1);\n' });
});

test.after(async () => {
  for (const g of running) await g.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

async function serve(args: string[], cwd: string): Promise<GatewayProcess> {
  const g = await startGatewayProcess(args, { cwd });
  running.push(g);
  return g;
}

const token = (dir: string) => readFileSync(join(dir, 'var', 'submit.token'), 'utf8').trim();

async function submit(base: string, bearer: string, url: string): Promise<{ status: number; body: any }> {
  const r = await postSubmit(base, bearer, { url, name: 'acme/lib', semver: '1.0.0', license: 'MIT' });
  return { status: r.status, body: r.json };
}

test('vouch serve --dev: the embedded default submits a loopback artifact, and says why at start', async () => {
  const dir = join(work, 'dev');
  mkdirSync(dir);
  const g = await serve(['--dev', '--listen', '127.0.0.1:0'], dir);
  assert.match(
    g.stdout(),
    /^dev mode: loopback and private origins are allowed \(origin\.allow_private: true\) because of --dev; never use --dev in production$/m,
  );
  const r = await submit(g.url, token(dir), origin.url('/lib.js'));
  assert.is(r.status, 201, JSON.stringify(r.body));
  await g.stop();
  // Without --dev the same submit is refused, and the message names both ways out.
  const plain = await serve(['--listen', '127.0.0.1:0'], dir);
  assert.not.match(plain.stdout(), /dev mode/);
  const refused = await submit(plain.url, token(dir), origin.url('/lib.js'));
  assert.is(refused.status, 400);
  assert.match(refused.body.message, /vouch serve --dev/);
  assert.ok(refused.body.message.includes('origin.allow_private: true'), refused.body.message);
  await plain.stop();
});

test('a config file is merged over the embedded default: only listen gives authority mode, dev key and all', async () => {
  const dir = join(work, 'merged');
  const file = writeConfig(dir, { listen: { port: 0 } }, 'vouch.yaml', { inheritAuthority: true });
  const c = loadConfigFile(file);
  const d = defaultConfig(dir);
  assert.ok(c.authority !== null, 'a file with only listen is read-only');
  assert.equal({ ...c, listen: d.listen, public_url: d.public_url, source: null }, d);
  assert.is(c.listen.port, 0);
  // Mappings merge key by key, lists and scalars replace; authority: null is read-only; a file naming its own chain (a mirror's remote, or a dir) stays read-only.
  assert.equal(mergeDocs({ a: { b: 1, c: [1, 2] }, d: 1 }, { a: { c: [3] }, d: null }), { a: { b: 1, c: [3] }, d: null });
  assert.is(loadConfigFile(writeConfig(join(work, 'ro'), { listen: { port: 0 } })).authority, null);
  const mirror = writeConfig(join(work, 'mirror'), { chain: { remote: 'http://127.0.0.1:1/c.git', public_key: 'A'.repeat(43) + '=' } }, 'vouch.yaml', {
    inheritAuthority: true,
  });
  assert.is(loadConfigFile(mirror).authority, null);
  // A file naming its own chain never inherits the development authority (it would sign that chain with a fresh dev key).
  const own = writeConfig(join(work, 'own'), { chain: { dir: join(work, 'own', 'chain') } }, 'vouch.yaml', { inheritAuthority: true });
  assert.is(loadConfigFile(own).authority, null);
  // Through a real process: the key and token are created next to the file, and a --dev submit works.
  const g = await serve(['--config', file, '--dev'], work);
  assert.match(
    g.stdout().split('\n')[0]!,
    /^mode: authority \(submit enabled, signer vouch-dev; the embedded default's development authority, merged under the config file/,
  );
  assert.ok(existsSync(join(dir, 'var', 'authority.pem')));
  const r = await submit(g.url, token(dir), origin.url('/lib.js'));
  assert.is(r.status, 201, JSON.stringify(r.body));
  await g.stop();
});

test('vouch config init writes the complete embedded default, and never overwrites without --force', async () => {
  const dir = join(work, 'init');
  mkdirSync(dir);
  const file = join(dir, 'vouch.yaml');
  const r = vouch(['config', 'init', '--out', file]);
  assert.is(r.status, 0, r.stderr);
  const c = loadConfigFile(file);
  assert.equal({ ...c, source: null }, defaultConfig(dir));
  // Complete: every section is written out (authority commented: the default's, created on first start).
  const text = readFileSync(file, 'utf8');
  for (const k of ['listen:', 'chain:', '# authority:', 'witness:', 'mirror:', 'origin:', 'proxy:', 'clients:']) assert.match(text, new RegExp(`^${k}`, 'm'));
  assert.match(text, /^# {3}key_file: "\.\/var\/authority\.pem"$/m);
  writeFileSync(file, 'listen: {port: 1}\n');
  const again = vouch(['config', 'init', '--out', file]);
  assert.is(again.status, 2);
  assert.match(again.stderr, /exists; give --force/);
  assert.is(readFileSync(file, 'utf8'), 'listen: {port: 1}\n');
  assert.is(vouch(['config', 'init', '--out', file, '--force']).status, 0);
  assert.is(readFileSync(file, 'utf8'), text);
});

test('an unknown option says "did you mean" for every command', async () => {
  for (const entry of COMMANDS) {
    const cmd = await entry.load();
    const name = Object.keys(cmd.options)[0] ?? 'json';
    // One character dropped from the end (or one added to a short name): a typo, not another option.
    const typo = name.length > 4 ? name.slice(0, -1) + (name.endsWith('x') ? 'y' : 'x') : name + 'x';
    const r = vouch([...entry.name.split(' '), `--${typo}`]);
    assert.is(r.status, 2, entry.name);
    assert.ok(r.stderr.includes(`did you mean --${name}?`), `${entry.name} --${typo}: ${r.stderr}`);
  }
  const r = vouch(['serv']);
  assert.match(r.stderr, /did you mean serve\?/);
});

test('a missing key file names vouch keygen; a missing chain.dir says how to make one; neither says listening', async () => {
  const dir = join(work, 'missing');
  const key = join(dir, 'no-such.pem');
  mkdirSync(dir);
  writeFileSync(join(dir, 'submit.token'), 'a-token-of-at-least-16-chars\n', { mode: 0o600 });
  const noKey = await vouchAsync([
    'serve',
    '--config',
    writeConfig(dir, {
      listen: { port: 0 },
      chain: { dir: join(dir, 'chain') },
      authority: { key_file: key, submit_token_file: join(dir, 'submit.token') },
    }),
  ]);
  assert.is(noKey.status, 2, noKey.stderr);
  assert.ok(noKey.stderr.includes(`vouch keygen --out ${key}`), noKey.stderr);
  assert.not.match(noKey.stdout, /listening on/);
  const chain = join(dir, 'no-chain');
  const noChain = await vouchAsync(['serve', '--config', writeConfig(dir, { listen: { port: 0 }, chain: { dir: chain } }, 'ro.yaml')]);
  assert.is(noChain.status, 2, noChain.stderr);
  assert.ok(noChain.stderr.includes(`chain.dir ${chain} does not exist`), noChain.stderr);
  assert.ok(noChain.stderr.includes(`vouch init --chain ${chain}`), noChain.stderr);
  assert.not.match(noChain.stdout, /listening on/);
  // A directory that is there but holds no chain: said before listening too.
  mkdirSync(chain);
  const empty = await vouchAsync(['serve', '--config', join(dir, 'ro.yaml')]);
  assert.is(empty.status, 2, empty.stderr);
  assert.ok(empty.stderr.includes(`chain.dir ${chain} holds no chain (no .git)`), empty.stderr);
  assert.not.match(empty.stdout, /listening on/);
});

test('a port in use names the port, says another process holds it and how to choose another; never says listening', async () => {
  const holder: Server = createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  const port = (holder.address() as { port: number }).port;
  try {
    const dir = join(work, 'port');
    mkdirSync(dir);
    const r = await vouchAsync(['serve', '--config', writeConfig(dir, { listen: { port } }, 'vouch.yaml', { inheritAuthority: true })]);
    assert.is(r.status, 2, r.stderr);
    assert.match(r.stderr, new RegExp(`port ${port} is in use by another process`));
    assert.match(r.stderr, /--listen 127\.0\.0\.1:PORT/);
    assert.match(r.stderr, /listen\.port/);
    assert.not.match(r.stdout, /listening on/);
  } finally {
    await new Promise((r) => holder.close(r));
  }
});

test('the banner lists every route (prefix, kind, origin) and the witnesses asked to cosign', async () => {
  const dir = join(work, 'banner');
  mkdirSync(dir);
  createKeyFile(join(dir, 'authority.pem'));
  writeFileSync(join(dir, 'submit.token'), 'banner-token-' + 'b'.repeat(20) + '\n', { mode: 0o600 });
  const witnessKey = verifierKey(nodeBackend, 'w.example/witness', SIG_COSIGNATURE_V1, new Uint8Array(32).fill(7));
  const g = await serve(
    [
      '--config',
      writeConfig(dir, {
        listen: { port: 0 },
        chain: { dir: join(dir, 'chain') },
        authority: {
          key_file: join(dir, 'authority.pem'),
          submit_token_file: join(dir, 'submit.token'),
          witnesses: [{ url: 'http://127.0.0.1:1/w', vkey: witnessKey }],
        },
        proxy: {
          routes: [
            { prefix: '/npm/', kind: 'npm', origin: 'http://127.0.0.1:1/registry/' },
            { prefix: '/files/', origin: 'http://127.0.0.1:1/files/', mode: 'audit' },
          ],
        },
      }),
    ],
    work,
  );
  const out = g.stdout();
  const before = out.slice(0, out.indexOf('listening on'));
  assert.match(before, /^route: \/npm\/ kind npm, origin http:\/\/127\.0\.0\.1:1\/registry\/ \(enforce, unendorsed deny\)$/m);
  assert.match(before, /^route: \/files\/ kind plain, origin http:\/\/127\.0\.0\.1:1\/files\/ \(audit, unendorsed deny\)$/m);
  assert.match(before, /^witness asked to cosign: http:\/\/127\.0\.0\.1:1\/w \(w\.example\/witness\)$/m);
  await g.stop();
  // None configured: the banner says so and where to add them.
  const bare = await serve(['--config', writeConfig(dir, { listen: { port: 0 }, chain: { dir: join(dir, 'chain') } }, 'ro.yaml')], work);
  assert.match(bare.stdout(), /^routes: none \(proxy\.routes/m);
  await bare.stop();
});

let curlGateway: { g: GatewayProcess; dir: string } | null = null;

/** An authority gateway from a config file (its own key and token), for the lookup and curl tests. */
async function listenOnly(): Promise<{ g: GatewayProcess; dir: string }> {
  if (curlGateway !== null) return curlGateway;
  const dir = join(work, 'curl');
  mkdirSync(dir);
  createKeyFile(join(dir, 'authority.pem'));
  writeFileSync(join(dir, 'submit.token'), 'curl-token-' + 'c'.repeat(24) + '\n', { mode: 0o600 });
  const g = await serve(
    [
      '--config',
      writeConfig(dir, {
        listen: { port: 0 },
        chain: { dir: join(dir, 'chain') },
        authority: { key_file: join(dir, 'authority.pem'), submit_token_file: join(dir, 'submit.token') },
      }),
    ],
    work,
  );
  return (curlGateway = { g, dir });
}

test('a lookup cut at an unencoded & says so in its 404 (same code, a message that says what to do)', async () => {
  const { g } = await listenOnly();
  const cut = await fetch(`${g.url}/v1/endorsement?url=https://h.example/x?a=1&b=2`);
  assert.is(cut.status, 404);
  const j = (await cut.json()) as any;
  assert.is(j.status, 'not_found');
  assert.match(j.message, /the url looks truncated at an unencoded '&' \(the query also has b=2/);
  assert.match(j.message, /percent-encode the url parameter/);
  const plain = (await (await fetch(`${g.url}/v1/endorsement?url=${encodeURIComponent('https://h.example/x?a=1&b=2')}`)).json()) as any;
  assert.is(plain.status, 'not_found');
  assert.not.match(plain.message, /truncated/);
});

test('the printed curl lines need no jq and fail visibly on an error answer', async () => {
  const { g, dir } = await listenOnly();
  const out = g.stdout();
  assert.not.match(out, /\bjq\b/);
  const tryLine = /^try: (.*)$/m.exec(out)![1]!;
  assert.match(tryLine, /--fail-with-body/);
  assert.is(spawnSync('sh', ['-c', tryLine], { encoding: 'utf8', timeout: 20_000 }).status, 0);
  const template = /^to submit an artifact [^:]*: (curl .*)$/m.exec(out)?.[1];
  assert.ok(template !== undefined, out);
  assert.match(template!, /--fail-with-body/);
  // The template as printed (placeholders left in): the gateway refuses it, and curl prints why and fails.
  const r = spawnSync('sh', ['-c', template!], { encoding: 'utf8', timeout: 20_000, cwd: dir });
  assert.is(r.status, 22, r.stderr);
  assert.is(JSON.parse(r.stdout).success, false);
});

test.run();
