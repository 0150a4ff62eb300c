/**
 * gateway/collect-garbage.ts: full collections without the --expose-gc
 * flag give back dead ArrayBuffers (what a cold start leaves behind), and
 * leave no `gc` on the global object.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { collectGarbage } from '../../gateway/collect-garbage.ts';

const MB = 1024 * 1024;

test('dead ArrayBuffers are given back without --expose-gc; no gc is left on the global object', async () => {
  assert.is(typeof (globalThis as { gc?: unknown }).gc, 'undefined', 'this test runs without --expose-gc');
  const before = process.memoryUsage().arrayBuffers;
  (() => {
    const junk: ArrayBuffer[] = [];
    for (let i = 0; i < 40; i++) junk.push(new ArrayBuffer(5 * MB));
    return junk.length;
  })();
  const filled = process.memoryUsage().arrayBuffers;
  assert.ok(filled - before >= 150 * MB, `only ${((filled - before) / MB).toFixed(0)} MiB of garbage outstanding (V8 collected on its own)`);
  assert.is(await collectGarbage(), true);
  const after = process.memoryUsage().arrayBuffers;
  assert.ok(after - before < 20 * MB, `${((after - before) / MB).toFixed(0)} MiB still held after the collections`);
  assert.is(typeof (globalThis as { gc?: unknown }).gc, 'undefined');
  assert.is(await collectGarbage(), true, 'again');
});

test.run();
