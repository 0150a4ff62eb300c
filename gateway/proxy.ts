/**
 * Reverse-proxy routes (DESIGN 3.6): the gateway as a drop-in verifying proxy
 * in front of existing artifact hosts. README "Proxy routes" is the user's
 * reference; in short:
 *
 *   {prefix: /npm/, origin: https://registry.example/}
 *     GET /npm/a/b.tgz?x=1  ->  artifact URL https://registry.example/a/b.tgz?x=1
 *
 * The artifact URL is the configured origin as written (`/` appended when
 * missing) followed by the request target after the prefix, byte for byte,
 * query included (a bare host route has the prefix `/`). Route choice: routes
 * whose host matches the Host header (case-insensitive; a configured port
 * must match, none matches any), else host-less routes; then the longest
 * prefix. Endorsed URL (newest version): the verified bytes via
 * `serveVerified`, plus the kept origin headers. Not endorsed: `deny` -> 404,
 * `pass` -> the origin's response streamed through. `mode: audit` serves a
 * mismatch (from the origin, `X-Vouch-Audit: mismatch`) or a revoked version
 * (`X-Vouch-Audit: revoked`), logged and counted, instead of 409 / 410.
 *
 * A route may name a `canonical` base: the chain then endorses
 * `canonical + rest` while the bytes are fetched from `origin + rest`, so a
 * registry can move without invalidating endorsements. A route of `kind`
 * npm, pypi or goproxy also answers the package manager's metadata through
 * its module in `ecosystems/` (links rewritten to the gateway, unendorsed
 * versions removed on deny routes), and its failures carry a short reason
 * in the form the client prints instead of an empty body.
 *
 * Owns: route matching, the URL mapping and the refusal (400) of targets
 * that could climb out of a route, the route policies, the pass-through
 * stream (its own undici Agent), the metadata fetches and their cache, the
 * URL maps ecosystem modules rewrite links with, and the proxy's counters.
 * Trusts: the verified chain index; `ArtifactSource.obtain`, which resolves
 * only with bytes that hashed to the signed artifact_hash; `serveVerified`
 * for the verified response; the configured origins (the operator's).
 * Must hold: on an enforce route an endorsed URL is answered only with bytes
 * that passed the hash check, or an empty failure; nothing of an unendorsed
 * URL is fetched or served on a deny route; a mapped URL is the route's
 * origin followed by a path that cannot leave it (checked before any lookup
 * or origin request); a client that leaves cancels the origin request;
 * failures have empty bodies and nothing here throws into the request
 * handler.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { Agent, type Dispatcher } from 'undici';
import { VouchError, isVouchError } from '../chain/errors.ts';
import type { Selection } from '../chain/select.ts';
import type { RouteConfig, RouteKind } from './config.ts';
import type { EcosystemHandler, MetadataIO } from './ecosystems/ecosystem.ts';
import { ecosystemFor } from './ecosystems/index.ts';
import { MetadataCache, type OriginAnswer } from './ecosystems/metadata-cache.ts';
import type { GatewayContext } from './context.ts';
import { serveVerified, type ArtifactSource } from './download.ts';
import { sendEmpty, statusOf } from './http-util.ts';
import { keptOriginHeaders } from './mirror.ts';

/** A configured route, checked and ready to match. */
export interface ProxyRoute {
  /** Position in `proxy.routes` (for logs). */
  index: number;
  /** Lower-case host name, or null: any host. */
  host: string | null;
  /** Port the Host header must carry, or null: any (or none). */
  port: string | null;
  /** Path prefix, starting and ending with `/` (`/` for a bare host route). */
  prefix: string;
  /** The configured origin, ending with `/`: bytes are fetched from `origin + rest`. */
  origin: string;
  /** The base the chain endorses, ending with `/` (the origin unless `canonical` is set): the artifact URL is `canonical + rest`. */
  canonical: string;
  /** Scheme and authority of the origin (`https://registry.example`). */
  originAuthority: string;
  /** The origin's path, normalized, ending with `/`. */
  originPath: string;
  unendorsed: 'deny' | 'pass';
  mode: 'enforce' | 'audit';
  kind: RouteKind;
  /** The package manager's module (null for a plain route). */
  ecosystem: EcosystemHandler | null;
  metadataTtlMs: number;
  metadataMaxStaleMs: number;
  /** `prefix /npm/`, `host registry.example`, ... */
  label: string;
}

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

/** A request that falls under a route: mapped to `url`, or refused with `refusal`. */
export type ProxyMatch =
  | {
    route: ProxyRoute;
    /** The artifact URL: canonical base + rest, query included. */
    url: string;
    /** Where its bytes are fetched: origin + rest, query included. */
    fetchUrl: string;
    /** The origin's path for the request (origin path + rest, query included). */
    upstreamPath: string;
    /** The path after the prefix, as sent, and the query without `?`. */
    rest: string;
    query: string;
    refusal: null;
  }
  | { route: ProxyRoute; url: null; fetchUrl: null; upstreamPath: null; rest: null; query: null; refusal: string };

/** Largest metadata answer read from an origin (npm's largest packuments are tens of MiB). */
export const MAX_METADATA_BYTES = 48 * 1024 * 1024;
const KEPT_METADATA_HEADERS = ['content-type', 'location', 'etag', 'last-modified', 'cache-control'] as const;

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'trailers', 'transfer-encoding', 'upgrade',
]);
/** Request headers never forwarded on pass-through (besides hop-by-hop). */
const NOT_FORWARDED = new Set(['host', 'content-length', 'expect']);

function usage(path: string, what: string): never {
  throw new VouchError('usage', `config: ${path} ${what}`);
}

/**
 * Checks the configured routes and prepares them for matching.
 * @throws VouchError usage naming the route: an origin with credentials, a
 * query or a fragment; a prefix with `//`, a dot segment or
 * percent-encoding, or under `/v1/` (the gateway's own paths); two routes
 * for the same host and prefix.
 */
export function compileRoutes(routes: readonly RouteConfig[]): ProxyRoute[] {
  const out: ProxyRoute[] = [];
  const seen = new Set<string>();
  routes.forEach((r, index) => {
    const at = `proxy.routes[${index}]`;
    let url: URL;
    try {
      url = new URL(r.origin);
    } catch {
      usage(`${at}.origin`, 'must be an absolute http(s) URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') usage(`${at}.origin`, 'must be an absolute http(s) URL');
    if (url.username !== '' || url.password !== '') usage(`${at}.origin`, 'must not carry credentials');
    if (r.origin.includes('?') || r.origin.includes('#')) usage(`${at}.origin`, 'must not have a query or a fragment');
    if (r.canonical !== null) {
      const c = new URL(r.canonical);
      if (c.username !== '' || c.password !== '') usage(`${at}.canonical`, 'must not carry credentials');
      if (r.canonical.includes('?') || r.canonical.includes('#')) usage(`${at}.canonical`, 'must not have a query or a fragment');
    }
    const prefix = r.prefix ?? '/';
    if (!prefix.startsWith('/') || !prefix.endsWith('/')) usage(`${at}.prefix`, 'must start and end with /');
    if (prefix.includes('//') || prefix.includes('%') || prefix.split('/').some((s) => s === '.' || s === '..')) {
      usage(`${at}.prefix`, 'must not contain //, dot segments or percent-encoding');
    }
    if (prefix === '/v1/' || prefix.startsWith('/v1/')) usage(`${at}.prefix`, 'must not be under /v1/ (the gateway\'s own paths)');
    let host: string | null = null;
    let port: string | null = null;
    if (r.host !== null) {
      const m = /^([A-Za-z0-9.-]+?)\.?(?::(\d{1,5}))?$/.exec(r.host);
      if (m === null) usage(`${at}.host`, 'must be a host name, optionally with :port');
      host = m[1]!.toLowerCase();
      port = m[2] === undefined ? null : String(Number(m[2]));
    }
    const key = `${host ?? '*'}:${port ?? '*'} ${prefix}`;
    if (seen.has(key)) usage(at, `repeats the host and prefix of an earlier route (${key})`);
    seen.add(key);
    const originPath = url.pathname.endsWith('/') ? url.pathname : `${url.pathname}/`;
    const label = [r.host !== null ? `host ${r.host}` : '', r.prefix !== null ? `prefix ${r.prefix}` : ''].filter(Boolean).join(' ');
    const withSlash = (u: string) => (u.endsWith('/') ? u : `${u}/`);
    out.push({
      index, host, port, prefix,
      origin: withSlash(r.origin),
      canonical: withSlash(r.canonical ?? r.origin),
      originAuthority: `${url.protocol}//${url.host}`,
      originPath,
      unendorsed: r.unendorsed, mode: r.mode,
      kind: r.kind,
      ecosystem: ecosystemFor(r.kind),
      metadataTtlMs: Math.round(r.metadata_ttl * 1000),
      metadataMaxStaleMs: Math.round(r.metadata_max_stale * 1000),
      label: label + (r.kind === 'plain' ? '' : ` (${r.kind})`),
    });
  });
  return out;
}

/** `name` and `port` of a Host header value (lower-case, one trailing dot dropped); null when it is not a host name. */
function parseHost(value: string | undefined): { name: string; port: string | null } | null {
  if (value === undefined) return null;
  const m = /^([A-Za-z0-9.-]+?)\.?(?::(\d{1,5}))?$/.exec(value.trim());
  if (m === null) return null;
  return { name: m[1]!.toLowerCase(), port: m[2] === undefined ? null : String(Number(m[2])) };
}

/** The route a request falls under: Host routes first, then the rest; longest prefix, then configuration order. */
export function findRoute(routes: readonly ProxyRoute[], hostHeader: string | undefined, path: string): ProxyRoute | null {
  const host = parseHost(hostHeader);
  const longest = (candidates: ProxyRoute[]): ProxyRoute | null => {
    let best: ProxyRoute | null = null;
    for (const r of candidates) if (path.startsWith(r.prefix) && (best === null || r.prefix.length > best.prefix.length)) best = r;
    return best;
  };
  if (host !== null) {
    const byHost = longest(routes.filter((r) => r.host === host.name && (r.port === null || r.port === host.port)));
    if (byHost !== null) return byHost;
  }
  return longest(routes.filter((r) => r.host === null));
}

/** Percent-decodes to a binary string (one char per byte), so no encoding can fail. */
function decodeBytes(segment: string): string {
  return segment.replace(/%([0-9A-Fa-f]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16)));
}

/**
 * Why the path of a request target cannot be mapped under a route (a short
 * reason), or null when it can. `path` is the whole path (no query), `rest`
 * the part after the route's prefix.
 */
export function pathRefusal(path: string, rest: string): string | null {
  if (/[\x00-\x20\x7f]/.test(path)) return 'control character or space in the path';
  if (path.includes('\\')) return 'backslash in the path';
  if (path.includes('#')) return 'fragment in the path';
  if (/%(?![0-9A-Fa-f]{2})/.test(path)) return 'malformed percent-encoding';
  const segments = path.split('/');
  for (let i = 1; i < segments.length; i++) {
    const raw = segments[i]!;
    if (raw === '') {
      if (i !== segments.length - 1) return 'empty path segment (//)';
      continue;
    }
    const decoded = decodeBytes(raw);
    if (decoded === '.' || decoded === '..') return 'dot segment';
    if (decoded.includes('/') || decoded.includes('\\')) return 'encoded slash or backslash';
    if (/[\x00-\x1f\x7f]/.test(decoded)) return 'encoded control character';
    if (/%(?:2e|2f|5c|00|25)/i.test(decoded)) return 'double percent-encoding';
  }
  const first = decodeBytes(rest.split('/')[0] ?? '');
  if (/^[A-Za-z][A-Za-z0-9+.-]*:/.test(first)) return 'absolute URL in the path';
  return null;
}

const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?#]*)(\/[^?#]*)?/;

function etagMatches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch.split(',').some((t) => {
    const v = t.trim().replace(/^W\//, '');
    return v === '*' || v === etag;
  });
}

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
function onceSource(obtained: Awaited<ReturnType<ArtifactSource['obtain']>>): ArtifactSource & { used: boolean } {
  const source = {
    used: false,
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
    verified: 0, denied: 0, passed: 0, refused: 0, mismatches: 0, auditMismatches: 0, revoked: 0, auditRevoked: 0, failed: 0,
    metadata: 0, metadataStale: 0,
  };
  private agent: Agent | null = null;
  private readonly metadata = new MetadataCache();

  /** @throws VouchError usage when a route is not usable (see `compileRoutes`). */
  constructor(private readonly ctx: GatewayContext) {
    this.routes = compileRoutes(ctx.config.proxy.routes);
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
    if (this.routes.length === 0) return null;
    if (!target.startsWith('/')) {
      // Absolute-form (`GET http://host/path`): refused when it would fall under a route.
      const m = ABSOLUTE_FORM.exec(target);
      if (m === null) return null;
      const path = m[2] ?? '/';
      const route = findRoute(this.routes, m[1], path) ?? findRoute(this.routes, hostHeader, path);
      return route === null ? null : { route, url: null, fetchUrl: null, upstreamPath: null, rest: null, query: null, refusal: 'absolute-form request target' };
    }
    const q = target.indexOf('?');
    const path = q === -1 ? target : target.slice(0, q);
    const route = findRoute(this.routes, hostHeader, path);
    if (route === null) return null;
    const rest = path.slice(route.prefix.length);
    const checked = route.ecosystem?.checkedPath?.(rest) ?? rest;
    const refusal = pathRefusal(route.prefix + checked, checked);
    if (refusal !== null) return { route, url: null, fetchUrl: null, upstreamPath: null, rest: null, query: null, refusal };
    const sent = target.slice(route.prefix.length); // rest of the path and the query, exactly as sent
    const tail = route.ecosystem?.artifactTarget?.(sent) ?? sent; // Go: `%21` spelled `!`
    if (tail !== sent) {
      const tailPath = tail.split('?')[0]!;
      const again = pathRefusal(route.prefix + tailPath, tailPath);
      if (again !== null) return { route, url: null, fetchUrl: null, upstreamPath: null, rest: null, query: null, refusal: again };
    }
    return {
      route, url: route.canonical + tail, fetchUrl: route.origin + tail, upstreamPath: route.originPath + tail,
      rest, query: q === -1 ? '' : target.slice(q + 1), refusal: null,
    };
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
    await agent?.close();
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
    const { contentType, body, reason } = route.ecosystem.errorBody(message);
    if (reason !== undefined) res.statusMessage = reason.replace(/[^\x20-\x7e]/g, '?'); // pip prints the status line, not the body
    res.writeHead(status, {
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
        route: route.label, url: m.url, index: sel.block.index, revoked_by: sel.revokedBy.record_hash, audit_revoked: this.counters.auditRevoked,
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
      return serveVerified(this.ctx, req, res, sel, extra); // 304 without fetching
    }
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort(new Error('the client went away'));
    };
    res.on('close', onClose);
    let obtained;
    try {
      obtained = await this.ctx.artifacts.obtain(m.fetchUrl, sel.entry.artifact_hash, { signal: abort.signal });
    } catch (e) {
      res.off('close', onClose);
      if (abort.signal.aborted) {
        res.destroy();
        return;
      }
      if (isVouchError(e) && e.code === 'hash_mismatch') {
        const evidence = {
          route: route.label, url: sel.entry.artifact_url, ...(m.fetchUrl !== m.url ? { fetched_from: m.fetchUrl } : {}),
          expected: sel.entry.artifact_hash, actual: e.evidence?.actual ?? null,
        };
        if (route.mode === 'audit') {
          this.counters.auditMismatches++;
          this.ctx.log.warn('proxy audit: hash mismatch; serving the origin\'s bytes', { ...evidence, audit_mismatches: this.counters.auditMismatches });
          return this.passThrough(req, res, m, { 'x-vouch-audit': [...audit, 'mismatch'].join(', ') });
        }
        this.counters.mismatches++;
        this.ctx.log.warn('proxy: hash mismatch: refused to serve', evidence);
        return this.fail(res, route, 409, `vouch: hash mismatch for ${sel.entry.artifact_url}, refused (signed ${sel.entry.artifact_hash})`);
      }
      this.counters.failed++;
      if (isVouchError(e) && e.kind === 'integrity') this.ctx.log.warn('proxy: cannot verify', { route: route.label, url: sel.entry.artifact_url, code: e.code });
      const status = isVouchError(e) && e.code === 'too_large' ? 502 : statusOf(e);
      const what = status === 504 ? 'origin timeout' : status === 502 ? 'origin error' : 'cannot serve';
      return this.fail(res, route, status, `vouch: ${what} for ${sel.entry.artifact_url}${isVouchError(e) ? `: ${e.message.split('\n')[0]}` : ''}`);
    }
    res.off('close', onClose);
    this.counters.verified++;
    const source = onceSource(obtained);
    try {
      await serveVerified({ ...this.ctx, artifacts: source }, req, res, sel, { ...keptOriginHeaders(obtained.originHeaders), ...extra });
    } finally {
      if (!source.used) obtained.artifact.release();
    }
  }

  /** The request-scoped view an ecosystem module answers metadata through. */
  private metadataIO(req: IncomingMessage, res: ServerResponse, m: ProxyMatch & { refusal: null }): MetadataIO {
    const { route } = m;
    const base = this.requestBase(req);
    return {
      req, res,
      unendorsed: route.unendorsed,
      rest: m.rest,
      query: m.query,
      log: this.ctx.log,
      fetch: async (rest, opts) => {
        const got = await this.metadata.get(
          `${route.index} ${opts.form} ${rest}`, route.metadataTtlMs, route.metadataMaxStaleMs,
          () => this.fetchMetadata(route, rest, opts.accept),
        );
        if (got.stale) {
          this.counters.metadataStale++;
          this.ctx.log.warn('proxy: the origin failed; serving metadata from the cache', { route: route.label, url: route.origin + rest, age: got.age });
        }
        return got;
      },
      originUrl: (rest) => route.origin + rest,
      endorsed: (url) => {
        const sel = this.ctx.state?.index.select(url, { today: this.ctx.today() }) ?? null;
        return sel === null || sel.revokedBy !== null ? null : sel;
      },
      artifactUrlOf: (url) => this.artifactUrlOf(route, url),
      gatewayUrlOf: (url) => this.gatewayUrlOf(route, base, url),
      send: (status, contentType, body, headers = {}) => {
        this.counters.metadata++;
        res.writeHead(status, {
          'content-type': contentType,
          'content-length': Buffer.byteLength(body),
          'x-content-type-options': 'nosniff',
          'cache-control': 'no-cache',
          ...headers,
        });
        res.end(req.method === 'HEAD' ? undefined : body);
      },
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
    };
  }

  /** Scheme (of public_url) and authority (the request's Host, when it is a host name) that clients reach the gateway at. */
  private requestBase(req: IncomingMessage): string {
    const pub = new URL(this.ctx.config.public_url);
    const host = req.headers.host;
    if (host !== undefined && parseHost(host) !== null) return `${pub.protocol}//${host.trim()}`;
    return `${pub.protocol}//${pub.host}`;
  }

  /** Routes to try for a URL found under `route`'s metadata: that route first. */
  private routesFrom(route: ProxyRoute): ProxyRoute[] {
    return [route, ...this.routes.filter((r) => r !== route)];
  }

  private artifactUrlOf(route: ProxyRoute, url: string): string | null {
    for (const r of this.routesFrom(route)) {
      if (url.startsWith(r.canonical)) return url;
      if (url.startsWith(r.origin)) return r.canonical + url.slice(r.origin.length);
    }
    return null;
  }

  private gatewayUrlOf(route: ProxyRoute, base: string, artifactUrl: string): string | null {
    for (const r of this.routesFrom(route)) {
      if (!artifactUrl.startsWith(r.canonical)) continue;
      const tail = artifactUrl.slice(r.canonical.length);
      const hostBase = r.host === null ? base : `${new URL(base).protocol}//${r.host}${r.port === null ? '' : `:${r.port}`}`;
      return hostBase + r.prefix + tail;
    }
    return null;
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
      throw new VouchError(isTimeout(e) ? 'origin_timeout' : 'origin_error', `${url}: ${(e as { code?: string }).code ?? (e as Error).message}`, { resource: url });
    }
    const declared = Number(up.headers['content-length']);
    if (declared > MAX_METADATA_BYTES) {
      up.body.destroy();
      throw new VouchError('too_large', `${url}: metadata larger than ${MAX_METADATA_BYTES} bytes`, { resource: url });
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of up.body) {
        size += (chunk as Buffer).length;
        if (size > MAX_METADATA_BYTES) {
          up.body.destroy();
          throw new VouchError('too_large', `${url}: metadata larger than ${MAX_METADATA_BYTES} bytes`, { resource: url });
        }
        chunks.push(chunk as Buffer);
      }
    } catch (e) {
      if (isVouchError(e)) throw e;
      throw new VouchError(isTimeout(e) ? 'origin_timeout' : 'origin_error', `${url}: the body broke off`, { resource: url });
    }
    const headers: Record<string, string> = {};
    for (const name of KEPT_METADATA_HEADERS) {
      const v = up.headers[name];
      if (typeof v === 'string') headers[name] = v;
    }
    if (typeof up.headers['content-encoding'] === 'string' && up.headers['content-encoding'] !== 'identity') {
      throw new VouchError('origin_error', `${url}: the origin sent encoded metadata (${up.headers['content-encoding']}) although asked for identity`, { resource: url });
    }
    return { status: up.statusCode, headers, body: Buffer.concat(chunks, size) };
  }

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

const proxies = new WeakMap<GatewayContext, ProxyRoutes>();

/** The proxy of a gateway context (made once per context). @throws VouchError usage on an unusable route. */
export function proxyFor(ctx: GatewayContext): ProxyRoutes {
  let p = proxies.get(ctx);
  if (p === undefined) {
    p = new ProxyRoutes(ctx);
    proxies.set(ctx, p);
  }
  return p;
}

/** The proxy's counters for a gateway context (all zero when it has no routes). */
export function proxyStats(ctx: GatewayContext): ProxyStats {
  return proxyFor(ctx).stats();
}
