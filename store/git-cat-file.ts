/**
 * git-cat-file: objects read by stock git, `git cat-file --batch` kept
 * running (one process, requests answered in order), and the sweep of every
 * object `git cat-file --batch-all-objects --batch --unordered`.
 *
 * Owns: the child processes it starts (killed by `close`, on a timeout, or
 * when an answer does not parse) and the parse of their answers
 * (`<oid> <type> <size>\n<body>\n` or `<oid> missing\n`).
 * Trusts: the git on PATH to be git; nothing in its answers: a header line
 * is at most 128 bytes, an object at most `maxObjectBytes` (FETCH_LIMITS),
 * each request and each sweep is bounded in time; past a bound the read
 * fails with `io_error` and the process is ended (the next read starts one).
 * Must hold: a failed read never leaves a half-read answer for the next
 * request (the process goes with it); `close` leaves no process behind.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { VouchError } from '../chain/errors.ts';
import { OID_RE } from './git-objects.ts';
import { MAX_OBJECT_BYTES } from './fetch-limits.ts';

const HEADER_MAX = 128;

export interface CatFileOptions {
  /** Largest object accepted (default FETCH_LIMITS.objectBytes). */
  maxObjectBytes?: number;
  /** Longest one read may wait for its answer, ms (default 30 s). */
  timeoutMs?: number;
}

type Obj = { type: string; body: Buffer };
interface Pending {
  oid: string;
  resolve: (o: Obj | null) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

/** Parses the answers of `cat-file --batch` from chunks, one object at a time (bounded). */
export class AnswerParser {
  private chunks: Buffer[] = [];
  private have = 0;
  /** The object being read: its header, and how many body bytes (plus the closing newline) are still due. */
  private cur: { oid: string; type: string; size: number } | null = null;

  constructor(
    private readonly maxBytes: number,
    private readonly onObject: (oid: string, o: Obj | null) => void,
  ) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.have += chunk.length;
    for (;;) {
      if (this.cur === null) {
        const buf = this.take(0);
        const nl = buf.indexOf(10);
        if (nl < 0) {
          if (buf.length > HEADER_MAX) throw new VouchError('io_error', 'git cat-file: an answer header longer than 128 bytes');
          return;
        }
        if (nl > HEADER_MAX) throw new VouchError('io_error', 'git cat-file: an answer header longer than 128 bytes');
        const line = buf.toString('latin1', 0, nl);
        this.consume(nl + 1);
        const m = /^([0-9a-f]{40}) (?:(missing|ambiguous)|(blob|tree|commit|tag) (\d{1,12}))$/.exec(line);
        if (!m) throw new VouchError('io_error', `git cat-file: unexpected answer ${JSON.stringify(line.slice(0, 80))}`);
        if (m[2]) {
          this.onObject(m[1]!, null);
          continue;
        }
        const size = Number(m[4]);
        if (size > this.maxBytes) throw new VouchError('io_error', `git cat-file: object ${m[1]} has ${size} bytes, more than ${this.maxBytes}`);
        this.cur = { oid: m[1]!, type: m[3]!, size };
      }
      const c = this.cur;
      if (this.have < c.size + 1) return;
      const buf = this.take(c.size + 1);
      if (buf[c.size] !== 10) throw new VouchError('io_error', `git cat-file: object ${c.oid} does not end with a newline`);
      // A copy when the body shares a large chunk: what is kept must not pin the chunk.
      const body = buf.length > c.size + 1 + 4096 ? Buffer.from(buf.subarray(0, c.size)) : buf.subarray(0, c.size);
      this.consume(c.size + 1);
      this.cur = null;
      this.onObject(c.oid, { type: c.type, body });
    }
  }

  /** The first buffered chunk, joined with the rest when it holds under `min` bytes (0: no whole line). */
  private take(min: number): Buffer {
    const first = this.chunks[0];
    if (this.chunks.length > 1 && (min === 0 ? first!.indexOf(10) < 0 : first!.length < min)) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0] ?? Buffer.alloc(0);
  }

  private consume(n: number): void {
    const b = this.chunks[0]!;
    this.have -= n;
    if (n >= b.length) this.chunks.shift();
    else this.chunks[0] = b.subarray(n);
  }

  get idle(): boolean {
    return this.cur === null && this.have === 0;
  }
}

/** `git cat-file --batch`, one long-lived process per repository; `read` answers in request order. */
export class GitCatFile {
  private child: ChildProcessWithoutNullStreams | null = null;
  private queue: Pending[] = [];
  private parser: AnswerParser | null = null;
  private closed = false;
  private readonly maxBytes: number;
  private readonly timeoutMs: number;

  constructor(
    readonly gitdir: string,
    opts: CatFileOptions = {},
  ) {
    this.maxBytes = opts.maxObjectBytes ?? MAX_OBJECT_BYTES;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /** The object, or null when the repository does not hold it. */
  read(oid: string): Promise<Obj | null> {
    if (this.closed) return Promise.reject(new VouchError('io_error', 'git cat-file: reader closed'));
    if (!OID_RE.test(oid)) return Promise.reject(new VouchError('io_error', `git cat-file: not an object id: ${JSON.stringify(oid.slice(0, 80))}`));
    const child = this.start();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new VouchError('io_error', `git cat-file: no answer for ${oid} within ${this.timeoutMs} ms`)), this.timeoutMs);
      this.queue.push({ oid, resolve, reject, timer });
      child.stdin.write(`${oid}\n`);
    });
  }

  private start(): ChildProcessWithoutNullStreams {
    if (this.child) return this.child;
    const child = spawn('git', ['--git-dir', this.gitdir, 'cat-file', '--batch'], { stdio: ['pipe', 'pipe', 'pipe'], env: gitEnv() });
    this.child = child;
    let stderr = '';
    this.parser = new AnswerParser(this.maxBytes, (oid, o) => {
      const p = this.queue.shift();
      if (!p || p.oid !== oid) throw new VouchError('io_error', `git cat-file: answered ${oid}, asked ${p?.oid ?? 'nothing'}`);
      clearTimeout(p.timer);
      p.resolve(o);
    });
    const parser = this.parser;
    child.stdout.on('data', (d: Buffer) => {
      if (this.child !== child) return;
      try {
        parser.push(d);
      } catch (e) {
        this.fail(e as Error);
      }
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString('utf8')).slice(-2048);
    });
    child.stdin.on('error', () => {
      /* reported by 'exit' */
    });
    child.on('error', (e) => {
      if (this.child === child) this.fail(new VouchError('io_error', `git cat-file: ${e.message}`));
    });
    child.on('exit', (code, signal) => {
      if (this.child === child)
        this.fail(new VouchError('io_error', `git cat-file ended (${signal ?? `exit ${code}`})${stderr ? `: ${stderr.trim().split('\n').pop()}` : ''}`));
    });
    return child;
  }

  /** Ends the process and fails every waiting read with `e` (the next read starts a new process). */
  private fail(e: Error): void {
    const child = this.child;
    this.child = null;
    this.parser = null;
    child?.kill('SIGKILL');
    const waiting = this.queue;
    this.queue = [];
    for (const p of waiting) {
      clearTimeout(p.timer);
      p.reject(e instanceof VouchError ? e : new VouchError('io_error', `git cat-file: ${e.message}`));
    }
  }

  /** The running process's id (null when none runs). */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /** Ends the process; waiting reads fail with `io_error`. */
  close(): void {
    this.closed = true;
    this.fail(new VouchError('io_error', 'git cat-file: reader closed'));
  }
}

/**
 * Every object of the repository, in pack order (`git cat-file
 * --batch-all-objects --batch --unordered`): `onObject` is called for each,
 * the stream paused while it returns a promise. Bounded by
 * `timeoutMs` (default 1 h) and `maxObjectBytes`; returns the object count.
 */
export async function sweepObjects(
  gitdir: string,
  onObject: (oid: string, type: string, body: Buffer) => void | Promise<void>,
  opts: CatFileOptions = {},
): Promise<number> {
  const child = spawn('git', ['--git-dir', gitdir, 'cat-file', '--batch-all-objects', '--batch', '--unordered'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: gitEnv(),
  });
  let count = 0;
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString('utf8')).slice(-2048);
  });
  const timeoutMs = opts.timeoutMs ?? 3_600_000;
  let failure: Error | null = null;
  const exited = new Promise<void>((resolve) => {
    child.on('error', (e) => {
      failure ??= new VouchError('io_error', `git cat-file: ${e.message}`);
      resolve();
    });
    child.on('close', (code, signal) => {
      if (code !== 0)
        failure ??= new VouchError(
          'io_error',
          `git cat-file --batch-all-objects ended (${signal ?? `exit ${code}`})${stderr ? `: ${stderr.trim().split('\n').pop()}` : ''}`,
        );
      resolve();
    });
  });
  const timer = setTimeout(() => {
    failure ??= new VouchError('io_error', `git cat-file --batch-all-objects: not done within ${timeoutMs} ms`);
    child.kill('SIGKILL');
  }, timeoutMs);
  let waits: Promise<void>[] = [];
  const parser = new AnswerParser(opts.maxObjectBytes ?? MAX_OBJECT_BYTES, (oid, o) => {
    if (!o) return;
    count++;
    const r = onObject(oid, o.type, o.body);
    if (r) waits.push(r);
  });
  try {
    for await (const chunk of child.stdout as AsyncIterable<Buffer>) {
      if (failure) break;
      parser.push(chunk);
      if (waits.length) {
        const w = waits;
        waits = [];
        await Promise.all(w);
      }
    }
    await exited;
    if (!failure && !parser.idle) failure = new VouchError('io_error', 'git cat-file --batch-all-objects: the last answer is cut short');
  } catch (e) {
    failure ??= e instanceof VouchError ? e : new VouchError('io_error', `git cat-file: ${(e as Error).message}`);
  } finally {
    clearTimeout(timer);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  if (failure) throw failure;
  return count;
}

/** git's environment without what would point it at another repository or make it ask anything. */
function gitEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, GIT_TERMINAL_PROMPT: '0' };
  for (const k of ['GIT_DIR', 'GIT_WORK_TREE', 'GIT_INDEX_FILE', 'GIT_OBJECT_DIRECTORY', 'GIT_ALTERNATE_OBJECT_DIRECTORIES', 'GIT_NAMESPACE']) delete env[k];
  return env;
}
