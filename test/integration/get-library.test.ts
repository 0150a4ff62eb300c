/**
 * The `vouch get` client as a library (tools/client/verified-get.ts): a
 * program imports `verifiedGet` and gets the CLI's verification in-process
 * against a real `vouch serve` authority gateway: a verified download
 * writes the file and the state file and reports what proved it, the same
 * report `vouch get --json` prints; a wrong pinned key is a refusal
 * (`bad_signature`) that writes nothing.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { verifiedGet, type GetRequest } from '../../tools/client/verified-get.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouchAsync } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-get-lib-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'get-lib-token-' + 'g'.repeat(32);
let pub = '';
let origin: OriginServer;
let gw: GatewayProcess;
let url = '';

test.before(async () => {
  pub = createKeyFile(keyFile).publicKeyB64;
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  origin.route('/widget-1.0.0.js', { body: 'console.log("widget 1.0.0");\n' });
  url = origin.url('/widget-1.0.0.js');
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: join(work, 'chain'), origin: 'get-lib.vouch.test' },
      authority: { key_file: keyFile, signer: 'get-lib', submit_token_file: tokenFile },
      origin: { allow_private: true, timeout: 5 },
    }),
  ]);
  await submitEntry(gw.url, token, { url, name: 'acme/widget', semver: '1.0.0', license: 'MIT' });
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

const request = (o: Partial<GetRequest> & { output: string; statePath: string }): GetRequest => ({
  gateways: [gw.url],
  url,
  pin: { kind: 'key', publicKey: pub },
  policy: null,
  timeoutMs: 30_000,
  ...o,
});

test('verifiedGet: verified in-process, the file and the state written, the report the CLI prints', async () => {
  const output = join(work, 'lib.js');
  const statePath = join(work, 'lib-state.json');
  const got = await verifiedGet(request({ output, statePath }));
  assert.ok(got.ok, JSON.stringify(got));
  if (!got.ok) return;
  assert.is(readFileSync(output, 'utf8'), 'console.log("widget 1.0.0");\n');
  assert.ok(existsSync(statePath), 'the checkpoint seen is remembered');
  assert.is(got.verified.file, output);
  assert.is(got.verified.semver, '1.0.0');
  assert.is(got.verified.origin, 'get-lib.vouch.test');
  assert.is(got.verified.gateways, 1);
  // The CLI is a wrapper: its --json report is the library's (bar the file name).
  const cliOut = join(work, 'cli.js');
  const r = await vouchAsync(['get', '--gateway', gw.url, '--url', url, '--public-key', pub, '-o', cliOut, '--state', join(work, 'cli-state.json'), '--json']);
  assert.is(r.status, 0, r.stderr);
  const report = JSON.parse(r.stdout) as Record<string, unknown>;
  assert.equal(report, { ok: true, ...got.verified, file: cliOut });
});

test('verifiedGet: a block not signed by the pinned key is refused (bad_signature), nothing written', async () => {
  const other = createKeyFile(join(work, 'other.pem')).publicKeyB64;
  const output = join(work, 'refused.js');
  const statePath = join(work, 'refused-state.json');
  const got = await verifiedGet(request({ output, statePath, pin: { kind: 'key', publicKey: other } }));
  assert.is(got.ok, false);
  if (got.ok) return;
  assert.is(got.code, 'bad_signature');
  assert.is(got.exit, 1);
  assert.not.ok(existsSync(output), 'no file');
  assert.not.ok(existsSync(statePath), 'no state');
});

test.run();
