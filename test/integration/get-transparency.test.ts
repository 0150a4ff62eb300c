/**
 * `vouch get` against the attack of issue 17: a gateway that replays a saved,
 * validly signed older block, its bytes and the checkpoint it had then, for a
 * URL that now has a newer version. Real `vouch serve` gateways (two chains
 * signed by the same authority key under the same origin: a fork), real
 * `vouch get` processes, and small node:http servers in this file playing
 * the hostile gateways (replaying, tampering, cosigning as a witness).
 *
 * When the gateway does not serve transparency proofs itself (its side of
 * issue 17 not merged), each gateway is fronted by `proofFront`, a small
 * server producing the contract's formats (Vouch-Proof header, proof=1,
 * /checkpoint, /v1/proof/*) with chain/merkle-tree.ts and
 * chain/tlog-checkpoint.ts over the gateway's own blocks; `MODE` says which.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { base64Encode, hexDecode, type Signer } from '../../chain/index.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { buildCheckpoint, buildRevokeBlock, type Block } from '../../chain/index.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { noteSigner } from '../../platform/note-signer.ts';
import { cosign, formatNote, parseNote, verifierKey, SIG_COSIGNATURE_V1, SIG_ED25519 } from '../../chain/note.ts';
import { nodeBackend, nodeSigner, rawPublicKey } from '../../platform/node-crypto.ts';
import { createKeyFile, readKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouchAsync, type Run } from '../helpers/processes.ts';
import { repoRoot } from '../helpers/vectors.ts';
import { loadState, saveCheckpoint } from '../../tools/client/checkpoint-state.ts';

const LOG = 'log.vouch.test';
const sourcesHold = (dir: string, text: string) =>
  readdirSync(join(repoRoot, dir), { recursive: true }).some(
    (f) => String(f).endsWith('.ts') && readFileSync(join(repoRoot, dir, String(f)), 'utf8').includes(text),
  );
/**
 * Does the gateway serve the transparency routes itself, over a chain whose
 * appends commit a signed checkpoint.note? (VOUCH_TEST_GET_FRONT=1 forces the front.)
 */
const MODE: 'gateway' | 'front' =
  process.env.VOUCH_TEST_GET_FRONT !== '1' &&
  sourcesHold('gateway', '/v1/proof/consistency') &&
  (sourcesHold('store', 'signCheckpoint(') || sourcesHold('platform', 'signCheckpoint('))
    ? 'gateway'
    : 'front';

const work = mkdtempSync(join(tmpdir(), 'vouch-get-tlog-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'test-token-' + 'y'.repeat(32);
const agent = new Agent({ keepAliveTimeout: 1000 });
const enc = encodeURIComponent;
let pub = '';
let signer: Signer;
let origin: OriginServer;
const closers: (() => Promise<unknown>)[] = [];

const V1 = 'console.log("widget 1.0.0");\n';
const V2 = 'console.log("widget 2.0.0: fixes CVE-0000-0001");\n';
let U = '';

interface Front {
  url: string;
  gw: GatewayProcess;
}
let A: Front; // the honest gateway of the real log
let B: Front; // a gateway of a forked log: same key, same origin, other blocks

// ---------------------------------------------------------------- small servers

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>): Promise<string> {
  const srv = createServer((req, res) => {
    handler(req, res).catch((e) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(String(e));
    });
  });
  await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
  closers.push(
    () =>
      new Promise((ok) => {
        srv.closeAllConnections();
        srv.close(ok);
      }),
  );
  return `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
}

/** JSON with every non-ASCII character escaped (header-safe), as the contract asks of Vouch-Proof. */
const asciiJson = (v: unknown) => JSON.stringify(v).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

async function fetchRaw(url: string) {
  const r = await request(url, { dispatcher: agent });
  const body = Buffer.from(await r.body.arrayBuffer());
  return { status: r.statusCode, headers: r.headers as Record<string, string>, body };
}

/**
 * Fallback for a gateway without transparency routes: the contract's formats
 * produced with chain/ code over the gateway's blocks (read through
 * /v1/block), the checkpoint signed with the authority key under LOG.
 */
async function proofFront(gwUrl: string): Promise<string> {
  const view = async () => {
    const tree = new MerkleTree(nodeBackend);
    for (let i = 0; ; i++) {
      const r = await fetchRaw(`${gwUrl}/v1/block?index=${i}`);
      if (r.status === 404) break;
      tree.append(hexDecode(JSON.parse(r.body.toString()).record_hash)!);
    }
    const note = signCheckpoint(nodeBackend, { origin: LOG, size: tree.size, root: tree.root(), extensions: [] }, signer);
    return { tree, note };
  };
  const proofOf = (v: { tree: MerkleTree; note: string }, index: number) => ({
    index,
    size: v.tree.size,
    proof: v.tree.inclusionProof(index, v.tree.size).map(base64Encode),
    checkpoint: v.note,
  });
  return listen(async (req, res) => {
    const u = new URL(req.url!, 'http://x');
    const json = (status: number, o: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(o));
    };
    if (u.pathname === '/checkpoint') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end((await view()).note);
      return;
    }
    if (u.pathname === '/v1/proof/consistency' || u.pathname === '/v1/proof/inclusion') {
      const v = await view();
      const n = (k: string) => (/^\d+$/.test(u.searchParams.get(k) ?? '') ? Number(u.searchParams.get(k)) : NaN);
      if (u.pathname.endsWith('consistency')) {
        const [from, to] = [n('from'), n('to')];
        if (!(from <= to)) return json(400, { success: false, status: 'bad_request' });
        if (to > v.tree.size) return json(404, { success: false, status: 'not_found' });
        return json(200, { success: true, from, to, proof: v.tree.consistencyProof(from, to).map(base64Encode) });
      }
      const index = n('index');
      const size = u.searchParams.has('size') ? n('size') : v.tree.size;
      if (!(index < size) || size > v.tree.size) return json(404, { success: false, status: 'not_found' });
      return json(200, {
        success: true,
        index,
        size,
        leaf_hash: base64Encode(v.tree.leafHashAt(index)),
        proof: v.tree.inclusionProof(index, size).map(base64Encode),
      });
    }
    const v = await view();
    const r = await fetchRaw(gwUrl + req.url);
    const headers: Record<string, string> = {};
    for (const k of ['content-type', 'uns', 'etag']) if (r.headers[k] !== undefined) headers[k] = r.headers[k]!;
    if (r.status === 200 && u.pathname === '/v1/download') {
      headers['vouch-proof'] = asciiJson(proofOf(v, JSON.parse(headers.uns!)['vouch-test'].endorsement.index));
    }
    let body: Buffer = r.body;
    if (r.status === 200 && u.pathname === '/v1/endorsement' && u.searchParams.get('proof') === '1') {
      const o = JSON.parse(body.toString());
      body = Buffer.from(JSON.stringify({ ...o, proof: proofOf(v, o.index) }));
    }
    res.writeHead(r.status, headers);
    res.end(body);
  });
}

async function startFront(name: string): Promise<Front> {
  const dir = join(work, name);
  const gw = await startGatewayProcess([
    '--config',
    writeConfig(dir, {
      listen: { host: '127.0.0.1', port: 0 },
      service_name: 'vouch-test',
      chain: { dir: join(dir, 'chain'), ...(MODE === 'gateway' ? { origin: LOG } : {}) },
      authority: { key_file: keyFile, signer: 'test-authority', submit_token_file: tokenFile },
      origin: { allow_private: true, timeout: 5 },
    }),
  ]);
  closers.push(() => gw.stop());
  return { gw, url: MODE === 'gateway' ? gw.url : await proofFront(gw.url) };
}

async function endorse(front: Front, bytes: string, semver: string, path = '/widget.js') {
  origin.route(path, { body: bytes, contentType: 'text/javascript' });
  return (await submitEntry(front.gw.url, token, { url: origin.url(path), name: 'acme/widget', semver, license: 'MIT' })).index;
}

/** A hostile gateway: replays saved answers by path, and 404 for the rest (it cannot prove anything newer). */
async function replayer(saved: Map<string, { status: number; headers: Record<string, string>; body: Buffer }>): Promise<string> {
  return listen(async (req, res) => {
    const path = new URL(req.url!, 'http://x').pathname;
    const s = saved.get(path);
    if (!s) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"success":false,"status":"not_found"}');
      return;
    }
    res.writeHead(s.status, s.headers);
    res.end(s.body);
  });
}

/** Saves what `base` answers now for a download and a proof=1 lookup of `q`. */
async function snapshot(base: string, q = `url=${enc(U)}`) {
  const saved = new Map<string, { status: number; headers: Record<string, string>; body: Buffer }>();
  const d = await fetchRaw(`${base}/v1/download?${q}`);
  assert.is(d.status, 200);
  assert.ok(d.headers['vouch-proof'], 'the download carries no Vouch-Proof');
  saved.set('/v1/download', {
    status: 200,
    headers: { uns: d.headers.uns!, 'vouch-proof': d.headers['vouch-proof']!, 'content-type': d.headers['content-type']! },
    body: d.body,
  });
  const l = await fetchRaw(`${base}/v1/endorsement?${q}&proof=1`);
  assert.is(l.status, 200);
  saved.set('/v1/endorsement', { status: 200, headers: { 'content-type': 'application/json' }, body: l.body });
  return saved;
}

/** A gateway that forwards to `base` and rewrites the Vouch-Proof header (and the lookup's proof member). */
async function rewriter(base: string, edit: (proof: string) => string | undefined): Promise<string> {
  return listen(async (req, res) => {
    const u = new URL(req.url!, 'http://x');
    const r = await fetchRaw(base + req.url);
    const headers: Record<string, string> = {};
    for (const k of ['content-type', 'uns', 'vouch-index-proof']) if (r.headers[k] !== undefined) headers[k] = r.headers[k]!;
    let body = r.body;
    if (r.status === 200 && u.pathname === '/v1/download') {
      const p = edit(r.headers['vouch-proof']!);
      if (p !== undefined) headers['vouch-proof'] = p;
    }
    if (r.status === 200 && u.pathname === '/v1/endorsement' && u.searchParams.get('proof') === '1') {
      const o = JSON.parse(body.toString());
      const p = edit(asciiJson(o.proof));
      body = Buffer.from(JSON.stringify({ ...o, proof: p === undefined ? undefined : JSON.parse(p) }));
    }
    res.writeHead(r.status, headers);
    res.end(body);
  });
}

// ---------------------------------------------------------------- runs

let run = 0;
const out = () => join(work, `out-${++run}.js`);
const get = (gateways: string[], state: string, o: string, extra: string[] = []): Promise<Run> =>
  vouchAsync(['get', ...gateways.flatMap((g) => ['--gateway', g]), '--url', U, '--public-key', pub, '-o', o, '--state', state, ...extra]);
const stateOf = (p: string) => JSON.parse(readFileSync(p, 'utf8')).logs[LOG] as { size: number; root: string; note: string };
let v2State = ''; // a state file that saw the checkpoint with v2
let v1Replay: Map<string, { status: number; headers: Record<string, string>; body: Buffer }>;
let sizeV1 = 0;
let sizeV2 = 0;

test.before(async () => {
  try {
    await before();
  } catch (e) {
    console.error(e);
    throw e;
  } // uvu does not print a failing hook's error
});

async function before() {
  const k = createKeyFile(keyFile);
  pub = k.publicKeyB64;
  signer = nodeSigner('test-authority', readKeyFile(keyFile));
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  U = origin.url('/widget.js');
  [A, B] = await Promise.all([startFront('a'), startFront('b')]);
  // The real log: v1, saved by the hostile gateway while it is the newest; then v2.
  await endorse(A, V1, '1.0.0');
  v1Replay = await snapshot(A.url);
  sizeV1 = JSON.parse(v1Replay.get('/v1/download')!.headers['vouch-proof']!).size;
  await endorse(A, V2, '2.0.0');
  // The fork: B signs other blocks with the same key, as many as A has.
  await endorse(B, V1, '1.0.0', '/other-a.js');
  await endorse(B, V2, '2.0.0');
  origin.route('/widget.js', { body: V2, contentType: 'text/javascript' });
  v2State = join(work, 'state-v2.json');
  const r = await get([A.url], v2State, out());
  assert.is(r.status, 0, r.stderr);
  sizeV2 = stateOf(v2State).size;
  console.log(
    `  (${MODE === 'gateway' ? 'gateways serve the proofs themselves' : `proofs from the test front over real gateways${process.env.VOUCH_TEST_GET_FRONT === '1' ? ' (VOUCH_TEST_GET_FRONT=1)' : ": the gateway's transparency routes or the store's checkpoint.note are not there"}`}; sizes v1 ${sizeV1}, v2 ${sizeV2})`,
  );
}

test.after(async () => {
  for (const c of closers.reverse()) await c().catch(() => {});
  await origin?.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

test('the honest path: exit 0, v2 written, the state records the checkpoint atomically with mode 0600', async () => {
  const state = join(work, 'fresh', 'nested', 'checkpoints.json');
  const o = out();
  const r = await get([A.url], state, o, ['--json']);
  assert.is(r.status, 0, r.stderr);
  assert.is(readFileSync(o, 'utf8'), V2);
  const j = JSON.parse(r.stdout);
  assert.is(j.ok, true);
  assert.is(j.semver, '2.0.0');
  assert.is(j.origin, LOG);
  assert.is(j.size, sizeV2);
  const s = stateOf(state);
  assert.is(s.size, sizeV2);
  assert.is(s.root, j.root);
  // the body: origin, size, root, and the completeness index line (docs/spec/index.md 5)
  assert.ok(
    new RegExp(
      `^${LOG.replace(/\./g, '\\.')}\n${sizeV2}\n${j.root.replace(/[+/]/g, (c: string) => '\\' + c)}\nvouch-index/v1 [A-Za-z0-9+/]{43}=\n\n\u2014 ${LOG} `,
    ).test(s.note),
    s.note,
  );
  assert.is(statSync(state).mode & 0o777, 0o600);
  assert.equal(readdirSync(join(work, 'fresh', 'nested')), ['checkpoints.json'], 'a temp file was left');
  // Again with the state: consistent (same checkpoint), exit 0, state the same.
  const again = await get([A.url], state, out(), ['--origin', LOG]);
  assert.is(again.status, 0, again.stderr);
  assert.is(stateOf(state).size, sizeV2);
  // The default state path honours XDG_STATE_HOME.
  const xdg = join(work, 'xdg');
  const d = await vouchAsync(['get', '--gateway', A.url, '--url', U, '--public-key', pub, '-o', out()], { XDG_STATE_HOME: xdg });
  assert.is(d.status, 0, d.stderr);
  assert.is(JSON.parse(readFileSync(join(xdg, 'vouch', 'checkpoints.json'), 'utf8')).logs[LOG].size, sizeV2);
});

test('a state file that does not parse, or whose note the pinned key did not sign, is never taken for an empty one', async () => {
  const broken = join(work, 'state-broken.json');
  writeFileSync(broken, '{"version":1,"logs":{"x":');
  const o = out();
  let r = await get([A.url], broken, o);
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr, /^vouch get: state file .*state-broken\.json is unusable \(not JSON\)/);
  assert.not.ok(existsSync(o));
  assert.is(readFileSync(broken, 'utf8'), '{"version":1,"logs":{"x":');
  // The remembered note edited (a smaller size, to let a replay through): its signature no longer verifies.
  const edited = join(work, 'state-edited.json');
  const j = JSON.parse(readFileSync(v2State, 'utf8'));
  j.logs[LOG].note = j.logs[LOG].note.replace(`\n${sizeV2}\n`, `\n${sizeV1}\n`);
  j.logs[LOG].size = sizeV1;
  writeFileSync(edited, JSON.stringify(j));
  r = await get([A.url], edited, o);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^bad_state: the state file's checkpoint for log\.vouch\.test does not verify with --public-key/);
  assert.not.ok(existsSync(o));
});

test("the state file: other origins kept, an origin's size never lowered by a later (concurrent) write", () => {
  const p = join(work, 'state-unit', 'checkpoints.json');
  const root = base64Encode(new Uint8Array(32));
  saveCheckpoint(p, 'a.log', { size: 5, root, note: 'a5' });
  saveCheckpoint(p, 'b.log', { size: 2, root, note: 'b2' });
  saveCheckpoint(p, 'a.log', { size: 3, root, note: 'a3' }); // a run that read the state before size 5 was written
  const st = loadState(p);
  assert.equal([...st.keys()].sort(), ['a.log', 'b.log']);
  assert.is(st.get('a.log')!.note, 'a5');
  saveCheckpoint(p, 'a.log', { size: 6, root, note: 'a6' });
  assert.is(loadState(p).get('a.log')!.size, 6);
  assert.is(statSync(p).mode & 0o777, 0o600);
  assert.is(statSync(join(work, 'state-unit')).mode & 0o777, 0o700);
  assert.is(loadState(join(work, 'state-unit', 'none.json')).size, 0);
});

test('the attack: a gateway replaying the saved v1 answer is refused by a client that saw v2, and nothing is written', async () => {
  const hostile = await replayer(v1Replay);
  const state = join(work, 'state-replay.json');
  writeFileSync(state, readFileSync(v2State));
  const before = readFileSync(state);
  const o = out();
  const r = await get([hostile], state, o);
  assert.is(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    new RegExp(
      `^stale_checkpoint: ${hostile.replace(/[.]/g, '\\.')} answered with a checkpoint of size ${sizeV1}, older than the size ${sizeV2} already seen for ${LOG.replace(/[.]/g, '\\.')}`,
    ),
  );
  assert.is(r.stderr.trim().split('\n').length, 1, 'more than one line');
  assert.not.ok(existsSync(o), 'the replayed bytes were written');
  assert.equal(readFileSync(state), before, 'the state changed');
  assert.equal(
    readdirSync(work).filter((f) => f.includes('.tmp')),
    [],
  );
});

test('--policy: a file that cannot be read, or does not parse, is one line naming it (exit 2), before any gateway is asked', async () => {
  const o = out();
  const absent = join(work, 'absent-policy.txt');
  let r = await get([A.url], join(work, 'state-badpolicy.json'), o, ['--policy', absent]);
  assert.is(r.status, 2, r.stderr);
  assert.is(r.stderr.trim(), `vouch get: --policy ${absent}: cannot read it (ENOENT)`);
  const bad = join(work, 'bad-policy.txt');
  writeFileSync(bad, 'log  not-a-key\nquorum none\n');
  r = await get([A.url], join(work, 'state-badpolicy.json'), o, ['--policy', bad]);
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr.trim(), new RegExp(`^vouch get: --policy ${bad.replace(/[.]/g, '\\.')}: policy line 1: `));
  assert.is(r.stderr.trim().split('\n').length, 1, 'more than one line');
  assert.not.ok(existsSync(o));
  assert.not.ok(existsSync(join(work, 'state-badpolicy.json')), 'a state file was written');
});

test('several gateways: a stale one cannot make the client take v1; one proving v1 in the current tree is named as disagreeing', async () => {
  const stale = await replayer(v1Replay);
  // Stale gateway + honest one, fresh client: the newest checkpoint decides, v1 is explained by the blocks after it.
  let o = out();
  let r = await get([stale, A.url], join(work, 'state-multi-1.json'), o);
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /acme\/widget 2\.0\.0.*\(2 gateways agree\)/);
  assert.is(readFileSync(o, 'utf8'), V2);
  // Every gateway asked is behind what this client saw: the newest of them is stale, refused.
  const stale2 = await replayer(v1Replay);
  const seen = join(work, 'state-multi-stale.json');
  writeFileSync(seen, readFileSync(v2State));
  o = out();
  r = await get([stale, stale2], seen, o);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, new RegExp(`^stale_checkpoint: .* answered with a checkpoint of size ${sizeV1}, older than the size ${sizeV2}`));
  assert.not.ok(existsSync(o));
  assert.equal(readFileSync(seen), readFileSync(v2State));
  // A smarter liar: the current checkpoint, and a valid inclusion proof of the v1 block in it.
  const v1Block = JSON.parse(v1Replay.get('/v1/endorsement')!.body.toString());
  const current = await fetchRaw(`${A.url}/v1/endorsement?url=${enc(U)}&proof=1`);
  const cur = JSON.parse(current.body.toString()).proof;
  const incl = JSON.parse((await fetchRaw(`${A.url}/v1/proof/inclusion?index=${v1Block.index}&size=${cur.size}`)).body.toString());
  const lie = { index: v1Block.index, size: cur.size, proof: incl.proof, checkpoint: cur.checkpoint };
  const dl = v1Replay.get('/v1/download')!;
  const liar = await replayer(
    new Map<string, { status: number; headers: Record<string, string>; body: Buffer }>([
      ['/v1/endorsement', { status: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from(JSON.stringify({ ...v1Block, proof: lie })) }],
      ['/v1/download', { ...dl, headers: { ...dl.headers, 'vouch-proof': asciiJson(lie) } }],
    ]),
  );
  const state = join(work, 'state-multi-2.json');
  o = out();
  r = await get([liar, A.url], state, o);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^gateways_disagree: the gateways disagree on the same tree: /);
  for (const [gw, index] of [
    [liar, v1Block.index],
    [A.url, sizeV2 - 1],
  ] as const)
    assert.ok(r.stderr.includes(`${gw} selects block ${index} (checkpoint size ${cur.size})`), r.stderr);
  assert.not.ok(existsSync(o));
  assert.not.ok(existsSync(state), 'a refused run wrote the state');
  // Alone, the same liar passed every proof before the completeness index (issue 37); now its checkpoint commits
  // an index and its replayed download carries no index proof of the current state: refused (test/hostile/index-hostile.test.ts
  // has the liar that sends the current index proof too: "older block").
  r = await get([liar], join(work, 'state-liar-alone.json'), o);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^no_proof: .*Vouch-Index-Proof/m);
  assert.not.ok(existsSync(o));
});

test('a forked log (same key, same origin, other blocks) is a SECURITY ERROR with both notes; the state is unchanged', async () => {
  const state = join(work, 'state-fork.json');
  writeFileSync(state, readFileSync(v2State));
  const before = readFileSync(state);
  const fork = await fetchRaw(`${B.url}/checkpoint`);
  const forkNote = fork.body.toString();
  assert.ok(forkNote.startsWith(`${LOG}\n${sizeV2}\n`), 'the fork should have the same size as the real log');
  const o = out();
  let r = await get([B.url], state, o);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^SECURITY ERROR\n/);
  for (const line of (stateOf(v2State).note + forkNote).split('\n').filter(Boolean)) assert.ok(r.stderr.includes(`\t${line}\n`), `the evidence lacks ${line}`);
  assert.match(r.stderr, new RegExp(`what failed: two signed checkpoints of size ${sizeV2} with different roots`));
  assert.match(r.stderr, /what it means: .*fork/);
  assert.match(r.stderr, /what to do: .*state file .* is unchanged/);
  assert.match(r.stderr, /\nsecurity_error: the log log\.vouch\.test is inconsistent/);
  assert.not.ok(existsSync(o));
  assert.equal(readFileSync(state), before);
  // The fork grows by one block: a newer checkpoint that does not extend the one seen.
  await endorse(B, 'console.log("fork 3");\n', '3.0.0', '/other-b.js');
  origin.route('/widget.js', { body: V2, contentType: 'text/javascript' });
  r = await get([B.url], state, o);
  assert.is(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    new RegExp(
      `^SECURITY ERROR\\n[^]*consistency proof ${sizeV2} -> ${sizeV2 + 1} \\(from ${B.url.replace(/[.]/g, '\\.')}, \\d+ hashes\\):\\n\\t[A-Za-z0-9+/]{43}=[^]*what failed: the consistency proof from size ${sizeV2} to ${sizeV2 + 1} does not verify`,
    ),
  );
  assert.equal(readFileSync(state), before);
  // Two gateways, the real log and the fork: inconsistent with each other, whatever the client saw.
  r = await get([A.url, B.url], join(work, 'state-fork-2.json'), o);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^SECURITY ERROR\n/);
  assert.not.ok(existsSync(o));
});

test('a missing, unparseable or tampered proof or note is refused with one line', async () => {
  const cases: [string, (p: string) => string | undefined, RegExp][] = [
    ['no header', () => undefined, /^no_proof: .* sent no Vouch-Proof header/],
    ['not JSON', () => '{"index":', /^bad_proof: .*the proof is not JSON/],
    [
      'a proof hash flipped',
      (p) => {
        const o = JSON.parse(p);
        const h = Buffer.from(o.proof[0], 'base64');
        h[0]! ^= 1;
        o.proof[0] = h.toString('base64');
        return asciiJson(o);
      },
      /^bad_proof: .*the inclusion proof of block \d+ .* does not verify/,
    ],
    ['a proof hash dropped', (p) => asciiJson({ ...JSON.parse(p), proof: JSON.parse(p).proof.slice(1) }), /^bad_proof: .*does not verify/],
    ['another index', (p) => asciiJson({ ...JSON.parse(p), index: 1 }), /^bad_proof: .*the proof is for index 1/],
    [
      "the note's size edited",
      (p) => {
        const o = JSON.parse(p);
        o.checkpoint = o.checkpoint.replace(`\n${o.size}\n`, `\n${o.size + 1}\n`);
        o.size += 1;
        return asciiJson(o);
      },
      /^bad_checkpoint: .*signature .* does not verify/,
    ],
    [
      'the note unsigned',
      (p) => {
        const o = JSON.parse(p);
        o.checkpoint = o.checkpoint.split('\n\n')[0] + '\n\n';
        return asciiJson(o);
      },
      /^bad_checkpoint: /,
    ],
    [
      'another origin',
      (p) => {
        const o = JSON.parse(p);
        o.checkpoint = o.checkpoint.replaceAll(LOG, 'evil.example');
        return asciiJson(o);
      },
      /^bad_checkpoint: /,
    ],
  ];
  for (const [what, edit, expect] of cases) {
    const gw = await rewriter(A.url, edit);
    const state = join(work, `state-tamper-${run}.json`);
    const o = out();
    const r = await get([gw], state, o);
    assert.is(r.status, 1, `${what}: ${r.stderr}`);
    assert.match(r.stderr, expect, what);
    assert.is(r.stderr.trim().split('\n').length, 1, `${what}: more than one line`);
    assert.not.ok(existsSync(o), what);
    assert.not.ok(existsSync(state), what);
  }
  // The note verifier key works as --public-key and pins the origin.
  const vkey = verifierKey(nodeBackend, LOG, SIG_ED25519, Buffer.from(pub, 'base64'));
  let v = await vouchAsync(['get', '--gateway', A.url, '--url', U, '--public-key', vkey, '-o', out(), '--state', join(work, 'state-vkey.json')]);
  assert.is(v.status, 0, v.stderr);
  v = await vouchAsync([
    'get',
    '--gateway',
    A.url,
    '--url',
    U,
    '--public-key',
    verifierKey(nodeBackend, 'other.log', SIG_ED25519, Buffer.from(pub, 'base64')),
    '-o',
    out(),
    '--state',
    join(work, 'state-vkey.json'),
  ]);
  assert.is(v.status, 1, v.stderr);
  assert.match(v.stderr, /^bad_checkpoint: .*is not the expected "other\.log"/);
  // --origin pins the log's name.
  const r = await get([A.url], join(work, 'state-origin.json'), out(), ['--origin', 'other.log']);
  assert.is(r.status, 1);
  assert.match(r.stderr, /^bad_checkpoint: .*origin "log\.vouch\.test" is not the expected "other\.log"/);
});

test('--policy: the witness quorum is required, and the policy must name the pinned key as its log', async () => {
  const w1 = createKeyFile(join(work, 'w1.pem'));
  const w2 = createKeyFile(join(work, 'w2.pem'));
  const wk = (k: { publicKeyB64: string }) => Buffer.from(k.publicKeyB64, 'base64');
  const w1Signer = nodeSigner('w1', readKeyFile(join(work, 'w1.pem')));
  const logVkey = verifierKey(nodeBackend, LOG, SIG_ED25519, Buffer.from(pub, 'base64'));
  const policy = join(work, 'policy.txt');
  writeFileSync(
    policy,
    [
      `log ${logVkey}`,
      `witness w1 ${verifierKey(nodeBackend, 'w1.witness.test', SIG_COSIGNATURE_V1, wk(w1))}`,
      `witness w2 ${verifierKey(nodeBackend, 'w2.witness.test', SIG_COSIGNATURE_V1, wk(w2))}`,
      'group any-one any w1 w2',
      'quorum any-one',
      '',
    ].join('\n'),
  );
  // A gateway serving the checkpoint with w1's cosignature added.
  const cosigned = await rewriter(A.url, (p) => {
    const o = JSON.parse(p);
    const n = parseNote(o.checkpoint);
    o.checkpoint = formatNote({ text: n.text, signatures: [...n.signatures, cosign(nodeBackend, n.text, 'w1.witness.test', w1Signer, 1_790_000_000)] });
    return asciiJson(o);
  });
  let o = out();
  let r = await get([A.url], join(work, 'state-policy-1.json'), o, ['--policy', policy]);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^quorum: .*lacks the witness quorum: quorum any-one needs 1 of 2 \(w1, w2\); witnessed: none; missing cosignatures: w1, w2/);
  assert.not.ok(existsSync(o));
  const state = join(work, 'state-policy-2.json');
  r = await get([cosigned], state, o, ['--policy', policy]);
  assert.is(r.status, 0, r.stderr);
  assert.is(readFileSync(o, 'utf8'), V2);
  assert.ok(stateOf(state).note.includes('\u2014 w1.witness.test '), 'the state keeps the cosigned note');
  // A policy for another log key.
  const other = createKeyFile(join(work, 'other.pem'));
  writeFileSync(policy, readFileSync(policy, 'utf8').replace(logVkey, verifierKey(nodeBackend, LOG, SIG_ED25519, rawPublicKey(other.privateKey))));
  o = out();
  r = await get([cosigned], join(work, 'state-policy-3.json'), o, ['--policy', policy]);
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^policy: the policy has no "log" line for log\.vouch\.test\+[0-9a-f]{8}/);
  assert.not.ok(existsSync(o));
});

test('several gateways: a revocation beyond the stale tree explains its newer selection; a newest gateway that does not show it is a disagreement', async () => {
  // A gateway of its own (the others keep their blocks): gadget 1.0.0, then 2.0.0, which a stale gateway keeps showing.
  const C = await startFront('c');
  const path = '/gadget.js';
  const G1 = 'console.log("gadget 1.0.0");\n';
  const G2 = 'console.log("gadget 2.0.0, withdrawn");\n';
  const i1 = await endorse(C, G1, '1.0.0', path);
  const i2 = await endorse(C, G2, '2.0.0', path);
  const U2 = origin.url(path);
  const stale = await replayer(await snapshot(C.url, `url=${enc(U2)}`));
  // The operator revokes 2.0.0 (appended offline, as revocations are) and restarts the gateway.
  await C.gw.stop();
  const repo = await ChainRepo.open(join(work, 'c', 'chain'));
  const head = JSON.parse(repo.readBlockFile(repo.size - 1)) as Block;
  const revoke = buildRevokeBlock({ prev: head, target: JSON.parse(repo.readBlockFile(i2)) as Block, signer, backend: nodeBackend, now: Date.now() });
  const tree = new MerkleTree(nodeBackend);
  for (let i = 0; i < repo.size; i++) tree.append(hexDecode((JSON.parse(repo.readBlockFile(i)) as Block).record_hash)!);
  tree.append(hexDecode(revoke.record_hash)!);
  await appendSigned(repo, [revoke], buildCheckpoint({ head: revoke, signer, now: Date.now() }), Date.now(), {
    signer: noteSigner(signer),
    origin: LOG,
    root: tree.root(),
  });
  const C2 = await startFront('c');
  origin.route(path, { body: G1, contentType: 'text/javascript' });
  const getU2 = (gateways: string[], state: string, o: string) =>
    vouchAsync(['get', ...gateways.flatMap((g) => ['--gateway', g]), '--url', U2, '--public-key', pub, '-o', o, '--state', state]);

  let o = out();
  let r = await getU2([stale, C2.url], join(work, 'state-revoked-1.json'), o);
  assert.is(r.status, 0, r.stderr);
  assert.is(readFileSync(o, 'utf8'), G1, 'the version in force, from the newest tree');
  assert.match(r.stdout, new RegExp(`, acme/widget 1\\.0\\.0, block ${i1} [0-9a-f]{64}, .*\\(2 gateways agree\\)`));
  assert.is(stateOf(join(work, 'state-revoked-1.json')).size, revoke.index + 1);

  // The same newest gateway, fronted by one that drops revoked_by from /v1/block: nothing explains the stale selection.
  const hiding = await listen(async (req, res) => {
    const u = new URL(req.url!, 'http://x');
    const f = await fetchRaw(C2.url + req.url);
    const headers: Record<string, string> = {};
    for (const k of ['content-type', 'uns', 'vouch-proof', 'etag']) if (f.headers[k] !== undefined) headers[k] = f.headers[k]!;
    let body = f.body;
    if (u.pathname === '/v1/block' && f.status === 200) {
      const { revoked_by: _gone, ...rest } = JSON.parse(body.toString());
      body = Buffer.from(JSON.stringify(rest));
    }
    res.writeHead(f.status, headers);
    res.end(body);
  });
  o = out();
  r = await getU2([stale, hiding], join(work, 'state-revoked-2.json'), o);
  assert.is(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    new RegExp(
      `^gateways_disagree: the gateways disagree: .* selects block ${i2} .*cannot explain: ${hiding.replace(/[.]/g, '\\.')} shows no revocation of block ${i2}$`,
      'm',
    ),
  );
  assert.not.ok(existsSync(o), 'bytes written');
  assert.not.ok(existsSync(join(work, 'state-revoked-2.json')), 'a state file was written');
});

test.run();
