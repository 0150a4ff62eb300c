/**
 * The read-only gateway's rows of `npm run bench -- scale`, each a whole
 * `vouch serve` on a link copy of the chain (./chains.ts), default
 * configuration, logging at info to a file:
 * - cold start: snapshot and caches deleted; spawn to `ready:`, VmRSS and
 *   VmHWM at that line;
 * - warm restarts: `runs` times with the cold start's snapshot (median);
 * - lookups: random URLs of the whole chain with wrk against bare node:http
 *   (bench/gateway-servers.ts), plus the `answers` and `bare-batched`
 *   servers for context, and CPU time per lookup; interleaved, medians,
 *   started once the gateway is idle (the wait is reported).
 */
import { closeSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { writeConfig } from '../../test/helpers/gateway-process.ts';
import { cpuMsOf, ensureWrk, median, memoryOf, spawnServer, wrk, type WrkResult } from '../gateway-harness.ts';
import { gatewayCaches } from './chains.ts';
import { say, startGateway, waitIdle, type Gateway } from './procs.ts';

export interface GatewaySetup {
  /** Link copy of the chain, read-only use. */
  dir: string;
  blocks: number;
  publicKey: string;
  /** Where configs, logs, scripts and the gateways' TMPDIR go. */
  work: string;
  /** Bound on one start, ms. */
  startTimeoutMs: number;
}

const cfgFile = (s: GatewaySetup) =>
  writeConfig(s.work, { listen: { host: '127.0.0.1', port: 0 }, chain: { dir: s.dir, public_key: s.publicKey } }, 'read-only.yaml');
const env = (s: GatewaySetup) => ({ TMPDIR: s.work });
const readyMode = (g: Gateway) => /\((cold|warm) start/.exec(g.readyLine)?.[1] ?? '?';

export interface ColdFigures {
  ms: number;
  rss: number;
  hwm: number;
  readyLine: string;
}

/** Cold start to ready, and the memory once ready (RSS row). */
export async function coldStart(s: GatewaySetup): Promise<ColdFigures> {
  for (const f of gatewayCaches(s.dir)) rmSync(f, { force: true });
  say(`cold start of a read-only gateway on ${s.blocks.toLocaleString('en')} blocks (snapshot and caches removed)...`);
  const g = await startGateway('gateway (cold)', cfgFile(s), join(s.work, 'gateway.log'), s.startTimeoutMs, env(s));
  try {
    if (readyMode(g) !== 'cold') throw new Error(`bench: the first start was not cold: ${g.readyLine}`);
    say(`  ready in ${(g.readyMs / 1000).toFixed(1)} s, RSS ${mib(g.atReady.rss)} MiB, peak ${mib(g.atReady.hwm)} MiB — ${g.readyLine}`);
    return { ms: g.readyMs, rss: g.atReady.rss, hwm: g.atReady.hwm, readyLine: g.readyLine };
  } finally {
    await g.stop();
  }
}

export interface WarmFigures {
  ms: number[];
  rss: number[];
  hwm: number[];
  readyLine: string;
}

/**
 * `runs` warm restarts on the directory the cold start left; the last
 * gateway is handed to `then` (the lookups) before it is stopped.
 */
export async function warmRestarts<T>(s: GatewaySetup, runs: number, then: (g: Gateway) => Promise<T>): Promise<{ warm: WarmFigures; after: T }> {
  const warm: WarmFigures = { ms: [], rss: [], hwm: [], readyLine: '' };
  if (gatewayCaches(s.dir).length === 0) {
    say('  no snapshot yet (the cold row did not run): one unmeasured start writes it...');
    await withGateway(s, async () => undefined);
  }
  for (let r = 0; r < runs; r++) {
    const g = await startGateway(`gateway (warm ${r + 1})`, cfgFile(s), join(s.work, 'gateway.log'), s.startTimeoutMs, env(s));
    try {
      if (readyMode(g) !== 'warm') throw new Error(`bench: restart ${r + 1} was not warm: ${g.readyLine}`);
      warm.ms.push(g.readyMs);
      warm.rss.push(g.atReady.rss);
      warm.hwm.push(g.atReady.hwm);
      warm.readyLine = g.readyLine;
      say(`  warm restart ${r + 1}: ready in ${(g.readyMs / 1000).toFixed(2)} s, RSS ${mib(g.atReady.rss)} MiB — ${g.readyLine}`);
      if (r === runs - 1) return { warm, after: await then(g) };
    } finally {
      await g.stop();
    }
  }
  throw new Error('bench: no warm restart');
}

/** Runs `fn` on one read-only gateway (whichever start it makes), then stops it. */
export async function withGateway<T>(s: GatewaySetup, fn: (g: Gateway) => Promise<T>): Promise<T> {
  const g = await startGateway('gateway', cfgFile(s), join(s.work, 'gateway.log'), s.startTimeoutMs, env(s));
  try {
    return await fn(g);
  } finally {
    await g.stop();
  }
}

export interface LookupFigures {
  urls: number;
  gateway: number;
  bare: number;
  ratio: number;
  /** Per-run ratio range. */
  range: [number, number];
  bodyBytes: number;
  /** Lookups/s of a bare node:http server answering each lookup with the gateway's own answer (`answers`), and the gateway's ratio to it (reported beside, not judged). */
  sameAnswers: number;
  sameRatio: number;
  sameRange: [number, number];
  /** Lookups/s of bare node:http writing its answers in batches as the gateway does (`bare-batched`), and the gateway's ratio to it (reported beside, not judged). */
  batched: number;
  batchedRatio: number;
  batchedRange: [number, number];
  /**
   * CPU time of each server process (user + system, all its threads) per
   * lookup answered, µs, median over the runs: what a lookup costs the
   * server, steadier than requests/s on shared cores (reported beside).
   */
  cpuUs: { gateway: number; bare: number; answers: number; batched: number };
  /** The gateway's VmRSS after the runs. */
  rssAfter: number;
  /** ms from ready until the gateway was idle and the runs began. */
  settledMs: number;
  /** ms from ready until the gateway had rewritten a chain git packed whole (null: nothing to rewrite). */
  rewriteMs: number | null;
  /** The gateway's answer store once built (gateway/cache/answer-store.ts); null: its log says it was not. */
  answerStore: AnswerStoreFigures | null;
}

export interface AnswerStoreFigures {
  blocks: number;
  /** Bytes of its two files on disk. */
  bytes: number;
  /** Records this gateway made (the rest taken back from earlier starts), and the ms its build took. */
  added: number;
  buildMs: number;
  /** ms from ready until the log said it was built. */
  readyMs: number;
}

/** A deterministic PRNG (mulberry32): the same URLs every run. */
function prng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `count` distinct block indices in 1..blocks-1, drawn uniformly, in random order. */
export function randomBlocks(blocks: number, count: number, seed = 16): number[] {
  const rnd = prng(seed);
  const picked = new Set<number>();
  const want = Math.min(count, blocks - 1);
  while (picked.size < want) picked.add(1 + Math.floor(rnd() * (blocks - 1)));
  return [...picked];
}

/** The fixture's URL of block i (test/helpers/chain-fixture.ts buildLongChain). */
export const fixtureUrl = (i: number) => `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`;

/** A wrk script: every request a path chosen at random (each thread seeded differently). */
function randomScript(paths: string[]): string {
  for (const p of paths) if (!/^\/[A-Za-z0-9%._~/?=&@-]*$/.test(p)) throw new Error(`bench: path not safe for the wrk script: ${p}`);
  return [
    'local paths = {',
    ...paths.map((p) => `  "${p}",`),
    '}',
    'local reqs = {}',
    'local count = 0',
    'function setup(thread) count = count + 1; thread:set("id", count) end',
    'function init(args)',
    '  math.randomseed(1000 + (id or 0))',
    '  for i, p in ipairs(paths) do reqs[i] = wrk.format("GET", p) end',
    'end',
    'function request() return reqs[math.random(#reqs)] end',
    '',
  ].join('\n');
}

/** Read system calls a process has made so far (/proc/PID/io `syscr`, every thread). */
function readCalls(pid: number): number {
  return Number(/^syscr: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))?.[1] ?? NaN);
}

/**
 * `waitIdle`, and then until the process has made almost no read calls for
 * two seconds in a row: the re-check of every block file after a warm start
 * reads through the thread pool at a few percent of a core when the files
 * are not in the page cache, which `waitIdle` alone takes for idle (at 50k
 * blocks it then ran during the first runs). Returns the ms waited.
 */
async function waitQuiet(pid: number, timeoutMs: number): Promise<number> {
  const t0 = performance.now();
  await waitIdle(pid, timeoutMs);
  let quiet = 0;
  let last = readCalls(pid);
  while (quiet < 2) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`bench: process ${pid} still reading after ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((r) => setTimeout(r, 1000));
    const now = readCalls(pid);
    quiet = now - last < 20 ? quiet + 1 : 0;
    last = now;
  }
  return performance.now() - t0;
}

/**
 * When the gateway found its chain git packed and rewrites its packs whole
 * (its log says so), wait for the end of that: lookups are measured on
 * the packs the gateway serves from then on. Returns the ms waited, or null
 * when there was nothing to rewrite.
 */
async function waitRewrite(g: Gateway, timeoutMs: number): Promise<number | null> {
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, 500));
  if (!/rewriting its packs/.test(readFileSync(g.logFile, 'utf8'))) return null;
  for (;;) {
    const log = readFileSync(g.logFile, 'utf8');
    if (/packs rewritten whole/.test(log)) return performance.now() - t0;
    if (/could not rewrite the packs whole/.test(log)) throw new Error('bench: the gateway could not rewrite the packs whole (see its log)');
    if (performance.now() - t0 > timeoutMs) throw new Error(`bench: the packs were not rewritten within ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/**
 * Waits for the gateway's answer store to be built (its log's `answer store
 * built` line): lookups are measured on it, as on the packs made whole.
 * Null when the log says it could not be (lookups then read the blocks).
 */
async function waitAnswerStore(g: Gateway, timeoutMs: number): Promise<AnswerStoreFigures | null> {
  const t0 = performance.now();
  for (;;) {
    const log = readFileSync(g.logFile, 'utf8');
    const line = log.split('\n').find((l) => l.includes('"answer store built"'));
    if (line !== undefined) {
      const j = JSON.parse(line) as { blocks: number; bytes: number; added: number; ms: number };
      return { blocks: j.blocks, bytes: j.bytes, added: j.added, buildMs: j.ms, readyMs: performance.now() - t0 };
    }
    if (/answer store could not|could not build the answer store/.test(log)) return null;
    if (performance.now() - t0 > timeoutMs) throw new Error(`bench: the answer store was not built within ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** The query string of a request target (what the answer cache and the `answers` server key by). */
const queryOf = (target: string) => target.slice(target.indexOf('?') + 1);

/** Lookups/s on the running gateway `g` vs a bare node:http server, interleaved. */
export async function lookups(s: GatewaySetup, g: Gateway, o: { urls: number; runs: number; seconds: number; warmup: number }): Promise<LookupFigures> {
  ensureWrk();
  const t0 = performance.now();
  const rewrite = await waitRewrite(g, s.startTimeoutMs);
  if (rewrite !== null) say(`  the gateway rewrote a chain git packed whole (gateway/chain/whole-packs.ts) ${(rewrite / 1000).toFixed(0)} s after ready`);
  const store = await waitAnswerStore(g, s.startTimeoutMs);
  say(
    store === null
      ? '  the gateway could not build its answer store (see its log): lookups read the blocks'
      : `  the gateway's answer store holds ${store.blocks.toLocaleString('en')} blocks, ${(store.bytes / 1e9).toFixed(2)} GB on disk; this gateway made ${store.added.toLocaleString('en')} of its records in ${(store.buildMs / 1000).toFixed(1)} s (the rest taken back from earlier starts)`,
  );
  await waitQuiet(g.pid, s.startTimeoutMs);
  const settled = performance.now() - t0;
  say(`  the gateway settled (idle, no reads) ${(settled / 1000).toFixed(0)} s after ready`);
  const paths = randomBlocks(s.blocks, o.urls).map((i) => `/v1/endorsement?url=${encodeURIComponent(fixtureUrl(i))}`);
  // Every answer, fetched once (which also fills the gateway's answer cache, as the warm-up would), written to
  // the `answers` server's file as they come (one JSON array a line: at 1M URLs they outgrow one string); a
  // sample of them picks the typical body of the bare server.
  const answersFile = join(s.work, 'lookup-answers.ndjson');
  const out = openSync(answersFile, 'w');
  const every = Math.max(1, Math.floor(paths.length / 25));
  const samples: Array<[string, string]> = [];
  try {
    for (let i = 0; i < paths.length; i += 64) {
      const got = await Promise.all(
        paths.slice(i, i + 64).map(async (p, k) => {
          const res = await fetch(g.url + p);
          const text = await res.text();
          if (res.status !== 200 || JSON.parse(text).success !== true) throw new Error(`bench: lookup ${p} answered ${res.status}: ${text.slice(0, 200)}`);
          const etag = res.headers.get('etag') ?? '';
          if ((i + k) % every === 0) samples.push([text, etag]);
          return `${JSON.stringify([queryOf(p), text, etag])}\n`;
        }),
      );
      writeSync(out, got.join(''));
    }
  } finally {
    closeSync(out);
  }
  samples.sort((a, b) => a[0].length - b[0].length);
  const [typicalText, typicalEtag] = samples[Math.floor(samples.length / 2)]!;
  const bodyFile = join(s.work, 'lookup-body.json');
  writeFileSync(bodyFile, typicalText);
  const script = join(s.work, 'lookups.lua');
  writeFileSync(script, randomScript(paths));
  /** The baselines: bare node:http with a typical body (judged), with the gateway's own answers, and batched as the gateway writes. */
  const baselines: Array<[name: string, label: string, args: string[]]> = [
    ['bare', 'bare node:http', ['bare', bodyFile, typicalEtag]],
    ['answers', 'bare node:http, the same answers', ['answers', answersFile]],
    ['batched', 'bare node:http, answers written in batches', ['bare-batched', bodyFile, typicalEtag]],
  ];
  const servers: Array<Awaited<ReturnType<typeof spawnServer>>> = [];
  try {
    const targets = [{ name: 'gateway', url: g.url, pid: g.pid }];
    for (const [name, label, args] of baselines) {
      const server = await spawnServer(label, args);
      servers.push(server);
      targets.push({ name, url: server.url, pid: server.pid });
    }
    const load = { threads: 2, connections: 32, script };
    const res: Record<string, WrkResult[]> = Object.fromEntries(targets.map((t) => [t.name, []]));
    const cpu: Record<string, number[]> = Object.fromEntries(targets.map((t) => [t.name, []]));
    say(
      `lookups over ${paths.length.toLocaleString('en')} random URLs of the whole chain: gateway vs bare node:http (and, beside it, a bare server answering the same answers and one writing in batches), wrk -t2 -c32 -d${o.seconds}s, ${o.runs} runs each (interleaved)...`,
    );
    for (const t of targets) await wrk(t.url, { ...load, seconds: o.warmup });
    for (let r = 0; r < o.runs; r++) {
      for (let k = 0; k < targets.length; k++) {
        const t = targets[(k + r) % targets.length]!;
        const cpu0 = cpuMsOf(t.pid);
        const x = await wrk(t.url, { ...load, seconds: o.seconds });
        const us = ((cpuMsOf(t.pid) - cpu0) * 1000) / x.requests;
        res[t.name]!.push(x);
        cpu[t.name]!.push(us);
        say(
          `  run ${r + 1} ${t.name}: ${Math.round(x.rps)} req/s, p50 ${x.p50Ms.toFixed(2)} ms, p99 ${x.p99Ms.toFixed(2)} ms, ${us.toFixed(1)} µs CPU a lookup`,
        );
      }
    }
    const rate = (name: string) => median(res[name]!.map((x) => x.rps));
    const gw = rate('gateway');
    /** The lowest and highest per-run ratio of the gateway to the baseline `name`. */
    const range = (name: string): [number, number] => {
      const per = res.gateway!.map((x, i) => x.rps / res[name]![i]!.rps);
      return [Math.min(...per), Math.max(...per)];
    };
    const cpuOf = (name: string) => median(cpu[name]!);
    return {
      urls: paths.length,
      gateway: gw,
      bare: rate('bare'),
      ratio: gw / rate('bare'),
      range: range('bare'),
      bodyBytes: typicalText.length,
      sameAnswers: rate('answers'),
      sameRatio: gw / rate('answers'),
      sameRange: range('answers'),
      batched: rate('batched'),
      batchedRatio: gw / rate('batched'),
      batchedRange: range('batched'),
      cpuUs: { gateway: cpuOf('gateway'), bare: cpuOf('bare'), answers: cpuOf('answers'), batched: cpuOf('batched') },
      rssAfter: memoryOf(g.pid).rss,
      settledMs: settled,
      rewriteMs: rewrite,
      answerStore: store,
    };
  } finally {
    await Promise.all(servers.map((x) => x.stop()));
  }
}

export const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(0);
