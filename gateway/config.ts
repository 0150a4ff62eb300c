/**
 * Gateway configuration (docs/spec/design.md §5): one YAML file, every key
 * optional, snake_case; unknown keys and wrong types are refused at start
 * with a message naming the key. Sizes in bytes, durations in seconds.
 * Owns: the embedded default (`EMBEDDED_DEFAULT`), the merge of a file over
 * it, the strict validation, and the resolved `Config` the gateway reads.
 * Merge rule: objects merge key by key, arrays and scalars (and null)
 * replace; `authority: null` makes a file read-only, and so does naming a
 * chain of its own (`chain.remote`, a `chain.dir` not ./var/chain) without
 * an authority section: the development key signs only the default's chain.
 * Relative paths resolve against the file's directory.
 * Must hold: secrets are referenced by file path only; their contents never
 * enter the Config object.
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { type Document, isScalar, parseDocument, visit } from 'yaml';
import { VouchError } from '../chain/errors.ts';
import { flowShape, lineColumn } from '../artifacts/yaml-shape.ts';
import { base64Decode } from '../chain/encoding.ts';

export type RouteKind = 'plain' | 'npm' | 'pypi' | 'goproxy' | 'maven' | 'oci';

export interface RouteConfig {
  prefix: string | null;
  host: string | null;
  /** Where bytes and metadata are fetched from. */
  origin: string;
  /** The public base the chain endorses URLs under (null: the origin itself). */
  canonical: string | null;
  /** `plain`: artifacts only; `npm`, `pypi`, `goproxy`, `maven`: the package manager's metadata is rewritten too. */
  kind: RouteKind;
  unendorsed: 'deny' | 'pass';
  mode: 'enforce' | 'audit';
  /** Seconds a metadata answer of the origin is reused without asking it again (ecosystem routes). */
  metadata_ttl: number;
  /** Seconds a metadata answer may still be served while the origin fails (ecosystem routes). */
  metadata_max_stale: number;
  /** `kind: oci`: a file holding the upstream registry's `user:password` (read when needed, never logged or served); null: anonymous. */
  credentials_file?: string | null;
}

export interface Config {
  listen: { host: string; port: number };
  public_url: string;
  service_name: string;
  /** origin: the log's name (checkpoint.note line 1 and key name; null: derived from public_url, see `logOrigin`). */
  /**
   * unready_when_stale: /readyz fails (503) past max_staleness (default false: it answers 200 `degraded`, the mirror keeps
   * serving its verified chain); min_size_wait: seconds a request with Vouch-Min-Tree-Size waits for a sync; sync_token_file:
   * the bearer token of POST /v1/sync (null: the endpoint is off). docs/guide/fleet.md.
   */
  chain: {
    dir: string;
    remote: string | null;
    public_key: string | null;
    sync_interval: number;
    max_staleness: number;
    layout: 'sparse';
    origin: string | null;
    unready_when_stale: boolean;
    /** Rewrite a chain git packed (block blobs as deltas) with every object whole after ready (gateway/chain/whole-packs.ts). */
    repack_deltas: boolean;
    /** Keep each block's lookup answer in `.git/vouch-answers.lz4`, built after ready (gateway/cache/answer-store.ts; ~0.43 KB a block, LZ4-compressed). */
    answer_store: boolean;
    min_size_wait: number;
    sync_token_file: string | null;
  };
  /** witnesses: the C2SP tlog-witness endpoints asked to cosign each new checkpoint; policy_file: tlog-policy text (quorum). */
  /**
   * next_key_file: where the private key of a new online key is read when a key statement puts it in force (default
   * `<key_file>.next`, docs/spec/key-events.md); rollover_days: how long after a routine rotation the checkpoint note also
   * carries the previous key's signature.
   */
  authority: {
    key_file: string;
    next_key_file: string;
    rollover_days: number;
    signer: string;
    submit_token_file: string;
    witnesses: WitnessEndpoint[];
    policy_file: string | null;
    /** Mirrors told to sync after each push (POST <url>/v1/sync with the token in token_file). */
    notify: { url: string; token_file: string }[];
  } | null;
  /** Present: this gateway is a C2SP tlog-witness (`POST /add-checkpoint`) for `logs` (and its own chain's log). */
  witness: WitnessConfig | null;
  /** budget_bytes: artifact bytes in memory at once (in flight, held for readers, memory tier); null: 2 × memory_bytes. */
  /** upstream_gateway: another vouch gateway artifact bytes are fetched from first (an origin shield; bytes still verified here). */
  mirror: { memory_bytes: number; disk_dir: string | null; disk_bytes: number; budget_bytes: number | null; upstream_gateway: string | null };
  origin: { timeout: number; max_bytes: number; max_redirects: number; allow_private: boolean };
  proxy: { routes: RouteConfig[] };
  /** Bounds on client connections: seconds to receive a whole request (line, headers, body); open connections; seconds an idle keep-alive connection is kept. */
  clients: { request_timeout: number; max_connections: number; keep_alive_timeout: number };
  /** Where the file came from (null: embedded default). */
  source: string | null;
  /**
   * The authority section is the embedded default's (development key and token under ./var), not written in
   * the file: the gateway creates the key and token on first start, as it does without --config.
   */
  authority_from_default?: boolean;
}

/** A witness the authority asks for cosignatures: its submission prefix and its verifier key (`name+hex8+base64`, type 0x04). */
export interface WitnessEndpoint {
  url: string;
  vkey: string;
}

export interface WitnessConfig {
  /** PKCS#8 PEM ed25519 key the witness cosigns with (vouch keygen). */
  key_file: string;
  /** The witness's key name (default: public_url without its scheme, plus `/witness`). */
  name: string;
  /** JSON file of the latest cosigned (size, root) per log origin, replaced atomically. */
  state_file: string;
  /**
   * Logs it witnesses: a note verifier key (type 0x01), the origin (default:
   * the key's name), and optionally the log's gateway `url`, whose `/v1/keys`
   * the witness reads to follow the log's key events (docs/spec/key-events.md).
   */
  logs: { vkey: string; origin: string | null; url: string | null }[];
}

/** How a configuration key is checked (exported with the schemas for the generated reference, tools/docs-reference.ts). */
export type Kind =
  | { t: 'string'; nullable?: boolean; check?: (s: string) => string | null }
  | { t: 'int'; min: number; max: number; nullable?: boolean }
  | { t: 'number'; min: number; max: number }
  | { t: 'bool' }
  | { t: 'object'; keys: Record<string, Kind>; nullable?: boolean }
  | { t: 'routes' }
  | { t: 'list'; item: Kind; max: number };

const httpUrl = (s: string) => (/^https?:\/\/[^\s/]+/.test(s) && URL.canParse(s) ? null : 'must be an absolute http(s) URL');
const vkeyText = (s: string) => (/^[^\s+]+\+[0-9a-f]{8}\+[A-Za-z0-9+/]+={0,2}$/.test(s) ? null : 'must be a note verifier key name+hex8+base64');
const keyName = (s: string) => (/^[^\s+]{1,256}$/.test(s) ? null : 'must be 1-256 characters without spaces or +');
export const SCHEMA: Record<string, Kind> = {
  listen: { t: 'object', keys: { host: { t: 'string' }, port: { t: 'int', min: 0, max: 65535 } } },
  public_url: { t: 'string', check: httpUrl },
  service_name: { t: 'string', check: (s) => (/^[A-Za-z0-9._-]{1,64}$/.test(s) ? null : 'must be 1-64 letters, digits, . _ -') },
  chain: {
    t: 'object',
    keys: {
      dir: { t: 'string' },
      remote: { t: 'string', nullable: true, check: httpUrl },
      public_key: { t: 'string', nullable: true, check: (s) => (base64Decode(s)?.length === 32 ? null : 'must be base64 of a 32-byte ed25519 public key') },
      sync_interval: { t: 'number', min: 0.1, max: 86_400 },
      max_staleness: { t: 'number', min: 1, max: 31_536_000 },
      layout: {
        t: 'string',
        check: (s) =>
          s === 'sparse'
            ? null
            : s === 'full'
              ? 'the full layout was removed: remove the key or write "sparse"; a chain in the full layout converts when opened for writing (docs/decisions/one-layout.md)'
              : 'must be "sparse", the only layout',
      },
      origin: {
        t: 'string',
        nullable: true,
        check: (s) => (s.length > 0 && !/[\s+\u0000-\u001f\u007f]/.test(s) ? null : 'must be a note key name (no spaces, "+" or control characters)'),
      },
      unready_when_stale: { t: 'bool' },
      repack_deltas: { t: 'bool' },
      answer_store: { t: 'bool' },
      min_size_wait: { t: 'number', min: 0, max: 60 },
      sync_token_file: { t: 'string', nullable: true },
    },
  },
  authority: {
    t: 'object',
    nullable: true,
    keys: {
      key_file: { t: 'string' },
      next_key_file: { t: 'string', nullable: true },
      rollover_days: { t: 'number', min: 0, max: 366 },
      signer: { t: 'string', check: (s) => (/^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$/.test(s) ? null : 'must be 1-128 letters, digits, . _ @ -') },
      submit_token_file: { t: 'string' },
      witnesses: { t: 'list', max: 64, item: { t: 'object', keys: { url: { t: 'string', check: httpUrl }, vkey: { t: 'string', check: vkeyText } } } },
      policy_file: { t: 'string', nullable: true },
      notify: { t: 'list', max: 256, item: { t: 'object', keys: { url: { t: 'string', check: httpUrl }, token_file: { t: 'string' } } } },
    },
  },
  witness: {
    t: 'object',
    nullable: true,
    keys: {
      key_file: { t: 'string' },
      name: { t: 'string', check: keyName },
      state_file: { t: 'string' },
      logs: {
        t: 'list',
        max: 1024,
        item: {
          t: 'object',
          keys: {
            vkey: { t: 'string', check: vkeyText },
            origin: { t: 'string', nullable: true, check: keyName },
            url: { t: 'string', nullable: true, check: httpUrl },
          },
        },
      },
    },
  },
  mirror: {
    t: 'object',
    keys: {
      memory_bytes: { t: 'int', min: 0, max: 2 ** 50 },
      disk_dir: { t: 'string', nullable: true },
      disk_bytes: { t: 'int', min: 0, max: 2 ** 53 - 1 },
      budget_bytes: { t: 'int', min: 0, max: 2 ** 51, nullable: true },
      upstream_gateway: { t: 'string', nullable: true, check: httpUrl },
    },
  },
  origin: {
    t: 'object',
    keys: {
      timeout: { t: 'number', min: 0.1, max: 86_400 },
      max_bytes: { t: 'int', min: 1, max: 2 ** 53 - 1 },
      max_redirects: { t: 'int', min: 0, max: 20 },
      allow_private: { t: 'bool' },
    },
  },
  proxy: { t: 'object', keys: { routes: { t: 'routes' } } },
  clients: {
    t: 'object',
    keys: {
      request_timeout: { t: 'number', min: 0.1, max: 3_600 },
      max_connections: { t: 'int', min: 1, max: 1_000_000 },
      keep_alive_timeout: { t: 'number', min: 0.1, max: 3_600 },
    },
  },
};

export const DEFAULTS = {
  listen: { host: '127.0.0.1', port: 8080 },
  service_name: 'vouch',
  chain: {
    dir: './var/chain',
    remote: null,
    public_key: null,
    sync_interval: 30,
    max_staleness: undefined as number | undefined,
    layout: 'sparse' as const,
    origin: null as string | null,
    unready_when_stale: false,
    repack_deltas: true,
    answer_store: true,
    min_size_wait: 2,
    sync_token_file: null as string | null,
  },
  authority: { key_file: './var/authority.pem', signer: 'vouch-dev', submit_token_file: './var/submit.token', rollover_days: 30 },
  mirror: { memory_bytes: 268_435_456, disk_dir: null, disk_bytes: 10_737_418_240, budget_bytes: null, upstream_gateway: null },
  origin: { timeout: 30, max_bytes: 2_147_483_648, max_redirects: 5, allow_private: false },
  clients: { request_timeout: 30, max_connections: 4096, keep_alive_timeout: 65 },
  witness: { key_file: './var/witness.pem', state_file: './var/witness-state.json' },
} as const;

function bad(path: string, what: string): never {
  throw new VouchError('usage', `config: ${path} ${what}`);
}

function checkValue(v: unknown, kind: Kind, path: string): unknown {
  if (v === null && (('nullable' in kind && kind.nullable) || false)) return null;
  switch (kind.t) {
    case 'string': {
      if (typeof v !== 'string') bad(path, 'must be a string');
      const problem = kind.check?.(v);
      if (problem) bad(path, problem);
      return v;
    }
    case 'int':
      if (typeof v !== 'number' || !Number.isInteger(v)) bad(path, 'must be an integer');
      if (v < kind.min || v > kind.max) bad(path, `must be from ${kind.min} to ${kind.max}`);
      return v;
    case 'number':
      if (typeof v !== 'number' || !Number.isFinite(v)) bad(path, 'must be a number');
      if (v < kind.min || v > kind.max) bad(path, `must be from ${kind.min} to ${kind.max}`);
      return v;
    case 'bool':
      if (typeof v !== 'boolean') bad(path, 'must be true or false');
      return v;
    case 'object': {
      if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(path, 'must be a mapping');
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) {
        const sub = kind.keys[k];
        if (!sub) bad(`${path}.${k}`, `is not a known key (known: ${Object.keys(kind.keys).join(', ')})`);
        out[k] = checkValue(x, sub, `${path}.${k}`);
      }
      return out;
    }
    case 'list': {
      if (!Array.isArray(v)) bad(path, 'must be a list');
      if (v.length > kind.max) bad(path, `must have at most ${kind.max} items`);
      return v.map((x, i) => checkValue(x, kind.item, `${path}[${i}]`));
    }
    case 'routes': {
      if (!Array.isArray(v)) bad(path, 'must be a list');
      return v.map((r, i) => checkRoute(r, `${path}[${i}]`));
    }
  }
}

const ROUTE_KINDS: readonly RouteKind[] = ['plain', 'npm', 'pypi', 'goproxy', 'maven', 'oci'];
export const ROUTE_DEFAULTS = { metadata_ttl: 60, metadata_max_stale: 86_400 } as const;

/** The keys of one proxy route (`proxy.routes[i]`). */
export const ROUTE_SCHEMA: Record<string, Kind> = {
  prefix: {
    t: 'string',
    nullable: true,
    check: (s) =>
      /^\/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*\/$/.test(s) && !s.includes('/../') && !s.includes('/./') ? null : 'must be a path starting and ending with /',
  },
  host: { t: 'string', nullable: true, check: (s) => (/^[A-Za-z0-9.-]+(:\d+)?$/.test(s) ? null : 'must be a host name') },
  origin: { t: 'string', check: httpUrl },
  canonical: { t: 'string', nullable: true, check: httpUrl },
  kind: { t: 'string', check: (s) => (ROUTE_KINDS.includes(s as RouteKind) ? null : `must be one of ${ROUTE_KINDS.join(', ')}`) },
  metadata_ttl: { t: 'number', min: 0, max: 86_400 },
  metadata_max_stale: { t: 'number', min: 0, max: 31_536_000 },
  unendorsed: { t: 'string', check: (s) => (s === 'deny' || s === 'pass' ? null : 'must be deny or pass') },
  mode: { t: 'string', check: (s) => (s === 'enforce' || s === 'audit' ? null : 'must be enforce or audit') },
  credentials_file: { t: 'string', nullable: true, check: (s) => (s.length > 0 ? null : 'must be a file path') },
};

function checkRoute(r: unknown, path: string): RouteConfig {
  const kinds = ROUTE_SCHEMA;
  const o = checkValue(r, { t: 'object', keys: kinds }, path) as Record<string, unknown>;
  if (o.origin === undefined) bad(`${path}.origin`, 'is required');
  if (o.prefix == null && o.host == null) bad(path, 'needs a prefix or a host');
  return {
    prefix: (o.prefix as string | undefined) ?? null,
    host: (o.host as string | undefined) ?? null,
    origin: o.origin as string,
    canonical: (o.canonical as string | null | undefined) ?? null,
    kind: (o.kind as RouteKind | undefined) ?? 'plain',
    metadata_ttl: (o.metadata_ttl as number | undefined) ?? ROUTE_DEFAULTS.metadata_ttl,
    metadata_max_stale: (o.metadata_max_stale as number | undefined) ?? ROUTE_DEFAULTS.metadata_max_stale,
    unendorsed: (o.unendorsed as RouteConfig['unendorsed'] | undefined) ?? 'deny',
    mode: (o.mode as RouteConfig['mode'] | undefined) ?? 'enforce',
    ...(o.credentials_file != null ? { credentials_file: o.credentials_file as string } : {}),
  };
}

/**
 * Validates a parsed YAML document and fills in the defaults of keys it
 * leaves out. `authority` has none here: a document without it is read-only
 * (files get the embedded default's authority from `mergeOverDefault`
 * first). Relative paths resolve against `baseDir`. The gateway prints the
 * resulting mode and chain directory at start (`modeLine` in gateway.ts).
 */
export function resolveConfig(doc: unknown, baseDir: string, source: string | null): Config {
  const raw = (doc === null || doc === undefined ? {} : checkValue(doc, { t: 'object', keys: SCHEMA }, 'config')) as Record<string, any>;
  const path = (p: string) => resolve(baseDir, p);
  const listen = { ...DEFAULTS.listen, ...(raw.listen ?? {}) };
  const chain = { ...DEFAULTS.chain, ...(raw.chain ?? {}) };
  // A mirror is "stale" (not ready) after missing several syncs in a row.
  chain.max_staleness ??= Math.max(120, 4 * chain.sync_interval);
  const authority = raw.authority === undefined || raw.authority === null ? null : { ...DEFAULTS.authority, ...raw.authority };
  const mirror = { ...DEFAULTS.mirror, ...(raw.mirror ?? {}) };
  const hostForUrl = listen.host.includes(':') ? `[${listen.host}]` : listen.host;
  const publicUrl = (raw.public_url ?? `http://${hostForUrl}:${listen.port}`).replace(/\/+$/, '');
  const w = raw.witness ?? null;
  return {
    listen,
    public_url: publicUrl,
    service_name: raw.service_name ?? DEFAULTS.service_name,
    chain: { ...chain, dir: path(chain.dir), sync_token_file: chain.sync_token_file ? path(chain.sync_token_file) : null },
    authority: authority && {
      key_file: path(authority.key_file),
      next_key_file: typeof authority.next_key_file === 'string' ? path(authority.next_key_file) : `${path(authority.key_file)}.next`,
      rollover_days: authority.rollover_days,
      signer: authority.signer,
      submit_token_file: path(authority.submit_token_file),
      witnesses: (authority.witnesses ?? []).map((x: WitnessEndpoint) => ({ url: x.url.replace(/\/+$/, ''), vkey: x.vkey })),
      policy_file: authority.policy_file ? path(authority.policy_file) : null,
      notify: (authority.notify ?? []).map((x: { url: string; token_file: string }) => ({ url: x.url.replace(/\/+$/, ''), token_file: path(x.token_file) })),
    },
    witness: w && {
      key_file: path(w.key_file ?? DEFAULTS.witness.key_file),
      name: w.name ?? `${publicUrl.replace(/^[a-z]+:\/\//i, '')}/witness`,
      state_file: path(w.state_file ?? DEFAULTS.witness.state_file),
      logs: (w.logs ?? []).map((l: { vkey: string; origin?: string | null; url?: string | null }) => ({
        vkey: l.vkey,
        origin: l.origin ?? null,
        url: l.url ? l.url.replace(/\/+$/, '') : null,
      })),
    },
    mirror: {
      ...mirror,
      disk_dir: mirror.disk_dir === null ? null : path(mirror.disk_dir),
      upstream_gateway: mirror.upstream_gateway ? mirror.upstream_gateway.replace(/\/+$/, '') : null,
    },
    origin: { ...DEFAULTS.origin, ...(raw.origin ?? {}) },
    proxy: { routes: raw.proxy?.routes ?? [] },
    clients: { ...DEFAULTS.clients, ...(raw.clients ?? {}) },
    source,
  };
}

/**
 * The log origin (issue 17): `chain.origin`, else `public_url` without its
 * scheme and trailing slashes (`http://127.0.0.1:8080` → `127.0.0.1:8080`).
 */
export function logOrigin(config: Pick<Config, 'chain' | 'public_url'>): string {
  return config.chain.origin ?? config.public_url.replace(/^[A-Za-z][A-Za-z0-9+.-]*:\/\//, '').replace(/\/+$/, '');
}

/**
 * The embedded default as a document: what `vouch serve` runs without
 * --config, what a file is merged over, and what `vouch config init` writes.
 * Authority mode on ./var with a development key and submit token created on
 * first start; loopback and private origins refused (`--dev` allows them).
 */
export const EMBEDDED_DEFAULT = {
  listen: { ...DEFAULTS.listen },
  service_name: DEFAULTS.service_name,
  chain: { dir: DEFAULTS.chain.dir, remote: null, public_key: null, sync_interval: DEFAULTS.chain.sync_interval, layout: DEFAULTS.chain.layout, origin: null },
  authority: { ...DEFAULTS.authority, witnesses: [] as WitnessEndpoint[], policy_file: null },
  witness: null,
  mirror: { ...DEFAULTS.mirror },
  origin: { ...DEFAULTS.origin },
  proxy: { routes: [] as unknown[] },
  clients: { ...DEFAULTS.clients },
} as const;

const isMapping = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `over` laid on `base`: mappings merge key by key; lists, scalars and null replace. */
export function mergeDocs(base: unknown, over: unknown): unknown {
  if (!isMapping(base) || !isMapping(over)) return over === undefined ? base : over;
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = k in base ? mergeDocs(base[k], v) : v;
  return out;
}

/**
 * A file's document merged over the embedded default. The one exception to
 * the merge: a file that names its own chain (`chain.remote`, or a
 * `chain.dir` other than the default's ./var/chain) without an `authority`
 * section stays read-only. The default's development
 * authority belongs to the default's chain under ./var: inherited by a file
 * that names another chain, it would sign a production chain with a fresh
 * development key (or push to the remote a mirror follows).
 */
export function mergeOverDefault(doc: unknown): { doc: unknown; authorityFromDefault: boolean } {
  const file = doc === null || doc === undefined ? {} : doc;
  if (!isMapping(file)) return { doc: file, authorityFromDefault: false };
  const chain = file.chain;
  const defaultDir = (EMBEDDED_DEFAULT.chain as { dir: string }).dir;
  const ownChain =
    isMapping(chain) && ((chain.remote !== undefined && chain.remote !== null) || (chain.dir !== undefined && chain.dir !== null && chain.dir !== defaultDir));
  const base: Record<string, unknown> = { ...EMBEDDED_DEFAULT };
  if (ownChain && !('authority' in file)) base.authority = null;
  return { doc: mergeDocs(base, file), authorityFromDefault: !('authority' in file) && base.authority !== null };
}

/** `--listen`: `PORT`, `HOST:PORT` or `[V6]:PORT`, as the `listen` section it overrides. */
export function parseListen(text: string): { host?: string; port: number } {
  const m = /^(?:(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):)?(\d{1,5})$/.exec(text);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new VouchError('usage', `--listen must be PORT or HOST:PORT (e.g. 127.0.0.1:8081), got ${JSON.stringify(text)}`);
  return m[1] === undefined ? { port } : { host: m[1].replace(/^\[|\]$/g, ''), port };
}

/** What `vouch serve` changes on top of the file (or the embedded default): --dev and --listen. */
export interface ConfigOverrides {
  dev?: boolean;
  listen?: string;
}

function applyOverrides(doc: unknown, o: ConfigOverrides): unknown {
  let out = doc;
  if (o.dev) out = mergeDocs(out, { origin: { allow_private: true } });
  if (o.listen !== undefined) out = mergeDocs(out, { listen: parseListen(o.listen) });
  return out;
}

/** A config file is a few KiB; past these the YAML parser's time grows faster than the input (test/fuzz "growth config"). */
export const CONFIG_MAX_BYTES = 1 << 20;
export const CONFIG_MAX_FLOW_DEPTH = 64;
/** Line breaks, commas and mapping colons (artifacts/yaml-shape.ts): the parser spends ~10 µs on each node or error they make. */
export const CONFIG_MAX_SEPARATORS = 50_000;

function readConfigDoc(file: string): unknown {
  let text: string;
  try {
    const fd = openSync(file, 'r');
    try {
      const size = fstatSync(fd).size;
      if (size > CONFIG_MAX_BYTES) throw new VouchError('usage', `config: ${file} is ${size} bytes, over the ${CONFIG_MAX_BYTES} a config file may be`);
      const bytes = readFileSync(fd);
      // A FIFO or a file growing while read has no size to check first.
      if (bytes.length > CONFIG_MAX_BYTES) throw new VouchError('usage', `config: ${file} is over the ${CONFIG_MAX_BYTES} bytes a config file may be`);
      text = bytes.toString('utf8');
    } finally {
      closeSync(fd);
    }
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw new VouchError('io_error', `cannot read config ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const { depth, separators } = flowShape(text);
  if (depth > CONFIG_MAX_FLOW_DEPTH)
    throw new VouchError('usage', `config: ${file} is not valid YAML: flow collections ({...}, [...]) nest ${depth} deep, over ${CONFIG_MAX_FLOW_DEPTH}`);
  if (separators > CONFIG_MAX_SEPARATORS)
    throw new VouchError(
      'usage',
      `config: ${file} has ${separators} lines, flow items and mapping colons, over the ${CONFIG_MAX_SEPARATORS} a config file may have`,
    );
  try {
    // uniqueKeys: false, as the library compares every key of a mapping with every other one (quadratic);
    // duplicates are found below with one set per mapping instead, the same rule: equal scalar keys.
    // prettyErrors: false, as the library's pretty message of each error scans the text again (quadratic
    // in a file of many errors); the first error's line and column are found here once.
    const doc = parseDocument(text, { uniqueKeys: false, prettyErrors: false });
    if (doc.errors.length > 0) {
      const { line, col } = lineColumn(text, doc.errors[0]!.pos[0]);
      throw new Error(`${doc.errors[0]!.message} at line ${line}, column ${col}`);
    }
    const dup = duplicateKey(doc);
    if (dup !== null) throw new Error(`the key ${JSON.stringify(String(dup.key))} appears twice in one mapping (line ${lineColumn(text, dup.offset).line})`);
    return doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    throw new VouchError('usage', `config: ${file} is not valid YAML: ${(e as Error).message.split('\n')[0]}`);
  }
}

/** The first scalar key a mapping of the document holds twice, with its offset in the text; null when there is none. */
function duplicateKey(doc: Document): { key: unknown; offset: number } | null {
  let found: { key: unknown; offset: number } | null = null;
  visit(doc, {
    Map(_, map) {
      const seen = new Set<unknown>();
      for (const pair of map.items) {
        if (!isScalar(pair.key)) continue;
        if (seen.has(pair.key.value)) {
          found = { key: pair.key.value, offset: pair.key.range?.[0] ?? 0 };
          return visit.BREAK;
        }
        seen.add(pair.key.value);
      }
      return undefined;
    },
  });
  return found;
}

/**
 * Reads a configuration file, validates it, and merges it over the embedded
 * default (`mergeOverDefault`); `overrides` (serve's --dev, --listen) last.
 */
export function loadConfigFile(file: string, overrides: ConfigOverrides = {}): Config {
  const raw = readConfigDoc(file);
  // Validated as written first, so a message names the file's own key.
  if (raw !== null && raw !== undefined) checkValue(raw, { t: 'object', keys: SCHEMA }, 'config');
  const { doc, authorityFromDefault } = mergeOverDefault(raw);
  const config = resolveConfig(applyOverrides(doc, overrides), dirname(resolve(file)), resolve(file));
  if (authorityFromDefault) config.authority_from_default = true;
  return config;
}

/** The embedded default of docs/spec/design.md §6 (authority mode on ./var), with serve's overrides. */
export function defaultConfig(cwd = process.cwd(), overrides: ConfigOverrides = {}): Config {
  const config = resolveConfig(applyOverrides(EMBEDDED_DEFAULT, overrides), cwd, null);
  config.authority_from_default = true;
  return config;
}

/** The text `vouch config init` writes: the embedded default, complete, with a comment on each section. */
export function embeddedDefaultYaml(): string {
  const d = EMBEDDED_DEFAULT;
  const y = (v: unknown) => JSON.stringify(v);
  return [
    '# vouch gateway configuration: the embedded default, written by `vouch config init`.',
    '# vouch serve --config FILE merges a file over this default (mappings key by key; lists and',
    '# scalars replace), so you may delete any key you do not change. Relative paths are',
    '# relative to this file. Sizes are in bytes, durations in seconds.',
    '',
    '# Where the gateway listens (vouch serve --listen HOST:PORT overrides it).',
    'listen:',
    `  host: ${y(d.listen.host)}`,
    `  port: ${d.listen.port}`,
    '# The public base URL clients reach the gateway at (default: from listen).',
    '# public_url: "https://vouch.example.org"',
    `service_name: ${y(d.service_name)}`,
    '',
    '# The chain: a git repository of signed blocks. remote: a chain to mirror (read-only,',
    '# needs public_key) or, with an authority, where the authority pushes its chain.',
    'chain:',
    `  dir: ${y(d.chain.dir)}`,
    '  remote: null',
    '  public_key: null',
    `  sync_interval: ${d.chain.sync_interval}`,
    `  layout: ${y(d.chain.layout)}`,
    '  origin: null',
    '',
    '# Authority mode: this gateway signs submitted artifacts. Left commented, the embedded',
    "# default's development authority applies: its key and submit token are created under",
    '# ./var on first start. Uncommented, the section is yours: its key and token must exist',
    '# (vouch keygen --out FILE; a token file of 16+ characters, mode 0600). `authority: null`',
    '# serves read-only.',
    '# authority:',
    `#   key_file: ${y(d.authority.key_file)}`,
    `#   signer: ${y(d.authority.signer)}`,
    `#   submit_token_file: ${y(d.authority.submit_token_file)}`,
    `#   rollover_days: ${d.authority.rollover_days}`,
    '#   witnesses: []',
    '#   policy_file: null',
    '',
    '# This gateway as a C2SP tlog-witness for other logs (null: not a witness).',
    'witness: null',
    '',
    '# Verified artifact bytes kept to answer downloads (disk_dir null: memory only).',
    'mirror:',
    `  memory_bytes: ${d.mirror.memory_bytes}`,
    '  disk_dir: null',
    `  disk_bytes: ${d.mirror.disk_bytes}`,
    '  budget_bytes: null',
    '',
    '# Fetching from origins. allow_private: true lets loopback and private addresses through',
    '# (local testing only; vouch serve --dev sets it).',
    'origin:',
    `  timeout: ${d.origin.timeout}`,
    `  max_bytes: ${d.origin.max_bytes}`,
    `  max_redirects: ${d.origin.max_redirects}`,
    `  allow_private: ${d.origin.allow_private}`,
    '',
    '# Package-manager routes (kind: plain, npm, pypi, goproxy, maven, oci), e.g.',
    '#   - { prefix: /npm/, kind: npm, origin: "https://registry.npmjs.org" }',
    'proxy:',
    '  routes: []',
    '',
    '# Bounds on client connections.',
    'clients:',
    `  request_timeout: ${d.clients.request_timeout}`,
    `  max_connections: ${d.clients.max_connections}`,
    `  keep_alive_timeout: ${d.clients.keep_alive_timeout}`,
    '',
  ].join('\n');
}

/** Writes `embeddedDefaultYaml()` to `file`; refuses an existing file unless `force`. */
export function writeDefaultConfig(file: string, force = false): void {
  if (!force && existsSync(file)) throw new VouchError('usage', `${file} exists; give --force to overwrite it, or --out another file`);
  try {
    writeFileSync(file, embeddedDefaultYaml(), { flag: force ? 'w' : 'wx' });
  } catch (e) {
    throw new VouchError('io_error', `cannot write ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}
