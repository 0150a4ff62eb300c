/**
 * `npm run bench -- endorse` (issue 32): `vouch endorse --lockfile` through
 * the running authority vs the same command offline, as users run it.
 * Row N1: whole processes endorsing a PACKAGES-entry npm lockfile whose
 * tarballs a local origin serves: `--chain DIR --key FILE` vs `--gateway URL
 * --token-file FILE` against a real authority process (default
 * configuration, logging to a file). Each run starts from a copy of the same
 * one-block chain; rounds interleaved, medians; both chains end with the
 * same entries (checked).
 */
import { blockTexts } from './block-texts.ts';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { stringify } from 'yaml';
import { OriginServer } from '../test/helpers/origin-server.ts';
import { initAuthorityChain, vouchAsync } from '../test/helpers/processes.ts';
import { assertLoopback, median, spawnGateway, stopAll, waitIdle, type Proc } from './gateway-harness.ts';

const SIGNER = 'bench-authority';

/** Tarball sizes spread log-uniformly from 2 KiB to 512 KiB, shuffled deterministically over the lockfile. */
function sizeOf(i: number, n: number): number {
  const k = (i * 73) % n;
  return Math.round(2048 * 256 ** (k / Math.max(1, n - 1)));
}

const size = (chain: string) => JSON.parse(readFileSync(join(chain, 'checkpoint.json'), 'utf8')).size as number;
/** Each block's entries after block 0, without what the signer or the clock decides. */
const entriesOf = (chain: string) => {
  const texts = blockTexts(
    chain,
    Array.from({ length: size(chain) - 1 }, (_, k) => k + 1),
  );
  return JSON.stringify(texts.map((t) => JSON.parse(t).payload.endorsements.map((e: any) => `${e.artifact_url} ${e.artifact_hash} ${e.name} ${e.semver}`)));
};

export async function runEndorseBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const PACKAGES = 200;
  const ROUNDS = quick ? 2 : 7;
  const load0 = loadavg()[0]!;
  const work = mkdtempSync(join(tmpdir(), 'vouch-bench-endorse-'));
  const origin = await OriginServer.start();
  const gateways: Proc[] = [];
  try {
    assertLoopback(origin.origin);
    // ---- the lockfile and its tarballs
    let bytes = 0;
    const packages: Record<string, unknown> = { '': { name: 'bench-app', version: '1.0.0' } };
    for (let i = 0; i < PACKAGES; i++) {
      const name = i % 5 === 0 ? `@bench/pkg-${i}` : `bench-pkg-${i}`;
      const body = randomBytes(sizeOf(i, PACKAGES));
      bytes += body.length;
      const path = `/${name}/-/${name.replace(/^@bench\//, '')}-1.0.${i}.tgz`;
      origin.route(path, { body, contentType: 'application/octet-stream' });
      packages[`node_modules/${name}`] = {
        version: `1.0.${i}`,
        license: 'MIT',
        resolved: origin.url(path),
        integrity: `sha512-${createHash('sha512').update(body).digest('base64')}`,
      };
    }
    const lockfile = join(work, 'app', 'package-lock.json');
    mkdirSync(join(work, 'app'));
    writeFileSync(lockfile, JSON.stringify({ name: 'bench-app', version: '1.0.0', lockfileVersion: 3, requires: true, packages }, null, 2));

    // ---- one chain (block 0), copied for every run
    const key = join(work, 'authority.pem');
    const template = join(work, 'template');
    await initAuthorityChain({ key, chain: template, signer: SIGNER });
    const tokenFile = join(work, 'submit.token');
    writeFileSync(tokenFile, 'bench-endorse-submit-token\n', { mode: 0o600 });

    let runs = 0;
    const fresh = () => {
      const dir = join(work, `chain-${runs++}`);
      cpSync(template, dir, { recursive: true });
      return dir;
    };
    let reference: string | null = null;
    const same = (chain: string, label: string) => {
      const e = entriesOf(chain);
      reference ??= e;
      if (e !== reference) throw new Error(`bench: the ${label} run posted other entries than the first run`);
    };
    const timed = async (args: string[], label: string) => {
      const t0 = performance.now();
      const r = await vouchAsync(args, {}, 600_000);
      const ms = performance.now() - t0;
      if (r.status !== 0 || !new RegExp(`^posted ${PACKAGES} entries`).test(r.stdout)) {
        throw new Error(`bench: vouch endorse (${label}) exited ${r.status}:\n${r.stdout}\n${r.stderr.slice(-2000)}`);
      }
      return ms;
    };
    const offline = async (): Promise<number> => {
      const chain = fresh();
      const ms = await timed(['endorse', '--chain', chain, '--key', key, '--lockfile', lockfile], 'offline');
      same(chain, 'offline');
      rmSync(chain, { recursive: true, force: true });
      return ms;
    };
    let blocks = 0;
    const throughGateway = async (): Promise<number> => {
      const chain = fresh();
      const dir = join(work, `gw-${runs}`);
      const config = join(work, `gw-${runs}.yaml`);
      writeFileSync(
        config,
        stringify({
          listen: { host: '127.0.0.1', port: 0 },
          chain: { dir: chain },
          authority: { key_file: key, signer: SIGNER, submit_token_file: tokenFile },
          origin: { allow_private: true },
        }),
      );
      const g = await spawnGateway(`gateway-${gateways.length}`, config, {}, 120_000, `${dir}.log`);
      gateways.push(g);
      assertLoopback(g.url);
      await waitIdle(g.pid, { timeoutMs: 30_000 });
      const ms = await timed(['endorse', '--gateway', g.url, '--token-file', tokenFile, '--lockfile', lockfile], 'gateway');
      await g.stop();
      blocks = size(chain) - 1;
      same(chain, 'gateway');
      rmSync(chain, { recursive: true, force: true });
      return ms;
    };

    const off: number[] = [];
    const gw: number[] = [];
    // One unmeasured run of each first (file caches, the build loaded once).
    process.stdout.write('warm-up runs\n');
    await offline();
    await throughGateway();
    for (let round = 0; round < ROUNDS; round++) {
      process.stdout.write(`round ${round + 1}/${ROUNDS}\n`);
      const order = [async () => off.push(await offline()), async () => gw.push(await throughGateway())];
      if (round % 2 === 1) order.reverse();
      for (const step of order) await step();
      process.stdout.write(`  offline ${off.at(-1)!.toFixed(0)} ms, gateway ${gw.at(-1)!.toFixed(0)} ms\n`);
    }
    const load1 = loadavg()[0]!;
    const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    const rows = [
      '| Figure | Through the gateway | Offline (same runs) | Ratio (offline / gateway time) |',
      '|---|---|---|---|',
      `| N1. \`vouch endorse --lockfile\` of a ${PACKAGES}-entry package-lock.json (${(bytes / 2 ** 20).toFixed(1)} MiB of tarballs, ${blocks} blocks), whole process | ${fmt(median(gw))} (runs ${gw.map(fmt).join(', ')}) | ${fmt(median(off))} (runs ${off.map(fmt).join(', ')}) | **${(median(off) / median(gw)).toFixed(2)}** (target ≥ 0.8) |`,
    ];
    const notes = [
      `Offline: \`vouch endorse --chain DIR --key FILE --lockfile package-lock.json\`; through the gateway: \`vouch endorse --gateway URL --token-file FILE --lockfile package-lock.json\` against \`vouch serve\` as an authority (default configuration, \`origin.allow_private\` for the loopback origin, log at info to a file). Neither is on a terminal (no progress bar; the gateway client prints one line per block).`,
      `Each run starts from a copy of the same chain (block 0 only), so each posts all ${PACKAGES} entries (sha512, the lockfile's integrity checked as a claim by the authority) in the same ${blocks} blocks, each within the UNS header bound; the gateway is started on its copy and waited idle before the run (not timed). ${ROUNDS} rounds, order alternated, one unmeasured run of each first. Tarballs: ${PACKAGES} random bodies of 2 KiB to 512 KiB (log-uniform) served from memory by a node:http origin on 127.0.0.1 in the bench process.`,
      `Load average (1 min): ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end.`,
    ];
    return { title: 'Endorsing a lockfile through the running authority (issue 32)', markdown: `${rows.join('\n')}\n\n${notes.join('\n')}\n` };
  } finally {
    for (const g of gateways) await g.stop().catch(() => {});
    await stopAll();
    await origin.close();
    rmSync(work, { recursive: true, force: true });
  }
}
