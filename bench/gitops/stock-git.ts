/**
 * Stock git doing an append's durable work, for `npm run bench -- gitops`:
 * `PlumbingWriter` (long-lived `hash-object --stdin-paths`, `mktree --batch`,
 * `update-ref --stdin` transactions; with `dirSync`, vouch's directory
 * fsyncs too) and `FastImportWriter` (one long-lived `fast-import`, a
 * `checkpoint` per append).
 * Owns: its git processes and a scratch directory of blob texts.
 * Trusts: git (2.36+ for core.fsync). Must hold: an append has returned only
 * once git said its objects and ref are written with `core.fsync=committed`,
 * `core.fsyncMethod=fsync`, and checkpoint.json is written and fsync'd in
 * the working tree (what vouch's append makes durable; the `.git/index`
 * vouch also writes is not written here).
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { closeSync, fsyncSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { blockPath } from '../../chain/layout.ts';
import type { BlockFile, CommitInfo } from '../../store/chain-api.ts';

/** The durable git settings both stock-git sides run with. */
export const DURABLE = ['-c', 'core.fsync=committed', '-c', 'core.fsyncMethod=fsync'];

/** A git process spoken to line by line: write a request, wait for `n` lines back. */
class LineProc {
  private readonly child: ChildProcessWithoutNullStreams;
  private buf = '';
  private lines: string[] = [];
  private waiter: (() => void) | null = null;
  private err = '';
  private exited: string | null = null;

  constructor(dir: string, args: string[]) {
    this.child = spawn('git', [...DURABLE, '-C', dir, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (d: string) => {
      this.buf += d;
      let nl: number;
      while ((nl = this.buf.indexOf('\n')) >= 0) {
        this.lines.push(this.buf.slice(0, nl));
        this.buf = this.buf.slice(nl + 1);
      }
      this.waiter?.();
    });
    this.child.stderr.on('data', (d: Buffer) => {
      this.err += d;
    });
    this.child.on('close', (code) => {
      this.exited = `git ${args[0]} exited ${code}: ${this.err.trim()}`;
      this.waiter?.();
    });
  }

  async ask(input: string, n: number): Promise<string[]> {
    this.child.stdin.write(input);
    while (this.lines.length < n) {
      if (this.exited) throw new Error(this.exited);
      await new Promise<void>((r) => {
        this.waiter = r;
      });
      this.waiter = null;
    }
    return this.lines.splice(0, n);
  }

  close(): Promise<void> {
    return new Promise((r) => {
      if (this.exited) return r();
      this.child.on('close', () => r());
      this.child.stdin.end();
    });
  }
}

function git(dir: string, ...args: string[]): string {
  const r = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8', maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`git ${args.join(' ')} failed: ${r.stderr}`);
  return r.stdout;
}

function writeDurable(path: string, text: string): void {
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function syncDir(path: string, missingOk = false): void {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (e) {
    if (missingOk && (e as NodeJS.ErrnoException).code === 'ENOENT') return; // every object named there was already packed
    throw e;
  }
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

const ident = (c: CommitInfo) => `${c.authorName} <${c.authorEmail}> ${c.timestamp} +0000`;

export interface StockWriter {
  append(block: BlockFile, checkpoint: string, info: CommitInfo): Promise<string>;
  close(): Promise<void>;
}

/** Plumbing: blobs through `hash-object`, the four changed trees through `mktree --batch`, the commit through `hash-object -t commit`, the ref through an `update-ref --stdin` transaction. */
export class PlumbingWriter implements StockWriter {
  private readonly blobs: LineProc;
  private readonly commits: LineProc;
  private readonly trees: LineProc;
  private readonly refs: LineProc;
  private readonly scratch = mkdtempSync(join(tmpdir(), 'vouch-gitops-plumbing-'));
  /** Tree entries (`mode type oid\tname`) by directory path, as git has them at the head. */
  private readonly dirs = new Map<string, Map<string, string>>();
  private head: string;
  /** Tree ids written by this append (for `dirSync`). */
  private written: string[] = [];

  /** With `dirSync`, also fsync the directories the new objects and the ref were renamed into, as vouch's writer does (git does not). */
  constructor(
    private readonly dir: string,
    private readonly dirSync = false,
  ) {
    this.blobs = new LineProc(dir, ['hash-object', '-w', '--no-filters', '--stdin-paths']);
    this.commits = new LineProc(dir, ['hash-object', '-t', 'commit', '-w', '--stdin-paths']);
    this.trees = new LineProc(dir, ['mktree', '--batch']);
    this.refs = new LineProc(dir, ['update-ref', '--stdin']);
    this.head = git(dir, 'rev-parse', 'refs/heads/main').trim();
  }

  private entries(path: string): Map<string, string> {
    let m = this.dirs.get(path);
    if (!m) {
      m = new Map();
      let out = '';
      try {
        out = git(this.dir, 'ls-tree', `${this.head}:${path}`);
      } catch {
        /* a new directory */
      }
      for (const line of out.split('\n')) if (line) m.set(line.slice(line.indexOf('\t') + 1), line.slice(0, line.indexOf('\t')));
      this.dirs.set(path, m);
    }
    return m;
  }

  async append(block: BlockFile, checkpoint: string, info: CommitInfo): Promise<string> {
    const bp = join(this.scratch, 'block');
    const cp = join(this.scratch, 'checkpoint');
    writeFileSync(bp, block.content);
    writeFileSync(cp, checkpoint);
    const [blockOid, cpOid] = await this.blobs.ask(`${bp}\n${cp}\n`, 2);
    const p = blockPath(block.index); // blocks/AAA/BBB/N.json
    const parts = p.split('/');
    const leafDir = parts.slice(0, 3).join('/');
    this.entries(leafDir).set(parts[3]!, `100644 blob ${blockOid}`);
    let child = leafDir;
    let oid = '';
    for (;;) {
      const body = [...this.entries(child)].map(([name, head]) => `${head}\t${name}\n`).join('');
      oid = (await this.trees.ask(`${body}\n`, 1))[0]!;
      this.written.push(oid);
      const cut = child.lastIndexOf('/');
      const parent = cut < 0 ? '' : child.slice(0, cut);
      this.entries(parent).set(child.slice(cut + 1), `040000 tree ${oid}`);
      if (parent === '') break;
      child = parent;
    }
    const root = this.entries('');
    root.set('checkpoint.json', `100644 blob ${cpOid}`);
    const rootBody = [...root].map(([name, head]) => `${head}\t${name}\n`).join('');
    const [rootOid] = await this.trees.ask(`${rootBody}\n`, 1);
    const commitPath = join(this.scratch, 'commit');
    writeFileSync(commitPath, `tree ${rootOid}\nparent ${this.head}\nauthor ${ident(info)}\ncommitter ${ident(info)}\n\n${info.message}`);
    const [commit] = await this.commits.ask(`${commitPath}\n`, 1);
    if (this.dirSync) {
      const fanouts = new Set([blockOid!, cpOid!, rootOid!, commit!, ...this.written].map((o) => o.slice(0, 2)));
      this.written = [];
      for (const d of fanouts) syncDir(join(this.dir, '.git', 'objects', d), true);
    }
    const ok = await this.refs.ask(`start\nupdate refs/heads/main ${commit} ${this.head}\nprepare\ncommit\n`, 3);
    if (ok.join(',') !== 'start: ok,prepare: ok,commit: ok') throw new Error(`update-ref answered ${ok.join(',')}`);
    this.head = commit!;
    if (this.dirSync) syncDir(join(this.dir, '.git', 'refs', 'heads'));
    writeDurable(join(this.dir, 'checkpoint.json'), checkpoint);
    return commit!;
  }

  async close(): Promise<void> {
    await Promise.all([this.blobs.close(), this.commits.close(), this.trees.close(), this.refs.close()]);
    rmSync(this.scratch, { recursive: true, force: true });
  }
}

/**
 * One long-lived `git fast-import`: each append is a commit, a `checkpoint`
 * (pack and ref written out; a pack under fastimport.unpackLimit, 100
 * objects, is unpacked to loose objects) and a `progress` line to wait for.
 */
export class FastImportWriter implements StockWriter {
  private readonly proc: LineProc;
  private first = true;
  private n = 0;

  constructor(private readonly dir: string) {
    this.proc = new LineProc(dir, ['fast-import', '--quiet']);
  }

  async append(block: BlockFile, checkpoint: string, info: CommitInfo): Promise<string> {
    const data = (s: string) => `data ${Buffer.byteLength(s)}\n${s}\n`;
    const from = this.first ? 'from refs/heads/main^0\n' : '';
    this.first = false;
    const tag = `appended ${++this.n}`;
    const cmd =
      `commit refs/heads/main\nauthor ${ident(info)}\ncommitter ${ident(info)}\n${data(info.message)}${from}` +
      `M 100644 inline ${blockPath(block.index)}\n${data(block.content)}M 100644 inline checkpoint.json\n${data(checkpoint)}\n` +
      `checkpoint\n\nprogress ${tag}\n\n`;
    const [line] = await this.proc.ask(cmd, 1);
    if (line !== `progress ${tag}`) throw new Error(`fast-import answered ${line}`);
    writeDurable(join(this.dir, 'checkpoint.json'), checkpoint);
    return tag;
  }

  close(): Promise<void> {
    return this.proc.close();
  }
}
