/**
 * `npm run bench -- keys` (issue 32): what key events cost a verifier.
 * `vouch verify` (whole processes, default configuration) on a chain whose
 * online key is rotated every EVERY blocks, against the same chain with no
 * key events, run alternately; the ratio of their rates per pair, median of
 * the pairs. Target: ≥ 0.95 (within noise). Chains are built once into
 * bench/out (bench/keys/build-chain.ts).
 * Beside it, `vouch get` across a rotation: the HTTP requests one whole
 * `vouch get` process makes of a gateway (counted from its /metrics) when
 * nothing changed since its state file, on its first run after a rotation,
 * and after it (target: at most one more request across the rotation).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { median, root } from './gateway-harness.ts';
import { say, timed, vouch } from './scale/procs.ts';
import { OriginServer } from '../test/helpers/origin-server.ts';
import { startGatewayProcess, writeConfig } from '../test/helpers/gateway-process.ts';
import { appendTo, endorseAt, initKeyRepo } from '../test/helpers/key-log.ts';
import { b64, KeyChain, ONLINE } from '../test/helpers/key-fixture.ts';

const MIN = 60_000;

async function chainDir(n: number, every: number): Promise<string> {
  const r = await timed(
    process.execPath,
    ['--max-old-space-size=14000', '--import', 'tsx', join(root, 'bench', 'keys', 'build-chain.ts'), String(n), String(every)],
    { timeoutMs: 120 * MIN },
  );
  return r.stdout.trim().split('\n').pop()!;
}

interface Row {
  n: number;
  every: number;
  rotations: number;
  plain: number[];
  rotated: number[];
  ratios: number[];
}

async function row(n: number, every: number, runs: number): Promise<Row> {
  const plainDir = await chainDir(n, 0);
  const rotDir = await chainDir(n, every);
  const out: Row = { n, every, rotations: Math.floor((n - 1) / every), plain: [], rotated: [], ratios: [] };
  const rate = async (dir: string): Promise<number> => {
    const v = await vouch(['verify', '--chain', dir, '--json'], 60 * MIN);
    const res = JSON.parse(v.stdout) as { blocks: number; blocks_per_second: number };
    if (res.blocks !== n) throw new Error(`bench: vouch verify saw ${res.blocks} blocks, not ${n}`);
    return res.blocks_per_second;
  };
  for (let r = 0; r < runs; r++) {
    // Alternate which goes first, so neither always finds the page cache warmer.
    const first = r % 2 === 0;
    const a = await rate(first ? plainDir : rotDir);
    const b = await rate(first ? rotDir : plainDir);
    const [p, k] = first ? [a, b] : [b, a];
    out.plain.push(p);
    out.rotated.push(k);
    out.ratios.push(k / p);
    say(
      `verify ${n.toLocaleString('en')} blocks, run ${r + 1}/${runs}: no key events ${Math.round(p)}/s, rotation every ${every.toLocaleString('en')} ${Math.round(k)}/s, ratio ${(k / p).toFixed(3)}`,
    );
  }
  return out;
}

interface GetRow {
  plain: number[];
  rotated: number[];
  msPlain: number[];
  msRotated: number[];
}

/**
 * Requests of the first whole `vouch get` process after the chain grew, its
 * state file made before: grown by endorsements alone, or by endorsements and
 * a rotation (the note then signed by the new key alone). `runs` of each.
 */
async function getRow(runs: number): Promise<GetRow> {
  const out: GetRow = { plain: [], rotated: [], msPlain: [], msRotated: [] };
  for (let r = 0; r < runs; r++) {
    for (const rotate of [false, true]) {
      const g = await firstGetAfterGrowth(rotate);
      (rotate ? out.rotated : out.plain).push(g.requests);
      (rotate ? out.msRotated : out.msPlain).push(g.ms);
    }
  }
  say(`vouch get, first run after growth: requests ${out.plain.join(',')} (endorsements only), ${out.rotated.join(',')} (with a rotation)`);
  return out;
}

async function firstGetAfterGrowth(rotate: boolean): Promise<{ requests: number; ms: number }> {
  const work = mkdtempSync(join(tmpdir(), 'vouch-keys-get-'));
  const origin = await OriginServer.start();
  let gw: Awaited<ReturnType<typeof startGatewayProcess>> | null = null;
  try {
    const ORIGIN = 'vouch.example/keys-bench';
    const c = new KeyChain();
    const url = (i: number) => origin.url(`/g/${i}.tgz`);
    const body = (i: number) => `bench artifact ${i}\n`;
    for (let i = 1; i <= 4; i++) origin.route(`/g/${i}.tgz`, { body: body(i) });
    endorseAt(c, url(1), body(1), '1.1.0');
    c.adoptRoot();
    endorseAt(c, url(2), body(2), '1.2.0');
    const before = c.blocks.length;
    if (rotate) c.rotate(ONLINE.B);
    endorseAt(c, url(3), body(3), '1.3.0');
    endorseAt(c, url(4), body(4), '1.4.0');
    const dir = join(work, 'g');
    const repo = await initKeyRepo(join(dir, 'chain'), c.blocks, before, ORIGIN);
    const config = writeConfig(dir, { listen: { port: 0 }, chain: { dir: join(dir, 'chain'), public_key: b64(ONLINE.A) }, origin: { allow_private: true } });
    gw = await startGatewayProcess(['--config', config]);
    const state = join(work, 'state.json');
    const requests = async (): Promise<number> => {
      const text = await (await fetch(`${gw!.url}/metrics`)).text();
      return [...text.matchAll(/^vouch_http_requests_total\{([^}]*)\} (\d+)$/gm)]
        .filter((m) => !m[1]!.includes('route="/metrics"'))
        .reduce((k, m) => k + Number(m[2]), 0);
    };
    const get = async (i: number): Promise<{ requests: number; ms: number }> => {
      const r0 = await requests();
      const v = await vouch(
        ['get', '--gateway', gw!.url, '--url', url(i), '--public-key', b64(ONLINE.A), '-o', join(work, `out-${i}`), '--state', state],
        5 * MIN,
      );
      if (v.status !== 0) throw new Error(`bench: vouch get ${url(i)} failed: ${v.stderr}`);
      return { requests: (await requests()) - r0, ms: v.ms };
    };
    await get(2); // the state file: the checkpoint before the growth
    await gw.stop();
    await appendTo(repo, c.blocks, c.blocks.length, ORIGIN, [c.signer]);
    gw = await startGatewayProcess(['--config', config]);
    return await get(4);
  } finally {
    await gw?.stop();
    await origin.close();
    rmSync(work, { recursive: true, force: true });
  }
}

export async function runKeysBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const plan: [number, number, number][] = quick
    ? [[5_000, 1_000, 3]]
    : [
        [50_000, 100_000, 15],
        [50_000, 10_000, 15],
        [1_000_000, 100_000, 3],
      ];
  const load0 = loadavg()[0]!;
  const rows: Row[] = [];
  for (const [n, every, runs] of plan) rows.push(await row(n, every, runs));
  const g = await getRow(quick ? 2 : 5);
  const extra = median(g.rotated) - median(g.plain);
  const f = (x: number) => Math.round(x).toLocaleString('en');
  const lines = rows.map(
    (r) =>
      `| \`vouch verify\` on ${r.n.toLocaleString('en')} blocks, online key rotated every ${r.every.toLocaleString('en')} (${r.rotations} key blocks + the root's) vs the same chain without key events | ${f(median(r.rotated))}/s vs ${f(median(r.plain))}/s: **${median(r.ratios).toFixed(3)}** (pairs ${r.ratios.map((x) => x.toFixed(3)).join(', ')}) | ≥ 0.95 | ${median(r.ratios) >= 0.95 ? '✅' : '❌'} |`,
  );
  return {
    title: 'Key events: verification cost (issue 32)',
    markdown: [
      'Each run is a whole `vouch verify --chain DIR --json` process (default configuration, all cores), the two chains verified alternately (which goes first alternates); the ratio is per pair, the figure the median of the pairs. The chains are built by bench/keys/build-chain.ts from test/helpers/key-fixture.ts: the same endorse blocks, one with a 2-of-3 root adopted at block 1 and the online key rotated every EVERY blocks, one with neither.',
      '',
      '| row | figure | target | |',
      '|---|---|---|---|',
      ...lines,
      `| \`vouch get\` across a rotation: HTTP requests of the first whole process after the chain grew by a rotation and endorsements vs by the same endorsements alone (median of ${g.plain.length}) | ${median(g.rotated)} vs ${median(g.plain)}; ${Math.round(median(g.msRotated))} ms vs ${Math.round(median(g.msPlain))} ms | at most one more request | ${extra <= 1 ? '✅' : '❌'} (${extra} more) |`,
      '',
      "The `vouch get` row: a gateway serving a chain with a 2-of-3 root, `vouch get` pinned to block 0's key with a state file made before the growth (so both runs also need a consistency proof); after the growth the note is signed by the key in force alone (no rollover), the gateway restarted on the grown chain; requests counted from the gateway's `vouch_http_requests_total` (its /metrics requests left out).",
      '',
      `Load average (1 min): ${load0.toFixed(2)} at the start, ${loadavg()[0]!.toFixed(2)} at the end (2 cores).`,
    ].join('\n'),
  };
}
