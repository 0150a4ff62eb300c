/**
 * Fuzz target of the completeness-index proofs a client reads (docs/spec/index.md 6, 11):
 * `verifyIndexProof` over random and mutated proof bytes for each key of the
 * vectors (test/vectors/index-v1), the selection, unit listing and listing
 * verdict redone from whatever it accepts, and the side route's JSON answer.
 * Property: an answer (`ok` true or false with a reason), never a throw;
 * a proof accepted for a key at the vectors' root carries exactly the
 * genuine proof's events (a second set of events would be a hash collision).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { verifyIndexProof, selectFromEvents, unitVersions } from '../../../chain/index-proof.ts';
import { expectedListing, judgeListing, parseListingProof } from '../../../chain/index-listing.ts';
import type { KeyKind } from '../../../chain/index-tree.ts';
import { nodeBackend } from '../../../platform/node-crypto.ts';
import { check, mix, mutatedBytes, mutatedJson, randomInput, refusedOnly, type FuzzTarget } from '../target.ts';

interface VectorProof {
  kind: KeyKind;
  name: string;
  size: number;
  proof: string;
}
const vectors = JSON.parse(readFileSync(fileURLToPath(new URL('../../vectors/index-v1/index-v1.json', import.meta.url)), 'utf8')) as {
  proofs: VectorProof[];
  roots_after_each_block: string[];
};
const KEYS = vectors.proofs.map((p) => {
  const root = Buffer.from(vectors.roots_after_each_block[p.size - 1]!, 'hex');
  const genuine = verifyIndexProof(nodeBackend, Buffer.from(p.proof, 'hex'), p.kind, p.name, { root, size: p.size });
  if (!genuine.ok) throw new Error(`vector proof of ${p.name} does not verify: ${genuine.reason}`);
  return { ...p, root, events: JSON.stringify(genuine.value.events), voids: JSON.stringify(genuine.value.voids) };
});
const TOKENS = [
  Buffer.from([0x01]),
  Buffer.from([0x02]),
  Buffer.from([0x45]),
  Buffer.from([0x52]),
  Buffer.from([0xff, 0xff, 0xff, 0xff]),
  Buffer.alloc(8),
  '2026-01-01',
  '9999-99-99',
];

export const indexProofTarget: FuzzTarget = {
  name: 'index-proof',
  about: 'verifyIndexProof, the selection and listing redone from it, parseListingProof: an answer, never a throw; nothing but the genuine events accepted',
  arbitrary: (seeds) =>
    mix(randomInput(['\u0001', '\u0002', 'E', 'R', '2026-01-01', '{', '"index_proof"', '"kind"']), mutatedBytes(seeds, { tokens: TOKENS }), mutatedJson(seeds)),
  check(input) {
    for (const k of KEYS) {
      const r = refusedOnly(() => verifyIndexProof(nodeBackend, input, k.kind, k.name, { root: k.root, size: k.size }), []);
      check(r !== undefined, 'no answer');
      if (!r!.ok) {
        check(typeof r!.reason === 'string' && r!.reason.length > 0, 'a refusal without a reason');
        continue;
      }
      const v = r!.value;
      check(JSON.stringify(v.events) === k.events && JSON.stringify(v.voids) === k.voids, `accepted other events for ${k.name}`);
      for (const q of [{ today: '2026-05-01' }, { today: '2026-05-01', semver: '1.0.0' }, { today: '2026-05-01', at: '2026-02-15' }]) {
        refusedOnly(() => selectFromEvents(v.events, v.voids, q), []);
      }
      refusedOnly(() => unitVersions(v.events, v.voids, '2026-05-01'), []);
      const exp = refusedOnly(() => expectedListing(v.events, v.voids, '2026-05-01'), [])!;
      refusedOnly(() => judgeListing(exp, [{ semver: '1.0.0', endorsed: true }], 'deny'), []);
    }
    let json: unknown;
    try {
      json = JSON.parse(input.toString('utf8'));
    } catch {
      return;
    }
    const p = refusedOnly(() => parseListingProof(json), []);
    if (p !== undefined && typeof p !== 'string') check(Number.isSafeInteger(p.size) && p.size >= 0, `size ${p.size}`);
  },
  runs: 300,
};
