/**
 * `decide` and `checkRevocation` (tools/client/tlog-client.ts) on the feature
 * chain (test/helpers/chain-fixture.ts: block 1 endorses widget 1.0.0,
 * block 3 revokes it from day 3): which gateway's selection decides when
 * trees of different sizes select different blocks, and what evidence of a
 * revocation beyond a smaller tree must show. Real blocks, real signatures,
 * a real Merkle tree; the end-to-end runs with gateways are in
 * get-transparency.test.ts.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { hexDecode } from '../../chain/encoding.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import {
  Refusal,
  checkRevocation,
  decide,
  openVerified,
  type GatewayAnswer,
  type RevocationEvidence,
  type VerifiedCheckpoint,
} from '../../tools/client/tlog-client.ts';
import { ERROR_CATALOGUE, VouchError } from '../../chain/errors.ts';
import { signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { testSigner } from '../helpers/chain-fixture.ts';
import { buildFeatureChain } from '../helpers/chain-fixture.ts';

const c = nodeBackend;
const { blocks } = buildFeatureChain();
const tree = new MerkleTree(c);
for (const b of blocks) tree.append(hexDecode(b.record_hash)!);
const REVOKE = 3;
const DATE = blocks[REVOKE]!.payload.effective_date;

/** A checkpoint of the first `size` blocks (only size and root are read by these functions). */
const cp = (size: number): VerifiedCheckpoint => ({
  origin: 'o',
  size,
  root: tree.root(size),
  text: '',
  note: { text: '', signatures: [] } as unknown as VerifiedCheckpoint['note'],
  source: `size ${size}`,
});
const answer = (gateway: string, index: number, size: number): GatewayAnswer => ({ gateway, block: blocks[index]!, cp: cp(size) });
const evidence = (index = REVOKE, size = blocks.length): RevocationEvidence => ({ revoke: blocks[index]!, proof: tree.inclusionProof(index, size) });

test('checkRevocation: a revoke of the block, beyond the smaller tree, in force, proven in the larger one', () => {
  const older = answer('old', 1, 3);
  const newest = answer('new', 2, blocks.length);
  assert.is(checkRevocation(c, older, newest, evidence(), DATE), null);
  assert.is(checkRevocation(c, older, newest, evidence(), '2099-01-01'), null);
});

test('checkRevocation: each missing condition is named', () => {
  const newest = answer('new', 2, blocks.length);
  assert.match(checkRevocation(c, answer('old', 1, 3), newest, evidence(2), DATE)!, /block 2, named as its revocation, is not a revoke block/);
  assert.match(checkRevocation(c, answer('old', 2, 3), newest, evidence(), DATE)!, new RegExp(`block 3 revokes ${blocks[1]!.record_hash}, not block 2`));
  assert.match(checkRevocation(c, answer('old', 1, 4), newest, evidence(), DATE)!, /block 3, is inside the tree of size 4/);
  assert.match(checkRevocation(c, answer('old', 1, 3), answer('new', 2, 3), evidence(REVOKE, 3 + 1), DATE)!, /block 3, is not in the tree of size 3/);
  assert.match(checkRevocation(c, answer('old', 1, 3), newest, evidence(), '2026-01-01')!, new RegExp(`takes effect ${DATE}, after 2026-01-01`));
  const bad = evidence();
  bad.proof = [...bad.proof];
  bad.proof[0] = new Uint8Array(32);
  assert.match(checkRevocation(c, answer('old', 1, 3), newest, bad, DATE)!, /inclusion proof of its revocation, block 3, does not verify/);
  assert.match(checkRevocation(c, answer('old', 1, 3), newest, evidence(REVOKE, blocks.length - 1), DATE)!, /does not verify/);
});

const refused = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    assert.instance(e, Refusal);
    return e as Refusal;
  }
  throw new Error('decided');
};

test('decide: the newest tree decides; a newer block beyond a smaller tree needs no evidence, a newer block in a smaller tree needs its revocation', async () => {
  let asked = 0;
  const explain = async () => {
    asked++;
    return evidence();
  };
  // Same block everywhere.
  assert.is((await decide([answer('a', 2, 3), answer('b', 2, 5)], DATE, explain, c)).gateway, 'b');
  // The smaller tree (size 2) selects block 1; the newest selects block 2, beyond it: a newer version.
  assert.is((await decide([answer('a', 1, 2), answer('b', 2, 5)], DATE, explain, c)).gateway, 'b');
  assert.is(asked, 0);
  // The smaller tree (size 3) selects block 2, the newest block 1... which block 3 does not revoke: refused.
  const r = await refused(decide([answer('a', 2, 3), answer('b', 1, 5)], DATE, explain, c));
  assert.is(r.code, 'gateways_disagree');
  assert.match(
    r.line,
    /a selects block 2 \(checkpoint size 3\) but b selects block 1 \(checkpoint size 5\), which the blocks between their checkpoints cannot explain: block 3 revokes [0-9a-f]{64}, not block 2/,
  );
  assert.is(asked, 1);
});

test('decide: the revocation explains it; no evidence, or the same tree, is a disagreement', async () => {
  // Stand-in selections: the smaller tree (size 3) selects block 1, the newest (size 5) block 0... the explanation is block 3 revoking block 1.
  const older = answer('a', 1, 3);
  const newest = answer('b', 0, 5);
  assert.is((await decide([older, newest], DATE, async () => evidence(), c)).gateway, 'b');
  assert.is((await decide([newest, older], DATE, async () => evidence(), c)).gateway, 'b', 'the order of the answers does not matter');
  let r = await refused(decide([older, newest], DATE, async () => null, c));
  assert.match(r.line, /cannot explain: b shows no revocation of block 1$/);
  r = await refused(decide([older, newest], '2026-01-01', async () => evidence(), c));
  assert.match(r.line, /takes effect/);
  r = await refused(decide([answer('a', 1, 5), newest], DATE, async () => evidence(), c));
  assert.match(r.line, /^the gateways disagree on the same tree: /);
});

test('a refusal is an error of the one catalogue (a VouchError of kind answer) and keeps the line and evidence it prints', () => {
  const r = new Refusal('bad_proof', 'g: the proof is not JSON', 'hash 1\nhash 2');
  assert.instance(r, VouchError);
  assert.is(r.code, 'bad_proof');
  assert.is(r.kind, 'answer');
  assert.is(r.message, 'g: the proof is not JSON');
  assert.is(r.line, 'g: the proof is not JSON');
  assert.is(r.evidenceText, 'hash 1\nhash 2');
  assert.equal(r.evidence, { text: 'hash 1\nhash 2' });
  const codes = [
    'bad_answer',
    'no_proof',
    'bad_proof',
    'bad_checkpoint',
    'bad_state',
    'stale_checkpoint',
    'security_error',
    'gateways_disagree',
    'policy',
    'quorum',
    'void_block',
  ] as const;
  for (const code of codes) assert.is(new Refusal(code, 'x').kind, 'answer', code);
  assert.is(ERROR_CATALOGUE.revoked.kind, 'request');
});

test('openVerified: a checkpoint with an extension line other than vouch-index/v1 is refused once, naming its source once', () => {
  const signer = testSigner();
  const text = signCheckpoint(c, { origin: 'vouch.example/log', size: 1, root: new Uint8Array(32), extensions: ['ext'] }, signer);
  try {
    openVerified(c, text, { publicKey: signer.publicKey, origin: 'vouch.example/log' }, 'gw');
    assert.unreachable('opened');
  } catch (e) {
    assert.instance(e, Refusal);
    assert.is((e as Refusal).code, 'bad_checkpoint');
    assert.is((e as Refusal).line, 'gw: the checkpoint has extension lines other than one vouch-index/v1 line');
  }
});

test.run();
