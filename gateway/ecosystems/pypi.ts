/**
 * The PyPI route kind (`kind: pypi`): pip's simple repository API (PEP 503
 * HTML, PEP 691 JSON) through the gateway; one route for the index, one per
 * files host. A project page is fetched in the negotiated form, parsed
 * (artifacts/pypi-simple.ts) and answered as a fresh page whose links point
 * at the gateway with the signed hash as pip's fragment.
 * Owns: pip's path classes, Accept negotiation, the rewrite and rendering of
 * our pages, the failure form pip shows (reason in the status line).
 * Trusts: nothing of the index's answer (bad shapes are a 502 with the
 * reason); `MetadataIO` for the URL maps and the chain.
 * Must hold: every link on a page is a gateway URL; a deny route offers no
 * unendorsed file and no route a revoked one; a link whose index name is
 * not the name pip would install is dropped; no origin markup is sent.
 */
import { PageError, parseHtmlPage, parseJsonPage, versionOfFile, type IndexPage } from '../../artifacts/pypi-simple.ts';
import { pipFileNames } from '../../artifacts/pip-url.ts';
import { pypiUnitName } from '../../chain/unit-names.ts';
import type { Classified, EcosystemHandler, MetadataIO, PageJob, Rendered, RenderView } from './ecosystem.ts';

export const JSON_TYPE = 'application/vnd.pypi.simple.v1+json';
export const HTML_TYPE = 'application/vnd.pypi.simple.v1+html';

export type Form = 'json' | 'html';

/** What a client gets: the page form and the content type we answer with. */
export interface Negotiated {
  form: Form;
  contentType: string;
}

const OFFERS: Record<string, Negotiated> = {
  [JSON_TYPE]: { form: 'json', contentType: JSON_TYPE },
  'application/vnd.pypi.simple.latest+json': { form: 'json', contentType: JSON_TYPE },
  [HTML_TYPE]: { form: 'html', contentType: `${HTML_TYPE}; charset=utf-8` },
  'application/vnd.pypi.simple.latest+html': { form: 'html', contentType: `${HTML_TYPE}; charset=utf-8` },
  'text/html': { form: 'html', contentType: 'text/html; charset=utf-8' },
  'text/*': { form: 'html', contentType: 'text/html; charset=utf-8' },
  '*/*': { form: 'html', contentType: 'text/html; charset=utf-8' },
};

/** The normalized Accept sent to the index per form (a JSON ask falls back to HTML, which we convert). */
export const ORIGIN_ACCEPT: Record<Form, string> = {
  json: `${JSON_TYPE}, ${HTML_TYPE};q=0.2, text/html;q=0.01`,
  html: `${HTML_TYPE}, text/html;q=0.01`,
};

/**
 * The page form for a client's Accept header (PEP 691): the offer with the
 * highest q, the earlier one on a tie; HTML when there is no header; null
 * when nothing we serve is acceptable.
 */
export function negotiate(accept: string | undefined): Negotiated | null {
  if (accept === undefined || accept.trim() === '') return OFFERS['text/html']!;
  let best: { n: Negotiated; q: number } | null = null;
  for (const part of accept.split(',')) {
    const [type = '', ...params] = part.split(';').map((s) => s.trim());
    const offer = OFFERS[type.toLowerCase()];
    if (offer === undefined) continue;
    let q = 1;
    for (const p of params) {
      const m = /^q\s*=\s*([0-9.]+)$/i.exec(p);
      if (m !== null) q = Number(m[1]);
    }
    if (!(q > 0 && q <= 1)) continue;
    if (best === null || q > best.q) best = { n: offer, q };
  }
  return best?.n ?? null;
}

// ---------------------------------------------------------------------------
// The rewrite

/** What the rewrite needs (a `MetadataIO` is one). */
export interface RewriteIO {
  unendorsed: 'deny' | 'pass';
  endorsed(artifactUrl: string): { entry: { artifact_hash: string } } | null;
  /** The file's endorsement is revoked (it answers 410): removed on every route. Absent: nothing is. */
  revoked?(artifactUrl: string): boolean;
  artifactUrlOf(url: string): string | null;
  gatewayUrlOf(artifactUrl: string): string | null;
}

/** A file link we offer. */
export interface KeptFile {
  /** The gateway URL (no fragment). */
  url: string;
  /** The artifact URL the chain endorses (or would). */
  artifactUrl: string;
  /** The last path segment of the URL, decoded (what pip calls the file). */
  filename: string;
  /** The hash pip checks: the signed one when endorsed (sha256/sha512 only), else the index's. */
  hashes: Record<string, string>;
  endorsed: boolean;
  requiresPython: string | null;
  yanked: boolean | string;
  size: number | null;
  uploadTime: string | null;
}

export interface RewrittenPage {
  name: string;
  apiVersion: string;
  files: KeptFile[];
  versions: string[] | null;
  /** Links no route serves (removed), as resolved. */
  noRoute: string[];
  /** Unendorsed artifact URLs removed (deny route). */
  unendorsed: string[];
  /** Links removed because the index names the file otherwise than its URL does (pip goes by the URL). */
  misnamed: Array<{ url: string; index: string; pip: string }>;
  /** Endorsed files for which the index states another hash of the same algorithm. */
  disagreements: Array<{ url: string; index: string; signed: string }>;
}

/** Hash names pip checks (pip's `_SUPPORTED_HASHES`). */
const PIP_HASHES = new Set(['sha512', 'sha384', 'sha256', 'sha224', 'sha1', 'md5']);

/** The `hashes` a page states for a signed `<alg>:<hex>`: sha256 and sha512 only (pip checks no other the chain uses). */
export function signedHashes(artifactHash: string): Record<string, string> {
  const at = artifactHash.indexOf(':');
  const alg = artifactHash.slice(0, at);
  const hex = artifactHash.slice(at + 1).toLowerCase();
  return alg === 'sha256' || alg === 'sha512' ? { [alg]: hex } : {};
}

const versionKey = (v: string) => v.toLowerCase().replace(/_/g, '-');

/**
 * The page we answer with: each link resolved against the page's base,
 * fragment dropped, mapped to its artifact URL; removed when no route serves
 * it or (deny) nothing endorses it; linked to the gateway with the signed
 * hash. PEP 700 `versions` keeps only versions with a kept file.
 */
export function rewritePage(page: IndexPage, io: RewriteIO): RewrittenPage {
  const out: RewrittenPage = {
    name: page.name,
    apiVersion: page.apiVersion,
    files: [],
    versions: null,
    noRoute: [],
    unendorsed: [],
    misnamed: [],
    disagreements: [],
  };
  for (const f of page.files) {
    let resolved: URL;
    try {
      resolved = new URL(f.href, page.base);
    } catch {
      out.noRoute.push(f.href);
      continue;
    }
    resolved.hash = '';
    // Named as pip names it; a link the index names otherwise, or that pips before and since 26.2 read differently, is dropped.
    const pip = pipFileNames(resolved.href);
    const filename = pip.current;
    if ((f.filename !== '' && f.filename !== filename) || pip.legacy !== filename) {
      out.misnamed.push({
        url: resolved.href,
        index: f.filename.slice(0, 200),
        pip: pip.legacy === filename ? filename : `${filename} (pip before 26.2: ${pip.legacy})`,
      });
      continue;
    }
    const artifactUrl = resolved.protocol === 'http:' || resolved.protocol === 'https:' ? io.artifactUrlOf(resolved.href) : null;
    const url = artifactUrl === null ? null : io.gatewayUrlOf(artifactUrl);
    if (artifactUrl === null || url === null) {
      out.noRoute.push(resolved.href);
      continue;
    }
    const sel = io.endorsed(artifactUrl);
    if (sel === null && (io.unendorsed === 'deny' || io.revoked?.(artifactUrl) === true)) {
      out.unendorsed.push(artifactUrl);
      continue;
    }
    let hashes: Record<string, string>;
    if (sel !== null) {
      hashes = signedHashes(sel.entry.artifact_hash);
      const [alg, hex] = sel.entry.artifact_hash.split(':') as [string, string];
      const stated = f.hashes[alg];
      if (stated !== undefined && stated !== hex.toLowerCase())
        out.disagreements.push({ url: artifactUrl, index: `${alg}:${stated}`, signed: sel.entry.artifact_hash });
    } else {
      // Pass route, not endorsed: the bytes pass through unverified; pip checks the index's own hashes.
      hashes = {};
      for (const [alg, hex] of Object.entries(f.hashes)) if (PIP_HASHES.has(alg) && /^[0-9a-f]+$/.test(hex)) hashes[alg] = hex;
    }
    out.files.push({
      url,
      artifactUrl,
      filename,
      hashes,
      endorsed: sel !== null,
      requiresPython: f.requiresPython,
      yanked: f.yanked,
      size: f.size,
      uploadTime: f.uploadTime,
    });
  }
  if (page.versions !== null) {
    const kept = new Set<string>();
    for (const f of out.files) {
      const v = versionOfFile(f.filename, page.name);
      if (v !== null) kept.add(versionKey(v));
    }
    out.versions = page.versions.filter((v) => kept.has(versionKey(v)));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Our pages

const escapeText = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const escapeAttr = (s: string) => escapeText(s).replace(/"/g, '&quot;').replace(/'/g, '&#39;');

/** The fragment pip checks: the first of sha256, sha512, ... the page states, or none. */
function fragmentOf(hashes: Record<string, string>): string {
  for (const alg of ['sha256', 'sha512', 'sha384', 'sha224', 'sha1', 'md5']) {
    const hex = hashes[alg];
    if (hex !== undefined) return `#${alg}=${hex}`;
  }
  return '';
}

/** A minimal PEP 503 page of the kept links (every value escaped). */
export function renderHtml(page: RewrittenPage): string {
  const name = escapeText(page.name);
  const lines = [
    '<!DOCTYPE html>',
    '<html>',
    '<head>',
    '<meta name="pypi:repository-version" content="1.0">',
    `<title>Links for ${name}</title>`,
    '</head>',
    '<body>',
    `<h1>Links for ${name}</h1>`,
  ];
  for (const f of page.files) {
    let attrs = `href="${escapeAttr(f.url + fragmentOf(f.hashes))}"`;
    if (f.requiresPython !== null) attrs += ` data-requires-python="${escapeAttr(f.requiresPython)}"`;
    if (f.yanked !== false) attrs += ` data-yanked="${f.yanked === true ? '' : escapeAttr(f.yanked)}"`;
    lines.push(`<a ${attrs}>${escapeText(f.filename)}</a><br>`);
  }
  lines.push('</body>', '</html>', '');
  return lines.join('\n');
}

/** A PEP 691 page of the kept links (only the keys we know). */
export function renderJson(page: RewrittenPage): string {
  const doc: Record<string, unknown> = {
    meta: { 'api-version': page.apiVersion },
    name: page.name,
    files: page.files.map((f) => ({
      filename: f.filename,
      url: f.url,
      hashes: f.hashes,
      ...(f.requiresPython !== null ? { 'requires-python': f.requiresPython } : {}),
      ...(f.yanked !== false ? { yanked: f.yanked } : {}),
      ...(f.size !== null ? { size: f.size } : {}),
      ...(f.uploadTime !== null ? { 'upload-time': f.uploadTime } : {}),
    })),
  };
  if (page.versions !== null) doc.versions = page.versions;
  return JSON.stringify(doc);
}

// ---------------------------------------------------------------------------
// The answer

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

function decodeBody(contentType: string | undefined, body: Uint8Array): string {
  const charset = /;\s*charset\s*=\s*"?([A-Za-z0-9_.:-]+)"?/i.exec(contentType ?? '')?.[1] ?? 'utf-8';
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(charset);
  } catch {
    decoder = new TextDecoder('utf-8');
  }
  return decoder.decode(body);
}

/** Our reading of the index's 200 answer. @throws PageError */
function parsePage(contentType: string | undefined, body: Uint8Array, pageUrl: string, project: string): IndexPage {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (type === JSON_TYPE || type === 'application/vnd.pypi.simple.latest+json') {
    let text: string;
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(body);
    } catch {
      throw new PageError('the JSON is not UTF-8');
    }
    return parseJsonPage(text, pageUrl);
  }
  if (type === HTML_TYPE || type === 'application/vnd.pypi.simple.latest+html' || type === 'text/html') {
    return parseHtmlPage(decodeBody(contentType, body), pageUrl, project);
  }
  throw new PageError(`the index answered with content type ${JSON.stringify(type || '(none)')}, not a simple repository page`);
}

function displayName(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

async function answerProject(io: MetadataIO, segment: string): Promise<void> {
  const project = displayName(segment);
  const want = negotiate(io.req.headers.accept);
  if (want === null) {
    return io.fail(406, `vouch: the Accept header rules out every form of this page (${JSON_TYPE}, ${HTML_TYPE}, text/html)`);
  }
  const pageUrl = io.originUrl(io.rest);
  const r = await io.fetch(io.rest, { accept: ORIGIN_ACCEPT[want.form], form: want.form });
  if (REDIRECTS.has(r.status)) {
    const location = r.headers.location;
    let target: URL | null = null;
    try {
      if (location !== undefined) target = new URL(location, pageUrl);
    } catch {
      /* not a URL */
    }
    if (target === null) return io.fail(502, `vouch: the index answered ${r.status} for ${project} without a usable Location`);
    target.hash = '';
    const artifactUrl = io.artifactUrlOf(target.href);
    const gateway = artifactUrl === null ? null : io.gatewayUrlOf(artifactUrl);
    if (gateway === null) return io.fail(502, `vouch: the index redirected ${project} to ${target.href}, which no route serves`);
    return io.send(r.status, 'text/plain; charset=utf-8', '', { location: gateway });
  }
  if (r.status === 404 || r.status === 410) return io.fail(404, `vouch: the index has no project ${project} (it answered ${r.status})`);
  if (r.status !== 200) return io.fail(502, `vouch: the index answered ${r.status} for ${project}`);
  await io.answerJob(r, `pypi ${want.form} ${want.contentType}`, { kind: 'pypi', contentType: r.headers['content-type'], pageUrl, project, want });
}

/**
 * The index's page read under the caps; a refusal (502 with the reason,
 * logged at warn) when it cannot be read. Chain-independent: the part that
 * may run off the event loop.
 */
export function preparePage(body: Uint8Array, job: PageJob, log: RenderView['log']): { page: IndexPage } | Rendered {
  try {
    return { page: parsePage(job.contentType, body, job.pageUrl, job.project) };
  } catch (e) {
    if (!(e instanceof PageError)) throw e;
    log.warn('pypi: unreadable index page', { url: job.pageUrl, reason: e.message });
    return { ok: false, status: 502, message: `vouch: cannot read the index page of ${job.project}: ${e.message}` };
  }
}

/** The URLs a page's rewrite asks the chain about: each link resolved, fragment dropped. */
export function linksOf(page: IndexPage): string[] {
  const out: string[] = [];
  for (const f of page.files) {
    try {
      const u = new URL(f.href, page.base);
      u.hash = '';
      out.push(u.href);
    } catch {
      /* removed by the rewrite */
    }
  }
  return out;
}

/** The page answered from a parsed index page: rewritten against the chain (`io`), rendered in the client's form. */
export function finishPage(page: IndexPage, job: PageJob, io: RenderView): Rendered {
  const { pageUrl, want } = job;
  const out = rewritePage(page, io);
  if (out.noRoute.length > 0) {
    io.log.warn('pypi: removed links that no route serves', { page: pageUrl, count: out.noRoute.length, urls: out.noRoute.slice(0, 5) });
  }
  if (out.misnamed.length > 0) {
    io.log.warn('pypi: removed links the index names otherwise than their URL (pip goes by the URL)', {
      page: pageUrl,
      count: out.misnamed.length,
      links: out.misnamed.slice(0, 5),
    });
  }
  for (const d of out.disagreements.slice(0, 20)) io.log.warn('pypi: the index states another hash than the signed one', { page: pageUrl, ...d });
  if (out.unendorsed.length > 0) io.log.debug('pypi: removed unendorsed links', { page: pageUrl, count: out.unendorsed.length });
  if (out.files.length === 0 && io.unendorsed === 'deny' && page.files.length > 0) {
    const why = [
      out.unendorsed.length > 0 ? `${out.unendorsed.length} not endorsed by the authority` : '',
      out.noRoute.length > 0 ? `${out.noRoute.length} on hosts no route serves` : '',
      out.misnamed.length > 0 ? `${out.misnamed.length} named otherwise by the index than by their URL` : '',
    ]
      .filter(Boolean)
      .join(', ');
    return { ok: false, status: 404, message: `vouch: no file of ${page.name} is served through vouch (${page.files.length} on the index: ${why})` };
  }
  if (out.files.length === 0 && io.unendorsed === 'deny') return { ok: false, status: 404, message: `vouch: the index lists no file of ${page.name}` };
  const body = want.form === 'json' ? renderJson(out) : renderHtml(out);
  const unit = pypiUnitName(job.project);
  return { ok: true, status: 200, contentType: want.contentType, body, headers: { vary: 'Accept' }, ...(unit.ok ? { unit: unit.value } : {}) };
}

/** The page answered from the index's body on this thread: `preparePage` then `finishPage`. */
export function renderPage(body: Uint8Array, job: PageJob, io: RenderView): Rendered {
  const p = preparePage(body, job, io.log);
  return 'ok' in p ? p : finishPage(p.page, job, io);
}

/** The route's failures: pip prints the status line (`409 Client Error: <reason> for url: ...`), never the body. */
function reasonPhrase(message: string): string {
  const ascii = message.replace(/[^\x20-\x7e]/g, '?');
  return ascii.length > 300 ? `${ascii.slice(0, 297)}...` : ascii;
}

export const pypi: EcosystemHandler = {
  kind: 'pypi',
  classify(rest: string): Classified {
    const m = /^simple\/([^/]+)\/?$/.exec(rest);
    if (m !== null) {
      const segment = m[1]!;
      return { type: 'metadata', answer: (io) => answerProject(io, segment) };
    }
    if (rest === '' || rest === 'simple' || rest === 'simple/') return { type: 'other' };
    return { type: 'artifact' };
  },
  errorBody: (message) => ({ contentType: 'text/plain; charset=utf-8', body: `${message}\n`, reason: reasonPhrase(message) }),
};
