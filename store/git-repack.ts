/**
 * The appends' loose objects packed by stock git (issue 33), in place of the
 * hand-written packs: `git pack-objects --revs` over the commits no pack holds
 * yet (objects named by path: each tree a delta of its previous version, block
 * files whole by `.git/info/attributes`), then `git repack --geometric=2 -d`
 * with no delta window (what is still loose packed whole, packs merged into a
 * progression of factor 2: O(log n) packs, loose copies pruned).
 * Owns: the git command lines and their bounds (time, one thread, niceness,
 * a parent-death signal, the environment), the attribute line.
 * Trusts: git to name a pack once it and its index are durable (core.fsync)
 * and to remove a pack or loose object only once a named pack holds it.
 * Must hold: the caller runs it as the store's single writer; every object
 * stays readable throughout; a killed git or vouch loses nothing.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { setPriority } from 'node:os';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';

/** Block files stay whole in packs (a lookup never resolves a delta chain); trees and the rest may be deltas. */
export const PACK_ATTRIBUTES = '/blocks/*/*/*.json -delta';
/** Settings pinned on every repack, whatever the user's or system's git config says. */
const PINNED = [
  'pack.threads=1',
  'pack.useSparse=true',
  'pack.packSizeLimit=0',
  'pack.writeBitmapHashCache=false',
  'repack.writeBitmaps=false',
  'repack.useDeltaIslands=false',
  'repack.updateServerInfo=false',
  'core.fsync=pack,pack-metadata',
  'core.fsyncMethod=fsync',
  'gc.auto=0',
].flatMap((kv) => ['-c', kv]);
/** Linux: git is killed with its parent (a SIGKILLed gateway leaves no git writing beside the next one). */
const SETPRIV = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => fs.existsSync(p)) ?? null;

/** Test hook: VOUCH_CRASH_POINT=repack-pack-objects|repack-geometric kills vouch VOUCH_CRASH_AFTER_MS ms after that git child started. */
function crashAfterSpawn(name: 'repack-pack-objects' | 'repack-geometric'): void {
  if (process.env.VOUCH_CRASH_POINT !== name) return;
  setTimeout(() => process.kill(process.pid, 'SIGKILL'), Number(process.env.VOUCH_CRASH_AFTER_MS ?? '0'));
}

export interface GitRunOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  /** Written to git's standard input, then closed. */
  input?: string;
}

/** The environment of a git child: nothing that points git at another repository, index or object store, no prompt. */
function gitEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('GIT_')) env[k] = v;
  env.GIT_TERMINAL_PROMPT = '0';
  return env;
}

/**
 * Run `git <args>` in its own process group at a lower CPU priority; resolves
 * with its standard output (up to 1 MiB). Rejects with `io_error` when git
 * fails, runs past `timeoutMs` or `signal` aborts (the whole group is stopped).
 */
export function runGit(args: readonly string[], opts: GitRunOptions, onSpawn?: () => void): Promise<string> {
  const what = `git ${args.find((a, k) => !a.startsWith('-') && args[k - 1] !== '-C' && args[k - 1] !== '-c') ?? ''}`.trim();
  return new Promise((resolve, reject) => {
    if (opts.signal?.aborted) return reject(new VouchError('io_error', `${what} was not started: stopping`));
    const [cmd, argv] = SETPRIV ? [SETPRIV, ['--pdeathsig', 'KILL', 'git', ...args]] : ['git', [...args]];
    const child = spawn(cmd, argv, { stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'], detached: true, env: gitEnv() });
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
    if (opts.input !== undefined) {
      child.stdin!.on('error', () => undefined); // git exited early: its status says why
      child.stdin!.end(opts.input);
    }
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => {
      if (out.length < 1 << 20) out += d.toString('utf8');
    });
    child.stderr!.on('data', (d: Buffer) => {
      if (err.length < 4096) err += d.toString('utf8');
    });
    const timer = setTimeout(() => kill('SIGKILL'), opts.timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', stop);
      reject(new VouchError('io_error', `${what} could not start: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', stop);
      if (code === 0) resolve(out);
      else {
        const why = signal ? `was stopped (${signal}${signal === 'SIGKILL' ? `, past ${opts.timeoutMs} ms or killed` : ''})` : `exited with ${code}`;
        reject(new VouchError('io_error', `${what} ${why}: ${err.trim().split('\n').pop() ?? ''}`.trim()));
      }
    });
    onSpawn?.();
  });
}

/** Make sure `.git/info/attributes` keeps block files whole in packs (the line is added once, other lines kept). */
export function ensurePackAttributes(gitdir: string): void {
  const file = join(gitdir, 'info', 'attributes');
  let text = '';
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    /* none yet */
  }
  if (text.split('\n').includes(PACK_ATTRIBUTES)) return;
  fs.mkdirSync(join(gitdir, 'info'), { recursive: true });
  const tmp = `${file}.vouch-${process.pid}.tmp`;
  fs.writeFileSync(tmp, `${text}${text === '' || text.endsWith('\n') ? '' : '\n'}${PACK_ATTRIBUTES}\n`);
  fs.renameSync(tmp, file);
}

export interface GeometricRepackResult {
  ms: number;
  /** The pack `pack-objects` wrote for the new commits (null: nothing new reachable). */
  pack: string | null;
}

/**
 * Pack what the branch reached since `base` (a commit a pack holds; null:
 * the whole history), then `git repack --geometric=2 -d` (window 0: deltas
 * already made are kept, none searched) in `dir`. The two children each run
 * under `opts` (timeout, abort).
 */
export async function repackGeometric(dir: string, gitdir: string, base: string | null, opts: GitRunOptions): Promise<GeometricRepackResult> {
  const t0 = performance.now();
  ensurePackAttributes(gitdir);
  const revs = `refs/heads/main\n${base ? `^${base}\n` : ''}`;
  const out = await runGit(
    [
      '-C',
      dir,
      ...PINNED,
      'pack-objects',
      '--revs',
      '--incremental',
      '--non-empty',
      '--window=10',
      '--depth=50',
      '-q',
      join(gitdir, 'objects', 'pack', 'pack'),
    ],
    { ...opts, input: revs },
    () => crashAfterSpawn('repack-pack-objects'),
  );
  const pack = /^[0-9a-f]{40}$/m.exec(out)?.[0] ?? null;
  await runGit(['-C', dir, ...PINNED, '-c', 'pack.window=0', '-c', 'pack.depth=50', 'repack', '--geometric=2', '-d', '-q', '-n'], opts, () =>
    crashAfterSpawn('repack-geometric'),
  );
  return { ms: performance.now() - t0, pack: pack && `pack-${pack}` };
}
