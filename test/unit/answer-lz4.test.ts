/**
 * The answer store's LZ4 decoder (gateway/cache/answer-store.ts `lz4Into`):
 * what lz4-napi's compressSync writes, with and without a dictionary, decodes
 * to the same bytes; a malformed or cut block, or a wrong length, is refused
 * (false), never thrown, and nothing outside the answer's bytes is written.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { compressSync, uncompressSync } from 'lz4-napi';
import { lz4Into } from '../../gateway/cache/answer-store.ts';

/** A pseudo-random generator with a seed (the same inputs every run). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Inputs of the shapes LZ4 codes differently: short and long literal runs, short, long and overlapping matches. */
function inputs(): Buffer[] {
  const r = rng(33);
  const out: Buffer[] = [Buffer.alloc(0), Buffer.from('a'), Buffer.from('{"success":true}'), Buffer.alloc(5000, 0x61), randomBytes(3000)];
  const words = ['"artifact_url":"https://a.example/pkg/', 'sha256:', 'endorse', '1.0.0', 'abcdef0123456789', '{', '}', ',', '"'];
  for (let k = 0; k < 300; k++) {
    const parts: string[] = [];
    const n = Math.floor(r() * 400);
    for (let j = 0; j < n; j++) {
      const x = r();
      if (x < 0.6) parts.push(words[Math.floor(r() * words.length)]!);
      else if (x < 0.8) parts.push(Math.floor(r() * 1e9).toString(36));
      else parts.push(String.fromCharCode(0x20 + Math.floor(r() * 95)).repeat(1 + Math.floor(r() * 300)));
    }
    out.push(Buffer.from(parts.join(''), 'utf8'));
  }
  return out;
}

/** `dict` then room for `want` bytes then 16 guard bytes; decodes `block` (compressSync's output) after the dictionary. */
function decode(block: Buffer, dict: Buffer, want = block.length >= 4 ? block.readUInt32LE(0) : 0): { ok: boolean; out: Buffer; guard: boolean } {
  const out = Buffer.alloc(dict.length + want + 16, 0xee);
  dict.copy(out, 0);
  const ok = lz4Into(block, 4, block.length, out, dict.length, want);
  const guard = out.subarray(dict.length + want).every((b) => b === 0xee) && out.subarray(0, dict.length).equals(dict);
  return { ok, out: out.subarray(dict.length, dict.length + want), guard };
}

test('every block compressSync writes decodes to its input, with a dictionary and without', () => {
  const all = inputs();
  const r = rng(7);
  let n = 0;
  for (const input of all) {
    const dict = all[Math.floor(r() * all.length)]!.subarray(0, 70_000);
    for (const d of [Buffer.alloc(0), dict]) {
      const block = compressSync(input, d.length === 0 ? undefined : d);
      const got = decode(block, d);
      assert.ok(got.ok, `input ${n} decodes`);
      assert.ok(got.out.equals(input), `input ${n}: the same bytes`);
      assert.ok(got.out.equals(uncompressSync(block, d.length === 0 ? undefined : d)), `input ${n}: what lz4-napi decodes`);
      assert.ok(got.guard, 'nothing written outside the answer');
      n++;
    }
  }
  assert.ok(n > 600);
});

test('a cut block, a wrong length, a bad offset or random bytes: false, never an exception, nothing written outside', () => {
  const input = inputs()[40]!;
  const dict = Buffer.from('{"success":true,"payload":{"endorsements":[]}}');
  const block = compressSync(input, dict);
  const want = block.readUInt32LE(0);
  assert.ok(decode(block, dict).ok);
  for (const cut of [5, 6, Math.floor(block.length / 2), block.length - 1]) {
    const got = decode(block.subarray(0, cut), dict, want);
    assert.not.ok(got.ok, `cut at ${cut}`);
    assert.ok(got.guard);
  }
  for (const w of [want - 1, want + 1, 0]) {
    const got = decode(block, dict, w);
    assert.not.ok(got.ok, `length ${w} for ${want}`);
    assert.ok(got.guard);
  }
  // No sequence at all (an empty input compresses to one token), a match reaching before the dictionary's start, offset 0: refused.
  assert.not.ok(decode(Buffer.from([0, 0, 0, 0]), Buffer.alloc(0), 0).ok, 'an empty block');
  assert.not.ok(decode(Buffer.from([0, 0, 0, 0, 0x10, 0x41, 0xff, 0x00]), Buffer.alloc(0), 5).ok, 'offset past the start');
  assert.not.ok(decode(Buffer.from([0, 0, 0, 0, 0x10, 0x41, 0x00, 0x00]), Buffer.alloc(0), 5).ok, 'offset 0');
  // The output buffer too short for the length named: refused before writing.
  assert.not.ok(lz4Into(block, 4, block.length, Buffer.alloc(10), 0, want));
  const r = rng(99);
  for (let k = 0; k < 2000; k++) {
    const junk = Buffer.from(Array.from({ length: 4 + Math.floor(r() * 200) }, () => Math.floor(r() * 256)));
    const got = decode(junk, dict, Math.floor(r() * 2000));
    assert.ok(got.guard, `junk ${k}: nothing written outside`);
  }
});

test.run();
