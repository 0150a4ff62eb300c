/**
 * Parallel verification (worker threads) agrees with inline verification on
 * a chain large enough to be split into batches: same state when valid, the
 * same first failure (code and index) when a block deep inside is forged,
 * and the same blocks handed to `onVerified` (the gateway's cold start).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBlockFile, formatCheckpointFile, computeRecordHash, parseBlock, VouchError, type Block } from '../../chain/index.ts';
import { indexFactsOf } from '../../chain/index-facts.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { blockPath } from '../../store/chain-repo.ts';
import { blockDirSource, writeBlockDir } from '../helpers/block-dir.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import { buildLongChain } from '../helpers/chain-fixture.ts';

const N = 3_000;
const work = mkdtempSync(join(tmpdir(), 'vouch-parallel-'));
const { blocks, checkpoint, signer } = buildLongChain(N);
// A directory of block files (the verifier's working-tree path), forged in place by the tests below.
const repo = blockDirSource(join(work, 'chain'));

test.before(() => {
  writeBlockDir(
    repo.dir,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(checkpoint),
  );
});
test.after(() => rmSync(work, { recursive: true, force: true }));

async function outcome(threads: number, batchSize = 1_000): Promise<string> {
  try {
    const r = await verifyDirectory(repo, { threads, batchSize, pinnedPublicKey: Buffer.from(signer.publicKey).toString('base64') });
    return `ok ${r.state.size} ${r.state.head} ${r.checkpoint?.size}`;
  } catch (e) {
    if (e instanceof VouchError) return `${e.code}@${e.index}`;
    throw e;
  }
}

test('a valid 3,000-block chain: inline and 2 worker threads give the same state', async () => {
  const seen: number[] = [];
  const r = await verifyDirectory(repo, { threads: 2, batchSize: 500, onProgress: (d) => seen.push(d) });
  assert.is(r.state.size, N);
  assert.is(r.state.head, blocks[N - 1]!.record_hash);
  assert.ok(seen.length > 3 && seen.every((d, i) => i === 0 || d >= seen[i - 1]!), 'progress not monotonic');
  assert.is(seen[seen.length - 1], N);
  assert.is(await outcome(0), await outcome(2));
  assert.match(await outcome(2), /^ok 3000 /);
});

/**
 * Verifies with `onVerified` and checks what it is handed as it comes: chain order (block 0
 * first, nothing skipped or repeated), each text byte for byte the file, each facts
 * `indexFactsOf` of the file parsed. Returns how many blocks were handed over and the outcome.
 */
async function handedOver(threads: number, batchSize = 500): Promise<{ upTo: number; outcome: string }> {
  let upTo = 0;
  let outcome = 'ok';
  try {
    await verifyDirectory(repo, {
      threads,
      batchSize,
      onVerified: (start, texts, facts) => {
        assert.is(start, upTo, 'in chain order, nothing skipped or repeated');
        assert.ok(texts.length > 0 && facts.length === texts.length);
        for (let i = 0; i < texts.length; i++) {
          const bytes = readFileSync(join(repo.dir, blockPath(start + i)));
          assert.ok(Buffer.from(texts[i]!, 'utf8').equals(bytes), `text of block ${start + i}`);
          assert.equal(facts[i], indexFactsOf(parseBlock(JSON.parse(bytes.toString('utf8')), start + i)), `facts of block ${start + i}`);
        }
        upTo += texts.length;
      },
    });
  } catch (e) {
    if (!(e instanceof VouchError)) throw e;
    outcome = `${e.code}@${e.index}`;
  }
  return { upTo, outcome };
}

test('onVerified: every block in chain order, texts as the files, facts of the parsed files; nothing past a failing block; inline, 1 and 2 threads alike', async () => {
  for (const threads of [0, 1, 2]) assert.equal(await handedOver(threads), { upTo: N, outcome: 'ok' }, `${threads} threads`);
  const write = (b: any) => writeFileSync(join(repo.dir, blockPath(b.index)), formatBlockFile(b as Block));
  const resealed = (i: number, mutate: (b: any) => void) => {
    const b: any = structuredClone(blocks[i]!);
    mutate(b);
    b.record_hash = computeRecordHash(b, nodeBackend);
    return b;
  };
  // Inside a batch (500: 2001..2500), at a batch's first block, and a file that is no block.
  const cases: { at: number; want: string; apply: () => void }[] = [
    {
      at: 2250,
      want: 'bad_signature@2250',
      apply: () =>
        write(
          resealed(2250, (b) => {
            b.payload.semver = '9.9.9';
          }),
        ),
    },
    {
      at: 1001,
      want: 'prev_hash_mismatch@1001',
      apply: () =>
        write(
          resealed(1001, (b) => {
            b.prev_hash = 'f'.repeat(64);
          }),
        ),
    },
    { at: 2222, want: 'malformed@2222', apply: () => writeFileSync(join(repo.dir, blockPath(2222)), 'not json\n') },
  ];
  for (const c of cases) {
    c.apply();
    for (const threads of [0, 1, 2]) assert.equal(await handedOver(threads), { upTo: c.at, outcome: c.want }, `${threads} threads: ${c.want}`);
    write(blocks[c.at]!);
  }
  assert.equal(await handedOver(2, 499), { upTo: N, outcome: 'ok' });
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
  forge(2_100, (b) => {
    b.payload.endorsements[0].artifact_hash = 'sha256:' + 'e'.repeat(64);
  });
  forge(2_700, (b) => {
    b.posted = '2020-01-01T00:00:00Z';
  });
  assert.is(await outcome(0), 'bad_signature@2100');
  assert.is(await outcome(2), 'bad_signature@2100');
  assert.is(await outcome(1), 'bad_signature@2100');
});

test('failures at the first, last and middle block of a worker batch and at the edges of a run of signature checks: the same code and index as inline', async () => {
  // batchSize 500: batches start at blocks 1, 501, 1001, ... The workers walk each batch
  // themselves and report one failure; the main thread checks each batch's first block.
  const file = (i: number) => join(repo.dir, blockPath(i));
  const write = (b: any) => writeFileSync(file(b.index), formatBlockFile(b as Block));
  const resealed = (i: number, mutate: (b: any) => void) => {
    const b: any = structuredClone(blocks[i]!);
    mutate(b);
    b.record_hash = computeRecordHash(b, nodeBackend);
    return b;
  };
  const cases: { want: string; at: number[]; apply: () => void }[] = [
    {
      want: 'bad_signature@1001',
      at: [1001],
      apply: () =>
        write(
          resealed(1001, (b) => {
            b.payload.semver = '9.9.9';
          }),
        ),
    },
    // Signatures are checked in runs of 64 blocks examined first (batches from 501: runs 501-564, 565-628):
    // a forged signature at the end of a run, and two in one run (the first is reported).
    {
      want: 'bad_signature@564',
      at: [564],
      apply: () =>
        write(
          resealed(564, (b) => {
            b.payload.semver = '9.9.9';
          }),
        ),
    },
    {
      want: 'bad_signature@565',
      at: [565, 600],
      apply: () => {
        write(
          resealed(565, (b) => {
            b.payload.semver = '9.9.9';
          }),
        );
        write(
          resealed(600, (b) => {
            b.payload.semver = '9.9.8';
          }),
        );
      },
    },
    {
      want: 'time_regression@1500',
      at: [1500, 1501],
      apply: () => {
        const b = resealed(1500, (x) => {
          x.posted = '2020-01-01T00:00:00Z';
        });
        write(b);
        write(
          resealed(1501, (x) => {
            x.prev_hash = b.record_hash;
          }),
        );
      },
    },
    { want: 'malformed@2222', at: [2222], apply: () => writeFileSync(file(2222), 'not json\n') },
    { want: 'record_hash_mismatch@2750', at: [2750], apply: () => write({ ...structuredClone(blocks[2750]!), comment: 'edited' }) },
    {
      want: 'prev_hash_mismatch@2001',
      at: [2001],
      apply: () =>
        write(
          resealed(2001, (b) => {
            b.prev_hash = 'f'.repeat(64);
          }),
        ),
    },
    { want: 'malformed@2501', at: [2501], apply: () => writeFileSync(file(2501), '{}\n') },
    { want: 'index_gap@2900', at: [2900], apply: () => rmSync(file(2900)) },
  ];
  // Restore the pristine files the earlier test forged.
  for (const i of [2_100, 2_101, 2_700, 2_701]) write(blocks[i]!);
  assert.match(await outcome(2, 500), /^ok 3000 /);
  for (const c of cases) {
    c.apply();
    assert.is(await outcome(0), c.want, `inline: ${c.want}`);
    assert.is(await outcome(2, 500), c.want, `2 threads: ${c.want}`);
    assert.is(await outcome(2, 499), c.want, `2 threads, other batch bounds: ${c.want}`);
    for (const i of c.at) write(blocks[i]!);
  }
  assert.match(await outcome(2, 500), /^ok 3000 /);
});

test('strays, a directory for a block and extra shards are caught with threads as inline', async () => {
  const file = (i: number) => join(repo.dir, blockPath(i));
  const listed = () => {
    const f = repo.listBlockFiles();
    return f.length === N && f.every((x, i) => x.index === i);
  };
  assert.ok(listed());
  // `accepted`: empty directories hold no file (git does not even record them): the listing accepts the chain.
  const cases: { name: string; apply: () => void; undo: () => void; accepted?: true }[] = [
    {
      name: 'a stray file in a leaf directory',
      apply: () => writeFileSync(join(repo.dir, 'blocks/000/002/notes.txt'), 'x'),
      undo: () => rmSync(join(repo.dir, 'blocks/000/002/notes.txt')),
    },
    { name: 'a stray file in blocks/', apply: () => writeFileSync(join(repo.dir, 'blocks/README'), 'x'), undo: () => rmSync(join(repo.dir, 'blocks/README')) },
    {
      name: 'an extra block file past the end (a new shard)',
      apply: () => {
        mkdirSync(join(repo.dir, 'blocks/000/003'));
        writeFileSync(file(N), formatBlockFile(blocks[1]!));
      },
      undo: () => rmSync(join(repo.dir, 'blocks/000/003'), { recursive: true }),
    },
    { name: 'a missing block file', apply: () => rmSync(file(N - 1)), undo: () => writeFileSync(file(N - 1), formatBlockFile(blocks[N - 1]!)) },
    {
      name: 'an extra shard directory',
      apply: () => mkdirSync(join(repo.dir, 'blocks/000/900/sub'), { recursive: true }),
      undo: () => rmSync(join(repo.dir, 'blocks/000/900'), { recursive: true }),
      accepted: true,
    },
    {
      name: 'a directory in place of a block file',
      apply: () => {
        rmSync(file(2345));
        mkdirSync(file(2345));
      },
      undo: () => {
        rmSync(file(2345), { recursive: true });
        writeFileSync(file(2345), formatBlockFile(blocks[2345]!));
      },
    },
  ];
  for (const c of cases) {
    c.apply();
    const inline = await outcome(0);
    if (c.accepted) assert.match(inline, /^ok 3000 /, `inline refused ${c.name}`);
    else assert.not.match(inline, /^ok /, `inline accepted ${c.name}`);
    assert.is(await outcome(2), inline, `2 threads: ${c.name}`);
    c.undo();
  }
  assert.ok(listed());
  assert.match(await outcome(2), /^ok 3000 /);
});

test.run();
