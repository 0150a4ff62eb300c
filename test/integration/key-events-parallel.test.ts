/**
 * Parallel verification (worker threads over a chain repository on disk)
 * across key events (docs/spec/key-events.md): rotations, root events and
 * forged key blocks give the same state or the same first failure, at the
 * same index, as the inline walk. Split from test/unit/key-events.test.ts,
 * whose in-process checks of the key rules stay unit tests.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VouchError } from '../../chain/index.ts';
import { keyStatement, rootStatement } from '../../chain/key-events.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import { initChainRepo } from '../helpers/chain-fixture.ts';
import { b64, buildRotatingChain, HOLDERS, KeyChain, ONLINE, seededSigner } from '../helpers/key-fixture.ts';

const pin = b64(ONLINE.A);

test('parallel verification across rotations every 300 blocks agrees with the inline walk (batches handed out with an old key are verified again)', async () => {
  const work = mkdtempSync(join(tmpdir(), 'vouch-keys-'));
  try {
    const c = buildRotatingChain(2_400, 300); // above the inline threshold (2,000); 7 rotations
    const repo = await initChainRepo(join(work, 'chain'), c.blocks, c.checkpoint());
    const outcome = async (threads: number, batchSize: number) => {
      try {
        const r = await verifyDirectory(repo, { threads, batchSize, pinnedPublicKey: pin });
        return JSON.stringify([r.state.size, r.state.head, r.state.keys, r.checkpoint?.size]);
      } catch (e) {
        if (e instanceof VouchError) return `${e.code}@${e.index}: ${e.message}`;
        throw e;
      }
    };
    const inline = await outcome(0, 500);
    assert.ok(inline.startsWith('[2400,'), inline);
    assert.is(JSON.parse(inline)[2].sequence, 8);
    for (const [threads, size] of [
      [2, 97],
      [2, 500],
      [2, 1000],
    ] as const)
      assert.is(await outcome(threads, size), inline, `threads ${threads}, batch ${size}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('parallel verification across root events that keep the online key (adoption, root rotation) and a rotation agrees with inline', async () => {
  const work = mkdtempSync(join(tmpdir(), 'vouch-keys-'));
  try {
    const c = new KeyChain();
    c.adoptRoot();
    while (c.blocks.length < 1_000) c.endorse(c.blocks.length);
    c.key(c.sign(rootStatement(c.keys, { threshold: 2, keys: [HOLDERS[0]!, HOLDERS[1]!, HOLDERS[3]!].map(b64) }), HOLDERS.slice(0, 4)));
    while (c.blocks.length < 1_700) c.endorse(c.blocks.length);
    c.rotate(ONLINE.D);
    while (c.blocks.length < 2_200) c.endorse(c.blocks.length); // above the inline threshold (2,000)
    const repo = await initChainRepo(join(work, 'chain'), c.blocks, c.checkpoint());
    const outcomes = new Set<string>();
    for (const [threads, batchSize] of [
      [0, 500],
      [2, 61],
      [2, 500],
    ] as const) {
      const r = await verifyDirectory(repo, { threads, batchSize, pinnedPublicKey: pin });
      outcomes.add(JSON.stringify([r.state.size, r.state.head, r.state.keys, r.state.authority]));
    }
    assert.is(outcomes.size, 1, [...outcomes].join('\n'));
    const [size, , keys] = JSON.parse([...outcomes][0]!);
    assert.is(size, 2_200);
    assert.is(keys.sequence, 3);
    assert.is(keys.root.version, 2);
    assert.is(keys.online.publicKey, b64(ONLINE.D));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test("parallel verification finds a retired key's block deep in a rotated chain at the same index as inline", async () => {
  const work = mkdtempSync(join(tmpdir(), 'vouch-keys-'));
  try {
    const c = buildRotatingChain(2_600, 300);
    // Replace the tail: a block signed by the key retired at 2400's rotation.
    c.blocks.length = 2_450;
    const retired = seededSigner('rotation-6', 'vouch-test'); // in force 2100..2399
    c.endorse(2_450, retired);
    while (c.blocks.length < 2_600) c.endorse(c.blocks.length, c.signer);
    const repo = await initChainRepo(join(work, 'chain'), c.blocks, c.checkpoint());
    for (const threads of [0, 2]) {
      const got = await verifyDirectory(repo, { threads, batchSize: 200, pinnedPublicKey: pin }).then(
        () => 'ok',
        (e: unknown) => (e instanceof VouchError ? `${e.code}@${e.index}` : String(e)),
      );
      assert.is(got, 'retired_key@2450', `threads ${threads}`);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('a key block a worker sees ahead of its walk changes nothing when it is forged: parallel verification fails at the same index as inline', async () => {
  const work = mkdtempSync(join(tmpdir(), 'vouch-keys-'));
  try {
    const evil = seededSigner('attacker', 'vouch-test');
    const cases: [string, (c: KeyChain) => void, RegExp][] = [
      // No holder signed it: the worker cannot apply it, and the walk refuses it.
      [
        'no holders',
        (c) => c.forge({ statement: keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(evil) }), signatures: [] }, evil),
        /^bad_key_event@1234:/,
      ],
      // The holders signed it, but the block is signed by the old key: the worker puts the new key in force ahead, the walk refuses the block.
      [
        'signed by the old key',
        (c) => c.forge(c.sign(keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(evil) }), c.rootSigners()), c.signer),
        /^bad_signature@1234:/,
      ],
    ];
    for (const [name, forge, want] of cases) {
      const c = buildRotatingChain(1_234, 300);
      forge(c);
      while (c.blocks.length < 2_000) c.endorse(c.blocks.length, evil);
      const repo = await initChainRepo(join(work, name.replace(/ /g, '-')), c.blocks, c.checkpoint());
      for (const [threads, batchSize] of [
        [0, 500],
        [2, 97],
        [2, 500],
      ] as const) {
        const got = await verifyDirectory(repo, { threads, batchSize, pinnedPublicKey: pin }).then(
          () => 'ok',
          (e: unknown) => (e instanceof VouchError ? `${e.code}@${e.index}: ${e.message}` : String(e)),
        );
        assert.match(got, want, `${name}: threads ${threads}, batch ${batchSize}: ${got}`);
      }
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test.run();
