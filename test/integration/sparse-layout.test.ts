/**
 * Tests of the sparse layout (store/sparse-layout.ts through
 * store/chain-repo.ts and store/parallel-verify.ts): a chain whose block
 * files live only in git objects, with git's own sparse checkout and sparse
 * index, judged by the real git CLI (`status`, `ls-files --sparse`,
 * `fsck --strict`, `show`, `clone`, `sparse-checkout`).
 *
 * Owns: nothing outside its temporary directories.
 * Trusts: the installed `git` as the judge of repositories and indexes.
 * Must hold: after init, append, clone, fast-forward and every repair,
 * `git status --porcelain` is empty, the working tree holds no blocks/, and
 * verification (workers and inline) reads the blocks from git objects and
 * finds a damaged object at its block.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
  closeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { buildCheckpoint } from '../../chain/build.ts';
import { isVouchError } from '../../chain/errors.ts';
import { ChainRepo, blockPath, type BlockFile, type CommitInfo } from '../../store/chain-repo.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import { isSparse } from '../../store/sparse-layout.ts';
import { buildLongChain, T0 } from '../helpers/chain-fixture.ts';
import { GitServer } from '../helpers/git-server.ts';
import { startGatewayProcess, writeConfig } from '../helpers/gateway-process.ts';
import { gitIn, vouch } from '../helpers/processes.ts';
import { base64Encode } from '../../chain/encoding.ts';

const N = 2_600; // above parallel-verify's inline bound: the workers read the packs
const chain = buildLongChain(N + 3);
const files = (from: number, to: number): BlockFile[] => chain.blocks.slice(from, to).map((b) => ({ index: b.index, content: formatBlockFile(b) }));
const cpText = (n: number) => formatCheckpointFile(buildCheckpoint({ head: chain.blocks[n - 1]!, signer: chain.signer, now: T0 + n * 1000 }));
const info = (i: number): CommitInfo => ({
  message: `block ${i}\n`,
  authorName: 'Vouch Authority',
  authorEmail: 'authority@vouch.invalid',
  timestamp: 1_760_000_000 + i,
});

const root = mkdtempSync(join(tmpdir(), 'vouch-sparse-test-'));
let seq = 0;
const fresh = (name: string) => join(root, `${name}-${seq++}`);
test.after(() => rmSync(root, { recursive: true, force: true }));

const git = gitIn;

/** What git says of a sparse chain: clean, two index entries, no blocks/ on disk, objects sound. */
function assertSparseClean(dir: string, size: number): void {
  assert.is(git(dir, 'status', '--porcelain'), '', 'git status is clean');
  assert.equal(git(dir, 'ls-files', '--sparse').split('\n').filter(Boolean), ['blocks/', 'checkpoint.json'], 'a sparse index: blocks/ stands for the tree');
  assert.ok(statSync(join(dir, '.git', 'index')).size < 1024, 'the index stays tiny');
  assert.not.ok(existsSync(join(dir, 'blocks')), 'no block file in the working tree');
  git(dir, 'fsck', '--strict', '--no-progress');
  assert.is(git(dir, 'show', `HEAD:${blockPath(size - 1)}`), formatBlockFile(chain.blocks[size - 1]!), 'git show reads the last block');
}

async function makeSparse(n = N): Promise<{ dir: string; repo: ChainRepo }> {
  const dir = fresh('sparse');
  const repo = await ChainRepo.init(dir, files(0, n), cpText(n), info(0));
  return { dir, repo };
}

test('init: git sees a clean sparse checkout, blocks only in git objects', async () => {
  const { dir, repo } = await makeSparse();
  assert.ok(repo.sparse);
  assert.ok(isSparse(join(dir, '.git')));
  assert.is(readFileSync(join(dir, '.git', 'info', 'sparse-checkout'), 'utf8'), '/*\n!/*/\n');
  assertSparseClean(dir, N);
  assert.is(repo.readBlockFile(7), formatBlockFile(chain.blocks[7]!), 'blocks are read from the pack');
  assert.is(repo.readBlockFile(N - 1), formatBlockFile(chain.blocks[N - 1]!));
});

test('verification reads the blocks from the packs (workers and inline) and hands back every text', async () => {
  const { repo } = await makeSparse();
  for (const threads of [2, 0]) {
    const got: string[] = [];
    const r = await verifyDirectory(repo, {
      threads,
      onVerified: (start, texts) => {
        assert.is(start, got.length);
        got.push(...texts);
      },
    });
    assert.is(r.state.size, N, `threads ${threads}`);
    assert.is(got.length, N);
    assert.is(got[2_345], formatBlockFile(chain.blocks[2_345]!));
  }
});

test('appends keep the sparse layout: checkpoint and a two-entry index, the blocks readable and verified', async () => {
  const { dir, repo } = await makeSparse();
  for (let i = N; i < N + 3; i++) await repo.append(files(i, i + 1), cpText(i + 1), info(i));
  assertSparseClean(dir, N + 3);
  assert.is(repo.readBlockFile(N + 1), formatBlockFile(chain.blocks[N + 1]!));
  assert.is(repo.readBlockFile(999), formatBlockFile(chain.blocks[999]!), 'an earlier shard after the last one changed');
  assert.is(readFileSync(join(dir, 'checkpoint.json'), 'utf8'), cpText(N + 3));
  const reopened = await ChainRepo.open(dir);
  assert.equal(reopened.repairs, [], 'nothing to repair after clean appends');
  assert.is((await verifyDirectory(reopened)).state.size, N + 3);
});

test('a damaged object in the pack is a failure at its block, by the workers and inline', async () => {
  const { dir, repo } = await makeSparse();
  const target = 2_100;
  const committed = await repo.committedFiles();
  const oid = Buffer.from(committed.oidOf(target)!, 'hex');
  const at = repo.blockObjects().where(oid)!;
  assert.ok(at, 'the block is in a pack');
  const pack = join(dir, '.git', 'objects', 'pack', `${at.pack}.pack`);
  // Flip a byte inside the object's deflated data (past its 2-3 byte header): zlib's checksum or the blob id catches it.
  const fd = openSync(pack, 'r+');
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, at.offset + 40);
  b[0] = b[0]! ^ 0x55;
  writeSync(fd, b, 0, 1, at.offset + 40);
  closeSync(fd);
  for (const threads of [2, 0]) {
    const fresh = await ChainRepo.open(dir, { repair: false });
    try {
      await verifyDirectory(fresh, { threads });
      assert.unreachable('a damaged block object must fail verification');
    } catch (e) {
      if (!isVouchError(e)) throw e;
      assert.is(e.code, 'malformed', `threads ${threads}: ${e.message}`);
      assert.is(e.index, target, e.message);
      assert.match(e.message, blockPath(target));
    }
  }
});

test('open() repairs a sparse chain: a lost checkpoint file, a broken index, a blocks/ directory put back', async () => {
  const { dir } = await makeSparse();
  rmSync(join(dir, 'checkpoint.json'));
  writeFileSync(join(dir, '.git', 'index'), 'not an index');
  const repo = await ChainRepo.open(dir);
  const actions = repo.repairs.map((r) => `${r.action} ${r.path}`);
  assert.ok(actions.includes('restored checkpoint.json'), actions.join(', '));
  assert.ok(actions.includes('reindexed .git/index'), actions.join(', '));
  assertSparseClean(dir, N);
});

/**
 * A chain in the full layout as vouch before the one layout wrote it, or as
 * a plain `git clone` checks it out: made with git alone (`git init`, every
 * block file and checkpoint.json committed), no sparse-checkout configuration.
 */
function fullLayoutChain(n = N): string {
  const dir = fresh('full');
  mkdirSync(dir);
  git(dir, 'init', '-q', '-b', 'main');
  for (const f of files(0, n)) {
    mkdirSync(join(dir, blockPath(f.index), '..'), { recursive: true });
    writeFileSync(join(dir, blockPath(f.index)), f.content);
  }
  writeFileSync(join(dir, 'checkpoint.json'), cpText(n));
  git(dir, 'add', '-A');
  git(dir, '-c', 'user.name=Vouch Authority', '-c', 'user.email=authority@vouch.invalid', 'commit', '-q', '-m', 'block 0\n');
  assert.ok(existsSync(join(dir, blockPath(n - 1))) && !isSparse(join(dir, '.git')), 'the fixture is checked out in full');
  return dir;
}

/** Everything in `dir` but git's objects, with contents: what a refused open must leave as it found it. */
function tree(dir: string): string {
  const out: string[] = [];
  const walk = (d: string, rel: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (r === '.git/objects') continue;
      if (e.isDirectory()) walk(join(d, e.name), r);
      else out.push(`${r} ${readFileSync(join(d, e.name)).toString('base64')}`);
    }
  };
  walk(dir, '');
  return out.join('\n');
}

test('a chain in the full layout (made with plain git) converts when opened for writing: git clean, blocks byte-equal, appends', async () => {
  const dir = fullLayoutChain();
  const head = git(dir, 'rev-parse', 'HEAD').trim();
  const repo = await ChainRepo.open(dir);
  const actions = repo.repairs.map((r) => `${r.action} ${r.path}`);
  assert.ok(actions.includes('removed blocks'), actions.join(', '));
  assert.ok(actions.includes('restored .git/config'), actions.join(', '));
  assert.ok(actions.includes('reindexed .git/index'), actions.join(', '));
  assert.ok(isSparse(join(dir, '.git')), 'git configuration says sparse');
  assert.is(repo.head, head, 'the branch is untouched');
  assertSparseClean(dir, N);
  for (let i = 0; i < N; i++) assert.is(repo.readBlockFile(i), formatBlockFile(chain.blocks[i]!), `block ${i}`);
  assert.is((await verifyDirectory(repo)).state.size, N);
  await repo.append(files(N, N + 1), cpText(N + 1), info(N));
  assertSparseClean(dir, N + 1);
  assert.is(git(dir, 'rev-parse', 'HEAD~1').trim(), head);
  const again = await ChainRepo.open(dir);
  assert.equal(again.repairs, [], 'converted once');
  // git sparse-checkout disable checks every file out again (as a plain clone has it): the next open converts it back.
  git(dir, 'sparse-checkout', 'disable');
  assert.is(readFileSync(join(dir, blockPath(N)), 'utf8'), formatBlockFile(chain.blocks[N]!), 'git checked the files out again');
  await ChainRepo.open(dir);
  assertSparseClean(dir, N + 1);
  // The settings replace git's own values: one value each, so git can set them again.
  assert.equal(git(dir, 'config', '--get-all', 'core.sparseCheckout').trim().split('\n').at(-1), 'true');
  git(dir, 'sparse-checkout', 'disable');
  await ChainRepo.open(dir);
  assertSparseClean(dir, N + 1);
});

test('a modified or extra file under blocks/ of a full-layout chain is refused by name, and nothing is deleted or changed', async () => {
  const dir = fullLayoutChain(50);
  const cases: { path: string; apply: () => void; undo: () => void; why: RegExp }[] = [
    {
      path: blockPath(7),
      apply: () => writeFileSync(join(dir, blockPath(7)), 'edited by hand\n'),
      undo: () => git(dir, 'checkout', '--', blockPath(7)),
      why: /differs from branch main/,
    },
    {
      path: blockPath(50),
      apply: () => writeFileSync(join(dir, blockPath(50)), formatBlockFile(chain.blocks[50]!)),
      undo: () => rmSync(join(dir, blockPath(50))),
      why: /is not on branch main/,
    },
    {
      path: 'blocks/000/000/notes.txt',
      apply: () => writeFileSync(join(dir, 'blocks/000/000/notes.txt'), 'mine\n'),
      undo: () => rmSync(join(dir, 'blocks/000/000/notes.txt')),
      why: /is not on branch main/,
    },
  ];
  for (const c of cases) {
    c.apply();
    const before = tree(dir);
    try {
      await ChainRepo.open(dir);
      assert.unreachable(`${c.path}: the open must refuse`);
    } catch (e) {
      if (!isVouchError(e)) throw e;
      assert.is(e.code, 'io_error', e.message);
      assert.ok(e.message.includes(c.path), e.message);
      assert.match(e.message, c.why);
      assert.not.match(e.message, /\n/, 'one line');
    }
    assert.is(tree(dir), before, `${c.path}: nothing deleted or changed`);
    assert.not.ok(isSparse(join(dir, '.git')));
    c.undo();
  }
  const repo = await ChainRepo.open(dir);
  assert.is(repo.size, 50);
  assertSparseClean(dir, 50);
});

test('vouch verify on a plain git clone (every block file checked out) succeeds and leaves the clone as it was', async () => {
  const { dir } = await makeSparse();
  const clone = fresh('clone');
  git(root, 'clone', '-q', '--no-local', dir, clone);
  assert.ok(existsSync(join(clone, blockPath(N - 1))), 'a plain clone checks out every block file (no sparse-checkout configuration is cloned)');
  assert.not.ok(isSparse(join(clone, '.git')));
  const status = git(clone, 'status', '--porcelain', '--untracked-files=all');
  const before = tree(clone);
  const v = vouch(['verify', '--chain', clone, '--json']);
  assert.is(v.status, 0, v.stderr);
  assert.is(JSON.parse(v.stdout).blocks, N);
  assert.is(git(clone, 'status', '--porcelain', '--untracked-files=all'), status, 'git status --porcelain before == after');
  assert.is(tree(clone), before, 'not a file of the clone changed');
  // What vouch reads is git's objects: a block file edited in the clone's working tree changes nothing.
  writeFileSync(join(clone, blockPath(5)), 'edited\n');
  const again = vouch(['verify', '--chain', clone, '--json']);
  assert.is(again.status, 0, again.stderr);
  assert.is(readFileSync(join(clone, blockPath(5)), 'utf8'), 'edited\n');
});

test('a sparse clone over smart HTTP checks out no block file and verifies from its pack', async () => {
  const { dir } = await makeSparse();
  const served = fresh('served');
  spawnSync('git', ['clone', '--bare', '-q', dir, join(served, 'chain.git')]);
  const server = await GitServer.start(served);
  try {
    const mirror = fresh('mirror');
    const repo = await ChainRepo.clone(server.url('chain.git'), mirror);
    assert.ok(repo.sparse);
    assert.ok(isSparse(join(mirror, '.git')));
    assertSparseClean(mirror, N);
    repo.dropFetched();
    assert.is((await verifyDirectory(repo)).state.size, N);
    assert.equal((await ChainRepo.open(mirror)).repairs, []);
    // The authority appends; the mirror fetches and fast-forwards, still sparse and clean.
    const source = await ChainRepo.open(dir);
    for (let i = N; i < N + 2; i++) await source.append(files(i, i + 1), cpText(i + 1), info(i));
    git(join(served, 'chain.git'), 'fetch', '-q', dir, '+main:main');
    const got = await repo.fetch(server.url('chain.git'));
    assert.is(got.commit, source.head);
    await repo.fastForward(got.commit);
    assert.is(repo.size, N + 2);
    assertSparseClean(mirror, N + 2);
    assert.is(repo.readBlockFile(N + 1), formatBlockFile(chain.blocks[N + 1]!));
    assert.is((await verifyDirectory(repo)).state.size, N + 2);
  } finally {
    await server.stop();
  }
});

test('a gateway on a sparse chain: cold then warm start, lookups served from git objects, no second copy of the texts', async () => {
  const { dir } = await makeSparse();
  const config = writeConfig(root, { listen: { port: 0 }, chain: { dir, public_key: base64Encode(chain.signer.publicKey) } }, `sparse-${seq++}.yaml`);
  const run = async (): Promise<{ stdout: string; block: any; lookup: any }> => {
    const gw = await startGatewayProcess(['--config', config], { readyTimeoutMs: 120_000 });
    try {
      const block = await (await fetch(`${gw.url}/v1/block?index=1234`)).json();
      const url = (chain.blocks[2_222]!.payload as any).endorsements[0].artifact_url as string;
      const lookup = await (await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(url)}`)).json();
      return { stdout: gw.stdout(), block, lookup };
    } finally {
      await gw.stop();
    }
  };
  const cold = await run();
  assert.match(cold.stdout, new RegExp(`cold start, ${N} verified`));
  assert.is(cold.block.record_hash, chain.blocks[1_234]!.record_hash);
  assert.is(cold.lookup.record_hash, chain.blocks[2_222]!.record_hash, JSON.stringify(cold.lookup).slice(0, 300));
  assert.not.ok(existsSync(join(dir, '.git', 'vouch-blocks.cache')), 'the texts are not copied out of the pack');
  assert.ok(statSync(join(dir, '.git', 'vouch-blocks.idx')).size === N * 36, 'each text is known by its length and sha256');
  const warm = await run();
  assert.match(warm.stdout, /warm start, 0 verified/);
  assert.is(warm.block.record_hash, chain.blocks[1_234]!.record_hash);
  assert.is(warm.lookup.record_hash, chain.blocks[2_222]!.record_hash);
  assertSparseClean(dir, N);
});

test('vouch init --layout sparse, endorse and verify from the command line', () => {
  const work = fresh('cli');
  mkdirSync(work);
  const key = join(work, 'authority.pem');
  const c = join(work, 'chain');
  assert.is(vouch(['keygen', '--out', key]).status, 0);
  const init = vouch(['init', '--chain', c, '--key', key, '--signer', 'acme', '--layout', 'sparse']);
  assert.is(init.status, 0, init.stderr);
  assert.not.ok(existsSync(join(c, 'blocks')), 'no block file checked out');
  const file = join(work, 'w.js');
  writeFileSync(file, 'console.log(1);\n');
  for (const v of ['1.0.0', '1.0.1']) {
    const r = vouch([
      'endorse',
      '--chain',
      c,
      '--key',
      key,
      '--url',
      `https://cdn.example/w-${v}.js`,
      '--file',
      file,
      '--name',
      'acme/w',
      '--semver',
      v,
      '--license',
      'MIT',
    ]);
    assert.is(r.status, 0, r.stderr);
  }
  const v = vouch(['verify', '--chain', c, '--json']);
  assert.is(v.status, 0, v.stderr);
  assert.is(JSON.parse(v.stdout).blocks, 3);
  assert.is(git(c, 'status', '--porcelain'), '');
  assert.match(git(c, 'show', 'HEAD:blocks/000/000/000000002.json'), /w-1\.0\.1\.js/);
  const bad = vouch(['init', '--chain', join(work, 'other'), '--key', key, '--signer', 'acme', '--layout', 'thin']);
  assert.is(bad.status, 2);
  assert.match(bad.stderr, /--layout must be sparse/);
  const full = vouch(['init', '--chain', join(work, 'full'), '--key', key, '--signer', 'acme', '--layout', 'full']);
  assert.is(full.status, 2);
  assert.match(full.stderr, /--layout full was removed: .*converts when opened for writing/);
  assert.not.ok(existsSync(join(work, 'full')), 'nothing created');
  const plain = vouch(['init', '--chain', join(work, 'plain'), '--key', key, '--signer', 'acme']);
  assert.is(plain.status, 0, plain.stderr);
  assert.ok(isSparse(join(work, 'plain', '.git')), 'the default is the sparse layout');
  assert.not.ok(existsSync(join(work, 'plain', 'blocks')));
});

test.run();
