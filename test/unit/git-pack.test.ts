/**
 * store/git-pack.ts: the one parser and writer of a pack object's header,
 * and the delta codec, against what git writes.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { OFS_DELTA, REF_DELTA, applyDelta, encodeObjectHeader, parseObjectHeader } from '../../store/git-pack.ts';
import { makeDelta } from '../../store/git-pack-writer.ts';

const bad = (why: string): never => {
  throw new Error(why);
};

/** git's OFS_DELTA distance encoding (pack-objects.c: each continuation adds one before shifting). */
function ofsDistance(n: number): Buffer {
  const out = [n & 0x7f];
  while ((n = Math.floor(n / 128)) > 0) out.unshift(0x80 | (--n & 0x7f));
  return Buffer.from(out);
}

test('object headers round-trip for every type and sizes across the varint steps', () => {
  for (const kind of [1, 2, 3, 4]) {
    for (const size of [0, 1, 15, 16, 2047, 2048, 1 << 20, 32 << 20]) {
      const h = encodeObjectHeader(kind, size);
      const p = parseObjectHeader(h, 0, h.length, bad);
      assert.equal([p.kind, p.size, p.dataAt], [kind, size, h.length]);
    }
  }
});

test('an OFS_DELTA far back in a pack: the distance is read whole, read from a short buffer at any pack offset', () => {
  for (const distance of [1, 127, 128, 200, 16_511, 16_512, 100_000, 5_000_000]) {
    const head = Buffer.concat([encodeObjectHeader(OFS_DELTA, 30), ofsDistance(distance)]);
    const offset = distance + 12; // the base is the pack's first object
    const p = parseObjectHeader(head, 0, head.length, bad, offset);
    assert.is(p.kind, OFS_DELTA);
    assert.is(p.baseDistance, distance, `distance ${distance}`);
    assert.is(p.dataAt, offset + head.length);
  }
});

test('a REF_DELTA names its base; truncated and out-of-range headers are refused', () => {
  const oid = 'ab'.repeat(20);
  const head = Buffer.concat([encodeObjectHeader(REF_DELTA, 9), Buffer.from(oid, 'hex')]);
  assert.is(parseObjectHeader(head, 0, head.length, bad).baseOid, oid);
  assert.throws(() => parseObjectHeader(head, 0, head.length - 1, bad), /truncated/);
  assert.throws(() => parseObjectHeader(Buffer.from([0x80 | (5 << 4)]), 0, 1, bad), /truncated|type 5/);
  assert.throws(() => parseObjectHeader(encodeObjectHeader(3, 33 << 20), 0, 8, bad), /more than/);
});

test('makeDelta and applyDelta: the target comes back; a delta on the wrong base is refused', () => {
  const base = Buffer.from('100644 a\0' + 'x'.repeat(500), 'latin1');
  const target = Buffer.concat([base, Buffer.from('100644 b\0' + 'y'.repeat(20), 'latin1')]);
  const delta = makeDelta(base, target)!;
  assert.ok(delta && delta.length < target.length / 4);
  assert.equal(applyDelta(delta, base), target);
  assert.throws(() => applyDelta(delta, base.subarray(1)), /expects a base/);
});

test.run();
