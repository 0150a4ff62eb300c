/**
 * The authority's push of the chain repository to a git remote over smart
 * HTTP (docs/spec/design.md §4), at a cost that does not grow with history.
 * Owns: `pushNew` (the remote's head, what to send, the POST and its report)
 * and `ChainPusher`, the background loop notified after each append
 * (coalescing, exponential backoff, status). Walk: ./push-walk.ts; pack:
 * ./git-pack-writer.ts; exchange: ./receive-pack.ts. Hand-written, not
 * isomorphic-git's push (bench/RESULTS.md "Mirrors and push").
 * Trusts: the local objects; git's connectivity guarantee on the remote.
 * Must hold: never force (a remote head off the local first-parent chain is
 * `history_rewritten`; old-oid is the remote's head); a push reads O(new
 * commits) objects; `notify` never throws or waits and nothing acknowledged
 * is lost; credentials in the remote URL never appear in messages or logs.
 */
import { join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { Agent, type Dispatcher } from 'undici';
import { VouchError } from '../chain/errors.ts';
import { BRANCH_REF, OID_RE, ZERO_OID } from './git-objects.ts';
import { packChunks } from './git-pack-writer.ts';
import { type PushObjects, firstParentChain, localBranchHead, objectsToSend, pushObjects } from './push-walk.ts';
import { FLUSH, pktLine, protocolError } from './pkt-line.ts';
import {
  type PushTimeouts,
  type RemoteRefs,
  collect,
  endsWithFlush,
  fetchRefs,
  headers,
  httpStatusError,
  parseReport,
  resolvedTimeouts,
} from './receive-pack.ts';
import { type Remote, defaultDispatcher, parseRemote } from './smart-http.ts';

export { makeDelta } from './git-pack-writer.ts';
export { localBranchHead } from './push-walk.ts';
export { lsRemote, type PushTimeouts, type RemoteRefs } from './receive-pack.ts';
export { parseRemote } from './smart-http.ts';

/** Pack bodies up to this size are sent with Content-Length; larger ones are streamed (chunked). */
const BUFFERED_PACK_BYTES = 1 << 20;

export interface PushNewOptions {
  /** The remote's `main` as we last knew it (null: none or unknown). Checked against the remote's advertisement. */
  remoteHead: string | null;
  /** The local commit to put on the remote's `main`. */
  localHead: string;
  timeouts?: PushTimeouts;
  /** undici dispatcher to use (default: a shared agent of this module). */
  dispatcher?: Dispatcher;
  /** A token reused across pushes: the same PushObjects (./push-walk.ts), its parsed pack indexes and trees kept. */
  cache?: object;
  signal?: AbortSignal;
  /**
   * The capabilities of the remote's last advertisement, when `remoteHead` is
   * known from our own last push: the push goes straight to the POST (no
   * GET info/refs first). The remote's ref update is a compare-and-swap from
   * `remoteHead`: when the remote is elsewhere it refuses, and the push is
   * made again after reading the remote's refs.
   */
  known?: { capabilities: ReadonlySet<string> };
}

export interface PushResult {
  /** False when the remote already had `localHead` (nothing was sent). */
  pushed: boolean;
  /** The remote's `main` now (= localHead). */
  remoteHead: string;
  /** What the remote's `main` was before this push (null: no main). */
  previousRemoteHead: string | null;
  /** True when the remote had no `main` and the whole history was sent. */
  fullHistory: boolean;
  /** Commits sent. */
  commits: number;
  /** Objects in the pack. */
  objects: number;
  /** Pack size in bytes. */
  packBytes: number;
  /** POST body size in bytes (commands + pack). */
  requestBytes: number;
  /** Set when the remote was not where `remoteHead` said (and what was done about it). */
  note: string | null;
  /** The remote's capabilities (from its advertisement, or `known`'s): what a next push with `known` can give. */
  capabilities: ReadonlySet<string>;
  /** Whether the remote's refs were read (GET info/refs) for this push. */
  readRefs: boolean;
  timings: { refsMs: number; walkMs: number; postMs: number; totalMs: number };
}

/** What the remote advertises for receive-pack. */
/** Concatenates `first` and the rest of `gen` into one stream. */
function streamOf(first: Buffer[], gen: AsyncGenerator<Buffer>, onByte: (n: number) => void): Readable {
  async function* all(): AsyncGenerator<Buffer> {
    for (const c of first) yield c;
    for await (const c of gen) {
      onByte(c.length);
      yield c;
    }
  }
  return Readable.from(all(), { objectMode: false });
}

// ---------------------------------------------------------------------------
// pushNew

/**
 * Push `localHead` to the remote's `main`, sending only the objects the
 * remote lacks, found by walking the first-parent commits between the
 * remote's head and `localHead` (see the header). The remote's actual head is
 * read from its advertisement first: when it is an ancestor on our chain the
 * push starts from there (whatever `remoteHead` said); when it is anything
 * else the push is refused (`history_rewritten`), never forced. An empty
 * remote gets the whole history (a walk of every commit, once).
 */
export async function pushNew(dir: string, remoteUrl: string, opts: PushNewOptions): Promise<PushResult> {
  if (opts.known !== undefined && opts.remoteHead !== null && opts.remoteHead !== opts.localHead) {
    try {
      return await pushFrom(dir, remoteUrl, opts, { main: opts.remoteHead, capabilities: new Set(opts.known.capabilities) });
    } catch (e) {
      // Refused (the remote is not where we last left it, or lacks a base): read its refs and push from there.
      if (!(e instanceof VouchError && e.evidence?.reason === 'rejected') || opts.signal?.aborted) throw e;
    }
  }
  return pushFrom(dir, remoteUrl, opts, null);
}

/** pushNew with the remote's refs as `advertised` (null: read them first, GET info/refs). */
async function pushFrom(dir: string, remoteUrl: string, opts: PushNewOptions, advertised: RemoteRefs | null): Promise<PushResult> {
  const t0 = performance.now();
  const { remoteHead: expected, localHead } = opts;
  if (!OID_RE.test(localHead)) throw new VouchError('bad_request', `local head ${JSON.stringify(localHead)} is not a commit id`);
  if (expected !== null && !OID_RE.test(expected)) throw new VouchError('bad_request', `remote head ${JSON.stringify(expected)} is not a commit id`);
  const remote = parseRemote(remoteUrl);
  const t = resolvedTimeouts(opts.timeouts);
  const dispatcher = opts.dispatcher ?? defaultDispatcher(t.connectMs);
  const objects = pushObjects(join(resolve(dir), '.git'), opts.cache);

  // 1. Where is the remote really?
  const refs = advertised ?? (await fetchRefs(remote, t, dispatcher, opts.signal));
  const tRefs = performance.now();
  const actual = refs.main;
  const base = (ms: number) => ({ refsMs: tRefs - t0, walkMs: ms, postMs: 0, totalMs: performance.now() - t0 });
  if (actual === localHead) {
    return {
      pushed: false,
      remoteHead: localHead,
      previousRemoteHead: actual,
      fullHistory: false,
      commits: 0,
      objects: 0,
      packBytes: 0,
      requestBytes: 0,
      note: expected === actual ? null : `the remote already had ${short(localHead)} (expected ${expected ? short(expected) : 'no main'})`,
      capabilities: refs.capabilities,
      readRefs: advertised === null,
      timings: base(0),
    };
  }
  if (!refs.capabilities.has('report-status')) throw protocolError(`${remote.shown} does not offer report-status: cannot confirm a push there`);

  // 2. The commits to send: first parents from localHead back to the remote's head.
  await objects.commit(localHead); // a clear error when the local head is not here
  if (actual !== null && !(await objects.has(actual)))
    throw diverged(remote, actual, localHead, expected, 'the remote has a commit this repository does not have');
  const chain = await firstParentChain(objects, localHead, actual);
  // (Proving that costs a walk to the root: only on this error path.)
  if (!chain.found)
    throw diverged(
      remote,
      actual!,
      localHead,
      expected,
      'it is not on the local first-parent chain (the remote is ahead of this repository, diverged or was rewritten)',
    );
  const entries = await objectsToSend(objects, chain.commits);
  const tWalk = performance.now();

  let note: string | null = null;
  if (actual === null && expected !== null) note = `the remote had no main (expected ${short(expected)}): sent the whole history`;
  else if (actual === null) note = 'the remote had no main: sent the whole history (walks every commit once)';
  else if (actual !== expected) note = `the remote was at ${short(actual)}, not ${expected ? short(expected) : 'empty'} as expected: pushed from there`;

  // 3. POST the command and the pack.
  const caps = ['report-status', ...(refs.capabilities.has('agent') || [...refs.capabilities].some((c) => c.startsWith('agent=')) ? ['agent=vouch'] : [])];
  const command = Buffer.concat([pktLine(`${actual ?? ZERO_OID} ${localHead} ${BRANCH_REF}\0${caps.join(' ')}`), FLUSH]);
  const gen = packChunks(objects, entries, !refs.capabilities.has('no-thin'));
  const first: Buffer[] = [command];
  let packBytes = 0;
  let buffered = command.length;
  let done = false;
  while (buffered < BUFFERED_PACK_BYTES) {
    const r = await gen.next();
    if (r.done) {
      done = true;
      break;
    }
    first.push(r.value);
    buffered += r.value.length;
    packBytes += r.value.length;
  }
  let requestBytes = buffered;
  const body: Buffer | Readable = done
    ? Buffer.concat(first, buffered)
    : streamOf(first, gen, (n) => {
        packBytes += n;
        requestBytes += n;
      });
  const stage = 'POST git-receive-pack of';
  let status: number;
  let ctype: string;
  let answer: Buffer;
  try {
    ({
      status,
      contentType: ctype,
      body: answer,
    } = await collect(
      remote,
      stage,
      t.pushMs,
      t.idleMs,
      opts.signal,
      dispatcher,
      {
        url: `${remote.base}/git-receive-pack`,
        method: 'POST',
        body,
        headers: headers(remote, {
          'content-type': 'application/x-git-receive-pack-request',
          accept: 'application/x-git-receive-pack-result',
          ...(done ? { 'content-length': String(buffered) } : {}),
        }),
      },
      `receive-pack answer of ${remote.shown}`,
      endsWithFlush,
    ));
  } catch (e) {
    if (body instanceof Readable) body.destroy();
    throw e;
  }
  if (status !== 200) throw httpStatusError(remote, stage, status, answer.toString('utf8'));
  if (!ctype.startsWith('application/x-git-receive-pack-result')) throw protocolError(`${stage} ${remote.shown}: unexpected content type ${ctype || '(none)'}`);
  const report = parseReport(answer, remote);
  if (report.unpack !== 'ok') {
    throw new VouchError('io_error', `${remote.shown} could not unpack the pushed objects: ${report.unpack}`, {
      evidence: { reason: 'rejected', stage, unpack: report.unpack },
    });
  }
  if (report.ref !== null) {
    throw new VouchError('io_error', `${remote.shown} refused to move main from ${actual ? short(actual) : 'nothing'} to ${short(localHead)}: ${report.ref}`, {
      evidence: { reason: 'rejected', stage, refused: report.ref, remoteHead: actual, localHead },
    });
  }
  const end = performance.now();
  return {
    pushed: true,
    remoteHead: localHead,
    previousRemoteHead: actual,
    fullHistory: actual === null,
    commits: chain.commits.length,
    objects: entries.length,
    packBytes,
    requestBytes,
    note,
    capabilities: refs.capabilities,
    readRefs: advertised === null,
    timings: { refsMs: tRefs - t0, walkMs: tWalk - tRefs, postMs: end - tWalk, totalMs: end - t0 },
  };
}

function short(oid: string): string {
  return oid.slice(0, 12);
}

function diverged(remote: Remote, actual: string, local: string, expected: string | null, why: string): VouchError {
  return new VouchError(
    'history_rewritten',
    `history_rewritten: ${remote.shown} has main at ${short(actual)}, and ${why}; refusing to push ${short(local)} — vouch never force-pushes, the remote needs an operator`,
    { evidence: { reason: 'diverged', remoteHead: actual, localHead: local, expectedRemoteHead: expected } },
  );
}

// ---------------------------------------------------------------------------
// ChainPusher

/** Compatible with the gateway's structured logger. */
export interface PushLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  debug?(msg: string, fields?: Record<string, unknown>): void;
}

export interface ChainPusherOptions {
  /** The chain's working directory (the git repository with `.git/`). */
  dir: string;
  /** Smart-HTTP URL of the remote repository (credentials allowed, never shown). */
  remote: string;
  log?: PushLog;
  /** Backoff after a failed push: initialMs, doubling up to maxMs. Default 1 s .. 5 min. */
  retry?: { initialMs: number; maxMs: number };
  /** Longest wait between attempts while the remote is unreachable (not refused as diverged). Default: retry.maxMs. */
  probeMs?: number;
  /** Called after each push that moved the remote's main (e.g. to tell mirrors to sync). Must not throw. */
  onPushed?: (head: string) => void;
  timeouts?: PushTimeouts;
}

/** While a push keeps failing, the failure is logged at most this often. */
export const PUSH_DOWN_LOG_MS = 60_000;

export interface PushStatus {
  /** The remote URL without credentials. */
  remote: string;
  /** The remote's `main` as last seen on our chain (null: none, or not reached yet: see `remoteKnown`). */
  remoteHead: string | null;
  remoteKnown: boolean;
  /** The newest local head (notified, or read from the branch at start). */
  localHead: string | null;
  /** Local commits not yet on the remote (null until the remote has been reached once). */
  backlog: number | null;
  pushing: boolean;
  lastPush: { at: string; head: string; commits: number; objects: number; bytes: number; ms: number; fullHistory: boolean; note: string | null } | null;
  lastError: { at: string; code: string; reason: string | null; message: string } | null;
  consecutiveFailures: number;
  /** When the next attempt after a failure is due (ISO time), or null. */
  nextAttemptAt: string | null;
  stopped: boolean;
}

interface Waiter {
  seq: number;
  resolve: () => void;
  reject: (e: Error) => void;
}

const nullLog: PushLog = { info() {}, warn() {}, error() {} };

/**
 * Pushes the chain in the background after appends (see the header). One
 * loop: learn the remote's head (info/refs) and the local branch head, then
 * while the local head is not on the remote, push everything since the
 * remote's head in one push (appends made meanwhile go in the next one);
 * after a failure wait initialMs * 2^(n-1) (capped at maxMs, with jitter).
 */
export class ChainPusher {
  readonly dir: string;
  private readonly remote: Remote;
  private readonly remoteUrl: string;
  private readonly log: PushLog;
  private readonly retry: { initialMs: number; maxMs: number };
  private readonly timeouts: PushTimeouts;
  private readonly agent: Agent;
  private readonly cache = {};
  private readonly objects: PushObjects;

  private remoteHead: string | null = null;
  private remoteKnown = false;
  private localHead: string | null = null;
  /** Increases with every notify that changes the local head. */
  private seq = 0;
  /** Local commits after the remote's head, newest first (exact once the remote is known). */
  private ahead: string[] = [];
  private aheadKnown = false;
  private tracking: Promise<void> = Promise.resolve();
  private loop: Promise<void> | null = null;
  private inflight: AbortController | null = null;
  private wake: (() => void) | null = null;
  private nextAttemptAt: number | null = null;
  private waiters: Waiter[] = [];
  private stopped = false;
  private lastPush: PushStatus['lastPush'] = null;
  private lastError: PushStatus['lastError'] = null;
  private lastErrorObj: Error | null = null;
  private failures = 0;
  private readonly probeMs: number;
  private readonly onPushed: ((head: string) => void) | null;
  /** Whether the pending retry waits out a permanent refusal (a new append does not cut it short). */
  private sleepingPermanent = false;
  private lastFailLog = 0;
  /** The remote's capabilities as last advertised: while pushes succeed, the next one skips GET info/refs (pushNew `known`). */
  private caps: ReadonlySet<string> | null = null;

  constructor(opts: ChainPusherOptions) {
    this.dir = resolve(opts.dir);
    this.remoteUrl = opts.remote;
    this.remote = parseRemote(opts.remote);
    this.log = opts.log ?? nullLog;
    this.retry = opts.retry ?? { initialMs: 1_000, maxMs: 300_000 };
    if (!(this.retry.initialMs > 0) || !(this.retry.maxMs >= this.retry.initialMs)) throw new VouchError('bad_request', 'retry needs 0 < initialMs <= maxMs');
    this.timeouts = opts.timeouts ?? {};
    this.probeMs = Math.max(1, opts.probeMs ?? this.retry.maxMs);
    this.onPushed = opts.onPushed ?? null;
    this.agent = new Agent({ connect: { timeout: resolvedTimeouts(this.timeouts).connectMs }, keepAliveTimeout: 4_000 });
    this.objects = pushObjects(join(this.dir, '.git'), this.cache);
    this.kick();
  }

  /** A new local head after an append. Returns at once; never throws. */
  notify(localHead: string): void {
    try {
      if (this.stopped) return;
      if (typeof localHead !== 'string' || !OID_RE.test(localHead)) {
        this.say('warn', 'chain push: ignored a notify without a commit id', { remote: this.remote.shown });
        return;
      }
      if (localHead === this.localHead) return;
      this.localHead = localHead;
      this.seq++;
      this.track();
      // A retry pending after a transport failure is cut short: the remote may be back.
      if (this.failures > 0 && !this.sleepingPermanent) this.wake?.();
      this.kick();
    } catch (e) {
      this.say('error', 'chain push: notify failed', { error: (e as Error)?.message });
    }
  }

  status(): PushStatus {
    return {
      remote: this.remote.shown,
      remoteHead: this.remoteHead,
      remoteKnown: this.remoteKnown,
      localHead: this.localHead,
      backlog: this.remoteKnown && this.aheadKnown ? this.ahead.length : null,
      pushing: this.inflight !== null,
      lastPush: this.lastPush,
      lastError: this.lastError,
      consecutiveFailures: this.failures,
      nextAttemptAt: this.nextAttemptAt === null ? null : new Date(this.nextAttemptAt).toISOString(),
      stopped: this.stopped,
    };
  }

  /**
   * Push now (a pending backoff is cut short) and resolve once the remote has
   * the local head as of this call; reject with the error of the next failed
   * attempt.
   */
  flush(): Promise<void> {
    if (this.stopped) return Promise.reject(new VouchError('io_error', `chain pusher for ${this.remote.shown} is stopped`));
    return new Promise<void>((resolve, reject) => {
      this.waiters.push({ seq: this.seq, resolve, reject });
      this.nextAttemptAt = null;
      this.wake?.();
      this.kick();
    });
  }

  /** Stop pushing (an in-flight push is cancelled); pending flushes reject. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.inflight?.abort(new VouchError('io_error', 'pusher stopped'));
    this.wake?.();
    const err = new VouchError('io_error', `chain pusher for ${this.remote.shown} stopped`);
    for (const w of this.waiters.splice(0)) w.reject(err);
    await this.loop?.catch(() => undefined);
    await this.tracking.catch(() => undefined);
    await this.agent.close().catch(() => undefined);
  }

  // -------------------------------------------------------------------------

  private kick(): void {
    if (this.loop || this.stopped) return;
    this.loop = this.run()
      .catch(async (e) => {
        // Not expected (run() catches its own failures): log, and wait before looping again.
        this.say('error', 'chain push: loop failed', { remote: this.remote.shown, error: (e as Error)?.message });
        await this.sleep(this.retry.maxMs);
      })
      .finally(() => {
        this.loop = null;
        if (!this.stopped && (this.waiters.length > 0 || !this.inSync())) this.kick();
      });
  }

  private inSync(): boolean {
    return this.remoteKnown && this.localHead !== null && this.localHead === this.remoteHead;
  }

  /** Resolve the flushes made before the local head of sequence `pushedSeq` reached the remote. */
  private settle(pushedSeq: number): void {
    const keep: Waiter[] = [];
    for (const w of this.waiters) {
      if (w.seq <= pushedSeq) w.resolve();
      else keep.push(w);
    }
    this.waiters = keep;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        if (this.localHead === null) {
          const head = await localBranchHead(this.dir);
          if (head === null) throw new VouchError('not_a_chain', `${this.dir}: branch main has no commit to push`);
          if (this.localHead === null) this.localHead = head;
        }
        if (!this.remoteKnown) {
          const refs = await this.attempt((signal) => fetchRefs(this.remote, resolvedTimeouts(this.timeouts), this.agent, signal));
          this.remoteHead = refs.main;
          this.caps = refs.capabilities;
          this.remoteKnown = true;
          this.retrack();
        }
        const target = this.localHead;
        const seq = this.seq;
        if (target === this.remoteHead) {
          await this.tracking;
          this.settle(seq);
          if (this.failures > 0) this.recovered();
          if (this.localHead === target) return;
          continue;
        }
        const r = await this.attempt((signal) =>
          pushNew(this.dir, this.remoteUrl, {
            remoteHead: this.remoteHead,
            localHead: target,
            timeouts: this.timeouts,
            dispatcher: this.agent,
            cache: this.cache,
            signal,
            ...(this.caps !== null && this.failures === 0 ? { known: { capabilities: this.caps } } : {}),
          }),
        );
        const before = this.remoteHead;
        this.remoteHead = r.remoteHead;
        this.caps = r.capabilities;
        // The mirrors hear of it first: a sync hint costs them nothing to wait for (the log line and backlog count come after).
        if (r.pushed && this.onPushed) {
          try {
            this.onPushed(r.remoteHead);
          } catch {
            /* the callback's failure is its own */
          }
        }
        this.lastPush = {
          at: new Date().toISOString(),
          head: r.remoteHead,
          commits: r.commits,
          objects: r.objects,
          bytes: r.requestBytes,
          ms: Math.round(r.timings.totalMs),
          fullHistory: r.fullHistory,
          note: r.note,
        };
        this.afterPush(target, before, r);
        await this.tracking;
        if (this.failures > 0) this.recovered();
        this.say('info', 'chain pushed', {
          remote: this.remote.shown,
          head: r.remoteHead,
          commits: r.commits,
          objects: r.objects,
          bytes: r.requestBytes,
          ms: Math.round(r.timings.totalMs),
          ...(r.note ? { note: r.note } : {}),
        });
        this.settle(seq);
      } catch (e) {
        if (this.stopped) return;
        const err = e instanceof Error ? e : new VouchError('internal_error', String(e));
        this.failures++;
        this.lastErrorObj = err;
        const code = e instanceof VouchError ? e.code : 'internal_error';
        const reason = e instanceof VouchError && typeof e.evidence?.reason === 'string' ? e.evidence.reason : null;
        this.lastError = { at: new Date().toISOString(), code, reason, message: err.message };
        const permanent = reason === 'diverged';
        const delay = permanent ? this.backoff(true) : Math.min(this.probeMs, this.backoff(false));
        const fields = {
          remote: this.remote.shown,
          code,
          reason,
          error: err.message,
          consecutiveFailures: this.failures,
          retryInMs: delay,
          backlog: this.status().backlog,
        };
        if (permanent) this.say('error', 'chain push refused: the remote diverged', fields);
        else if (this.failures === 1 || Date.now() - this.lastFailLog >= PUSH_DOWN_LOG_MS) {
          this.lastFailLog = Date.now();
          this.say('warn', this.failures === 1 ? 'chain push failed' : 'chain push still failing', fields);
        }
        for (const w of this.waiters.splice(0)) w.reject(err);
        this.sleepingPermanent = permanent;
        await this.sleep(delay);
        this.sleepingPermanent = false;
      }
    }
  }

  /** Logs through the caller's logger; a logger that throws never breaks the loop. */
  private say(level: 'info' | 'warn' | 'error', msg: string, fields: Record<string, unknown>): void {
    try {
      this.log[level](msg, fields);
    } catch {
      /* ignore */
    }
  }

  private recovered(): void {
    this.say('info', 'chain push recovered', { remote: this.remote.shown, after: this.failures });
    this.failures = 0;
    this.lastError = null;
    this.lastErrorObj = null;
  }

  /** Runs one network step, cancellable by stop(). */
  private async attempt<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const ac = new AbortController();
    this.inflight = ac;
    try {
      return await fn(ac.signal);
    } finally {
      this.inflight = null;
    }
  }

  private backoff(permanent: boolean): number {
    const { initialMs, maxMs } = this.retry;
    const raw = permanent ? maxMs : Math.min(maxMs, initialMs * 2 ** Math.min(30, this.failures - 1));
    return Math.max(1, Math.round(raw * (0.8 + 0.2 * Math.random())));
  }

  private sleep(ms: number): Promise<void> {
    this.nextAttemptAt = Date.now() + ms;
    return new Promise<void>((resolve) => {
      // Unref'd: a pending retry never holds the process open (everything unpushed stays in the local repository).
      const timer = setTimeout(done, ms);
      timer.unref();
      const self = this;
      function done(): void {
        clearTimeout(timer);
        if (self.wake === done) self.wake = null;
        self.nextAttemptAt = null;
        resolve();
      }
      this.wake = done;
    });
  }

  // --- backlog: the local commits after the remote's head

  /** After a new local head: add the commits between the previous tip we counted and it. */
  private track(): void {
    this.tracking = this.tracking
      .then(async () => {
        if (!this.remoteKnown || !this.aheadKnown || this.localHead === null) return;
        const head = this.localHead;
        const stop = this.ahead[0] ?? this.remoteHead;
        if (head === stop) return;
        const r = await firstParentChain(this.objects, head, stop, 100_000);
        if (r.found) this.ahead = [...r.commits.map((c) => c.oid), ...this.ahead];
        else await this.recount();
      })
      .catch((e) => {
        this.aheadKnown = false;
        this.say('warn', 'chain push: cannot count the backlog', { error: (e as Error)?.message });
      });
  }

  /** After the remote's head changed outside a push of ours: count again from scratch. */
  private retrack(): void {
    this.tracking = this.tracking
      .then(() => this.recount())
      .catch((e) => {
        this.aheadKnown = false;
        this.say('warn', 'chain push: cannot count the backlog', { error: (e as Error)?.message });
      });
  }

  private async recount(): Promise<void> {
    if (!this.remoteKnown || this.localHead === null) return;
    if (this.localHead === this.remoteHead) {
      this.ahead = [];
      this.aheadKnown = true;
      return;
    }
    const r = await firstParentChain(this.objects, this.localHead, this.remoteHead);
    // Not found: the remote diverged; every local commit counts as not on it.
    this.ahead = r.commits.map((c) => c.oid);
    this.aheadKnown = true;
  }

  private afterPush(target: string, before: string | null, r: PushResult): void {
    this.tracking = this.tracking
      .then(async () => {
        const at = this.ahead.indexOf(target);
        if (at >= 0 && r.previousRemoteHead === before) this.ahead = this.ahead.slice(0, at);
        else await this.recount();
      })
      .catch((e) => {
        this.aheadKnown = false;
        this.say('warn', 'chain push: cannot count the backlog', { error: (e as Error)?.message });
      });
  }

  /** The error of the last failed attempt (null after a success). */
  get lastFailure(): Error | null {
    return this.lastErrorObj;
  }
}
