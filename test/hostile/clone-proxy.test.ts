/**
 * The mirror clone's transfer is stock git behind store/git-fetch-proxy.ts
 * (issue 33 item 1): against a real hostile HTTP server on 127.0.0.1 the
 * proxy's bounds on bytes, time and silence each refuse the clone with the
 * documented `io_error`, git and what it started are gone and the directory
 * is as it was; a credentials header reaches the remote, never git, a
 * message or a log line; a clone whose git is SIGKILLed fails cleanly, one
 * whose process is SIGKILLed leaves the clone marker, which `open` refuses
 * and the mirror's start removes.
 * Owns: its temporary directory, servers and child processes.
 * Trusts: test/helpers/git-server.ts (git http-backend) for the honest answers.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { deflateSync } from 'node:zlib';
import { buildCheckpoint } from '../../chain/build.ts';
import { VouchError } from '../../chain/errors.ts';
import { prepareMirror } from '../../gateway/chain/mirror-sync.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { ChainRepo, type FetchOptions } from '../../store/chain-repo.ts';
import { cloneRuns } from '../../store/git-clone.ts';
import { T0, buildLongChain, initChainRepo, testSigner } from '../helpers/chain-fixture.ts';
import { GitServer } from '../helpers/git-server.ts';
import { type TrackedServer, relayToGit, startTracked } from '../helpers/git-relay.ts';
import { memoryLog } from '../helpers/memory-log.ts';
import { repoRoot } from '../helpers/vectors.ts';
import { drainedOrClosed } from '../../platform/drained.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-clone-proxy-'));
const SECRET = 'Bearer s3cret-token-0f1e2d3c4b5a';
const URL_SECRET = 'url-pa55word-9a8b7c';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let seq = 0;
const fresh = (name: string) => join(work, `${name}-${seq++}`);

function pkt(data: string | Buffer): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data) : data;
  return Buffer.concat([Buffer.from((body.length + 4).toString(16).padStart(4, '0')), body]);
}
const FLUSH = Buffer.from('0000');
const RESULT = { 'content-type': 'application/x-git-upload-pack-result' };

type PackScript = (res: ServerResponse) => void | Promise<void>;

/** Honest `info/refs` (from git http-backend); the answer to git's `done` request from `script`, when one is set. */
class Hostile {
  script: PackScript | null = null;
  readonly seen: { path: string; authorization: string | undefined }[] = [];
  private tracked: TrackedServer | null = null;
  private constructor(private readonly upstream: GitServer) {}

  static async start(upstream: GitServer): Promise<Hostile> {
    const h = new Hostile(upstream);
    h.tracked = await startTracked((req, res) => h.handle(req, res));
    return h;
  }

  url(name: string, auth = ''): string {
    return `http://${auth}127.0.0.1:${this.tracked!.port}/${name}`;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    res.on('error', () => {});
    this.seen.push({ path: req.url ?? '', authorization: req.headers.authorization });
    const body: Buffer[] = [];
    req.on('data', (d: Buffer) => body.push(d));
    req.on('end', () => {
      const all = Buffer.concat(body);
      const script = this.script;
      if (script && (req.url ?? '').endsWith('/git-upload-pack')) {
        const shallow = /want ([0-9a-f]{40})/.exec(all.toString('latin1'))?.[1] ?? '0'.repeat(40);
        if (!all.includes('0009done\n')) return void res.writeHead(200, RESULT).end(Buffer.concat([pkt(`shallow ${shallow}\n`), FLUSH]));
        res.writeHead(200, RESULT);
        res.write(Buffer.concat([pkt(`shallow ${shallow}\n`), FLUSH, pkt('NAK\n')]));
        Promise.resolve(script(res)).catch(() => res.destroy());
        return;
      }
      relayToGit(this.upstream.port, req, res, all);
    });
  }

  async stop(): Promise<void> {
    await this.tracked?.stop();
  }
}

/** Writes `chunk` again and again, with backpressure, until the client goes. */
async function endless(res: ServerResponse, first: Buffer, chunk: Buffer): Promise<void> {
  let next = first;
  while (!res.destroyed) {
    if (!res.write(next)) await drainedOrClosed(res);
    next = chunk;
  }
}

/** A pack header declaring many objects, then endless stored 64,000-byte blobs (well-formed: only a bound on bytes stops them). */
function wellFormedFlood(res: ServerResponse): Promise<void> {
  const head = Buffer.from('PACK\0\0\0\x02\0\x10\0\0', 'latin1');
  const blob = Buffer.concat([
    Buffer.from([0xb0 | (64000 % 16), 0x80 | ((64000 >> 4) & 0x7f), 64000 >> 11]),
    deflateSync(Buffer.alloc(64000, 0x77), { level: 0 }),
  ]);
  return endless(res, pkt(Buffer.concat([Buffer.from([1]), head])), pkt(Buffer.concat([Buffer.from([1]), blob])));
}

let gitServer: GitServer;
let hostile: Hostile;

test.before(async () => {
  mkdirSync(join(work, 'srv'));
  gitServer = await GitServer.start(join(work, 'srv'));
  gitServer.initBare('chain.git');
  const chain = buildLongChain(30, testSigner());
  const src = join(work, 'src');
  const last = chain.blocks[29]!;
  const repo = await initChainRepo(src, chain.blocks.slice(0, -1), buildCheckpoint({ head: chain.blocks[28]!, signer: testSigner(), now: T0 + 40_000 }));
  await appendSigned(repo, [last], buildCheckpoint({ head: last, signer: testSigner(), now: T0 + 50_000 }), T0 + 50_000);
  await promisify(execFile)('git', ['-C', src, 'push', '-q', gitServer.url('chain.git'), 'main']);
  hostile = await Hostile.start(gitServer);
});

test.after(async () => {
  await hostile?.stop();
  await gitServer?.stop();
  rmSync(work, { recursive: true, force: true });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A clone that must fail with `io_error` matching `expect` within `maxMs`, leaving no directory and no git process. */
async function refused(script: PackScript, opts: FetchOptions, expect: RegExp, maxMs: number): Promise<VouchError> {
  hostile.script = script;
  const dir = fresh('clone');
  let pid = 0;
  const watch = setInterval(() => {
    pid ||= cloneRuns.pid;
  }, 20);
  const t0 = Date.now();
  try {
    const err = await ChainRepo.clone(hostile.url('chain.git'), dir, opts).then(
      () => null,
      (e: unknown) => e,
    );
    const ms = Date.now() - t0;
    assert.ok(err instanceof VouchError, `the clone did not fail with a VouchError: ${String(err)}`);
    const e = err as VouchError;
    assert.is(e.code, 'io_error', e.message);
    assert.match(e.message, expect, e.message);
    assert.ok(ms < maxMs, `the refusal took ${ms} ms`);
    assert.ok(pid > 0, 'git ran the clone');
    await sleep(200);
    assert.not.ok(alive(pid), `git (${pid}) is still running`);
    assert.not.ok(existsSync(dir), 'a failed clone left its directory');
    return e;
  } finally {
    clearInterval(watch);
    hostile.script = null;
  }
}

test('the bound on bytes: endless well-formed objects past maxBytes refuse the clone', async () => {
  await refused(
    wellFormedFlood,
    { maxBytes: 2 << 20 },
    new RegExp(`^http://127\\.0\\.0\\.1:\\d+/chain\\.git/git-upload-pack sent more than ${2 << 20} bytes$`),
    20_000,
  );
});

test('the bound on time: a trickle of one byte every 200 ms refuses the clone at timeoutMs', async () => {
  const trickle: PackScript = async (res) => {
    // One side-band pkt-line (a pack header), a byte at a time: each byte rearms the silence bound, not the whole one.
    const line = pkt(Buffer.concat([Buffer.from([1]), Buffer.from('PACK\0\0\0\x02\0\0\0\x01', 'latin1')]));
    for (const b of line) {
      if (res.destroyed) return;
      res.write(Buffer.from([b]));
      await sleep(200);
    }
  };
  await refused(trickle, { timeoutMs: 1_500 }, /^http:\/\/127\.0\.0\.1:\d+\/chain\.git\/git-upload-pack did not answer in time \(1\.5 s\)$/, 5_000);
});

test('the bound on silence: the answer stops after NAK and the clone is refused after stallMs', async () => {
  await refused(() => {}, { stallMs: 1_000 }, /^http:\/\/127\.0\.0\.1:\d+\/chain\.git\/git-upload-pack sent nothing for 1 s$/, 4_000);
});

test('credentials: the header reaches the remote, never git, a message or a log line', async () => {
  const opts: FetchOptions = { headers: { authorization: SECRET } };
  const url = hostile.url('chain.git', `mirror:${URL_SECRET}@`);
  hostile.seen.length = 0;
  const ok = await ChainRepo.clone(url, fresh('cred-ok'), opts);
  assert.is(ok.size, 30);
  assert.ok(hostile.seen.length >= 2);
  for (const s of hostile.seen) assert.is(s.authorization, SECRET, `${s.path} came without the header`);
  // A failure, directly and through the mirror's start (which logs).
  hostile.script = () => {};
  try {
    const err = await ChainRepo.clone(url, fresh('cred-fail'), { ...opts, stallMs: 800 }).catch((e: unknown) => e as VouchError);
    assert.ok(err instanceof VouchError);
    const log = memoryLog();
    const err2 = await prepareMirror(fresh('cred-mirror'), url, { log, fetch: { ...opts, stallMs: 800 } }).catch((e: unknown) => e as VouchError);
    assert.ok(err2 instanceof VouchError);
    for (const e of [err, err2] as VouchError[]) {
      let text = `${e.message}\n${e.stack}\n${JSON.stringify(e.evidence ?? {})}`;
      for (let c: unknown = e.cause; c; c = (c as Error).cause) text += `\n${String(c)}\n${(c as Error).stack ?? ''}`;
      assert.not.ok(text.includes('s3cret'), text);
      assert.not.ok(text.includes(URL_SECRET), text);
    }
    const logged = JSON.stringify(log.lines);
    assert.not.ok(logged.includes('s3cret') || logged.includes(URL_SECRET), logged);
  } finally {
    hostile.script = null;
  }
});

test('git SIGKILLed mid-clone: the clone fails with io_error, leaving the directory as it found it', async () => {
  hostile.script = () => {}; // git waits for the pack
  const dir = fresh('killed');
  mkdirSync(dir); // an empty directory: left empty
  try {
    const p = ChainRepo.clone(hostile.url('chain.git'), dir, { stallMs: 60_000 }).catch((e: unknown) => e as VouchError);
    const t0 = Date.now();
    while (!cloneRuns.pid && Date.now() - t0 < 10_000) await sleep(20);
    const pid = cloneRuns.pid;
    assert.ok(pid > 0, 'git started');
    // While git runs: the marker, which open refuses.
    assert.ok(existsSync(join(dir, '.git', 'vouch-clone-incomplete')));
    assert.ok(ChainRepo.isInterruptedClone(dir));
    const open = await ChainRepo.open(dir).catch((e: unknown) => e as VouchError);
    assert.ok(open instanceof VouchError && open.code === 'not_a_chain' && /interrupted clone/.test(open.message), String(open));
    process.kill(pid, 'SIGKILL');
    const err = await p;
    assert.ok(err instanceof VouchError, String(err));
    assert.is(err.code, 'io_error');
    assert.match(err.message, /^cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git was stopped \(SIGKILL\)$/);
    assert.ok(existsSync(dir));
    assert.equal(readdirSync(dir), []);
  } finally {
    hostile.script = null;
  }
});

test('the cloning process SIGKILLed: the marker stays, open refuses, the mirror start removes it and clones', async () => {
  hostile.script = () => {};
  hostile.seen.length = 0;
  const dir = fresh('crashed');
  const script = join(work, 'clone-child.mts');
  writeFileSync(
    script,
    `import { ChainRepo } from ${JSON.stringify(join(repoRoot, 'store', 'chain-repo.ts'))};\nawait ChainRepo.clone(process.argv[2], process.argv[3], { stallMs: 60_000 });\n`,
  );
  const child = spawn(process.execPath, ['--import', 'tsx', script, hostile.url('chain.git'), dir], { cwd: repoRoot, stdio: 'ignore' });
  try {
    const t0 = Date.now();
    while (!hostile.seen.some((s) => s.path.endsWith('/git-upload-pack')) || !existsSync(join(dir, '.git', 'vouch-clone-incomplete'))) {
      assert.ok(Date.now() - t0 < 30_000, 'the child never reached the transfer');
      await sleep(50);
    }
    await sleep(300);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
  } finally {
    hostile.script = null;
  }
  assert.ok(existsSync(join(dir, '.git', 'vouch-clone-incomplete')), 'the marker was left');
  const open = await ChainRepo.open(dir).catch((e: unknown) => e as VouchError);
  assert.ok(open instanceof VouchError && open.code === 'not_a_chain' && /interrupted clone/.test(open.message), String(open));
  const log = memoryLog();
  const { repo, cloned } = await prepareMirror(dir, hostile.url('chain.git'), { log });
  assert.ok(cloned);
  assert.is(repo.size, 30);
  assert.ok(log.lines.some((l) => /interrupted clone/.test(l.msg)));
  assert.not.ok(existsSync(join(dir, '.git', 'vouch-clone-incomplete')));
});

test.run();
