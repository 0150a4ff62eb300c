/**
 * Submit (docs/spec/design.md §3.5): fetch and hash a request's artifacts,
 * decide posted / unchanged / semver_conflict, sign and append, through one
 * writer loop that folds every waiting submit, revoke and key statement
 * into rounds (group commit; it yields a turn before taking the queue).
 * Owns: the authority's append order and the submit counters (`stats()`).
 * Trusts: `index`/`head()` to match the branch (checked every round);
 * `repo.append` to commit all or nothing; `digest` to hash only a complete
 * 200 body and to refuse what the config forbids.
 * Must hold: an answer is given only after its commit is on the branch; a
 * failed append leaves no phantom block and fails the whole round; one
 * URL+semver is never signed twice; every commit carries the signed note of
 * its size; a blocks-form submit is all or none; a revoke never revokes
 * twice; a key statement is committed alone and checked by applyKeyEvent.
 */
import { indexExtensionLine } from '../../chain/index-proof.ts';
import { VouchError } from '../../chain/errors.ts';
import { type Block, formatDateTime } from '../../chain/block.ts';
import { buildCheckpoint, buildEndorseBlock, buildKeyBlock, buildRevokeBlock, type EndorsementInput } from '../../chain/build.ts';
import { applyKeyEvent, KeyEventError, parseSignedStatement, type KeyState, type SignedStatement } from '../../chain/key-events.ts';
import { resolveRevokeTarget } from '../../chain/revoke.ts';
import type { CryptoBackend, HashAlgorithm, Signer } from '../../chain/crypto-backend.ts';
import { parseArtifactHash } from '../../chain/hash-algorithms.ts';
import type { ChainIndex, IndexedVersion } from '../../chain/select.ts';
import type { ChainStore } from '../../store/chain-repo.ts';
import { appendSigned, type Committed, entryOf } from '../../store/chain-append.ts';
import { noteSigner } from '../../platform/note-signer.ts';
import { claimKind, parseRevokeRequest, parseSubmitBody, type RevokeRequest, type SubmitRequest } from '../routes/submit-request.ts';
import type { ClaimKind } from '../../artifacts/claim-digest.ts';

export interface SubmitterDeps {
  repo: ChainStore;
  /** The signing key when there are no `keys` (a submitter on its own, in tests): it signs everything, and key statements are refused. */
  signer?: Signer;
  /** The authority's online keys (gateway/chain/online-keys.ts): the key in force, the note's signers, key statements. */
  keys?: SubmitterKeys;
  backend: CryptoBackend;
  /** The live in-memory index of the verified chain; the submitter adds what it appends. */
  index: ChainIndex;
  /** The current head block (must follow the index). */
  head: () => Block;
  /** Called once per commit, after the index has the new blocks. Must not throw (errors are logged). */
  /** The blocks just committed, with their texts and the checkpoint's as the branch holds them. */
  onAppended?: (blocks: Block[], committed: Committed) => void;
  /** Fetches and hashes an artifact; returns `<algorithm>:<hex>`. */
  digest: (url: string, algorithm: HashAlgorithm, signal?: AbortSignal) => Promise<{ artifactHash: string }>;
  /**
   * Fetches a URL ONCE and hashes it under every kind asked (artifact hash algorithms, `sha1`, `sha384`,
   * Go's `h1:`): the entries with claims are hashed this way, so the claims are checked on the very bytes
   * whose hash is signed. Without it a submit with claims is refused.
   */
  claims?: (url: string, kinds: ClaimKind[], signal?: AbortSignal) => Promise<Map<ClaimKind, string>>;
  /** Milliseconds since the epoch. */
  now: () => number;
  /** The checkpoint note every commit carries (issue 17); without it, commits carry none (tests of the submitter alone). */
  note?: SubmitterNote;
}

/** The online keys as the writer uses them (gateway/chain/online-keys.ts AuthorityKeys). */
export interface SubmitterKeys {
  /** The online key in force: signs blocks and checkpoint.json. */
  signer(): Signer;
  /** The note's signers at `now` (the key in force first; the previous key too during a rollover). */
  noteSigners(now: number): readonly Signer[];
  /** The committed chain's key state. */
  state(): KeyState;
  /**
   * `signed` checked as the block at index `at`, with the key that signs its block and the note's signers.
   * @throws KeyEventError (refused), VouchError key_unavailable
   */
  plan(signed: SignedStatement, at: number, now: number): { next: KeyState; signer: Signer; noteSigners: readonly Signer[]; commit(postedMs: number): void };
}

/** What the submitter needs to sign the checkpoint note of a commit. */
export interface SubmitterNote {
  /** The log's origin (the committed note's, else the configured one). */
  origin: string;
  /** RFC 6962 root of the committed chain's record hashes followed by `entries` (a round's, in order); changes nothing. */
  rootWith(entries: readonly Uint8Array[]): Uint8Array;
  /** Told once the commit holding `entries` is on the branch. Must not throw. */
  committed?(entries: readonly Uint8Array[]): void;
  /** The completeness index root once `blocks` follow the head (docs/spec/index.md 5); changes nothing. */
  indexRootWith?(blocks: readonly Block[]): Uint8Array;
}

export interface SubmitterOptions {
  /** Origin fetches in flight at once, over all submits (default 8). */
  fetchConcurrency?: number;
  /** Most submits folded into one commit (default 256). */
  maxBatchSubmits?: number;
  /** Most endorsement entries in one commit (default 10,000; a single larger submit still goes alone). */
  maxBatchEntries?: number;
  /**
   * How long the writer waits before taking a batch, so that submits whose
   * fetch completes meanwhile join the commit. 0 (default) = one event-loop
   * turn: the commit itself blocks the loop for a while, and without this
   * the first ready submit would always commit alone.
   */
  lingerMs?: number;
  /** Where problems after a commit point are reported (default console.error). */
  log?: (message: string) => void;
}

/** One entry of a submit fetched and hashed (the NDJSON progress of POST /v1/submit). */
export interface SubmitProgress {
  done: number;
  total: number;
  url: string;
}

export interface SubmitResult {
  httpStatus: 200 | 201;
  body: Record<string, unknown>;
}

export interface SubmitterStats {
  /** Submits answered 201. */
  posted: number;
  /** Revokes answered 201. */
  revoked: number;
  /** Key statements answered 201. */
  keyEvents: number;
  /** Submits answered 200 unchanged. */
  unchanged: number;
  /** Submits answered 409 semver_conflict. */
  conflict: number;
  /** Submits refused as bad_request. */
  invalid: number;
  /** Every other failure (origin, append, internal). */
  failed: number;
  /** Commits written (each holds >= 1 block). */
  commits: number;
  /** Blocks written over all commits (blocks / commits = mean blocks per commit). */
  blocks: number;
  maxBlocksPerCommit: number;
  lastBlocksPerCommit: number;
  /** Rounds whose append failed (nothing written). */
  commitFailures: number;
  /** Submits waiting for the writer right now. */
  queued: number;
}

/** URL -> algorithm -> `<algorithm>:<hex>` of the bytes this submit fetched. */
/** Per URL: `<alg>:<hex>` under each algorithm hashed, and `sha1:`/`sha384:`/`h1:` when a claim needed one. */
type Digests = Map<string, Map<ClaimKind, string>>;

type Decision =
  | { kind: 'post' }
  | { kind: 'unchanged'; version: IndexedVersion; fromRound: boolean }
  | { kind: 'conflict'; error: VouchError; fromRound: boolean }
  /** A stored hash uses an algorithm this submit has not hashed with yet. */
  | { kind: 'rehash' };

const REHASH = Symbol('rehash');
type Outcome = SubmitResult | typeof REHASH;

/** A submit's blocks (one, or the blocks form's several: built in one round, all or none). */
interface PendingSubmit {
  kind: 'submit';
  reqs: SubmitRequest[];
  batch: boolean;
  digests: Digests;
  resolve: (o: Outcome) => void;
  reject: (e: unknown) => void;
}

/** A revocation queued behind the submits (one block, resolved against the index and the round). */
interface PendingRevoke {
  kind: 'revoke';
  req: RevokeRequest;
  resolve: (o: Outcome) => void;
  reject: (e: unknown) => void;
}

/** A key statement queued behind the submits: committed alone in its round. */
interface PendingKey {
  kind: 'key';
  signed: SignedStatement;
  resolve: (o: Outcome) => void;
  reject: (e: unknown) => void;
}

type Pending = PendingSubmit | PendingRevoke | PendingKey;

/** Endorsement entries a queued request adds to a commit. */
function weightOf(p: Pending): number {
  return p.kind === 'submit' ? p.reqs.reduce((n, r) => n + r.entries.length, 0) : 1;
}

const MAX_ATTEMPTS = 4;

class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  constructor(private readonly max: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.max) await new Promise<void>((r) => this.waiting.push(r));
    this.active++;
    try {
      return await fn();
    } finally {
      this.active--;
      this.waiting.shift()?.();
    }
  }
}

/** The 201 body of a revoke: the new block, and the block it revokes. */
function revokeAnswer(block: Block, target: Block): SubmitResult {
  return {
    httpStatus: 201,
    body: {
      success: true,
      status: 'revoked',
      index: block.index,
      record_hash: block.record_hash,
      effective_date: block.payload.effective_date,
      revokes: { index: target.index, record_hash: target.record_hash, urls: target.payload.endorsements.map((e) => e.artifact_url) },
    },
  };
}

/** A statement applyKeyEvent refused: stale_statement (its sequence is used) or bad_statement, the reason named. */
function statementError(e: KeyEventError, signed: SignedStatement): VouchError {
  const st = signed.statement;
  return new VouchError(e.stale ? 'stale_statement' : 'bad_statement', e.why, { evidence: { action: st.action, sequence: st.sequence } });
}

function internal(message: string, cause?: unknown): VouchError {
  return new VouchError('internal_error', message, cause === undefined ? {} : { cause });
}

export class Submitter {
  private readonly deps: SubmitterDeps;
  private readonly limiter: Limiter;
  private readonly maxBatchSubmits: number;
  private readonly maxBatchEntries: number;
  private readonly lingerMs: number;
  private readonly log: (message: string) => void;
  private queue: Pending[] = [];
  private writing = false;
  /** Set when the index could not take a committed block: no further appends. */
  private broken: VouchError | null = null;
  private readonly counters: Omit<SubmitterStats, 'queued'> = {
    posted: 0,
    revoked: 0,
    keyEvents: 0,
    unchanged: 0,
    conflict: 0,
    invalid: 0,
    failed: 0,
    commits: 0,
    blocks: 0,
    maxBlocksPerCommit: 0,
    lastBlocksPerCommit: 0,
    commitFailures: 0,
  };

  constructor(deps: SubmitterDeps, options: SubmitterOptions = {}) {
    this.deps = deps;
    this.limiter = new Limiter(Math.max(1, options.fetchConcurrency ?? 8));
    this.maxBatchSubmits = Math.max(1, options.maxBatchSubmits ?? 256);
    this.maxBatchEntries = Math.max(1, options.maxBatchEntries ?? 10_000);
    this.lingerMs = Math.max(0, options.lingerMs ?? 0);
    this.log = options.log ?? ((m) => console.error(m));
  }

  stats(): SubmitterStats {
    return { ...this.counters, queued: this.queue.length };
  }

  /**
   * Handles one submit body (already JSON-parsed).
   * @throws VouchError bad_request, semver_conflict, origin_error,
   *   origin_timeout, too_large, io_error or internal_error.
   */
  async submit(body: unknown, onProgress?: (p: SubmitProgress) => void): Promise<SubmitResult> {
    try {
      const { requests, batch } = parseSubmitBody(body);
      const result = await this.process(requests, batch, onProgress);
      if (result.httpStatus === 201) this.counters.posted++;
      else this.counters.unchanged++;
      return result;
    } catch (e) {
      const err = e instanceof VouchError ? e : internal(`submit failed: ${(e as Error)?.message ?? String(e)}`, e);
      if (err.code === 'semver_conflict') this.counters.conflict++;
      else if (err.code === 'bad_request') this.counters.invalid++;
      else this.counters.failed++;
      throw err;
    }
  }

  /**
   * Handles one revoke body (already JSON-parsed): queued behind the submits
   * through the same writer, answered 201 once the revoke block is committed.
   * @throws VouchError bad_request, not_found, already_revoked, io_error or internal_error.
   */
  async revoke(body: unknown): Promise<SubmitResult> {
    try {
      const req = parseRevokeRequest(body);
      if (this.broken) throw this.broken;
      // Fast refusal against the committed chain; the writer decides again in its round.
      resolveRevokeTarget(this.deps.index, req.target, formatDateTime(this.deps.now()).slice(0, 10));
      const outcome = await new Promise<Outcome>((resolve, reject) => {
        this.queue.push({ kind: 'revoke', req, resolve, reject });
        void this.pump();
      });
      if (outcome === REHASH) throw internal('revoke: unexpected retry');
      this.counters.revoked++;
      return outcome;
    } catch (e) {
      const err = e instanceof VouchError ? e : internal(`revoke failed: ${(e as Error)?.message ?? String(e)}`, e);
      if (err.code === 'bad_request' || err.code === 'not_found' || err.code === 'already_revoked') this.counters.invalid++;
      else this.counters.failed++;
      throw err;
    }
  }

  /**
   * Handles one key statement file (already JSON-parsed, POST /v1/root):
   * checked against the committed key state at once, then queued behind
   * the submits and committed alone in its round (checked again there).
   * @throws VouchError bad_request (not a statement file), bad_statement,
   *   stale_statement, key_unavailable, io_error or internal_error.
   */
  async statement(body: unknown): Promise<SubmitResult> {
    try {
      const keys = this.deps.keys;
      if (keys === undefined) throw new VouchError('not_found', 'key statements are disabled: this writer has no key state');
      let signed: SignedStatement;
      try {
        signed = parseSignedStatement(body);
      } catch (e) {
        if (e instanceof KeyEventError) throw new VouchError('bad_request', `not a statement file: ${e.why}`);
        throw e;
      }
      if (this.broken) throw this.broken;
      // Fast refusal against the committed chain (no key file is read here); the writer decides again in its round.
      const at = this.deps.head().index + 1;
      try {
        applyKeyEvent(this.deps.backend, keys.state(), signed, at);
      } catch (e) {
        if (e instanceof KeyEventError) throw statementError(e, signed);
        throw e;
      }
      const outcome = await new Promise<Outcome>((resolve, reject) => {
        this.queue.push({ kind: 'key', signed, resolve, reject });
        void this.pump();
      });
      if (outcome === REHASH) throw internal('statement: unexpected retry');
      this.counters.keyEvents++;
      return outcome;
    } catch (e) {
      const err = e instanceof VouchError ? e : internal(`key statement failed: ${(e as Error)?.message ?? String(e)}`, e);
      if (err.code === 'bad_request' || err.code === 'bad_statement' || err.code === 'stale_statement' || err.code === 'key_unavailable')
        this.counters.invalid++;
      else this.counters.failed++;
      throw err;
    }
  }

  private async process(reqs: SubmitRequest[], batch: boolean, onProgress?: (p: SubmitProgress) => void): Promise<SubmitResult> {
    const digests: Digests = new Map();
    // The blocks form is fetched as one request: one pool over all its entries, one progress count.
    const all: SubmitRequest =
      reqs.length === 1
        ? reqs[0]!
        : {
            ...reqs[0]!,
            entries: reqs.flatMap((r) => r.entries.map((e) => ({ ...e, algorithm: e.algorithm ?? r.algorithm }))),
          };
    for (let attempt = 1; ; attempt++) {
      if (this.broken) throw this.broken;
      // Fetch and hash outside the writer, under every algorithm a comparison needs.
      await this.hash(all, digests, attempt === 1 ? onProgress : undefined);
      if (attempt === 1) this.checkClaims(all, digests);
      // Fast path against the committed chain: no need to wait for the writer.
      const ds = reqs.map((r) => this.decide(r, digests, null));
      if (!ds.some((d) => d.kind === 'rehash')) {
        const conflict = ds.find((d) => d.kind === 'conflict');
        if (conflict) throw conflict.error;
        if (ds.every((d) => d.kind === 'unchanged'))
          return this.result(
            reqs,
            batch,
            ds.map((d) => ({ httpStatus: 200, block: d.version.block })),
          );
        const outcome = await new Promise<Outcome>((resolve, reject) => {
          this.queue.push({ kind: 'submit', reqs, batch, digests, resolve, reject });
          void this.pump();
        });
        if (outcome !== REHASH) return outcome;
      }
      if (attempt >= MAX_ATTEMPTS) throw internal('submit: the chain kept changing under this request; try again');
    }
  }

  // ------------------------------------------------------------------ hashing

  /** Algorithms each URL must be hashed with: the requested one and those of the stored versions it is compared with. */
  private needs(req: SubmitRequest): Map<string, Set<ClaimKind>> {
    const out = new Map<string, Set<ClaimKind>>();
    for (const e of req.entries) {
      const algs = new Set<ClaimKind>([e.algorithm ?? req.algorithm]);
      for (const c of e.expect ?? []) algs.add(claimKind(c));
      const versions = this.deps.index.versions(e.url);
      const newest = versions[versions.length - 1];
      for (const v of versions) {
        if (v.entry.semver !== e.semver && v !== newest) continue;
        const h = parseArtifactHash(v.entry.artifact_hash);
        if (typeof h !== 'string') algs.add(h.algorithm);
      }
      out.set(e.url, algs);
    }
    return out;
  }

  private async hash(req: SubmitRequest, digests: Digests, onProgress?: (p: SubmitProgress) => void): Promise<void> {
    const jobs: { url: string; algorithm: ClaimKind | ClaimKind[] }[] = [];
    const left = new Map<string, number>();
    const claimed = new Set(req.entries.filter((e) => e.expect !== undefined).map((e) => e.url));
    for (const [url, algs] of this.needs(req)) {
      const missing = [...algs].filter((a) => !digests.get(url)?.has(a));
      if (missing.length === 0) {
        left.set(url, 0);
        continue;
      }
      // An entry with claims: one fetch for all its hashes. Others: a job per algorithm, as before.
      if (claimed.has(url) && !digests.has(url)) jobs.push({ url, algorithm: missing });
      else for (const algorithm of missing) jobs.push({ url, algorithm });
      left.set(url, claimed.has(url) && !digests.has(url) ? 1 : missing.length);
    }
    if (jobs.length === 0) return;
    const total = req.entries.length;
    let done = req.entries.filter((e) => left.get(e.url) === 0).length;
    const finished = (url: string) => {
      const n = left.get(url)! - 1;
      left.set(url, n);
      if (n === 0 && onProgress) {
        try {
          onProgress({ done: ++done, total, url });
        } catch {
          /* a progress sink never fails a submit */
        }
      }
    };
    const ac = new AbortController();
    let first: unknown;
    let firstUrl = '';
    let failed = false;
    await Promise.all(
      jobs.map((job) =>
        this.limiter.run(async () => {
          if (ac.signal.aborted) return;
          try {
            const kind = job.algorithm;
            if (Array.isArray(kind)) {
              if (!this.deps.claims) throw new VouchError('bad_request', `${job.url}: this authority cannot check claims (expect)`, { resource: job.url });
              const got = await this.deps.claims(job.url, kind, ac.signal);
              for (const k of kind) if (!got.has(k)) throw internal(`claims of ${job.url} returned no ${k}`);
              digests.set(job.url, new Map(got));
              finished(job.url);
              return;
            }
            if (kind === 'h1' || kind === 'sha1' || kind === 'sha384') throw internal(`${kind} hashed outside a claim`);
            const { artifactHash } = await this.deps.digest(job.url, kind, ac.signal);
            const parsed = parseArtifactHash(artifactHash);
            if (typeof parsed === 'string' || parsed.algorithm !== job.algorithm) {
              throw internal(`digest of ${job.url} returned ${JSON.stringify(artifactHash)}, not a ${job.algorithm} artifact hash`);
            }
            let m = digests.get(job.url);
            if (m === undefined) digests.set(job.url, (m = new Map()));
            m.set(job.algorithm, artifactHash);
            finished(job.url);
          } catch (e) {
            if (!failed) {
              failed = true;
              first = e;
              firstUrl = job.url;
            }
            ac.abort();
          }
        }),
      ),
    );
    if (failed) {
      if (first instanceof VouchError) throw first;
      throw new VouchError('origin_error', `${firstUrl}: cannot fetch the artifact: ${(first as Error)?.message ?? String(first)}`, {
        resource: firstUrl,
        cause: first,
      });
    }
  }

  /**
   * The client's claims (`expect`) against what was fetched: every entry
   * whose bytes hash otherwise is refused, all of them named in one
   * `hash_mismatch` (evidence.refused), and nothing of the block is signed.
   */
  private checkClaims(req: SubmitRequest, digests: Digests): void {
    const refused: { url: string; name: string; semver: string; expected: string[]; fetched: string[] }[] = [];
    for (const e of req.entries) {
      if (e.expect === undefined) continue;
      const mine = digests.get(e.url);
      if (e.expect.some((c) => mine?.get(claimKind(c)) === c)) continue;
      const fetched = [...new Set(e.expect.map((c) => mine?.get(claimKind(c)) ?? '?'))];
      refused.push({ url: e.url, name: e.name, semver: e.semver, expected: e.expect, fetched });
    }
    if (refused.length === 0) return;
    const first = refused[0]!;
    throw new VouchError(
      'hash_mismatch',
      `${refused.length} of ${req.entries.length} entries refused, nothing signed: ${first.name} ${first.semver} ${first.url} hashes ${first.fetched.join(' ')}, the claim is ${first.expected.join(' or ')}${refused.length > 1 ? ` (and ${refused.length - 1} more)` : ''}`,
      { resource: first.url, evidence: { refused } },
    );
  }

  // ------------------------------------------------------------------ decisions

  /**
   * posted / unchanged / conflict for a request, against the committed index
   * and (inside a round) the blocks built earlier in that round.
   */
  private decide(req: SubmitRequest, digests: Digests, round: Map<string, IndexedVersion[]> | null): Decision {
    let unchangedAll = true;
    let firstNewest: { version: IndexedVersion; fromRound: boolean } | null = null;
    let newestFromRound = false;
    for (const e of req.entries) {
      const committed = this.deps.index.versions(e.url);
      const pending = round?.get(e.url) ?? [];
      const mine = digests.get(e.url);
      const compare = (stored: string): 'same' | 'different' | 'unknown' => {
        const h = parseArtifactHash(stored);
        if (typeof h === 'string') return 'different';
        const got = mine?.get(h.algorithm);
        return got === undefined ? 'unknown' : got === stored ? 'same' : 'different';
      };
      // Idempotency: the newest version under the URL has these bytes and this semver.
      const newest = pending[pending.length - 1] ?? committed[committed.length - 1];
      const fromRound = pending.length > 0;
      let same = false;
      if (newest !== undefined && newest.entry.semver === e.semver) {
        const c = compare(newest.entry.artifact_hash);
        if (c === 'unknown') return { kind: 'rehash' };
        same = c === 'same';
      }
      if (!same) unchangedAll = false;
      else {
        if (firstNewest === null) firstNewest = { version: newest!, fromRound };
        if (fromRound) newestFromRound = true;
      }
    }
    if (unchangedAll && firstNewest !== null) return { kind: 'unchanged', version: firstNewest.version, fromRound: newestFromRound };
    // Conflicts: the same URL + semver signed with other bytes.
    for (const e of req.entries) {
      const mine = digests.get(e.url);
      const lists: [readonly IndexedVersion[], boolean][] = [
        [this.deps.index.versions(e.url), false],
        [round?.get(e.url) ?? [], true],
      ];
      for (const [list, fromRound] of lists) {
        for (const v of list) {
          if (v.entry.semver !== e.semver) continue;
          const h = parseArtifactHash(v.entry.artifact_hash);
          const got = typeof h === 'string' ? undefined : mine?.get(h.algorithm);
          if (typeof h !== 'string' && got === undefined) return { kind: 'rehash' };
          if (got === v.entry.artifact_hash) continue;
          const error = new VouchError(
            'semver_conflict',
            `${e.url} ${e.semver} is already signed in block ${v.block.index} with ${v.entry.artifact_hash}, not ${got ?? mine?.get(e.algorithm ?? req.algorithm) ?? '?'}`,
            { resource: e.url, evidence: { block: v.block.index, record_hash: v.block.record_hash, signed: v.entry.artifact_hash, fetched: got ?? null } },
          );
          return { kind: 'conflict', error, fromRound };
        }
      }
    }
    return { kind: 'post' };
  }

  private answer(req: SubmitRequest, httpStatus: 200 | 201, block: Block): SubmitResult {
    const body: Record<string, unknown> = {
      success: true,
      status: httpStatus === 201 ? 'posted' : 'unchanged',
      url: req.entries[0]!.url,
      index: block.index,
      record_hash: block.record_hash,
    };
    if (req.form === 'multi') body.urls = req.entries.map((e) => e.url);
    return { httpStatus, body };
  }

  /**
   * A submit's answer: the one block's (above), or for the blocks form 201
   * when any block was posted, each block's status, index and record hash
   * in `blocks` (index and record_hash: the first posted block's).
   */
  private result(reqs: SubmitRequest[], batch: boolean, parts: { httpStatus: 200 | 201; block: Block }[]): SubmitResult {
    if (!batch) return this.answer(reqs[0]!, parts[0]!.httpStatus, parts[0]!.block);
    const first = parts.find((p) => p.httpStatus === 201) ?? parts[0]!;
    return {
      httpStatus: first.httpStatus,
      body: {
        success: true,
        status: first.httpStatus === 201 ? 'posted' : 'unchanged',
        index: first.block.index,
        record_hash: first.block.record_hash,
        blocks: parts.map((p, k) => ({
          status: p.httpStatus === 201 ? 'posted' : 'unchanged',
          index: p.block.index,
          record_hash: p.block.record_hash,
          entries: reqs[k]!.entries.length,
        })),
      },
    };
  }

  // ------------------------------------------------------------------ the writer

  private async pump(): Promise<void> {
    if (this.writing) return;
    this.writing = true;
    try {
      while (this.queue.length > 0) {
        await new Promise<void>((r) => (this.lingerMs > 0 ? setTimeout(r, this.lingerMs) : setImmediate(r)));
        let entries = 0;
        let n = 0;
        // A key statement commits alone: the blocks after it are signed by the key it puts in force.
        if (this.queue[0]!.kind === 'key') n = 1;
        else
          while (n < this.queue.length && n < this.maxBatchSubmits && this.queue[n]!.kind !== 'key') {
            const size = weightOf(this.queue[n]!);
            if (n > 0 && entries + size > this.maxBatchEntries) break;
            entries += size;
            n++;
          }
        const batch = this.queue.splice(0, n);
        try {
          await this.round(batch);
        } catch (e) {
          // round() settles its waiters itself; this is a last resort.
          const err = e instanceof VouchError ? e : internal(`submit round failed: ${(e as Error)?.message ?? String(e)}`, e);
          for (const p of batch) p.reject(err);
        }
      }
    } finally {
      this.writing = false;
    }
  }

  /** One group commit: decide, build, append once, then index and answer. */
  private async round(batch: Pending[]): Promise<void> {
    const { repo, index, backend } = this.deps;
    if (this.broken) {
      for (const p of batch) p.reject(this.broken);
      return;
    }
    const head = this.deps.head();
    if (index.size !== head.index + 1 || index.head?.record_hash !== head.record_hash || repo.size !== head.index + 1) {
      const err = internal(
        `the served chain (head ${head.index}, index ${index.size} blocks) and the repository (${repo.size} blocks) disagree; nothing appended`,
      );
      for (const p of batch) p.reject(err);
      return;
    }
    const now = this.deps.now();
    const first = batch[0]!;
    if (first.kind === 'key') return this.keyRound(first, head, now);
    const signer = this.signer();
    const today = formatDateTime(now).slice(0, 10);
    const roundVersions = new Map<string, IndexedVersion[]>();
    const blocks: Block[] = [];
    /** Settled after the commit (or with its error). */
    const after: { p: Pending; done: (block?: Block) => void }[] = [];
    let prev = head;
    /** Blocks named by the revokes of this round. */
    const roundRevoked = new Set<number>();

    for (const p of batch) {
      if (p.kind === 'key') {
        p.reject(internal('a key statement must be committed alone'));
        continue;
      }
      if (p.kind === 'revoke') {
        let block: Block;
        try {
          const target = resolveRevokeTarget(index, p.req.target, today, roundRevoked);
          block = buildRevokeBlock({
            prev,
            signer,
            backend,
            now,
            target,
            effectiveDate: p.req.effectiveDate ?? today,
            ...(p.req.comment !== undefined ? { comment: p.req.comment } : {}),
          });
          roundRevoked.add(target.index);
          blocks.push(block);
          prev = block;
          after.push({ p, done: () => p.resolve(revokeAnswer(block, target)) });
        } catch (e) {
          p.reject(e instanceof VouchError ? e : internal(`cannot build the revoke block: ${(e as Error)?.message ?? String(e)}`, e));
        }
        continue;
      }
      // Every block of the submit decided first: one conflict or retry stops all of them (the blocks form is all or none).
      const ds = p.reqs.map((r) => this.decide(r, p.digests, roundVersions));
      if (ds.some((d) => d.kind === 'rehash')) {
        // Answered after this round's commit, so the retry sees its blocks in the index.
        after.push({ p, done: () => p.resolve(REHASH) });
        continue;
      }
      const conflict = ds.find((d) => d.kind === 'conflict');
      if (conflict) {
        if (conflict.fromRound) after.push({ p, done: () => p.reject(conflict.error) });
        else p.reject(conflict.error);
        continue;
      }
      const parts: { httpStatus: 200 | 201; block: Block }[] = [];
      const built: Block[] = [];
      let fromRound = false;
      try {
        ds.forEach((d, k) => {
          if (d.kind === 'unchanged') {
            parts.push({ httpStatus: 200, block: d.version.block });
            fromRound ||= d.fromRound;
            return;
          }
          const req = p.reqs[k]!;
          const entries: EndorsementInput[] = req.entries.map((e) => ({
            url: e.url,
            artifactHash: p.digests.get(e.url)!.get(e.algorithm ?? req.algorithm)!,
            name: e.name,
            semver: e.semver,
            license: e.license,
            comment: e.comment,
          }));
          const block = buildEndorseBlock({
            prev: built[built.length - 1] ?? prev,
            signer,
            backend,
            now,
            entries,
            uns: req.uns,
            semver: req.semver,
            effectiveDate: req.effectiveDate ?? today,
            tags: req.tags,
            ...(req.comment !== undefined ? { comment: req.comment } : {}),
          });
          built.push(block);
          parts.push({ httpStatus: 201, block });
        });
      } catch (e) {
        p.reject(internal(`cannot build the block: ${(e as Error)?.message ?? String(e)}`, e));
        continue;
      }
      for (const block of built) {
        blocks.push(block);
        prev = block;
        for (const entry of block.payload.endorsements) {
          let list = roundVersions.get(entry.artifact_url);
          if (list === undefined) roundVersions.set(entry.artifact_url, (list = []));
          list.push({ block, entry });
        }
      }
      const result = this.result(p.reqs, p.batch, parts);
      if (built.length > 0 || fromRound) after.push({ p, done: () => p.resolve(result) });
      else p.resolve(result);
    }

    if (blocks.length === 0) {
      for (const a of after) a.done();
      return;
    }

    if (
      await this.append(
        blocks,
        signer,
        this.deps.keys?.noteSigners(now) ?? [signer],
        now,
        after.map((a) => a.p),
      )
    ) {
      for (const a of after) a.done();
    }
  }

  /** The key in force. */
  private signer(): Signer {
    const s = this.deps.keys?.signer() ?? this.deps.signer;
    if (s === undefined) throw internal('the submitter has no signing key');
    return s;
  }

  /** A round of one key statement: checked against the committed key state, its block signed by the key it puts in force. */
  private async keyRound(p: PendingKey, head: Block, now: number): Promise<void> {
    const keys = this.deps.keys!;
    let plan: ReturnType<SubmitterKeys['plan']>;
    let block: Block;
    try {
      plan = keys.plan(p.signed, head.index + 1, now);
      block = buildKeyBlock({ prev: head, signer: plan.signer, backend: this.deps.backend, now, signed: p.signed });
    } catch (e) {
      p.reject(
        e instanceof KeyEventError
          ? statementError(e, p.signed)
          : e instanceof VouchError
            ? e
            : internal(`cannot build the key block: ${(e as Error)?.message ?? String(e)}`, e),
      );
      return;
    }
    const committed = await this.append([block], plan.signer, plan.noteSigners, now, [p], () => plan.commit(Date.parse(block.posted)));
    if (!committed) return;
    const st = p.signed.statement;
    p.resolve({
      httpStatus: 201,
      body: {
        success: true,
        status: 'applied',
        index: block.index,
        record_hash: block.record_hash,
        sequence: st.sequence,
        action: st.action,
        online: { signer: st.online.signer, public_key: st.online.public_key },
      },
    });
  }

  /**
   * Appends `blocks` in one commit with the checkpoint of the last and its
   * note; then (`committedHook` first) the tree edge, the index and
   * `onAppended` follow. False when nothing was appended (`waiters` have
   * the error then).
   */
  private async append(
    blocks: Block[],
    signer: Signer,
    noteSigners: readonly Signer[],
    now: number,
    waiters: readonly Pending[],
    committedHook?: () => void,
  ): Promise<boolean> {
    const { repo, index } = this.deps;
    const prev = blocks[blocks.length - 1]!;
    let committed: Committed;
    try {
      const checkpoint = buildCheckpoint({ head: prev, signer, now });
      const note = this.deps.note;
      const noteInput = note
        ? {
            signer: noteSigner(noteSigners),
            origin: note.origin,
            root: note.rootWith(blocks.map((b) => entryOf(b.record_hash))),
            extensions: note.indexRootWith ? [indexExtensionLine(note.indexRootWith(blocks))] : [],
          }
        : null;
      committed = await appendSigned(repo, blocks, checkpoint, now, noteInput);
    } catch (e) {
      this.counters.commitFailures++;
      const err =
        e instanceof VouchError && e.code === 'io_error' ? e : internal(`the append failed, nothing was posted: ${(e as Error)?.message ?? String(e)}`, e);
      for (const p of waiters) p.reject(err);
      return false;
    }
    committedHook?.();

    // The commit is on the branch: now, and only now, the blocks exist.
    try {
      this.deps.note?.committed?.(blocks.map((b) => entryOf(b.record_hash)));
    } catch (e) {
      this.log(`submit: the tree edge could not follow blocks ${blocks[0]!.index}-${prev.index}: ${(e as Error)?.message ?? String(e)}`);
    }
    this.counters.commits++;
    this.counters.blocks += blocks.length;
    this.counters.lastBlocksPerCommit = blocks.length;
    this.counters.maxBlocksPerCommit = Math.max(this.counters.maxBlocksPerCommit, blocks.length);
    try {
      for (const b of blocks) index.add(b);
    } catch (e) {
      this.broken = internal(`blocks ${blocks[0]!.index}-${prev.index} are committed but the index refused them; restart the gateway`, e);
      this.log(this.broken.message);
    }
    if (!this.broken) {
      try {
        this.deps.onAppended?.(blocks, committed);
      } catch (e) {
        this.log(`submit: onAppended failed after blocks ${blocks[0]!.index}-${prev.index}: ${(e as Error)?.message ?? String(e)}`);
      }
    }
    return true;
  }
}
