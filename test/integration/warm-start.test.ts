/**
 * Warm restarts: only newer blocks are verified again; the text cache's
 * index (lengths and hashes: the sparse layout reads the texts from git
 * objects) is used only when it hashes to the snapshot's digest (a damaged
 * one falls back to the blocks); a block forged on branch main behind the
 * gateway's back is never served, and a cold start refuses the chain with
 * the right code.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, statSync, truncateSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Encode } from '../../chain/index.ts';
import { blockPath } from '../../store/chain-repo.ts';
import { buildLongChain, initChainRepo } from '../helpers/chain-fixture.ts';
import { chainFile, forgeChainFiles } from '../helpers/chain-files.ts';
import { startGatewayProcess, writeConfig } from '../helpers/gateway-process.ts';
import { vouchAsync } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-warm-'));
const dir = join(work, 'chain');
let config = '';
test.after(() => rmSync(work, { recursive: true, force: true }));

test.before(async () => {
  const { blocks, checkpoint, signer } = buildLongChain(60);
  await initChainRepo(dir, blocks, checkpoint);
  config = writeConfig(work, { listen: { port: 0 }, chain: { dir, public_key: base64Encode(signer.publicKey) } });
});

async function run(): Promise<{ stdout: string; stderr: string; lookup: any }> {
  const gw = await startGatewayProcess(['--config', config]);
  const r = await fetch(`${gw.url}/v1/block?index=10`);
  const lookup = await r.json();
  await new Promise((res) => setTimeout(res, 1000)); // let the background re-check run
  await gw.stop();
  return { stdout: gw.stdout(), stderr: gw.stderr(), lookup };
}

test('cold, then warm with nothing to verify, from the cache index', async () => {
  assert.match((await run()).stdout, /cold start, 60 verified/);
  const cache = join(dir, '.git', 'vouch-blocks.idx');
  assert.ok(statSync(cache).size >= 60 * 36, 'a length and a sha256 a block');
  const warm = await run();
  assert.match(warm.stdout, /warm start, 0 verified/);
  assert.not.match(warm.stderr, /differs from the verified chain/);
});

test('a damaged cache index is not trusted: the blocks are read instead, and the index rewritten', async () => {
  const cache = join(dir, '.git', 'vouch-blocks.idx');
  const full = statSync(cache).size;
  truncateSync(cache, Math.floor(full / 2));
  const r = await run();
  assert.match(r.stdout, /(warm|cold) start/);
  assert.is(r.lookup.index, 10);
  assert.is(statSync(cache).size, full, 'rewritten whole');
  writeFileSync(cache, Buffer.alloc(full, 0x41)); // same length, garbage
  const r2 = await run();
  assert.match(r2.stdout, /(warm|cold) start/);
  assert.is(r2.lookup.success, true);
  assert.is(r2.lookup.payload.endorsements[0].comment, 'build 10');
});

test('a block forged on branch main behind the gateway is never served; a cold start refuses the chain', async () => {
  const original = chainFile(dir, blockPath(10));
  forgeChainFiles(dir, { [blockPath(10)]: original.replace('"build 10"', '"build ten"') });
  const gw = await startGatewayProcess(['--config', config], { waitFor: /^ready: |refus|mismatch/m }).catch((e: Error) => e);
  if (!(gw instanceof Error)) {
    try {
      const r = await fetch(`${gw.url}/v1/block?index=10`);
      const b = (await r.json()) as { payload?: { endorsements: { comment: string }[] } };
      if (r.status === 200) assert.is(b.payload!.endorsements[0]!.comment, 'build 10', 'served something that was not verified');
    } finally {
      await gw.stop();
    }
  }
  unlinkSync(join(dir, '.git', 'vouch-snapshot.json'));
  const cold = await vouchAsync(['serve', '--config', config]);
  assert.is(cold.status, 1);
  assert.match(cold.stderr, /record_hash_mismatch at block 10/);
});

test.run();
