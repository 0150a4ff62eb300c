/**
 * Image references for `vouch endorse --oci`: parsing `[registry/]name[:tag][@digest]`
 * as Docker and containerd read it (docker.io and library/ filled in), the
 * references of a file (one a line, or the `image:` fields of a compose file
 * or Kubernetes manifests), and resolving a tag to its manifest digest at
 * the registry (the anonymous bearer-token flow when it asks for one).
 *
 * Owns: those grammars and the registry client, bounded in bytes (file,
 * manifest, token answer), depth and nodes (YAML) and time (per request).
 * Trusts: nothing of the file or the registry: the digest is the sha256 of
 * the manifest bytes received, checked against what the registry claims.
 * Must hold: every failure is a VouchError naming the reference.
 */
import { createHash } from 'node:crypto';
import { Agent, type Dispatcher } from 'undici';
import { parseAllDocuments } from 'yaml';
import { VouchError } from '../../chain/errors.ts';
import { isSemver, isUnitName } from '../../chain/block.ts';
import { MANIFEST_ACCEPT, MAX_MANIFEST_BYTES, TAG, DIGEST, isRepository, manifestUrl, parseChallenge, parseManifest } from '../../gateway/ecosystems/oci.ts';
import type { OriginMap } from './http.ts';
import { readBounded } from '../../artifacts/read-bounded.ts';
import { checkJsonShape } from '../../artifacts/json-shape.ts';
import { flowShape, lineColumn } from '../../artifacts/yaml-shape.ts';

/** 127.0.0.0/8, ::1 and localhost: where plain http stays on this machine. */
function isLoopbackHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** Largest file of references read, and the most references it may hold. */
export const MAX_REF_FILE_BYTES = 4 * 1024 * 1024;
export const MAX_REFS = 10_000;
const MAX_YAML_DEPTH = 64;
const MAX_YAML_NODES = 200_000;
const MAX_TOKEN_BYTES = 64 * 1024;

export interface ImageRef {
  /** As written. */
  text: string;
  /** The registry's host (and port) as named: `docker.io`, `ghcr.io`, `127.0.0.1:5000`. */
  registry: string;
  /** `http` only when the reference says `http://` (a registry on plain HTTP); else `https`. */
  scheme: 'https' | 'http';
  /** The repository: `library/alpine`. */
  repo: string;
  tag: string | null;
  digest: string | null;
}

/**
 * Parses an image reference. A first component with a `.` or `:`, or
 * `localhost`, is the registry; otherwise docker.io, where a one-component
 * name is under `library/`. No tag and no digest: `latest`. A leading
 * `http://` names a registry on plain HTTP (`https://` is the default).
 * @throws VouchError bad_request naming the reference.
 */
export function parseImageRef(text: string): ImageRef {
  const bad = (why: string): never => {
    throw new VouchError('bad_request', `image reference ${JSON.stringify(text.slice(0, 300))}: ${why}`);
  };
  if (text.length === 0 || text.length > 512 || /\s/.test(text)) bad('empty, longer than 512 characters or with white space');
  const scheme = text.startsWith('http://') ? 'http' : 'https';
  const schemed = /^https?:\/\//.test(text);
  let rest = text.replace(/^https?:\/\//, '');
  let digest: string | null = null;
  const at = rest.indexOf('@');
  if (at !== -1) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) bad('the digest is not sha256:<64 hex> or sha512:<128 hex>');
  }
  let tag: string | null = null;
  const slash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > slash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) bad('the tag is not [A-Za-z0-9_][A-Za-z0-9._-]{0,127}');
  }
  const parts = rest.split('/');
  let registry = 'docker.io';
  if (parts.length > 1 && (/[.:]/.test(parts[0]!) || parts[0] === 'localhost')) registry = parts.shift()!;
  else if (schemed) bad('a reference with a scheme must name its registry');
  if (!/^[A-Za-z0-9.-]+(?::\d{1,5})?$/.test(registry)) bad('the registry is not a host name with an optional port');
  registry = registry.toLowerCase();
  if (registry === 'index.docker.io') registry = 'docker.io';
  let repo = parts.join('/');
  if (registry === 'docker.io' && parts.length === 1) repo = `library/${repo}`;
  if (!isRepository(repo)) bad('the repository name is not lower-case components ([a-z0-9] separated by . _ __ -) joined by /');
  if (tag === null && digest === null) tag = 'latest';
  return { text, registry, scheme, repo, tag, digest };
}

/** The base URL of a registry's API as endorsed: https (unless the reference said http://), docker.io's at registry-1.docker.io. */
export function registryBase(ref: Pick<ImageRef, 'registry' | 'scheme'>): string {
  return `${ref.scheme}://${ref.registry === 'docker.io' ? 'registry-1.docker.io' : ref.registry}/`;
}

/** The canonical URL a reference is endorsed as: its tag's manifest URL (its digest's when it names no tag). */
export function refUrl(ref: ImageRef): string {
  return manifestUrl(registryBase(ref), ref.repo, ref.tag ?? ref.digest!);
}

/** The unit name of an image: `oci/<repository, / as +>` (cut to fit), or `oci/image`. */
export function imageUnitName(repo: string): string {
  const name = `oci/${repo.replace(/\//g, '+').slice(0, 128)}`;
  return isUnitName(name) ? name : 'oci/image';
}

/** The semver an image entry is endorsed under: the tag when it is SemVer (a leading v dropped), else `0.0.0-<algorithm>.<first 12 hex of the digest>`. */
export function imageSemver(tag: string | null, digest: string): string {
  const t = tag?.replace(/^v(?=\d)/, '');
  if (t !== undefined && isSemver(t)) return t;
  const [alg, hex] = digest.split(':') as [string, string];
  return `0.0.0-${alg}.${hex.slice(0, 12)}`;
}

/**
 * The image references of a file: the `image:` string fields anywhere in a
 * YAML file (compose services, Kubernetes containers and initContainers,
 * every document), else one reference a line (`#` comments and blank lines
 * skipped). Order kept, duplicates dropped.
 * @throws VouchError too_large / bad_request.
 */
export function readImageRefs(text: string, fileName: string): string[] {
  if (Buffer.byteLength(text) > MAX_REF_FILE_BYTES) throw new VouchError('too_large', `${fileName} is larger than ${MAX_REF_FILE_BYTES} bytes`);
  const out = new Set<string>();
  const add = (s: string) => {
    out.add(s);
    if (out.size > MAX_REFS) throw new VouchError('too_large', `${fileName} names more than ${MAX_REFS} images`);
  };
  if (/^\s*[A-Za-z0-9_"'-]+\s*:(\s|$)/m.test(text) || /\.(ya?ml)$/i.test(fileName)) {
    const shape = flowShape(text);
    if (shape.depth > MAX_YAML_DEPTH) throw new VouchError('too_large', `${fileName}: YAML nested deeper than ${MAX_YAML_DEPTH}`);
    // Each node but the first follows a line break or a comma: the parser's work (about linear in nodes) is bounded before it starts.
    if (shape.separators > MAX_YAML_NODES)
      throw new VouchError('too_large', `${fileName}: more than ${MAX_YAML_NODES} YAML lines, flow items and mapping colons`);
    // prettyErrors: false: the library's pretty message of each error rescans the text (quadratic in errors).
    const docs = parseAllDocuments(text, { uniqueKeys: false, prettyErrors: false });
    const list = Array.isArray(docs) ? docs : [docs];
    let nodes = 0;
    const walk = (v: unknown, depth: number): void => {
      if (++nodes > MAX_YAML_NODES) throw new VouchError('too_large', `${fileName}: more than ${MAX_YAML_NODES} YAML nodes`);
      if (depth > MAX_YAML_DEPTH) throw new VouchError('too_large', `${fileName}: YAML nested deeper than ${MAX_YAML_DEPTH}`);
      if (Array.isArray(v)) for (const x of v) walk(x, depth + 1);
      else if (v !== null && typeof v === 'object') {
        for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
          if (k === 'image' && typeof x === 'string') add(x.trim());
          else walk(x, depth + 1);
        }
      }
    };
    for (const d of list) {
      if (d.errors.length > 0) {
        const { line, col } = lineColumn(text, d.errors[0]!.pos[0]);
        throw new VouchError('bad_request', `${fileName}: not YAML: ${d.errors[0]!.message.split('\n')[0]} at line ${line}, column ${col}`);
      }
      let js: unknown;
      try {
        js = d.toJS({ maxAliasCount: 100 });
      } catch (e) {
        throw new VouchError('bad_request', `${fileName}: ${(e as Error).message.split('\n')[0]}`);
      }
      walk(js, 0);
    }
  } else {
    for (const raw of text.split(/\r?\n/)) {
      const line = raw.replace(/#.*$/, '').trim();
      if (line !== '') add(line);
    }
  }
  if (out.size === 0)
    throw new VouchError('bad_request', `${fileName} names no image (one reference a line, or image: fields of a compose file or Kubernetes manifests)`);
  return [...out];
}

/** Largest registry credentials file read. */
export const MAX_AUTH_FILE_BYTES = 1024 * 1024;

/**
 * `user:password` for a registry's host, from a credentials file: Docker's
 * `config.json` (`{"auths": {"<registry>": {"auth": base64(user:password)}
 * or {"username", "password"}}}`; keys as `docker login` writes them, with
 * or without a scheme, docker.io as `https://index.docker.io/v1/`), or the
 * one line `user:password` a gateway route's `credentials_file` holds, then
 * for the one registry every reference names. Never logged or echoed.
 */
export class RegistryAuth {
  private constructor(
    private readonly byHost: ReadonlyMap<string, string>,
    private readonly any: string | null,
  ) {}

  /**
   * Reads `text` (the file `name`) for `refs`.
   * @throws VouchError bad_request (not one of the two forms, an entry that
   * is not user:password, the one-line form with references to several
   * registries) or too_large.
   */
  static parse(text: string, name: string, refs: readonly ImageRef[]): RegistryAuth {
    if (Buffer.byteLength(text) > MAX_AUTH_FILE_BYTES) throw new VouchError('too_large', `${name} is larger than ${MAX_AUTH_FILE_BYTES} bytes`);
    const bad = (why: string): never => {
      throw new VouchError('bad_request', `${name}: ${why}`);
    };
    const pair = (v: string, what: string): string => (/^[^:\s]+:[^\r\n]+$/.test(v) ? v : bad(`${what} is not user:password`));
    const trimmed = text.replace(/^\uFEFF/, '').trim();
    if (!trimmed.startsWith('{')) {
      if (trimmed.includes('\n')) bad('holds more than one line: one line user:password, or Docker\'s config.json ({"auths": {...}})');
      const registries = new Set(refs.map((r) => r.registry));
      if (registries.size > 1)
        bad(
          `the one-line form (user:password) is for one registry, and the references name ${registries.size}: use Docker's config.json form ({"auths": {"<registry>": {"auth": "..."}}})`,
        );
      return new RegistryAuth(new Map(), pair(trimmed, 'its line'));
    }
    let doc: unknown;
    try {
      checkJsonShape(trimmed, { maxValues: 100_000, maxDepth: 16, maxString: 64 * 1024 });
      doc = JSON.parse(trimmed);
    } catch {
      return bad("not JSON (Docker's config.json) and not one line user:password");
    }
    const auths = (doc as { auths?: unknown } | null)?.auths;
    if (auths === null || typeof auths !== 'object' || Array.isArray(auths)) return bad('has no "auths" object (Docker\'s config.json)');
    const byHost = new Map<string, string>();
    for (const [key, v] of Object.entries(auths as Record<string, unknown>)) {
      const host = authHost(key);
      if (host === null || v === null || typeof v !== 'object') continue;
      const e = v as { auth?: unknown; username?: unknown; password?: unknown };
      if (typeof e.auth === 'string' && e.auth !== '')
        byHost.set(host, pair(Buffer.from(e.auth, 'base64').toString('utf8'), `auths[${JSON.stringify(key.slice(0, 100))}].auth`));
      else if (typeof e.username === 'string' && typeof e.password === 'string')
        byHost.set(host, pair(`${e.username}:${e.password}`, `auths[${JSON.stringify(key.slice(0, 100))}]`));
    }
    return new RegistryAuth(byHost, null);
  }

  /** `user:password` for the registry `ref` names (else the host fetched from), or null. */
  for(ref: ImageRef, fetchHost: string): string | null {
    return this.any ?? this.byHost.get(ref.registry) ?? this.byHost.get(fetchHost.toLowerCase()) ?? null;
  }
}

/** A config.json `auths` key as a registry host (docker.io for Docker Hub's spellings), or null. */
function authHost(key: string): string | null {
  let host = key
    .trim()
    .toLowerCase()
    .replace(/^[a-z]+:\/\//, '');
  host = host.split('/')[0] ?? '';
  if (!/^[a-z0-9.-]+(?::\d{1,5})?$/.test(host)) return null;
  return host === 'index.docker.io' || host === 'registry-1.docker.io' ? 'docker.io' : host;
}

/** A resolved reference: the URL to endorse and the digest of the manifest bytes the registry serves. */
export interface Resolved {
  ref: ImageRef;
  url: string;
  digest: string;
  mediaType: string;
  bytes: number;
}

/** Reads a registry's manifests (token flow, bounds, a timeout per request). */
export class RegistryClient {
  private readonly agent = new Agent({ connect: { timeout: 10_000 }, headersTimeout: 30_000, bodyTimeout: 30_000 });
  private readonly tokens = new Map<string, string>();

  constructor(
    private readonly origins: OriginMap,
    private readonly auth: RegistryAuth | null = null,
  ) {}

  async close(): Promise<void> {
    await this.agent.close();
  }

  /** The digest `ref` names at its registry now (a tag resolved; a digest checked to exist). */
  async resolve(ref: ImageRef): Promise<Resolved> {
    const url = refUrl(ref);
    const fetchUrl = this.origins.fetchUrl(url);
    const bytes = await this.getManifest(fetchUrl, ref);
    const digest = `sha256:${createHash('sha256').update(bytes.body).digest('hex')}`;
    const claimed = bytes.digestHeader;
    if (claimed?.startsWith('sha256:') && claimed !== digest) {
      throw new VouchError('hash_mismatch', `${ref.text}: the registry says ${claimed} but its manifest bytes hash to ${digest}`, { resource: url });
    }
    if (ref.digest?.startsWith('sha256:') && ref.digest !== digest) {
      throw new VouchError(
        'hash_mismatch',
        `${ref.text}: ${ref.tag === null ? 'the manifest' : `the tag ${ref.tag}`} is ${digest} at the registry, not the digest named`,
        { resource: url },
      );
    }
    let facts;
    try {
      facts = parseManifest(bytes.body);
    } catch (e) {
      throw new VouchError('bad_request', `${ref.text}: ${(e as Error).message}`, { resource: url });
    }
    return { ref, url, digest, mediaType: facts.mediaType, bytes: bytes.body.length };
  }

  private async getManifest(fetchUrl: string, ref: ImageRef): Promise<{ body: Buffer; digestHeader: string | null }> {
    const u = new URL(fetchUrl);
    for (let attempt = 0; ; attempt++) {
      const key = `${u.host} ${ref.repo}`;
      const token = this.tokens.get(key);
      const res = await this.request(u, { accept: MANIFEST_ACCEPT, ...(token !== undefined ? { authorization: token } : {}) }, ref);
      if (res.statusCode === 401 && attempt === 0) {
        const ch = res.headers['www-authenticate'];
        res.body.resume();
        if (typeof ch !== 'string')
          throw new VouchError('origin_error', `${ref.text}: the registry asks for authentication and says not how`, { resource: fetchUrl });
        this.tokens.set(key, await this.token(ch, ref, u));
        continue;
      }
      if (res.statusCode !== 200) {
        res.body.resume();
        const hint =
          res.statusCode === 401 || res.statusCode === 403
            ? (this.auth?.for(ref, u.host) ?? null) === null
              ? ' (a private registry: give its credentials with --registry-auth FILE)'
              : ' (the credentials of --registry-auth were refused)'
            : '';
        throw new VouchError('origin_error', `${ref.text}: the registry answered ${res.statusCode} for ${fetchUrl}${hint}`, {
          resource: fetchUrl,
          evidence: { status: res.statusCode },
        });
      }
      const body = await readBounded(res.body, MAX_MANIFEST_BYTES, `${ref.text}: the manifest`);
      const h = res.headers['docker-content-digest'];
      return { body, digestHeader: typeof h === 'string' ? h : null };
    }
  }

  private async request(u: URL, headers: Record<string, string>, ref: ImageRef): Promise<Dispatcher.ResponseData> {
    if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new VouchError('bad_request', `${ref.text}: ${u.href} is not http(s)`);
    try {
      return await this.agent.request({ origin: u.origin, path: u.pathname + u.search, method: 'GET', headers: { 'user-agent': 'vouch-endorse', ...headers } });
    } catch (e) {
      const code = (e as { code?: string }).code ?? '';
      throw new VouchError(/TIMEOUT/.test(code) ? 'origin_timeout' : 'origin_error', `${ref.text}: cannot reach ${u.host}: ${code || (e as Error).message}`, {
        resource: u.href,
      });
    }
  }

  /**
   * The `authorization` for the reference's repository: a pull token from the
   * challenge's realm (asked for with the reference's credentials when there
   * are some, else anonymously), or the credentials themselves when the
   * registry asks for Basic.
   */
  private async token(challenge: string, ref: ImageRef, registry: URL): Promise<string> {
    const ch = parseChallenge(challenge);
    const creds = this.auth?.for(ref, registry.host) ?? null;
    const basic = creds === null ? null : `Basic ${Buffer.from(creds).toString('base64')}`;
    if (ch.scheme === 'basic') {
      if (basic === null) throw new VouchError('origin_error', `${ref.text}: the registry asks for a user and password: give them with --registry-auth FILE`);
      if (registry.protocol !== 'https:' && !isLoopbackHost(registry.hostname))
        throw new VouchError('origin_error', `${ref.text}: the registry asks for a password over plain http; sent only over https (or to a loopback address)`);
      return basic;
    }
    if (ch.scheme !== 'bearer' || ch.params.realm === undefined) {
      throw new VouchError(
        'origin_error',
        `${ref.text}: the registry asks for ${ch.scheme} authentication; only bearer tokens and basic credentials are supported`,
      );
    }
    let realm: URL;
    try {
      realm = new URL(ch.params.realm);
    } catch {
      throw new VouchError('origin_error', `${ref.text}: the token realm is not a URL`);
    }
    if (realm.protocol !== 'https:' && realm.host !== registry.host)
      throw new VouchError('origin_error', `${ref.text}: the token realm must be https or on the registry's host`);
    if (ch.params.service !== undefined) realm.searchParams.set('service', ch.params.service);
    realm.searchParams.set('scope', `repository:${ref.repo}:pull`);
    if (basic !== null && realm.protocol !== 'https:' && !isLoopbackHost(realm.hostname))
      throw new VouchError('origin_error', `${ref.text}: the token realm is plain http; credentials are sent only over https (or to a loopback address)`);
    const res = await this.request(realm, { accept: 'application/json', ...(basic !== null ? { authorization: basic } : {}) }, ref);
    if (res.statusCode !== 200) {
      res.body.resume();
      throw new VouchError(
        'origin_error',
        `${ref.text}: the token service answered ${res.statusCode}${res.statusCode === 401 || res.statusCode === 403 ? (basic === null ? ' (a private registry: give its credentials with --registry-auth FILE)' : ' (the credentials of --registry-auth were refused)') : ''}`,
      );
    }
    const body = await readBounded(res.body, MAX_TOKEN_BYTES, `${ref.text}: the token answer`);
    let t: unknown;
    try {
      const doc = JSON.parse(body.toString('utf8')) as { token?: unknown; access_token?: unknown };
      t = doc.token ?? doc.access_token;
    } catch {
      throw new VouchError('origin_error', `${ref.text}: the token answer is not JSON`);
    }
    if (typeof t !== 'string' || !/^[\x21-\x7e]{1,8192}$/.test(t)) throw new VouchError('origin_error', `${ref.text}: the token answer holds no token`);
    return `Bearer ${t}`;
  }
}
