/**
 * A chain's packs rewritten with every object whole, by stock git (issue 33):
 * `git repack -A -d -f` with no delta window. A chain git packed (a clone,
 * `git gc`, a git server's pack) stores its block blobs as deltas of each
 * other; reading one then resolves a chain of bases, which random lookups
 * pay on every miss. Figures: docs/performance-git.md "Serving a chain git packed".
 * Owns: the git command line and its bounds (time, one thread, niceness).
 * Trusts: git to write the new pack before it removes the old ones, and
 * `-A` to leave unreachable objects loose instead of dropping them.
 * Must hold: the caller runs it as the store's single writer (no append or
 * fetch in between); every object stays readable throughout.
 */
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { setPriority } from 'node:os';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';

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
  return new Promise((resolve, reject) => {
    if (opts.signal?.aborted) return reject(new VouchError('io_error', 'git repack was not started: stopping'));
    // Its own process group: stopping it stops the pack-objects git runs, too.
    const child = spawn('git', args, { stdio: ['ignore', 'ignore', 'pipe'], detached: true, env: { ...process.env, GIT_TERMINAL_PROMPT: '0' } });
    const kill = (sig: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig);
      } catch {
        child.kill(sig);
      }
    };
    const stop = () => kill('SIGTERM');
    opts.signal?.addEventListener('abort', stop, { once: true });
    try {
      if (child.pid !== undefined) setPriority(child.pid, 10);
    } catch {
      /* not allowed here: runs at the gateway's priority */
    }
    let err = '';
    child.stderr!.on('data', (d: Buffer) => {
      if (err.length < 4096) err += d.toString('utf8');
    });
    const timer = setTimeout(() => kill('SIGKILL'), opts.timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new VouchError('io_error', `git repack could not start: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', stop);
      if (code === 0) resolve({ ms: performance.now() - t0, before, after: packBytes(gitdir) });
      else {
        const why = signal ? `was stopped (${signal}${signal === 'SIGKILL' ? `, past ${opts.timeoutMs} ms` : ''})` : `exited with ${code}`;
        reject(new VouchError('io_error', `git repack ${why}: ${err.trim().split('\n').pop() ?? ''}`.trim()));
      }
    });
  });
}
