/**
 * `npm run bench -- gitops [--quick] [--rows=append,clone,fetch,push,repack] [--rounds=N]`
 * (issue 33 item 1): the store's hand-written git writes and transfers
 * against stock git doing the same work, interleaved in one run, medians.
 * Rows at 1k/50k: append p50 (RepoWriter vs plumbing vs `fast-import`, all
 * fsync'd), mirror clone (vs `git clone --sparse`, direct and behind
 * store/git-fetch-proxy.ts, the mirror clone's), fetch and push of one append, repack
 * (and appends across its threshold: beside it, and with VOUCH_REPACK_APPENDS=wait), disk.
 * `--sizes=1000000 [--rows=append,endorse,clone,fetch,repack] [--fixture=git-packed]`: the rows on
 * bench/out/chain-N-sparse and its -gitpacked twin, plus whole-process
 * `vouch endorse` (./gitops/endorse-row.ts); section `gitops-N`.
 * Owns: temporary directories (removed). Never writes into bench/out: link
 * copies (./gitops/link-copy.ts) and hard-linked bare clones only.
 * Must hold: every side ends with the same head as the remote or the bench fails.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { blockPath } from '../chain/layout.ts';
import { ChainRepo, type BlockFile, type CommitInfo } from '../store/chain-repo.ts';
import { GitServer } from '../test/helpers/git-server.ts';
import { benchChainDir } from './chain-dir.ts';
import { benchPush } from './chain-push.ts';
import { run } from './mirror-bootstrap.ts';
import { GitFetchProxy } from '../store/git-fetch-proxy.ts';
import { ENDORSE_SIDES, endorseRow, type EndorseRow } from './gitops/endorse-row.ts';
import { keepPackTimes, linkCopy } from './gitops/link-copy.ts';
import { DURABLE, FastImportWriter, PlumbingWriter, type StockWriter } from './gitops/stock-git.ts';
import { peakRssMiB } from './peak-rss.ts';

const self = fileURLToPath(import.meta.url);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
};
const q90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(0.9 * xs.length) - 1)]!;
const f1 = (x: number) => x.toFixed(1);
const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;

function git(dir: string, ...args: string[]): string {
  const r = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8', maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`git ${args.join(' ')} failed: ${r.stderr}`);
  return r.stdout.trim();
}

function bytesUnder(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    n += e.isDirectory() ? bytesUnder(p) : statSync(p).size;
  }
  return n;
}
const packCount = (gitdir: string) => readdirSync(join(gitdir, 'objects', 'pack')).filter((f) => f.endsWith('.pack')).length;

/** Rotates the sides' order each round, so no side always runs first after the machine idled. */
function rotated<T>(xs: T[], k: number): T[] {
  return xs.map((_x, i) => xs[(i + k) % xs.length]!);
}

// ---------------------------------------------------------------------------
// Append

/** The first `n` block texts of the signed bench chain bench/out/chain-<total> (read only: opened without repair). */
async function realBlocks(total: number, n: number): Promise<BlockFile[]> {
  const repo = await ChainRepo.open(await benchChainDir(total), { repair: false });
  const out: BlockFile[] = [];
  for (let i = 0; i < n; i++) out.push({ index: i, content: repo.readBlockFile(i) });
  return out;
}
const info = (i: number): CommitInfo => ({
  message: `block ${i}: endorse bench/unit 1.0.${i}\n\nhttps://example.invalid/${i}.tgz\n`,
  authorName: 'vouch bench',
  authorEmail: 'bench@vouch.invalid',
  timestamp: 1_790_000_000 + i,
});
const checkpointText = (n: number) => `${JSON.stringify({ size: n, head: 'bench' }, null, 2)}\n`;

const APPEND_SIDES = ['vouch', 'plumbing', 'plumbing+dirsync', 'fastimport'] as const;
type AppendSide = (typeof APPEND_SIDES)[number];

interface AppendRow {
  size: number;
  samples: number;
  ms: Record<AppendSide, number[]>;
  packsAfterFastImport: number;
}

/** Each size: a sparse chain of the first `size - samples - 3` blocks of the signed bench chain, then its next blocks appended one by one on every side. */
async function appendRows(work: string, chain: BlockFile[], sizes: number[], samples: number): Promise<AppendRow[]> {
  const rows: AppendRow[] = [];
  for (const size of sizes) {
    const base = join(work, `append-${size}`);
    const t0 = performance.now();
    const from = size - samples - 3;
    await ChainRepo.init(join(base, 'vouch'), chain.slice(0, from), checkpointText(from), info(0));
    for (const side of APPEND_SIDES.slice(1)) cpSync(join(base, 'vouch'), join(base, side), { recursive: true });
    console.log(`append: ${size}-block sparse chain built in ${f1((performance.now() - t0) / 1000)} s`);
    rows.push(await appendSamples(base, size, chain.slice(from, size)));
    rmSync(base, { recursive: true, force: true });
  }
  return rows;
}

/** At a fixture's size (1M): link copies of the fixture, then `samples + 3` blocks appended after its last one (real block texts of the chain, at the next indexes). */
async function appendOnFixture(work: string, src: string, tail: BlockFile[], samples: number): Promise<AppendRow> {
  const base = join(work, 'append-fixture');
  for (const side of APPEND_SIDES) linkCopy(src, join(base, side));
  const from = (await ChainRepo.open(src, { repair: false })).size;
  const blocks = Array.from({ length: samples + 3 }, (_, k) => ({ index: from + k, content: tail[k % tail.length]!.content }));
  const row = await appendSamples(base, from + samples + 3, blocks);
  rmSync(base, { recursive: true, force: true });
  return row;
}

/** Appends `blocks` one by one on the four copies under `base` (the sides' order rotating), checks they end at one commit. */
async function appendSamples(base: string, size: number, blocks: BlockFile[]): Promise<AppendRow> {
  const samples = blocks.length - 3;
  const repo = await ChainRepo.open(join(base, 'vouch'));
  const writers: Record<Exclude<AppendSide, 'vouch'>, StockWriter> = {
    plumbing: new PlumbingWriter(join(base, 'plumbing')),
    'plumbing+dirsync': new PlumbingWriter(join(base, 'plumbing+dirsync'), true),
    fastimport: new FastImportWriter(join(base, 'fastimport')),
  };
  const row: AppendRow = { size, samples, ms: { vouch: [], plumbing: [], 'plumbing+dirsync': [], fastimport: [] }, packsAfterFastImport: 0 };
  try {
    for (let k = 0; k < blocks.length; k++) {
      const b = blocks[k]!;
      for (const side of rotated([...APPEND_SIDES], k)) {
        const t = performance.now();
        if (side === 'vouch') await repo.append([b], checkpointText(b.index + 1), info(b.index));
        else await writers[side].append(b, checkpointText(b.index + 1), info(b.index));
        if (k >= 3) row.ms[side].push(performance.now() - t); // the first three warm up
      }
    }
  } finally {
    for (const w of Object.values(writers)) await w.close();
  }
  if (repo.warnings.length) throw new Error(`append warnings: ${repo.warnings.join('; ')}`);
  // The same blocks, trees and commits on all sides.
  const want = git(join(base, 'vouch'), 'rev-parse', 'main');
  for (const side of APPEND_SIDES.slice(1)) {
    const got = git(join(base, side), 'rev-parse', 'main');
    if (got !== want) throw new Error(`append: ${side} ended at ${got}, vouch at ${want}`);
  }
  git(join(base, 'plumbing'), 'fsck', '--no-dangling', '--connectivity-only');
  row.packsAfterFastImport = packCount(join(base, 'fastimport', '.git'));
  console.log(`append at ${size}: p50 ${APPEND_SIDES.map((s) => `${s} ${median(row.ms[s]).toFixed(2)} ms`).join(', ')}`);
  return row;
}

// ---------------------------------------------------------------------------
// Clone (mirror bootstrap's transfer) and fetch of one append

type CloneSide = 'vouch' | 'git' | 'git+proxy';
interface CloneRow {
  blocks: number;
  rounds: number;
  ms: Record<CloneSide, number[]>;
  rss: Record<CloneSide, number[]>;
  bytes: Record<CloneSide, number>;
  fetchMs: Record<CloneSide, number[]>;
  cut: number;
  /** Peak RSS of the vouch child that loads the store and clones nothing. */
  baselineRssMiB: number;
}

const GIT_ENV = { GIT_HTTP_LOW_SPEED_LIMIT: '1', GIT_HTTP_LOW_SPEED_TIME: '30', GIT_TERMINAL_PROMPT: '0' };

/** Adds one commit (a block file and checkpoint.json) to the bare remote, as an authority's push would. */
function remoteAppend(bare: string, i: number, b: BlockFile): void {
  const c = checkpointText(i + 1);
  const data = (s: string) => `data ${Buffer.byteLength(s)}\n${s}\n`;
  const who = `bench <bench@vouch.invalid> ${1_790_000_000 + i} +0000`;
  const input =
    `commit refs/heads/main\nauthor ${who}\ncommitter ${who}\n${data(`block ${i}\n`)}from refs/heads/main^0\n` +
    `M 100644 inline ${blockPath(i)}\n${data(b.content)}M 100644 inline checkpoint.json\n${data(c)}\ndone\n`;
  const r = spawnSync('git', ['-C', bare, 'fast-import', '--quiet', '--done'], { input, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`remote append failed: ${r.stderr}`);
}

async function cloneRows(work: string, src: string, n: number, rounds: number, fetches: number, tail: BlockFile[]): Promise<CloneRow> {
  mkdirSync(join(work, 'srv'), { recursive: true });
  const server = await GitServer.start(join(work, 'srv'));
  const bare = join(work, 'srv', 'chain.git');
  const r = spawnSync('git', ['clone', '-q', '--bare', src, bare], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git clone --bare failed: ${r.stderr}`);
  // The product's proxy (the mirror clone's), serving every clone and fetch of the git+proxy side.
  const proxy = await GitFetchProxy.start(server.url('chain.git'), {}, 10_000);
  const url = { vouch: server.url('chain.git'), git: server.url('chain.git'), 'git+proxy': proxy.url };
  const row: CloneRow = {
    blocks: n,
    rounds,
    ms: { vouch: [], git: [], 'git+proxy': [] },
    rss: { vouch: [], git: [], 'git+proxy': [] },
    bytes: { vouch: 0, git: 0, 'git+proxy': 0 },
    fetchMs: { vouch: [], git: [], 'git+proxy': [] },
    cut: 0,
    baselineRssMiB: 0,
  };
  const sides: CloneSide[] = ['vouch', 'git', 'git+proxy'];
  const dirOf = (side: CloneSide, k: number) => join(work, `clone-${side.replace('+', '-')}-${k}`);
  try {
    for (let k = 0; k < rounds; k++) {
      for (const side of rotated(sides, k)) {
        const dir = dirOf(side, k);
        let ms: number;
        let rss: number;
        if (side === 'vouch') {
          // Under /usr/bin/time: the peak is the largest process of the tree (node, or the git it runs to clone).
          const c = await run('/usr/bin/time', ['-f', 'maxrss %M', process.execPath, '--import', 'tsx', self, '--clone-child', url.vouch, dir]);
          if (c.status !== 0) throw new Error(`vouch clone failed: ${c.stderr}`);
          const fig = JSON.parse(c.stdout.trim().split('\n').pop()!) as { ms: number; rssMiB: number };
          ms = fig.ms;
          rss = Math.max(fig.rssMiB, Number(/maxrss (\d+)/.exec(c.stderr)?.[1] ?? 0) / 1024);
        } else {
          const c = await run('/usr/bin/time', ['-f', 'maxrss %M', 'git', ...DURABLE, 'clone', '-q', '--sparse', url[side], dir], GIT_ENV);
          if (c.status !== 0) throw new Error(`git clone (${side}) failed: ${c.stderr}`);
          ms = c.ms;
          rss = Number(/maxrss (\d+)/.exec(c.stderr)?.[1] ?? Number.NaN) / 1024;
        }
        if (git(dir, 'rev-parse', 'main') !== git(bare, 'rev-parse', 'main')) throw new Error(`${side} clone is not at the remote head`);
        row.ms[side].push(ms);
        row.rss[side].push(rss);
        row.bytes[side] = bytesUnder(join(dir, '.git'));
        console.log(`clone round ${k + 1} ${side}: ${f1(ms / 1000)} s, peak RSS ${Math.round(rss)} MiB`);
        if (k > 0) rmSync(dirOf(side, k - 1), { recursive: true, force: true });
      }
    }
    // Fetch of one append into the last round's clones.
    const last = rounds - 1;
    const repo = await ChainRepo.open(dirOf('vouch', last));
    let next = n;
    for (let k = 0; fetches > 0 && k < fetches + 1; k++) {
      remoteAppend(bare, next, { index: next, content: tail[k % tail.length]!.content }); // a real block's bytes at the next index
      next++;
      for (const side of rotated(sides, k)) {
        const t = performance.now();
        if (side === 'vouch') {
          const got = await repo.fetch(url.vouch);
          if (got.objects === 0) throw new Error('vouch fetch received nothing');
        } else {
          const c = await run('git', [...DURABLE, '-C', dirOf(side, last), 'fetch', '-q', 'origin'], GIT_ENV);
          if (c.status !== 0) throw new Error(`git fetch (${side}) failed: ${c.stderr}`);
        }
        if (k > 0) row.fetchMs[side].push(performance.now() - t); // the first warms up
      }
    }
    const head = git(bare, 'rev-parse', 'main');
    for (const side of sides) {
      if (fetches > 0 && git(dirOf(side, last), 'rev-parse', 'refs/remotes/origin/main') !== head) throw new Error(`${side} did not fetch the remote head`);
    }
    row.cut = proxy.cut;
    const b = await run(process.execPath, ['--import', 'tsx', self, '--clone-child', '--baseline', '']);
    row.baselineRssMiB = (JSON.parse(b.stdout.trim().split('\n').pop()!) as { rssMiB: number }).rssMiB;
  } finally {
    await proxy.close();
    await server.stop();
    for (const side of sides) for (let k = 0; k < rounds; k++) rmSync(dirOf(side, k), { recursive: true, force: true });
    rmSync(join(work, 'srv'), { recursive: true, force: true });
  }
  return row;
}

async function cloneChild(url: string, dir: string): Promise<void> {
  if (url === '--baseline') {
    console.log(JSON.stringify({ ms: 0, rssMiB: peakRssMiB() })); // the same process with the store loaded, cloning nothing
    return;
  }
  const t0 = performance.now();
  const repo = await ChainRepo.clone(url, dir);
  const ms = performance.now() - t0;
  if (!repo.size) throw new Error('empty clone');
  console.log(JSON.stringify({ ms, rssMiB: peakRssMiB() }));
}

// ---------------------------------------------------------------------------
// Repack and disk

type RepackSide = 'vouch' | 'git -d' | 'git --geometric=2 -d';
interface RepackRow {
  size: number;
  appended: number;
  looseBytes: number;
  rounds: number;
  ms: Record<RepackSide, number[]>;
  bytes: Record<RepackSide, number>;
  packs: Record<RepackSide, number>;
  full: { vouchBytes: number; gitMs: number; gitBytes: number };
  /** Appends one after another across LOOSE_PACK_THRESHOLD on copies, each round on both sides (the repack beside the appends, and `VOUCH_REPACK_APPENDS=wait`). */
  window?: Record<WindowSide, WindowRun[]>;
}

/** `beside`: appends go on while git repacks (the store now); `wait`: the append behind a repack waits for it (`VOUCH_REPACK_APPENDS=wait`, the store before). */
const WINDOW_SIDES = ['beside', 'wait'] as const;
type WindowSide = (typeof WINDOW_SIDES)[number];
interface WindowRun {
  ms: number[];
  repacks: number;
  repackMs: number;
}

/** `n` appends one by one on a link copy of `base` (crossing the repack threshold at least once): their times and the repacks the store ran meanwhile. */
async function appendWindow(work: string, base: string, n: number, side: WindowSide): Promise<WindowRun> {
  const dir = join(work, `repack-window-${side}`);
  linkCopy(base, dir);
  const env = process.env.VOUCH_REPACK_APPENDS;
  if (side === 'wait') process.env.VOUCH_REPACK_APPENDS = 'wait';
  else delete process.env.VOUCH_REPACK_APPENDS;
  let repo: ChainRepo;
  try {
    repo = await ChainRepo.open(dir); // the writer reads the switch here
  } finally {
    if (env === undefined) delete process.env.VOUCH_REPACK_APPENDS;
    else process.env.VOUCH_REPACK_APPENDS = env;
  }
  const ms: number[] = [];
  const texts = Math.min(1000, repo.size); // the block texts appended again: of the first 1,000 blocks, or all of a smaller chain (--sizes=300)
  for (let k = 0; k < n; k++) {
    await new Promise((r) => setImmediate(r)); // a turn of the event loop between appends, as a gateway's requests give it (git's exit is seen)
    const i = repo.size;
    const t = performance.now();
    await repo.append([{ index: i, content: repo.readBlockFile(i % texts) }], checkpointText(i + 1), info(i));
    ms.push(performance.now() - t);
  }
  await repo.repack(); // waits for a repack still running
  const w = { ms, repacks: repo.packTimes.count - 1, repackMs: repo.packTimes.maxMs };
  if (repo.warnings.length) throw new Error(`append window (${side}): ${repo.warnings.join('; ')}`);
  rmSync(dir, { recursive: true, force: true });
  return w;
}

/** `rounds` windows on each side, the sides' order rotating each round. */
async function appendWindows(work: string, base: string, n: number, rounds: number): Promise<Record<WindowSide, WindowRun[]>> {
  const out: Record<WindowSide, WindowRun[]> = { beside: [], wait: [] };
  for (let k = 0; k < rounds; k++) {
    for (const side of rotated([...WINDOW_SIDES], k)) {
      const w = await appendWindow(work, base, n, side);
      out[side].push(w);
      const p = (q: number) => [...w.ms].sort((a, b) => a - b)[Math.ceil(q * w.ms.length) - 1]!;
      console.log(
        `appends across the repack threshold (${side}, round ${k + 1}): p50 ${f1(p(0.5))} ms, p99 ${f1(p(0.99))} ms, max ${f1(Math.max(...w.ms))} ms, ${w.repacks} repack(s) of at most ${f1(w.repackMs)} ms`,
      );
    }
  }
  return out;
}

async function repackRows(work: string, chain: BlockFile[], appended: number, rounds: number): Promise<RepackRow> {
  const base = join(work, 'repack-src');
  const size = chain.length;
  const repo = await ChainRepo.init(base, chain.slice(0, size - appended), checkpointText(size - appended), info(0));
  for (let i = size - appended; i < size; i++) await repo.append([chain[i]!], checkpointText(i + 1), info(i));
  return repackMeasure(work, base, size, appended, rounds, true);
}

/** At a fixture's size: a link copy of the fixture and `appended` blocks appended after it (loose), then the same rounds; no full repack (the git-packed fixture is that result). */
async function repackOnFixture(work: string, src: string, tail: BlockFile[], appended: number, rounds: number): Promise<RepackRow> {
  const base = join(work, 'repack-src');
  linkCopy(src, base);
  const repo = await ChainRepo.open(base);
  const from = repo.size;
  for (let k = 0; k < appended; k++)
    await repo.append([{ index: from + k, content: tail[k % tail.length]!.content }], checkpointText(from + k + 1), info(from + k));
  return repackMeasure(work, base, from + appended, appended, rounds, false);
}

async function repackMeasure(work: string, base: string, size: number, appended: number, rounds: number, full: boolean): Promise<RepackRow> {
  const repo = await ChainRepo.open(base);
  if (repo.pendingLoose === 0) throw new Error('repack: no loose objects to pack');
  const looseBytes = bytesUnder(join(base, '.git', 'objects')) - bytesUnder(join(base, '.git', 'objects', 'pack'));
  const sides: RepackSide[] = ['vouch', 'git -d', 'git --geometric=2 -d'];
  const row: RepackRow = {
    size,
    appended,
    looseBytes,
    rounds,
    ms: { vouch: [], 'git -d': [], 'git --geometric=2 -d': [] },
    bytes: { vouch: 0, 'git -d': 0, 'git --geometric=2 -d': 0 },
    packs: { vouch: 0, 'git -d': 0, 'git --geometric=2 -d': 0 },
    full: { vouchBytes: 0, gitMs: 0, gitBytes: 0 },
  };
  for (let k = 0; k < rounds; k++) {
    for (const side of rotated(sides, k)) {
      const dir = join(work, `repack-${k}`);
      linkCopy(base, dir);
      let ms: number;
      if (side === 'vouch') {
        const copy = await ChainRepo.open(dir);
        const t = performance.now();
        await copy.repack();
        ms = performance.now() - t;
      } else {
        const extra = side === 'git -d' ? ['-d'] : ['--geometric=2', '-d'];
        const c = await run('git', [...DURABLE, '-C', dir, 'repack', '-q', ...extra]);
        if (c.status !== 0) throw new Error(`git repack failed: ${c.stderr}`);
        ms = c.ms;
      }
      row.ms[side].push(ms);
      row.bytes[side] = bytesUnder(join(dir, '.git', 'objects'));
      row.packs[side] = packCount(join(dir, '.git'));
      if (side === 'vouch' && k === 0) row.full.vouchBytes = row.bytes.vouch;
      rmSync(dir, { recursive: true, force: true });
    }
    console.log(`repack round ${k + 1}: ${sides.map((s) => `${s} ${f1(row.ms[s][k]!)} ms`).join(', ')}`);
  }
  row.window = await appendWindows(work, base, 400, rounds);
  if (!full) {
    rmSync(base, { recursive: true, force: true });
    return row;
  }
  // Disk: the whole repository packed by git with deltas (what a clone or `git gc` leaves).
  const dir = join(work, 'repack-full');
  cpSync(base, dir, { recursive: true });
  const c = await run('git', [...DURABLE, '-C', dir, 'repack', '-q', '-a', '-d']);
  if (c.status !== 0) throw new Error(`git repack -a -d failed: ${c.stderr}`);
  row.full.gitMs = c.ms;
  row.full.gitBytes = bytesUnder(join(dir, '.git', 'objects'));
  rmSync(dir, { recursive: true, force: true });
  rmSync(base, { recursive: true, force: true });
  return row;
}

// ---------------------------------------------------------------------------

const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

/** The two fixtures of a size past what the bench builds itself (in bench/out, or VOUCH_GITOPS_FIXTURES for the test): the chain as vouch packs it and as git packed it (deltas). */
export function fixturesOf(n: number): { label: string; dir: string }[] {
  const root = process.env.VOUCH_GITOPS_FIXTURES ?? fileURLToPath(new URL('./out/', import.meta.url));
  return [
    { label: 'as vouch packs it (every object whole)', dir: join(root, `chain-${n}-sparse`) },
    { label: 'packed by git (deltas)', dir: join(root, `chain-${n}-sparse-gitpacked`) },
  ];
}

/** The rows on existing fixtures (`--sizes=1000000`): each row on each fixture, through link copies; section `gitops-<n>`. */
async function fixtureRows(n: number, rowsWanted: Set<string>, quick: boolean): Promise<{ title: string; markdown: string; key: string }> {
  const rounds = Number(arg('rounds') ?? (quick ? 1 : 2));
  const load0 = loadavg()[0]!;
  const loads: number[] = [load0];
  const work = mkdtempSync(join(tmpdir(), 'vouch-gitops-fixture-'));
  const out: string[] = [
    `Every row side by side in one run on link copies of bench/out/chain-${n}-sparse (as vouch packs it) and bench/out/chain-${n}-sparse-gitpacked (as git packed it, deltas); medians. Stock git runs with \`${DURABLE.filter((x) => x !== '-c').join(' ')}\`.`,
    '',
    '| Row | Fixture | vouch (its store: hand-written, or the stock git it runs where the row says) | stock git | Note |',
    '|---|---|---|---|---|',
  ];
  const N = n.toLocaleString('en');
  const restores: (() => void)[] = [];
  try {
    const only = arg('fixture'); // vouch-packed | git-packed: one fixture only
    for (const fx of fixturesOf(n).filter((f) => !only || (only === 'git-packed') === f.dir.endsWith('-gitpacked'))) {
      restores.push(keepPackTimes(fx.dir));
      const gitpacked = fx.dir.endsWith('-gitpacked');
      const fxName = gitpacked ? 'git-packed' : 'vouch-packed';
      const src = await ChainRepo.open(fx.dir, { repair: false });
      if (src.size !== n) throw new Error(`${fx.dir} holds ${src.size} blocks, not ${n}`);
      const tail: BlockFile[] = [];
      // Real block texts of the chain with the next indexes written in: new blobs of a block's size, as an append makes.
      for (let i = n - 300; i < n; i++) tail.push({ index: i, content: src.readBlockFile(i).replace(/"index": \d+/, `"index": ${i + 300}`) });
      const objBytes = bytesUnder(join(fx.dir, '.git', 'objects'));
      console.log(`fixture ${fx.dir}: ${mib(objBytes)} of objects`);
      if (rowsWanted.has('append')) {
        const a = await appendOnFixture(work, fx.dir, tail, Number(arg('append-samples') ?? (quick ? 20 : 100)));
        const p = (s: keyof AppendRow['ms']) => `${median(a.ms[s]).toFixed(2)} ms (p90 ${q90(a.ms[s]).toFixed(2)})`;
        out.push(
          `| append p50 after ${N} blocks (${a.samples} appends, each side) | ${fxName} | ${p('vouch')} | plumbing ${p('plumbing')}; + vouch's directory fsyncs ${p('plumbing+dirsync')}; fast-import ${p('fastimport')} | fast-import left ${a.packsAfterFastImport} pack(s) |`,
        );
        loads.push(loadavg()[0]!);
      }
      if (rowsWanted.has('endorse')) {
        const e: EndorseRow = await endorseRow(work, fx.dir, Number(arg('endorse-samples') ?? (quick ? 3 : 9)), {
          scanFirst: process.argv.includes('--endorse-scan'),
        });
        const p = (s: keyof EndorseRow['ms']) => `${median(e.ms[s]).toFixed(0)} ms`;
        out.push(
          `| whole-process \`vouch endorse\` at ${N} (${e.ms.vouch.length} endorses, offline key, verified state present) | ${fxName} | ${p('vouch')} (the whole CLI) | the store's part as processes: plumbing ${p('plumbing')} (${e.plumbingProcs} git processes); one \`fast-import\` ${p('fastimport')} | writing the verified state first (a gateway start's cold load): ${f1(e.stateMs / 1000)} s${e.scanMs === null ? '' : `; an endorse without it (scans every block file): ${f1(e.scanMs / 1000)} s`} |`,
        );
        console.log(`endorse at ${n} (${fxName}): ${ENDORSE_LOG(e)}`);
        loads.push(loadavg()[0]!);
      }
      if (rowsWanted.has('clone') || rowsWanted.has('fetch')) {
        const c = await cloneRows(work, fx.dir, n, rounds, rowsWanted.has('fetch') ? (quick ? 3 : 5) : 0, tail.slice(-20));
        const m = (s: CloneSide) => `${f1(median(c.ms[s]) / 1000)} s, peak RSS ${Math.round(median(c.rss[s]))} MiB, ${mib(c.bytes[s])} on disk`;
        out.push(
          `| mirror clone of ${N} blocks (${c.rounds} round(s)) | ${fxName} | ${m('vouch')} (node cloning nothing: ${Math.round(c.baselineRssMiB)} MiB) | \`git clone --sparse\`: ${m('git')}; behind the bounding proxy: ${m('git+proxy')} | proxy cut ${c.cut} answers |`,
        );
        if (c.fetchMs.vouch.length) {
          const fm = (s: CloneSide) => `${f1(median(c.fetchMs[s]))} ms`;
          out.push(
            `| fetch of one append at ${N} (${c.fetchMs.vouch.length} fetches) | ${fxName} | ${fm('vouch')} | \`git fetch\`: ${fm('git')}; behind the proxy: ${fm('git+proxy')} | |`,
          );
        }
        loads.push(loadavg()[0]!);
      }
      if (rowsWanted.has('repack')) {
        const r = await repackOnFixture(work, fx.dir, tail, quick ? 50 : 250, rounds);
        const m = (s: RepackSide) => `${f1(median(r.ms[s]))} ms, ${mib(r.bytes[s])}, ${r.packs[s]} packs`;
        out.push(
          `| repack of ${r.appended} appends' loose objects (${mib(r.looseBytes)}) after ${N} blocks (${r.rounds} round(s)) | ${fxName} | stock git children (store/git-repack.ts): ${m('vouch')} | \`repack -d\`: ${m('git -d')}; \`--geometric=2 -d\`: ${m('git --geometric=2 -d')} | |`,
          windowLine(r, fxName),
        );
        loads.push(loadavg()[0]!);
      }
      out.push(
        `| disk of the repository (objects) | ${fxName} | ${gitpacked ? '' : mib(objBytes)} | ${gitpacked ? `${mib(objBytes)} (\`git repack -a -d\` of the vouch-packed chain)` : ''} | the fixture as it is |`,
      );
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
    for (const r of restores) r();
  }
  loads.push(loadavg()[0]!);
  out.push(
    '',
    `Load average (1 min) ${loads.map((l) => l.toFixed(1)).join(', ')} (start, after each row, end), on ${process.env.CI ? 'CI' : 'a shared machine'}.`,
  );
  return { title: `Writes, endorse, clone and repack at ${N}: vouch vs stock git (issue 33)`, markdown: out.join('\n'), key: `gitops-${n}` };
}

/** The row of appends across the repack threshold, both sides (vouch's repack is the stock git child of store/git-repack.ts); medians over the rounds. */
function windowLine(r: RepackRow, fx?: string): string {
  const side = (s: WindowSide) => {
    const runs = r.window![s];
    const q = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.ceil(p * xs.length) - 1]!;
    const med = (f: (w: WindowRun) => number) => median(runs.map(f));
    const max = med((w) => Math.max(...w.ms));
    const repack = med((w) => w.repackMs);
    return `append p50 ${f1(med((w) => q(w.ms, 0.5)))} ms, p99 ${f1(med((w) => q(w.ms, 0.99)))} ms, max ${f1(max)} ms; ${runs[0]!.repacks} repack(s) of at most ${f1(repack)} ms; max append / repack ${(max / repack).toFixed(2)}`;
  };
  const n = r.window!.beside[0]!.ms.length;
  return `| ${n} appends one by one across the repack threshold after ${r.size.toLocaleString('en')} blocks (${r.window!.beside.length} round(s), medians)${fx ? ` | ${fx}` : ''} | appends beside git's repack: ${side('beside')} | | before (\`VOUCH_REPACK_APPENDS=wait\`: the append behind a repack waits for it), same run: ${side('wait')} |`;
}

const ENDORSE_LOG = (e: EndorseRow) => ENDORSE_SIDES.map((s) => `${s} ${median(e.ms[s]).toFixed(0)} ms`).join(', ');

export async function runGitopsBench(quick: boolean): Promise<{ title: string; markdown: string; key?: string }> {
  const sizes = arg('sizes')?.split(',').map(Number);
  if (sizes) {
    if (sizes.length !== 1 || !Number.isInteger(sizes[0]) || sizes[0]! < 300)
      throw new Error(
        '--sizes= takes one size whose fixtures are in bench/out (chain-N-sparse, chain-N-sparse-gitpacked); without it the bench builds its own 1k and 50k chains',
      );
    return fixtureRows(sizes[0]!, new Set((arg('rows') ?? 'append,endorse,clone,repack').split(',')), quick);
  }
  const rowsWanted = new Set((arg('rows') ?? 'append,clone,fetch,push,repack').split(','));
  const n = quick ? 5_000 : 50_000;
  const rounds = Number(arg('rounds') ?? (quick ? 2 : 3));
  const load0 = loadavg()[0]!;
  const work = mkdtempSync(join(tmpdir(), 'vouch-gitops-'));
  const out: string[] = [
    `Every row side by side in one run, the sides' order rotating each round; medians. Stock git runs with \`${DURABLE.filter((x) => x !== '-c').join(' ')}\`.`,
    '',
    '| Row | vouch (its store: hand-written, or the stock git it runs where the row says) | stock git | Note |',
    '|---|---|---|---|',
  ];
  try {
    const chain = await realBlocks(n, n);
    if (rowsWanted.has('append')) {
      const samples = quick ? 30 : 150;
      for (const a of await appendRows(work, chain, [1_000, n], samples)) {
        const p = (s: keyof AppendRow['ms']) => `${median(a.ms[s]).toFixed(2)} ms (p90 ${q90(a.ms[s]).toFixed(2)})`;
        out.push(
          `| append p50 up to ${a.size.toLocaleString('en')} blocks (the last ${a.samples} appends, each side) | ${p('vouch')} | plumbing ${p('plumbing')}; plumbing + vouch's directory fsyncs ${p('plumbing+dirsync')}; fast-import ${p('fastimport')} | fast-import's checkpoints left ${a.packsAfterFastImport} pack(s) (a small one is unpacked to loose objects) |`,
        );
      }
    }
    if (rowsWanted.has('clone') || rowsWanted.has('fetch')) {
      const c = await cloneRows(work, await benchChainDir(n), n, rounds, quick ? 5 : 15, chain.slice(-20));
      const m = (s: CloneSide) => `${f1(median(c.ms[s]) / 1000)} s, peak RSS ${Math.round(median(c.rss[s]))} MiB, ${mib(c.bytes[s])} on disk`;
      const fm = (s: CloneSide) => `${f1(median(c.fetchMs[s]))} ms`;
      out.push(
        `| mirror clone of ${n.toLocaleString('en')} blocks (${c.rounds} rounds; the cold verify after it is the same code on every side) | ${m('vouch')} (the node process cloning nothing: ${Math.round(c.baselineRssMiB)} MiB) | \`git clone --sparse\`: ${m('git')}; behind the bounding proxy: ${m('git+proxy')} | proxy cut ${c.cut} answers |`,
        `| fetch of one append at ${n.toLocaleString('en')} (${c.fetchMs.vouch.length} fetches) | ${fm('vouch')} | \`git fetch\`: ${fm('git')}; behind the proxy: ${fm('git+proxy')} | |`,
      );
    }
    if (rowsWanted.has('push')) {
      const [p] = await benchPush({ sizes: [n], samples: quick ? 5 : 15 });
      out.push(
        `| push of one append at ${n.toLocaleString('en')} commits (${p!.samples} pushes) | ${f1(p!.medianMs)} ms (walk+pack ${p!.walkMs.toFixed(2)} ms) | \`git push\`: ${f1(p!.gitCliMs)} ms | server's connectivity check alone ${f1(p!.serverCheckMs)} ms |`,
      );
    }
    if (rowsWanted.has('repack')) {
      const r = await repackRows(work, chain, quick ? 100 : 250, rounds);
      const m = (s: RepackSide) => `${f1(median(r.ms[s]))} ms, ${mib(r.bytes[s])}, ${r.packs[s]} packs`;
      out.push(
        `| repack of the last ${r.appended} appends' loose objects (${mib(r.looseBytes)}) of ${r.size.toLocaleString('en')} blocks (${r.rounds} rounds) | stock git children (store/git-repack.ts): ${m('vouch')} | \`repack -d\`: ${m('git -d')}; \`--geometric=2 -d\`: ${m('git --geometric=2 -d')} | |`,
        `| disk of the repository (objects) | ${mib(r.full.vouchBytes)} after vouch's repack | \`repack -a -d\`: ${mib(r.full.gitBytes)} (${f1(r.full.gitMs / 1000)} s) | |`,
        windowLine(r),
      );
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  out.push(
    '',
    `Load average (1 min) ${load0.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end, on ${process.env.CI ? 'CI' : 'a shared machine'}.`,
  );
  return { title: 'Writes, fetch and push: vouch vs stock git (issue 33)', markdown: out.join('\n') };
}

if (process.argv[2] === '--clone-child') {
  await cloneChild(process.argv[3]!, process.argv[4]!);
} else if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const r = await runGitopsBench(process.argv.includes('--quick'));
  console.log(r.markdown);
}
