/**
 * `npm run bench -- soak [--quick]`: one authority gateway under 200
 * concurrent wrk connections over a weighted mix of lookups, cached
 * downloads and cold downloads (most of them mirror misses), plus a trickle
 * of submits from this process that must each get 201. The origin is its
 * own process (bench/soak-origin.ts); everything on 127.0.0.1.
 * Reported: RSS after warm-up and at the end (sampled every second),
 * requests per second, latency percentiles, unexpected statuses and socket
 * errors, submits acknowledged; targets in bench/RESULTS.md. With
 * `--cpu-prof` the gateway writes a V8 CPU profile to bench/out/. Figures
 * are reported, never asserted.
 */
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../platform/key-file.ts';
import { writeConfig } from '../test/helpers/gateway-process.ts';
import { digestOf, pattern } from '../test/helpers/origin-server.ts';
import {
  assertLoopback,
  countInFile,
  cpuMsOf,
  download,
  ensureWrk,
  median,
  memoryOf,
  root,
  sleep,
  spawnGateway,
  spawnNode,
  stopAll,
  type Proc,
} from './gateway-harness.ts';
import { mixScript, runMix, type MixResult } from './soak-wrk.ts';

/** pino's level names, as the log lines carry them (gateway/observability/logger.ts). */
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];

const KiB = 1024;
const MiB = 1024 * KiB;
const fmt = (x: number, d = 1) => x.toFixed(d);
const int = (x: number) => Math.round(x).toLocaleString('en');
const ok = (pass: boolean) => (pass ? '✅' : '❌');

const P = {
  threads: 2,
  connections: 200,
  lookups: 1000,
  hot: 16,
  cold: 300,
  coldMin: 64 * KiB,
  coldMax: 1 * MiB,
  memoryBytes: 32 * MiB,
  weights: { lookup: 70, hot: 20, cold: 10 },
  submitsPerSecond: 3,
  /** Most submits in flight at once; a tick finding this many waiting skips (and is counted). */
  submitCap: 64,
  setupConcurrency: 32,
  wrkTimeoutS: 10,
  seed: 7,
};

/** Nearest-rank percentile. */
function pct(xs: number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

/** A deterministic shuffle (xorshift). */
function shuffled<T>(xs: T[], seed: number): T[] {
  const a = [...xs];
  let x = seed >>> 0 || 1;
  for (let i = a.length - 1; i > 0; i--) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    const j = x % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

interface SubmitRecord {
  url: string;
  phase: string;
  status: number;
  ms: number;
  error?: string;
}

/** An open-loop trickle of submits: one every 1/rate s, each a new URL. */
class SubmitTrickle {
  readonly records: SubmitRecord[] = [];
  skipped = 0;
  phase = 'warm-up';
  private next = 0;
  private inflight = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly gateway: string,
    private readonly token: string,
    private readonly urls: string[],
  ) {
    assertLoopback(gateway);
  }

  start(perSecond: number): void {
    this.timer = setInterval(() => this.tick(), 1000 / perSecond);
  }

  private tick(): void {
    if (this.inflight.size >= P.submitCap) {
      this.skipped++;
      return;
    }
    const url = this.urls[this.next++];
    if (url === undefined) {
      this.skipped++;
      return;
    }
    const phase = this.phase;
    const t0 = performance.now();
    const p = (async () => {
      try {
        const res = await fetch(this.gateway + '/v1/submit', {
          method: 'POST',
          headers: { authorization: `Bearer ${this.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ url, name: `soak/s${this.next}`, semver: '1.0.0', license: 'MIT' }),
          signal: AbortSignal.timeout(60_000),
        });
        const text = await res.text();
        this.records.push({ url, phase, status: res.status, ms: performance.now() - t0, ...(res.status === 201 ? {} : { error: text.slice(0, 200) }) });
      } catch (e) {
        this.records.push({ url, phase, status: 0, ms: performance.now() - t0, error: (e as Error).message });
      }
    })();
    this.inflight.add(p);
    void p.finally(() => this.inflight.delete(p));
  }

  /** Stops issuing and waits for what is in flight (each bounded by its 60 s timeout). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await Promise.all([...this.inflight]);
  }
}

/** Sends SIGUSR2 to the soak origin and returns the request counts it prints. */
async function originStats(origin: Proc): Promise<Record<string, number>> {
  const before = [...origin.out().matchAll(/^stats (.*)$/gm)].length;
  origin.child.kill('SIGUSR2');
  for (let i = 0; i < 500; i++) {
    const all = [...origin.out().matchAll(/^stats (.*)$/gm)];
    if (all.length > before) return JSON.parse(all[all.length - 1]![1]!);
    await sleep(10);
  }
  throw new Error('bench: the origin printed no stats');
}

export async function runSoakBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const seconds = quick ? 10 : 60;
  const warmupSeconds = quick ? 3 : 15;
  const cpuProf = process.argv.includes('--cpu-prof');
  ensureWrk();
  const loadBefore = loadavg();
  const work = mkdtempSync(join(tmpdir(), 'vouch-soak-'));
  const childTmp = join(work, 'tmp');
  mkdirSync(childTmp);
  const profDir = join(root, 'bench', 'out', 'soak-prof');
  // The default configuration, logging included (info: a JSON line per request), into a file as an operator keeps it.
  const gwEnv: Record<string, string> = { TMPDIR: childTmp };
  const gwLog = join(work, 'gateway.log');
  if (cpuProf) {
    mkdirSync(profDir, { recursive: true });
    gwEnv.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ''} --cpu-prof --cpu-prof-dir=${profDir}`.trim();
  }
  let trickle: SubmitTrickle | null = null;
  let sampler: NodeJS.Timeout | null = null;
  const rows: string[] = [];
  const notes: string[] = [];
  try {
    // ------------------------------------------------------------------ the artifacts (every size distinct: distinct bytes, distinct hashes)
    const used = new Set<number>();
    const unique = (n: number) => {
      while (used.has(n)) n++;
      used.add(n);
      return n;
    };
    const routes: Record<string, { size: number; seed: number }> = {};
    const add = (path: string, size: number) => {
      routes[path] = { size: unique(size), seed: P.seed };
      return path;
    };
    const lookupPaths = Array.from({ length: P.lookups }, (_, i) => add(`/l/${i}.json`, 200 + i));
    const hotPaths = Array.from({ length: P.hot }, (_, i) => add(`/h/${i}.bin`, 96 * KiB + i * 9 * KiB + 1));
    const coldPaths = Array.from({ length: P.cold }, (_, i) => add(`/c/${i}.bin`, P.coldMin + Math.floor((i * (P.coldMax - P.coldMin)) / (P.cold - 1))));
    const submitCount = Math.ceil(P.submitsPerSecond * (seconds + warmupSeconds + 10) * 1.2);
    const submitPaths = Array.from({ length: submitCount }, (_, i) => add(`/s/${i}.bin`, 3000 + i));
    const coldBytes = coldPaths.reduce((a, p) => a + routes[p]!.size, 0);
    const hotBytes = hotPaths.reduce((a, p) => a + routes[p]!.size, 0);
    const routesFile = join(work, 'routes.json');
    writeFileSync(routesFile, JSON.stringify(routes));
    const origin = await spawnNode('origin', ['--import', 'tsx', join(root, 'bench', 'soak-origin.ts'), routesFile], {
      waitFor: /^listening http:\/\/\S+$/m,
      timeoutMs: 60_000,
    });
    const artifactUrl = (path: string) => origin.url + path;

    // ------------------------------------------------------------------ the authority gateway
    const keyFile = join(work, 'authority.pem');
    const tokenFile = join(work, 'submit.token');
    const token = 'soak-token-' + 'x'.repeat(32);
    const pub = createKeyFile(keyFile).publicKeyB64;
    writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
    const config = writeConfig(
      work,
      {
        listen: { port: 0 },
        chain: { dir: join(work, 'chain'), public_key: pub },
        authority: { key_file: keyFile, signer: 'soak-authority', submit_token_file: tokenFile },
        origin: { allow_private: true },
        mirror: { memory_bytes: P.memoryBytes },
      },
      'authority.yaml',
    );
    const gw = await spawnGateway('authority gateway', config, gwEnv, undefined, gwLog);
    const base = gw.url;

    // ------------------------------------------------------------------ endorse everything but the trickle's URLs, one URL per block
    const setupPaths = [...lookupPaths, ...hotPaths, ...coldPaths];
    console.log(
      `endorsing ${setupPaths.length} URLs (${P.lookups} for lookups, ${P.hot} hot, ${P.cold} cold of ${fmt(coldBytes / MiB)} MiB) through POST /v1/submit, ${P.setupConcurrency} at a time...`,
    );
    const t0 = performance.now();
    let nextSetup = 0;
    await Promise.all(
      Array.from({ length: P.setupConcurrency }, async () => {
        for (let i = nextSetup++; i < setupPaths.length; i = nextSetup++) {
          const path = setupPaths[i]!;
          const res = await fetch(base + '/v1/submit', {
            method: 'POST',
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
            body: JSON.stringify({
              url: artifactUrl(path),
              name: `soak/${path
                .slice(1)
                .replace(/\.\w+$/, '')
                .replaceAll('/', '-')}`,
              semver: '1.0.0',
              license: 'MIT',
            }),
            signal: AbortSignal.timeout(120_000),
          });
          const text = await res.text();
          if (res.status !== 201) throw new Error(`bench: setup submit of ${path} answered ${res.status}: ${text.slice(0, 300)}`);
        }
      }),
    );
    console.log(`  ${fmt((performance.now() - t0) / 1000, 1)} s`);
    const checkpointSize = async () => {
      const r = await fetch(base + '/v1/checkpoint');
      return ((await r.json()) as { size: number }).size;
    };
    const sizeBefore = await checkpointSize();

    // Check one of each kind (status; bytes and sha256 for downloads).
    const dl = (path: string) => `/v1/download?url=${encodeURIComponent(artifactUrl(path))}`;
    const look = (path: string) => `/v1/endorsement?url=${encodeURIComponent(artifactUrl(path))}`;
    {
      const r = await fetch(base + look(lookupPaths[0]!));
      const j = (await r.json()) as { success: boolean };
      if (r.status !== 200 || !j.success) throw new Error(`bench: lookup answered ${r.status}`);
      for (const path of [hotPaths[0]!, coldPaths[P.cold - 1]!]) {
        const d = await download(base + dl(path));
        const want = digestOf(pattern(routes[path]!.size, P.seed));
        if (d.status !== 200 || d.bytes !== routes[path]!.size || d.sha256 !== want)
          throw new Error(`bench: download ${path}: ${d.status}, ${d.bytes} bytes, ${d.sha256} (want ${want})`);
      }
    }

    const script = join(work, 'soak.lua');
    writeFileSync(script, mixScript({ lookups: lookupPaths.map(look), hot: hotPaths.map(dl), cold: shuffled(coldPaths, 12345).map(dl), weights: P.weights }));

    // ------------------------------------------------------------------ warm-up, then the soak
    const samples: { phase: string; t: number; rss: number }[] = [];
    let phase = 'warm-up';
    const tStart = performance.now();
    const sample = () => {
      try {
        samples.push({ phase, t: (performance.now() - tStart) / 1000, rss: memoryOf(gw.pid).rss });
      } catch {
        /* gone */
      }
    };
    sample();
    sampler = setInterval(sample, 1000);
    trickle = new SubmitTrickle(base, token, submitPaths.map(artifactUrl));
    trickle.start(P.submitsPerSecond);
    const load = { threads: P.threads, connections: P.connections, timeoutS: P.wrkTimeoutS, script };
    console.log(`warm-up: wrk -t${P.threads} -c${P.connections} -d${warmupSeconds}s (+ ${P.submitsPerSecond} submits/s)...`);
    const warm = await runMix(base, { ...load, seconds: warmupSeconds, offset: 0 });
    console.log(`  ${int(warm.rps)} req/s, p50 ${fmt(warm.p50Ms, 2)} ms, p99 ${fmt(warm.p99Ms, 2)} ms, statuses ${JSON.stringify(warm.statuses)}`);
    await originStats(origin);
    phase = 'soak';
    trickle.phase = 'soak';
    const rssStart = memoryOf(gw.pid).rss;
    const cpu0 = cpuMsOf(gw.pid) / 1000;
    const tSoak = performance.now();
    samples.push({ phase, t: (tSoak - tStart) / 1000, rss: rssStart });
    console.log(
      `soak: wrk -t${P.threads} -c${P.connections} -d${seconds}s --latency (+ ${P.submitsPerSecond} submits/s); RSS at start ${fmt(rssStart / MiB)} MiB...`,
    );
    const soak: MixResult = await runMix(base, { ...load, seconds, offset: warm.nextOffset });
    const rssEnd = memoryOf(gw.pid).rss;
    const cpu1 = cpuMsOf(gw.pid) / 1000;
    const soakWall = (performance.now() - tSoak) / 1000;
    samples.push({ phase, t: (performance.now() - tStart) / 1000, rss: rssEnd });
    phase = 'after';
    const fromOrigin = await originStats(origin);
    await trickle.stop();
    await sleep(2000);
    sample();
    clearInterval(sampler);
    sampler = null;
    const rssIdle = samples[samples.length - 1]!.rss;
    const hwm = memoryOf(gw.pid).hwm;
    console.log(wrapWrk(soak.text));

    // Every acknowledged submit is on the chain and answers a lookup.
    const subs = trickle.records;
    const acked = subs.filter((r) => r.status === 201);
    const sizeAfter = await checkpointSize();
    const chainOk = sizeAfter === sizeBefore + acked.length;
    const lastAcked = acked.length ? (await fetch(base + '/v1/endorsement?url=' + encodeURIComponent(acked[acked.length - 1]!.url))).status : NaN;
    await gw.stop();
    await origin.stop();
    // Counted in pieces (bench/gateway-harness.ts countInFile): a soak's log can outgrow one string. `{"level":"` unescaped only begins a line.
    const logBytes = statSync(gwLog).size;
    const requestLines = countInFile(gwLog, '"msg":"request"');
    const logLevels = new Map<string, number>();
    for (const level of LEVELS) {
      const n = countInFile(gwLog, `{"level":"${level}"`);
      if (n > 0) logLevels.set(level, n);
    }

    // ------------------------------------------------------------------ figures
    const soakRss = samples.filter((s) => s.phase === 'soak');
    const rssMin = Math.min(...soakRss.map((s) => s.rss));
    const rssMax = Math.max(...soakRss.map((s) => s.rss));
    const k = Math.min(5, Math.floor(soakRss.length / 2));
    const headMed = median(soakRss.slice(0, k).map((s) => s.rss));
    const tailMed = median(soakRss.slice(-k).map((s) => s.rss));
    const change = ((rssEnd - rssStart) / rssStart) * 100;
    const changeMed = ((tailMed - headMed) / headMed) * 100;
    const unexpected = Object.entries(soak.statuses).filter(([key]) => !key.endsWith(' 200'));
    const unexpectedN = unexpected.reduce((a, [, n]) => a + n, 0);
    const sockErr = soak.errors.connect + soak.errors.read + soak.errors.write + soak.errors.timeout;
    const answered = Object.values(soak.statuses).reduce((a, n) => a + n, 0);
    const soakSubs = subs.filter((r) => r.phase === 'soak');
    const soakAcked = soakSubs.filter((r) => r.status === 201);
    const subBad = soakSubs.filter((r) => r.status !== 201);
    const subMs = soakAcked.map((r) => r.ms);
    const coldIssued = soak.issued.cold ?? 0;
    const coldFetched = fromOrigin.c ?? 0;
    const cpuPct = ((cpu1 - cpu0) / soakWall) * 100;
    const mix = (key: string) => `${int(soak.issued[key] ?? 0)} (${fmt(((soak.issued[key] ?? 0) / Math.max(1, soak.requests)) * 100, 0)} %)`;

    rows.push(
      `| gateway RSS (VmRSS, sampled every 1 s) | start ${fmt(rssStart / MiB)} MiB → end ${fmt(rssEnd / MiB)} MiB: **${change >= 0 ? '+' : ''}${fmt(change)} %**; median of first/last ${k} samples ${fmt(headMed / MiB)} → ${fmt(tailMed / MiB)} MiB (${changeMed >= 0 ? '+' : ''}${fmt(changeMed)} %); min ${fmt(rssMin / MiB)}, max ${fmt(rssMax / MiB)} MiB during the soak; ${fmt(rssIdle / MiB)} MiB 2 s after; VmHWM ${fmt(hwm / MiB)} MiB | flat within 10 % | ${ok(Math.abs(change) <= 10)} |`,
    );
    rows.push(
      `| requests/s (wrk \`-t${P.threads} -c${P.connections} -d${seconds}s\`) | **${int(soak.rps)} /s** (${int(soak.requests)} requests; ${fmt(soak.transferBps / MiB)} MiB/s read) | | |`,
    );
    rows.push(
      `| latency, all kinds together (wrk \`--latency\`) | p50 **${fmt(soak.p50Ms, 2)} ms**, p99 **${fmt(soak.p99Ms, 2)} ms** (mean ${fmt(soak.latencyAvgMs, 2)} ms) | | |`,
    );
    rows.push(
      `| unexpected statuses (anything but 200) | **${int(unexpectedN)}**${unexpected.length ? ` (${unexpected.map(([key, n]) => `${key}: ${n}`).join(', ')})` : ''}; wrk's "Non-2xx or 3xx": ${int(soak.non2xx)}; 200s counted by the script: ${int(answered - unexpectedN)} | 0 | ${ok(unexpectedN === 0 && soak.non2xx === 0)} |`,
    );
    rows.push(
      `| socket errors | **${int(sockErr)}** (connect ${soak.errors.connect}, read ${soak.errors.read}, write ${soak.errors.write}, timeout > ${P.wrkTimeoutS} s ${soak.errors.timeout}) | 0 | ${ok(sockErr === 0)} |`,
    );
    rows.push(
      `| submits (${P.submitsPerSecond}/s, each a new URL, from a separate loop) | **${soakAcked.length} of ${soakSubs.length}** got 201${subBad.length ? ` (others: ${[...new Set(subBad.map((r) => r.status))].map((s) => `${s}×${subBad.filter((r) => r.status === s).length}`).join(', ')}: ${subBad[0]!.error ?? ''})` : ''}${trickle.skipped ? `; ${trickle.skipped} ticks skipped (${P.submitCap} in flight)` : ''}; p50 **${fmt(pct(subMs, 0.5), 1)} ms**, p99 **${fmt(pct(subMs, 0.99), 1)} ms**, max ${fmt(Math.max(...subMs), 1)} ms | all 201 | ${ok(subBad.length === 0 && soakSubs.length > 0 && trickle.skipped === 0)} |`,
    );
    rows.push(`| mix issued by the script | lookups ${mix('lookup')}, cached downloads ${mix('hot')}, cold downloads ${mix('cold')} | 70/20/10 | |`);
    rows.push(
      `| cold downloads that reached the origin | ${int(coldFetched)} fetches for ${int(coldIssued)} cold requests (**${fmt((coldFetched / Math.max(1, coldIssued)) * 100, 0)} %** misses); hot-set fetches from the origin during the soak: ${fromOrigin.h ?? 0} | most miss | |`,
    );
    rows.push(`| gateway CPU during the soak | ${fmt(cpuPct, 0)} % of one core (user + system) | | |`);
    rows.push(
      `| log (default level, stderr to a file) | ${int(requestLines)} request lines for ${int(soak.requests)}+ requests (warm-up and setup included), ${fmt(logBytes / MiB, 1)} MiB; lines by level: ${[...logLevels].map(([l, n]) => `${l} ${int(n)}`).join(', ')} | a line per request | ${ok(requestLines >= soak.requests)} |`,
    );

    notes.push(
      `Setup: one \`vouch serve\` process in authority mode (\`origin.allow_private: true\`, \`mirror.memory_bytes: ${P.memoryBytes / MiB} MiB\`, no disk tier; default logging, \`VOUCH_LOG_LEVEL\` unset, stderr appended to a file), its own origin process (bench/soak-origin.ts, the test origin server), wrk and this process (the submit loop and the RSS sampler), all on 127.0.0.1 and sharing the machine's cores. Before the soak ${setupPaths.length} URLs were endorsed through \`POST /v1/submit\`, one URL per block: ${P.lookups} small ones for lookups, ${P.hot} hot artifacts (${fmt(hotBytes / MiB, 1)} MiB in all) and ${P.cold} cold ones of 64 KiB–1 MiB (${fmt(coldBytes / MiB)} MiB in all, ${fmt(coldBytes / P.memoryBytes, 1)}× the memory tier); one of each kind was checked (status, length, sha256).`,
      `Load: Debian wrk \`-t${P.threads} -c${P.connections} -d${seconds}s --latency --timeout ${P.wrkTimeoutS}s\`; the Lua script picks each request by weight ${P.weights.lookup}/${P.weights.hot}/${P.weights.cold}: a lookup of a random one of the ${P.lookups} URLs, a download of a random hot artifact, or the next cold artifact (each thread rotates over the cold set from its own offset, in a fixed shuffled order); \`response()\` counts statuses by class (json / bytes / other). A ${warmupSeconds} s warm-up of the same mix (and submits) ran first; "start" is the RSS right after it. Submits: one every ${fmt(1000 / P.submitsPerSecond, 0)} ms (open loop, at most ${P.submitCap} in flight), each a new ~3 KB artifact URL, timed from request to answer (the answer comes once the commit is on the branch).`,
      `After the soak the chain's checkpoint had ${sizeAfter} blocks, ${sizeBefore} before the warm-up + ${acked.length} acknowledged submits (warm-up and soak): ${chainOk ? 'consistent' : '**inconsistent**'}; a lookup of the last acknowledged URL answered ${lastAcked}.`,
      `RSS every 10 s of the soak (MiB): ${soakRss
        .filter((_, i) => i % 10 === 0 || i === soakRss.length - 1)
        .map((s) => fmt(s.rss / MiB, 0))
        .join(', ')}.`,
      `Load average (1/5/15 min) of the machine: ${loadBefore.map((x) => fmt(x, 2)).join(' / ')} at the start, ${loadavg()
        .map((x) => fmt(x, 2))
        .join(' / ')} at the end (the machine has 2 cores; anything above ~0.1 before the start is other work sharing them).`,
    );
    if (cpuProf) notes.push(`CPU profile of the gateway: ${profDir}.`);
    if (quick) notes.push(`**--quick**: ${warmupSeconds} s warm-up, ${seconds} s soak; a smoke test, not the figures.`);
  } finally {
    if (sampler) clearInterval(sampler);
    await trickle?.stop().catch(() => {});
    await stopAll();
    rmSync(work, { recursive: true, force: true });
  }
  const markdown = ['| Figure | Value | Target | |', '|---|---|---|---|', ...rows, '', ...notes].join('\n');
  return { title: 'Soak (authority gateway, 200 connections, mixed load)', markdown };
}

/** wrk's own output, indented for the log. */
function wrapWrk(text: string): string {
  return text
    .split('\n')
    .map((l) => '  | ' + l)
    .join('\n');
}
