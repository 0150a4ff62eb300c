/**
 * The Go module proxy route (`kind: goproxy`): the GOPROXY protocol in front
 * of an origin proxy. `@v/<v>.zip` is an artifact; `@v/list`, `.info`,
 * `.mod` and `@latest` are answered only for versions whose .zip is
 * endorsed in force (deny routes) or not revoked (pass routes).
 * Owns: request path checks (golang.org/x/mod module.CheckPath, canonical
 * versions), case-encoding (`!x`), Go's version order, filtering the list,
 * choosing `@latest`, checking origin `.info` answers.
 * Trusts: `MetadataIO` (chain index, cached origin answers, verified path).
 * Must hold: a deny route never lists, resolves or describes a version
 * whose .zip has no endorsement in force; endorsed `.mod`/`.info` go only
 * through the verified path; only valid paths reach the origin; origin
 * metadata is checked and bounded (MAX_LIST_LINES) before it is sent.
 */
import { goUnitName } from '../../chain/unit-names.ts';
import type { Classified, EcosystemHandler, MetadataIO, MetadataResponse, Rendered, RenderView } from './ecosystem.ts';

/** Longest module path accepted (bytes, unescaped). */
export const MAX_MODULE_PATH = 300;
/** Longest version or version query accepted (bytes, unescaped). */
export const MAX_VERSION = 128;
/** Lines of an origin `@v/list` longer than this are dropped. */
const MAX_LIST_LINE = 512;
/** Most lines an origin `@v/list` may have (modules with the most releases list a few thousand). */
export const MAX_LIST_LINES = 100_000;

/** An origin answer over one of the caps; the message names it. */
export class ListTooLong extends Error {}
/** Largest origin `.info` / `@latest` answer accepted. */
const MAX_INFO_BYTES = 64 * 1024;

const TEXT = 'text/plain; charset=utf-8';
const JSON_TYPE = 'application/json';
const FETCH = { accept: '*/*', form: 'goproxy' } as const;

/** A request of the GOPROXY protocol, module path and version unescaped. */
export type GoRequest =
  | { what: 'list' | 'latest'; module: string }
  /** `.zip` and `.mod` always name a canonical version; `.info` may name a query (`master`, a commit). */
  | { what: 'info' | 'mod' | 'zip'; module: string; version: string; canonical: boolean };

// ---------------------------------------------------------------------------
// Case-encoding and syntax (golang.org/x/mod/module)

/** `!` + lower case for each upper-case letter (module.EscapePath / EscapeVersion, for checked input). */
export function escapeGo(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `!${c.toLowerCase()}`);
}

/** The inverse of `escapeGo`; null for a malformed encoding (an upper-case letter, `!` not before a-z, non-ASCII). */
export function unescapeGo(escaped: string): string | null {
  let out = '';
  for (let i = 0; i < escaped.length; i++) {
    const c = escaped.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) return null;
    if (c === 0x21) {
      const n = escaped.charCodeAt(i + 1);
      if (!(n >= 0x61 && n <= 0x7a)) return null;
      out += String.fromCharCode(n - 0x20);
      i++;
    } else if (c >= 0x41 && c <= 0x5a) {
      return null;
    } else {
      out += escaped[i];
    }
  }
  return out;
}

const BAD_WINDOWS_NAMES = new Set(['CON', 'PRN', 'AUX', 'NUL', ...[1, 2, 3, 4, 5, 6, 7, 8, 9].flatMap((n) => [`COM${n}`, `LPT${n}`])]);

/** Why a module path element is invalid (module.checkElem for module paths), or null. */
function elemProblem(elem: string): string | null {
  if (elem === '') return 'empty path element';
  if (/^\.+$/.test(elem)) return `invalid path element ${elem}`;
  if (elem.startsWith('.')) return 'leading dot in path element';
  if (elem.endsWith('.')) return 'trailing dot in path element';
  if (!/^[A-Za-z0-9._~-]+$/.test(elem)) return 'invalid character in path element';
  const short = elem.split('.')[0]!;
  if (BAD_WINDOWS_NAMES.has(short.toUpperCase())) return `${short} disallowed as path element component on Windows`;
  if (/~[0-9]+$/.test(short)) return 'trailing tilde and digits in path element';
  return null;
}

/**
 * The major-version suffix of a module path (module.SplitPathVersion):
 * '' (none), `/vN`, or gopkg.in's `.vN` / `.vN-unstable`; null when the
 * suffix is malformed (`/v1`, `/v0`, `/v2.1`, a gopkg.in path without one).
 */
export function pathMajor(path: string): string | null {
  if (path.startsWith('gopkg.in/')) {
    const m = /\.(v(?:0|[1-9][0-9]*))(-unstable)?$/.exec(path);
    if (m === null || m.index <= 'gopkg.in'.length || (m[1] === 'v0' && m[2] !== undefined)) return null;
    return path.slice(m.index);
  }
  const m = /\/v([0-9.]+)$/.exec(path);
  if (m === null || m.index === 0) return '';
  if (m[1]!.includes('.') || m[1]!.startsWith('0') || m[1] === '1') return null;
  return `/v${m[1]}`;
}

/** Why `path` is not a valid module path (module.CheckPath), or null. */
export function modulePathProblem(path: string): string | null {
  if (path === '') return 'empty module path';
  if (path.length > MAX_MODULE_PATH) return `module path longer than ${MAX_MODULE_PATH} bytes`;
  if (path.startsWith('-')) return 'leading dash';
  if (path.includes('//')) return 'double slash';
  if (path.endsWith('/')) return 'trailing slash';
  const elems = path.split('/');
  for (const e of elems) {
    const p = elemProblem(e);
    if (p !== null) return p;
  }
  const first = elems[0]!;
  if (!first.includes('.')) return 'missing dot in first path element';
  if (!/^[a-z0-9.-]+$/.test(first)) return 'invalid character in first path element';
  if (pathMajor(path) === null) return 'invalid major version suffix';
  return null;
}

const NUM = '(?:0|[1-9][0-9]*)';
const PRE_ID = '(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)';
const CANONICAL = new RegExp(`^v(${NUM})\\.(${NUM})\\.(${NUM})(?:-(${PRE_ID}(?:\\.${PRE_ID})*))?(\\+incompatible)?$`);

/** A canonical Go module version: `vMAJOR.MINOR.PATCH`, optional pre-release, optional `+incompatible` (pseudo-versions included). */
export function isCanonicalVersion(v: string): boolean {
  return v.length <= MAX_VERSION && CANONICAL.test(v);
}

/** A version query a `.info` request may carry besides a canonical version (a branch, tag or commit name). */
function isVersionQuery(v: string): boolean {
  return v.length <= MAX_VERSION && /^[A-Za-z0-9_~+-][A-Za-z0-9._~+-]*$/.test(v) && !v.endsWith('.');
}

/** Whether a canonical version fits the module path's major-version suffix (module.CheckPathMajor). */
export function versionFitsPath(module: string, version: string): boolean {
  const m = CANONICAL.exec(version);
  if (m === null) return false;
  const major = `v${m[1]}`;
  let want = pathMajor(module);
  if (want === null) return false;
  if (want.startsWith('.v') && want.endsWith('-unstable')) want = want.slice(0, -'-unstable'.length);
  if (version.startsWith('v0.0.0-') && want === '.v1') return true; // an old pseudo-version form gopkg.in allows
  if (want === '') return major === 'v0' || major === 'v1' || m[5] !== undefined;
  return m[5] === undefined && major === want.slice(1);
}

function comparePre(a: string | undefined, b: string | undefined): number {
  if (a === b) return 0;
  if (a === undefined) return 1; // a release is above its pre-releases
  if (b === undefined) return -1;
  const x = a.split('.');
  const y = b.split('.');
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const c = compareIdent(x[i]!, y[i]!);
    if (c !== 0) return c;
  }
  return Math.sign(x.length - y.length);
}

function compareIdent(a: string, b: string): number {
  const an = /^[0-9]+$/.test(a);
  const bn = /^[0-9]+$/.test(b);
  if (an && bn) return compareNum(a, b);
  if (an !== bn) return an ? -1 : 1; // numeric identifiers sort first
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Decimal strings without leading zeros, of any length. */
function compareNum(a: string, b: string): number {
  if (a.length !== b.length) return Math.sign(a.length - b.length);
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Go's semver order of two canonical versions (golang.org/x/mod/semver.Compare: build suffixes ignored). */
export function compareGoVersions(a: string, b: string): number {
  const x = CANONICAL.exec(a);
  const y = CANONICAL.exec(b);
  if (x === null || y === null) throw new TypeError(`not canonical Go versions: ${a}, ${b}`);
  for (let i = 1; i <= 3; i++) {
    const c = compareNum(x[i]!, y[i]!);
    if (c !== 0) return c;
  }
  return comparePre(x[4], y[4]);
}

/** The version `latest` means among `versions` (the go command's rule): the highest release, else the highest pre-release. */
export function latestOf(versions: readonly string[]): string | null {
  let best: string | null = null;
  let bestRelease = false;
  for (const v of versions) {
    const release = CANONICAL.exec(v)?.[4] === undefined;
    if (best === null || (release && !bestRelease) || (release === bestRelease && compareGoVersions(v, best) > 0)) {
      best = v;
      bestRelease = release;
    }
  }
  return best;
}

/**
 * Parses the path after the route's prefix (`%21` read as `!`); null when it
 * is not a GOPROXY request this module answers (the framework's `other`).
 */
export function parseGoproxyPath(rest: string): GoRequest | null {
  const path = rest.replace(/%21/g, '!');
  if (path.length > 2 * (MAX_MODULE_PATH + MAX_VERSION) + 16 || path.includes('%')) return null;
  let modEsc: string;
  let what: GoRequest['what'];
  let versionEsc = '';
  if (path.endsWith('/@latest')) {
    modEsc = path.slice(0, -'/@latest'.length);
    what = 'latest';
  } else {
    const at = path.indexOf('/@v/');
    if (at === -1) return null;
    modEsc = path.slice(0, at);
    const file = path.slice(at + '/@v/'.length);
    if (file === 'list') what = 'list';
    else {
      const m = /^([^/]+)\.(info|mod|zip)$/.exec(file);
      if (m === null) return null;
      what = m[2] as 'info' | 'mod' | 'zip';
      versionEsc = m[1]!;
    }
  }
  const module = unescapeGo(modEsc);
  if (module === null || modulePathProblem(module) !== null) return null;
  if (what === 'list' || what === 'latest') return { what, module };
  const version = unescapeGo(versionEsc);
  if (version === null) return null;
  const canonical = isCanonicalVersion(version);
  if (canonical && !versionFitsPath(module, version)) return null;
  if (!canonical && (what !== 'info' || !isVersionQuery(version))) return null;
  return { what, module, version, canonical };
}

/** One line of `@v/list`: a version, and the time some proxies add after it. */
export interface ListLine {
  version: string;
  time: string | null;
}

/**
 * The usable lines of an origin's `@v/list`: canonical versions that fit the
 * module path, each once, with an RFC 3339 time when one follows; anything
 * else is dropped.
 * @throws ListTooLong when the list has more than MAX_LIST_LINES lines.
 */
export function parseVersionList(body: string | Buffer, module: string): ListLine[] {
  let lines = 0;
  for (let at = body.indexOf('\n'); at !== -1 && at < body.length - 1; at = body.indexOf('\n', at + 1)) {
    if (++lines >= MAX_LIST_LINES) throw new ListTooLong(`the version list has more than ${MAX_LIST_LINES} lines`);
  }
  if (typeof body !== 'string') body = body.toString('utf8'); // counted first: a list over the cap is never decoded
  const out: ListLine[] = [];
  const seen = new Set<string>();
  for (const line of body.split('\n')) {
    if (line.length > MAX_LIST_LINE) continue;
    const f = line.trim().split(/[ \t]+/);
    const version = f[0] ?? '';
    if (!isCanonicalVersion(version) || !versionFitsPath(module, version) || seen.has(version)) continue;
    seen.add(version);
    const time = f[1] !== undefined && /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(?:Z|[+-][0-9]{2}:[0-9]{2})$/.test(f[1]) ? f[1] : null;
    out.push({ version, time });
  }
  return out;
}

/** A list answer: one version per line (with its time when the origin gave one), each line ended by a newline. */
export function formatVersionList(lines: readonly ListLine[]): string {
  return lines.map((l) => (l.time === null ? `${l.version}\n` : `${l.version} ${l.time}\n`)).join('');
}

/** The `.zip` artifact URL of a module version under the route (canonical base), or null when no route serves it. */
export function zipArtifactUrl(io: Pick<MetadataIO, 'artifactUrlOf' | 'originUrl'>, module: string, version: string): string | null {
  return io.artifactUrlOf(io.originUrl(`${escapeGo(module)}/@v/${escapeGo(version)}.zip`));
}

/** Whether a version's `.zip` has an endorsement in force. */
export function zipEndorsed(io: Pick<MetadataIO, 'artifactUrlOf' | 'originUrl' | 'endorsed'>, module: string, version: string): boolean {
  const url = zipArtifactUrl(io, module, version);
  return url !== null && io.endorsed(url) !== null;
}

/** Whether a version's `.zip` is revoked (its download answers 410). */
export function zipRevoked(io: Pick<MetadataIO, 'artifactUrlOf' | 'originUrl' | 'revoked'>, module: string, version: string): boolean {
  const url = zipArtifactUrl(io, module, version);
  return url !== null && io.revoked?.(url) === true;
}

/** The list a route offers: on a deny route only the versions whose `.zip` is endorsed in force; on a pass route all but the revoked ones. */
export function filterVersionList(
  io: Pick<MetadataIO, 'artifactUrlOf' | 'originUrl' | 'endorsed' | 'revoked' | 'unendorsed'>,
  module: string,
  lines: readonly ListLine[],
): ListLine[] {
  return io.unendorsed === 'pass' ? lines.filter((l) => !zipRevoked(io, module, l.version)) : lines.filter((l) => zipEndorsed(io, module, l.version));
}

/** The Version of an origin `.info` / `@latest` answer, or null when the answer is not one. */
export function infoVersion(body: Buffer): string | null {
  if (body.length > MAX_INFO_BYTES) return null;
  let info: unknown;
  try {
    info = JSON.parse(body.toString('utf8'));
  } catch {
    return null;
  }
  if (info === null || typeof info !== 'object' || Array.isArray(info)) return null;
  const v = (info as { Version?: unknown }).Version;
  return typeof v === 'string' && isCanonicalVersion(v) ? v : null;
}

// ---------------------------------------------------------------------------
// Answers

const notEndorsed = (io: MetadataIO, module: string, version: string): string =>
  `vouch: ${module}@${version} is not endorsed by the authority (no endorsement in force for ${zipArtifactUrl(io, module, version) ?? 'its .zip'}), refused`;

const revokedVersion = (io: MetadataIO, module: string, version: string): string =>
  `vouch: ${module}@${version} is revoked by the authority (${zipArtifactUrl(io, module, version) ?? 'its .zip'}), refused`;

/** A non-200 origin answer for metadata: 404 / 410 as they are (go then reports the module or version missing), else 502. */
function originRefused(io: MetadataIO, r: MetadataResponse, what: string): void {
  const status = r.status === 404 || r.status === 410 ? r.status : 502;
  io.fail(status, `vouch: the origin has no ${what} (it answered ${r.status})`);
}

/** The list offered from an origin `@v/list` body, or the refusal of a list over the cap (logged at warn). */
function offeredList(io: RenderView, module: string, body: Buffer): ListLine[] | Rendered {
  try {
    return filterVersionList(io, module, parseVersionList(body, module));
  } catch (e) {
    if (!(e instanceof ListTooLong)) throw e;
    io.log.warn('goproxy: unusable version list from the origin', { module, error: e.message });
    return { ok: false, status: 502, message: `vouch: the origin's version list for ${module} is unusable: ${e.message}` };
  }
}

async function answerList(io: MetadataIO, module: string): Promise<void> {
  const r = await io.fetch(`${escapeGo(module)}/@v/list`, FETCH);
  if (r.status !== 200) return originRefused(io, r, `version list for ${module}`);
  io.answer(r, 'go list', (view): Rendered => {
    const lines = offeredList(view, module, r.body);
    const unit = goUnitName(module);
    return Array.isArray(lines)
      ? { ok: true, status: 200, contentType: TEXT, body: formatVersionList(lines), ...(unit.ok ? { unit: unit.value } : {}) }
      : lines;
  });
}

/** Sends the origin's `.info` of a version whose .zip is endorsed (or on a pass route), checked to describe exactly that version. */
async function sendInfo(io: MetadataIO, module: string, version: string, headers: Record<string, string> = {}): Promise<void> {
  const r = await io.fetch(`${escapeGo(module)}/@v/${escapeGo(version)}.info`, FETCH);
  if (r.status !== 200) return originRefused(io, r, `.info for ${module}@${version}`);
  if (infoVersion(r.body) !== version) return io.fail(502, `vouch: the origin's .info for ${module}@${version} is not valid or names another version`);
  io.send(200, JSON_TYPE, r.body, headers);
}

async function answerInfoOrMod(io: MetadataIO, what: 'info' | 'mod', module: string, version: string): Promise<void> {
  if (await io.serveArtifact()) return; // the .mod / .info URL is endorsed itself: verified bytes only
  if (!zipEndorsed(io, module, version)) {
    if (zipRevoked(io, module, version)) return io.fail(404, revokedVersion(io, module, version));
    if (io.unendorsed === 'pass') return io.passThrough();
    return io.fail(404, notEndorsed(io, module, version));
  }
  if (what === 'info') return sendInfo(io, module, version);
  const r = await io.fetch(`${escapeGo(module)}/@v/${escapeGo(version)}.mod`, FETCH);
  if (r.status !== 200) return originRefused(io, r, `.mod for ${module}@${version}`);
  io.send(200, TEXT, r.body);
}

/** `.info` of a query (`master`, a commit): the origin resolves it; on a deny route the version it names must be endorsed. */
async function answerQuery(io: MetadataIO, module: string, query: string): Promise<void> {
  if (io.unendorsed === 'pass') return io.passThrough();
  const r = await io.fetch(`${escapeGo(module)}/@v/${escapeGo(query)}.info`, FETCH);
  if (r.status !== 200) return originRefused(io, r, `version ${query} of ${module}`);
  const version = infoVersion(r.body);
  if (version === null || !versionFitsPath(module, version)) return io.fail(502, `vouch: the origin's .info for ${module}@${query} is not valid`);
  if (!zipEndorsed(io, module, version))
    return io.fail(404, `vouch: ${module}@${query} resolves to ${version}, which is not endorsed by the authority, refused`);
  io.send(200, JSON_TYPE, r.body);
}

/**
 * `@latest`: the newest endorsed version of the list (releases first); else the origin's `@latest` when its
 * version is endorsed. On a pass route: the origin's `@latest` as it is, unless it names a revoked version;
 * then the newest version of the list not revoked.
 */
async function answerLatest(io: MetadataIO, module: string): Promise<void> {
  if (io.unendorsed === 'pass') {
    const origin = await io.fetch(`${escapeGo(module)}/@latest`, FETCH);
    const named = origin.status === 200 ? infoVersion(origin.body) : null;
    if (named === null || !zipRevoked(io, module, named)) return io.passThrough();
  }
  const list = await io.fetch(`${escapeGo(module)}/@v/list`, FETCH);
  if (list.status === 200) {
    // The pick is made once per list body and chain state, then its .info fetched.
    const best = io.remember(list, 'go latest', (view) => {
      const lines = offeredList(view, module, list.body);
      return { value: Array.isArray(lines) ? latestOf(lines.map((l) => l.version)) : lines, bytes: 256 };
    });
    if (best !== null && typeof best === 'object') return io.fail(best.status, best.ok ? '' : best.message);
    // The pick's completeness proof: the unit's proof of the state the pick was made from (docs/spec/index.md 11).
    const unit = goUnitName(module);
    if (best !== null) return sendInfo(io, module, best, unit.ok ? (io.listingHeaders?.(unit.value) ?? {}) : {});
  }
  const r = await io.fetch(`${escapeGo(module)}/@latest`, FETCH);
  if (r.status === 200) {
    const version = infoVersion(r.body);
    if (version === null || !versionFitsPath(module, version)) return io.fail(502, `vouch: the origin's @latest for ${module} is not valid`);
    if (zipEndorsed(io, module, version)) return io.send(200, JSON_TYPE, r.body);
    if (zipRevoked(io, module, version))
      return io.fail(404, `vouch: no version of ${module} is offered: the origin's @latest, ${version}, is revoked by the authority, refused`);
  } else if (list.status !== 200) {
    return originRefused(io, r, `module ${module}`); // neither a list nor a latest version: the origin does not know it
  }
  io.fail(404, `vouch: no version of ${module} is endorsed by the authority, refused`);
}

export const goproxy: EcosystemHandler = {
  kind: 'goproxy',
  artifactTarget: (tail) => {
    const q = tail.indexOf('?');
    const path = q === -1 ? tail : tail.slice(0, q);
    return path.includes('%21') ? path.replace(/%21/g, '!') + (q === -1 ? '' : tail.slice(q)) : null;
  },
  classify(rest: string, query: string): Classified {
    if (query !== '') return { type: 'other' }; // the protocol has no queries
    const r = parseGoproxyPath(rest);
    if (r === null) return { type: 'other' };
    switch (r.what) {
      case 'zip':
        return { type: 'artifact' };
      case 'list':
        return { type: 'metadata', answer: (io) => answerList(io, r.module) };
      case 'latest':
        return { type: 'metadata', answer: (io) => answerLatest(io, r.module) };
      case 'info':
      case 'mod': {
        const { what, module, version } = r;
        if (!r.canonical) return { type: 'metadata', answer: (io) => answerQuery(io, module, version) };
        return { type: 'metadata', answer: (io) => answerInfoOrMod(io, what, module, version) };
      }
    }
  },
  errorBody: (message) => ({ contentType: TEXT, body: `${message.replace(/[\r\n]+/g, ' ')}\n` }),
};
