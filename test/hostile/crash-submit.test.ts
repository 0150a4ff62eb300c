/**
 * Crash safety with a real process: an authority gateway under concurrent
 * submits is killed with SIGKILL at random moments, again and again
 * (bounded). After each restart: the chain verifies, every submit that got a
 * 2xx is present, no block appears that was neither acknowledged nor in
 * flight, the working tree is clean, and nothing appears twice.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig } from '../helpers/gateway-process.ts';
import { git, vouchAsync } from '../helpers/processes.ts';
import { chainFile } from '../helpers/chain-files.ts';

const ROUNDS = Number(process.env.VOUCH_CRASH_ROUNDS ?? 6);
const work = mkdtempSync(join(tmpdir(), 'vouch-crash-'));
const token = 'crash-token-' + 'z'.repeat(30);
const chainDir = join(work, 'chain');
let origin: OriginServer;
let configFile = '';
let pub = '';

// A deterministic pseudo-random sequence, so a failure can be replayed.
let seed = 0x5eed;
const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;

test.before(async () => {
  pub = createKeyFile(join(work, 'authority.pem')).publicKeyB64;
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  origin = await OriginServer.start();
  configFile = writeConfig(work, {
    listen: { port: 0 },
    chain: { dir: chainDir },
    authority: { key_file: join(work, 'authority.pem'), signer: 'crash-test', submit_token_file: join(work, 'submit.token') },
    origin: { allow_private: true },
  });
});

test.after(async () => {
  await origin.close();
  rmSync(work, { recursive: true, force: true });
});

function blockUrls(): Map<string, number> {
  const out = new Map<string, number>();
  const size = JSON.parse(readFileSync(join(chainDir, 'checkpoint.json'), 'utf8')).size as number;
  for (let i = 1; i < size; i++) {
    const d = String(i).padStart(9, '0');
    const b = JSON.parse(chainFile(chainDir, `blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`));
    for (const e of b.payload.endorsements) {
      assert.not.ok(out.has(e.artifact_url), `${e.artifact_url} endorsed twice`);
      out.set(e.artifact_url, i);
    }
  }
  return out;
}

test(`SIGKILL under concurrent submits, ${ROUNDS} times: acknowledged submits survive, nothing unacknowledged appears`, async () => {
  const acked = new Set<string>();
  const sent = new Set<string>();
  let n = 0;
  let repaired = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const gw = await startGatewayProcess(['--config', configFile]);
    const agent = new Agent({ connections: 32 });
    let stop = false;
    const client = async () => {
      while (!stop) {
        const url = origin.url(`/crash-${++n}.tgz`);
        origin.route(`/crash-${n}.tgz`, { body: `artifact ${n}` });
        sent.add(url);
        try {
          const r = await request(gw.url + '/v1/submit', {
            method: 'POST',
            dispatcher: agent,
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
            body: JSON.stringify({ url, name: 'acme/crash', semver: `1.0.${n}`, license: 'MIT' }),
          });
          const body = (await r.body.json()) as any;
          if (r.statusCode === 201 || r.statusCode === 200) acked.add(url);
          else if (!stop) assert.unreachable(`unexpected ${r.statusCode} ${JSON.stringify(body)}`);
        } catch {
          return; // the gateway died under us
        }
      }
    };
    const clients = Array.from({ length: 6 }, client);
    await new Promise((r) => setTimeout(r, 150 + Math.floor(rand() * 600)));
    gw.child.kill('SIGKILL');
    stop = true;
    await gw.exited;
    await Promise.all(clients);
    await agent.close().catch(() => {});

    // Restart: the gateway repairs and verifies on its own; then audit.
    const again = await startGatewayProcess(['--config', configFile]);
    await again.stop();
    if (/repaired after an interrupted append/.test(again.stderr())) repaired++;
    const v = await vouchAsync(['verify', '--chain', chainDir, '--public-key', pub, '--json']);
    assert.is(v.status, 0, `round ${round}: ${v.stdout} ${v.stderr}`);
    assert.is(git(['-C', chainDir, 'status', '--porcelain']).stdout, '', `round ${round}: working tree not clean`);
    assert.is(git(['-C', chainDir, 'fsck', '--strict']).status, 0, `round ${round}: git fsck`);
    const present = blockUrls();
    for (const url of acked) assert.ok(present.has(url), `round ${round}: acknowledged ${url} is missing`);
    for (const url of present.keys()) assert.ok(sent.has(url), `round ${round}: ${url} was never submitted`);
    console.log(
      `round ${round}: ${acked.size} acknowledged so far, ${present.size} endorsed, ${present.size - [...present.keys()].filter((u) => acked.has(u)).length} in flight when killed`,
    );
  }
  console.log(`restarts that repaired an interrupted append: ${repaired} of ${ROUNDS}`);
  assert.ok(acked.size > ROUNDS, `only ${acked.size} submits were acknowledged`);
});

test.run();
