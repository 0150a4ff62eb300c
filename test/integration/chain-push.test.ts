/**
 * Tests of store/chain-push.ts against a real git smart-HTTP server (git
 * http-backend, pushes enabled), the real git CLI as the judge of what landed
 * (rev-parse, fsck --strict, clone, log) and `vouch verify` on a plain clone.
 * Chains are built with the real pieces (ChainRepo, the block builder,
 * appendSigned) in temporary directories; everything listens on 127.0.0.1.
 *
 * Owns: nothing outside its temporary directory.
 * Trusts: test/helpers/git-server.ts; a small delaying proxy defined here
 * (it also records every POST body, so pack sizes are measured outside
 * the code under test).
 * Must hold: the remote's main only ever moves forward along the local chain;
 * a diverged remote is refused and left as it was.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Block, formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint, buildEndorseBlock } from '../../chain/build.ts';
import { utf8 } from '../../chain/encoding.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned, commitFor } from '../../store/chain-append.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainPusher, type PushLog, lsRemote, makeDelta, pushNew } from '../../store/chain-push.ts';
import { GitServer } from '../helpers/git-server.ts';
import { T0, testSigner } from '../helpers/chain-fixture.ts';
import { refusal } from '../helpers/refusal.ts';
import { until } from '../helpers/gateway-process.ts';
import { gitWith } from '../helpers/processes.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'vouch-push-test-'));
const signer = testSigner();
let gs: GitServer;
let proxy: Proxy;
const pushers: ChainPusher[] = [];

// ---------------------------------------------------------------- helpers

const git = (dir: string, ...args: string[]): string => gitWith({ HOME: work }, dir, ...args).trim();

const posts = () => gs.requests.filter((r) => r.startsWith('POST ') && r.endsWith('/git-receive-pack')).length;

/** A chain built with the real builder and appended with appendSigned, one commit per block. */
class Chain {
  private constructor(
    readonly dir: string,
    public repo: ChainRepo,
    private head: Block,
    private now: number,
  ) {}

  /** Open the repository again (after git itself rewrote the object store). */
  async reopen(): Promise<void> {
    this.repo = await ChainRepo.open(this.dir);
  }

  static async create(name: string): Promise<Chain> {
    const dir = join(work, name);
    const authority = buildAuthorityBlock({ signer, backend: nodeBackend, now: T0, uns: 'acme/chain' });
    const cp = buildCheckpoint({ head: authority, signer, now: T0 });
    const repo = await ChainRepo.init(dir, [{ index: 0, content: formatBlockFile(authority) }], formatCheckpointFile(cp), commitFor([authority], T0));
    return new Chain(dir, repo, authority, T0);
  }

  /** Appends `n` single-block commits; returns their commit ids. */
  async append(n = 1, onCommit?: (commit: string) => void): Promise<string[]> {
    const out: string[] = [];
    for (let k = 0; k < n; k++) {
      this.now += 1000;
      const i = this.head.index + 1;
      const block = buildEndorseBlock({
        prev: this.head,
        signer,
        backend: nodeBackend,
        now: this.now,
        entries: [
          {
            url: `https://a.example/pkg/artifact-${i}.tgz`,
            artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(`artifact ${i}`)),
            name: 'acme/pkg',
            semver: `1.${i}.0`,
            license: 'MIT',
          },
        ],
      });
      const { commit } = await appendSigned(this.repo, [block], buildCheckpoint({ head: block, signer, now: this.now }), this.now);
      this.head = block;
      out.push(commit);
      onCommit?.(commit);
    }
    return out;
  }

  get commit(): string {
    return this.repo.head;
  }
}

interface Proxy {
  server: Server;
  url: (name: string) => string;
  delayMs: number;
  bodies: { path: string; bytes: number; objects: number | null }[];
}

/** Objects in the pack of a receive-pack request body (after the command pkt-lines and the flush). */
function packObjects(body: Buffer): number | null {
  let off = 0;
  while (off + 4 <= body.length) {
    const len = parseInt(body.toString('latin1', off, off + 4), 16);
    off += len === 0 ? 4 : len;
    if (len === 0) break;
  }
  if (body.toString('latin1', off, off + 4) !== 'PACK') return null;
  return body.readUInt32BE(off + 8);
}

/** A proxy in front of the git server that can delay every request; records POST bodies. */
async function startProxy(target: () => number): Promise<Proxy> {
  const p: Proxy = { server: createServer(), url: (name) => `http://127.0.0.1:${(p.server.address() as AddressInfo).port}/${name}`, delayMs: 0, bodies: [] };
  p.server.on('request', (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (req.method === 'POST') p.bodies.push({ path: req.url ?? '', bytes: body.length, objects: packObjects(body) });
      setTimeout(() => {
        const headers = { ...req.headers, 'content-length': String(body.length) };
        delete headers['transfer-encoding'];
        const up = httpRequest({ host: '127.0.0.1', port: target(), method: req.method, path: req.url, headers }, (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        });
        up.on('error', () => {
          if (!res.headersSent) res.writeHead(502).end();
          else res.destroy();
        });
        up.end(body);
      }, p.delayMs);
    });
  });
  await new Promise<void>((r) => p.server.listen(0, '127.0.0.1', r));
  return p;
}

function newPusher(
  dir: string,
  remote: string,
  retry = { initialMs: 30, maxMs: 300 },
): { pusher: ChainPusher; logs: { level: string; msg: string; fields?: Record<string, unknown> }[] } {
  const logs: { level: string; msg: string; fields?: Record<string, unknown> }[] = [];
  const log: PushLog = {
    info: (msg, fields) => logs.push({ level: 'info', msg, fields }),
    warn: (msg, fields) => logs.push({ level: 'warn', msg, fields }),
    error: (msg, fields) => logs.push({ level: 'error', msg, fields }),
  };
  const pusher = new ChainPusher({ dir, remote, log, retry });
  pushers.push(pusher);
  return { pusher, logs };
}

function assertRemoteAt(bare: string, head: string): void {
  assert.is(git(bare, 'rev-parse', 'main'), head, 'remote main is not the local head');
  const fsck = spawnSync('git', ['-C', bare, 'fsck', '--strict', '--no-progress'], { encoding: 'utf8' });
  assert.is(fsck.status, 0, `git fsck --strict failed: ${fsck.stderr}`);
  assert.is(fsck.stderr.trim(), '', `git fsck --strict complained: ${fsck.stderr}`);
}

// ---------------------------------------------------------------- setup

let a: Chain;
let bareA = '';

test.before(async () => {
  gs = await GitServer.start(join(work, 'srv'));
  proxy = await startProxy(() => gs.port);
  a = await Chain.create('a');
  bareA = gs.initBare('a.git');
});

test.after(async () => {
  for (const p of pushers) await p.stop();
  await new Promise<void>((r) => proxy.server.close(() => r()));
  proxy.server.closeAllConnections();
  await gs.stop();
  rmSync(work, { recursive: true, force: true });
});

// ---------------------------------------------------------------- deltas

/** Applies a git delta (gitformat-pack), written from the format description, independently of the encoder. */
function applyDelta(base: Buffer, delta: Buffer): Buffer {
  let at = 0;
  const size = (): number => {
    let n = 0;
    let shift = 0;
    let b: number;
    do {
      b = delta[at++]!;
      n += (b & 0x7f) * 2 ** shift;
      shift += 7;
    } while (b & 0x80);
    return n;
  };
  assert.is(size(), base.length, 'delta names the base size');
  const want = size();
  const out: Buffer[] = [];
  while (at < delta.length) {
    const op = delta[at++]!;
    if (op & 0x80) {
      let offset = 0;
      let n = 0;
      for (let k = 0; k < 4; k++) if (op & (1 << k)) offset += delta[at++]! * 2 ** (8 * k);
      for (let k = 0; k < 3; k++) if (op & (1 << (4 + k))) n += delta[at++]! * 2 ** (8 * k);
      out.push(base.subarray(offset, offset + (n || 0x10000)));
    } else {
      assert.ok(op > 0, 'insert of 0 bytes is reserved');
      out.push(delta.subarray(at, at + op));
      at += op;
    }
  }
  const target = Buffer.concat(out);
  assert.is(target.length, want, 'delta names the target size');
  return target;
}

test('tree deltas: copy prefix, insert the change, copy suffix; round-trip through an independent decoder', () => {
  let seed = 7;
  const rnd = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => rnd(256)));
  for (let k = 0; k < 300; k++) {
    const base = bytes(rnd(80_000) + 1);
    const cut = rnd(base.length);
    const drop = rnd(Math.min(200, base.length - cut) + 1);
    const target = Buffer.concat([base.subarray(0, cut), bytes(rnd(300)), base.subarray(cut + drop)]);
    const d = makeDelta(base, target);
    if (d === null) continue;
    assert.ok(applyDelta(base, d).equals(target), `round trip ${k}`);
    assert.ok(d.length < 400 + 20, `delta of a small change is small (${d.length})`);
  }
  // An append to a 1000-entry shard tree (42 bytes per entry): a delta of a few dozen bytes.
  const entry = (i: number) => Buffer.concat([Buffer.from(`100644 ${String(i).padStart(9, '0')}.json\0`), createHash('sha1').update(String(i)).digest()]);
  const tree = (n: number) => Buffer.concat(Array.from({ length: n }, (_, i) => entry(i)));
  const d = makeDelta(tree(999), tree(1000))!;
  assert.ok(applyDelta(tree(999), d).equals(tree(1000)));
  assert.ok(d.length < 60, `append delta is ${d.length} bytes`);
  assert.is(makeDelta(bytes(100), bytes(100)), null, 'unrelated contents: no delta');
});

// ---------------------------------------------------------------- pushNew

test('first push to an empty remote sends the whole history once; then nothing is left to send', async () => {
  await a.append(3);
  assert.equal((await lsRemote(gs.url('a.git'))).main, null, 'a fresh bare repository has no main');
  const r = await pushNew(a.dir, gs.url('a.git'), { remoteHead: null, localHead: a.commit });
  assert.ok(r.pushed);
  assert.ok(r.fullHistory);
  assert.is(r.previousRemoteHead, null);
  assert.is(r.commits, 4);
  assert.match(r.note ?? '', /whole history/);
  // Every object the remote holds came in this pack: 4 commits, 4 trees each, 4 blocks, 4 checkpoints.
  const counts = git(bareA, 'count-objects', '-v');
  const stored = Number(/^count: (\d+)/m.exec(counts)?.[1]) + Number(/^in-pack: (\d+)/m.exec(counts)?.[1]);
  assert.is(r.objects, 4 * 7, 'objects sent'); // per commit: the commit, 4 trees (root, blocks, two shards), the block and the checkpoint
  assert.is(stored, r.objects, 'objects on the remote');
  assertRemoteAt(bareA, a.commit);

  const again = await pushNew(a.dir, gs.url('a.git'), { remoteHead: a.commit, localHead: a.commit });
  assert.is(again.pushed, false);
  assert.is(again.objects, 0);
});

test('ChainPusher: appends + notify + flush put the local head on the remote; a plain clone verifies and logs every commit', async () => {
  const { pusher, logs } = newPusher(a.dir, gs.url('a.git'));
  await pusher.flush(); // learns the remote head from info/refs: already in sync
  assert.is(pusher.status().remoteHead, a.commit);
  assert.is(pusher.status().backlog, 0);
  for (let k = 0; k < 5; k++) {
    const [c] = await a.append(1);
    pusher.notify(c!);
  }
  await pusher.flush();
  const s = pusher.status();
  assert.is(s.remoteHead, a.commit);
  assert.is(s.localHead, a.commit);
  assert.is(s.backlog, 0);
  assert.is(s.consecutiveFailures, 0);
  assert.is(s.lastError, null);
  assert.ok(s.lastPush && s.lastPush.head === a.commit && !s.lastPush.fullHistory);
  assert.ok(logs.some((l) => l.msg === 'chain pushed'));
  assertRemoteAt(bareA, a.commit);

  const clone = join(work, 'clone-a');
  // Asynchronously: the git server runs in this process.
  await promisify(execFile)('git', ['clone', '-q', gs.url('a.git'), clone], { timeout: 30_000 });
  const v = spawnSync(process.execPath, [join(root, 'tools', 'vouch.js'), 'verify', '--chain', clone], { encoding: 'utf8', cwd: root });
  assert.is(v.status, 0, `vouch verify of the clone failed: ${v.stdout}${v.stderr}`);
  assert.is(git(clone, 'rev-list', '--count', 'HEAD'), git(a.dir, 'rev-list', '--count', 'HEAD'));
  const log = git(clone, 'log', '--format=%s');
  for (let i = 1; i < a.repo.size; i++) assert.ok(log.includes(`block ${i}: endorse acme/pkg 1.${i}.0`), `clone log lacks block ${i}`);
  await pusher.stop();
});

test('coalescing: 20 appends while pushes are slow go out in a few pushes', async () => {
  const { pusher } = newPusher(a.dir, proxy.url('a.git'));
  await pusher.flush();
  proxy.delayMs = 150;
  const before = posts();
  for (let k = 0; k < 20; k++) {
    const [c] = await a.append(1);
    pusher.notify(c!);
  }
  await pusher.flush();
  proxy.delayMs = 0;
  const pushes = posts() - before;
  assert.ok(pushes >= 1 && pushes <= 4, `20 appends took ${pushes} pushes`);
  console.log(`  coalescing: 20 appends against a remote 150 ms slower per request went out in ${pushes} push(es)`);
  assert.is(pusher.status().backlog, 0);
  assertRemoteAt(bareA, a.commit);
  await pusher.stop();
});

test('remote down, then up: retried with backoff, nothing lost, backlog back to 0, one push for all', async () => {
  const { pusher, logs } = newPusher(a.dir, gs.url('a.git'), { initialMs: 20, maxMs: 200 });
  await pusher.flush();
  const remoteBefore = git(bareA, 'rev-parse', 'main');
  gs.down = true;
  gs.dropConnections();
  const commits: string[] = [];
  for (let k = 0; k < 20; k++) {
    const [c] = await a.append(1);
    commits.push(c!);
    // Never throws, never waits: it returns nothing to await, and at once (the bound is loose: a loaded machine
    // pauses any call for tens of ms; waiting for the down remote would never return).
    const t = performance.now();
    const returned: unknown = pusher.notify(c!);
    assert.is(returned, undefined, 'notify returns nothing to await');
    assert.ok(performance.now() - t < 250, 'notify returned at once');
  }
  await until('three failed attempts', () => pusher.status().consecutiveFailures >= 3, 15_000, 20);
  const s = pusher.status();
  assert.is(s.backlog, 20);
  assert.ok(s.lastError && s.lastError.code === 'io_error', JSON.stringify(s.lastError));
  assert.is(git(bareA, 'rev-parse', 'main'), remoteBefore, 'nothing landed while down');
  assert.ok(logs.some((l) => l.level === 'warn' && l.msg === 'chain push failed'));
  const rejected = await refusal(pusher.flush());
  assert.is(rejected.code, 'io_error');

  const postsBefore = posts();
  gs.down = false;
  await until('the retry to catch up', () => pusher.status().backlog === 0 && pusher.status().consecutiveFailures === 0, 15_000, 20);
  assert.is(posts() - postsBefore, 1, 'all 20 appends went in one push');
  assertRemoteAt(bareA, a.commit);
  assert.is(git(bareA, 'rev-list', '--count', `${remoteBefore}..main`), '20');
  assert.is(pusher.status().lastError, null);
  assert.ok(logs.some((l) => l.msg === 'chain push recovered'));
  await pusher.flush();
  await pusher.stop();
});

test('one append at a 2,000-commit chain pushes a handful of objects, also when the history is packed locally', async () => {
  const t0 = Date.now();
  const { pusher } = newPusher(a.dir, gs.url('a.git'));
  await a.append(1999 - Number(git(a.dir, 'rev-list', '--count', 'HEAD')));
  assert.is(git(a.dir, 'rev-list', '--count', 'HEAD'), '1999');
  const t1 = Date.now();
  pusher.notify(a.commit);
  await pusher.flush();
  const t2 = Date.now();
  const big = pusher.status().lastPush!;
  assertRemoteAt(bareA, a.commit);
  await pusher.stop();

  // Pack the local history (objects now come through isomorphic-git) and push one append through the recording proxy.
  git(a.dir, 'gc', '-q');
  await a.reopen(); // ChainRepo remembers which object directories exist; gc removed the emptied ones
  assert.is(git(a.dir, 'count-objects').split(' ')[0], '0', 'no loose objects left');
  await a.append(1); // block 1999: the leaf tree blocks/000/001 now holds 1000 entries
  assert.is(git(a.dir, 'rev-list', '--count', 'HEAD'), '2000');
  proxy.bodies.length = 0;
  const r = await pushNew(a.dir, proxy.url('a.git'), { remoteHead: big.head, localHead: a.commit });
  assert.is(r.commits, 1);
  // commit + root, blocks, blocks/000, blocks/000/001 trees + block blob + checkpoint blob
  assert.is(r.objects, 7);
  const sent = proxy.bodies.find((b) => b.path.endsWith('/git-receive-pack'))!;
  assert.is(sent.objects, 7, 'the pack on the wire holds 7 objects');
  assert.is(sent.bytes, r.requestBytes);
  assert.ok(sent.bytes < 64 * 1024, `one append sent ${sent.bytes} bytes`);
  assert.ok(big.bytes > 20 * sent.bytes, `catching up ~1,970 commits (${big.bytes} B) should dwarf one append (${sent.bytes} B)`);
  assertRemoteAt(bareA, a.commit);
  console.log(
    `  2,000-commit chain: one append pushed ${r.objects} objects, ${sent.bytes} bytes in ${r.timings.totalMs.toFixed(0)} ms (walk ${r.timings.walkMs.toFixed(1)} ms); catching up ${big.commits} commits sent ${big.bytes} bytes in ${t2 - t1} ms; appends ${t1 - t0} ms`,
  );
});

test('the remote is not where we think: behind or ahead on our chain, the push starts from its actual head', async () => {
  const b = await Chain.create('b');
  const commits = await b.append(6);
  const bare = gs.initBare('b.git');
  git(b.dir, 'push', '-q', bare, `${commits[1]}:refs/heads/main`);
  // We think the remote is empty; it is at commit 2 of 7.
  const r1 = await pushNew(b.dir, gs.url('b.git'), { remoteHead: null, localHead: commits[3]! });
  assert.ok(r1.pushed && !r1.fullHistory);
  assert.is(r1.previousRemoteHead, commits[1]);
  assert.is(r1.commits, 2);
  assert.match(r1.note ?? '', /pushed from there/);
  assertRemoteAt(bare, commits[3]!);
  // We think the remote is at commit 6 (it is at 4): still only what it lacks.
  const r2 = await pushNew(b.dir, gs.url('b.git'), { remoteHead: commits[4]!, localHead: b.commit });
  assert.is(r2.previousRemoteHead, commits[3]);
  assert.is(r2.commits, 2);
  assertRemoteAt(bare, b.commit);
});

test('a diverged remote is refused with a clear error and never force-pushed', async () => {
  const c = await Chain.create('c');
  await c.append(2);
  const bare = gs.initBare('c.git');
  await pushNew(c.dir, gs.url('c.git'), { remoteHead: null, localHead: c.commit });
  const known = c.commit;
  // Someone else pushes a commit of their own on top.
  const other = join(work, 'other-c');
  assert.is(spawnSync('git', ['clone', '-q', bare, other]).status, 0);
  git(other, '-c', 'user.name=Mallory', '-c', 'user.email=m@example.invalid', 'commit', '-q', '--allow-empty', '-m', 'not a block');
  git(other, 'push', '-q', 'origin', 'main');
  const foreign = git(bare, 'rev-parse', 'main');
  await c.append(1);

  const e = await refusal(pushNew(c.dir, gs.url('c.git'), { remoteHead: known, localHead: c.commit }));
  assert.is(e.code, 'history_rewritten');
  assert.match(e.message, /never force/);
  assert.is(e.evidence?.remoteHead, foreign);
  assert.is(git(bare, 'rev-parse', 'main'), foreign, 'the remote was left as it was');

  const { pusher, logs } = newPusher(c.dir, gs.url('c.git'));
  const postsBefore = posts();
  pusher.notify(c.commit);
  const f = await refusal(pusher.flush());
  assert.is(f.code, 'history_rewritten');
  const s = pusher.status();
  assert.is(s.lastError?.reason, 'diverged');
  assert.ok(s.consecutiveFailures >= 1);
  assert.ok(logs.some((l) => l.level === 'error' && /diverged/.test(l.msg)));
  assert.is(posts(), postsBefore, 'no push was even attempted');
  assert.is(git(bare, 'rev-parse', 'main'), foreign);
  await pusher.stop();
  // Also when we hold the foreign commit ourselves (fetched), as it is not on our first-parent chain.
  git(c.dir, 'fetch', '-q', bare, 'main');
  const g = await refusal(pushNew(c.dir, gs.url('c.git'), { remoteHead: known, localHead: c.commit }));
  assert.is(g.code, 'history_rewritten');
  assert.match(g.message, /not on the local first-parent chain/);
  assert.is(git(bare, 'rev-parse', 'main'), foreign);
});

test('a remote rewound to an older commit of ours is caught up; stop() ends the pusher', async () => {
  const d = await Chain.create('d');
  const commits = await d.append(4);
  const bare = gs.initBare('d.git');
  await pushNew(d.dir, gs.url('d.git'), { remoteHead: null, localHead: d.commit });
  git(bare, 'update-ref', 'refs/heads/main', commits[0]!); // an operator rewinds the remote
  const { pusher } = newPusher(d.dir, gs.url('d.git'));
  await pusher.flush();
  assertRemoteAt(bare, d.commit);
  assert.is(pusher.status().lastPush?.commits, 3);
  await pusher.stop();
  pusher.notify(commits[0]!); // no-op, no throw
  assert.is((await refusal(pusher.flush())).code, 'io_error');
  assert.ok(pusher.status().stopped);
});

test('refuses bad input and unreachable remotes with clear errors', async () => {
  assert.is((await refusal(pushNew(a.dir, gs.url('a.git'), { remoteHead: null, localHead: 'nope' }))).code, 'bad_request');
  assert.is((await refusal(pushNew(a.dir, 'ftp://x/y', { remoteHead: null, localHead: a.commit }))).code, 'bad_request');
  const missing = await refusal(pushNew(a.dir, gs.url('nothing-here.git'), { remoteHead: null, localHead: a.commit }));
  assert.is(missing.code, 'io_error');
  assert.match(missing.message, /HTTP 404/);
  const dead = await refusal(
    pushNew(a.dir, 'http://user:secret@127.0.0.1:9/x.git', { remoteHead: null, localHead: a.commit, timeouts: { connectMs: 500, refsMs: 1000 } }),
  );
  assert.is(dead.code, 'io_error');
  assert.not.match(dead.message, /secret/);
});

test.run();
