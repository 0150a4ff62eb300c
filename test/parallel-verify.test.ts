/**
 * Parallel verification (worker threads) agrees with inline verification on
 * a chain large enough to be split into batches: same state when valid, the
 * same first failure (code and index) when a block deep inside is forged.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBlockFile, formatCheckpointFile, computeRecordHash, VouchError, type Block } from '../chain/index.ts';
import { nodeBackend } from '../lib/node-crypto.ts';
import { ChainRepo, blockPath } from '../lib/chain-repo.ts';
import { verifyDirectory } from '../lib/parallel-verify.ts';
import { buildLongChain } from './helpers/chain-fixture.ts';

const N = 5_000;
const work = mkdtempSync(join(tmpdir(), 'vouch-parallel-'));
const { blocks, checkpoint, signer } = buildLongChain(N);
let repo: ChainRepo;

test.before(async () => {
  repo = await ChainRepo.init(join(work, 'chain'), blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(checkpoint), { message: 'bulk\n', authorName: 't', authorEmail: 't@vouch.invalid', timestamp: 1_790_000_000 });
});
test.after(() => rmSync(work, { recursive: true, force: true }));

async function outcome(threads: number): Promise<string> {
  try {
    const r = await verifyDirectory(repo, { threads, pinnedPublicKey: Buffer.from(signer.publicKey).toString('base64') });
    return `ok ${r.state.size} ${r.state.head} ${r.checkpoint?.size}`;
  } catch (e) {
    if (e instanceof VouchError) return `${e.code}@${e.index}`;
    throw e;
  }
}

test('a valid 5,000-block chain: inline and 2 worker threads give the same state', async () => {
  const seen: number[] = [];
  const r = await verifyDirectory(repo, { threads: 2, batchSize: 500, onProgress: (d) => seen.push(d) });
  assert.is(r.state.size, N);
  assert.is(r.state.head, blocks[N - 1]!.record_hash);
  assert.ok(seen.length > 3 && seen.every((d, i) => i === 0 || d >= seen[i - 1]!), 'progress not monotonic');
  assert.is(seen[seen.length - 1], N);
  assert.is(await outcome(0), await outcome(2));
  assert.match(await outcome(2), /^ok 5000 /);
});

test('a forged block deep in the chain: the same first failure whatever the thread count', async () => {
  const forge = (i: number, mutate: (b: any) => void) => {
    const b: any = structuredClone(blocks[i]!);
    mutate(b);
    b.record_hash = computeRecordHash(b, nodeBackend);
    writeFileSync(join(repo.dir, blockPath(i)), formatBlockFile(b as Block));
    // Relink the next block so only the forged one is wrong.
    const next: any = structuredClone(blocks[i + 1]!);
    next.prev_hash = b.record_hash;
    next.record_hash = computeRecordHash(next, nodeBackend);
    writeFileSync(join(repo.dir, blockPath(i + 1)), formatBlockFile(next as Block));
  };
  forge(3_500, (b) => { b.payload.endorsements[0].artifact_hash = 'sha256:' + 'e'.repeat(64); });
  forge(4_200, (b) => { b.posted = '2020-01-01T00:00:00Z'; });
  assert.is(await outcome(0), 'bad_signature@3500');
  assert.is(await outcome(2), 'bad_signature@3500');
  assert.is(await outcome(1), 'bad_signature@3500');
});

test.run();
