/**
 * The completeness index in the gateway's warm snapshot (issue 37 item 5):
 * a load writes `.git/vouch-completeness.bin` and names it in the snapshot
 * (size, last record hash, sha256); a warm start reads it back instead of
 * re-reading every block, then adds only the blocks after it; a damaged
 * image, or one of another chain, is not used (the index is rebuilt from
 * the blocks). Every root equals the index built afresh from the blocks.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
function fresh(n: number): string {
  const idx = new CompletenessIndex(nodeBackend);
  for (const b of blocks.slice(0, n)) idx.addBlock(b as Block, () => -1);
  return hex(idx.root());
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
});

test('blocks after the image: only they are added, and the image is brought up to the head', async () => {
  const repo = await ChainRepo.open(dir, { repair: false });
  await appendSigned(repo, blocks.slice(200, 230), buildCheckpoint({ head: blocks[229]!, signer, now: T0 + 230 * 1000 }), T0 + 230 * 1000);
  const r = await load();
  assert.is(r.report.mode, 'warm');
  assert.is(r.report.completenessIndexed, 30);
  assert.is(hex(r.state.completeness.root()), fresh(230));
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

test.run();
