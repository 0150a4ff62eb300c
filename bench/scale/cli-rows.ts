/**
 * The command-line and repository rows of `npm run bench -- scale`, each a
 * whole process as a user runs it:
 * - `vouch verify`: blocks/s as reported, beside the raw single-thread
 *   ed25519 rates of bench/raw-verify.ts (node:crypto and libsodium) × cores,
 *   and the command with OpenSSL alone (`VOUCH_ED25519=openssl`);
 * - `vouch endorse --file`: consecutive appends on a `cp -a` copy, with the
 *   fixture's key as PKCS#8 PEM: wall time per process;
 * - disk: `du -B1` (and `du -b`) of the chain directory after the gateway
 *   rows, against `git clone --bare --no-local` of it;
 * - `git status` on the full copy, first and second run.
 */
import { randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { existsSync, statSync, writeFileSync } from 'node:fs';
import { buildLongChain, TEST_SEED } from '../../test/helpers/chain-fixture.ts';
import { privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { median } from '../gateway-harness.ts';
import { rawVerifyRate, signedMessages } from '../raw-verify.ts';
import { countObjects, gatewayCaches, packedClone } from './chains.ts';
import { say, timed, vouch } from './procs.ts';

const MIN = 60_000;

export interface VerifyFigures {
  blocksPerS: number;
  /** Wall time of the `vouch verify` process, ms (median). */
  wallMs: number;
  raw: number;
  /** Raw libsodium verify rate, one thread (median; NaN without sodium-native). */
  rawSodium: number;
  /** Median ratio of blocks/s to rawSodium × cores. */
  sodiumRatio: number;
  /** `vouch verify` with OpenSSL alone (VOUCH_ED25519=openssl): blocks/s and ratio to raw × cores (medians). */
  openssl: { blocksPerS: number; ratio: number };
  cores: number;
  /** Median of the runs' ratios, each run against the raw rate measured just before it (the machine's pace drifts). */
  ratio: number;
  /** Lowest and highest of the runs' ratios. */
  range: [number, number];
  runs: number;
}

/** `vouch verify` against raw × cores; `runs` times, raw measured before each. */
export async function verifyRow(dir: string, blocks: number, runs: number): Promise<VerifyFigures> {
  const { blocks: sample, signer } = buildLongChain(Math.min(blocks, 20_001));
  const msgs = signedMessages(sample);
  const cores = availableParallelism();
  const raw: number[] = [];
  const rawSodium: number[] = [];
  const rate: number[] = [];
  const wall: number[] = [];
  const opensslRate: number[] = [];
  const run = async (env?: Record<string, string>): Promise<{ blocks_per_second: number; seconds: number; ms: number }> => {
    const v = await vouch(['verify', '--chain', dir, '--json'], 60 * MIN, env);
    const res = JSON.parse(v.stdout) as { blocks: number; blocks_per_second: number; seconds: number };
    if (res.blocks !== blocks) throw new Error(`bench: vouch verify saw ${res.blocks} blocks, not ${blocks}`);
    return { ...res, ms: v.ms };
  };
  for (let r = 0; r < runs; r++) {
    raw.push(rawVerifyRate(signer, msgs));
    rawSodium.push(rawVerifyRate(signer, msgs, 2_000, 'libsodium'));
    say(
      `vouch verify on ${blocks.toLocaleString('en')} blocks (run ${r + 1} of ${runs}; raw ${Math.round(raw[r]!)}/s per thread, libsodium ${Math.round(rawSodium[r]!)}/s)...`,
    );
    const res = await run();
    rate.push(res.blocks_per_second);
    wall.push(res.ms);
    say(
      `  ${res.blocks_per_second} blocks/s (${res.seconds} s; process ${(res.ms / 1000).toFixed(1)} s), ratio ${(res.blocks_per_second / (raw[r]! * cores)).toFixed(2)}`,
    );
    const o = await run({ VOUCH_ED25519: 'openssl' });
    opensslRate.push(o.blocks_per_second);
    say(`  OpenSSL alone: ${o.blocks_per_second} blocks/s, ratio ${(o.blocks_per_second / (raw[r]! * cores)).toFixed(2)}`);
  }
  const ratios = rate.map((x, r) => x / (raw[r]! * cores));
  return {
    blocksPerS: median(rate),
    wallMs: median(wall),
    raw: median(raw),
    cores,
    ratio: median(ratios),
    range: [Math.min(...ratios), Math.max(...ratios)],
    runs,
    rawSodium: median(rawSodium),
    sodiumRatio: median(rate.map((x, r) => x / (rawSodium[r]! * cores))),
    openssl: { blocksPerS: median(opensslRate), ratio: median(opensslRate.map((x, r) => x / (raw[r]! * cores))) },
  };
}

/** The fixture's authority key as a key file (what `vouch keygen` writes: PKCS#8 PEM, 0600). */
export function fixtureKeyFile(work: string): string {
  const path = join(work, 'authority.pem');
  writeFileSync(path, privateKeyFromSeed(TEST_SEED).export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  return path;
}

export interface EndorseFigures {
  ms: number[];
  median: number;
}

/** `runs` consecutive `vouch endorse --file` on the writable copy `dir` of a `blocks`-block chain. */
export async function endorseRow(dir: string, blocks: number, work: string, runs: number): Promise<EndorseFigures> {
  const key = fixtureKeyFile(work);
  const file = join(work, 'artifact.tgz');
  writeFileSync(file, randomBytes(4096));
  const tag = Date.now().toString(36);
  const ms: number[] = [];
  for (let k = 0; k < runs; k++) {
    const url = `https://a.example/scale-bench/${tag}/artifact-${k}.tgz`;
    const e = await vouch(
      ['endorse', '--chain', dir, '--key', key, '--url', url, '--file', file, '--name', 'bench/scale', '--semver', `1.0.${k}`, '--license', 'MIT'],
      20 * MIN,
    );
    const index = Number(e.stdout.trim().split(/\s/)[0]);
    if (index !== blocks + k) throw new Error(`bench: vouch endorse appended block ${e.stdout.trim()}, expected index ${blocks + k}`);
    ms.push(e.ms);
    say(`  vouch endorse ${k + 1} of ${runs}: ${(e.ms / 1000).toFixed(2)} s (block ${index})`);
  }
  return { ms, median: median(ms) };
}

/** Sizes of a chain directory and its parts: apparent bytes (`du -b`) and bytes allocated on disk (`du -B1`). */
export interface Sizes {
  total: number;
  objects: number;
  blocks: number;
  caches: number;
}

export interface DiskFigures {
  apparent: Sizes;
  allocated: Sizes;
  loose: number;
  packs: number;
  /** The packed bare clone. */
  packed: { apparent: number; allocated: number };
  /** allocated / packed allocated: what the target judges. */
  ratio: number;
  apparentRatio: number;
}

/** One `du` walk of `dir` to depth 2 (`-l`: a file hard-linked from the source counts, as in a real chain). */
async function sizes(dir: string, mode: '-b' | '-B1'): Promise<Sizes> {
  const du = await timed('du', [mode, '-l', '--max-depth=2', dir], { timeoutMs: 3_600_000 });
  const size = (sub: string) =>
    Number(
      du.stdout
        .split('\n')
        .find((l) => l.split('\t')[1] === join(dir, sub))
        ?.split('\t')[0] ?? 0,
    );
  const caches = (existsSync(join(dir, '.git')) ? gatewayCaches(dir) : []).reduce((a, f) => {
    const st = statSync(f);
    return a + (mode === '-b' ? st.size : st.blocks * 512);
  }, 0);
  return { total: size(''), objects: size(join('.git', 'objects')), blocks: size('blocks'), caches };
}

/**
 * The chain directory `dir` as a gateway's operator has it (after the
 * gateway rows: with the snapshot and caches it wrote) vs the same
 * repository packed by git, cloned from `src` to `packedDir`. Judged on
 * the space allocated on disk (a 600-byte file takes a 4 KiB block), with
 * the apparent sizes (`du -sb`) beside it.
 */
export async function diskRow(dir: string, src: string, packedDir: string): Promise<DiskFigures> {
  say(`disk: du of the chain directory, and a packed bare clone (git clone --bare --no-local)...`);
  const apparent = await sizes(dir, '-b');
  const allocated = await sizes(dir, '-B1');
  const { loose, packs } = await countObjects(join(dir, '.git'));
  await packedClone(src, packedDir);
  const packed = { apparent: (await sizes(packedDir, '-b')).total, allocated: (await sizes(packedDir, '-B1')).total };
  const m = (x: number) => (x / 2 ** 20).toFixed(0);
  say(
    `  on disk ${m(allocated.total)} MiB (objects ${m(allocated.objects)} MiB: ${loose.toLocaleString('en')} loose, ${packs} packs; blocks/ ${m(allocated.blocks)} MiB; gateway caches ${m(allocated.caches)} MiB), packed ${m(packed.allocated)} MiB; apparent ${m(apparent.total)} MiB vs ${m(packed.apparent)} MiB`,
  );
  return { apparent, allocated, loose, packs, packed, ratio: allocated.total / packed.allocated, apparentRatio: apparent.total / packed.apparent };
}

export interface GitStatusFigures {
  firstMs: number;
  secondMs: number;
}

/** `git status` twice on the writable copy. */
export async function gitStatusRow(dir: string): Promise<GitStatusFigures> {
  const first = await timed('git', ['-C', dir, 'status'], { timeoutMs: 30 * MIN });
  const second = await timed('git', ['-C', dir, 'status'], { timeoutMs: 30 * MIN });
  say(`  git status: ${(first.ms / 1000).toFixed(2)} s, then ${(second.ms / 1000).toFixed(2)} s`);
  if (!/nothing to commit/.test(second.stdout)) throw new Error(`bench: the chain copy is not clean:\n${second.stdout.slice(0, 2000)}`);
  return { firstMs: first.ms, secondMs: second.ms };
}
