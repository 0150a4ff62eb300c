/**
 * Tests of the repository's packing (store/pack-file-writer.ts for `init`,
 * store/git-repack.ts for the appends' loose objects) against the real git
 * CLI: `init` writes one pack and no loose object; past LOOSE_PACK_THRESHOLD
 * stock git packs the loose objects (block files whole, trees as deltas)
 * into O(log n) packs; a git child or vouch killed at any point loses no
 * object; reads and appends go on while git repacks (more in
 * ./repack-concurrent.test.ts).
 *
 * Owns: nothing outside its temporary directories.
 * Trusts: the installed `git` as the judge of packs and repositories
 * (`verify-pack`, `fsck --strict`, `clone`).
 * Must hold: after every step, `git fsck --strict` is clean, every block is
 * readable from git objects, and `git status --porcelain` is empty.
 *
 * The file doubles as the child of the crash tests: with
 * VOUCH_CHAIN_PACK_CHILD set it opens a chain, appends, repacks, and the
 * VOUCH_CRASH_POINT hook of store/git-repack.ts kills it while git runs.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ChainRepo, LOOSE_PACK_THRESHOLD } from '../../store/chain-repo.ts';
import {
  alive,
  appendOne,
  assertBlocksInObjects,
  assertGitAccepts,
  block,
  blocks,
  checkpoint,
  fanOutDirs,
  info,
  looseCount,
  looseObjects,
  packs,
  pidsIn,
  slowGit,
  useGit,
} from '../helpers/chain-packs.ts';
import { gitIn } from '../helpers/processes.ts';

// ---------------------------------------------------------------------------
// Child mode (crash tests): append VOUCH_CHILD_APPENDS blocks one by one, then repack.

if (process.env.VOUCH_CHAIN_PACK_CHILD) {
  const repo = await ChainRepo.open(process.env.VOUCH_CHAIN_PACK_CHILD);
  for (let k = Number(process.env.VOUCH_CHILD_APPENDS ?? '1'); k > 0; k--) await appendOne(repo);
  await repo.repack();
  process.exit(0);
}

const root = mkdtempSync(join(tmpdir(), 'vouch-chain-pack-test-'));
let seq = 0;
const fresh = (name: string) => join(root, `${name}-${seq++}`);
test.after(() => rmSync(root, { recursive: true, force: true }));

const git = gitIn;

// ---------------------------------------------------------------------------

test('init writes one pack that git verifies, and no loose object', async () => {
  const dir = fresh('init');
  const repo = await ChainRepo.init(dir, blocks(0, 2500), checkpoint(2500), info(0));
  assert.equal(looseObjects(dir), [], 'no loose object');
  assert.is(packs(dir).length, 1, 'one pack');
  assert.equal(
    readdirSync(join(dir, '.git', 'objects', 'pack')).filter((n) => !/^pack-[0-9a-f]{40}\.(pack|idx)$/.test(n)),
    [],
    'no temporary file',
  );
  assertGitAccepts(dir, 1, 'init');
  // git index-pack rebuilds the same index from the pack alone.
  const p = packs(dir)[0]!;
  const copy = join(root, `reindexed-${seq++}.pack`);
  spawnSync('cp', [join(dir, '.git', 'objects', 'pack', `${p}.pack`), copy]);
  const ip = spawnSync('git', ['index-pack', copy], { encoding: 'utf8' });
  assert.is(ip.status, 0, ip.stderr);
  assert.is(
    spawnSync('cmp', [copy.replace(/\.pack$/, '.idx'), join(dir, '.git', 'objects', 'pack', `${p}.idx`)]).status,
    0,
    'index byte for byte as git writes it',
  );
  await assertBlocksInObjects(repo, 'init');
  const reopened = await ChainRepo.open(dir);
  assert.is(reopened.size, 2500);
  assert.equal(reopened.repairs, []);
});

test('appends past the threshold are packed: few loose objects, O(log n) packs, git log/show/clone work', async () => {
  const dir = fresh('appends');
  const repo = await ChainRepo.init(dir, blocks(0, 990), checkpoint(990), info(0));
  const appends = 1300; // ~9,100 loose objects written: 4 packs of the threshold, merged geometrically
  for (let k = 0; k < appends; k++) await appendOne(repo);
  await repo.repack().then(() => undefined); // waits for the queued packs too (same writer queue)
  assert.equal(repo.warnings, []);
  assert.equal(looseObjects(dir), [], 'repack() leaves no loose object');
  const objects = Number(/in-pack: (\d+)/.exec(git(dir, 'count-objects', '-v'))![1]);
  assert.ok(objects >= 990 + appends * 6, `objects in packs: ${objects}`);
  assert.ok(packs(dir).length <= Math.ceil(Math.log2(objects / LOOSE_PACK_THRESHOLD)) + 2, `packs: ${packs(dir).length} for ${objects} objects`);
  assertGitAccepts(dir, appends + 1, 'appends');
  assert.is(git(dir, 'show', `main:blocks/000/001/000001500.json`), block(1500).content);
  assert.is(git(dir, 'show', `main~10:checkpoint.json`), checkpoint(repo.size - 10));
  // Trees of one append are deltas of the previous append's in the pack: a leaf tree costs bytes, not kilobytes.
  const packBytes = packs(dir).reduce((n, p) => n + statSync(join(dir, '.git', 'objects', 'pack', `${p}.pack`)).size, 0);
  const repacked = fresh('gc-copy');
  git(root, 'clone', '--no-local', '--quiet', dir, repacked);
  git(repacked, 'repack', '-adf', '--quiet');
  const gitBytes = readdirSync(join(repacked, '.git', 'objects', 'pack'))
    .filter((n) => n.endsWith('.pack'))
    .reduce((n, f) => n + statSync(join(repacked, '.git', 'objects', 'pack', f)).size, 0);
  assert.ok(packBytes <= 2 * gitBytes, `packs ${packBytes} bytes vs git repack -adf ${gitBytes}`);
  assert.is(git(repacked, 'rev-parse', 'HEAD').trim(), repo.head, 'git clone of the chain');
  assert.is(git(repacked, 'log', '--oneline').trim().split('\n').length, appends + 1);
  await assertBlocksInObjects(await ChainRepo.open(dir), 'after packing');
});

test('loose objects wait under the threshold, and an automatic pack runs after the append that crosses it', async () => {
  const dir = fresh('threshold');
  const repo = await ChainRepo.init(dir, blocks(0, 10), checkpoint(10), info(0));
  let k = 0;
  while (repo.pendingLoose + 7 < LOOSE_PACK_THRESHOLD) {
    await appendOne(repo);
    k++;
  }
  assert.is(looseObjects(dir).length, repo.pendingLoose, 'every loose object is pending');
  assert.is(packs(dir).length, 1);
  await appendOne(repo);
  await appendOne(repo);
  // The pack ran behind the append that crossed the threshold; its loose files are removed beside later writers.
  for (let t = 0; t < 200 && looseObjects(dir).length > 7; t++) await new Promise((r) => setTimeout(r, 50));
  assert.ok(looseObjects(dir).length <= 7, `loose after crossing: ${looseObjects(dir).length}`);
  assert.is(packs(dir).length, 2, 'init pack + the incremental pack (2048 >= 2 x 16: no merge)');
  assertGitAccepts(dir, k + 3, 'threshold');
  // A reopened repository finds its loose objects again and packs them.
  const reopened = await ChainRepo.open(dir);
  assert.is(reopened.pendingLoose, looseObjects(dir).length);
  await reopened.repack();
  assert.equal(looseObjects(dir), []);
  await assertBlocksInObjects(reopened, 'threshold');
});

test('loose trees found at open (their paths unknown) are still packed as deltas', async () => {
  const dir = fresh('pathless');
  const repo = await ChainRepo.init(dir, blocks(0, 900), checkpoint(900), info(0));
  for (let k = 0; k < 250; k++) await appendOne(repo); // 250 leaf trees of 900-1000 entries (~40 KiB each): ~10 MB whole
  const reopened = await ChainRepo.open(dir);
  assert.is(reopened.pendingLoose, 250 * 7);
  const r = await reopened.repack();
  assert.ok(r.pack !== null, JSON.stringify(r));
  assert.equal(looseObjects(dir), []);
  // Every pack together (init's 900 blocks may be merged in): whole leaf trees alone would be ~10 MB.
  const bytes = packs(dir).reduce((n, p) => n + statSync(join(dir, '.git', 'objects', 'pack', `${p}.pack`)).size, 0);
  assert.ok(bytes < 500_000, `packs after 250 appends: ${bytes} bytes`);
  assertGitAccepts(dir, 251, 'pathless');
  await assertBlocksInObjects(reopened, 'pathless');
});

test('packs git wrote (OFS_DELTA) are read and merged too', async () => {
  const dir = fresh('git-packs');
  const repo = await ChainRepo.init(dir, blocks(0, 50), checkpoint(50), info(0));
  for (let k = 0; k < 40; k++) await appendOne(repo);
  git(dir, 'repack', '-adf', '--quiet'); // one pack of git's, deltas as OFS_DELTA
  assert.equal(looseObjects(dir), []);
  const reopened = await ChainRepo.open(dir);
  for (let k = 0; k < 40; k++) await appendOne(reopened);
  const r = await reopened.repack();
  assert.ok(r.merged.length >= 1, `merged ${JSON.stringify(r)}`);
  assert.is(packs(dir).length, 1);
  assertGitAccepts(dir, 81, 'git packs merged');
  await assertBlocksInObjects(reopened, 'git packs merged');
});

/** Block files stored as deltas, and trees stored as deltas, over every pack (git's verify-pack: a delta line has 7+ fields). */
function deltaCounts(dir: string): { blockDeltas: number; treeDeltas: number; blocks: number } {
  let blockDeltas = 0;
  let treeDeltas = 0;
  let blocks = 0;
  const blockIds = new Set(
    git(dir, 'ls-tree', '-r', 'main', 'blocks')
      .trim()
      .split('\n')
      .map((l) => l.split(/\s+/)[2]!),
  );
  for (const p of packs(dir)) {
    for (const line of git(dir, 'verify-pack', '-v', `.git/objects/pack/${p}.idx`).split('\n')) {
      const f = line.trim().split(/\s+/);
      if (f.length < 5 || !/^[0-9a-f]{40}$/.test(f[0]!)) continue;
      if (blockIds.has(f[0]!)) {
        blocks++;
        if (f.length >= 7) blockDeltas++;
      } else if (f[1] === 'tree' && f.length >= 7) treeDeltas++;
    }
  }
  return { blockDeltas, treeDeltas, blocks };
}

/** The slow `git` of ../helpers/chain-packs.ts first on PATH (a fresh one); returns its pid file and a function that restores PATH. */
function recordingGit(sleep = '0'): { pids: string; restore: () => void } {
  const g = slowGit(fresh('git'), sleep);
  return { pids: g.pids, restore: useGit(g) };
}

test('the repack is stock git: block files whole, trees as deltas, no loose object left, git count-objects and fsck agree', async () => {
  const dir = fresh('stock');
  const repo = await ChainRepo.init(dir, blocks(0, 900), checkpoint(900), info(0));
  for (let k = 0; k < 120; k++) await appendOne(repo);
  const { pids, restore } = recordingGit();
  try {
    await repo.repack();
  } finally {
    restore();
  }
  assert.ok(pidsIn(pids).length >= 2, `git ran for the repack (pack-objects, repack): ${pidsIn(pids).length} runs`);
  assert.is(looseCount(dir), 0, 'git count-objects -v: no loose object');
  assert.is(repo.pendingLoose, 0);
  assert.is(fanOutDirs(dir), 256, 'the fan-out directories git pruned are there again (appends never make one)');
  const d = deltaCounts(dir);
  assert.is(d.blocks, 1020);
  assert.is(d.blockDeltas, 0, 'every block file whole');
  assert.ok(d.treeDeltas >= 100, `trees as deltas of their previous version: ${d.treeDeltas}`);
  assert.match(readFileSync(join(dir, '.git', 'info', 'attributes'), 'utf8'), '/blocks/*/*/*.json -delta');
  assertGitAccepts(dir, 121, 'stock');
  await assertBlocksInObjects(repo, 'stock');
});

const POINTS = ['repack-pack-objects', 'repack-geometric'] as const;
for (const point of POINTS) {
  test(`vouch killed while git runs (${point}, at random instants): no object lost, git accepts the repository, the next repack completes`, async () => {
    let kills = 0;
    for (const after of [0, 60, 300]) {
      const dir = fresh(`crash-${point}-${after}`);
      const repo = await ChainRepo.init(dir, blocks(0, 10), checkpoint(10), info(0));
      assert.ok(repo.size === 10);
      const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
        env: { ...process.env, VOUCH_CHAIN_PACK_CHILD: dir, VOUCH_CRASH_POINT: point, VOUCH_CRASH_AFTER_MS: String(after), VOUCH_CHILD_APPENDS: '4' },
        encoding: 'utf8',
        cwd: fileURLToPath(new URL('../..', import.meta.url)),
      });
      const label = `${point} +${after} ms`;
      // A fast git may be done before the instant: then the child died afterwards or exited; either way nothing may be lost.
      assert.ok(child.signal === 'SIGKILL' || child.status === 0, `${label}: child ${child.status} ${child.signal} ${child.stderr}`);
      if (child.signal === 'SIGKILL') kills++;
      // git the dead vouch started dies with it (parent-death signal): no writer is left beside the next one.
      await new Promise((r) => setTimeout(r, 100));
      const opened = await ChainRepo.open(dir);
      assert.is(opened.size, 14, label);
      await assertBlocksInObjects(opened, label);
      assertGitAccepts(dir, 5, label);
      await appendOne(opened);
      await opened.repack();
      assert.is(looseCount(dir), 0, `${label}: the next repack packs what was left loose`);
      assert.ok(packs(dir).length <= 2, `${label}: packs: ${packs(dir).join(' ')}`);
      assertGitAccepts(dir, 6, `${label}, repacked`);
      await assertBlocksInObjects(await ChainRepo.open(dir), `${label}, reopened`);
      assert.ok(!existsSync(join(dir, '.git', 'vouch-clone-incomplete')));
    }
    assert.ok(kills > 0, `vouch was killed while git ran at least once (${kills})`);
  });
}

test('the git child killed at random instants: every object stays readable, git accepts the repository, the next repack completes', async () => {
  const dir = fresh('kill-child');
  const repo = await ChainRepo.init(dir, blocks(0, 300), checkpoint(300), info(0));
  const { pids, restore } = recordingGit('0.3'); // each child lives 0.3 s at least: the first round's early kill finds it
  try {
    // One repack left to finish: how long the two children take here.
    for (let k = 0; k < 20; k++) await appendOne(repo);
    let t = performance.now();
    await repo.repack();
    const full = performance.now() - t;
    let killed = 0;
    for (let round = 0; round < 4; round++) {
      for (let k = 0; k < 20; k++) await appendOne(repo);
      writeFileSync(pids, '');
      const at = round === 0 ? 100 : Math.random() * full * 1.2;
      t = performance.now();
      const r = repo.repack().then(
        () => 'done',
        (e: Error) => e.message,
      );
      await new Promise((res) => setTimeout(res, at));
      for (const pid of pidsIn(pids)) {
        try {
          process.kill(-pid, 'SIGKILL');
          killed++;
        } catch {
          /* exited already */
        }
      }
      const outcome = await r;
      assert.ok(outcome === 'done' || /git (pack-objects|prune-packed|repack) was stopped/.test(outcome), `round ${round} (+${at.toFixed(0)} ms): ${outcome}`);
      const label = `round ${round}, killed at +${at.toFixed(0)} ms (${outcome})`;
      await assertBlocksInObjects(repo, label);
      await assertBlocksInObjects(await ChainRepo.open(dir), `${label}, reopened`);
      assertGitAccepts(dir, repo.size - 299, label);
    }
    assert.ok(killed > 0, 'at least one git child was killed');
    await appendOne(repo);
    await repo.repack();
    assert.is(looseCount(dir), 0, 'the next repack completes: no loose object');
    const objects = Number(/in-pack: (\d+)/.exec(git(dir, 'count-objects', '-v'))![1]);
    assert.ok(packs(dir).length <= Math.ceil(Math.log2(objects)) + 1, `packs: ${packs(dir).length} for ${objects} objects`);
    assertGitAccepts(dir, repo.size - 299, 'after the kills');
  } finally {
    restore();
  }
});

test('while git repacks, reads are served (the event loop is free) and an append goes on beside git: it lands before the repack ends', async () => {
  const dir = fresh('during');
  const repo = await ChainRepo.init(dir, blocks(0, 50), checkpoint(50), info(0));
  for (let k = 0; k < 30; k++) await appendOne(repo);
  const { pids, restore } = recordingGit('0.6');
  try {
    let repacked = 0;
    let appended = 0;
    const r = repo.repack().then(() => {
      repacked = performance.now();
    });
    const a = appendOne(repo).then(() => {
      appended = performance.now();
    });
    let reads = 0;
    let gitSeen = false;
    while (repacked === 0) {
      const i = reads % repo.size;
      assert.is(repo.readBlockFile(i), block(i).content);
      reads++;
      gitSeen ||= pidsIn(pids).some(alive);
      await new Promise((res) => setTimeout(res, 2));
    }
    await Promise.all([r, a]);
    assert.ok(gitSeen, 'a git child ran');
    assert.ok(reads >= 10, `reads served while git repacked: ${reads}`);
    assert.ok(appended > 0 && appended < repacked, 'the append landed while git repacked (it does not wait for the repack)');
    assert.is(repo.size, 81);
    assert.equal(repo.warnings, []);
    assert.is(repo.readBlockFile(80), block(80).content);
    assertGitAccepts(dir, 32, 'append during repack');
    await assertBlocksInObjects(await ChainRepo.open(dir), 'append during repack, reopened');
  } finally {
    restore();
  }
});

test.run();
