/**
 * A sparse chain whose pack stock git wrote (`git repack -a -d -f`: the
 * block blobs stored as deltas, as a clone or `git gc` leaves them):
 * verification reads the deltas through `git cat-file --batch`
 * (store/git-cat-file.ts, one per verify worker) by default, through the
 * hand-written pack reader with `VOUCH_PACK_READER=vouch`, with the same
 * answers either way, and leaves no git process behind.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { buildCheckpoint } from '../../chain/build.ts';
import { isVouchError } from '../../chain/errors.ts';
import { ChainRepo, type BlockFile } from '../../store/chain-repo.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import { buildLongChain, T0 } from '../helpers/chain-fixture.ts';
import { until } from '../helpers/gateway-process.ts';
import { gitIn } from '../helpers/processes.ts';

const N = 2_600; // above parallel-verify's inline bound: the workers read the packs
const chain = buildLongChain(N);
const files = (from: number, to: number): BlockFile[] => chain.blocks.slice(from, to).map((b) => ({ index: b.index, content: formatBlockFile(b) }));
const cpText = formatCheckpointFile(buildCheckpoint({ head: chain.blocks[N - 1]!, signer: chain.signer, now: T0 + N * 1000 }));
const root = mkdtempSync(join(tmpdir(), 'vouch-gitpacked-test-'));
test.after(() => rmSync(root, { recursive: true, force: true }));
let seq = 0;

/** A sparse chain of N blocks repacked by git; how many objects git stored as deltas. */
async function gitPacked(): Promise<{ dir: string; deltas: number }> {
  const dir = join(root, `chain-${seq++}`);
  await ChainRepo.init(dir, files(0, N), cpText, { message: 'init\n', authorName: 'A', authorEmail: 'a@vouch.invalid', timestamp: 1_760_000_000 });
  gitIn(dir, 'repack', '-a', '-d', '-f', '-q');
  const deltas = gitIn(dir, 'cat-file', '--batch-all-objects', '--batch-check=%(deltabase)')
    .split('\n')
    .filter((l) => /^[0-9a-f]{40}$/.test(l) && l !== '0'.repeat(40)).length;
  return { dir, deltas };
}

/** `git cat-file` processes this process started (children of its pid). */
function catFileChildren(): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === process.pid && readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('cat-file')) out.push(Number(p));
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

/** verifyDirectory with VOUCH_PACK_READER set (the workers copy the environment when they start); whether a cat-file child was seen meanwhile. */
async function verifyWith(reader: 'git' | 'vouch', dir: string, threads = 2) {
  const before = process.env.VOUCH_PACK_READER;
  process.env.VOUCH_PACK_READER = reader;
  let seen = false;
  const poll = setInterval(() => {
    if (catFileChildren().length > 0) seen = true;
  }, 5);
  try {
    const repo = await ChainRepo.open(dir, { repair: false });
    const texts: string[] = [];
    const r = await verifyDirectory(repo, {
      threads,
      onVerified: (_s, t) => {
        texts.push(...t);
      },
    });
    return { size: r.state.size, texts, seen };
  } finally {
    clearInterval(poll);
    if (before === undefined) delete process.env.VOUCH_PACK_READER;
    else process.env.VOUCH_PACK_READER = before;
  }
}

test('a chain packed by git: the workers read its deltas through git cat-file --batch, the same texts as the hand-written reader; no git left behind', async () => {
  const { dir, deltas } = await gitPacked();
  assert.ok(deltas > N / 2, `git stored ${deltas} objects as deltas`);
  const byGit = await verifyWith('git', dir);
  assert.is(byGit.size, N);
  assert.ok(byGit.seen, 'a git cat-file process read the deltas');
  // The git reader's processes end once its workers do; on a loaded machine that outlasts the verify's return.
  await until('the cat-file processes of the git reader to end (none left behind)', () => catFileChildren().length === 0, 10_000, 20);
  const byVouch = await verifyWith('vouch', dir);
  assert.is(byVouch.size, N);
  assert.not.ok(byVouch.seen, 'VOUCH_PACK_READER=vouch starts no git cat-file');
  assert.equal(byGit.texts, byVouch.texts);
  assert.is(byGit.texts[2_345], formatBlockFile(chain.blocks[2_345]!));
  assert.equal(catFileChildren(), [], 'no git cat-file left behind');
});

test('a damaged object in a pack git wrote: the same failure, at the same block, by either reader', async () => {
  const { dir } = await gitPacked();
  const repo = await ChainRepo.open(dir, { repair: false });
  const committed = await repo.committedFiles();
  const target = 2_100;
  const at = repo.blockObjects().where(Buffer.from(committed.oidOf(target)!, 'hex'))!;
  const pack = join(dir, '.git', 'objects', 'pack', `${at.pack}.pack`);
  const fd = openSync(pack, 'r+');
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, at.offset + 8); // inside the object's deflated data (past its header and a delta's base offset)
  b[0] = b[0]! ^ 0x55;
  writeSync(fd, b, 0, 1, at.offset + 8);
  closeSync(fd);
  const failures: string[] = [];
  for (const reader of ['git', 'vouch'] as const) {
    try {
      await verifyWith(reader, dir);
      assert.unreachable(`${reader}: a damaged block object must fail verification`);
    } catch (e) {
      if (!isVouchError(e)) throw e;
      assert.is(e.code, 'malformed', `${reader}: ${e.message}`);
      failures.push(`${e.index}`);
    }
  }
  assert.is(failures[0], failures[1], 'both readers stop at the same block');
});

test.run();
