/**
 * A chain's files as branch main commits them, for tests: vouch keeps one
 * layout, the sparse one, so block files live in git objects only
 * (docs/spec/repository.md "Layouts"). `chainFile` reads one as git shows
 * it; `forgeChainFiles` commits changed files on top of main with git's
 * plumbing (a temporary index), as an attacker or a hand edit would.
 * Owns: nothing but the commit it makes.
 * Must hold: the working tree and `.git/index` are left alone (the next
 * open with repair catches them up).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gitIn } from './processes.ts';

/** The text of `path` (e.g. blockPath(7)) on branch main of the chain in `dir`. */
export function chainFile(dir: string, path: string): string {
  return gitIn(dir, 'show', `main:${path}`);
}

/** Commit `files` (path → new text, or null to delete) on top of branch main of the chain in `dir`; returns the commit. */
export function forgeChainFiles(dir: string, files: Record<string, string | null>): string {
  const tmp = mkdtempSync(join(tmpdir(), 'vouch-forge-'));
  const env = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_INDEX_FILE: join(tmp, 'index') };
  const git = (args: string[], input?: string): string => {
    const r = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8', env, input, maxBuffer: 1 << 28 });
    if (r.status !== 0) throw new Error(`git ${args.join(' ')} failed: ${r.stderr}`);
    return r.stdout.trim();
  };
  try {
    git(['read-tree', 'main']);
    for (const [path, text] of Object.entries(files)) {
      if (text === null) git(['update-index', '--force-remove', path]);
      else git(['update-index', '--add', '--cacheinfo', `100644,${git(['hash-object', '-w', '--stdin'], text)},${path}`]);
    }
    const tree = git(['write-tree']);
    const commit = git(['-c', 'user.name=Forger', '-c', 'user.email=forger@x.invalid', 'commit-tree', tree, '-p', 'main', '-m', 'forged by a test']);
    git(['update-ref', 'refs/heads/main', commit]);
    return commit;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}
