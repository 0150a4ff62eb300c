/**
 * Consumers following key events with no restart and no new configuration
 * (issue 32 item 6, docs/key-events.md): `GET /v1/keys`, a mirror pinned to
 * the first key syncing across a rollover, a rotation and a compromise (and
 * a warm restart), `vouch get` pinned to the first key or to a root, and a
 * witness configured with the first key. Real processes on 127.0.0.1: vouch
 * serve, a git smart-HTTP server, the vouch CLI.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Decode, hexDecode } from '../chain/encoding.ts';
import { parseKeysAnswer, startTrail, walkKeyEvents } from '../chain/key-walk.ts';
import { leafHash, verifyInclusion } from '../chain/merkle.ts';
import { SIG_ED25519, verifierKey } from '../chain/note.ts';
import { parseCheckpoint } from '../chain/tlog-checkpoint.ts';
import { parseNote } from '../chain/note.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import type { ChainRepo } from '../store/chain-repo.ts';
import { GitServer } from './helpers/git-server.ts';
import { startGatewayProcess, until, writeConfig, type GatewayProcess } from './helpers/gateway-process.ts';
import { b64, buildKeyLifeChain, ONLINE } from './helpers/key-fixture.ts';
import { appendTo, initKeyRepo } from './helpers/key-log.ts';
import { gitAsync } from './helpers/processes.ts';

const c = nodeBackend;
const ORIGIN = 'vouch.example/key-follow';
const work = mkdtempSync(join(tmpdir(), 'vouch-key-follow-'));
const life = buildKeyLifeChain(); // root at 2, A -> B at 4, B compromised after 5 at 8 (6-7 void), root rotation at 10
const pinA = b64(ONLINE.A);
const urlOf = (i: number) => `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`;
const gateways: GatewayProcess[] = [];
let gitServer: GitServer;

async function serve(dir: string, extra: Record<string, unknown> = {}): Promise<GatewayProcess> {
  const gw = await startGatewayProcess(['--config', writeConfig(dir, { listen: { port: 0 }, ...extra }, `vouch-${gateways.length}.yaml`)]);
  gateways.push(gw);
  return gw;
}
const getJson = async (base: string, path: string) => {
  const r = await fetch(base + path);
  return { status: r.status, json: await r.json() as any };
};

test.before(async () => {
  gitServer = await GitServer.start(join(work, 'git'));
});
test.after(async () => {
  for (const g of gateways.splice(0)) await g.stop();
  await gitServer?.stop();
  rmSync(work, { recursive: true, force: true });
});

test('GET /v1/keys: block 0 and every key block after `since`, each proven in the served note; a client walk from the first key ends in the served state', async () => {
  const dir = join(work, 'full');
  await initKeyRepo(join(dir, 'chain'), life.blocks, 12, ORIGIN);
  const gw = await serve(dir, { chain: { dir: join(dir, 'chain'), public_key: pinA } });
  const r = await getJson(gw.url, '/v1/keys');
  assert.is(r.status, 200, JSON.stringify(r.json));
  const k = r.json;
  assert.is(k.chain, life.blocks[0]!.record_hash);
  assert.equal(k.first, { signer: 'vouch-test', public_key: pinA });
  assert.is(k.size, 12);
  assert.equal(k.events.map((e: any) => [e.index, e.sequence]), [[2, 1], [4, 2], [8, 3], [10, 4]]);
  assert.equal(k.state.voids, [[6, 7]]);
  assert.is(k.state.online.publicKey, b64(ONLINE.C));
  assert.is(k.verifier_keys[0], verifierKey(c, ORIGIN, SIG_ED25519, ONLINE.C.publicKey));
  assert.not.ok(k.verifier_keys.includes(verifierKey(c, ORIGIN, SIG_ED25519, ONLINE.B.publicKey)), 'a compromised key is not published');
  const cp = parseCheckpoint(parseNote(k.checkpoint).text);
  for (const e of k.events) {
    assert.ok(verifyInclusion(c, e.index, 12, leafHash(c, hexDecode(e.block.record_hash)!), e.proof.map((h: string) => base64Decode(h)!), cp.root), `event ${e.sequence}`);
  }
  const answer = parseKeysAnswer(k, gw.url);
  const trail = walkKeyEvents(c, startTrail(c, answer, cp, pinA, gw.url), answer.events, cp, gw.url);
  assert.equal(trail.state, k.state);
  assert.equal(trail.spans.map((s) => [s.since, s.publicKey]), [[0, pinA], [4, b64(ONLINE.B)], [8, b64(ONLINE.C)]]);

  const since2 = await getJson(gw.url, '/v1/keys?since=2');
  assert.equal(since2.json.events.map((e: any) => e.sequence), [3, 4]);
  assert.equal((await getJson(gw.url, '/v1/keys?since=4')).json.events, []);
  for (const bad of ['since=x', 'since=-1', 'since=1&since=2', 'since=01']) {
    const b = await getJson(gw.url, `/v1/keys?${bad}`);
    assert.is(b.status, 400, bad);
    assert.is(b.json.status, 'bad_request', bad);
  }
});

/** A source chain pushed to a bare repository on the git server, grown one stage at a time. */
async function pushedChain(name: string, size: number, signers?: typeof ONLINE.A[]): Promise<{ repo: ChainRepo; remote: string; grow: (to: number, noteSigners?: typeof ONLINE.A[]) => Promise<void> }> {
  gitServer.initBare(`${name}.git`);
  const remote = gitServer.url(`${name}.git`);
  const src = join(work, `${name}-src`);
  const repo = await initKeyRepo(src, life.blocks, size, ORIGIN, signers);
  const push = async () => assert.is((await gitAsync(['-C', src, 'push', '-q', remote, 'main'])).status, 0);
  await push();
  return { repo, remote, grow: async (to, noteSigners) => { await appendTo(repo, life.blocks, to, ORIGIN, noteSigners); await push(); } };
}

test('a mirror pinned to the first key follows a rollover, a rotation and a compromise with no restart; void blocks stop being selected; a warm restart keeps it', async () => {
  const { remote, grow } = await pushedChain('mirror', 4);
  const dir = join(work, 'mirror');
  const config = { chain: { dir: join(dir, 'chain'), remote, public_key: pinA, sync_interval: 1 } };
  let m = await serve(dir, config);
  const size = async () => (await getJson(m.url, '/v1/checkpoint')).json.size as number;
  const selected = async (i: number) => (await getJson(m.url, `/v1/endorsement?url=${encodeURIComponent(urlOf(i))}`)).status;
  assert.is(await size(), 4);

  await grow(6, [ONLINE.B, ONLINE.A]); // the rollover: the note carries both keys' signatures
  await until('the mirror at 6 (rollover note)', async () => (await size()) === 6);
  await grow(8); // the note by B alone
  await until('the mirror at 8 (note by the rotated key)', async () => (await size()) === 8);
  assert.is(await selected(6), 200, 'block 6 is not void yet');
  await grow(12); // the compromise at 8 voids 6-7; C signs
  await until('the mirror at 12 (note by the key after the compromise)', async () => (await size()) === 12, 30_000);
  assert.is(await selected(6), 404, 'a void block is never selected');
  assert.is(await selected(7), 404);
  assert.is(await selected(5), 200);
  assert.is(await selected(9), 200);
  assert.is((await getJson(m.url, '/v1/keys')).json.state.online.publicKey, b64(ONLINE.C));
  assert.not.match(m.stdout() + m.stderr(), /refused the remote head/);

  await m.stop();
  gateways.splice(gateways.indexOf(m), 1);
  m = await serve(dir, config);
  assert.match(m.stdout(), /warm/);
  assert.is(await size(), 12);
  assert.is(await selected(6), 404);
  assert.is(await selected(9), 200);
  assert.is((await getJson(m.url, '/v1/keys')).json.checkpoint.split('\n')[1], '12');
});

test.run();
