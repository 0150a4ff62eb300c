/**
 * The 1M rows of `npm run bench -- gitops --sizes=N` at 300 blocks: the
 * whole-process endorse row (bench/gitops/endorse-row.ts) leaves vouch and
 * both stock-git sides at one commit, a chain `vouch verify` accepts; the
 * fixture mode runs every row on both fixtures (as vouch packs, as git
 * packs) and writes nothing into them (bench/gitops/link-copy.ts).
 * Owns: its temporary directory. Trusts: the real git and vouch CLIs.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { endorseRow } from '../../bench/gitops/endorse-row.ts';
import { buildLongChain } from '../helpers/chain-fixture.ts';
import { vouch } from '../helpers/processes.ts';
import { repoRoot } from '../helpers/vectors.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-gitops-fixtures-'));
const N = 300; // the bench's least --sizes: every row runs at any size (the rows' point here is that they run and write nothing into the fixtures)
const sparse = join(work, `chain-${N}-sparse`);
const gitpacked = join(work, `chain-${N}-sparse-gitpacked`);

function git(dir: string, ...args: string[]): string {
  const r = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.trim();
}

/** Every file under `dir` with its size, mtime (to the millisecond) and a hash of its bytes: what a write into the fixture would change. */
function listing(dir: string, at = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(dir, at), { withFileTypes: true })) {
    const p = join(at, e.name);
    if (e.isDirectory()) out.push(`${p}/`, ...listing(dir, p));
    else {
      const st = statSync(join(dir, p));
      out.push(
        `${p} ${st.size} ${Math.round(st.mtimeMs)} ${createHash('sha256')
          .update(readFileSync(join(dir, p)))
          .digest('hex')}`,
      );
    }
  }
  return out.sort();
}

test.before(async () => {
  const { blocks, checkpoint } = buildLongChain(N);
  await ChainRepo.init(
    sparse,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(checkpoint),
    { message: `bench chain of ${N} blocks\n`, authorName: 'bench', authorEmail: 'bench@vouch.invalid', timestamp: 1_790_000_000 },
  );
  cpSync(sparse, gitpacked, { recursive: true });
  git(gitpacked, 'repack', '-q', '-a', '-d', '-f');
});
test.after(() => rmSync(work, { recursive: true, force: true }));

test('the endorse row: vouch and both stock-git sides end at one commit, a chain that verifies; the source untouched', async () => {
  for (const src of [sparse, gitpacked]) {
    const before = listing(src);
    const head0 = git(src, 'rev-parse', 'main');
    const rowWork = mkdtempSync(join(work, 'row-'));
    const row = await endorseRow(rowWork, src, 2, { keep: true });
    assert.match(row.heads.vouch, /^[0-9a-f]{40}$/);
    assert.is.not(row.heads.vouch, head0);
    assert.is(row.ms.vouch.length, 2);
    assert.ok(row.plumbingProcs >= 6, `plumbing ran ${row.plumbingProcs} processes`);
    for (const side of ['vouch', 'plumbing', 'fastimport'] as const) {
      const dir = join(rowWork, `endorse-${side}`);
      assert.is(git(dir, 'rev-parse', 'main'), row.heads.vouch, `${side} head`);
      assert.is(git(dir, 'rev-list', '--count', 'main'), '4', `${side}: the first commit, a warm-up and 2 endorses`);
      assert.is(readFileSync(join(dir, 'checkpoint.json'), 'utf8'), git(dir, 'show', 'main:checkpoint.json') + '\n', `${side} checkpoint.json`);
      const v = vouch(['verify', '--chain', dir]);
      assert.is(v.status, 0, `${side}: ${v.stderr}`);
    }
    assert.is(git(src, 'rev-parse', 'main'), head0);
    assert.equal(listing(src), before, 'nothing written into the source');
    rmSync(rowWork, { recursive: true, force: true });
  }
});

test('--sizes=N runs every row on both fixtures and leaves them as they were', () => {
  const before = [listing(sparse), listing(gitpacked)];
  const r = spawnSync(
    process.execPath,
    [
      '--import',
      'tsx',
      join(repoRoot, 'bench', 'gitops-bench.ts'),
      `--sizes=${N}`,
      '--quick',
      '--rounds=1',
      '--append-samples=4',
      '--endorse-samples=1',
      '--rows=append,endorse,clone,fetch,repack',
    ],
    { cwd: repoRoot, encoding: 'utf8', env: { ...process.env, VOUCH_GITOPS_FIXTURES: work }, timeout: 300_000 },
  );
  assert.is(r.status, 0, r.stderr);
  for (const fx of ['vouch-packed', 'git-packed']) {
    for (const row of [
      `append p50 after ${N} blocks`,
      `whole-process \`vouch endorse\` at ${N}`,
      `mirror clone of ${N}`,
      `fetch of one append at ${N}`,
      'repack of 50',
      'disk of the repository',
    ]) {
      assert.ok(
        r.stdout.split('\n').some((l) => l.startsWith(`| ${row}`) && l.includes(`| ${fx} |`)),
        `${row} on ${fx}`,
      );
    }
  }
  assert.equal([listing(sparse), listing(gitpacked)], before, 'nothing written into the fixtures');
});

test.run();
