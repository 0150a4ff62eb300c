/**
 * The mirror row of `npm run bench -- scale`: a mirror gateway (`chain.remote`
 * + pinned key, no authority) bootstrapping from an empty directory off `git
 * http-backend` on 127.0.0.1 (test/helpers/git-server.ts), serving a bare
 * clone of the chain (the disk row's packed clone, or past 100,000 blocks a
 * `--local` clone of hard links). Neither writes into the source chain.
 * Measured: spawn to `ready:`, VmHWM then and VmRSS once ready, and the
 * split seen from outside: pack indexed, `cloned the chain`, ready.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { writeConfig } from '../../test/helpers/gateway-process.ts';
import { GitServer } from '../../test/helpers/git-server.ts';
import { removeTree } from './chains.ts';
import { say, startGateway, timed } from './procs.ts';

export interface MirrorFigures {
  ms: number;
  hwm: number;
  rss: number;
  readyLine: string;
  /** From spawn: the pack indexed and named, the clone done (checkout included), ms (null: not seen). */
  packedMs: number | null;
  clonedMs: number | null;
}

/** A bare clone of `src` at `dst` sharing its objects by hard links (`git clone --bare --local`): reads `src` only. */
export async function servedClone(src: string, dst: string): Promise<{ ms: number }> {
  await removeTree(dst);
  mkdirSync(dirname(dst), { recursive: true });
  const t0 = performance.now();
  const r = await timed('git', ['clone', '-q', '--bare', '--local', src, dst], { timeoutMs: 3_600_000 });
  if (r.status !== 0) throw new Error(`bench: git clone --bare --local ${src} failed: ${r.stderr}`);
  return { ms: performance.now() - t0 };
}

export async function mirrorRow(o: {
  bare: string;
  blocks: number;
  publicKey: string;
  work: string;
  timeoutMs: number;
  sparse?: boolean;
}): Promise<MirrorFigures> {
  const server = await GitServer.start(dirname(o.bare));
  const dir = join(o.work, 'mirror-chain');
  const log = join(o.work, 'mirror.log');
  let watch: NodeJS.Timeout | null = null;
  try {
    await removeTree(dir);
    mkdirSync(join(o.work, 'mirror-tmp'), { recursive: true });
    const cfg = writeConfig(
      o.work,
      {
        listen: { host: '127.0.0.1', port: 0 },
        chain: { dir, remote: server.url(basename(o.bare)), public_key: o.publicKey, ...(o.sparse ? { layout: 'sparse' } : {}) },
      },
      'mirror.yaml',
    );
    say(`mirror bootstrap of ${o.blocks.toLocaleString('en')} blocks from git http-backend on 127.0.0.1...`);
    const logStart = existsSync(log) ? readFileSync(log).length : 0;
    const t0 = performance.now();
    let packedMs: number | null = null;
    let clonedMs: number | null = null;
    watch = setInterval(() => {
      try {
        if (packedMs === null && readdirSync(join(dir, '.git', 'objects', 'pack')).some((f) => f.endsWith('.idx'))) packedMs = performance.now() - t0;
      } catch {
        /* not there yet */
      }
      try {
        if (clonedMs === null && readFileSync(log).subarray(logStart).includes('cloned the chain')) clonedMs = performance.now() - t0;
      } catch {
        /* not there yet */
      }
    }, 200);
    const g = await startGateway('mirror gateway', cfg, log, o.timeoutMs, { TMPDIR: join(o.work, 'mirror-tmp') });
    clearInterval(watch);
    try {
      if (!g.readyLine.startsWith(`ready: ${o.blocks} blocks`)) throw new Error(`bench: the mirror is not at ${o.blocks} blocks: ${g.readyLine}`);
      const s = (ms: number | null) => (ms === null ? '?' : `${(ms / 1000).toFixed(1)} s`);
      say(
        `  ready in ${(g.readyMs / 1000).toFixed(1)} s (pack fetched and indexed at ${s(packedMs)}, cloned at ${s(clonedMs)}), peak RSS ${(g.atReady.hwm / 2 ** 20).toFixed(0)} MiB`,
      );
      return { ms: g.readyMs, hwm: g.atReady.hwm, rss: g.atReady.rss, readyLine: g.readyLine, packedMs, clonedMs };
    } finally {
      await g.stop();
    }
  } finally {
    if (watch) clearInterval(watch);
    await server.stop();
    await removeTree(dir);
  }
}
