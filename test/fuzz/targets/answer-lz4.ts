/**
 * Fuzz target of the answer store's LZ4 decoder (gateway/cache/answer-store.ts
 * `lz4Into`), differential against lz4-napi's: an input is a dictionary
 * (u16 length, bytes) then a block as lz4-napi writes it (u32 LE length,
 * LZ4 block), genuine ones compressed by lz4-napi against an answer's
 * dictionary, mutated as bytes.
 * Property: never a throw; nothing written outside the answer's bytes, the
 * dictionary left as it was; accepted exactly when lz4-napi decodes it, to
 * the same bytes.
 */
import { uncompressSync } from 'lz4-napi';
import { lz4Into } from '../../../gateway/cache/answer-store.ts';
import { check, mix, mustNotThrow, mutatedBytes, randomInput, type FuzzTarget } from '../target.ts';

/** The store's own bound on a record's length (answerFor): past it nothing is decoded, here either. */
const MAX_WANT = 1 << 20;

export const answerLz4Target: FuzzTarget = {
  name: 'answer-lz4',
  about: 'LZ4 blocks of the answer store (answer-store.ts lz4Into): no throw, nothing written outside the answer, accepted exactly as lz4-napi, same bytes',
  arbitrary: (seeds) => mix(randomInput(), mutatedBytes(seeds)),
  check(input) {
    if (input.length < 6) return;
    const dictLen = Math.min(input.readUInt16BE(0), input.length - 2);
    const dict = input.subarray(2, 2 + dictLen);
    const block = input.subarray(2 + dictLen);
    if (block.length < 4) return;
    const want = block.readUInt32LE(0);
    if (want > MAX_WANT || want > (block.length - 4) * 255) return;
    const out = Buffer.alloc(dictLen + want + 16, 0xee);
    dict.copy(out, 0);
    const ok = mustNotThrow(() => lz4Into(block, 4, block.length, out, dictLen, want), 'lz4Into');
    check(out.subarray(0, dictLen).equals(dict), 'the dictionary was written to');
    check(
      out.subarray(dictLen + want).every((b) => b === 0xee),
      'bytes past the answer were written',
    );
    let ref: Buffer | null;
    try {
      ref = uncompressSync(block, dictLen === 0 ? undefined : dict);
    } catch {
      ref = null;
    }
    if (ref !== null && ref.length !== want) ref = null;
    check(ok === (ref !== null), ok ? 'accepted a block lz4-napi refuses' : 'refused a block lz4-napi decodes');
    if (ok) check(out.subarray(dictLen, dictLen + want).equals(ref!), 'decoded other bytes than lz4-napi');
  },
  runs: 400,
};
