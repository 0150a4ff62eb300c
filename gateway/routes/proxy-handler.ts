/**
 * Reverse-proxy routes (docs/spec/design.md §3.6): the gateway as a drop-in
 * verifying proxy. The artifact URL is `canonical` (else the origin) + the
 * target after the prefix (proxy-route-table.ts). Endorsed: verified bytes; not
 * endorsed: 404 on `deny`, the origin's answer streamed on `pass`; `audit`
 * serves a mismatch or revocation marked `X-Vouch-Audit`. Ecosystem kinds
 * also answer their metadata through ecosystems/.
 * Owns: route policies, the pass-through stream, metadata fetches and cache,
 * `MetadataIO`, failures in the client's form, the proxy's counters.
 * Trusts: the verified index; `ArtifactSource.obtain`; the operator's origins.
 * Must hold: an enforce route serves only bytes that passed the hash check;
 * nothing unendorsed is fetched on deny; a leaving client cancels the origin
 * request; nothing throws into the handler; pass-through and metadata
 * never follow a redirect, so no Location points the gateway inward.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import { finished } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Agent, type Dispatcher } from 'undici';
import { VouchError, isVouchError } from '../../chain/errors.ts';
import type { Selection } from '../../chain/select.ts';
import type { MetadataIO, MetadataResponse, Rendered, RenderView, VerifiedDigest } from '../ecosystems/ecosystem.ts';
import { digestOfVerified, knownDigest, type ChecksumAlgorithm } from '../ecosystems/maven-checksums.ts';
import { decide, renderJob, type RenderJob } from '../ecosystems/render-job.ts';
import { RenderPool } from '../ecosystems/render-pool.ts';
import { artifactUrlOf, compileRoutes, gatewayUrlOf, matchRoute, parseHost, type ProxyMatch, type ProxyRoute } from './proxy-route-table.ts';
import { MetadataCache, type OriginAnswer } from '../ecosystems/metadata-cache.ts';
import type { ArtifactSource, GatewayContext } from '../context.ts';
import { etagMatches, sendPaced, serveVerified, stallGuard } from './download.ts';
import { sendEmpty, statusOf } from '../http/http-util.ts';
import { keptOriginHeaders } from '../../artifacts/stored-artifact.ts';
import { OciRoutes } from '../ecosystems/oci-route.ts';
import { listingHeaders } from '../ecosystems/listing-proof.ts';

/** What the proxy did, since the start (for metrics). */
export interface ProxyStats {
  /** Verified answers (200 or 304) of endorsed URLs, audit-revoked ones included. */
  verified: number;
  /** Unendorsed URLs refused on deny routes (404). */
  denied: number;
  /** Unendorsed URLs streamed through on pass routes. */
  passed: number;
  /** Targets refused as escaping the route (400). */
  refused: number;
  /** Hash mismatches refused on enforce routes (409). */
  mismatches: number;
  /** Hash mismatches on audit routes, served from the origin. */
  auditMismatches: number;
  /** Revoked versions refused on enforce routes (410). */
  revoked: number;
  /** Revoked versions served on audit routes. */
  auditRevoked: number;
  /** Other failures: origin errors and timeouts, not ready, methods. */
  failed: number;
  /** Metadata answers of ecosystem routes (packuments, simple pages, version lists) sent. */
  metadata: number;
  /** Origin metadata served stale from the cache because the origin failed. */
  metadataStale: number;
}

/** Largest metadata answer read from an origin (npm's largest packuments are tens of MiB). */
export const MAX_METADATA_BYTES = 48 * 1024 * 1024;
/** Metadata coming in from an origin is charged to the memory budget in steps of this many bytes. */
const CHARGE_STEP = 1024 * 1024;
const KEPT_METADATA_HEADERS = ['content-type', 'location', 'etag', 'last-modified', 'cache-control'] as const;

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'trailers',
  'transfer-encoding',
  'upgrade',
]);
/**
 * The host rendered metadata names the gateway by (random per process, so
 * no origin can write it); replaced by the request's host when sent, so one
 * rendering serves every host clients reach the gateway at.
 */
const HOST_MARK = `vouch-host-${randomBytes(12).toString('hex')}.invalid`;
/** Metadata bodies smaller than this are sent without a charge to the memory budget (one write; bounded by connections). */
const UNCHARGED_BODY = 64 * 1024;
/**
 * Metadata bytes charged here when the memory budget has no room: metadata,
 * unlike artifacts, cannot spool to disk, so a gateway whose budget is
 * small or 0 (`mirror.memory_bytes: 0`) or taken by artifacts still answers
 * it, within this bound.
 */
const METADATA_RESERVE = 64 * 1024 * 1024;

/**
 * A rendered answer as kept: its body for the host of the request that made
 * it (`whole`; for every host when it has no gateway link, `host` null) and
 * the pieces of it between the host's places (views of `whole`), to make
 * the body for another host from.
 */
type Template =
  | { ok: true; status: number; contentType: string; headers: Record<string, string>; whole: Buffer; host: string | null; parts: Buffer[] }
  | { ok: false; status: number; message: string };
const HOST_MARK_BYTES = Buffer.from(HOST_MARK);

/** `bytes` split at every HOST_MARK (views, no copy). */
function splitAtMark(bytes: Buffer): Buffer[] {
  const parts: Buffer[] = [];
  let from = 0;
  for (let at = bytes.indexOf(HOST_MARK_BYTES); at !== -1; at = bytes.indexOf(HOST_MARK_BYTES, from)) {
    parts.push(bytes.subarray(from, at));
    from = at + HOST_MARK_BYTES.length;
  }
  parts.push(bytes.subarray(from));
  return parts;
}

/** The parts joined with `host` between them, as one buffer. */
function joinWith(parts: readonly Buffer[], host: string): Buffer {
  const h = Buffer.from(host);
  const out = Buffer.allocUnsafe(parts.reduce((n, p) => n + p.length, 0) + h.length * (parts.length - 1));
  let at = 0;
  parts.forEach((p, i) => {
    if (i > 0) at += h.copy(out, at);
    at += p.copy(out, at);
  });
  return out;
}

/** A serial per chain state object (a new state after a reload is another chain). */
const stateSerials = new WeakMap<object, number>();
let nextStateSerial = 0;
function stateSerial(state: object): number {
  let n = stateSerials.get(state);
  if (n === undefined) stateSerials.set(state, (n = ++nextStateSerial));
  return n;
}

/** Request headers never forwarded on pass-through (besides hop-by-hop). */
const NOT_FORWARDED = new Set(['host', 'content-length', 'expect']);

/** Connection-named and hop-by-hop headers of a message. */
function hopHeaders(connection: string | string[] | undefined): Set<string> {
  const names = new Set(HOP_BY_HOP);
  for (const v of Array.isArray(connection) ? connection : connection === undefined ? [] : [connection]) {
    for (const t of v.split(',')) if (t.trim() !== '') names.add(t.trim().toLowerCase());
  }
  return names;
}

/** An undici error that means the origin was too slow. */
function isTimeout(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'ETIMEDOUT';
}

/** An artifact source that hands out one already obtained result (so `serveVerified` serves it). */
function onceSource(base: ArtifactSource, obtained: Awaited<ReturnType<ArtifactSource['obtain']>>): ArtifactSource & { used: boolean } {
  const source = {
    used: false,
    sendBuffer: base.sendBuffer?.bind(base),
    obtain: async () => {
      if (source.used) throw new VouchError('internal_error', 'proxy: an obtained artifact was asked for twice');
      source.used = true;
      return obtained;
    },
  };
  return source;
}

export class ProxyRoutes {
  readonly routes: readonly ProxyRoute[];
  private readonly counters: ProxyStats = {
    verified: 0,
    denied: 0,
    passed: 0,
    refused: 0,
    mismatches: 0,
    auditMismatches: 0,
    revoked: 0,
    auditRevoked: 0,
    failed: 0,
    metadata: 0,
    metadataStale: 0,
  };
  private agent: Agent | null = null;
  private readonly metadata = new MetadataCache();
  private readonly renderPool = new RenderPool();
  /** Metadata bodies being sent and charged (`holdMetadata`), with the number of responses sending each and how to give the charge back. */
  private readonly sending = new Map<Buffer, { refs: number; release: () => void }>();
  /** Bytes of METADATA_RESERVE in use. */
  private reserveUsed = 0;

  /** `kind: oci` routes (ecosystems/oci-route.ts). */
  private readonly oci: OciRoutes;

  /** @throws VouchError usage when a route is not usable (see `compileRoutes`). */
  constructor(private readonly ctx: GatewayContext) {
    this.routes = compileRoutes(ctx.config.proxy.routes);
    this.oci = new OciRoutes(ctx, this.routes, {
      count: (what) => {
        this.counters[what]++;
      },
    });
  }

  stats(): ProxyStats {
    return { ...this.counters };
  }

  /** What the metadata cache holds. */
  metadataCacheStats(): { entries: number; bytes: number } {
    return this.metadata.stats();
  }

  /**
   * The route a request falls under, with its artifact URL or the reason it
   * is refused; null when no route applies (the caller answers 404 JSON).
   * `target` is the raw request target (`req.url`).
   */
  match(hostHeader: string | undefined, target: string): ProxyMatch | null {
    const m = matchRoute(this.routes, hostHeader, target);
    if (m !== null || !/^\/v2\/?(?:\?|$)/.test(target)) return m;
    // The registry API's base `/v2/` when the OCI routes are all under `/v2/<registry host>/`.
    const root = this.routes.find((r) => r.kind === 'oci');
    return root === undefined
      ? null
      : { route: root, url: root.canonical, fetchUrl: root.origin, upstreamPath: root.originPath, rest: '', query: '', refusal: null };
  }

  /** Answers a matched request. Never rejects: failures become statuses (empty-bodied, or in the client's form on ecosystem routes). */
  async handle(req: IncomingMessage, res: ServerResponse, m: ProxyMatch): Promise<void> {
    try {
      await this.answer(req, res, m);
    } catch (e) {
      this.counters.failed++;
      this.ctx.log.error('proxy request failed', { route: m.route.label, url: m.url, error: (e as Error)?.message ?? String(e) });
      this.fail(res, m.route, 500, 'vouch: internal error');
    }
  }

  /** Closes the pass-through connections. */
  async close(): Promise<void> {
    const agent = this.agent;
    this.agent = null;
    await Promise.all([agent?.close(), this.renderPool.close(), this.oci.close()]);
  }

  // -------------------------------------------------------------------------

  /**
   * A failure: empty-bodied on a plain route (the download contract); on an
   * ecosystem route with the short reason in the form its client prints.
   */
  private fail(res: ServerResponse, route: ProxyRoute, status: number, message: string, headers: Record<string, string> = {}): void {
    if (route.ecosystem === null) return sendEmpty(res, status, headers);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const { contentType, body, reason, status: sent } = route.ecosystem.errorBody(message, status, res.req?.url);
    if (reason !== undefined) res.statusMessage = reason.replace(/[^\x20-\x7e]/g, '?'); // pip prints the status line, not the body
    res.writeHead(sent ?? status, {
      'content-type': contentType,
      'content-length': Buffer.byteLength(body),
      'x-content-type-options': 'nosniff',
      'cache-control': 'no-store',
      ...headers,
    });
    res.end(res.req?.method === 'HEAD' ? undefined : body);
  }

  private async answer(req: IncomingMessage, res: ServerResponse, m: ProxyMatch): Promise<void> {
    const { route } = m;
    req.resume(); // a GET or HEAD has no body worth reading; nothing is forwarded
    if (m.refusal !== null) {
      this.counters.refused++;
      this.ctx.log.debug('proxy: refused a request target', { route: route.label, reason: m.refusal });
      return this.fail(res, route, 400, `vouch: refused request path (${m.refusal})`);
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      this.counters.failed++;
      return this.fail(res, route, 405, `vouch: ${req.method} is not served through vouch (GET and HEAD only)`, { allow: 'GET, HEAD' });
    }
    if (this.ctx.state === null) {
      this.counters.failed++;
      return this.fail(res, route, 503, 'vouch: the chain is not loaded and verified yet; retry shortly', { 'retry-after': '1' });
    }
    if (route.kind === 'oci') return this.oci.handle(req, res, m);
    if (route.ecosystem !== null) {
      const c = route.ecosystem.classify(m.rest, m.query);
      if (c.type === 'metadata') {
        try {
          return await c.answer(this.metadataIO(req, res, m));
        } catch (e) {
          if (!isVouchError(e)) throw e;
          // The origin failed and nothing usable was cached (or a module refused the metadata).
          this.counters.failed++;
          this.ctx.log.warn('proxy: metadata unavailable', { route: route.label, url: m.fetchUrl, code: e.code, error: e.message.split('\n')[0] });
          const status = e.code === 'too_large' ? 502 : statusOf(e);
          return this.fail(res, route, status, `vouch: cannot read ${route.kind} metadata for ${m.url}: ${e.message.split('\n')[0]}`);
        }
      }
      if (c.type === 'other') {
        if (route.unendorsed === 'pass') {
          this.counters.passed++;
          return this.passThrough(req, res, m, {});
        }
        this.counters.denied++;
        return this.fail(res, route, 404, `vouch: ${m.url} is not served through vouch (not a ${route.kind} package or artifact path)`);
      }
    }
    return this.serveArtifact(req, res, m);
  }

  /** An artifact request: the verified bytes of an endorsed URL, else the route's policy for unendorsed ones. */
  private async serveArtifact(req: IncomingMessage, res: ServerResponse, m: ProxyMatch & { refusal: null }): Promise<void> {
    const { route } = m;
    const sel = this.ctx.state?.index.select(m.url, { today: this.ctx.today() }) ?? null;
    if (sel === null) {
      if (route.unendorsed === 'deny') {
        this.counters.denied++;
        return this.fail(res, route, 404, `vouch: ${m.url} is not endorsed by the authority, refused`);
      }
      this.counters.passed++;
      if (route.ecosystem !== null) {
        this.ctx.log.warn('proxy: passing an unendorsed artifact through unverified', { route: route.label, url: m.url });
        return this.passThrough(req, res, m, { 'x-vouch-unendorsed': 'passed unverified' });
      }
      return this.passThrough(req, res, m, {});
    }
    const audit: string[] = [];
    if (sel.revokedBy !== null) {
      if (route.mode === 'enforce') {
        this.counters.revoked++;
        return this.fail(res, route, 410, `vouch: ${m.url} (${sel.entry.semver}) is revoked by the authority, refused`);
      }
      this.counters.auditRevoked++;
      audit.push('revoked');
      this.ctx.log.warn('proxy audit: serving a revoked version', {
        route: route.label,
        url: m.url,
        index: sel.block.index,
        revoked_by: sel.revokedBy.record_hash,
        audit_revoked: this.counters.auditRevoked,
      });
    }
    return this.serveEndorsed(req, res, m, sel, audit);
  }

  /** The verified path; on an audit route a mismatch falls back to the origin's response. */
  private async serveEndorsed(req: IncomingMessage, res: ServerResponse, m: ProxyMatch & { refusal: null }, sel: Selection, audit: string[]): Promise<void> {
    const { route } = m;
    const extra: Record<string, string> = audit.length > 0 ? { 'x-vouch-audit': audit.join(', ') } : {};
    if (etagMatches(req.headers['if-none-match'], `"${sel.entry.artifact_hash}"`)) {
      this.counters.verified++;
      return serveVerified(this.ctx, req, res, sel, extra, { compactUns: route.ecosystem !== null }); // 304 without fetching
    }
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort(new Error('the client went away'));
    };
    res.on('close', onClose);
    let obtained;
    try {
      // The route's canonical host is the operator's too: a redirect from the origin to it is not guarded.
      obtained = await this.ctx.artifacts.obtain(m.fetchUrl, sel.entry.artifact_hash, {
        signal: abort.signal,
        trustedHosts: [new URL(m.route.canonical).host],
      });
    } catch (e) {
      res.off('close', onClose);
      if (abort.signal.aborted) {
        res.destroy();
        return;
      }
      if (isVouchError(e) && e.code === 'hash_mismatch') {
        const evidence = {
          route: route.label,
          url: sel.entry.artifact_url,
          ...(m.fetchUrl !== m.url ? { fetched_from: m.fetchUrl } : {}),
          expected: sel.entry.artifact_hash,
          actual: e.evidence?.actual ?? null,
        };
        if (route.mode === 'audit') {
          this.counters.auditMismatches++;
          this.ctx.log.warn("proxy audit: hash mismatch; serving the origin's bytes", { ...evidence, audit_mismatches: this.counters.auditMismatches });
          return this.passThrough(req, res, m, { 'x-vouch-audit': [...audit, 'mismatch'].join(', ') });
        }
        this.counters.mismatches++;
        this.ctx.log.warn('proxy: hash mismatch: refused to serve', evidence);
        return this.fail(res, route, 409, `vouch: hash mismatch for ${sel.entry.artifact_url}, refused (signed ${sel.entry.artifact_hash})`);
      }
      this.counters.failed++;
      if (isVouchError(e) && e.kind === 'integrity')
        this.ctx.log.warn('proxy: cannot verify', { route: route.label, url: sel.entry.artifact_url, code: e.code });
      const status = isVouchError(e) && e.code === 'too_large' ? 502 : statusOf(e);
      const what = status === 504 ? 'origin timeout' : status === 502 ? 'origin error' : 'cannot serve';
      return this.fail(res, route, status, `vouch: ${what} for ${sel.entry.artifact_url}${isVouchError(e) ? `: ${e.message.split('\n')[0]}` : ''}`);
    }
    res.off('close', onClose);
    this.counters.verified++;
    const source = onceSource(this.ctx.artifacts, obtained);
    try {
      await serveVerified(
        { ...this.ctx, artifacts: source },
        req,
        res,
        sel,
        { ...keptOriginHeaders(obtained.originHeaders), ...extra },
        { compactUns: route.ecosystem !== null },
      );
    } finally {
      if (!source.used) obtained.artifact.release();
    }
  }

  /** The request-scoped view an ecosystem module answers metadata through. */
  private metadataIO(req: IncomingMessage, res: ServerResponse, m: ProxyMatch & { refusal: null }): MetadataIO {
    const { route } = m;
    const { protocol, host } = this.requestBase(req);
    const base = `${protocol}//${host}`;
    const endorsed = (url: string) => {
      const sel = this.ctx.state?.index.select(url, { today: this.ctx.today() }) ?? null;
      return sel === null || sel.revokedBy !== null ? null : sel;
    };
    // What a download would answer 410: never offered by a listing, on a pass route either.
    const revoked = (url: string) => (this.ctx.state?.index.select(url, { today: this.ctx.today() }) ?? null)?.revokedBy != null;
    const artifactUrlOfRoute = (url: string) => artifactUrlOf(this.routes, route, url);
    // The route gatewayUrlOf picks (this one first, then the others in order): the tail is what it will classify.
    const artifactTailOf = (url: string) => {
      const r = [route, ...this.routes.filter((x) => x !== route)].find((x) => url.startsWith(x.canonical));
      return r === undefined ? null : url.slice(r.canonical.length);
    };
    // What a kept answer depends on besides the origin body: the route, the client's form, the chain state, the day.
    const keyOf = (form: string) => {
      const state = this.ctx.state;
      // The served note's size too: a listing's completeness proof is against it (listing-proof.ts).
      const chain = state === null ? '-' : `${stateSerial(state)}.${state.size}.${state.head.record_hash}.${state.note?.checkpoint.size ?? '-'}`;
      return `${route.index}\u0000${form}\u0000${chain}\u0000${this.ctx.today()}`;
    };
    const view: RenderView = {
      unendorsed: route.unendorsed,
      endorsed,
      revoked,
      artifactUrlOf: artifactUrlOfRoute,
      artifactTailOf,
      log: this.ctx.log,
      originUrl: (rest) => route.origin + rest,
      gatewayUrlOf: (url) => gatewayUrlOf(this.routes, route, `${protocol}//${HOST_MARK}`, url),
    };
    const send = (status: number, contentType: string, body: string | Buffer, headers: Record<string, string> = {}, kept = false) => {
      const bytes = typeof body === 'string' ? Buffer.from(body) : body;
      this.sendMetadata(req, res, route, status, { 'content-type': contentType, ...headers }, bytes, kept);
    };
    /** Sends a kept answer: its body for this request's host (made once per host), or its refusal. */
    const sendTemplate = (r: MetadataResponse, key: string, t: Template): void => {
      if (!t.ok) {
        this.counters.failed++;
        return this.fail(res, route, t.status, t.message);
      }
      let bytes = t.whole;
      let hostKey = key;
      if (t.host !== null && t.host !== host) {
        const parts = t.parts;
        hostKey = `${key}\u0000${host}`;
        bytes = this.metadata.derive(r.id, hostKey, () => {
          const b = joinWith(parts, host);
          return { value: b, bytes: b.length };
        });
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(t.headers)) headers[k] = v.split(HOST_MARK).join(host);
      send(t.status, t.contentType, bytes, headers, this.metadata.hasDerived(r.id, hostKey));
    };
    const io: MetadataIO = {
      req,
      res,
      unendorsed: route.unendorsed,
      rest: m.rest,
      query: m.query,
      log: this.ctx.log,
      fetch: async (rest, opts) => {
        const got = await this.metadata.get(`${route.index} ${opts.form} ${rest}`, route.metadataTtlMs, route.metadataMaxStaleMs, () =>
          this.fetchMetadata(route, rest, opts.accept),
        );
        if (got.stale) {
          this.counters.metadataStale++;
          this.ctx.log.warn('proxy: the origin failed; serving metadata from the cache', { route: route.label, url: route.origin + rest, age: got.age });
        }
        return got;
      },
      originUrl: (rest) => route.origin + rest,
      endorsed,
      revoked,
      artifactUrlOf: artifactUrlOfRoute,
      gatewayUrlOf: (url) => gatewayUrlOf(this.routes, route, base, url),
      artifactTailOf,
      remember: (r, form, make) => this.metadata.derive(r.id, keyOf(form), () => make(view)),
      answer: (r, form, make) => {
        const key = keyOf(form);
        sendTemplate(
          r,
          key,
          this.metadata.derive(r.id, key, () => this.render(route, view, make, host)),
        );
      },
      answerJob: async (r, form, job) => {
        const key = keyOf(form);
        sendTemplate(r, key, await this.metadata.deriveAsync(r.id, key, () => this.renderJob(route, view, job, r.body, host)));
      },
      send: (status, contentType, body, headers = {}) => send(status, contentType, body, headers),
      listingHeaders: (unit) => listingHeaders(this.ctx.state, unit),
      fail: (status, message) => {
        this.counters.failed++;
        this.fail(res, route, status, message);
      },
      passThrough: () => this.passThrough(req, res, m, {}),
      serveArtifact: async () => {
        if ((this.ctx.state?.index.select(m.url, { today: this.ctx.today() }) ?? null) === null) return false;
        await this.serveArtifact(req, res, m);
        return true;
      },
      verifiedDigest: (rest, algorithm) => this.verifiedDigest(req, res, route, rest, algorithm),
    };
    return io;
  }

  /**
   * `MetadataIO.verifiedDigest`: the digest of the verified bytes of
   * `route.canonical + rest` (fetched from `route.origin + rest` through the
   * mirror), with the refusals and audit fallbacks an artifact request gets.
   */
  private async verifiedDigest(
    req: IncomingMessage,
    res: ServerResponse,
    route: ProxyRoute,
    rest: string,
    algorithm: ChecksumAlgorithm,
  ): Promise<VerifiedDigest> {
    const url = route.canonical + rest;
    const sel = this.ctx.state?.index.select(url, { today: this.ctx.today() }) ?? null;
    if (sel === null) {
      if (route.unendorsed === 'pass') return { ok: 'pass' };
      this.counters.denied++;
      return { ok: false, status: 404, message: `vouch: ${url} is not endorsed by the authority, refused` };
    }
    if (sel.revokedBy !== null) {
      if (route.mode === 'audit') return { ok: 'pass' };
      this.counters.revoked++;
      return { ok: false, status: 410, message: `vouch: ${url} (${sel.entry.semver}) is revoked by the authority, refused` };
    }
    const hash = sel.entry.artifact_hash;
    const known = knownDigest(hash, algorithm);
    if (known !== null) return { ok: true, hex: known };
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort(new Error('the client went away'));
    };
    res.on('close', onClose);
    try {
      const obtained = await this.ctx.artifacts.obtain(route.origin + rest, hash, { signal: abort.signal, trustedHosts: [new URL(route.canonical).host] });
      try {
        return { ok: true, hex: await digestOfVerified(obtained.artifact, hash, algorithm) };
      } finally {
        obtained.artifact.release();
      }
    } catch (e) {
      if (abort.signal.aborted) return { ok: false, status: 499, message: 'vouch: the client went away' };
      if (isVouchError(e) && e.code === 'hash_mismatch') {
        if (route.mode === 'audit') return { ok: 'pass' };
        this.counters.mismatches++;
        this.ctx.log.warn('proxy: hash mismatch: refused a checksum', {
          route: route.label,
          url,
          method: req.method,
          expected: hash,
          actual: e.evidence?.actual ?? null,
        });
        return { ok: false, status: 409, message: `vouch: hash mismatch for ${url}, refused (signed ${hash})` };
      }
      const status = isVouchError(e) && e.code === 'too_large' ? 502 : statusOf(e);
      const what = status === 504 ? 'origin timeout' : status === 502 ? 'origin error' : 'cannot serve';
      return { ok: false, status, message: `vouch: ${what} for ${url}${isVouchError(e) ? `: ${e.message.split('\n')[0]}` : ''}` };
    } finally {
      res.off('close', onClose);
    }
  }

  /**
   * Makes an answer to keep: the module's rendering, its body split at the
   * host mark. A RangeError (a document too deep or too large to write back)
   * is a 502 with the reason, logged at warn: the origin's document, not a
   * fault of the gateway.
   */
  private render(
    route: ProxyRoute,
    view: RenderView,
    make: (view: RenderView) => Rendered,
    host: string,
    builtFrom: string = this.chainMark(),
  ): { value: Template; bytes: number } {
    let out: Rendered;
    try {
      out = make(view);
    } catch (e) {
      if (!(e instanceof RangeError)) throw e;
      this.ctx.log.warn('proxy: origin metadata cannot be handled', { route: route.label, error: e.message });
      out = { ok: false, status: 502, message: `vouch: the origin's ${route.kind} metadata cannot be handled (${e.message})` };
    }
    if (!out.ok) return { value: out, bytes: out.message.length };
    // A listing carries its unit's completeness proof, of the state it was built from (unless the chain moved meanwhile).
    if (out.unit !== undefined && this.chainMark() === builtFrom) out = { ...out, headers: { ...out.headers, ...listingHeaders(this.ctx.state, out.unit) } };
    const marked = Buffer.isBuffer(out.body) ? out.body : Buffer.from(out.body);
    const split = splitAtMark(marked);
    const head = { ok: true as const, status: out.status, contentType: out.contentType, headers: out.headers ?? {} };
    if (split.length === 1) return { value: { ...head, whole: marked, host: null, parts: split }, bytes: marked.length };
    const whole = joinWith(split, host);
    const h = Buffer.byteLength(host);
    const parts: Buffer[] = [];
    let at = 0;
    for (const p of split) {
      parts.push(whole.subarray(at, at + p.length));
      at += p.length + h;
    }
    return { value: { ...head, whole, host, parts }, bytes: whole.length };
  }

  /**
   * Makes an answer to keep from a render job in the render worker (this
   * thread answers its questions about the chain and replays its log
   * lines); on this thread when no worker can run.
   */
  private async renderJob(route: ProxyRoute, view: RenderView, job: RenderJob, body: Buffer, host: string): Promise<{ value: Template; bytes: number }> {
    const builtFrom = this.chainMark();
    const done = await this.renderPool.render(job, body, route.unendorsed, (urls) => decide(urls, view));
    if (done === null) return this.render(route, view, (v) => renderJob(job, body, v), host);
    for (const l of done.logs) this.ctx.log[l.level](l.msg, { route: route.label, ...l.fields });
    return this.render(route, view, () => done.rendered, host, builtFrom);
  }

  /** The chain state and served note as they are now (equal marks: nothing was appended or synced between). */
  private chainMark(): string {
    const state = this.ctx.state;
    return state === null ? '-' : `${stateSerial(state)}.${state.size}.${state.note?.checkpoint.size ?? '-'}`;
  }

  /**
   * Sends a metadata body: in pieces, each after the one before drained,
   * under the stall guard (a client that takes nothing for origin.timeout is
   * cut); a body of UNCHARGED_BODY or more is charged to the memory budget
   * once however many responses send it, while any does. When the budget
   * has no room: sent uncharged if a cache keeps the bytes anyway (`kept`),
   * else 503.
   */
  private sendMetadata(
    req: IncomingMessage,
    res: ServerResponse,
    route: ProxyRoute,
    status: number,
    headers: Record<string, string>,
    bytes: Buffer,
    kept: boolean,
  ): void {
    const head = {
      'content-length': String(bytes.length),
      'x-content-type-options': 'nosniff',
      'cache-control': 'no-cache',
      ...headers,
    };
    if (req.method === 'HEAD' || bytes.length === 0) {
      this.counters.metadata++;
      res.writeHead(status, head);
      res.end();
      return;
    }
    let release = () => {};
    if (bytes.length >= UNCHARGED_BODY) {
      const sending = this.sending.get(bytes);
      if (sending !== undefined) {
        sending.refs++;
      } else {
        const charge = this.holdMetadata(bytes.length);
        if (charge !== null) this.sending.set(bytes, { refs: 1, release: charge });
        else if (!kept) {
          this.counters.failed++;
          this.ctx.log.warn('proxy: no room in the memory budget for a metadata answer', { route: route.label, bytes: bytes.length });
          return this.fail(res, route, 503, 'vouch: the gateway has no memory to spare for this answer now; retry shortly', { 'retry-after': '1' });
        }
      }
      if (this.sending.has(bytes)) {
        release = () => {
          const s = this.sending.get(bytes)!;
          if (--s.refs > 0) return;
          this.sending.delete(bytes);
          s.release();
        };
      }
    }
    this.counters.metadata++;
    res.writeHead(status, head);
    finished(res, release);
    sendPaced(res, bytes, stallGuard(res, this.ctx.config.origin.timeout * 1000));
  }

  /**
   * Charges `n` bytes of metadata to the memory budget, or when that has no
   * room to METADATA_RESERVE; returns how to give them back, or null when
   * neither has room.
   */
  private holdMetadata(n: number): (() => void) | null {
    const artifacts = this.ctx.artifacts;
    if (artifacts.holdBytes === undefined) return () => {};
    if (artifacts.holdBytes(n)) return () => artifacts.unholdBytes?.(n);
    if (this.reserveUsed + n > METADATA_RESERVE) return null;
    this.reserveUsed += n;
    return () => {
      this.reserveUsed -= n;
    };
  }

  /** Scheme (of public_url) and authority (the request's Host, when it is a host name) that clients reach the gateway at. */
  private requestBase(req: IncomingMessage): { protocol: string; host: string } {
    const pub = new URL(this.ctx.config.public_url);
    const host = req.headers.host;
    if (host !== undefined && parseHost(host) !== null) return { protocol: pub.protocol, host: host.trim() };
    return { protocol: pub.protocol, host: pub.host };
  }

  /** One origin request for metadata: only `accept` is sent; the body is read whole, up to MAX_METADATA_BYTES. */
  private async fetchMetadata(route: ProxyRoute, rest: string, accept: string): Promise<OriginAnswer> {
    const url = route.origin + rest;
    let up: Dispatcher.ResponseData;
    try {
      up = await this.passAgent().request({
        origin: route.originAuthority,
        path: route.originPath + rest,
        method: 'GET',
        headers: { accept, 'accept-encoding': 'identity', 'user-agent': 'vouch-gateway' },
      });
    } catch (e) {
      throw new VouchError(isTimeout(e) ? 'origin_timeout' : 'origin_error', `${url}: ${(e as { code?: string }).code ?? (e as Error).message}`, {
        resource: url,
      });
    }
    const declared = Number(up.headers['content-length']);
    if (declared > MAX_METADATA_BYTES) {
      up.body.destroy();
      throw new VouchError('too_large', `${url}: metadata larger than ${MAX_METADATA_BYTES} bytes`, { resource: url });
    }
    // Received into one buffer of the declared length when there is one (no second copy), else in chunks;
    // charged to the memory budget while it comes in (refused past it: 503, retry), given back once it is read.
    const into = Number.isSafeInteger(declared) && declared >= 0 ? Buffer.allocUnsafe(declared) : null;
    const chunks: Buffer[] = [];
    let size = 0;
    let charged = 0;
    const releases: (() => void)[] = [];
    const charge = (upTo: number): void => {
      if (upTo <= charged) return;
      const more = Math.max(upTo - charged, CHARGE_STEP);
      const release = this.holdMetadata(more);
      if (release === null) {
        throw new VouchError('not_ready', `${url}: the gateway's memory budget has no room for this metadata now; retry shortly`, { resource: url });
      }
      releases.push(release);
      charged += more;
    };
    try {
      charge(into?.length ?? 0);
      for await (const chunk of up.body) {
        const c = chunk as Buffer;
        if (size + c.length > MAX_METADATA_BYTES) {
          throw new VouchError('too_large', `${url}: metadata larger than ${MAX_METADATA_BYTES} bytes`, { resource: url });
        }
        charge(size + c.length);
        if (into !== null && size + c.length <= into.length) c.copy(into, size);
        else chunks.push(c);
        size += c.length;
      }
    } catch (e) {
      up.body.destroy();
      if (isVouchError(e)) throw e;
      throw new VouchError(isTimeout(e) ? 'origin_timeout' : 'origin_error', `${url}: the body broke off`, { resource: url });
    } finally {
      for (const release of releases) release();
    }
    const headers: Record<string, string> = {};
    for (const name of KEPT_METADATA_HEADERS) {
      const v = up.headers[name];
      if (typeof v === 'string') headers[name] = v;
    }
    if (typeof up.headers['content-encoding'] === 'string' && up.headers['content-encoding'] !== 'identity') {
      throw new VouchError('origin_error', `${url}: the origin sent encoded metadata (${up.headers['content-encoding']}) although asked for identity`, {
        resource: url,
      });
    }
    const body =
      into !== null && size === into.length && chunks.length === 0
        ? into
        : Buffer.concat(into === null ? chunks : [into.subarray(0, Math.min(size, into.length)), ...chunks], size);
    return { status: up.statusCode, headers, body };
  }

  /** The Agent of pass-through and metadata requests: no redirect interceptor, so a redirect is never followed here. */
  private passAgent(): Agent {
    if (this.agent === null) {
      const timeoutMs = Math.round(this.ctx.config.origin.timeout * 1000);
      this.agent = new Agent({
        connect: { timeout: Math.min(10_000, timeoutMs) },
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs, // between two chunks: a long download may take longer in total
        keepAliveTimeout: 4_000,
      });
    }
    return this.agent;
  }

  /**
   * Streams the origin's answer for `m.url` to the client: its status and
   * headers minus hop-by-hop ones (plus `extra`), its body untouched. The
   * origin request is cancelled (socket destroyed) when the client leaves.
   */
  private async passThrough(req: IncomingMessage, res: ServerResponse, m: ProxyMatch & { refusal: null }, extra: Record<string, string>): Promise<void> {
    const { route } = m;
    const dropRequest = hopHeaders(req.headers.connection);
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (v === undefined || dropRequest.has(k) || NOT_FORWARDED.has(k)) continue;
      headers[k] = v;
    }
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort(new Error('the client went away'));
    };
    res.on('close', onClose);
    let up: Dispatcher.ResponseData;
    try {
      up = await this.passAgent().request({
        origin: route.originAuthority,
        path: m.upstreamPath,
        method: req.method === 'HEAD' ? 'HEAD' : 'GET',
        headers,
        signal: abort.signal,
      });
    } catch (e) {
      res.off('close', onClose);
      if (abort.signal.aborted) {
        res.destroy();
        return;
      }
      this.counters.failed++;
      const code = (e as { code?: unknown } | null)?.code;
      this.ctx.log.warn('proxy: origin failed on pass-through', { route: route.label, url: m.url, code: typeof code === 'string' ? code : 'error' });
      return sendEmpty(res, isTimeout(e) ? 504 : 502);
    }
    try {
      const drop = hopHeaders(up.headers['connection']);
      const out: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(up.headers)) {
        if (v === undefined || drop.has(k.toLowerCase())) continue;
        out[k.toLowerCase()] = v;
      }
      const location = out['location'];
      if (typeof location === 'string') out['location'] = this.rewriteLocation(route, m.url, location);
      Object.assign(out, extra);
      res.writeHead(up.statusCode, out);
      if (req.method === 'HEAD') {
        up.body.resume();
        res.end();
        return;
      }
      await pipeline(up.body, res);
    } catch {
      // The client left (the body's destruction cancels the origin request) or the origin broke off.
      up.body.destroy();
      res.destroy();
    } finally {
      res.off('close', onClose);
    }
  }

  /** A Location under the route's origin, as the gateway's own path (else unchanged). */
  private rewriteLocation(route: ProxyRoute, requestUrl: string, location: string): string {
    let resolved: URL;
    try {
      resolved = new URL(location, requestUrl);
    } catch {
      return location;
    }
    const base = `${route.originAuthority}${route.originPath}`;
    if (!resolved.href.startsWith(base)) return location;
    return route.prefix + resolved.href.slice(base.length);
  }
}
