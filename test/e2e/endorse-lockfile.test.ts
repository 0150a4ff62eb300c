/**
 * `vouch endorse --lockfile` end to end: the real CLI, a real chain, and
 * real HTTP origins on 127.0.0.1 standing in for an npm registry, a PyPI
 * simple index with a separate files host, and a GOPROXY. Expected hashes
 * are computed here independently (npm's SRI from the bytes, Go's h1 by
 * python3's hashlib and, when a Go toolchain is installed, by `go mod
 * download` itself); every run ends with `vouch verify`.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { git, vouchAsync, type Run, initAuthorityChain, vouchEndorse } from '../helpers/processes.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { hex, lockTarball, sri, writerIn } from '../helpers/lockfiles.ts';
import { licenseProblem } from '../../tools/lockfiles/licenses.ts';
import { readRequirements, resolveRequirements } from '../../tools/lockfiles/pip.ts';
import { Http, OriginMap } from '../../tools/lockfiles/http.ts';
import { endorseLockfile } from '../../tools/commands/endorse-lockfile.ts';
import { VouchError } from '../../chain/errors.ts';
import { chainFile } from '../helpers/chain-files.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-lockfile-'));
const key = join(work, 'authority.pem');
const chain = join(work, 'chain');
let reg: OriginServer; // npm registry, PyPI index, GOPROXY
let files: OriginServer; // the PyPI files host

const write = writerIn(work);
const head = () => git(['-C', chain, 'rev-parse', 'HEAD']).stdout.trim();
const size = () => JSON.parse(readFileSync(join(chain, 'checkpoint.json'), 'utf8')).size as number;
const blockFile = (i: number) => {
  const d = String(i).padStart(9, '0');
  return chainFile(chain, `blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`);
};
const block = (i: number) => JSON.parse(blockFile(i));
const oneLine = (r: Run) => {
  assert.is(r.stderr.trim().split('\n').length, 1, `expected one stderr line, got: ${r.stderr}`);
  assert.not.match(r.stderr, /\n\s+at /, 'stack trace on stderr');
};
const endorse = (args: string[], env: Record<string, string> = {}) => vouchEndorse(chain, key, args, env);
const verify = async () => {
  const r = await vouchAsync(['verify', '--chain', chain, '--json']);
  assert.is(r.status, 0, r.stderr + r.stdout);
  return JSON.parse(r.stdout);
};

/** A package-lock v3 `packages` map entry for a tarball served at `path` on the registry origin. */
const tarball = (path: string, bytes: Buffer, extra: Record<string, unknown> = {}) => lockTarball(reg, path, bytes, extra);

test.before(async () => {
  reg = await OriginServer.start();
  files = await OriginServer.start();
  await initAuthorityChain({ key, chain: chain, signer: 'lock-authority' });
});

test.after(async () => {
  await reg.close();
  await files.close();
  rmSync(work, { recursive: true, force: true });
});

// ------------------------------------------------------------------ npm

const leftpad = Buffer.from('leftpad 1.0.0 tarball bytes\n');
const util = Buffer.from('@scope/util 2.1.0 tarball bytes\n');
const nolic = Buffer.from('no-licence 0.3.0-beta.1 bytes\n');

test("npm lockfile v3: scoped and unscoped packages -> one block with the lockfile's sha512; links, workspaces, bundled, git deps skipped; verify passes", async () => {
  const lock = {
    name: 'my-app',
    version: '1.2.3',
    lockfileVersion: 3,
    requires: true,
    packages: {
      '': { name: 'my-app', version: '1.2.3', workspaces: ['packages/*'] },
      'node_modules/leftpad': { version: '1.0.0', license: 'MIT', ...tarball('/leftpad/-/leftpad-1.0.0.tgz', leftpad) },
      'node_modules/@scope/util': { version: '2.1.0', license: 'MIT OR Apache-2.0', ...tarball('/@scope/util/-/util-2.1.0.tgz', util) },
      'node_modules/@scope/util/node_modules/leftpad': {
        version: '1.0.0',
        license: 'MIT',
        resolved: reg.url('/leftpad/-/leftpad-1.0.0.tgz'),
        integrity: sri('sha512', leftpad),
      },
      'node_modules/no-licence': { version: '0.3.0-beta.1', dev: true, ...tarball('/no-licence/-/no-licence-0.3.0-beta.1.tgz', nolic) },
      'node_modules/inner': { version: '1.0.0', inBundle: true, resolved: reg.url('/inner.tgz'), integrity: sri('sha512', 'x') },
      'node_modules/my-lib': { resolved: 'packages/my-lib', link: true },
      'packages/my-lib': { name: 'my-lib', version: '0.0.1' },
      'node_modules/from-git': { version: '1.0.0', resolved: 'git+ssh://git@example.invalid/x.git#abc', integrity: sri('sha512', 'y') },
    },
  };
  const before = size();
  const r = await endorse(['--lockfile', write('package-lock.json', JSON.stringify(lock)), '--license', 'ISC', '--json']);
  assert.is(r.status, 0, r.stderr + r.stdout);
  assert.is(r.stderr, '', 'nothing on stderr on a pipe (no progress bar)');
  const out = JSON.parse(r.stdout);
  assert.is(out.status, 'posted');
  assert.is(out.entries, 3);
  assert.is(out.blocks.length, 1);
  assert.equal(out.skipped_by_reason, { bundled: 1, link: 1, workspace: 1, 'not http(s)': 1 });
  assert.is(reg.requests('/inner.tgz'), 0, 'a bundled package was fetched');
  assert.is(size(), before + 1);
  const b = block(before);
  assert.is(b.payload.uns, 'npm/my-app');
  assert.is(b.payload.semver, '1.2.3');
  const byName = Object.fromEntries(b.payload.endorsements.map((e: any) => [e.name, e]));
  assert.equal(Object.keys(byName).sort(), ['@scope/util', 'npm/leftpad', 'npm/no-licence']);
  assert.is(byName['npm/leftpad'].artifact_url, reg.url('/leftpad/-/leftpad-1.0.0.tgz'));
  assert.is(byName['npm/leftpad'].artifact_hash, `sha512:${hex('sha512', leftpad)}`);
  assert.is(
    Buffer.from(byName['npm/leftpad'].artifact_hash.slice(7), 'hex').toString('base64'),
    sri('sha512', leftpad).slice(7),
    'the signed hash is the lockfile integrity',
  );
  assert.is(byName['npm/leftpad'].semver, '1.0.0');
  assert.is(byName['npm/leftpad'].license, 'MIT');
  assert.is(byName['@scope/util'].semver, '2.1.0');
  assert.is(byName['@scope/util'].license, 'MIT OR Apache-2.0');
  assert.is(byName['npm/no-licence'].license, 'ISC', '--license is the default licence');
  assert.is(byName['npm/no-licence'].semver, '0.3.0-beta.1');
  assert.is(reg.requests('/leftpad/-/leftpad-1.0.0.tgz'), 1, 'the same tarball at two paths is fetched once');
  assert.is(git(['-C', chain, 'status', '--porcelain']).stdout, '');
  assert.is((await verify()).blocks, before + 1);
});

test('npm: running again posts nothing (unchanged); same bytes endorsed before with sha256 are unchanged too, not a conflict', async () => {
  const before = head();
  const r = await endorse(['--lockfile', join(work, 'package-lock.json'), '--license', 'ISC']);
  assert.is(r.status, 0, r.stderr);
  assert.is(r.stdout, 'posted 0 entries in 0 blocks; 3 unchanged, 4 skipped (1 bundled, 1 link, 1 workspace, 1 not http(s))\n');
  assert.is(head(), before);

  const bytes = Buffer.from('pre-endorsed with sha256\n');
  const url = reg.url('/pre/-/pre-1.0.0.tgz');
  reg.route('/pre/-/pre-1.0.0.tgz', { body: bytes });
  const single = await endorse(['--url', url, '--file', write('pre.tgz', bytes), '--name', 'npm/pre', '--semver', '1.0.0', '--license', 'MIT']);
  assert.is(single.status, 0, single.stderr);
  const lock = {
    lockfileVersion: 3,
    packages: { '': {}, 'node_modules/pre': { version: '1.0.0', license: 'MIT', resolved: url, integrity: sri('sha512', bytes) } },
  };
  const after = head();
  const r2 = await endorse(['--lockfile', write('pre/package-lock.json', JSON.stringify(lock)), '--json']);
  assert.is(r2.status, 0, r2.stderr + r2.stdout);
  assert.is(JSON.parse(r2.stdout).unchanged, 1);
  assert.is(head(), after);
});

test('npm: a tampered tarball fails naming the package, exit 1, nothing appended', async () => {
  const good = Buffer.from('tampered 1.0.0 good bytes');
  const lock = {
    lockfileVersion: 3,
    packages: {
      '': { name: 'x', version: '1.0.0' },
      'node_modules/fine': { version: '1.0.0', license: 'MIT', ...tarball('/fine/-/fine-1.0.0.tgz', Buffer.from('fine')) },
      'node_modules/tampered': { version: '1.0.0', license: 'MIT', ...tarball('/tampered/-/tampered-1.0.0.tgz', good) },
    },
  };
  reg.route('/tampered/-/tampered-1.0.0.tgz', { body: good, tamper: true });
  const before = head();
  const r = await endorse(['--lockfile', write('tampered/package-lock.json', JSON.stringify(lock))]);
  assert.is(r.status, 1, r.stderr);
  oneLine(r);
  assert.match(r.stderr, `integrity mismatch: tampered@1.0.0 (${reg.url('/tampered/-/tampered-1.0.0.tgz')}): lockfile ${sri('sha512', good)}, fetched sha512-`);
  assert.is(head(), before, 'a mismatch changed the chain');
});

test('npm: the same URL and semver signed with other bytes is semver_conflict naming the package, exit 1', async () => {
  const url = reg.url('/clash/-/clash-1.0.0.tgz');
  const signed = await endorse([
    '--url',
    url,
    '--file',
    write('clash-old.tgz', 'the bytes signed first'),
    '--name',
    'npm/clash',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
  ]);
  assert.is(signed.status, 0, signed.stderr);
  const lock = {
    lockfileVersion: 2,
    packages: { '': {}, 'node_modules/clash': { version: '1.0.0', license: 'MIT', ...tarball('/clash/-/clash-1.0.0.tgz', Buffer.from('other bytes')) } },
    dependencies: {},
  };
  const before = head();
  const r = await endorse(['--lockfile', write('clash/package-lock.json', JSON.stringify(lock))]);
  assert.is(r.status, 1, r.stderr);
  oneLine(r);
  assert.match(r.stderr, /semver_conflict|clash@1\.0\.0/);
  assert.match(r.stderr, `clash@1.0.0: ${url} 1.0.0 is already signed in block`);
  assert.is(head(), before);
});

test('npm lockfile v1: nested, scoped and aliased dependencies; sha1-only integrity is checked with sha1 and endorsed with sha256', async () => {
  const a = Buffer.from('v1 a 1.0.0');
  const b = Buffer.from('v1 @s/b 3.0.0');
  const c = Buffer.from('v1 c 0.1.0 (old sha1 lockfile)');
  const real = Buffer.from('v1 real-name 2.0.0 via an alias');
  reg
    .route('/v1/a-1.0.0.tgz', { body: a })
    .route('/v1/b-3.0.0.tgz', { body: b })
    .route('/v1/c-0.1.0.tgz', { body: c })
    .route('/v1/real-2.0.0.tgz', { body: real });
  const lock = {
    name: '@acme/legacy',
    version: '4.0.0',
    lockfileVersion: 1,
    requires: true,
    dependencies: {
      a: {
        version: '1.0.0',
        resolved: reg.url('/v1/a-1.0.0.tgz'),
        integrity: `${sri('sha512', a)} ${sri('sha1', a)}`,
        dependencies: { '@s/b': { version: '3.0.0', resolved: reg.url('/v1/b-3.0.0.tgz'), integrity: sri('sha512', b) } },
      },
      c: { version: '0.1.0', resolved: reg.url('/v1/c-0.1.0.tgz'), integrity: sri('sha1', c) },
      alias: { version: 'npm:real-name@2.0.0', resolved: reg.url('/v1/real-2.0.0.tgz'), integrity: sri('sha512', real) },
      bundled: { version: '1.0.0', bundled: true },
      local: { version: 'file:../local' },
    },
  };
  const before = size();
  const r = await endorse(['--lockfile', write('v1/npm-shrinkwrap.json', JSON.stringify(lock)), '--license', 'MIT', '--json']);
  assert.is(r.status, 0, r.stderr + r.stdout);
  const out = JSON.parse(r.stdout);
  assert.is(out.entries, 4);
  assert.equal(out.skipped_by_reason, { bundled: 1, link: 1 });
  const blk = block(before);
  assert.is(blk.payload.uns, '@acme/legacy');
  assert.is(blk.payload.semver, '4.0.0');
  const byName = Object.fromEntries(blk.payload.endorsements.map((e: any) => [e.name, e]));
  assert.is(byName['npm/a'].artifact_hash, `sha512:${hex('sha512', a)}`);
  assert.is(byName['@s/b'].artifact_hash, `sha512:${hex('sha512', b)}`);
  assert.is(byName['npm/c'].artifact_hash, `sha256:${hex('sha256', c)}`);
  assert.is(byName['npm/real-name'].semver, '2.0.0');
});

test('npm --origin: a lockfile naming https://registry.example/ is fetched from the mirror, endorsing the canonical URL', async () => {
  const bytes = Buffer.from('mirrored 5.0.0');
  reg.route('/mirror/npm/mirrored/-/mirrored-5.0.0.tgz', { body: bytes });
  const canonical = 'https://registry.example/mirrored/-/mirrored-5.0.0.tgz';
  const lock = {
    lockfileVersion: 3,
    packages: { '': {}, 'node_modules/mirrored': { version: '5.0.0', license: 'MIT', resolved: canonical, integrity: sri('sha512', bytes) } },
  };
  reg.resetCounters();
  const before = size();
  const r = await endorse([
    '--lockfile',
    write('mirror/package-lock.json', JSON.stringify(lock)),
    '--origin',
    `https://registry.example=${reg.url('/mirror/npm')}`,
  ]);
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /^posted 1 entries in 1 block \(index \d+\); 0 unchanged, 0 skipped\n$/);
  assert.equal(
    reg.log.map((x) => x.path),
    ['/mirror/npm/mirrored/-/mirrored-5.0.0.tgz'],
    'only the mirror was asked',
  );
  assert.is(reg.log[0]!.headers.host, `127.0.0.1:${reg.port}`);
  const e = block(before).payload.endorsements[0];
  assert.is(e.artifact_url, canonical);
  assert.is(e.artifact_hash, `sha512:${hex('sha512', bytes)}`);
});

test('blocks are split at the entry limit and at the byte limit, appended in one commit, and verify', async () => {
  const packages: Record<string, unknown> = { '': { name: 'many', version: '1.0.0' } };
  for (let i = 0; i < 7; i++) {
    packages[`node_modules/many-${i}`] = { version: '1.0.0', license: 'MIT', ...tarball(`/many/many-${i}-1.0.0.tgz`, Buffer.from(`many ${i}`)) };
  }
  const commits = Number(git(['-C', chain, 'rev-list', '--count', 'HEAD']).stdout);
  const before = size();
  let r = await endorse(['--lockfile', write('many/package-lock.json', JSON.stringify({ lockfileVersion: 3, packages }))], {
    VOUCH_LOCKFILE_BLOCK_ENTRIES: '3',
  });
  assert.is(r.status, 0, r.stderr);
  assert.is(r.stdout, `posted 7 entries in 3 blocks (indexes ${before}..${before + 2}, each within the 4096-byte UNS header bound); 0 unchanged, 0 skipped\n`);
  assert.equal(
    [0, 1, 2].map((k) => block(before + k).payload.endorsements.length),
    [3, 3, 1],
  );
  assert.is(block(before + 1).prev_hash, block(before).record_hash);
  assert.match(block(before).comment, /part 1 of 3/);
  assert.is(Number(git(['-C', chain, 'rev-list', '--count', 'HEAD']).stdout), commits + 1, 'one commit for all blocks');
  assert.is(size(), before + 3);

  for (let i = 0; i < 9; i++) {
    packages[`node_modules/big-${i}`] = { version: '2.0.0', license: 'MIT', ...tarball(`/big/${'x'.repeat(900)}/big-${i}.tgz`, Buffer.from(`big ${i}`)) };
  }
  const mid = size();
  r = await endorse(['--lockfile', write('many/package-lock.json', JSON.stringify({ lockfileVersion: 3, packages })), '--json'], {
    VOUCH_LOCKFILE_BLOCK_BYTES: '6000',
  });
  assert.is(r.status, 0, r.stderr + r.stdout);
  const out = JSON.parse(r.stdout);
  assert.is(out.entries, 9);
  assert.is(out.unchanged, 7);
  assert.ok(out.blocks.length >= 3, `${out.blocks.length} blocks`);
  for (let k = 0; k < out.blocks.length; k++) {
    assert.ok(Buffer.byteLength(blockFile(mid + k)) <= 6000, `block ${mid + k} over the byte limit`);
  }
  assert.is(
    out.blocks.reduce((a: number, b: any) => a + b.entries, 0),
    9,
  );
  await verify();
});

test('licences: SPDX expressions pass, others are refused naming the package unless --license-unchecked', async () => {
  const bytes = Buffer.from('see-licence 1.0.0');
  const lock = {
    lockfileVersion: 3,
    packages: { '': {}, 'node_modules/odd': { version: '1.0.0', license: 'SEE LICENSE IN LICENSE.md', ...tarball('/odd/-/odd-1.0.0.tgz', bytes) } },
  };
  const p = write('odd/package-lock.json', JSON.stringify(lock));
  const before = head();
  let r = await endorse(['--lockfile', p]);
  assert.is(r.status, 2);
  oneLine(r);
  assert.match(r.stderr, 'odd@1.0.0: licence "SEE LICENSE IN LICENSE.md": it is not an SPDX license expression');
  assert.is(reg.requests('/odd/-/odd-1.0.0.tgz'), 0, 'fetched before the licences were checked');
  r = await endorse(['--lockfile', p, '--license-unchecked']);
  assert.is(r.status, 0, r.stderr);
  assert.is(block(size() - 1).payload.endorsements[0].license, 'SEE LICENSE IN LICENSE.md');

  // The single-URL mode checks --license too.
  const single = (license: string, ...extra: string[]) =>
    endorse([
      '--url',
      'https://cdn.example/lic.js',
      '--file',
      write('lic.js', license),
      '--name',
      'acme/lic',
      '--semver',
      `1.0.${license.length}`,
      '--license',
      license,
      ...extra,
    ]);
  const mid = head();
  r = await single('Nonsense-1');
  assert.is(r.status, 2);
  oneLine(r);
  assert.match(r.stderr, '--license "Nonsense-1": it is not an SPDX license expression');
  assert.is(head(), mid);
  r = await single('Nonsense-1', '--license-unchecked');
  assert.is(r.status, 0, r.stderr);
  assert.ok(before !== head());
});

test("the licence rule: SPDX expressions and LicenseRef pass; other text only with --license-unchecked, and never beyond the chain's form", () => {
  for (const ok of [
    'MIT',
    'MIT OR Apache-2.0',
    '(MIT AND BSD-3-Clause)',
    '((ISC))',
    'GPL-2.0-only WITH Classpath-exception-2.0',
    'LicenseRef-acme-eula',
    'Apache-2.0+',
  ]) {
    assert.is(licenseProblem(ok, false), null, ok);
  }
  for (const no of ['Nonsense-1', 'UNLICENSED', 'SEE LICENSE IN LICENSE.md', 'mit', 'MIT OR']) {
    assert.match(licenseProblem(no, false) ?? '', /not an SPDX license expression/, no);
    assert.is(licenseProblem(no, true), null, `${no} with --license-unchecked`);
  }
  for (const never of ['no/slashes', '', 'x'.repeat(129), 'MIT\nX', '(MIT) AND (ISC)']) {
    assert.match(licenseProblem(never, true) ?? '', /not a licence id the chain accepts/, JSON.stringify(never));
  }
});

test('single-URL mode keeps its required options and messages; lockfile-mode options are refused where they do not apply', async () => {
  const r = await endorse(['--name', 'a/b', '--semver', '1.0.0', '--license', 'MIT']);
  assert.is(r.status, 2);
  assert.is(r.stderr, 'vouch endorse: missing --url (see vouch endorse --help)\n');
  // Checked before anything is read: in process.
  for (const [extra, want] of [
    [{ algorithm: 'sha256' }, /--algorithm does not apply with --lockfile/],
    [{ url: ['https://x.example/y'] }, /--url does not apply with --lockfile/],
    [{ 'index-url': 'https://pypi.example/simple/' }, /--index-url applies to pip requirements files only/],
    [{ origin: ['https://a.example/'] }, /--origin must be CANONICAL=FETCH/],
    [{ 'lockfile-type': 'cargo' }, /--lockfile-type must be npm, pip, go or maven/],
    [{ 'lockfile-type': 'pip', 'index-url': 'https://user:secret@pypi.example/simple/' }, /--index-url may not carry a user name or password/],
  ] as const) {
    await endorseLockfile({ chain, key, lockfile: join(work, 'package-lock.json'), ...extra }).then(
      () => assert.unreachable(JSON.stringify(extra)),
      (e) => {
        assert.instance(e, VouchError);
        assert.match(e.message, want);
      },
    );
  }
  const secret = {
    lockfileVersion: 3,
    packages: { 'node_modules/x': { version: '1.0.0', license: 'MIT', resolved: 'https://u:token@registry.example/x.tgz', integrity: sri('sha512', 'x') } },
  };
  await endorseLockfile({ chain, key, lockfile: write('secret/package-lock.json', JSON.stringify(secret)) }).then(
    () => assert.unreachable('a URL with credentials was accepted'),
    (e) => assert.match(e.message, /x@1\.0\.0: the resolved URL carries a user name or password/),
  );
  await endorseLockfile({ chain, key, lockfile: join(work, 'Cargo.lock') }).then(
    () => assert.unreachable(),
    (e) => assert.match(e.message, /cannot tell the lockfile type of "Cargo.lock"/),
  );
});

// ------------------------------------------------------------------ PyPI

const whl = Buffer.from('requests 2.31.0 wheel bytes');
const sdist = Buffer.from('requests 2.31.0 sdist bytes (not pinned)');
const zopeWhl = Buffer.from('zope.interface 6.0 wheel');
const zopeSdist = Buffer.from('zope.interface 6.0 sdist');
const old = Buffer.from('requests 2.30.0 wheel');

function requirements(extraHashes = '') {
  return [
    '# pinned with pip-compile --generate-hashes',
    '--index-url https://pypi.org/simple/',
    '--require-hashes',
    `Requests==2.31 ; python_version >= "3.7" --hash=sha256:${hex('sha256', whl)}${extraHashes}`,
    'zope.interface==6.0 \\',
    `    --hash=sha256:${hex('sha256', zopeWhl)} \\`,
    `    --hash=sha256:${hex('sha256', zopeSdist)}   # both files`,
    '',
  ].join('\n');
}

function pypiFiles(prefix: string) {
  files
    .route(`${prefix}/requests-2.31.0-py3-none-any.whl`, { body: whl })
    .route(`${prefix}/requests-2.31.0.tar.gz`, { body: sdist })
    .route(`${prefix}/requests-2.30.0-py3-none-any.whl`, { body: old });
  reg.route(`${prefix}/zope.interface-6.0.tar.gz`, { body: zopeSdist });
  files.route(`${prefix}/zope.interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl`, { body: zopeWhl });
}

test('pip: requirements.txt against an HTML simple index with absolute links to a files host (and a relative one)', async () => {
  pypiFiles('/h');
  const f = (p: string) => files.url(`/h/${p}`);
  reg.route('/simple-html/requests/', {
    contentType: 'text/html',
    body: `<!DOCTYPE html><html><body><h1>Links for requests</h1>
      <a href="${f('requests-2.30.0-py3-none-any.whl')}#sha256=${hex('sha256', old)}">requests-2.30.0-py3-none-any.whl</a><br/>
      <a href="${f('requests-2.31.0-py3-none-any.whl')}#sha256=${hex('sha256', whl)}" data-requires-python="&gt;=3.7">requests-2.31.0-py3-none-any.whl</a><br/>
      <a href="${f('requests-2.31.0.tar.gz')}#sha256=${hex('sha256', sdist)}">requests-2.31.0.tar.gz</a>
    </body></html>`,
  });
  reg.route('/simple-html/zope-interface/', {
    contentType: 'text/html; charset=utf-8',
    body: `<html><body>
      <a href="../../h/zope.interface-6.0.tar.gz#sha256=${hex('sha256', zopeSdist)}">zope.interface-6.0.tar.gz</a>
      <a href="${f('zope.interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl')}">zope.interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl</a>
    </body></html>`,
  });
  // A local version: pip requests the file with its path re-quoted (+ -> %2B), and that is the URL endorsed.
  const torch = Buffer.from('torch 2.0.0+cpu wheel');
  files.route('/h/torch-2.0.0%2Bcpu-cp311-cp311-linux_x86_64.whl', { body: torch });
  reg.route('/simple-html/torch/', {
    contentType: 'text/html',
    body: `<a href="${f('torch-2.0.0+cpu-cp311-cp311-linux_x86_64.whl')}#sha256=${hex('sha256', torch)}">torch-2.0.0+cpu-cp311-cp311-linux_x86_64.whl</a>`,
  });
  const req = requirements() + `torch==2.0.0+cpu --hash=sha256:${hex('sha256', torch)}\n`;
  const before = size();
  const r = await endorse(['--lockfile', write('py/requirements.txt', req), '--index-url', reg.url('/simple-html/'), '--license', 'Apache-2.0', '--json']);
  assert.is(r.status, 0, r.stderr + r.stdout);
  const out = JSON.parse(r.stdout);
  assert.is(out.entries, 4);
  assert.equal(out.notes, ['requirements.txt line 2: --index-url ignored (pass --index-url to vouch)']);
  assert.ok(reg.records('/simple-html/requests/')[0]!.headers.accept!.startsWith('application/vnd.pypi.simple.v1+json'), 'PEP 691 Accept header');
  assert.is(files.requests('/h/requests-2.31.0.tar.gz'), 0, 'an unpinned file was fetched');
  assert.is(files.requests('/h/requests-2.30.0-py3-none-any.whl'), 0, 'another version was fetched');
  const blk = block(before);
  assert.is(blk.payload.uns, 'lockfile/py');
  assert.is(blk.payload.semver, '0.0.0');
  const byUrl = Object.fromEntries(blk.payload.endorsements.map((e: any) => [e.artifact_url, e]));
  const w = byUrl[f('requests-2.31.0-py3-none-any.whl')];
  assert.ok(w, `endorsed: ${Object.keys(byUrl).join(' ')}`);
  assert.is(w.name, 'pypi/requests');
  assert.is(w.semver, '2.31.0');
  assert.is(w.artifact_hash, `sha256:${hex('sha256', whl)}`);
  assert.is(w.license, 'Apache-2.0');
  const zs = byUrl[reg.url('/h/zope.interface-6.0.tar.gz')];
  assert.ok(zs, 'the relative link resolves against the index page');
  assert.is(zs.name, 'pypi/zope-interface');
  assert.is(zs.semver, '6.0.0');
  assert.ok(byUrl[f('zope.interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl')], 'a link without a hash is fetched and kept when its bytes are pinned');
  const t = byUrl[f('torch-2.0.0%2Bcpu-cp311-cp311-linux_x86_64.whl')];
  assert.ok(t, `endorsed: ${Object.keys(byUrl).join(' ')}`);
  assert.is(t.name, 'pypi/torch');
  assert.is(t.semver, '2.0.0+local.cpu');
});

test('pip: the same against a PEP 691 JSON index; a tampered file and a package without a pinned file fail naming them', async () => {
  pypiFiles('/j');
  const f = (p: string) => files.url(`/j/${p}`);
  const json = (name: string, list: { filename: string; url: string; sha256?: string }[]) => ({
    contentType: 'application/vnd.pypi.simple.v1+json',
    body: JSON.stringify({
      meta: { 'api-version': '1.0' },
      name,
      files: list.map((x) => ({ filename: x.filename, url: x.url, hashes: x.sha256 ? { sha256: x.sha256 } : {} })),
    }),
  });
  reg.route(
    '/simple-json/requests/',
    json('requests', [
      { filename: 'requests-2.31.0-py3-none-any.whl', url: f('requests-2.31.0-py3-none-any.whl'), sha256: hex('sha256', whl) },
      { filename: 'requests-2.31.0.tar.gz', url: f('requests-2.31.0.tar.gz'), sha256: hex('sha256', sdist) },
    ]),
  );
  reg.route(
    '/simple-json/zope-interface/',
    json('zope.interface', [
      { filename: 'zope.interface-6.0.tar.gz', url: '/j/zope.interface-6.0.tar.gz', sha256: hex('sha256', zopeSdist) },
      {
        filename: 'zope.interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl',
        url: f('zope.interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl'),
        sha256: hex('sha256', zopeWhl),
      },
    ]),
  );
  const req = write('pyjson/requirements.txt', requirements());
  const before = size();
  let r = await endorse(['--lockfile', req, '--index-url', reg.url('/simple-json'), '--license', 'MIT', '--quiet']);
  assert.is(r.status, 0, r.stderr);
  assert.is(r.stdout, '');
  const urls = block(before)
    .payload.endorsements.map((e: any) => e.artifact_url)
    .sort();
  assert.equal(
    urls,
    [f('requests-2.31.0-py3-none-any.whl'), f('zope.interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl'), reg.url('/j/zope.interface-6.0.tar.gz')].sort(),
  );

  // Tampered bytes behind a pinned, advertised hash.
  files.route('/j/requests-2.31.0-py3-none-any.whl', { body: whl, tamper: true });
  const h = head();
  r = await endorse([
    '--lockfile',
    write('pyjson2/requirements.txt', requirements().replace('==2.31', '==2.31.0')),
    '--index-url',
    reg.url('/simple-json/'),
    '--license',
    'MIT',
  ]);
  assert.is(r.status, 1, r.stderr);
  oneLine(r);
  assert.match(
    r.stderr,
    `hash mismatch: Requests==2.31.0 (requests-2.31.0-py3-none-any.whl) (${f('requests-2.31.0-py3-none-any.whl')}): requirements sha256:${hex('sha256', whl)}, fetched sha256:`,
  );
  assert.is(head(), h);

  assert.is(head(), h);

  // A pin matching no file at the index, and a version the index does not have (in process).
  const opts = { license: 'MIT', licenseUnchecked: false, comment: undefined };
  const http = new Http(OriginMap.parse([]));
  try {
    for (const [text, code, want] of [
      [`requests==2.31 --hash=sha256:${'ab'.repeat(32)}\n`, 'hash_mismatch', 'requests==2.31: none of the 2 files of version 2.31 at'],
      [`requests==9.9 --hash=sha256:${'ab'.repeat(32)}\n`, 'not_found', 'requests==9.9: the index page'],
    ] as const) {
      const reqs = readRequirements(text, opts, 'r.txt').requirements;
      await resolveRequirements(reqs, http, reg.url('/simple-json/'), opts, 8).then(
        () => assert.unreachable(text),
        (e) => {
          assert.is(e.code, code);
          assert.match(e.message, want);
        },
      );
    }
  } finally {
    await http.close();
  }
});

test('pip: continuations, comments, markers and options read; -r lines, unpinned and unhashed requirements refused naming the line', () => {
  const h = (c: string) => `--hash=sha256:${c.repeat(64)}`;
  const opts = { license: 'MIT', licenseUnchecked: false, comment: undefined };
  const read = readRequirements(
    [
      '# comment',
      `Foo.Bar[extra]==1.0.post1 ; sys_platform == "linux" ${h('a')} \\`,
      `  ${h('b')} --hash sha512:${'c'.repeat(128)}  # two more`,
      '--extra-index-url https://example.invalid/',
      '--require-hashes',
      `baz===2023.1 ${h('d')}`,
    ].join('\n'),
    opts,
    'r.txt',
  );
  assert.equal(read.notes, ['r.txt line 4: --extra-index-url ignored (pass --index-url to vouch)']);
  const [foo, baz] = read.requirements;
  assert.is(foo!.label, 'Foo.Bar==1.0.post1');
  assert.is(foo!.name, 'pypi/foo-bar');
  assert.is(foo!.semver, '1.0.0+post.1');
  assert.equal([...foo!.hashes.get('sha256')!], ['a'.repeat(64), 'b'.repeat(64)]);
  assert.equal([...foo!.hashes.get('sha512')!], ['c'.repeat(128)]);
  assert.is(baz!.arbitrary, true);
  const cases: [string, RegExp][] = [
    ['-r other.txt\n', /line 1: -r is not followed/],
    ['-e .\n', /line 1: -e is refused/],
    [`flask>=2 ${h('0')}\n`, /line 1: "flask>=2" is not pinned as name==version/],
    ['\n\nflask==2.0\n', /line 3: flask==2\.0 has no --hash/],
    [`pkg==1!2.0 ${h('0')}\n`, /pkg==1!2\.0: PyPI version "1!2\.0" has an epoch/],
    [`pkg @ https://example.invalid/pkg.whl ${h('0')}\n`, /direct URL requirement/],
    [`pkg==1.0 --hash=md5:${'0'.repeat(32)}\n`, /is not sha256:, sha384: or sha512:/],
    [`a==1 ${h('0')}\nA==2 ${h('1')}\n`, /line 2: A is pinned again \(first on line 1\)/],
  ];
  for (const [text, want] of cases) {
    try {
      readRequirements(text, opts, 'bad.txt');
      assert.unreachable(`accepted ${text}`);
    } catch (e) {
      assert.instance(e, VouchError, String(e));
      assert.match((e as Error).message, want);
    }
  }
  assert.throws(() => readRequirements(`a==1 ${h('0')}\n`, { ...opts, license: undefined }, 'x.txt'), /pass --license/);
});

// ------------------------------------------------------------------ Go

/** Builds a zip with python3's zipfile and returns its bytes and, independently, Go's h1 of it and of its go.mod. */
function goZip(module: string, version: string, members: Record<string, string>): { zip: Buffer; h1: string; modH1: string; mod: Buffer } {
  const dir = mkdtempSync(join(work, 'gozip-'));
  const spec = join(dir, 'spec.json');
  writeFileSync(spec, JSON.stringify({ prefix: `${module}@${version}/`, members }));
  const py = `
import base64, hashlib, json, sys, zipfile
spec = json.load(open(sys.argv[1]))
names = []
with zipfile.ZipFile(sys.argv[2], 'w', zipfile.ZIP_DEFLATED) as z:
    for name, text in spec['members'].items():
        z.writestr(spec['prefix'] + name, text)
        names.append(spec['prefix'] + name)
def h1(files):
    s = ''.join('%s  %s\\n' % (hashlib.sha256(data).hexdigest(), name) for name, data in sorted(files))
    return 'h1:' + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()
with zipfile.ZipFile(sys.argv[2]) as z:
    print(h1([(n, z.read(n)) for n in z.namelist()]))
print(h1([('go.mod', spec['members']['go.mod'].encode())]))
`;
  const out = spawnSync('python3', ['-c', py, spec, join(dir, 'm.zip')], { encoding: 'utf8' });
  assert.is(out.status, 0, out.stderr);
  const [h1, modH1] = out.stdout.trim().split('\n') as [string, string];
  return { zip: readFileSync(join(dir, 'm.zip')), h1, modH1, mod: Buffer.from(members['go.mod']!) };
}

/** `go mod download -json` against the loopback proxy: Go's own h1 (null without a Go toolchain). */
function goDownload(proxy: string, module: string, version: string): Promise<{ Sum: string; GoModSum: string } | null> {
  const goBin = ['/usr/bin/go', '/usr/lib/go/bin/go', '/usr/local/go/bin/go'].find((p) => existsSync(p));
  if (!goBin) return Promise.resolve(null);
  const home = mkdtempSync(join(work, 'gohome-'));
  return new Promise((resolve) => {
    const child = spawn(goBin, ['mod', 'download', '-json', `${module}@${version}`], {
      cwd: home,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: home,
        GOPATH: join(home, 'gopath'),
        GOMODCACHE: join(home, 'modcache'),
        GOCACHE: join(home, 'cache'),
        GOPROXY: proxy,
        GOSUMDB: 'off',
        GOFLAGS: '-modcacherw',
        GO111MODULE: 'on',
        GOENV: 'off',
        GOTOOLCHAIN: 'local',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      let parsed: { Sum?: string; GoModSum?: string; Error?: string } = {};
      try {
        parsed = JSON.parse(out);
      } catch {
        /* reported below */
      }
      if (code !== 0 || !parsed.Sum) {
        console.log(`(go mod download failed, Go's own check skipped: ${parsed.Error ?? err.trim().split('\n').at(-1)})`);
        resolve(null);
        return;
      }
      resolve(parsed as { Sum: string; GoModSum: string });
    });
  });
}

test('go.sum against a GOPROXY: h1 of zips and go.mod files recomputed (python3, and Go itself when installed); escaped paths; mismatch names the module', async () => {
  const m1 = { module: 'example.com/Foo/bar', version: 'v1.2.3' };
  const m2 = { module: 'example.com/baz', version: 'v0.0.0-20230101120000-abcdef123456' };
  const z1 = goZip(m1.module, m1.version, {
    'go.mod': 'module example.com/Foo/bar\n\ngo 1.19\n',
    'bar.go': 'package bar\n\nconst X = 1\n',
    LICENSE: 'MIT\n',
    'sub/z.go': 'package sub\n',
  });
  const z2 = goZip(m2.module, m2.version, { 'go.mod': 'module example.com/baz\n', 'baz.go': 'package baz\n' });
  const serve = (m: { module: string; version: string }, z: typeof z1, esc: string) => {
    // The go command sends the case-encoding's `!` as %21; vouch (like the gateway) spells it `!`.
    for (const e of new Set([esc, esc.replace(/!/g, '%21')])) {
      reg
        .route(`/gp/${e}/@v/${m.version}.zip`, { body: z.zip, contentType: 'application/zip' })
        .route(`/gp/${e}/@v/${m.version}.mod`, { body: z.mod, contentType: 'text/plain' })
        .route(`/gp/${e}/@v/${m.version}.info`, {
          body: JSON.stringify({ Version: m.version, Time: '2023-01-01T12:00:00Z' }),
          contentType: 'application/json',
        });
    }
  };
  serve(m1, z1, 'example.com/!foo/bar');
  serve(m2, z2, 'example.com/baz');
  const fromGo = await goDownload(reg.url('/gp'), m1.module, m1.version);
  if (fromGo) {
    assert.is(fromGo.Sum, z1.h1, 'python3 and Go disagree on the zip h1');
    assert.is(fromGo.GoModSum, z1.modH1, 'python3 and Go disagree on the go.mod h1');
  }
  const sum = [
    `${m1.module} ${m1.version} ${z1.h1}`,
    `${m1.module} ${m1.version}/go.mod ${z1.modH1}`,
    `${m2.module} ${m2.version} ${z2.h1}`,
    `${m2.module} ${m2.version}/go.mod ${z2.modH1}`,
    '',
  ].join('\n');
  const before = size();
  const r = await endorse([
    '--lockfile',
    write('gomod/go.sum', sum),
    '--goproxy',
    reg.url('/gp/'),
    '--license',
    'BSD-3-Clause',
    '--name',
    'acme/service',
    '--semver',
    '3.1.4',
    '--json',
  ]);
  assert.is(r.status, 0, r.stderr + r.stdout);
  assert.is(JSON.parse(r.stdout).entries, 4);
  const blk = block(before);
  assert.is(blk.payload.uns, 'acme/service');
  assert.is(blk.payload.semver, '3.1.4');
  const byUrl = Object.fromEntries(blk.payload.endorsements.map((e: any) => [e.artifact_url, e]));
  const zipE = byUrl[reg.url('/gp/example.com/!foo/bar/@v/v1.2.3.zip')];
  assert.ok(zipE, Object.keys(byUrl).join(' '));
  assert.is(zipE.name, 'go/example.com+Foo+bar');
  assert.is(zipE.semver, '1.2.3');
  assert.is(zipE.artifact_hash, `sha256:${hex('sha256', z1.zip)}`);
  assert.is(byUrl[reg.url('/gp/example.com/!foo/bar/@v/v1.2.3.mod')].artifact_hash, `sha256:${hex('sha256', z1.mod)}`);
  const pseudo = byUrl[reg.url('/gp/example.com/baz/@v/v0.0.0-20230101120000-abcdef123456.zip')];
  assert.is(pseudo.name, 'go/example.com+baz');
  assert.is(pseudo.semver, '0.0.0-20230101120000-abcdef123456');

  // A go.sum whose h1 does not match the proxy's zip.
  const h = head();
  const wrong = `${m2.module} ${m2.version} ${z1.h1}\n`;
  const bad = await endorse(['--lockfile', write('gobad/go.sum', wrong), '--goproxy', reg.url('/gp'), '--license', 'MIT']);
  assert.is(bad.status, 1, bad.stderr);
  oneLine(bad);
  assert.match(
    bad.stderr,
    `go.sum mismatch: example.com/baz v0.0.0-20230101120000-abcdef123456 (${reg.url('/gp/example.com/baz/@v/v0.0.0-20230101120000-abcdef123456.zip')}): go.sum ${z1.h1}, fetched ${z2.h1}`,
  );
  assert.is(head(), h);
  await endorseLockfile({
    chain,
    key,
    lockfile: write('gobad2/go.sum', `${m1.module} ${m1.version}/go.mod ${z2.modH1}\n`),
    goproxy: reg.url('/gp'),
    license: 'MIT',
    quiet: true,
  }).then(
    () => assert.unreachable('a wrong go.mod h1 passed'),
    (e) => {
      assert.is(e.code, 'hash_mismatch');
      assert.match(
        e.message,
        `go.sum mismatch: example.com/Foo/bar v1.2.3/go.mod (${reg.url('/gp/example.com/!foo/bar/@v/v1.2.3.mod')}): go.sum ${z2.modH1}, fetched ${z1.modH1}`,
      );
    },
  );
  assert.is(head(), h);
});

test('the whole chain still verifies', async () => {
  const v = await verify();
  assert.is(v.blocks, size());
});

test.run();
