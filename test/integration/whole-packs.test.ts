/**
 * A chain git packed (block blobs stored as deltas, as `git clone` and
 * `git gc` leave them) served by a real gateway process: after ready its
 * packs are rewritten whole by stock git in the background
 * (gateway/chain/whole-packs.ts, store/whole-pack.ts), judged by git itself
 * (`verify-pack -v`, `fsck --strict`); lookups answer throughout; a chain
 * vouch packed and `chain.repack_deltas: false` are left as they are; a
 * gateway stopped mid-rewrite stops git with it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { base64Encode } from '../../chain/encoding.ts';
import { createChain } from '../../store/chain-repo.ts';
import { buildLongChain, testSigner } from '../helpers/chain-fixture.ts';
import { type GatewayProcess, startGatewayProcess, until, writeConfig } from '../helpers/gateway-process.ts';

const root = mkdtempSync(join(tmpdir(), 'vouch-whole-packs-'));
const N = 400;
const chain = buildLongChain(N);
const pub = base64Encode(testSigner().publicKey);
let vouchPacked = '';

const git = (dir: string, ...args: string[]) => execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8', maxBuffer: 1 << 28 });

/** Objects the packs store as deltas (`git verify-pack -v`: a delta's line names its depth and base). */
function deltaCount(dir: string): number {
  const packs = git(dir, 'count-objects', '-v');
  assert.match(packs, /packs: [1-9]/, 'the chain is packed');
  let deltas = 0;
  for (const idx of execFileSync('sh', ['-c', `ls ${join(dir, '.git', 'objects', 'pack')}/*.idx`], { encoding: 'utf8' })
    .trim()
    .split('\n')) {
    for (const line of git(dir, 'verify-pack', '-v', idx).split('\n')) if (/^[0-9a-f]{40} blob +\d+ \d+ \d+ \d+ [0-9a-f]{40}$/.test(line)) deltas++;
  }
  return deltas;
}

function gitPackedCopy(name: string): string {
  const dir = join(root, name);
  cpSync(vouchPacked, dir, { recursive: true });
  git(dir, 'repack', '-a', '-d', '-f', '-q');
  return dir;
}

async function serve(dir: string, more: Record<string, unknown> = {}): Promise<GatewayProcess> {
  const cfg = writeConfig(join(root, `${dir.split('/').pop()}-cfg`), {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir, public_key: pub, ...more },
  });
  return startGatewayProcess(['--config', cfg]);
}

async function lookup(g: GatewayProcess, i: number): Promise<number> {
  const url = `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`;
  const r = await fetch(`${g.url}/v1/endorsement?url=${encodeURIComponent(url)}`);
  const body = (await r.json()) as { index?: number };
  if (r.status === 200) assert.is(body.index, i, `lookup of block ${i}`);
  return r.status;
}

async function metric(g: GatewayProcess, result: string): Promise<number | null> {
  const text = await (await fetch(`${g.url}/metrics`)).text();
  const m = new RegExp(`^vouch_chain_whole_repacks_total\\{result="${result}"\\} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}

test.before(async () => {
  vouchPacked = join(root, 'vouch-packed');
  await createChain(
    vouchPacked,
    chain.blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(chain.checkpoint),
    { message: 'fixture\n', authorName: 't', authorEmail: 't@vouch.invalid', timestamp: 1_790_000_000 },
  );
});

test.after(() => rmSync(root, { recursive: true, force: true }));

test('a chain git packed is rewritten whole after ready: git finds no block delta, fsck is clean, every lookup answers', async () => {
  const dir = gitPackedCopy('git-packed');
  const before = deltaCount(dir);
  assert.ok(before > N / 2, `git stored most block blobs as deltas (${before} of ${N})`);
  const head = git(dir, 'rev-parse', 'HEAD').trim();
  const g = await serve(dir);
  try {
    for (const i of [1, 77, 200, N - 1]) assert.is(await lookup(g, i), 200, 'answers while the rewrite may run');
    await until('the rewrite', async () => /packs rewritten whole/.test(g.stdout() + g.stderr()), 60_000);
    assert.is(deltaCount(dir), 0, 'no blob stored as a delta any more');
    git(dir, 'fsck', '--strict', '--no-progress');
    assert.is(git(dir, 'rev-parse', 'HEAD').trim(), head, 'the branch is untouched');
    assert.is(git(dir, 'status', '--porcelain').trim(), '', 'git status is clean');
    for (let i = 1; i < N; i += 13) assert.is(await lookup(g, i), 200, `block ${i} after the rewrite`);
    assert.is(await metric(g, 'done'), 1);
    assert.is(await metric(g, 'failed'), 0);
  } finally {
    await g.stop();
  }
  // A restart finds the packs whole: nothing to do.
  const again = await serve(dir);
  try {
    await new Promise((r) => setTimeout(r, 1500));
    assert.not.match(again.stdout() + again.stderr(), /rewriting its packs/, 'not rewritten twice');
    assert.is(await metric(again, 'done'), 0);
  } finally {
    await again.stop();
  }
});

test('chain.repack_deltas: false leaves the deltas; a chain vouch packed is never rewritten', async () => {
  const dir = gitPackedCopy('kept');
  const before = deltaCount(dir);
  const g = await serve(dir, { repack_deltas: false });
  try {
    await new Promise((r) => setTimeout(r, 1500));
    assert.is(await lookup(g, 5), 200);
    assert.is(deltaCount(dir), before, 'the deltas stay');
    assert.not.match(g.stdout() + g.stderr(), /rewriting its packs/);
  } finally {
    await g.stop();
  }
  const packsBefore = git(vouchPacked, 'count-objects', '-v');
  const own = await serve(vouchPacked);
  try {
    await new Promise((r) => setTimeout(r, 1500));
    assert.not.match(own.stdout() + own.stderr(), /rewriting its packs/, 'whole blobs already: nothing to do');
    assert.is(deltaCount(vouchPacked), 0);
  } finally {
    await own.stop();
  }
  assert.is(git(vouchPacked, 'count-objects', '-v').replace(/size-garbage.*|garbage.*/g, ''), packsBefore.replace(/size-garbage.*|garbage.*/g, ''));
});

test('a gateway stopped during the rewrite stops git with it: no git left running, the packs as they were, fsck clean', async () => {
  const dir = gitPackedCopy('stopped');
  const before = deltaCount(dir);
  // A git that holds `repack` for a minute before it runs (every other git command passes straight through); the
  // sleep's argument is this run's own, so the check below never counts another process's `sleep 60`.
  const hold = `60.${String(process.pid).padStart(7, '0')}`;
  const bin = join(root, 'slow-git');
  mkdirSync(bin, { recursive: true });
  const real = execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim();
  writeFileSync(join(bin, 'git'), `#!/bin/sh\ncase " $* " in *" repack "*) sleep ${hold} ;; esac\nexec ${real} "$@"\n`, { mode: 0o755 });
  const cfg = writeConfig(join(root, 'stopped-cfg'), { listen: { host: '127.0.0.1', port: 0 }, chain: { dir, public_key: pub } });
  const g = await startGatewayProcess(['--config', cfg], { env: { PATH: `${bin}:${process.env.PATH}` } });
  await until('the rewrite to start', async () => /rewriting its packs/.test(g.stdout() + g.stderr()), 30_000);
  const running = () => spawnSync('pgrep', ['-f', `^sleep ${hold.replace('.', '[.]')}$`], { encoding: 'utf8' }).stdout.trim();
  assert.ok(running() !== '', 'the held git is running');
  assert.is(await g.stop('SIGTERM'), 0, 'a clean stop');
  await until('git to be gone', async () => running() === '', 10_000);
  assert.match(g.stdout() + g.stderr(), /stopped with the gateway/);
  assert.is(deltaCount(dir), before, 'the packs as they were');
  git(dir, 'fsck', '--strict', '--no-progress');
});

test.run();
