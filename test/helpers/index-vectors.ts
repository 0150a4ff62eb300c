/**
 * The completeness-index vectors (test/vectors/index-v1/index-v1.json, docs/spec/index.md 9):
 * a small fixed chain given as the facts the index reads, the keys, event
 * bytes, the index root after every block, proofs and the selections they
 * imply. `npx tsx test/helpers/index-vectors.ts --write` rewrites the file.
 */
import { writeFileSync } from 'node:fs';
import { artifactHashOf, buildAuthorityBlock, buildEndorseBlock, buildRevokeBlock } from '../../chain/build.ts';
import type { Block } from '../../chain/block.ts';
import { utf8 } from '../../chain/encoding.ts';
import { CompletenessIndex, encodeEvent, indexKey } from '../../chain/index-tree.ts';
import { selectFromEvents, unitVersions, verifyIndexProof } from '../../chain/index-proof.ts';
import { ChainIndex } from '../../chain/select.ts';
import { nodeBackend as c } from '../../platform/node-crypto.ts';
import { T0, testSigner } from './chain-fixture.ts';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const DAY = 86_400_000;

export function buildVectorChain(): Block[] {
  const signer = testSigner();
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: c, now: T0, uns: 'acme/chain' })];
  const e = (url: string, name: string, semver: string) => ({
    url,
    artifactHash: artifactHashOf(c, 'sha256', utf8(url + semver)),
    name,
    semver,
    license: 'MIT',
  });
  const endorse = (entries: ReturnType<typeof e>[], date: string) =>
    blocks.push(buildEndorseBlock({ prev: blocks[blocks.length - 1]!, signer, backend: c, now: T0 + blocks.length * DAY, entries, effectiveDate: date }));
  endorse([e('https://registry.npmjs.org/leftpad/-/leftpad-1.0.0.tgz', 'npm/leftpad', '1.0.0')], '2026-01-02');
  endorse(
    [
      e('https://registry.npmjs.org/leftpad/-/leftpad-1.1.0.tgz', 'npm/leftpad', '1.1.0'),
      e('https://files.example/pypi/req-2.31.0.tar.gz', 'pypi/requests', '2.31.0'),
    ],
    '2026-01-03',
  );
  endorse([e('https://a.example/widget.js', 'acme/widget', '1.0.0')], '2026-01-04');
  endorse([e('https://a.example/widget.js', 'acme/widget', '2.0.0')], '2026-03-01');
  blocks.push(buildRevokeBlock({ prev: blocks[blocks.length - 1]!, target: blocks[4]!, signer, backend: c, now: T0 + 6 * DAY, effectiveDate: '2026-04-01' }));
  endorse([e('https://a.example/widget.js', 'acme/widget', '1.5.0')], '2026-02-01');
  return blocks;
}

export function indexVectors(blocks: readonly Block[]): unknown {
  const idx = new CompletenessIndex(c);
  const chain = new ChainIndex();
  const roots: string[] = [];
  for (const b of blocks) {
    idx.addBlock(b, (h) => chain.indexOfHash(h));
    chain.add(b);
    roots.push(hex(idx.root()));
  }
  const root = idx.root();
  const queries: { kind: 'url' | 'unit'; name: string }[] = [
    { kind: 'url', name: 'https://a.example/widget.js' },
    { kind: 'url', name: 'https://registry.npmjs.org/leftpad/-/leftpad-1.0.0.tgz' },
    { kind: 'url', name: 'https://a.example/never-endorsed.js' },
    { kind: 'unit', name: 'npm/leftpad' },
    { kind: 'unit', name: 'acme/widget' },
    { kind: 'unit', name: 'pypi/absent' },
  ];
  return {
    spec: 'docs/spec/index.md',
    blocks: blocks.map((b) => ({
      index: b.index,
      record_hash: b.record_hash,
      intent: b.payload.intent,
      effective_date: b.payload.effective_date,
      ...(b.payload.intent === 'endorse'
        ? { endorsements: b.payload.endorsements.map((x) => ({ artifact_url: x.artifact_url, name: x.name, semver: x.semver })) }
        : {}),
      ...(b.payload.intent === 'revoke' ? { target: chain.indexOfHash(b.payload.target_hash) } : {}),
    })),
    keys: queries.map((q) => ({ ...q, key: hex(indexKey(c, q.kind, q.name)) })),
    event_example: {
      endorse: {
        event: { kind: 'endorse', block: 4, date: '2026-03-01', semver: '2.0.0' },
        bytes: hex(encodeEvent({ kind: 'endorse', block: 4, date: '2026-03-01', semver: '2.0.0' })),
      },
      revoke: {
        event: { kind: 'revoke', block: 5, target: 4, date: '2026-04-01' },
        bytes: hex(encodeEvent({ kind: 'revoke', block: 5, target: 4, date: '2026-04-01' })),
      },
    },
    roots_after_each_block: roots,
    proofs: queries.map((q) => {
      const proof = idx.prove(q.kind, q.name);
      const r = verifyIndexProof(c, proof, q.kind, q.name, { root, size: idx.size });
      if (!r.ok) throw new Error(r.reason);
      const out: Record<string, unknown> = { ...q, size: idx.size, proof: hex(proof), present: r.value.present };
      if (q.kind === 'url') {
        out.selected = {
          default_2026_03_15: selectFromEvents(r.value.events, r.value.voids, { today: '2026-03-15' })?.block ?? null,
          default_2026_05_01: selectFromEvents(r.value.events, r.value.voids, { today: '2026-05-01' })?.block ?? null,
          semver_2_0_0_2026_05_01: selectFromEvents(r.value.events, r.value.voids, { semver: '2.0.0', today: '2026-05-01' })?.block ?? null,
          at_2026_02_15: selectFromEvents(r.value.events, r.value.voids, { at: '2026-02-15', today: '2026-05-01' })?.block ?? null,
        };
      } else {
        out.versions_2026_05_01 = unitVersions(r.value.events, r.value.voids, '2026-05-01').map((v) => ({
          semver: v.semver,
          block: v.block,
          revoked_by: v.revokedBy?.block ?? null,
        }));
      }
      return out;
    }),
  };
}

if (process.argv.includes('--write')) {
  writeFileSync(new URL('../vectors/index-v1/index-v1.json', import.meta.url), JSON.stringify(indexVectors(buildVectorChain()), null, 2) + '\n');
  console.log('wrote test/vectors/index-v1/index-v1.json');
}
