/**
 * Response heads stay small whatever the block (issue 31 item 5): a real
 * read-only gateway over a chain with one block of 1,000 endorsements and
 * one of a single endorsement. Every verified answer's head (counted in raw
 * bytes off the socket) fits 8 KiB; the big block's UNS is the compact form,
 * the small one's the whole block (the seed's form); the real `vouch get`
 * verifies the compact form (fetching the block) and refuses a compact UNS
 * that names another block or another entry. Units: Vouch-Proof stays
 * bounded with 64 witness cosignatures on a large tree, and the lockfile
 * packer keeps every block's UNS within its bound.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Encode, hexDecode, utf8, type Block } from '../../chain/index.ts';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint, buildEndorseBlock, type EndorsementInput } from '../../chain/build.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { openCheckpoint, signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { cosign, parseNote, verifierKey, SIG_COSIGNATURE_V1, SIG_ED25519 } from '../../chain/note.ts';
import { checkQuorum, parsePolicy } from '../../chain/tlog-policy.ts';
import { UNS_COMPACT_MAX, UNS_FULL_MAX, asciiJson, compactUns, fullUns, parseUns } from '../../chain/uns-header.ts';
import fc from 'fast-check';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { generateKeyPairSync } from 'node:crypto';
import { boundedProofJson, PROOF_HEADER_MAX, unsHeader } from '../../gateway/routes/download.ts';
import type { GatewayContext } from '../../gateway/context.ts';
import { packBlocks, unsBytes } from '../../tools/lockfiles/blocks.ts';
import { T0, initChainRepo, testSigner } from '../helpers/chain-fixture.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouchAsync } from '../helpers/processes.ts';
import { rawHead } from '../helpers/raw-http.ts';

const c = nodeBackend;
const BUDGET = 8 * 1024;
const ORIGIN = 'vouch.example/header-test';
const work = mkdtempSync(join(tmpdir(), 'vouch-headers-'));
const dir = join(work, 'chain');
const signer = testSigner();
const pub = base64Encode(signer.publicKey);
let origin: OriginServer;
let gw: GatewayProcess;
let blocks: Block[] = [];

const body = (i: number) => `artifact bytes ${i}\n`;
const url = (i: number) => origin.url(`/pkg/p-${i}.tgz`);
const entry = (i: number): EndorsementInput => ({
  url: url(i),
  artifactHash: artifactHashOf(c, 'sha256', utf8(body(i))),
  name: `acme/p${i}`,
  semver: '1.0.0',
  license: 'MIT',
  comment: `package ${i}, an entry about as long as a lockfile's`,
});

test.before(async () => {
  origin = await OriginServer.start();
  blocks = [buildAuthorityBlock({ signer, backend: c, now: T0, uns: 'acme/chain' })];
  blocks.push(
    buildEndorseBlock({
      prev: blocks[0]!,
      signer,
      backend: c,
      now: T0 + 1000,
      entries: Array.from({ length: 1000 }, (_, i) => entry(i)),
      uns: 'acme/big',
      semver: '1.0.0',
    }),
  );
  blocks.push(buildEndorseBlock({ prev: blocks[1]!, signer, backend: c, now: T0 + 2000, entries: [entry(5000)] }));
  blocks.push(buildEndorseBlock({ prev: blocks[2]!, signer, backend: c, now: T0 + 2500, entries: Array.from({ length: 9 }, (_, k) => entry(6000 + k)) }));
  for (const i of [0, 500, 999, 5000, 6000]) origin.route(`/pkg/p-${i}.tgz`, { body: body(i), contentType: 'application/gzip' });
  // An origin whose kept headers are long (each under the 1 KiB a kept header may have).
  const long = (ch: string) => ch.repeat(1000);
  origin.route('/pkg/p-6001.tgz', {
    body: body(6001),
    contentType: 'application/gzip',
    headers: {
      'content-disposition': `attachment; filename="${long('d')}"`,
      'cache-control': `max-age=60, ${long('c')}`,
      'content-language': long('l'),
      'last-modified': long('m'),
    },
  });
  const tree = new MerkleTree(c);
  for (const b of blocks) tree.append(hexDecode(b.record_hash)!);
  await initChainRepo(dir, blocks, buildCheckpoint({ head: blocks[3]!, signer, now: T0 + 3000 }));
  writeFileSync(join(dir, 'checkpoint.note'), signCheckpoint(c, { origin: ORIGIN, size: blocks.length, root: tree.root(), extensions: [] }, signer));
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { host: '127.0.0.1', port: 0 },
      service_name: 'vouch-test',
      chain: { dir, public_key: pub },
      origin: { allow_private: true, timeout: 5 },
      proxy: { routes: [{ prefix: '/p/', origin: origin.url('/pkg/'), unendorsed: 'deny' }] },
    }),
  ]);
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

test("a block of 1,000 endorsements: every verified answer's head fits 8 KiB, with the compact UNS", async () => {
  const big = blocks[1]!;
  for (const i of [0, 500, 999]) {
    const path = `/v1/download?url=${encodeURIComponent(url(i))}`;
    const r = await rawHead(gw.url, path);
    assert.is(r.status, 200);
    assert.ok(r.bytes < BUDGET, `head of ${r.bytes} bytes`);
    const uns = parseUns(r.headers.get('uns')!);
    assert.ok(typeof uns !== 'string' && uns.form === 'compact', 'the compact form');
    if (typeof uns === 'string' || uns.form !== 'compact') return;
    assert.equal([uns.index, uns.recordHash, uns.url], [1, big.record_hash, `${gw.url}/v1/block?index=1`]);
    assert.equal(uns.entry, big.payload.endorsements[i], 'the entry served, as signed');
    assert.ok(r.headers.get('vouch-proof'), 'Vouch-Proof kept');
    const head = await rawHead(gw.url, path, {}, 'HEAD');
    assert.ok(head.bytes < BUDGET && head.status === 200, `HEAD: ${head.bytes} bytes`);
    const cached = await rawHead(gw.url, path, { 'if-none-match': r.headers.get('etag')! });
    assert.ok(cached.bytes < BUDGET && cached.status === 304, `304: ${cached.bytes} bytes`);
  }
  console.log(`header-budget: a 1,000-entry block's download head ${(await rawHead(gw.url, `/v1/download?url=${encodeURIComponent(url(500))}`)).bytes} bytes`);
  const proxied = await rawHead(gw.url, '/p/p-500.tgz');
  assert.is(proxied.status, 200);
  assert.ok(proxied.bytes < BUDGET, `proxy route: head of ${proxied.bytes} bytes`);
  // A client with node's default header limit (16 KiB) reads it: on the code before, HPE_HEADER_OVERFLOW.
  const r = await fetch(`${gw.url}/v1/download?url=${encodeURIComponent(url(500))}`);
  assert.is(await r.text(), body(500));
});

test("a small block still travels whole in UNS (the seed's form)", async () => {
  const r = await rawHead(gw.url, `/v1/download?url=${encodeURIComponent(url(5000))}`);
  assert.is(r.status, 200);
  assert.equal(JSON.parse(r.headers.get('uns')!), { 'vouch-test': { endorsement: blocks[2] } });
  assert.ok(r.bytes < BUDGET);
});

test('a block that fits whole, behind an origin with long kept headers: the compact form keeps the head within 8 KiB', async () => {
  const whole = await rawHead(gw.url, `/v1/download?url=${encodeURIComponent(url(6000))}`);
  assert.equal(JSON.parse(whole.headers.get('uns')!), { 'vouch-test': { endorsement: blocks[3] } }, 'whole where it fits');
  const r = await rawHead(gw.url, '/p/p-6001.tgz');
  assert.is(r.status, 200);
  assert.ok(r.bytes < BUDGET, `head of ${r.bytes} bytes`);
  const uns = parseUns(r.headers.get('uns')!);
  assert.ok(
    typeof uns !== 'string' && uns.form === 'compact' && uns.index === 3,
    `compact (head ${r.bytes} bytes, UNS ${r.headers.get('uns')!.length}, ${[...r.headers.keys()].join(' ')})`,
  );
  assert.ok((r.headers.get('content-disposition') ?? '').length > 1000, "the origin's headers kept while they fit");
});

test('vouch get verifies the compact form, fetching the block', async () => {
  const out = join(work, 'p-500.tgz');
  const r = await vouchAsync(['get', '--gateway', gw.url, '--url', url(500), '--public-key', pub, '-o', out, '--state', join(work, 'state.json')]);
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /^ok: .* acme\/p500 1\.0\.0, block 1 /);
  assert.is(readFileSync(out, 'utf8'), body(500));
});

test('vouch get refuses a compact UNS naming another block or another entry', async () => {
  const big = blocks[1]!;
  for (const [what, edit] of [
    [
      'another record_hash',
      (o: any) => {
        o['vouch-test'].block.record_hash = blocks[2]!.record_hash;
      },
    ],
    [
      'another block',
      (o: any) => {
        o['vouch-test'].block.index = 2;
      },
    ],
    [
      'another entry',
      (o: any) => {
        o['vouch-test'].entry = big.payload.endorsements[501];
      },
    ],
  ] as const) {
    // A front that passes everything through and rewrites the download's UNS.
    const srv = createServer(async (req, res) => {
      const up = await fetch(gw.url + req.url!, { headers: { accept: String(req.headers.accept ?? '*/*') } });
      const headers: Record<string, string> = {};
      up.headers.forEach((v, k) => {
        if (!['content-encoding', 'transfer-encoding', 'connection', 'keep-alive'].includes(k)) headers[k] = v;
      });
      if (headers.uns) {
        const o = JSON.parse(headers.uns);
        edit(o);
        headers.uns = JSON.stringify(o);
      }
      const b = Buffer.from(await up.arrayBuffer());
      headers['content-length'] = String(b.length);
      res.writeHead(up.status, headers);
      res.end(b);
    });
    await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
    const front = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
    const out = join(work, 'refused.tgz');
    const r = await vouchAsync(['get', '--gateway', front, '--url', url(500), '--public-key', pub, '-o', out, '--state', join(work, 'state-refused.json')]);
    srv.closeAllConnections();
    await new Promise((ok) => srv.close(ok));
    assert.is(r.status, 1, `${what}: ${r.stderr}`);
    assert.match(r.stderr, /bad_answer|bad_proof/, what);
    assert.not.ok(r.stderr.includes('internal error'), what);
  }
});

test("vouch get --policy: a Vouch-Proof that left cosignatures out is completed from the lookup's proof=1", async () => {
  const ws = [0, 1].map((i) => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const w = nodeSigner(`witness-${i}.example.org`, privateKey);
    return { w, vkey: verifierKey(c, w.id, SIG_COSIGNATURE_V1, w.publicKey) };
  });
  const policyFile = join(work, 'policy.txt');
  writeFileSync(
    policyFile,
    [
      `log ${verifierKey(c, ORIGIN, SIG_ED25519, signer.publicKey)}`,
      ...ws.map((x, i) => `witness w${i} ${x.vkey}`),
      'group both all w0 w1',
      'quorum both',
      '',
    ].join('\n'),
  );
  const cosigned = (note: string) => note + ws.map((x) => cosign(c, note.slice(0, note.indexOf('\n\n') + 1), x.w.id, x.w, 1_800_000_000).line + '\n').join('');
  for (const lookupCarries of [true, false]) {
    // A front: downloads say two cosignatures were left out; lookups with proof=1 carry them (or not).
    const srv = createServer(async (req, res) => {
      const up = await fetch(gw.url + req.url!, { headers: { accept: String(req.headers.accept ?? '*/*') } });
      const headers: Record<string, string> = {};
      up.headers.forEach((v, k) => {
        if (!['content-encoding', 'transfer-encoding', 'connection', 'keep-alive', 'content-length'].includes(k)) headers[k] = v;
      });
      let b = Buffer.from(await up.arrayBuffer());
      if (headers['vouch-proof']) headers['vouch-proof'] = asciiJson({ ...JSON.parse(headers['vouch-proof']), omitted_cosignatures: 2 });
      if (lookupCarries && req.url!.startsWith('/v1/endorsement') && req.url!.includes('proof=1')) {
        const o = JSON.parse(b.toString());
        o.proof.checkpoint = cosigned(o.proof.checkpoint);
        b = Buffer.from(JSON.stringify(o));
      }
      res.writeHead(up.status, { ...headers, 'content-length': String(b.length) });
      res.end(b);
    });
    await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
    const front = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
    const r = await vouchAsync([
      'get',
      '--gateway',
      front,
      '--url',
      url(500),
      '--public-key',
      pub,
      '-o',
      join(work, 'policy.tgz'),
      '--state',
      join(work, `state-policy-${lookupCarries}.json`),
      '--policy',
      policyFile,
    ]);
    srv.closeAllConnections();
    await new Promise((ok) => srv.close(ok));
    if (lookupCarries) assert.is(r.status, 0, r.stderr);
    else {
      assert.is(r.status, 1, r.stderr);
      assert.match(r.stderr, /quorum|bad_proof/);
    }
  }
});

test('Vouch-Proof stays bounded on a large tree with 64 witness cosignatures, and what it keeps still verifies', () => {
  const body = `${ORIGIN}\n1099511627776\n${base64Encode(new Uint8Array(32).fill(7))}\n`;
  const committed = signCheckpoint(c, { origin: ORIGIN, size: 2 ** 40, root: new Uint8Array(32).fill(7), extensions: [] }, signer);
  const witnesses = Array.from({ length: 64 }, (_, i) => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const w = nodeSigner(`witness-${i}.example.org/a/rather/long/witness/name`, privateKey);
    return { name: w.id, signer: w, vkey: verifierKey(c, w.id, SIG_COSIGNATURE_V1, w.publicKey) };
  });
  const lines = witnesses.map((w) => cosign(c, body, w.name, w.signer, 1_800_000_000).line + '\n').join('');
  const served = committed + lines;
  const proof = Array.from({ length: 40 }, (_, i) => base64Encode(new Uint8Array(32).fill(i)));
  const p = { index: 123_456_789, size: 2 ** 40, proof, checkpoint: served };
  const text = boundedProofJson(p, committed);
  assert.ok(text.length <= PROOF_HEADER_MAX, `${text.length} bytes`);
  assert.ok(/^[\x20-\x7e]+$/.test(text), 'pure ASCII');
  const o = JSON.parse(text);
  assert.ok(o.omitted_cosignatures > 0 && o.omitted_cosignatures < 64, `${o.omitted_cosignatures} left out`);
  const kept = 64 - o.omitted_cosignatures;
  // What is kept is a valid note: the authority's signature opens it, and the kept cosignatures count.
  openCheckpoint(c, o.checkpoint, { publicKey: signer.publicKey, origin: ORIGIN });
  const policy = parsePolicy(
    c,
    [
      `log ${verifierKey(c, ORIGIN, SIG_ED25519, signer.publicKey)}`,
      ...witnesses.map((w, i) => `witness w${i} ${w.vkey}`),
      `group g ${kept} ${witnesses.map((_, i) => `w${i}`).join(' ')}`,
      'quorum g',
    ].join('\n') + '\n',
  );
  assert.ok(checkQuorum(c, policy, parseNote(o.checkpoint)).ok, 'the kept cosignatures make a quorum of their number');
  // Small enough: unchanged, no extra member.
  const small = { index: 1, size: 3, proof: proof.slice(0, 2), checkpoint: committed };
  assert.equal(Object.keys(JSON.parse(boundedProofJson(small, committed))), ['index', 'size', 'proof', 'checkpoint']);
});

test('UNS values are made once per block (and per block and URL), not per answer', () => {
  const ctx = { config: { service_name: 'vouch-test', public_url: 'http://gw.example' } } as unknown as GatewayContext;
  for (const [b, n] of [
    [blocks[2]!, 1],
    [blocks[1]!, 1000],
  ] as const) {
    let made = 0;
    // JSON.stringify asks toJSON of the block each time the header text is made.
    const counted = {
      ...b,
      toJSON() {
        made++;
        const { toJSON: _t, ...plain } = this as Record<string, unknown>;
        return plain;
      },
    } as unknown as Block;
    const sel = { block: counted, entry: b.payload.endorsements[n === 1 ? 0 : 500]!, revokedBy: null } as never;
    const first = unsHeader(ctx, sel);
    for (let i = 0; i < 100; i++) assert.is(unsHeader(ctx, sel), first);
    assert.ok(made <= 1, `the block was serialized ${made} times for 101 answers`);
    assert.is(first.length <= UNS_FULL_MAX, true);
  }
});

test('UNS forms: made and read back; any header text is read without a throw (a form or a reason)', () => {
  const big = blocks[1]!;
  const entry500 = big.payload.endorsements[500]!;
  const compact = parseUns(compactUns('svc', big, entry500, 'http://gw.example'));
  assert.equal(compact, { form: 'compact', index: 1, recordHash: big.record_hash, url: 'http://gw.example/v1/block?index=1', entry: entry500 });
  const bare = parseUns(compactUns('svc', big, { ...entry500, comment: 'c'.repeat(UNS_COMPACT_MAX) }, 'http://gw.example'));
  assert.ok(typeof bare !== 'string' && bare.form === 'compact' && bare.entry === null, 'an entry too long for the compact bound is left out');
  assert.is(fullUns('svc', big), null);
  assert.equal(parseUns(fullUns('svc', blocks[2]!)!), { form: 'full', block: JSON.parse(JSON.stringify(blocks[2])) });
  const header = fc.oneof(
    fc.string({ maxLength: 300 }),
    fc.json({ maxDepth: 4 }),
    fc
      .record({
        s: fc.record(
          {
            block: fc.record({ index: fc.oneof(fc.integer(), fc.double(), fc.string()), record_hash: fc.string(), url: fc.anything() }, { requiredKeys: [] }),
            entry: fc.anything(),
          },
          { requiredKeys: [] },
        ),
      })
      .map((o) => JSON.stringify(o)),
  );
  fc.assert(
    fc.property(header, (text) => {
      const r = parseUns(text);
      if (typeof r === 'string') return true;
      return r.form === 'full' || (Number.isSafeInteger(r.index) && r.index >= 0 && /^[0-9a-f]{64}$/.test(r.recordHash));
    }),
    { numRuns: 2000 },
  );
});

test("the lockfile packer keeps every block's UNS within UNS_FULL_MAX; an entry too large for it alone gets its own block", () => {
  const entries = Array.from({ length: 1000 }, (_, i) => entry(i));
  entries.splice(500, 0, { ...entry(7777), url: `https://example.org/${'x'.repeat(6000)}.tgz` });
  const built: Block[] = [];
  const out = packBlocks(entries, { maxEntries: 10_000, maxBytes: 16 * 1024 * 1024, maxUnsBytes: UNS_FULL_MAX }, (chunk, prev) => {
    const b = buildEndorseBlock({ prev: prev ?? blocks[0]!, signer, backend: c, now: T0 + 5000, entries: chunk });
    built.push(b);
    return b;
  });
  assert.is(
    out.reduce((n, b) => n + b.payload.endorsements.length, 0),
    1001,
  );
  for (const b of out) {
    if (b.payload.endorsements.length === 1 && b.payload.endorsements[0]!.artifact_url.length > 6000) continue;
    assert.ok(unsBytes(b) <= UNS_FULL_MAX, `block ${b.index}: ${unsBytes(b)} bytes`);
  }
  assert.ok(
    out.some((b) => b.payload.endorsements.length === 1 && b.payload.endorsements[0]!.artifact_url.length > 6000),
    'the long entry alone',
  );
  assert.ok(out.length < 200, `${out.length} blocks: packed, not one entry each`);
});

test.run();
