/**
 * gateway/cache/clock-cache.ts, the lookup answers' cache: bounded in bytes
 * whatever is put in, an entry used since it was last looked at survives an
 * eviction round (unused ones go first, oldest first), a replaced key is
 * counted once, an entry over the whole budget is not kept.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ClockCache } from '../../gateway/cache/clock-cache.ts';

const entry = (bytes: number, id = 0) => ({ bytes, used: false, id });

test('bounded in bytes; the oldest unused entries go first; a used one is kept', () => {
  const c = new ClockCache<ReturnType<typeof entry>>(1000);
  for (let i = 0; i < 10; i++) c.set(`k${i}`, entry(100, i));
  assert.is(c.size, 10);
  assert.is(c.byteCount, 1000);
  assert.ok(c.get('k0'), 'k0 held');
  c.set('k10', entry(100, 10)); // over budget: k0 is marked (moved to the end, unmarked), k1 goes
  assert.is(c.byteCount, 1000);
  assert.ok(c.get('k0'), 'a used entry survived the eviction');
  assert.is(c.get('k1'), undefined, 'the oldest unused entry went');
  c.set('k11', entry(250, 11)); // needs three more out: k2, k3, k4 (k0 is marked again, moved)
  assert.equal(
    ['k2', 'k3', 'k4'].map((k) => c.get(k)),
    [undefined, undefined, undefined],
  );
  assert.ok(c.get('k0') && c.get('k5') && c.get('k11'));
  assert.ok(c.byteCount <= 1000);
});

test('a replaced key is counted once; an entry over the budget is not kept', () => {
  const c = new ClockCache<ReturnType<typeof entry>>(1000);
  c.set('a', entry(400, 1));
  c.set('a', entry(300, 2));
  assert.is(c.size, 1);
  assert.is(c.byteCount, 300);
  assert.is(c.get('a')!.id, 2);
  c.set('b', entry(1001));
  assert.is(c.get('b'), undefined);
  assert.is(c.byteCount, 300);
  c.set('a', entry(1001)); // replacing with one too big drops the old one too
  assert.is(c.get('a'), undefined);
  assert.is(c.byteCount, 0);
});

test('every entry used: the budget still holds (each is unmarked once, then evicted in order)', () => {
  const c = new ClockCache<ReturnType<typeof entry>>(10_000);
  for (let round = 0; round < 5; round++) {
    for (let i = 0; i < 200; i++) {
      const k = `r${round}-${i}`;
      c.set(k, entry(97 + (i % 7), i));
      for (const [j] of [[i], [i - 1], [i - 50]]) c.get(`r${round}-${j}`);
      assert.ok(c.byteCount <= 10_000, `over budget: ${c.byteCount}`);
    }
  }
  assert.ok(c.size > 80 && c.size <= 104, `${c.size} entries`);
});

test.run();
