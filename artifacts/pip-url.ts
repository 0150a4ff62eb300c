/**
 * A file link of a Python package index as pip takes it: the URL pip
 * requests (`_ensure_quoted_url`) and the file name pip reads from it
 * (`Link.filename`), after pip's src/pip/_internal/models/link.py.
 *
 * Owns: Python's `unquote` / `quote` as pip applies them. Pure (no I/O, no
 * imports); the gateway's pypi route and the lockfile endorser both name
 * files by it.
 * Must hold: the name is pip's, never the index's; both readings pip has
 * had (one percent-decoding since pip 26.2, two before) are given, so a
 * caller can refuse a link they disagree on.
 */

const QUOTE_SAFE = /^[A-Za-z0-9_.\-~/]$/;

/** Python's `unquote`: `%XX` escapes decoded as UTF-8 (invalid bytes -> U+FFFD), other characters kept. */
export function pyUnquote(s: string): string {
  if (!s.includes('%')) return s;
  const bytes: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x25 && /^[0-9A-Fa-f]{2}$/.test(s.slice(i + 1, i + 3))) {
      bytes.push(parseInt(s.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      for (const b of Buffer.from(s[i]!, 'utf8')) bytes.push(b);
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

/** Python's `quote(unquote(part))` (safe `/`). */
function pyRequote(part: string): string {
  let out = '';
  for (const b of Buffer.from(pyUnquote(part), 'utf8')) {
    const c = String.fromCharCode(b);
    out += QUOTE_SAFE.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** The URL as pip requests it (pip's `_ensure_quoted_url`: the path re-quoted part by part between `@` and `%2F`), without fragment. */
export function pipRequestUrl(url: string): string {
  const u = new URL(url);
  const path = u.pathname
    .split(/(@|%2F)/i)
    .map((p, i) => (i % 2 === 1 ? p.toUpperCase() : pyRequote(p)))
    .join('');
  return `${u.protocol}//${u.host}${path}${u.search}`;
}

/**
 * The file name pip reads from a link it requests at `url` (absolute):
 * the last segment of the percent-decoded path, trailing `/` dropped, no
 * query or fragment; the host when that is empty, `.` or `..`. `current`
 * is pip's since 26.2 (decoded once); `legacy` pip's before (decoded again).
 */
export function pipFileNames(url: string): { current: string; legacy: string } {
  const u = new URL(url);
  const path = pyUnquote(u.pathname).replace(/\/+$/, '');
  const base = path.slice(path.lastIndexOf('/') + 1);
  const current = base === '' || base === '.' || base === '..' ? u.host : base;
  const legacy = base === '' ? u.host : pyUnquote(base);
  return { current, legacy };
}
