/**
 * platform/node-crypto.ts asks libsodium first and OpenSSL for what libsodium
 * refuses: `nodeBackend.verify` must accept exactly what OpenSSL (node:crypto)
 * accepts, on the ed25519 edge cases that split libraries
 * (test/ed25519-speccheck), on the chain vectors, and on signatures,
 * messages and keys mutated at random; and libsodium must be the engine in
 * use here (a missing prebuilt binary would otherwise pass silently, at half
 * the speed).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ed25519Engine, libsodiumVerify, nodeBackend, opensslVerify, privateKeyFromSeed, nodeSigner } from '../../platform/node-crypto.ts';
import { base64Decode, payloadMessage, type Block } from '../../chain/index.ts';
import { buildLongChain } from '../helpers/chain-fixture.ts';

const hex = (s: string) => new Uint8Array(Buffer.from(s, 'hex'));
const casesText = readFileSync(fileURLToPath(new URL('../ed25519-speccheck/cases.json', import.meta.url)));
const cases = JSON.parse(casesText.toString('utf8')) as { message: string; pub_key: string; signature: string }[];
const chainVectors = JSON.parse(readFileSync(fileURLToPath(new URL('../vectors/chain-v1.json', import.meta.url)), 'utf8')) as { valid: { blocks: Block[] } };

/** The three answers for one input; the backend must equal OpenSSL, and libsodium's acceptance must imply OpenSSL's. */
function answers(pk: Uint8Array, m: Uint8Array, sig: Uint8Array): { backend: boolean; openssl: boolean; sodium: boolean | null } {
  const r = { backend: nodeBackend.verify(pk, m, sig), openssl: opensslVerify(pk, m, sig), sodium: libsodiumVerify(pk, m, sig) };
  assert.is(r.backend, r.openssl, `backend vs OpenSSL on pk ${Buffer.from(pk).toString('hex')} sig ${Buffer.from(sig).toString('hex')}`);
  if (r.sodium === true) assert.ok(r.openssl, 'libsodium accepted what OpenSSL refuses');
  return r;
}

test('libsodium is the engine asked first here; VOUCH_ED25519=openssl leaves OpenSSL alone', () => {
  assert.is(ed25519Engine(), 'libsodium');
  const code = "import('./platform/node-crypto.ts').then((m) => process.stdout.write(m.ed25519Engine()))";
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const off = spawnSync(process.execPath, ['--import', 'tsx', '-e', code], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, VOUCH_ED25519: 'openssl' },
    timeout: 60_000,
  });
  assert.is(off.stdout, 'openssl', off.stderr);
});

test('ed25519-speccheck: the backend answers as OpenSSL on every case; libsodium refuses four that OpenSSL accepts', () => {
  // The copy is the upstream file byte for byte (test/ed25519-speccheck/README.md).
  assert.is(createHash('sha256').update(casesText).digest('hex'), '392f79f2507f167b4ea262c416faad082555c2937215c90a5b8658b68d053240');
  assert.is(cases.length, 15);
  const got = cases.map((c) => answers(hex(c.pub_key), hex(c.message), hex(c.signature)));
  // OpenSSL 3.0 accepts cases 1, 3, 5, 6 and 14 (small-order R or A, mixed-order A); libsodium only 6 (the speccheck table).
  assert.equal(
    got.flatMap((r, i) => (r.openssl ? [i] : [])),
    [1, 3, 5, 6, 14],
  );
  assert.equal(
    got.flatMap((r, i) => (r.sodium ? [i] : [])),
    [6],
  );
  // So cases 1, 3, 5 and 14 are answered by the fallback: the backend says true where libsodium said false.
  for (const i of [1, 3, 5, 14]) assert.ok(got[i]!.backend && got[i]!.sodium === false, `case ${i}`);
});

test('the chain vectors: every signature of the valid chain verifies, and by libsodium', () => {
  const blocks = chainVectors.valid.blocks;
  const pk = base64Decode(blocks[0]!.payload.authority!.public_key)!;
  for (const b of blocks) {
    const r = answers(pk, payloadMessage(b.payload), base64Decode(b.signature)!);
    assert.ok(r.backend && r.sodium === true, `block ${b.index}`);
  }
});

// The eight small-order points' encodings (the identity, order 2, order 4 and order 8), and the identity again non-canonically (y = p + 1).
const SMALL_ORDER = [
  '0100000000000000000000000000000000000000000000000000000000000000',
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  '0000000000000000000000000000000000000000000000000000000000000000',
  '0000000000000000000000000000000000000000000000000000000000000080',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85',
  'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
].map(hex);
const L = (1n << 252n) + 27742317777372353535851937790883648493n;

function scalarBytes(n: bigint): Uint8Array {
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = Number((n >> BigInt(8 * i)) & 0xffn);
  return out;
}
function bytesScalar(b: Uint8Array): bigint {
  let n = 0n;
  for (let i = 31; i >= 0; i--) n = (n << 8n) | BigInt(b[i]!);
  return n;
}

test('crafted edge cases: small-order R and A, s + L, zero signatures: the backend answers as OpenSSL', () => {
  const signer = nodeSigner('t', privateKeyFromSeed(new Uint8Array(32).fill(9)));
  const m = new TextEncoder().encode('vouch edge cases');
  const good = signer.sign(m);
  assert.ok(answers(signer.publicKey, m, good).sodium, 'the honest signature');
  const withS = (s: bigint) => {
    const x = good.slice();
    x.set(scalarBytes(s), 32);
    return x;
  };
  const s = bytesScalar(good.subarray(32));
  const noncanonical = answers(signer.publicKey, m, withS(s + L)); // the same signature with s + L (< 2^256)
  assert.is(noncanonical.openssl, false);
  for (const p of SMALL_ORDER) {
    const r = good.slice();
    r.set(p, 0);
    answers(signer.publicKey, m, r); // R replaced
    answers(p, m, good); // A replaced
    const zeroS = new Uint8Array(64);
    zeroS.set(p, 0);
    answers(p, m, zeroS); // R small order, s = 0: valid for lax verifiers under a small-order A
  }
  answers(signer.publicKey, m, new Uint8Array(64));
  answers(new Uint8Array(32), new Uint8Array(0), new Uint8Array(64));
});

test('2,000 random mutations of valid signatures, messages and keys: the backend answers as OpenSSL', () => {
  const { blocks, signer } = buildLongChain(21);
  let seed = 0x9e3779b9;
  const rand = (n: number) => {
    seed = (Math.imul(seed ^ (seed >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0;
    return seed % n;
  };
  let accepted = 0;
  for (let k = 0; k < 2_000; k++) {
    const b = blocks[1 + (k % 20)]!;
    const m = payloadMessage(b.payload).slice();
    const sig = base64Decode(b.signature)!.slice();
    const pk = signer.publicKey.slice();
    const what = k % 4;
    if (what === 0) sig[rand(64)]! ^= 1 << rand(8);
    else if (what === 1) m[rand(m.length)]! ^= 1 << rand(8);
    else if (what === 2) pk[rand(32)]! ^= 1 << rand(8);
    else sig[31 + rand(2)]! ^= 0x80; // the top bits of R's sign and s's most significant byte
    if (answers(pk, m, sig).backend) accepted++;
  }
  // A flipped bit makes an honest signature invalid except by chance; none of 2,000 passes.
  assert.is(accepted, 0);
});

test.run();
