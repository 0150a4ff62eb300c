/**
 * `npm run bench -- oci`: what `skopeo copy` of a container image pays for
 * going through a `kind: oci` route (issue 36, item 5), as users run it.
 * Two images of LAYERS layers (LAYER_MIB MiB each, gzip stored blocks) are
 * pushed to Debian's distribution registry on 127.0.0.1, their tags
 * endorsed. Each round, interleaved: skopeo copies each straight from the
 * registry; through a NEW gateway process the first cold (empty mirror),
 * then again (hit), then the second cold (in service: the memory tier full,
 * its layers land in the evicted ones' buffers); then cold through other
 * proxies (REFERENCES). Wall time of skopeo (CPU by bash's `times`); ratio =
 * registry / gateway time; medians of ROUNDS (VOUCH_BENCH_OCI_ROUNDS=N);
 * peak RSS: the gateway's VmHWM after its pulls. Env: VOUCH_BENCH_OCI_
 * PROFILE=DIR (--cpu-prof of each gateway into DIR), BASELINE=DIR (a built
 * checkout's gateways pull beside), PIN=1 (skopeo on core 0, servers on 1).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildAuthorityBlock, buildCheckpoint, buildEndorseBlock, formatBlockFile, formatCheckpointFile } from '../chain/index.ts';
import { ChainRepo } from '../store/chain-repo.ts';
import { appendSigned, commitFor } from '../store/chain-append.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { testSigner } from '../test/helpers/chain-fixture.ts';
import { writeConfig } from '../test/helpers/gateway-process.ts';
import { Layout, Registry, push, type Descriptor } from '../test/helpers/oci-registry.ts';
import { runAsync } from '../test/helpers/processes.ts';
import { MANIFEST_ACCEPT, manifestUrl } from '../gateway/ecosystems/oci.ts';
import { freePort } from '../test/helpers/free-port.ts';
import { HAPROXY, assertLoopback, cpuMsOf, median, memoryOf, spawnNode, spawnServer, stopAll } from './gateway-harness.ts';

const CANON = 'https://registry.example.org/';
const MiB = 1024 * 1024;
/** The defaults (`mirror.memory_bytes`, `mirror.budget_bytes` = 2 x memory), set explicitly. */
const MEMORY = 256 * MiB;
const BUDGET = 512 * MiB;

/** CPU ms of each thread of a process, by `comm tid`, from /proc (utime + stime, USER_HZ 100). */
function threadCpuMs(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(`${comm} ${tid}`, ((Number(fields[11]) + Number(fields[12])) * 1000) / 100);
    } catch {
      // a thread that ended meanwhile
    }
  }
  return out;
}

/** CPU ms of a process's main thread (its event loop) alone, from /proc (utime + stime, USER_HZ 100). */
function mainCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/** Minor page faults of a process so far (all threads; /proc field 10): pages it touched for the first time. */
function minorFaultsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[7]);
}

/**
 * With VOUCH_BENCH_OCI_PIN=1, skopeo runs on core 0 alone and the registry,
 * the gateways and the references on core 1 (taskset): the client with a
 * core of its own, as on another machine, instead of sharing both with them.
 */
const PIN = process.env.VOUCH_BENCH_OCI_PIN === '1';

/** With PIN, moves every thread of a server process to core 1 (threads it starts later inherit it). */
function pinServer(pid: number): void {
  if (!PIN) return;
  const r = spawnSync('taskset', ['-a', '-p', '-c', '1', String(pid)], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`taskset -p ${pid} failed: ${r.stderr}`);
}

/** Wall time of `skopeo copy SRC oci:…` and skopeo's own CPU (user + system, ms: bash's `times` of its children). */
async function timedCopy(src: string, work: string): Promise<{ ms: number; cpu: number }> {
  const dir = mkdtempSync(join(work, 'pull-'));
  const t0 = performance.now();
  const script = `${PIN ? 'taskset -c 0 ' : ''}skopeo --insecure-policy "$@"; rc=$?; times >&2; exit $rc`;
  const r = await runAsync('bash', ['-c', script, 'skopeo', 'copy', '--src-tls-verify=false', src, `oci:${dir}:x`], { timeoutMs: 600_000 });
  const ms = performance.now() - t0;
  rmSync(dir, { recursive: true, force: true });
  if (r.status !== 0) throw new Error(`skopeo copy ${src} failed: ${r.stderr}`);
  // `times`: the shell's user and system time, then its children's (`0m0.780s 0m0.220s`).
  const m = /(\d+)m([\d.]+)s (\d+)m([\d.]+)s\s*$/.exec(r.stderr);
  const cpu = m === null ? Number.NaN : (Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) * 60 + Number(m[4])) * 1000;
  return { ms, cpu };
}

/**
 * What the CPU of a cold pull allows on this machine's cores: the pull's
 * processes together (skopeo, gateway, registry) can end no sooner than
 * their CPU time spread over every core, so the ratio can be no better than
 * straight / that.
 */
function cpuArithmetic(straight: number, cold: number, cpu: { skopeo: number; gateway: number; registry: number }, skopeoStraight: number): string {
  if (PIN) {
    const servers = cpu.gateway + cpu.registry;
    return (
      `CPU of the cold row (medians), each side on its own core: skopeo ${cpu.skopeo.toFixed(0)} ms on core 0 (${(100 * (cpu.skopeo / cold)).toFixed(0)} % of the pull's wall time); ` +
      `the gateway ${cpu.gateway.toFixed(0)} ms and the registry ${cpu.registry.toFixed(0)} ms on core 1 (${servers.toFixed(0)} ms, ${(100 * (servers / cold)).toFixed(0)} %).`
    );
  }
  const cores = availableParallelism();
  const total = cpu.skopeo + cpu.gateway + cpu.registry;
  const floor = total / cores;
  const needed = straight / 0.8;
  const busyStraight = (skopeoStraight + cpu.registry) / (cores * straight);
  const ms = (x: number) => `${x.toFixed(0)} ms`;
  const pct = (x: number) => `${(100 * x).toFixed(0)} %`;
  return (
    `CPU arithmetic of the cold row (medians): skopeo ${ms(cpu.skopeo)} + gateway ${ms(cpu.gateway)} + registry ${ms(cpu.registry)} = ${ms(total)} of CPU, ` +
    `so on ${cores} cores the pull cannot end before ${ms(floor)} even with every core busy all the time: a ratio of at most ${(straight / floor).toFixed(2)}; ` +
    `measured ${(straight / cold).toFixed(2)}, the pull's processes keeping the cores ${pct(total / (cores * cold))} busy ` +
    `(straight from the registry, skopeo ${ms(skopeoStraight)} + registry ${ms(cpu.registry)}: ${pct(busyStraight)}; with other work on the machine these shares are lower by what it took). ` +
    `0.8 needs the pull within ${ms(needed)}: at most ${ms(needed * cores - cpu.skopeo - cpu.registry)} of gateway CPU with the cores busy all the time, ` +
    `${ms(needed * cores * busyStraight - cpu.skopeo - cpu.registry)} at the share skopeo keeps them busy on its own.`
  );
}

/**
 * The proxies a cold pull also goes through, for reference: Debian's
 * haproxy (where installed), bench/gateway-servers.ts's modes, and Debian's
 * registry as a cache.
 */
const KINDS = ['haproxy', 'proxy', 'hash-proxy', 'registry-cache'] as const;
type Reference = (typeof KINDS)[number];
const REFERENCES = KINDS.filter((k) => k !== 'haproxy' || HAPROXY !== null);
const REFERENCE_TEXT: Record<Reference, string> = {
  haproxy: 'HAProxy 2.6 (Debian; `mode http`, its defaults otherwise: a byte relay, no hash, no store)',
  proxy: 'a streaming pass-through (node:http piping each answer as it arrives: no hash, no store)',
  'hash-proxy':
    'a store-and-forward proxy that only hashes (node:http: each blob received whole into memory, SHA-256 as it arrives, sent once it matches: no chain, no mirror)',
  'registry-cache':
    "the distribution registry's own pull-through cache (`proxy: remoteurl`, as Debian ships it: a cold blob is streamed to the client as it arrives, unchecked, while a second fetch of it from upstream is stored and checked there)",
};

/** HAProxy relaying 127.0.0.1:PORT to `upstream` in `mode http`, resolved once it answers. */
async function startHaproxy(cfgFile: string, upstream: string): Promise<{ pid: number; host: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const cfg = ['defaults', '  mode http', '  timeout connect 5s', '  timeout client 60s', '  timeout server 60s'];
  cfg.push('frontend f', `  bind 127.0.0.1:${port}`, '  default_backend b', 'backend b', `  server registry ${upstream}`, '');
  writeFileSync(cfgFile, cfg.join('\n'));
  const child = spawn(HAPROXY!, ['-db', '-f', cfgFile], { stdio: 'ignore' });
  const exited = new Promise((r) => child.once('exit', r));
  const stop = async () => {
    child.kill('SIGTERM');
    await exited;
  };
  for (let i = 0; ; i++) {
    const up = await fetch(`http://127.0.0.1:${port}/v2/`).catch(() => null);
    if (up !== null) {
      await up.arrayBuffer();
      return { pid: child.pid!, host: `127.0.0.1:${port}`, stop };
    }
    if (i === 100 || child.exitCode !== null) {
      await stop();
      throw new Error('haproxy did not start');
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function runOciBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const LAYERS = quick ? 2 : 4;
  const LAYER_MIB = quick ? 32 : 56;
  const ROUNDS = Number(process.env.VOUCH_BENCH_OCI_ROUNDS) || (quick ? 2 : 5);
  const work = mkdtempSync(join(tmpdir(), 'vouch-bench-oci-'));
  let registry: Registry | null = null;
  try {
    registry = await Registry.start(join(work, 'registry'));
    assertLoopback(registry.url);
    const layout = new Layout(join(work, 'layout'));
    const layers: Descriptor[] = [];
    for (let i = 0; i < LAYERS; i++) layers.push(await layout.bigLayer(LAYER_MIB * MiB, 100 + i));
    layout.tag(layout.image(layers), '1.0');
    await push(join(work, 'layout'), '1.0', registry, 'bench');
    // Another image of the same shape (other bytes): the cold pull of a gateway in service.
    const second: Descriptor[] = [];
    for (let i = 0; i < LAYERS; i++) second.push(await layout.bigLayer(LAYER_MIB * MiB, 200 + i));
    layout.tag(layout.image(second), '2.0');
    await push(join(work, 'layout'), '2.0', registry, 'bench');
    rmSync(join(work, 'layout'), { recursive: true, force: true });
    pinServer(registry.child.pid!);
    const total = layers.reduce((n, l) => n + l.size, 0);
    const digestOf = async (tag: string) => {
      const res = await fetch(`${registry!.url}/v2/bench/manifests/${tag}`, { headers: { accept: MANIFEST_ACCEPT } });
      await res.arrayBuffer();
      return res.headers.get('docker-content-digest')!;
    };
    const digest = await digestOf('1.0');
    const digest2 = await digestOf('2.0');

    const signer = testSigner();
    const now = Date.UTC(2026, 0, 1);
    const authority = buildAuthorityBlock({ signer, backend: nodeBackend, now, uns: 'bench/chain' });
    const chainDir = join(work, 'chain');
    const repo = await ChainRepo.init(
      chainDir,
      [{ index: 0, content: formatBlockFile(authority) }],
      formatCheckpointFile(buildCheckpoint({ head: authority, signer, now })),
      commitFor([authority], now),
    );
    const block = buildEndorseBlock({
      prev: authority,
      signer,
      backend: nodeBackend,
      now: now + 1000,
      uns: 'bench/images',
      semver: '1.0.0',
      entries: [
        { url: manifestUrl(CANON, 'bench', '1.0'), artifactHash: digest, name: 'oci/bench', semver: '1.0.0', license: 'MIT' },
        { url: manifestUrl(CANON, 'bench', '2.0'), artifactHash: digest2, name: 'oci/bench', semver: '2.0.0', license: 'MIT' },
      ],
    });
    await appendSigned(repo, [block], buildCheckpoint({ head: block, signer, now: now + 1000 }), now + 1000);

    const direct: number[] = [];
    const cold: number[] = [];
    const hit: number[] = [];
    const peaks: number[] = [];
    const coldCpu: number[] = [];
    const hitCpu: number[] = [];
    const coldMain: number[] = [];
    const registryCpu: number[] = [];
    const hitMain: number[] = [];
    /** The second image: straight from the registry, and cold through the gateway in service (after the first image's pulls). */
    const direct2: number[] = [];
    const served: number[] = [];
    const servedCpu: number[] = [];
    /** The gateway's minor page faults per pull. */
    const faults: { cold: number[]; hit: number[]; served: number[] } = { cold: [], hit: [], served: [] };
    /** skopeo's own CPU per pull: straight, cold, hit. */
    const skopeoCpu: { direct: number[]; cold: number[]; hit: number[] } = { direct: [], cold: [], hit: [] };
    /** One gateway of checkout `root` (this one, or VOUCH_BENCH_OCI_BASELINE's): a cold pull, a hit, then the second image cold (in service). */
    const pulls = async (round: number, root: string, tag: string) => {
      const gwDir = join(work, `gw-${tag}-${round}`);
      mkdirSync(gwDir, { recursive: true });
      const cfg = writeConfig(gwDir, {
        listen: { host: '127.0.0.1', port: 0 },
        chain: { dir: chainDir, public_key: Buffer.from(signer.publicKey).toString('base64') },
        origin: { allow_private: true, timeout: 60 },
        mirror: { memory_bytes: MEMORY, budget_bytes: BUDGET, disk_dir: join(gwDir, 'mirror') },
        proxy: { routes: [{ prefix: '/v2/', kind: 'oci', origin: registry!.url, canonical: CANON }] },
      });
      // A CPU profile of the gateway's whole life (both pulls), written when it stops.
      const prof = process.env.VOUCH_BENCH_OCI_PROFILE;
      const gw = await spawnNode(
        `gateway-${tag}-${round}`,
        [...(prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : []), join(root, 'tools', 'vouch.js'), 'serve', '--config', cfg],
        { waitFor: /^ready: .*$/m },
      );
      const host = new URL(gw.url!).host;
      assertLoopback(gw.url!);
      pinServer(gw.pid);
      const c0 = cpuMsOf(gw.pid);
      const m0 = mainCpuMs(gw.pid);
      const t0 = threadCpuMs(gw.pid);
      const f0 = minorFaultsOf(gw.pid);
      const coldPull = await timedCopy(`docker://${host}/bench:1.0`, work);
      const c1 = cpuMsOf(gw.pid);
      const m1 = mainCpuMs(gw.pid);
      const t1 = threadCpuMs(gw.pid);
      const f1 = minorFaultsOf(gw.pid);
      const hitPull = await timedCopy(`docker://${host}/bench:1.0`, work);
      const c1h = cpuMsOf(gw.pid);
      const m1h = mainCpuMs(gw.pid);
      const f1h = minorFaultsOf(gw.pid);
      // In service: the first image's disk copies written (the memory tier quiet for 2 s at most), then another image, cold.
      await new Promise((r) => setTimeout(r, 3000));
      const c2 = cpuMsOf(gw.pid);
      const f2 = minorFaultsOf(gw.pid);
      const servedPull = await timedCopy(`docker://${host}/bench:2.0`, work);
      const out = {
        cold: coldPull.ms,
        hit: hitPull.ms,
        coldSkopeo: coldPull.cpu,
        hitSkopeo: hitPull.cpu,
        coldCpu: c1 - c0,
        hitCpu: c1h - c1,
        served: servedPull.ms,
        servedCpu: cpuMsOf(gw.pid) - c2,
        servedFaults: minorFaultsOf(gw.pid) - f2,
        coldMain: m1 - m0,
        hitMain: m1h - m1,
        coldFaults: f1 - f0,
        hitFaults: f1h - f1,
        // CPU of the cold pull by thread (ms), largest first: main thread, hash workers, libuv's pool, V8's.
        threads: [...t1]
          .map(([k, v]) => v - (t0.get(k) ?? 0))
          .filter((v) => v > 0)
          .sort((a, b) => b - a),
        peak: memoryOf(gw.pid).hwm,
      };
      await gw.stop();
      rmSync(gwDir, { recursive: true, force: true });
      return out;
    };
    /**
     * The same cold pull through other proxies, each a new process, side by
     * side with the gateway's: what one proxy hop costs on these cores
     * whatever the proxy does (see REFERENCES).
     */
    const refs = new Map<Reference, { cold: number[]; cpu: number[]; hit: number[] }>(REFERENCES.map((r) => [r, { cold: [], cpu: [], hit: [] }]));
    const referencePull = async (round: number, kind: Reference) => {
      let pid: number;
      let host: string;
      let stop: () => Promise<void>;
      if (kind === 'registry-cache') {
        const dir = join(work, `cache-${round}`);
        const cache = await Registry.start(dir, { proxy: registry!.url });
        [pid, host, stop] = [cache.child.pid!, cache.host, () => cache.stop().then(() => rmSync(dir, { recursive: true, force: true }))];
      } else if (kind === 'haproxy') {
        const p = await startHaproxy(join(work, `haproxy-${round}.cfg`), registry!.host);
        [pid, host, stop] = [p.pid, p.host, p.stop];
      } else {
        const p = await spawnServer(`${kind}-${round}`, [kind, registry!.url]);
        [pid, host, stop] = [p.pid, new URL(p.url).host, () => p.stop()];
      }
      pinServer(pid);
      const c0 = cpuMsOf(pid);
      const coldPull = await timedCopy(`docker://${host}/bench:1.0`, work);
      const cpu = cpuMsOf(pid) - c0;
      const hitPull = kind === 'registry-cache' ? await timedCopy(`docker://${host}/bench:1.0`, work) : null;
      await stop();
      const r = refs.get(kind)!;
      r.cold.push(coldPull.ms);
      r.cpu.push(cpu);
      if (hitPull !== null) r.hit.push(hitPull.ms);
      process.stderr.write(
        `round ${round + 1}/${ROUNDS} ${kind}: cold ${coldPull.ms.toFixed(0)} ms (its CPU ${cpu.toFixed(0)} ms)${hitPull === null ? '' : `, hit ${hitPull.ms.toFixed(0)} ms`}\n`,
      );
    };
    const here = fileURLToPath(new URL('..', import.meta.url));
    const baseline = process.env.VOUCH_BENCH_OCI_BASELINE || null;
    const base: { cold: number[]; hit: number[]; coldCpu: number[] } = { cold: [], hit: [], coldCpu: [] };
    for (let round = 0; round < ROUNDS; round++) {
      const r0 = cpuMsOf(registry.child.pid!);
      const straight = await timedCopy(`docker://${registry.host}/bench:1.0`, work);
      direct.push(straight.ms);
      skopeoCpu.direct.push(straight.cpu);
      registryCpu.push(cpuMsOf(registry.child.pid!) - r0);
      direct2.push((await timedCopy(`docker://${registry.host}/bench:2.0`, work)).ms);
      // Old and new alternate which goes first, so neither always runs right after the registry's pull.
      const order = baseline === null ? ['new'] : round % 2 === 0 ? ['new', 'old'] : ['old', 'new'];
      for (const which of order) {
        const p = await pulls(round, which === 'new' ? here : baseline!, which);
        const line = `in service: registry ${direct2.at(-1)!.toFixed(0)} ms, cold ${p.served.toFixed(0)} ms (gateway CPU ${p.servedCpu.toFixed(0)} ms; minor faults ${p.servedFaults}); cold ${p.cold.toFixed(0)} ms (gateway CPU ${p.coldCpu.toFixed(0)} ms, main thread ${p.coldMain.toFixed(0)}; by thread ${p.threads.join(' ')}; minor faults ${p.coldFaults}; skopeo CPU ${p.coldSkopeo.toFixed(0)}), hit ${p.hit.toFixed(0)} ms (gateway CPU ${p.hitCpu.toFixed(0)} ms, main thread ${p.hitMain.toFixed(0)}; minor faults ${p.hitFaults}), gateway peak RSS ${(p.peak / MiB).toFixed(0)} MiB`;
        process.stderr.write(
          `round ${round + 1}/${ROUNDS}${baseline === null ? '' : ` ${which}`}: registry ${direct.at(-1)!.toFixed(0)} ms (skopeo CPU ${skopeoCpu.direct.at(-1)!.toFixed(0)}), ${line}\n`,
        );
        if (which === 'old') {
          base.cold.push(p.cold);
          base.hit.push(p.hit);
          base.coldCpu.push(p.coldCpu);
          continue;
        }
        cold.push(p.cold);
        hit.push(p.hit);
        skopeoCpu.cold.push(p.coldSkopeo);
        skopeoCpu.hit.push(p.hitSkopeo);
        coldCpu.push(p.coldCpu);
        hitCpu.push(p.hitCpu);
        coldMain.push(p.coldMain);
        hitMain.push(p.hitMain);
        faults.cold.push(p.coldFaults);
        faults.hit.push(p.hitFaults);
        faults.served.push(p.servedFaults);
        served.push(p.served);
        servedCpu.push(p.servedCpu);
        peaks.push(p.peak);
      }
      // The references after the gateway, in an order that turns each round.
      for (let i = 0; i < REFERENCES.length; i++) await referencePull(round, REFERENCES[(round + i) % REFERENCES.length]!);
    }
    const d = median(direct);
    const c = median(cold);
    const h = median(hit);
    const d2 = median(direct2);
    const sv = median(served);
    const peak = Math.max(...peaks);
    const fmt = (x: number) => x.toFixed(2);
    const ok = (b: boolean) => (b ? 'met' : '**not met**');
    const markdown = [
      `Image: ${LAYERS} layers of ${LAYER_MIB} MiB (${(total / MiB).toFixed(0)} MiB on the wire), pushed to Debian's docker-registry 2.8 on 127.0.0.1; ` +
        `\`skopeo copy docker://… oci:DIR\` (skopeo 1.9, Debian) wall time, medians of ${ROUNDS} interleaved rounds; each round a new gateway ` +
        `(the default mirror: memory_bytes ${MEMORY / MiB} MiB, budget_bytes ${BUDGET / MiB} MiB; plus a disk tier) pulls the image cold, then again (hit), ` +
        `then, 3 s later, a second image of the same shape (other bytes) cold: a gateway in service, whose memory tier is full, so the new layers ` +
        `take the buffers the evicted ones give back instead of fresh memory (its page faults are counted). ` +
        (PIN
          ? 'VOUCH_BENCH_OCI_PIN=1: skopeo on core 0 alone, the registry, the gateways and the references on core 1 (taskset), so the client has a core of its own, as on another machine, and the servers share one. '
          : '') +
        `Load average at the end: ${loadavg()[0]!.toFixed(2)}.`,
      '',
      '| row | registry straight | through the gateway | throughput ratio | target | |',
      '|---|---|---|---|---|---|',
      `| cold (empty mirror: fetched by digest, hashed, stored, sent), the first pull of a new gateway process | ${d.toFixed(0)} ms | ${c.toFixed(0)} ms | ${fmt(d / c)} | ≥ 0.8 | ${ok(d / c >= 0.8)} |`,
      `| cold in service: another image of the same shape through that gateway after the hit (its layers land in the buffers of the evicted ones) | ${d2.toFixed(0)} ms | ${sv.toFixed(0)} ms | ${fmt(d2 / sv)} | ≥ 0.8 | ${ok(d2 / sv >= 0.8)} |`,
      `| mirror hit (the same gateway again) | ${d.toFixed(0)} ms | ${h.toFixed(0)} ms | ${fmt(d / h)} | ≥ 1.0 | ${ok(d / h >= 1.0)} |`,
      ...REFERENCES.map((kind) => {
        const r = refs.get(kind)!;
        return `| for reference, cold through ${REFERENCE_TEXT[kind]} | ${d.toFixed(0)} ms | ${median(r.cold).toFixed(0)} ms | ${fmt(d / median(r.cold))} | | |`;
      }),
      `| for reference, a hit of the distribution registry's pull-through cache (the same process again) | ${d.toFixed(0)} ms | ${median(refs.get('registry-cache')!.hit).toFixed(0)} ms | ${fmt(d / median(refs.get('registry-cache')!.hit))} | | |`,
      `| gateway peak RSS (VmHWM after its three pulls, highest of the rounds) | | ${(peak / MiB).toFixed(0)} MiB | | ≤ budget ${BUDGET / MiB} + 150 = ${BUDGET / MiB + 150} MiB | ${ok(peak <= BUDGET + 150 * MiB)} |`,
      '',
      `Per round (ms): registry ${direct.map((x) => x.toFixed(0)).join(', ')}; cold ${cold.map((x) => x.toFixed(0)).join(', ')}; hit ${hit.map((x) => x.toFixed(0)).join(', ')}; ` +
        `the second image straight ${direct2.map((x) => x.toFixed(0)).join(', ')}, cold in service ${served.map((x) => x.toFixed(0)).join(', ')}. ` +
        `Gateway CPU per cold pull in service (median): ${median(servedCpu).toFixed(0)} ms, with ${median(faults.served).toFixed(0)} minor page faults. ` +
        `Gateway CPU per pull (user + system, all threads; median): cold ${median(coldCpu).toFixed(0)} ms, hit ${median(hitCpu).toFixed(0)} ms; ` +
        `of which its main thread (the event loop): cold ${median(coldMain).toFixed(0)} ms, hit ${median(hitMain).toFixed(0)} ms. ` +
        `Its minor page faults per pull (median): cold ${median(faults.cold).toFixed(0)} (${((median(faults.cold) * 4096) / MiB).toFixed(0)} MiB of 4 KiB pages touched for the first time), hit ${median(faults.hit).toFixed(0)}. ` +
        `The registry's CPU for a pull straight from it: ${median(registryCpu).toFixed(0)} ms (median). ` +
        `skopeo's own CPU per pull (median): straight ${median(skopeoCpu.direct).toFixed(0)} ms, cold ${median(skopeoCpu.cold).toFixed(0)} ms, hit ${median(skopeoCpu.hit).toFixed(0)} ms. ` +
        `The references per round (ms): ${REFERENCES.map(
          (k) =>
            `${k} ${refs
              .get(k)!
              .cold.map((x) => x.toFixed(0))
              .join(', ')} (its CPU per cold pull, median: ${median(refs.get(k)!.cpu).toFixed(0)} ms)`,
        ).join('; ')}.` +
        (baseline === null
          ? ''
          : ` Beside it in the same rounds, the checkout in VOUCH_BENCH_OCI_BASELINE: cold ${median(base.cold).toFixed(0)} ms (ratio ${fmt(d / median(base.cold))}; ${base.cold.map((x) => x.toFixed(0)).join(', ')}), ` +
            `hit ${median(base.hit).toFixed(0)} ms (ratio ${fmt(d / median(base.hit))}), gateway CPU per cold pull ${median(base.coldCpu).toFixed(0)} ms.`),
      '',
      'Cold is store-and-forward by design: no byte of a layer leaves the gateway before all of it hashed to its digest, so a cold layer ' +
        'costs its upstream transfer (received into a pooled buffer or a spool file, hashed once as it arrives by a hash worker started when the gateway listened, ' +
        'woken once per MiB) before its own sending starts, and its copy in the disk mirror is written once the memory tier is quiet: no response sending from memory, no body being received into it (2 s at most). ' +
        'An anonymous route sends the registry no /v2/ probe before the first pull. ' +
        "The blobs of a served manifest are fetched ahead in the manifest's order, the client's requests joining those fetches: small ones 3 at a time, " +
        'a layer larger than 16 MiB alone unless it runs 500 ms, so the first layer is whole and on its way while the next one arrives. ' +
        "The gateway's hash workers boot before it says ready. Hits are sent from memory in 1 MiB pieces, up to 8 MiB of them queued on the socket, or straight from the disk mirror's file through " +
        'two 1 MiB halves, without reading or hashing again a file that this process verified and that is unchanged since (docs/guide/oci.md, "Speed"). ' +
        'The figures are wall times of skopeo on 2 cores shared with other work: read them with the load average above.',
      '',
      'The rows "for reference" put other proxies between the same skopeo and registry, each a new process a round, ' +
        'pulled after the gateway in an order that turns each round: what one hop costs on these cores, whatever the proxy does (docs/guide/oci.md, "What a cold pull costs on 2 cores").',
      '',
      cpuArithmetic(d, c, { skopeo: median(skopeoCpu.cold), gateway: median(coldCpu), registry: median(registryCpu) }, median(skopeoCpu.direct)),
    ].join('\n');
    return { title: 'Container images through a kind: oci route (issue 36)', markdown };
  } finally {
    await stopAll();
    await registry?.stop();
    rmSync(work, { recursive: true, force: true });
  }
}
