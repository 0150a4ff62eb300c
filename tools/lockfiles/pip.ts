/**
 * Reading a pip `requirements.txt` in hash-checking mode and finding, on a
 * PEP 503 / PEP 691 simple index, the files it pins.
 *
 * Owns: the requirements subset understood and the index rules.
 * - A requirement is `name[extras]==version` (or `===`) with one or more
 *   `--hash=<sha256|sha384|sha512>:<hex>`; `\` continues a line; `#`
 *   starts a comment (at the start or after whitespace); an environment
 *   marker (`; python_version < "3.8"`) is dropped, not evaluated: the pinned
 *   files are endorsed whatever the marker says.
 * - `-r`/`--requirement`, `-c`/`--constraint` and `-e`/`--editable` lines
 *   are refused (endorse each file on its own); other option lines
 *   (`--index-url`, `--find-links`, ...) are ignored with a note
 *   (`--require-hashes` silently: it is what this reads anyway). A
 *   requirement that is not pinned with `==`, has no `--hash`, or is a
 *   direct URL is refused naming its line.
 * - The index page is `<index>/<PEP 503 name>/`, asked for with
 *   `Accept: application/vnd.pypi.simple.v1+json, text/html;q=0.1`: a PEP
 *   691 JSON answer is read as JSON, anything else as HTML (both by
 *   artifacts/pypi-simple.ts: anchors through htmlparser2, `<base href>`
 *   honoured, the anchor text as the file name; JSON shapes checked, a page
 *   it refuses fails naming why). Links resolve against the page's URL (the
 *   canonical one after redirects).
 * - A file is a candidate when its name (wheel or sdist) carries the pinned
 *   version (PEP 440 equality; `===` compares the text) and the hash the
 *   index gives for it (URL `#<alg>=` fragment or JSON `hashes`) is pinned;
 *   a file the index gives no hash of a pinned algorithm for is fetched too,
 *   and kept only if its bytes match. The fetched bytes of every endorsed
 *   file match a pinned hash; a requirement with no such file fails.
 * - The endorsed URL is the file's URL without its fragment, its path
 *   spelled as pip requests it (pip re-quotes each path part: `+` becomes
 *   `%2B`, `!` `%21`; `@` and `%2F` stay), so the gateway's pypi route
 *   checks the same string; the algorithm
 *   is the pins' one when they all use one vouch has (sha256, sha512), else
 *   sha256.
 *
 * Must hold: nothing here trusts the index: its hashes only choose what to
 * fetch; bytes decide.
 */
import { VouchError } from '../../chain/errors.ts';
import { isArtifactUrl } from '../../chain/block.ts';
import { parsePep440, pep440Equal, pep440ToSemver, pypiNormalizeName, pypiUnitName, isPypiName } from '../../chain/unit-names.ts';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import { isHashAlgorithm, DEFAULT_HASH_ALGORITHM } from '../../chain/hash-algorithms.ts';
import { PageError, fragmentHashes, parseHtmlPage, parseJsonPage, versionOfFile, type IndexPage } from '../../artifacts/pypi-simple.ts';
import { parsePipHash, type DigestName } from './digests.ts';
import { checkLicense } from './licenses.ts';
import { MiB, hasCredentials, type Http } from './http.ts';
import { mapLimit } from './pool.ts';
import type { Options, Pinned } from './types.ts';

export const INDEX_PAGE_MAX_BYTES = 32 * MiB;
export const SIMPLE_ACCEPT = 'application/vnd.pypi.simple.v1+json, text/html;q=0.1';

export interface Requirement {
  line: number;
  project: string;
  normalized: string;
  version: string;
  /** `===` (arbitrary equality) instead of `==`. */
  arbitrary: boolean;
  hashes: Map<'sha256' | 'sha384' | 'sha512', Set<string>>;
  label: string;
  name: string;
  semver: string;
  license: string;
}

export interface PipLock {
  requirements: Requirement[];
  notes: string[];
}

function bad(msg: string): never {
  throw new VouchError('bad_request', msg);
}

const REFUSED_OPTIONS: Record<string, string> = {
  '-r': 'is not followed: endorse each requirements file on its own',
  '--requirement': 'is not followed: endorse each requirements file on its own',
  '-c': 'is not followed: a constraints file pins nothing to endorse here',
  '--constraint': 'is not followed: a constraints file pins nothing to endorse here',
  '-e': 'is refused: an editable requirement has no pinned file',
  '--editable': 'is refused: an editable requirement has no pinned file',
};

/** Logical lines: continuations joined, comments dropped, with the number of their first physical line. */
function logicalLines(text: string): { n: number; text: string }[] {
  const physical = text.split(/\r?\n/);
  const out: { n: number; text: string }[] = [];
  let acc: string | null = null;
  let start = 0;
  physical.forEach((line, i) => {
    if (acc === null) start = i + 1;
    const joined: string = (acc ?? '') + line;
    if (joined.endsWith('\\')) {
      acc = joined.slice(0, -1);
      return;
    }
    acc = null;
    out.push({ n: start, text: joined });
  });
  if (acc !== null) out.push({ n: start, text: acc });
  return out
    .map((l) => ({ n: l.n, text: l.text.replace(/(^|\s)#.*$/, '').trim() }))
    .filter((l) => l.text !== '');
}

/**
 * Parses a requirements file.
 * @throws VouchError `bad_request` naming the line.
 */
export function readRequirements(text: string, options: Options, fileName: string): PipLock {
  const notes: string[] = [];
  const byName = new Map<string, Requirement>();
  const requirements: Requirement[] = [];
  for (const { n, text: line } of logicalLines(text)) {
    const at = `${fileName} line ${n}`;
    if (line.startsWith('-')) {
      const option = line.split(/[\s=]/, 1)[0]!;
      const refusal = REFUSED_OPTIONS[option];
      if (refusal) bad(`${at}: ${option} ${refusal}`);
      if (option !== '--require-hashes') notes.push(`${at}: ${option} ignored${option === '-i' || option === '--index-url' || option === '--extra-index-url' ? ' (pass --index-url to vouch)' : ''}`);
      continue;
    }
    // The requirement, then its per-requirement options from the first " --".
    const cut = line.search(/\s--/);
    const spec = (cut < 0 ? line : line.slice(0, cut)).trim();
    const opts = cut < 0 ? [] : line.slice(cut).trim().split(/\s+/);
    const hashes = new Map<'sha256' | 'sha384' | 'sha512', Set<string>>();
    for (let i = 0; i < opts.length; i++) {
      let o = opts[i]!;
      let value: string | undefined;
      const eq = o.indexOf('=');
      if (eq > 0) { value = o.slice(eq + 1); o = o.slice(0, eq); }
      if (o !== '--hash') {
        notes.push(`${at}: ${o} ignored`);
        if (value === undefined && i + 1 < opts.length && !opts[i + 1]!.startsWith('--')) i++;
        continue;
      }
      if (value === undefined) value = opts[++i];
      const h = value === undefined ? null : parsePipHash(value);
      if (h === null) bad(`${at}: --hash ${JSON.stringify((value ?? '').slice(0, 200))} is not sha256:, sha384: or sha512: with its hex digest`);
      const set = hashes.get(h!.algorithm) ?? new Set<string>();
      set.add(h!.hex);
      hashes.set(h!.algorithm, set);
    }
    // Markers are kept out: everything after an unquoted ";".
    const semi = spec.indexOf(';');
    const req = (semi < 0 ? spec : spec.slice(0, semi)).trim();
    if (/\s@\s|^[^=<>!~]*@/.test(req) || /:\/\//.test(req)) bad(`${at}: ${JSON.stringify(req.slice(0, 200))} is a direct URL requirement: only name==version with --hash is read`);
    const m = /^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(===|==)\s*([^\s,;*]+)$/.exec(req);
    if (!m) bad(`${at}: ${JSON.stringify(req.slice(0, 200))} is not pinned as name==version`);
    const [, project, op, version] = m!;
    if (!isPypiName(project!)) bad(`${at}: ${JSON.stringify(project)} is not a project name`);
    const label = `${project}${op}${version}`;
    if (hashes.size === 0) bad(`${at}: ${label} has no --hash (pip's hash-checking mode needs one for every requirement)`);
    if (op === '==' && parsePep440(version!) === null) bad(`${at}: ${label}: ${JSON.stringify(version)} is not a PEP 440 version`);
    const normalized = pypiNormalizeName(project!);
    const earlier = byName.get(normalized);
    if (earlier) bad(`${at}: ${project} is pinned again (first on line ${earlier.line})`);
    const name = pypiUnitName(project!);
    if (!name.ok) bad(`${at}: ${name.reason}`);
    const semver = pep440ToSemver(version!);
    if (!semver.ok) bad(`${at}: ${label}: ${semver.reason}`);
    if (options.license === undefined) bad(`${label}: a requirements file names no licences: pass --license`);
    const license = checkLicense(options.license!, options.licenseUnchecked, { option: '--license' });
    const r: Requirement = {
      line: n, project: project!, normalized, version: version!, arbitrary: op === '===', hashes, label,
      name: (name as { value: string }).value, semver: (semver as { value: string }).value, license,
    };
    byName.set(normalized, r);
    requirements.push(r);
  }
  return { requirements, notes };
}

// ---------------------------------------------------------------- the index

const QUOTE_SAFE = /^[A-Za-z0-9_.\-~/]$/;

/** Python's `quote(unquote(part))` (safe `/`): percent-escapes decoded as UTF-8 (invalid bytes -> U+FFFD), then re-encoded. */
function pyRequote(part: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < part.length; i++) {
    if (part[i] === '%' && /^[0-9A-Fa-f]{2}$/.test(part.slice(i + 1, i + 3))) {
      bytes.push(parseInt(part.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(...Buffer.from(part[i]!, 'utf8'));
    }
  }
  // Lone surrogates cannot occur: `part` is a URL path, already encoded by WHATWG URL.
  const text = Buffer.from(bytes).toString('utf8');
  let out = '';
  for (const b of Buffer.from(text, 'utf8')) {
    const c = String.fromCharCode(b);
    out += QUOTE_SAFE.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** The URL as pip requests it (pip's `_ensure_quoted_url`: the path re-quoted part by part between `@` and `%2F`). */
export function pipRequestUrl(url: string): string {
  const u = new URL(url);
  const path = u.pathname.split(/(@|%2F)/i).map((p, i) => (i % 2 === 1 ? p.toUpperCase() : pyRequote(p))).join('');
  return `${u.protocol}//${u.host}${path}${u.search}`;
}

/** A file an index page lists, as the lockfile reader uses it. */
export interface LinkedFile {
  filename: string;
  /** Absolute, canonical, without fragment, spelled as pip requests it. */
  url: string;
  /** What the index says the file hashes to (lowercase hex per algorithm). */
  hashes: Record<string, string>;
}

/** Only the hashes given in hex (another value counts as no hash stated). */
function hexHashes(hashes: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(hashes).filter(([, hex]) => /^[0-9a-f]+$/.test(hex)));
}

/**
 * The files an index page of `project` lists (PEP 691 JSON or PEP 503 HTML,
 * read by artifacts/pypi-simple.ts).
 * @throws VouchError `bad_request` when the page cannot be read (naming why)
 * or links to a URL with credentials.
 */
export function parseIndexPage(body: Buffer, contentType: string, pageUrl: string, project: string, label: string): LinkedFile[] {
  const text = body.toString('utf8');
  const json = contentType.startsWith('application/vnd.pypi.simple.v1+json') || contentType.startsWith('application/json');
  let page: IndexPage;
  try {
    page = json ? parseJsonPage(text, pageUrl) : parseHtmlPage(text, pageUrl, project);
  } catch (e) {
    if (!(e instanceof PageError)) throw e;
    return bad(`${label}: cannot read the index page ${pageUrl}: ${e.message}`);
  }
  const out: LinkedFile[] = [];
  for (const f of page.files) {
    let u: URL;
    try {
      u = new URL(f.href, page.base);
    } catch {
      continue;
    }
    u.hash = '';
    if (!isArtifactUrl(u.href)) continue;
    if (hasCredentials(u.href)) bad(`${label}: the index page ${pageUrl} links to a URL with a user name or password: refusing to publish it in the chain`);
    let name = f.filename.trim();
    if (name === '') {
      try {
        name = decodeURIComponent(u.pathname.slice(u.pathname.lastIndexOf('/') + 1));
      } catch {
        continue;
      }
    }
    out.push({ filename: name, url: pipRequestUrl(u.href), hashes: { ...fragmentHashes(f.href), ...hexHashes(f.hashes) } });
  }
  return out;
}

function sameVersion(r: Requirement, fileVer: string): boolean {
  if (r.arbitrary) return fileVer === r.version;
  const a = parsePep440(r.version);
  const b = parsePep440(fileVer);
  return a !== null && b !== null && pep440Equal(a, b);
}

function endorseAlgorithmOf(r: Requirement): HashAlgorithm {
  const algs = [...r.hashes.keys()];
  return algs.length === 1 && isHashAlgorithm(algs[0]!) ? algs[0]! : DEFAULT_HASH_ALGORITHM;
}

/**
 * Reads the index page of every requirement and returns the files to fetch.
 * `onPage` reports progress over the pages.
 */
export async function resolveRequirements(
  reqs: readonly Requirement[], http: Http, indexUrl: string, options: Options, concurrency: number,
  onPage?: (done: number, total: number) => void,
): Promise<{ pinned: Pinned[]; candidatesOf: Map<Requirement, Pinned[]> }> {
  const index = indexUrl.endsWith('/') ? indexUrl : indexUrl + '/';
  const pages = await mapLimit(reqs, concurrency, async (r, signal) => {
    const pageUrl = `${index}${r.normalized}/`;
    const { bytes, answer } = await http.bytes(pageUrl, { maxBytes: INDEX_PAGE_MAX_BYTES, accept: SIMPLE_ACCEPT, signal });
    return { r, pageUrl, files: parseIndexPage(bytes, answer.contentType, answer.finalUrl, r.normalized, r.label) };
  }, onPage);
  const pinned: Pinned[] = [];
  const candidatesOf = new Map<Requirement, Pinned[]>();
  for (const { r, pageUrl, files } of pages) {
    const ofVersion = files.filter((f) => {
      const v = versionOfFile(f.filename, r.normalized, { strict: true });
      return v !== null && sameVersion(r, v);
    });
    if (ofVersion.length === 0) throw new VouchError('not_found', `${r.label}: the index page ${pageUrl} lists no file of version ${r.version}`);
    const want: Partial<Record<DigestName, string[]>> = {};
    for (const [alg, set] of r.hashes) want[alg] = [...set];
    const pins = [...r.hashes].map(([alg, set]) => [...set].map((h) => `${alg}:${h}`).join(' ')).join(' ');
    const list: Pinned[] = [];
    const seen = new Set<string>();
    for (const f of ofVersion) {
      if (seen.has(f.url)) continue;
      const advertised = [...r.hashes.keys()].filter((alg) => f.hashes[alg] !== undefined);
      const pinnedHere = advertised.some((alg) => r.hashes.get(alg)!.has(f.hashes[alg]!));
      if (advertised.length > 0 && !pinnedHere) continue; // another file of this version, not pinned
      seen.add(f.url);
      const label = `${r.label} (${f.filename})`;
      const url = f.url;
      list.push({
        label, url, name: r.name, semver: r.semver, license: r.license,
        comment: options.comment ?? `pypi ${r.label}`,
        endorseAlgorithm: endorseAlgorithmOf(r),
        check: {
          kind: 'digest', want, strict: pinnedHere,
          mismatch: (got) => `hash mismatch: ${label} (${url}): requirements ${pins}, fetched ${[...r.hashes.keys()].map((a) => `${a}:${got.get(a)}`).join(' ')}`,
        },
      });
    }
    if (list.length === 0) {
      throw new VouchError('hash_mismatch', `${r.label}: none of the ${ofVersion.length} files of version ${r.version} at ${pageUrl} has a pinned hash`, { resource: pageUrl });
    }
    candidatesOf.set(r, list);
    pinned.push(...list);
  }
  return { pinned, candidatesOf };
}
