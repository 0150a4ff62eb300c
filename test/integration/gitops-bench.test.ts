/**
 * The stock-git sides of `npm run bench -- gitops` do the work they are
 * compared on: bench/gitops/stock-git.ts's writers (plumbing, plumbing with
 * directory fsyncs, fast-import) write the very commits `ChainRepo.append`
 * writes, `git fsck --strict` clean; store/git-fetch-proxy.ts (the
 * bench's bounding proxy) cuts a `git clone` past its byte bounds and passes an honest one whole.
 * Owns: its temporary directory. Trusts: the real git CLI and
 * test/helpers/git-server.ts (git http-backend on 127.0.0.1).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FastImportWriter, PlumbingWriter, type StockWriter } from '../../bench/gitops/stock-git.ts';
import { GitFetchProxy } from '../../store/git-fetch-proxy.ts';
import type { FetchOptions } from '../../store/chain-repo.ts';
import { ChainRepo, type BlockFile, type CommitInfo } from '../../store/chain-repo.ts';
import { GitServer } from '../helpers/git-server.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-gitops-test-'));
const block = (i: number): BlockFile => ({ index: i, content: `${JSON.stringify({ index: i, text: `block ${i} `.repeat(20) }, null, 2)}\n` });
const info = (i: number): CommitInfo => ({
  message: `block ${i}: endorse t/unit 1.0.${i}\n`,
  authorName: 'test',
  authorEmail: 'test@vouch.invalid',
  timestamp: 1_790_000_000 + i,
});
const cp = (n: number) => `${JSON.stringify({ size: n })}\n`;

function git(dir: string, ...args: string[]): { status: number | null; out: string; err: string } {
  const r = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout.trim(), err: r.stderr };
}

async function sparseChain(dir: string, n: number): Promise<ChainRepo> {
  return ChainRepo.init(
    dir,
    Array.from({ length: n }, (_, i) => block(i)),
    cp(n),
    info(0),
  );
}

test.after(() => rmSync(work, { recursive: true, force: true }));

test('the stock-git writers write the commits ChainRepo.append writes, fsck clean', async () => {
  // 998 blocks: the appends cross into a new leaf directory (blocks/000/001/), so a new tree is made too.
  const base = join(work, 'w-vouch');
  await sparseChain(base, 998);
  const sides = ['plumbing', 'plumbing-dirsync', 'fastimport'];
  for (const s of sides) cpSync(base, join(work, `w-${s}`), { recursive: true });
  const repo = await ChainRepo.open(base);
  const writers: StockWriter[] = [
    new PlumbingWriter(join(work, 'w-plumbing')),
    new PlumbingWriter(join(work, 'w-plumbing-dirsync'), true),
    new FastImportWriter(join(work, 'w-fastimport')),
  ];
  for (let i = 998; i < 1004; i++) {
    await repo.append([block(i)], cp(i + 1), info(i));
    for (const w of writers) await w.append(block(i), cp(i + 1), info(i));
  }
  for (const w of writers) await w.close();
  const want = git(base, 'rev-parse', 'main').out;
  assert.match(want, /^[0-9a-f]{40}$/);
  for (const s of sides) {
    const dir = join(work, `w-${s}`);
    assert.is(git(dir, 'rev-parse', 'main').out, want, `${s} ends at vouch's commit`);
    const fsck = git(dir, 'fsck', '--strict', '--no-dangling');
    assert.is(fsck.status, 0, `${s}: ${fsck.err}`);
    assert.is(readFileSync(join(dir, 'checkpoint.json'), 'utf8'), cp(1004), `${s} wrote checkpoint.json`);
  }
  assert.is(git(base, 'rev-list', '--count', 'main').out, '7');
});

test('the bounding proxy cuts a git clone past its byte bounds and passes an honest one', async () => {
  const src = join(work, 'p-src');
  await sparseChain(src, 300);
  const gs = await GitServer.start(work);
  const bare = join(work, 'p.git');
  assert.is(spawnSync('git', ['clone', '-q', '--bare', src, bare]).status, 0);
  try {
    // Asynchronously: the git server and the proxy run in this process.
    const run = (limits: FetchOptions, dir: string) =>
      new Promise<{ status: number | null; cut: number }>((resolve) => {
        void (async () => {
          const proxy = await GitFetchProxy.start(gs.url('p.git'), limits);
          const c = spawn('git', ['clone', '-q', proxy.url, dir], { stdio: 'ignore', env: { ...process.env, GIT_TERMINAL_PROMPT: '0' } });
          c.on('close', async (status) => {
            const cut = proxy.cut;
            await proxy.close();
            resolve({ status, cut });
          });
        })();
      });
    const small = await run({ maxBytes: 4096 }, join(work, 'p-small'));
    assert.not.equal(small.status, 0, 'a pack past packBytes fails the clone');
    assert.ok(small.cut >= 1);
    const refs = await run({ maxBytes: 16 }, join(work, 'p-refs'));
    assert.not.equal(refs.status, 0, 'an advertisement past advertisementBytes fails the clone');
    assert.not.ok(existsSync(join(work, 'p-refs', '.git')), 'git removes a failed clone');
    const honest = await run({}, join(work, 'p-ok'));
    assert.is(honest.status, 0);
    assert.is(honest.cut, 0);
    assert.is(git(join(work, 'p-ok'), 'rev-parse', 'main').out, git(src, 'rev-parse', 'main').out);
  } finally {
    await gs.stop();
  }
});

test.run();
