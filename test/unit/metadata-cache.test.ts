/**
 * The metadata cache of ecosystem routes, on an injected clock: fresh answers
 * are reused for the lifetime without asking the origin; past it the origin
 * is asked, and while it fails the kept answer is served stale (marked) until
 * the stale allowance runs out; one origin request serves concurrent misses;
 * only 200/404/410 are kept; a failure never replaces a kept answer.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { VouchError } from '../../chain/errors.ts';
import { MetadataCache, type OriginAnswer } from '../../gateway/ecosystems/metadata-cache.ts';
import { refusal } from '../helpers/refusal.ts';

function setup() {
  let now = 1_000_000;
  const cache = new MetadataCache(() => now);
  let calls = 0;
  let next: () => Promise<OriginAnswer> = async () => ({ status: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from(`answer ${calls}`) });
  const load = () => {
    calls++;
    return next();
  };
  return {
    cache,
    load,
    advance: (ms: number) => {
      now += ms;
    },
    calls: () => calls,
    answer: (f: () => Promise<OriginAnswer>) => {
      next = f;
    },
  };
}

const TTL = 60_000;
const STALE = 600_000;

test('fresh answers are reused without asking the origin; past the lifetime it is asked again', async () => {
  const s = setup();
  const a = await s.cache.get('k', TTL, STALE, s.load);
  assert.is(a.status, 200);
  assert.is(a.body.toString(), 'answer 1');
  assert.is(a.stale, false);
  s.advance(TTL - 1);
  const b = await s.cache.get('k', TTL, STALE, s.load);
  assert.is(b.body.toString(), 'answer 1');
  assert.is(b.age, 60);
  assert.is(s.calls(), 1);
  s.advance(1);
  const c = await s.cache.get('k', TTL, STALE, s.load);
  assert.is(c.body.toString(), 'answer 2');
  assert.is(c.age, 0);
  assert.is(s.calls(), 2);
  // Keys are separate.
  await s.cache.get('other', TTL, STALE, s.load);
  assert.is(s.calls(), 3);
});

test('while the origin fails, the kept answer is served stale until the allowance runs out', async () => {
  const s = setup();
  await s.cache.get('k', TTL, STALE, s.load);
  s.answer(async () => {
    throw new VouchError('origin_error', 'connection refused');
  });
  s.advance(TTL + 5_000);
  const stale = await s.cache.get('k', TTL, STALE, s.load);
  assert.is(stale.stale, true);
  assert.is(stale.body.toString(), 'answer 1');
  // A 5xx is a failure too, and does not replace the kept answer.
  s.answer(async () => ({ status: 503, headers: {}, body: Buffer.from('down') }));
  const stale2 = await s.cache.get('k', TTL, STALE, s.load);
  assert.is(stale2.stale, true);
  assert.is(stale2.body.toString(), 'answer 1');
  s.advance(STALE);
  const e = await refusal(s.cache.get('k', TTL, STALE, s.load));
  assert.is(e.code, 'origin_error');
  // Nothing kept at all: the failure reaches the caller.
  const e2 = await refusal(s.cache.get('never', TTL, STALE, s.load));
  assert.is(e2.code, 'origin_error');
});

test('a lifetime of 0 asks the origin every time; a stale allowance of 0 serves nothing stale', async () => {
  const s = setup();
  await s.cache.get('k', 0, 0, s.load);
  await s.cache.get('k', 0, 0, s.load);
  assert.is(s.calls(), 2);
  s.answer(async () => {
    throw new VouchError('origin_timeout', 'slow');
  });
  const e = await refusal(s.cache.get('k', 0, 0, s.load));
  assert.is(e.code, 'origin_timeout');
});

test('concurrent misses share one origin request', async () => {
  const s = setup();
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  s.answer(async () => {
    await gate;
    return { status: 200, headers: {}, body: Buffer.from('shared') };
  });
  const all = Promise.all([1, 2, 3, 4].map(() => s.cache.get('k', TTL, STALE, s.load)));
  release();
  const got = await all;
  assert.is(s.calls(), 1);
  for (const g of got) assert.is(g.body.toString(), 'shared');
});

test('404 and 410 are kept (a missing package costs one origin request per lifetime); 3xx and 4xx others are not', async () => {
  const s = setup();
  s.answer(async () => ({ status: 404, headers: {}, body: Buffer.from('no such package') }));
  assert.is((await s.cache.get('missing', TTL, STALE, s.load)).status, 404);
  assert.is((await s.cache.get('missing', TTL, STALE, s.load)).status, 404);
  assert.is(s.calls(), 1);
  s.answer(async () => ({ status: 301, headers: { location: '/simple/x/' }, body: Buffer.alloc(0) }));
  assert.is((await s.cache.get('moved', TTL, STALE, s.load)).headers.location, '/simple/x/');
  await s.cache.get('moved', TTL, STALE, s.load);
  assert.is(s.calls(), 3);
  assert.ok(s.cache.stats().entries >= 1);
});

test.run();
