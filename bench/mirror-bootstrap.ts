/**
 * Mirror bootstrap benchmark: a cold mirror of an N-block remote, from an
 * empty directory to ready — clone over git smart HTTP (`prepareMirror`)
 * plus the cold verification of every block (`ChainState.load` with the
 * pinned key). Each run is a child process, so its own peak RSS
 * (`peakRssMiB`: VmHWM) is the figure; medians over runs.
 *
 * Owns: its temporary directories and the git server it starts; the chain
 * it builds is kept in bench/out/chain-<N> (the same as `bench -- chain`).
 * Trusts: the real git CLI (push) and `git http-backend` (the remote).
 * Must hold: every run ends with a verified chain of N blocks and a clean
 * `git status`, or the benchmark fails.
 *
 * `npx tsx bench/mirror-bootstrap.ts [blocks] [runs]` prints the figures.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { base64Encode } from '../chain/encoding.ts';
import { ChainState } from '../gateway/chain/verified-state.ts';
import { prepareMirror } from '../gateway/chain/mirror-sync.ts';
import { GitServer } from '../test/helpers/git-server.ts';
import { testSigner } from '../test/helpers/chain-fixture.ts';
import { benchChainDir } from './chain-dir.ts';
import { peakRssMiB } from './peak-rss.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const self = fileURLToPath(import.meta.url);

export interface BootstrapRun {
  seconds: number;
  cloneSeconds: number;
  loadSeconds: number;
  maxRssMiB: number;
}

export interface BootstrapFigures {
  blocks: number;
  runs: number;
  /** Pack size the remote sent, MiB. */
  packMiB: number;
  /** Medians. */
  seconds: number;
  cloneSeconds: number;
  loadSeconds: number;
  maxRssMiB: number;
  all: BootstrapRun[];
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
};

/** Run a command in the repository's root to its end: status, output, wall ms (`env` over this process's). */
export function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ status: number | null; stdout: string; stderr: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const c = spawn(cmd, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    c.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    c.on('close', (status) => resolve({ status, stdout, stderr, ms: performance.now() - t0 }));
  });
}

const authorityChain = benchChainDir;

export async function benchMirrorBootstrap(opts: { blocks: number; runs: number }): Promise<BootstrapFigures> {
  const chain = await authorityChain(opts.blocks);
  const work = mkdtempSync(join(tmpdir(), 'vouch-mirror-bench-'));
  mkdirSync(join(work, 'srv'));
  const server = await GitServer.start(join(work, 'srv'));
  try {
    server.initBare('chain.git');
    const url = server.url('chain.git');
    const pushed = await run('git', ['-C', chain, 'push', '-q', url, 'main']);
    if (pushed.status !== 0) throw new Error(`git push failed: ${pushed.stderr}`);
    const pub = base64Encode(testSigner().publicKey);
    const all: BootstrapRun[] = [];
    let packBytes = 0;
    for (let r = 0; r < opts.runs; r++) {
      const dir = join(work, `mirror-${r}`);
      // Child process: its peak RSS is the bootstrap's own (the server stays here).
      const c = await run(process.execPath, ['--import', 'tsx', self, '--child', url, dir, pub]);
      if (c.status !== 0) throw new Error(`bootstrap run ${r + 1} failed: ${c.stderr}`);
      const fig = JSON.parse(c.stdout.trim().split('\n').pop()!) as BootstrapRun & { blocks: number };
      if (fig.blocks !== opts.blocks) throw new Error(`run ${r + 1}: ${fig.blocks} blocks, expected ${opts.blocks}`);
      const status = spawnSync('git', ['-C', dir, 'status', '--porcelain'], { encoding: 'utf8' });
      if (status.status !== 0 || status.stdout !== '') throw new Error(`run ${r + 1}: git status is not clean: ${status.stdout}${status.stderr}`);
      const packDir = join(dir, '.git', 'objects', 'pack');
      packBytes = readdirSync(packDir)
        .filter((f) => f.endsWith('.pack'))
        .reduce((s, f) => s + statSync(join(packDir, f)).size, 0);
      all.push({ seconds: fig.seconds, cloneSeconds: fig.cloneSeconds, loadSeconds: fig.loadSeconds, maxRssMiB: fig.maxRssMiB });
      console.log(
        `run ${r + 1}: ${fig.seconds.toFixed(2)} s to ready (clone ${fig.cloneSeconds.toFixed(2)} s, cold verify + index ${fig.loadSeconds.toFixed(2)} s), peak RSS ${fig.maxRssMiB.toFixed(0)} MiB`,
      );
      rmSync(dir, { recursive: true, force: true });
    }
    return {
      blocks: opts.blocks,
      runs: opts.runs,
      packMiB: packBytes / 2 ** 20,
      seconds: median(all.map((x) => x.seconds)),
      cloneSeconds: median(all.map((x) => x.cloneSeconds)),
      loadSeconds: median(all.map((x) => x.loadSeconds)),
      maxRssMiB: median(all.map((x) => x.maxRssMiB)),
      all,
    };
  } finally {
    await server.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

/** One bootstrap, in this (child) process: clone + cold load; prints its figures as the last line. */
async function child(url: string, dir: string, pub: string): Promise<void> {
  const t0 = performance.now();
  const { repo, cloned } = await prepareMirror(dir, url, { pinnedPublicKey: pub });
  if (!cloned) throw new Error('expected a clone');
  const t1 = performance.now();
  const { state, report } = await ChainState.load(repo, { pinnedPublicKey: pub });
  if (report.mode !== 'cold') throw new Error('expected a cold load');
  const t2 = performance.now();
  console.log(
    JSON.stringify({
      blocks: state.size,
      seconds: (t2 - t0) / 1000,
      cloneSeconds: (t1 - t0) / 1000,
      loadSeconds: (t2 - t1) / 1000,
      maxRssMiB: peakRssMiB(),
    }),
  );
}

if (process.argv[2] === '--child') {
  await child(process.argv[3]!, process.argv[4]!, process.argv[5]!);
} else if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const blocks = Number(process.argv[2] ?? 50_000);
  const runs = Number(process.argv[3] ?? 3);
  const f = await benchMirrorBootstrap({ blocks, runs });
  console.log(
    `\ncold mirror bootstrap of a ${f.blocks}-block remote (pack ${f.packMiB.toFixed(1)} MiB), median of ${f.runs}: ` +
      `${f.seconds.toFixed(2)} s to ready (clone ${f.cloneSeconds.toFixed(2)} s + cold verify/index ${f.loadSeconds.toFixed(2)} s), peak RSS ${f.maxRssMiB.toFixed(0)} MiB`,
  );
}
