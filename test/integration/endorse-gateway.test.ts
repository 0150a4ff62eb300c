/**
 * `vouch endorse --gateway URL --token-file FILE` end to end: a real
 * authority gateway process, real origins on 127.0.0.1 (an npm registry, a
 * PyPI index and files host, a GOPROXY), the real CLI as a subprocess. The
 * same lockfiles endorsed offline on a second chain give the entries the
 * gateway signed; claims the bytes contradict are refused by the authority;
 * the submit streams NDJSON progress when asked and stays plain JSON
 * otherwise; clients queue behind the single writer, and one killed
 * mid-submit leaves its whole block (the authority finishes it).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { gitIn, vouchAsync, type Run, initAuthorityChain } from '../helpers/processes.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { hex, lockTarball, sri, writerIn } from '../helpers/lockfiles.ts';
import { startGatewayProcess, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { hash1, modVersion } from '../helpers/go-modules.ts';
import { repoRoot } from '../helpers/vectors.ts';
import { chainFile } from '../helpers/chain-files.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-endorse-gw-'));
const key = join(work, 'authority.pem');
const gwChain = join(work, 'gw', 'chain');
const offChain = join(work, 'offline');
const tokenFile = join(work, 'submit.token');
const badTokenFile = join(work, 'bad.token');
const token = 'endorse-through-the-gateway-token';
let reg: OriginServer;
let files: OriginServer;
let gw: GatewayProcess;

const write = writerIn(work);
const size = (chain: string) => JSON.parse(readFileSync(join(chain, 'checkpoint.json'), 'utf8')).size as number;
const block = (chain: string, i: number) => {
  const d = String(i).padStart(9, '0');
  return JSON.parse(chainFile(chain, `blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`));
};
/** What an entry says, without anything the signer or the clock decides. */
const entries = (b: any) =>
  b.payload.endorsements.map((e: any) => ({
    url: e.artifact_url,
    hash: e.artifact_hash,
    name: e.name,
    semver: e.semver,
    license: e.license,
    comment: e.comment,
  }));
const blocksFrom = (chain: string, from: number) => {
  const out: any[] = [];
  for (let i = from; i < size(chain); i++) out.push(block(chain, i));
  return out;
};
const shape = (b: any) => ({ uns: b.payload.uns, semver: b.payload.semver, comment: b.comment, entries: entries(b) });
const through = (args: string[], env: Record<string, string> = {}) => vouchAsync(['endorse', '--gateway', gw.url, '--token-file', tokenFile, ...args], env);
const offline = (args: string[], env: Record<string, string> = {}) => vouchAsync(['endorse', '--chain', offChain, '--key', key, ...args], env);
const verify = async (chain: string) => {
  const r = await vouchAsync(['verify', '--chain', chain, '--json']);
  assert.is(r.status, 0, r.stderr + r.stdout);
  return JSON.parse(r.stdout);
};
/** Commits on the chain's branch. */
const commits = (chain: string) => Number(gitIn(chain, 'rev-list', '--count', 'HEAD').trim());
const noStack = (r: Run) => assert.not.match(r.stderr, /\n\s+at /, 'stack trace on stderr');

/** Endorses `lockfile` offline and through the gateway; asserts both post the same blocks' entries and returns the gateway's blocks. */
async function sameAsOffline(lockfile: string, args: string[], env: Record<string, string> = {}): Promise<any[]> {
  const offBefore = size(offChain);
  const off = await offline(['--lockfile', lockfile, ...args], env);
  assert.is(off.status, 0, off.stderr + off.stdout);
  const gwBefore = size(gwChain);
  const r = await through(['--lockfile', lockfile, ...args], env);
  assert.is(r.status, 0, r.stderr + r.stdout);
  noStack(r);
  const ours = blocksFrom(gwChain, gwBefore);
  const theirs = blocksFrom(offChain, offBefore);
  assert.ok(ours.length >= 1);
  assert.equal(ours.map(shape), theirs.map(shape), 'the gateway signed other blocks than the offline command');
  // Not a terminal: one plain progress line per block on stderr, nothing else.
  const lines = r.stderr.trim().split('\n');
  assert.is(lines.length, ours.length, r.stderr);
  lines.forEach((l, k) => assert.match(l, new RegExp(`^block ${k + 1} of ${ours.length} \\(\\d+ entries\\): posted at index ${ours[k].index}$`)));
  return ours;
}

const tarball = (path: string, bytes: Buffer, extra: Record<string, unknown> = {}) => lockTarball(reg, path, bytes, extra);

test.before(async () => {
  reg = await OriginServer.start();
  files = await OriginServer.start();
  await initAuthorityChain({ key, chain: offChain, signer: 'gw-authority' });
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  writeFileSync(badTokenFile, 'not-the-token\n', { mode: 0o600 });
  const config = writeConfig(join(work, 'gw'), {
    listen: { port: 0 },
    chain: { dir: gwChain },
    authority: { key_file: key, signer: 'gw-authority', submit_token_file: tokenFile },
    origin: { allow_private: true },
  });
  gw = await startGatewayProcess(['--config', config]);
});

test.after(async () => {
  await gw?.stop();
  await reg.close();
  await files.close();
  rmSync(work, { recursive: true, force: true });
});

// ------------------------------------------------------------------ --url

test('--url once and several: the authority fetches and signs one block; a resubmit is unchanged', async () => {
  const a = Buffer.from('artifact a through the gateway');
  const b = Buffer.from('artifact b through the gateway');
  reg.route('/u/a.tgz', { body: a }).route('/u/b.tgz', { body: b });
  const before = size(gwChain);
  let r = await through(['--url', reg.url('/u/a.tgz'), '--name', 'acme/a', '--semver', '1.0.0', '--license', 'MIT']);
  assert.is(r.status, 0, r.stderr);
  const one = block(gwChain, before);
  assert.is(r.stdout, `${before} ${one.record_hash}\n`);
  assert.equal(
    entries(one).map((e: any) => [e.url, e.hash]),
    [[reg.url('/u/a.tgz'), `sha256:${hex('sha256', a)}`]],
  );

  r = await through([
    '--url',
    reg.url('/u/a.tgz'),
    '--url',
    reg.url('/u/b.tgz'),
    '--name',
    'acme/ab',
    '--semver',
    '2.0.0',
    '--license',
    'MIT',
    '--algorithm',
    'sha512',
    '--json',
  ]);
  assert.is(r.status, 0, r.stderr);
  assert.is(JSON.parse(r.stdout).index, before + 1);
  const two = block(gwChain, before + 1);
  assert.equal(
    entries(two).map((e: any) => [e.url, e.hash]),
    [
      [reg.url('/u/a.tgz'), `sha512:${hex('sha512', a)}`],
      [reg.url('/u/b.tgz'), `sha512:${hex('sha512', b)}`],
    ],
  );
  r = await through([
    '--url',
    reg.url('/u/a.tgz'),
    '--url',
    reg.url('/u/b.tgz'),
    '--name',
    'acme/ab',
    '--semver',
    '2.0.0',
    '--license',
    'MIT',
    '--algorithm',
    'sha512',
  ]);
  assert.is(r.status, 0, r.stderr);
  assert.is(r.stdout, `unchanged: all 2 URLs already signed with these bytes in block ${before + 1} ${two.record_hash}\n`);
  assert.is(size(gwChain), before + 2);
  // --file and --chain make no sense here: usage, exit 2.
  r = await through(['--url', reg.url('/u/a.tgz'), '--file', write('x.bin', 'x'), '--name', 'acme/a', '--semver', '1.0.0', '--license', 'MIT']);
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr, /--file does not apply with --gateway/);
});

test('a bad token: 401 from the authority, exit 2, one line, nothing appended', async () => {
  reg.route('/u/t.tgz', { body: Buffer.from('t') });
  const before = size(gwChain);
  const r = await vouchAsync([
    'endorse',
    '--gateway',
    gw.url,
    '--token-file',
    badTokenFile,
    '--url',
    reg.url('/u/t.tgz'),
    '--name',
    'acme/t',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
  ]);
  assert.is(r.status, 2, r.stderr);
  assert.is(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /unauthorized|Bearer/);
  assert.not.match(r.stderr, /not-the-token/, 'the token was printed');
  assert.is(reg.requests('/u/t.tgz'), 0);
  assert.is(size(gwChain), before);
});

// ------------------------------------------------------------------ lockfiles, as offline

test('npm lockfile (sha512 and a sha1-only integrity): the same block as offline, the hashes computed by the authority', async () => {
  const left = Buffer.from('gw leftpad 1.0.0');
  const util = Buffer.from('gw @scope/util 2.1.0');
  const old = Buffer.from('gw old 0.1.0 (sha1 lockfile)');
  reg.route('/n/old-0.1.0.tgz', { body: old });
  const lock = {
    name: 'gw-app',
    version: '1.2.3',
    lockfileVersion: 3,
    packages: {
      '': { name: 'gw-app', version: '1.2.3' },
      'node_modules/leftpad': { version: '1.0.0', license: 'MIT', ...tarball('/n/leftpad-1.0.0.tgz', left) },
      'node_modules/@scope/util': { version: '2.1.0', license: 'Apache-2.0', ...tarball('/n/util-2.1.0.tgz', util) },
      'node_modules/old': { version: '0.1.0', license: 'ISC', resolved: reg.url('/n/old-0.1.0.tgz'), integrity: sri('sha1', old) },
    },
  };
  const [b] = await sameAsOffline(write('npm/package-lock.json', JSON.stringify(lock)), []);
  assert.is(b.payload.uns, 'npm/gw-app');
  const byName = Object.fromEntries(entries(b).map((e: any) => [e.name, e]));
  assert.is(byName['npm/leftpad'].hash, `sha512:${hex('sha512', left)}`);
  assert.is(byName['npm/old'].hash, `sha256:${hex('sha256', old)}`, 'a sha1 claim is checked, the entry endorsed with sha256');
  // Once offline, once by the authority: the claim is checked on the very bytes whose sha256 is signed.
  assert.is(reg.requests('/n/old-0.1.0.tgz'), 2, 'the authority fetched the artifact more than once');
  assert.is(reg.requests('/n/leftpad-1.0.0.tgz'), 2);
});

test('pip requirements (HTML index with hashes, a files host): the same block as offline', async () => {
  const whl = Buffer.from('gw requests 2.31.0 wheel');
  const sdist = Buffer.from('gw requests 2.31.0 sdist (not pinned)');
  const idna = Buffer.from('gw idna 3.4 wheel');
  files
    .route('/p/requests-2.31.0-py3-none-any.whl', { body: whl })
    .route('/p/requests-2.31.0.tar.gz', { body: sdist })
    .route('/p/idna-3.4-py3-none-any.whl', { body: idna });
  reg.route('/simple/requests/', {
    contentType: 'text/html',
    body: `<a href="${files.url('/p/requests-2.31.0-py3-none-any.whl')}#sha256=${hex('sha256', whl)}">requests-2.31.0-py3-none-any.whl</a>
      <a href="${files.url('/p/requests-2.31.0.tar.gz')}#sha256=${hex('sha256', sdist)}">requests-2.31.0.tar.gz</a>`,
  });
  reg.route('/simple/idna/', {
    contentType: 'text/html',
    body: `<a href="${files.url('/p/idna-3.4-py3-none-any.whl')}#sha256=${hex('sha256', idna)}">idna-3.4-py3-none-any.whl</a>`,
  });
  const req = `requests==2.31.0 --hash=sha256:${hex('sha256', whl)}\nidna==3.4 --hash=sha256:${hex('sha256', idna)}\n`;
  const [b] = await sameAsOffline(write('py/requirements.txt', req), ['--index-url', reg.url('/simple/'), '--license', 'Apache-2.0']);
  assert.equal(
    entries(b)
      .map((e: any) => e.name)
      .sort(),
    ['pypi/idna', 'pypi/requests'],
  );
  assert.is(files.requests('/p/requests-2.31.0.tar.gz'), 0, 'an unpinned file was fetched');
});

test('go.sum (zips and go.mod files, h1: claims checked by the authority): the same block as offline', async () => {
  const m1 = modVersion('example.com/Gw/one', 'v1.0.0');
  const m2 = modVersion('example.com/gw/two', 'v0.2.0');
  const zipH1 = (m: typeof m1) => hash1(Object.fromEntries(Object.entries(m.files).map(([n, t]) => [`${m.module}@${m.version}/${n}`, t])));
  for (const [m, esc] of [
    [m1, 'example.com/!gw/one'],
    [m2, 'example.com/gw/two'],
  ] as const) {
    reg.route(`/gp/${esc}/@v/${m.version}.zip`, { body: m.zip, contentType: 'application/zip' }).route(`/gp/${esc}/@v/${m.version}.mod`, { body: m.mod });
  }
  const sum =
    [m1, m2].flatMap((m) => [`${m.module} ${m.version} ${zipH1(m)}`, `${m.module} ${m.version}/go.mod ${hash1({ 'go.mod': m.mod })}`]).join('\n') + '\n';
  const [b] = await sameAsOffline(write('gomod/go.sum', sum), [
    '--goproxy',
    reg.url('/gp/'),
    '--license',
    'BSD-3-Clause',
    '--name',
    'acme/gosvc',
    '--semver',
    '1.0.0',
  ]);
  assert.is(entries(b).length, 4);
  assert.ok(entries(b).some((e: any) => e.url === reg.url('/gp/example.com/!gw/one/@v/v1.0.0.zip') && e.hash === `sha256:${hex('sha256', m1.zip)}`));
  assert.is(reg.requests('/gp/example.com/!gw/one/@v/v1.0.0.zip'), 2, 'the h1: claim and the signed sha256 came from different fetches');
  assert.is(reg.requests('/gp/example.com/gw/two/@v/v0.2.0.mod'), 2);
});

test('a lockfile split into several blocks: sent in one submit, appended in one commit as offline, the same blocks', async () => {
  const packages: Record<string, unknown> = { '': { name: 'split-app', version: '0.1.0' } };
  for (let i = 0; i < 5; i++)
    packages[`node_modules/s${i}`] = { version: '1.0.0', license: 'MIT', ...tarball(`/s/s${i}-1.0.0.tgz`, Buffer.from(`split ${i}`)) };
  const commitsBefore = commits(gwChain);
  const blocks = await sameAsOffline(write('split/package-lock.json', JSON.stringify({ lockfileVersion: 3, packages })), [], {
    VOUCH_LOCKFILE_BLOCK_ENTRIES: '2',
  });
  assert.equal(
    blocks.map((b) => b.payload.endorsements.length),
    [2, 2, 1],
  );
  assert.is(blocks[0].comment, 'npm/split-app 0.1.0 from package-lock.json part 1 of 3');
  assert.is(commits(gwChain) - commitsBefore, 1, 'the blocks of one lockfile were not appended in one commit');
});

test('a split lockfile with one refused entry in its last block: nothing of any of its blocks signed (all or none, as offline)', async () => {
  const packages: Record<string, unknown> = { '': { name: 'split-bad', version: '0.1.0' } };
  for (let i = 0; i < 5; i++)
    packages[`node_modules/t${i}`] = { version: '1.0.0', license: 'MIT', ...tarball(`/t/t${i}-1.0.0.tgz`, Buffer.from(`split bad ${i}`)) };
  reg.route('/t/t4-1.0.0.tgz', { body: Buffer.from('split bad 4'), tamper: true });
  const before = size(gwChain);
  const r = await through(['--lockfile', write('split-bad/package-lock.json', JSON.stringify({ lockfileVersion: 3, packages }))], {
    VOUCH_LOCKFILE_BLOCK_ENTRIES: '2',
  });
  assert.is(r.status, 1, r.stderr + r.stdout);
  noStack(r);
  assert.match(r.stderr, `refused: t4@1.0.0: ${reg.url('/t/t4-1.0.0.tgz')} hashes sha512:`);
  assert.match(r.stderr, 'blocks 1 to 3 of 3 (5 entries, sent together): refused, nothing of them signed');
  assert.match(r.stderr, /0 of 3 blocks posted/);
  assert.is(size(gwChain), before, 'blocks of a lockfile with a refused entry were signed');
});

test('POST /v1/submit blocks form: one URL twice across blocks, too many entries, a non-multi element: 400, nothing fetched', async () => {
  reg.route('/bf/a.tgz', { body: Buffer.from('blocks form a') });
  const entry = (url: string) => ({ url, name: 'acme/bf', semver: '1.0.0', license: 'MIT' });
  const post = (body: unknown) =>
    fetch(`${gw.url}/v1/submit`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const before = size(gwChain);
  const cases: [unknown, RegExp][] = [
    [
      {
        blocks: [
          { uns: 'acme/bf', semver: '1.0.0', endorsements: [entry(reg.url('/bf/a.tgz'))] },
          { uns: 'acme/bf', semver: '1.0.1', endorsements: [entry(reg.url('/bf/a.tgz'))] },
        ],
      },
      /^blocks\[1\]\.endorsements\[0\]\.url repeats /,
    ],
    [{ blocks: [] }, /^blocks must hold 1 to 256 blocks/],
    [{ blocks: [entry(reg.url('/bf/a.tgz'))] }, /^blocks\[0\] must be a multi-artifact body/],
    [{ blocks: [{ uns: 'acme/bf', semver: 'x', endorsements: [entry(reg.url('/bf/a.tgz'))] }] }, /^blocks\[0\]: semver must be /],
    [
      {
        blocks: Array.from({ length: 2 }, (_, k) => ({
          uns: 'acme/bf',
          semver: '1.0.0',
          endorsements: Array.from({ length: 600 }, (_, i) => entry(reg.url(`/bf/${k}-${i}.tgz`))),
        })),
      },
      /^blocks hold more than 1000 entries together/,
    ],
    [{ blocks: [{ uns: 'acme/bf', semver: '1.0.0', endorsements: [entry(reg.url('/bf/a.tgz'))] }], uns: 'acme/bf' }, /unknown member "uns"/],
  ];
  for (const [body, message] of cases) {
    const res = await post(body);
    const answer = (await res.json()) as any;
    assert.is(res.status, 400, JSON.stringify(answer));
    assert.is(answer.status, 'bad_request');
    assert.match(answer.message, message);
  }
  assert.is(reg.requests('/bf/a.tgz'), 0);
  assert.is(size(gwChain), before);
  // Accepted: each block's status; sent again, every block unchanged (200).
  reg.route('/bf/b.tgz', { body: Buffer.from('blocks form b') });
  const ok = {
    blocks: [
      { uns: 'acme/bf', semver: '1.0.0', endorsements: [entry(reg.url('/bf/a.tgz'))] },
      { uns: 'acme/bf', semver: '1.0.0', comment: 'second', endorsements: [entry(reg.url('/bf/b.tgz'))] },
    ],
  };
  const res = await post(ok);
  const answer = (await res.json()) as any;
  assert.is(res.status, 201, JSON.stringify(answer));
  assert.equal(
    answer.blocks.map((b: any) => [b.status, b.index, b.entries]),
    [
      ['posted', before, 1],
      ['posted', before + 1, 1],
    ],
  );
  assert.is(block(gwChain, before + 1).comment, 'second');
  assert.is(block(gwChain, before + 1).record_hash, answer.blocks[1].record_hash);
  const again = await post(ok);
  assert.is(again.status, 200);
  assert.equal(
    ((await again.json()) as any).blocks.map((b: any) => [b.status, b.index]),
    [
      ['unchanged', before],
      ['unchanged', before + 1],
    ],
  );
  assert.is(size(gwChain), before + 2);
});

// ------------------------------------------------------------------ refusals

test("a registry serving other bytes than the lockfile's integrity: one line naming the package, exit 1, nothing of that block signed", async () => {
  const fine = Buffer.from('claims: fine 1.0.0');
  const real = Buffer.from('claims: the bytes the lockfile pinned');
  const lock = {
    lockfileVersion: 3,
    packages: {
      '': { name: 'claims', version: '1.0.0' },
      'node_modules/fine': { version: '1.0.0', license: 'MIT', ...tarball('/c/fine-1.0.0.tgz', fine) },
      'node_modules/swapped': { version: '2.0.0', license: 'MIT', ...tarball('/c/swapped-2.0.0.tgz', real) },
    },
  };
  reg.route('/c/swapped-2.0.0.tgz', { body: real, tamper: true });
  const before = size(gwChain);
  const r = await through(['--lockfile', write('claims/package-lock.json', JSON.stringify(lock))]);
  assert.is(r.status, 1, r.stderr + r.stdout);
  noStack(r);
  const refused = r.stderr.split('\n').filter((l) => l.startsWith('refused: '));
  assert.is(refused.length, 1, r.stderr);
  assert.match(refused[0]!, `refused: swapped@2.0.0: ${reg.url('/c/swapped-2.0.0.tgz')} hashes sha512:`);
  assert.match(refused[0]!, `package-lock.json claims sha512:${hex('sha512', real)}`);
  assert.match(r.stderr, /hash_mismatch|1 of 2 entries refused/);
  assert.ok(reg.requests('/c/swapped-2.0.0.tgz') >= 1, 'the authority did not fetch the artifact');
  assert.is(size(gwChain), before, 'a block was signed despite a refused claim');
  // The submit API says the same to any client: 409 hash_mismatch with one record per refused entry.
  const res = await fetch(`${gw.url}/v1/submit`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      uns: 'acme/claims',
      semver: '1.0.0',
      endorsements: [
        { url: reg.url('/c/fine-1.0.0.tgz'), name: 'npm/fine', semver: '1.0.0', license: 'MIT', expect: `sha512:${hex('sha512', fine)}` },
        { url: reg.url('/c/swapped-2.0.0.tgz'), name: 'npm/swapped', semver: '2.0.0', license: 'MIT', expect: [`sha256:${hex('sha256', real)}`] },
      ],
    }),
  });
  const body = (await res.json()) as any;
  assert.is(res.status, 409);
  assert.is(body.status, 'hash_mismatch');
  assert.equal(
    body.refused.map((x: any) => x.name),
    ['npm/swapped'],
  );
  assert.is(size(gwChain), before);
  const bad = await fetch(`${gw.url}/v1/submit`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: reg.url('/c/fine-1.0.0.tgz'), name: 'npm/fine', semver: '1.0.0', license: 'MIT', expect: 'md5:abc' }),
  });
  assert.is(bad.status, 400);
  assert.match(((await bad.json()) as any).message, /^expect must be /);
});

test('a lockfile with nothing to endorse (npm without resolved): exit 2 naming omit-lockfile-registry-resolved, offline and through the gateway', async () => {
  const lock = {
    lockfileVersion: 3,
    packages: {
      '': { name: 'noresolved', version: '1.0.0' },
      'node_modules/a': { version: '1.0.0', integrity: sri('sha512', 'a'), license: 'MIT' },
      'node_modules/b': { version: '1.0.0', integrity: sri('sha512', 'b'), license: 'MIT' },
      'node_modules/c': { version: '1.0.0', integrity: sri('sha512', 'c'), license: 'MIT' },
    },
  };
  const file = write('noresolved/package-lock.json', JSON.stringify(lock));
  const offBefore = size(offChain);
  const gwBefore = size(gwChain);
  for (const r of [await offline(['--lockfile', file]), await through(['--lockfile', file])]) {
    assert.is(r.status, 2, r.stderr + r.stdout);
    assert.is(r.stdout, '');
    assert.is(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, 'nothing to endorse in package-lock.json: every entry was skipped: 3 skipped (3 no resolved)');
    assert.match(r.stderr, 'omit-lockfile-registry-resolved');
  }
  assert.is(size(offChain), offBefore);
  assert.is(size(gwChain), gwBefore);
});

// ------------------------------------------------------------------ the wire

test('POST /v1/submit: NDJSON progress lines when asked (one per entry, then the result), plain JSON otherwise', async () => {
  const bytes = [0, 1, 2].map((i) => Buffer.from(`ndjson ${i}`));
  bytes.forEach((b, i) => reg.route(`/j/${i}.tgz`, { body: b }));
  const body = (tag: string) =>
    JSON.stringify({
      uns: `acme/${tag}`,
      semver: '1.0.0',
      endorsements: bytes.map((b, i) => ({
        url: reg.url(`/j/${tag}-${i}.tgz`),
        name: `acme/${tag}`,
        semver: '1.0.0',
        license: 'MIT',
        expect: `sha256:${hex('sha256', b)}`,
      })),
    });
  for (const tag of ['nd', 'plain']) bytes.forEach((b, i) => reg.route(`/j/${tag}-${i}.tgz`, { body: b }));
  const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  const nd = await fetch(`${gw.url}/v1/submit`, { method: 'POST', headers: { ...headers, accept: 'application/x-ndjson' }, body: body('nd') });
  assert.is(nd.status, 200);
  assert.is(nd.headers.get('content-type'), 'application/x-ndjson');
  const lines = (await nd.text())
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.is(lines.length, 4, JSON.stringify(lines));
  assert.equal(
    lines.slice(0, 3).map((l) => l.progress.done),
    [1, 2, 3],
  );
  assert.ok(lines.slice(0, 3).every((l) => l.progress.total === 3));
  const last = lines[3];
  assert.is(last.http_status, 201);
  assert.is(last.status, 'posted');
  assert.is(block(gwChain, last.index).record_hash, last.record_hash);

  const plain = await fetch(`${gw.url}/v1/submit`, { method: 'POST', headers, body: body('plain') });
  assert.is(plain.status, 201);
  assert.match(plain.headers.get('content-type')!, /^application\/json/);
  const p = (await plain.json()) as any;
  assert.equal(Object.keys(p).sort(), ['index', 'record_hash', 'status', 'success', 'url', 'urls']);
});

test('two clients at once: both lockfiles land, each block whole', async () => {
  const lockOf = (tag: string) => {
    const packages: Record<string, unknown> = { '': { name: `conc-${tag}`, version: '1.0.0' } };
    for (let i = 0; i < 6; i++)
      packages[`node_modules/${tag}${i}`] = { version: '1.0.0', license: 'MIT', ...tarball(`/q/${tag}${i}.tgz`, Buffer.from(`${tag} ${i}`)) };
    return write(`conc-${tag}/package-lock.json`, JSON.stringify({ lockfileVersion: 3, packages }));
  };
  const before = size(gwChain);
  const [a, b] = await Promise.all([through(['--lockfile', lockOf('x')]), through(['--lockfile', lockOf('y')])]);
  assert.is(a.status, 0, a.stderr);
  assert.is(b.status, 0, b.stderr);
  const landed = blocksFrom(gwChain, before);
  assert.is(landed.length, 2);
  const byUns = Object.fromEntries(
    landed.map((bl) => [
      bl.payload.uns,
      entries(bl)
        .map((e: any) => e.url)
        .sort(),
    ]),
  );
  for (const tag of ['x', 'y']) assert.equal(byUns[`npm/conc-${tag}`], [0, 1, 2, 3, 4, 5].map((i) => reg.url(`/q/${tag}${i}.tgz`)).sort());
  await verify(gwChain);
});

test('a client killed mid-submit: the authority finishes the block and commits it whole; the chain verifies', async () => {
  const packages: Record<string, unknown> = { '': { name: 'killed', version: '1.0.0' } };
  for (let i = 0; i < 4; i++) {
    const bytes = Buffer.from(`killed ${i} `.repeat(64));
    packages[`node_modules/k${i}`] = { version: '1.0.0', license: 'MIT', resolved: reg.url(`/k/k${i}.tgz`), integrity: sri('sha512', bytes) };
    // One slow artifact keeps the authority busy while the client is killed.
    reg.route(`/k/k${i}.tgz`, i === 3 ? { body: bytes, trickle: { bytes: 64, everyMs: 100 } } : { body: bytes });
  }
  const file = write('killed/package-lock.json', JSON.stringify({ lockfileVersion: 3, packages }));
  const before = size(gwChain);
  const child = spawn(process.execPath, [join(repoRoot, 'tools', 'vouch.js'), 'endorse', '--gateway', gw.url, '--token-file', tokenFile, '--lockfile', file], {
    stdio: 'ignore',
  });
  const exited = new Promise((r) => child.on('exit', r));
  await until('the authority fetching the slow artifact', async () => reg.requests('/k/k3.tgz') > 0, 30_000);
  assert.is(size(gwChain), before, 'committed before the slow artifact was hashed');
  child.kill('SIGKILL');
  await exited;
  await until('the block committed after the client went away', async () => size(gwChain) > before, 30_000);
  // Still whole a moment later: exactly one block, with every entry.
  await new Promise((r) => setTimeout(r, 500));
  assert.is(size(gwChain), before + 1);
  assert.equal(
    entries(block(gwChain, before))
      .map((e: any) => e.url)
      .sort(),
    [0, 1, 2, 3].map((i) => reg.url(`/k/k${i}.tgz`)).sort(),
  );
  await verify(gwChain);
  // Run again: the client learns it is all there.
  const again = await through(['--lockfile', file, '--json']);
  assert.is(again.status, 0, again.stderr);
  assert.is(JSON.parse(again.stdout).unchanged, 4);
});

test('on a terminal: a progress bar on stderr while the authority works, no per-block lines', async () => {
  const packages: Record<string, unknown> = { '': { name: 'tty-app', version: '1.0.0' } };
  for (let i = 0; i < 3; i++) packages[`node_modules/t${i}`] = { version: '1.0.0', license: 'MIT', ...tarball(`/tty/t${i}.tgz`, Buffer.from(`tty ${i}`)) };
  const file = write('tty/package-lock.json', JSON.stringify({ lockfileVersion: 3, packages }));
  const quote = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
  const cmd = [process.execPath, join(repoRoot, 'tools', 'vouch.js'), 'endorse', '--gateway', gw.url, '--token-file', tokenFile, '--lockfile', file]
    .map(quote)
    .join(' ');
  // script(1) gives the command a pseudo-terminal; what it wrote comes back on stdout.
  const r = await new Promise<{ status: number | null; out: string }>((resolve) => {
    const child = spawn('script', ['-qec', cmd, '/dev/null'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    child.on('close', (status) => resolve({ status, out }));
  });
  assert.is(r.status, 0, r.out);
  assert.match(r.out, /\rauthority hashing \[#+\.*\] 3\/3 /);
  assert.not.match(r.out, /block 1 of 1/);
  assert.match(r.out, /posted 3 entries in 1 block/);
});

test("offline endorse on the running authority's chain points at --gateway", async () => {
  const r = await vouchAsync([
    'endorse',
    '--chain',
    gwChain,
    '--key',
    key,
    '--url',
    reg.url('/u/a.tgz'),
    '--name',
    'acme/a',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
  ]);
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr, 'vouch endorse --gateway URL --token-file FILE');
});

test('both chains verify', async () => {
  await verify(gwChain);
  await verify(offChain);
});

test.run();
