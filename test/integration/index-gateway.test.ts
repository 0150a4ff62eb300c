/**
 * The completeness index on live gateways (issue 37, docs/spec/index.md 5):
 * a real authority commits `vouch-index/v1 <root>` in every checkpoint note
 * it signs, equal to the index recomputed here from the blocks it serves;
 * a mirror syncs it; a remote whose newest note carries the index root of
 * an older state (re-signed with the authority's key, Merkle root intact)
 * is refused by the mirror, which stays at its verified size; the gateway
 * restarts (warm) on its own notes, and restarted from its index image
 * answers the same index proofs as the index built from the blocks.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Decode, base64Encode } from '../../chain/encoding.ts';
import { openCheckpoint, signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { CompletenessIndex } from '../../chain/index-tree.ts';
import { indexExtensionLine, indexRootOf } from '../../chain/index-proof.ts';
import { ChainIndex } from '../../chain/select.ts';
import type { Block } from '../../chain/block.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { vouch } from '../helpers/processes.ts';
import { PushingAuthority, until, type GatewayProcess } from '../helpers/gateway-process.ts';

const c = nodeBackend;
const work = mkdtempSync(join(tmpdir(), 'vouch-index-gw-'));
const token = 'index-gw-token-' + 'q'.repeat(24);
let live: PushingAuthority;
let origin: OriginServer;
let mirror: GatewayProcess;

test.before(async () => {
  origin = await OriginServer.start();
  live = await PushingAuthority.start(work, { signer: 'index-gw', token });
});
test.after(async () => {
  await live?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

async function blocksOf(base: string, size: number): Promise<Block[]> {
  const out: Block[] = [];
  for (let i = 0; i < size; i++) out.push((await (await fetch(`${base}/v1/block?index=${i}`)).json()) as Block);
  return out;
}

function indexOf(blocks: readonly Block[]): CompletenessIndex {
  const idx = new CompletenessIndex(c);
  const ch = new ChainIndex();
  for (const b of blocks) {
    idx.addBlock(b, (h) => ch.indexOfHash(h));
    ch.add(b);
  }
  return idx;
}

async function note(base: string): Promise<{ text: string; size: number; index: Uint8Array | null }> {
  const r = await fetch(`${base}/checkpoint`);
  assert.is(r.status, 200);
  const text = await r.text();
  const { checkpoint } = openCheckpoint(c, text, { publicKey: base64Decode(live.pub)! });
  const line = indexRootOf(checkpoint.extensions);
  assert.ok(line === null || line instanceof Uint8Array);
  return { text, size: checkpoint.size, index: line as Uint8Array | null };
}

/** The note on the remote's main; null before the authority's first push has made the branch. */
function remoteNote(): string | null {
  try {
    return execFileSync('git', ['--git-dir', live.bareDir, 'show', 'main:checkpoint.note'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch {
    return null;
  }
}

async function submit(path: string, body: string, semver: string): Promise<void> {
  origin.route(path, { body });
  await live.submit({ url: origin.url(path), name: 'npm/indexed', semver, license: 'MIT' });
}

test('every note the authority signs commits the completeness index of its size', async () => {
  await submit('/a-1.tgz', 'a one', '1.0.0');
  await submit('/a-2.tgz', 'a two', '2.0.0');
  let n = await note(live.authority.url);
  assert.is(n.size, 3);
  assert.ok(n.index !== null, 'the note carries a vouch-index/v1 line');
  assert.equal(n.index, indexOf(await blocksOf(live.authority.url, 3)).root());
  await submit('/a-3.tgz', 'a three', '3.0.0');
  n = await note(live.authority.url);
  assert.is(n.size, 4);
  const blocks = await blocksOf(live.authority.url, 4);
  assert.equal(n.index, indexOf(blocks).root());
  assert.ok(n.text.includes(`\n${indexExtensionLine(indexOf(blocks).root())}\n`));
  // vouch verify recomputes it from a clone
  const clone = join(work, 'verify-clone');
  await until('the authority pushed', async () => remoteNote() === n.text);
  execFileSync('git', ['clone', '-q', live.bareDir, clone]);
  const v = vouch(['verify', '--chain', clone, '--public-key', live.pub, '--json', '--index']);
  assert.is(v.status, 0, v.stderr);
  assert.is(JSON.parse(v.stdout).index_root, base64Encode(n.index!));
  // the unit's proof lists its three versions
  const idx = indexOf(blocks);
  assert.equal(
    idx.events('unit', 'npm/indexed').map((e) => (e.kind === 'endorse' ? e.semver : '')),
    ['1.0.0', '2.0.0', '3.0.0'],
  );
});

test('a warm restart serves the same note; a mirror syncs it', async () => {
  const before = await note(live.authority.url);
  await live.restart();
  assert.is((await note(live.authority.url)).text, before.text);
  mirror = await live.startMirror(join(work, 'm'));
  await until(
    "the mirror serves the authority's note",
    async () => (await fetch(`${mirror.url}/checkpoint`)).status === 200 && (await note(mirror.url)).text === before.text,
  );
});

test('restarted from its completeness image, the gateway answers the same index proofs as the index built from the blocks', async () => {
  await live.restart(); // this load writes the image of every block (the appends since the last one left it behind)
  const { size } = await note(live.authority.url);
  const snap = JSON.parse(readFileSync(join(live.chainDir, '.git', 'vouch-snapshot.json'), 'utf8'));
  assert.is(snap.completeness?.size, size, 'the image holds every block');
  await live.restart(); // reads it back: its small subtrees' hashes and accs are computed when a proof needs them
  const want = indexOf(await blocksOf(live.authority.url, size));
  const keys: ['url' | 'unit', string][] = [
    ['unit', 'npm/indexed'],
    ['unit', 'npm/absent'],
    ['url', origin.url('/absent.tgz')],
  ];
  for (let k = 1; k <= 3; k++) keys.push(['url', origin.url(`/a-${k}.tgz`)]);
  for (const [kind, name] of keys) {
    const r = await fetch(`${live.authority.url}/v1/index/proof?${kind}=${encodeURIComponent(name)}`);
    assert.is(r.status, 200, `${kind} ${name}`);
    const body = (await r.json()) as { size: number; index_proof: string };
    assert.is(body.size, size);
    assert.is(body.index_proof, Buffer.from(want.prove(kind, name)).toString('base64'), `${kind} ${name}`);
  }
});

test('a remote whose newest note commits the index of an older state is refused by the mirror', async () => {
  const old = await note(live.authority.url);
  await submit('/a-4.tgz', 'a four', '4.0.0');
  const fresh = await note(live.authority.url);
  await until('the mirror follows', async () => (await note(mirror.url)).size === fresh.size);
  // The mirror is stopped while the authority commits and the commit is forged: polling every second, it
  // would otherwise take the genuine commit before the forged one replaces it. Restarted below on its chain.
  await mirror.stop();
  await submit('/a-5.tgz', 'a five', '5.0.0');
  const pushed = await note(live.authority.url);
  await until('the authority pushed its newest commit', async () => remoteNote() === pushed.text);
  await live.authority.stop();
  // Rewrite the remote's newest commit: same blocks and Merkle root, the index root of an older state, signed by the authority's key.
  const clone = join(work, 'forge');
  const git = (...args: string[]) => execFileSync('git', args, { cwd: clone, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  execFileSync('git', ['clone', '-q', live.bareDir, clone]);
  git('config', 'user.email', 'forger@example.invalid');
  git('config', 'user.name', 'forger');
  const cp = openCheckpoint(c, readFileSync(join(clone, 'checkpoint.note'), 'utf8'), { publicKey: base64Decode(live.pub)! }).checkpoint;
  assert.is(cp.size, pushed.size);
  const signer = nodeSigner('index-gw', readKeyFile(live.keyFile));
  const forged = signCheckpoint(c, { ...cp, extensions: [indexExtensionLine(old.index!)] }, signer);
  writeFileSync(join(clone, 'checkpoint.note'), forged);
  git('commit', '-q', '-a', '--amend', '--no-edit');
  git('push', '-q', '--force', 'origin', 'HEAD:main');
  // vouch verify on the forged clone names the index line
  const v = vouch(['verify', '--chain', clone, '--public-key', live.pub, '--index']);
  assert.is(v.status, 1, v.stdout + v.stderr);
  assert.match(v.stderr, /^checkpoint_mismatch at checkpoint: .*vouch-index\/v1/);
  mirror = await live.startMirror(join(work, 'm'));
  assert.is((await note(mirror.url)).size, fresh.size, 'the mirror restarted on its verified chain');
  const e = await until('the mirror to report the refusal', async () => {
    const s = ((await (await fetch(`${mirror.url}/readyz`)).json()) as { sync?: { last_error?: { code: string; message: string } | null } }).sync;
    return s?.last_error ?? null;
  });
  const m = await note(mirror.url);
  assert.is(m.size, fresh.size, 'the mirror stays at its verified size');
  assert.is(m.text, fresh.text);
  assert.is(e.code, 'checkpoint_mismatch', e.message);
  assert.match(e.message, /vouch-index\/v1/);
  assert.is(base64Encode(pushed.index!) === base64Encode(old.index!), false);
});

test.run();
