/**
 * The mirror clone's directory is vouch's layout, whatever does the transfer
 * (the hand-written upload-pack client before issue 33, stock git behind
 * store/git-fetch-proxy.ts after): every file under `.git` but the objects
 * named and byte-for-byte as the hand-written clone wrote them (config,
 * HEAD, description, refs, shallow, state file, sparse-checkout), the index
 * of two entries, the objects loose or as one pack and its index, `git
 * status` clean, no clone marker.
 * Owns: its temporary directory and git server. Trusts: the real git CLI.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { buildCheckpoint } from '../../chain/build.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { SPARSE_CONFIG, SPARSE_INDEX_CONFIG, SPARSE_PATTERNS } from '../../store/sparse-layout.ts';
import { T0, buildLongChain, initChainRepo, testSigner } from '../helpers/chain-fixture.ts';
import { GitServer } from '../helpers/git-server.ts';
import { gitIn } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-clone-layout-'));
let server: GitServer;

test.before(async () => {
  mkdirSync(join(work, 'srv'));
  server = await GitServer.start(join(work, 'srv'));
});
test.after(async () => {
  await server?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** Every file under `dir`, relative, sorted (directories end in `/` when empty). */
function files(dir: string, rel = ''): string[] {
  const out: string[] = [];
  const entries = readdirSync(join(dir, rel), { withFileTypes: true });
  if (entries.length === 0 && rel) out.push(`${rel}/`);
  for (const e of entries) {
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...files(dir, p));
    else out.push(p);
  }
  return out.sort();
}

async function cloneOf(blocks: number, name: string): Promise<{ dir: string; url: string; head: string; objects: string[] }> {
  const chain = buildLongChain(blocks, testSigner());
  const src = join(work, `${name}-src`);
  // Two commits, so that the clone is shallow (a root commit is not).
  const last = chain.blocks[chain.blocks.length - 1]!;
  const before = chain.blocks[chain.blocks.length - 2]!;
  const repo0 = await initChainRepo(src, chain.blocks.slice(0, -1), buildCheckpoint({ head: before, signer: testSigner(), now: T0 + 40_000 }));
  await appendSigned(repo0, [last], buildCheckpoint({ head: last, signer: testSigner(), now: T0 + 50_000 }), T0 + 50_000);
  server.initBare(`${name}.git`);
  // Asynchronously: the git server answers from this process.
  await promisify(execFile)('git', ['-C', src, 'push', '-q', server.url(`${name}.git`), 'main'], { env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' } });
  const url = server.url(`${name}.git`);
  const dir = join(work, name);
  const repo = await ChainRepo.clone(url, dir);
  assert.is(repo.size, blocks);
  const head = gitIn(src, 'rev-parse', 'main').trim();
  const objects = gitIn(dir, 'cat-file', '--batch-all-objects', '--batch-check=%(objectname)').trim().split('\n').sort();
  return { dir, url, head, objects };
}

function expectLayout(c: { dir: string; url: string; head: string; objects: string[] }): void {
  const g = (p: string) => readFileSync(join(c.dir, '.git', p), 'utf8');
  assert.is(
    g('config'),
    '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n' +
      SPARSE_CONFIG +
      SPARSE_INDEX_CONFIG +
      `[remote "origin"]\n\turl = ${c.url}\n\tfetch = +refs/heads/main:refs/remotes/origin/main\n` +
      '[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n',
  );
  assert.is(g('HEAD'), 'ref: refs/heads/main\n');
  assert.is(g('description'), 'vouch chain repository (mirror)\n');
  assert.is(g('refs/heads/main'), `${c.head}\n`);
  assert.is(g('refs/remotes/origin/main'), `${c.head}\n`);
  assert.is(g('shallow'), `${c.head}\n`);
  assert.is(g('info/sparse-checkout'), SPARSE_PATTERNS);
  const size = Number(gitIn(c.dir, 'show', `${c.head}:checkpoint.json`).match(/"size": (\d+)/)?.[1] ?? Number.NaN);
  assert.is(g('vouch-state.json'), `${JSON.stringify({ version: 1, commit: c.head, size })}\n`);
  // The sparse index: checkpoint.json and the one `blocks/` sparse-directory entry.
  const index = gitIn(c.dir, 'ls-files', '--sparse', '-s').trim().split('\n');
  assert.is(index.length, 2, index.join('\n'));
  assert.match(index[0]!, /^040000 [0-9a-f]{40} 0\tblocks\/$/);
  assert.match(index[1]!, /^100644 [0-9a-f]{40} 0\tcheckpoint\.json$/);
  assert.is(gitIn(c.dir, 'status', '--porcelain'), '');
  // The objects: loose or one pack and its index (stock git keeps a pack whatever its size when it checks every object).
  const packs = readdirSync(join(c.dir, '.git', 'objects', 'pack'));
  const loose = packs.length === 0;
  if (!loose) assert.equal(packs.map((p) => p.replace(/[0-9a-f]{40}/, 'X')).sort(), ['pack-X.idx', 'pack-X.pack']);
  const objectFiles = loose ? c.objects.map((o) => `objects/${o.slice(0, 2)}/${o.slice(2)}`) : [];
  assert.ok(objectFiles.every((f) => statSync(join(c.dir, '.git', f)).isFile()));
  const rest = files(join(c.dir, '.git')).filter((f) => !objectFiles.includes(f) && !/^objects\/pack\/pack-[0-9a-f]{40}\.(pack|idx)$/.test(f));
  assert.equal(
    rest,
    [
      'HEAD',
      'config',
      'description',
      'index',
      'info/sparse-checkout',
      'objects/info/',
      ...(loose ? ['objects/pack/'] : []),
      'refs/heads/main',
      'refs/remotes/origin/main',
      'refs/tags/',
      'shallow',
      'vouch-state.json',
    ].sort(),
  );
  assert.equal(
    files(c.dir).filter((f) => !f.startsWith('.git/')),
    ['checkpoint.json'],
  );
}

test('a small clone: the layout the hand-written clone made', async () => {
  const c = await cloneOf(30, 'small');
  assert.ok(c.objects.length < 100, `${c.objects.length} objects`);
  expectLayout(c);
});

test('a clone of 300 blocks: the same layout', async () => {
  const c = await cloneOf(300, 'large');
  assert.ok(c.objects.length >= 100, `${c.objects.length} objects`);
  expectLayout(c);
});

test.run();
