/**
 * `Vouch-Proof` on verified answers (issue 17), on a real read-only gateway
 * over a chain of 3,000 blocks whose artifacts a local origin serves: the
 * header on /v1/download (200, HEAD, 304) and on a proxy route, its proof
 * verifying against the signed checkpoint it carries, its size bounded; no
 * header for a block the served checkpoint does not cover yet.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Decode, base64Encode, hexDecode, utf8, type Block } from '../../chain/index.ts';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint, buildEndorseBlock } from '../../chain/build.ts';
import { leafHash, verifyInclusion } from '../../chain/merkle.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { openCheckpoint, signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { T0, initChainRepo, testSigner } from '../helpers/chain-fixture.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const c = nodeBackend;
const N = 3000;
/** The bound README states for the header at this size (12 hashes + a note of one signature). */
const HEADER_BOUND = 1024;
const ORIGIN = 'vouch.example/download-test';
const work = mkdtempSync(join(tmpdir(), 'vouch-tlog-dl-'));
const dir = join(work, 'chain');
const signer = testSigner();
let origin: OriginServer;
let gw: GatewayProcess;
let blocks: Block[] = [];
const tree = new MerkleTree(c);
let config = '';

const body = (i: number) => `artifact bytes ${i}`;
const noteOf = (size: number) => signCheckpoint(c, { origin: ORIGIN, size, root: tree.root(size), extensions: [] }, signer);

test.before(async () => {
  origin = await OriginServer.start();
  blocks = [buildAuthorityBlock({ signer, backend: c, now: T0, uns: 'acme/chain' })];
  for (let i = 1; i < N; i++) {
    blocks.push(
      buildEndorseBlock({
        prev: blocks[i - 1]!,
        signer,
        backend: c,
        now: T0 + i * 1000,
        entries: [
          { url: origin.url(`/pkg/a-${i}.tgz`), artifactHash: artifactHashOf(c, 'sha256', utf8(body(i))), name: `acme/a${i}`, semver: '1.0.0', license: 'MIT' },
        ],
      }),
    );
  }
  for (const b of blocks) tree.append(hexDecode(b.record_hash)!);
  for (const i of [5, 2995, N - 1]) origin.route(`/pkg/a-${i}.tgz`, { body: body(i), contentType: 'application/gzip' });
  await initChainRepo(dir, blocks, buildCheckpoint({ head: blocks[N - 1]!, signer, now: T0 + N * 1000 }));
  writeFileSync(join(dir, 'checkpoint.note'), noteOf(N));
  config = writeConfig(work, {
    listen: { host: '127.0.0.1', port: 0 },
    service_name: 'vouch-test',
    chain: { dir, public_key: base64Encode(signer.publicKey) },
    origin: { allow_private: true, timeout: 5 },
    proxy: { routes: [{ prefix: '/p/', origin: origin.url('/pkg/'), unendorsed: 'deny' }] },
  });
  gw = await startGatewayProcess(['--config', config]);
});
test.after(async () => {
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

/** Checks a `Vouch-Proof` value: block `index` in the signed checkpoint it carries. */
function checkProof(header: string | null, index: number, size: number): void {
  assert.ok(header !== null, `a Vouch-Proof for block ${index}`);
  assert.ok(/^[\x20-\x7e]+$/.test(header!), 'pure ASCII');
  assert.ok(header!.length <= HEADER_BOUND, `${header!.length} bytes`);
  const p = JSON.parse(header!);
  assert.equal(Object.keys(p), ['index', 'size', 'proof', 'checkpoint']);
  assert.is(p.index, index);
  assert.is(p.size, size);
  const { checkpoint } = openCheckpoint(c, p.checkpoint, { publicKey: signer.publicKey, origin: ORIGIN });
  assert.is(checkpoint.size, size);
  const proof = p.proof.map((h: string) => base64Decode(h)!);
  const leaf = leafHash(c, hexDecode(blocks[index]!.record_hash)!);
  assert.ok(verifyInclusion(c, index, size, leaf, proof, checkpoint.root));
  proof[proof.length - 1][0] ^= 1;
  assert.not.ok(verifyInclusion(c, index, size, leaf, proof, checkpoint.root));
}

test('downloads carry Vouch-Proof (200, HEAD, 304), bounded in size', async () => {
  for (const i of [5, N - 1]) {
    const url = encodeURIComponent(origin.url(`/pkg/a-${i}.tgz`));
    const r = await fetch(`${gw.url}/v1/download?url=${url}`);
    assert.is(r.status, 200);
    assert.is(await r.text(), body(i));
    checkProof(r.headers.get('vouch-proof'), i, N);
    const head = await fetch(`${gw.url}/v1/download?url=${url}`, { method: 'HEAD' });
    checkProof(head.headers.get('vouch-proof'), i, N);
    const again = await fetch(`${gw.url}/v1/download?url=${url}`, { headers: { 'if-none-match': r.headers.get('etag')! } });
    assert.is(again.status, 304);
    checkProof(again.headers.get('vouch-proof'), i, N);
  }
  // Failures carry none.
  const missing = await fetch(`${gw.url}/v1/download?url=${encodeURIComponent(origin.url('/pkg/none.tgz'))}`);
  assert.is(missing.status, 404);
  assert.is(missing.headers.get('vouch-proof'), null);
});

test("a proxy route's verified answer carries Vouch-Proof too", async () => {
  const r = await fetch(`${gw.url}/p/a-5.tgz`);
  assert.is(r.status, 200);
  assert.is(await r.text(), body(5));
  checkProof(r.headers.get('vouch-proof'), 5, N);
});

test('a block newer than the served checkpoint gets no proof rather than a wrong one', async () => {
  await gw.stop();
  writeFileSync(join(dir, 'checkpoint.note'), noteOf(2990));
  gw = await startGatewayProcess(['--config', config]);
  const newer = await fetch(`${gw.url}/v1/download?url=${encodeURIComponent(origin.url('/pkg/a-2995.tgz'))}`);
  assert.is(newer.status, 200);
  assert.is(newer.headers.get('vouch-proof'), null);
  const lookup = await (await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(origin.url('/pkg/a-2995.tgz'))}&proof=1`)).json();
  assert.is(lookup.index, 2995);
  assert.is(lookup.proof, undefined);
  const older = await fetch(`${gw.url}/v1/download?url=${encodeURIComponent(origin.url('/pkg/a-5.tgz'))}`);
  checkProof(older.headers.get('vouch-proof'), 5, 2990);
  console.log(`Vouch-Proof at ${N} blocks: ${older.headers.get('vouch-proof')!.length} bytes`);
});

test.run();
