/**
 * SIGTERM drains: a download in flight when the gateway is told to stop
 * completes intact, new connections are refused, and the process exits 0.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-stop-'));
test.after(() => rmSync(work, { recursive: true, force: true }));

test('a download in flight at SIGTERM completes; then the process exits 0', async () => {
  const token = 'stop-token-' + 't'.repeat(30);
  createKeyFile(join(work, 'authority.pem'));
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  const origin = await OriginServer.start();
  const agent = new Agent();
  const gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { port: 0 },
      chain: { dir: join(work, 'chain') },
      authority: { key_file: join(work, 'authority.pem'), signer: 'stop', submit_token_file: join(work, 'submit.token') },
      origin: { allow_private: true, timeout: 20 },
    }),
  ]);
  try {
    const body = 'x'.repeat(3000);
    origin.route('/slow.txt', { body });
    const s = await request(gw.url + '/v1/submit', {
      method: 'POST',
      dispatcher: agent,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: origin.url('/slow.txt'), name: 'acme/slow', semver: '1.0.0', license: 'MIT' }),
    });
    assert.is(s.statusCode, 201);
    await s.body.dump();
    origin.route('/slow.txt', { body, trickle: { bytes: 300, everyMs: 200 } }); // ~2 s at the origin
    const pending = request(`${gw.url}/v1/download?url=${encodeURIComponent(origin.url('/slow.txt'))}`, { dispatcher: new Agent() }).then(async (r) => ({
      status: r.statusCode,
      text: await r.body.text(),
    }));
    await origin.waitForRequests('/slow.txt', 2, 5000);
    gw.child.kill('SIGTERM');
    const r = await pending;
    assert.is(r.status, 200);
    assert.is(r.text, body);
    assert.is(await gw.exited, 0);
  } finally {
    await gw.stop();
    await origin.close();
    await agent.close();
  }
});

test.run();
