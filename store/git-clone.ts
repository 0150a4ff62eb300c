/**
 * The transfer of a mirror's clone done by stock git: `git fetch --depth 1`
 * of `main` into the repository ./repo-replicator.ts prepared (vouch's
 * config, HEAD, the clone marker), through ./git-fetch-proxy.ts, so that
 * git's pack parser (`index-pack`, an OSS-Fuzz target, every object checked
 * with `transfer.fsckObjects`) does the work under FETCH_LIMITS' byte, time
 * and silence bounds (docs/decisions/git-store.md "Mirror clone").
 * Owns: the git process (its own process group: killed by id, with
 * index-pack and the HTTP helper, past the deadline or on cancel), its
 * environment (no system or user config, no credential helper, no prompt,
 * no hooks, http only, no redirects, no proxy), the wording of its failure.
 * Trusts: nothing git prints (one line of it, cut, in a message).
 * Must hold: git sees only the proxy's URL; the deadline grows with the
 * pack's bytes as an exchange's does (FETCH_LIMITS.packMsPerMiB).
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { FETCH_LIMITS } from './fetch-limits.ts';
import { GitFetchProxy } from './git-fetch-proxy.ts';
import { remoteText } from './smart-http.ts';
import type { FetchOptions } from './upload-pack.ts';

/** The `-c` settings every clone's git runs with. */
export const CLONE_GIT_CONFIG = [
  'protocol.allow=never',
  'protocol.http.allow=always',
  'protocol.version=0',
  'credential.helper=',
  'core.hooksPath=/dev/null',
  'core.fsmonitor=false',
  'core.logAllRefUpdates=false',
  'http.followRedirects=false',
  'http.proxy=',
  'transfer.fsckObjects=true',
  // index-pack streams a blob past this instead of holding it: git's memory per object stays under FETCH_LIMITS.objectBytes.
  `core.bigFileThreshold=${FETCH_LIMITS.objectBytes}`,
  'fetch.recurseSubmodules=false',
  'gc.auto=0',
  'maintenance.auto=false',
];

/** How the last run went, for tests and the bench: git's process id while it runs. */
export const cloneRuns = { pid: 0 };

/** The first line of git's stderr worth showing (its `fatal:`, else its `error:`), the proxy's URL put back as the remote's. */
function gitReason(stderr: string, proxyUrl: string, shown: string): string {
  const lines = stderr
    .split('\n')
    .map((l) => l.split(proxyUrl).join(shown).trim())
    .filter(Boolean);
  const pick =
    lines.find((l) => l.startsWith('fatal:') && !/invalid index-pack output|index-pack failed/.test(l)) ??
    lines.find((l) => l.startsWith('error:')) ??
    lines.find((l) => l.startsWith('fatal:')) ??
    lines.pop() ??
    '';
  return remoteText(pick);
}

/** The clone's own bound before the pack's allowance: the advertisement's bound plus the answer's. */
function cloneMs(opts: FetchOptions): number {
  const exchangeMs = opts.timeoutMs ?? FETCH_LIMITS.exchangeMs;
  return Math.min(exchangeMs, FETCH_LIMITS.advertisementMs) + exchangeMs;
}

/**
 * Fetch the remote's `main` at depth 1 into `refs/remotes/origin/main` of
 * the repository in `dir` (stock git behind a GitFetchProxy of `url`).
 * Returns the commit the remote advertised (now at that ref, its objects
 * stored as git stores a fetch's: a pack, or loose objects under 100).
 * @throws VouchError `not_a_chain` when the remote has no branch main;
 *   `io_error` with the proxy's reason (a bound passed, a refusal) or git's.
 */
export async function gitFetchClone(dir: string, url: string, opts: FetchOptions): Promise<string> {
  const proxy = await GitFetchProxy.start(url, opts);
  const home = fs.mkdtempSync(join(tmpdir(), 'vouch-git-home-'));
  try {
    const args = [
      ...CLONE_GIT_CONFIG.flatMap((c) => ['-c', c]),
      '-C',
      dir,
      'fetch',
      '--quiet',
      '--depth=1',
      '--no-tags',
      '--no-write-fetch-head',
      '--no-recurse-submodules',
      '--no-auto-gc',
      proxy.url,
      '+refs/heads/main:refs/remotes/origin/main',
    ];
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: home,
      XDG_CONFIG_HOME: home,
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_TERMINAL_PROMPT: '0',
      GIT_ASKPASS: '/bin/false',
      LC_ALL: 'C',
      no_proxy: '*',
      NO_PROXY: '*',
    };
    const result = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; late: boolean }>((resolve, reject) => {
      const child = spawn('git', args, { stdio: ['ignore', 'ignore', 'pipe'], detached: true, env });
      cloneRuns.pid = child.pid ?? 0;
      const kill = () => {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
        } catch {
          child.kill('SIGKILL');
        }
      };
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => {
        if (stderr.length < 16384) stderr += d.toString('utf8');
      });
      // The whole run: the advertisement's bound plus the answer's, pushed back by each MiB received (as an exchange's).
      const t0 = performance.now();
      const baseMs = cloneMs(opts);
      let late = false;
      const timer = setInterval(() => {
        if (performance.now() - t0 > baseMs + (proxy.received / 2 ** 20) * FETCH_LIMITS.packMsPerMiB) {
          late = true;
          kill();
        }
      }, 100);
      const cancel = () => kill();
      opts.signal?.addEventListener('abort', cancel, { once: true });
      child.on('error', (e) => {
        clearInterval(timer);
        opts.signal?.removeEventListener('abort', cancel);
        reject(new VouchError('io_error', `cannot run git to clone ${proxy.shown}: ${e.message}`));
      });
      child.on('exit', () => kill()); // what git started (the HTTP helper, index-pack) goes with it
      child.on('close', (code, signal) => {
        clearInterval(timer);
        opts.signal?.removeEventListener('abort', cancel);
        cloneRuns.pid = 0;
        resolve({ code, signal, stderr, late });
      });
    });
    if (result.code === 0) {
      if (!proxy.main) throw new VouchError('not_a_chain', `${proxy.shown} has no branch main`);
      return proxy.main;
    }
    if (proxy.failure) throw proxy.failure;
    if (proxy.main === null) throw new VouchError('not_a_chain', `${proxy.shown} has no branch main`);
    if (opts.signal?.aborted) throw new VouchError('io_error', 'fetch cancelled', { cause: opts.signal.reason });
    if (result.late) {
      const ms = cloneMs(opts);
      throw new VouchError(
        'io_error',
        `the clone of ${proxy.shown} did not finish in time (${ms / 1000} s, plus ${FETCH_LIMITS.packMsPerMiB / 1000} s per MiB received)`,
        {
          evidence: { reason: 'timeout' },
        },
      );
    }
    const why = result.signal ? `git was stopped (${result.signal})` : `git refused the clone: ${gitReason(result.stderr, proxy.url, proxy.shown)}`;
    throw new VouchError('io_error', `cannot clone ${proxy.shown}: ${why}`, { evidence: { reason: 'git', exit: result.code ?? result.signal } });
  } finally {
    await proxy.close();
    fs.rmSync(home, { recursive: true, force: true });
  }
}
