/**
 * The served state follows the branch (issue 14, item 4): when an append's
 * working-tree write fails after its commit point (a full disk:
 * `VOUCH_FAIL_POINT=working-tree` fails it once), the submit is still
 * acknowledged (its commit is on the branch), `/v1/checkpoint` and lookups
 * show the new head at once (taken from what was committed, not from the
 * lagging working tree), the next append repairs the working tree, no
 * "did not verify" error is logged, and the chain verifies with git clean.
 * Through a real authority gateway process and a real loopback origin.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { postSubmit, startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { git, vouchAsync } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-wtfault-'));
const token = 'wt-fault-token-' + 'q'.repeat(30);
const chainDir = join(work, 'chain');
let origin: OriginServer;
let gw: GatewayProcess;
let pub = '';

test.before(async () => {
  pub = createKeyFile(join(work, 'authority.pem')).publicKeyB64;
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  origin = await OriginServer.start();
  for (const n of [1, 2, 3]) origin.route(`/a-${n}.tgz`, { body: `artifact ${n}` });
  // The chain exists before the gateway runs with the fault armed (it fails the first append's working tree).
  const init = await vouchAsync(['init', '--chain', chainDir, '--key', join(work, 'authority.pem'), '--signer', 'wt-fault']);
  assert.is(init.status, 0, init.stderr);
  gw = await startGatewayProcess(
    [
      '--config',
      writeConfig(work, {
        listen: { port: 0 },
        chain: { dir: chainDir },
        authority: { key_file: join(work, 'authority.pem'), signer: 'wt-fault', submit_token_file: join(work, 'submit.token') },
        origin: { allow_private: true },
      }),
    ],
    { env: { VOUCH_FAIL_POINT: 'working-tree' } },
  );
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

async function submit(n: number): Promise<{ status: number; index: number }> {
  const r = await postSubmit(gw.url, token, { url: origin.url(`/a-${n}.tgz`), name: 'acme/wt', semver: `1.0.${n}`, license: 'MIT' });
  return { status: r.status, index: (r.json as { index: number }).index };
}

const checkpoint = async () => (await (await fetch(`${gw.url}/v1/checkpoint`)).json()) as { size: number; head: string };
const onDisk = () => JSON.parse(readFileSync(join(chainDir, 'checkpoint.json'), 'utf8')) as { size: number };

test('a working-tree write that fails after the commit point: served state follows the branch, the next append repairs', async () => {
  const first = await submit(1);
  assert.is(first.status, 201, 'the commit is on the branch: acknowledged');
  assert.is(first.index, 1);
  // The working tree lags (the failed write), but what is served is what was committed.
  assert.is(onDisk().size, 1, 'the fault did not hit the working tree');
  const cp1 = await checkpoint();
  assert.is(cp1.size, 2, '/v1/checkpoint stayed stale');
  const look = await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(origin.url('/a-1.tgz'))}`);
  assert.is(look.status, 200);
  // The next append repairs the working tree and is served as well.
  const second = await submit(2);
  assert.is(second.status, 201);
  assert.is(second.index, 2);
  assert.is((await checkpoint()).size, 3);
  assert.is(onDisk().size, 3, 'the next append did not repair the working tree');
  const third = await submit(3);
  assert.is(third.status, 201);
  assert.is((await checkpoint()).size, 4);
  assert.not.match(gw.stderr(), /did not verify/, 'an append was not taken in');
  assert.is(git(['-C', chainDir, 'status', '--porcelain']).stdout, '', 'git status is not clean');
  const v = await vouchAsync(['verify', '--chain', chainDir, '--public-key', pub]);
  assert.is(v.status, 0, v.stderr);
});

test.run();
