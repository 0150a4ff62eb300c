/**
 * Authority push time for one append at given history lengths
 * (store/chain-push.ts): the cost must not grow with the history. For each
 * size N a chain of N signed blocks, one commit each, is written by `git
 * fast-import`, opened with ChainRepo, and served bare by the test git
 * smart-HTTP server; each sample is one append (untimed) and a timed
 * `pushNew`, as the gateway's pusher does.
 * Trusts: git to build the fixture; test/helpers/git-server.ts.
 * Must hold: the history has N commits (rev-list), each timed push sends one
 * append, and the remote ends at the local head.
 * Usage: tsx bench/chain-push.ts [size...] [--samples N]
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Agent } from 'undici';
import { blockPath, ChainRepo } from '../store/chain-repo.ts';
import { appendSigned, commitFor } from '../store/chain-append.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { pushNew, type PushResult } from '../store/chain-push.ts';
import { formatBlockFile, formatCheckpointFile, type Block } from '../chain/block.ts';
import { artifactHashOf, buildCheckpoint, buildEndorseBlock } from '../chain/build.ts';
import { utf8 } from '../chain/encoding.ts';
import { buildLongChain, T0, testSigner } from '../test/helpers/chain-fixture.ts';
import { GitServer } from '../test/helpers/git-server.ts';

export interface PushFigures {
  /** Commits in the history before the timed pushes (one per block). */
  commits: number;
  samples: number;
  /** Signing the blocks, fast-import, checkout and ChainRepo.open. */
  buildMs: number;
  /** The first push after opening: history packed by git, nothing cached yet. */
  coldMs: number;
  medianMs: number;
  p90Ms: number;
  minMs: number;
  maxMs: number;
  /** Medians of the parts: GET info/refs, the local walk + pack, POST to report-status. */
  refsMs: number;
  walkMs: number;
  postMs: number;
  /** Objects and POST bytes per push (median). */
  objects: number;
  bytes: number;
  /**
   * Server side, for attribution: the connectivity check git's receive-pack
   * runs for every push (`rev-list --objects <new> --not <old>`; git marks
   * the old commit's whole tree, so it grows with the number of block files),
   * timed directly on the bare repository (median, including process start).
   */
  serverCheckMs: number;
  /** The same one-append push done by the git CLI (`git push`) against the same server (median). */
  gitCliMs: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
};
const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
};

function git(dir: string, ...args: string[]): string {
  const r = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`bench: git ${args.join(' ')} failed: ${r.stderr}`);
  return r.stdout.trim();
}

/** Writes the chain as `blocks.length` commits on `main` with git fast-import. */
async function fastImport(dir: string, blocks: Block[], signer = testSigner()): Promise<void> {
  mkdirSync(dir, { recursive: true });
  git(dir, 'init', '-q', '-b', 'main');
  const child = spawn('git', ['-C', dir, 'fast-import', '--quiet', '--done'], { stdio: ['pipe', 'inherit', 'inherit'] });
  const exited = new Promise<number>((r) => child.on('close', (code) => r(code ?? 1)));
  const stdin = child.stdin;
  let buf: Buffer[] = [];
  let size = 0;
  const put = async (b: Buffer | string): Promise<void> => {
    const x = typeof b === 'string' ? Buffer.from(b, 'utf8') : b;
    buf.push(x);
    size += x.length;
    if (size > 1 << 20) await flush();
  };
  const flush = async (): Promise<void> => {
    const chunk = Buffer.concat(buf, size);
    buf = [];
    size = 0;
    if (!stdin.write(chunk)) await new Promise((r) => stdin.once('drain', r));
  };
  const data = async (text: string): Promise<void> => {
    const b = Buffer.from(text, 'utf8');
    await put(`data ${b.length}\n`);
    await put(b);
    await put('\n');
  };
  for (const block of blocks) {
    const now = Date.parse(block.posted);
    const info = commitFor([block], now);
    const who = `${info.authorName} <${info.authorEmail}> ${info.timestamp} +0000`;
    await put(`commit refs/heads/main\nauthor ${who}\ncommitter ${who}\n`);
    await data(info.message);
    await put(`M 100644 inline ${blockPath(block.index)}\n`);
    await data(formatBlockFile(block));
    await put('M 100644 inline checkpoint.json\n');
    await data(formatCheckpointFile(buildCheckpoint({ head: block, signer, now })));
  }
  await put('done\n');
  await flush();
  stdin.end();
  if ((await exited) !== 0) throw new Error('bench: git fast-import failed');
}

/** Builds a chain of `n` commits in `dir` and a bare clone `<srv>/<name>` as the remote; returns the open repository and its head block. */
export async function buildFixture(dir: string, n: number, gs: GitServer, name: string): Promise<{ repo: ChainRepo; head: Block; now: number }> {
  const { blocks } = buildLongChain(n);
  await fastImport(dir, blocks);
  git(dir, 'reset', '-q', '--hard');
  if (git(dir, 'rev-list', '--count', 'main') !== String(n)) throw new Error(`bench: history of ${n} commits expected`);
  const repo = await ChainRepo.open(dir);
  if (repo.size !== n) throw new Error(`bench: chain of ${n} blocks expected, found ${repo.size}`);
  const bare = join(gs.root, name);
  const r = spawnSync('git', ['clone', '-q', '--bare', dir, bare], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`bench: git clone --bare failed: ${r.stderr}`);
  git(bare, 'config', 'http.receivepack', 'true');
  const head = blocks[n - 1]!;
  return { repo, head, now: T0 + n * 1000 };
}

interface Subject {
  n: number;
  dir: string;
  bare: string;
  url: string;
  repo: ChainRepo;
  head: Block;
  now: number;
  remoteHead: string;
  cache: object;
  buildMs: number;
  coldMs: number;
  results: PushResult[];
  serverCheck: number[];
  cli: number[];
}

/**
 * Build histories of the given lengths, then time `samples` one-append
 * pushes on each, the sizes taking turns (the machine's load drifts; side by
 * side, every size sees the same drift).
 */
export async function benchPush(opts: { sizes: number[]; samples: number }): Promise<PushFigures[]> {
  const work = mkdtempSync(join(tmpdir(), 'vouch-bench-push-'));
  const gs = await GitServer.start(join(work, 'srv'));
  const agent = new Agent({ keepAliveTimeout: 10_000 });
  const signer = testSigner();
  const subjects: Subject[] = [];
  const appendOne = async (s: Subject): Promise<void> => {
    s.now += 1000;
    const i = s.head.index + 1;
    const block = buildEndorseBlock({
      prev: s.head,
      signer,
      backend: nodeBackend,
      now: s.now,
      entries: [
        {
          url: `https://a.example/pkg/bench/artifact-${i}.tgz`,
          artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(`artifact ${i}`)),
          name: 'acme/bench',
          semver: `2.${i}.0`,
          license: 'MIT',
        },
      ],
    });
    await appendSigned(s.repo, [block], buildCheckpoint({ head: block, signer, now: s.now }), s.now);
    s.head = block;
  };
  const push = async (s: Subject): Promise<PushResult> => {
    const r = await pushNew(s.dir, s.url, { remoteHead: s.remoteHead, localHead: s.repo.head, dispatcher: agent, cache: s.cache });
    if (!r.pushed || r.commits !== 1) throw new Error(`bench: expected a one-commit push, got ${JSON.stringify(r)}`);
    s.remoteHead = r.remoteHead;
    return r;
  };
  try {
    for (const n of opts.sizes) {
      const t0 = performance.now();
      const dir = join(work, `chain-${n}`);
      const { repo, head, now } = await buildFixture(dir, n, gs, `chain-${n}.git`);
      const s: Subject = {
        n,
        dir,
        bare: join(gs.root, `chain-${n}.git`),
        url: gs.url(`chain-${n}.git`),
        repo,
        head,
        now,
        remoteHead: repo.head,
        cache: {},
        buildMs: performance.now() - t0,
        coldMs: 0,
        results: [],
        serverCheck: [],
        cli: [],
      };
      await appendOne(s);
      s.coldMs = (await push(s)).timings.totalMs;
      await appendOne(s);
      await push(s); // warm-up
      subjects.push(s);
      console.log(`built ${n} commits in ${(s.buildMs / 1000).toFixed(1)} s; cold first push ${s.coldMs.toFixed(0)} ms`);
    }
    for (let k = 0; k < opts.samples; k++) {
      for (const s of subjects) {
        await appendOne(s);
        const r = await push(s);
        s.results.push(r);
        const t = performance.now();
        git(s.bare, 'rev-list', '--objects', '--quiet', r.remoteHead, '--not', r.previousRemoteHead!);
        s.serverCheck.push(performance.now() - t);
        // The git CLI doing the same, interleaved (asynchronously: the server runs in this process).
        await appendOne(s);
        const c = performance.now();
        await promisify(execFile)('git', ['-C', s.dir, 'push', '-q', s.url, 'main'], { timeout: 120_000 });
        s.cli.push(performance.now() - c);
        s.remoteHead = s.repo.head;
      }
    }
    for (const s of subjects) {
      if (git(s.bare, 'rev-parse', 'main') !== s.repo.head) throw new Error(`bench: remote of ${s.n} is not at the local head`);
    }
  } finally {
    await agent.close();
    await gs.stop();
    rmSync(work, { recursive: true, force: true });
  }
  const out: PushFigures[] = subjects.map((s) => {
    const total = s.results.map((r) => r.timings.totalMs);
    return {
      commits: s.n,
      samples: s.results.length,
      buildMs: Math.round(s.buildMs),
      coldMs: s.coldMs,
      medianMs: median(total),
      p90Ms: quantile(total, 0.9),
      minMs: Math.min(...total),
      maxMs: Math.max(...total),
      refsMs: median(s.results.map((r) => r.timings.refsMs)),
      walkMs: median(s.results.map((r) => r.timings.walkMs)),
      postMs: median(s.results.map((r) => r.timings.postMs)),
      objects: median(s.results.map((r) => r.objects)),
      bytes: median(s.results.map((r) => r.requestBytes)),
      serverCheckMs: median(s.serverCheck),
      gitCliMs: median(s.cli),
    };
  });
  for (const f of out) {
    console.log(
      `push of one append at ${f.commits} commits: median ${f.medianMs.toFixed(1)} ms (p90 ${f.p90Ms.toFixed(1)}, min ${f.minMs.toFixed(1)}, max ${f.maxMs.toFixed(1)}; ` +
        `info/refs ${f.refsMs.toFixed(1)} + walk/pack ${f.walkMs.toFixed(2)} + POST ${f.postMs.toFixed(1)}); ${f.objects} objects, ${f.bytes} bytes\n` +
        `  server's connectivity check alone ${f.serverCheckMs.toFixed(1)} ms; git CLI push of one append ${f.gitCliMs.toFixed(1)} ms`,
    );
  }
  if (out.length >= 2) {
    const first = out[0]!;
    const last = out[out.length - 1]!;
    const r = (f: (x: PushFigures) => number) => (f(last) / f(first)).toFixed(2);
    console.log(
      `ratio ${last.commits} / ${first.commits} commits: push ${r((x) => x.medianMs)}x (target <= 1.5x); ` +
        `client walk+pack ${r((x) => x.walkMs)}x; push minus the server's connectivity check ${r((x) => x.medianMs - x.serverCheckMs)}x; ` +
        `server check ${r((x) => x.serverCheckMs)}x; git CLI push ${r((x) => x.gitCliMs)}x`,
    );
  }
  return out;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = process.argv.slice(2);
  const at = args.indexOf('--samples');
  const samples = at >= 0 ? Number(args[at + 1]) : 15;
  const sizes = args
    .filter((_a, k) => k !== at && k !== at + 1)
    .map(Number)
    .filter((n) => n > 0);
  await benchPush({ sizes: sizes.length ? sizes : [1_000, 50_000], samples });
}
