/**
 * Whether a chain's working tree differs from HEAD, by `git status` (files
 * modified, deleted, staged or untracked and not ignored): `vouch verify`
 * reads git objects only, so an edited checkout would otherwise pass in
 * silence (docs/guide/auditing.md). A warning's input, never a verdict.
 * Trusts: the git on PATH; nothing in the directory: git runs with no
 * fsmonitor, no untracked cache, no filter driver (each one configured is
 * emptied), no submodules and no optional locks (nothing is written).
 * Must hold: bounded: the answer is streamed and counted, not kept; the
 * caller's `cancel` (or `timeoutMs`) kills git and answers `compared: false`.
 */
import { spawn, spawnSync } from 'node:child_process';

export type WorktreeStatus = { compared: true; differs: number; first: string | null } | { compared: false; why: string };

/** git's environment without what would point it at another repository, make it ask anything or take a lock. */
function gitEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, GIT_TERMINAL_PROMPT: '0', GIT_OPTIONAL_LOCKS: '0' };
  for (const k of [
    'GIT_DIR',
    'GIT_WORK_TREE',
    'GIT_INDEX_FILE',
    'GIT_OBJECT_DIRECTORY',
    'GIT_ALTERNATE_OBJECT_DIRECTORIES',
    'GIT_NAMESPACE',
    'GIT_CONFIG_PARAMETERS',
  ])
    delete env[k];
  return env;
}

/** `-c` options that keep git from running anything the directory's configuration names, or a reason to skip. */
function hardening(dir: string, env: NodeJS.ProcessEnv): string[] | { why: string } {
  // Reading configuration runs nothing; exit 1 is "no such key".
  const r = spawnSync('git', ['config', '-z', '--get-regexp', '^(filter\\..*|core\\.bare|core\\.worktree)$'], {
    cwd: dir,
    env,
    encoding: 'latin1',
    maxBuffer: 1 << 20,
    timeout: 10_000,
  });
  if (r.error || (r.status !== 0 && r.status !== 1))
    return { why: `git config failed: ${(r.error?.message ?? r.stderr.split('\n')[0]) || `exit ${r.status}`}` };
  const args = ['-c', 'core.fsmonitor=false', '-c', 'core.untrackedCache=false'];
  const filters = new Set<string>();
  for (const item of r.stdout.split('\0')) {
    const nl = item.indexOf('\n');
    const key = nl < 0 ? item : item.slice(0, nl);
    const value = nl < 0 ? '' : item.slice(nl + 1);
    if (key === 'core.bare' && /^(true|yes|on|1)$/i.test(value)) return { why: 'a bare repository has no working tree' };
    if (key === 'core.worktree') return { why: 'core.worktree points the working tree elsewhere' };
    const m = /^filter\.(.+)\.[a-z]+$/.exec(key);
    if (m) filters.add(m[1]!);
  }
  for (const f of filters) args.push('-c', `filter.${f}.clean=`, '-c', `filter.${f}.smudge=`, '-c', `filter.${f}.process=`, '-c', `filter.${f}.required=false`);
  return args;
}

/**
 * Starts `git status` in `dir`; `result` settles with what differs from HEAD
 * (the count, and the first path in git's order), or why nothing was compared.
 */
export function worktreeStatus(dir: string, opts: { timeoutMs?: number } = {}): { result: Promise<WorktreeStatus>; cancel(why: string): void } {
  const env = gitEnv();
  const hard = hardening(dir, env);
  if (!Array.isArray(hard)) return { result: Promise.resolve({ compared: false, why: hard.why }), cancel() {} };
  const child = spawn('git', [...hard, 'status', '--porcelain=v1', '-z', '--no-renames', '--untracked-files=normal', '--ignore-submodules=all'], {
    cwd: dir,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stopped: string | null = null;
  const cancel = (why: string): void => {
    if (stopped !== null || child.exitCode !== null) return;
    stopped = why;
    child.kill('SIGKILL');
  };
  const timer = opts.timeoutMs === undefined ? null : setTimeout(() => cancel(`git status took longer than ${opts.timeoutMs} ms`), opts.timeoutMs);
  const result = new Promise<WorktreeStatus>((resolve) => {
    let differs = 0;
    let first: string | null = null;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      // Entries are `XY path\0`: counted as they come; only the first path is kept (at most 4 KiB of it).
      let at = 0;
      for (let nul = chunk.indexOf(0, at); nul >= 0; nul = chunk.indexOf(0, at)) {
        if (first === null)
          first = Buffer.concat([...pending, chunk.subarray(at, nul)])
            .toString('utf8')
            .slice(3);
        differs++;
        pending = [];
        pendingBytes = 0;
        at = nul + 1;
      }
      if (first === null && at < chunk.length && pendingBytes < 4096) {
        pending.push(chunk.subarray(at));
        pendingBytes += chunk.length - at;
      }
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (err.length < 4096) err += chunk.toString('utf8');
    });
    child.on('error', (e) => {
      if (timer) clearTimeout(timer);
      resolve({ compared: false, why: `git status could not run: ${e.message}` });
    });
    child.on('close', (code) => {
      if (timer) clearTimeout(timer);
      if (stopped !== null) resolve({ compared: false, why: stopped });
      else if (code !== 0) resolve({ compared: false, why: `git status failed: ${err.split('\n')[0] || `exit ${code}`}` });
      else resolve({ compared: true, differs, first });
    });
  });
  return { result, cancel };
}
