/**
 * `npm run bench -- proofs [--quick]` (issue 17): what the transparency
 * answers cost on the 50,000-block bench chain (a copy with a signed
 * checkpoint.note added), one read-only gateway on 127.0.0.1:
 * 1. inclusion proofs vs lookups on the same gateway, interleaved wrk runs;
 * 2. lookups with `proof=1` vs plain lookups;
 * 3. the `Vouch-Proof` header's size over blocks spread over the chain;
 * 4. warm restart with the tree image in the snapshot, and its size.
 * Figures are printed and written by the runner, never asserted.
 */
import { blockTexts } from './block-texts.ts';
import { cpSync, existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { base64Encode, hexDecode } from '../chain/encoding.ts';
import { MerkleTree } from '../chain/merkle-tree.ts';
import { signCheckpoint } from '../chain/tlog-checkpoint.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { testSigner } from '../test/helpers/chain-fixture.ts';
import { writeConfig } from '../test/helpers/gateway-process.ts';
import { asciiJson } from '../gateway/http/http-util.ts';
import { benchChainDir } from './chain-dir.ts';
import { ensureWrk, median, rotationScript, spawnGateway, stopAll, waitIdle, wrk, type Proc, type WrkResult } from './gateway-harness.ts';

const fmt = (x: number, d = 1) => x.toFixed(d);
const int = (x: number) => Math.round(x).toLocaleString('en');

type BenchBlock = { record_hash: string; payload: { endorsements?: { artifact_url: string }[] } };

export async function runProofsBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const p = quick
    ? { blocks: 5_000, paths: 2_000, runs: 2, seconds: 2, warmup: 1, restarts: 2 }
    : { blocks: 50_000, paths: 10_000, runs: 5, seconds: 4, warmup: 1, restarts: 3 };
  const load = { threads: 2, connections: 32 };
  ensureWrk();
  const loadBefore = loadavg()[0]!;
  const work = mkdtempSync(join(tmpdir(), 'vouch-proofbench-'));
  const rows: string[] = [];
  const notes: string[] = [];
  try {
    const N = p.blocks;
    const shared = await benchChainDir(N);
    const dir = join(work, 'chain');
    console.log(`copying ${shared} (the shared chain is not written)...`);
    cpSync(shared, dir, { recursive: true });
    for (const f of ['vouch-snapshot.json', 'vouch-index.bin', 'vouch-tree.bin', 'vouch-blocks.cache']) rmSync(join(dir, '.git', f), { force: true });
    // The checkpoint note the chain would have committed (entry i = block i's record hash).
    const signer = testSigner();
    const tree = new MerkleTree(nodeBackend);
    const t0 = performance.now();
    const urls: string[] = [];
    const texts = blockTexts(
      dir,
      Array.from({ length: N }, (_, i) => i),
    );
    for (let i = 0; i < N; i++) {
      const b = JSON.parse(texts[i]!) as BenchBlock;
      tree.append(hexDecode(b.record_hash)!);
      if (i > 0 && i % Math.max(1, Math.floor(N / p.paths)) === 0 && urls.length < p.paths) urls.push(b.payload.endorsements![0]!.artifact_url);
    }
    console.log(`tree of ${N} record hashes in ${int(performance.now() - t0)} ms (block files read and parsed too)`);
    writeFileSync(
      join(dir, 'checkpoint.note'),
      signCheckpoint(nodeBackend, { origin: 'bench.example/chain', size: N, root: tree.root(N), extensions: [] }, signer),
    );
    const cfg = writeConfig(work, { listen: { port: 0 }, chain: { dir, public_key: base64Encode(signer.publicKey) } }, 'proofs.yaml');
    const env = { TMPDIR: work, VOUCH_LOG_LEVEL: 'warn' };

    // 4: cold once (writes the snapshot and the images), then warm restarts.
    let gw: Proc = await spawnGateway('gateway (cold)', cfg, env);
    const coldMs = gw.readyAt - gw.spawnedAt;
    await stopAll();
    const warm: number[] = [];
    for (let r = 0; r < p.restarts; r++) {
      gw = await spawnGateway(`gateway (warm ${r + 1})`, cfg, env);
      if (!/warm start/.test(gw.match[0])) throw new Error(`bench: restart ${r + 1} was not warm: ${gw.match[0]}`);
      warm.push(gw.readyAt - gw.spawnedAt);
      if (r < p.restarts - 1) await stopAll();
    }
    const imageBytes = existsSync(join(dir, '.git', 'vouch-tree.bin')) ? statSync(join(dir, '.git', 'vouch-tree.bin')).size : 0;
    await waitIdle(gw.pid);

    // 3: Vouch-Proof sizes, from proof=1 lookups (the same object the header carries).
    const sizes: number[] = [];
    for (const u of urls.filter((_, k) => k % 50 === 0)) {
      const r = (await (await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(u)}&proof=1`)).json()) as { proof?: unknown };
      if (r.proof === undefined) throw new Error(`bench: no proof for ${u}`);
      sizes.push('vouch-proof: '.length + asciiJson(r.proof).length + 2);
    }

    // 1 + 2: interleaved wrk runs.
    const rand = (k: number) => Math.floor(((((Math.sin(k * 12.9898) * 43758.5453) % 1) + 1) % 1) * N);
    const scripts = {
      lookup: urls.map((u) => `/v1/endorsement?url=${encodeURIComponent(u)}`),
      'lookup+proof': urls.map((u) => `/v1/endorsement?url=${encodeURIComponent(u)}&proof=1`),
      inclusion: Array.from({ length: p.paths }, (_, k) => `/v1/proof/inclusion?index=${rand(k)}`),
    };
    const files: Record<string, string> = {};
    for (const [name, paths] of Object.entries(scripts)) {
      files[name] = join(work, `${name.replace('+', '-')}.lua`);
      writeFileSync(files[name]!, rotationScript(paths));
    }
    const results: Record<string, WrkResult[]> = { lookup: [], 'lookup+proof': [], inclusion: [] };
    const names = Object.keys(results);
    const offsets = new Map<string, number>();
    const once = async (name: string, seconds: number) => {
      const r = await wrk(gw.url, { ...load, seconds, script: files[name]!, offset: offsets.get(name) ?? 0 });
      offsets.set(name, r.nextOffset);
      return r;
    };
    for (const n of names) await once(n, p.warmup);
    for (let r = 0; r < p.runs; r++) {
      for (let k = 0; k < names.length; k++) {
        const n = names[(k + r) % names.length]!;
        const res = await once(n, p.seconds);
        results[n]!.push(res);
        console.log(`  run ${r + 1} ${n}: ${fmt(res.rps)} req/s, p50 ${fmt(res.p50Ms, 2)} ms, p99 ${fmt(res.p99Ms, 2)} ms`);
      }
    }
    await stopAll();
    const rps = (n: string) => median(results[n]!.map((r) => r.rps));
    const range = (a: string, b: string) => {
      const xs = results[a]!.map((x, i) => x.rps / results[b]![i]!.rps);
      return `${fmt(Math.min(...xs), 2)}–${fmt(Math.max(...xs), 2)}`;
    };
    const Nfmt = N.toLocaleString('en');
    rows.push(
      `| 1. inclusion proofs/s, \`GET /v1/proof/inclusion?index=\` (${int(p.paths)} random indices rotated) on ${Nfmt} blocks | ${int(rps('inclusion'))} /s (p50 ${fmt(median(results.inclusion!.map((r) => r.p50Ms)), 2)} ms) | lookups/s, \`GET /v1/endorsement\` (${int(urls.length)} URLs rotated): ${int(rps('lookup'))} /s | **${fmt(rps('inclusion') / rps('lookup'), 2)}** (runs ${range('inclusion', 'lookup')}) |`,
    );
    rows.push(
      `| 2. lookups with \`proof=1\` | ${int(rps('lookup+proof'))} /s | plain lookups: ${int(rps('lookup'))} /s | **${fmt(rps('lookup+proof') / rps('lookup'), 2)}** (runs ${range('lookup+proof', 'lookup')}) |`,
    );
    rows.push(
      `| 3. \`Vouch-Proof\` header on the wire (name, value, CRLF; ${sizes.length} blocks spread over the chain) | median ${int(median(sizes))} B, largest ${int(Math.max(...sizes))} B | — | — |`,
    );
    rows.push(
      `| 4. warm restart to \`ready:\` with the tree image (${fmt(imageBytes / 2 ** 20, 1)} MiB) | median ${int(median(warm))} ms of ${warm.length} (${warm.map(int).join(', ')}) | the cold start: ${int(coldMs)} ms | — |`,
    );
    notes.push(
      `Gateways at VOUCH_LOG_LEVEL=warn (what the answers cost, not the request lines); wrk -t${load.threads} -c${load.connections} -d${p.seconds}s, ${p.runs} interleaved runs after a ${p.warmup} s warm-up each. Load average before: ${fmt(loadBefore, 2)} on ${(await import('node:os')).cpus().length} cores shared with other work: indicative figures.`,
    );
    notes.push(
      "Lookups are answered from the gateway's answer cache after their first time (the rotation repeats); a `&proof=1` lookup shares the plain answer's entry and adds the proof per answer. Proofs come from the tree (O(log n) stored subtree hashes; MerkleTree keeps the right border of the last size asked); the chain state keeps the last 4,096 blocks' proofs (and their JSON) against the served note, the path of Vouch-Proof and proof=1.",
    );
  } finally {
    await stopAll();
    rmSync(work, { recursive: true, force: true });
  }
  const markdown = ['| Figure | Measured | Baseline | Ratio |', '|---|---|---|---|', ...rows, '', ...notes.map((n) => `- ${n}`)].join('\n');
  return { title: 'Transparency answers (issue 17): proofs vs lookups, Vouch-Proof size, warm restart', markdown };
}
