/**
 * Tests of store/chain-repo.ts (the sparse layout, the only one) against the
 * real git CLI and the real file system (temporary directories, removed
 * afterwards).
 *
 * Owns: nothing outside its temporary directories.
 * Trusts: the installed `git` (2.39) as the judge of repository, index and
 * object validity.
 * Must hold: after every append, open and repair, `git status --porcelain`
 * is empty, `git diff-index --cached HEAD` is empty and `git fsck --strict`
 * reports nothing wrong.
 *
 * The same file doubles as the child process of the crash tests: with
 * VOUCH_CHAIN_REPO_CHILD set it opens a chain and appends, and the
 * VOUCH_CRASH_POINT hook in chain-repo kills it part-way.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ChainRepo, type BlockFile, type CommitInfo } from '../../store/chain-repo.ts';
import { blockPath, parseBlockPath } from '../../chain/layout.ts';
import { parseIndex } from '../../store/git-index-format.ts';
import { VouchError } from '../../chain/errors.ts';
import { gitIn } from '../helpers/processes.ts';

const PAD = 'x'.repeat(300);
const block = (i: number): BlockFile => ({ index: i, content: `${JSON.stringify({ index: i, pad: PAD, note: 'é✓' }, null, 2)}\n` });
const blocks = (from: number, n: number): BlockFile[] => Array.from({ length: n }, (_, k) => block(from + k));
const info = (i: number): CommitInfo => ({
  message: `block ${i}: endorse acme/tool 1.0.${i}\n\nhttps://example.invalid/acme/tool-${i}.tgz`,
  authorName: 'Vouch Authority',
  authorEmail: 'authority@vouch.invalid',
  timestamp: 1_760_000_000 + i,
});
const checkpoint = (n: number) => `{\n  "size": ${n}\n}\n`;

// ---------------------------------------------------------------------------
// Child mode (crash tests)

if (process.env.VOUCH_CHAIN_REPO_CHILD) {
  const dir = process.env.VOUCH_CHAIN_REPO_CHILD;
  const repo = await ChainRepo.open(dir);
  const n = Number(process.env.VOUCH_CHILD_BLOCKS ?? '1');
  await repo.append(blocks(repo.size, n), checkpoint(repo.size + n), info(repo.size));
  process.exit(0);
}

const root = mkdtempSync(join(tmpdir(), 'vouch-chain-repo-test-'));
let seq = 0;
const fresh = (name: string) => join(root, `${name}-${seq++}`);

const git = gitIn;

/** The repository as git sees it: clean status, index = HEAD, nothing wrong for fsck, `files` tracked files. */
function assertGitClean(dir: string, files: number, label = ''): void {
  assert.is(git(dir, 'status', '--porcelain', '--untracked-files=all'), '', `${label} git status`);
  assert.is(git(dir, 'diff-index', '--cached', 'HEAD'), '', `${label} diff-index`);
  assert.is(git(dir, 'ls-files').trim().split('\n').length, files, `${label} ls-files count`);
  assert.not.ok(existsSync(join(dir, 'blocks')), `${label} no block file in the working tree`);
  const fsck = spawnSync('git', ['-C', dir, 'fsck', '--strict', '--no-progress'], { encoding: 'utf8' });
  assert.is(fsck.status, 0, `${label} fsck status: ${fsck.stderr}`);
  for (const line of `${fsck.stdout}\n${fsck.stderr}`.split('\n')) {
    assert.not.match(line, /error|warning|missing|broken|bad|invalid/i, `${label} fsck: ${line}`);
  }
}

function expectVouchError(fn: () => unknown, code: string): Promise<VouchError> {
  return Promise.resolve()
    .then(fn)
    .then(
      () => {
        throw new Error(`expected VouchError ${code}, nothing thrown`);
      },
      (e: unknown) => {
        if (!(e instanceof VouchError)) throw e;
        assert.is(e.code, code, e.message);
        assert.not.match(e.message, /\n/, 'one-line message');
        return e;
      },
    );
}

function snapshot(dir: string): string {
  const files: string[] = [];
  const walk = (d: string, rel: string) => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (e.name === 'objects' && rel === '.git') continue;
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(join(d, e.name), r);
      else files.push(`${r}:${readFileSync(join(d, e.name)).toString('base64')}`);
    }
  };
  walk(dir, '');
  return files.join('\n');
}

test.after(() => rmSync(root, { recursive: true, force: true }));

// ---------------------------------------------------------------------------

test('blockPath shards by the padded index and parseBlockPath inverts it', () => {
  assert.is(blockPath(42), 'blocks/000/000/000000042.json');
  assert.is(blockPath(999), 'blocks/000/000/000000999.json');
  assert.is(blockPath(1000), 'blocks/000/001/000001000.json');
  assert.is(blockPath(123456789), 'blocks/123/456/123456789.json');
  assert.is(parseBlockPath('blocks/000/001/000001000.json'), 1000);
  assert.is(parseBlockPath('blocks/000/000/000001000.json'), null, 'wrong shard');
  assert.is(parseBlockPath('blocks/000/000/42.json'), null);
  assert.is(parseBlockPath('blocks/000/000/000000042.json.vouch-tmp'), null);
  assert.is(parseBlockPath('blocks/001/000/000001000.json'), null, 'wrong top shard');
  assert.is(parseBlockPath('blocks/000/001/00000100a.json'), null, 'not a digit');
  assert.is(parseBlockPath('blocks/000/001/000001000.jsox'), null);
  assert.is(parseBlockPath('blockz/000/001/000001000.json'), null);
  assert.is(parseBlockPath('blocks/000-001/000001000.json'), null);
  for (const i of [0, 7, 999, 1000, 123_456, 999_999_999]) assert.is(parseBlockPath(blockPath(i)), i);
  assert.throws(() => blockPath(-1));
  assert.throws(() => blockPath(1.5));
  assert.throws(() => blockPath(1_000_000_000));
});

test('init, appends of one and several blocks, byte-for-byte reads, reopen', async () => {
  const dir = fresh('basic');
  const repo = await ChainRepo.init(dir, blocks(0, 3), checkpoint(3), info(0));
  assert.is(repo.size, 3);
  assert.match(repo.head, /^[0-9a-f]{40}$/);
  assertGitClean(dir, 4, 'after init');
  const r1 = await repo.append([block(3)], checkpoint(4), info(3));
  assert.is(r1.commit, repo.head);
  await repo.append(blocks(4, 5), checkpoint(9), info(4));
  assert.is(repo.size, 9);
  assertGitClean(dir, 10, 'after appends');
  for (let i = 0; i < 9; i++) {
    assert.is(repo.readBlockFile(i), block(i).content, `block ${i}`);
    assert.is(await repo.readBlockFromGit(i), block(i).content, `git block ${i}`);
  }
  assert.is(repo.readCheckpoint(), checkpoint(9));
  await expectVouchError(() => repo.readBlockFile(9), 'not_found');
  await expectVouchError(() => repo.readBlockFromGit(9), 'not_found');
  assert.equal(
    (await repo.committedFiles()).indexes(),
    Array.from({ length: 9 }, (_, i) => i),
  );

  // Commit objects: one per append, caller's message, author = committer at the given time, +0000.
  assert.is(git(dir, 'rev-list', '--count', 'HEAD').trim(), '3');
  assert.equal(git(dir, 'log', '--format=%s').trim().split('\n'), [
    'block 4: endorse acme/tool 1.0.4',
    'block 3: endorse acme/tool 1.0.3',
    'block 0: endorse acme/tool 1.0.0',
  ]);
  assert.is(git(dir, 'log', '-1', '--format=%b').trim(), 'https://example.invalid/acme/tool-4.tgz');
  const ident = git(dir, 'log', '-1', '--format=%an|%ae|%at|%ad|%cn|%ce|%ct|%cd', '--date=iso-strict').trim();
  const when = new Date(info(4).timestamp * 1000).toISOString().replace('.000Z', '+00:00');
  assert.is(ident, `Vouch Authority|authority@vouch.invalid|${info(4).timestamp}|${when}|Vouch Authority|authority@vouch.invalid|${info(4).timestamp}|${when}`);
  assert.is(git(dir, 'show', `HEAD:${blockPath(7)}`), block(7).content);

  git(dir, 'gc', '-q'); // packs objects and refs under our feet
  assert.not.ok(existsSync(join(dir, '.git/refs/heads/main')), 'main is a packed ref now');
  const again = await ChainRepo.open(dir);
  assert.is(again.size, 9);
  assert.is(again.head, repo.head);
  assert.equal(again.repairs, []);
  assert.is(again.readBlockFile(8), block(8).content);
  await again.append([block(9)], checkpoint(10), info(9));
  assertGitClean(dir, 11, 'after reopen + append');
  assert.equal(again.warnings, []);
});

test('a history git repacked into deltas (OFS_DELTA bases far back in the pack) reads back from git object by object', async () => {
  const dir = fresh('repacked');
  const repo = await ChainRepo.init(dir, blocks(0, 1), checkpoint(1), info(0));
  for (let i = 1; i < 40; i++) await repo.append([block(i)], checkpoint(i + 1), info(i));
  git(dir, 'repack', '-adfq', '--depth=50', '--window=50'); // every object packed, trees and blobs as deltas
  assert.match(
    git(
      dir,
      'verify-pack',
      '-v',
      ...readdirSync(join(dir, '.git/objects/pack'))
        .filter((f) => f.endsWith('.idx'))
        .map((f) => join(dir, '.git/objects/pack', f)),
    ),
    /chain length = [1-9]/,
  );
  const again = await ChainRepo.open(dir);
  assert.is(again.size, 40);
  for (let i = 0; i < 40; i++) assert.is(await again.readBlockFromGit(i), block(i).content, `git block ${i}`);
  assert.is((await again.committedFiles()).count, 40);
  await again.append([block(40)], checkpoint(41), info(40));
  assertGitClean(dir, 42, 'after repack, reopen and append');
});

test('a plain git clone (every block file checked out) converts when opened for writing, reads the same blocks and takes appends', async () => {
  const dir = fresh('origin');
  const repo = await ChainRepo.init(dir, blocks(0, 5), checkpoint(5), info(0));
  for (let i = 5; i < 8; i++) await repo.append([block(i)], checkpoint(i + 1), info(i));
  const clone = fresh('clone');
  git(root, 'clone', '-q', '--no-local', dir, clone); // packed objects and packed refs
  assert.ok(existsSync(join(clone, '.git', 'packed-refs')));
  const c = await ChainRepo.open(clone);
  assert.is(c.size, 8);
  assert.is(c.head, repo.head);
  assert.ok(
    c.repairs.some((r) => r.action === 'removed' && r.path === 'blocks'),
    JSON.stringify(c.repairs),
  );
  assert.equal((await c.committedFiles()).indexes(), (await repo.committedFiles()).indexes());
  for (let i = 0; i < 8; i++) {
    assert.is(c.readBlockFile(i), block(i).content);
    assert.is(await c.readBlockFromGit(i), block(i).content);
  }
  assert.is(c.readCheckpoint(), checkpoint(8));
  assert.equal(git(clone, 'log', '--format=%s').trim().split('\n').slice(0, 2), ['block 7: endorse acme/tool 1.0.7', 'block 6: endorse acme/tool 1.0.6']);
  await c.append(blocks(8, 2), checkpoint(10), info(8));
  assertGitClean(clone, 11, 'clone after append');
  assert.is(git(clone, 'rev-parse', 'HEAD~1').trim(), repo.head);
});

test('many appends past a shard boundary keep git clean; an index git rewrote its own way is written sparse again', async () => {
  const dir = fresh('long');
  const repo = await ChainRepo.init(dir, blocks(0, 990), checkpoint(990), info(0));
  for (let i = 990; i < 1005; i++) await repo.append([block(i)], checkpoint(i + 1), info(i));
  assertGitClean(dir, 1006, 'past block 1000');
  assert.is(git(dir, 'show', 'HEAD:blocks/000/000/000000999.json'), block(999).content);
  assert.is(git(dir, 'show', 'HEAD:blocks/000/001/000001000.json'), block(1000).content);
  assert.is(git(dir, 'ls-tree', '--name-only', 'HEAD:blocks/000').trim(), '000\n001');

  // git rewrites .git/index its own way (a full index, version 4, a split index): the next append writes the sparse index again.
  let i = 1005;
  for (const [what, args] of [
    ['a full index', ['-c', 'index.sparse=false', 'update-index', '--index-version', '2']],
    ['a version 4 index', ['update-index', '--index-version', '4']],
    ['a split index', ['-c', 'index.sparse=false', 'update-index', '--split-index']],
  ] as const) {
    git(dir, ...args);
    await repo.append([block(i)], checkpoint(i + 1), info(i));
    i++;
    const idx = parseIndex(readFileSync(join(dir, '.git/index')));
    assert.ok(idx.sparse && !idx.split && idx.entries.length === 2, `${what}: a sparse index of two entries again`);
    assertGitClean(dir, i + 1, `after ${what}`);
  }
  assert.equal(repo.warnings, []);

  const reopened = await ChainRepo.open(dir);
  assert.is(reopened.size, i);
  assert.is(reopened.readBlockFile(i - 1), block(i - 1).content);
});

test('no git tree has more than 1000 entries (2,100 blocks)', async () => {
  const dir = fresh('trees');
  const repo = await ChainRepo.init(dir, blocks(0, 2100), checkpoint(2100), info(0));
  await repo.append([block(2100)], checkpoint(2101), info(2100));
  const trees = git(dir, 'ls-tree', '-r', '-t', 'HEAD')
    .trim()
    .split('\n')
    .filter((l) => l.includes(' tree '));
  const sizes = new Map<string, number>();
  sizes.set('.', git(dir, 'ls-tree', 'HEAD').trim().split('\n').length);
  for (const line of trees) {
    const [meta, path] = line.split('\t');
    sizes.set(path!, git(dir, 'ls-tree', meta!.split(' ')[2]!).trim().split('\n').length);
  }
  assert.equal([...sizes.keys()].sort(), ['.', 'blocks', 'blocks/000', 'blocks/000/000', 'blocks/000/001', 'blocks/000/002']);
  for (const [p, n] of sizes) assert.ok(n <= 1000, `${p} has ${n} entries`);
  assert.is(sizes.get('blocks/000/000'), 1000);
  assert.is(sizes.get('blocks/000/002'), 101);
  assert.is(git(dir, 'ls-tree', '--name-only', 'HEAD', 'blocks/000/000/000000999.json').trim(), 'blocks/000/000/000000999.json');
  assert.is(git(dir, 'ls-tree', '--name-only', 'HEAD', 'blocks/000/001/000001000.json').trim(), 'blocks/000/001/000001000.json');
  assertGitClean(dir, 2102, 'tree test');
});

for (const point of ['after-objects', 'after-ref', 'after-files', 'after-index'] as const) {
  test(`crash ${point}: open() repairs to a consistent chain`, async () => {
    const dir = fresh(`crash-${point}`);
    const repo = await ChainRepo.init(dir, blocks(0, 998), checkpoint(998), info(0));
    const before = repo.head;
    // The child appends 999, 1000, 1001: across the shard boundary into blocks/000/001.
    await repo.append([block(998)], checkpoint(999), info(998));
    const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
      env: { ...process.env, VOUCH_CHAIN_REPO_CHILD: dir, VOUCH_CRASH_POINT: point, VOUCH_CHILD_BLOCKS: '3' },
      encoding: 'utf8',
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
    });
    assert.is(child.signal, 'SIGKILL', `child died at the crash point (${child.stderr})`);
    const committed = point !== 'after-objects';
    assert.is(git(dir, 'rev-parse', 'HEAD').trim() !== repo.head, committed, 'branch moved iff past the commit point');
    assert.ok(before);

    const opened = await ChainRepo.open(dir);
    const size = committed ? 1002 : 999;
    assert.is(opened.size, size);
    assertGitClean(dir, size + 1, `after repair (${point})`);
    assert.equal(
      (await opened.committedFiles()).indexes(),
      Array.from({ length: size }, (_, i) => i),
      'exactly the blocks of the branch',
    );
    for (const i of [0, 998, size - 1]) assert.is(opened.readBlockFile(i), block(i).content);
    assert.is(opened.readCheckpoint(), checkpoint(size));
    if (point === 'after-ref')
      assert.ok(
        opened.repairs.some((r) => r.action === 'restored' && r.path === 'checkpoint.json'),
        JSON.stringify(opened.repairs),
      );
    if (point === 'after-objects') assert.equal(opened.repairs, []);

    await opened.append([block(size)], checkpoint(size + 1), info(size));
    assertGitClean(dir, size + 2, `append after repair (${point})`);
    const third = await ChainRepo.open(dir);
    assert.equal(third.repairs, []);
  });
}

test('open() removes temporaries of interrupted writes and reports them; a file put under blocks/ is refused, not deleted', async () => {
  const dir = fresh('garbage');
  await ChainRepo.init(dir, blocks(0, 50), checkpoint(50), info(0));
  for (const g of ['checkpoint.json.vouch-tmp', 'checkpoint.note.vouch-tmp']) writeFileSync(join(dir, g), 'half');
  const repo = await ChainRepo.open(dir);
  assert.equal(
    repo.repairs
      .filter((r) => r.action === 'removed')
      .map((r) => r.path)
      .sort(),
    ['checkpoint.json.vouch-tmp', 'checkpoint.note.vouch-tmp'],
  );
  assertGitClean(dir, 51, 'after removing temporaries');
  // A forged block past the head: not ours to delete, and not a block (blocks are read from git objects).
  mkdirSync(join(dir, 'blocks/000/000'), { recursive: true });
  writeFileSync(join(dir, blockPath(99)), '{"forged": true}\n');
  const snap = snapshot(dir);
  const e = await expectVouchError(() => ChainRepo.open(dir), 'io_error');
  assert.match(e.message, new RegExp(`${blockPath(99)} is not on branch main`));
  assert.is(snapshot(dir), snap, 'nothing removed');
  assert.is((await ChainRepo.open(dir, { repair: false })).readBlockFile(49), block(49).content, 'reads are unaffected');
  rmSync(join(dir, 'blocks'), { recursive: true });
  for (let i = 0; i < 50; i++) assert.is(repo.readBlockFile(i), block(i).content);
});

test('a lost state file, a deleted index and a deleted checkpoint file are rebuilt from the branch', async () => {
  const dir = fresh('lost');
  const repo = await ChainRepo.init(dir, blocks(0, 20), checkpoint(20), info(0));
  await repo.append([block(20)], checkpoint(21), info(20));
  rmSync(join(dir, '.git/vouch-state.json'));
  rmSync(join(dir, '.git/index'));
  rmSync(join(dir, 'checkpoint.json'));
  const opened = await ChainRepo.open(dir);
  assert.is(opened.size, 21);
  const got = opened.repairs.map((r) => `${r.action} ${r.path}`).sort();
  assert.equal(got, ['reindexed .git/index', 'restored checkpoint.json']);
  assert.is(opened.readBlockFile(4), block(4).content);
  assert.is(opened.readCheckpoint(), checkpoint(21));
  assertGitClean(dir, 22, 'after rebuild');
});

test('a commit made with git outside vouch is caught up on open; the stale instance refuses to append', async () => {
  const dir = fresh('outside');
  const repo = await ChainRepo.init(dir, blocks(0, 5), checkpoint(5), info(0));
  // The commit is made in a plain clone (every file checked out) and brought over with git fetch + update-ref.
  const other = fresh('outside-clone');
  git(root, 'clone', '-q', '--no-local', dir, other);
  writeFileSync(join(other, blockPath(5)), block(5).content);
  writeFileSync(join(other, 'checkpoint.json'), checkpoint(6));
  git(other, 'add', '-A');
  git(other, '-c', 'user.name=Op', '-c', 'user.email=op@x.invalid', 'commit', '-q', '-m', 'block 5: by hand');
  git(dir, 'fetch', '-q', other, 'main');
  git(dir, 'update-ref', 'refs/heads/main', 'FETCH_HEAD');
  const head = git(dir, 'rev-parse', 'HEAD').trim();
  const e = await expectVouchError(() => repo.append([block(5)], checkpoint(6), info(5)), 'io_error');
  assert.match(e.message, /branch main moved/);
  assert.is(git(dir, 'rev-parse', 'HEAD').trim(), head);
  const opened = await ChainRepo.open(dir);
  assert.is(opened.size, 6);
  assert.ok(
    opened.repairs.some((r) => r.action === 'restored' && r.path === 'checkpoint.json'),
    JSON.stringify(opened.repairs),
  );
  assert.is(opened.readBlockFile(5), block(5).content);
  await opened.append([block(6)], checkpoint(7), info(6));
  assertGitClean(dir, 8, 'after catching up');
});

test('an instance whose branch moved refuses to append with io_error and writes nothing', async () => {
  const dir = fresh('moved');
  const a = await ChainRepo.init(dir, blocks(0, 5), checkpoint(5), info(0));
  const b = await ChainRepo.open(dir);
  await b.append([block(5)], checkpoint(6), info(5));
  const head = b.head;
  const e = await expectVouchError(() => a.append([block(5)], checkpoint(6), info(5)), 'io_error');
  assert.match(e.message, /branch main moved/);
  assert.is(git(dir, 'rev-parse', 'HEAD').trim(), head);
  assertGitClean(dir, 7, 'after refused append');
});

test('a stale index.lock left by a crash is removed and reported; the append goes through', async () => {
  const dir = fresh('stale');
  const repo = await ChainRepo.init(dir, blocks(0, 3), checkpoint(3), info(0));
  const lock = join(dir, '.git/index.lock');
  writeFileSync(lock, 'half an index');
  const old = new Date(Date.now() - 60_000);
  utimesSync(lock, old, old);
  await repo.append([block(3)], checkpoint(4), info(3));
  assert.equal(repo.warnings, []);
  assert.ok(repo.repairs.some((r) => r.action === 'lock_removed' && r.path === '.git/index.lock'));
  assertGitClean(dir, 5, 'after stale lock');
});

test('bad input: not a chain, chain exists, wrong indexes — with clear errors and nothing touched', async () => {
  await expectVouchError(() => ChainRepo.open(fresh('missing')), 'not_a_chain');
  const empty = fresh('empty');
  mkdirSync(empty);
  await expectVouchError(() => ChainRepo.open(empty), 'not_a_chain');
  const plain = fresh('plain');
  mkdirSync(plain);
  writeFileSync(join(plain, 'a.txt'), 'x');
  await expectVouchError(() => ChainRepo.open(plain), 'not_a_chain');
  await expectVouchError(() => ChainRepo.open(join(plain, 'a.txt')), 'not_a_chain');
  const nocommit = fresh('nocommit');
  mkdirSync(nocommit);
  git(nocommit, 'init', '-q', '-b', 'main');
  await expectVouchError(() => ChainRepo.open(nocommit), 'not_a_chain');
  writeFileSync(join(nocommit, 'README'), 'hi\n');
  git(nocommit, 'add', 'README');
  git(nocommit, '-c', 'user.name=x', '-c', 'user.email=x@x', 'commit', '-q', '-m', 'readme');
  const e = await expectVouchError(() => ChainRepo.open(nocommit), 'not_a_chain');
  assert.match(e.message, /no blocks/);
  mkdirSync(join(nocommit, 'blocks/000/000'), { recursive: true });
  writeFileSync(join(nocommit, 'blocks/000/000/junk.json'), '{}\n');
  git(nocommit, 'add', 'blocks');
  git(nocommit, '-c', 'user.name=x', '-c', 'user.email=x@x', 'commit', '-q', '-m', 'junk');
  await expectVouchError(() => ChainRepo.open(nocommit), 'not_a_chain');
  const before = snapshot(nocommit);
  assert.is(snapshot(nocommit), before);

  // init refuses existing repositories and non-empty directories, and bad blocks before touching anything.
  await expectVouchError(() => ChainRepo.init(nocommit, blocks(0, 1), checkpoint(1), info(0)), 'chain_exists');
  await expectVouchError(() => ChainRepo.init(plain, blocks(0, 1), checkpoint(1), info(0)), 'chain_exists');
  const never = fresh('never');
  await expectVouchError(() => ChainRepo.init(never, blocks(1, 2), checkpoint(2), info(0)), 'bad_request');
  await expectVouchError(() => ChainRepo.init(never, [], checkpoint(0), info(0)), 'bad_request');
  await expectVouchError(() => ChainRepo.init(never, blocks(0, 1), checkpoint(1), { ...info(0), authorEmail: 'a<b' }), 'bad_request');
  assert.not.ok(existsSync(never));

  const dir = fresh('wrong');
  const repo = await ChainRepo.init(dir, blocks(0, 3), checkpoint(3), info(0));
  await expectVouchError(() => ChainRepo.init(dir, blocks(0, 1), checkpoint(1), info(0)), 'chain_exists');
  const snap = snapshot(dir);
  const head = repo.head;
  await expectVouchError(() => repo.append([block(4)], checkpoint(5), info(4)), 'bad_request');
  await expectVouchError(() => repo.append([block(2)], checkpoint(3), info(2)), 'bad_request');
  await expectVouchError(() => repo.append([block(3), block(5)], checkpoint(6), info(3)), 'bad_request');
  await expectVouchError(() => repo.append([], checkpoint(3), info(3)), 'bad_request');
  await expectVouchError(() => repo.append([{ index: 3, content: 42 as unknown as string }], checkpoint(4), info(3)), 'bad_request');
  await expectVouchError(() => repo.append([block(3)], checkpoint(4), { ...info(3), timestamp: -1 }), 'bad_request');
  assert.is(repo.head, head);
  assert.is(repo.size, 3);
  assert.is(snapshot(dir), snap, 'repository untouched');
  assertGitClean(dir, 4, 'after bad appends');
  await repo.append([block(3)], checkpoint(4), info(3));
  assert.is(repo.size, 4);
});

test('open without repair writes nothing and refuses to append while behind the branch', async () => {
  const dir = fresh('norepair');
  const repo = await ChainRepo.init(dir, blocks(0, 4), checkpoint(4), info(0));
  const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
    env: { ...process.env, VOUCH_CHAIN_REPO_CHILD: dir, VOUCH_CRASH_POINT: 'after-ref' },
    encoding: 'utf8',
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
  });
  assert.is(child.signal, 'SIGKILL');
  const snap = snapshot(dir);
  const ro = await ChainRepo.open(dir, { repair: false });
  assert.is(ro.size, 5);
  assert.not.ok(ro.inSync);
  assert.is(ro.readBlockFile(4), block(4).content, 'blocks are read from git objects, whatever the working tree holds');
  assert.is(snapshot(dir), snap, 'nothing written');
  await expectVouchError(() => ro.append([block(5)], checkpoint(6), info(5)), 'io_error');
  assert.is(await ro.readBlockFromGit(4), block(4).content);
  assert.ok(repo);
  const rw = await ChainRepo.open(dir);
  assert.ok(rw.inSync);
  assertGitClean(dir, 6, 'after repair');
  assert.is(rw.readBlockFile(4), block(4).content);
});

test.run();
