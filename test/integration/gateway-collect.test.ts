/**
 * A gateway that verified 10,000 blocks or more on its way to ready runs
 * full collections first (gateway/collect-garbage.ts), and says so in its
 * `chain loaded` line; a warm start that verified nothing does not. A real
 * `vouch serve` on a 10,000-block chain.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Encode } from '../../chain/index.ts';
import { buildLongChain, initChainRepo } from '../helpers/chain-fixture.ts';
import { startGatewayProcess, writeConfig } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-collect-'));
test.after(() => rmSync(work, { recursive: true, force: true }));

const loaded = (stderr: string) =>
  stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .find((l) => l.msg === 'chain loaded');

test('10,000 blocks verified: collected before ready; a warm start with none verified: not', async () => {
  const dir = join(work, 'chain');
  const { blocks, checkpoint, signer } = buildLongChain(10_000);
  await initChainRepo(dir, blocks, checkpoint);
  const config = writeConfig(work, { listen: { port: 0 }, chain: { dir, public_key: base64Encode(signer.publicKey) } });
  const run = async () => {
    const gw = await startGatewayProcess(['--config', config], { env: { VOUCH_LOG_FORMAT: 'json' }, readyTimeoutMs: 120_000 });
    const r = await fetch(`${gw.url}/v1/block?index=9999`);
    assert.is(r.status, 200);
    await gw.stop();
    return loaded(gw.stderr());
  };
  const cold = await run();
  assert.ok(cold, 'no chain loaded line');
  assert.equal([cold.mode, cold.verified, cold.collected], ['cold', 10_000, true]);
  const warm = await run();
  assert.equal([warm.mode, warm.verified, warm.collected], ['warm', 0, false]);
});

test.run();
