/**
 * The chains `npm run bench -- scale` measures, and its copies of them:
 * `chainFor(n)` (the fixture of bench/chain-dir.ts, built in a child with a
 * large heap, or `VOUCH_SCALE_CHAIN_<n>`; only ever read); `linkCopy` for
 * read-only gateways and `vouch verify` (`blocks/` and `.git/objects/` hard
 * linked: everything vouch and git write there goes through temp + rename,
 * which replaces a link rather than writing through it); `fullCopy` (`cp
 * -a`) for writers; `packedClone` (`git clone --bare --no-local`);
 * `gitPackedSource`, the sparse chain repacked by stock git (deltas), cached.
 * Must hold: nothing written through a copy reaches the source; all copies
 * live under bench/out/scale-tmp (git-ignored).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { ChainRepo } from '../../store/chain-repo.ts';
import { SPARSE_CONFIG, SPARSE_INDEX_CONFIG } from '../../store/sparse-layout.ts';
import { join } from 'node:path';
import { root } from '../gateway-harness.ts';
import { say, timed } from './procs.ts';

const HOUR = 3_600_000;
const ALIASES: Record<number, string> = { 1000000: '1M', 50000: '50K' };

/** The block count a chain directory's checkpoint names. */
export function chainSize(dir: string): number {
  return JSON.parse(readFileSync(join(dir, 'checkpoint.json'), 'utf8')).size;
}

export async function chainFor(n: number): Promise<string> {
  const env = process.env[`VOUCH_SCALE_CHAIN_${n}`] ?? (ALIASES[n] ? process.env[`VOUCH_SCALE_CHAIN_${ALIASES[n]}`] : undefined);
  let dir = env ?? join(root, 'bench', 'out', `chain-${n}`);
  if (env === undefined && !existsSync(join(dir, 'checkpoint.json'))) {
    say(`building the ${n.toLocaleString('en')}-block fixture chain (bench/chain-dir.ts, in a child with a 14 GB heap; a million blocks take a long time)...`);
    const r = await timed(process.execPath, ['--max-old-space-size=14000', '--import', 'tsx', join(root, 'bench', 'scale', 'build-chain.ts'), String(n)], {
      timeoutMs: 6 * HOUR,
    });
    dir = r.stdout.trim().split('\n').pop()!;
    say(`  built in ${(r.ms / 1000).toFixed(0)} s`);
  }
  if (!existsSync(join(dir, 'checkpoint.json'))) throw new Error(`bench: ${dir} is not a chain directory (no checkpoint.json)`);
  const size = chainSize(dir);
  if (size !== n) throw new Error(`bench: ${dir} holds ${size} blocks, not ${n}`);
  // The real directory: `cp -a` of a symlink would copy the link, and the writers would write through it.
  return realpathSync(dir);
}

/**
 * The sparse layout of `src` (docs/spec/repository.md "Layouts"), made once and cached in
 * bench/out/chain-<n>-sparse: a copy of `.git` and the root files, git's
 * sparse-checkout configuration written as `vouch init --layout sparse`
 * writes it, then `ChainRepo.open`, which writes the sparse index (and
 * drops the full layout's split index). The source is only read.
 */
export async function sparseSource(src: string, n: number): Promise<string> {
  const dir = join(root, 'bench', 'out', `chain-${n}-sparse`);
  if (existsSync(join(dir, '.git', 'vouch-state.json')) && existsSync(join(dir, 'checkpoint.json'))) return dir;
  say(`making the sparse layout of the ${n.toLocaleString('en')}-block chain in ${dir} (a copy of .git)...`);
  await timed('rm', ['-rf', dir], { timeoutMs: HOUR });
  mkdirSync(dir, { recursive: true });
  for (const e of readdirSync(src)) {
    if (e !== 'blocks') await timed('cp', ['-a', join(src, e), join(dir, e)], { timeoutMs: HOUR });
  }
  const config = join(dir, '.git', 'config');
  writeFileSync(config, readFileSync(config, 'utf8').replace('[core]\n', `[core]\n${SPARSE_CONFIG}`) + SPARSE_INDEX_CONFIG);
  const repo = await ChainRepo.open(dir);
  if (!repo.sparse) throw new Error(`bench: ${dir} did not open in the sparse layout`);
  return dir;
}

/**
 * The sparse layout of the n-block chain (`sparseSource`) with every object
 * repacked by stock git: `git repack -a -d -f` recomputes every delta, so
 * the block blobs come out as deltas of each other, as in a chain that went
 * through `git gc`, a `git clone` or a git server's pack (issue 33). Made
 * once (minutes of CPU at 1M) and cached in
 * bench/out/chain-<n>-sparse-gitpacked; the gateway's caches (`.git/vouch-*`
 * but the store's state) are dropped, as a fresh clone has none.
 */
export async function gitPackedSource(sparse: string, n: number): Promise<string> {
  const dir = join(root, 'bench', 'out', `chain-${n}-sparse-gitpacked`);
  const done = join(dir, '.git', 'vouch-bench-gitpacked');
  if (existsSync(done)) return dir;
  say(`repacking a copy of the ${n.toLocaleString('en')}-block sparse chain with stock git (git repack -a -d -f) in ${dir}...`);
  await timed('rm', ['-rf', dir], { timeoutMs: HOUR });
  mkdirSync(dir, { recursive: true });
  await timed('cp', ['-a', `${sparse}/.`, dir], { timeoutMs: HOUR });
  for (const f of gatewayCaches(dir)) rmSync(f, { force: true });
  const r = await timed('git', ['-C', dir, 'repack', '-a', '-d', '-f', '-q'], { timeoutMs: 6 * HOUR });
  const c = await countObjects(join(dir, '.git'));
  const deltas = await packDeltas(join(dir, '.git'));
  writeFileSync(done, JSON.stringify({ repackMs: Math.round(r.ms), ...c, ...deltas }) + '\n');
  say(
    `  repacked in ${(r.ms / 1000).toFixed(0)} s: ${c.packs} pack(s), ${(c.packBytes / 2 ** 20).toFixed(0)} MiB, ${deltas.deltas.toLocaleString('en')} of ${deltas.objects.toLocaleString('en')} objects stored as deltas`,
  );
  return dir;
}

/** What `gitPackedSource` recorded about its repack (time, pack size, deltas), or null. */
export function gitPackedFacts(dir: string): { repackMs: number; packs: number; packBytes: number; objects: number; deltas: number } | null {
  const f = join(dir, '.git', 'vouch-bench-gitpacked');
  return existsSync(f) ? JSON.parse(readFileSync(f, 'utf8')) : null;
}

/** Objects of a repository's packs, and how many of them are stored as deltas (`git cat-file --batch-check='%(deltabase)'`). */
export async function packDeltas(gitDir: string): Promise<{ objects: number; deltas: number }> {
  const out = execFileSync('git', ['--git-dir', gitDir, 'cat-file', '--batch-all-objects', '--unordered', '--batch-check=%(deltabase)'], {
    maxBuffer: 1 << 30,
    encoding: 'latin1',
  });
  let objects = 0;
  let deltas = 0;
  for (const line of out.split('\n')) {
    if (line.length !== 40) continue;
    objects++;
    if (line !== '0'.repeat(40)) deltas++;
  }
  return { objects, deltas };
}

/** The scratch directory of this bench (removed by `cleanTmp`). */
export function scaleTmp(): string {
  const dir = join(root, 'bench', 'out', 'scale-tmp');
  mkdirSync(dir, { recursive: true });
  return dir;
}

export async function removeTree(dir: string): Promise<void> {
  if (!dir.includes(join('bench', 'out', 'scale-tmp'))) throw new Error(`bench: refusing to remove ${dir} (outside bench/out/scale-tmp)`);
  await timed('rm', ['-rf', dir], { timeoutMs: HOUR });
}

/** A copy for read-only use: immutable parts hard-linked, the rest copied (see the header). */
export async function linkCopy(src: string, dst: string): Promise<void> {
  await removeTree(dst);
  mkdirSync(dst, { recursive: true });
  for (const e of readdirSync(src)) {
    if (e === 'blocks') await timed('cp', ['-al', join(src, e), join(dst, e)], { timeoutMs: HOUR });
    else if (e !== '.git') await timed('cp', ['-a', join(src, e), join(dst, e)], { timeoutMs: HOUR });
  }
  mkdirSync(join(dst, '.git'));
  for (const e of readdirSync(join(src, '.git'))) {
    const how = e === 'objects' ? '-al' : '-a';
    await timed('cp', [how, join(src, '.git', e), join(dst, '.git', e)], { timeoutMs: HOUR });
  }
}

/** An independent copy (`cp -a`): nothing shared with the source. */
export async function fullCopy(src: string, dst: string): Promise<void> {
  await removeTree(dst);
  mkdirSync(dst, { recursive: true });
  // `SRC/.`: the directory's content, even when SRC is a symlink.
  await timed('cp', ['-a', `${src}/.`, dst], { timeoutMs: 2 * HOUR });
  if (lstatSync(join(dst, '.git')).isSymbolicLink()) throw new Error(`bench: ${dst}/.git is a symlink`);
}

/** The gateway's snapshot and caches (`.git/vouch-*`, not the store's `vouch-state.json` or a `.lock`): deleted, the next start is cold. */
export function gatewayCaches(dir: string): string[] {
  return readdirSync(join(dir, '.git'))
    .filter((f) => f.startsWith('vouch-') && f !== 'vouch-state.json' && !f.endsWith('.lock'))
    .map((f) => join(dir, '.git', f));
}

/** Loose objects and pack bytes of a repository (`git count-objects -v`). */
export async function countObjects(gitDir: string): Promise<{ loose: number; packs: number; packBytes: number }> {
  const r = await timed('git', ['--git-dir', gitDir, 'count-objects', '-v'], { timeoutMs: HOUR });
  const f = (k: string) => Number(new RegExp(`^${k}: (\\d+)$`, 'm').exec(r.stdout)?.[1] ?? NaN);
  return { loose: f('count'), packs: f('packs'), packBytes: f('size-pack') * 1024 };
}

/** The chain as one packed bare repository at `dst` (also what the mirror row's git server serves). */
export async function packedClone(src: string, dst: string): Promise<{ ms: number }> {
  await removeTree(dst);
  const t0 = performance.now();
  await timed('git', ['clone', '-q', '--bare', '--no-local', src, dst], { timeoutMs: 2 * HOUR });
  return { ms: performance.now() - t0 };
}
