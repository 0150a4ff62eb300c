/**
 * A small npm registry for tests (node:http on 127.0.0.1), enough for the
 * real npm CLI: full and abbreviated packuments, scoped names, tarballs at
 * `/<name>/-/<basename>-<version>.tgz` with absolute tarball URLs.
 * Owns: its packages, their tarballs (real `npm pack`, offline), a record
 * of every request.
 * Must hold: loopback only; `close()` destroys every socket; a tampered
 * tarball gets a matching integrity in the packument (only the gateway can
 * tell).
 * Usage:
 *   const reg = await NpmRegistry.start(tmpDir);
 *   await reg.publish('leftpad', '1.0.0', { 'index.js': 'module.exports = 1\n' });
 *   reg.alias('leftpad', '9.9.9', '1.0.0');
 *   await reg.tamper('leftpad', '1.0.0', { 'index.js': 'evil\n' });
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';

export const ABBREVIATED = 'application/vnd.npm.install-v1+json';

export interface RegistryRequest {
  method: string;
  path: string;
  userAgent: string;
  accept: string;
}

interface Version {
  manifest: Record<string, unknown>;
  /** The tarball file name this version lists (another version's for an alias). */
  file: string;
  published: string;
}

interface Package {
  versions: Map<string, Version>;
  latest: string;
  created: string;
}

/** The environment npm runs with here: no inherited npm_* settings, no proxies. */
export function cleanNpmEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^npm_/i.test(k) || /^(https?|all|no)_proxy$/i.test(k)) continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

/** The npm CLI that ships with this Node. */
export const NPM_CLI = join(dirname(process.execPath), 'npm');

export interface NpmRun {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the real npm CLI (without blocking the event loop: the registry may be in this process), bounded in time. */
export function runNpm(args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<NpmRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(NPM_CLI, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

/**
 * A package tarball made in this process, laid out as `npm pack` lays it out
 * (ustar entries under `package/`, gzip), with a package.json for
 * `name`@`version`: for tests that need many packages, where one `npm pack`
 * each would take minutes.
 */
export function tinyTarball(name: string, version: string, files: Record<string, string>): Buffer {
  const all = { 'package.json': JSON.stringify({ name, version, description: `${name} for tests`, main: 'index.js', license: 'MIT' }, null, 2), ...files };
  const parts: Buffer[] = [];
  for (const [path, text] of Object.entries(all)) {
    const data = Buffer.from(text);
    const h = Buffer.alloc(512);
    const field = (value: string, at: number, len: number) => h.write(value.slice(0, len), at, len, 'latin1');
    field(`package/${path}`, 0, 100);
    field('0000644\0', 100, 8);
    field('0000000\0', 108, 8);
    field('0000000\0', 116, 8);
    field(data.length.toString(8).padStart(11, '0') + '\0', 124, 12);
    field('14707256500\0', 136, 12); // 1985-10-26, as npm pack writes
    field('        ', 148, 8);
    field('0', 156, 1);
    field('ustar\0', 257, 6);
    field('00', 263, 2);
    let sum = 0;
    for (const b of h) sum += b;
    field(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8);
    parts.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return gzipSync(Buffer.concat(parts));
}

export class NpmRegistry {
  readonly requests: RegistryRequest[] = [];
  private readonly packages = new Map<string, Package>();
  private readonly files = new Map<string, Buffer>();
  private readonly sockets = new Set<Socket>();
  private clock = Date.UTC(2026, 0, 1);

  private constructor(
    private readonly server: Server,
    readonly port: number,
    private readonly work: string,
  ) {}

  /** Starts the registry; tarballs are built under `dir`. */
  static async start(dir: string): Promise<NpmRegistry> {
    const work = mkdtempSync(join(dir, 'npm-registry-'));
    let registry: NpmRegistry | null = null;
    const server = createServer((req, res) => registry!.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    registry = new NpmRegistry(server, (server.address() as AddressInfo).port, work);
    server.on('connection', (s) => {
      registry!.sockets.add(s);
      s.on('close', () => registry!.sockets.delete(s));
    });
    return registry;
  }

  /** `http://127.0.0.1:<port>` */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The basename npm gives a package's tarball (`util` for `@acme/util`). */
  static fileOf(name: string, version: string): string {
    return `${name.slice(name.lastIndexOf('/') + 1)}-${version}.tgz`;
  }

  /** The tarball's path on this registry, `/<name>/-/<basename>-<version>.tgz`. */
  static tarballPath(name: string, version: string): string {
    return `/${name}/-/${NpmRegistry.fileOf(name, version)}`;
  }

  tarballUrl(name: string, version: string): string {
    return this.url + NpmRegistry.tarballPath(name, version);
  }

  /** The bytes served for a version's own tarball. */
  tarball(name: string, version: string): Buffer {
    const b = this.files.get(NpmRegistry.tarballPath(name, version));
    if (b === undefined) throw new Error(`no tarball of ${name}@${version}`);
    return b;
  }

  /**
   * Packs `files` (plus a package.json) with the real `npm pack` and adds the
   * version; it becomes `latest` unless `latest: false`.
   */
  async publish(name: string, version: string, files: Record<string, string>, opts: { latest?: boolean } = {}): Promise<Buffer> {
    const bytes = await this.pack(name, version, files);
    const file = NpmRegistry.tarballPath(name, version);
    this.files.set(file, bytes);
    const manifest = { name, version, description: `${name} for tests`, main: 'index.js', license: 'MIT' };
    this.addVersion(name, version, manifest, file, opts.latest ?? true);
    return bytes;
  }

  /** Adds a version whose tarball is `bytes` (from `tinyTarball`); it becomes `latest` unless `latest: false`. */
  publishBytes(name: string, version: string, bytes: Buffer, opts: { latest?: boolean } = {}): void {
    const file = NpmRegistry.tarballPath(name, version);
    this.files.set(file, bytes);
    this.addVersion(name, version, { name, version, description: `${name} for tests`, main: 'index.js', license: 'MIT' }, file, opts.latest ?? true);
  }

  /**
   * Lists `version` with the tarball (and integrity) of `of` (of package
   * `from`, this one unless given): what a hostile registry could do.
   */
  alias(name: string, version: string, of: string, opts: { latest?: boolean; from?: string } = {}): void {
    const file = NpmRegistry.tarballPath(opts.from ?? name, of);
    if (!this.files.has(file)) throw new Error(`no tarball of ${opts.from ?? name}@${of}`);
    this.addVersion(name, version, { name, version, description: `${name} for tests`, main: 'index.js', license: 'MIT' }, file, opts.latest ?? false);
  }

  /** Replaces a version's tarball bytes with a package of other `files`; its packument integrity and shasum follow. */
  async tamper(name: string, version: string, files: Record<string, string>): Promise<Buffer> {
    const bytes = await this.pack(name, version, files);
    if (bytes.equals(this.tarball(name, version))) throw new Error('tampering made the same bytes');
    this.files.set(NpmRegistry.tarballPath(name, version), bytes);
    return bytes;
  }

  /** Requests for `path` seen so far. */
  seen(path: string): RegistryRequest[] {
    return this.requests.filter((r) => r.path === path);
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
    rmSync(this.work, { recursive: true, force: true });
  }

  // -------------------------------------------------------------------------

  private addVersion(name: string, version: string, manifest: Record<string, unknown>, file: string, latest: boolean): void {
    this.clock += 60_000;
    const published = new Date(this.clock).toISOString();
    let pkg = this.packages.get(name);
    if (pkg === undefined) {
      pkg = { versions: new Map(), latest: version, created: published };
      this.packages.set(name, pkg);
    }
    pkg.versions.set(version, { manifest, file, published });
    if (latest) pkg.latest = version;
  }

  private async pack(name: string, version: string, files: Record<string, string>): Promise<Buffer> {
    const dir = mkdtempSync(join(this.work, 'pkg-'));
    const src = join(dir, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'package.json'), JSON.stringify({ name, version, description: `${name} for tests`, main: 'index.js', license: 'MIT' }, null, 2));
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(src, path)), { recursive: true });
      writeFileSync(join(src, path), text);
    }
    const env = cleanNpmEnv({
      NPM_CONFIG_USERCONFIG: join(dir, '.npmrc'),
      NPM_CONFIG_CACHE: join(dir, 'cache'),
      NPM_CONFIG_UPDATE_NOTIFIER: 'false',
      NPM_CONFIG_FUND: 'false',
      NPM_CONFIG_AUDIT: 'false',
    });
    const r = await runNpm(['pack', '--offline', '--json', '--pack-destination', dir], { cwd: src, env });
    if (r.status !== 0) throw new Error(`npm pack failed:\n${r.stderr}`);
    const [info] = JSON.parse(r.stdout) as Array<{ filename: string }>;
    const bytes = readFileSync(join(dir, info!.filename));
    rmSync(dir, { recursive: true, force: true });
    return bytes;
  }

  /** The packument of a package, as the public registry shapes it (full) or abbreviated. */
  private packument(name: string, pkg: Package, abbreviated: boolean): Record<string, unknown> {
    const versions: Record<string, unknown> = {};
    const time: Record<string, string> = { created: pkg.created };
    let modified = pkg.created;
    for (const [version, v] of pkg.versions) {
      const bytes = this.files.get(v.file)!;
      const dist = {
        tarball: this.url + v.file,
        shasum: createHash('sha1').update(bytes).digest('hex'),
        integrity: `sha512-${createHash('sha512').update(bytes).digest('base64')}`,
        fileCount: 2,
        signatures: [{ keyid: 'SHA256:test-registry-key', sig: 'MEUCIQ-not-a-real-signature' }],
      };
      versions[version] = abbreviated ? { name, version, dist, engines: {} } : { ...v.manifest, _id: `${name}@${version}`, dist };
      time[version] = v.published;
      if (v.published > modified) modified = v.published;
    }
    time.modified = modified;
    const tags = { latest: pkg.latest };
    return abbreviated
      ? { name, modified, 'dist-tags': tags, versions }
      : { _id: name, _rev: '1-test', name, description: `${name} for tests`, 'dist-tags': tags, versions, time, license: 'MIT', readme: '' };
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const target = req.url ?? '/';
    const path = target.split('?')[0]!;
    this.requests.push({ method: req.method ?? '', path, userAgent: String(req.headers['user-agent'] ?? ''), accept: String(req.headers.accept ?? '') });
    const notFound = () => {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: 'Not found' }));
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { 'content-type': 'application/json', allow: 'GET, HEAD' });
      res.end('{"error":"method not allowed"}');
      return;
    }
    const file = this.files.get(path);
    if (file !== undefined) {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': file.length });
      res.end(req.method === 'HEAD' ? undefined : file);
      return;
    }
    const name = path.slice(1).replace(/%2f/i, '/');
    const pkg = this.packages.get(name);
    if (pkg === undefined) return notFound();
    const abbreviated = (req.headers.accept ?? '').includes(ABBREVIATED);
    const body = JSON.stringify(this.packument(name, pkg, abbreviated));
    res.writeHead(200, {
      'content-type': abbreviated ? ABBREVIATED : 'application/json',
      'content-length': Buffer.byteLength(body),
      etag: `"${pkg.versions.size}"`,
    });
    res.end(req.method === 'HEAD' ? undefined : body);
  }
}
