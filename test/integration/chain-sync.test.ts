/**
 * Tests of the mirror side: `ChainRepo.clone` / `fetch` / `fastForward`
 * (store/chain-repo.ts) and `ChainSync` / `prepareMirror`
 * (gateway/chain/mirror-sync.ts), against a real git smart-HTTP server
 * (git http-backend on 127.0.0.1), chains built with the real builder and
 * pushed with the git CLI, and the real `vouch verify`.
 *
 * Owns: nothing outside its temporary directory.
 * Trusts: the installed git as the judge of repository validity.
 * Must hold: a mirror only ever serves and checks out a remote head that
 * extends its verified head and verifies; everything else is refused with
 * the right code, logged with evidence, and the old head keeps serving.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GitServer } from '../helpers/git-server.ts';
import { buildLongChain, endorseNext, testSigner, T0 } from '../helpers/chain-fixture.ts';
import { memoryLog, type LogLine } from '../helpers/memory-log.ts';
import { until } from '../helpers/gateway-process.ts';
import { gitIn } from '../helpers/processes.ts';
import { buildCheckpoint, buildRevokeBlock, computeRecordHash } from '../../chain/build.ts';
import { formatBlockFile, formatCheckpointFile, type Block } from '../../chain/block.ts';
import { base64Encode, utf8 } from '../../chain/encoding.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned, commitFor } from '../../store/chain-append.ts';
import { VouchError } from '../../chain/errors.ts';
import { ChainState } from '../../gateway/chain/verified-state.ts';
import { ChainSync, prepareMirror } from '../../gateway/chain/mirror-sync.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-chain-sync-'));
const repoRoot = new URL('../..', import.meta.url).pathname;
const signer = testSigner();
const pub = base64Encode(signer.publicKey);
let server: GitServer;
let seq = 0;
const fresh = (name: string) => join(work, `${name}-${seq++}`);

/** git without blocking the event loop (the git server runs in this process). */
function gitAsync(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn('git', args, { env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_TERMINAL_PROMPT: '0' } });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    c.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    c.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

const gitSync = gitIn;

async function push(dir: string, url: string, force = false): Promise<void> {
  const r = await gitAsync(['-C', dir, 'push', '-q', ...(force ? ['--force'] : []), url, 'main']);
  assert.is(r.status, 0, `git push: ${r.stderr}`);
}

/** Clean for git: empty status, index = HEAD, fsck finds nothing. */
function assertGitClean(dir: string, label = ''): void {
  assert.is(gitSync(dir, 'status', '--porcelain', '--untracked-files=all'), '', `${label} git status`);
  assert.is(gitSync(dir, 'diff-index', '--cached', 'HEAD'), '', `${label} diff-index`);
  const fsck = spawnSync('git', ['-C', dir, 'fsck', '--strict', '--no-progress'], { encoding: 'utf8' });
  assert.is(fsck.status, 0, `${label} fsck: ${fsck.stderr}`);
  assert.not.match(`${fsck.stdout}${fsck.stderr}`, /error|missing|broken|bad|invalid/i, `${label} fsck output`);
}

function vouchVerify(dir: string, key = pub): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [join(repoRoot, 'tools', 'vouch.js'), 'verify', '--chain', dir, '--public-key', key], {
    encoding: 'utf8',
    cwd: repoRoot,
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

/** An endorse block after `prev`. */
const endorse = (prev: Block, tag: string, s = signer): Block => endorseNext(prev, s, tag, { space: 'sync', name: 'acme/sync', major: 2 });

/** The authority's side: a chain repository plus the blocks in memory, pushed to a bare repository on the server. */
class Authority {
  blocks: Block[];
  repo!: ChainRepo;
  readonly dir = fresh('authority');
  constructor(
    readonly url: string,
    n: number,
  ) {
    this.blocks = buildLongChain(n).blocks;
  }

  static async create(name: string, n: number): Promise<Authority> {
    server.initBare(`${name}.git`);
    const a = new Authority(server.url(`${name}.git`), n);
    const cp = buildCheckpoint({ head: a.blocks[n - 1]!, signer, now: T0 + n * 1000 });
    a.repo = await ChainRepo.init(
      a.dir,
      a.blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
      formatCheckpointFile(cp),
      commitFor([a.blocks[0]!], T0),
    );
    await push(a.dir, a.url);
    return a;
  }

  get head(): Block {
    return this.blocks[this.blocks.length - 1]!;
  }

  /** Append blocks (honest by default) with a correct checkpoint, and push. */
  async append(blocks: Block[], opts: { push?: boolean; checkpointFor?: Block } = {}): Promise<void> {
    const cp = buildCheckpoint({ head: opts.checkpointFor ?? blocks[blocks.length - 1]!, signer, now: T0 + 10_000_000 });
    await appendSigned(this.repo, blocks, cp, T0 + 10_000_000);
    this.blocks.push(...blocks);
    if (opts.push !== false) await push(this.dir, this.url);
  }

  async appendHonest(k: number, tag = 'honest'): Promise<Block[]> {
    const out: Block[] = [];
    let prev = this.head;
    for (let j = 0; j < k; j++) out.push((prev = endorse(prev, tag)));
    await this.append(out);
    return out;
  }

  /** Replace the remote's history with `blocks` (a new repository, force-pushed); the authority continues from it. */
  async rewrite(blocks: Block[], checkpointHead = blocks[blocks.length - 1]!): Promise<void> {
    const dir = fresh('rewrite');
    const cp = buildCheckpoint({ head: checkpointHead, signer, now: T0 + 20_000_000 });
    const repo = await ChainRepo.init(
      dir,
      blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
      formatCheckpointFile(cp),
      commitFor([blocks[0]!], T0),
    );
    await push(dir, this.url, true);
    this.repo = repo;
    this.blocks = [...blocks];
    (this as { dir: string }).dir = dir;
  }
}

async function expectCode(p: Promise<unknown>, code: string): Promise<VouchError> {
  try {
    await p;
  } catch (e) {
    if (!(e instanceof VouchError)) throw e;
    assert.is(e.code, code, e.message);
    return e;
  }
  throw new Error(`expected ${code}, nothing thrown`);
}

/** A mirror: clone, cold-load, and a ChainSync on it with a controllable clock. */
async function mirrorOf(a: Authority, opts: { interval?: number } = {}) {
  const dir = fresh('mirror');
  const { repo, cloned } = await prepareMirror(dir, a.url, { pinnedPublicKey: pub });
  assert.ok(cloned);
  const { state } = await ChainState.load(repo, { pinnedPublicKey: pub });
  const log = memoryLog();
  const clock = { t: Date.now() };
  const sync = new ChainSync({ repo, remote: a.url, state, pinnedPublicKey: pub, intervalSeconds: opts.interval ?? 3600, log, now: () => clock.t });
  return { dir, repo, state, log, clock, sync };
}

test.before(async () => {
  mkdirSync(join(work, 'srv'));
  server = await GitServer.start(join(work, 'srv'));
});

test.after(async () => {
  await server.stop();
  rmSync(work, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------

test('clone: opens without repairs, git status clean, fsck clean, vouch verify passes, ChainState loads with the pinned key', async () => {
  const a = await Authority.create('clone', 40);
  const dir = fresh('clone');
  const repo = await ChainRepo.clone(a.url, dir);
  assert.is(repo.size, 40);
  assert.is(repo.head, gitSync(a.dir, 'rev-parse', 'HEAD').trim());
  assert.equal(repo.warnings, []);
  assertGitClean(dir, 'after clone');
  assert.is(gitSync(dir, 'rev-parse', 'refs/remotes/origin/main').trim(), repo.head);
  assert.is(readFileSync(join(dir, 'checkpoint.json'), 'utf8'), readFileSync(join(a.dir, 'checkpoint.json'), 'utf8'));
  const reopened = await ChainRepo.open(dir);
  assert.equal(reopened.repairs, [], 'a fresh clone needs no repair');
  const { state, report } = await ChainState.load(reopened, { pinnedPublicKey: pub });
  assert.is(report.mode, 'cold');
  assert.is(state.size, 40);
  assert.is(state.head.record_hash, a.head.record_hash);
  const v = vouchVerify(dir);
  assert.is(v.status, 0, v.out);
  // plain git works in it: log, and a git fetch from the configured origin
  assert.match(gitSync(dir, 'log', '--oneline'), /block 0/);
  const f = await gitAsync(['-C', dir, 'fetch', '-q', 'origin']);
  assert.is(f.status, 0, f.stderr);
});

test('clone refuses a non-empty directory and a remote without a chain; a failed clone leaves the directory as it was', async () => {
  const a = await Authority.create('refuse', 3);
  const busy = fresh('busy');
  mkdirSync(busy);
  writeFileSync(join(busy, 'x'), 'x');
  await expectCode(ChainRepo.clone(a.url, busy), 'chain_exists');
  server.initBare('empty.git');
  const d1 = fresh('empty');
  await expectCode(ChainRepo.clone(server.url('empty.git'), d1), 'not_a_chain');
  assert.not.ok(existsSync(d1), 'nothing left behind');
  const d2 = fresh('nohost');
  mkdirSync(d2);
  await expectCode(ChainRepo.clone(server.url('missing.git'), d2), 'io_error');
  assert.equal(spawnSync('ls', ['-A', d2], { encoding: 'utf8' }).stdout, '', 'empty directory stays empty');
});

test('prepareMirror: clones into a missing dir, opens an existing chain, refuses other content, redoes an interrupted clone', async () => {
  const a = await Authority.create('prepare', 5);
  const dir = fresh('prep');
  const first = await prepareMirror(dir, a.url, { pinnedPublicKey: pub });
  assert.ok(first.cloned);
  const second = await prepareMirror(dir, a.url, { pinnedPublicKey: pub });
  assert.not.ok(second.cloned);
  assert.is(second.repo.head, first.repo.head);

  const junk = fresh('junk');
  mkdirSync(junk);
  writeFileSync(join(junk, 'notes.txt'), 'hello');
  const e1 = await expectCode(prepareMirror(junk, a.url), 'not_a_chain');
  assert.match(e1.message, /not a vouch chain/);
  const otherGit = fresh('othergit');
  mkdirSync(otherGit);
  gitSync(otherGit, 'init', '-q', '-b', 'main');
  await expectCode(prepareMirror(otherGit, a.url), 'not_a_chain');
  const file = fresh('file');
  writeFileSync(file, 'x');
  await expectCode(prepareMirror(file, a.url), 'not_a_chain');

  // A clone killed half-way leaves its marker: open() refuses, prepareMirror clones again.
  const half = fresh('half');
  await ChainRepo.clone(a.url, half);
  writeFileSync(join(half, '.git', 'vouch-clone-incomplete'), 'cloning\n');
  rmSync(join(half, 'blocks'), { recursive: true, force: true });
  await expectCode(ChainRepo.open(half), 'not_a_chain');
  const redone = await prepareMirror(half, a.url, { pinnedPublicKey: pub });
  assert.ok(redone.cloned);
  assert.is(redone.repo.size, 5);
  assertGitClean(half, 'after re-clone');
});

test('wrong pinned key: prepareMirror and ChainState.load refuse with untrusted_authority', async () => {
  const a = await Authority.create('pinned', 4);
  const other = base64Encode(nodeSigner('x', privateKeyFromSeed(new Uint8Array(32).fill(7))).publicKey);
  const dir = fresh('wrongkey');
  const e = await expectCode(prepareMirror(dir, a.url, { pinnedPublicKey: other }), 'untrusted_authority');
  assert.is(e.index, 0);
  const repo = await ChainRepo.open(dir);
  await expectCode(ChainState.load(repo, { pinnedPublicKey: other }), 'untrusted_authority');
});

test('sync: up to date, then picks up appended blocks (one, several commits, a big pack) without touching the working tree before it verifies', async () => {
  const a = await Authority.create('sync', 400);
  const m = await mirrorOf(a);
  let out = await m.sync.syncNow();
  assert.is(out.result, 'up_to_date');
  assert.is(m.sync.status().lastError, null);
  assert.ok(m.sync.status().lastSuccess !== null);

  const [b400] = await a.appendHonest(1);
  out = await m.sync.syncNow();
  assert.is(out.result, 'updated', JSON.stringify(out));
  assert.is(m.state.size, 401);
  assert.is(m.state.head.record_hash, b400!.record_hash);
  assert.is(m.state.index.versions(b400!.payload.endorsements[0]!.artifact_url)[0]?.block.record_hash, b400!.record_hash);
  assert.is(m.state.index.block(400)?.record_hash, b400!.record_hash);
  assert.is(m.repo.size, 401);
  assert.is(m.state.checkpoint?.size, 401);
  assertGitClean(m.dir, 'after one block');

  // several pushes between syncs: only the newest commit comes (depth 1), git stays valid
  await a.appendHonest(1);
  await a.appendHonest(2);
  await a.appendHonest(1);
  out = await m.sync.syncNow();
  assert.is(out.result, 'updated');
  assert.is(m.state.size, 405);
  assertGitClean(m.dir, 'after several commits');

  // a big append arrives as a pack, thin (deltas against the leaf tree we have): stored completed, as git needs it
  const packsBefore = gitSync(m.dir, 'count-objects', '-v').match(/packs: (\d+)/)![1];
  await a.appendHonest(150, 'bulk');
  out = await m.sync.syncNow();
  assert.is(out.result, 'updated');
  assert.is(m.state.size, 555);
  assert.is(Number(gitSync(m.dir, 'count-objects', '-v').match(/packs: (\d+)/)![1]), Number(packsBefore) + 1);
  assertGitClean(m.dir, 'after a pack');
  const v = vouchVerify(m.dir);
  assert.is(v.status, 0, v.out);
  assert.is((await m.sync.syncNow()).result, 'up_to_date');
  const st = m.sync.status();
  assert.is(st.localSize, 555);
  assert.is(st.remoteSize, 555);
  assert.is(st.remoteHead, gitSync(a.dir, 'rev-parse', 'HEAD').trim());
  assert.is(st.consecutiveFailures, 0);

  // a restart of the mirror is warm and sees the same head
  const reopened = await ChainRepo.open(m.dir);
  assert.equal(reopened.repairs, []);
  const again = await ChainState.load(reopened, { pinnedPublicKey: pub });
  assert.is(again.report.mode, 'warm');
  assert.is(again.state.size, 555);
});

function refusedLine(log: { lines: LogLine[] }): LogLine {
  const line = [...log.lines].reverse().find((l) => l.level === 'error');
  assert.ok(line, 'a refusal is logged as an error');
  return line!;
}

async function assertRefused(
  m: Awaited<ReturnType<typeof mirrorOf>>,
  code: string,
  sizeBefore: number,
  headBefore: string,
  commitBefore: string,
  messageRe?: RegExp,
): Promise<LogLine> {
  const out = await m.sync.syncNow();
  assert.is(out.result, 'refused', JSON.stringify(out));
  if (out.result !== 'refused') throw new Error('unreachable');
  assert.is(out.code, code, out.message);
  if (messageRe) assert.match(out.message, messageRe);
  assert.is(m.state.size, sizeBefore, 'serving state unchanged');
  assert.is(m.state.head.record_hash, headBefore);
  assert.is(m.repo.head, commitBefore, 'branch not moved');
  assert.is(gitSync(m.dir, 'rev-parse', 'HEAD').trim(), commitBefore);
  assertGitClean(m.dir, `after refusing ${code}`);
  const st = m.sync.status();
  assert.is(st.lastError?.code, code);
  const line = refusedLine(m.log);
  assert.is(line.fields.code, code);
  assert.is(line.fields.local_size, sizeBefore);
  assert.is(line.fields.local_head, headBefore);
  assert.is(line.fields.local_commit, commitBefore);
  assert.is(line.fields.remote_commit, out.commit);
  assert.ok(typeof line.fields.remote_size === 'number');
  return line;
}

test('sync refuses rewritten history (re-sealed block, dropped newest block), a bad signature and a bad checkpoint; an honest push is accepted again', async () => {
  const a = await Authority.create('rewrite', 12);
  const m = await mirrorOf(a);
  const size = m.state.size;
  const head = m.state.head.record_hash;
  const commit = m.repo.head;
  const honest = [...a.blocks];

  // 1. block 5 changed and everything after it re-sealed with the real key: a valid chain, but not ours
  const forged = honest.slice(0, 5);
  for (let i = 5; i < 14; i++) forged.push(endorse(forged[i - 1]!, 'forged'));
  await a.rewrite(forged);
  let line = await assertRefused(m, 'history_rewritten', size, head, commit, /block 11 on the remote is not the verified head/);
  assert.is(line.fields.remote_size, 14);
  assert.is(line.fields.remote_head, forged[13]!.record_hash);
  assert.equal((line.fields.evidence as Record<string, unknown>).verified, head);
  // the same remote head again: refused again, without verifying it a second time
  const again = await m.sync.syncNow();
  assert.is(again.result, 'refused');
  assert.is(m.sync.status().consecutiveFailures, 2);

  // 2. the newest block dropped (with a correctly signed checkpoint for the shorter chain)
  await a.rewrite(honest.slice(0, 11));
  line = await assertRefused(m, 'history_rewritten', size, head, commit, /remote has 11 blocks, 12 are verified/);
  assert.is(line.fields.remote_size, 11);

  // 3. a block file of ours edited in place (same record_hash, other bytes): refused, not silently checked out
  const edited = honest.map((b) => ({ index: b.index, content: formatBlockFile(b) }));
  edited[3]!.content = edited[3]!.content.replace('\n', '\n ');
  const dir3 = fresh('edited');
  const cp12 = buildCheckpoint({ head: honest[11]!, signer, now: T0 + 30_000_000 });
  await ChainRepo.init(dir3, edited, formatCheckpointFile(cp12), commitFor([honest[0]!], T0));
  await push(dir3, a.url, true);
  await assertRefused(m, 'history_rewritten', size, head, commit, /changes or removes 1 existing file/);

  // back to the honest history (as the mirror has it) for the next cases
  await a.rewrite(honest);
  assert.is((await m.sync.syncNow()).result, 'updated', 'same blocks, new commit: adopted');
  const commit2 = m.repo.head;

  // 4. a block with a bad signature appended (record_hash re-computed so only the signature is wrong)
  const { record_hash: _drop, ...good } = endorse(a.head, 'sig');
  const unhashed = { ...good, signature: base64Encode(nodeSigner('x', privateKeyFromSeed(new Uint8Array(32).fill(9))).sign(utf8('other'))) };
  const bad: Block = { ...unhashed, record_hash: computeRecordHash(unhashed, nodeBackend) };
  const base = [...a.blocks];
  await a.append([bad]);
  line = await assertRefused(m, 'bad_signature', size, head, commit2, /^bad_signature at block 12/);
  assert.is(line.fields.index, 12);

  // 5. an honest block with a checkpoint that signs another head
  await a.rewrite(base);
  const next = endorse(a.head, 'cp');
  await a.append([next], { checkpointFor: a.head });
  await assertRefused(m, 'checkpoint_mismatch', size, head, m.repo.head);

  // 5b. a revoke naming no endorse block (the authority block), signed and sealed correctly: refused before the branch moves
  await a.rewrite(base);
  const badRevoke = buildRevokeBlock({ prev: a.head, target: a.blocks[0]!, signer, backend: nodeBackend, now: T0 + 40_000_000 });
  await a.append([badRevoke]);
  await assertRefused(m, 'malformed', size, head, m.repo.head, /^malformed at block 12: payload\.target_hash/);

  // 5c. an honest block whose file repeats a member name ("comment" before the signed one): not I-JSON, refused before the branch moves
  await a.rewrite(base);
  const dup = endorse(a.head, 'dup');
  const dupText = formatBlockFile(dup).replace('{', '{"comment":"FORGED",');
  const cpDup = buildCheckpoint({ head: dup, signer, now: T0 + 10_000_000 });
  await a.repo.append([{ index: dup.index, content: dupText }], formatCheckpointFile(cpDup), commitFor([dup], T0 + 10_000_000));
  await push(a.dir, a.url);
  await assertRefused(m, 'malformed', size, head, m.repo.head, /^malformed at block 12: an object repeats the member name "comment"/);

  // 6. an honest continuation is accepted again
  await a.rewrite(base);
  const more = await a.appendHonest(3, 'after');
  const out = await m.sync.syncNow();
  assert.is(out.result, 'updated', JSON.stringify(out));
  assert.is(m.state.size, 15);
  assert.is(m.state.head.record_hash, more[2]!.record_hash);
  assert.is(m.sync.status().lastError, null);
  assert.is(m.sync.status().consecutiveFailures, 0);
  assertGitClean(m.dir, 'after recovery');
  const v = vouchVerify(m.dir);
  assert.is(v.status, 0, v.out);
});

test('remote down: sync fails, status shows the error and staleness, serving unchanged, backoff grows; back up: the next sync succeeds', async () => {
  const a = await Authority.create('down', 6);
  const m = await mirrorOf(a);
  assert.is((await m.sync.syncNow()).result, 'up_to_date');
  await a.appendHonest(1);
  server.down = true;
  server.dropConnections();
  try {
    m.clock.t += 120_000;
    const backoffs: number[] = [];
    for (let k = 1; k <= 4; k++) {
      const out = await m.sync.syncNow();
      assert.is(out.result, 'failed', JSON.stringify(out));
      const st = m.sync.status();
      assert.is(st.consecutiveFailures, k);
      assert.is(st.lastError?.code, 'io_error');
      assert.match(st.lastError!.message, /503|reach|connection/);
      assert.ok(st.staleSeconds >= 120, `stale ${st.staleSeconds}`);
      backoffs.push(st.backoffMs);
    }
    assert.equal(backoffs, [1000, 2000, 4000, 8000]);
    assert.is(m.state.size, 6, 'still serving the last verified head');
    assert.ok(m.log.lines.some((l) => l.level === 'warn' && l.fields.code === 'io_error'));
  } finally {
    server.down = false;
  }
  const out = await m.sync.syncNow();
  assert.is(out.result, 'updated');
  const st = m.sync.status();
  assert.is(st.consecutiveFailures, 0);
  assert.is(st.lastError, null);
  assert.is(st.backoffMs, 0);
  assert.is(st.staleSeconds, 0);
  assert.is(m.state.size, 7);
});

test('start/stop: the schedule picks up pushes by itself, retries sooner while the remote is down, stop leaves no timer', async () => {
  const a = await Authority.create('timer', 5);
  const dir = fresh('timer-mirror');
  const { repo } = await prepareMirror(dir, a.url, { pinnedPublicKey: pub });
  const { state } = await ChainState.load(repo, { pinnedPublicKey: pub });
  const log = memoryLog();
  const sync = new ChainSync({ repo, remote: a.url, state, pinnedPublicKey: pub, intervalSeconds: 0.2, log, backoffInitialMs: 20, backoffMaxMs: 100 });
  sync.start();
  await a.appendHonest(2);
  await until('two blocks', () => state.size === 7, 15_000, 20);
  server.down = true;
  server.dropConnections();
  try {
    await until('three failures', () => sync.status().consecutiveFailures >= 3, 15_000, 20);
    assert.ok(sync.status().backoffMs >= 80);
  } finally {
    server.down = false;
  }
  await a.appendHonest(1);
  await until('recovery', () => state.size === 8 && sync.status().consecutiveFailures === 0, 15_000, 20);
  // concurrent callers never run two syncs at once
  const [x, y] = await Promise.all([sync.syncNow(), sync.syncNow()]);
  assert.is(x.result, 'up_to_date');
  assert.is(y.result, 'up_to_date');
  await sync.stop();
  assert.is(sync.status().nextAttempt, null);
  assert.is(sync.status().syncing, false);
  const requests = server.requests.length;
  await new Promise((r) => setTimeout(r, 500));
  assert.is(server.requests.length, requests, 'no request after stop');
});

test('stop cancels a fetch that hangs', async () => {
  const a = await Authority.create('hang', 3);
  const m = await mirrorOf(a);
  // a remote that accepts connections and never answers
  const { createServer } = await import('node:http');
  const silent = createServer(() => {
    /* never answers */
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  const port = (silent.address() as { port: number }).port;
  const sync = new ChainSync({ repo: m.repo, remote: `http://127.0.0.1:${port}/x.git`, state: m.state, intervalSeconds: 3600, log: memoryLog() });
  const pending = sync.syncNow();
  await new Promise((r) => setTimeout(r, 200));
  const t0 = Date.now();
  await sync.stop();
  assert.is((await pending).result, 'cancelled');
  assert.ok(Date.now() - t0 < 2000);
  silent.closeAllConnections();
  silent.close();
  // a per-exchange timeout bounds a hanging remote too
  const silent2 = createServer(() => {});
  await new Promise<void>((r) => silent2.listen(0, '127.0.0.1', r));
  const port2 = (silent2.address() as { port: number }).port;
  const sync2 = new ChainSync({
    repo: m.repo,
    remote: `http://127.0.0.1:${port2}/x.git`,
    state: m.state,
    intervalSeconds: 3600,
    log: memoryLog(),
    fetch: { timeoutMs: 300 },
  });
  const out = await sync2.syncNow();
  assert.is(out.result, 'failed');
  if (out.result === 'failed') assert.match(out.message, /did not answer in time/);
  silent2.closeAllConnections();
  silent2.close();
});

test('clone of a 5,000-block remote is fast (time printed)', async () => {
  const a = await Authority.create('big', 5000);
  const dir = fresh('big-mirror');
  const t0 = performance.now();
  const repo = await ChainRepo.clone(a.url, dir);
  const cloneMs = performance.now() - t0;
  const { state, report } = await ChainState.load(repo, { pinnedPublicKey: pub });
  console.log(`  clone of 5,000 blocks: ${Math.round(cloneMs)} ms; cold load and verification: ${Math.round(report.ms)} ms`);
  assert.is(repo.size, 5000);
  assert.is(state.size, 5000);
  assertGitClean(dir, 'big clone');
});

test.run();
