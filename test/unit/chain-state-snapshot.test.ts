/**
 * ChainState's snapshot (issue 16): a warm start loads the index image and
 * indexes the gap from the verified text cache; a tampered cache, image or
 * snapshot is never trusted (the answers stay those of the verified chain);
 * a snapshot older than the head verifies only the new blocks; blocks
 * applied after a warm start are served, cached and found warm again.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildCheckpoint, buildEndorseBlock, buildRevokeBlock, base64Encode, type Block } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo, blockPath } from '../../store/chain-repo.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { ChainState, IMAGE_POLICY } from '../../gateway/chain/verified-state.ts';
import { buildLongChain, initChainRepo, T0 } from '../helpers/chain-fixture.ts';
import { chainFile, forgeChainFiles } from '../helpers/chain-files.ts';
import { gitIn } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-snap-'));
const dir = join(work, 'chain');
test.after(() => rmSync(work, { recursive: true, force: true }));

const N = 300;
const { blocks, signer } = buildLongChain(N);
const pub = base64Encode(signer.publicKey);
const git = (f: string) => join(dir, '.git', f);
const url = (i: number) => `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`;

test.before(async () => {
  await initChainRepo(dir, blocks.slice(0, 200), buildCheckpoint({ head: blocks[199]!, signer, now: T0 + 200 * 1000 }));
});

async function load() {
  const repo = await ChainRepo.open(dir, { repair: false });
  return ChainState.load(repo, { pinnedPublicKey: pub });
}

/** What a lookup sees for a few URLs, and the head. */
function served(s: ChainState, size: number): void {
  assert.is(s.size, size);
  assert.is(s.head.record_hash, blocks[size - 1]?.record_hash ?? s.head.record_hash);
  for (const i of [1, 2, 150, size - 1]) {
    const sel = s.index.select(url(i), { today: '2026-12-01' });
    assert.is(sel?.block.index, i, `lookup of block ${i}`);
    assert.is(sel!.entry.artifact_url, url(i));
    assert.is(sel!.block.record_hash, blocks[i]!.record_hash);
  }
  assert.is(s.index.select('https://a.example/none', { today: '2026-12-01' }), null);
  assert.is(s.index.blockByHash(blocks[7]!.record_hash)?.index, 7);
  assert.is(s.index.blocksOf('acme/pkg5').length, s.index.blockIndexesOf('acme/pkg5').length);
}

const snapshot = () => JSON.parse(readFileSync(git('vouch-snapshot.json'), 'utf8'));

test('cold, then warm from the index image with nothing verified', async () => {
  const cold = await load();
  assert.is(cold.report.mode, 'cold');
  served(cold.state, 200);
  const snap = snapshot();
  assert.is(snap.version, 4);
  assert.equal(snap.image.size, 200);
  // The one layout keeps no copy of the texts: the cache holds their lengths and sha256s (read from git objects).
  assert.not.ok(existsSync(git('vouch-blocks.cache')), 'no text copy');
  assert.ok(snap.cache.length > 200 * 500, 'the texts of 200 blocks counted');
  assert.ok(statSync(git('vouch-blocks.idx')).size >= 200 * 36, 'a length and a sha256 a block');
  const warm = await load();
  assert.is(warm.report.mode, 'warm');
  assert.is(warm.report.verified, 0);
  assert.is(warm.report.indexed, 0, 'the index came from the image');
  served(warm.state, 200);
  assert.is(await warm.state.recheckFiles(), null);
});

test('a tampered index image is not used: the index is rebuilt from the cache, answers unchanged, image rewritten', async () => {
  const img = readFileSync(git('vouch-index.bin'));
  const bad = Buffer.from(img);
  bad.writeUInt8(bad.readUInt8(48 + 200 + 800 + 7 * 32 + 10) ^ 0xff, 48 + 200 + 800 + 7 * 32 + 10); // in block 7's record hash: an image that still reads as one
  writeFileSync(git('vouch-index.bin'), bad);
  const r = await load();
  assert.is(r.report.mode, 'warm');
  assert.is(r.report.indexed, 200);
  served(r.state, 200);
  assert.ok(readFileSync(git('vouch-index.bin')).equals(img), 'the image is written again from the verified texts');
});

test('a damaged cache index is rebuilt from the blocks (git objects), then warm', async () => {
  const idx = readFileSync(git('vouch-blocks.idx'));
  const badIdx = Buffer.from(idx);
  badIdx.writeUInt8(badIdx.readUInt8(40) ^ 1, 40);
  writeFileSync(git('vouch-blocks.idx'), badIdx);
  const r = await load();
  assert.is(r.report.mode, 'warm');
  served(r.state, 200);
  assert.is(r.state.index.block(150)!.payload.endorsements[0]!.comment, 'build 150');
  assert.ok(readFileSync(git('vouch-blocks.idx')).equals(idx));
});

test('a tampered snapshot (cache digest, head, or image hash) goes cold or rebuilds, never serves what was not verified', async () => {
  const good = readFileSync(git('vouch-snapshot.json'), 'utf8');
  const s = JSON.parse(good);
  writeFileSync(git('vouch-snapshot.json'), JSON.stringify({ ...s, cache: { ...s.cache, digest: '0'.repeat(64) } }));
  let r = await load();
  assert.is(r.report.mode, 'cold');
  served(r.state, 200);
  writeFileSync(git('vouch-snapshot.json'), JSON.stringify({ ...s, state: { ...s.state, head: blocks[10]!.record_hash } }));
  r = await load();
  assert.is(r.report.mode, 'cold');
  served(r.state, 200);
  // A cache and snapshot made for a shorter chain: what it covers must still be the chain's first blocks.
  writeFileSync(git('vouch-snapshot.json'), JSON.stringify({ ...s, cache: { length: s.cache.length - 10, digest: s.cache.digest } }));
  r = await load();
  assert.is(r.report.mode, 'cold');
  served(r.state, 200);
});

test('a snapshot older than the head: the gap is verified, and the image behind the head is caught up', async () => {
  const repo = await ChainRepo.open(dir, { repair: false });
  await appendSigned(repo, blocks.slice(200, 250), buildCheckpoint({ head: blocks[249]!, signer, now: T0 + 250 * 1000 }), T0 + 250 * 1000);
  const r = await load();
  assert.is(r.report.mode, 'warm');
  assert.is(r.report.verified, 50);
  assert.is(r.report.indexed, 0);
  served(r.state, 250);
  assert.is(snapshot().image.size, 250);
  const again = await load();
  assert.is(again.report.verified, 0);
  served(again.state, 250);
});

test('applyCommitted after a warm start: served at once, in the cache, warm again with the image behind', async () => {
  const { state } = await load();
  const repo = state.repo as ChainRepo; // opened above; ChainState only reads it
  const extra: Block[] = blocks.slice(250, 260);
  const committed = await appendSigned(repo, extra, buildCheckpoint({ head: extra[extra.length - 1]!, signer, now: T0 + 260 * 1000 }), T0 + 260 * 1000);
  state.applyCommitted(extra, committed.checkpointText, committed.blockTexts);
  served(state, 260);
  // A revoke of a block that came from the image: checked against the index, served with its date.
  const revoke = buildRevokeBlock({ prev: state.head, target: blocks[100]!, signer, backend: nodeBackend, now: T0 + 300_000, effectiveDate: '2026-02-01' });
  const c2 = await appendSigned(repo, [revoke], buildCheckpoint({ head: revoke, signer, now: T0 + 301_000 }), T0 + 301_000);
  state.applyCommitted([revoke], c2.checkpointText, c2.blockTexts);
  assert.is(state.index.select(url(100), { today: '2026-12-01' })!.revokedBy?.index, 260);
  // No image per append, in the background either: a warm start's image counts as new (IMAGE_POLICY).
  await new Promise((r) => setTimeout(r, 300));
  const snap = snapshot();
  assert.is(snap.state.size, 261);
  assert.is(snap.image.size, 250, 'no image per append');
  const warm = await load();
  assert.is(warm.report.mode, 'warm');
  assert.is(warm.report.verified, 0);
  assert.is(warm.report.indexed, 11, 'the blocks after the image, from the cache');
  for (const i of [1, 150, 255, 259]) assert.is(warm.state.index.select(url(i), { today: '2026-12-01' })?.block.index, i);
  assert.is(warm.state.size, 261);
  assert.is(warm.state.index.select(url(100), { today: '2026-12-01' })!.revokedBy?.index, 260);
  assert.is(warm.state.index.select(url(100), { today: '2026-01-01' })!.revokedBy, null);
  // A new endorse after the warm start, naming a URL of the image.
  const again = buildEndorseBlock({
    prev: warm.state.head,
    signer,
    backend: nodeBackend,
    now: T0 + 400_000,
    entries: [
      {
        url: url(3),
        artifactHash: blocks[3]!.payload.intent === 'endorse' ? blocks[3]!.payload.endorsements[0]!.artifact_hash : '',
        name: 'acme/pkg3',
        semver: '9.9.9',
        license: 'MIT',
      },
    ],
  });
  const c3 = await appendSigned(warm.state.repo as ChainRepo, [again], buildCheckpoint({ head: again, signer, now: T0 + 401_000 }), T0 + 401_000);
  warm.state.applyCommitted([again], c3.checkpointText, c3.blockTexts);
  assert.equal(
    warm.state.index.versions(url(3)).map((v) => v.block.index),
    [3, 261],
  );
  const last = await load();
  assert.equal(
    last.state.index.versions(url(3)).map((v) => [v.block.index, v.entry.semver]),
    [
      [3, '1.3.0'],
      [261, '9.9.9'],
    ],
  );
  assert.is(await last.state.recheckFiles(), null);
});

test('after appends, a new image only every IMAGE_POLICY.blocks blocks, written in the background', async () => {
  const { state } = await load();
  const before = snapshot().image.size;
  assert.is(before, state.size);
  IMAGE_POLICY.blocks = 3;
  try {
    let prev = state.head;
    for (let k = 0; k < 4; k++) {
      const b = buildEndorseBlock({
        prev,
        signer,
        backend: nodeBackend,
        now: T0 + 500_000 + k * 1000,
        entries: [{ url: `https://n.example/${k}.tgz`, artifactHash: 'sha256:' + 'a'.repeat(64), name: 'acme/n', semver: '1.0.0', license: 'MIT' }],
      });
      const c = await appendSigned(state.repo as ChainRepo, [b], buildCheckpoint({ head: b, signer, now: T0 + 501_000 + k * 1000 }), T0 + 501_000 + k * 1000);
      state.applyCommitted([b], c.checkpointText, c.blockTexts);
      prev = b;
      // Written in the background: wait for it (bounded) where one is due.
      const want = k < 2 ? before : before + 3;
      for (let t = 0; t < 100 && snapshot().image.size !== want; t++) await new Promise((r) => setTimeout(r, 50));
      await new Promise((r) => setTimeout(r, 50));
      assert.is(snapshot().image.size, want, `image after append ${k + 1}`);
    }
  } finally {
    IMAGE_POLICY.blocks = 10_000;
  }
  const warm = await load();
  assert.is(warm.report.indexed, 1);
  assert.is(warm.state.index.select('https://n.example/3.tgz', { today: '2026-12-01' })?.block.index, before + 3);
});

test('a cold start that refuses the chain leaves no half-written cache behind', async () => {
  const head = gitIn(dir, 'rev-parse', 'main').trim();
  forgeChainFiles(dir, { [blockPath(20)]: chainFile(dir, blockPath(20)).replace('build 20', 'build 21') });
  unlinkSync(git('vouch-snapshot.json'));
  try {
    await load();
    assert.unreachable('loaded a chain with an edited block');
  } catch (e) {
    assert.match(String((e as Error).message), /record_hash_mismatch at block 20/);
  } finally {
    gitIn(dir, 'update-ref', 'refs/heads/main', head);
  }
  assert.equal(
    readdirSync(join(dir, '.git')).filter((f) => f.endsWith('.tmp')),
    [],
  );
  const r = await load();
  assert.is(r.report.mode, 'cold');
  assert.is(r.state.index.block(20)!.payload.endorsements[0]!.comment, 'build 20');
});

test.run();
