/**
 * Row "whole-process `vouch endorse`" of `npm run bench -- gitops` (issue 33):
 * the CLI as a user runs it (`--chain DIR --key FILE --url --file`, offline)
 * on a working copy of a signed chain, against stock git writing the same
 * commit as whole processes into its own copy: plumbing (one `hash-object
 * -w --stdin-paths`, an `ls-tree` and a `mktree` per changed tree, `hash-object
 * -t commit -w`, `update-ref`) and one `fast-import`; each fsync'd (DURABLE)
 * and writing checkpoint.json durably, as the store's part of an endorse.
 * Owns: its copies under `work` (removed). Never writes into `src`.
 * Must hold: every side ends at vouch's commit id, or the row throws.
 */
import { spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ChainRepo } from '../../store/chain-repo.ts';
import { ChainState } from '../../gateway/chain/verified-state.ts';
import { privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { TEST_SEED } from '../../test/helpers/chain-fixture.ts';
import { keepPackTimes, linkCopy } from './link-copy.ts';
import { DURABLE } from './stock-git.ts';

export const ENDORSE_SIDES = ['vouch', 'plumbing', 'fastimport'] as const;
export type EndorseSide = (typeof ENDORSE_SIDES)[number];

export interface EndorseRow {
  size: number;
  /** Whole-process wall times, ms, warm-up excluded. */
  ms: Record<EndorseSide, number[]>;
  /** Git processes the plumbing side ran per endorse (median). */
  plumbingProcs: number;
  /** The one endorse before the verified state existed (every block file scanned), ms; null when not measured. */
  scanMs: number | null;
  /** Writing the verified state (`ChainState.load`: the cold verify a gateway start does), ms. */
  stateMs: number;
  heads: Record<EndorseSide, string>;
}

const root = new URL('../../', import.meta.url).pathname;
const vouchBin = join(root, 'tools', 'vouch.js');

/** A whole process to its exit: status, output, wall ms. */
function run(cmd: string, args: string[], input?: string): Promise<{ status: number | null; stdout: string; stderr: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const c = spawn(cmd, args, { cwd: root, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout!.on('data', (d: Buffer) => {
      stdout += d;
    });
    c.stderr!.on('data', (d: Buffer) => {
      stderr += d;
    });
    c.on('close', (status) => resolve({ status, stdout, stderr, ms: performance.now() - t0 }));
    if (input !== undefined) {
      c.stdin!.on('error', () => {}); // a process that exits without reading: its status says why
      c.stdin!.end(input);
    }
  });
}

async function git(dir: string, args: string[], input?: string): Promise<string> {
  const r = await run('git', [...DURABLE, '-C', dir, ...args], input);
  if (r.status !== 0) throw new Error(`git ${args.join(' ')} failed: ${r.stderr}`);
  return r.stdout;
}

/** The commit `rev` of `dir` as the stock sides replay it: its raw text and the blobs it adds or changes. */
async function commitOf(dir: string, rev: string): Promise<{ raw: string; blobs: { path: string; text: string }[] }> {
  const raw = await git(dir, ['cat-file', 'commit', rev]);
  const diff = await git(dir, ['diff-tree', '-r', '--no-renames', '--no-commit-id', `${rev}^`, rev]);
  const blobs: { path: string; text: string }[] = [];
  for (const line of diff.split('\n')) {
    if (!line) continue;
    const [meta, path] = line.split('\t') as [string, string];
    const [, mode, , oid, status] = meta.split(' ') as string[]; // :old-mode new-mode old-oid new-oid status
    if (status !== 'A' && status !== 'M') throw new Error(`endorse: ${path} ${status} (only additions and changes are replayed)`);
    if (mode !== '100644') throw new Error(`endorse: ${path} has mode ${mode}`);
    blobs.push({ path, text: await git(dir, ['cat-file', 'blob', oid!]) });
  }
  return { raw, blobs };
}

/** Plumbing as whole processes: the blobs, then each changed tree bottom-up (`ls-tree` of its old version, `mktree`), the commit, the ref. */
async function plumbingAppend(
  dir: string,
  c: { raw: string; blobs: { path: string; text: string }[] },
  scratch: string,
): Promise<{ head: string; procs: number }> {
  let procs = 0;
  const files = c.blobs.map((b, i) => {
    const p = join(scratch, `blob-${i}`);
    writeFileSync(p, b.text);
    return p;
  });
  const oids = (await git(dir, ['hash-object', '-w', '--no-filters', '--stdin-paths'], `${files.join('\n')}\n`)).trim().split('\n');
  procs++;
  // Changed entries by directory ('' is the root): name -> "mode type oid".
  const changed = new Map<string, Map<string, string>>();
  const put = (path: string, entry: string) => {
    const cut = path.lastIndexOf('/');
    const d = cut < 0 ? '' : path.slice(0, cut);
    if (!changed.has(d)) changed.set(d, new Map());
    changed.get(d)!.set(path.slice(cut + 1), entry);
  };
  c.blobs.forEach((b, i) => put(b.path, `100644 blob ${oids[i]}`));
  const depth = (d: string) => (d === '' ? 0 : d.split('/').length);
  while (changed.size) {
    const d = [...changed.keys()].sort((a, b) => depth(b) - depth(a))[0]!; // deepest first
    const entries = new Map<string, string>();
    const old = await git(dir, ['ls-tree', d === '' ? 'refs/heads/main' : `refs/heads/main:${d}`]).catch(() => ''); // a new directory has none
    procs++;
    for (const line of old.split('\n')) if (line) entries.set(line.slice(line.indexOf('\t') + 1), line.slice(0, line.indexOf('\t')));
    for (const [name, e] of changed.get(d)!) entries.set(name, e);
    changed.delete(d);
    const body = [...entries].map(([name, e]) => `${e}\t${name}\n`).join('');
    const oid = (await git(dir, ['mktree'], body)).trim();
    procs++;
    if (d === '') {
      const want = /^tree ([0-9a-f]{40})$/m.exec(c.raw)?.[1];
      if (oid !== want) throw new Error(`endorse: plumbing made tree ${oid}, vouch's commit has ${want}`);
      break;
    }
    put(d, `040000 tree ${oid}`);
  }
  const cpath = join(scratch, 'commit');
  writeFileSync(cpath, c.raw);
  const head = (await git(dir, ['hash-object', '-t', 'commit', '-w', '--stdin-paths'], `${cpath}\n`)).trim();
  const parent = /^parent ([0-9a-f]{40})$/m.exec(c.raw)![1]!;
  await git(dir, ['update-ref', 'refs/heads/main', head, parent]);
  procs += 2;
  return { head, procs };
}

/** One `git fast-import` process: the commit with its blobs inline, its author and committer lines and message as vouch wrote them. */
async function fastImportAppend(dir: string, c: { raw: string; blobs: { path: string; text: string }[] }): Promise<void> {
  const cut = c.raw.indexOf('\n\n');
  const headers = c.raw.slice(0, cut).split('\n');
  const message = c.raw.slice(cut + 2);
  const line = (k: string) => headers.find((h) => h.startsWith(`${k} `))!;
  const data = (s: string) => `data ${Buffer.byteLength(s)}\n${s}\n`;
  const input =
    `commit refs/heads/main\n${line('author')}\n${line('committer')}\n${data(message)}from refs/heads/main^0\n` +
    c.blobs.map((b) => `M 100644 inline ${b.path}\n${data(b.text)}`).join('') +
    '\ndone\n';
  await git(dir, ['fast-import', '--quiet', '--done'], input);
}

function writeDurableText(path: string, text: string): void {
  writeFileSync(path, text, { flush: true });
}

/**
 * `samples` endorses (plus one warm-up) on link copies of the chain in `src`
 * (signed by test/helpers/chain-fixture.ts's key). The vouch copy first gets
 * the verified state a gateway start leaves (`ChainState.load`), so the
 * endorse takes its constant-time path; with `scanFirst`, one endorse before
 * that measures the full scan. vouch runs first each round (the stock sides
 * replay its commit); the two stock sides alternate. `keep` leaves the
 * copies (work/endorse-<side>) for the caller to inspect.
 */
export async function endorseRow(work: string, src: string, samples: number, opts: { scanFirst?: boolean; keep?: boolean } = {}): Promise<EndorseRow> {
  const restoreTimes = keepPackTimes(src);
  try {
    return await endorseRowIn(work, src, samples, opts);
  } finally {
    restoreTimes();
  }
}

async function endorseRowIn(work: string, src: string, samples: number, opts: { scanFirst?: boolean; keep?: boolean }): Promise<EndorseRow> {
  const dirs = Object.fromEntries(ENDORSE_SIDES.map((s) => [s, join(work, `endorse-${s}`)])) as Record<EndorseSide, string>;
  for (const s of ENDORSE_SIDES) linkCopy(src, dirs[s]);
  const key = join(work, 'endorse-key.pem');
  writeFileSync(key, privateKeyFromSeed(TEST_SEED).export({ format: 'pem', type: 'pkcs8' }) as string, { mode: 0o600 });
  const size = (await ChainRepo.open(dirs.vouch, { repair: false })).size;
  const row: EndorseRow = {
    size,
    ms: { vouch: [], plumbing: [], fastimport: [] },
    plumbingProcs: 0,
    scanMs: null,
    stateMs: 0,
    heads: { vouch: '', plumbing: '', fastimport: '' },
  };
  const procs: number[] = [];
  let k = 0;
  const once = async (keep: boolean, order: EndorseSide[]): Promise<number> => {
    const file = join(work, `artifact-${k}.tgz`);
    writeFileSync(file, `bench artifact ${k}\n`.repeat(64));
    const v = await run(process.execPath, [
      vouchBin,
      'endorse',
      '--chain',
      dirs.vouch,
      '--key',
      key,
      '--url',
      `https://example.invalid/bench/pkg-${k}/-/pkg-${k}-1.0.${k}.tgz`,
      '--file',
      file,
      '--name',
      `bench/pkg-${k}`,
      '--semver',
      `1.0.${k}`,
      '--license',
      'MIT',
    ]);
    k++;
    if (v.status !== 0) throw new Error(`vouch endorse failed (${v.status}): ${v.stderr}`);
    const c = await commitOf(dirs.vouch, 'refs/heads/main');
    const cp = c.blobs.find((b) => b.path === 'checkpoint.json');
    if (!cp) throw new Error("endorse: vouch's commit does not change checkpoint.json");
    for (const s of order) {
      const t = performance.now();
      if (s === 'plumbing') procs.push((await plumbingAppend(dirs.plumbing, c, work)).procs);
      else await fastImportAppend(dirs.fastimport, c);
      writeDurableText(join(dirs[s], 'checkpoint.json'), cp.text);
      if (keep) row.ms[s].push(performance.now() - t);
    }
    if (keep) row.ms.vouch.push(v.ms);
    return v.ms;
  };
  if (opts.scanFirst) row.scanMs = await once(false, ['plumbing', 'fastimport']);
  const t0 = performance.now();
  await ChainState.load(await ChainRepo.open(dirs.vouch, { repair: false }));
  row.stateMs = performance.now() - t0;
  await once(false, ['fastimport', 'plumbing']); // warm-up
  for (let i = 0; i < samples; i++) await once(true, i % 2 ? ['fastimport', 'plumbing'] : ['plumbing', 'fastimport']);
  for (const s of ENDORSE_SIDES) row.heads[s] = (await git(dirs[s], ['rev-parse', 'refs/heads/main'])).trim();
  for (const s of ENDORSE_SIDES) {
    if (row.heads[s] !== row.heads.vouch) throw new Error(`endorse: ${s} ended at ${row.heads[s]}, vouch at ${row.heads.vouch}`);
  }
  if (!opts.keep) for (const s of ENDORSE_SIDES) rmSync(dirs[s], { recursive: true, force: true });
  procs.sort((a, b) => a - b);
  row.plumbingProcs = procs[Math.floor((procs.length - 1) / 2)] ?? 0;
  return row;
}
