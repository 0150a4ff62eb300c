/**
 * The gateway's request handler on node:http: routing, method and Accept
 * rules, readiness, and the lookup, authority, checkpoint, document and
 * submit endpoints (docs/spec/design.md §3.1, §3.5); other routes are in
 * routes/; an unclaimed path goes to a proxy route (§3.6) or is a JSON 404.
 * Owns: the per-request log line and metrics, the lookup answer cache
 * (lru-cache) and its batched writes (`AnswerBatch`), the fleet headers.
 * Must hold: every JSON path answers JSON with `success` (4xx, 500, 503
 * included); an exception anywhere on the request path becomes a 500 for
 * that request only, logged once and counted, never a crash or a stack
 * trace; logs and metric labels carry no header or query value but `url`;
 * a bad or repeated Host is a 400 before any route sees it; a request
 * answered before its body arrived keeps its connection LINGER_MS at most;
 * `Vouch-Min-Tree-Size` is met or 503 `behind`, never a 404 (guide/fleet).
 */
import { handleIndexProof } from '../routes/index-proof.ts';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
// The global `performance` is an accessor (a getter call per read); the module's export is the object.
import { performance } from 'node:perf_hooks';
import { createHash, timingSafeEqual } from 'node:crypto';
import { VouchError } from '../../chain/errors.ts';
import { cyrb53 } from '../../chain/compact-index.ts';
import { Doorkeeper } from '../../chain/doorkeeper.ts';
import type { Block } from '../../chain/block.ts';
import {
  acceptsJson,
  errorBody,
  checkArtifactUrl,
  parseJsonBody,
  parseSelectionQuery,
  rawHeader,
  truncationHint,
  readBody,
  sendEmpty,
  sendError,
  sendJson,
  sendJsonTagged,
  statusOf,
  UNEXPECTED_STAGE,
  type SelectionQuery,
} from './http-util.ts';
import { handleDownload } from '../routes/download.ts';
import { handleHealthz, handleReadyz } from '../routes/health.ts';
import { handleAddCheckpoint } from '../routes/add-checkpoint.ts';
import { handleKeys } from '../routes/keys.ts';
import {
  handleCheckpointNote,
  handleConsistencyProof,
  handleInclusionProof,
  handleTile,
  noteVerifierKey,
  proofJson,
  proofTag,
} from '../routes/transparency.ts';
import { authorityKeysJson } from '../routes/authority-keys.ts';
import { handleBlock, handleBlocks, handleUnits, handleVersions } from '../routes/browse.ts';
import { handleExplorer, EXPLORER_PATHS } from '../explorer.ts';
import { ProxyRoutes } from '../routes/proxy-handler.ts';
import { openApiDocument, skillDocument, SKILL_PATH } from '../routes/openapi.ts';
import { GatewayMetrics, handleMetrics, type UnexpectedStage } from '../observability/metrics.ts';
import { hostIsValid } from '../routes/proxy-route-table.ts';
import { FAULT, injectFault } from '../test-fault.ts';
import { logRequest, type Logger } from '../observability/logger.ts';
import { wallClock } from '../observability/log-sink.ts';
import { LRUCache } from 'lru-cache';
import { AnswerBatch } from './answer-batch.ts';
import type { GatewayContext } from '../context.ts';
import type { BlockProof } from '../chain/verified-state.ts';
import { plainAnswerText } from '../cache/answer-store.ts';

export const SUBMIT_BODY_LIMIT = 1024 * 1024;

/** What the handler needs of its lookup-answer cache (lru-cache; the gateway bench measures a CLOCK cache in its place). */
export interface AnswerCache<V> {
  get(key: string): V | undefined;
  set(key: string, v: V): void;
  /** Whether it is full (a new entry evicts another): admission is stricter then. Absent: never full. */
  full?(): boolean;
}

/** The hot path's parts the gateway bench swaps to measure them side by side (docs/decisions/gateway-hot-path.md). */
export interface HotPathParts {
  /** The lookup-answer cache, bounded at `maxBytes` in its entries' `bytes` (default lru-cache). */
  answerCache?: <V extends { bytes: number; used: boolean }>(maxBytes: number) => AnswerCache<V>;
  /**
   * Default true: the 200 answers of a turn of the event loop written
   * together (./answer-batch.ts); false: each answer written when made
   * (docs/decisions/gateway-hot-path.md, "Answer batching").
   */
  batching?: boolean;
  /** false: lookups never read the answer store (gateway/cache/answer-store.ts), nor is it built; default true. */
  answerStore?: boolean;
}

/** What one request handler (one gateway) keeps besides the context: its lookup answers, the batch they are written in, and its metrics. */
interface HandlerState {
  answers: AnswerCache<CachedAnswer>;
  /** Which queries the answer cache takes (their second sighting; when it is full, sighted in the window before too). */
  admission: Doorkeeper;
  /** Whether the answer cache is full. */
  full: () => boolean;
  batch: Pick<AnswerBatch<Answer>, 'add'>;
  metrics: GatewayMetrics;
  /** Whether lookups read the answer store. */
  stored: boolean;
}

/** A lookup's 200 answer waiting in the batch (see `sendWithProof` for the fields). */
interface Answer {
  res: ServerResponse;
  obs: Observed;
  text: string;
  length: number;
  etag: string;
  proof: BlockProof | null;
}

/**
 * What the request line and the metrics will say of one request, filled in
 * while it is answered and read when its answer ends (`recordRequest`).
 */
interface Observed {
  /** The route label (a route template, `proxy`, `explorer` or `unknown`). */
  label: string;
  /** The decoded `url` parameter when the handler parsed it (else the line decodes it from the query). */
  url: string | undefined;
  path: string;
  search: string;
  /** The connection the request arrived on (`req.socket` may be null by the time its answer ends). */
  socket: CountedSocket;
  started: number;
  /** `headerFacts` of the request. */
  facts: number;
  /** The answer waits in the batch, which writes and records it (the dispatch does neither). */
  batched: boolean;
  /** Recorded already (by the 'finish' listener, so 'close' does not record it again). */
  recorded: boolean;
}

type Handler = (ctx: GatewayContext, req: IncomingMessage, res: ServerResponse, search: string, own: HandlerState, obs: Observed) => Promise<void> | void;

interface Route {
  methods: string[];
  /**
   * JSON endpoint (Accept rule, JSON errors), byte endpoint (empty-bodied
   * errors), or a document of another type (no Accept rule, JSON errors).
   */
  kind: 'json' | 'bytes' | 'document';
  handler: Handler;
}

function lookupBody(block: Block, revokedBy: Block | null): Record<string, unknown> {
  const body: Record<string, unknown> = { success: true, ...block };
  if (revokedBy) body.revoked_by = { index: revokedBy.index, record_hash: revokedBy.record_hash, effective_date: revokedBy.payload.effective_date };
  return body;
}

function ready(ctx: GatewayContext): NonNullable<GatewayContext['state']> {
  if (ctx.state === null) throw new VouchError('not_ready', 'the chain is not loaded yet; retry shortly');
  return ctx.state;
}

const asked = (q: SelectionQuery) => `${q.url}${q.semver ? ` version ${q.semver}` : ''}${q.at ? ` at ${q.at}` : ''}`;

/**
 * Whole lookup answers by query string, per gateway (one cache per request
 * handler): valid while the chain has the same size and the date is the
 * same (revocations take effect by date), so a repeated lookup skips
 * parsing, selection and serialization, and its log line the decoding of
 * `url`. Bounded in bytes (32 MiB: some 25,000 answers of a one-endorsement
 * block); answers showing a revocation are not kept.
 */
interface CachedAnswer {
  size: number;
  today: string;
  /** The selected block (a `proof=1` answer adds its proof in the checkpoint served at that moment). */
  index: number;
  /** Whether the key itself asks for a proof (`proof=1` not at the end of the query). */
  proof: boolean;
  etag: string;
  /** The answer's JSON, and its length in UTF-8 bytes. */
  text: string;
  length: number;
  url: string;
  /** What the entry is counted for in the cache's budget. */
  bytes: number;
  /** The bench's CLOCK variant's mark (bench/hot-path/clock-cache.ts). */
  used: boolean;
}

export const ANSWER_CACHE_BYTES = 32 * 1024 * 1024;
/** Queries sighted between the answer cache's admission clears: about as many answers as the cache holds. */
const ANSWER_ADMISSION_WINDOW = 32_768;
/** The answer cache counts as full (admission stricter) within this many bytes of its budget: a few answers' worth. */
const ANSWER_CACHE_SLACK = 64 * 1024;

/** A bound on the heap bytes of a string of `utf8Bytes` UTF-8 bytes (one byte a character when ASCII, two otherwise). */
const heapBytes = (s: string, utf8Bytes: number) => (utf8Bytes === s.length ? utf8Bytes : 2 * s.length);

/**
 * `GET /v1/endorsement` (and `/v1/object`). The URL's form is checked only
 * when no block endorses it (a URL found in a verified block is well
 * formed), with the same answers as checking it first.
 */
const lookup: Handler = (ctx, req, res, search, own, obs) => {
  // No body is read: let the request end now (node:http would wait for its end with one more listener per request).
  req.resume();
  const today = ctx.today();
  const state = ctx.state;
  // `...&proof=1` (as clients send it) shares the plain answer's entry; the proof is added to it per request.
  const proofSuffix = search.endsWith(PROOF_SUFFIX);
  const key = proofSuffix ? search.slice(0, -PROOF_SUFFIX.length) : search;
  if (state !== null) {
    const hit = own.answers.get(key);
    if (hit !== undefined && hit.size === state.size && hit.today === today) {
      obs.url = hit.url;
      answer(own, res, obs, hit.text, hit.length, hit.etag, proofSuffix || hit.proof ? state.proofFor(hit.index) : null);
      return;
    }
  }
  const q = parseSelectionQuery(search, { checkUrl: false });
  obs.url = q.url;
  if (state === null) {
    checkArtifactUrl(q.url);
    ready(ctx);
  }
  // The common case (no semver=, no at=, no revocation) from the answer store: one read, no block parsed.
  const stored = own.stored && state !== null && q.semver === undefined && q.at === undefined ? state.storedAnswer(q.url) : undefined;
  if (stored !== undefined) {
    const etag = `"${stored.recordHash}"`;
    const proof = q.proof ? state!.proofFor(stored.index) : null;
    keepAndAnswer(own, res, obs, state!.size, today, key, proofSuffix, q, stored.index, etag, stored.text, stored.length, proof);
    return;
  }
  const sel = state!.index.select(q.url, { semver: q.semver, at: q.at, today });
  // proof=1 on a 404: the URL's completeness-index proof and the note it is against (docs/spec/index.md 8).
  const absence = () => {
    if (!q.proof) return undefined;
    const p = state!.indexProof('url', q.url);
    const note = state!.servedCheckpointNote();
    return p === null || note === null ? undefined : { index_proof: Buffer.from(p).toString('base64'), checkpoint: note };
  };
  if (sel === null) {
    checkArtifactUrl(q.url);
    throw new VouchError('not_found', `no provenance block is on file for ${asked(q)}${truncationHint(q)}`, { resource: q.url, evidence: absence() });
  }
  if (sel.revokedBy && q.semver === undefined) {
    throw new VouchError('not_found', `no provenance block is on file for ${asked(q)}: every endorsement in force is revoked`, {
      resource: q.url,
      evidence: absence(),
    });
  }
  // proof=1: the block's inclusion proof in the served checkpoint, when that checkpoint covers it.
  const proof = q.proof ? state!.proofFor(sel.block.index) : null;
  const etag = `"${sel.block.record_hash}"`;
  if (sel.revokedBy) {
    const text = JSON.stringify(lookupBody(sel.block, sel.revokedBy));
    answer(own, res, obs, text, Buffer.byteLength(text), etag, proof);
  } else {
    const text = plainAnswerText(sel.block);
    keepAndAnswer(own, res, obs, state!.size, today, key, proofSuffix, q, sel.block.index, etag, text, Buffer.byteLength(text), proof);
  }
};

/** Sends a plain (not revoked) lookup answer (`text`, of `length` UTF-8 bytes), kept in the answer cache when the doorkeeper admits its query. */
function keepAndAnswer(
  own: HandlerState,
  res: ServerResponse,
  obs: Observed,
  size: number,
  today: string,
  key: string,
  proofSuffix: boolean,
  q: SelectionQuery,
  index: number,
  etag: string,
  text: string,
  length: number,
  proof: BlockProof | null,
): void {
  // Kept from the second time the query is asked within a window (chain/doorkeeper.ts): lookups at random over a
  // large chain would otherwise turn the whole cache over, each answer kept just long enough to cost the collector.
  // Once the cache is full, the query must have been asked in the window before too: a hot query still gets in,
  // where one of many asked at random would only evict another (each eviction old-generation garbage: major GCs).
  if (key.length <= 4096 && own.admission.admit(cyrb53(key), own.full())) {
    own.answers.set(flatCopy(key), {
      size,
      today,
      index,
      proof: q.proof === true && !proofSuffix,
      etag,
      text,
      length,
      url: q.url,
      bytes: heapBytes(text, length) + key.length + q.url.length + 256,
      used: false,
    });
  }
  answer(own, res, obs, text, length, etag, proof);
}

/** Queues a lookup's 200 answer in the batch (`sendWithProof` then). */
function answer(own: HandlerState, res: ServerResponse, obs: Observed, text: string, length: number, etag: string, proof: BlockProof | null): void {
  obs.batched = true;
  own.batch.add({ res, obs, text, length, etag, proof });
}

/**
 * A copy of `s` in one piece of memory: `s` is a slice of the request's
 * target (a view on the whole target string), which a cache key would keep
 * alive and every comparison with it would read through. The target is
 * latin1 (node:http's decoding), so latin1 copies it exactly.
 */
const flatCopy = (s: string) => Buffer.from(s, 'latin1').toString('latin1');

/** A lookup's query ending in this asks for a proof (and shares the plain answer's cache entry). */
const PROOF_SUFFIX = '&proof=1';

/**
 * Sends a lookup answer (`text`, a JSON object of `length` UTF-8 bytes),
 * with member `proof` put in last when there is one (its JSON made once per
 * proof, also the Vouch-Proof header's; pure ASCII) and the ETag naming the
 * note then (`proofTag`: its size and a digest of its text).
 */
function sendWithProof(
  ctx: GatewayContext,
  res: ServerResponse,
  text: string,
  length: number,
  etag: string,
  proof: BlockProof | null,
  indexProof: Uint8Array | null = null,
): void {
  const size = typeof ctx.state?.size === 'number' ? ctx.state.size : -1;
  const age = ctx.mirrorSync ? Math.floor(ctx.mirrorSync.ageSeconds()) : -1;
  if (proof === null) return sendJsonTagged(res, text, length, etag, size, age);
  const pj = proofJson(proof);
  // member index_proof (base64, ASCII): the URL's completeness-index proof, when the note commits an index
  const ip = indexProof === null ? '' : `,"index_proof":"${Buffer.from(indexProof).toString('base64')}"`;
  sendJsonTagged(res, `${text.slice(0, -1)},"proof":${pj}${ip}}`, length + 9 + pj.length + ip.length, `${etag.slice(0, -1)}-${proofTag(proof)}"`, size, age);
}

/** Block 0, the note verifier key of the key in force, and `keys`: the key state (docs/spec/key-events.md). */
const authority: Handler = (ctx, _req, res) => {
  const state = ready(ctx);
  const key = noteVerifierKey(ctx, state);
  const body = key === null ? lookupBody(state.authority, null) : { ...lookupBody(state.authority, null), verifier_key: key };
  sendJson(res, 200, { ...body, keys: authorityKeysJson(ctx, state) });
};

const checkpoint: Handler = (ctx, _req, res) => {
  const cp = ready(ctx).checkpointJson();
  if (cp === null) throw new VouchError('not_found', 'this chain has no checkpoint', { resource: '/v1/checkpoint' });
  sendJson(res, 200, { success: true, ...cp });
};

const openapi: Handler = (ctx, _req, res) => {
  sendJson(res, 200, { success: true, ...openApiDocument(ctx.config.public_url, ctx.config.service_name, ctx.submitter !== null) });
};

const skill: Handler = (ctx, _req, res) => {
  const text = skillDocument(ctx.config.public_url, ctx.config.service_name);
  res.writeHead(200, { 'content-type': 'text/markdown; charset=utf-8', 'content-length': Buffer.byteLength(text), 'x-content-type-options': 'nosniff' });
  res.end(text);
};

function bearerMatches(header: string | undefined, expected: Buffer): boolean {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  // Hashing both sides makes the comparison constant-time whatever the lengths.
  const given = createHash('sha256')
    .update(m?.[1] ?? '')
    .digest();
  return timingSafeEqual(given, expected) && m !== null;
}

/** What each authority endpoint does, for the answer when this gateway is not an authority. */
const AUTHORITY_ACTIONS: Record<string, string> = { '/v1/submit': 'submit', '/v1/revoke': 'revoke', '/v1/root': 'applying key statements' };

/** A statement file is a few KiB (64 signatures at most): this bounds its body. */
export const STATEMENT_BODY_LIMIT = 64 * 1024;

/** The authority's writer, after the submit token and a JSON body are checked (POST /v1/submit, /v1/revoke, /v1/root). */
async function authorityBody(
  ctx: GatewayContext,
  req: IncomingMessage,
  path: string,
  label: string,
  limit = SUBMIT_BODY_LIMIT,
): Promise<{ submitter: NonNullable<GatewayContext['submitter']>; body: unknown }> {
  if (ctx.submitter === null || ctx.submitTokenHash === null) {
    req.resume();
    throw new VouchError('not_found', `${AUTHORITY_ACTIONS[path] ?? 'submit'} is disabled: this gateway is not an authority`, { resource: path });
  }
  if (!bearerMatches(req.headers.authorization, ctx.submitTokenHash)) {
    req.resume();
    throw new VouchError('unauthorized', 'a valid Authorization: Bearer <submit token> header is required');
  }
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json') {
    req.resume();
    throw new VouchError('unsupported_media_type', 'the body must be application/json');
  }
  const body = parseJsonBody(await readBody(req, limit, label));
  ready(ctx);
  return { submitter: ctx.submitter, body };
}

/** A write's answer names the tree size after it (what Vouch-Min-Tree-Size asks a mirror for to read it back). */
function afterWrite(ctx: GatewayContext, res: ServerResponse): void {
  if (ctx.state !== null && !res.headersSent) res.setHeader('vouch-tree-size', ctx.state.size);
}

const revoke: Handler = async (ctx, req, res, _search, _own, obs) => {
  const { submitter, body } = await authorityBody(ctx, req, '/v1/revoke', obs.label);
  const result = await submitter.revoke(body);
  afterWrite(ctx, res);
  sendJson(res, result.httpStatus, result.body);
};

/** POST /v1/root: a key statement file (docs/spec/key-events.md), appended through the same writer once applyKeyEvent accepts it. */
const root: Handler = async (ctx, req, res, _search, _own, obs) => {
  const { submitter, body } = await authorityBody(ctx, req, '/v1/root', obs.label, STATEMENT_BODY_LIMIT);
  const result = await submitter.statement(body);
  afterWrite(ctx, res);
  sendJson(res, result.httpStatus, result.body);
};

/** The submit's client asks for NDJSON progress (`Accept: application/x-ndjson`, docs/spec/http.md "Endpoints"). */
function wantsNdjson(req: IncomingMessage): boolean {
  return /(^|,)\s*application\/x-ndjson\s*(;|,|$)/i.test(rawHeader(req, 'accept') ?? '');
}

/** Bound on a sync hint's body (`{"size": N, "head": "<commit>"}`). */
const SYNC_BODY_LIMIT = 1024;

/** POST /v1/sync: a sync hint from the authority or a git host's post-receive hook (docs/guide/fleet.md). */
const syncHint: Handler = async (ctx, req, res, _search, _own, obs) => {
  if (!ctx.mirrorSync || !ctx.syncTokenHash) {
    req.resume();
    throw new VouchError('not_found', 'sync hints are off: this gateway is not a mirror with chain.sync_token_file', { resource: '/v1/sync' });
  }
  if (!bearerMatches(req.headers.authorization, ctx.syncTokenHash)) {
    req.resume();
    throw new VouchError('unauthorized', 'a valid Authorization: Bearer <sync token> header is required');
  }
  const text = (await readBody(req, SYNC_BODY_LIMIT, obs.label)).toString('utf8').trim();
  let size: number | null = null;
  let head: string | null = null;
  if (text.length > 0) {
    const body = parseJsonBody(Buffer.from(text)) as Record<string, unknown> | null;
    const v = body !== null && typeof body === 'object' && !Array.isArray(body) ? body.size : undefined;
    if (v !== undefined && (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0))
      throw new VouchError('bad_request', 'size must be a non-negative integer');
    size = typeof v === 'number' ? v : null;
    const h = body !== null && typeof body === 'object' && !Array.isArray(body) ? body.head : undefined;
    if (h !== undefined && (typeof h !== 'string' || !/^[0-9a-f]{40}$/.test(h)))
      throw new VouchError('bad_request', 'head must be a commit id (40 lowercase hex digits)');
    head = typeof h === 'string' ? h : null;
  }
  void ctx.mirrorSync.hint(size, head).catch(() => undefined);
  sendJson(res, 202, { success: true, status: 'accepted', size: ctx.state?.size ?? null });
};

const submit: Handler = async (ctx, req, res, _search, _own, obs) => {
  const { submitter, body } = await authorityBody(ctx, req, '/v1/submit', obs.label);
  if (!wantsNdjson(req)) {
    const result = await submitter.submit(body);
    afterWrite(ctx, res);
    sendJson(res, result.httpStatus, result.body);
    return;
  }
  // Progress as NDJSON (docs/spec/http.md "Endpoints"): 200 at once, one line per entry fetched and hashed,
  // then the result line carrying the status the plain answer would have had. A client that goes away
  // does not stop the submit: its block is committed whole or not at all, as for any submit.
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  const line = (o: Record<string, unknown>) => {
    if (!res.destroyed) res.write(JSON.stringify(o) + '\n');
  };
  try {
    const result = await submitter.submit(body, (p) => line({ progress: p }));
    line({ http_status: result.httpStatus, ...result.body });
  } catch (e) {
    line({ http_status: statusOf(e), ...errorBody(e) });
  }
  res.end();
};

export const ROUTES: Record<string, Route> = {
  '/v1/endorsement': { methods: ['GET', 'HEAD'], kind: 'json', handler: lookup },
  '/v1/object': { methods: ['GET', 'HEAD'], kind: 'json', handler: lookup },
  '/v1/authority': { methods: ['GET', 'HEAD'], kind: 'json', handler: authority },
  '/v1/checkpoint': { methods: ['GET', 'HEAD'], kind: 'json', handler: checkpoint },
  '/v1/openapi.json': { methods: ['GET', 'HEAD'], kind: 'json', handler: openapi },
  [SKILL_PATH]: { methods: ['GET', 'HEAD'], kind: 'document', handler: skill },
  '/v1/submit': { methods: ['POST'], kind: 'json', handler: submit },
  '/v1/revoke': { methods: ['POST'], kind: 'json', handler: revoke },
  '/v1/root': { methods: ['POST'], kind: 'json', handler: root },
  '/v1/sync': { methods: ['POST'], kind: 'json', handler: syncHint },
  '/v1/download': { methods: ['GET', 'HEAD'], kind: 'bytes', handler: handleDownload },
  '/v1/blocks': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleBlocks },
  '/v1/block': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleBlock },
  '/v1/versions': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleVersions },
  '/v1/units': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleUnits },
  '/add-checkpoint': { methods: ['POST'], kind: 'document', handler: handleAddCheckpoint },
  '/healthz': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleHealthz },
  '/readyz': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleReadyz },
  '/metrics': { methods: ['GET', 'HEAD'], kind: 'document', handler: (_ctx, req, res, _search, own) => handleMetrics(own.metrics, req, res) },
  '/checkpoint': { methods: ['GET', 'HEAD'], kind: 'document', handler: (ctx, req, res) => handleCheckpointNote(ctx, req, res) },
  '/v1/proof/inclusion': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleInclusionProof },
  '/v1/proof/consistency': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleConsistencyProof },
  '/v1/keys': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleKeys },
  '/v1/index/proof': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleIndexProof },
  ...Object.fromEntries(EXPLORER_PATHS.map((p) => [p, { methods: ['GET', 'HEAD'], kind: 'document', handler: handleExplorer } satisfies Route])),
};

/** `ROUTES` by path, for the one lookup every request makes. */
const ROUTE_TABLE = new Map<string, Route & { label: string }>(Object.entries(ROUTES).map(([p, r]) => [p, { ...r, label: p }]));

/**
 * The route most requests take, found by comparing the start of the
 * target: a Map lookup by the path, a new string every request, first
 * hashes it (some 0.5 us a lookup under load).
 */
const LOOKUP_PATH = '/v1/endorsement';
const LOOKUP_ROUTE = ROUTE_TABLE.get(LOOKUP_PATH)!;

/** Every path under `/tile/` (tlog-tiles: hash tiles and entry bundles), one route labelled by its template. */
export const TILE_PREFIX = '/tile/';
const TILE_ROUTE: Route & { label: string } = {
  methods: ['GET', 'HEAD'],
  kind: 'bytes',
  label: '/tile/{path}',
  handler: (ctx, req, res, _search, _own, obs) => handleTile(ctx, req, res, obs.path),
};

/**
 * How long a connection may go on sending the body of a request that was
 * answered before its body arrived (the rest is read and dropped, then the
 * connection serves its next request); past it the connection is closed.
 * Long enough for the client to have read the answer (no reset discards it).
 */
export const LINGER_MS = 2_000;

/** Connections whose request was answered while its body still arrives. */
const lingering = new WeakSet<Socket>();

/** Whether the request on `socket` was answered before its body arrived (node:http's request timeout then has nothing to answer). */
export function answeredBeforeBody(socket: Socket): boolean {
  return lingering.has(socket);
}

/** Bounds the rest of the body of a request whose answer has been sent. */
function lingerOnBody(req: IncomingMessage, ms: number): void {
  const socket = req.socket;
  if (socket.destroyed) return;
  lingering.add(socket);
  const timer = setTimeout(() => socket.destroy(), ms);
  const done = () => {
    clearTimeout(timer);
    lingering.delete(socket);
  };
  req.once('end', done); // node:http drops the rest of an unread body; 'end' when it is all in
  socket.once('close', done);
}

/**
 * An answer that ends a connection (`Connection: close`, or node:http's own
 * choice) while the request's body still arrives: node:http would destroy
 * the socket at once (`destroySoon`), and the client, still sending, gets a
 * reset that can discard the answer it had not read yet. Instead the
 * answer is followed by a FIN, the rest of the body is read and dropped,
 * and the socket is destroyed when the body has ended, or after `ms`.
 */
function closeAfterBody(req: IncomingMessage, socket: Socket, ms: number): void {
  (socket as Socket & { destroySoon: () => void }).destroySoon = function (this: Socket) {
    lingering.add(this);
    this.end();
    const timer = setTimeout(() => this.destroy(), ms);
    const done = () => {
      clearTimeout(timer);
      lingering.delete(this);
      this.destroy();
    };
    if (req.complete) return done();
    req.once('end', done);
    req.once('close', done);
    this.once('close', done);
  };
}

/** `headerFacts`: more than one Host field (node:http keeps only the first in `req.headers`). */
const MANY_HOSTS = 1;
/** `headerFacts`: a body is announced (Content-Length other than 0, or Transfer-Encoding). */
const HAS_BODY = 2;
/** `headerFacts`: a Host field whose value is not a host and port (`hostIsValid`). */
const BAD_HOST = 4;
/** `headerFacts`: a Vouch-Min-Tree-Size field (read-your-writes across mirrors). */
const MIN_SIZE = 8;
export const MIN_SIZE_HEADER = 'vouch-min-tree-size';

/** What the dispatch needs to know of the header fields, in one pass over `rawHeaders` (no `req.headers` object built). */
function headerFacts(req: IncomingMessage): number {
  const raw = req.rawHeaders;
  let hosts = 0;
  let facts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]!;
    if (k.length === 4) {
      if (k.toLowerCase() === 'host') {
        if (++hosts > 1) facts |= MANY_HOSTS;
        if (!hostIsValid(raw[i + 1]!)) facts |= BAD_HOST;
      }
    } else if (k.length === 14) {
      if (k.toLowerCase() === 'content-length' && raw[i + 1]!.trim() !== '0') facts |= HAS_BODY;
    } else if (k.length === 17 && k.toLowerCase() === 'transfer-encoding') facts |= HAS_BODY;
    else if (k.length === 19 && k.toLowerCase() === MIN_SIZE_HEADER) facts |= MIN_SIZE;
  }
  return facts;
}

/** At most this many characters of a path or `url` parameter go into a log line. */
const LOGGED_CHARS = 1024;

/** The first `url` query parameter, decoded (null when absent or undecodable). */
export function urlParam(search: string): string | null {
  let at: number;
  if (search.startsWith('url=')) at = 4;
  else {
    const i = search.indexOf('&url=');
    if (i === -1) return null;
    at = i + 5;
  }
  const end = search.indexOf('&', at);
  let value = end === -1 ? search.slice(at) : search.slice(at, end);
  if (value.includes('+')) value = value.replace(/\+/g, ' ');
  try {
    const url = decodeURIComponent(value);
    return url.length > LOGGED_CHARS ? url.slice(0, LOGGED_CHARS) : url;
  } catch {
    return null;
  }
}

/**
 * What a connection had written (`bytesWritten`) when its last request was
 * recorded: where the next recorded request's bytes start (0 before the
 * first). A request is recorded once its answer is all with the socket (or
 * the answer was given up), and node:http writes a connection's answers in
 * the order of its requests, so requests are recorded in that order too,
 * pipelined ones and answers written later by the batch included: each
 * request's bytes are what the connection wrote since the one before it was
 * recorded. One `bytesWritten` (a getter that copies the socket's write
 * queue) a request.
 */
const SENT = Symbol('vouch.sent');
type CountedSocket = Socket & { [SENT]?: number | undefined };

/** Where a response keeps its `Observed` (read by the 'close' listener). */
const OBSERVED = Symbol('vouch.observed');
type ObservedResponse = ServerResponse & { [OBSERVED]?: Observed };

/**
 * Logs and counts one request whose answer has ended (`finished`: it was
 * written whole; else the client left, status 499 when no answer was
 * started). The route label and the `url` are read now, so the dispatch can
 * settle them first.
 */
function recordRequest(ctx: GatewayContext, metrics: GatewayMetrics, req: IncomingMessage, res: ServerResponse, obs: Observed, finished: boolean): void {
  const socket = obs.socket;
  const end = performance.now();
  const seconds = (end - obs.started) / 1000;
  const status = res.headersSent ? res.statusCode : 499;
  // A destroyed socket still counts what it wrote (undefined only when it never had a write queue).
  const written = socket.bytesWritten ?? socket[SENT] ?? 0;
  const bytes = Math.max(0, written - (socket[SENT] ?? 0));
  socket[SENT] = written;
  const method = req.method ?? '';
  try {
    metrics.observe(obs.label, method, status, seconds, bytes);
  } catch (e) {
    reportUnexpected(ctx.log, metrics, 'metrics', e, req, obs.path);
  }
  if (ctx.log.enabled?.('info') === false) return;
  try {
    const path = obs.path;
    const url = obs.url === undefined ? urlParam(obs.search) : obs.url.length > LOGGED_CHARS ? obs.url.slice(0, LOGGED_CHARS) : obs.url;
    logRequest(ctx.log, {
      method,
      path: path.length > LOGGED_CHARS ? path.slice(0, LOGGED_CHARS) : path,
      route: obs.label,
      status,
      ms: Math.round(seconds * 1e5) / 100,
      bytes,
      remote: socket.remoteAddress ?? null,
      url,
      aborted: !finished,
      time: wallClock(end),
    });
  } catch (e) {
    reportUnexpected(ctx.log, metrics, 'log', e, req, obs.path);
  }
}

/**
 * Logs (once, at error, with its stack) and counts an exception that no
 * handler expected, caught at `stage`. Never throws: a logger or a metric
 * that fails too leaves the line or the count out.
 */
export function reportUnexpected(
  log: Logger,
  metrics: GatewayMetrics | null,
  stage: UnexpectedStage,
  e: unknown,
  req?: IncomingMessage | null,
  path?: string,
): void {
  try {
    metrics?.unexpected(stage);
  } catch {
    // the count is lost, not the request
  }
  try {
    const err = e as { message?: unknown; stack?: unknown } | null;
    const fields: Record<string, unknown> = {
      stage,
      error: typeof err?.message === 'string' ? err.message : String(e),
      stack: typeof err?.stack === 'string' ? err.stack : null,
    };
    if (req) fields.method = req.method;
    if (path !== undefined) fields.path = path.length > LOGGED_CHARS ? path.slice(0, LOGGED_CHARS) : path;
    log.error('unexpected exception on the request path', fields);
  } catch {
    // the logger failed too: the count above says it happened
  }
}

/**
 * The 'finish' and 'close' listeners of the responses of one handler that
 * were not recorded when their handler returned (see `settle`): one
 * function each for all of them (a response is `this`), so such a request
 * makes no closure. A response is recorded when it finishes (its last byte
 * is with the socket), by a listener put before node:http's own, which
 * then starts writing the next answer on the connection (pipelined): the
 * connection's `bytesWritten` is then this answer's end. A response that
 * closes unfinished (the client left) is recorded on 'close'.
 */
function responseObservers(
  ctx: GatewayContext,
  metrics: GatewayMetrics,
): { finish: (this: ObservedResponse) => void; close: (this: ObservedResponse) => void } {
  const record = (res: ObservedResponse, finished: boolean) => {
    const obs = res[OBSERVED]!;
    if (obs.recorded) return;
    obs.recorded = true;
    recordRequest(ctx, metrics, res.req, res, obs, finished);
  };
  // Each listener catches what it throws: node:http's own 'finish' listener (after this one) must still run,
  // and an exception here would otherwise reach the process. The answer was written whole: nothing to replace.
  return {
    finish(this: ObservedResponse) {
      try {
        if (FAULT !== null) injectFault('finish', this[OBSERVED]!.label);
        // Before node:http's own 'finish' listener, which closes such a connection.
        if (!this.req.complete && !this.shouldKeepAlive)
          closeAfterBody(this.req, this[OBSERVED]!.socket, Math.min(LINGER_MS, ctx.config.clients.request_timeout * 1000));
        record(this, true);
      } catch (e) {
        reportUnexpected(ctx.log, metrics, 'finish', e, this.req, this[OBSERVED]?.path);
      }
    },
    close(this: ObservedResponse) {
      try {
        if (FAULT !== null) injectFault('close', this[OBSERVED]!.label);
        if (!this.req.complete && this.writableFinished) lingerOnBody(this.req, Math.min(LINGER_MS, ctx.config.clients.request_timeout * 1000));
        record(this, this.writableFinished);
      } catch (e) {
        reportUnexpected(ctx.log, metrics, 'close', e, this.req, this[OBSERVED]?.path);
        if (!this.writableFinished) this.socket?.destroy();
      }
    },
  };
}

/** The host name of a Host value without its port (`[...]` literals kept whole); '' when absent. */
function hostName(value: string | undefined): string {
  if (value === undefined) return '';
  const close = value.lastIndexOf(']');
  const colon = value.indexOf(':', close + 1);
  return colon === -1 ? value : value.slice(0, colon);
}

/** The error of an injected fault at `stage` (`test-fault.ts`; tests only). */
function faultOf(stage: string): Error {
  return new Error(`injected fault at ${stage} (VOUCH_TEST_FAULT, tests only)`);
}

/**
 * Answers a request whose handler threw (or rejected): its error answer, or
 * an empty one on byte paths (`bytes`); the connection closed when the
 * answer had started; nothing more when it had ended (it is with the
 * socket whole: destroying the socket could cut it). An unexpected
 * exception (not a `VouchError`) is reported at `stage` (or the stage the
 * error carries, `UNEXPECTED_STAGE`). Never throws.
 */
function failRequest(
  ctx: GatewayContext,
  metrics: GatewayMetrics,
  req: IncomingMessage,
  res: ServerResponse,
  bytes: boolean,
  path: string,
  e: unknown,
  stage: UnexpectedStage,
): void {
  if (!(e instanceof VouchError)) {
    const carried = (e as { [UNEXPECTED_STAGE]?: UnexpectedStage } | null)?.[UNEXPECTED_STAGE];
    reportUnexpected(ctx.log, metrics, carried ?? stage, e, req, path);
  }
  try {
    if (res.writableEnded) return;
    if (!res.headersSent) stampFleet(ctx, res);
    if (bytes) sendEmpty(res, statusOf(e));
    else sendError(res, e);
  } catch (e2) {
    // A head half made (or a response in a state node:http refuses) cannot carry an error answer: the connection goes.
    res.destroy();
    if (e instanceof VouchError) reportUnexpected(ctx.log, metrics, stage, e2, req, path);
  }
}

/** The fleet headers (see the header): the tree size served, and a mirror's sync age. */
function stampFleet(ctx: GatewayContext, res: ServerResponse): void {
  const size = ctx.state?.size;
  if (typeof size === 'number') res.setHeader('vouch-tree-size', size);
  if (ctx.mirrorSync) res.setHeader('vouch-sync-age', Math.floor(ctx.mirrorSync.ageSeconds()));
}

/** The value of Vouch-Min-Tree-Size: a non-negative integer, else the bad_request to answer. */
function minTreeSize(req: IncomingMessage): number | VouchError {
  const v = rawHeader(req, MIN_SIZE_HEADER)!.trim();
  const n = /^\d{1,16}$/.test(v) ? Number(v) : NaN;
  return Number.isSafeInteger(n) ? n : new VouchError('bad_request', `${MIN_SIZE_HEADER} must be one non-negative integer (a tree size)`);
}

/**
 * Resolves once the chain served has at least `wanted` blocks: at once if it
 * has, else (a mirror) after syncs run for up to `chain.min_size_wait`
 * seconds; rejects with `behind` (503, Retry-After) when it is still short,
 * and with `wanted` itself when that is an error.
 */
async function atLeast(ctx: GatewayContext, wanted: number | VouchError): Promise<void> {
  if (typeof wanted !== 'number') throw wanted;
  const deadline = performance.now() + ctx.config.chain.min_size_wait * 1000;
  const have = () => ctx.state?.size ?? 0;
  while (have() < wanted && ctx.mirrorSync && performance.now() < deadline) {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      ctx.mirrorSync.syncNow().catch(() => undefined),
      new Promise<void>((r) => {
        timer = setTimeout(r, Math.max(1, deadline - performance.now()));
      }),
    ]);
    clearTimeout(timer);
    // A sync that failed at once (remote down) is not retried in a tight loop.
    if (have() < wanted && performance.now() < deadline) await new Promise((r) => setTimeout(r, Math.min(250, Math.max(1, deadline - performance.now()))));
  }
  if (ctx.state === null) throw new VouchError('not_ready', 'the chain is not loaded yet; retry shortly');
  if (have() < wanted) {
    throw new VouchError(
      'behind',
      `this gateway serves ${have()} blocks; the request asks for at least ${wanted} (${MIN_SIZE_HEADER}); retry, or ask another gateway`,
    );
  }
}

/**
 * The node:http request listener of the gateway. `parts.proxy`: the proxy
 * routes (docs/spec/design.md §3.6), which get what no endpoint above claims;
 * `parts.metrics`: where requests are counted and `/metrics` reads. Either
 * is made here when not given (the gateway gives both, to close the proxy
 * and feed the metrics its mirror).
 * @throws VouchError usage on an unusable proxy route (the start fails).
 */
export function createRequestHandler(
  ctx: GatewayContext,
  parts: { proxy?: ProxyRoutes; metrics?: GatewayMetrics; hotPath?: HotPathParts } = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  const proxy = parts.proxy ?? new ProxyRoutes(ctx);
  const metrics = parts.metrics ?? new GatewayMetrics(ctx, { proxy });
  const observers = responseObservers(ctx, metrics);

  /**
   * Records a request whose handler is done with it (`done`: it returned
   * without leaving work behind): now when its answer was handed whole to
   * the socket and no body is to come (a lookup, an error...), else when
   * it finishes or closes (`responseObservers`).
   */
  const settle = (req: IncomingMessage, res: ServerResponse, obs: Observed, done: boolean): void => {
    if (done && (obs.facts & HAS_BODY) === 0 && res.writableEnded && res.writableLength === 0 && !req.socket.destroyed) {
      recordRequest(ctx, metrics, req, res, obs, true);
    } else {
      (res as ObservedResponse)[OBSERVED] = obs;
      // Each is emitted once: `on` spares the `once` wrapper.
      res.prependListener('finish', observers.finish);
      res.on('close', observers.close);
    }
  };

  const writeAnswer = (a: Answer): void => {
    const { res, obs } = a;
    const req = res.req;
    // The client left while the answer waited: recorded as such (499), nothing written.
    if (res.destroyed || obs.socket.destroyed) return recordRequest(ctx, metrics, req, res, obs, false);
    if (FAULT !== null) injectFault('batch', obs.label);
    // With the inclusion proof, the URL's completeness-index proof against the same note (docs/spec/index.md 8).
    const indexProof = a.proof !== null && obs.url !== undefined && ctx.state !== null ? ctx.state.indexProof('url', obs.url) : null;
    sendWithProof(ctx, res, a.text, a.length, a.etag, a.proof, indexProof);
    settle(req, res, obs, true);
  };
  const answerFailed = (a: Answer, e: unknown): void => {
    failRequest(ctx, metrics, a.res.req, a.res, false, a.obs.path, e, 'batch');
    try {
      if (!a.obs.recorded) settle(a.res.req, a.res, a.obs, true);
    } catch (e2) {
      reportUnexpected(ctx.log, metrics, 'batch', e2, a.res.req, a.obs.path);
      a.res.destroy();
    }
  };
  const answerLost = (a: Answer, e: unknown): void => {
    // `failed` is built not to throw; should it, the connection goes and the batch goes on.
    reportUnexpected(ctx.log, metrics, 'batch', e, null, a.obs.path);
    a.res.destroy();
  };
  const batch: Pick<AnswerBatch<Answer>, 'add'> = parts.hotPath?.batching !== false
    ? new AnswerBatch<Answer>(writeAnswer, answerFailed, answerLost)
    : {
        add: (a) => {
          try {
            writeAnswer(a);
          } catch (e) {
            try {
              answerFailed(a, e);
            } catch (e2) {
              answerLost(a, e2);
            }
          }
        },
      };
  // Bounded in bytes: an entry over the whole budget is not kept (lru-cache's maxEntrySize defaults to maxSize).
  const given = parts.hotPath?.answerCache?.<CachedAnswer>(ANSWER_CACHE_BYTES);
  const lru = given === undefined ? new LRUCache<string, CachedAnswer>({ maxSize: ANSWER_CACHE_BYTES, sizeCalculation: (v) => Math.max(1, v.bytes) }) : null;
  const answers: AnswerCache<CachedAnswer> = given ?? lru!;
  const own: HandlerState = {
    answers,
    admission: new Doorkeeper(ANSWER_ADMISSION_WINDOW, 18),
    full: lru !== null ? () => lru.calculatedSize > ANSWER_CACHE_BYTES - ANSWER_CACHE_SLACK : () => given!.full?.() === true,
    batch,
    metrics,
    stored: parts.hotPath?.answerStore !== false && ctx.config?.chain?.answer_store !== false,
  };

  /** Routes and answers one request; true when its handler returned without leaving work behind (no promise, no proxying). */
  const dispatch = (req: IncomingMessage, res: ServerResponse, target: string, route: Route | undefined, obs: Observed): boolean => {
    const { path, search, facts } = obs;
    try {
      if ((facts & (MANY_HOSTS | BAD_HOST)) !== 0) {
        // Which host is meant is ambiguous or unusable (and so is the framing of such a request): refused, and the connection closed.
        req.resume();
        res.setHeader('connection', 'close');
        // Whether a proxy route would take it, by the host's name without its (bad) port.
        const proxied = (route === undefined || route.handler === handleExplorer) && proxy.match(hostName(req.headers.host), target) !== null;
        if (proxied) obs.label = 'proxy';
        if (proxied || route?.kind === 'bytes') {
          sendEmpty(res, 400);
          return true;
        }
        throw new VouchError(
          'bad_request',
          (facts & MANY_HOSTS) !== 0
            ? 'the request has more than one Host header (RFC 9112, section 3.2)'
            : 'the Host header is not a host name with a port of at most 65535 (RFC 9112, section 3.2)',
        );
      }
      // The explorer's paths yield to a proxy route (a Host route may proxy a whole site, "/" included).
      if (route === undefined || route.handler === handleExplorer) {
        const routed = proxy.match(req.headers.host, target);
        if (routed !== null) {
          obs.label = 'proxy';
          // It answers every failure itself, empty-bodied; what escapes it still stays with this request.
          (FAULT !== null && FAULT.stage === 'proxy' && FAULT.route === 'proxy' ? Promise.reject(faultOf('proxy')) : proxy.handle(req, res, routed)).catch(
            (e: unknown) => failRequest(ctx, metrics, req, res, true, path, e, 'proxy'),
          );
          return false;
        }
      }
      if (route === undefined) {
        req.resume();
        throw new VouchError('not_found', `no such path: ${path.slice(0, 200)}`, { resource: path.slice(0, 200) });
      }
      if (!route.methods.includes(req.method ?? '')) {
        req.resume();
        throw new VouchError('method_not_allowed', `${req.method} is not allowed on ${path}; use ${route.methods.join(' or ')}`, {
          resource: path,
          evidence: { allow: route.methods.join(', ') },
        });
      }
      if (route.kind === 'json' && !acceptsJson(rawHeader(req, 'accept')) && !(route.handler === submit && wantsNdjson(req))) {
        req.resume();
        throw new VouchError('not_acceptable', 'this endpoint answers application/json only; the Accept header rules it out', { resource: path });
      }
      if (FAULT !== null) injectFault('handler', obs.label);
      const done =
        FAULT !== null && FAULT.stage === 'handler_async' && FAULT.route === obs.label
          ? new Promise<void>((_ok, fail) => setImmediate(() => fail(faultOf('handler_async'))))
          : route.handler(ctx, req, res, search, own, obs);
      if (done instanceof Promise) {
        done.catch((e: unknown) => failRequest(ctx, metrics, req, res, route.kind === 'bytes', path, e, 'handler_async'));
        return false;
      }
    } catch (e) {
      failRequest(ctx, metrics, req, res, route?.kind === 'bytes', path, e, 'handler');
    }
    return true;
  };

  /** What the request listener does for one request (`listener` catches what it throws). */
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const target = req.url ?? '/';
    const q = target.indexOf('?');
    // A lookup's path is the constant itself (no slice made; the log line compares it with the route label by identity).
    const lookupPath = q === LOOKUP_PATH.length && target.startsWith(LOOKUP_PATH);
    const path = lookupPath ? LOOKUP_PATH : q === -1 ? target : target.slice(0, q);
    const route = lookupPath ? LOOKUP_ROUTE : (ROUTE_TABLE.get(path) ?? (path.startsWith(TILE_PREFIX) ? TILE_ROUTE : undefined));
    const obs: Observed = {
      // The table's own string: its hash is kept, where the path is a new string each request (metrics and log look labels up).
      label: route === undefined ? 'unknown' : route.handler === handleExplorer ? 'explorer' : route.label,
      url: undefined,
      path,
      search: q === -1 ? '' : target.slice(q + 1),
      socket: req.socket as CountedSocket,
      started: performance.now(),
      facts: headerFacts(req),
      batched: false,
      recorded: false,
    };
    if ((obs.facts & MIN_SIZE) !== 0 && route !== undefined && (req.method === 'GET' || req.method === 'HEAD')) {
      const wanted = minTreeSize(req);
      if (typeof wanted !== 'number' || ctx.state === null || ctx.state.size < wanted) {
        // Behind (or a bad value): wait for a sync, bounded, then answer as usual or 503 behind.
        atLeast(ctx, wanted)
          .then(
            () => {
              stamp(res, route);
              const done = dispatch(req, res, target, route, obs);
              if (!obs.batched) settle(req, res, obs, done);
            },
            (e: unknown) => {
              if (e instanceof VouchError && e.code === 'behind' && !res.headersSent) res.setHeader('retry-after', '1');
              failRequest(ctx, metrics, req, res, route.kind === 'bytes', path, e, 'handler_async');
              settle(req, res, obs, true);
            },
          )
          .catch((e: unknown) => {
            failRequest(ctx, metrics, req, res, route.kind === 'bytes', path, e, 'handler_async');
          });
        return;
      }
    }
    stamp(res, route);
    const done = dispatch(req, res, target, route, obs);
    if (!obs.batched) settle(req, res, obs, done);
  };

  /** The fleet headers, but not on lookups: their 200 sets them in its header literal (sendWithProof), an error in failRequest. */
  const stamp = (res: ServerResponse, route: Route | undefined): void => {
    if (route !== LOOKUP_ROUTE) stampFleet(ctx, res);
  };

  return (req, res) => {
    try {
      onRequest(req, res);
    } catch (e) {
      // Outside every handler (routing, the header scan, settling): a 500 for this request, as its path's kind wants.
      const path = (req.url ?? '/').split('?')[0]!;
      failRequest(ctx, metrics, req, res, ROUTE_TABLE.get(path)?.kind === 'bytes' || path.startsWith(TILE_PREFIX), path, e, 'request');
    }
  };
}
