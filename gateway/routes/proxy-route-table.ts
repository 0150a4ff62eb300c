/**
 * The proxy's route table: routes checked and compiled, a request target
 * matched (Host routes first, then the longest prefix) and mapped to its
 * artifact URL (`canonical + rest`) and origin URL (`origin + rest`),
 * targets that could climb out refused, and the URL maps ecosystem modules
 * rewrite links with. Pure: no I/O.
 * Owns: compilation and its refusals (usage errors naming the key),
 * matching, the climb-out refusal (allowed characters per segment, raw and
 * decoded), the artifact / gateway URL maps.
 * Trusts: config.ts's validation; ecosystem spellings, checked again here.
 * Must hold: a mapped URL is the route's base plus a path that cannot leave
 * it, checked before any lookup or origin request.
 */
import { VouchError } from '../../chain/errors.ts';
import type { RouteConfig, RouteKind } from '../config.ts';
import type { EcosystemHandler } from '../ecosystems/ecosystem.ts';
import { ecosystemFor } from '../ecosystems/index.ts';

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
  /** `kind: oci`: the upstream's credentials file (null: anonymous). */
  credentialsFile: string | null;
  /** `prefix /npm/`, `host registry.example`, ... */
  label: string;
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

function usage(path: string, what: string): never {
  throw new VouchError('usage', `config: ${path} ${what}`);
}

/**
 * Checks the configured routes and prepares them for matching.
 * @throws VouchError usage naming the route: an origin with credentials, a
 * query or a fragment; a prefix with `//`, a dot segment, percent-encoding
 * or anything `pathRefusal` refuses, or under `/v1/` (the gateway's own
 * paths); two routes
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
    if (prefix.includes('//') || prefix.includes('%') || prefix.split('/').some((s) => s === '.' || s === '..') || pathRefusal(prefix, '') !== null) {
      usage(`${at}.prefix`, 'must not contain //, dot segments, percent-encoding or what a request path may not (`;`, ...)');
    }
    if (prefix === '/v1/' || prefix.startsWith('/v1/')) usage(`${at}.prefix`, "must not be under /v1/ (the gateway's own paths)");
    if (r.kind === 'oci' && !prefix.startsWith('/v2/'))
      usage(`${at}.prefix`, 'of an oci route must be /v2/ or under it (/v2/<registry host>/): registry clients ask for /v2/');
    if (r.kind !== 'oci' && (r.credentials_file ?? null) !== null) usage(`${at}.credentials_file`, 'applies to oci routes only');
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
      index,
      host,
      port,
      prefix,
      origin: withSlash(r.origin),
      canonical: withSlash(r.canonical ?? r.origin),
      originAuthority: `${url.protocol}//${url.host}`,
      originPath,
      unendorsed: r.unendorsed,
      mode: r.mode,
      kind: r.kind,
      ecosystem: ecosystemFor(r.kind),
      metadataTtlMs: Math.round(r.metadata_ttl * 1000),
      metadataMaxStaleMs: Math.round(r.metadata_max_stale * 1000),
      credentialsFile: r.credentials_file ?? null,
      label: label + (r.kind === 'plain' ? '' : ` (${r.kind})`),
    });
  });
  return out;
}

/**
 * `name` and `port` of a Host header value (lower-case, one trailing dot
 * dropped); null when it is not a host name, or its port is not a port
 * (`hostIsValid`: the dispatch answers such a request 400 before any route).
 */
export function parseHost(value: string | undefined): { name: string; port: string | null } | null {
  if (value === undefined) return null;
  const m = /^([A-Za-z0-9.-]+?)\.?(?::(\d{1,5}))?$/.exec(value.trim());
  if (m === null) return null;
  if (m[2] !== undefined && Number(m[2]) > 65535) return null;
  return { name: m[1]!.toLowerCase(), port: m[2] === undefined ? null : String(Number(m[2])) };
}

/** RFC 3986 `host [ ":" port ]`: an IP literal (IPv6 or IPvFuture) or a reg-name (percent-escapes, sub-delims), then digits. */
const RFC3986_HOST = /^(?:\[(?:[0-9A-Fa-f:.]+|v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+)\]|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*)(?::(\d*))?$/;

/** Whether the digits of `value` from `from` on are a port of at most 65535 (an empty port is no port); false on a non-digit. */
function portFits(value: string, from: number): boolean {
  let port = 0;
  for (let i = from; i < value.length; i++) {
    const d = value.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return false;
    port = port * 10 + d;
    if (port > 65535) return false;
  }
  return true;
}

/**
 * Whether a Host field value is valid (RFC 9112 3.2, RFC 3986 3.2.2-3.2.3):
 * `host [":" port]` with a port, when given, of at most 65535. An empty
 * value is valid (a request target without an authority); a port out of
 * range (`pkg.test:99999`), not a number (`pkg.test:x`), a second colon
 * outside brackets or a character outside RFC 3986's is not. Every request
 * asks it: a DNS name or IPv4 address with a port is checked by a scan of
 * its characters (no regular expression, nothing allocated).
 */
export function hostIsValid(value: string): boolean {
  let i = 0;
  for (; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (!((c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 46 || c === 45)) break;
  }
  if (i === value.length) return true;
  if (i > 0 && value.charCodeAt(i) === 58) return portFits(value, i + 1);
  const m = RFC3986_HOST.exec(value);
  return m !== null && (m[1] === undefined || portFits(m[1], 0));
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
 * What a path segment may hold, as sent: RFC 3986's unreserved characters,
 * the sub-delimiters but `;` (a path parameter: Tomcat, Jetty and Spring read
 * `..;` as `..`), `:` and `@`, and percent-escapes.
 */
const SEGMENT_AS_SENT = /^(?:[A-Za-z0-9\-._~!$&'()*+,=:@]|%[0-9A-Fa-f]{2})*$/;
/** The ASCII a segment may hold once percent-decoded: the same set, and space (sent as `%20`). */
const SEGMENT_ASCII = /^[A-Za-z0-9\-._~!$&'()*+,=:@ ]*$/;
/**
 * Code points refused in a decoded segment: controls, format characters
 * (bidi overrides, zero-width), separators and other white space, private use,
 * noncharacters.
 */
const UNSAFE_CODE_POINT = /[\p{Cc}\p{Cf}\p{Z}\p{White_Space}\p{Co}\p{Noncharacter_Code_Point}]/u;

/**
 * The code points of a decoded segment's non-ASCII bytes, or a reason: each
 * must be well-formed UTF-8 (no overlong forms such as `%c0%ae`, no
 * surrogates, nothing past U+10FFFF), not an unsafe code point, and not one
 * that Unicode compatibility normalization (NFKC, which some origins apply)
 * turns into ASCII — a full-width dot `%ef%bc%8e` is `.` to them.
 */
function utf8Refusal(bytes: string): string | null {
  for (let i = 0; i < bytes.length; ) {
    const b0 = bytes.charCodeAt(i);
    if (b0 < 0x80) {
      i++;
      continue;
    }
    const n = b0 >= 0xc2 && b0 <= 0xdf ? 1 : b0 >= 0xe0 && b0 <= 0xef ? 2 : b0 >= 0xf0 && b0 <= 0xf4 ? 3 : -1;
    if (n < 0) return 'invalid or overlong UTF-8'; // a continuation byte, an overlong lead (c0, c1) or f5-ff
    if (i + n >= bytes.length) return 'truncated UTF-8';
    let cp = b0 & (n === 1 ? 0x1f : n === 2 ? 0x0f : 0x07);
    for (let k = 1; k <= n; k++) {
      const b = bytes.charCodeAt(i + k);
      if ((b & 0xc0) !== 0x80) return 'invalid UTF-8';
      cp = (cp << 6) | (b & 0x3f);
    }
    const min = n === 1 ? 0x80 : n === 2 ? 0x800 : 0x10000;
    if (cp < min) return 'overlong UTF-8';
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 'invalid UTF-8 (surrogate or past U+10FFFF)';
    const ch = String.fromCodePoint(cp);
    if (UNSAFE_CODE_POINT.test(ch)) return 'encoded control, format or space character';
    if (/[\x00-\x7f]/.test(ch.normalize('NFKC'))) return 'a character Unicode normalization turns into ASCII (full-width dot, slash, ...)';
    i += n + 1;
  }
  return null;
}

/**
 * Why the path of a request target cannot be mapped under a route (a short
 * reason), or null when it can. `path` is the whole path (no query), `rest`
 * the part after the route's prefix. An allow-list per segment (README
 * "Proxy routes", "Refused with 400"): as sent, `SEGMENT_AS_SENT`; decoded,
 * ASCII from `SEGMENT_ASCII` and well-formed UTF-8 that normalizes to no
 * ASCII; and no segment made only of dots and spaces (`.`, `..`, `...`,
 * `..%20`: Windows origins drop trailing dots and spaces). The query string
 * is not looked at.
 */
export function pathRefusal(path: string, rest: string): string | null {
  if (/[\x00-\x20\x7f]/.test(path)) return 'control character or space in the path';
  if (path.includes('\\')) return 'backslash in the path';
  if (path.includes('#')) return 'fragment in the path';
  if (/%(?![0-9A-Fa-f]{2})/.test(path)) return 'malformed percent-encoding';
  if (path.includes(';')) return 'path parameter (;) in the path';
  const segments = path.split('/');
  for (let i = 1; i < segments.length; i++) {
    const raw = segments[i]!;
    if (raw === '') {
      if (i !== segments.length - 1) return 'empty path segment (//)';
      continue;
    }
    if (!SEGMENT_AS_SENT.test(raw)) return 'character outside the allowed set (percent-encode it)';
    const decoded = decodeBytes(raw);
    if (/^[. ]+$/.test(decoded) && decoded.includes('.')) return 'dot segment';
    const ascii = decoded.replace(/[\x80-\xff]/g, '');
    if (!SEGMENT_ASCII.test(ascii)) {
      if (/[/\\]/.test(ascii)) return 'encoded slash or backslash';
      if (/[\x00-\x1f\x7f]/.test(ascii)) return 'encoded control character';
      if (ascii.includes('%')) return 'double percent-encoding';
      if (ascii.includes(';')) return 'path parameter (encoded ;)';
      return 'encoded character outside the allowed set';
    }
    if (ascii.length !== decoded.length) {
      const bad = utf8Refusal(decoded);
      if (bad !== null) return bad;
    }
  }
  const first = decodeBytes(rest.split('/')[0] ?? '');
  if (/^[A-Za-z][A-Za-z0-9+.-]*:/.test(first)) return 'absolute URL in the path';
  return null;
}

const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?#]*)(\/[^?#]*)?/;

/**
 * The route a request falls under, with its artifact URL or the reason it
 * is refused; null when no route applies (the caller answers 404 JSON).
 * `target` is the raw request target (`req.url`).
 */
export function matchRoute(routes: readonly ProxyRoute[], hostHeader: string | undefined, target: string): ProxyMatch | null {
  if (routes.length === 0) return null;
  if (!target.startsWith('/')) {
    // Absolute-form (`GET http://host/path`): refused when it would fall under a route.
    const m = ABSOLUTE_FORM.exec(target);
    if (m === null) return null;
    const path = m[2] ?? '/';
    const route = findRoute(routes, m[1], path) ?? findRoute(routes, hostHeader, path);
    return route === null ? null : { route, url: null, fetchUrl: null, upstreamPath: null, rest: null, query: null, refusal: 'absolute-form request target' };
  }
  const q = target.indexOf('?');
  const path = q === -1 ? target : target.slice(0, q);
  const route = findRoute(routes, hostHeader, path);
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
    route,
    url: route.canonical + tail,
    fetchUrl: route.origin + tail,
    upstreamPath: route.originPath + tail,
    rest,
    query: q === -1 ? '' : target.slice(q + 1),
    refusal: null,
  };
}

/** Routes to try for a URL found under `route`'s metadata: that route first. */
function routesFrom(routes: readonly ProxyRoute[], route: ProxyRoute): ProxyRoute[] {
  return [route, ...routes.filter((r) => r !== route)];
}

/** The artifact URL (canonical form) of a URL under any route's origin or canonical base (`route` tried first); null when no route serves it. */
export function artifactUrlOf(routes: readonly ProxyRoute[], route: ProxyRoute, url: string): string | null {
  for (const r of routesFrom(routes, route)) {
    if (url.startsWith(r.canonical)) return url;
    if (url.startsWith(r.origin)) return r.canonical + url.slice(r.origin.length);
  }
  return null;
}

/** The gateway URL (on `base`, or a Host route's own host) that serves an artifact URL; null when no route serves it. */
export function gatewayUrlOf(routes: readonly ProxyRoute[], route: ProxyRoute, base: string, artifactUrl: string): string | null {
  for (const r of routesFrom(routes, route)) {
    if (!artifactUrl.startsWith(r.canonical)) continue;
    const tail = artifactUrl.slice(r.canonical.length);
    const hostBase = r.host === null ? base : `${new URL(base).protocol}//${r.host}${r.port === null ? '' : `:${r.port}`}`;
    return hostBase + r.prefix + tail;
  }
  return null;
}
