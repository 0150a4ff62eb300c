/**
 * Starts a real `vouch serve` process on 127.0.0.1 with a generated
 * configuration, waits until it is ready, and stops it afterwards.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { repoRoot } from './vectors.ts';

export interface GatewayProcess {
  url: string;
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Writes `config` as YAML into `dir/vouch.yaml` and returns its path. */
export function writeConfig(dir: string, config: Record<string, unknown>, name = 'vouch.yaml'): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, name);
  writeFileSync(path, stringify(config));
  return path;
}

export async function startGatewayProcess(args: string[], opts: { cwd?: string; env?: Record<string, string>; readyTimeoutMs?: number; waitFor?: RegExp } = {}): Promise<GatewayProcess> {
  const child = spawn(process.execPath, [join(repoRoot, 'tools', 'vouch.js'), 'serve', ...args], {
    cwd: opts.cwd ?? repoRoot,
    env: { ...process.env, ...(opts.env ?? {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => { out += d; });
  child.stderr!.on('data', (d: Buffer) => { err += d; });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const waitFor = opts.waitFor ?? /^ready: /m;
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
  let exitCode: number | null | undefined;
  exited.then((c) => { exitCode = c; });
  while (!waitFor.test(out)) {
    if (exitCode !== undefined) throw new Error(`vouch serve exited ${exitCode} before ready:\n${out}\n${err}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`vouch serve not ready in time:\n${out}\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  const url = /listening on (http:\/\/\S+)/.exec(out)![1]!;
  return {
    url,
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (exitCode === undefined) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
