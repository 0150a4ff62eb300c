/**
 * What a package of another ecosystem is called in the chain: npm `leftpad`
 * -> `npm/leftpad`, `@scope/name` stays, PyPI -> `pypi/<PEP 503 name>`, Go
 * `golang.org/x/mod` -> `go/golang.org+x+mod`; versions: npm as is, Go
 * without its `v`, PyPI through `pep440ToSemver`.
 * Owns: that mapping and nothing else. Pure: no I/O, no node imports (it
 * runs in a browser with the rest of chain/).
 * Must hold: every ok value satisfies `isUnitName` / `isSemver` of
 * chain/block.ts; anything else is refused with a reason, never rewritten;
 * the owners keep ecosystems apart; the PyPI mapping is injective on
 * versions PEP 440 does not call equal.
 */
import { isSemver, isUnitName } from './block.ts';

export type Mapped = { ok: true; value: string } | { ok: false; reason: string };

const ok = (value: string): Mapped => ({ ok: true, value });
const no = (reason: string): Mapped => ({ ok: false, reason });

/** Characters of the unit-name grammar (chain/block.ts) in the name part, and where each side may start. */
const NAME_PART = /^[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}$/;

function unit(owner: string, name: string, what: string): Mapped {
  const full = `${owner}/${name}`;
  if (!NAME_PART.test(name)) {
    return no(
      name.length > 128
        ? `${what}: unit name ${JSON.stringify(full.slice(0, 200))} has a name part longer than 128 characters`
        : `${what}: ${JSON.stringify(full)} is not a unit name (the part after the owner must start with a letter, digit or _ and hold only letters, digits and . _ + -)`,
    );
  }
  if (!isUnitName(full))
    return no(
      `${what}: ${JSON.stringify(full.slice(0, 200))} is not a unit name (owner and name each at most 128 characters of letters, digits and . _ + - @)`,
    );
  return ok(full);
}

// ---------------------------------------------------------------- names

/**
 * npm: `leftpad` -> `npm/leftpad`, `@scope/name` -> `@scope/name`.
 * Scope and name may not hold `/` or `@` (npm names are URL-safe).
 */
export function npmUnitName(pkg: string): Mapped {
  const what = `npm package ${JSON.stringify(pkg.slice(0, 200))}`;
  if (pkg.startsWith('@')) {
    const slash = pkg.indexOf('/');
    const scope = slash < 0 ? '' : pkg.slice(1, slash);
    const name = slash < 0 ? '' : pkg.slice(slash + 1);
    if (scope === '' || name === '' || /[/@]/.test(scope) || /[/@]/.test(name)) return no(`${what}: not @scope/name`);
    if (!/^[A-Za-z0-9_][A-Za-z0-9._-]*$/.test(scope))
      return no(`${what}: the scope must start with a letter, digit or _ and hold only letters, digits and . _ -`);
    if (scope.length + 1 > 128) return no(`${what}: the scope is longer than 127 characters`);
    return unit(`@${scope}`, name, what);
  }
  if (pkg === '' || /[/@]/.test(pkg)) return no(`${what}: not an npm package name`);
  return unit('npm', pkg, what);
}

/** PEP 503: runs of `-`, `_`, `.` become one `-`, lower case. */
export function pypiNormalizeName(name: string): string {
  return name.replace(/[-_.]+/g, '-').toLowerCase();
}

/** A PyPI project name (PEP 508: letters, digits, `-_.`, starting and ending with a letter or digit). */
export function isPypiName(name: string): boolean {
  return /^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$/.test(name);
}

/** PyPI: `pypi/<PEP 503 normalized name>`. */
export function pypiUnitName(project: string): Mapped {
  const what = `PyPI project ${JSON.stringify(project.slice(0, 200))}`;
  if (!isPypiName(project)) return no(`${what}: not a project name (letters, digits and - _ ., starting and ending with a letter or digit)`);
  return unit('pypi', pypiNormalizeName(project), what);
}

/**
 * A Go module path as the go command accepts it: elements of letters,
 * digits and `-._~`, separated by single slashes, none empty, `.` or `..`.
 */
export function isGoModulePath(path: string): boolean {
  if (path === '' || path.length > 1024) return false;
  for (const el of path.split('/')) {
    if (el === '' || el === '.' || el === '..' || !/^[A-Za-z0-9._~-]+$/.test(el)) return false;
  }
  return true;
}

/** Go: `go/<module path with every / replaced by +>`. */
export function goUnitName(modulePath: string): Mapped {
  const what = `Go module ${JSON.stringify(modulePath.slice(0, 200))}`;
  if (!isGoModulePath(modulePath)) return no(`${what}: not a module path`);
  if (modulePath.includes('~')) return no(`${what}: "~" cannot appear in a unit name`);
  return unit('go', modulePath.replace(/\//g, '+'), what);
}

// ---------------------------------------------------------------- versions

/** npm: the version as it is, when it is SemVer 2.0.0. */
export function npmSemver(version: string): Mapped {
  return isSemver(version) ? ok(version) : no(`npm version ${JSON.stringify(version.slice(0, 200))} is not SemVer 2.0.0`);
}

/** Go: `v1.2.3` -> `1.2.3`; pseudo-versions and `+incompatible` stay as they are after the `v`. */
export function goSemver(version: string): Mapped {
  const v = version.startsWith('v') ? version.slice(1) : '';
  return v !== '' && isSemver(v) ? ok(v) : no(`Go version ${JSON.stringify(version.slice(0, 200))} is not v<SemVer 2.0.0>`);
}

/** A parsed PEP 440 version; numbers as decimal strings without leading zeros. */
export interface Pep440 {
  epoch: string;
  /** Release segment, trailing zeros kept as written (`2.31.0` -> ['2','31','0']). */
  release: string[];
  pre: { label: 'a' | 'b' | 'rc'; n: string } | null;
  post: string | null;
  dev: string | null;
  /** Local segments, lower case, split on `.`/`-`/`_`; numeric ones without leading zeros. */
  local: string[] | null;
}

// PEP 440, appendix B (the regular expression of `packaging`).
const PEP440 = new RegExp(
  '^\\s*v?(?:(?:(?<epoch>[0-9]+)!)?(?<release>[0-9]+(?:\\.[0-9]+)*)' +
    '(?<pre>[-_.]?(?<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?<pre_n>[0-9]+)?)?' +
    '(?<post>(?:-(?<post_n1>[0-9]+))|(?:[-_.]?(?<post_l>post|rev|r)[-_.]?(?<post_n2>[0-9]+)?))?' +
    '(?<dev>[-_.]?(?<dev_l>dev)[-_.]?(?<dev_n>[0-9]+)?)?)' +
    '(?:\\+(?<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\\s*$',
  'i',
);

const num = (s: string | undefined): string => (s === undefined ? '0' : s.replace(/^0+(?=\d)/, ''));

/** Parses a PEP 440 version (any spelling PEP 440 normalizes), or null. */
export function parsePep440(version: string): Pep440 | null {
  if (version.length > 256) return null;
  const m = PEP440.exec(version);
  if (!m?.groups) return null;
  const g = m.groups;
  const preLabel = g.pre_l?.toLowerCase();
  return {
    epoch: num(g.epoch),
    release: g.release!.split('.').map((x) => num(x)),
    pre:
      preLabel === undefined
        ? null
        : {
            label: preLabel === 'alpha' || preLabel === 'a' ? 'a' : preLabel === 'beta' || preLabel === 'b' ? 'b' : 'rc',
            n: num(g.pre_n),
          },
    post: g.post === undefined ? null : num(g.post_n1 ?? g.post_n2),
    dev: g.dev === undefined ? null : num(g.dev_n),
    local:
      g.local === undefined
        ? null
        : g.local
            .toLowerCase()
            .split(/[-_.]/)
            .map((x) => (/^[0-9]+$/.test(x) ? num(x) : x)),
  };
}

function trimZeros(release: string[]): string[] {
  let n = release.length;
  while (n > 1 && release[n - 1] === '0') n--;
  return release.slice(0, n);
}

/** PEP 440 equality (`==`): release segments compared with trailing zeros dropped, local segments included. */
export function pep440Equal(a: Pep440, b: Pep440): boolean {
  const key = (v: Pep440) => JSON.stringify([v.epoch, trimZeros(v.release), v.pre, v.post, v.dev, v.local]);
  return key(a) === key(b);
}

/**
 * PyPI (PEP 440) -> SemVer 2.0.0:
 *
 * - release `X` -> `X.0.0`, `X.Y` -> `X.Y.0`, `X.Y.Z` as is; components after
 *   the third that are all zero are dropped (`1.2.3.0` -> `1.2.3`), others go
 *   to build metadata: `1.2.3.4` -> `1.2.3+rel.4`;
 * - pre-release `aN` / `bN` / `rcN` -> `-a.N` / `-b.N` / `-rc.N` (SemVer
 *   orders them as PEP 440 does);
 * - `.devN` of a release or pre-release -> `-dev.N` appended to the
 *   pre-release (`1.0.dev1` -> `1.0.0-dev.1`, `1.0a1.dev2` -> `1.0.0-a.1.dev.2`);
 * - `.postN` -> build `post.N` (`1.0.post1` -> `1.0.0+post.1`), a `.devN` of a
 *   post-release after it (`+post.1.dev.2`);
 * - local `+abc.5` -> build `local.abc.5`, last;
 * - an epoch other than 0 (`1!2.0`), or a version that is not PEP 440, is
 *   refused.
 *
 * Build metadata carries no SemVer precedence, but endorsements match
 * `semver` exactly, so distinct PyPI versions stay distinct.
 */
export function pep440ToSemver(version: string): Mapped {
  const what = `PyPI version ${JSON.stringify(version.slice(0, 200))}`;
  const v = parsePep440(version);
  if (v === null) return no(`${what} is not a PEP 440 version`);
  if (v.epoch !== '0') return no(`${what} has an epoch (${v.epoch}!): no SemVer mapping`);
  const rel = trimZeros(v.release);
  while (rel.length < 3) rel.push('0');
  const core = rel.slice(0, 3).join('.');
  const pre: string[] = [];
  const build: string[] = [];
  if (rel.length > 3) build.push('rel', ...rel.slice(3));
  if (v.pre) pre.push(v.pre.label, v.pre.n);
  if (v.post !== null) {
    build.push('post', v.post);
    if (v.dev !== null) build.push('dev', v.dev);
  } else if (v.dev !== null) {
    pre.push('dev', v.dev);
  }
  if (v.local) build.push('local', ...v.local);
  const s = core + (pre.length ? '-' + pre.join('.') : '') + (build.length ? '+' + build.join('.') : '');
  return isSemver(s) ? ok(s) : no(`${what} maps to ${JSON.stringify(s.slice(0, 200))}, which is not SemVer 2.0.0 (too long?)`);
}
