/**
 * Plumbing of `npm run bench -- gateway`: child processes that are always
 * stopped, wrk runs and their parsed output, RSS samples from /proc, and a
 * hashing download client. Loopback only.
 */
import { spawn, spawnSync, execFile, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, readSync, fstatSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('..', import.meta.url));
export const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Refuses any URL that is not on 127.0.0.1 (the project's rule for benchmarks). */
export function assertLoopback(url: string): void {
  if (new URL(url).hostname !== '127.0.0.1') throw new Error(`bench: refusing to send traffic to ${url} (only 127.0.0.1)`);
}

/** Debian's haproxy, where it is installed. */
export const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((p) => existsSync(p)) ?? null;

// ---------------------------------------------------------------------------
// Child processes

export interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  /** performance.now() just before spawn and when `waitFor` first matched stdout. */
  spawnedAt: number;
  readyAt: number;
  match: RegExpExecArray;
  /** The `listening http://...` URL printed by the process, if any. */
  url: string;
  out(): string;
  err(): string;
  stop(): Promise<void>;
}

const live = new Set<Proc>();
const KEEP = 64 * 1024;

/**
 * Spawns `node ARGS` and resolves when stdout matches `waitFor` (time-stamped
 * on the data event that completed the match).
 */
export async function spawnNode(
  name: string,
  args: string[],
  opts: { waitFor: RegExp; env?: Record<string, string>; timeoutMs?: number; stderrFile?: string },
): Promise<Proc> {
  let out = '';
  let err = '';
  const spawnedAt = performance.now();
  // A log file, as an operator keeps it (journald or a file), instead of a pipe this process would have to drain.
  const errFd = opts.stderrFile === undefined ? null : openSync(opts.stderrFile, 'a');
  const child = spawn(process.execPath, args, { cwd: root, env: { ...process.env, ...(opts.env ?? {}) }, stdio: ['ignore', 'pipe', errFd ?? 'pipe'] });
  if (errFd !== null) closeSync(errFd); // the child holds its own copy
  const stderrFile = opts.stderrFile;
  let exitCode: number | null | undefined;
  const exited = new Promise<void>((r) =>
    child.on('exit', (code) => {
      exitCode = code;
      r();
    }),
  );
  let stopping: Promise<void> | null = null;
  const proc: Proc = {
    name,
    child,
    pid: child.pid!,
    spawnedAt,
    readyAt: NaN,
    match: null as unknown as RegExpExecArray,
    url: '',
    out: () => out,
    err: () => (stderrFile === undefined ? err : tail(stderrFile, KEEP)),
    stop() {
      stopping ??= (async () => {
        if (exitCode === undefined) {
          child.kill('SIGTERM');
          const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
          await exited;
          clearTimeout(t);
        }
        live.delete(proc);
      })();
      return stopping;
    },
  };
  live.add(proc);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => fail(new Error(`${name}: not ready within ${opts.timeoutMs ?? 120_000} ms\n${out}\n${proc.err()}`)),
      opts.timeoutMs ?? 120_000,
    );
    const fail = (e: Error) => {
      clearTimeout(timer);
      child.stdout!.off('data', onOut);
      proc.stop().then(() => reject(e));
    };
    const onOut = (d: Buffer) => {
      const t = performance.now();
      out = (out + d).slice(-KEEP);
      const m = opts.waitFor.exec(out);
      if (m) {
        proc.readyAt = t;
        proc.match = m;
        proc.url = /listening (?:on )?(http:\/\/\S+)/.exec(out)?.[1] ?? '';
        clearTimeout(timer);
        child.stdout!.off('data', onOut);
        child.stdout!.on('data', (x: Buffer) => {
          out = (out + x).slice(-KEEP);
        });
        resolve();
      }
    };
    child.stdout!.on('data', onOut);
    child.stderr?.on('data', (d: Buffer) => {
      err = (err + d).slice(-KEEP);
    });
    exited.then(() => {
      if (Number.isNaN(proc.readyAt)) fail(new Error(`${name}: exited ${exitCode} before ready\n${out}\n${proc.err()}`));
    });
  });
  if (proc.url) assertLoopback(proc.url);
  return proc;
}

/** Occurrences of the ASCII `needle` in the file at `path`, read 16 MiB at a time (a run's log outgrows one string). */
export function countInFile(path: string, needle: string): number {
  const fd = openSync(path, 'r');
  const buf = Buffer.allocUnsafe(16 * 1024 * 1024);
  const keep = needle.length - 1;
  let n = 0;
  let have = 0;
  try {
    for (;;) {
      const got = readSync(fd, buf, have, buf.length - have, null);
      if (got === 0) break;
      const text = buf.toString('latin1', 0, have + got);
      for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + needle.length)) n++;
      // The last needle.length - 1 bytes go to the front: a needle cut by the read is found whole next time, none twice.
      const end = have + got;
      have = Math.min(keep, end);
      buf.copy(buf, 0, end - have, end);
    }
  } finally {
    closeSync(fd);
  }
  return n;
}

/** The last `bytes` bytes of a file, as text ('' when it cannot be read). */
function tail(path: string, bytes: number): string {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return '';
  }
  try {
    const size = fstatSync(fd).size;
    const n = Math.min(size, bytes);
    const buf = Buffer.alloc(n);
    readSync(fd, buf, 0, n, size - n);
    return buf.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * `vouch serve --config FILE`, resolved at its `ready:` line. With
 * `stderrFile`, the gateway's log (stderr) is appended to that file, as an
 * operator's would be, instead of a pipe drained by this process on the
 * same cores.
 */
export function spawnGateway(name: string, configFile: string, env: Record<string, string> = {}, timeoutMs = 600_000, stderrFile?: string): Promise<Proc> {
  return spawnNode(name, [join(root, 'tools', 'vouch.js'), 'serve', '--config', configFile], { waitFor: /^ready: .*$/m, env, timeoutMs, stderrFile });
}

/** One of bench/gateway-servers.ts's modes, resolved when it listens. */
export function spawnServer(name: string, args: string[]): Promise<Proc> {
  return spawnNode(name, ['--import', 'tsx', join(root, 'bench', 'gateway-servers.ts'), ...args], { waitFor: /^listening http:\/\/\S+$/m, timeoutMs: 60_000 });
}

/** Stops every process this module started and has not stopped yet. */
export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((p) => p.stop()));
}

/** Last-resort cleanup if the bench process itself dies. */
process.on('exit', () => {
  for (const p of live) p.child.kill('SIGKILL');
});

// ---------------------------------------------------------------------------
// wrk

export function ensureWrk(): void {
  if (spawnSync('wrk', ['--version'], { encoding: 'utf8' }).error === undefined) return;
  console.log('wrk not found: installing Debian wrk (apt-get)...');
  const r = spawnSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq wrk'], { stdio: 'inherit' });
  if (r.status !== 0 || spawnSync('wrk', ['--version']).error !== undefined) throw new Error('bench: cannot install wrk (apt-get install wrk)');
}

export interface WrkResult {
  requests: number;
  seconds: number;
  rps: number;
  /** Bytes per second read (headers and bodies). */
  transferBps: number;
  latencyAvgMs: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
  socketErrors: number;
  /** The rotation offset after this run (printed by the script's done()). */
  nextOffset: number;
}

const TIME = { us: 1e-3, ms: 1, s: 1e3, m: 6e4 } as Record<string, number>;
const SIZE = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3, TB: 1024 ** 4 } as Record<string, number>;
const ms = (v: string, u: string) => Number(v) * TIME[u]!;

export function parseWrk(text: string): WrkResult {
  const num = (re: RegExp) => {
    const m = re.exec(text);
    if (!m) throw new Error(`bench: unexpected wrk output (${re}):\n${text}`);
    return m;
  };
  const lat = num(/^\s+Latency\s+([\d.]+)(us|ms|s|m)\s/m);
  const p50 = num(/^\s+50%\s+([\d.]+)(us|ms|s|m)[ \t]*$/m);
  const p99 = num(/^\s+99%\s+([\d.]+)(us|ms|s|m)[ \t]*$/m);
  const total = num(/^\s+(\d+) requests in ([\d.]+)(us|ms|s|m),/m);
  const tr = num(/^Transfer\/sec:\s+([\d.]+)(B|KB|MB|GB|TB)[ \t]*$/m);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text);
  return {
    requests: Number(total[1]),
    seconds: ms(total[2]!, total[3]!) / 1000,
    rps: Number(num(/^Requests\/sec:\s+([\d.]+)[ \t]*$/m)[1]),
    transferBps: Number(tr[1]) * SIZE[tr[2]!]!,
    latencyAvgMs: ms(lat[1]!, lat[2]!),
    p50Ms: ms(p50[1]!, p50[2]!),
    p99Ms: ms(p99[1]!, p99[2]!),
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(text)?.[1] ?? 0),
    socketErrors: sock ? sock.slice(1).reduce((a, x) => a + Number(x), 0) : 0,
    nextOffset: Number(/^next-offset: (\d+)$/m.exec(text)?.[1] ?? 0),
  };
}

/**
 * A wrk script that requests `paths` in rotation, starting at the offset
 * given after `--`, and prints where the first thread stopped. With several
 * threads (`wrk -t`), thread k starts k/threads of the way round, so the
 * threads do not ask for the same path at the same moment.
 */
export function rotationScript(paths: string[]): string {
  for (const p of paths) if (!/^\/[A-Za-z0-9%._~/?=&@-]*$/.test(p)) throw new Error(`bench: path not safe for the wrk script: ${p}`);
  return [
    'local paths = {',
    ...paths.map((p) => `  "${p}",`),
    '}',
    'local reqs = {}',
    'local threads = {}',
    "-- wrk runs setup(thread) then that thread's init(args) before the next thread is made.",
    'function setup(thread)',
    '  thread:set("id", #threads)',
    '  table.insert(threads, thread)',
    'end',
    'id = 0',
    'n = 0',
    '-- wrk sets the Host header just before init(): format the requests here, not at load time.',
    '-- args: the start offset, the number of threads.',
    'function init(args)',
    '  n = tonumber(args[1] or "0") + math.floor(id * #paths / tonumber(args[2] or "1"))',
    '  for i, p in ipairs(paths) do reqs[i] = wrk.format("GET", p) end',
    'end',
    'function request()',
    '  local r = reqs[(n % #reqs) + 1]',
    '  n = n + 1',
    '  return r',
    'end',
    'function done(summary, latency, requests)',
    '  io.write(string.format("next-offset: %d\\n", threads[1]:get("n")))',
    'end',
    '',
  ].join('\n');
}

export interface WrkOptions {
  threads: number;
  connections: number;
  seconds: number;
  script: string;
  offset?: number;
  timeoutS?: number;
}

export function wrk(url: string, o: WrkOptions): Promise<WrkResult> {
  assertLoopback(url);
  const args = [
    '-t',
    String(o.threads),
    '-c',
    String(o.connections),
    '-d',
    `${o.seconds}s`,
    '--latency',
    '--timeout',
    `${o.timeoutS ?? 10}s`,
    '-s',
    o.script,
    url,
    '--',
    String(o.offset ?? 0),
    String(o.threads),
  ];
  return new Promise((resolve, reject) => {
    execFile('wrk', args, { encoding: 'utf8', timeout: (o.seconds + 60) * 1000 }, (e, stdout, stderr) => {
      if (e) return reject(new Error(`wrk failed: ${e.message}\n${stdout}\n${stderr}`));
      try {
        const r = parseWrk(stdout);
        if (r.non2xx > 0 || r.requests === 0) throw new Error(`wrk ${url}: ${r.non2xx} non-2xx answers of ${r.requests}\n${stdout}`);
        resolve(r);
      } catch (err) {
        reject(err);
      }
    });
  });
}

// ---------------------------------------------------------------------------
// /proc and downloads

/** VmRSS and VmHWM of a process, in bytes. */
export function memoryOf(pid: number): { rss: number; hwm: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB$`, 'm').exec(s)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

/** CPU time (user + system, all threads) a process has used so far, in ms. */
export function cpuMsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // After the command name's last ')': the name itself may hold ') '.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime, stime (fields 14, 15) in clock ticks (USER_HZ = 100)
}

/**
 * Resolves once the process has used under `share` of a core over a
 * `windowMs` window (a gateway after a warm start re-reads every block file
 * in the background: measure after it), or after `timeoutMs` whatever it does.
 */
export async function waitIdle(pid: number, o: { share?: number; windowMs?: number; timeoutMs?: number } = {}): Promise<boolean> {
  const { share = 0.05, windowMs = 1000, timeoutMs = 120_000 } = o;
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const c0 = cpuMsOf(pid);
    await sleep(windowMs);
    if (cpuMsOf(pid) - c0 < share * windowMs) return true;
  }
  return false;
}

/** GETs a URL, hashing (sha256) and discarding the body. */
export function download(
  url: string,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; bytes: number; sha256: string; ms: number }> {
  assertLoopback(url);
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = httpGet(url, { agent: false }, (res) => {
      const h = createHash('sha256');
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        h.update(c);
        bytes += c.length;
      });
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, bytes, sha256: `sha256:${h.digest('hex')}`, ms: performance.now() - t0 }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}
