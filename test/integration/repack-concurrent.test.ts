/**
 * Appends beside the store's stock-git repack (issue 33; store/repo-writer.ts,
 * store/git-repack.ts): appends land while git runs, also into fan-out
 * directories git's prune-packed removed; a git child or vouch killed
 * mid-repack with appends in flight loses nothing and the next repack packs
 * what stayed loose; the whole-pack rewrite never runs beside a repack.
 * Repacks are slowed by the `git` of ../helpers/chain-packs.ts (sleeps around
 * the real git), so every ratio below has a margin on a loaded machine with
 * appends on a disk (test-run: disk: never on tmpfs, where appends outrun git).
 * Owns: nothing outside its temporary directories.
 * Trusts: the installed git as the judge (`fsck --strict`, `verify-pack`).
 * Must hold: every append that returned is on the branch and readable.
 * With VOUCH_REPACK_CHILD set the file is the crash tests' child.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, rmdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ChainRepo, LOOSE_PACK_THRESHOLD } from '../../store/chain-repo.ts';
import { loosePath, objectId } from '../../store/git-objects.ts';
import { ObjectStore } from '../../store/object-store.ts';
import {
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

/** One turn of the event loop (an append alone never yields: its awaits settle as microtasks). */
const turn = () => new Promise<void>((r) => setImmediate(r));

// Child mode (crash tests): open the chain, start a repack, append one by one until killed, printing each size.
if (process.env.VOUCH_REPACK_CHILD) {
  const repo = await ChainRepo.open(process.env.VOUCH_REPACK_CHILD);
  let done = false;
  const r = repo.repack().finally(() => {
    done = true;
  });
  process.stdout.write(`repack started ${repo.size}\n`);
  while (!done) {
    await turn(); // as a gateway between requests: the event loop sees git exit, and the crash timer
    await appendOne(repo);
    if (!done) process.stdout.write(`appended ${repo.size}\n`);
  }
  await r;
  process.exit(0);
}

const root = mkdtempSync(join(tmpdir(), 'vouch-repack-concurrent-'));
let seq = 0;
const fresh = (name: string) => join(root, `${name}-${seq++}`);
test.after(() => rmSync(root, { recursive: true, force: true }));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const inPacks = (dir: string) => Number(/in-pack: (\d+)/.exec(gitIn(dir, 'count-objects', '-v'))![1]);

/** A blob body whose object id falls in fan-out directory `fan` (about 256 tries). */
function blobIn(fan: string, tag: string): Buffer {
  for (let k = 0; ; k++) {
    const body = Buffer.from(`${tag} ${k}\n`);
    if (objectId('blob', body).startsWith(fan)) return body;
  }
}

test('an object write survives git pruning its fan-out directory: the write makes it again, the fsync skips it', async () => {
  const dir = fresh('prune');
  const first = blocks(0, 5);
  await ChainRepo.init(dir, first, checkpoint(5), info(0));
  const gitdir = join(dir, '.git');
  const store = new ObjectStore(gitdir);
  const packed = Buffer.from(first[0]!.content, 'utf8');
  const fan = objectId('blob', packed).startsWith('ab') ? 'cd' : 'ab';
  // 1. A fan-out directory this store wrote into, emptied and removed by git's prune-packed, then written into again.
  const a = store.write('blob', blobIn(fan, 'first'));
  store.syncDirs();
  unlinkSync(loosePath(gitdir, a)); // as prune-packed does once a pack holds it
  rmdirSync(dirname(loosePath(gitdir, a)));
  const body = blobIn(fan, 'second');
  const b = store.write('blob', body);
  store.syncDirs();
  assert.ok(existsSync(loosePath(gitdir, b)), 'the object is in its fan-out directory, made again');
  assert.equal(await store.readBlob(b), body);
  // 2. A directory removed between the write and its fsync: the object went into a pack first (here: init's pack holds it).
  const c = store.write('blob', packed); // a loose copy of a packed object
  assert.ok(existsSync(loosePath(gitdir, c)));
  unlinkSync(loosePath(gitdir, c));
  rmdirSync(dirname(loosePath(gitdir, c)));
  store.syncDirs();
  assert.equal(await store.readBlob(c), packed, 'read from the pack');
  const reopened = await ChainRepo.open(dir);
  await assertBlocksInObjects(reopened, 'after the prunes');
});

test('appends land while git repacks, many into fan-out directories git pruned; all verify; a quiet repack after leaves no loose object', async () => {
  const dir = fresh('beside');
  const repo = await ChainRepo.init(dir, blocks(0, 300), checkpoint(300), info(0));
  for (let k = 0; k < 150; k++) await appendOne(repo);
  const restore = useGit(slowGit(fresh('git'), '0.3', '1.2'));
  try {
    let end = 0;
    const t0 = performance.now();
    const r = repo.repack().finally(() => {
      end = performance.now();
    });
    let landed = 0;
    let pruned = 0;
    const during: number[] = [];
    while (end === 0) {
      await turn();
      const missing = fanOutDirs(dir) < 256;
      const t = performance.now();
      await appendOne(repo);
      const ms = performance.now() - t;
      during.push(ms);
      if (end === 0) {
        landed++;
        if (missing) pruned++;
      }
    }
    await r;
    const repackMs = end - t0;
    assert.ok(landed >= 10, `appends that landed while git repacked (${repackMs.toFixed(0)} ms): ${landed}`);
    assert.ok(pruned >= 3, `appends that started while fan-out directories were gone (pruned by git): ${pruned}`);
    const slowest = Math.max(...during);
    assert.ok(slowest < 0.25 * repackMs, `slowest append during the repack ${slowest.toFixed(0)} ms, the repack ${repackMs.toFixed(0)} ms`);
    assert.equal(repo.warnings, []);
    assert.is(fanOutDirs(dir), 256, 'the fan-out directories are all there after the repack');
    assert.is(repo.pendingLoose, looseObjects(dir).length, 'the loose objects written meanwhile are counted, not lost from the count');
    await assertBlocksInObjects(repo, 'beside');
    await assertBlocksInObjects(await ChainRepo.open(dir), 'beside, reopened');
    assertGitAccepts(dir, repo.size - 299, 'beside');
  } finally {
    restore();
  }
  // A quiet repack: nothing left loose.
  await repo.repack();
  assert.is(looseCount(dir), 0, 'git count-objects: no loose object after a quiet repack');
  assert.is(repo.pendingLoose, 0);
  assert.is(fanOutDirs(dir), 256);
  assert.ok(packs(dir).length <= Math.ceil(Math.log2(inPacks(dir))) + 1, `packs: ${packs(dir).length}`);
  assertGitAccepts(dir, repo.size - 299, 'beside, repacked');
});

test('appends one by one across the threshold: the repack runs beside them, the slowest append a small part of the repack', async () => {
  const dir = fresh('threshold');
  const repo = await ChainRepo.init(dir, blocks(0, 10), checkpoint(10), info(0));
  const restore = useGit(slowGit(fresh('git'), '0.8'));
  try {
    const after: number[] = [];
    let crossed = false;
    for (let k = 0; repo.packTimes.count === 0; k++) {
      assert.ok(k < 3 * LOOSE_PACK_THRESHOLD, 'a repack ran');
      await turn();
      const t = performance.now();
      await appendOne(repo);
      if (crossed) after.push(performance.now() - t);
      crossed ||= repo.pendingLoose >= LOOSE_PACK_THRESHOLD;
    }
    const repackMs = repo.packTimes.maxMs;
    assert.ok(after.length >= 5, `appends while the threshold's repack ran (${repackMs.toFixed(0)} ms): ${after.length}`);
    const slowest = Math.max(...after);
    assert.ok(slowest < 0.25 * repackMs, `slowest append during the repack ${slowest.toFixed(0)} ms, the repack ${repackMs.toFixed(0)} ms`);
    assert.equal(repo.warnings, []);
    assert.ok(repo.pendingLoose < LOOSE_PACK_THRESHOLD, `loose after: ${repo.pendingLoose}`);
    assert.is(repo.pendingLoose, looseObjects(dir).length);
    assertGitAccepts(dir, repo.size - 9, 'threshold');
    await assertBlocksInObjects(repo, 'threshold');
  } finally {
    restore();
  }
});

test('the git child killed mid-repack with appends in flight: every append lands and verifies, the next repack packs what stayed loose', async () => {
  const dir = fresh('kill-git');
  const repo = await ChainRepo.init(dir, blocks(0, 300), checkpoint(300), info(0));
  const g = slowGit(fresh('git'), '0.3', '0.6');
  const restore = useGit(g);
  let landed = 0;
  let killed = 0;
  try {
    // Killed before pack-objects runs, during it or the geometric step, and while the fan-out directories are pruned.
    for (const at of [150, 450, 800, 1100, 1400]) {
      for (let k = 0; k < 20; k++) await appendOne(repo);
      writeFileSync(g.pids, '');
      let end = 0;
      const r = repo
        .repack()
        .then(
          () => 'done',
          (e: Error) => e.message,
        )
        .finally(() => {
          end = performance.now();
        });
      const appending = (async () => {
        while (end === 0) {
          await turn();
          await appendOne(repo);
          if (end === 0) landed++;
        }
      })();
      await sleep(at);
      for (const pid of pidsIn(g.pids)) {
        try {
          process.kill(-pid, 'SIGKILL');
          killed++;
        } catch {
          /* exited already */
        }
      }
      const outcome = await r;
      await appending;
      const label = `killed at +${at} ms (${outcome})`;
      assert.ok(outcome === 'done' || /git (pack-objects|prune-packed) was stopped/.test(outcome), label);
      assert.is(repo.pendingLoose, looseObjects(dir).length, `${label}: loose objects counted`);
      await assertBlocksInObjects(repo, label);
      await assertBlocksInObjects(await ChainRepo.open(dir), `${label}, reopened`);
      assertGitAccepts(dir, repo.size - 299, label);
    }
  } finally {
    restore();
  }
  assert.ok(killed > 0, 'git children were killed');
  assert.ok(landed >= 5, `appends that landed while git repacked: ${landed}`);
  // An explicit repack's failure is its caller's error; the only warnings are those of a repack the appends
  // started on their own (past LOOSE_PACK_THRESHOLD loose objects) whose git child this test killed too.
  for (const w of repo.warnings)
    assert.match(
      w,
      /^packing loose objects failed \(they stay loose, readable; retried after the next append\): git (pack-objects|prune-packed) was stopped \(SIGKILL/,
    );
  await appendOne(repo);
  await repo.repack();
  assert.is(looseCount(dir), 0, 'the next repack completes: no loose object');
  assert.ok(packs(dir).length <= Math.ceil(Math.log2(inPacks(dir))) + 1, `packs: ${packs(dir).length}`);
  assertGitAccepts(dir, repo.size - 299, 'after the kills');
});

// [crash point, ms after that child started, appends before the repack (15: its pack is rolled up with init's)]
const CRASHES = [
  ['repack-pack-objects', 250, 60],
  ['repack-prune', 300, 60],
  ['repack-geometric', 150, 15],
] as const;
for (const [point, afterMs, seeded] of CRASHES) {
  test(`vouch SIGKILLed mid-repack (${point} +${afterMs} ms) with appends in flight: appends that returned are there, git accepts it, the next repack completes`, async () => {
    const dir = fresh(`crash-${point}-${afterMs}`);
    await ChainRepo.init(dir, blocks(0, 100), checkpoint(100), info(0));
    const seed = await ChainRepo.open(dir);
    for (let k = 0; k < seeded; k++) await appendOne(seed);
    const g = slowGit(fresh('git'), '0.4', '0.8');
    const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
      env: {
        ...process.env,
        PATH: `${g.bin}:${process.env.PATH}`,
        VOUCH_REPACK_CHILD: dir,
        VOUCH_CRASH_POINT: point,
        VOUCH_CRASH_AFTER_MS: String(afterMs),
      },
      encoding: 'utf8',
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      timeout: 120_000,
    });
    const label = `${point} +${afterMs} ms`;
    assert.is(child.signal, 'SIGKILL', `${label}: the child was killed while git ran (${child.status}): ${child.stderr}`);
    const sizes = [...child.stdout.matchAll(/^appended (\d+)$/gm)].map((m) => Number(m[1]));
    assert.ok(sizes.length >= 1, `${label}: appends that landed while git repacked before the kill: ${sizes.length}`);
    const last = Math.max(...sizes);
    await sleep(150); // git dies with the vouch that started it (parent-death signal)
    const opened = await ChainRepo.open(dir);
    assert.ok(opened.size === last || opened.size === last + 1, `${label}: size ${opened.size}, the last append that returned made ${last}`);
    await assertBlocksInObjects(opened, label);
    assertGitAccepts(dir, opened.size - 99, label);
    assert.is(opened.pendingLoose, looseObjects(dir).length, `${label}: loose objects counted at open`);
    await appendOne(opened);
    await opened.repack();
    assert.is(looseCount(dir), 0, `${label}: the next repack packs what stayed loose`);
    assert.ok(packs(dir).length <= 3, `${label}: packs ${packs(dir).join(' ')}`);
    assertGitAccepts(dir, opened.size - 99, `${label}, repacked`);
    await assertBlocksInObjects(await ChainRepo.open(dir), `${label}, reopened`);
  });
}

test('the whole-pack rewrite never runs beside a repack: it waits for the running one, then appends find the directories git pruned', async () => {
  const dir = fresh('whole');
  const repo = await ChainRepo.init(dir, blocks(0, 50), checkpoint(50), info(0));
  for (let k = 0; k < 60; k++) await appendOne(repo);
  const g = slowGit(fresh('git'), '0.5');
  const restore = useGit(g);
  try {
    const r = repo.repack();
    await sleep(100);
    const w = await repo.repackWhole({ timeoutMs: 120_000 });
    await r;
    assert.ok(w.after > 0);
    // The wrapper's log (`date` around each git run): every run of the repack ended before the rewrite's git started.
    const log = readFileSync(g.log, 'utf8');
    const runs = new Map<string, { args: string; start: number; end: number }>();
    for (const l of log.split('\n')) {
      const m = /^(start|end) (\d+) (\d+) ?(.*)$/.exec(l);
      if (!m) continue;
      const r = runs.get(m[3]!) ?? { args: '', start: 0, end: Number.POSITIVE_INFINITY };
      if (m[1] === 'start') Object.assign(r, { args: m[4]!, start: Number(m[2]) });
      else r.end = Number(m[2]);
      runs.set(m[3]!, r);
    }
    const whole = [...runs.values()].filter((r) => r.args.includes(' repack -A -d -f'));
    const others = [...runs.values()].filter((r) => !r.args.includes(' repack -A -d -f'));
    assert.is(whole.length, 1, log);
    assert.ok(
      others.some((r) => r.args.includes(' pack-objects --revs')),
      log,
    );
    for (const r of others) assert.ok(r.end <= whole[0]!.start || r.start >= whole[0]!.end, `a git run beside the rewrite:\n${log}`);
  } finally {
    restore();
  }
  // Asked for at once, with an append between: both queues are always taken in one order, so none waits on the other forever.
  let timer: NodeJS.Timeout | undefined;
  const stuck = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('a repack, the rewrite and an append asked for at once never all ended')), 90_000);
  });
  await Promise.race([Promise.all([repo.repack(), repo.repackWhole({ timeoutMs: 120_000 }), appendOne(repo), repo.repack()]), stuck]);
  clearTimeout(timer);
  // Appends write into fan-out directories, the rewrite's prune-packed empties and removes them: later appends make them again.
  for (let k = 0; k < 40; k++) await appendOne(repo);
  await repo.repackWhole({ timeoutMs: 120_000 });
  assert.ok(fanOutDirs(dir) === 256, 'the fan-out directories are made again after the rewrite');
  assert.is(repo.pendingLoose, 0);
  for (let k = 0; k < 60; k++) await appendOne(repo);
  assert.equal(repo.warnings, []);
  assert.is(repo.size, 211);
  assertGitAccepts(dir, 162, 'after the whole-pack rewrite');
  await assertBlocksInObjects(await ChainRepo.open(dir), 'after the whole-pack rewrite');
  assert.is(repo.readBlockFile(210), block(210).content);
});

test.run();
