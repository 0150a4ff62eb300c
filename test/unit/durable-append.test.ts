/**
 * An acknowledged append survives power loss (issue 14, item 11), shown with
 * an injected fs layer: node:fs's own functions are wrapped (and the ESM
 * bindings re-synced, so `import * as fs` in store/ sees the wrappers) to
 * record every open, fsync and rename in order. For one real append:
 * every object file is fsynced before the rename that names it; every
 * directory an object was added to (and `objects/` for a new fan-out
 * directory) is fsynced after those renames and before the branch moves;
 * the branch's lock file is fsynced before it is renamed onto
 * `refs/heads/main`, and `refs/heads` after; all before `append` resolves
 * (the point where a submit is answered). `init` writes one pack: the pack
 * and its index are fsynced before they are named, `objects/pack` after,
 * all before the branch moves.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { mkdtempSync, readdirSync, rmSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { formatBlockFile, formatCheckpointFile } from '../../chain/index.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { commitFor } from '../../store/chain-append.ts';
import { buildLongChain } from '../helpers/chain-fixture.ts';

const require = createRequire(import.meta.url);
const fsCjs = require('node:fs') as typeof import('node:fs');
const work = mkdtempSync(join(tmpdir(), 'vouch-durable-'));
test.after(() => rmSync(work, { recursive: true, force: true }));

type Event = { op: 'fsync'; path: string } | { op: 'rename'; from: string; to: string };

/** Records fsyncs (by the path their descriptor was opened with) and renames while `run` runs. */
async function recording(run: () => Promise<void>): Promise<Event[]> {
  const events: Event[] = [];
  const paths = new Map<number, string>();
  const orig = { openSync: fsCjs.openSync, fsyncSync: fsCjs.fsyncSync, renameSync: fsCjs.renameSync, closeSync: fsCjs.closeSync };
  fsCjs.openSync = ((path: string, ...rest: unknown[]) => {
    const fd = (orig.openSync as (...a: unknown[]) => number)(path, ...rest);
    paths.set(fd, String(path));
    return fd;
  }) as typeof fsCjs.openSync;
  fsCjs.closeSync = ((fd: number) => {
    paths.delete(fd);
    orig.closeSync(fd);
  }) as typeof fsCjs.closeSync;
  fsCjs.fsyncSync = ((fd: number) => {
    events.push({ op: 'fsync', path: paths.get(fd) ?? `fd ${fd}` });
    orig.fsyncSync(fd);
  }) as typeof fsCjs.fsyncSync;
  fsCjs.renameSync = ((from: string, to: string) => {
    events.push({ op: 'rename', from: String(from), to: String(to) });
    orig.renameSync(from, to);
  }) as typeof fsCjs.renameSync;
  syncBuiltinESMExports();
  try {
    await run();
  } finally {
    Object.assign(fsCjs, orig);
    syncBuiltinESMExports();
  }
  return events;
}

test('an append fsyncs its objects, their directories and the branch before it resolves', async () => {
  const chain = buildLongChain(6);
  const dir = join(work, 'chain');
  const files = (from: number, to: number) => chain.blocks.slice(from, to).map((b) => ({ index: b.index, content: formatBlockFile(b) }));
  await ChainRepo.init(
    dir,
    files(0, 5),
    formatCheckpointFile({ ...chain.checkpoint, size: 5, head: chain.blocks[4]!.record_hash }),
    commitFor(chain.blocks.slice(0, 5), Date.now()),
  );
  const repo = await ChainRepo.open(dir);
  let resolvedAt = -1;
  const events = await recording(async () => {
    await repo.append(files(5, 6), formatCheckpointFile(chain.checkpoint), commitFor(chain.blocks.slice(5, 6), Date.now()));
    resolvedAt = Number.MAX_SAFE_INTEGER;
  });
  assert.is(resolvedAt, Number.MAX_SAFE_INTEGER);
  const gitdir = join(dir, '.git');
  const objectsDir = join(gitdir, 'objects');
  const branch = join(gitdir, 'refs', 'heads', 'main');
  const at = (pred: (e: Event) => boolean) => events.findIndex(pred);
  const refMove = at((e) => e.op === 'rename' && e.to === branch);
  assert.ok(refMove >= 0, 'the branch was not moved by a rename');
  const objectRenames = events.map((e, i) => ({ e, i })).filter(({ e }) => e.op === 'rename' && e.to.startsWith(objectsDir + '/')) as {
    e: Extract<Event, { op: 'rename' }>;
    i: number;
  }[];
  assert.ok(objectRenames.length >= 5, `expected the blob, checkpoint, trees and commit; got ${objectRenames.length} object renames`);
  for (const { e, i } of objectRenames) {
    assert.ok(i < refMove, `${e.to} was named after the branch moved`);
    const synced = at((x) => x.op === 'fsync' && x.path === e.from);
    assert.ok(synced >= 0 && synced < i, `${e.from} was not fsynced before it was renamed to ${e.to}`);
    const dirSynced = events.findIndex((x, k) => k > i && k < refMove && x.op === 'fsync' && x.path === dirname(e.to));
    assert.ok(dirSynced >= 0, `${dirname(e.to)} was not fsynced between naming ${e.to} and moving the branch`);
  }
  const lock = `${branch}.lock`;
  const lockSynced = at((e) => e.op === 'fsync' && e.path === lock);
  assert.ok(lockSynced >= 0 && lockSynced < refMove, 'the branch lock file was not fsynced before its rename');
  const refsSynced = events.findIndex((e, k) => k > refMove && e.op === 'fsync' && e.path === dirname(branch));
  assert.ok(refsSynced >= 0, 'refs/heads was not fsynced after the branch moved');
});

test('a new object fan-out directory is made durable in objects/ too', async () => {
  // A fresh chain (init writes a pack, no loose object) without fan-out directories: every object of the first append lands in a new one.
  const chain = buildLongChain(3);
  const dir = join(work, 'fresh');
  const files = (from: number, to: number) => chain.blocks.slice(from, to).map((b) => ({ index: b.index, content: formatBlockFile(b) }));
  await ChainRepo.init(
    dir,
    files(0, 2),
    formatCheckpointFile({ ...chain.checkpoint, size: 2, head: chain.blocks[1]!.record_hash }),
    commitFor(chain.blocks.slice(0, 2), Date.now()),
  );
  // init makes the 256 fan-out directories; git's gc removes empty ones, as here: the append must make them again, durably.
  for (const d of readdirSync(join(dir, '.git', 'objects'))) if (/^[0-9a-f]{2}$/.test(d)) rmdirSync(join(dir, '.git', 'objects', d));
  const repo = await ChainRepo.open(dir);
  const events = await recording(async () => {
    await repo.append(files(2, 3), formatCheckpointFile(chain.checkpoint), commitFor(chain.blocks.slice(2, 3), Date.now()));
  });
  const objectsDir = join(dir, '.git', 'objects');
  const branch = join(dir, '.git', 'refs', 'heads', 'main');
  const refMove = events.findIndex((e) => e.op === 'rename' && e.to === branch);
  const objectsSynced = events.findIndex((e, k) => k < refMove && e.op === 'fsync' && e.path === objectsDir);
  assert.ok(refMove >= 0 && objectsSynced >= 0, 'objects/ was not fsynced after new fan-out directories were made');
});

test('init writes its objects as one pack, fsynced, with its index, before the branch names the commit', async () => {
  const chain = buildLongChain(3);
  const dir = join(work, 'init-pack');
  const events = await recording(async () => {
    await ChainRepo.init(
      dir,
      chain.blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
      formatCheckpointFile(chain.checkpoint),
      commitFor(chain.blocks, Date.now()),
    );
  });
  const packDir = join(dir, '.git', 'objects', 'pack');
  const branch = join(dir, '.git', 'refs', 'heads', 'main');
  const refMove = events.findIndex((e) => e.op === 'rename' && e.to === branch);
  const named = (ext: string) => events.findIndex((e) => e.op === 'rename' && e.to.startsWith(`${packDir}/pack-`) && e.to.endsWith(ext));
  const pack = named('.pack');
  const idx = named('.idx');
  assert.ok(pack >= 0 && idx > pack && idx < refMove, `pack named, then its index, then the branch: ${pack} ${idx} ${refMove}`);
  for (const k of [pack, idx]) {
    const e = events[k] as Extract<Event, { op: 'rename' }>;
    const synced = events.findIndex((x, j) => j < k && x.op === 'fsync' && x.path === e.from);
    assert.ok(synced >= 0, `${e.from} was not fsynced before it was named ${e.to}`);
  }
  assert.ok(
    events.findIndex((e, k) => k > idx && k < refMove && e.op === 'fsync' && e.path === packDir) >= 0,
    'objects/pack was not fsynced before the branch moved',
  );
  const objectRenames = events.filter((e) => e.op === 'rename' && e.to.startsWith(join(dir, '.git', 'objects')) && !e.to.startsWith(packDir));
  assert.equal(objectRenames, [], 'no loose object');
});

test.run();
