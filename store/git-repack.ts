/**
 * The appends' loose objects packed by stock git (issue 33): `git pack-objects
 * --revs` over the commits no pack holds yet (objects named by path: each tree
 * a delta of its previous version, block files whole by `.git/info/attributes`),
 * `git prune-packed`, then the packs rolled up as `git repack --geometric=2 -d`
 * would (O(log n) packs), by `git pack-objects --stdin-packs`, without the
 * loose objects appends write meanwhile (packed by the next repack).
 * Owns: the git command lines and their bounds (time, one thread, niceness,
 * a parent-death signal, the environment), the attribute line, the split.
 * Trusts: git to name a pack once it and its index are durable (core.fsync)
 * and to prune only loose objects a named pack holds.
 * Must hold: one repack at a time, appends beside it; every object stays
 * readable throughout; a killed git or vouch loses nothing.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { setPriority } from 'node:os';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { idxCount, idxFind } from './git-pack.ts';

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

/** Test hook: VOUCH_CRASH_POINT=repack-pack-objects|repack-prune|repack-geometric kills vouch VOUCH_CRASH_AFTER_MS ms after that git child started. */
function crashAfterSpawn(name: 'repack-pack-objects' | 'repack-prune' | 'repack-geometric'): void {
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

/** The ids of the loose objects in `gitdir` now. */
export function looseIds(gitdir: string): string[] {
  const out: string[] = [];
  for (let b = 0; b < 256; b++) {
    const fan = b.toString(16).padStart(2, '0');
    let names: string[];
    try {
      names = fs.readdirSync(join(gitdir, 'objects', fan));
    } catch {
      continue;
    }
    for (const n of names) if (n.length === 38 && /^[0-9a-f]{38}$/.test(n)) out.push(fan + n);
  }
  return out;
}

/** The packs of `packDir` with a version-2 index and their object counts; packs a `.keep` file keeps are left out, as git repack leaves them. */
function packCounts(packDir: string): { name: string; n: number }[] {
  let names: string[];
  try {
    names = fs.readdirSync(packDir);
  } catch {
    return [];
  }
  const all = new Set(names);
  const out: { name: string; n: number }[] = [];
  const head = Buffer.alloc(8 + 1024);
  for (const f of names) {
    const name = /^(pack-[0-9a-f]{40})\.idx$/.exec(f)?.[1];
    if (!name || all.has(`${name}.keep`) || !all.has(`${name}.pack`)) continue;
    let fd: number;
    try {
      fd = fs.openSync(join(packDir, f), 'r');
    } catch {
      continue; // removed meanwhile
    }
    try {
      if (fs.readSync(fd, head, 0, head.length, 0) === head.length && head.readUInt32BE(0) === 0xff744f63 && head.readUInt32BE(4) === 2)
        out.push({ name, n: head.readUInt32BE(8 + 255 * 4) });
    } finally {
      fs.closeSync(fd);
    }
  }
  return out;
}

/**
 * git repack's geometric split (repack.c `split_pack_geometry`, git 2.39):
 * given the packs' object counts in ascending order, how many of the
 * smallest to roll into one so the counts form a progression of `factor`.
 */
export function geometricSplit(counts: readonly number[], factor = 2): number {
  let i = counts.length - 1;
  for (; i > 0; i--) if (counts[i]! < factor * counts[i - 1]!) break;
  let split = i > 0 ? i + 1 : 0;
  let total = 0;
  for (let k = 0; k < split; k++) total += counts[k]!;
  for (let k = split; k < counts.length; k++) {
    if (counts[k]! >= factor * total) break;
    split++;
    total += counts[k]!;
  }
  return split;
}

/** Remove a pack git rolled into another: its index first (no reader lists it after), then the pack and the rest. */
function removePack(packDir: string, name: string): void {
  for (const ext of ['.idx', '.pack', '.rev', '.bitmap', '.mtimes', '.promisor']) fs.rmSync(join(packDir, name + ext), { force: true });
}

/**
 * Pack what commit `tip` reaches since `base` (a commit a pack holds; null:
 * the whole history) with `git pack-objects --revs`, and whatever else was
 * loose when it started (an interrupted append's objects: `pack-objects`
 * given their ids); `git prune-packed`; then the geometric roll-up of packs
 * as `git repack --geometric=2 -d` makes it, but of packs only: `git
 * pack-objects --stdin-packs` (window 0: deltas already made are kept, none
 * searched), the packs rolled up removed once the new one is named. Loose
 * objects written meanwhile are left alone (git repack would pack them
 * whole, without their paths), for the next repack. `tip` is a commit id,
 * not the branch: appends may move the branch meanwhile. Each child runs
 * under `opts` (timeout, abort). `at`: the head and the loose objects
 * (`looseIds`) read at one instant between two appends.
 */
export async function repackGeometric(
  dir: string,
  gitdir: string,
  at: { tip: string; loose: readonly string[] },
  base: string | null,
  opts: GitRunOptions,
): Promise<GeometricRepackResult> {
  const { tip, loose } = at;
  const t0 = performance.now();
  ensurePackAttributes(gitdir);
  if (!/^[0-9a-f]{40}$/.test(tip) || (base !== null && !/^[0-9a-f]{40}$/.test(base)))
    throw new VouchError('io_error', `repack: ${tip} ${base} is not a commit id`);
  const packDir = join(gitdir, 'objects', 'pack');
  const revs = `${tip}\n${base ? `^${base}\n` : ''}`;
  const out = await runGit(
    ['-C', dir, ...PINNED, 'pack-objects', '--revs', '--incremental', '--non-empty', '--window=10', '--depth=50', '-q', join(packDir, 'pack')],
    { ...opts, input: revs },
    () => crashAfterSpawn('repack-pack-objects'),
  );
  const pack = /^[0-9a-f]{40}$/m.exec(out)?.[0] ?? null;
  // Loose before the repack and not in the new pack: objects no commit of the range names (rare). Packed whole.
  const idx = pack ? fs.readFileSync(join(packDir, `pack-${pack}.idx`)) : null;
  const n = idx ? idxCount(idx) : 0;
  const left = loose.filter((oid) => !idx || idxFind(idx, n, Buffer.from(oid, 'hex')) < 0);
  if (left.length > 0)
    await runGit(['-C', dir, ...PINNED, 'pack-objects', '--non-empty', '--window=0', '-q', join(packDir, 'pack')], { ...opts, input: `${left.join('\n')}\n` });
  await runGit(['-C', dir, 'prune-packed', '-q'], opts, () => crashAfterSpawn('repack-prune'));
  const packs = packCounts(packDir).sort((a, b) => a.n - b.n || (a.name < b.name ? -1 : 1));
  const split = geometricSplit(packs.map((p) => p.n));
  if (split >= 2) {
    const input = packs.map((p, k) => `${k < split ? '' : '^'}${p.name}.pack\n`).join('');
    const rolled = await runGit(
      ['-C', dir, ...PINNED, 'pack-objects', '--stdin-packs', '--delta-base-offset', '--non-empty', '--window=0', '--depth=50', '-q', join(packDir, 'pack')],
      { ...opts, input },
      () => crashAfterSpawn('repack-geometric'),
    );
    const made = /^[0-9a-f]{40}$/m.exec(rolled)?.[0];
    if (made) for (const p of packs.slice(0, split)) if (p.name !== `pack-${made}`) removePack(packDir, p.name);
  }
  return { ms: performance.now() - t0, pack: pack && `pack-${pack}` };
}
