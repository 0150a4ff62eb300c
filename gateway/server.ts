/**
 * The gateway's request handler on node:http: routing, method and Accept
 * rules, readiness, and the lookup, authority, checkpoint, document and
 * submit endpoints (DESIGN 3.1, 3.5). Downloads are in
 * `routes/download.ts`; a path no endpoint claims goes to the proxy routes
 * (`routes/proxy.ts`, 3.6) when one applies, else 404 JSON.
 *
 * Every request, whatever answers it, is logged once at info when its
 * answer ends (`request`: method, path without the query, the `url`
 * parameter, route, status, ms, bytes, remote) and counted in the metrics
 * (`metrics.ts`, served at /metrics).
 *
 * Must hold: every JSON path answers JSON with `success` — 400, 404 (also
 * unknown paths), 405, 406, 500 and 503 included; an exception in a
 * handler becomes a 500 JSON answer (or an empty 500 on byte paths), never
 * a crash, a stack trace or HTML. The request line and the metric labels
 * never carry a header or a query value other than `url`, and route labels
 * are route templates (or `proxy`, `explorer`, `unknown`), never raw paths.
 * A request with more than one Host header is answered 400 on every path
 * (RFC 9112 3.2; empty on byte and proxy paths) and its connection closed,
 * before any route sees it. A request answered before its body arrived
 * (401, 413, 404, a proxy answer, ...) keeps its connection at most
 * LINGER_MS longer for the rest of the body, then the connection is closed.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { createHash, timingSafeEqual } from 'node:crypto';
import { VouchError } from '../chain/errors.ts';
import type { Block } from '../chain/block.ts';
import { LRUCache } from 'lru-cache';
import { acceptsJson, parseJsonBody, parseSelectionQuery, rawHeader, readBody, sendEmpty, sendError, sendJson, sendJsonTagged, statusOf } from './http-util.ts';
import { handleDownload } from './routes/download.ts';
import { handleHealthz, handleReadyz } from './routes/health.ts';
import { handleBlock, handleBlocks, handleUnits, handleVersions } from './routes/browse.ts';
import { handleExplorer, EXPLORER_PATHS } from './explorer.ts';
import { ProxyRoutes } from './routes/proxy.ts';
import { openApiDocument, skillDocument, SKILL_PATH } from './routes/openapi.ts';
import { GatewayMetrics, handleMetrics } from './metrics.ts';
import { logRequest } from './log.ts';
import type { GatewayContext } from './context.ts';

export const SUBMIT_BODY_LIMIT = 1024 * 1024;

/** What one request handler (one gateway) keeps besides the context: its lookup answer cache and its metrics. */
interface HandlerState {
  answers: LRUCache<string, CachedAnswer>;
  metrics: GatewayMetrics;
}

type Handler = (ctx: GatewayContext, req: IncomingMessage, res: ServerResponse, search: string, own: HandlerState) => Promise<void> | void;

interface Route {
  methods: string[];
  /**
   * JSON endpoint (Accept rule, JSON errors), byte endpoint (empty-bodied
   * errors), or a document of another type (no Accept rule, JSON errors).
   */
  kind: 'json' | 'bytes' | 'document';
  handler: Handler;
}

/**
 * Serialized lookup answers of blocks that are not revoked, by record_hash
 * (blocks in the index never change), bounded in bytes.
 */
const lookupTexts = new LRUCache<string, Buffer>({ maxSize: 16 * 1024 * 1024, sizeCalculation: (t) => Math.max(1, t.length) });

function lookupText(block: Block): Buffer {
  let text = lookupTexts.get(block.record_hash);
  if (text === undefined) {
    text = Buffer.from(JSON.stringify(lookupBody(block, null)));
    lookupTexts.set(block.record_hash, text);
  }
  return text;
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

/**
 * Whole lookup answers by query string, per gateway (one cache per request
 * handler): valid while the chain has the same size and the date is the
 * same (revocations take effect by date), so repeated lookups skip parsing,
 * selection and serialisation. Bounded in bytes; answers showing a
 * revocation are not kept.
 */
interface CachedAnswer { size: number; today: string; etag: string; text: Buffer }

function answerCache(): LRUCache<string, CachedAnswer> {
  return new LRUCache<string, CachedAnswer>({ maxSize: 16 * 1024 * 1024, sizeCalculation: (a, k) => a.text.length + k.length + 64 });
}

const lookup: Handler = (ctx, _req, res, search, own) => {
  const today = ctx.today();
  if (ctx.state !== null) {
    const hit = own.answers.get(search);
    if (hit !== undefined && hit.size === ctx.state.size && hit.today === today) {
      sendJsonTagged(res, hit.text, hit.etag);
      return;
    }
  }
  const q = parseSelectionQuery(search);
  const state = ready(ctx);
  const sel = state.index.select(q.url, { semver: q.semver, at: q.at, today });
  const what = `${q.url}${q.semver ? ` version ${q.semver}` : ''}${q.at ? ` at ${q.at}` : ''}`;
  if (sel === null) throw new VouchError('not_found', `no provenance block is on file for ${what}`, { resource: q.url });
  if (sel.revokedBy && q.semver === undefined) {
    throw new VouchError('not_found', `no provenance block is on file for ${what}: every endorsement in force is revoked`, { resource: q.url });
  }
  const etag = `"${sel.block.record_hash}"`;
  if (sel.revokedBy) sendJson(res, 200, lookupBody(sel.block, sel.revokedBy), { etag });
  else {
    const text = lookupText(sel.block);
    if (search.length <= 4096) own.answers.set(search, { size: state.size, today, etag, text });
    sendJsonTagged(res, text, etag);
  }
};

const authority: Handler = (ctx, _req, res) => {
  sendJson(res, 200, lookupBody(ready(ctx).authority, null));
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
  const given = createHash('sha256').update(m?.[1] ?? '').digest();
  return timingSafeEqual(given, expected) && m !== null;
}

const submit: Handler = async (ctx, req, res) => {
  if (ctx.submitter === null || ctx.submitTokenHash === null) {
    throw new VouchError('not_found', 'submit is disabled: this gateway is not an authority', { resource: '/v1/submit' });
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
  const body = parseJsonBody(await readBody(req, SUBMIT_BODY_LIMIT));
  ready(ctx);
  const result = await ctx.submitter.submit(body);
  sendJson(res, result.httpStatus, result.body);
};

export const ROUTES: Record<string, Route> = {
  '/v1/endorsement': { methods: ['GET', 'HEAD'], kind: 'json', handler: lookup },
  '/v1/object': { methods: ['GET', 'HEAD'], kind: 'json', handler: lookup },
  '/v1/authority': { methods: ['GET', 'HEAD'], kind: 'json', handler: authority },
  '/v1/checkpoint': { methods: ['GET', 'HEAD'], kind: 'json', handler: checkpoint },
  '/v1/openapi.json': { methods: ['GET', 'HEAD'], kind: 'json', handler: openapi },
  [SKILL_PATH]: { methods: ['GET', 'HEAD'], kind: 'document', handler: skill },
  '/v1/submit': { methods: ['POST'], kind: 'json', handler: submit },
  '/v1/download': { methods: ['GET', 'HEAD'], kind: 'bytes', handler: handleDownload },
  '/v1/blocks': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleBlocks },
  '/v1/block': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleBlock },
  '/v1/versions': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleVersions },
  '/v1/units': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleUnits },
  '/healthz': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleHealthz },
  '/readyz': { methods: ['GET', 'HEAD'], kind: 'json', handler: handleReadyz },
  '/metrics': { methods: ['GET', 'HEAD'], kind: 'document', handler: (_ctx, req, res, _search, own) => handleMetrics(own.metrics, req, res) },
  ...Object.fromEntries(EXPLORER_PATHS.map((p) => [p, { methods: ['GET', 'HEAD'], kind: 'document', handler: handleExplorer } satisfies Route])),
};

/** `ROUTES` by path, for the one lookup every request makes. */
const ROUTE_TABLE = new Map<string, Route>(Object.entries(ROUTES));

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

/** How many Host fields the request has (node:http keeps only the first in `req.headers`). */
function hostFields(req: IncomingMessage): number {
  const raw = req.rawHeaders;
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]!;
    if (k.length === 4 && k.toLowerCase() === 'host') n++;
  }
  return n;
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
 * Logs and counts one request when its answer ends (or the client leaves:
 * status 499 when no answer was started). `label()` is read then, so the
 * dispatch can settle the route label first.
 */
function observeRequest(ctx: GatewayContext, metrics: GatewayMetrics, req: IncomingMessage, res: ServerResponse, path: string, search: string, label: () => string): void {
  const started = performance.now();
  const socket = req.socket;
  const sentBefore = socket.bytesWritten;
  res.on('close', () => { // a response closes once: `on` spares the `once` wrapper
    if (!req.complete && res.writableFinished) lingerOnBody(req, Math.min(LINGER_MS, ctx.config.clients.request_timeout * 1000));
    const seconds = (performance.now() - started) / 1000;
    const status = res.headersSent ? res.statusCode : 499;
    const bytes = Math.max(0, socket.bytesWritten - sentBefore);
    const route = label();
    const method = req.method ?? '';
    metrics.observe(route, method, status, seconds, bytes);
    if (ctx.log.enabled?.('info') === false) return;
    logRequest(ctx.log, {
      method, path: path.length > LOGGED_CHARS ? path.slice(0, LOGGED_CHARS) : path, route, status, ms: Math.round(seconds * 1e5) / 100, bytes,
      remote: socket.remoteAddress ?? null, url: urlParam(search), aborted: !res.writableFinished,
    });
  });
}

/** Answers a request whose handler threw (or rejected); an unexpected exception is logged. */
function failRequest(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse, route: Route | undefined, path: string, e: unknown): void {
  if (!(e instanceof VouchError)) ctx.log.error('request failed', { method: req.method, path, error: (e as Error)?.message ?? String(e) });
  if (route?.kind === 'bytes') {
    sendEmpty(res, statusOf(e));
  } else sendError(res, e);
}

/**
 * The node:http request listener of the gateway. `parts.proxy`: the proxy
 * routes (DESIGN 3.6), which get what no endpoint above claims;
 * `parts.metrics`: where requests are counted and `/metrics` reads. Either
 * is made here when not given (the gateway gives both, to close the proxy
 * and feed the metrics its mirror).
 * @throws VouchError usage on an unusable proxy route (the start fails).
 */
export function createRequestHandler(ctx: GatewayContext, parts: { proxy?: ProxyRoutes; metrics?: GatewayMetrics } = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const proxy = parts.proxy ?? new ProxyRoutes(ctx);
  const metrics = parts.metrics ?? new GatewayMetrics(ctx, { proxy });
  const own: HandlerState = { answers: answerCache(), metrics };
  return (req, res) => {
    const target = req.url ?? '/';
    const q = target.indexOf('?');
    const path = q === -1 ? target : target.slice(0, q);
    const search = q === -1 ? '' : target.slice(q + 1);
    const route = ROUTE_TABLE.get(path);
    let label = route === undefined ? 'unknown' : route.handler === handleExplorer ? 'explorer' : path;
    observeRequest(ctx, metrics, req, res, path, search, () => label);
    try {
      if (hostFields(req) > 1) {
        // Which host is meant is ambiguous (and so is the framing of such a request): refused, and the connection closed.
        req.resume();
        res.setHeader('connection', 'close');
        const proxied = (route === undefined || route.handler === handleExplorer) && proxy.match(req.headers.host, target) !== null;
        if (proxied) label = 'proxy';
        if (proxied || route?.kind === 'bytes') return sendEmpty(res, 400);
        throw new VouchError('bad_request', 'the request has more than one Host header (RFC 9112, section 3.2)');
      }
      // The explorer's paths yield to a proxy route (a Host route may proxy a whole site, "/" included).
      if (route === undefined || route.handler === handleExplorer) {
        const routed = proxy.match(req.headers.host, target);
        if (routed !== null) {
          label = 'proxy';
          void proxy.handle(req, res, routed); // answers every failure itself, empty-bodied
          return;
        }
      }
      if (route === undefined) {
        req.resume();
        throw new VouchError('not_found', `no such path: ${path.slice(0, 200)}`, { resource: path.slice(0, 200) });
      }
      if (!route.methods.includes(req.method ?? '')) {
        req.resume();
        throw new VouchError('method_not_allowed', `${req.method} is not allowed on ${path}; use ${route.methods.join(' or ')}`, {
          resource: path, evidence: { allow: route.methods.join(', ') },
        });
      }
      if (route.kind === 'json' && !acceptsJson(rawHeader(req, 'accept'))) {
        req.resume();
        throw new VouchError('not_acceptable', 'this endpoint answers application/json only; the Accept header rules it out', { resource: path });
      }
      const done = route.handler(ctx, req, res, search, own);
      if (done instanceof Promise) done.catch((e: unknown) => failRequest(ctx, req, res, route, path, e));
    } catch (e) {
      failRequest(ctx, req, res, route, path, e);
    }
  };
}
