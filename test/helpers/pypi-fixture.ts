/**
 * A small PyPI for tests on loopback: real distributions built with Debian's
 * python3, and hosts serving simple pages (PEP 503 HTML or PEP 691 JSON, by
 * Accept) and files, laid out as PyPI is (an index with absolute links and
 * `#sha256=` fragments, and a files host).
 * Owns: building wheels and sdists; serving; recording every request with
 * its user agent and Accept.
 * Must hold: 127.0.0.1 only; `close()` destroys every socket.
 * Usage:
 *   const files = await PypiHost.start(); const index = await PypiHost.start();
 *   files.file('/packages/a/x-1.0-py3-none-any.whl', wheelBytes);
 *   index.project('x', [{ url: files.url('/packages/a/x-1.0-py3-none-any.whl'), bytes: wheelBytes }]);
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export const SYSTEM_PYTHON = '/usr/bin/python3';

/** A distribution to build: a wheel (`py3-none-any`) or an sdist (`.tar.gz`). */
export interface DistSpec {
  kind: 'wheel' | 'sdist';
  name: string;
  version: string;
  marker?: string;
}

const BUILD = String.raw`
import base64, hashlib, io, json, sys, tarfile, zipfile
specs = json.load(sys.stdin)
out = []
for s in specs:
    name, version, marker = s['name'], s['version'], s.get('marker', '')
    mod = name.replace('-', '_')
    metadata = f'Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: vouch test fixture {marker}\n'.encode()
    code = f'VERSION = {version!r}\nMARKER = {marker!r}\n'.encode()
    buf = io.BytesIO()
    if s['kind'] == 'wheel':
        di = f'{mod}-{version}.dist-info'
        files = [(f'{mod}/__init__.py', code), (f'{di}/METADATA', metadata),
                 (f'{di}/WHEEL', b'Wheel-Version: 1.0\nGenerator: vouch-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n')]
        record = ''.join(f'{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()},{len(b)}\n' for p, b in files)
        files.append((f'{di}/RECORD', (record + f'{di}/RECORD,,\n').encode()))
        with zipfile.ZipFile(buf, 'w', zipfile.ZIP_DEFLATED) as z:
            for p, b in files:
                z.writestr(zipfile.ZipInfo(p, (2020, 1, 1, 0, 0, 0)), b)
    else:
        with tarfile.open(fileobj=buf, mode='w:gz') as t:
            for p, b in [(f'{mod}-{version}/PKG-INFO', metadata), (f'{mod}-{version}/{mod}/__init__.py', code)]:
                info = tarfile.TarInfo(p); info.size = len(b); info.mtime = 1577836800
                t.addfile(info, io.BytesIO(b))
    out.append(base64.b64encode(buf.getvalue()).decode())
json.dump(out, sys.stdout)
`;

/** Builds the distributions with Debian's python3; returns their bytes in order. */
export function buildDists(specs: DistSpec[]): Buffer[] {
  const r = spawnSync(SYSTEM_PYTHON, ['-c', BUILD], { input: JSON.stringify(specs), encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`building distributions failed: ${r.stderr}`);
  return (JSON.parse(r.stdout) as string[]).map((b) => Buffer.from(b, 'base64'));
}

/** The file name pip expects for a spec. */
export function distFilename(s: DistSpec): string {
  const mod = s.name.replace(/-/g, '_');
  return s.kind === 'wheel' ? `${mod}-${s.version}-py3-none-any.whl` : `${mod}-${s.version}.tar.gz`;
}

export const sha256Hex = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** One file link of a project page. */
export interface PageLink {
  /** The href as written on the page (absolute or relative), without a fragment. */
  href: string;
  /** The page states `#sha256=<this>` (and in JSON `hashes.sha256`). */
  sha256: string;
  filename: string;
  version: string;
  requiresPython?: string;
  yanked?: string | true;
}

export interface HostRequest {
  path: string;
  userAgent: string;
  accept: string;
}

const escapeAttr = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const normalize = (n: string) => n.replace(/[-_.]+/g, '-').toLowerCase();

export class PypiHost {
  readonly log: HostRequest[] = [];
  private readonly files = new Map<string, Buffer>();
  private readonly projects = new Map<string, PageLink[]>();
  private readonly raw = new Map<string, { contentType: string; body: string }>();
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(): Promise<PypiHost> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const host = new PypiHost(server, (server.address() as AddressInfo).port);
    server.on('connection', (s: Socket) => {
      host.sockets.add(s);
      s.on('close', () => host.sockets.delete(s));
    });
    server.on('request', (req, res) => {
      const path = new URL(req.url ?? '/', 'http://x').pathname;
      host.log.push({ path, userAgent: String(req.headers['user-agent'] ?? ''), accept: String(req.headers.accept ?? '') });
      const file = host.files.get(path);
      if (file !== undefined) {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': file.length }).end(req.method === 'HEAD' ? undefined : file);
        return;
      }
      const raw = host.raw.get(path);
      if (raw !== undefined) {
        res.writeHead(200, { 'content-type': raw.contentType, 'content-length': Buffer.byteLength(raw.body) }).end(raw.body);
        return;
      }
      const m = /^\/simple\/([^/]+)\/$/.exec(path);
      if (m !== null && normalize(m[1]!) !== m[1]) {
        res.writeHead(301, { location: `/simple/${normalize(m[1]!)}/`, 'content-length': 0 }).end();
        return;
      }
      const links = m === null ? undefined : host.projects.get(m[1]!);
      if (links === undefined) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
        return;
      }
      const json = /application\/vnd\.pypi\.simple\.v1\+json/.test(String(req.headers.accept ?? ''));
      const body = json ? host.jsonPage(m![1]!, links) : host.htmlPage(m![1]!, links);
      res
        .writeHead(200, {
          'content-type': json ? 'application/vnd.pypi.simple.v1+json' : 'text/html; charset=utf-8',
          'content-length': Buffer.byteLength(body),
        })
        .end(req.method === 'HEAD' ? undefined : body);
    });
    return host;
  }

  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  url(path: string): string {
    return this.origin + path;
  }

  /** Serves `bytes` at `path` (replacing what was there). */
  file(path: string, bytes: Buffer): this {
    this.files.set(path, bytes);
    return this;
  }

  /** Sets a project's page (`name` normalized). */
  project(name: string, links: PageLink[]): this {
    this.projects.set(normalize(name), links);
    return this;
  }

  /** Answers `path` with this body whatever the Accept (a broken index). */
  page(path: string, contentType: string, body: string): this {
    this.raw.set(path, { contentType, body });
    return this;
  }

  /** Replaces one link of a project's page (the tampering of an index together with its files host). */
  replaceLink(name: string, filename: string, change: Partial<PageLink>): void {
    const links = this.projects.get(normalize(name))!;
    const i = links.findIndex((l) => l.filename === filename);
    links[i] = { ...links[i]!, ...change };
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** PyPI's HTML: absolute links, `#sha256=`, `data-dist-info-metadata` and `data-core-metadata`. */
  private htmlPage(name: string, links: PageLink[]): string {
    const anchors = links.map((l) => {
      let attrs = `href="${escapeAttr(`${l.href}#sha256=${l.sha256}`)}"`;
      if (l.requiresPython !== undefined) attrs += ` data-requires-python="${escapeAttr(l.requiresPython)}"`;
      if (l.yanked !== undefined) attrs += ` data-yanked="${l.yanked === true ? '' : escapeAttr(l.yanked)}"`;
      if (l.filename.endsWith('.whl')) attrs += ` data-dist-info-metadata="sha256=${'0'.repeat(64)}" data-core-metadata="sha256=${'0'.repeat(64)}"`;
      return `    <a ${attrs}>${l.filename}</a><br />`;
    });
    return `<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.1">\n    <title>Links for ${name}</title>\n  </head>\n  <body>\n    <h1>Links for ${name}</h1>\n${anchors.join('\n')}\n  </body>\n</html>\n<!--SERIAL 1-->\n`;
  }

  /** PyPI's JSON (api-version 1.1): `versions`, `size`, `core-metadata`, `data-dist-info-metadata`. */
  private jsonPage(name: string, links: PageLink[]): string {
    return JSON.stringify({
      meta: { '_last-serial': 1, 'api-version': '1.1' },
      name,
      versions: [...new Set(links.map((l) => l.version))],
      files: links.map((l) => ({
        filename: l.filename,
        url: l.href,
        hashes: { sha256: l.sha256 },
        'requires-python': l.requiresPython ?? null,
        yanked: l.yanked ?? false,
        size: 1,
        'upload-time': '2026-01-01T00:00:00.000000Z',
        ...(l.filename.endsWith('.whl')
          ? { 'core-metadata': { sha256: '0'.repeat(64) }, 'data-dist-info-metadata': { sha256: '0'.repeat(64) } }
          : { 'core-metadata': false }),
      })),
    });
  }
}
