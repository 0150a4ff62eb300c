/**
 * Tests of the repository's packing (store/repack.ts, through
 * store/chain-repo.ts and store/object-store.ts) against the real git CLI:
 * `init` writes one pack and no loose object; appends pack their loose
 * objects past LOOSE_PACK_THRESHOLD and keep O(log n) packs; a crash at any
 * step of a repack loses no object; packs git wrote are merged too.
 *
 * Owns: nothing outside its temporary directories.
 * Trusts: the installed `git` as the judge of packs and repositories
 * (`verify-pack`, `fsck --strict`, `clone`).
 * Must hold: after every step, `git fsck --strict` is clean, every block is
 * readable from git objects, and `git status --porcelain` is empty.
 *
 * The file doubles as the child of the crash tests: with
 * VOUCH_CHAIN_PACK_CHILD set it opens a chain, appends, repacks, and the
 * VOUCH_CRASH_POINT hook of store/repack.ts kills it part-way.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ChainRepo, LOOSE_PACK_THRESHOLD, type BlockFile, type CommitInfo } from '../../store/chain-repo.ts';
import { geometricSplit } from '../../store/repack.ts';
import { gitIn } from '../helpers/processes.ts';

const block = (i: number): BlockFile => ({ index: i, content: `${JSON.stringify({ index: i, note: 'pack é' }, null, 2)}\n` });
const blocks = (from: number, n: number): BlockFile[] => Array.from({ length: n }, (_, k) => block(from + k));
const info = (i: number): CommitInfo => ({
  message: `block ${i}: endorse acme/tool 1.0.${i}\n`,
  authorName: 'Vouch Authority',
  authorEmail: 'authority@vouch.invalid',
  timestamp: 1_760_000_000 + i,
});
const checkpoint = (n: number) => `{\n  "size": ${n}\n}\n`;

async function appendOne(repo: ChainRepo): Promise<void> {
  const i = repo.size;
  await repo.append([block(i)], checkpoint(i + 1), info(i));
}

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

function looseObjects(dir: string): string[] {
  const objects = join(dir, '.git', 'objects');
  return readdirSync(objects)
    .filter((d) => /^[0-9a-f]{2}$/.test(d))
    .flatMap((d) => readdirSync(join(objects, d)).map((n) => d + n));
}

function packs(dir: string): string[] {
  return readdirSync(join(dir, '.git', 'objects', 'pack'))
    .filter((n) => n.endsWith('.idx'))
    .map((n) => n.slice(0, -4));
}

/** git's verdict: every pack verifies, fsck --strict finds nothing, status is clean, `size` commits... */
function assertGitAccepts(dir: string, commits: number, label: string): void {
  for (const p of packs(dir)) {
    const v = spawnSync('git', ['-C', dir, 'verify-pack', '-v', `.git/objects/pack/${p}.idx`], { encoding: 'utf8', maxBuffer: 1 << 28 });
    assert.is(v.status, 0, `${label}: verify-pack ${p}: ${v.stderr}`);
  }
  const fsck = spawnSync('git', ['-C', dir, 'fsck', '--strict', '--no-progress'], { encoding: 'utf8' });
  assert.is(fsck.status, 0, `${label}: fsck status: ${fsck.stderr}`);
  for (const line of `${fsck.stdout}\n${fsck.stderr}`.split('\n'))
    assert.not.match(line, /error|warning|missing|broken|bad|invalid|garbage/i, `${label}: fsck: ${line}`);
  assert.is(git(dir, 'status', '--porcelain', '--untracked-files=all'), '', `${label}: git status`);
  assert.is(git(dir, 'log', '--oneline').trim().split('\n').length, commits, `${label}: git log`);
}

/** Every block read back from git objects (not the working tree), as written. */
async function assertBlocksInObjects(repo: ChainRepo, label: string): Promise<void> {
  const snap = await repo.snapshotAt(repo.head);
  for (let i = 0; i < repo.size; i++) assert.is(await snap.readBlock(i), block(i).content, `${label}: block ${i}`);
  assert.is(await snap.readFile('checkpoint.json'), checkpoint(repo.size), `${label}: checkpoint`);
}

// ---------------------------------------------------------------------------

test('geometricSplit: merges the small packs that break a progression of factor 2', () => {
  assert.is(geometricSplit([]), 0);
  assert.is(geometricSplit([100]), 0);
  assert.is(geometricSplit([10, 100]), 0, 'already a progression');
  assert.is(geometricSplit([10, 15, 100]), 2, 'the two small ones');
  assert.is(geometricSplit([10, 15, 40]), 3, '10+15=25: 40 < 50, merged too');
  assert.is(geometricSplit([2048, 2048, 2048, 2048]), 4);
  assert.is(geometricSplit([4, 8, 16, 1000]), 0);
});

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
  assert.ok(r.merged.length >= 2, `merged ${JSON.stringify(r)}`);
  assert.is(packs(dir).length, 1);
  assertGitAccepts(dir, 81, 'git packs merged');
  await assertBlocksInObjects(reopened, 'git packs merged');
});

const POINTS = ['repack-pack-named', 'repack-indexed', 'repack-loose-half', 'merge-indexed', 'merge-old-half'] as const;
for (const point of POINTS) {
  test(`crash at ${point}: open() cleans up, no object is lost, git accepts the repository`, async () => {
    const dir = fresh(`crash-${point}`);
    // init: a pack of 10 blocks (16 objects); the child's 4 appends make a pack of 28 < 2 x 16: the two are merged.
    const repo = await ChainRepo.init(dir, blocks(0, 10), checkpoint(10), info(0));
    assert.ok(repo.size === 10);
    const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
      env: { ...process.env, VOUCH_CHAIN_PACK_CHILD: dir, VOUCH_CRASH_POINT: point, VOUCH_CHILD_APPENDS: '4' },
      encoding: 'utf8',
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
    });
    assert.is(child.signal, 'SIGKILL', `child died at the crash point (${child.status} ${child.stderr})`);
    const opened = await ChainRepo.open(dir);
    assert.is(opened.size, 14);
    const leftovers = readdirSync(join(dir, '.git', 'objects', 'pack')).filter((n) => n.startsWith('tmp_'));
    assert.equal(leftovers, [], 'temporary files removed at open');
    await assertBlocksInObjects(opened, point);
    assertGitAccepts(dir, 5, point);
    await opened.repack();
    assert.equal(looseObjects(dir), [], 'repack after the crash packs what was left loose');
    // merge-old-half leaves the merged pack and one of its sources: 16 objects beside 44 is a progression already.
    assert.ok(packs(dir).length <= (point === 'merge-old-half' ? 2 : 1), `packs: ${packs(dir).join(' ')}`);
    assertGitAccepts(dir, 5, `${point}, repacked`);
    await assertBlocksInObjects(await ChainRepo.open(dir), `${point}, reopened`);
    assert.ok(!existsSync(join(dir, '.git', 'vouch-clone-incomplete')));
  });
}

test.run();
