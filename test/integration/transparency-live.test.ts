/**
 * Transparency on a live chain (issue 17): a real authority gateway that
 * submits, pushes to a git remote (node:http git server on 127.0.0.1) and a
 * real mirror gateway syncing from it. Over HTTP only: the authority's
 * `/checkpoint` and `verifier_key`, inclusion proofs of every block and a
 * consistency proof between two checkpoints, checked here with
 * chain/merkle.ts against a tree recomputed from the blocks, and by Go's
 * golang.org/x/mod/sumdb/{note,tlog} (test/go-interop/checknote.go), which
 * must refuse them with one byte flipped; the mirror's tree follows its sync
 * (same checkpoint, proofs and tiles as the authority's).
 * Needs appends that commit checkpoint.note (branch i17-store): without
 * them `/checkpoint` is 404 and every test here fails.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Decode, base64Encode, hexDecode } from '../../chain/encoding.ts';
import { leafHash, verifyConsistency, verifyInclusion } from '../../chain/merkle.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { parseVerifierKey } from '../../chain/note.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { buildCheckNote } from '../helpers/go-checknote.ts';
import { PushingAuthority, until, type GatewayProcess } from '../helpers/gateway-process.ts';

const c = nodeBackend;
const work = mkdtempSync(join(tmpdir(), 'vouch-tlog-live-'));
const token = 'tlog-live-token-' + 'z'.repeat(24);
let live: PushingAuthority;
let origin: OriginServer;
let authority: GatewayProcess;
let mirror: GatewayProcess;
let pub = '';
const b64 = (s: string) => base64Decode(s)!;

async function json(base: string, path: string): Promise<any> {
  const r = await fetch(base + path);
  return r.json();
}

async function submit(i: number): Promise<void> {
  origin.route(`/live-${i}.tgz`, { body: `live artifact ${i}` });
  await live.submit({ url: origin.url(`/live-${i}.tgz`), name: 'acme/live', semver: `1.${i}.0`, license: 'MIT' });
}

/** The tree recomputed from the blocks a gateway serves (`/v1/block`), and the record hashes. */
async function recompute(base: string, size: number): Promise<{ tree: MerkleTree; entries: Uint8Array[] }> {
  const tree = new MerkleTree(c);
  const entries: Uint8Array[] = [];
  for (let i = 0; i < size; i++) {
    const b = await json(base, `/v1/block?index=${i}`);
    entries.push(hexDecode(b.record_hash)!);
    tree.append(entries[i]!);
  }
  return { tree, entries };
}

test.before(async () => {
  origin = await OriginServer.start();
  live = await PushingAuthority.start(work, { signer: 'tlog-live', token });
  ({ authority, pub } = live);
});

test.after(async () => {
  await live?.stop(); // the mirror, the authority, the git server
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

let first: { note: string; size: number; root: Uint8Array } | null = null;
let second: { note: string; size: number; root: Uint8Array } | null = null;
let vkey = '';

async function checkpointOf(base: string): Promise<{ note: string; size: number; root: Uint8Array }> {
  const r = await fetch(`${base}/checkpoint`);
  assert.is(r.status, 200, 'the chain has a checkpoint.note');
  assert.is(r.headers.get('content-type'), 'text/plain; charset=utf-8');
  const note = await r.text();
  const { checkpoint } = openCheckpoint(c, note, { publicKey: b64(pub) });
  return { note, size: checkpoint.size, root: checkpoint.root };
}

test("the authority's checkpoints: every block proven included, and the older checkpoint a prefix of the newer", async () => {
  for (let i = 1; i <= 3; i++) await submit(i);
  first = await checkpointOf(authority.url);
  assert.is(first.size, 4);
  for (let i = 4; i <= 9; i++) await submit(i);
  second = await checkpointOf(authority.url);
  assert.is(second.size, 10);
  const { tree, entries } = await recompute(authority.url, second.size);
  assert.equal(second.root, tree.root(10));
  assert.equal(first.root, tree.root(4));
  vkey = (await json(authority.url, '/v1/authority')).verifier_key;
  const parsed = parseVerifierKey(c, vkey);
  assert.equal(parsed.publicKey, b64(pub));
  assert.is(parsed.name, second.note.split('\n')[0]);
  for (let i = 0; i < second.size; i++) {
    const p = await json(authority.url, `/v1/proof/inclusion?index=${i}`);
    assert.is(p.size, 10);
    assert.ok(verifyInclusion(c, i, 10, leafHash(c, entries[i]!), p.proof.map(b64), second.root), `block ${i}`);
  }
  const cons = await json(authority.url, `/v1/proof/consistency?from=${first.size}&to=${second.size}`);
  assert.ok(verifyConsistency(c, first.size, second.size, first.root, second.root, cons.proof.map(b64)));
});

test("Go's sumdb/note and sumdb/tlog accept the note and every proof over HTTP, and refuse a flipped byte", async () => {
  const run = buildCheckNote(work);
  const { entries } = await recompute(authority.url, second!.size);
  const inclusion = [];
  for (let i = 0; i < second!.size; i++) {
    const p = await json(authority.url, `/v1/proof/inclusion?index=${i}&size=${second!.size}`);
    inclusion.push({ index: i, size: second!.size, leaf_entry_b64: base64Encode(entries[i]!), proof: p.proof, root_b64: base64Encode(second!.root) });
  }
  const consistency = [];
  for (const [from, to, oldRoot] of [
    [first!.size, second!.size, first!.root],
    [1, second!.size, null],
    [7, second!.size, null],
  ] as const) {
    const p = await json(authority.url, `/v1/proof/consistency?from=${from}&to=${to}`);
    const old = oldRoot ?? (await recompute(authority.url, from)).tree.root(from);
    consistency.push({ from, to, old_root: base64Encode(old), new_root: base64Encode(second!.root), proof: p.proof });
  }
  const input = { vkey, note: second!.note, inclusion, consistency };
  const ok = run(input);
  assert.is(ok.status, 0, ok.stdout + ok.stderr);
  assert.is(ok.stdout.split('\n').filter((l) => l.startsWith('ok ')).length, 1 + inclusion.length + consistency.length, ok.stdout);
  // One byte flipped anywhere: the note, an inclusion proof, a consistency proof.
  const flip = (s: string) => {
    const raw = b64(s);
    raw[0] = raw[0]! ^ 1;
    return base64Encode(raw);
  };
  const badNote = second!.note.replace(/\n(\d+)\n/, (_, n) => `\n${Number(n) + 1}\n`);
  assert.is(run({ ...input, note: badNote }).status, 1);
  const badInclusion = structuredClone(inclusion);
  badInclusion[5]!.proof[1] = flip(badInclusion[5]!.proof[1]!);
  assert.is(run({ ...input, inclusion: badInclusion }).status, 1);
  const badConsistency = structuredClone(consistency);
  badConsistency[0]!.proof[0] = flip(badConsistency[0]!.proof[0]!);
  assert.is(run({ ...input, consistency: badConsistency }).status, 1);
});

test("a mirror's tree follows its sync: same checkpoint, proofs and tiles as the authority's", async () => {
  mirror = await live.startMirror(join(work, 'm'));
  await until('the mirror at 10 blocks', async () => (await json(mirror.url, '/readyz')).chain?.size === 10);
  assert.is((await checkpointOf(mirror.url)).note, second!.note);
  await submit(10);
  await submit(11);
  const third = await checkpointOf(authority.url);
  assert.is(third.size, 12);
  await until('the mirror at 12 blocks', async () => (await json(mirror.url, '/readyz')).chain?.size === 12);
  assert.is((await checkpointOf(mirror.url)).note, third.note);
  const { tree } = await recompute(mirror.url, 12);
  assert.equal(third.root, tree.root(12));
  const tile = new Uint8Array(await (await fetch(`${mirror.url}/tile/0/000.p/12`)).arrayBuffer());
  assert.equal(tile, tree.tile(0, 0, 12));
  const p = await json(mirror.url, '/v1/proof/inclusion?index=11');
  assert.ok(verifyInclusion(c, 11, 12, tree.leafHashAt(11), p.proof.map(b64), third.root));
  const cons = await json(mirror.url, `/v1/proof/consistency?from=${second!.size}&to=12`);
  assert.ok(verifyConsistency(c, second!.size, 12, second!.root, third.root, cons.proof.map(b64)));
});

test.run();
