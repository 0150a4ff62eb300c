/**
 * The bounded fuzz pass of the suite: every target of ./targets/ for a fixed
 * number of runs from a fixed seed, its growth check (a repeated piece of a
 * genuine input must cost linear time), then every committed corpus entry
 * and regression case of test/fuzz/corpus/. Prints each target's time; the
 * file stays under a minute on the busy 2-core machine (`npm run fuzz` is
 * for long runs).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { basename } from 'node:path';
import { corpusOf, describe } from '../fuzz/target.ts';
import { TARGETS } from '../fuzz/targets/index.ts';
import { growthCheck, runTarget, timedCheck } from '../fuzz/run-target.ts';
import { chunkedRoundTrip } from '../fuzz/targets/h1.ts';
import fc from 'fast-check';
import { HeadReader } from '../../artifacts/h1/parser.ts';
import { PktReader, pktLine } from '../../store/pkt-line.ts';

const SEED = 20261129;
/** Runs of each target here: its own count times this (the whole file stays under a minute on a busy 2-core machine). */
const SCALE = 2;
/** `VOUCH_FUZZ_ONLY=a,b`: only these targets (when looking at one). */
const only = process.env.VOUCH_FUZZ_ONLY?.split(',');

for (const t of TARGETS.filter((x) => !only || only.includes(x.name))) {
  test(`fuzz ${t.name}: ${t.about}`, async () => {
    const r = await runTarget(t, { seed: SEED, runs: (t.runs ?? 300) * SCALE, slowMs: 5000 });
    console.log(`  fuzz ${t.name.padEnd(16)} ${String(r.runs).padStart(5)} runs ${(r.ms / 1000).toFixed(2).padStart(6)} s`);
    if (r.failure) {
      assert.unreachable(
        `${t.name}: ${r.failure.message}\n  input (base64, ${r.failure.input.length} bytes): ${r.failure.input.toString('base64').slice(0, 400)}\n  again: npm run fuzz -- ${t.name} --seed ${r.failure.seed} --seconds 10 (saves it under test/fuzz/corpus/${t.name}/)`,
      );
    }
  });
  test(`growth ${t.name}: a repeated piece of a genuine input costs linear time`, async () => {
    const start = performance.now();
    const why = await growthCheck(t, SEED);
    console.log(`  growth ${t.name.padEnd(16)} ${((performance.now() - start) / 1000).toFixed(2).padStart(6)} s`);
    if (why !== null) assert.unreachable(why);
  });
  test(`corpus ${t.name}: every committed seed and regression case`, async () => {
    const entries = corpusOf(t.name);
    assert.ok(entries.length > 0, `no corpus for ${t.name}`);
    for (const e of entries) {
      try {
        await timedCheck(t, e.bytes, 5000);
      } catch (err) {
        assert.unreachable(`${t.name} ${basename(e.file)}: ${describe(err)}`);
      }
    }
  });
}

/** Bytes copied by Buffer.concat and Buffer#copy while `run` runs: the work of a reader, counted rather than timed. */
function bytesCopied(run: () => void): number {
  let n = 0;
  const concat = Buffer.concat;
  const copy = Buffer.prototype.copy;
  Buffer.concat = ((list: readonly Uint8Array[], total?: number) => {
    const r = concat(list, total);
    n += r.length;
    return r;
  }) as typeof Buffer.concat;
  Buffer.prototype.copy = function (this: Buffer, ...a: Parameters<Buffer['copy']>) {
    const r = copy.apply(this, a);
    n += r;
    return r;
  };
  try {
    run();
  } finally {
    Buffer.concat = concat;
    Buffer.prototype.copy = copy;
  }
  return n;
}

// What the growth check found: a reader fed one byte a read copied all it held at each read (quadratic).
test('growth regression: HeadReader fed a 60 KiB head one byte a read copies linear bytes', () => {
  const head = Buffer.from(`HTTP/1.1 200 OK\r\nX-Pad: ${'a'.repeat(60 << 10)}\r\nContent-Length: 0\r\n\r\n`, 'latin1');
  let done = false;
  const copied = bytesCopied(() => {
    const r = new HeadReader();
    for (let i = 0; i < head.length && !done; i++) done = r.push(head.subarray(i, i + 1)) !== null;
  });
  assert.ok(done, 'the head was not read');
  assert.ok(copied < 8 * head.length, `copied ${copied} bytes for a head of ${head.length}`);
});

test('growth regression: PktReader fed the longest pkt-line one byte a read copies linear bytes', () => {
  const line = pktLine(Buffer.alloc(65516, 0x61));
  let lines = 0;
  const copied = bytesCopied(() => {
    const r = new PktReader(() => {
      lines++;
    }, 4);
    for (let i = 0; i < line.length; i++) r.push(line.subarray(i, i + 1));
    r.end();
  });
  assert.is(lines, 1);
  assert.ok(copied < 8 * line.length, `copied ${copied} bytes for a pkt-line of ${line.length}`);
});

test('chunked coding: bodies written by the rules decode to their data, read in any pieces', () => {
  fc.assert(chunkedRoundTrip, { seed: SEED, numRuns: 300 });
});

test.run();
