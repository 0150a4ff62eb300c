/**
 * Deterministic chains for tests and benchmarks, built with the real builder
 * and node:crypto, and written into a new chain repository (`initChainRepo`).
 */
import { buildAuthorityBlock, buildCheckpoint, buildEndorseBlock, buildRevokeBlock, artifactHashOf, type EndorsementInput } from '../../chain/build.ts';
import { formatBlockFile, formatCheckpointFile, type Block, type Checkpoint } from '../../chain/block.ts';
import type { HashAlgorithm, Signer } from '../../chain/crypto-backend.ts';
import { hexDecode, utf8 } from '../../chain/encoding.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';

export const TEST_SEED = hexDecode('4c0a8f7e2b9d16c3a5e4f7081b2c3d4e5f60718293a4b5c6d7e8f90123456789')!;
export const T0 = Date.UTC(2026, 0, 1, 9, 0, 0);
const DAY = 86_400_000;

export function testSigner(id = 'vouch-test'): Signer {
  return nodeSigner(id, privateKeyFromSeed(TEST_SEED));
}

export interface TestChain {
  blocks: Block[];
  checkpoint: Checkpoint;
  signer: Signer;
}

/** A small chain exercising every feature: several algorithms, multi-entry blocks, Unicode, tags, a revocation. */
export function buildFeatureChain(signer = testSigner()): TestChain {
  const b = nodeBackend;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: b, now: T0, uns: 'acme/chain' })];
  const add = (
    entries: { url: string; text: string; semver: string; alg?: HashAlgorithm; name?: string; comment?: string }[],
    day: number,
    extra: Partial<{ comment: string; tags: Record<string, boolean>; effectiveDate: string }> = {},
  ) => {
    const block = buildEndorseBlock({
      prev: blocks[blocks.length - 1]!,
      signer,
      backend: b,
      now: T0 + day * DAY,
      ...extra,
      entries: entries.map((e) => ({
        url: e.url,
        artifactHash: artifactHashOf(b, e.alg ?? 'sha256', utf8(e.text)),
        name: e.name ?? 'acme/widget',
        semver: e.semver,
        license: 'MIT',
        comment: e.comment ?? '',
      })),
    });
    blocks.push(block);
    return block;
  };
  const v1 = add([{ url: 'https://a.example/widget.js', text: 'widget 1', semver: '1.0.0' }], 1, { tags: { release: true } });
  add(
    [
      { url: 'https://a.example/widget.js', text: 'widget 1.1', semver: '1.1.0', alg: 'sha512', comment: 'Grüße, 世界 — 🎉' },
      { url: 'https://a.example/widget.bin', text: 'binary 1.1', semver: '1.1.0', alg: 'blake3' },
      { url: 'https://a.example/widget.txt?x=1&y=%C3%A9', text: 'text 1.1', semver: '1.1.0', alg: 'sha3-256' },
    ],
    2,
    { comment: 'release “1.1.0”' },
  );
  blocks.push(buildRevokeBlock({ prev: blocks[blocks.length - 1]!, target: v1, signer, backend: b, now: T0 + 3 * DAY }));
  add([{ url: 'https://b.example/other.tgz', text: 'other', semver: '2.0.0-rc.1+build.5', name: 'beta/other' }], 4);
  return { blocks, signer, checkpoint: buildCheckpoint({ head: blocks[blocks.length - 1]!, signer, now: T0 + 4 * DAY }) };
}

/** A chain of `n` blocks (1 authority + n-1 endorsements), for scale tests and benchmarks. */
export function buildLongChain(n: number, signer = testSigner()): TestChain {
  const b = nodeBackend;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: b, now: T0, uns: 'acme/chain' })];
  for (let i = 1; i < n; i++) {
    blocks.push(
      buildEndorseBlock({
        prev: blocks[i - 1]!,
        signer,
        backend: b,
        now: T0 + i * 1000,
        entries: [
          {
            url: `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`,
            artifactHash: artifactHashOf(b, 'sha256', utf8(`artifact ${i}`)),
            name: `acme/pkg${i % 997}`,
            semver: `1.${i}.0`,
            license: 'MIT',
            comment: `build ${i}`,
          },
        ],
      }),
    );
  }
  return { blocks, signer, checkpoint: buildCheckpoint({ head: blocks[n - 1]!, signer, now: T0 + n * 1000 }) };
}

/**
 * The endorse block after `prev`, signed by `signer` at T0 + index s (+ 500 ms): one entry
 * `https://a.example/<space>/<tag>/artifact-<index>.tgz` over the bytes "<tag> <index>", semver `<major>.<index>.0`.
 */
export function endorseNext(prev: Block, signer: Signer, tag: string, opts: { space: string; name: string; major: number }): Block {
  const i = prev.index + 1;
  return buildEndorseBlock({
    prev,
    signer,
    backend: nodeBackend,
    now: T0 + i * 1000 + 500,
    entries: [
      {
        url: `https://a.example/${opts.space}/${tag}/artifact-${i}.tgz`,
        artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(`${tag} ${i}`)),
        name: opts.name,
        semver: `${opts.major}.${i}.0`,
        license: 'MIT',
      },
    ],
  });
}

/** Appends to `blocks` (and returns) an endorse block of `entries` after its last, signed by `signer` at T0 + length s. */
export function pushEndorse(blocks: Block[], signer: Signer, entries: EndorsementInput[], opts: { effectiveDate?: string; uns?: string } = {}): Block {
  const b = buildEndorseBlock({ prev: blocks[blocks.length - 1]!, signer, backend: nodeBackend, now: T0 + blocks.length * 1000, ...opts, entries });
  blocks.push(b);
  return b;
}

/**
 * Writes `blocks` (from index 0) and `checkpoint` into a new chain repository
 * at `dir` (ChainRepo.init: one commit, `message`, by t <t@vouch.invalid> at
 * `timestamp` seconds).
 */
export function initChainRepo(dir: string, blocks: Block[], checkpoint: Checkpoint, opts: { message?: string; timestamp?: number } = {}): Promise<ChainRepo> {
  return ChainRepo.init(
    dir,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(checkpoint),
    { message: opts.message ?? 'fixture\n', authorName: 't', authorEmail: 't@vouch.invalid', timestamp: opts.timestamp ?? 1_790_000_000 },
  );
}
