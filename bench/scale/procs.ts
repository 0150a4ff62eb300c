/**
 * Processes of `npm run bench -- scale`: whole `vouch` processes started as
 * an operator starts them (stdout read for the `ready:` line, the log on
 * stderr going to a FILE, never to a pipe the bench drains), and timed
 * commands (`vouch verify`, `vouch endorse`, git, cp, du) with a time bound.
 *
 * Owns: every child it starts; `killAll()` ends those still running (the
 * bench calls it in `finally`; an `exit` hook, also run on SIGINT and
 * SIGTERM, SIGKILLs any left).
 * Must hold: every wait has a time bound; a process that overruns it is
 * killed and the wait fails naming it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { assertLoopback, cpuMsOf, memoryOf, root } from '../gateway-harness.ts';

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});
// Interrupted (Ctrl-C, kill): end the children too (process.exit runs every 'exit' hook, the harness's as well).
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    console.error(`\n[scale] ${sig}: stopping every process this bench started; bench/out/scale-tmp is left (the next run replaces it)`);
    process.exit(130);
  });
}

/** SIGKILLs every child still running (the bench's `finally`). */
export function killAll(): void {
  for (const c of live) c.kill('SIGKILL');
  live.clear();
}

const stamp = () => new Date().toISOString().slice(11, 19);
/** A progress line (the full bench runs for the best part of an hour). */
export const say = (line: string) => console.log(`[scale ${stamp()}] ${line}`);

export interface Gateway {
  pid: number;
  url: string;
  /** Spawn to the `ready:` line on stdout, ms. */
  readyMs: number;
  readyLine: string;
  /** VmRSS and VmHWM read when the ready line arrived. */
  atReady: { rss: number; hwm: number };
  /** Where its log (stdout and stderr) goes. */
  logFile: string;
  stop(): Promise<void>;
}

/**
 * `node tools/vouch.js serve --config FILE`, its log (stderr) appended to
 * `logFile`; resolves at the `ready:` line, read on stdout.
 */
export async function startGateway(name: string, configFile: string, logFile: string, timeoutMs: number, env: Record<string, string> = {}): Promise<Gateway> {
  const logFd = openSync(logFile, 'a');
  const t0 = performance.now();
  const child = spawn(process.execPath, [join(root, 'tools', 'vouch.js'), 'serve', '--config', configFile], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', logFd],
  });
  closeSync(logFd);
  live.add(child);
  let exitCode: number | null | undefined;
  const exited = new Promise<void>((r) =>
    child.on('exit', (code) => {
      exitCode = code;
      live.delete(child);
      r();
    }),
  );
  let out = '';
  const stop = async () => {
    if (exitCode === undefined) {
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(t);
    }
  };
  const beat = heartbeat(() => `  ${name}: starting for ${Math.round((performance.now() - t0) / 1000)} s, RSS ${rssText(child.pid!)}`);
  try {
    const { line, at } = await new Promise<{ line: string; at: number }>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name}: no ready line within ${Math.round(timeoutMs / 1000)} s (log: ${logFile})\n${out}`)), timeoutMs);
      child.stdout!.on('data', (d: Buffer) => {
        const at = performance.now();
        out = (out + d).slice(-16_384);
        const m = /^ready: .*$/m.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve({ line: m[0], at });
        }
      });
      exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`${name}: exited ${exitCode} before ready (log: ${logFile})\n${out}`));
      });
    });
    const atReady = memoryOf(child.pid!);
    const url = /listening on (http:\/\/\S+)/.exec(out)?.[1] ?? '';
    assertLoopback(url);
    return { pid: child.pid!, url, readyMs: at - t0, readyLine: line, atReady, logFile, stop };
  } catch (e) {
    await stop();
    throw e;
  } finally {
    clearInterval(beat);
  }
}

/** A progress line every minute while something long runs (cleared by the caller). */
function heartbeat(line: () => string): NodeJS.Timeout {
  return setInterval(() => say(line()), 60_000);
}

function rssText(pid: number): string {
  try {
    return `${(memoryOf(pid).rss / 2 ** 20).toFixed(0)} MiB`;
  } catch {
    return '?';
  }
}

export interface Timed {
  ms: number;
  status: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `cmd args` to its end (killed after `timeoutMs`), timing it from
 * spawn to exit; throws unless it exits 0 (or `allowFail`).
 */
export async function timed(
  cmd: string,
  args: string[],
  opts: { timeoutMs: number; cwd?: string; allowFail?: boolean; env?: Record<string, string> },
): Promise<Timed> {
  const t0 = performance.now();
  const env = opts.env ? { ...process.env, ...opts.env } : process.env;
  const child = spawn(cmd, args, { cwd: opts.cwd ?? root, stdio: ['ignore', 'pipe', 'pipe'], env });
  live.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => {
    stdout = (stdout + d).slice(-1_000_000);
  });
  child.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d).slice(-65_536);
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGKILL');
  }, opts.timeoutMs);
  const beat = heartbeat(
    () => `  still running (${Math.round((performance.now() - t0) / 1000)} s): ${cmd === process.execPath ? 'node' : cmd} ${args.slice(0, 3).join(' ')}...`,
  );
  const status = await new Promise<number | null>((r) => child.on('close', (code) => r(code)));
  const ms = performance.now() - t0;
  clearTimeout(timer);
  clearInterval(beat);
  live.delete(child);
  const what = `${cmd} ${args.join(' ')}`.slice(0, 300);
  if (timedOut) throw new Error(`${what}: killed after ${Math.round(opts.timeoutMs / 1000)} s`);
  if (status !== 0 && !opts.allowFail) throw new Error(`${what}: exit ${status}\n${stderr.slice(-2000)}`);
  return { ms, status, stdout, stderr };
}

/** `node tools/vouch.js ARGS`, timed as a whole process (`env`: variables added to the bench's own). */
export function vouch(args: string[], timeoutMs: number, env?: Record<string, string>): Promise<Timed> {
  return timed(process.execPath, [join(root, 'tools', 'vouch.js'), ...args], { timeoutMs, ...(env ? { env } : {}) });
}

/**
 * Waits until `pid` has used under 5% of a core for two seconds in a row
 * (a gateway just ready may still re-check block files or write its
 * snapshot in the background); returns the ms waited. Bounded by `timeoutMs`.
 */
export async function waitIdle(pid: number, timeoutMs: number): Promise<number> {
  const t0 = performance.now();
  let quiet = 0;
  let last = cpuMsOf(pid) / 1000;
  while (quiet < 2) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`bench: process ${pid} still busy after ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((r) => setTimeout(r, 1000));
    const now = cpuMsOf(pid) / 1000;
    quiet = now - last < 0.05 ? quiet + 1 : 0;
    last = now;
  }
  return performance.now() - t0;
}
