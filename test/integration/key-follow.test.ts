/**
 * Consumers following key events with no restart and no new configuration
 * (issue 32 item 6, docs/spec/key-events.md): `GET /v1/keys`, a mirror pinned to
 * the first key syncing across a rollover, a rotation and a compromise (and
 * a warm restart), `vouch get` pinned to the first key or to a root, and a
 * witness configured with the first key. Real processes on 127.0.0.1: vouch
 * serve, a git smart-HTTP server, the vouch CLI.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Decode, base64Encode, hexDecode } from '../../chain/encoding.ts';
import { type KeyWalkError, parseKeysAnswer, parseTrail, startTrail, walkKeyEvents } from '../../chain/key-walk.ts';
import { verifyChain } from '../../chain/verify.ts';
import { leafHash, verifyInclusion } from '../../chain/merkle.ts';
import { SIG_ED25519, verifierKey } from '../../chain/note.ts';
import { parseCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { parseNote } from '../../chain/note.ts';
import { asciiJson } from '../../chain/uns-header.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { createKeyFile } from '../../platform/key-file.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { formatAddCheckpoint } from '../../gateway/transparency/witness.ts';
import { noteOf } from '../helpers/key-log.ts';
import type { ChainRepo } from '../../store/chain-repo.ts';
import { GitServer } from '../helpers/git-server.ts';
import { startGatewayProcess, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { b64, buildKeyLifeChain, HOLDERS, KeyChain, ONLINE, seededSigner } from '../helpers/key-fixture.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { appendTo, endorseAt, initKeyRepo, knowSigner } from '../helpers/key-log.ts';
import { gitAsync, vouchAsync } from '../helpers/processes.ts';

const c = nodeBackend;
const ORIGIN = 'vouch.example/key-follow';
const work = mkdtempSync(join(tmpdir(), 'vouch-key-follow-'));
const life = buildKeyLifeChain(); // root at 2, A -> B at 4, B compromised after 5 at 8 (6-7 void), root rotation at 10
const pinA = b64(ONLINE.A);
const walkState = (blocks: typeof life.blocks) => {
  const r = verifyChain(blocks, { backend: c });
  if (!r.ok) throw new Error(r.message);
  return r.keys;
};
const urlOf = (i: number) => `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`;
const gateways: GatewayProcess[] = [];
let gitServer: GitServer;
let origin: OriginServer;

async function serve(dir: string, extra: Record<string, unknown> = {}): Promise<GatewayProcess> {
  const gw = await startGatewayProcess(['--config', writeConfig(dir, { listen: { port: 0 }, ...extra }, `vouch-${gateways.length}.yaml`)]);
  gateways.push(gw);
  return gw;
}
const getJson = async (base: string, path: string) => {
  const r = await fetch(base + path);
  return { status: r.status, json: (await r.json()) as any };
};

test.before(async () => {
  gitServer = await GitServer.start(join(work, 'git'));
  origin = await OriginServer.start();
});
test.after(async () => {
  for (const g of gateways.splice(0)) await g.stop();
  await gitServer?.stop();
  await origin?.close();
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
  assert.equal(
    k.events.map((e: any) => [e.index, e.sequence]),
    [
      [2, 1],
      [4, 2],
      [8, 3],
      [10, 4],
    ],
  );
  assert.equal(k.state.voids, [[6, 7]]);
  assert.is(k.state.online.publicKey, b64(ONLINE.C));
  assert.is(k.verifier_keys[0], verifierKey(c, ORIGIN, SIG_ED25519, ONLINE.C.publicKey));
  assert.not.ok(k.verifier_keys.includes(verifierKey(c, ORIGIN, SIG_ED25519, ONLINE.B.publicKey)), 'a compromised key is not published');
  const cp = parseCheckpoint(parseNote(k.checkpoint).text);
  for (const e of k.events) {
    assert.ok(
      verifyInclusion(
        c,
        e.index,
        12,
        leafHash(c, hexDecode(e.block.record_hash)!),
        e.proof.map((h: string) => base64Decode(h)!),
        cp.root,
      ),
      `event ${e.sequence}`,
    );
  }
  const answer = parseKeysAnswer(k, gw.url);
  const trail = walkKeyEvents(c, startTrail(c, answer, cp, pinA, gw.url), answer.events, cp, gw.url);
  assert.equal(trail.state, k.state);
  assert.equal(
    trail.spans.map((s) => [s.since, s.publicKey]),
    [
      [0, pinA],
      [4, b64(ONLINE.B)],
      [8, b64(ONLINE.C)],
    ],
  );

  const since2 = await getJson(gw.url, '/v1/keys?since=2');
  assert.equal(
    since2.json.events.map((e: any) => e.sequence),
    [3, 4],
  );
  assert.equal((await getJson(gw.url, '/v1/keys?since=4')).json.events, []);
  for (const bad of ['since=x', 'since=-1', 'since=1&since=2', 'since=01']) {
    const b = await getJson(gw.url, `/v1/keys?${bad}`);
    assert.is(b.status, 400, bad);
    assert.is(b.json.status, 'bad_request', bad);
  }
});

/** A source chain pushed to a bare repository on the git server, grown one stage at a time. */
async function pushedChain(
  name: string,
  size: number,
  signers?: (typeof ONLINE.A)[],
  chain = life,
): Promise<{ repo: ChainRepo; remote: string; grow: (to: number, noteSigners?: (typeof ONLINE.A)[]) => Promise<void> }> {
  gitServer.initBare(`${name}.git`);
  const remote = gitServer.url(`${name}.git`);
  const src = join(work, `${name}-src`);
  const repo = await initKeyRepo(src, chain.blocks, size, ORIGIN, signers);
  const push = async () => assert.is((await gitAsync(['-C', src, 'push', '-q', remote, 'main'])).status, 0);
  await push();
  return {
    repo,
    remote,
    grow: async (to, noteSigners) => {
      await appendTo(repo, chain.blocks, to, ORIGIN, noteSigners);
      await push();
    },
  };
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

test('the client walk refuses a forged key block (signed by the online key alone), a proof that does not verify, another block 0, a skipped event, and more than 32 events', () => {
  const tree = new MerkleTree(c);
  const forged = buildKeyLifeChain();
  forged.blocks.length = 4;
  forged.keys = walkState(forged.blocks);
  forged.signer = ONLINE.A;
  // A rotation to D signed by A alone (no holder): the statement carries no root threshold.
  forged.forge(
    { statement: { action: 'key', chain: forged.keys.chain, sequence: 2, online: { signer: 'vouch-test', public_key: b64(ONLINE.D) } }, signatures: [] },
    ONLINE.D,
  );
  for (const b of forged.blocks) tree.append(hexDecode(b.record_hash)!);
  const cp = { size: tree.size, root: tree.root() };
  const answerOf = (blocks: typeof forged.blocks, keyIdx: number[], t: MerkleTree) =>
    parseKeysAnswer(
      {
        chain: blocks[0]!.record_hash,
        size: t.size,
        checkpoint: '',
        first_block: { block: blocks[0], proof: t.inclusionProof(0, t.size).map(base64Encode) },
        events: keyIdx.map((i) => ({
          index: i,
          sequence: blocks[i]!.payload.statement!.sequence,
          block: blocks[i],
          proof: t.inclusionProof(i, t.size).map(base64Encode),
        })),
      },
      'test',
    );
  const refusal = (f: () => unknown): string => {
    try {
      f();
    } catch (e) {
      return `${(e as KeyWalkError).code}: ${(e as Error).message}`;
    }
    return 'accepted';
  };
  const a = answerOf(forged.blocks, [2, 4], tree);
  assert.match(
    refusal(() => walkKeyEvents(c, startTrail(c, a, cp, pinA, 't'), a.events, cp, 't')),
    /^bad_key_event: t: key event 2 \(block 4\): the root \(version 1\) needs 2 of its 3 holders' signatures, the statement has 0/,
  );
  // A proof against another tree.
  const bent = answerOf(forged.blocks, [2], tree);
  bent.events[0]!.proof[0] = new Uint8Array(32);
  assert.match(
    refusal(() => walkKeyEvents(c, startTrail(c, bent, cp, pinA, 't'), bent.events, cp, 't')),
    /^bad_proof: /,
  );
  // Block 0 of another authority than the pinned key.
  assert.match(
    refusal(() => startTrail(c, a, cp, b64(ONLINE.B), 't')),
    /^untrusted_authority: /,
  );
  // An event skipped: sequence 2 without 1.
  const lifeTree = new MerkleTree(c);
  for (const b of life.blocks) lifeTree.append(hexDecode(b.record_hash)!);
  const lcp = { size: lifeTree.size, root: lifeTree.root() };
  const skip = answerOf(life.blocks, [4], lifeTree);
  assert.match(
    refusal(() => walkKeyEvents(c, startTrail(c, skip, lcp, pinA, 't'), skip.events, lcp, 't')),
    /^bad_key_event: .*skips ahead/,
  );
  // The bound: the whole life walks (4 events) but not with a bound of 3.
  const all = answerOf(life.blocks, [2, 4, 8, 10], lifeTree);
  assert.match(
    refusal(() => walkKeyEvents(c, startTrail(c, all, lcp, pinA, 't'), all.events, lcp, 't', 3)),
    /^key_walk_limit: t: 4 key events/,
  );
  assert.is(walkKeyEvents(c, startTrail(c, all, lcp, pinA, 't'), all.events, lcp, 't').state.sequence, 4);
  // A stored trail reads back only whole.
  const trail = walkKeyEvents(c, startTrail(c, all, lcp, pinA, 't'), all.events, lcp, 't');
  assert.equal(parseTrail(JSON.parse(JSON.stringify(trail))), trail);
  assert.is(parseTrail({ ...trail, state: { ...trail.state, retired: ['not a key'] } }), null);
});

// ------------------------------------------------------------------ vouch get

/** A chain whose endorsements are served by the local origin: A signs 1 and 3, B (after the rotation at 4) 5 and 6, C (after B's compromise at 7, good through 5) 8. */
const gc = new KeyChain();
const bodyOf = (i: number) => `followed artifact ${i}`;
const gurl = (i: number) => `${origin.url(`/g-${i}.tgz`)}`;
function buildGetChain(): void {
  endorseAt(gc, gurl(1), bodyOf(1), '1.0.0');
  gc.adoptRoot();
  endorseAt(gc, gurl(3), bodyOf(3), '3.0.0');
  gc.rotate(ONLINE.B);
  endorseAt(gc, gurl(5), bodyOf(5), '5.0.0');
  endorseAt(gc, gurl(6), bodyOf(6), '6.0.0');
  gc.compromise(5, ONLINE.C);
  endorseAt(gc, gurl(8), bodyOf(8), '8.0.0');
}
let getMirror: GatewayProcess;
let getRemote = '';
let growGet: (to: number, noteSigners?: (typeof ONLINE.A)[]) => Promise<void>;
const stateFile = () => join(work, 'get-state.json');
const vget = (gateway: string, i: number) =>
  vouchAsync(['get', '--gateway', gateway, '--url', gurl(i), '--public-key', pinA, '-o', join(work, `out-${i}`), '--state', stateFile()]);
const mirrorSize = async (): Promise<number> => (await getJson(getMirror.url, '/v1/checkpoint')).json.size;

test("vouch get pinned to the first key: no request beyond today's before a key event; across a rotation one /v1/keys, the keys kept in its state", async () => {
  for (const i of [1, 3, 5, 6, 8]) origin.route(`/g-${i}.tgz`, { body: bodyOf(i) });
  buildGetChain();
  const pushed = await pushedChain('get', 4, undefined, gc);
  growGet = pushed.grow;
  getRemote = pushed.remote;
  getMirror = await serve(join(work, 'get-mirror'), {
    chain: { dir: join(work, 'get-mirror', 'chain'), remote: pushed.remote, public_key: pinA, sync_interval: 1 },
    origin: { allow_private: true },
  });
  /** `/v1/keys` requests the gateway answered so far (its /metrics). */
  const keysAsked = async () => {
    const text = await (await fetch(`${getMirror.url}/metrics`)).text();
    return [...text.matchAll(/^vouch_http_requests_total\{[^}]*route="\/v1\/keys"[^}]*\} (\d+)$/gm)].reduce((n, m) => n + Number(m[1]), 0);
  };
  let r = await vget(getMirror.url, 3);
  assert.is(r.status, 0, r.stderr);
  assert.is(readFileSync(join(work, 'out-3'), 'utf8'), bodyOf(3));
  assert.not.ok('keys' in JSON.parse(readFileSync(stateFile(), 'utf8')).logs[ORIGIN], 'nothing more is stored for a log without key events walked');
  assert.is(await keysAsked(), 0, 'no /v1/keys before a key event');

  await growGet(6, [ONLINE.B, ONLINE.A]); // rotation to B at 4; a rollover note (B and A): the note opens with A, block 5's signature (B) makes the walk
  await until('the mirror at 6', async () => (await mirrorSize()) === 6);
  r = await vget(getMirror.url, 5);
  assert.is(r.status, 0, r.stderr);
  assert.is(readFileSync(join(work, 'out-5'), 'utf8'), bodyOf(5));
  assert.is(await keysAsked(), 1, 'one /v1/keys across the rotation');
  const kept = JSON.parse(readFileSync(stateFile(), 'utf8')).logs[ORIGIN];
  assert.is(kept.size, 6);
  assert.is(kept.keys.trail.state.sequence, 2);
  assert.is(kept.keys.trail.state.online.publicKey, b64(ONLINE.B));
  // A block signed by A before the rotation still verifies, with the state's trail (no walk needed).
  r = await vget(getMirror.url, 1);
  assert.is(r.status, 0, r.stderr);
  r = await vget(getMirror.url, 5);
  assert.is(r.status, 0, r.stderr);
  assert.is(await keysAsked(), 1, 'the keys kept in the state file: no walk again');
});

/** A gateway that lies: /v1/download answers `block` with its proof in the real gateway's served note; everything else is the real gateway's. */
async function lyingGateway(real: string, block: unknown, body: string): Promise<{ url: string; requests: string[]; close: () => Promise<void> }> {
  const requests: string[] = [];
  const server: Server = createServer(async (req, res) => {
    const u = new URL(req.url!, 'http://x');
    requests.push(u.pathname + u.search);
    if (u.pathname === '/v1/download') {
      const b = block as { index: number };
      const note = await (await fetch(`${real}/checkpoint`)).text();
      const size = Number(note.split('\n')[1]);
      const p = (await (await fetch(`${real}/v1/proof/inclusion?index=${b.index}&size=${size}`)).json()) as { proof: string[] };
      res.writeHead(200, {
        'content-type': 'application/octet-stream',
        uns: JSON.stringify({ vouch: { endorsement: block } }),
        'vouch-proof': asciiJson({ index: b.index, size, proof: p.proof, checkpoint: note }),
        'content-length': Buffer.byteLength(body),
      });
      res.end(body);
      return;
    }
    const r = await fetch(real + u.pathname + u.search);
    const text = Buffer.from(await r.arrayBuffer());
    res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/octet-stream', 'content-length': text.length });
    res.end(text);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests, close: () => new Promise((r) => server.close(() => r())) };
}

test('vouch get after a compromise: a block of the voided range is refused (void_block) once the compromise block is walked; a block by the new key is fetched', async () => {
  await growGet(9); // B compromised after 5 at 7 (6 void); C signs 8 and the note
  await until('the mirror at 9', async () => (await mirrorSize()) === 9);
  const honest = await vget(getMirror.url, 6);
  assert.is(honest.status, 1, honest.stderr);
  assert.match(honest.stderr, /404/, honest.stderr);
  const liar = await lyingGateway(getMirror.url, gc.blocks[6], bodyOf(6));
  try {
    const r = await vget(liar.url, 6);
    assert.is(r.status, 1, r.stderr);
    assert.match(r.stderr, /void_block/);
    assert.match(r.stderr, /block 6/);
    assert.not.ok(existsSync(join(work, 'out-6')));
    assert.is(liar.requests.filter((q) => q.startsWith('/v1/keys')).length, 1, liar.requests.join('\n'));
    assert.ok(liar.requests.includes('/v1/keys?since=2'), liar.requests.join('\n'));
  } finally {
    await liar.close();
  }
  const r = await vget(getMirror.url, 8);
  assert.is(r.status, 0, r.stderr);
  assert.is(JSON.parse(readFileSync(stateFile(), 'utf8')).logs[ORIGIN].keys.trail.state.online.publicKey, b64(ONLINE.C));
});

test('vouch get with two gateways (mirrors of the rotated and recovered chain), pinned to the first key, from a fresh state: one walk, both agree', async () => {
  const dir = join(work, 'get-mirror-2');
  const m2 = await serve(dir, { chain: { dir: join(dir, 'chain'), remote: getRemote, public_key: pinA, sync_interval: 1 }, origin: { allow_private: true } });
  await until('the second mirror at 9', async () => (await getJson(m2.url, '/v1/checkpoint')).json.size === 9);
  const r = await vouchAsync([
    'get',
    '--gateway',
    getMirror.url,
    '--gateway',
    m2.url,
    '--url',
    gurl(8),
    '--public-key',
    pinA,
    '-o',
    join(work, 'out-two'),
    '--state',
    join(work, 'two-state.json'),
  ]);
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /\(2 gateways agree\)/);
  assert.is(readFileSync(join(work, 'out-two'), 'utf8'), bodyOf(8));
  assert.is(JSON.parse(readFileSync(join(work, 'two-state.json'), 'utf8')).logs[ORIGIN].keys.trail.state.sequence, 3);
});

test('vouch get pinned to a root (a statement file, or {threshold, keys}) trusts the key events from that root on; a root the log never stated is refused', async () => {
  const rootFile = join(work, 'root.json');
  writeFileSync(rootFile, JSON.stringify({ threshold: 2, keys: HOLDERS.slice(0, 3).map(b64) }));
  let r = await vouchAsync([
    'get',
    '--gateway',
    getMirror.url,
    '--url',
    gurl(8),
    '--root',
    rootFile,
    '-o',
    join(work, 'out-root-8'),
    '--state',
    join(work, 'root-state.json'),
  ]);
  assert.is(r.status, 0, r.stderr);
  assert.is(readFileSync(join(work, 'out-root-8'), 'utf8'), bodyOf(8));
  const stmt = join(work, 'root-stmt.json');
  writeFileSync(stmt, JSON.stringify({ statement: gc.blocks[2]!.payload.statement, signatures: gc.blocks[2]!.payload.signatures }));
  r = await vouchAsync([
    'get',
    '--gateway',
    getMirror.url,
    '--url',
    gurl(5),
    '--root',
    stmt,
    '-o',
    join(work, 'out-root-5'),
    '--state',
    join(work, 'root-state2.json'),
  ]);
  assert.is(r.status, 0, r.stderr);
  writeFileSync(rootFile, JSON.stringify({ threshold: 2, keys: [HOLDERS[0]!, HOLDERS[1]!, HOLDERS[3]!].map(b64) }));
  r = await vouchAsync([
    'get',
    '--gateway',
    getMirror.url,
    '--url',
    gurl(8),
    '--root',
    rootFile,
    '-o',
    join(work, 'out-root-x'),
    '--state',
    join(work, 'root-state3.json'),
  ]);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /untrusted_authority.*never put the pinned root/);
  r = await vouchAsync(['get', '--gateway', getMirror.url, '--url', gurl(8), '-o', join(work, 'out-none'), '--state', join(work, 'root-state4.json')]);
  assert.is(r.status, 2, r.stderr);
});

test('vouch get refuses a walk of more than 32 key events in one update (key_walk_limit)', async () => {
  const many = new KeyChain();
  many.adoptRoot();
  for (let k = 0; k < 33; k++) {
    const next = seededSigner(`rotation-${k}`, 'vouch-test');
    knowSigner(next);
    many.rotate(next);
  }
  origin.route('/many.tgz', { body: 'many' });
  endorseAt(many, origin.url('/many.tgz'), 'many', '1.0.0');
  const dir = join(work, 'many');
  await initKeyRepo(join(dir, 'chain'), many.blocks, many.blocks.length, ORIGIN);
  const gw = await serve(dir, { chain: { dir: join(dir, 'chain'), public_key: pinA }, origin: { allow_private: true } });
  const r = await vouchAsync([
    'get',
    '--gateway',
    gw.url,
    '--url',
    origin.url('/many.tgz'),
    '--public-key',
    pinA,
    '-o',
    join(work, 'out-many'),
    '--state',
    join(work, 'many-state.json'),
  ]);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /key_walk_limit/);
  assert.match(r.stderr, /34 key events/);
});

// ------------------------------------------------------------------ witness

test("a witness configured with the first key and the log's url cosigns the rollover as before, then notes by the rotated key and by the key after a compromise once their key blocks are proven; it keeps the keys across a restart", async () => {
  const { remote, grow } = await pushedChain('wit', 4);
  const mdir = join(work, 'wit-mirror');
  mkdirSync(mdir, { recursive: true });
  createKeyFile(join(mdir, 'own-witness.pem'));
  // The mirror witnesses its own chain's log too (no configuration: the key in force of what it verified).
  const m = await serve(mdir, {
    chain: { dir: join(mdir, 'chain'), remote, public_key: pinA, sync_interval: 0.5 },
    witness: { key_file: join(mdir, 'own-witness.pem'), name: 'witness.example.test/own', state_file: join(mdir, 'own-witness.json') },
  });
  const msize = async () => (await getJson(m.url, '/v1/checkpoint')).json.size as number;
  const wdir = join(work, 'witness');
  mkdirSync(wdir, { recursive: true });
  const wkey = join(wdir, 'w.pem');
  const akey = join(wdir, 'a.pem');
  createKeyFile(wkey);
  createKeyFile(akey);
  writeFileSync(join(work, 'wit.token'), 'w'.repeat(40), { mode: 0o600 });
  const stateFile = join(wdir, 'witness-state.json');
  const wconfig = {
    chain: { dir: join(wdir, 'chain') },
    authority: { key_file: akey, signer: 'witness-host', submit_token_file: join(work, 'wit.token') },
    witness: {
      key_file: wkey,
      name: 'witness.example.test/follow',
      state_file: stateFile,
      logs: [{ vkey: verifierKey(c, ORIGIN, SIG_ED25519, ONLINE.A.publicKey), url: m.url }],
    },
  };
  let w = await serve(wdir, wconfig);
  const tree = new MerkleTree(c);
  for (const b of life.blocks) tree.append(hexDecode(b.record_hash)!);
  const post = async (old: number, size: number, signers?: (typeof ONLINE.A)[], base = w.url) => {
    const signed = noteOf(life.blocks, size, ORIGIN, signers ?? [ONLINE.A]);
    const r = await fetch(`${base}/add-checkpoint`, {
      method: 'POST',
      body: formatAddCheckpoint(old, old > 0 && old < size ? tree.consistencyProof(old, size) : [], signed),
    });
    return { status: r.status, text: await r.text() };
  };
  const trail = () => JSON.parse(readFileSync(stateFile, 'utf8')).logs[ORIGIN].keys;

  let r = await post(0, 4);
  assert.is(r.status, 200, r.text);
  await grow(6, [ONLINE.B, ONLINE.A]);
  await until('the log at 6', async () => (await msize()) === 6);
  r = await post(4, 6, [ONLINE.B, ONLINE.A]);
  assert.is(r.status, 200, r.text);
  assert.is(trail(), undefined, 'a rollover note opens with the configured key: nothing walked');

  await grow(8);
  await until('the log at 8', async () => (await msize()) === 8);
  r = await post(6, 8, [ONLINE.B]);
  assert.is(r.status, 200, r.text);
  assert.is(trail().state.online.publicKey, b64(ONLINE.B));
  const own = await post(0, 8, [ONLINE.B], m.url);
  assert.is(own.status, 200, 'the mirror cosigns its own log by the key in force: ' + own.text);
  const ownByA = await post(8, 8, [ONLINE.A], m.url);
  assert.is(ownByA.status, 403, 'not by the retired first key: ' + ownByA.text);

  await grow(12);
  await until('the log at 12', async () => (await msize()) === 12);
  r = await post(8, 12, [ONLINE.C]);
  assert.is(r.status, 200, r.text);
  assert.is(trail().state.online.publicKey, b64(ONLINE.C));
  assert.equal(trail().state.voids, [[6, 7]]);
  const byStolenKey = await post(12, 12, [ONLINE.B]);
  assert.is(byStolenKey.status, 403, 'the compromised key is no longer trusted: ' + byStolenKey.text);
  const byFirstKey = await post(12, 12, [ONLINE.A]);
  assert.is(byFirstKey.status, 403, 'nor the configured first key, retired: ' + byFirstKey.text);

  // A restart with the log's gateway gone: the key in force comes from the state file.
  await m.stop();
  await w.stop();
  gateways.splice(gateways.indexOf(w), 1);
  w = await serve(wdir, wconfig);
  r = await post(12, 12, [ONLINE.C]);
  assert.is(r.status, 200, r.text);
  r = await post(12, 12, [ONLINE.B]);
  assert.is(r.status, 403, r.text);
});

test("a witness whose log gateway lags behind the submitted checkpoint walks the key blocks proven in that gateway's own note", async () => {
  const ldir = join(work, 'lagging');
  await initKeyRepo(join(ldir, 'chain'), life.blocks, 6, ORIGIN, [ONLINE.B]);
  const lag = await serve(ldir, { chain: { dir: join(ldir, 'chain'), public_key: pinA } });
  const wdir = join(work, 'witness-2');
  mkdirSync(wdir, { recursive: true });
  createKeyFile(join(wdir, 'w.pem'));
  createKeyFile(join(wdir, 'a.pem'));
  const w2 = await serve(wdir, {
    chain: { dir: join(wdir, 'chain') },
    authority: { key_file: join(wdir, 'a.pem'), signer: 'witness-host-2', submit_token_file: join(work, 'wit.token') },
    witness: {
      key_file: join(wdir, 'w.pem'),
      name: 'witness.example.test/lag',
      state_file: join(wdir, 'state.json'),
      logs: [{ vkey: verifierKey(c, ORIGIN, SIG_ED25519, ONLINE.A.publicKey), url: lag.url }],
    },
  });
  const r = await fetch(`${w2.url}/add-checkpoint`, { method: 'POST', body: formatAddCheckpoint(0, [], noteOf(life.blocks, 8, ORIGIN, [ONLINE.B])) });
  assert.is(r.status, 200, await r.text());
  assert.is(JSON.parse(readFileSync(join(wdir, 'state.json'), 'utf8')).logs[ORIGIN].keys.state.online.publicKey, b64(ONLINE.B));
});

test.run();
