/**
 * Prometheus metrics of one gateway (`GET /metrics`, text format 0.0.4): a
 * prom-client registry per `GatewayMetrics` with the default process
 * metrics, the request counter and latency histogram, and collect-time
 * metrics read from the other modules' counters when scraped, so those
 * modules know nothing of Prometheus.
 * Owns: metric names, help texts and label sets.
 * Trusts: the other modules' `stats()`/reports to be cheap, synchronous and
 * monotonic where exposed as counters.
 * Must hold: every label value is bounded (route templates, fixed lists,
 * configured witness names), never a raw path, URL or header; a scrape never
 * fails because one source throws; observing a request costs a few map
 * lookups and additions.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { GatewayContext } from '../context.ts';
import type { VerifiedFetcherStats } from '../../artifacts/verified-fetch.ts';
import type { MirrorStats } from '../../artifacts/mirror.ts';
import type { SubmitterStats } from '../chain/submitter.ts';
import type { ProxyRoutes } from '../routes/proxy-handler.ts';
import { FAULT, injectFault } from '../test-fault.ts';

/** Latency buckets in seconds: lookups answer in well under a millisecond, cold downloads take seconds. */
export const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

type Sample = [labels: Record<string, string>, value: number];

/**
 * Where on the request path an unexpected exception was caught: the
 * request listener, a handler (sync or its promise), a body reader, the
 * response's 'finish' or 'close' listener, the answer batch, the request
 * line, the request metrics, a proxy route's entry, node:http's
 * 'clientError', or a listener of the server.
 */
export type UnexpectedStage =
  | 'request'
  | 'handler'
  | 'handler_async'
  | 'body'
  | 'finish'
  | 'close'
  | 'batch'
  | 'log'
  | 'metrics'
  | 'proxy'
  | 'client_error'
  | 'server';

const METHOD_LIST = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'other'] as const;
const METHOD_INDEX = new Map<string, number>(METHOD_LIST.map((m, i) => [m, i]));
const OTHER_METHOD = METHOD_LIST.length - 1;

/**
 * One route's request figures, counted with plain numbers on every request
 * (a map lookup by route, one by a numeric method+status key, a bucket
 * search) and turned into samples only when scraped.
 */
class RouteStats {
  /** Requests by `method index * 1000 + status`, each in a cell of its own (one map lookup a request, no set). */
  readonly counts = new Map<number, { n: number }>();
  bytes = 0;
  /** Per-bucket (non-cumulative) counts of DURATION_BUCKETS, then +Inf. */
  readonly buckets = new Float64Array(DURATION_BUCKETS.length + 1);
  sum = 0;
  count = 0;
  constructor(readonly route: string) {}
}

/**
 * `vouch_http_request_duration_seconds` as a prom-client metric whose
 * samples are made from the routes' own bucket counts at scrape time (the
 * Histogram class hashes its label object on every observation).
 */
class DurationHistogram {
  readonly name = 'vouch_http_request_duration_seconds';
  readonly help = "Time from a request's arrival to the end of its answer, by route template.";
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  constructor(private readonly routes: Map<string, RouteStats>) {}
  get() {
    const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = [];
    for (const r of this.routes.values()) {
      let cumulative = 0;
      for (let i = 0; i <= DURATION_BUCKETS.length; i++) {
        cumulative += r.buckets[i]!;
        values.push({
          labels: { le: i < DURATION_BUCKETS.length ? DURATION_BUCKETS[i]! : '+Inf', route: r.route },
          value: cumulative,
          metricName: `${this.name}_bucket`,
        });
      }
      values.push({ labels: { route: r.route }, value: r.sum, metricName: `${this.name}_sum` });
      values.push({ labels: { route: r.route }, value: r.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
  reset(): void {}
}

export class GatewayMetrics {
  readonly registry = new Registry();
  /** Request figures by route label (see `RouteStats`), handed to prom-client when scraped. */
  private readonly routes = new Map<string, RouteStats>();
  /** Where the mirror's counters come from; absent: the verified fetcher's `mirror`. */
  private readonly mirrorSource: (() => MirrorStats) | null;
  /** The gateway's proxy routes, whose counters are read when scraped. */
  private readonly proxy: ProxyRoutes;

  /**
   * `proxy`: the gateway's proxy routes, whose counters are read when
   * scraped; `mirror`: where the mirror's counters come from.
   */
  constructor(
    private readonly ctx: GatewayContext,
    parts: { proxy: ProxyRoutes; mirror?: () => MirrorStats },
  ) {
    this.mirrorSource = parts.mirror ?? null;
    this.proxy = parts.proxy;
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    const routes = this.routes;
    new Counter({
      name: 'vouch_http_requests_total',
      help: 'HTTP requests answered, by route template, method and status (499: the client left before an answer).',
      labelNames: ['route', 'method', 'status'],
      registers,
      collect() {
        this.reset();
        for (const r of routes.values()) {
          for (const [key, c] of r.counts) {
            this.inc({ route: r.route, method: METHOD_LIST[Math.floor(key / 1000)]!, status: String(key % 1000) }, c.n);
          }
        }
      },
    });
    this.registry.registerMetric(new DurationHistogram(routes) as unknown as Parameters<Registry['registerMetric']>[0]);
    const unexpected = this.unexpectedCounts;
    new Counter({
      name: 'vouch_http_unexpected_errors_total',
      help: 'Exceptions on the request path that no handler expected (each answered 500 or its connection closed, logged at error with its stack), by the stage that threw.',
      labelNames: ['stage'],
      registers,
      collect() {
        this.reset();
        for (const [stage, n] of unexpected) this.inc({ stage }, n);
      },
    });
    new Counter({
      name: 'vouch_http_response_bytes_total',
      help: 'Bytes written to connections for answers (headers included), by route template.',
      labelNames: ['route'],
      registers,
      collect() {
        this.reset();
        for (const [route, r] of routes) this.inc({ route }, r.bytes);
      },
    });
    this.defineSourced();
  }

  /** Unexpected exceptions by stage (`unexpected`). */
  private readonly unexpectedCounts = new Map<UnexpectedStage, number>();

  /** Counts one unexpected exception on the request path at `stage` (a fixed name: the label stays bounded). */
  unexpected(stage: UnexpectedStage): void {
    this.unexpectedCounts.set(stage, (this.unexpectedCounts.get(stage) ?? 0) + 1);
  }

  /** Counts one answered request. */
  observe(route: string, method: string, status: number, seconds: number, bytes: number): void {
    if (FAULT !== null) injectFault('metrics', route);
    let r = this.routes.get(route);
    if (r === undefined) {
      r = new RouteStats(route);
      this.routes.set(route, r);
    }
    const key = (METHOD_INDEX.get(method) ?? OTHER_METHOD) * 1000 + status;
    let c = r.counts.get(key);
    if (c === undefined) {
      c = { n: 0 };
      r.counts.set(key, c);
    }
    c.n++;
    r.bytes += bytes;
    let b = 0;
    while (b < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[b]!) b++;
    r.buckets[b]!++;
    r.sum += seconds;
    r.count++;
  }

  /** The exposition text of every metric. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  // -------------------------------------------------------------------------

  private defineSourced(): void {
    const ctx = this.ctx;
    const proxy = this.proxy;
    const fetcher = (): VerifiedFetcherStats | null => statsOf<VerifiedFetcherStats>(ctx.artifacts);
    const mirror = (): MirrorStats | null => this.mirrorSource?.() ?? statsOf<MirrorStats>((ctx.artifacts as { mirror?: unknown }).mirror);
    const submitter = (): SubmitterStats | null => statsOf<SubmitterStats>(ctx.submitter);

    // Verified fetches from origins (docs/spec/design.md §3.4).
    this.counter('vouch_origin_fetches_total', 'Origin fetches started for downloads (each shared by every request that joined it).', () =>
      num(fetcher()?.originFetches),
    );
    this.counter('vouch_origin_fetch_bytes_total', 'Bytes received from origins for downloads.', () => num(fetcher()?.originBytes));
    this.counter('vouch_origin_fetches_joined_total', 'Download requests that joined an origin fetch already in flight (single flight).', () =>
      num(fetcher()?.joined),
    );
    this.counter(
      'vouch_origin_hashed_inline_bytes_total',
      'Bytes of large origin bodies hashed on the event loop because no hash worker was idle (hashed beside their receiving otherwise).',
      () => num(fetcher()?.hashedInline),
    );
    this.counter('vouch_hash_mismatches_total', 'Origin bytes that hashed differently from the signed artifact_hash (refused, never cached).', () =>
      num(fetcher()?.mismatches),
    );
    this.gauge('vouch_origin_fetches_in_flight', 'Artifacts being obtained from origins now.', () => num(fetcher()?.inflight));
    this.gauge('vouch_origin_fetches_active', 'Origin fetches running now.', () => num(fetcher()?.active));
    this.gauge('vouch_origin_fetches_queued', 'Origin fetches waiting for a slot.', () => num(fetcher()?.queued));

    // Mirror (content-addressed cache).
    this.counter(
      'vouch_mirror_hits_total',
      'Verified bytes served from the mirror, by tier.',
      () => {
        const s = mirror();
        return (
          s && [
            [{ tier: 'memory' }, s.hits.memory],
            [{ tier: 'disk' }, s.hits.disk],
          ]
        );
      },
      ['tier'],
    );
    this.counter('vouch_mirror_misses_total', 'Mirror lookups that found nothing (the origin is asked).', () => num(mirror()?.misses));
    this.counter(
      'vouch_mirror_evictions_total',
      'Artifacts evicted from the mirror, by tier.',
      () => {
        const s = mirror();
        return (
          s && [
            [{ tier: 'memory' }, s.evictions.memory],
            [{ tier: 'disk' }, s.evictions.disk],
          ]
        );
      },
      ['tier'],
    );
    this.counter('vouch_mirror_corrupt_total', 'Disk-tier files whose bytes no longer hashed to their name (deleted).', () => num(mirror()?.corrupt));
    this.counter('vouch_mirror_disk_write_errors_total', 'Failed writes to the disk tier.', () => num(mirror()?.diskWriteErrors));
    this.gauge(
      'vouch_mirror_bytes',
      'Bytes held by the mirror, by tier (spool: large artifacts being read outside the disk tier).',
      () => {
        const s = mirror();
        return (
          s && [
            [{ tier: 'memory' }, s.memory.bytes],
            ...(s.disk.enabled ? [[{ tier: 'disk' }, s.disk.bytes] as Sample] : []),
            [{ tier: 'spool' }, s.spool.bytes],
          ]
        );
      },
      ['tier'],
    );
    this.gauge(
      'vouch_mirror_entries',
      'Artifacts held by the mirror, by tier.',
      () => {
        const s = mirror();
        return (
          s && [
            [{ tier: 'memory' }, s.memory.entries],
            ...(s.disk.enabled ? [[{ tier: 'disk' }, s.disk.entries] as Sample] : []),
            [{ tier: 'spool' }, s.spool.files],
          ]
        );
      },
      ['tier'],
    );
    this.counter(
      'vouch_mirror_pool_buffers_total',
      'Buffers for large memory-tier artifacts, by how they were had (reused: recycled from an evicted artifact; dropped: not kept for reuse, the pool was full).',
      () => {
        const s = mirror();
        return (
          s && [
            [{ outcome: 'reused' }, s.pool.reused],
            [{ outcome: 'allocated' }, s.pool.allocated],
            [{ outcome: 'dropped' }, s.pool.dropped],
          ]
        );
      },
      ['outcome'],
    );
    this.gauge('vouch_mirror_pool_free_bytes', 'Bytes of recycled buffers waiting for reuse (beside the memory tier).', () => num(mirror()?.pool.freeBytes));
    this.gauge(
      'vouch_memory_budget_bytes',
      'Artifact bytes in memory charged to the memory budget, by use (in_flight: being received from origins; held: out of the memory tier, still being sent; tier: in the memory tier).',
      () => {
        const b = mirror()?.budget;
        return b
          ? [
              [{ use: 'in_flight' }, b.in_flight],
              [{ use: 'held' }, b.held],
              [{ use: 'tier' }, b.tier],
            ]
          : null;
      },
      ['use'],
    );
    this.gauge('vouch_memory_budget_limit_bytes', 'The memory budget (mirror.budget_bytes, default 2 x mirror.memory_bytes).', () =>
      num(mirror()?.budget?.limit),
    );
    this.counter('vouch_memory_budget_refused_total', 'Bodies not received into memory because the memory budget was spent (spooled to a file instead).', () =>
      num(mirror()?.budget?.refused),
    );
    this.gauge(
      'vouch_mirror_capacity_bytes',
      'Configured capacity of each mirror tier.',
      () => {
        const s = mirror();
        return s && [[{ tier: 'memory' }, s.memory.capacity], ...(s.disk.enabled ? [[{ tier: 'disk' }, s.disk.capacity] as Sample] : [])];
      },
      ['tier'],
    );

    // Chain.
    this.gauge('vouch_chain_ready', '1 when the chain is loaded and verified, else 0.', () => (ctx.state === null ? 0 : 1));
    this.gauge('vouch_chain_size', 'Blocks in the verified chain (absent until it is loaded).', () => ctx.state?.size ?? null);
    this.gauge('vouch_chain_head_index', 'Index of the head block (absent until the chain is loaded).', () => ctx.state?.head.index ?? null);
    this.gauge('vouch_chain_checkpoint_timestamp_seconds', "The signed checkpoint's timestamp (absent without a checkpoint).", () => {
      const t = ctx.state?.checkpoint?.timestamp;
      const ms = t === undefined ? NaN : Date.parse(t);
      return Number.isFinite(ms) ? ms / 1000 : null;
    });

    this.counter(
      'vouch_chain_whole_repacks_total',
      'Rewrites of a chain git packed (block blobs stored as deltas) with every object whole, by result (chain.repack_deltas).',
      () => {
        const w = ctx.wholePacks;
        return w
          ? [
              [{ result: 'done' }, w.done],
              [{ result: 'failed' }, w.failed],
            ]
          : null;
      },
      ['result'],
    );

    // Mirror mode: the sync loop; authority with a remote: the pusher.
    this.gauge('vouch_chain_sync_stale_seconds', 'Seconds since the last successful sync with the remote (+Inf: never; absent: not a mirror).', () => {
      const r = ctx.syncReport?.();
      return r ? (r.stale_seconds ?? Infinity) : null;
    });
    this.gauge(
      'vouch_chain_sync_lag_seconds',
      "Seconds the mirror may be behind: 0 when its last sync reached the remote's head and no newer size is known, else seconds since its last successful sync (absent: not a mirror).",
      () => {
        const r = ctx.syncReport?.();
        if (!r) return null;
        return r.behind_blocks === 0 ? 0 : (r.stale_seconds ?? Infinity);
      },
    );
    this.gauge(
      'vouch_chain_sync_behind_blocks',
      'Blocks the remote holds (last fetch or sync hint) that the mirror does not serve yet (absent: not a mirror, or not known yet).',
      () => ctx.syncReport?.()?.behind_blocks ?? null,
    );
    this.gauge(
      'vouch_chain_sync_last_error',
      '1, labelled by the code of the last sync error while syncs fail (absent: not a mirror or no error).',
      () => {
        const e = ctx.syncReport?.()?.last_error;
        return e ? [[{ code: e.code }, 1]] : null;
      },
      ['code'],
    );
    this.counter(
      'vouch_chain_sync_notifications_total',
      'Sync hints received on POST /v1/sync (absent: not a mirror).',
      () => ctx.syncReport?.()?.notifications ?? null,
    );
    this.counter(
      'vouch_chain_sync_hints_sent_total',
      'Sync hints the authority sent to its mirrors (authority.notify), by outcome (absent: none configured).',
      () => {
        const s = ctx.syncNotifyStats?.();
        return s
          ? [
              [{ outcome: 'sent' }, s.sent],
              [{ outcome: 'failed' }, s.failed],
            ]
          : null;
      },
      ['outcome'],
    );
    this.gauge(
      'vouch_chain_sync_consecutive_failures',
      'Sync attempts failed in a row (absent: not a mirror).',
      () => ctx.syncReport?.()?.consecutive_failures ?? null,
    );
    this.gauge(
      'vouch_chain_push_backlog_blocks',
      'Committed blocks not yet on the remote (absent: no push remote).',
      () => ctx.pushReport?.()?.backlog ?? null,
    );
    this.gauge(
      'vouch_chain_push_consecutive_failures',
      'Pushes failed in a row (absent: no push remote).',
      () => ctx.pushReport?.()?.consecutive_failures ?? null,
    );

    // Submits (authority mode).
    this.counter(
      'vouch_submits_total',
      'Submits answered, by outcome (absent: not an authority).',
      () => {
        const s = submitter();
        return (
          s && [
            [{ outcome: 'posted' }, s.posted],
            [{ outcome: 'unchanged' }, s.unchanged],
            [{ outcome: 'conflict' }, s.conflict],
            [{ outcome: 'invalid' }, s.invalid],
            [{ outcome: 'failed' }, s.failed],
            [{ outcome: 'revoked' }, s.revoked],
            [{ outcome: 'key_event' }, s.keyEvents ?? 0],
          ]
        );
      },
      ['outcome'],
    );
    this.counter('vouch_submit_commits_total', 'Commits written by submits (each holds one block or more).', () => num(submitter()?.commits));
    this.counter('vouch_submit_blocks_total', 'Blocks written by submits.', () => num(submitter()?.blocks));
    this.counter('vouch_submit_commit_failures_total', 'Submit rounds whose append failed (nothing written).', () => num(submitter()?.commitFailures));
    this.gauge('vouch_submits_queued', 'Submits waiting for the writer now.', () => num(submitter()?.queued));

    // Witnessing: this gateway as a witness (add-checkpoint), and an authority's requests to its witnesses.
    this.counter(
      'vouch_witness_requests_total',
      'add-checkpoint requests this gateway answered as a witness, by outcome (absent: not a witness).',
      () => {
        const s = ctx.witness?.stats();
        return s ? (Object.entries(s) as [string, number][]).map(([outcome, n]) => [{ outcome }, n]) : null;
      },
      ['outcome'],
    );
    this.counter(
      'vouch_cosign_requests_total',
      'add-checkpoint requests the authority sent, by witness key name and outcome (absent: no witnesses).',
      () => {
        const s = ctx.cosigner?.stats();
        return s ? s.requests.map((r) => [{ witness: r.witness, outcome: r.outcome }, r.count]) : null;
      },
      ['witness', 'outcome'],
    );
    this.gauge(
      'vouch_checkpoint_cosignatures',
      'Witness cosignatures held for the committed checkpoint (absent: no witnesses).',
      () => ctx.cosigner?.stats().cosignatures ?? null,
    );
    this.gauge(
      'vouch_checkpoint_quorum_met',
      "1 when the cosignatures of the committed checkpoint meet authority.policy_file's quorum, else 0 (absent: no policy).",
      () => ctx.cosigner?.stats().quorum ?? null,
    );

    // Proxy routes (docs/spec/design.md §3.6).
    this.counter(
      'vouch_proxy_requests_total',
      'Requests under proxy routes, by outcome.',
      () => {
        const s = proxy.stats();
        return [
          [{ outcome: 'verified' }, s.verified],
          [{ outcome: 'denied' }, s.denied],
          [{ outcome: 'passed' }, s.passed],
          [{ outcome: 'refused' }, s.refused],
          [{ outcome: 'mismatch' }, s.mismatches],
          [{ outcome: 'audit_mismatch' }, s.auditMismatches],
          [{ outcome: 'revoked' }, s.revoked],
          [{ outcome: 'audit_revoked' }, s.auditRevoked],
          [{ outcome: 'failed' }, s.failed],
          [{ outcome: 'metadata' }, s.metadata],
        ];
      },
      ['outcome'],
    );
    this.counter(
      'vouch_proxy_metadata_stale_total',
      'Origin metadata served from the cache past its lifetime because the origin failed.',
      () => proxy.stats().metadataStale,
    );
    this.gauge('vouch_proxy_metadata_cache_bytes', "Bytes of origin metadata held by the ecosystem routes' cache.", () => proxy.metadataCacheStats().bytes);
  }

  /**
   * A counter whose value is read at scrape time: `read` gives a number, or
   * samples by label, or null (no sample). Negative counts read as 0.
   */
  private counter(name: string, help: string, read: () => number | Sample[] | null, labelNames: string[] = []): void {
    new Counter({ name, help, labelNames, registers: [this.registry], collect: scrapedCollect(read, labelNames) });
  }

  /** A gauge read at scrape time (as `counter`). */
  private gauge(name: string, help: string, read: () => number | Sample[] | null, labelNames: string[] = []): void {
    new Gauge({ name, help, labelNames, registers: [this.registry], collect: scrapedCollect(read, labelNames) });
  }
}

/** The collect step of `counter`/`gauge`: replaces the metric's samples by what `read` gives. */
function scrapedCollect(read: () => number | Sample[] | null, labelNames: string[]): (this: Counter | Gauge) => void {
  return function (this: Counter | Gauge) {
    const put = (labels: Sample[0] | null, v: number): void => {
      if (this instanceof Counter) {
        if (labels === null) this.inc(Math.max(0, v));
        else this.inc(labels, Math.max(0, v));
      } else if (labels === null) this.set(v);
      else this.set(labels, v);
    };
    this.reset();
    try {
      const v = read();
      if (v !== null) {
        if (typeof v === 'number') put(null, v);
        else for (const [labels, value] of v) put(labels, value);
        return;
      }
    } catch {
      this.reset();
    }
    if (labelNames.length === 0) this.remove(); // an unlabelled metric keeps a 0 sample after reset()
  };
}

function num(v: number | undefined): number | null {
  return typeof v === 'number' && !Number.isNaN(v) ? v : null;
}

/** `x.stats()` when `x` has one (the context's types do not promise it). */
function statsOf<T>(x: unknown): T | null {
  const f = (x as { stats?: unknown } | null | undefined)?.stats;
  return typeof f === 'function' ? (f.call(x) as T) : null;
}

/** `GET|HEAD /metrics`: the Prometheus text exposition of `m`. */
export async function handleMetrics(m: GatewayMetrics, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const text = await m.text();
  res.writeHead(200, {
    'content-type': m.registry.contentType,
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
  });
  res.end(req.method === 'HEAD' ? undefined : text);
}
