/**
 * The versions a listing shows, in the chain's spelling (docs/spec/index.md
 * 11): an npm packument's `versions` keys (those carrying the pass route's
 * `deprecated` mark are shown as unendorsed), a PyPI simple page's files
 * (HTML or JSON) by the version in their file names through
 * `pep440ToSemver`, a Go `@v/list`'s lines (or `@latest`'s version) without the `v`.
 * Owns: `shownVersions` and the unit a package's listing is proved under.
 * Trusts: nothing of the body (bounded by the parsers' caps).
 * Must hold: an entry whose version cannot be mapped is reported (`unreadable`),
 * never dropped silently; a body that is not a listing is a `ListingError`.
 */
import type { ShownVersion } from '../chain/index-listing.ts';
import { goSemver, goUnitName, npmUnitName, pep440ToSemver, pypiUnitName, type Mapped } from '../chain/unit-names.ts';
import { checkJsonShape, JsonShapeError } from '../artifacts/json-shape.ts';
import { PageError, parseHtmlPage, parseJsonPage, versionOfFile } from '../artifacts/pypi-simple.ts';
import { PACKUMENT_CAPS, PASS_MARK } from '../gateway/ecosystems/npm.ts';
import { infoVersion, ListTooLong, parseVersionList } from '../gateway/ecosystems/goproxy.ts';

export type Ecosystem = 'npm' | 'pypi' | 'go';

/** A body that is not a listing of the kind asked. */
export class ListingError extends Error {}

/** The unit whose index proof covers the listing of `pkg` (chain/unit-names.ts). */
export function listingUnit(eco: Ecosystem, pkg: string): Mapped {
  return eco === 'npm' ? npmUnitName(pkg) : eco === 'pypi' ? pypiUnitName(pkg) : goUnitName(pkg);
}

export interface ShownListing {
  shown: ShownVersion[];
  /** Entries whose version has no chain spelling (listed as written). */
  unreadable: string[];
  /** Go `@latest`: the version it names (then `shown` is that one version). */
  latest?: string;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function text(body: Uint8Array): string {
  try {
    return utf8.decode(body);
  } catch {
    throw new ListingError('the listing is not UTF-8');
  }
}

/**
 * The versions `body` (a listing of `pkg`) shows. `contentType` picks the
 * PyPI form (a body starting with `{` is read as JSON when it is absent).
 * @throws ListingError
 */
export function shownVersions(eco: Ecosystem, pkg: string, body: Uint8Array, contentType: string | null): ShownListing {
  const out: ShownListing = { shown: [], unreadable: [] };
  const add = (written: string, m: Mapped, endorsed: boolean) => {
    if (m.ok) out.shown.push({ semver: m.value, endorsed });
    else out.unreadable.push(written);
  };
  const t = text(body);
  if (eco === 'npm') {
    let doc: unknown;
    try {
      checkJsonShape(t, PACKUMENT_CAPS);
      doc = JSON.parse(t);
    } catch (e) {
      if (e instanceof JsonShapeError || e instanceof SyntaxError)
        throw new ListingError(`the packument is not JSON within the caps: ${e.message.slice(0, 200)}`);
      throw e;
    }
    if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new ListingError('the packument is not a JSON object');
    const d = doc as Record<string, unknown>;
    if (d.name !== undefined && d.name !== pkg) throw new ListingError(`the packument is of ${JSON.stringify(String(d.name).slice(0, 200))}, not ${pkg}`);
    const versions = d.versions ?? {};
    if (typeof versions !== 'object' || versions === null || Array.isArray(versions)) throw new ListingError('"versions" is not an object');
    for (const [v, entry] of Object.entries(versions as Record<string, unknown>)) {
      const marked = typeof entry === 'object' && entry !== null && (entry as Record<string, unknown>).deprecated === PASS_MARK;
      add(v, v === '' ? { ok: false, reason: 'empty' } : { ok: true, value: v }, !marked);
    }
    return out;
  }
  if (eco === 'pypi') {
    const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
    const json = type === '' ? t.trimStart().startsWith('{') : type.endsWith('+json') || type === 'application/json';
    let files: { href: string; filename: string }[];
    try {
      // The page URL only resolves relative links; nothing is fetched.
      files = (json ? parseJsonPage(t, 'https://listing.invalid/') : parseHtmlPage(t, 'https://listing.invalid/', pkg)).files;
    } catch (e) {
      if (e instanceof PageError || e instanceof JsonShapeError) throw new ListingError(`not a simple repository page: ${e.message.slice(0, 200)}`);
      throw e;
    }
    const seen = new Set<string>();
    for (const f of files) {
      let name = f.filename;
      if (name === '') {
        try {
          name = decodeURIComponent(new URL(f.href, 'https://listing.invalid/').pathname.split('/').pop() ?? '');
        } catch {
          name = f.href;
        }
      }
      const v = versionOfFile(name, pkg);
      const m: Mapped = v === null ? { ok: false, reason: 'no version' } : pep440ToSemver(v);
      const key = m.ok ? m.value : name;
      if (seen.has(key)) continue;
      seen.add(key);
      add(name, m, true);
    }
    return out;
  }
  // Go `@latest`: a JSON `.info` naming one version (docs/spec/index.md 11: it must be the latest live one).
  if (t.trimStart().startsWith('{')) {
    const v = infoVersion(Buffer.from(body));
    if (v === null) throw new ListingError('not a Go version list or @latest answer');
    out.latest = v;
    add(v, goSemver(v), true);
    return out;
  }
  try {
    for (const l of parseVersionList(t, pkg)) add(l.version, goSemver(l.version), true);
  } catch (e) {
    if (e instanceof ListTooLong) throw new ListingError(e.message);
    throw e;
  }
  return out;
}
