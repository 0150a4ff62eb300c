/**
 * `kind: oci` routes: the read side of the OCI distribution spec in front of
 * a registry, where a tag resolves only to the digest the chain endorses for
 * its URL (oci.ts `manifestUrl`).
 * Owns: the answers under `/v2/` (manifests, blobs with Range, tags/list,
 * the spec's error JSON), the upstream's bearer-token flow and credentials
 * file, and what is reachable from an endorsed tag (platform manifests,
 * config, layers).
 * Trusts: the verified index; `ctx.artifacts.obtain` (digest-checked bytes).
 * Must hold: manifests are fetched upstream by digest only, never by tag; a
 * byte is sent only after the whole artifact matched its digest; nothing
 * unendorsed is fetched on a deny route; credentials and tokens are never
 * logged or served.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readFileSync } from 'node:fs';
import { finished } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Agent, type Dispatcher } from 'undici';
import { VouchError, isVouchError } from '../../chain/errors.ts';
import type { Selection } from '../../chain/select.ts';
import type { GatewayContext } from '../context.ts';
import type { ProxyMatch, ProxyRoute } from '../routes/proxy-route-table.ts';
import { statusOf } from '../http/http-util.ts';
import { readBounded } from '../../artifacts/read-bounded.ts';
import { ReachableRecord } from './oci-reachable.ts';
import { MIN_PIECE, SEND_PIECE, sendFile, stallGuard } from '../routes/download.ts';
import {
  DIGEST,
  MANIFEST_ACCEPT,
  MAX_MANIFEST_BYTES,
  MAX_TAG_LIST_BYTES,
  blobUrl,
  manifestUrl,
  ociErrorBody,
  pageOf,
  parseChallenge,
  parseManifest,
  parseOciPath,
  parseTagList,
  type OciRequest,
} from './oci.ts';

/** Digests remembered as reachable from endorsed tags (oldest forgotten first). */
const MAX_REACHABLE = 200_000;
/** Tags of one repository looked at when relearning what is reachable. */
const MAX_RELEARN_TAGS = 1000;
/** Blob fetches queued ahead of the client (`prefetch`) at most. */
const MAX_PREFETCH = 64;
/** Blobs of one manifest fetched ahead at once at most, in its order (Docker's default of concurrent layer downloads). */
const PREFETCH_AT_ONCE = 3;
/** The next fetch ahead starts while fewer declared bytes than this are being fetched ahead (a larger blob: alone). */
export const PREFETCH_WINDOW = 16 * 1024 * 1024;
/** A fetch ahead running this long lets the next one start beside it, whatever its size. */
export const PREFETCH_STAGGER_MS = 500;
/**
 * Bytes of a blob in memory queued on the client's socket at once (views of
 * the held bytes: no copy, nothing more held): the event loop tops the queue
 * up once per this much instead of once per SEND_PIECE, so a busy machine's
 * scheduling delays leave the socket idle less often.
 */
export const SEND_QUEUE = 8 * 1024 * 1024;
/** Largest token answer read. */
const MAX_TOKEN_BYTES = 64 * 1024;
/** Longest reason phrase sent in a status line. */
const MAX_REASON = 400;
const API_VERSION = { 'docker-distribution-api-version': 'registry/2.0' };
/**
 * How long a blob that failed its digest check refuses the manifests that
 * name it, with the reason: clients print no body of a failed blob
 * (containers/image shows its status only), but do print a manifest's, so
 * a retry tells the user why.
 */
const MISMATCH_MEMORY_MS = 60_000;

/** What the proxy lends an OCI route. */
export interface OciHost {
  count(what: 'verified' | 'denied' | 'passed' | 'revoked' | 'mismatches' | 'failed' | 'metadata'): void;
}

type Matched = ProxyMatch & { refusal: null };

export class OciRoutes {
  private agent: Agent | null = null;
  /** `route.index repo digest` -> the endorsed manifest URL it is reachable from (kept beside the disk mirror). */
  private readonly reachable: ReachableRecord;
  /** Bearer tokens by `route.index scope`, with their expiry (ms). */
  private readonly tokens = new Map<string, { header: string; until: number }>();
  /** `route.index repo digest` of blobs whose upstream bytes did not match, with the refusal and until when it is told. */
  private readonly mismatched = new Map<string, { message: string; until: number }>();
  /** Blob fetches queued or running ahead of the client, by `route.index repo digest`: resolves once it started. */
  private readonly prefetching = new Map<string, Promise<void>>();
  /** Per route: the upstream's challenge (null: it asked for none), once known. */
  private readonly challenges = new Map<number, { scheme: string; params: Record<string, string> } | null>();

  constructor(
    private readonly ctx: GatewayContext,
    private readonly routes: readonly ProxyRoute[],
    private readonly host: OciHost,
  ) {
    const oci = routes.filter((r) => r.kind === 'oci');
    this.reachable = new ReachableRecord(oci.length === 0 ? null : ctx.config.mirror.disk_dir, oci, MAX_REACHABLE, (msg, f) => ctx.log.warn(msg, f));
  }

  async close(): Promise<void> {
    await this.reachable.flush();
    const a = this.agent;
    this.agent = null;
    await a?.close();
  }

  /**
   * The route a request is answered under: containerd's `?ns=HOST` picks the
   * OCI route with prefix `/v2/HOST/`; a `ns` naming neither such a route nor
   * the matched route's own registry (its canonical or origin host; docker.io
   * for registry-1.docker.io) is null: refused, never answered from another
   * registry's repository of the same name.
   */
  routeFor(m: Matched): ProxyRoute | null {
    const raw = new URLSearchParams(m.query).get('ns');
    if (raw === null) return m.route;
    const ns = raw.toLowerCase();
    if (!/^[a-z0-9.-]+(?::\d{1,5})?$/.test(ns)) return null;
    const named = this.routes.find((x) => x.kind === 'oci' && x.host === m.route.host && x.prefix === `/v2/${ns}/`);
    if (named !== undefined) return named;
    const hosts = [new URL(m.route.canonical).host, new URL(m.route.origin).host].flatMap((h) => (h === 'registry-1.docker.io' ? [h, 'docker.io'] : [h]));
    return hosts.includes(ns) || m.route.prefix === `/v2/${ns}/` ? m.route : null;
  }

  /** Answers a request under an OCI route (GET or HEAD, chain loaded). Never rejects. */
  async handle(req: IncomingMessage, res: ServerResponse, m: Matched): Promise<void> {
    const route = this.routeFor(m);
    if (route === null) {
      this.host.count('denied');
      return this.fail(
        res,
        404,
        `vouch: no route of this gateway serves the registry ${new URLSearchParams(m.query).get('ns')!.slice(0, 100)} (add {prefix: /v2/<registry host>/, kind: oci, origin: ...})`,
        null,
      );
    }
    const rest = m.rest;
    const r = parseOciPath(rest);
    try {
      if (r === null) {
        this.host.count('denied');
        return this.fail(res, 404, `vouch: ${m.rest} is not a read path of the OCI distribution API`, null);
      }
      switch (r.type) {
        case 'base':
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': '2', ...API_VERSION });
          res.end(req.method === 'HEAD' ? undefined : '{}');
          return;
        case 'manifest':
          return await this.manifest(req, res, route, r);
        case 'blob':
          return await this.blob(req, res, route, r);
        case 'tags':
          return await this.tags(req, res, route, r, m.query);
      }
    } catch (e) {
      this.host.count('failed');
      const status = isVouchError(e) ? (e.code === 'too_large' || e.code === 'bad_request' ? 502 : statusOf(e)) : 500;
      if (!isVouchError(e)) this.ctx.log.error('oci: request failed', { route: route.label, error: (e as Error)?.message ?? String(e) });
      const why = isVouchError(e) ? e.message.split('\n')[0] : 'internal error';
      return this.fail(res, status, `vouch: ${status === 504 ? 'upstream timeout' : status >= 500 ? 'upstream error' : 'refused'}: ${why}`, r?.type ?? null);
    }
  }

  /** A failure in the spec's error form (HEAD: no body). */
  fail(res: ServerResponse, status: number, message: string, what: OciRequest['type'] | null, headers: Record<string, string> = {}): void {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = ociErrorBody(status, message, what);
    res.writeHead(status, reasonPhrase(message), {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      'x-content-type-options': 'nosniff',
      'cache-control': 'no-store',
      ...API_VERSION,
      ...headers,
    });
    res.end(res.req?.method === 'HEAD' ? undefined : body);
  }

  // -------------------------------------------------------------------------

  private select(url: string): Selection | null {
    return this.ctx.state?.index.select(url, { today: this.ctx.today() }) ?? null;
  }

  private revokedMessage(url: string, sel: Selection): string {
    const r = sel.revokedBy!;
    return `vouch: ${url} (${sel.entry.artifact_hash}) is revoked by the authority in block ${r.index} (${r.record_hash}), refused`;
  }

  private async manifest(req: IncomingMessage, res: ServerResponse, route: ProxyRoute, r: Extract<OciRequest, { type: 'manifest' }>): Promise<void> {
    const url = manifestUrl(route.canonical, r.repo, r.ref);
    let sel = this.select(url);
    let digest: string;
    let endorsedUrl = url;
    if (sel !== null) {
      if (sel.revokedBy !== null && route.mode === 'enforce') {
        this.host.count('revoked');
        return this.fail(res, 410, this.revokedMessage(url, sel), 'manifest');
      }
      digest = sel.entry.artifact_hash;
      if (!DIGEST.test(digest)) {
        this.host.count('failed');
        return this.fail(res, 502, `vouch: ${url} is endorsed with ${digest}, which is not an OCI digest (sha256 or sha512)`, 'manifest');
      }
      if (r.byDigest && digest !== r.ref) {
        this.host.count('mismatches');
        return this.fail(res, 409, `vouch: ${url} is endorsed with other bytes (${digest}), refused`, 'manifest');
      }
    } else if (r.byDigest) {
      const from = await this.reachableFrom(route, r.repo, r.ref, 'manifest');
      if (typeof from === 'string') return this.refuseUnendorsed(req, res, route, r, url, from);
      sel = from.sel;
      endorsedUrl = from.url;
      digest = r.ref;
    } else {
      return this.refuseUnendorsed(req, res, route, r, url, `vouch: ${url} is not endorsed by the authority, refused`);
    }
    const obtained = await this.obtain(route, r.repo, manifestUrl(route.origin, r.repo, digest), digest, res, MANIFEST_ACCEPT);
    if (obtained === null) return;
    const { artifact } = obtained;
    try {
      if (artifact.size > MAX_MANIFEST_BYTES) {
        this.host.count('failed');
        return this.fail(res, 502, `vouch: the manifest ${digest} is larger than ${MAX_MANIFEST_BYTES} bytes`, 'manifest');
      }
      const bytes = artifact.bytes ?? readFileSync(artifact.path!);
      let facts;
      try {
        facts = parseManifest(bytes);
      } catch (e) {
        if (!isVouchError(e)) throw e;
        this.host.count('failed');
        return this.fail(res, 502, `vouch: ${url}: ${e.message}`, 'manifest');
      }
      // The manifest itself too: a pull by the endorsed digest (or a platform manifest's) finds it without the upstream.
      for (const d of [digest, ...facts.manifests, ...facts.blobs]) this.remember(route, r.repo, d, endorsedUrl);
      const now = Date.now();
      for (const d of facts.blobs) {
        const bad = this.mismatched.get(`${route.index} ${r.repo} ${d}`);
        if (bad !== undefined && bad.until > now) {
          this.host.count('mismatches');
          return this.fail(res, 409, bad.message, 'manifest');
        }
      }
      this.host.count('verified');
      const head = {
        'content-type': facts.mediaType,
        'content-length': String(bytes.length),
        'docker-content-digest': digest,
        etag: `"${digest}"`,
        'x-content-type-options': 'nosniff',
        'x-vouch-endorsed': `${endorsedUrl} block ${sel.block.index}`,
        ...API_VERSION,
        ...(sel.revokedBy !== null ? { 'x-vouch-audit': 'revoked' } : {}),
      };
      res.writeHead(200, head);
      res.end(req.method === 'HEAD' ? undefined : bytes);
      if (req.method === 'GET') this.prefetch(route, r.repo, facts.blobs, facts.blobSizes);
    } finally {
      artifact.release();
    }
  }

  /**
   * Obtains the blobs of a manifest just served (verified into the mirror)
   * before the client asks for them, in the manifest's order: the client's
   * requests join these fetches (`turn`). Small blobs go PREFETCH_AT_ONCE
   * at a time; once PREFETCH_WINDOW declared bytes are being fetched, the
   * next waits for one to finish, or for PREFETCH_STAGGER_MS (an upstream
   * that gives one connection part of its bandwidth). So a large layer
   * arrives alone: nothing of it goes out before all of it arrived and
   * hashed, and beside others it would arrive, and go out, only when they do.
   */
  private prefetch(route: ProxyRoute, repo: string, digests: readonly string[], sizes: ReadonlyArray<number | null> = []): void {
    const queue: Array<{ key: string; digest: string; size: number; start: () => void }> = [];
    digests.forEach((digest, i) => {
      const key = `${route.index} ${repo} ${digest}`;
      if (this.prefetching.has(key) || this.prefetching.size >= MAX_PREFETCH) return;
      let start!: () => void;
      const started = new Promise<void>((r) => {
        start = r;
      });
      this.prefetching.set(key, started);
      queue.push({ key, digest, size: Math.min(sizes[i] ?? PREFETCH_WINDOW, PREFETCH_WINDOW), start }); // any larger one counts as the window
    });
    let running = 0;
    let bytes = 0; // declared bytes of the fetches running
    let timer: NodeJS.Timeout | null = null;
    const fetchOne = async (item: (typeof queue)[number]): Promise<void> => {
      const { key, digest, start } = item;
      try {
        const pending = this.obtainAuthorized(route, repo, blobUrl(route.origin, repo, digest), digest, '*/*', undefined, start);
        (await pending).artifact.release();
      } catch (e) {
        start();
        this.ctx.log.debug("oci: a blob fetched ahead failed (the client's own request tries again)", {
          route: route.label,
          digest,
          error: (e as Error)?.message?.split('\n')[0],
        });
      } finally {
        this.prefetching.delete(key);
      }
    };
    /** Starts the next fetches the window allows; `late`: the stagger ran out, one more starts whatever its size. */
    const launch = (late: boolean): void => {
      if (timer !== null) clearTimeout(timer);
      timer = null;
      for (let item = queue[0]; item !== undefined && running < PREFETCH_AT_ONCE; item = queue[0]) {
        if (bytes >= PREFETCH_WINDOW && !late) break;
        late = false;
        queue.shift();
        running++;
        bytes += item.size;
        void fetchOne(item).finally(() => {
          running--;
          bytes -= item.size;
          launch(false);
        });
      }
      if (queue.length > 0 && running > 0) {
        timer = setTimeout(() => launch(true), PREFETCH_STAGGER_MS);
        timer.unref();
      }
    };
    launch(false);
  }

  /** Waits until the fetch ahead of `digest` (if one is queued) started, so the client's request joins it rather than racing it. */
  private async turn(route: ProxyRoute, repo: string, digest: string): Promise<void> {
    await this.prefetching.get(`${route.index} ${repo} ${digest}`);
  }

  /** An unendorsed manifest: refused on a deny route (404 MANIFEST_UNKNOWN with the reason), passed through marked on a pass route. */
  private async refuseUnendorsed(
    req: IncomingMessage,
    res: ServerResponse,
    route: ProxyRoute,
    r: OciRequest & { repo: string },
    url: string,
    message: string,
  ): Promise<void> {
    if (route.unendorsed === 'deny') {
      this.host.count('denied');
      return this.fail(res, message.includes('revoked') ? 410 : 404, message, r.type);
    }
    this.host.count('passed');
    this.ctx.log.warn('oci: passing an unendorsed image part through unverified', { route: route.label, url });
    const path = r.type === 'blob' ? `v2/${r.repo}/blobs/${r.digest}` : r.type === 'manifest' ? `v2/${r.repo}/manifests/${r.ref}` : `v2/${r.repo}/tags/list`;
    const up = await this.upstream(
      route,
      r.repo,
      path,
      req.method === 'HEAD' ? 'HEAD' : 'GET',
      r.type === 'manifest' ? MANIFEST_ACCEPT : '*/*',
      req.headers.range,
    );
    const out: Record<string, string> = { 'x-vouch-unendorsed': 'passed unverified', ...API_VERSION };
    for (const k of ['content-type', 'content-length', 'docker-content-digest', 'content-range', 'etag']) {
      const v = up.headers[k];
      if (typeof v === 'string') out[k] = v;
    }
    res.writeHead(up.statusCode, out);
    if (req.method === 'HEAD') {
      up.body.resume();
      res.end();
      return;
    }
    await pipeline(up.body, res).catch(() => res.destroy());
  }

  private async blob(req: IncomingMessage, res: ServerResponse, route: ProxyRoute, r: Extract<OciRequest, { type: 'blob' }>): Promise<void> {
    const url = blobUrl(route.canonical, r.repo, r.digest);
    const from = await this.reachableFrom(route, r.repo, r.digest, 'blob');
    if (typeof from === 'string') return this.refuseUnendorsed(req, res, route, r, url, from);
    if (req.method === 'HEAD' && !(this.ctx.artifacts.has?.(r.digest) ?? false)) {
      // The upstream's HEAD cannot know that its bytes failed their check a moment ago: that answer stands.
      const bad = this.mismatched.get(`${route.index} ${r.repo} ${r.digest}`);
      if (bad !== undefined && bad.until > Date.now()) {
        this.host.count('mismatches');
        return this.fail(res, 409, bad.message, 'blob');
      }
      if (await this.headUpstream(res, route, r, from)) return;
    }
    await this.turn(route, r.repo, r.digest);
    const obtained = await this.obtain(route, r.repo, blobUrl(route.origin, r.repo, r.digest), r.digest, res, '*/*');
    if (obtained === null) return;
    this.host.count('verified');
    await sendRanged(
      this.ctx,
      req,
      res,
      obtained.artifact,
      {
        'content-type': 'application/octet-stream',
        'docker-content-digest': r.digest,
        etag: `"${r.digest}"`,
        'accept-ranges': 'bytes',
        'x-content-type-options': 'nosniff',
        'x-vouch-endorsed': `${from.url} block ${from.sel.block.index}`,
        ...API_VERSION,
      },
      this.ctx.config.origin.timeout * 1000,
    );
  }

  /**
   * HEAD of a blob the mirror does not hold: answered from the upstream's
   * HEAD (its size, its digest when it names one) without fetching the
   * bytes; nothing is released, nothing counts as verified (a GET fetches and
   * checks them). False: the upstream redirects the blob elsewhere (a
   * storage host this route does not call unchecked): the caller obtains it.
   */
  private async headUpstream(
    res: ServerResponse,
    route: ProxyRoute,
    r: Extract<OciRequest, { type: 'blob' }>,
    from: { url: string; sel: Selection },
  ): Promise<boolean> {
    const up = await this.upstream(route, r.repo, `v2/${r.repo}/blobs/${r.digest}`, 'HEAD', '*/*');
    up.body.resume();
    if (up.statusCode >= 300 && up.statusCode < 400) return false;
    if (up.statusCode === 404) {
      this.host.count('failed');
      this.fail(res, 404, `vouch: the upstream has no blob ${r.digest} of ${r.repo}`, 'blob');
      return true;
    }
    const length = up.headers['content-length'];
    const named = up.headers['docker-content-digest'];
    if (up.statusCode !== 200 || typeof length !== 'string' || !/^\d{1,15}$/.test(length) || (typeof named === 'string' && named !== r.digest)) {
      this.host.count('failed');
      const why =
        up.statusCode !== 200
          ? `answered ${up.statusCode}`
          : typeof named === 'string' && named !== r.digest
            ? `names it ${named.slice(0, 140)}`
            : 'sent no length';
      this.fail(res, 502, `vouch: upstream error for blob ${r.digest} of ${r.repo}: the upstream ${why} to HEAD`, 'blob');
      return true;
    }
    this.host.count('metadata');
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': length,
      'docker-content-digest': r.digest,
      'accept-ranges': 'bytes',
      'x-content-type-options': 'nosniff',
      'x-vouch-endorsed': `${from.url} block ${from.sel.block.index}`,
      'x-vouch-unverified': 'HEAD answered from the upstream: not mirrored yet, a GET fetches and checks the bytes',
      ...API_VERSION,
    });
    res.end();
    return true;
  }

  /**
   * The endorsed manifest URL (in force) a digest is reachable from, or why
   * not. Looks at what was learnt from served manifests, else relearns from
   * the upstream's tags (each endorsed one's manifest, verified).
   */
  private async reachableFrom(route: ProxyRoute, repo: string, digest: string, what: 'manifest' | 'blob'): Promise<{ url: string; sel: Selection } | string> {
    const known = this.reachable.get(`${route.index} ${repo} ${digest}`);
    const check = (url: string): { url: string; sel: Selection } | string => {
      const sel = this.select(url);
      if (sel === null) return `vouch: ${digest} is reachable only from ${url}, which is no longer endorsed, refused`;
      if (sel.revokedBy !== null && route.mode === 'enforce') return `${this.revokedMessage(url, sel)} (${digest} is reachable only from it)`;
      return { url, sel };
    };
    if (known !== undefined) return check(known);
    if (route.unendorsed === 'deny') {
      const found = await this.relearn(route, repo, digest);
      if (found !== null) return check(found);
    }
    return `vouch: ${what} ${digest} of ${repo} is not reachable from an endorsed tag, refused`;
  }

  /** Reads the manifests of the repository's endorsed tags (mirror first) until one reaches `digest`; the endorsed URL, or null. */
  private async relearn(route: ProxyRoute, repo: string, digest: string): Promise<string | null> {
    let tags: string[];
    try {
      tags = (await this.allTags(route, repo)).slice(0, MAX_RELEARN_TAGS);
    } catch {
      return null;
    }
    const key = `${route.index} ${repo} ${digest}`;
    for (const tag of tags) {
      const url = manifestUrl(route.canonical, repo, tag);
      const sel = this.select(url);
      if (sel === null || !DIGEST.test(sel.entry.artifact_hash)) continue;
      const seen = new Set<string>();
      const walk = async (d: string, depth: number): Promise<void> => {
        if (depth > 2 || seen.has(d) || this.reachable.has(key)) return;
        seen.add(d);
        this.remember(route, repo, d, url);
        const facts = await this.readManifest(route, repo, d).catch(() => null);
        if (facts === null) return;
        for (const x of [...facts.manifests, ...facts.blobs]) this.remember(route, repo, x, url);
        for (const x of facts.manifests) await walk(x, depth + 1);
      };
      await walk(sel.entry.artifact_hash, 0);
      if (this.reachable.has(key)) return url;
    }
    return null;
  }

  private async readManifest(route: ProxyRoute, repo: string, digest: string): Promise<ReturnType<typeof parseManifest>> {
    const headers = { accept: MANIFEST_ACCEPT, ...(await this.authHeader(route, repo)) };
    const { artifact } = await this.ctx.artifacts.obtain(manifestUrl(route.origin, repo, digest), digest, {
      headers,
      trustedHosts: [new URL(route.canonical).host],
    });
    try {
      if (artifact.size > MAX_MANIFEST_BYTES) throw new VouchError('too_large', 'manifest too large');
      return parseManifest(artifact.bytes ?? readFileSync(artifact.path!));
    } finally {
      artifact.release();
    }
  }

  private remember(route: ProxyRoute, repo: string, digest: string, url: string): void {
    this.reachable.set(route, repo, digest, url);
  }

  /**
   * Verified bytes of `digest` from `fetchUrl` (mirror first), with the
   * route's authorization; an upstream that answers 401 has its challenge
   * learnt and is asked once more. `started`: called once the fetch is in
   * flight (or found in the mirror), before the first answer.
   */
  private async obtainAuthorized(
    route: ProxyRoute,
    repo: string,
    fetchUrl: string,
    digest: string,
    accept: string,
    signal?: AbortSignal,
    started?: () => void,
  ) {
    for (let attempt = 0; ; attempt++) {
      const headers = { accept, ...(await this.authHeader(route, repo)) };
      try {
        const pending = this.ctx.artifacts.obtain(fetchUrl, digest, {
          ...(signal !== undefined ? { signal } : {}),
          headers,
          trustedHosts: [new URL(route.canonical).host],
        });
        started?.();
        return await pending;
      } catch (e) {
        const status = isVouchError(e) ? (e.evidence as { status?: unknown } | undefined)?.status : undefined;
        if (attempt === 0 && status === 401) {
          await this.learnChallenge(route, true);
          continue;
        }
        throw e;
      }
    }
  }

  /** Verified bytes of `digest` from `fetchUrl` (mirror first); on failure answers the client and resolves null. */
  private async obtain(route: ProxyRoute, repo: string, fetchUrl: string, digest: string, res: ServerResponse, accept: string) {
    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort(new Error('the client went away'));
    };
    res.on('close', onClose);
    const what = fetchUrl.includes('/blobs/') ? 'blob' : 'manifest';
    try {
      return await this.obtainAuthorized(route, repo, fetchUrl, digest, accept, abort.signal);
    } catch (e) {
      if (abort.signal.aborted) {
        res.destroy();
        return null;
      }
      if (isVouchError(e) && e.code === 'hash_mismatch') {
        this.host.count('mismatches');
        this.ctx.log.warn('oci: digest mismatch: refused to serve', {
          route: route.label,
          url: fetchUrl,
          expected: digest,
          actual: (e.evidence as { actual?: unknown } | undefined)?.actual ?? null,
        });
        const message = `vouch: the upstream's bytes for ${digest} do not match the digest (${what} ${repo}), refused`;
        if (what === 'blob') {
          this.mismatched.set(`${route.index} ${repo} ${digest}`, { message, until: Date.now() + MISMATCH_MEMORY_MS });
          if (this.mismatched.size > 10_000) this.mismatched.delete(this.mismatched.keys().next().value!);
        }
        this.fail(res, 409, message, what);
        return null;
      }
      this.host.count('failed');
      const status = isVouchError(e) && e.code === 'too_large' ? 502 : statusOf(e);
      this.fail(
        res,
        status,
        `vouch: ${status === 504 ? 'upstream timeout' : 'upstream error'} for ${what} ${digest} of ${repo}${isVouchError(e) ? `: ${e.message.split('\n')[0]}` : ''}`,
        what,
      );
      return null;
    } finally {
      res.off('close', onClose);
    }
  }

  private async tags(req: IncomingMessage, res: ServerResponse, route: ProxyRoute, r: Extract<OciRequest, { type: 'tags' }>, query: string): Promise<void> {
    const q = new URLSearchParams(query);
    const nRaw = q.get('n');
    const n = nRaw === null ? null : Number(nRaw);
    if (n !== null && (!Number.isSafeInteger(n) || n < 0)) return this.fail(res, 400, 'vouch: n must be a non-negative integer', 'tags');
    const last = q.get('last');
    const all = await this.allTags(route, r.repo);
    const shown = all
      .filter((t) => {
        const sel = this.select(manifestUrl(route.canonical, r.repo, t));
        return route.unendorsed === 'pass' || (sel !== null && sel.revokedBy === null);
      })
      .sort();
    const page = pageOf(shown, n, last);
    const body = JSON.stringify({ name: r.repo, tags: page.tags });
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)),
      'cache-control': 'no-cache',
      ...API_VERSION,
    };
    if (page.more) headers.link = `<${route.prefix}${r.repo}/tags/list?n=${n}&last=${encodeURIComponent(page.tags.at(-1) ?? '')}>; rel="next"`;
    this.host.count('metadata');
    res.writeHead(200, headers);
    res.end(req.method === 'HEAD' ? undefined : body);
  }

  /** Every tag the upstream lists for `repo` (following its pages, bounded). */
  private async allTags(route: ProxyRoute, repo: string): Promise<string[]> {
    const out: string[] = [];
    let path: string | null = `v2/${repo}/tags/list`;
    for (let page = 0; path !== null && page < 100; page++) {
      const up = await this.upstream(route, repo, path, 'GET', 'application/json');
      if (up.statusCode === 404) {
        up.body.resume();
        return out;
      }
      if (up.statusCode !== 200) {
        up.body.resume();
        throw new VouchError('origin_error', `the upstream answered ${up.statusCode} for the tags of ${repo}`);
      }
      const body = await readBounded(up.body, MAX_TAG_LIST_BYTES, 'tag list');
      out.push(...parseTagList(body).tags);
      const link = up.headers.link;
      const next = typeof link === 'string' ? /^<([^>]*)>\s*;\s*rel="?next"?/.exec(link) : null;
      path = null;
      if (next !== null) {
        const u = new URL(next[1]!, route.origin);
        if (u.origin === new URL(route.origin).origin && u.pathname.startsWith(`${new URL(route.origin).pathname.replace(/\/?$/, '/')}v2/`)) {
          path = u.pathname.slice(new URL(route.origin).pathname.replace(/\/?$/, '/').length) + u.search;
        }
      }
    }
    return out;
  }

  // ---- the upstream: requests, the token flow, credentials -----------------

  private passAgent(): Agent {
    if (this.agent === null) {
      const timeoutMs = Math.round(this.ctx.config.origin.timeout * 1000);
      this.agent = new Agent({ connect: { timeout: Math.min(10_000, timeoutMs) }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, keepAliveTimeout: 4_000 });
    }
    return this.agent;
  }

  /** One request to the route's origin (`path` after the origin's base), with the token flow; never follows a redirect. */
  private async upstream(
    route: ProxyRoute,
    repo: string,
    path: string,
    method: 'GET' | 'HEAD',
    accept: string,
    range?: string,
  ): Promise<Dispatcher.ResponseData> {
    for (let attempt = 0; ; attempt++) {
      const headers: Record<string, string> = { accept, 'user-agent': 'vouch-gateway', ...(await this.authHeader(route, repo)) };
      if (range !== undefined) headers.range = range;
      let up: Dispatcher.ResponseData;
      try {
        up = await this.passAgent().request({ origin: route.originAuthority, path: route.originPath + path, method, headers });
      } catch (e) {
        const code = (e as { code?: string }).code ?? '';
        throw new VouchError(/TIMEOUT/.test(code) ? 'origin_timeout' : 'origin_error', `${route.origin}${path}: ${code || 'unreachable'}`);
      }
      if (up.statusCode === 401 && attempt === 0) {
        up.body.resume();
        await this.learnChallenge(route, true, typeof up.headers['www-authenticate'] === 'string' ? up.headers['www-authenticate'] : undefined);
        continue;
      }
      return up;
    }
  }

  /** `user:password` of the route's credentials file, or null (read each time: it may be rotated). */
  private credentials(route: ProxyRoute): string | null {
    if (route.credentialsFile === null) return null;
    let text: string;
    try {
      text = readFileSync(route.credentialsFile, 'utf8');
    } catch (e) {
      throw new VouchError('io_error', `cannot read the credentials file of route ${route.label}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
    }
    const line = text.trim();
    if (!/^[^:\s]+:\S+$/.test(line)) throw new VouchError('usage', `the credentials file of route ${route.label} must hold one line user:password`);
    return line;
  }

  /**
   * Finds out whether the upstream asks for authentication (its challenge on
   * `/v2/`, or the one given); `force` asks again (a token was refused).
   */
  private async learnChallenge(route: ProxyRoute, force: boolean, given?: string): Promise<void> {
    if (!force && this.challenges.has(route.index)) return;
    for (const k of [...this.tokens.keys()]) if (k.startsWith(`${route.index} `)) this.tokens.delete(k);
    let value = given;
    if (value === undefined) {
      try {
        const up = await this.passAgent().request({
          origin: route.originAuthority,
          path: `${route.originPath}v2/`,
          method: 'GET',
          headers: { 'user-agent': 'vouch-gateway' },
        });
        up.body.resume();
        const h = up.headers['www-authenticate'];
        value = up.statusCode === 401 && typeof h === 'string' ? h : undefined;
      } catch {
        return; // unreachable: requests fail on their own
      }
    }
    this.challenges.set(route.index, value === undefined ? null : parseChallenge(value));
  }

  /**
   * The `authorization` header for a pull of `repo` (a bearer token, or
   * basic credentials), or none. A route with credentials asks `/v2/` for
   * the upstream's challenge before its first request; one without sends
   * none until the upstream answered 401 (then it learns the challenge and
   * the request goes again): an anonymous registry is never probed.
   */
  private async authHeader(route: ProxyRoute, repo: string): Promise<Record<string, string>> {
    if (!this.challenges.has(route.index) && route.credentialsFile !== null) await this.learnChallenge(route, false);
    const ch = this.challenges.get(route.index) ?? null;
    if (ch === null) return {};
    const creds = this.credentials(route);
    if (ch.scheme === 'basic') return creds === null ? {} : { authorization: `Basic ${Buffer.from(creds).toString('base64')}` };
    if (ch.scheme !== 'bearer' || ch.params.realm === undefined) return {};
    const scope = `repository:${repo}:pull`;
    const key = `${route.index} ${scope}`;
    const kept = this.tokens.get(key);
    if (kept !== undefined && kept.until > Date.now()) return { authorization: kept.header };
    let realm: URL;
    try {
      realm = new URL(ch.params.realm);
    } catch {
      throw new VouchError('origin_error', `route ${route.label}: the upstream's token realm is not a URL`);
    }
    if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && realm.host === new URL(route.origin).host)) {
      throw new VouchError('origin_error', `route ${route.label}: the upstream's token realm must be https (or on the registry's own host)`);
    }
    if (ch.params.service !== undefined) realm.searchParams.set('service', ch.params.service);
    realm.searchParams.set('scope', scope);
    const up = await this.passAgent()
      .request({
        origin: realm.origin,
        path: realm.pathname + realm.search,
        method: 'GET',
        headers: {
          'user-agent': 'vouch-gateway',
          accept: 'application/json',
          ...(creds !== null ? { authorization: `Basic ${Buffer.from(creds).toString('base64')}` } : {}),
        },
      })
      .catch(() => {
        throw new VouchError('origin_error', `route ${route.label}: the token service is unreachable`);
      });
    if (up.statusCode !== 200) {
      up.body.resume();
      throw new VouchError('origin_error', `route ${route.label}: the token service answered ${up.statusCode}`);
    }
    const body = await readBounded(up.body, MAX_TOKEN_BYTES, 'token answer');
    let token: unknown;
    let expires: unknown;
    try {
      const doc = JSON.parse(body.toString('utf8')) as { token?: unknown; access_token?: unknown; expires_in?: unknown };
      token = doc.token ?? doc.access_token;
      expires = doc.expires_in;
    } catch {
      throw new VouchError('origin_error', `route ${route.label}: the token answer is not JSON`);
    }
    if (typeof token !== 'string' || !/^[\x21-\x7e]{1,8192}$/.test(token))
      throw new VouchError('origin_error', `route ${route.label}: the token answer holds no token`);
    const seconds = typeof expires === 'number' && expires > 0 ? Math.min(expires, 3600) : 60;
    const header = `Bearer ${token}`;
    this.tokens.set(key, { header, until: Date.now() + Math.max(1, seconds - 10) * 1000 });
    if (this.tokens.size > 10_000) this.tokens.delete(this.tokens.keys().next().value!);
    return { authorization: header };
  }
}

/**
 * vouch's reason as the status line's reason phrase too (printable ASCII,
 * bounded): clients that print no error body print the status line —
 * containers/image for a 5xx (and, up to 5.23, for any blob), containerd
 * for any status — so the reason reaches the user there as well.
 */
export function reasonPhrase(message: string): string {
  const text = message.replace(/[^\x20-\x7e]/g, '?');
  return text.length <= MAX_REASON ? text : `${text.slice(0, MAX_REASON - 3)}...`;
}

/** One `bytes=a-b` range of a body of `size` bytes (`a-`, `-n` too), or null: the whole body; 'bad': not satisfiable. */
export function parseRange(value: string | undefined, size: number): { start: number; end: number } | null | 'bad' {
  if (value === undefined) return null;
  const m = /^bytes=(\d{0,19})-(\d{0,19})$/.exec(value.trim());
  if (m === null || (m[1] === '' && m[2] === '')) return null; // several ranges or another unit: the whole body
  let start: number;
  let end: number;
  if (m[1] === '') {
    const n = Number(m[2]);
    if (n === 0) return 'bad';
    start = Math.max(0, size - n);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  }
  if (start >= size || end < start) return 'bad';
  return { start, end };
}

/**
 * Sends verified bytes (whole, or the one range asked for), then releases
 * them: from memory in paced pieces, from a file through two 1 MiB halves
 * read while the other goes out (download.ts), as /v1/download sends.
 */
async function sendRanged(
  ctx: GatewayContext,
  req: IncomingMessage,
  res: ServerResponse,
  artifact: { size: number; bytes?: Buffer; path?: string; release(): void },
  head: Record<string, string>,
  stallMs: number,
): Promise<void> {
  let inFlight = false;
  try {
    const range = parseRange(req.headers.range, artifact.size);
    if (range === 'bad') {
      res.writeHead(416, { 'content-range': `bytes */${artifact.size}`, 'content-length': '0', ...head });
      res.end();
      return;
    }
    const start = range?.start ?? 0;
    const end = range?.end ?? artifact.size - 1;
    const length = artifact.size === 0 ? 0 : end - start + 1;
    res.writeHead(range === null ? 200 : 206, {
      ...head,
      'content-length': String(length),
      ...(range !== null ? { 'content-range': `bytes ${start}-${end}/${artifact.size}` } : {}),
    });
    if (req.method === 'HEAD' || length === 0) {
      res.end();
      return;
    }
    const progress = stallGuard(res, stallMs);
    if (artifact.bytes !== undefined) {
      // The socket reads the bytes until the response is done (or torn down): released then, not before.
      inFlight = true;
      finished(res, () => artifact.release());
      sendQueued(res, artifact.bytes.subarray(start, end + 1), progress);
      return;
    }
    const window = ctx.artifacts.sendBuffer?.(2 * SEND_PIECE, 2 * MIN_PIECE) ?? { buffer: Buffer.allocUnsafeSlow(2 * MIN_PIECE), release: () => {} };
    try {
      await sendFile(res, artifact.path!, length, window.buffer, progress, start).catch(() => res.destroy());
    } finally {
      window.release();
    }
  } finally {
    if (!inFlight) artifact.release();
  }
}

/**
 * Writes `bytes` as the whole body in SEND_PIECE pieces, keeping up to
 * SEND_QUEUE of them queued on the socket and topping up on each 'drain';
 * stops if the response is torn down.
 */
export function sendQueued(res: ServerResponse, bytes: Buffer, progress: () => void): void {
  let offset = 0;
  const next = (): void => {
    progress();
    while (!res.destroyed) {
      const end = Math.min(offset + SEND_PIECE, bytes.length);
      const piece = bytes.subarray(offset, end);
      offset = end;
      if (offset === bytes.length) {
        res.end(piece);
        return;
      }
      if (!res.write(piece) && res.writableLength >= SEND_QUEUE) {
        res.once('drain', next);
        return;
      }
    }
  };
  next();
}
