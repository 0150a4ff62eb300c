/**
 * SignatureBatch (chain/verify.ts): signature checks put off until a run of
 * blocks has been examined give exactly the facts of checking inline, and
 * nothing is decided before `check`.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { examineParsed, parseBlock, SignatureBatch, type Block, type BlockFacts } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { buildLongChain } from '../helpers/chain-fixture.ts';

const { blocks } = buildLongChain(300);
const authority = { signer: blocks[0]!.payload.authority!.signer, publicKey: blocks[0]!.payload.authority!.public_key };
const parsed = (b: Block, i: number) => parseBlock(structuredClone(b), i);

test('facts from a batch equal inline facts once checked, and say signatureOk null before', () => {
  const batch = new SignatureBatch();
  const deferred: BlockFacts[] = [];
  for (let i = 1; i < blocks.length; i++) deferred.push(examineParsed(parsed(blocks[i]!, i), i, authority, nodeBackend, batch));
  assert.is(batch.size, blocks.length - 1);
  for (const f of deferred) assert.is((f as { signatureOk: boolean | null }).signatureOk, null);
  // 299 messages of about 700 bytes: more than the 64 KiB the batch starts with.
  batch.check(nodeBackend);
  assert.is(batch.size, 0);
  for (let i = 1; i < blocks.length; i++) {
    assert.equal(deferred[i - 1], examineParsed(parsed(blocks[i]!, i), i, authority, nodeBackend), `block ${i}`);
    assert.is((deferred[i - 1] as { signatureOk: boolean }).signatureOk, true);
  }
});

test('each forged or malformed signature fails at its own block only; a reused batch starts empty', () => {
  const batch = new SignatureBatch();
  const forged = new Map<number, (b: any) => void>([
    [
      3,
      (b) => {
        b.payload.semver = '9.9.9';
      },
    ], // signed message changed
    [
      4,
      (b) => {
        b.signature = b.signature.slice(0, -4) + 'AAA=';
      },
    ], // other 64 bytes
    [
      5,
      (b) => {
        b.signature = 'AAAA';
      },
    ], // 3 bytes
    [
      6,
      (b) => {
        b.signature = blocks[7]!.signature;
      },
    ], // another block's signature
  ]);
  for (let round = 0; round < 2; round++) {
    const facts: BlockFacts[] = [];
    for (let i = 1; i < 10; i++) {
      const b: any = structuredClone(blocks[i]!);
      forged.get(i)?.(b);
      facts.push(examineParsed(parseBlock(b, i), i, authority, nodeBackend, batch));
    }
    batch.check(nodeBackend);
    facts.forEach((f, k) => assert.is((f as { signatureOk: boolean }).signatureOk, !forged.has(k + 1), `block ${k + 1}, round ${round}`));
  }
});

test('block 0 and an unknown authority: nothing is put off', () => {
  const batch = new SignatureBatch();
  const f0 = examineParsed(parsed(blocks[0]!, 0), 0, null, nodeBackend, batch) as { signatureOk: boolean | null };
  assert.is(batch.size, 1); // block 0 is checked against the key it declares
  const f1 = examineParsed(parsed(blocks[1]!, 1), 1, null, nodeBackend, batch) as { signatureOk: boolean | null };
  assert.is(batch.size, 1);
  batch.check(nodeBackend);
  assert.is(f0.signatureOk, true);
  assert.is(f1.signatureOk, null);
});

test.run();
