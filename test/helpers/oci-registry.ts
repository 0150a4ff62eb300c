/**
 * A real container registry for tests and benches: Debian's `docker-registry`
 * (the distribution registry) on 127.0.0.1 with filesystem storage in a temp
 * dir, OCI image layouts made from generated layers, and Debian's `skopeo`
 * to push them and to pull through the gateway.
 *
 * Owns: the registry process it starts (`stop` ends it by its PID) and the
 * files below the directories it is given. Everything is on 127.0.0.1.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createGzip, gzipSync } from 'node:zlib';

export interface Run { status: number | null; stdout: string; stderr: string }

/** Runs a command without blocking the event loop, bounded in time. */
export function runAsync(cmd: string, args: string[], timeoutMs = 120_000, env: NodeJS.ProcessEnv = process.env): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => { stdout += d; });
    child.stderr.on('data', (d: Buffer) => { stderr += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

/** `skopeo` with TLS off towards 127.0.0.1 (the registry and the gateway speak plain HTTP) and no policy file needed. */
export function skopeo(args: string[], timeoutMs = 120_000): Promise<Run> {
  return runAsync('skopeo', ['--insecure-policy', ...args], timeoutMs);
}

export class Registry {
  private constructor(readonly child: ChildProcess, readonly url: string, readonly host: string, readonly storage: string, private readonly log: () => string) {}

  /**
   * Starts the registry with a config file written into `dir` (storage in
   * `dir/storage`); `htpasswd`: a file of bcrypt entries (`htpasswd -B`) the
   * registry asks Basic credentials against (`auth: htpasswd`).
   */
  static async start(dir: string, opts: { htpasswd?: string } = {}): Promise<Registry> {
    mkdirSync(dir, { recursive: true });
    const storage = join(dir, 'storage');
    const config = join(dir, 'registry.yml');
    writeFileSync(config, [
      'version: 0.1', 'log:', '  level: info', '  accesslog:', '    disabled: true',
      'storage:', '  filesystem:', `    rootdirectory: ${storage}`, '  delete:', '    enabled: true',
      'http:', '  addr: 127.0.0.1:0', '  secret: vouch-test-secret',
      ...(opts.htpasswd !== undefined ? ['auth:', '  htpasswd:', '    realm: vouch-test', `    path: ${opts.htpasswd}`] : []), '',
    ].join('\n'));
    const child = spawn('docker-registry', ['serve', config], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => { out += d; });
    child.stderr!.on('data', (d: Buffer) => { out += d; });
    const deadline = Date.now() + 20_000;
    for (;;) {
      const m = /listening on (127\.0\.0\.1:\d+)/.exec(out);
      if (m !== null) return new Registry(child, `http://${m[1]}`, m[1]!, storage, () => out);
      if (child.exitCode !== null || Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`docker-registry did not start:\n${out}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** The file the registry keeps a blob's bytes in. */
  blobFile(digest: string): string {
    const hex = digest.slice('sha256:'.length);
    return join(this.storage, 'docker/registry/v2/blobs/sha256', hex.slice(0, 2), hex, 'data');
  }

  output(): string {
    return this.log();
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGTERM');
    const t = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(t);
  }
}

export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
const LAYER = 'application/vnd.oci.image.layer.v1.tar+gzip';

export interface Descriptor { mediaType: string; digest: string; size: number; platform?: { architecture: string; os: string }; annotations?: Record<string, string> }

/** An OCI image layout being written (blobs by digest, index.json at `close`). */
export class Layout {
  private readonly refs: Descriptor[] = [];
  constructor(readonly dir: string) {
    mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true });
    writeFileSync(join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  }

  blob(bytes: Buffer, mediaType: string): Descriptor {
    const hex = createHash('sha256').update(bytes).digest('hex');
    writeFileSync(join(this.dir, 'blobs', 'sha256', hex), bytes);
    return { mediaType, digest: `sha256:${hex}`, size: bytes.length };
  }

  /**
   * A gzip layer (stored blocks, level 0: as large as its content, made
   * fast, and left as it is by skopeo, which compresses only what is not
   * compressed) of `size` generated bytes from `seed`, streamed to disk:
   * never held in memory.
   */
  async bigLayer(size: number, seed: number): Promise<Descriptor> {
    const tmp = join(this.dir, 'blobs', `tmp-${seed}`);
    const hash = createHash('sha256');
    const gz = createGzip({ level: 0 });
    const out = createWriteStream(tmp);
    let written = 0;
    gz.on('data', (c: Buffer) => {
      hash.update(c);
      written += c.length;
      if (!out.write(c)) {
        gz.pause();
        out.once('drain', () => gz.resume());
      }
    });
    const ended = new Promise<void>((resolve, reject) => {
      gz.on('end', () => out.end((e?: Error | null) => (e ? reject(e) : resolve())));
      gz.on('error', reject);
    });
    const chunk = Buffer.alloc(1024 * 1024);
    for (let done = 0; done < size;) {
      const n = Math.min(chunk.length, size - done);
      for (let i = 0; i < n; i += 4) chunk.writeUInt32LE((Math.imul(done + i, 2654435761) + seed) >>> 0, i);
      if (!gz.write(Buffer.from(chunk.subarray(0, n)))) await new Promise((r) => gz.once('drain', r));
      done += n;
    }
    gz.end();
    await ended;
    const hex = hash.digest('hex');
    renameSync(tmp, join(this.dir, 'blobs', 'sha256', hex));
    return { mediaType: LAYER, digest: `sha256:${hex}`, size: written };
  }

  /** An image manifest of these layers (a config naming their digests), for a platform. */
  image(layers: Descriptor[], platform = { architecture: 'amd64', os: 'linux' }): Descriptor {
    const config = this.blob(Buffer.from(JSON.stringify({
      architecture: platform.architecture, os: platform.os, rootfs: { type: 'layers', diff_ids: layers.map((l) => l.digest) }, config: {},
    })), 'application/vnd.oci.image.config.v1+json');
    const manifest = { schemaVersion: 2, mediaType: OCI_MANIFEST, config, layers };
    return { ...this.blob(Buffer.from(JSON.stringify(manifest)), OCI_MANIFEST), platform };
  }

  /** An image index of platform manifests. */
  index(manifests: Descriptor[]): Descriptor {
    return this.blob(Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: OCI_INDEX, manifests })), OCI_INDEX);
  }

  /** Names a manifest or index `tag` in index.json. */
  tag(d: Descriptor, tag: string): void {
    const { platform: _p, ...plain } = d;
    this.refs.push({ ...plain, annotations: { 'org.opencontainers.image.ref.name': tag } });
    writeFileSync(join(this.dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: this.refs }));
  }
}

/** A ustar archive of `files` (regular files, mode 0644): a layer a container engine can unpack. */
export function tarOf(files: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  for (const [name, text] of Object.entries(files)) {
    const body = Buffer.from(text);
    const h = Buffer.alloc(512);
    h.write(name, 0, 100);
    h.write('0000644\0', 100);
    h.write('0000000\0', 108);
    h.write('0000000\0', 116);
    h.write(`${body.length.toString(8).padStart(11, '0')}\0`, 124);
    h.write(`${Math.floor(Date.UTC(2026, 0, 1) / 1000).toString(8).padStart(11, '0')}\0`, 136);
    h.write('        ', 148);
    h.write('0', 156);
    h.write('ustar\0', 257);
    h.write('00', 263);
    let sum = 0;
    for (const b of h) sum += b;
    h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    parts.push(h, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

/** An image of one real tar layer (gzip), its config naming the tar's digest as diff_id: what podman can unpack. */
export function tarImage(layout: Layout, files: Record<string, string>): { manifest: Descriptor; layer: Descriptor } {
  const tar = tarOf(files);
  const layer = layout.blob(gzipSync(tar), LAYER);
  const config = layout.blob(Buffer.from(JSON.stringify({
    architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: [`sha256:${createHash('sha256').update(tar).digest('hex')}`] }, config: {},
  })), 'application/vnd.oci.image.config.v1+json');
  const manifest = layout.blob(Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: OCI_MANIFEST, config, layers: [layer] })), OCI_MANIFEST);
  return { manifest, layer };
}

/** A small gzip layer of generated bytes. */
export function smallLayer(layout: Layout, text: string, size = 64 * 1024): Descriptor {
  const b = Buffer.alloc(size);
  for (let i = 0; i < size; i++) b[i] = text.charCodeAt(i % text.length) ^ (i >> 8);
  return layout.blob(gzipSync(b, { level: 0 }), LAYER);
}

/** Pushes `oci:dir:tag` to the registry as `repo:tag` (`all`: every platform of an index). */
export async function push(layoutDir: string, tag: string, registry: Registry, repo: string, all = false): Promise<void> {
  const r = await skopeo(['copy', ...(all ? ['--all'] : []), '--dest-tls-verify=false', `oci:${layoutDir}:${tag}`, `docker://${registry.host}/${repo}:${tag}`]);
  if (r.status !== 0) throw new Error(`skopeo push of ${repo}:${tag} failed: ${r.stderr}`);
}
