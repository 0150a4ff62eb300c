/** Version selection (docs/spec/design.md §3.3) and revocation (1.5) over a real signed chain. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ChainIndex, buildAuthorityBlock, buildEndorseBlock, buildRevokeBlock, verifyChain, type Block } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { pushEndorse, testSigner, T0 } from '../helpers/chain-fixture.ts';

const signer = testSigner();
const U = 'https://a.example/lib.tgz';
const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now: T0, uns: 'acme/chain' })];
function endorse(semver: string, effectiveDate: string, hashChar: string, url = U): Block {
  return pushEndorse(blocks, signer, [{ url, artifactHash: 'sha256:' + hashChar.repeat(64), name: 'acme/lib', semver, license: 'MIT' }], { effectiveDate });
}
const b1 = endorse('1.0.0', '2026-01-10', 'a'); // index 1
const b2 = endorse('1.1.0', '2026-02-01', 'b'); // index 2
const b3 = endorse('1.0.1', '2026-02-01', 'c'); // index 3: same date as b2, higher index
const b4 = endorse('2.0.0', '2026-01-20', 'd'); // index 4: newest block, older effective date
const b5 = endorse('1.1.0', '2026-03-01', 'e'); // index 5: 1.1.0 again (re-signed)
endorse('9.9.9', '2026-03-01', 'f', 'https://other.example/x'); // another URL
const r6 = buildRevokeBlock({ prev: blocks[blocks.length - 1]!, target: b5, signer, backend: nodeBackend, now: T0 + 10_000, effectiveDate: '2026-04-01' });
blocks.push(r6);

const index = new ChainIndex();
for (const b of blocks) index.add(b);
const pick = (q: { semver?: string; at?: string; today?: string }) => {
  const s = index.select(U, { today: '2026-03-15', ...q });
  return s === null ? null : `${s.block.index}${s.revokedBy ? ' revoked' : ''}`;
};

test('the chain under test verifies', () => {
  assert.ok(verifyChain(blocks, { backend: nodeBackend }).ok);
});

test('no semver, no at: the newest block (highest index) endorsing the URL', () => {
  assert.is(pick({}), '5');
});

test('semver: the newest block with exactly that version', () => {
  assert.is(pick({ semver: '1.1.0' }), '5');
  assert.is(pick({ semver: '1.0.0' }), '1');
  assert.is(pick({ semver: '3.0.0' }), null);
});

test('at: greatest effective_date <= at, ties to the highest index', () => {
  assert.is(pick({ at: '2026-01-09' }), null);
  assert.is(pick({ at: '2026-01-10' }), '1');
  assert.is(pick({ at: '2026-01-25' }), '4');
  assert.is(pick({ at: '2026-02-01' }), '3'); // b2 and b3 tie on the date; b3 has the higher index
  assert.is(pick({ at: '2026-02-28' }), '3');
  assert.is(pick({ at: '2026-03-01' }), '5');
});

test('semver and at together: both conditions', () => {
  assert.is(pick({ semver: '1.1.0', at: '2026-02-15' }), '2');
  assert.is(pick({ semver: '1.1.0', at: '2026-03-02' }), '5');
  assert.is(pick({ semver: '2.0.0', at: '2026-01-19' }), null);
});

test('revocation: from its effective date on, the revoked block no longer serves by default', () => {
  assert.is(pick({ today: '2026-03-31' }), '5'); // before the revoke's effective date
  assert.is(pick({ today: '2026-04-01' }), '4'); // revoked: falls back to the next newest
  assert.is(pick({ semver: '1.1.0', today: '2026-04-02' }), '5 revoked'); // exact semver: returned, flagged
  assert.is(pick({ at: '2026-03-05', today: '2026-05-01' }), '5'); // at= before the revocation still resolves to it
  assert.is(pick({ at: '2026-04-05', today: '2026-05-01' }), '3'); // at= after: skips the revoked one
});

test('the index answers blocks by hash and by unit name', () => {
  assert.is(index.blockByHash(b3.record_hash)?.index, 3);
  assert.is(index.blocksOf('acme/lib').length, 6);
  assert.is(index.versions(U).length, 5);
  assert.is(index.revocationOf(b5, '2026-04-01')?.index, r6.index);
  assert.is(index.revocationOf(b1, '2030-01-01'), null);
  void b2;
  void b4;
});

test('a tag named __proto__ survives parsing, so its block still verifies', () => {
  const b = buildEndorseBlock({
    prev: blocks[0]!,
    signer,
    backend: nodeBackend,
    now: T0 + 1000,
    tags: JSON.parse('{"__proto__": true, "x": false}'),
    entries: [{ url: U, artifactHash: 'sha256:' + 'a'.repeat(64), name: 'acme/lib', semver: '1.0.0', license: 'MIT' }],
  });
  assert.equal(Object.keys(b.payload.tags).sort(), ['__proto__', 'x']);
  assert.ok(verifyChain([blocks[0], b], { backend: nodeBackend }).ok);
});

test.run();
