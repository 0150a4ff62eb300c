/**
 * A chain's packs rewritten with every object whole, by stock git (issue 33):
 * `git repack -A -d -f` with no delta window. A chain git packed (a clone,
 * `git gc`, a git server's pack) stores its block blobs as deltas of each
 * other; reading one then resolves a chain of bases, which random lookups
 * pay on every miss. Figures: docs/performance-git.md "Serving a chain git packed".
 * Owns: the git command line (run with the bounds of ./git-repack.ts `runGit`).
 * Trusts: git to write the new pack before it removes the old ones, and
 * `-A` to leave unreachable objects loose instead of dropping them.
 * Must hold: the caller runs it as the store's single writer (no append or
 * fetch in between) and never beside another repack (`git repack -d` may
 * delete a pack the other just named); every object stays readable throughout.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { runGit } from './git-repack.ts';

export interface WholePackResult {
  ms: number;
  /** Bytes of `.pack` files before and after. */
  before: number;
  after: number;
}

/** Total bytes of the `.pack` files in `gitdir`'s pack directory. */
export function packBytes(gitdir: string): number {
  const dir = join(gitdir, 'objects', 'pack');
  let sum = 0;
  try {
    for (const f of readdirSync(dir)) if (f.endsWith('.pack')) sum += statSync(join(dir, f)).size;
  } catch {
    /* no pack directory */
  }
  return sum;
}

/**
 * Run `git repack` in `dir` so that every object is stored whole (window
 * and depth 0, existing deltas not reused), one thread, at a lower CPU
 * priority, durable (core.fsync for packs and their indexes). Rejects with
 * `io_error` when git fails, runs past `timeoutMs` or `signal` aborts (git is
 * stopped; the old packs are still there: git removes them only after the
 * new one is whole).
 */
export function repackWhole(dir: string, gitdir: string, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<WholePackResult> {
  const before = packBytes(gitdir);
  const t0 = performance.now();
  const args = [
    '-C',
    dir,
    '-c',
    'pack.window=0',
    '-c',
    'pack.depth=0',
    '-c',
    'pack.threads=1',
    '-c',
    'core.fsync=pack,pack-metadata',
    '-c',
    'repack.writeBitmaps=false',
    'repack',
    '-A',
    '-d',
    '-f',
    '-q',
  ];
  return runGit(args, opts).then(() => ({ ms: performance.now() - t0, before, after: packBytes(gitdir) }));
}
