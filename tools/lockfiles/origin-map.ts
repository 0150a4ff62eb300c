/**
 * The `--origin CANONICAL=FETCH` mapping of `vouch endorse --lockfile`, and
 * the URL checks the lockfile readers share, apart from the HTTP client
 * (http.ts, which loads undici): a run through a gateway reads the lockfile
 * without loading it.
 *
 * Trusts: nothing it is given. Must hold: a canonical prefix never carries
 * credentials; the longest matching prefix wins.
 */
import { VouchError } from '../../chain/errors.ts';
import { isArtifactUrl } from '../../chain/block.ts';

export const MiB = 1024 * 1024;

/** A URL with a user name or password in it (never endorsed: the chain is public). */
export function hasCredentials(url: string): boolean {
  try {
    const u = new URL(url);
    return u.username !== '' || u.password !== '';
  } catch {
    return false;
  }
}

/** `--origin CANONICAL=FETCH` pairs; the longest matching canonical prefix wins. */
export class OriginMap {
  private readonly pairs: { canonical: string; fetch: string }[] = [];

  /**
   * Parses the option values. Both sides must be absolute http(s) URLs; a
   * missing final `/` is added, so a prefix is always whole path segments.
   * @throws VouchError `usage`.
   */
  static parse(values: readonly string[]): OriginMap {
    const map = new OriginMap();
    for (const value of values) {
      const cut = value.search(/=https?:\/\//i);
      if (cut <= 0) throw new VouchError('usage', `--origin must be CANONICAL=FETCH (two http(s) URL prefixes), got ${JSON.stringify(value.slice(0, 200))}`);
      const slash = (s: string) => (s.endsWith('/') ? s : s + '/');
      const canonical = slash(value.slice(0, cut));
      const fetch = slash(value.slice(cut + 1));
      for (const u of [canonical, fetch]) {
        if (!isArtifactUrl(u) || /[?#]/.test(u))
          throw new VouchError('usage', `--origin: ${JSON.stringify(u.slice(0, 200))} is not an absolute http(s) URL prefix without query or fragment`);
      }
      if (hasCredentials(canonical)) throw new VouchError('usage', '--origin: the canonical prefix may not carry a user name or password');
      if (map.pairs.some((p) => p.canonical === canonical)) throw new VouchError('usage', `--origin: ${canonical} is mapped twice`);
      map.pairs.push({ canonical, fetch });
    }
    map.pairs.sort((a, b) => b.canonical.length - a.canonical.length);
    return map;
  }

  /** The URL to ask for `url`'s bytes. */
  fetchUrl(url: string): string {
    for (const p of this.pairs) if (url.startsWith(p.canonical)) return p.fetch + url.slice(p.canonical.length);
    return url;
  }

  /** The canonical form of a URL that was fetched (a redirect target on a mirror maps back). */
  canonicalUrl(fetched: string): string {
    for (const p of this.pairs) if (fetched.startsWith(p.fetch)) return p.canonical + fetched.slice(p.fetch.length);
    return fetched;
  }

  get size(): number {
    return this.pairs.length;
  }
}
