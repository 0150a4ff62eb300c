/**
 * The mirror side of the gateway (docs/spec/design.md §4): `prepareMirror`
 * bootstraps the chain directory from the remote; `ChainSync` then fetches
 * on an interval, verifies the new blocks, checkpoint and checkpoint.note
 * from the last verified state, and only then fast-forwards and hands the
 * blocks to the served state.
 * Owns: the sync schedule (interval, backoff), accepting or refusing a
 * remote head, the evidence logged on refusal, the status `/readyz` reports.
 * Trusts: the served verifier state and store/chain-repo.ts; nothing remote.
 * Must hold: local state only moves to a head that extends the last verified
 * one and verifies (note opened with the key in force, its root the chain's);
 * a refusal logs the evidence an auditor needs; never two syncs at once; a
 * hostile remote costs one bounded failed attempt (test/hostile-remote); a
 * remote down is logged going down, once a minute (`DOWN_LOG_MS`), and back.
 */
import { indexRootOf } from '../../chain/index-proof.ts';
import { existsSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { VouchError } from '../../chain/errors.ts';
import { type Block, parseBlockText, readJson } from '../../chain/block.ts';
import { ChainVerifier, type VerifierState } from '../../chain/verify.ts';
import { base64Decode, base64Encode, bytesEqual } from '../../chain/encoding.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { CHECKPOINT_NOTE } from '../../chain/layout.ts';
import type { Checkpoint as LogCheckpoint } from '../../chain/tlog-checkpoint.ts';
import {
  type ChainSnapshot,
  type FetchOptions,
  type MirrorStore,
  blockPath,
  cloneChain,
  isInterruptedClone,
  openMirror,
  parseBlockPath,
} from '../../store/chain-repo.ts';
import { HeadEdge, entryOf, trustedNote } from '../../store/chain-append.ts';
import type { Logger } from '../observability/logger.ts';

/** What the sync needs of the served chain (ChainState implements it). */
export interface SyncTarget {
  readonly verifierState: VerifierState;
  /** Whether a verified block is an endorse block with this record_hash (a new revoke must name one). */
  endorsedBefore(recordHash: string): boolean;
  /** Verifies and takes in blocks appended after the head, with the new checkpoint text; throws (state unchanged) if they do not verify. */
  applyCommitted(blocks: readonly Block[], checkpointText: string | null): void;
  /** The completeness index root once `blocks` follow the head (docs/spec/index.md); changes nothing. Absent: the remote's index line is judged by applyCommitted only. */
  indexRootWith?(blocks: readonly Block[]): Uint8Array;
}

export interface ChainSyncOptions {
  repo: MirrorStore;
  /** git smart-HTTP URL of the authority's chain. */
  remote: string;
  state: SyncTarget;
  /** The pinned authority key (base64); the verified state already fixes the authority, this double-checks it. */
  pinnedPublicKey?: string | null;
  intervalSeconds: number;
  log: Logger;
  now?: () => number;
  /** First retry delay after a failed attempt (default 1000 ms); doubles with each failure. */
  backoffInitialMs?: number;
  /** Longest retry delay (default: min(60 s, the interval)). */
  backoffMaxMs?: number;
  /** HTTP client, per-exchange timeout, extra headers for the remote. */
  fetch?: Omit<FetchOptions, 'signal'>;
  /** The configured log origin (`chain.origin`): a remote note under another origin is refused. */
  origin?: string | null;
  /**
   * RFC 6962 root of the verified chain's record hashes followed by
   * `entries`, changing nothing (the gateway's Merkle tree); without it the
   * sync keeps the chain's tree edge itself (store/chain-append.ts HeadEdge).
   */
  rootWith?: (entries: readonly Uint8Array[]) => Uint8Array;
  /** Without rootWith: every verified block's record_hash at this size (the verified index image), or null (the block files are read). */
  recordHashes?: (size: number) => (() => Iterable<string>) | null;
}

export interface SyncStatus {
  /** The remote URL, credentials removed. */
  remote: string;
  /** Epoch ms of the last sync that ended up to date with a verified remote head. */
  lastSuccess: number | null;
  lastAttempt: number | null;
  lastError: { code: string; message: string } | null;
  /** The remote's `main` commit as last fetched (accepted or not). */
  remoteHead: string | null;
  /** Blocks in that commit. */
  remoteSize: number | null;
  /** Blocks verified and served here. */
  localSize: number;
  /** record_hash of the newest block served here. */
  localHead: string;
  consecutiveFailures: number;
  /** Seconds since the last success (since this sync was created when there was none). */
  staleSeconds: number;
  syncing: boolean;
  /** Blocks the remote (as last fetched, or as a sync hint said) holds beyond the verified chain; null when not known. */
  behindBlocks: number | null;
  /** The largest size a sync hint (POST /v1/sync) announced. */
  hintedSize: number | null;
  /** Sync hints received (POST /v1/sync). */
  notifications: number;
  /** Delay before the next attempt while failing (0 when healthy). */
  backoffMs: number;
  /** Epoch ms of the next scheduled attempt, null when not started. */
  nextAttempt: number | null;
}

export type SyncOutcome =
  | { result: 'up_to_date'; commit: string; size: number }
  | { result: 'updated'; commit: string; from: number; size: number }
  | { result: 'refused'; code: string; message: string; commit: string | null }
  | { result: 'failed'; code: string; message: string }
  | { result: 'cancelled' };

const CHECKPOINT = 'checkpoint.json';

/** While the remote stays down, "still failing" is logged at most this often (each attempt is still counted in status()). */
export const DOWN_LOG_MS = 60_000;

function shownUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//');
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function rewritten(message: string, evidence: Record<string, unknown> = {}): VouchError {
  return new VouchError('history_rewritten', `history_rewritten: ${message}`, { index: null, evidence });
}

function noteMismatch(message: string, evidence: Record<string, unknown> = {}): VouchError {
  return new VouchError('checkpoint_mismatch', `checkpoint_mismatch: ${message}`, { index: null, evidence });
}

export class ChainSync {
  private readonly origin: string | null;
  private readonly rootWith: (entries: readonly Uint8Array[]) => Uint8Array;
  /** The sync's own tree edge when no rootWith is given (null otherwise). */
  private readonly edge: HeadEdge | null;
  private readonly repo: MirrorStore;
  private readonly remote: string;
  private readonly state: SyncTarget;
  private readonly pinned: string | null;
  private readonly intervalMs: number;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly backoffInitialMs: number;
  private readonly backoffMaxMs: number;
  private readonly fetchOpts: Omit<FetchOptions, 'signal'>;
  private readonly createdAt: number;

  private lastSuccess: number | null = null;
  private lastAttempt: number | null = null;
  private lastError: { code: string; message: string } | null = null;
  private remoteHead: string | null = null;
  private remoteSize: number | null = null;
  private failures = 0;
  /** Failures of the transport kind (remote down, I/O): they drive the backoff. */
  private transportFailures = 0;
  /** The last refused remote commit, against which verified head, and why. */
  private refused: { commit: string; localHead: string; error: VouchError } | null = null;
  /** Epoch ms of the first failure of the current outage, and of its last log line (null: the remote is up). */
  private downSince: number | null = null;
  private downLogged = 0;
  private hinted: number | null = null;
  /** The commit the newest sync hint named, not yet asked for (the next sync asks for it first, without reading the refs). */
  private hintedHead: string | null = null;
  private notices = 0;

  private started = false;
  /** Set by stop(): a sync queued behind the running one does not start. */
  private stopping = false;
  private timer: NodeJS.Timeout | null = null;
  private nextAt: number | null = null;
  private inflight: Promise<SyncOutcome> | null = null;
  private queued: Promise<SyncOutcome> | null = null;
  private abort: AbortController | null = null;

  constructor(options: ChainSyncOptions) {
    if (!(options.intervalSeconds > 0)) throw new VouchError('usage', 'sync interval must be a positive number of seconds');
    this.repo = options.repo;
    this.remote = options.remote;
    this.state = options.state;
    this.pinned = options.pinnedPublicKey ?? null;
    this.intervalMs = options.intervalSeconds * 1000;
    this.log = options.log;
    this.now = options.now ?? Date.now;
    this.backoffInitialMs = options.backoffInitialMs ?? 1000;
    this.backoffMaxMs = options.backoffMaxMs ?? Math.max(this.backoffInitialMs, Math.min(60_000, this.intervalMs));
    this.fetchOpts = options.fetch ?? {};
    this.createdAt = this.now();
    this.origin = options.origin ?? null;
    if (options.rootWith) {
      this.edge = null;
      this.rootWith = options.rootWith;
    } else {
      const edge = new HeadEdge(this.repo, () => this.localNote(), options.recordHashes);
      this.edge = edge;
      this.rootWith = (e) => edge.rootWith(e);
    }
  }

  /** The raw online key in force after `state` (default: the served state's; key events change it, docs/spec/key-events.md). */
  private authorityKey(state: VerifierState = this.state.verifierState): Uint8Array {
    const a = state.authority;
    const key = a ? base64Decode(a.publicKey) : null;
    if (key === null || key.length !== 32) throw new VouchError('internal_error', 'mirror sync: the verified state has no authority key');
    return key;
  }

  /** The verified chain's checkpoint.note, opened (null: none, or not one that opens: the remote's is then judged on its own). */
  private localNote(): LogCheckpoint | null {
    try {
      return trustedNote(this.repo.readCheckpointNote(), this.authorityKey(), this.state.verifierState.size);
    } catch {
      return null;
    }
  }

  /**
   * The remote's checkpoint.note against the verified chain plus `blocks`
   * (verified already): see the header; throws checkpoint_mismatch.
   */
  private async checkNote(snap: ChainSnapshot, blocks: readonly Block[], ctx: Record<string, unknown>, after: VerifierState): Promise<void> {
    let text: string | null;
    try {
      text = await snap.readFile(CHECKPOINT_NOTE);
    } catch (e) {
      throw noteMismatch(`the remote's ${CHECKPOINT_NOTE}: ${(e as Error).message}`);
    }
    const local = this.localNote();
    if (text === null) {
      ctx.remote_note = null;
      if (local !== null) throw noteMismatch(`the remote has no ${CHECKPOINT_NOTE}, the verified chain has one (origin ${local.origin}, size ${local.size})`);
      return;
    }
    // Signed by the key in force after the new blocks: a rotation or a compromise among them is verified first.
    const cp = trustedNote(text, this.authorityKey(after), snap.size)!;
    ctx.remote_note = { origin: cp.origin, size: cp.size, root: base64Encode(cp.root) };
    const expected = this.origin ?? local?.origin ?? null;
    if (expected !== null && cp.origin !== expected) {
      throw noteMismatch(
        `the remote's ${CHECKPOINT_NOTE} names origin ${JSON.stringify(cp.origin)}, expected ${JSON.stringify(expected)}${this.origin !== null ? ' (chain.origin)' : ''}`,
        { origin: cp.origin, expected },
      );
    }
    const root = this.rootWith(blocks.map((b) => entryOf(b.record_hash)));
    if (!bytesEqual(root, cp.root)) {
      throw noteMismatch(`the remote's ${CHECKPOINT_NOTE} root at size ${cp.size} is not the Merkle root of the verified chain's record hashes`, {
        size: cp.size,
        note_root: base64Encode(cp.root),
        tree_root: base64Encode(root),
      });
    }
    // The completeness index it commits (docs/spec/index.md 5): recomputed from the verified chain plus the new blocks.
    const line = indexRootOf(cp.extensions);
    if (line !== null && 'malformed' in line) throw noteMismatch(`the remote's ${CHECKPOINT_NOTE}: ${line.malformed}`);
    if (line !== null && this.state.indexRootWith !== undefined) {
      const indexRoot = this.state.indexRootWith(blocks);
      if (!bytesEqual(indexRoot, line)) {
        throw noteMismatch(`the remote's ${CHECKPOINT_NOTE} vouch-index/v1 root at size ${cp.size} is not the completeness index of the verified chain`, {
          size: cp.size,
          note_index_root: base64Encode(line),
          index_root: base64Encode(indexRoot),
        });
      }
    }
  }

  /** Current retry delay while the remote fails, 0 when healthy. */
  private get backoffMs(): number {
    if (this.transportFailures === 0) return 0;
    return Math.min(this.backoffMaxMs, this.backoffInitialMs * 2 ** Math.min(30, this.transportFailures - 1));
  }

  status(): SyncStatus {
    const vs = this.state.verifierState;
    const now = this.now();
    return {
      remote: shownUrl(this.remote),
      lastSuccess: this.lastSuccess,
      lastAttempt: this.lastAttempt,
      lastError: this.lastError,
      remoteHead: this.remoteHead,
      remoteSize: this.remoteSize,
      localSize: vs.size,
      localHead: vs.head,
      consecutiveFailures: this.failures,
      staleSeconds: Math.max(0, Math.floor((now - (this.lastSuccess ?? this.createdAt)) / 1000)),
      syncing: this.inflight !== null,
      behindBlocks: (() => {
        const known = Math.max(this.remoteSize ?? -1, this.hinted ?? -1);
        return known < 0 ? null : Math.max(0, known - vs.size);
      })(),
      hintedSize: this.hinted,
      notifications: this.notices,
      backoffMs: this.backoffMs,
      nextAttempt: this.nextAt,
    };
  }

  /**
   * A sync hint (POST /v1/sync from the authority or a post-receive hook):
   * counted, its `size` (when given) kept for `behindBlocks`, and a sync run
   * now. The hint is trusted for nothing else: what the sync fetches is
   * verified as always.
   */
  hint(size: number | null, head: string | null = null): Promise<SyncOutcome> {
    this.notices++;
    if (size !== null && (this.hinted === null || size > this.hinted)) this.hinted = size;
    if (head !== null) this.hintedHead = head;
    return this.syncNow();
  }

  /** Seconds since the last success (since this sync was created when there was none), not rounded. */
  ageSeconds(): number {
    return Math.max(0, (this.now() - (this.lastSuccess ?? this.createdAt)) / 1000);
  }

  /** Sync now and then every interval (sooner, with backoff, while the remote fails). */
  start(): void {
    if (this.started) return;
    this.started = true;
    this.stopping = false;
    this.schedule(0);
  }

  /** Stop the schedule, cancel a fetch in progress and wait for the sync to wind down. */
  async stop(): Promise<void> {
    this.started = false;
    this.stopping = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.nextAt = null;
    this.abort?.abort(new Error('the mirror sync was stopped'));
    await Promise.allSettled([this.inflight, this.queued].filter((p) => p !== null));
  }

  /**
   * Run a sync now. While one runs, the call waits for it and runs one more
   * (callers that ask at the same time share it): never two at once, and a
   * push made before the call is always seen.
   */
  syncNow(): Promise<SyncOutcome> {
    if (!this.inflight) return this.launch();
    if (!this.queued) {
      this.queued = this.inflight.then(() => {
        this.queued = null;
        return this.stopping ? { result: 'cancelled' as const } : this.launch();
      });
    }
    return this.queued;
  }

  private launch(): Promise<SyncOutcome> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.nextAt = null;
    const run = this.runOnce()
      .catch((e: unknown): SyncOutcome => {
        // runOnce reports every failure as an outcome; this only guards the schedule.
        this.log.error('mirror sync: unexpected failure', { message: (e as Error)?.message ?? String(e) });
        return { result: 'failed', code: 'internal_error', message: 'unexpected failure' };
      })
      .then((outcome) => {
        this.inflight = null;
        if (!this.queued) {
          this.schedule(outcome.result === 'failed' ? this.backoffMs : this.intervalMs);
        }
        return outcome;
      });
    this.inflight = run;
    return run;
  }

  private schedule(ms: number): void {
    if (!this.started) return;
    if (this.timer) clearTimeout(this.timer);
    this.nextAt = this.now() + ms;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.syncNow();
    }, ms);
    this.timer.unref();
  }

  private async runOnce(): Promise<SyncOutcome> {
    this.lastAttempt = this.now();
    const ac = new AbortController();
    this.abort = ac;
    const ctx: Record<string, unknown> = {};
    try {
      const outcome = await this.attempt(ac.signal, ctx);
      this.lastSuccess = this.now();
      if (this.downSince !== null) {
        this.log.info('mirror sync: the remote is reachable again', {
          remote: shownUrl(this.remote),
          down_seconds: Math.round((this.lastSuccess - this.downSince) / 1000),
          failed_attempts: this.transportFailures,
        });
        this.downSince = null;
      }
      this.lastError = null;
      this.failures = 0;
      this.transportFailures = 0;
      this.refused = null;
      return outcome;
    } catch (e) {
      if (ac.signal.aborted) return { result: 'cancelled' };
      const err = e instanceof VouchError ? e : new VouchError('internal_error', `mirror sync failed: ${(e as Error)?.message ?? String(e)}`, { cause: e });
      this.lastError = { code: err.code, message: err.message };
      this.failures++;
      const vs = this.state.verifierState;
      if (err.kind === 'integrity') {
        this.transportFailures = 0;
        const commit = typeof ctx.remote_commit === 'string' ? ctx.remote_commit : null;
        const again = this.refused !== null && this.refused.commit === commit && this.refused.localHead === vs.head;
        if (commit !== null) this.refused = { commit, localHead: vs.head, error: err };
        if (again) {
          this.log.warn('mirror sync: the remote is still at a refused head; serving the last verified head', {
            code: err.code,
            remote: shownUrl(this.remote),
            remote_commit: commit,
          });
        } else {
          this.log.error('mirror sync refused the remote head; serving the last verified head', {
            code: err.code,
            message: err.message,
            index: err.index ?? null,
            remote: shownUrl(this.remote),
            ...ctx,
            local_size: vs.size,
            local_head: vs.head,
            local_commit: this.repo.head,
            ...(err.evidence ? { evidence: err.evidence } : {}),
            ...(err.resource ? { resource: err.resource } : {}),
          });
        }
        return { result: 'refused', code: err.code, message: err.message, commit };
      }
      this.transportFailures++;
      // Logged when the remote goes down, then at most once a minute while it stays down (status() counts every attempt).
      const at = this.now();
      const first = this.downSince === null;
      if (first || at - this.downLogged >= DOWN_LOG_MS) {
        if (first) this.downSince = at;
        this.downLogged = at;
        this.log.warn(
          first ? 'mirror sync failed; serving the last verified head' : 'mirror sync: the remote is still unreachable; serving the last verified head',
          {
            code: err.code,
            message: err.message,
            remote: shownUrl(this.remote),
            consecutive_failures: this.failures,
            down_seconds: Math.round((at - this.downSince!) / 1000),
            retry_in_ms: this.backoffMs,
            local_size: vs.size,
            ...(first ? {} : { next_log_in_ms: DOWN_LOG_MS }),
          },
        );
      }
      return { result: 'failed', code: err.code, message: err.message };
    } finally {
      this.abort = null;
      this.repo.dropFetched();
    }
  }

  private async attempt(signal: AbortSignal, ctx: Record<string, unknown>): Promise<SyncOutcome> {
    const hinted = this.hintedHead;
    this.hintedHead = null;
    if (hinted !== null && hinted !== this.repo.head) {
      // The hinted commit first (one request: no ref advertisement). Only a verified extension is taken;
      // anything else (refused by the remote, not newer, not verifying) is judged again from the remote's refs.
      const hctx: Record<string, unknown> = {};
      try {
        const out = await this.adopt(signal, hctx, hinted);
        if (out !== null) {
          Object.assign(ctx, hctx);
          return out;
        }
      } catch (e) {
        if (signal.aborted) throw e;
        this.log.debug('mirror sync: the hinted commit was not taken; reading the remote refs', {
          remote: shownUrl(this.remote),
          hinted,
          message: (e as Error)?.message ?? String(e),
        });
      }
      this.repo.dropFetched();
    }
    return (await this.adopt(signal, ctx, null))!;
  }

  /**
   * Fetch the remote's main (or the `hinted` commit), verify and adopt it.
   * With `hinted`: null when it is not a new commit beyond the verified head
   * (nothing changed); the remote's head in status() is only set once taken.
   */
  private async adopt(signal: AbortSignal, ctx: Record<string, unknown>, hinted: string | null): Promise<SyncOutcome | null> {
    const local = this.state.verifierState;
    const n = local.size;
    const t0 = performance.now();
    const { commit } = await this.repo.fetch(this.remote, { ...this.fetchOpts, signal }, hinted);
    const tFetched = performance.now();
    ctx.remote_commit = commit;
    if (hinted !== null && (commit === this.repo.head || commit !== hinted)) return null;
    if (hinted === null) this.remoteHead = commit;
    if (commit === this.repo.head && this.repo.size === n) {
      this.remoteSize = n;
      return { result: 'up_to_date', commit, size: n };
    }
    // The same remote head as last time, against the same verified head: same answer, no second verification.
    if (this.refused && this.refused.commit === commit && this.refused.localHead === local.head) throw this.refused.error;

    // 1. Does the remote extend what we verified? (read from the fetched commit's objects only)
    let snap: ChainSnapshot;
    try {
      snap = await this.repo.snapshotAt(commit);
    } catch (e) {
      if (e instanceof VouchError && e.code === 'not_a_chain') throw rewritten(`the remote's main (${commit}) holds no chain: ${e.message}`);
      throw e;
    }
    if (hinted !== null && snap.size <= n) return null;
    if (hinted === null) this.remoteSize = snap.size;
    ctx.remote_size = snap.size;
    ctx.remote_head = await this.recordHashAt(snap, snap.size - 1);
    const cpText = await snap.readFile(CHECKPOINT);
    const cpRead = cpText === null ? null : readJson(cpText);
    const cp: unknown = cpRead === null || cpRead.error !== null ? null : cpRead.value;
    const cpSize = isRecord(cp) && typeof cp.size === 'number' ? cp.size : null;
    const cpHead = isRecord(cp) && typeof cp.head === 'string' ? cp.head : null;
    ctx.remote_checkpoint = cpText === null ? null : { size: cpSize, head: cpHead };
    if (snap.size < n) throw rewritten(`the remote has ${snap.size} blocks, ${n} are verified here`);
    if (cpSize !== null && cpSize < n) throw rewritten(`the remote's checkpoint says ${cpSize} blocks, ${n} are verified here`);
    const atHead = await this.recordHashAt(snap, n - 1);
    if (atHead !== local.head) {
      throw rewritten(`block ${n - 1} on the remote is not the verified head`, { index: n - 1, verified: local.head, remote: atHead });
    }
    if (cpSize === n && cpHead !== null && cpHead !== local.head) {
      throw rewritten(`the remote's checkpoint names another head at size ${n}`, { verified: local.head, checkpoint_head: cpHead });
    }
    const changes = await this.repo.changesTo(commit);
    const lost = changes.filter((c) => c.path.startsWith('blocks/') && c.change !== 'added');
    if (lost.length > 0) {
      throw rewritten(`the remote changes or removes ${lost.length} existing file(s) under blocks/, first ${lost[0]!.path}`, {
        paths: lost.slice(0, 10).map((c) => `${c.change} ${c.path}`),
      });
    }
    const stray = changes.find((c) => c.path.startsWith('blocks/') && parseBlockPath(c.path) === null);
    if (stray)
      throw new VouchError('malformed', `malformed: unexpected file ${stray.path} in the remote's blocks/ directory`, { index: null, resource: stray.path });

    // 2. Verify every new block from the verified state, then the checkpoint.
    // Revokes are checked against the verified blocks before anything moves (I-JSON and revoke targets as applyCommitted checks them).
    const verifier = new ChainVerifier({
      backend: nodeBackend,
      pinnedPublicKey: this.pinned,
      state: local,
      endorsedBefore: (h) => this.state.endorsedBefore(h),
    });
    const blocks: Block[] = [];
    for (let i = n; i < snap.size; i++) {
      let text: string;
      try {
        text = await snap.readBlock(i);
      } catch (e) {
        if (e instanceof VouchError && e.code === 'not_found')
          throw new VouchError('index_gap', `index_gap at block ${i}: the remote has no ${blockPath(i)}`, { index: i });
        throw e;
      }
      const { value, error } = readJson(text);
      if (error !== null) throw new VouchError('malformed', `malformed at block ${i}: ${error}`, { index: i });
      blocks.push(verifier.add(value));
    }
    if (cpText === null) throw new VouchError('checkpoint_mismatch', 'checkpoint_mismatch: the remote has no checkpoint.json', { index: null });
    if (cpRead?.error) throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: the remote checkpoint.json: ${cpRead.error}`, { index: null });
    verifier.verifyCheckpoint(cp);
    await this.checkNote(snap, blocks, ctx, verifier.state);
    if (signal.aborted) throw new VouchError('io_error', 'fetch cancelled');

    // 3. Adopt: branch, working tree and index first (the commit point is the ref move), then the served state.
    const tVerified = performance.now();
    await this.repo.fastForward(commit); // also catches the working tree up if an earlier one was interrupted
    for (const w of this.repo.warnings.splice(0)) this.log.warn('chain repository', { warning: w });
    this.state.applyCommitted(blocks, cpText);
    this.edge?.advance(blocks.map((b) => entryOf(b.record_hash)));
    const size = this.state.verifierState.size;
    if (hinted !== null) {
      this.remoteHead = commit;
      this.remoteSize = size;
    }
    this.log.info('mirror sync: accepted the remote head', {
      remote: shownUrl(this.remote),
      remote_commit: commit,
      from: n,
      size,
      blocks: blocks.length,
      head: this.state.verifierState.head,
      ...(hinted !== null ? { hinted: true } : {}),
      ms: { fetch: Math.round(tFetched - t0), verify: Math.round(tVerified - tFetched), adopt: Math.round(performance.now() - tVerified) },
    });
    return { result: 'updated', commit, from: n, size };
  }

  /** record_hash of block `index` at the snapshot, or null when it is missing or unreadable. */
  private async recordHashAt(snap: ChainSnapshot, index: number): Promise<string | null> {
    if (index < 0 || index >= snap.size) return null;
    try {
      const v = JSON.parse(await snap.readBlock(index)) as unknown;
      return isRecord(v) && typeof v.record_hash === 'string' ? v.record_hash : null;
    } catch {
      return null;
    }
  }
}

export interface MirrorOptions {
  /** Pinned authority key (base64): block 0 must declare it. */
  pinnedPublicKey?: string | null;
  log?: Logger;
  fetch?: FetchOptions;
}

/**
 * The mirror's chain directory at startup: clone `remote` into a missing or
 * empty `dir` (or one holding an interrupted clone), open an existing chain
 * (the sync brings it up to date later; what `open()` repaired is in
 * `repo.repairs` for the caller to log).
 * @throws VouchError `not_a_chain` when `dir` holds something else;
 *   `untrusted_authority` when block 0 declares another key than the pinned
 *   one (the clone is kept: fix the pinned key or empty the directory).
 */
export async function prepareMirror(dir: string, remote: string, options: MirrorOptions = {}): Promise<{ repo: MirrorStore; cloned: boolean }> {
  const abs = resolve(dir);
  const log = options.log;
  let st;
  try {
    st = statSync(abs);
  } catch {
    st = null;
  }
  if (st && !st.isDirectory()) throw new VouchError('not_a_chain', `chain.dir ${abs} is not a directory`);
  if (st && isInterruptedClone(abs)) {
    log?.warn('removing an interrupted clone of the chain', { dir: abs });
    for (const name of readdirSync(abs)) rmSync(join(abs, name), { recursive: true, force: true });
  }
  let repo: MirrorStore;
  let cloned = false;
  if (!st || readdirSync(abs).length === 0) {
    log?.info('cloning the chain', { dir: abs, remote: shownUrl(remote) });
    const t0 = performance.now();
    repo = await cloneChain(remote, abs, options.fetch);
    cloned = true;
    log?.info('cloned the chain', { dir: abs, blocks: repo.size, commit: repo.head, ms: Math.round(performance.now() - t0) });
  } else {
    try {
      repo = await openMirror(abs);
    } catch (e) {
      if (e instanceof VouchError && e.code === 'not_a_chain') {
        const what = existsSync(join(abs, '.git')) ? 'a git repository that is not a vouch chain' : 'files that are not a vouch chain';
        throw new VouchError(
          'not_a_chain',
          `chain.dir ${abs} holds ${what} (${e.message}); point chain.dir at an empty directory to mirror ${shownUrl(remote)}`,
          { cause: e },
        );
      }
      throw e;
    }
  }
  if (options.pinnedPublicKey) {
    const authority = parseBlockText(repo.readBlockFile(0), 0).payload.authority;
    const pinned = base64Decode(options.pinnedPublicKey);
    const declared = authority ? base64Decode(authority.public_key) : null;
    if (pinned === null || pinned.length !== 32) throw new VouchError('key_error', 'the pinned public key is not base64 of a 32-byte ed25519 key');
    if (declared === null || !bytesEqual(pinned, declared)) {
      throw new VouchError(
        'untrusted_authority',
        `untrusted_authority at block 0: the chain at ${shownUrl(remote)} is signed by key ${authority?.public_key ?? '(none)'}, not the pinned key`,
        {
          index: 0,
          evidence: { pinned: options.pinnedPublicKey, chain: authority?.public_key ?? null, dir: abs },
        },
      );
    }
  }
  return { repo, cloned };
}
