/**
 * End to end through the real `vouch` command line, the real git CLI and a
 * real HTTP origin on 127.0.0.1: keygen -> init -> endorse (text, binary,
 * multi-entry, Unicode, fetched URL, every algorithm) -> git clone ->
 * verify / check on the clone -> tampering committed in the clone is found
 * with the right code and index; bad input gets one line and the documented
 * exit code, and never changes the chain.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync, readFileSync, statSync, chmodSync, mkdirSync, unlinkSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { git, vouch, vouchAsync, type Run } from '../helpers/processes.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { chainFile } from '../helpers/chain-files.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-e2e-'));
const key = join(work, 'authority.pem');
const chain = join(work, 'chain');
const clone = join(work, 'clone');
let pub = '';
let origin: Server;
let originUrl = '';
const served = new Map<string, Buffer>();

const file = (name: string, content: string | Buffer) => {
  const p = join(work, name);
  writeFileSync(p, content);
  return p;
};
const oneLine = (r: Run) => {
  assert.is(r.stderr.trim().split('\n').length, 1, `expected one stderr line, got: ${r.stderr}`);
  assert.not.match(r.stderr, /\n\s+at /, 'stack trace on stderr');
};
const head = (dir: string) => git(['-C', dir, 'rev-parse', 'HEAD']).stdout.trim();

test.before(async () => {
  origin = createServer((req, res) => {
    const body = served.get(req.url ?? '');
    if (!body) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length }).end(body);
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
  originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
});

test.after(() => {
  origin.close();
  rmSync(work, { recursive: true, force: true });
});

test('keygen writes a 0600 PKCS#8 key and prints its public key; never overwrites', () => {
  const r = vouch(['keygen', '--out', key]);
  assert.is(r.status, 0, r.stderr);
  pub = r.stdout.trim();
  assert.match(pub, /^[A-Za-z0-9+/]{43}=$/);
  assert.is(statSync(key).mode & 0o777, 0o600);
  assert.match(readFileSync(key, 'utf8'), /^-----BEGIN PRIVATE KEY-----/);
  const again = vouch(['keygen', '--out', key]);
  assert.is(again.status, 2);
  oneLine(again);
  assert.match(again.stderr, /refusing to overwrite/);
});

test('init creates a chain repository with the authority block and checkpoint', () => {
  const r = vouch(['init', '--chain', chain, '--key', key, '--signer', 'acme-authority', '--uns', 'acme/releases']);
  assert.is(r.status, 0, r.stderr);
  assert.not.ok(existsSync(join(chain, 'blocks')), 'the sparse layout: block files only in git objects');
  assert.ok(existsSync(join(chain, 'checkpoint.json')));
  const b0 = JSON.parse(chainFile(chain, 'blocks/000/000/000000000.json'));
  assert.is(b0.payload.authority.public_key, pub);
  assert.is(b0.signer, 'acme-authority');
  assert.is(git(['-C', chain, 'log', '--format=%s']).stdout.trim(), 'block 0: authority acme/releases 1.0.0');
  const again = vouch(['init', '--chain', chain, '--key', key, '--signer', 'x']);
  assert.is(again.status, 2);
  oneLine(again);
});

const textV1 = 'console.log("widget 1.0.0");\n';
const binV1 = Buffer.from([0, 1, 2, 3, 255, 254, 0, 10, 13]);

test('endorse: a text file, a binary, a multi-entry block with Unicode, a fetched URL, every algorithm', async () => {
  const r1 = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    'https://cdn.example/widget.js',
    '--file',
    file('w1.js', textV1),
    '--name',
    'acme/widget',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
    '--comment',
    'first release',
    '--effective-date',
    '2026-01-05',
  ]);
  assert.is(r1.status, 0, r1.stderr);
  assert.match(r1.stdout, /^1 [0-9a-f]{64}\n$/);
  const r2 = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    'https://cdn.example/widget.bin',
    '--file',
    file('w1.bin', binV1),
    '--name',
    'acme/widget',
    '--semver',
    '1.0.0',
    '--license',
    'Apache-2.0',
    '--algorithm',
    'sha512',
  ]);
  assert.is(r2.status, 0, r2.stderr);
  const r3 = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    'https://cdn.example/widget.js',
    '--file',
    file('w2.js', 'console.log("Grüße 2");\n'),
    '--url',
    'https://cdn.example/widget-2.tar',
    '--file',
    file('w2.tar', Buffer.alloc(70_000, 7)),
    '--name',
    'acme/widget',
    '--semver',
    '2.0.0',
    '--license',
    'MIT',
    '--comment',
    'Grüße, 世界 — “2.0” 🎉',
    '--algorithm',
    'blake3',
  ]);
  assert.is(r3.status, 0, r3.stderr);
  const b3 = JSON.parse(chainFile(chain, 'blocks/000/000/000000003.json'));
  assert.is(b3.payload.endorsements.length, 2);
  assert.is(b3.comment, 'Grüße, 世界 — “2.0” 🎉');
  assert.match(b3.payload.endorsements[0].artifact_hash, /^blake3:[0-9a-f]{64}$/);
  served.set('/lib-3.0.0.tgz', Buffer.from('fetched over http'));
  const r4 = await vouchAsync([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    `${originUrl}/lib-3.0.0.tgz`,
    '--name',
    'acme/lib',
    '--semver',
    '3.0.0',
    '--license',
    'BSD-3-Clause',
    '--algorithm',
    'sha3-256',
  ]);
  assert.is(r4.status, 0, r4.stderr);
  const log = git(['-C', chain, 'log', '--format=%s%n%b']).stdout;
  assert.match(log, /block 3: endorse acme\/widget 2\.0\.0\n+https:\/\/cdn\.example\/widget\.js\nhttps:\/\/cdn\.example\/widget-2\.tar/);
  assert.is(git(['-C', chain, 'status', '--porcelain']).stdout, '');
});

test('endorse: identical bytes are unchanged; other bytes under a signed semver are a conflict; a dead URL fails', async () => {
  const before = head(chain);
  const same = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    'https://cdn.example/widget.bin',
    '--file',
    join(work, 'w1.bin'),
    '--name',
    'acme/widget',
    '--semver',
    '1.0.0',
    '--license',
    'Apache-2.0',
    '--algorithm',
    'sha512',
  ]);
  assert.is(same.status, 0, same.stderr);
  assert.match(same.stdout, /^unchanged: .* block 2 /);
  const conflict = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    'https://cdn.example/widget.js',
    '--file',
    file('evil.js', 'evil'),
    '--name',
    'acme/widget',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
  ]);
  assert.is(conflict.status, 1);
  oneLine(conflict);
  assert.match(conflict.stderr, /already signed in block 1/);
  const dead = await vouchAsync([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    `${originUrl}/missing.tgz`,
    '--name',
    'acme/lib',
    '--semver',
    '3.0.1',
    '--license',
    'MIT',
  ]);
  assert.is(dead.status, 2);
  oneLine(dead);
  assert.match(dead.stderr, /HTTP 404/);
  assert.is(head(chain), before, 'a refused endorse changed the chain');
});

test('a plain git clone verifies with vouch verify, pinned and unpinned; git fsck --strict is clean', () => {
  assert.is(git(['clone', '-q', chain, clone]).status, 0);
  const r = vouch(['verify', '--chain', clone, '--public-key', pub, '--json']);
  assert.is(r.status, 0, r.stderr);
  const s = JSON.parse(r.stdout);
  assert.is(s.ok, true);
  assert.is(s.blocks, 5);
  assert.is(s.ed25519, 'libsodium+openssl'); // sodium-native's binary loaded: a missing one would halve the rate silently
  assert.is(s.authority.public_key, pub);
  assert.is(s.checkpoint.size, 5);
  const plain = vouch(['verify', '--chain', clone]);
  assert.is(plain.status, 0, plain.stderr);
  assert.match(plain.stdout, /^ok: 5 blocks, authority acme-authority .* head [0-9a-f]{64}, checkpoint ok/);
  assert.is(plain.stderr, '', 'progress or noise on a pipe');
  for (const dir of [chain, clone]) {
    const fsck = git(['-C', dir, 'fsck', '--strict']);
    assert.is(fsck.status, 0, fsck.stderr);
  }
  const wrongKey = vouch(['verify', '--chain', clone, '--public-key', 'hvDlFny040Jdtl6L3Vq3jYgQ5mDtkbSfsNF2F1P3LNU=']);
  assert.is(wrongKey.status, 1);
  assert.match(wrongKey.stderr, /^untrusted_authority at block 0/);
});

test('check accepts the right file and rejects a changed one, by default, semver and date', () => {
  const ok = vouch(['check', '--chain', clone, '--url', 'https://cdn.example/widget.js', join(work, 'w2.js')]);
  assert.is(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /^match: .* acme\/widget 2\.0\.0 \(block 3\)/);
  const old = vouch(['check', '--chain', clone, '--url', 'https://cdn.example/widget.js', '--semver', '1.0.0', join(work, 'w1.js')]);
  assert.is(old.status, 0, old.stderr);
  const byDate = vouch(['check', '--chain', clone, '--url', 'https://cdn.example/widget.js', '--at', '2026-01-05', join(work, 'w1.js')]);
  assert.is(byDate.status, 0, byDate.stderr);
  const wrong = vouch(['check', '--chain', clone, '--url', 'https://cdn.example/widget.js', join(work, 'w1.js')]);
  assert.is(wrong.status, 1);
  oneLine(wrong);
  assert.match(wrong.stderr, /^hash_mismatch: /);
  const bin = vouch(['check', '--chain', clone, '--url', 'https://cdn.example/widget.bin', file('w1-changed.bin', Buffer.concat([binV1, Buffer.from([0])]))]);
  assert.is(bin.status, 1);
  const none = vouch(['check', '--chain', clone, '--url', 'https://cdn.example/unknown.js', join(work, 'w1.js')]);
  assert.is(none.status, 1);
  assert.match(none.stderr, /^not_found: no provenance block is on file for https:\/\/cdn\.example\/unknown\.js/);
});

test('a block edited and committed in the clone is reported with the right code and index', () => {
  const path = join(clone, 'blocks/000/000/000000002.json');
  const original = readFileSync(path, 'utf8');
  const edit = (text: string, msg: string) => {
    writeFileSync(path, text);
    const c = git(['-C', clone, '-c', 'user.name=mallory', '-c', 'user.email=m@example.invalid', 'commit', '-qam', msg]);
    assert.is(c.status, 0, c.stderr);
  };
  edit(original.replace('"license": "Apache-2.0"', '"license": "GPL-3.0"'), 'relicense');
  let r = vouch(['verify', '--chain', clone, '--json']);
  assert.is(r.status, 1);
  assert.equal([JSON.parse(r.stdout).code, JSON.parse(r.stdout).index], ['record_hash_mismatch', 2]);
  assert.match(r.stderr, /^record_hash_mismatch at block 2/);
  edit('{ not json', 'break');
  r = vouch(['verify', '--chain', clone]);
  assert.is(r.status, 1);
  oneLine(r);
  assert.match(r.stderr, /^malformed at block 2: not JSON/);
  edit(original, 'restore');
  assert.is(vouch(['verify', '--chain', clone]).status, 0);
  // A dropped newest block is caught by the signed checkpoint.
  git(['-C', clone, 'rm', '-q', 'blocks/000/000/000000004.json']);
  git(['-C', clone, '-c', 'user.name=m', '-c', 'user.email=m@x.invalid', 'commit', '-qm', 'truncate']);
  r = vouch(['verify', '--chain', clone]);
  assert.is(r.status, 1);
  assert.match(r.stderr, /^checkpoint_mismatch at checkpoint/);
  // A missing middle file is an index gap; a stray file is malformed (what the branch commits: vouch reads git objects).
  git(['-C', clone, 'reset', '-q', '--hard', 'HEAD~1']);
  git(['-C', clone, 'rm', '-q', 'blocks/000/000/000000001.json']);
  git(['-C', clone, '-c', 'user.name=m', '-c', 'user.email=m@x.invalid', 'commit', '-qm', 'gap']);
  r = vouch(['verify', '--chain', clone]);
  assert.match(r.stderr, /^index_gap at block 1/);
  git(['-C', clone, 'reset', '-q', '--hard', 'HEAD~1']);
  // An uncommitted edit of the clone's working tree is not what vouch reads.
  unlinkSync(join(clone, 'blocks/000/000/000000001.json'));
  assert.is(vouch(['verify', '--chain', clone]).status, 0);
  git(['-C', clone, 'checkout', '-q', '--', '.']);
  writeFileSync(join(clone, 'blocks/000/000/notes.txt'), 'hello');
  git(['-C', clone, 'add', 'blocks/000/000/notes.txt']);
  git(['-C', clone, '-c', 'user.name=m', '-c', 'user.email=m@x.invalid', 'commit', '-qm', 'stray']);
  r = vouch(['verify', '--chain', clone]);
  assert.is(r.status, 1);
  assert.match(r.stderr, /blocks\/000\/000\/notes\.txt/);
  git(['-C', clone, 'reset', '-q', '--hard', 'HEAD~1']);
  assert.is(vouch(['verify', '--chain', clone]).status, 0);
});

test('an endorse killed before its commit lands leaves a chain without that block; the next endorse works', async () => {
  const before = head(chain);
  for (const point of ['after-objects', 'after-ref', 'after-files']) {
    const sizeBefore = Number(JSON.parse(readFileSync(join(chain, 'checkpoint.json'), 'utf8')).size);
    const r = vouch(
      [
        'endorse',
        '--chain',
        chain,
        '--key',
        key,
        '--url',
        `https://cdn.example/crash-${point}.js`,
        '--file',
        file(`c-${point}.js`, point),
        '--name',
        'acme/crash',
        '--semver',
        '1.0.0',
        '--license',
        'MIT',
      ],
      { VOUCH_CRASH_POINT: point },
    );
    assert.is(r.signal, 'SIGKILL', `${point}: ${r.stderr}`);
    // What a restart does: open the repository, which repairs an interrupted append.
    const reopened = await ChainRepo.open(chain);
    assert.is(reopened.size, point === 'after-objects' ? sizeBefore : sizeBefore + 1, `${point}: size after reopening`);
    const v = vouch(['verify', '--chain', chain, '--json']);
    assert.is(v.status, 0, `${point}: ${v.stderr}`);
    const size = JSON.parse(v.stdout).blocks;
    // before the branch moved: the block does not exist; after: it is committed (in flight, not lost).
    assert.is(size, point === 'after-objects' ? sizeBefore : sizeBefore + 1, point);
    assert.is(git(['-C', chain, 'status', '--porcelain']).stdout, '', `${point}: working tree not clean`);
  }
  const r = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    'https://cdn.example/after-crash.js',
    '--file',
    file('ac.js', 'ok'),
    '--name',
    'acme/crash',
    '--semver',
    '1.0.1',
    '--license',
    'MIT',
  ]);
  assert.is(r.status, 0, r.stderr);
  assert.is(vouch(['verify', '--chain', chain]).status, 0);
  assert.is.not(head(chain), before);
  assert.is(git(['-C', chain, 'fsck', '--strict']).status, 0);
});

test('bad input: one line on stderr, documented exit code, chain untouched', () => {
  const before = head(chain);
  const cases: [string[], number, RegExp][] = [
    [['endorse', '--chain', chain, '--key', key, '--url', 'ftp://x/y', '--name', 'a/b', '--semver', '1.0.0', '--license', 'MIT'], 2, /absolute http\(s\) URL/],
    [['endorse', '--chain', chain, '--key', key, '--url', 'https://x/y', '--name', 'nope', '--semver', '1.0.0', '--license', 'MIT'], 2, /OWNER\/NAME/],
    [['endorse', '--chain', chain, '--key', key, '--url', 'https://x/y', '--name', 'a/b', '--semver', '1.0', '--license', 'MIT'], 2, /SemVer/],
    [
      ['endorse', '--chain', chain, '--key', key, '--url', 'https://x/y', '--name', 'a/b', '--semver', '1.0.0', '--license', 'MIT', '--algorithm', 'md5'],
      2,
      /unknown --algorithm/,
    ],
    [
      [
        'endorse',
        '--chain',
        chain,
        '--key',
        key,
        '--url',
        'https://x/y',
        '--name',
        'a/b',
        '--semver',
        '1.0.0',
        '--license',
        'MIT',
        '--effective-date',
        '2026-02-30',
      ],
      2,
      /effective-date/,
    ],
    [
      [
        'endorse',
        '--chain',
        chain,
        '--key',
        key,
        '--url',
        'https://x/y',
        '--name',
        'a/b',
        '--semver',
        '1.0.0',
        '--license',
        'MIT',
        '--file',
        join(work, 'nope'),
      ],
      2,
      /no such file/,
    ],
    [['endorse', '--chain', chain, '--key', key], 2, /missing --url/],
    [['verify', '--chain', chain, '--bogus'], 2, /bogus/],
    [['verify'], 2, /missing --chain/],
    [['verify', '--chain', work], 2, /not a (git|vouch)|chain/i],
    [['verify', '--chain', join(work, 'does-not-exist')], 2, /./],
    [['check', '--chain', chain, '--url', 'https://x/y'], 2, /missing FILE/],
    [['frobnicate'], 2, /unknown command/],
  ];
  for (const [args, code, re] of cases) {
    const r = vouch(args);
    assert.is(r.status, code, `${args.join(' ')}: ${r.stderr}`);
    oneLine(r);
    assert.match(r.stderr, re, args.join(' '));
  }
  // A key readable by others is refused, as ssh does; a wrong key cannot append.
  const loose = join(work, 'loose.pem');
  writeFileSync(loose, readFileSync(key));
  chmodSync(loose, 0o644);
  let r = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    loose,
    '--url',
    'https://x/y',
    '--file',
    join(work, 'w1.js'),
    '--name',
    'a/b',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
  ]);
  assert.is(r.status, 2);
  assert.match(r.stderr, /accessible by group or others/);
  const other = join(work, 'other.pem');
  assert.is(vouch(['keygen', '--out', other]).status, 0);
  r = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    other,
    '--url',
    'https://x/y',
    '--file',
    join(work, 'w1.js'),
    '--name',
    'a/b',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
  ]);
  assert.is(r.status, 2);
  oneLine(r);
  assert.match(r.stderr, /not the chain's authority key/);
  writeFileSync(join(work, 'garbage.pem'), 'not a key', { mode: 0o600 });
  r = vouch(['init', '--chain', join(work, 'c2'), '--key', join(work, 'garbage.pem'), '--signer', 'x']);
  assert.is(r.status, 2);
  assert.match(r.stderr, /not a PEM private key/);
  assert.is(head(chain), before);
  assert.is(git(['-C', chain, 'status', '--porcelain']).stdout, '');
});

test('--json gives one JSON object (results and failures), --quiet prints nothing on success', () => {
  let r = vouch(['verify', '--chain', chain, '--quiet']);
  assert.is(r.status, 0);
  assert.is(r.stdout + r.stderr, '');
  r = vouch(['check', '--chain', chain, '--url', 'https://cdn.example/widget.js', '--json', join(work, 'w2.js')]);
  assert.is(r.status, 0, r.stderr);
  const ok = JSON.parse(r.stdout);
  assert.equal([ok.ok, ok.semver, ok.index], [true, '2.0.0', 3]);
  r = vouch(['check', '--chain', chain, '--url', 'https://cdn.example/widget.js', '--json', join(work, 'w1.js')]);
  assert.is(r.status, 1);
  const bad = JSON.parse(r.stdout);
  assert.equal([bad.ok, bad.code], [false, 'hash_mismatch']);
  assert.match(bad.expected, /^blake3:/);
  r = vouch([
    'endorse',
    '--chain',
    chain,
    '--key',
    key,
    '--url',
    'https://cdn.example/json.js',
    '--file',
    file('json.js', 'json'),
    '--name',
    'acme/json',
    '--semver',
    '1.0.0',
    '--license',
    'MIT',
    '--json',
  ]);
  assert.is(r.status, 0, r.stderr);
  assert.equal(Object.keys(JSON.parse(r.stdout)).sort(), ['artifact_hashes', 'index', 'ok', 'record_hash', 'status', 'urls']);
  r = vouch(['verify', '--chain', join(work, 'nope'), '--json']);
  assert.is(r.status, 2);
  assert.equal(Object.keys(JSON.parse(r.stdout)).sort(), ['code', 'message', 'ok']);
  assert.is(r.stderr.trim().split('\n').length, 1);
});

test('every command has --help (exit 0) and the bare command lists them', () => {
  for (const c of ['keygen', 'init', 'endorse', 'verify', 'check']) {
    const r = vouch([c, '--help']);
    assert.is(r.status, 0);
    assert.match(r.stdout, new RegExp(`^usage: vouch ${c} `));
  }
  const r = vouch(['--help']);
  assert.is(r.status, 0);
  assert.match(r.stdout, /keygen[\s\S]*init[\s\S]*endorse[\s\S]*verify[\s\S]*check/);
  mkdirSync(join(work, 'empty'));
  assert.is(vouch([]).status, 2);
});

test.run();
