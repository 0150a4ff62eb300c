/**
 * The mirror row of `npm run bench -- scale`: a mirror gateway (`vouch
 * serve`, `chain.remote` + the pinned key, no authority) bootstrapping from
 * an empty directory off a git server (`git http-backend` on 127.0.0.1,
 * test/helpers/git-server.ts, as bench/mirror-bootstrap.ts does) that serves
 * the packed bare clone of the disk row. Measured: spawn → `ready:` (clone,
 * working tree, cold verification), and the process's VmHWM then (its peak
 * RSS over the whole bootstrap), with VmRSS once ready.
 */
import { mkdirSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { writeConfig } from '../../test/helpers/gateway-process.ts';
import { GitServer } from '../../test/helpers/git-server.ts';
import { removeTree } from './chains.ts';
import { say, startGateway } from './procs.ts';

export interface MirrorFigures { ms: number; hwm: number; rss: number; readyLine: string }

export async function mirrorRow(o: { bare: string; blocks: number; publicKey: string; work: string; timeoutMs: number; sparse?: boolean }): Promise<MirrorFigures> {
  const server = await GitServer.start(dirname(o.bare));
  const dir = join(o.work, 'mirror-chain');
  try {
    await removeTree(dir);
    mkdirSync(join(o.work, 'mirror-tmp'), { recursive: true });
    const cfg = writeConfig(o.work, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir, remote: server.url(basename(o.bare)), public_key: o.publicKey, ...(o.sparse ? { layout: 'sparse' } : {}) },
    }, 'mirror.yaml');
    say(`mirror bootstrap of ${o.blocks.toLocaleString('en')} blocks from git http-backend on 127.0.0.1...`);
    const g = await startGateway('mirror gateway', cfg, join(o.work, 'mirror.log'), o.timeoutMs, { TMPDIR: join(o.work, 'mirror-tmp') });
    try {
      if (!g.readyLine.startsWith(`ready: ${o.blocks} blocks`)) throw new Error(`bench: the mirror is not at ${o.blocks} blocks: ${g.readyLine}`);
      say(`  ready in ${(g.readyMs / 1000).toFixed(1)} s, peak RSS ${(g.atReady.hwm / 2 ** 20).toFixed(0)} MiB`);
      return { ms: g.readyMs, hwm: g.atReady.hwm, rss: g.atReady.rss, readyLine: g.readyLine };
    } finally {
      await g.stop();
    }
  } finally {
    await server.stop();
    await removeTree(dir);
  }
}
