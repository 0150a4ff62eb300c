/**
 * The completeness index in the gateway's warm snapshot (issue 37 item 5):
 * a load writes `.git/vouch-completeness.bin` and names it in the snapshot
 * (size, last record hash, sha256); a warm start reads it back instead of
 * re-reading every block, then adds only the blocks after it; a damaged
 * image, or one of another chain, is not used (the index is rebuilt from
 * the blocks), nor is one of another image version. Every root and proof
 * equals the index built afresh from the blocks.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { buildCheckpoint, base64Encode, type Block } from '../../chain/index.ts';
import { CompletenessIndex } from '../../chain/index-tree.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { ChainState, lastVerifiedCompleteness } from '../../gateway/chain/verified-state.ts';
import { buildLongChain, initChainRepo, T0 } from '../helpers/chain-fixture.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-cidx-'));
const dir = join(work, 'chain');
test.after(() => rmSync(work, { recursive: true, force: true }));

const { blocks, signer } = buildLongChain(260);
const pub = base64Encode(signer.publicKey);
const git = (f: string) => join(dir, '.git', f);
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const snapshot = () => JSON.parse(readFileSync(git('vouch-snapshot.json'), 'utf8'));

/** The index built afresh from the first `n` blocks. */
function freshIndex(n: number): CompletenessIndex {
  const idx = new CompletenessIndex(nodeBackend);
  for (const b of blocks.slice(0, n)) idx.addBlock(b as Block, () => -1);
  return idx;
}
const fresh = (n: number): string => hex(freshIndex(n).root());

/** Every URL's and unit's proof, and an absent URL's, equal those of the index built afresh from the blocks. */
function sameProofs(idx: CompletenessIndex, n: number): void {
  const want = freshIndex(n);
  const keys: ['url' | 'unit', string][] = [['url', 'https://nowhere.example/x.tgz']];
  for (const b of blocks.slice(1, n)) {
    const e = (b.payload as any).endorsements[0];
    keys.push(['url', e.artifact_url], ['unit', e.name]);
  }
  for (const [kind, name] of keys) assert.is(hex(idx.prove(kind, name)), hex(want.prove(kind, name)), `${kind} ${name}`);
}

async function load() {
  const repo = await ChainRepo.open(dir, { repair: false });
  return ChainState.load(repo, { pinnedPublicKey: pub });
}

test.before(async () => {
  await initChainRepo(dir, blocks.slice(0, 200), buildCheckpoint({ head: blocks[199]!, signer, now: T0 + 200 * 1000 }));
});

test('a load writes the image and names it; a warm start reads it and adds no block', async () => {
  const cold = await load();
  assert.is(cold.report.mode, 'cold');
  assert.is(cold.report.completenessIndexed, 200);
  assert.ok(existsSync(git('vouch-completeness.bin')));
  const ref = snapshot().completeness;
  assert.is(ref.size, 200);
  assert.is(ref.head, blocks[199]!.record_hash);
  assert.is(lastVerifiedCompleteness(dir)?.size, 200);
  const warm = await load();
  assert.is(warm.report.mode, 'warm');
  assert.is(warm.report.completenessIndexed, 0, 'read from the image');
  assert.is(hex(warm.state.completeness.root()), fresh(200));
  sameProofs(warm.state.completeness, 200);
});

test('blocks after the image: only they are added, and the image is brought up to the head', async () => {
  const repo = await ChainRepo.open(dir, { repair: false });
  await appendSigned(repo, blocks.slice(200, 230), buildCheckpoint({ head: blocks[229]!, signer, now: T0 + 230 * 1000 }), T0 + 230 * 1000);
  const r = await load();
  assert.is(r.report.mode, 'warm');
  assert.is(r.report.completenessIndexed, 30);
  assert.is(hex(r.state.completeness.root()), fresh(230));
  sameProofs(r.state.completeness, 230);
  assert.is(snapshot().completeness.size, 230);
});

test('a damaged image, or one of another chain, is not used: the index is rebuilt from the blocks', async () => {
  const bytes = readFileSync(git('vouch-completeness.bin'));
  const bad = Buffer.from(bytes);
  bad[bad.length - 100]! ^= 1;
  writeFileSync(git('vouch-completeness.bin'), bad);
  let r = await load();
  assert.is(r.report.mode, 'warm');
  assert.is(r.report.completenessIndexed, 230, "its sha256 is not the snapshot's");
  assert.is(hex(r.state.completeness.root()), fresh(230));
  // an image whose last block is not this chain's (the snapshot's head of it changed)
  const snap = snapshot();
  snap.completeness.head = blocks[5]!.record_hash;
  writeFileSync(git('vouch-snapshot.json'), JSON.stringify(snap));
  r = await load();
  assert.is(r.report.completenessIndexed, 230);
  assert.is(hex(r.state.completeness.root()), fresh(230));
});

test('an image of the first version (the snapshot naming its bytes) is not used: the index is rebuilt and its image rewritten', async () => {
  let r = await load();
  assert.is(r.report.completenessIndexed, 0, 'a whole image to start from');
  const bytes = readFileSync(git('vouch-completeness.bin'));
  assert.is(bytes.readUInt32LE(4), 2, 'written as version 2');
  const old = Buffer.from(bytes);
  old.writeUInt32LE(1, 4);
  writeFileSync(git('vouch-completeness.bin'), old);
  const snap = snapshot();
  snap.completeness.sha256 = createHash('sha256').update(old).digest('hex');
  writeFileSync(git('vouch-snapshot.json'), JSON.stringify(snap));
  r = await load();
  assert.is(r.report.mode, 'warm');
  assert.is(r.report.completenessIndexed, 230, 'not read from an image of another version');
  assert.is(hex(r.state.completeness.root()), fresh(230));
  const now = readFileSync(git('vouch-completeness.bin'));
  assert.is(now.readUInt32LE(4), 2, 'rewritten in this version');
  assert.is(snapshot().completeness.sha256, createHash('sha256').update(now).digest('hex'));
  r = await load();
  assert.is(r.report.completenessIndexed, 0);
  sameProofs(r.state.completeness, 230);
});

test.run();
