/**
 * The chain core against data made by independent implementations:
 * RFC 8785 reference data and shared/vectors/chain-v1.json, byte for byte,
 * through both crypto backends.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  canonicalize,
  verifyChain,
  payloadMessage,
  computeRecordHash,
  checkpointMessage,
  base64Encode,
  hexDecode,
  utf8,
  artifactHashOf,
  parseBlock,
  type CryptoBackend,
} from '../../chain/index.ts';
import { nobleBackend, nobleSigner } from '../../chain/backend-noble.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { loadChainVectors, loadJcsVectors } from '../helpers/vectors.ts';

const V = loadChainVectors();
const seed = hexDecode(V.key.seed_hex)!;
const backends: CryptoBackend[] = [nodeBackend, nobleBackend];

for (const { name, input, output } of loadJcsVectors()) {
  test(`JCS reference data: ${name} (including non-integer numbers)`, () => {
    const got = Buffer.from(utf8(canonicalize(JSON.parse(input))));
    assert.is(got.toString('hex'), output.toString('hex'));
  });
}

test('JCS refuses what it cannot represent', () => {
  assert.throws(() => canonicalize({ a: NaN }), /not finite/);
  assert.throws(() => canonicalize({ a: '\ud800' }), /lone surrogate/);
  assert.throws(() => canonicalize({ a: undefined }), /undefined/);
  const cyclic: any = {};
  cyclic.self = cyclic;
  assert.throws(() => canonicalize(cyclic), /cyclic/);
});

for (const [i, jcs] of Object.entries(V.valid.payload_jcs)) {
  test(`payload JCS of valid block ${i} matches byte for byte`, () => {
    assert.is(canonicalize(V.valid.blocks[Number(i)].payload), jcs);
  });
}

for (const [i, jcs] of Object.entries(V.valid.record_jcs)) {
  test(`record JCS of valid block ${i} matches byte for byte`, () => {
    const { record_hash, ...rest } = V.valid.blocks[Number(i)];
    assert.is(canonicalize(rest), jcs);
  });
}

for (const backend of backends) {
  test(`[${backend.name}] every record_hash and signature of the valid chain recomputes`, () => {
    const nodeSig = nodeSigner(V.key.signer, privateKeyFromSeed(seed));
    const nobleSig = nobleSigner(V.key.signer, seed);
    assert.is(base64Encode(nodeSig.publicKey), V.key.public_key);
    assert.is(base64Encode(nobleSig.publicKey), V.key.public_key);
    for (const b of V.valid.blocks) {
      assert.is(computeRecordHash(b, backend), b.record_hash, `record_hash of block ${b.index}`);
      // ed25519 is deterministic: both signers reproduce the vector's signature.
      assert.is(base64Encode(nodeSig.sign(payloadMessage(b.payload))), b.signature);
      assert.is(base64Encode(nobleSig.sign(payloadMessage(b.payload))), b.signature);
    }
    assert.is(base64Encode(nodeSig.sign(checkpointMessage(V.valid.checkpoint))), V.valid.checkpoint.signature);
  });

  test(`[${backend.name}] the valid chain and its checkpoint verify`, () => {
    const r = verifyChain(V.valid.blocks, { backend, checkpoint: V.valid.checkpoint, pinnedPublicKey: V.key.public_key });
    assert.ok(r.ok, r.ok ? '' : r.message);
    if (!r.ok) return;
    assert.is(r.size, 3);
    assert.is(r.head, V.valid.blocks[2].record_hash);
    assert.equal(r.authority, { signer: V.key.signer, publicKey: V.key.public_key });
  });

  test(`[${backend.name}] artifact hashes of the vector artifacts match the signed ones`, () => {
    const js = V.valid.blocks[1].payload.endorsements[0];
    assert.is(artifactHashOf(backend, 'sha256', utf8(V.artifacts['widget-1.0.0.js']!)), js.artifact_hash);
    const bin = V.valid.blocks[2].payload.endorsements[1];
    assert.is(artifactHashOf(backend, 'sha512', Buffer.from(V.artifacts['widget-1.1.0.bin_base64']!, 'base64')), bin.artifact_hash);
  });

  for (const c of V.invalid) {
    test(`[${backend.name}] invalid vector ${c.name}: ${c.expect.code} at ${c.expect.index}`, () => {
      const r = verifyChain(c.blocks, {
        backend,
        pinnedPublicKey: c.pinned_public_key ?? null,
        checkpoint: c.checkpoint,
      });
      assert.is(r.ok, false, `${c.name} was accepted`);
      if (r.ok) return;
      assert.is(r.code, c.expect.code, r.message);
      assert.is(r.index, c.expect.index, r.message);
    });
  }
}

test('the parsed valid blocks round-trip unchanged (strict parser keeps every byte)', () => {
  for (const b of V.valid.blocks) assert.is(canonicalize(parseBlock(b, b.index)), canonicalize(b));
});

test.run();
