/**
 * store/blob-oids.ts: the block blob ids learnt from leaf trees. Only an
 * entry that is a regular file with its own block's name at its own
 * position is learnt; anything else is left to the tree walk (null).
 */
import { createHash } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { blockPath } from '../../chain/layout.ts';
import { BlobOids } from '../../store/blob-oids.ts';

const oidOf = (i: number) => createHash('sha1').update(`block ${i}`).digest();

/** A leaf tree's bytes for the shard at `base`, `count` entries; `mode(k)` per entry. */
function leaf(base: number, count: number, mode: (k: number) => string = () => '100644', name = (i: number) => blockPath(i).slice(15)): Buffer {
  const parts: Buffer[] = [];
  for (let k = 0; k < count; k++) parts.push(Buffer.from(`${mode(k)} ${name(base + k)}\0`, 'latin1'), oidOf(base + k));
  return Buffer.concat(parts);
}

test('a full shard learnt: every id comes back; other shards stay unknown', () => {
  const t = new BlobOids();
  t.learnShard(3000, leaf(3000, 1000));
  for (const i of [3000, 3001, 3500, 3999]) assert.is(t.get(i), oidOf(i).toString('hex'), `block ${i}`);
  assert.is(t.get(2999), null);
  assert.is(t.get(4000), null);
  assert.is(t.get(10_000_000), null, 'far past the table');
  t.learnShard(0, leaf(0, 1000));
  assert.is(t.get(7), oidOf(7).toString('hex'));
  assert.is(t.get(3999), oidOf(3999).toString('hex'), 'kept when the table grows');
  t.clear();
  assert.is(t.get(7), null, 'cleared');
  assert.is(t.get(3999), null);
});

test('an entry that is not a regular block file, or out of place, is not learnt', () => {
  const t = new BlobOids();
  // Entry 5 is a symbolic link, entry 9 executable.
  t.learnShard(
    0,
    leaf(0, 1000, (k) => (k === 5 ? '120000' : k === 9 ? '100755' : '100644')),
  );
  assert.is(t.get(5), null, 'a link');
  assert.is(t.get(9), null, 'an executable file');
  assert.is(t.get(10), oidOf(10).toString('hex'), 'after it');
  assert.is(t.get(4), oidOf(4).toString('hex'), 'before it');
  // A shard whose names are shifted by one (a block missing): nothing learnt.
  const u = new BlobOids();
  u.learnShard(
    1000,
    leaf(1000, 999, undefined, (i) => blockPath(i + 1).slice(15)),
  );
  for (const i of [1000, 1001, 1998]) assert.is(u.get(i), null, `shifted ${i}`);
  // A short tree (the shard's blocks end early): what is there is learnt.
  const v = new BlobOids();
  v.learnShard(2000, leaf(2000, 10));
  assert.is(v.get(2009), oidOf(2009).toString('hex'));
  assert.is(v.get(2010), null);
});

test.run();
