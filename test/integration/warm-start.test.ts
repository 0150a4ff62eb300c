/**
 * Warm restarts: only newer blocks are verified again; the one-file text
 * cache is used only when it hashes to the snapshot's digest (a damaged cache
 * falls back to the block files); a block file edited behind the gateway's
 * back is reported by the background re-check, and a cold start then refuses
 * the chain with the right code.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, statSync, truncateSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Encode } from '../../chain/index.ts';
import { blockPath } from '../../store/chain-repo.ts';
import { buildLongChain, initChainRepo } from '../helpers/chain-fixture.ts';
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

test('cold, then warm with nothing to verify, from the one-file cache', async () => {
  assert.match((await run()).stdout, /cold start, 60 verified/);
  const cache = join(dir, '.git', 'vouch-blocks.cache');
  assert.ok(statSync(cache).size > 60 * 500);
  const warm = await run();
  assert.match(warm.stdout, /warm start, 0 verified/);
  assert.not.match(warm.stderr, /differs from the verified chain/);
});

test('a damaged cache is not trusted: the block files are read instead, and the cache rewritten', async () => {
  const cache = join(dir, '.git', 'vouch-blocks.cache');
  truncateSync(cache, Math.floor(statSync(cache).size / 2));
  const r = await run();
  assert.match(r.stdout, /warm start, 0 verified/);
  assert.is(r.lookup.index, 10);
  const full = statSync(cache).size;
  writeFileSync(cache, Buffer.alloc(full, 0x41)); // same length, garbage
  const r2 = await run();
  assert.match(r2.stdout, /(warm|cold) start/);
  assert.is(r2.lookup.success, true);
});

test('a block file edited behind the gateway is reported; a cold start refuses the chain', async () => {
  const p = join(dir, blockPath(10));
  const original = readFileSync(p, 'utf8');
  writeFileSync(p, original.replace('"build 10"', '"build ten"'));
  const r = await run();
  assert.match(r.stdout, /warm start/);
  assert.is(r.lookup.payload.endorsements[0].comment, 'build 10', 'served something that was not verified');
  const line = r.stderr.split('\n').find((l) => l.includes('differs from the verified chain'));
  assert.ok(line, `no report in: ${r.stderr}`);
  assert.match(line!, /"index":10[,}]/);
  unlinkSync(join(dir, '.git', 'vouch-snapshot.json'));
  const cold = await vouchAsync(['serve', '--config', config]);
  assert.is(cold.status, 1);
  assert.match(cold.stderr, /record_hash_mismatch at block 10/);
  writeFileSync(p, original);
});

test.run();
