/**
 * The worked example in the header comment of chain/block.ts (the format's
 * spec) is rebuilt from those very lines and checked value by value, so the
 * spec cannot drift from the code.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { canonicalize, computeRecordHash, payloadMessage, base64Encode, artifactHashOf, utf8, hexDecode, type Block } from '../../chain/index.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';

const source = readFileSync(fileURLToPath(new URL('../../chain/block.ts', import.meta.url)), 'utf8');
const ex: Record<string, string> = {};
for (const m of source.matchAll(/^ \* {3}EXAMPLE ([a-z_ A-Z]+): (.*)$/gm)) ex[m[1]!] = m[2]!;
const seed = /seed\s*\n \* (\b[0-9a-f]{64}\b)/.exec(source)?.[1];

test('the spec comment holds the whole example', () => {
  for (const k of ['posted', 'prev_hash', 'comment', 'artifact', 'artifact_hash', 'payload JCS', 'signature', 'record_hash']) {
    assert.ok(ex[k] !== undefined, `missing EXAMPLE ${k}`);
  }
  assert.ok(seed, 'missing seed');
});

test('the example computes: artifact hash, payload JCS, signature, record hash', () => {
  const artifact = ex['artifact']!.replace(/\\n/g, '\n');
  assert.is(artifactHashOf(nodeBackend, 'sha256', utf8(artifact)), ex['artifact_hash']);
  const payload = JSON.parse(ex['payload JCS']!);
  assert.is(canonicalize(payload), ex['payload JCS']);
  assert.is(payload.endorsements[0].artifact_hash, ex['artifact_hash']);
  const signer = nodeSigner('vouch-test-authority', privateKeyFromSeed(hexDecode(seed!)!));
  const signature = base64Encode(signer.sign(payloadMessage(payload)));
  assert.is(signature, ex['signature']);
  const block: Omit<Block, 'record_hash'> = {
    comment: ex['comment']!,
    index: 1,
    prev_hash: ex['prev_hash']!,
    posted: ex['posted']!,
    signer: signer.id,
    payload,
    signature,
  };
  assert.is(computeRecordHash(block, nodeBackend), ex['record_hash']);
});

test.run();
