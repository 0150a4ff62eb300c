/**
 * Reading a pip `requirements.txt` in hash-checking mode and finding, on a
 * PEP 503 / PEP 691 simple index, the files it pins.
 * Owns: the subset understood: `name[extras]==version` (or `===`) with one
 * or more `--hash=`; `\` continuations, comments; markers dropped, not
 * evaluated; `-r`, `-c`, `-e` refused, other options ignored with a note;
 * unpinned, unhashed or direct-URL requirements refused naming the line.
 * A file's name is the one pip reads from its link (artifacts/pip-url.ts),
 * and the endorsed URL is spelled as pip requests it. Bounded: file size,
 * line count, joined line length, files per version (one error past one).
 * Trusts: nothing of the index: its hashes only choose what to fetch.
 * Must hold: every endorsed file's fetched bytes match a pinned hash; a
 * requirement with no such file fails.
 */
import { VouchError } from '../../chain/errors.ts';
import { isArtifactUrl } from '../../chain/block.ts';
import { parsePep440, pep440Equal, pep440ToSemver, pypiNormalizeName, pypiUnitName, isPypiName } from '../../chain/unit-names.ts';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import { isHashAlgorithm, DEFAULT_HASH_ALGORITHM } from '../../chain/hash-algorithms.ts';
import { PageError, fragmentHashes, parseHtmlPage, parseJsonPage, versionOfFile, type IndexPage } from '../../artifacts/pypi-simple.ts';
import { parsePipHash, type DigestName } from './digests.ts';
import { checkLicense } from './licenses.ts';
import type { Http } from './http.ts';
import { MiB, hasCredentials } from './origin-map.ts';
import { mapLimit } from './pool.ts';
import { pipFileNames, pipRequestUrl } from '../../artifacts/pip-url.ts';
import type { Options, Pinned } from './types.ts';

export const INDEX_PAGE_MAX_BYTES = 32 * MiB;
/** The most files of the pinned version one requirement may have at the index (each may be fetched). */
export const FILES_PER_VERSION_MAX = 2000;
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

export const REQUIREMENTS_MAX_CHARS = 32 * MiB;
export const REQUIREMENTS_MAX_LINES = 1_000_000;
export const REQUIREMENTS_MAX_LINE_CHARS = MiB;

/**
 * Logical lines: continuations joined (a physical line ending in `\`
 * continues on the next; each piece is kept once and joined once, so the
 * work is linear), comments dropped, with the number of their first
 * physical line. @throws VouchError `too_large` past a bound.
 */
export function logicalLines(text: string, fileName: string): { n: number; text: string }[] {
  if (text.length > REQUIREMENTS_MAX_CHARS)
    throw new VouchError('too_large', `${fileName} is ${text.length} characters long, more than ${REQUIREMENTS_MAX_CHARS} (a requirements file is read whole)`);
  let count = 1;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) {
    if (++count > REQUIREMENTS_MAX_LINES) throw new VouchError('too_large', `${fileName} has more than ${REQUIREMENTS_MAX_LINES} lines`);
  }
  const physical = text.split(/\r?\n/);
  const out: { n: number; text: string }[] = [];
  let parts: string[] = [];
  let length = 0;
  let start = 0;
  for (let i = 0; i < physical.length; i++) {
    const line = physical[i]!;
    if (parts.length === 0) start = i + 1;
    const continued = line.endsWith('\\');
    const piece = continued ? line.slice(0, -1) : line;
    length += piece.length;
    if (length > REQUIREMENTS_MAX_LINE_CHARS) {
      throw new VouchError(
        'too_large',
        `${fileName} line ${start}: the line, joined with its \\ continuations, is longer than ${REQUIREMENTS_MAX_LINE_CHARS} characters`,
      );
    }
    parts.push(piece);
    if (continued) continue;
    out.push({ n: start, text: parts.join('') });
    parts = [];
    length = 0;
  }
  if (parts.length > 0) out.push({ n: start, text: parts.join('') });
  const kept: { n: number; text: string }[] = [];
  for (const l of out) {
    const t = l.text.replace(/(^|\s)#.*$/, '').trim();
    if (t !== '') kept.push({ n: l.n, text: t });
  }
  return kept;
}

/**
 * Parses a requirements file.
 * @throws VouchError `bad_request` naming the line.
 */
export function readRequirements(text: string, options: Options, fileName: string): PipLock {
  const notes: string[] = [];
  const byName = new Map<string, Requirement>();
  const requirements: Requirement[] = [];
  for (const { n, text: line } of logicalLines(text, fileName)) {
    const at = `${fileName} line ${n}`;
    if (line.startsWith('-')) {
      const option = line.split(/[\s=]/, 1)[0]!;
      const refusal = REFUSED_OPTIONS[option];
      if (refusal) bad(`${at}: ${option} ${refusal}`);
      if (option !== '--require-hashes')
        notes.push(
          `${at}: ${option} ignored${option === '-i' || option === '--index-url' || option === '--extra-index-url' ? ' (pass --index-url to vouch)' : ''}`,
        );
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
      if (eq > 0) {
        value = o.slice(eq + 1);
        o = o.slice(0, eq);
      }
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
    if (/\s@\s|^[^=<>!~]*@/.test(req) || /:\/\//.test(req))
      bad(`${at}: ${JSON.stringify(req.slice(0, 200))} is a direct URL requirement: only name==version with --hash is read`);
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
      line: n,
      project: project!,
      normalized,
      version: version!,
      arbitrary: op === '===',
      hashes,
      label,
      name: (name as { value: string }).value,
      semver: (semver as { value: string }).value,
      license,
    };
    byName.set(normalized, r);
    requirements.push(r);
  }
  return { requirements, notes };
}

// ---------------------------------------------------------------- the index

/** A file an index page lists, as the lockfile reader uses it. */
export interface LinkedFile {
  /** The name pip reads from the link (artifacts/pip-url.ts). */
  filename: string;
  /**
   * Why the link's name is in doubt, or null: the index names the file
   * otherwise, or pip versions read the link differently. `names` are all
   * the names in play (a file is refused when one of them is of the pinned version).
   */
  doubt: { why: string; names: string[] } | null;
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
    const url = pipRequestUrl(u.href);
    const pip = pipFileNames(url);
    const stated = f.filename.trim();
    const names = [...new Set([pip.current, pip.legacy, ...(stated === '' ? [] : [stated])])];
    let doubt: LinkedFile['doubt'] = null;
    if (stated !== '' && stated !== pip.current) {
      doubt = {
        why: `the index names a file ${JSON.stringify(stated.slice(0, 200))} but links it at ${url}, which pip reads as ${JSON.stringify(pip.current.slice(0, 200))}`,
        names,
      };
    } else if (pip.legacy !== pip.current) {
      doubt = {
        why: `pip reads the link ${url} as ${JSON.stringify(pip.current.slice(0, 200))} (pip 26.2 and later) or ${JSON.stringify(pip.legacy.slice(0, 200))} (earlier)`,
        names,
      };
    }
    out.push({ filename: pip.current, doubt, url, hashes: { ...fragmentHashes(f.href), ...hexHashes(f.hashes) } });
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
  reqs: readonly Requirement[],
  http: Http,
  indexUrl: string,
  options: Options,
  concurrency: number,
  onPage?: (done: number, total: number) => void,
): Promise<{ pinned: Pinned[]; candidatesOf: Map<Requirement, Pinned[]> }> {
  const index = indexUrl.endsWith('/') ? indexUrl : indexUrl + '/';
  const pages = await mapLimit(
    reqs,
    concurrency,
    async (r, signal) => {
      const pageUrl = `${index}${r.normalized}/`;
      const { bytes, answer } = await http.bytes(pageUrl, { maxBytes: INDEX_PAGE_MAX_BYTES, accept: SIMPLE_ACCEPT, signal });
      return { r, pageUrl, files: parseIndexPage(bytes, answer.contentType, answer.finalUrl, r.normalized, r.label) };
    },
    onPage,
  );
  const pinned: Pinned[] = [];
  const candidatesOf = new Map<Requirement, Pinned[]>();
  for (const { r, pageUrl, files } of pages) {
    const ofPinned = (name: string) => {
      const v = versionOfFile(name, r.normalized, { strict: true });
      return v !== null && sameVersion(r, v);
    };
    const doubtful = files.find((f) => f.doubt?.names.some(ofPinned));
    if (doubtful) {
      throw new VouchError(
        'bad_request',
        `${r.label}: refused: ${doubtful.doubt!.why} (index page ${pageUrl}); the file pip would fetch is not the one the index names`,
        { resource: doubtful.url },
      );
    }
    const ofVersion = files.filter((f) => ofPinned(f.filename));
    if (ofVersion.length === 0) throw new VouchError('not_found', `${r.label}: the index page ${pageUrl} lists no file of version ${r.version}`);
    if (ofVersion.length > FILES_PER_VERSION_MAX) {
      throw new VouchError(
        'too_large',
        `${r.label}: the index page ${pageUrl} lists ${ofVersion.length} files of version ${r.version}, more than ${FILES_PER_VERSION_MAX}`,
      );
    }
    const want: Partial<Record<DigestName, string[]>> = {};
    for (const [alg, set] of r.hashes) want[alg] = [...set];
    const pins = [...r.hashes].map(([alg, set]) => [...set].map((h) => `${alg}:${h}`).join(' ')).join(' ');
    const list: Pinned[] = [];
    const seen = new Set<string>();
    for (const f of ofVersion) {
      if (seen.has(f.url)) continue;
      const advertised = [...r.hashes.keys()].filter((alg) => f.hashes[alg] !== undefined);
      const pinnedHere = advertised.some((alg) => r.hashes.get(alg)!.has(f.hashes[alg]!));
      // A file whose pinned hash the index advertises claims just that hash; another claims every pin.
      const claims = pinnedHere ? advertised.filter((alg) => r.hashes.get(alg)!.has(f.hashes[alg]!)).map((alg) => `${alg}:${f.hashes[alg]}`) : undefined;
      if (advertised.length > 0 && !pinnedHere) continue; // another file of this version, not pinned
      seen.add(f.url);
      const label = `${r.label} (${f.filename})`;
      const url = f.url;
      list.push({
        label,
        url,
        name: r.name,
        semver: r.semver,
        license: r.license,
        comment: options.comment ?? `pypi ${r.label}`,
        endorseAlgorithm: endorseAlgorithmOf(r),
        ...(claims ? { claims } : {}),
        check: {
          kind: 'digest',
          want,
          strict: pinnedHere,
          mismatch: (got) =>
            `hash mismatch: ${label} (${url}): requirements ${pins}, fetched ${[...r.hashes.keys()].map((a) => `${a}:${got.get(a)}`).join(' ')}`,
        },
      });
    }
    if (list.length === 0) {
      throw new VouchError('hash_mismatch', `${r.label}: none of the ${ofVersion.length} files of version ${r.version} at ${pageUrl} has a pinned hash`, {
        resource: pageUrl,
      });
    }
    candidatesOf.set(r, list);
    for (const p of list) pinned.push(p);
  }
  return { pinned, candidatesOf };
}
export { pipRequestUrl } from '../../artifacts/pip-url.ts';
