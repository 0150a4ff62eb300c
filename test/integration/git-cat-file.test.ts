/**
 * store/git-cat-file.ts: objects read through stock git (`cat-file --batch`
 * kept running, and the `--batch-all-objects` sweep), against a repository
 * git itself wrote and packed; the bounds on what git answers.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { VouchError } from '../../chain/errors.ts';
import { AnswerParser, GitCatFile, sweepObjects } from '../../store/git-cat-file.ts';

const git = (cwd: string, ...args: string[]) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd, encoding: 'latin1' }).trim();

/** A repository of `n` similar blobs (git stores most as deltas once packed) and one 40 KiB blob, packed by `git repack -adf`. */
function repo(n: number): { dir: string; gitdir: string; blobs: Map<string, string>; big: string } {
  const dir = mkdtempSync(join(tmpdir(), 'vouch-catfile-'));
  git(dir, 'init', '-q');
  const blobs = new Map<string, string>();
  for (let i = 0; i < n; i++) {
    const text = `{"index":${i},"url":"https://example.test/p/${i}.tgz","note":"${'x'.repeat(300)}"}\n`;
    writeFileSync(join(dir, `b${i}.json`), text);
  }
  writeFileSync(join(dir, 'big.bin'), Buffer.alloc(40_000, 7));
  git(dir, 'add', '-A');
  git(dir, 'commit', '-qm', 'c');
  for (let i = 0; i < n; i++)
    blobs.set(git(dir, 'rev-parse', `HEAD:b${i}.json`), `{"index":${i},"url":"https://example.test/p/${i}.tgz","note":"${'x'.repeat(300)}"}\n`);
  git(dir, 'repack', '-adfq');
  return { dir, gitdir: join(dir, '.git'), blobs, big: git(dir, 'rev-parse', 'HEAD:big.bin') };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('cat-file --batch: blobs (stored as deltas), trees and commits read back; a missing object is null; close ends git', async () => {
  const r = repo(40);
  const deltas = git(r.dir, 'cat-file', '--batch-all-objects', '--batch-check=%(deltabase)')
    .split('\n')
    .filter((l) => l !== '0'.repeat(40)).length;
  assert.ok(deltas >= 30, `git stored ${deltas} objects as deltas`);
  const cf = new GitCatFile(r.gitdir);
  try {
    // Many requests in flight at once: answered in order, each to its own request.
    const oids = [...r.blobs.keys()];
    const got = await Promise.all(oids.map((o) => cf.read(o)));
    got.forEach((o, i) => {
      assert.is(o!.type, 'blob');
      assert.is(o!.body.toString('latin1'), r.blobs.get(oids[i]!));
    });
    const head = await cf.read(git(r.dir, 'rev-parse', 'HEAD'));
    assert.is(head!.type, 'commit');
    assert.ok(head!.body.toString().startsWith('tree '));
    const tree = await cf.read(git(r.dir, 'rev-parse', 'HEAD^{tree}'));
    assert.is(tree!.type, 'tree');
    assert.is((await cf.read(r.big))!.body.length, 40_000);
    assert.is(await cf.read('0'.repeat(40)), null);
    assert.is((await cf.read(oids[0]!))!.type, 'blob', 'the process answers after a miss');
    const pid = cf.pid!;
    assert.ok(alive(pid));
    cf.close();
    await new Promise((res) => setTimeout(res, 200));
    assert.not.ok(alive(pid), 'git cat-file is gone after close');
    await cf.read(oids[0]!).then(
      () => assert.unreachable('read after close'),
      (e) => assert.is((e as VouchError).code, 'io_error'),
    );
  } finally {
    cf.close();
    rmSync(r.dir, { recursive: true, force: true });
  }
});

test('cat-file --batch: an object over the size bound is io_error, and the next read gets a fresh process', async () => {
  const r = repo(3);
  const cf = new GitCatFile(r.gitdir, { maxObjectBytes: 10_000 });
  try {
    const small = [...r.blobs.keys()][1]!;
    const [a, b] = await Promise.allSettled([cf.read(r.big), cf.read(small)]);
    assert.is(a.status, 'rejected');
    assert.is(((a as PromiseRejectedResult).reason as VouchError).code, 'io_error');
    assert.match(String((a as PromiseRejectedResult).reason.message), /more than 10000/);
    // The read queued behind it failed with it (its answer was never parsed), rather than taking the wrong bytes.
    assert.is(b.status, 'rejected');
    assert.is((await cf.read(small))!.body.toString('latin1'), r.blobs.get(small));
    await cf.read('not-an-oid').then(
      () => assert.unreachable(),
      (e) => assert.is((e as VouchError).code, 'io_error'),
    );
  } finally {
    cf.close();
    rmSync(r.dir, { recursive: true, force: true });
  }
});

test('cat-file --batch: a repository that is not one is io_error, not a hang or a crash', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vouch-catfile-none-'));
  const cf = new GitCatFile(join(dir, 'nothing'), { timeoutMs: 10_000 });
  try {
    await cf.read('a'.repeat(40)).then(
      () => assert.unreachable(),
      (e) => assert.is((e as VouchError).code, 'io_error'),
    );
  } finally {
    cf.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the --batch-all-objects sweep: every object once, bodies as git stores them; bounded', async () => {
  const r = repo(25);
  try {
    const seen = new Map<string, string>();
    const n = await sweepObjects(r.gitdir, async (oid, type, body) => {
      if (type === 'blob') seen.set(oid, body.toString('latin1'));
    });
    assert.is(n, Number(git(r.dir, 'cat-file', '--batch-all-objects', '--batch-check=%(objectname)').split('\n').length));
    for (const [oid, text] of r.blobs) assert.is(seen.get(oid), text);
    await sweepObjects(r.gitdir, () => {}, { maxObjectBytes: 10_000 }).then(
      () => assert.unreachable(),
      (e) => {
        assert.is((e as VouchError).code, 'io_error');
        assert.match((e as Error).message, /more than 10000/);
      },
    );
  } finally {
    rmSync(r.dir, { recursive: true, force: true });
  }
});

test('answers that are not what git writes are io_error (header too long or garbled, body without its newline)', () => {
  const feed = (bytes: string) => () => new AnswerParser(1000, () => {}).push(Buffer.from(bytes, 'latin1'));
  assert.throws(feed('x'.repeat(200)), /longer than 128/);
  assert.throws(feed(`${'a'.repeat(40)} blob -1\n`), /unexpected answer/);
  assert.throws(feed(`${'a'.repeat(40)} blob 3\nabcX`), /newline/);
  assert.throws(feed(`${'a'.repeat(40)} blob 5000\n`), /more than 1000/);
  const got: unknown[] = [];
  const p = new AnswerParser(1000, (oid, o) => got.push([oid, o?.type, o?.body.toString()]));
  const whole = Buffer.from(`${'a'.repeat(40)} blob 3\nabc\n${'b'.repeat(40)} missing\n`);
  for (let i = 0; i < whole.length; i++) p.push(whole.subarray(i, i + 1)); // one byte at a time
  assert.equal(got, [
    ['a'.repeat(40), 'blob', 'abc'],
    ['b'.repeat(40), undefined, undefined],
  ]);
  assert.ok(p.idle);
});

test.run();
