/**
 * The npm route (`kind: npm`): the gateway as npm's registry. A packument is
 * fetched (full or abbreviated form, cached apart), parsed strictly and
 * rewritten in one pass: a version is kept when an endorsement in force
 * names exactly its tarball URL and semver; pass routes keep unendorsed
 * versions marked `deprecated`; revoked ones go on every route; kept
 * tarballs point at the gateway, a sha512 signed hash becomes
 * `dist.integrity`. Capped by PACKUMENT_CAPS and MAX_VERSIONS.
 * Owns: npm name syntax, path classes, the packument rewrite, npm's error
 * body. Trusts: `MetadataIO`; nothing of the origin's packument.
 * Must hold: a deny route offers no version without an endorsement in force
 * for its exact semver, and never another package's tarball; every tarball
 * link points at the gateway.
 */
import { SemVer } from 'semver';
import { isSemver } from '../../chain/block.ts';
import { npmUnitName } from '../../chain/unit-names.ts';
import type { Selection } from '../../chain/select.ts';
import { checkJsonShape, JsonShapeError, type JsonCaps } from '../../artifacts/json-shape.ts';
import type { Classified, EcosystemHandler, MetadataIO, PackumentJob, Rendered, RenderView } from './ecosystem.ts';

/** npm's limit on a package name (scope included). */
export const MAX_NAME_LENGTH = 214;
/** What npm asks for when it installs (the abbreviated packument), sent upstream for that form. */
export const ABBREVIATED_TYPE = 'application/vnd.npm.install-v1+json';
const ABBREVIATED_ACCEPT = `${ABBREVIATED_TYPE}; q=1.0, application/json; q=0.8, */*`;
const FULL_ACCEPT = 'application/json';
/**
 * Caps on a packument's structure, checked before it is parsed. The public
 * registry's largest full packuments hold a few hundred thousand values,
 * nest under 20 deep and keep readmes far below 4 MiB.
 */
export const PACKUMENT_CAPS: JsonCaps = { maxValues: 2_000_000, maxDepth: 64, maxString: 4 * 1024 * 1024 };
/** Most versions a packument may list. */
export const MAX_VERSIONS = 50_000;
/** The `deprecated` text of an unendorsed version kept on a pass route. */
export const PASS_MARK = 'vouch: not endorsed by the authority; installed unverified (route policy pass)';

/** One part of a name (the scope or the package): URL-safe, not starting with `.` or `_`; capitals allowed (older packages have them). */
const PART = '[A-Za-z0-9~-][A-Za-z0-9._~-]*';
const UNSCOPED = new RegExp(`^${PART}$`);
const SCOPED = new RegExp(`^@(${PART})(?:/|%2[fF])(${PART})$`);
const TARBALL = new RegExp(`^((?:@${PART}/)?${PART})/-/[A-Za-z0-9._~+-]*[A-Za-z0-9]\\.tgz$`);
const SCOPED_ENCODED = /^@([^/%]+)%2f([^/%]+)$/i;
const RESERVED = new Set(['node_modules', 'favicon.ico']);
/**
 * Whether `v` is a version as the semver library writes it (what it parses
 * and prints back the same): SemVer 2.0.0 as the chain takes it (`isSemver`:
 * no `v` or `=` prefix, at most 256 characters), each of major, minor and
 * patch at most `Number.MAX_SAFE_INTEGER`.
 */
export function isCanonicalSemver(v: string): boolean {
  if (!isSemver(v)) return false;
  return v
    .split(/[-+]/, 1)[0]!
    .split('.')
    .every((n) => Number(n) <= Number.MAX_SAFE_INTEGER);
}

/** The tail (after its route's base) of the tarball of `name`@`version`: `<name>/-/<basename>-<version>.tgz`. */
export function tarballTail(name: string, version: string): string {
  return `${name}/-/${name.slice(name.indexOf('/') + 1)}-${version}.tgz`;
}

/** A package name as npm spells it (`@scope/name`) and as it is asked for upstream (`@scope%2fname`). */
export interface PackageName {
  name: string;
  upstream: string;
}

function nameOk(name: string, part: string): boolean {
  return name.length <= MAX_NAME_LENGTH && !RESERVED.has(part.toLowerCase());
}

/** The package whose packument `rest` asks for, or null when `rest` is not a packument path. */
export function packumentName(rest: string): PackageName | null {
  if (UNSCOPED.test(rest)) return nameOk(rest, rest) ? { name: rest, upstream: rest } : null;
  const m = SCOPED.exec(rest);
  if (m === null) return null;
  const name = `@${m[1]}/${m[2]}`;
  return nameOk(name, m[2]!) ? { name, upstream: `@${m[1]}%2f${m[2]}` } : null;
}

/** Whether `rest` is a tarball path (`<name>/-/<file>.tgz`, the name scoped or not). */
export function isTarballPath(rest: string): boolean {
  const m = TARBALL.exec(rest);
  if (m === null) return false;
  const name = m[1]!;
  return nameOk(name, name.slice(name.indexOf('/') + 1));
}

/** Whether an Accept header asks for the abbreviated packument (listed with a q above 0). */
export function wantsAbbreviated(accept: string | undefined): boolean {
  if (accept === undefined) return false;
  for (const range of accept.split(',')) {
    const [type, ...params] = range.split(';');
    if (type!.trim().toLowerCase() !== ABBREVIATED_TYPE) continue;
    const q = params.map((p) => p.trim()).find((p) => /^q=/i.test(p));
    return q === undefined || Number(q.slice(2)) > 0;
  }
  return false;
}

/** The content type answered: the origin's when it is a JSON type npm reads, else application/json. */
function answerType(origin: string | undefined, abbreviated: boolean): string {
  const t = origin?.split(';')[0]?.trim().toLowerCase();
  if (t === 'application/json' || (abbreviated && t === ABBREVIATED_TYPE)) return origin!;
  return 'application/json';
}

/** The packument is not one npm could use: answered 502 with this reason. */
export class BadPackument extends Error {}

/** What a rewrite needs from the request (a subset of MetadataIO, so tests can drive it alone). */
export type RewriteIO = Pick<MetadataIO, 'unendorsed' | 'artifactUrlOf' | 'artifactTailOf' | 'endorsed' | 'revoked' | 'gatewayUrlOf'>;

export interface RewriteResult {
  /** Versions offered (endorsed, or marked on a pass route). */
  kept: number;
  /** Of those, marked unendorsed (pass routes). */
  marked: number;
  /** Versions removed: not endorsed (or for another semver or package) on a deny route; revoked, on any route. */
  unendorsed: number;
  /** Versions removed: their tarball is under no route. */
  unrouted: number;
  /** Versions removed: their tarball is an endorsed one of another package or version (any route). */
  misnamed: number;
  /** One such tarball URL (for the log), or null. */
  misnamedExample: string | null;
  /** Versions removed: not a usable entry (not an object, no dist.tarball, version not the key, not semver). */
  malformed: number;
  /** One tarball URL no route serves (for the log), or null. */
  unroutedExample: string | null;
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `sha512-<base64>` of a signed `sha512:<hex>` hash, or null for another algorithm. */
export function integrityOf(artifactHash: string): string | null {
  const m = /^sha512:([0-9a-f]{128})$/.exec(artifactHash);
  return m === null ? null : `sha512-${Buffer.from(m[1]!, 'hex').toString('base64')}`;
}

/**
 * Rewrites a parsed packument (full or abbreviated) of `name` in place for
 * this request: see the header. One pass over the versions; per version one
 * map, one index lookup, one gateway URL.
 * @throws BadPackument when the document is not a packument of `name`.
 */
export function rewritePackument(doc: unknown, name: string, io: RewriteIO): RewriteResult {
  if (!isObject(doc)) throw new BadPackument('the packument is not a JSON object');
  if (doc.name !== undefined && doc.name !== name)
    throw new BadPackument(`the registry answered the packument of another package (${JSON.stringify(doc.name).slice(0, 100)})`);
  if (doc.versions !== undefined && !isObject(doc.versions)) throw new BadPackument('"versions" is not an object');
  if (doc['dist-tags'] !== undefined && !isObject(doc['dist-tags'])) throw new BadPackument('"dist-tags" is not an object');
  if (doc.time !== undefined && !isObject(doc.time)) throw new BadPackument('"time" is not an object');
  const versions = (doc.versions ?? {}) as Json;
  const r: RewriteResult = { kept: 0, marked: 0, unendorsed: 0, unrouted: 0, misnamed: 0, malformed: 0, unroutedExample: null, misnamedExample: null };
  const keptVersions = new Set<string>();
  const removed: string[] = [];
  const listed = Object.keys(versions);
  if (listed.length > MAX_VERSIONS) throw new BadPackument(`more than ${MAX_VERSIONS} versions`);
  for (const version of listed) {
    const v = versions[version];
    const dist = isObject(v) ? v.dist : undefined;
    if (!isObject(v) || v.version !== version || !isCanonicalSemver(version) || !isObject(dist) || typeof dist.tarball !== 'string') {
      r.malformed++;
      removed.push(version);
      continue;
    }
    const artifactUrl = io.artifactUrlOf(dist.tarball);
    const gatewayUrl = artifactUrl === null ? null : io.gatewayUrlOf(artifactUrl);
    if (artifactUrl === null || gatewayUrl === null) {
      r.unrouted++;
      r.unroutedExample ??= dist.tarball;
      removed.push(version);
      continue;
    }
    const sel: Selection | null = io.endorsed(artifactUrl);
    const named = io.artifactTailOf(artifactUrl) === tarballTail(name, version);
    if (sel !== null && !named) {
      // Another package's (or version's) endorsed tarball listed under this name: never offered.
      r.misnamed++;
      r.misnamedExample ??= dist.tarball;
      removed.push(version);
      continue;
    }
    const endorsed = sel !== null && sel.entry.semver === version;
    if (!endorsed) {
      // Revoked (its tarball answers 410): removed on a pass route too, so `latest` never names it.
      if (io.unendorsed === 'deny' || io.revoked?.(artifactUrl) === true) {
        r.unendorsed++;
        removed.push(version);
        continue;
      }
      v.deprecated = PASS_MARK;
      r.marked++;
    } else {
      const integrity = integrityOf(sel.entry.artifact_hash);
      if (integrity !== null && dist.integrity !== integrity) {
        dist.integrity = integrity;
        delete dist.shasum; // of the origin's bytes, which may not be the signed ones
        delete dist.signatures; // the registry's signatures cover its integrity, not this one
        delete dist['npm-signature'];
      }
    }
    dist.tarball = gatewayUrl;
    keptVersions.add(version);
    r.kept++;
  }
  for (const version of removed) delete versions[version];
  if (isObject(doc.time)) for (const version of removed) delete doc.time[version];
  const tags = (doc['dist-tags'] ?? {}) as Json;
  for (const tag of Object.keys(tags)) {
    const to = tags[tag];
    if (typeof to !== 'string' || !keptVersions.has(to)) delete tags[tag];
  }
  if (tags.latest === undefined && keptVersions.size > 0) tags.latest = latestOf(keptVersions);
  if (doc['dist-tags'] !== undefined || tags.latest !== undefined) doc['dist-tags'] = tags;
  return r;
}

/** The highest version that is not a prerelease, else the highest (as written: build metadata kept). */
function latestOf(versions: Iterable<string>): string {
  let release: { v: string; s: SemVer } | null = null;
  let any: { v: string; s: SemVer } | null = null;
  for (const v of versions) {
    const s = new SemVer(v);
    if (any === null || s.compare(any.s) > 0) any = { v, s };
    if (s.prerelease.length === 0 && (release === null || s.compare(release.s) > 0)) release = { v, s };
  }
  return (release ?? any)!.v;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The origin's packument read under the caps (decoded, bounded in
 * structure, parsed); a refusal (502 with the reason, logged at warn) when
 * npm could not use it. Chain-independent: the part that may run off the
 * event loop.
 */
export function preparePackument(body: Uint8Array, job: PackumentJob, log: RenderView['log']): { doc: unknown } | Rendered {
  try {
    let text: string;
    try {
      text = utf8.decode(body);
    } catch {
      throw new BadPackument('not UTF-8');
    }
    try {
      checkJsonShape(text, PACKUMENT_CAPS);
    } catch (e) {
      if (e instanceof JsonShapeError) throw new BadPackument(e.message);
      throw e;
    }
    try {
      return { doc: JSON.parse(text) };
    } catch (e) {
      throw new BadPackument(`not JSON (${(e as Error).message.slice(0, 120)})`);
    }
  } catch (e) {
    if (!(e instanceof BadPackument)) throw e;
    return refusePackument(job, e, log);
  }
}

function refusePackument(job: PackumentJob, e: BadPackument, log: RenderView['log']): Rendered {
  log.warn('npm: unusable packument from the registry', { package: job.name, error: e.message });
  return { ok: false, status: 502, message: `vouch: the registry's packument of ${job.name} is unusable: ${e.message}` };
}

/** The tarball URLs a parsed packument lists (what its rewrite asks the chain about). */
export function tarballsOf(doc: unknown): string[] {
  const out: string[] = [];
  const versions = isObject(doc) && isObject(doc.versions) ? doc.versions : {};
  for (const v of Object.values(versions)) {
    if (isObject(v) && isObject(v.dist) && typeof v.dist.tarball === 'string') out.push(v.dist.tarball);
  }
  return out;
}

/** The answer from a parsed packument: rewritten against the chain (`io`), written back. */
export function finishPackument(doc: unknown, job: PackumentJob, io: RenderView): Rendered {
  let result: RewriteResult;
  try {
    result = rewritePackument(doc, job.name, io);
  } catch (e) {
    if (!(e instanceof BadPackument)) throw e;
    return refusePackument(job, e, io.log);
  }
  if (result.unrouted > 0) {
    io.log.warn('npm: removed versions whose tarball no route serves', { package: job.name, versions: result.unrouted, example: result.unroutedExample });
  }
  if (result.misnamed > 0) {
    io.log.warn('npm: removed versions listing an endorsed tarball of another package or version', {
      package: job.name,
      versions: result.misnamed,
      example: result.misnamedExample,
    });
  }
  io.log.debug('npm: packument rewritten', {
    package: job.name,
    form: job.abbreviated ? 'abbreviated' : 'full',
    kept: result.kept,
    marked: result.marked,
    unendorsed: result.unendorsed,
    malformed: result.malformed,
  });
  if (result.kept === 0 && io.unendorsed === 'deny') return { ok: false, status: 404, message: `vouch: no endorsed version of ${job.name}` };
  const unit = npmUnitName(job.name);
  return {
    ok: true,
    status: 200,
    contentType: answerType(job.contentType, job.abbreviated),
    body: JSON.stringify(doc),
    headers: { vary: 'accept' },
    ...(unit.ok ? { unit: unit.value } : {}),
  };
}

/** The packument answer made from the origin's body on this thread: `preparePackument` then `finishPackument`. */
export function renderPackument(body: Uint8Array, job: PackumentJob, io: RenderView): Rendered {
  const p = preparePackument(body, job, io.log);
  return 'ok' in p ? p : finishPackument(p.doc, job, io);
}

/** Answers a packument request: the origin's packument (cached), rewritten for the chain as it is (made once, see `renderPackument`). */
async function answerPackument(io: MetadataIO, pkg: PackageName): Promise<void> {
  const abbreviated = wantsAbbreviated(io.req.headers.accept);
  const form = abbreviated ? 'abbreviated' : 'full';
  const up = await io.fetch(pkg.upstream, { accept: abbreviated ? ABBREVIATED_ACCEPT : FULL_ACCEPT, form });
  if (up.status === 404 || up.status === 410) {
    return io.fail(404, `vouch: ${pkg.name} is not in the registry (it answered ${up.status})`);
  }
  if (up.status !== 200) return io.fail(502, `vouch: the registry answered ${up.status} for the packument of ${pkg.name}`);
  await io.answerJob(up, `npm ${form}`, { kind: 'npm', contentType: up.headers['content-type'], name: pkg.name, abbreviated });
}

export const npm: EcosystemHandler = {
  kind: 'npm',
  checkedPath(rest: string): string | null {
    const m = SCOPED_ENCODED.exec(rest);
    return m === null ? null : `@${m[1]}/${m[2]}`;
  },
  classify(rest: string): Classified {
    const pkg = packumentName(rest);
    if (pkg !== null) return { type: 'metadata', answer: (io) => answerPackument(io, pkg) };
    if (isTarballPath(rest)) return { type: 'artifact' };
    return { type: 'other' };
  },
  errorBody: (message) => ({ contentType: 'application/json', body: JSON.stringify({ error: message }) }),
};
