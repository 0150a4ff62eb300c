/** Runs the real `vouch` CLI and the real git CLI as child processes, bounded in time. */
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import type { Worker } from 'node:worker_threads';
import { repoRoot } from './vectors.ts';

export interface Run {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function vouch(args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Run {
  const r = spawnSync(process.execPath, [join(repoRoot, 'tools', 'vouch.js'), ...args], {
    cwd: repoRoot,
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, ...env },
  });
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

export function git(args: string[], timeoutMs = 60_000): Run {
  const r = spawnSync('git', args, { encoding: 'utf8', timeout: timeoutMs, env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' } });
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

/** `git -C dir args...`'s stdout; throws with git's stderr when it fails (large outputs allowed). */
export function gitIn(dir: string, ...args: string[]): string {
  return gitWith({}, dir, ...args);
}

/** `gitIn` with `env` over this process's environment (e.g. a HOME of the test's own, so no global config is read). */
export function gitWith(env: Record<string, string>, dir: string, ...args: string[]): string {
  const r = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8', maxBuffer: 1 << 28, env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1', ...env } });
  if (r.status !== 0) throw new Error(`git ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

/** Options of `runAsync`: where, with what environment (default this process's), for how long at most. */
export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
}

/**
 * Runs a command without blocking this process's event loop (needed when this process serves what the command
 * talks to), collecting stdout and stderr; killed (SIGKILL) after `timeoutMs` (default 120 s).
 */
export function runAsync(cmd: string, args: string[], opts: RunOptions = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.on('close', (status, signal) => {
      clearTimeout(timer);
      resolve({ status, signal, stdout, stderr });
    });
  });
}

/** Like `vouch` but without blocking this process's event loop (needed when this process serves an origin). */
export function vouchAsync(args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Promise<Run> {
  return runAsync(process.execPath, [join(repoRoot, 'tools', 'vouch.js'), ...args], { cwd: repoRoot, env: { ...process.env, ...env }, timeoutMs });
}

/**
 * A new authority key (`vouch keygen`) and a chain made with it (`vouch init`), as an operator starts;
 * resolves with the public key keygen printed.
 * @throws Error with the command's stderr when either fails.
 */
export async function initAuthorityChain(opts: { key: string; chain: string; signer: string; uns?: string }): Promise<string> {
  const keygen = await vouchAsync(['keygen', '--out', opts.key]);
  if (keygen.status !== 0) throw new Error(`vouch keygen failed: ${keygen.stderr}`);
  const init = await vouchAsync(['init', '--chain', opts.chain, '--key', opts.key, '--signer', opts.signer, '--uns', opts.uns ?? 'acme/deps']);
  if (init.status !== 0) throw new Error(`vouch init failed: ${init.stderr}`);
  return keygen.stdout.split('\n')[0]!.trim();
}

/** The git CLI without blocking this process's event loop (needed when this process serves the remote). */
export function gitAsync(args: string[], timeoutMs = 60_000): Promise<Run> {
  return runAsync('git', args, { env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' }, timeoutMs });
}

/** `vouch endorse --chain CHAIN --key KEY args...` without blocking this process's event loop. */
export function vouchEndorse(chain: string, key: string, args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Promise<Run> {
  return vouchAsync(['endorse', '--chain', chain, '--key', key, ...args], env, timeoutMs);
}

/** Stops a worker thread that serves until told: posts it 'close', waits up to 2 s for it to exit, then terminates it. */
export async function stopWorker(worker: Worker | undefined): Promise<void> {
  if (worker === undefined) return;
  worker.postMessage('close');
  await Promise.race([new Promise((r) => worker.once('exit', r)), new Promise((r) => setTimeout(r, 2_000))]);
  await worker.terminate();
}
