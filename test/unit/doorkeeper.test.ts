// chain/doorkeeper.ts: a key is admitted on its second sighting within a window; the window clears.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { cyrb53 } from '../../chain/compact-index.ts';
import { Doorkeeper } from '../../chain/doorkeeper.ts';

test('the first sighting is refused, the second admitted', () => {
  const d = new Doorkeeper(1000);
  for (let k = 0; k < 500; k++) assert.is(d.admit(k * 7919), false);
  for (let k = 0; k < 500; k++) assert.is(d.admit(k * 7919), true);
});

test('sightings older than the window are forgotten', () => {
  const d = new Doorkeeper(100);
  assert.is(d.admit(42), false);
  for (let k = 0; k < 100; k++) d.admit(1_000_000 + k);
  assert.is(d.admit(42), false, 'cleared after 100 sightings');
  assert.is(d.admit(42), true);
});

test('53-bit keys (string hashes) are told apart by their high bits too', () => {
  const d = new Doorkeeper(1 << 16, 20);
  const keys = Array.from({ length: 2000 }, (_, i) => cyrb53(`https://a.example/pkg/${i}.tgz`));
  let early = 0;
  for (const k of keys) if (d.admit(k)) early++;
  assert.ok(early < 20, `${early} of 2,000 distinct keys admitted at their first sighting`);
  for (const k of keys) assert.is(d.admit(k), true);
  const hi = new Doorkeeper(100, 10);
  assert.is(hi.admit(2 ** 40), false);
  assert.is(hi.admit(2 ** 41), false, 'keys differing above bit 32 only');
});

test('strict: admitted only when also sighted in the window before', () => {
  const d = new Doorkeeper(100);
  assert.is(d.admit(42, true), false);
  assert.is(d.admit(42, true), false, 'twice in this window, never before');
  assert.is(d.admit(42), true, 'not strict: the second sighting is enough');
  for (let k = 0; k < 97; k++) d.admit(1_000_000 + k);
  // The window turned: 42 was sighted in the one before.
  assert.is(d.admit(42, true), false, 'the first sighting of this window');
  assert.is(d.admit(42, true), true);
  assert.is(d.admit(7, true), false);
  assert.is(d.admit(7, true), false, '7 was not sighted in the window before');
  for (let k = 0; k < 200; k++) d.admit(2_000_000 + k);
  // Two windows on: 42 is forgotten.
  assert.is(d.admit(42, true), false);
  assert.is(d.admit(42, true), false, 'sighted two windows ago only');
});

test.run();
