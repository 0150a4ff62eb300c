/**
 * A chain repository's packs and loose objects as the repack tests look at
 * them (test/integration/chain-pack, repack-concurrent), with the real git
 * CLI as the judge (`verify-pack`, `fsck --strict`, `status`), and a `git`
 * put first on PATH that records its runs and slows the repack's children.
 * Owns: the wrapper's directory and pid file (under the caller's root).
 * Must hold: the wrapper execs the real git with the same arguments; its
 * children die with it (parent-death signal), as the store's own do.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import type { BlockFile, ChainRepo, CommitInfo } from '../../store/chain-repo.ts';
import { gitIn } from './processes.ts';

export const block = (i: number): BlockFile => ({ index: i, content: `${JSON.stringify({ index: i, note: 'pack é' }, null, 2)}\n` });
export const blocks = (from: number, n: number): BlockFile[] => Array.from({ length: n }, (_, k) => block(from + k));
export const info = (i: number): CommitInfo => ({
  message: `block ${i}: endorse acme/tool 1.0.${i}\n`,
  authorName: 'Vouch Authority',
  authorEmail: 'authority@vouch.invalid',
  timestamp: 1_760_000_000 + i,
});
export const checkpoint = (n: number) => `{\n  "size": ${n}\n}\n`;

/** Append the next block (its text from `block`) as one commit. */
export async function appendOne(repo: ChainRepo): Promise<void> {
  const i = repo.size;
  await repo.append([block(i)], checkpoint(i + 1), info(i));
}

/** The ids of the loose objects in the chain at `dir` (a fan-out directory git prunes meanwhile holds none). */
export function looseObjects(dir: string): string[] {
  const objects = join(dir, '.git', 'objects');
  const inDir = (d: string): string[] => {
    try {
      return readdirSync(join(objects, d)).map((n) => d + n);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
  };
  return readdirSync(objects)
    .filter((d) => /^[0-9a-f]{2}$/.test(d))
    .flatMap(inDir);
}

/** How many of the 256 object fan-out directories exist. */
export function fanOutDirs(dir: string): number {
  return readdirSync(join(dir, '.git', 'objects')).filter((d) => /^[0-9a-f]{2}$/.test(d)).length;
}

/** The pack names (with an index) of the chain at `dir`. */
export function packs(dir: string): string[] {
  return readdirSync(join(dir, '.git', 'objects', 'pack'))
    .filter((n) => n.endsWith('.idx'))
    .map((n) => n.slice(0, -4));
}

/** Loose objects as `git count-objects -v` counts them. */
export function looseCount(dir: string): number {
  return Number(/^count: (\d+)$/m.exec(gitIn(dir, 'count-objects', '-v'))![1]);
}

/** git's verdict: every pack verifies, fsck --strict finds nothing, status is clean, `commits` commits on main. */
export function assertGitAccepts(dir: string, commits: number, label: string): void {
  for (const p of packs(dir)) {
    const v = spawnSync('git', ['-C', dir, 'verify-pack', '-v', `.git/objects/pack/${p}.idx`], { encoding: 'utf8', maxBuffer: 1 << 28 });
    assert.is(v.status, 0, `${label}: verify-pack ${p}: ${v.stderr}`);
  }
  const fsck = spawnSync('git', ['-C', dir, 'fsck', '--strict', '--no-progress'], { encoding: 'utf8' });
  assert.is(fsck.status, 0, `${label}: fsck status: ${fsck.stderr}`);
  for (const line of `${fsck.stdout}\n${fsck.stderr}`.split('\n'))
    assert.not.match(line, /error|warning|missing|broken|bad|invalid|garbage/i, `${label}: fsck: ${line}`);
  assert.is(gitIn(dir, 'status', '--porcelain', '--untracked-files=all'), '', `${label}: git status`);
  assert.is(gitIn(dir, 'log', '--oneline').trim().split('\n').length, commits, `${label}: git log`);
}

/** Every block read back from git objects (not the working tree), as `block` wrote it. */
export async function assertBlocksInObjects(repo: ChainRepo, label: string): Promise<void> {
  const snap = await repo.snapshotAt(repo.head);
  for (let i = 0; i < repo.size; i++) assert.is(await snap.readBlock(i), block(i).content, `${label}: block ${i}`);
  assert.is(await snap.readFile('checkpoint.json'), checkpoint(repo.size), `${label}: checkpoint`);
}

export interface SlowGit {
  /** The directory to put first on PATH. */
  bin: string;
  /** Where each run's pid (its process group, through setpriv's exec) is appended. */
  pids: string;
  /** Where each run appends `start <ms since the epoch> <pid> <arguments>`, and `end <ms> <pid>` once the real git exited. */
  log: string;
}

/**
 * Write a `git` (in `dir`/bin) that records the pid of every run in
 * `dir`/pids and its start and end in `dir`/log, sleeps `before` seconds
 * before a `repack` or `pack-objects`, runs the real git as its child (with
 * the parent-death signal), and after a `repack` or `prune-packed` sleeps
 * `after` seconds (the fan-out directories git pruned stay gone meanwhile,
 * as while a big repository's packs are rolled up).
 */
export function slowGit(dir: string, before = '0', after = '0'): SlowGit {
  const bin = join(dir, 'bin');
  mkdirSync(bin, { recursive: true });
  const pids = join(dir, 'pids');
  const log = join(dir, 'log');
  const real = spawnSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).stdout.trim();
  const setpriv = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => existsSync(p));
  const run = setpriv ? `${setpriv} --pdeathsig KILL ${real}` : real;
  writeFileSync(
    join(bin, 'git'),
    `#!/bin/sh\necho $$ >> "${pids}"\necho "start $(date +%s%3N) $$ $*" >> "${log}"\n` +
      `case " $* " in *" repack "*|*" pack-objects "*) sleep ${before} ;; esac\n` +
      `${run} "$@"; rc=$?\necho "end $(date +%s%3N) $$" >> "${log}"\n` +
      `case " $* " in *" repack "*|*" prune-packed "*) sleep ${after} ;; esac\nexit $rc\n`,
    { mode: 0o755 },
  );
  writeFileSync(pids, '');
  writeFileSync(log, '');
  return { bin, pids, log };
}

/** Put `git` first on PATH in this process (and the children it starts); returns a function that restores PATH. */
export function useGit(g: SlowGit): () => void {
  const path = process.env.PATH;
  process.env.PATH = `${g.bin}:${path}`;
  return () => {
    process.env.PATH = path;
  };
}

export const pidsIn = (file: string): number[] => readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);

export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
