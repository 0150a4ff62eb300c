/**
 * Key events in the log (docs/spec/key-events.md, issue 32 items 3-5, 7, 8): a
 * root adopted by an existing chain, routine rotation, compromise with void
 * blocks, root rotation; every refusal a verifier and an authority make,
 * each at its index with a stable code. Parallel verification across
 * them (worker threads over a repository): test/integration/key-events-parallel.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { buildRevokeBlock, ChainIndex, verifyChain } from '../../chain/index.ts';
import { applyKeyEvent, compromiseStatement, isVoid, KeyEventError, keyStatement, rootStatement, type SignedStatement } from '../../chain/key-events.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { b64, buildKeyLifeChain, HOLDERS, KeyChain, ONLINE, seededSigner } from '../helpers/key-fixture.ts';

const pin = b64(ONLINE.A);
const verify = (c: KeyChain) => verifyChain(c.blocks, { backend: nodeBackend, pinnedPublicKey: pin });
const failure = (c: KeyChain): string => {
  const r = verify(c);
  return r.ok ? 'ok' : `${r.code}@${r.index}: ${r.message.replace(/^\w+ at block \d+: /, '')}`;
};
/** The life chain's first `n` blocks, its key state and signer as the authority would hold them. */
function prefixOfLife(n: number): KeyChain {
  const c = buildKeyLifeChain();
  c.blocks.length = n;
  c.keys = stateOf(c);
  c.signer = Object.values(ONLINE).find((s) => b64(s) === c.keys.online.publicKey)!;
  return c;
}
function stateOf(c: KeyChain): KeyChain['keys'] {
  const r = verifyChain(c.blocks, { backend: nodeBackend });
  if (!r.ok) throw new Error(r.message);
  return r.keys;
}

test("a chain living through adoption, rotation, compromise and root rotation verifies with block 0's pinned key", () => {
  const c = buildKeyLifeChain();
  const r = verify(c);
  assert.ok(r.ok, r.ok ? '' : r.message);
  const k = c.keys;
  assert.is(k.sequence, 4);
  assert.equal(k.root, { version: 2, threshold: 2, keys: [HOLDERS[0]!, HOLDERS[1]!, HOLDERS[3]!].map(b64) });
  assert.is(k.online.publicKey, b64(ONLINE.C));
  assert.is(k.online.since, 8);
  assert.equal(k.retired, [b64(ONLINE.A), b64(ONLINE.B)]);
  assert.equal(k.compromised, [b64(ONLINE.B)]);
  assert.equal(k.voids, [[6, 7]]);
  assert.ok(isVoid(k, 6) && isVoid(k, 7) && !isVoid(k, 5) && !isVoid(k, 8));
  if (r.ok) assert.is(r.authority.publicKey, b64(ONLINE.C));
});

test('verifier state carries the key state the authority computed', () => {
  const c = buildKeyLifeChain();
  assert.equal(stateOf(c), c.keys);
});

test('an existing chain (no key block) verifies unchanged; a root is adopted with the current key and the new threshold', () => {
  const c = new KeyChain();
  c.endorse(1);
  c.endorse(2);
  assert.is(failure(c), 'ok');
  assert.is(stateOf(c).root, null);
  c.adoptRoot();
  assert.is(failure(c), 'ok');
  assert.is(stateOf(c).root!.version, 1);
  // The adoption block is signed by the key in force (its consent), not by a new key.
  assert.is(c.head.signer, 'vouch-test');
});

test('after a rotation the old key signs nothing: a block by it is retired_key at its index', () => {
  const c = prefixOfLife(5); // 0..4: rotation to B at 4
  c.endorse(5, ONLINE.A);
  const f = failure(c);
  assert.match(f, /^retired_key@5: /);
  assert.match(f, new RegExp(b64(ONLINE.A).replace(/[+/]/g, '\\$&')));
});

test('a forged key block signed by the online key alone (no holders) is bad_key_event at its index', () => {
  const c = prefixOfLife(4);
  const evil = seededSigner('attacker', 'vouch-test');
  c.forge({ statement: keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(evil) }), signatures: [] }, evil);
  assert.match(failure(c), /^bad_key_event@4: the root \(version 1\) needs 2 of its 3 holders' signatures, the statement has 0/);
  // Signed by the online key in force instead of the key it names: bad_signature.
  const d = prefixOfLife(4);
  d.forge(d.sign(keyStatement(d.keys, { signer: 'vouch-test', public_key: b64(ONLINE.B) }), HOLDERS.slice(0, 2)), ONLINE.A);
  assert.match(failure(d), /^bad_signature@4: the key block is not signed by the online key its statement names/);
});

/** Each bad statement at block 4 (after the root at 2) is refused by the verifier and by applyKeyEvent, naming why. */
const refusals: [string, (c: KeyChain) => SignedStatement, RegExp][] = [
  [
    'too few signatures',
    (c) => c.sign(keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.B) }), [HOLDERS[0]!]),
    /needs 2 of its 3 holders' signatures, the statement has 1/,
  ],
  [
    'a key outside the root',
    (c) => c.sign(keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.B) }), [HOLDERS[0]!, HOLDERS[3]!]),
    /not a key of the root/,
  ],
  [
    'one holder counted twice',
    (c) => {
      const s = c.sign(keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.B) }), [HOLDERS[0]!]);
      return { statement: s.statement, signatures: [s.signatures[0]!, s.signatures[0]!] };
    },
    /signed twice/,
  ],
  [
    'a small-order root key',
    (c) =>
      c.sign(
        rootStatement(c.keys, { threshold: 1, keys: [b64(HOLDERS[0]!), Buffer.from('01' + '00'.repeat(31), 'hex').toString('base64')] }),
        HOLDERS.slice(0, 2),
      ),
    /not a full-order ed25519 key/,
  ],
  [
    'a non-canonical online key',
    (c) =>
      c.sign(
        keyStatement(c.keys, { signer: 'vouch-test', public_key: Buffer.from('ed' + 'ff'.repeat(30) + '7f', 'hex').toString('base64') }),
        HOLDERS.slice(0, 2),
      ),
    /not a full-order ed25519 key/,
  ],
  [
    'rotation to a retired key',
    (c) => c.sign(keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.A) }), HOLDERS.slice(0, 2)),
    /retired earlier/,
  ],
  ['rotation to a root key', (c) => c.sign(keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(HOLDERS[2]!) }), HOLDERS.slice(0, 2)), /is a root key/],
  [
    'a compromise index beyond the head',
    (c) => c.sign(compromiseStatement(c.keys, 9, { signer: 'vouch-test', public_key: b64(ONLINE.C) }), HOLDERS.slice(0, 2)),
    /beyond the head/,
  ],
  [
    "a compromise index before the key's first block",
    (c) => c.sign(compromiseStatement(c.keys, 3, { signer: 'vouch-test', public_key: b64(ONLINE.C) }), HOLDERS.slice(0, 2)),
    /before the compromised key's first block 4/,
  ],
  [
    'a replayed statement',
    (c) => c.sign({ ...keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.C) }), sequence: 2 }, HOLDERS.slice(0, 2)),
    /already used.*replayed or superseded/,
  ],
  [
    'a statement of another chain',
    (c) => c.sign({ ...keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.C) }), chain: 'ab'.repeat(32) }, HOLDERS.slice(0, 2)),
    /is for chain abab/,
  ],
  [
    'a sequence that skips ahead',
    (c) => c.sign({ ...keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.C) }), sequence: 9 }, HOLDERS.slice(0, 2)),
    /skips ahead/,
  ],
];

for (const [what, make, why] of refusals) {
  test(`refused: ${what} (bad_key_event at its index; applyKeyEvent names it)`, () => {
    const base =
      what.includes('compromise') || what.includes('replayed') || what.includes('another chain') || what.includes('skips') || what.includes('retired') ? 7 : 4;
    const c = prefixOfLife(base === 7 ? 6 : 4); // 6: after the rotation to B (at 4) and block 5
    const signed = make(c);
    assert.throws(
      () => applyKeyEvent(nodeBackend, c.keys, signed, c.blocks.length),
      (e: unknown) => e instanceof KeyEventError && why.test(e.message),
    );
    const by = signed.statement.online.public_key === b64(ONLINE.C) ? ONLINE.C : signed.statement.online.public_key === b64(ONLINE.B) ? ONLINE.B : c.signer;
    c.forge(signed, by);
    const f = failure(c);
    assert.match(f, new RegExp(`^(bad_key_event|bad_signature)@${c.blocks.length - 1}: `), f);
    if (f.startsWith('bad_key_event')) assert.match(f, why);
  });
}

test('conflicting statements: once one is applied, another with the same sequence is stale', () => {
  const c = prefixOfLife(4);
  const one = c.sign(keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.B) }), HOLDERS.slice(0, 2));
  const other = c.sign(keyStatement(c.keys, { signer: 'vouch-test', public_key: b64(ONLINE.D) }), HOLDERS.slice(1, 3));
  c.key(one, ONLINE.B);
  assert.throws(
    () => applyKeyEvent(nodeBackend, c.keys, other, c.blocks.length),
    (e: unknown) => e instanceof KeyEventError && e.stale,
  );
});

test("a root rotation needs the old threshold and the new one (TUF's rule)", () => {
  const c = prefixOfLife(4);
  const next = rootStatement(c.keys, { threshold: 2, keys: [HOLDERS[2]!, HOLDERS[3]!].map(b64) });
  // Only the new root's holders: the old threshold is missing.
  assert.throws(
    () => applyKeyEvent(nodeBackend, c.keys, c.sign(next, [HOLDERS[2]!, HOLDERS[3]!]), 4),
    (e: unknown) => e instanceof KeyEventError && /the current root \(version 1\) needs 2/.test(e.message),
  );
  // Old threshold (H1, H2) but one of the new: refused too.
  assert.throws(
    () => applyKeyEvent(nodeBackend, c.keys, c.sign(next, [HOLDERS[0]!, HOLDERS[1]!, HOLDERS[3]!]), 4),
    (e: unknown) => e instanceof KeyEventError && /the new root \(version 2\) needs 2/.test(e.message),
  );
  // Both: accepted.
  const k = applyKeyEvent(nodeBackend, c.keys, c.sign(next, [HOLDERS[0]!, HOLDERS[1]!, HOLDERS[2]!, HOLDERS[3]!]), 4);
  assert.is(k.root!.version, 2);
});

test('a compromise and a rotation need a root: a chain without one refuses them', () => {
  const c = new KeyChain();
  c.endorse(1);
  assert.throws(() => applyKeyEvent(nodeBackend, c.keys, c.sign(keyStatement(c.keys, { signer: 'x', public_key: b64(ONLINE.B) }), []), 2), /needs a root/);
});

test('void blocks are never selected, by URL or by name, before or after an index image round trip; a void revoke revokes nothing', () => {
  const c = new KeyChain();
  c.endorse(1);
  c.adoptRoot();
  c.rotate(ONLINE.B);
  const good = c.endorse(4);
  const attackerBlock = c.endorse(5); // by B, after its last good block 4
  c.blocks.push(buildRevokeBlock({ prev: c.head, target: good, signer: ONLINE.B, backend: nodeBackend, now: Date.parse(c.head.posted) + 1000 }));
  c.compromise(4, ONLINE.C);
  c.endorse(8);
  assert.equal(stateOf(c).voids, [[5, 6]]);
  const fresh = new ChainIndex();
  for (const b of c.blocks) fresh.add(b);
  const reread = ChainIndex.fromImage(fresh.toImage(), { reader: (i) => c.blocks[i]! });
  for (const index of [fresh, reread]) {
    assert.equal(index.voids(), [[5, 6]]);
    assert.ok(index.isVoid(5) && index.isVoid(6) && !index.isVoid(4) && !index.isVoid(7));
    const url = attackerBlock.payload.endorsements[0]!.artifact_url;
    assert.is(index.select(url, { today: '2030-01-01' }), null);
    assert.equal(index.versions(url), []);
    assert.not.ok(index.blockIndexesOf(attackerBlock.payload.uns).includes(5));
    // The void revoke (block 6) does not revoke block 4.
    const sel = index.select(good.payload.endorsements[0]!.artifact_url, { today: '2030-01-01' });
    assert.is(sel?.block.index, 4);
    assert.is(sel?.revokedBy, null);
  }
});

test.run();
