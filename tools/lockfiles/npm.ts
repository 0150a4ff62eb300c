/**
 * Reading npm's `package-lock.json` / `npm-shrinkwrap.json` (lockfile
 * versions 1, 2 and 3) into the artifacts to endorse.
 * Owns: which entries count: one with an http(s) `resolved` tarball and an
 * `integrity` is endorsed; links, workspaces, bundled entries and entries
 * without either are skipped and counted by reason; one tarball listed at
 * several paths is one artifact. The bytes must match the strongest SRI
 * algorithm (as npm's ssri); endorsed with it when vouch has it, else
 * sha256.
 * Must hold: nothing is fetched here; every entry returned has a unit name,
 * SemVer and checked licence, or the read fails naming the package.
 */
import { VouchError } from '../../chain/errors.ts';
import { isArtifactUrl } from '../../chain/block.ts';
import { npmSemver, npmUnitName } from '../../chain/unit-names.ts';
import { endorseAlgorithmFor, parseSri, sriOf, strongestSri, type DigestName } from './digests.ts';
import { hasCredentials } from './origin-map.ts';
import { checkLicense } from './licenses.ts';
import type { Options, Pinned, SkipCounts } from './types.ts';

export interface NpmLock {
  pinned: Pinned[];
  skipped: SkipCounts;
  /** The root package's name and version, when the lockfile has them. */
  root: { name?: string; version?: string };
  lockfileVersion: number;
}

interface RawEntry {
  /** Where in the lockfile, for messages. */
  where: string;
  name: string;
  version: unknown;
  resolved: unknown;
  integrity: unknown;
  license: unknown;
  link: boolean;
  bundled: boolean;
  workspace: boolean;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
function bad(msg: string): never {
  throw new VouchError('bad_request', msg);
}

/** The package name a `packages` key installs: the part after the last `node_modules/`. */
function nameFromPath(path: string): string | null {
  const i = path.lastIndexOf('node_modules/');
  return i < 0 ? null : path.slice(i + 'node_modules/'.length);
}

function fromPackages(packages: Obj): RawEntry[] {
  const out: RawEntry[] = [];
  for (const [path, e] of Object.entries(packages)) {
    if (path === '') continue; // the project itself
    if (!isObj(e)) bad(`package-lock: packages[${JSON.stringify(path)}] is not an object`);
    const pathName = nameFromPath(path);
    const name = typeof e.name === 'string' ? e.name : (pathName ?? path);
    out.push({
      where: `packages[${JSON.stringify(path)}]`,
      name,
      version: e.version,
      resolved: e.resolved,
      integrity: e.integrity,
      license: e.license,
      link: e.link === true,
      bundled: e.inBundle === true,
      workspace: pathName === null,
    });
  }
  return out;
}

function fromDependencies(deps: Obj): RawEntry[] {
  const out: RawEntry[] = [];
  // Iteratively: a deep tree must not overflow the stack.
  const stack: { deps: Obj; where: string }[] = [{ deps, where: 'dependencies' }];
  while (stack.length) {
    const { deps: level, where } = stack.pop()!;
    for (const [key, e] of Object.entries(level)) {
      const here = `${where}[${JSON.stringify(key)}]`;
      if (!isObj(e)) bad(`package-lock: ${here} is not an object`);
      let name = key;
      let version: unknown = e.version;
      // An alias: "alias": { "version": "npm:real@1.2.3" }.
      if (typeof version === 'string' && version.startsWith('npm:')) {
        const spec = version.slice(4);
        const at = spec.lastIndexOf('@');
        if (at > 0) {
          name = spec.slice(0, at);
          version = spec.slice(at + 1);
        }
      }
      out.push({
        where: here,
        name,
        version,
        resolved: e.resolved,
        integrity: e.integrity,
        license: e.license,
        link: typeof e.version === 'string' && e.version.startsWith('file:') && e.resolved === undefined,
        bundled: e.bundled === true,
        workspace: false,
      });
      if (e.dependencies !== undefined) {
        if (!isObj(e.dependencies)) bad(`package-lock: ${here}.dependencies is not an object`);
        stack.push({ deps: e.dependencies, where: `${here}.dependencies` });
      }
    }
  }
  return out;
}

/** The licence string of a lockfile entry: a string, or the `type` of a legacy `{type, url}` object. */
function licenseOf(raw: unknown): string | undefined {
  if (typeof raw === 'string') return raw;
  if (isObj(raw) && typeof raw.type === 'string') return raw.type;
  return undefined;
}

/**
 * Parses a package-lock's text.
 * @throws VouchError `bad_request` naming the entry or package.
 */
export function readNpmLock(text: string, options: Options, fileName: string): NpmLock {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    return bad(`${fileName} is not JSON (${(e as Error).message.split('\n')[0]})`);
  }
  if (!isObj(doc)) return bad(`${fileName} is not a JSON object`);
  const lockfileVersion = doc.lockfileVersion;
  if (lockfileVersion !== 1 && lockfileVersion !== 2 && lockfileVersion !== 3) {
    return bad(`${fileName}: lockfileVersion ${JSON.stringify(lockfileVersion)} is not 1, 2 or 3`);
  }
  let raw: RawEntry[];
  let root: NpmLock['root'] = {};
  if (lockfileVersion >= 2 && doc.packages !== undefined) {
    if (!isObj(doc.packages)) return bad(`${fileName}: packages is not an object`);
    raw = fromPackages(doc.packages);
    const r = doc.packages[''];
    if (isObj(r)) root = { ...(typeof r.name === 'string' ? { name: r.name } : {}), ...(typeof r.version === 'string' ? { version: r.version } : {}) };
  } else {
    if (lockfileVersion === 3) return bad(`${fileName}: lockfileVersion 3 without packages`);
    raw =
      doc.dependencies === undefined ? [] : isObj(doc.dependencies) ? fromDependencies(doc.dependencies) : bad(`${fileName}: dependencies is not an object`);
  }
  if (root.name === undefined && typeof doc.name === 'string') root.name = doc.name;
  if (root.version === undefined && typeof doc.version === 'string') root.version = doc.version;

  const skipped: SkipCounts = {};
  const skip = (reason: string) => {
    skipped[reason] = (skipped[reason] ?? 0) + 1;
  };
  const byUrl = new Map<string, { pinned: Pinned; integrity: string }>();
  const pinned: Pinned[] = [];
  for (const e of raw) {
    if (e.link) {
      skip('link');
      continue;
    }
    if (e.workspace) {
      skip('workspace');
      continue;
    }
    if (e.bundled) {
      skip('bundled');
      continue;
    }
    if (e.resolved === undefined) {
      skip('no resolved');
      continue;
    }
    if (typeof e.resolved !== 'string') return bad(`${fileName}: ${e.where}.resolved is not a string`);
    if (!/^https?:\/\//i.test(e.resolved)) {
      skip('not http(s)');
      continue;
    }
    if (e.integrity === undefined) {
      skip('no integrity');
      continue;
    }
    if (typeof e.integrity !== 'string') return bad(`${fileName}: ${e.where}.integrity is not a string`);
    if (typeof e.version !== 'string') return bad(`${fileName}: ${e.where} has no version`);
    const label = `${e.name}@${e.version}`;
    if (!isArtifactUrl(e.resolved))
      return bad(`${label}: resolved ${JSON.stringify(e.resolved.slice(0, 200))} is not an absolute http(s) URL vouch can endorse`);
    if (hasCredentials(e.resolved)) return bad(`${label}: the resolved URL carries a user name or password: refusing to publish it in the chain`);
    const parsed = parseSri(e.integrity);
    if (!parsed.ok) return bad(`${label}: integrity ${JSON.stringify(e.integrity.slice(0, 200))}${e.integrity.length > 200 ? '...' : ''} ${parsed.reason}`);
    const sri = parsed.hashes;

    const earlier = byUrl.get(e.resolved);
    if (earlier) {
      if (earlier.integrity !== e.integrity)
        return bad(`${label}: ${e.resolved} is listed twice with different integrity (${earlier.pinned.label}: ${earlier.integrity})`);
      continue; // the same tarball at another path
    }
    const name = npmUnitName(e.name);
    if (!name.ok) return bad(`${label}: ${name.reason}`);
    const semver = npmSemver(e.version);
    if (!semver.ok) return bad(`${label}: ${semver.reason}`);
    const own = licenseOf(e.license);
    if (own === undefined && options.license === undefined) return bad(`${label} names no licence in ${fileName}: pass --license for such entries`);
    const license = checkLicense((own ?? options.license)!, options.licenseUnchecked, own !== undefined ? { entry: label } : { option: '--license' });

    const strongest = strongestSri(sri);
    const algorithm = strongest[0]!.algorithm;
    const want: Partial<Record<DigestName, string[]>> = { [algorithm]: strongest.map((h) => h.hex) };
    const url = e.resolved;
    const p: Pinned = {
      label,
      url,
      name: name.value,
      semver: semver.value,
      license,
      comment: options.comment ?? `npm ${label}`,
      endorseAlgorithm: endorseAlgorithmFor(algorithm),
      check: {
        kind: 'digest',
        want,
        strict: true,
        mismatch: (got) =>
          `integrity mismatch: ${label} (${url}): lockfile ${strongest.map((h) => sriOf(algorithm, h.hex)).join(' ')}, fetched ${sriOf(algorithm, got.get(algorithm)!)}`,
      },
    };
    byUrl.set(url, { pinned: p, integrity: e.integrity });
    pinned.push(p);
  }
  return { pinned, skipped, root, lockfileVersion };
}
