/**
 * Reading a page of a PyPI simple index (PEP 503 HTML, PEP 691 JSON) and the
 * version a file name carries, for the pypi route and `vouch endorse
 * --lockfile` for pip. Pure: the caller decodes the body and resolves links.
 * Owns: the page parsers and their shape (`IndexPage`): HTML with
 * htmlparser2 (the first `<base href>` honoured, anchor text kept), JSON
 * strictly; `#<alg>=<hex>` fragments; `versionOfFile`.
 * Trusts: nothing of the page: a bad shape throws a `PageError` naming it;
 * hashes are the index's word, never a verified one.
 * Bounded: MAX_PAGE_FILES, MAX_HREF, MAX_FILENAME, JSON_PAGE_CAPS.
 * Must hold: a page is read whole or refused with a reason; nothing here
 * fetches or resolves anything.
 */
import { Parser } from 'htmlparser2';
import { pypiNormalizeName } from '../chain/unit-names.ts';
import { checkJsonShape, JsonShapeError, type JsonCaps } from './json-shape.ts';

/** Most file links a page may hold (PyPI's largest projects list tens of thousands). */
export const MAX_PAGE_FILES = 100_000;
/** Longest link (href / url) accepted, in characters. */
export const MAX_HREF = 16 * 1024;
/** Longest file name (anchor text / JSON filename) accepted, in characters. */
export const MAX_FILENAME = 1024;
/** Caps on a PEP 691 page's structure, checked before it is parsed. */
export const JSON_PAGE_CAPS: JsonCaps = { maxValues: 2_500_000, maxDepth: 32, maxString: MAX_HREF };

/** One file link of an index page, as the index gave it. */
export interface IndexFile {
  /** The link as written (relative or absolute, fragment included). */
  href: string;
  /** The index's file name: JSON `filename`, or the HTML anchor's text (trimmed, possibly blank). */
  filename: string;
  /** The index's hashes (JSON `hashes`, or the HTML fragment `#<alg>=<hex>`), names and hex lower case. */
  hashes: Record<string, string>;
  requiresPython: string | null;
  /** false: not yanked; true or a reason: yanked. */
  yanked: boolean | string;
  /** PEP 700 (JSON only). */
  size: number | null;
  uploadTime: string | null;
}

export interface IndexPage {
  /** The project's name (JSON `name`; for HTML, the one the caller asked for). */
  name: string;
  /** `meta.api-version` (JSON); `1.0` for HTML. */
  apiVersion: string;
  /** The URL links are relative to (the page's URL, or its `<base href>`). */
  base: string;
  files: IndexFile[];
  /** PEP 700 `versions`, or null when the index sent none. */
  versions: string[] | null;
}

/** A page of the index we cannot read (the message names the problem). */
export class PageError extends Error {}

/** The hash an HTML link's fragment states (`#sha256=<hex>`), or none. */
export function fragmentHashes(href: string): Record<string, string> {
  const at = href.indexOf('#');
  if (at === -1) return {};
  const m = /^([A-Za-z0-9_]+)=([0-9A-Fa-f]+)$/.exec(href.slice(at + 1));
  return m === null ? {} : { [m[1]!.toLowerCase()]: m[2]!.toLowerCase() };
}

/**
 * A PEP 503 page, read with htmlparser2 (entities decoded, first `<base
 * href>` honoured as pip does). `name` is the project the page was asked for.
 * @throws PageError when the `<base href>` is not a URL.
 */
export function parseHtmlPage(html: string, pageUrl: string, name: string): IndexPage {
  const anchors: Array<{ attribs: Record<string, string>; text: string }> = [];
  let base: string | null = null;
  let current: { attribs: Record<string, string>; text: string } | null = null;
  const parser = new Parser(
    {
      onopentag(tag, attribs) {
        if (tag === 'base' && base === null && attribs.href !== undefined) base = attribs.href;
        else if (tag === 'a') {
          if (anchors.length >= MAX_PAGE_FILES) throw new PageError(`the page has more than ${MAX_PAGE_FILES} links`);
          if ((attribs.href?.length ?? 0) > MAX_HREF) throw new PageError(`a link is longer than ${MAX_HREF} characters`);
          anchors.push((current = { attribs, text: '' }));
        }
      },
      ontext(text) {
        if (current === null) return;
        current.text += text;
        if (current.text.length > MAX_FILENAME && current.text.trim().length > MAX_FILENAME)
          throw new PageError(`a link's text is longer than ${MAX_FILENAME} characters`);
      },
      onclosetag(tag) {
        if (tag === 'a') current = null;
      },
    },
    { decodeEntities: true, lowerCaseTags: true, lowerCaseAttributeNames: true },
  );
  parser.write(html);
  parser.end();
  let resolvedBase = pageUrl;
  if (base !== null) {
    try {
      resolvedBase = new URL(base, pageUrl).href;
    } catch {
      throw new PageError(`the page's <base href> is not a URL`);
    }
  }
  const files: IndexFile[] = [];
  for (const { attribs: a, text } of anchors) {
    const href = a.href;
    if (href === undefined || href.trim() === '') continue;
    const yanked = a['data-yanked'];
    files.push({
      href: href.trim(),
      filename: text.trim(),
      hashes: fragmentHashes(href.trim()),
      requiresPython: a['data-requires-python'] ?? null,
      yanked: yanked === undefined ? false : yanked === '' ? true : yanked,
      size: null,
      uploadTime: null,
    });
  }
  return { name, apiVersion: '1.0', base: resolvedBase, files, versions: null };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A PEP 691 page, parsed strictly. @throws PageError naming what is wrong. */
export function parseJsonPage(text: string, pageUrl: string): IndexPage {
  try {
    checkJsonShape(text, JSON_PAGE_CAPS);
  } catch (e) {
    if (e instanceof JsonShapeError) throw new PageError(`the JSON exceeds a limit: ${e.message}`);
    throw e;
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new PageError('the JSON does not parse');
  }
  if (!isObject(doc)) throw new PageError('the JSON is not an object');
  const meta = doc.meta;
  if (!isObject(meta) || typeof meta['api-version'] !== 'string') throw new PageError('meta.api-version is missing');
  const apiVersion = meta['api-version'];
  if (!/^1\.\d{1,4}$/.test(apiVersion)) throw new PageError(`unsupported api-version ${JSON.stringify(apiVersion.slice(0, 20))} (1.x is served)`);
  if (typeof doc.name !== 'string' || doc.name === '') throw new PageError('name is missing');
  if (!Array.isArray(doc.files)) throw new PageError('files is not an array');
  if (doc.files.length > MAX_PAGE_FILES) throw new PageError(`the page has more than ${MAX_PAGE_FILES} files`);
  const files: IndexFile[] = doc.files.map((f: unknown, i: number): IndexFile => {
    const at = `files[${i}]`;
    if (!isObject(f)) throw new PageError(`${at} is not an object`);
    if (typeof f.url !== 'string' || f.url === '') throw new PageError(`${at}.url is missing`);
    if (typeof f.filename !== 'string' || f.filename === '') throw new PageError(`${at}.filename is missing`);
    if (f.filename.length > MAX_FILENAME) throw new PageError(`${at}.filename is longer than ${MAX_FILENAME} characters`);
    if (!isObject(f.hashes)) throw new PageError(`${at}.hashes is not an object`);
    const hashes: Record<string, string> = {};
    for (const [alg, hex] of Object.entries(f.hashes)) {
      if (typeof hex !== 'string') throw new PageError(`${at}.hashes.${alg} is not a string`);
      hashes[alg.toLowerCase()] = hex.toLowerCase();
    }
    const rp = f['requires-python'];
    if (rp !== undefined && rp !== null && typeof rp !== 'string') throw new PageError(`${at}.requires-python is not a string`);
    const yanked = f.yanked;
    if (yanked !== undefined && typeof yanked !== 'boolean' && typeof yanked !== 'string') throw new PageError(`${at}.yanked is not a boolean or a string`);
    const size = f.size;
    if (size !== undefined && !(typeof size === 'number' && Number.isSafeInteger(size) && size >= 0)) throw new PageError(`${at}.size is not a size`);
    const up = f['upload-time'];
    if (up !== undefined && up !== null && typeof up !== 'string') throw new PageError(`${at}.upload-time is not a string`);
    return {
      href: f.url,
      filename: f.filename,
      hashes,
      requiresPython: typeof rp === 'string' ? rp : null,
      yanked: yanked === undefined ? false : yanked,
      size: size ?? null,
      uploadTime: typeof up === 'string' ? up : null,
    };
  });
  let versions: string[] | null = null;
  if (doc.versions !== undefined) {
    if (!Array.isArray(doc.versions) || !doc.versions.every((v) => typeof v === 'string')) throw new PageError('versions is not an array of strings');
    versions = doc.versions as string[];
  }
  return { name: doc.name, apiVersion, base: pageUrl, files, versions };
}

const SDIST_SUFFIXES = ['.tar.gz', '.tar.bz2', '.tar.xz', '.tar.zst', '.tgz', '.tbz', '.txz', '.tar', '.zip'];

/**
 * The version in a distribution's file name (wheel, egg or sdist) of
 * `project` (any spelling; compared PEP 503 normalized), or null. An sdist's
 * version follows the first `-` after which the name part is the project's;
 * failing that, the last `-`. `strict` (a file must be named as the
 * project's own): a wheel of 5 or 6 parts (PEP 427) whose name part is the
 * project's, an sdist whose name part is (no last-`-` fallback); no egg.
 */
export function versionOfFile(filename: string, project: string, { strict = false } = {}): string | null {
  const lower = filename.toLowerCase();
  const wanted = pypiNormalizeName(project);
  if (lower.endsWith('.whl') || lower.endsWith('.egg')) {
    const parts = filename.slice(0, -4).split('-');
    if (strict && !(lower.endsWith('.whl') && (parts.length === 5 || parts.length === 6) && pypiNormalizeName(parts[0]!) === wanted)) return null;
    return parts.length >= 2 ? parts[1]! : null;
  }
  const suffix = SDIST_SUFFIXES.find((s) => lower.endsWith(s));
  if (suffix === undefined) return null;
  const stem = filename.slice(0, -suffix.length);
  for (let i = stem.indexOf('-'); i !== -1; i = stem.indexOf('-', i + 1)) {
    if (pypiNormalizeName(stem.slice(0, i)) === wanted) return stem.slice(i + 1);
  }
  if (strict) return null;
  const last = stem.lastIndexOf('-');
  return last === -1 ? null : stem.slice(last + 1);
}
