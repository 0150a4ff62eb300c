/**
 * Store-level reads of a chain's block blobs, side by side in one process:
 * today's hand-written pack reader (store/git-pack.ts DiskPacks, as the
 * gateway's sparse reads and the verify workers use it) against stock git
 * (store/git-cat-file.ts: `cat-file --batch` kept running, the
 * `--batch-all-objects --unordered` sweep). Used by bench/git-bench.ts.
 *
 * Rows: every block blob read once in block order (the verify sweep's
 * work, one thread, no signature check), and N random block blobs (the
 * lookups' work), git's answers pipelined `depth` deep.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { DiskPacks } from '../store/git-pack.ts';
import { GitCatFile, sweepObjects } from '../store/git-cat-file.ts';
import { parseBlockPath } from '../chain/layout.ts';

/** The blob ids of the chain's blocks, in block order (`git ls-tree -r HEAD blocks`). */
export function blockOids(dir: string): string[] {
  const out = execFileSync('git', ['-C', dir, 'ls-tree', '-r', '--full-tree', 'HEAD', 'blocks'], { maxBuffer: 1 << 30, encoding: 'latin1' });
  const oids: string[] = [];
  for (const line of out.split('\n')) {
    const m = /^100644 blob ([0-9a-f]{40})\t(.*)$/.exec(line);
    const i = m ? parseBlockPath(m[2]!) : null;
    if (i !== null) oids[i] = m![1]!;
  }
  return oids;
}

export interface ReadFigures {
  blocks: number;
  /** Objects/s reading every block blob in block order: DiskPacks; cat-file --batch (pipelined); the --batch-all-objects sweep (all objects, pack order). */
  sweep: { disk: number; catFile: number; allObjects: number; allObjectsCount: number };
  /** Objects/s reading `random` random block blobs from a fresh reader: DiskPacks; cat-file --batch one at a time; pipelined `depth` deep. */
  random: { n: number; disk: number; catFile1: number; catFileDepth: number; depth: number };
}

const rate = (n: number, ms: number) => (n * 1000) / ms;

export async function measureReads(dir: string, random: number, depth = 32): Promise<ReadFigures> {
  const gitdir = join(dir, '.git');
  const oids = blockOids(dir);
  const n = oids.length;
  // Random picks fixed for both sides.
  const picks = Array.from({ length: random }, () => oids[Math.floor(Math.random() * n)]!);
  let sum = 0;

  let t = performance.now();
  const disk = new DiskPacks(join(gitdir, 'objects', 'pack'));
  for (const o of oids) sum += disk.read(o)!.body.length;
  const diskSweep = rate(n, performance.now() - t);
  disk.close();

  t = performance.now();
  const cf = new GitCatFile(gitdir);
  for (let i = 0; i < n; i += depth) sum += (await Promise.all(oids.slice(i, i + depth).map((o) => cf.read(o)))).reduce((a, o) => a + o!.body.length, 0);
  const catSweep = rate(n, performance.now() - t);
  cf.close();

  t = performance.now();
  const all = await sweepObjects(gitdir, (_oid, _type, body) => {
    sum += body.length;
  });
  const allRate = rate(all, performance.now() - t);

  t = performance.now();
  const disk2 = new DiskPacks(join(gitdir, 'objects', 'pack'));
  for (const o of picks) sum += disk2.read(o)!.body.length;
  const diskRandom = rate(random, performance.now() - t);
  disk2.close();

  const cf1 = new GitCatFile(gitdir);
  t = performance.now();
  for (const o of picks) sum += (await cf1.read(o))!.body.length;
  const cat1 = rate(random, performance.now() - t);
  cf1.close();

  const cf2 = new GitCatFile(gitdir);
  t = performance.now();
  for (let i = 0; i < random; i += depth) sum += (await Promise.all(picks.slice(i, i + depth).map((o) => cf2.read(o)))).reduce((a, o) => a + o!.body.length, 0);
  const catD = rate(random, performance.now() - t);
  cf2.close();
  if (sum === 0) throw new Error('bench: read nothing');

  return {
    blocks: n,
    sweep: { disk: diskSweep, catFile: catSweep, allObjects: allRate, allObjectsCount: all },
    random: { n: random, disk: diskRandom, catFile1: cat1, catFileDepth: catD, depth },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const dir of process.argv.slice(2)) console.log(dir, JSON.stringify(await measureReads(dir, 20_000), null, 1));
}
