/**
 * AnswerBatch: items are written at the end of the turn they were added
 * in, in order, once each; one failing item does not hold back the others.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { stat } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { AnswerBatch } from '../../gateway/http/answer-batch.ts';

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

test('written after the current code, in the order added, each once, in one batch per turn', async () => {
  const written: string[] = [];
  const batch = new AnswerBatch<string>(
    (s) => written.push(s),
    () => assert.unreachable('nothing fails'),
  );
  batch.add('a');
  batch.add('b');
  batch.add('c');
  assert.equal(written, [], 'nothing is written while the code that added them runs');
  assert.is(batch.waiting, 3);
  await turn();
  assert.equal(written, ['a', 'b', 'c']);
  assert.is(batch.waiting, 0);
  batch.add('d');
  await turn();
  await turn();
  assert.equal(written, ['a', 'b', 'c', 'd'], 'a later item is written once, on its own turn');
});

test('before timers of the next turn: what one I/O phase made is written in the check phase after it', async () => {
  const order: string[] = [];
  const batch = new AnswerBatch<string>(
    (s) => order.push(s),
    () => {},
  );
  await new Promise<void>((resolve) => {
    // From an I/O callback (as a request is), setImmediate runs before a 0 ms timer.
    stat(fileURLToPath(import.meta.url), () => {
      setTimeout(() => {
        order.push('timer');
        resolve();
      }, 0);
      batch.add('answer');
    });
  });
  assert.equal(order, ['answer', 'timer']);
});

test('an item whose write throws goes to failed; the items after it are still written', async () => {
  const written: number[] = [];
  const failed: Array<[number, string]> = [];
  const batch = new AnswerBatch<number>(
    (n) => {
      if (n === 2) throw new Error('boom');
      written.push(n);
    },
    (n, e) => failed.push([n, (e as Error).message]),
  );
  for (const n of [1, 2, 3]) batch.add(n);
  await turn();
  assert.equal(written, [1, 3]);
  assert.equal(failed, [[2, 'boom']]);
});

test('an item whose failed throws too goes to lost; the drain does not throw and the items after it are still written', async () => {
  const written: number[] = [];
  const lost: Array<[number, string]> = [];
  const batch = new AnswerBatch<number>(
    (n) => {
      if (n === 2) throw new Error('boom');
      written.push(n);
    },
    () => {
      throw new Error('failed failed');
    },
    (n, e) => lost.push([n, (e as Error).message]),
  );
  let uncaught: unknown = null;
  const onUncaught = (e: unknown) => {
    uncaught = e;
  };
  process.prependListener('uncaughtException', onUncaught);
  try {
    for (const n of [1, 2, 3]) batch.add(n);
    await turn();
  } finally {
    process.off('uncaughtException', onUncaught);
  }
  assert.is(uncaught, null);
  assert.equal(written, [1, 3]);
  assert.equal(lost, [[2, 'failed failed']]);
});

test('an item added while the batch is being written goes to the next batch, not lost', async () => {
  const written: string[] = [];
  const batch = new AnswerBatch<string>(
    (s) => {
      written.push(s);
      if (s === 'first') batch.add('added while writing');
    },
    () => {},
  );
  batch.add('first');
  await turn();
  assert.equal(written, ['first']);
  await turn();
  assert.equal(written, ['first', 'added while writing']);
});

test.run();
