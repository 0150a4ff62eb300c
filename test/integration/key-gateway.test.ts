/**
 * Key events on the running authority (issue 32 items 3-6, 8;
 * docs/spec/key-events.md), real gateway processes throughout, submits fetched
 * from real origins on 127.0.0.1: POST /v1/root adopting a 2-of-3 root with
 * the current key; a routine rotation whose new key is read from
 * authority.next_key_file (the next blocks, checkpoint.json and the note by
 * it; the rollover note carrying both keys, opening with either, in
 * chain/tlog-checkpoint.ts and in Go's sumdb/note); a rotation
 * whose key the authority does not hold (409 key_unavailable); every bad
 * statement refused with its status and JSON body and nothing appended; a
 * compromise voiding blocks the test appended as the attacker (404 on
 * lookups and downloads, dropped from the npm packument, the PyPI simple
 * page and Go's @v/list; /v1/block marks them void; the next note by the
 * new key alone); warm and cold restarts on the rotated and compromised
 * chain and on one built offline through every key event, signing with the
 * right key; refusals at start; a rollover kept across a restart, cosigned
 * by a witness that knows the old key only.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { KeyObject } from 'node:crypto';
import { checkpointMessage, payloadMessage } from '../../chain/build.ts';
import { base64Decode, base64Encode } from '../../chain/encoding.ts';
import {
  applyKeyEvent,
  compromiseStatement,
  keyStatement,
  rootStatement,
  statementMessage,
  type KeyState,
  type SignedStatement,
  type Statement,
} from '../../chain/key-events.ts';
import { parseNote, SIG_ED25519, verifierKey, verifyCosignature } from '../../chain/note.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { verifyChain } from '../../chain/verify.ts';
import { nodeBackend, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { createKeyFile } from '../../platform/key-file.ts';
import { blockPath, CHECKPOINT } from '../../chain/layout.ts';
import { escapeGo } from '../../gateway/ecosystems/goproxy.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { NpmRegistry } from '../helpers/npm-registry.ts';
import { buildDists, distFilename, PypiHost, sha256Hex } from '../helpers/pypi-fixture.ts';
import { modVersion, type ModVersion } from '../helpers/go-modules.ts';
import { initChainRepo, TEST_SEED } from '../helpers/chain-fixture.ts';
import { buildCheckNote } from '../helpers/go-checknote.ts';
import { b64, buildKeyLifeChain, HOLDERS, KeyChain, ONLINE, seededKey } from '../helpers/key-fixture.ts';
import { chainFile } from '../helpers/chain-files.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-key-gateway-'));
const chainDir = join(work, 'chain');
const keyFile = join(work, 'authority.pem');
const nextFile = `${keyFile}.next`;
const tokenFile = join(work, 'submit.token');
const token = 'key-gateway-token-' + 'k'.repeat(32);
const ORIGIN = 'vouch.test/keys';
const [H1, H2, H3, H4] = HOLDERS as [(typeof HOLDERS)[0], (typeof HOLDERS)[0], (typeof HOLDERS)[0], (typeof HOLDERS)[0]];
const PRIVATE: Record<'A' | 'B' | 'C' | 'D', KeyObject> = {
  A: privateKeyFromSeed(TEST_SEED),
  B: seededKey('online-b'),
  C: seededKey('online-c'),
  D: seededKey('online-d'),
};

let gw: GatewayProcess;
/** Every gateway started (a failed test may leave one running: `after` stops them all). */
const started: GatewayProcess[] = [];
async function start(args: string[]): Promise<GatewayProcess> {
  const p = await startGatewayProcess(args);
  started.push(p);
  return p;
}
let origin: OriginServer;
let reg: NpmRegistry;
let pypi: PypiHost;
/** The key state of the served chain, followed by the test as each 201 says. */
let ks: KeyState;
let n = 0;

function writeKey(path: string, which: keyof typeof PRIVATE): void {
  if (existsSync(path)) unlinkSync(path);
  writeFileSync(path, PRIVATE[which].export({ format: 'pem', type: 'pkcs8' }) as string, { mode: 0o600 });
  chmodSync(path, 0o600);
}

function config(more: Record<string, unknown> = {}, dir = work): string {
  return writeConfig(dir, {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: join(dir, 'chain'), origin: ORIGIN },
    authority: { key_file: join(dir, 'authority.pem'), signer: 'vouch-test', submit_token_file: tokenFile, ...more },
    origin: { allow_private: true, timeout: 5 },
    proxy: {
      routes: [
        { prefix: '/npm/', kind: 'npm', origin: `${reg.url}/`, canonical: `${reg.url}/`, metadata_ttl: 0 },
        { prefix: '/pypi/', kind: 'pypi', origin: `${pypi.origin}/`, unendorsed: 'deny', metadata_ttl: 0 },
        { prefix: '/go/', kind: 'goproxy', origin: `${origin.origin}/mod/`, canonical: `${origin.origin}/mod/`, unendorsed: 'deny', metadata_ttl: 0 },
      ],
    },
  });
}

const sign = (statement: Statement, holders: typeof HOLDERS): SignedStatement => {
  const message = statementMessage(statement);
  return { statement, signatures: holders.map((h) => ({ public_key: b64(h), signature: base64Encode(h.sign(message)) })) };
};
const online = (s: typeof ONLINE.A) => ({ signer: s.id, public_key: b64(s) });

async function post(path: string, body: unknown, type = 'application/json'): Promise<{ status: number; json: Record<string, any> }> {
  const r = await fetch(gw.url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': type },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: r.status, json: (await r.json()) as Record<string, any> };
}

/** POSTs a statement; on 201 the test's key state follows it. */
async function root(signed: SignedStatement | unknown): Promise<{ status: number; json: Record<string, any> }> {
  const r = await post('/v1/root', signed);
  if (r.status === 201) ks = applyKeyEvent(nodeBackend, ks, signed as SignedStatement, r.json.index);
  return r;
}

const getJson = async (path: string) => {
  const r = await fetch(gw.url + path);
  return { status: r.status, json: (await r.json()) as Record<string, any> };
};
const headSize = async () => (await getJson('/v1/checkpoint')).json.size as number;

/** The chain on disk verified from block 0 with chain/verify.ts (block 0's key pinned), and its blocks. */
async function verifiedOnDisk(dir = chainDir): Promise<{ blocks: Record<string, any>[]; keys: KeyState }> {
  // Read as the files are (the gateway holds the chain's lock: no ChainRepo here).
  const checkpoint = JSON.parse(readFileSync(join(dir, CHECKPOINT), 'utf8')) as { size: number };
  const blocks = Array.from({ length: checkpoint.size }, (_, i) => JSON.parse(chainFile(dir, blockPath(i))) as Record<string, any>);
  const r = verifyChain(blocks, { backend: nodeBackend, pinnedPublicKey: b64(ONLINE.A), checkpoint });
  assert.ok(r.ok, r.ok ? '' : `${r.code} at ${r.index}: ${r.message}`);
  return { blocks, keys: r.ok ? r.keys : ks };
}

const signedBy = (block: Record<string, any>, s: typeof ONLINE.A) =>
  nodeBackend.verify(s.publicKey, payloadMessage(block.payload), base64Decode(block.signature)!);

/** Submits a new artifact served by the origin; returns the 201 answer. */
async function submitNew(name = 'acme/keys'): Promise<{ index: number; record_hash: string; url: string }> {
  const i = ++n;
  const path = `/artifacts/key-${i}.tgz`;
  origin.route(path, { body: `artifact ${i} of the key events test` });
  const r = await submitEntry(gw.url, token, { url: origin.url(path), name, semver: `1.${i}.0`, license: 'MIT' });
  return { index: r.index, record_hash: r.record_hash, url: origin.url(path) };
}

/** Refused with this status and code, and the chain head unchanged. */
async function refused(signed: unknown, status: number, code: string, message: RegExp): Promise<void> {
  const before = await headSize();
  const r = await post('/v1/root', signed);
  assert.is(r.status, status, JSON.stringify(r.json));
  assert.is(r.json.success, false);
  assert.is(r.json.status, code);
  assert.match(r.json.message, message);
  assert.is(await headSize(), before, 'nothing appended');
}

const noteKeyOf = (s: typeof ONLINE.A) => verifierKey(nodeBackend, ORIGIN, SIG_ED25519, s.publicKey);
/** The key IDs (hex) of a served note's signature lines, in order. */
const noteLines = async () => parseNote(await (await fetch(`${gw.url}/checkpoint`)).text()).signatures.map((l) => Buffer.from(l.keyId).toString('hex'));
const keyIdOf = (s: typeof ONLINE.A) => noteKeyOf(s).split('+')[1]!;

/** A chain built offline (test/helpers/key-fixture.ts) in `<work>/<name>/chain`, its key files written; the directory. */
async function offlineChain(name: string, c: KeyChain, keyFileHolds: keyof typeof PRIVATE, next: keyof typeof PRIVATE | null): Promise<string> {
  const dir = join(work, name);
  await initChainRepo(join(dir, 'chain'), c.blocks, c.checkpoint());
  writeKey(join(dir, 'authority.pem'), keyFileHolds);
  if (next !== null) writeKey(join(dir, 'authority.pem.next'), next);
  return dir;
}

// Go module versions and PyPI distributions endorsed through the gateway (one later voided).
const GO: ModVersion[] = [modVersion('example.com/keyed', 'v1.0.0'), modVersion('example.com/keyed', 'v1.1.0')];
const goZip = (mv: ModVersion) => `${origin.origin}/mod/${escapeGo(mv.module)}/@v/${escapeGo(mv.version)}.zip`;
const WHEELS = [
  { kind: 'wheel' as const, name: 'keydemo', version: '1.0.0' },
  { kind: 'wheel' as const, name: 'keydemo', version: '1.1.0' },
];
const wheelUrl = (i: number) => pypi.url(`/files/${distFilename(WHEELS[i]!)}`);

test.before(async () => {
  origin = await OriginServer.start();
  reg = await NpmRegistry.start(work);
  pypi = await PypiHost.start();
  const base = `/mod/${escapeGo(GO[0]!.module)}`;
  origin.route(`${base}/@v/list`, { body: 'v1.0.0\nv1.1.0\n', contentType: 'text/plain; charset=utf-8' });
  for (const mv of GO) {
    for (const [ext, body, type] of [
      ['info', mv.info, 'application/json'],
      ['mod', mv.mod, 'text/plain; charset=utf-8'],
      ['zip', mv.zip, 'application/zip'],
    ] as const) {
      origin.route(`/mod/${escapeGo(mv.module)}/@v/${escapeGo(mv.version)}.${ext}`, { body, contentType: type });
    }
  }
  const wheels = buildDists(WHEELS);
  wheels.forEach((w, i) => pypi.file(`/files/${distFilename(WHEELS[i]!)}`, w));
  pypi.project(
    'keydemo',
    wheels.map((w, i) => ({ href: wheelUrl(i), sha256: sha256Hex(w), filename: distFilename(WHEELS[i]!), version: WHEELS[i]!.version })),
  );

  // A chain of block 0 by key A and two endorsements, as any chain made before key events.
  const c = new KeyChain(ONLINE.A);
  c.endorse(1);
  c.endorse(2);
  await initChainRepo(chainDir, c.blocks, c.checkpoint());
  ks = c.keys;
  writeKey(keyFile, 'A');
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  gw = await start(['--config', config()]);
});

test.after(async () => {
  for (const p of started) await p.stop();
  await origin?.close();
  await reg?.close().catch(() => {});
  await pypi?.close();
  rmSync(work, { recursive: true, force: true });
});

test('POST /v1/root: a 2-of-3 root adopted with the current key; its block verifies; /v1/authority shows the root', async () => {
  const before = await headSize();
  const signed = sign(rootStatement(ks, { threshold: 2, keys: [H1, H2, H3].map(b64) }), [H1, H3]);
  const r = await root(signed);
  assert.is(r.status, 201, JSON.stringify(r.json));
  assert.equal(
    { index: r.json.index, sequence: r.json.sequence, action: r.json.action, online: r.json.online },
    { index: before, sequence: 1, action: 'root', online: online(ONLINE.A) },
  );
  assert.match(r.json.record_hash, /^[0-9a-f]{64}$/);
  const { blocks, keys } = await verifiedOnDisk();
  assert.is(blocks[before]!.payload.intent, 'key');
  assert.ok(signedBy(blocks[before]!, ONLINE.A), 'the adoption block is signed by the key in force (its consent)');
  assert.equal(keys.root, { version: 1, threshold: 2, keys: [H1, H2, H3].map(b64) });
  const a = (await getJson('/v1/authority')).json;
  assert.equal(a.keys.root, keys.root);
  assert.equal([a.keys.sequence, a.keys.online.public_key, a.keys.rollover, a.keys.verifier_keys], [1, b64(ONLINE.A), null, [noteKeyOf(ONLINE.A)]]);
  assert.is(a.verifier_key, noteKeyOf(ONLINE.A));
  // A submit after it: still key A.
  const s = await submitNew();
  assert.ok(signedBy((await verifiedOnDisk()).blocks[s.index]!, ONLINE.A));
});

test('rotation without the new key: next_key_file absent, or holding another key: 409 key_unavailable naming the path and the key; nothing appended', async () => {
  if (existsSync(nextFile)) unlinkSync(nextFile);
  const signed = sign(keyStatement(ks, online(ONLINE.B)), [H1, H2]);
  await refused(signed, 409, 'key_unavailable', new RegExp(`${b64(ONLINE.B).replace(/[+/]/g, '.')}.*${nextFile.replace(/[.]/g, '\\.')} does not exist`));
  writeKey(nextFile, 'C');
  await refused(signed, 409, 'key_unavailable', new RegExp(`holds another key \\(${b64(ONLINE.C).replace(/[+/]/g, '.')}\\)`));
  // Group-readable: the key file's permission checks apply.
  writeKey(nextFile, 'B');
  chmodSync(nextFile, 0o640);
  await refused(signed, 409, 'key_unavailable', /cannot be used: .*accessible by group or others/);
  chmodSync(nextFile, 0o600);
  assert.is((await getJson('/v1/authority')).json.keys.online.public_key, b64(ONLINE.A));
});

test('rotation with next_key_file: 201; the next blocks, checkpoint.json and the note by the new key; the note carries both keys and opens with either', async () => {
  writeKey(nextFile, 'B');
  const signed = sign(keyStatement(ks, online(ONLINE.B)), [H2, H3]);
  const r = await root(signed);
  assert.is(r.status, 201, JSON.stringify(r.json));
  assert.equal([r.json.action, r.json.sequence, r.json.online], ['key', 2, online(ONLINE.B)]);
  const s = await submitNew();
  const { blocks } = await verifiedOnDisk();
  assert.ok(signedBy(blocks[r.json.index]!, ONLINE.B), 'the key block is signed by the key it puts in force');
  assert.ok(signedBy(blocks[s.index]!, ONLINE.B) && !signedBy(blocks[s.index]!, ONLINE.A), 'the next block is signed by the new key');
  const { success: _success, ...cp } = (await getJson('/v1/checkpoint')).json;
  assert.is(cp.size, s.index + 1);
  assert.ok(nodeBackend.verify(ONLINE.B.publicKey, checkpointMessage(cp as never), base64Decode(cp.signature as string)!), 'checkpoint.json by the new key');
  // The note: two signature lines under the origin, the new key first; a client pinned to either opens it.
  const note = await (await fetch(`${gw.url}/checkpoint`)).text();
  const lines = parseNote(note).signatures;
  assert.equal(
    lines.map((l) => l.name),
    [ORIGIN, ORIGIN],
  );
  assert.is(noteKeyOf(ONLINE.B).split('+')[1], Buffer.from(lines[0]!.keyId).toString('hex'));
  assert.is(noteKeyOf(ONLINE.A).split('+')[1], Buffer.from(lines[1]!.keyId).toString('hex'));
  for (const k of [ONLINE.A, ONLINE.B]) assert.is(openCheckpoint(nodeBackend, note, { publicKey: k.publicKey, origin: ORIGIN }).checkpoint.size, s.index + 1);
  // Go's sumdb/note (a C2SP client) opens it with either verifier key alone, and with both.
  const goOpen = buildCheckNote(join(work, 'go'));
  for (const vkeys of [[noteKeyOf(ONLINE.A)], [noteKeyOf(ONLINE.B)], [noteKeyOf(ONLINE.B), noteKeyOf(ONLINE.A)]]) {
    const run = goOpen({ open: { vkeys, note } });
    assert.is(run.status, 0, run.stdout + run.stderr);
    // Verified in the note's order (B's line first), the other key's line unverified when not given.
    const id = (k: string) => k.split('+').slice(0, 2).join('+');
    const inNote = [noteKeyOf(ONLINE.B), noteKeyOf(ONLINE.A)];
    const verified = inNote
      .filter((k) => vkeys.includes(k))
      .map(id)
      .join(',');
    const unverified = inNote
      .filter((k) => !vkeys.includes(k))
      .map(id)
      .join(',');
    assert.ok(run.stdout.includes(`ok open verified=${verified} unverified=${unverified}\n`), run.stdout);
  }
  const a = (await getJson('/v1/authority')).json;
  assert.equal([a.keys.sequence, a.keys.online.public_key, a.keys.online.since, a.keys.retired], [2, b64(ONLINE.B), r.json.index, [b64(ONLINE.A)]]);
  assert.equal(a.keys.rollover, { public_key: b64(ONLINE.A), verifier_key: noteKeyOf(ONLINE.A) });
  assert.equal(a.keys.verifier_keys, [noteKeyOf(ONLINE.B), noteKeyOf(ONLINE.A)]);
  assert.is(a.verifier_key, noteKeyOf(ONLINE.B));
  assert.is(a.keys.online.verifier_key, noteKeyOf(ONLINE.B));
});

test('bad statements: each refused with its status and JSON error, the head unchanged', async () => {
  const rotateTo = (s: typeof ONLINE.A) => keyStatement(ks, online(s));
  await refused(sign(rotateTo(ONLINE.C), [H1]), 400, 'bad_statement', /needs 2 of its 3 holders' signatures, the statement has 1/);
  await refused(sign(rotateTo(ONLINE.C), [H1, H4]), 400, 'bad_statement', /which is not a key of the root/);
  await refused(sign(rotateTo(ONLINE.C), [H1, H1]), 400, 'bad_statement', /signed twice/);
  // A small-order point (the identity) and a non-canonical encoding (y = p).
  const identity = new Uint8Array(32);
  identity[0] = 1;
  const yIsP = new Uint8Array(32).fill(0xff);
  yIsP[0] = 0xed;
  yIsP[31] = 0x7f;
  for (const raw of [identity, yIsP]) {
    await refused(
      sign(keyStatement(ks, { signer: 'vouch-test', public_key: base64Encode(raw) }), [H1, H2]),
      400,
      'bad_statement',
      /not a full-order ed25519 key/,
    );
  }
  await refused(sign(rotateTo(ONLINE.A), [H1, H2]), 400, 'bad_statement', /was retired earlier/);
  const size = await headSize();
  await refused(
    sign(compromiseStatement(ks, size + 3, online(ONLINE.C)), [H1, H2]),
    400,
    'bad_statement',
    new RegExp(`good_through ${size + 3} is beyond the head`),
  );
  await refused(
    sign(compromiseStatement(ks, ks.online.since - 1, online(ONLINE.C)), [H1, H2]),
    400,
    'bad_statement',
    /before the compromised key's first block/,
  );
  // Replayed: the adoption and the rotation already applied.
  await refused(
    sign(rootStatement({ ...ks, sequence: 0, root: null }, { threshold: 2, keys: [H1, H2, H3].map(b64) }), [H1, H2]),
    409,
    'stale_statement',
    /already used/,
  );
  await refused(sign({ ...rotateTo(ONLINE.C), sequence: ks.sequence + 2 }, [H1, H2]), 400, 'bad_statement', /skips ahead/);
  // Not a statement file, not JSON, too large.
  await refused({ statement: 1 }, 400, 'bad_request', /not a statement file/);
  await refused({ ...sign(rotateTo(ONLINE.C), [H1, H2]), extra: true }, 400, 'bad_request', /unknown member/);
  await refused('{"statement":', 400, 'bad_request', /JSON/);
  await refused(JSON.stringify({ pad: 'x'.repeat(70 * 1024) }), 413, 'too_large', /./);
  // A statement for another chain.
  await refused(sign({ ...rotateTo(ONLINE.C), chain: 'f'.repeat(64) }, [H1, H2]), 400, 'bad_statement', /is for chain f{64}/);
  // Without the token: 401, as every authority endpoint.
  const r = await fetch(gw.url + '/v1/root', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  assert.is(r.status, 401);
});

test('two conflicting statements of one sequence: the first applies, the second is 409 stale_statement', async () => {
  const before = await headSize();
  const one = sign(rootStatement(ks, { threshold: 2, keys: [H1, H2, H4].map(b64) }), [H1, H2]);
  const two = sign(rootStatement(ks, { threshold: 2, keys: [H1, H2, H3, H4].map(b64) }), [H1, H2]);
  const [r1, r2] = await Promise.all([post('/v1/root', one), post('/v1/root', two)]);
  const statuses = [r1.status, r2.status].sort();
  assert.equal(statuses, [201, 409], JSON.stringify([r1.json, r2.json]));
  const won = r1.status === 201 ? one : two;
  const lost = r1.status === 201 ? r2 : r1;
  assert.is(lost.json.status, 'stale_statement');
  ks = applyKeyEvent(nodeBackend, ks, won, before);
  assert.is(await headSize(), before + 1);
  const { keys } = await verifiedOnDisk();
  assert.equal(keys.root, ks.root);
  assert.is(keys.online.publicKey, b64(ONLINE.B), 'a root rotation keeps the online key');
});

test('compromise: blocks the attacker appended are void (404 lookups and downloads, dropped by npm, PyPI and Go routes, void on /v1/block); the next note by the new key alone', async () => {
  // Good endorsements, by the key in force (B).
  await reg.publish('keypad', '1.0.0', { 'index.js': 'module.exports = 1;\n' }, { latest: false });
  await reg.publish('keypad', '1.1.0', { 'index.js': 'module.exports = 11;\n' }, { latest: true });
  const tarball = (v: string) => `${reg.url}${NpmRegistry.tarballPath('keypad', v)}`;
  await submitEntry(gw.url, token, { url: tarball('1.0.0'), name: 'npm/keypad', semver: '1.0.0', license: 'MIT' });
  await submitEntry(gw.url, token, { url: wheelUrl(0), name: 'pypi/keydemo', semver: '1.0.0', license: 'MIT' });
  const good = await submitEntry(gw.url, token, { url: goZip(GO[0]!), name: 'golang/keyed', semver: '1.0.0', license: 'MIT' });
  // The attacker, holding B, appends through the same door.
  const evil = [
    await submitEntry(gw.url, token, { url: tarball('1.1.0'), name: 'npm/keypad', semver: '1.1.0', license: 'MIT' }),
    await submitEntry(gw.url, token, { url: wheelUrl(1), name: 'pypi/keydemo', semver: '1.1.0', license: 'MIT' }),
    await submitEntry(gw.url, token, { url: goZip(GO[1]!), name: 'golang/keyed', semver: '1.1.0', license: 'MIT' }),
  ];
  const plain = await submitNew('acme/evil');
  const packument = async () =>
    (await (await fetch(`${gw.url}/npm/keypad`)).json()) as { versions: Record<string, unknown>; 'dist-tags': Record<string, string> };
  const simple = async () =>
    JSON.parse(await (await fetch(`${gw.url}/pypi/simple/keydemo/`, { headers: { accept: 'application/vnd.pypi.simple.v1+json' } })).text()) as {
      files: { filename: string }[];
    };
  const goList = async () => (await fetch(`${gw.url}/go/example.com/keyed/@v/list`)).text();
  // Before the declaration everything is served.
  assert.equal(Object.keys((await packument()).versions).sort(), ['1.0.0', '1.1.0']);
  assert.is((await packument())['dist-tags'].latest, '1.1.0');
  assert.equal((await simple()).files.map((f) => f.filename).sort(), WHEELS.map(distFilename).sort());
  assert.is(await goList(), 'v1.0.0\nv1.1.0\n');
  assert.is((await getJson(`/v1/endorsement?url=${encodeURIComponent(plain.url)}`)).status, 200);
  assert.is((await fetch(`${gw.url}/v1/download?url=${encodeURIComponent(plain.url)}`)).status, 200);

  // The root declares B compromised after the last good block; C takes over.
  writeKey(nextFile, 'C');
  const r = await root(sign(compromiseStatement(ks, good.index, online(ONLINE.C)), [H1, H2]));
  assert.is(r.status, 201, JSON.stringify(r.json));
  assert.equal([r.json.action, r.json.online], ['compromise', online(ONLINE.C)]);
  const voidRange = [good.index + 1, r.json.index - 1];
  assert.equal(voidRange, [evil[0]!.index, plain.index]);

  // Lookups and downloads: 404; the void block is marked, kept as evidence.
  const look = await getJson(`/v1/endorsement?url=${encodeURIComponent(plain.url)}`);
  assert.equal([look.status, look.json.status], [404, 'not_found']);
  const dl = await fetch(`${gw.url}/v1/download?url=${encodeURIComponent(plain.url)}`);
  assert.is(dl.status, 404);
  assert.is((await dl.arrayBuffer()).byteLength, 0);
  assert.is((await getJson(`/v1/endorsement?url=${encodeURIComponent(tarball('1.0.0'))}`)).status, 200, 'a good block is still selected');
  const blk = (await getJson(`/v1/block?index=${plain.index}`)).json;
  assert.equal([blk.void, blk.record_hash], [{ from: evil[0]!.index, to: plain.index, compromise: r.json.index }, plain.record_hash]);
  assert.is((await getJson(`/v1/block?index=${good.index}`)).json.void, undefined);
  const list = (await getJson(`/v1/blocks?before=${r.json.index + 1}&limit=${r.json.index + 1 - good.index}`)).json.blocks as { index: number; void?: true }[];
  assert.equal(
    list
      .filter((b) => b.void === true)
      .map((b) => b.index)
      .reverse(),
    [evil[0]!.index, evil[1]!.index, evil[2]!.index, plain.index],
  );
  // Ecosystem routes drop the versions endorsed only in void blocks (latest recomputed).
  const p = await packument();
  assert.equal(Object.keys(p.versions), ['1.0.0']);
  assert.is(p['dist-tags'].latest, '1.0.0');
  assert.equal(
    (await simple()).files.map((f) => f.filename),
    [distFilename(WHEELS[0]!)],
  );
  assert.is(await goList(), 'v1.0.0\n');

  // Blocks, checkpoint and note after it: by C alone (a compromise ends any rollover).
  const s = await submitNew();
  const { blocks, keys } = await verifiedOnDisk();
  assert.equal(keys.voids, [voidRange]);
  assert.ok(signedBy(blocks[r.json.index]!, ONLINE.C) && signedBy(blocks[s.index]!, ONLINE.C));
  const note = await (await fetch(`${gw.url}/checkpoint`)).text();
  assert.equal(
    parseNote(note).signatures.map((l) => Buffer.from(l.keyId).toString('hex')),
    [noteKeyOf(ONLINE.C).split('+')[1]],
  );
  assert.throws(() => openCheckpoint(nodeBackend, note, { publicKey: ONLINE.B.publicKey }), /no signature by the authority key/);
  assert.throws(() => openCheckpoint(nodeBackend, note, { publicKey: ONLINE.A.publicKey }), /no signature by the authority key/);
  const a = (await getJson('/v1/authority')).json;
  assert.equal(
    [a.keys.online.public_key, a.keys.compromised, a.keys.voids, a.keys.rollover, a.keys.verifier_keys],
    [b64(ONLINE.C), [b64(ONLINE.B)], [voidRange], null, [noteKeyOf(ONLINE.C)]],
  );
  // Four statements applied so far (adoption, rotation, root rotation, compromise), counted.
  assert.match(await (await fetch(`${gw.url}/metrics`)).text(), /^vouch_submits_total\{outcome="key_event"\} 4$/m);
});

test('restarts: warm, then cold, on the compromised chain: the key in force is picked from next_key_file and signs; a compromised or unknown key refuses the start', async () => {
  await gw.stop();
  // key_file still holds A (retired), next_key_file C (in force).
  gw = await start(['--config', config()]);
  assert.match(gw.stdout(), /\(warm start/);
  let s = await submitNew();
  let { blocks } = await verifiedOnDisk();
  assert.ok(signedBy(blocks[s.index]!, ONLINE.C));
  await gw.stop();
  unlinkSync(join(chainDir, '.git', 'vouch-snapshot.json'));
  gw = await start(['--config', config()]);
  assert.match(gw.stdout(), /\(cold start/);
  s = await submitNew();
  ({ blocks } = await verifiedOnDisk());
  assert.ok(signedBy(blocks[s.index]!, ONLINE.C));
  assert.is((await getJson('/v1/authority')).json.keys.online.public_key, b64(ONLINE.C));
  await gw.stop();
  // Neither file holds C: the compromised B in key_file, D in next_key_file.
  writeKey(keyFile, 'B');
  writeKey(nextFile, 'D');
  const err = await start(['--config', config()]).then(
    () => null,
    (e: Error) => e.message,
  );
  assert.ok(err !== null);
  assert.match(
    err!,
    new RegExp(
      `neither authority.key_file .*\\(holds ${b64(ONLINE.B).replace(/[+/]/g, '.')}, declared compromised\\) nor authority.next_key_file .*\\(holds ${b64(ONLINE.D).replace(/[+/]/g, '.')}\\) holds the chain's online key in force, ${b64(ONLINE.C).replace(/[+/]/g, '.')}`,
    ),
  );
  // No key_file at all, C in next_key_file: starts with it, and says so.
  unlinkSync(keyFile);
  writeKey(nextFile, 'C');
  gw = await start(['--config', config()]);
  assert.match(
    gw.stdout(),
    new RegExp(
      `online key in force: ${b64(ONLINE.C).replace(/[+/]/g, '.')} \\(since block \\d+\\), from authority.next_key_file ${nextFile.replace(/[.]/g, '\\.')}`,
    ),
  );
  s = await submitNew();
  ({ blocks } = await verifiedOnDisk());
  assert.ok(signedBy(blocks[s.index]!, ONLINE.C));
  await gw.stop();
  // C moved into key_file (the operator's step after a rotation): starts with it, no next_key_file needed;
  // the signer id is the chain's for the key in force (authority.signer differing only warns).
  writeKey(keyFile, 'C');
  unlinkSync(nextFile);
  gw = await start(['--config', config({ signer: 'renamed-in-config' })]);
  s = await submitNew();
  ({ blocks } = await verifiedOnDisk());
  assert.ok(signedBy(blocks[s.index]!, ONLINE.C));
  assert.is(blocks[s.index]!.signer, 'vouch-test');
  assert.match(gw.stdout() + gw.stderr(), /authority.signer differs from the signer of the chain's online key in force/);
});

test('a chain built offline through every key event (key-fixture): cold start signs with the key in force, void blocks marked; warm start signs again', async () => {
  await gw.stop();
  const life = buildKeyLifeChain(); // C in force since the compromise at 8, blocks 6-7 void, root rotated at 10
  const dir = await offlineChain('life', life, 'C', null);
  gw = await start(['--config', config({}, dir)]);
  assert.match(gw.stdout(), /\(cold start/);
  let s = await submitNew();
  let { blocks, keys } = await verifiedOnDisk(join(dir, 'chain'));
  assert.is(s.index, life.blocks.length);
  assert.ok(signedBy(blocks[s.index]!, ONLINE.C));
  assert.equal(keys.voids, [[6, 7]]);
  assert.equal((await getJson('/v1/block?index=7')).json.void, { from: 6, to: 7, compromise: 8 });
  assert.equal(await noteLines(), [keyIdOf(ONLINE.C)]);
  const a = (await getJson('/v1/authority')).json;
  assert.equal([a.keys.sequence, a.keys.root.version, a.keys.compromised, a.keys.retired], [4, 2, [b64(ONLINE.B)], [b64(ONLINE.A), b64(ONLINE.B)]]);
  await gw.stop();
  gw = await start(['--config', config({}, dir)]);
  assert.match(gw.stdout(), /\(warm start/);
  s = await submitNew();
  ({ blocks } = await verifiedOnDisk(join(dir, 'chain')));
  assert.ok(signedBy(blocks[s.index]!, ONLINE.C));
  await gw.stop();
});

test('a rollover survives a restart while key_file holds the previous key and rollover_days lasts; not after', async () => {
  const c = new KeyChain(ONLINE.A);
  c.endorse(1);
  c.adoptRoot();
  c.rotate(ONLINE.B); // posted early in 2026: inside a 366-day rollover, outside the default 30 days
  const dir = await offlineChain('rollover', c, 'A', 'B');
  // A witness that knows the log by the old key A only (another gateway with a witness section).
  const wdir = join(work, 'witness');
  const wkey = join(wdir, 'witness.pem');
  mkdirSync(wdir, { recursive: true });
  const wpub = base64Decode(createKeyFile(wkey).publicKeyB64)!;
  createKeyFile(join(wdir, 'authority.pem'));
  const witness = await start([
    '--config',
    writeConfig(wdir, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: join(wdir, 'chain') },
      authority: { key_file: join(wdir, 'authority.pem'), signer: 'witness-host', submit_token_file: tokenFile },
      witness: { key_file: wkey, name: 'witness.test/w', state_file: join(wdir, 'state.json'), logs: [{ vkey: noteKeyOf(ONLINE.A) }] },
    }),
  ]);
  try {
    gw = await start([
      '--config',
      config({ rollover_days: 366, witnesses: [{ url: witness.url, vkey: verifierKey(nodeBackend, 'witness.test/w', 0x04, wpub) }] }, dir),
    ]);
    await submitNew();
    assert.equal((await noteLines()).slice(0, 2), [keyIdOf(ONLINE.B), keyIdOf(ONLINE.A)]);
    assert.equal((await getJson('/v1/authority')).json.keys.verifier_keys, [noteKeyOf(ONLINE.B), noteKeyOf(ONLINE.A)]);
    // The cosigner sends the rollover note; the witness pinned to A verifies A's line and cosigns; /checkpoint serves it.
    const cosigned = await until('the witness cosignature on the served note', async () => {
      const note = await (await fetch(`${gw.url}/checkpoint`)).text();
      return verifyCosignature(nodeBackend, parseNote(note), 'witness.test/w', wpub).ok ? note : null;
    });
    for (const k of [ONLINE.A, ONLINE.B]) openCheckpoint(nodeBackend, cosigned, { publicKey: k.publicKey, origin: ORIGIN });
    await gw.stop();
  } finally {
    await witness.stop();
  }
  // The default 30 days are over: the new key alone.
  gw = await start(['--config', config({}, dir)]);
  await submitNew();
  assert.equal(await noteLines(), [keyIdOf(ONLINE.B)]);
  assert.is((await getJson('/v1/authority')).json.keys.rollover, null);
  await gw.stop();
  // key_file holds B now (the operator moved it): no previous key held, no rollover whatever the days.
  writeKey(join(dir, 'authority.pem'), 'B');
  unlinkSync(join(dir, 'authority.pem.next'));
  gw = await start(['--config', config({ rollover_days: 366 }, dir)]);
  await submitNew();
  assert.equal(await noteLines(), [keyIdOf(ONLINE.B)]);
  const { blocks } = await verifiedOnDisk(join(dir, 'chain'));
  assert.ok(signedBy(blocks[blocks.length - 1]!, ONLINE.B));
  await gw.stop();
});

test('a rotation racing submits through the one writer: blocks before its key block by the old key, after it by the new, all verify', async () => {
  const c = new KeyChain(ONLINE.A);
  c.adoptRoot();
  const dir = await offlineChain('race', c, 'A', 'B');
  gw = await start(['--config', config({}, dir)]);
  ks = c.keys;
  const rotation = sign(keyStatement(ks, online(ONLINE.B)), [H1, H2]);
  const answers = await Promise.all([submitNew(), submitNew(), submitNew(), post('/v1/root', rotation), submitNew(), submitNew(), submitNew()]);
  const key = answers[3] as { status: number; json: Record<string, any> };
  assert.is(key.status, 201, JSON.stringify(key.json));
  const at = key.json.index as number;
  const { blocks } = await verifiedOnDisk(join(dir, 'chain'));
  assert.is(blocks.length, c.blocks.length + 7);
  for (let i = c.blocks.length; i < blocks.length; i++) {
    assert.ok(signedBy(blocks[i]!, i < at ? ONLINE.A : ONLINE.B), `block ${i} (key block ${at})`);
  }
  await gw.stop();
});

test.run();
