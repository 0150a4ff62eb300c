/**
 * The transparency routes over HTTP (issue 17), on real gateway processes:
 * `/checkpoint`, tiles and entry bundles, JSON inclusion and consistency
 * proofs, `proof=1` on lookups and `verifier_key` on `/v1/authority`, checked
 * with chain/merkle.ts's verifiers against a Merkle tree recomputed here from
 * the chain's blocks, and by Go's golang.org/x/mod/sumdb/{note,tlog}
 * (test/go-interop/checknote.go); error statuses; a warm restart (from the
 * tree image, and from a damaged one) serving the same root.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Decode, base64Encode, hexDecode } from '../../chain/index.ts';
import { leafHash, rootOfEntries, verifyConsistency, verifyInclusion } from '../../chain/merkle.ts';
import { MerkleTree, entryBundle } from '../../chain/merkle-tree.ts';
import { signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { SIG_ED25519, verifierKey } from '../../chain/note.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { buildLongChain, initChainRepo } from '../helpers/chain-fixture.ts';
import { buildCheckNote } from '../helpers/go-checknote.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const c = nodeBackend;
const N = 700; // two full level-0 tiles and a partial one; two level-8 hashes
const ORIGIN = 'vouch.example/transparency-test';
const work = mkdtempSync(join(tmpdir(), 'vouch-tlog-http-'));
const dir = join(work, 'chain');
const fixture = buildLongChain(N);
const entries = fixture.blocks.map((b) => hexDecode(b.record_hash)!);
const tree = new MerkleTree(c);
for (const e of entries) tree.append(e);
const note = signCheckpoint(c, { origin: ORIGIN, size: N, root: tree.root(N), extensions: [] }, fixture.signer);
let config = '';
let gw: GatewayProcess;

test.before(async () => {
  await initChainRepo(dir, fixture.blocks, fixture.checkpoint);
  writeFileSync(join(dir, 'checkpoint.note'), note);
  config = writeConfig(work, { listen: { port: 0 }, chain: { dir, public_key: base64Encode(fixture.signer.publicKey) } });
  gw = await startGatewayProcess(['--config', config]);
});
test.after(async () => {
  await gw?.stop();
  rmSync(work, { recursive: true, force: true });
});

const get = (path: string, init?: RequestInit) => fetch(`${gw.url}${path}`, init);
const bytes = async (r: Response) => new Uint8Array(await r.arrayBuffer());
const b64 = (s: string) => base64Decode(s)!;

test('GET /checkpoint serves the committed note as text; /v1/authority its verifier key', async () => {
  const r = await get('/checkpoint');
  assert.is(r.status, 200);
  assert.is(r.headers.get('content-type'), 'text/plain; charset=utf-8');
  assert.is(await r.text(), note);
  const head = await get('/checkpoint', { method: 'HEAD' });
  assert.is(head.status, 200);
  assert.is(head.headers.get('content-length'), String(Buffer.byteLength(note)));
  const a = await (await get('/v1/authority')).json();
  assert.is(a.verifier_key, verifierKey(c, ORIGIN, SIG_ED25519, fixture.signer.publicKey));
  assert.is(a.index, 0);
});

test("inclusion proofs of every block verify against the note's root; leaf_hash is the record hash's", async () => {
  const root = rootOfEntries(c, entries);
  for (let i = 0; i < N; i++) {
    const r = await (await get(`/v1/proof/inclusion?index=${i}`)).json();
    assert.is(r.success, true);
    assert.is(r.size, N);
    assert.equal(b64(r.leaf_hash), leafHash(c, entries[i]!));
    assert.ok(verifyInclusion(c, i, N, b64(r.leaf_hash), r.proof.map(b64), root), `block ${i}`);
  }
  // Against an older size too, and a flipped proof byte fails.
  const r = await (await get('/v1/proof/inclusion?index=100&size=300')).json();
  assert.is(r.size, 300);
  const proof = r.proof.map(b64);
  assert.ok(verifyInclusion(c, 100, 300, leafHash(c, entries[100]!), proof, tree.root(300)));
  proof[0][3] ^= 1;
  assert.not.ok(verifyInclusion(c, 100, 300, leafHash(c, entries[100]!), proof, tree.root(300)));
});

test('consistency proofs between sizes verify against recomputed roots', async () => {
  for (const [from, to] of [
    [1, N],
    [255, 256],
    [256, 700],
    [300, 513],
    [699, 700],
    [700, 700],
  ] as const) {
    const r = await (await get(`/v1/proof/consistency?from=${from}&to=${to}`)).json();
    assert.is(r.success, true);
    assert.is(r.from, from);
    assert.is(r.to, to);
    const old = rootOfEntries(c, entries.slice(0, from));
    assert.ok(verifyConsistency(c, from, to, old, rootOfEntries(c, entries.slice(0, to)), r.proof.map(b64)), `${from}..${to}`);
  }
  assert.equal((await (await get('/v1/proof/consistency?from=0&to=10')).json()).proof, []);
  const d = await (await get('/v1/proof/consistency?from=42')).json();
  assert.is(d.to, N);
});

test("tiles equal the recomputed tree's, bundles hold the record hashes; caching by fullness", async () => {
  const full = await get('/tile/0/000');
  assert.is(full.status, 200);
  assert.is(full.headers.get('content-type'), 'application/octet-stream');
  assert.is(full.headers.get('cache-control'), 'public, max-age=31536000, immutable');
  const t0 = await bytes(full);
  assert.is(t0.length, 256 * 32);
  for (let i = 0; i < 256; i++) assert.equal(t0.subarray(i * 32, i * 32 + 32), leafHash(c, entries[i]!));
  assert.equal(await bytes(await get('/tile/0/001')), tree.tile(0, 1, 256));
  const part = await get('/tile/0/002.p/188');
  assert.is(part.status, 200);
  // tlog-tiles: a tile of a given width never changes, so a partial tile is as immutable as a full one.
  assert.is(part.headers.get('cache-control'), 'public, max-age=31536000, immutable');
  const partBundle = await get('/tile/entries/002.p/188');
  assert.is(partBundle.headers.get('cache-control'), 'public, max-age=31536000, immutable');
  assert.equal(await bytes(part), tree.tile(0, 2, 188));
  assert.equal(await bytes(await get('/tile/0/002.p/5')), tree.tile(0, 2, 5));
  // Level 1 is tree level 8: floor(700 / 256) = 2 hashes, each the root of 256 leaves.
  const l1 = await bytes(await get('/tile/1/000.p/2'));
  assert.equal(l1.subarray(0, 32), rootOfEntries(c, entries.slice(0, 256)));
  assert.equal(l1.subarray(32, 64), rootOfEntries(c, entries.slice(256, 512)));
  assert.equal(await bytes(await get('/tile/entries/000')), entryBundle(entries.slice(0, 256)));
  assert.equal(await bytes(await get('/tile/entries/002.p/188')), entryBundle(entries.slice(512, 700)));
  const head = await get('/tile/entries/001', { method: 'HEAD' });
  assert.is(head.status, 200);
  assert.is(head.headers.get('content-length'), String(256 * 34));
});

test('tiles beyond the tree are 404, bad tile paths 400, both empty', async () => {
  for (const p of [
    '/tile/0/003',
    '/tile/0/002',
    '/tile/0/002.p/189',
    '/tile/1/000',
    '/tile/1/000.p/3',
    '/tile/2/000.p/1',
    '/tile/entries/002',
    '/tile/entries/x001/000',
  ]) {
    const r = await get(p);
    assert.is(r.status, 404, p);
    assert.is((await r.arrayBuffer()).byteLength, 0, p);
  }
  for (const p of ['/tile/0/1', '/tile/x/000', '/tile/0/000.p/256', '/tile/0/000.p/0', '/tile/entries/', '/tile/0/x000/001', '/tile/0/000.p']) {
    const r = await get(p);
    assert.is(r.status, 400, p);
    assert.is((await r.arrayBuffer()).byteLength, 0, p);
  }
  assert.is((await get('/tile/0/000', { method: 'POST' })).status, 405);
});

test('proof errors: 400 for malformed or out-of-order parameters, 404 beyond the tree; JSON bodies', async () => {
  const cases: [string, number][] = [
    ['/v1/proof/inclusion', 400],
    ['/v1/proof/inclusion?index=abc', 400],
    ['/v1/proof/inclusion?index=-1', 400],
    ['/v1/proof/inclusion?index=01', 400],
    ['/v1/proof/inclusion?index=1&index=2', 400],
    ['/v1/proof/inclusion?index=5&size=5', 400],
    ['/v1/proof/inclusion?index=700', 404],
    ['/v1/proof/inclusion?index=1&size=701', 404],
    ['/v1/proof/consistency', 400],
    ['/v1/proof/consistency?from=10&to=5', 400],
    ['/v1/proof/consistency?from=1.5', 400],
    ['/v1/proof/consistency?from=1&to=701', 404],
    ['/v1/proof/consistency?from=701', 404],
  ];
  for (const [p, status] of cases) {
    const r = await get(p);
    assert.is(r.status, status, p);
    const body = await r.json();
    assert.is(body.success, false, p);
    assert.is(body.status, status === 400 ? 'bad_request' : 'not_found', p);
  }
});

test('proof=1 on a lookup carries the inclusion proof and the served note', async () => {
  const i = 123;
  const url = encodeURIComponent(`https://a.example/pkg/${i % 997}/artifact-${i}.tgz`);
  const plain = await (await get(`/v1/endorsement?url=${url}`)).json();
  assert.is(plain.proof, undefined);
  const r = await (await get(`/v1/endorsement?url=${url}&proof=1`)).json();
  assert.is(r.index, i);
  assert.is(r.proof.index, i);
  assert.is(r.proof.size, N);
  assert.is(r.proof.checkpoint, note);
  assert.ok(verifyInclusion(c, i, N, leafHash(c, entries[i]!), r.proof.proof.map(b64), tree.root(N)));
  const again = await (await get(`/v1/object?url=${url}&proof=1`)).json();
  assert.equal(again.proof, r.proof);
  // Answers come from the lookup cache after the first time: with or without the proof, wherever proof=1 is.
  for (const q of [`url=${url}`, `url=${url}&proof=1`, `proof=1&url=${url}`, `url=${url}&proof=0`]) {
    for (let k = 0; k < 2; k++) {
      const res = await get(`/v1/endorsement?${q}`);
      const body = await res.json();
      assert.is(body.index, i, q);
      const wants = q.includes('proof=1');
      assert.equal(body.proof, wants ? r.proof : undefined, q);
      // With the proof, the tag names the exact note served (size, and its text's sha256: cosignatures change it).
      const noteTag = createHash('sha256').update(note).digest('hex').slice(0, 16);
      assert.is(res.headers.get('etag'), wants ? `"${fixture.blocks[i]!.record_hash}-${N}-${noteTag}"` : `"${fixture.blocks[i]!.record_hash}"`, q);
    }
  }
  assert.is((await get(`/v1/endorsement?url=${url}&proof=yes`)).status, 400);
});

test("Go's sumdb/note and sumdb/tlog accept the served note and every proof fetched over HTTP, and refuse a flipped byte", async () => {
  const checkNote = buildCheckNote(work);
  const served = await (await get('/checkpoint')).text();
  const vkey = (await (await get('/v1/authority')).json()).verifier_key;
  const root = base64Encode(tree.root(N));
  const inclusion = [];
  for (let i = 0; i < N; i++) {
    const p = await (await get(`/v1/proof/inclusion?index=${i}`)).json();
    inclusion.push({ index: i, size: p.size, leaf_entry_b64: base64Encode(entries[i]!), proof: p.proof, root_b64: root });
  }
  const consistency = [];
  for (const from of [1, 2, 255, 256, 257, 300, 511, 512, 699]) {
    const p = await (await get(`/v1/proof/consistency?from=${from}`)).json();
    consistency.push({ from, to: p.to, old_root: base64Encode(tree.root(from)), new_root: root, proof: p.proof });
  }
  const run = (input: unknown) => checkNote(input, 60_000);
  const input = { vkey, note: served, inclusion, consistency };
  const ok = run(input);
  assert.is(ok.status, 0, ok.stdout + ok.stderr);
  assert.is(ok.stdout.split('\n').filter((l) => l.startsWith('ok ')).length, 1 + N + consistency.length);
  const flip = (h: string) => {
    const raw = b64(h);
    raw[7] = raw[7]! ^ 0x40;
    return base64Encode(raw);
  };
  const badNote = served.replace(`\n${N}\n`, `\n${N - 1}\n`);
  assert.is(run({ ...input, note: badNote }).status, 1, 'a note with another size');
  const badInclusion = structuredClone(inclusion);
  badInclusion[321]!.proof[2] = flip(badInclusion[321]!.proof[2]!);
  assert.is(run({ ...input, inclusion: badInclusion }).status, 1, 'an inclusion proof with a flipped byte');
  const badConsistency = structuredClone(consistency);
  badConsistency[5]!.proof[0] = flip(badConsistency[5]!.proof[0]!);
  assert.is(run({ ...input, consistency: badConsistency }).status, 1, 'a consistency proof with a flipped byte');
});

test('warm restart serves the same root from the tree image; a damaged image is rebuilt from the index', async () => {
  await gw.stop();
  const treeImage = join(dir, '.git', 'vouch-tree.bin');
  assert.ok(existsSync(treeImage));
  const snap = JSON.parse(readFileSync(join(dir, '.git', 'vouch-snapshot.json'), 'utf8'));
  assert.is(snap.tree.size, N);
  gw = await startGatewayProcess(['--config', config]);
  assert.match(gw.stdout(), /warm start/);
  assert.is(await (await get('/checkpoint')).text(), note);
  const p = await (await get('/v1/proof/inclusion?index=650')).json();
  assert.ok(verifyInclusion(c, 650, N, leafHash(c, entries[650]!), p.proof.map(b64), tree.root(N)));
  await gw.stop();
  // Flip the image's top hash (the tree of the first 512 entries) and fix up the snapshot's sha256:
  // the note's root no longer matches, so the tree is rebuilt from the index.
  const image = readFileSync(treeImage);
  image[image.length - 1] = image[image.length - 1]! ^ 0xff;
  writeFileSync(treeImage, image);
  snap.tree.sha256 = (await import('node:crypto')).createHash('sha256').update(image).digest('hex');
  writeFileSync(join(dir, '.git', 'vouch-snapshot.json'), JSON.stringify(snap));
  gw = await startGatewayProcess(['--config', config]);
  assert.match(gw.stdout(), /warm start/);
  assert.equal(await bytes(await get('/tile/1/000.p/2')), tree.tile(1, 0, 2));
  const q = await (await get('/v1/proof/inclusion?index=5')).json();
  assert.ok(verifyInclusion(c, 5, N, leafHash(c, entries[5]!), q.proof.map(b64), tree.root(N)));
});

test("a note whose root is not the chain's is refused at start (checkpoint_mismatch)", async () => {
  await gw.stop();
  const bad = signCheckpoint(c, { origin: ORIGIN, size: N, root: tree.root(N - 1), extensions: [] }, fixture.signer);
  writeFileSync(join(dir, 'checkpoint.note'), bad);
  let failed = '';
  try {
    gw = await startGatewayProcess(['--config', config]);
  } catch (e) {
    failed = (e as Error).message;
  }
  assert.match(failed, /checkpoint_mismatch/);
  writeFileSync(join(dir, 'checkpoint.note'), note);
  gw = await startGatewayProcess(['--config', config]);
});

test.run();
