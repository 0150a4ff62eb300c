/**
 * Parallel verification (worker threads) agrees with inline verification on
 * a chain large enough to be split into batches: same state when valid, the
 * same first failure (code and index) when a block deep inside is forged,
 * and the same blocks handed to `onVerified` (the gateway's cold start).
 * Blocks are forged as commits on branch main (what verify reads: git
 * objects), and restored the same way.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBlockFile, computeRecordHash, parseBlock, VouchError, type Block } from '../../chain/index.ts';
import { indexFactsOf } from '../../chain/index-facts.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { blockPath, openChainReadOnly } from '../../store/chain-repo.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import { buildLongChain, initChainRepo } from '../helpers/chain-fixture.ts';
import { forgeChainFiles } from '../helpers/chain-files.ts';

const N = 2_200; // above the inline threshold (2,000): batches of 500 and then of 125 (planBatches), worker threads take part
const work = mkdtempSync(join(tmpdir(), 'vouch-parallel-'));
const { blocks, checkpoint, signer } = buildLongChain(N);
// A chain repository, forged by commits on branch main in the tests below (and restored the same way).
const dir = join(work, 'chain');
/** Commits these files (path: text, or null to remove) on top of branch main. */
const put = (files: Record<string, string | null>): void => void forgeChainFiles(dir, files);
const write = (b: any): void => put({ [blockPath(b.index)]: formatBlockFile(b as Block) });
/** The chain as branch main holds it now (opened anew: the forgeries moved the branch). */
const chain = () => openChainReadOnly(dir);

test.before(async () => {
  await initChainRepo(dir, blocks, checkpoint);
});
test.after(() => rmSync(work, { recursive: true, force: true }));

async function outcome(threads: number, batchSize = 1_000): Promise<string> {
  try {
    const r = await verifyDirectory(await chain(), { threads, batchSize, pinnedPublicKey: Buffer.from(signer.publicKey).toString('base64') });
    return `ok ${r.state.size} ${r.state.head} ${r.checkpoint?.size}`;
  } catch (e) {
    if (e instanceof VouchError) return `${e.code}@${e.index}`;
    throw e;
  }
}

test('a valid 2,200-block chain: inline and 2 worker threads give the same state', async () => {
  const seen: number[] = [];
  const r = await verifyDirectory(await chain(), { threads: 2, batchSize: 500, onProgress: (d) => seen.push(d) });
  assert.is(r.state.size, N);
  assert.is(r.state.head, blocks[N - 1]!.record_hash);
  assert.ok(seen.length > 3 && seen.every((d, i) => i === 0 || d >= seen[i - 1]!), 'progress not monotonic');
  assert.is(seen[seen.length - 1], N);
  assert.is(await outcome(0), await outcome(2));
  assert.match(await outcome(2), new RegExp(`^ok ${N} `));
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
    await verifyDirectory(await chain(), {
      threads,
      batchSize,
      onVerified: (start, texts, facts) => {
        assert.is(start, upTo, 'in chain order, nothing skipped or repeated');
        assert.ok(texts.length > 0 && facts.length === texts.length);
        for (let i = 0; i < texts.length; i++) {
          const bytes = Buffer.from(formatBlockFile(blocks[start + i]!), 'utf8'); // none of the forged blocks is handed over
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
  const resealed = (i: number, mutate: (b: any) => void) => {
    const b: any = structuredClone(blocks[i]!);
    mutate(b);
    b.record_hash = computeRecordHash(b, nodeBackend);
    return b;
  };
  // The last block of a batch (2001..2125), a batch's first block, and a file that is no block inside a batch.
  const cases: { at: number; want: string; apply: () => void }[] = [
    {
      at: 2125,
      want: 'bad_signature@2125',
      apply: () =>
        write(
          resealed(2125, (b) => {
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
    { at: 2100, want: 'malformed@2100', apply: () => put({ [blockPath(2100)]: 'not json\n' }) },
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
    // Relink the next block so only the forged one is wrong.
    const next: any = structuredClone(blocks[i + 1]!);
    next.prev_hash = b.record_hash;
    next.record_hash = computeRecordHash(next, nodeBackend);
    put({ [blockPath(i)]: formatBlockFile(b as Block), [blockPath(i + 1)]: formatBlockFile(next as Block) });
  };
  forge(1_100, (b) => {
    b.payload.endorsements[0].artifact_hash = 'sha256:' + 'e'.repeat(64);
  });
  forge(1_700, (b) => {
    b.posted = '2020-01-01T00:00:00Z';
  });
  assert.is(await outcome(0), 'bad_signature@1100');
  assert.is(await outcome(2), 'bad_signature@1100');
  assert.is(await outcome(1), 'bad_signature@1100');
});

test('failures at the first, last and middle block of a worker batch and at the edges of a run of signature checks: the same code and index as inline', async () => {
  // batchSize 500: batches start at blocks 1, 501, 1001, ... The workers walk each batch
  // themselves and report one failure; the main thread checks each batch's first block.
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
    // Signatures are checked in runs of 64 blocks examined first (batches from 501: runs 501-564, 565-625):
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
    { want: 'malformed@2100', at: [2100], apply: () => put({ [blockPath(2100)]: 'not json\n' }) },
    { want: 'record_hash_mismatch@1875', at: [1875], apply: () => write({ ...structuredClone(blocks[1875]!), comment: 'edited' }) },
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
    { want: 'malformed@1626', at: [1626], apply: () => put({ [blockPath(1626)]: '{}\n' }) },
    { want: 'index_gap@2150', at: [2150], apply: () => put({ [blockPath(2150)]: null }) },
  ];
  // Restore the pristine files the earlier test forged.
  put(Object.fromEntries([1_100, 1_101, 1_700, 1_701].map((i) => [blockPath(i), formatBlockFile(blocks[i]!)])));
  assert.match(await outcome(2, 500), new RegExp(`^ok ${N} `));
  for (const c of cases) {
    c.apply();
    assert.is(await outcome(0), c.want, `inline: ${c.want}`);
    assert.is(await outcome(2, 500), c.want, `2 threads: ${c.want}`);
    assert.is(await outcome(2, 499), c.want, `2 threads, other batch bounds: ${c.want}`);
    put(Object.fromEntries(c.at.map((i) => [blockPath(i), formatBlockFile(blocks[i]!)])));
  }
  assert.match(await outcome(2, 500), new RegExp(`^ok ${N} `));
});

test('strays, a directory for a block, an extra block and a missing one are caught with threads as inline', async () => {
  const listed = async () => {
    const f = await (await chain()).committedFiles();
    return f.count === N && f.strays.length === 0 && f.indexes().every((x, i) => x === i);
  };
  assert.ok(await listed());
  const cases: { name: string; apply: Record<string, string | null>; undo: Record<string, string | null> }[] = [
    { name: 'a stray file in a leaf directory', apply: { 'blocks/000/002/notes.txt': 'x' }, undo: { 'blocks/000/002/notes.txt': null } },
    { name: 'a stray file in blocks/', apply: { 'blocks/README': 'x' }, undo: { 'blocks/README': null } },
    { name: 'an extra block file past the end (a new shard)', apply: { [blockPath(N)]: formatBlockFile(blocks[1]!) }, undo: { [blockPath(N)]: null } },
    { name: 'a missing block file', apply: { [blockPath(N - 1)]: null }, undo: { [blockPath(N - 1)]: formatBlockFile(blocks[N - 1]!) } },
    {
      name: 'a directory in place of a block file',
      apply: { [blockPath(2145)]: null, [`${blockPath(2145)}/x`]: 'x' },
      undo: { [`${blockPath(2145)}/x`]: null, [blockPath(2145)]: formatBlockFile(blocks[2145]!) },
    },
  ];
  for (const c of cases) {
    put(c.apply);
    const inline = await outcome(0);
    assert.not.match(inline, /^ok /, `inline accepted ${c.name}`);
    assert.is(await outcome(2), inline, `2 threads: ${c.name}`);
    put(c.undo);
  }
  assert.ok(await listed());
  assert.match(await outcome(2), new RegExp(`^ok ${N} `));
});

test.run();
