/**
 * gateway/transparency/merkle-log.ts in process: `rootWith` (the root the tree will have
 * with entries appended, the tree unchanged) equals the root after really
 * appending, at every size up to 300 and for several batch sizes; the
 * served note is checked against the tree (and the pending entries).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { LogTree } from '../../gateway/transparency/merkle-log.ts';
import { testSigner } from '../helpers/chain-fixture.ts';

const c = nodeBackend;
const entry = (i: number) => new Uint8Array(createHash('sha256').update(`entry ${i}`).digest());

test('rootWith equals the root after appending, the tree left as it was', () => {
  const log = new LogTree(c, null);
  const reference = new MerkleTree(c);
  for (let n = 0; n <= 300; n++) {
    for (const k of [1, 2, 3, 7, 64]) {
      const more = Array.from({ length: k }, (_, j) => entry(n + j));
      const ref = new MerkleTree(c);
      for (let i = 0; i < n; i++) ref.append(entry(i));
      for (const e of more) ref.append(e);
      assert.equal(log.rootWith(more), ref.root(), `size ${n} + ${k}`);
    }
    assert.is(log.size, n);
    assert.equal(log.rootWith([]), reference.root());
    log.tree.append(entry(n));
    reference.append(entry(n));
  }
});

test('openNote: signature, size and root against the tree and the pending entries', () => {
  const signer = testSigner();
  const log = new LogTree(c, null);
  for (let i = 0; i < 10; i++) log.tree.append(entry(i));
  const ref = new MerkleTree(c);
  for (let i = 0; i < 12; i++) ref.append(entry(i));
  const note = (size: number, root = ref.root(size)) => signCheckpoint(c, { origin: 'log.example/t', size, root, extensions: [] }, signer);
  assert.is(log.openNote(note(10), signer.publicKey).checkpoint.size, 10);
  assert.is(log.openNote(note(7), signer.publicKey).checkpoint.size, 7);
  assert.is(log.openNote(note(12), signer.publicKey, [entry(10), entry(11)]).checkpoint.size, 12);
  assert.throws(() => log.openNote(note(11), signer.publicKey), /checkpoint_mismatch|names 11/);
  assert.throws(() => log.openNote(note(10, ref.root(9)), signer.publicKey), /not the Merkle root/);
  assert.throws(
    () =>
      log.openNote(
        note(10),
        testSigner('other').publicKey.map((b) => b ^ 1),
      ),
    /signature/,
  );
  assert.throws(() => log.serve(log.openNote(note(12), signer.publicKey, [entry(10), entry(11)])), /beyond the tree/);
});

test.run();
