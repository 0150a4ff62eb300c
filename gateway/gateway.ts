/**
 * The gateway's lifecycle: checks chain directory, keys and port, prepares
 * the authority's key, token and chain (created when the authority is the
 * embedded default's), prints the banner (mode, routes, witnesses), listens
 * (503 `not_ready` until loaded), loads and verifies the chain, then serves.
 * Owns: wiring the parts together and shutting them down; the start-up
 * lines; the server's client bounds (`clients.*`) and JSON answers to what
 * node:http refuses itself.
 * Must hold: the token and key never reach a log or a response (announced
 * once, when generated); an authority holds its chain lock from start to
 * `close()`; a request not fully arrived in time is closed (408), a response
 * never cut; a listener's exception closes that connection only. No
 * process-level handler keeps the process alive: what escapes every guard
 * is logged as one JSON line and Node exits for the supervisor to restart.
 */
import { createServer, type Server } from 'node:http';
import { createHash, randomBytes, type KeyObject } from 'node:crypto';
import { accessSync, constants as fsConstants, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { AddressInfo, Socket } from 'node:net';
import { VouchError } from '../chain/errors.ts';
import { base64Decode, base64Encode } from '../chain/encoding.ts';
import { buildAuthorityBlock, buildCheckpoint } from '../chain/build.ts';
import type { Block } from '../chain/block.ts';
import { formatBlockFile, formatCheckpointFile } from '../chain/block.ts';
import { createKeyFile, readKeyFile } from '../platform/key-file.ts';
import { nodeBackend, nodeSigner } from '../platform/node-crypto.ts';
import { type ChainStore, createChain, openChain as openChainDir } from '../store/chain-repo.ts';
import { acquireChainLock, type ChainLock } from '../store/chain-lock.ts';
import { repackDeltasAfterReady, type WholePackStats } from './chain/whole-packs.ts';
import { HeadEdge, commitFor, entryOf, noteOrigin, trustedHead } from '../store/chain-append.ts';
import { signNoteText } from '../platform/note-signer.ts';
import { TreeEdge, writeEdgeFile } from '../store/tree-edge.ts';
import { digestUrl } from '../artifacts/artifact-digest.ts';
import { claimDigestsUrl } from '../artifacts/claim-digest.ts';
import { type Config, logOrigin } from './config.ts';
import { ChainState, lastVerifiedImage } from './chain/verified-state.ts';
import { CompactIndex } from '../chain/compact-index.ts';
import { answeredBeforeBody, createRequestHandler, LINGER_MS, reportUnexpected, type HotPathParts } from './http/server.ts';
import { ProxyRoutes } from './routes/proxy-handler.ts';
import { GatewayMetrics } from './observability/metrics.ts';
import { ChainSync, prepareMirror, type SyncStatus } from './chain/mirror-sync.ts';
import { ChainPusher, type PushStatus } from '../store/chain-push.ts';
import { createLogger, type Logger } from './observability/logger.ts';
import type { GatewayContext, PushReport, SyncReport } from './context.ts';
import { SKILL_PATH } from './routes/openapi.ts';
import { OriginFetcher, type OriginFetcherOptions } from '../artifacts/origin-fetcher.ts';
import { Mirror } from '../artifacts/mirror.ts';
import { VerifiedFetcher } from '../artifacts/verified-fetch.ts';
import { HashWorkers } from '../artifacts/hash-workers.ts';
import { Submitter } from './chain/submitter.ts';
import { AuthorityKeys } from './chain/online-keys.ts';
import { openWitness, type Witness, type WitnessedLog } from './transparency/witness.ts';
import { openCosigner, type CheckpointSource } from './transparency/cosigner.ts';
import { SyncNotifier } from './chain/sync-notify.ts';
import { collectGarbage } from './collect-garbage.ts';
import { FAULT, injectFault } from './test-fault.ts';

export interface StartOptions {
  log?: Logger;
  /** Lines for the operator (stdout): where it listens, generated secrets, a curl line. */
  announce?: (line: string) => void;
  /** The embedded default's authority (with or without a file): create key, token and chain when missing. */
  embeddedDefault?: boolean;
  /** `vouch serve --dev`: say at start that loopback and private origins are allowed because of it. */
  dev?: boolean;
  /** Override the clock (tests). */
  now?: () => number;
  /** How long `close()` lets requests in flight finish (default 10 s). */
  drainMs?: number;
  /** Progress of long start-up work (a mirror's first clone, cold verification), e.g. a bar on a terminal. */
  onProgress?: (done: number, total: number, what: string) => void;
  /** The origin fetcher's HTTP/1.1 client (default: artifacts/h1); the gateway bench's side-by-side runs only. */
  originTransport?: OriginFetcherOptions['transport'];
  /** The lookup path's answer cache and batching (default: lru-cache, the answers of a turn written together); the gateway bench's side-by-side runs only. */
  hotPath?: HotPathParts;
}

export interface RunningGateway {
  url: string;
  server: Server;
  ctx: GatewayContext;
  /** Resolves when the chain is loaded and verified; rejects if it is not valid. */
  ready: Promise<void>;
  close(): Promise<void>;
}

function isEmptyDir(dir: string): boolean {
  return !existsSync(dir) || (statSync(dir).isDirectory() && readdirSync(dir).length === 0);
}

function readSecretFile(path: string, what: string): string {
  let st;
  try {
    st = statSync(path);
  } catch {
    throw new VouchError('key_error', `${what} ${path} does not exist; create it with a random token (umask 077; openssl rand -base64 32 > ${path})`);
  }
  if ((st.mode & 0o077) !== 0) throw new VouchError('key_error', `${what} ${path} is accessible by group or others; run: chmod 600 ${path}`);
  const text = readFileSync(path, 'utf8').trim();
  if (text.length < 16) throw new VouchError('key_error', `${what} ${path} holds fewer than 16 characters`);
  return text;
}

/**
 * An authority writes its chain (block files, checkpoint, `.git`): refused at
 * start, naming the directory, when it cannot — a read-only mount, an
 * immutable or foreign directory — instead of failing at its first write.
 * A directory still to be created needs its nearest existing parent writable.
 */
function checkChainWritable(dir: string): void {
  const probes: string[] = [];
  if (existsSync(dir)) {
    probes.push(dir);
    if (existsSync(join(dir, '.git'))) probes.push(join(dir, '.git'));
  } else {
    let parent = resolve(dir);
    while (!existsSync(parent) && dirname(parent) !== parent) parent = dirname(parent);
    probes.push(parent);
  }
  for (const p of probes) {
    try {
      accessSync(p, fsConstants.W_OK);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? 'error';
      const why = code === 'EROFS' ? 'a read-only file system' : code === 'EACCES' || code === 'EPERM' ? `permission denied, ${code}` : code;
      throw new VouchError(
        'io_error',
        `chain.dir ${dir} is not writable (${why}${p === dir ? '' : ` at ${p}`}): an authority gateway appends to its chain there; ` +
          'make it writable, or run without an authority section to serve it read-only',
        { resource: dir },
      );
    }
  }
}

/** The soft limit on this process's open files (Linux), or null when unknown or unlimited. */
function openFileLimit(): number | null {
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    return m === null ? null : Number(m[1]);
  } catch {
    return null;
  }
}

/** Files kept for the rest of the process (origin fetches, mirror and spool files, git, workers) when bounding connections. */
const FILES_RESERVED = 256;

/** A load that verified this many blocks or more is followed by full collections before the gateway says ready (`collectGarbage`). */
const COLLECT_AFTER_BLOCKS = 10_000;

/**
 * The authority's key file and token. `key`: key_file's private key, null
 * when there is no key_file but a next_key_file (a rotated chain whose key in
 * force is there; `AuthorityKeys.open` decides once the chain is verified).
 */
interface AuthorityParts {
  key: KeyObject | null;
  tokenHash: Buffer;
}

function prepareAuthority(config: Config, options: StartOptions, say: (l: string) => void, log: Logger): AuthorityParts {
  const a = config.authority!;
  let key: KeyObject | null;
  if (!existsSync(a.key_file) && existsSync(a.next_key_file) && !isEmptyDir(config.chain.dir)) key = null;
  else if (!existsSync(a.key_file) && options.embeddedDefault) {
    mkdirSync(dirname(a.key_file), { recursive: true });
    const created = createKeyFile(a.key_file);
    key = created.privateKey;
    say(`created a development authority key at ${a.key_file} (mode 0600)`);
  } else key = readKeyFile(a.key_file);
  if (key !== null) say(`authority public key: ${base64Encode(nodeSigner(a.signer, key).publicKey)}`);

  let token: string;
  if (!existsSync(a.submit_token_file) && options.embeddedDefault) {
    mkdirSync(dirname(a.submit_token_file), { recursive: true });
    token = randomBytes(32).toString('base64url');
    writeFileSync(a.submit_token_file, token + '\n', { mode: 0o600, flag: 'wx' });
    say(`submit token (shown once; kept in ${a.submit_token_file}): ${token}`);
  } else token = readSecretFile(a.submit_token_file, 'submit token file');
  const tokenHash = createHash('sha256').update(token).digest();
  token = '';

  if (isEmptyDir(config.chain.dir)) {
    log.info('creating a new chain', { dir: config.chain.dir, signer: a.signer });
    say(`created a new chain at ${config.chain.dir}`);
  }
  return { key, tokenHash };
}

/** The authority's online keys for the verified chain in `state` (gateway/chain/online-keys.ts). */
function openAuthorityKeys(config: Config, authority: AuthorityParts, state: ChainState, now: number): AuthorityKeys {
  const a = config.authority!;
  const since = state.keys.online.since;
  const keyBlock = since > 0 ? (state.index.block(since) ?? null) : null;
  return AuthorityKeys.open(
    { key_file: a.key_file, next_key_file: a.next_key_file, rollover_days: a.rollover_days },
    nodeBackend,
    state.keys,
    authority.key,
    keyBlock,
    now,
  );
}

async function openChain(config: Config, authority: AuthorityParts | null, now: () => number): Promise<ChainStore> {
  if (authority && isEmptyDir(config.chain.dir)) {
    const t = now();
    const signer = nodeSigner(config.authority!.signer, authority.key ?? readKeyFile(config.authority!.key_file));
    const block = buildAuthorityBlock({ signer, backend: nodeBackend, now: t, uns: 'vouch/provenance-chain' });
    const cp = buildCheckpoint({ head: block, signer, now: t });
    const edge = TreeEdge.empty(nodeBackend);
    edge.append(entryOf(block.record_hash));
    const note = signNoteText(signer, noteOrigin(null, config.chain.origin, logOrigin(config), 'config: chain.origin'), 1, edge.root());
    const repo = await createChain(
      config.chain.dir,
      [{ index: 0, content: formatBlockFile(block) }],
      { json: formatCheckpointFile(cp), note },
      commitFor([block], t),
    );
    writeEdgeFile(repo.dir, edge);
    return repo;
  }
  checkChainExists(config.chain.dir);
  return openChainDir(config.chain.dir, { repair: authority !== null });
}

/** Why the gateway cannot listen, and what to do: which port, who holds it, how to choose another. */
function listenError(config: Config, e: NodeJS.ErrnoException): VouchError {
  const at = `${config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host}:${config.listen.port}`;
  const choose = `choose another port with vouch serve --listen ${at.replace(/:\d+$/, '')}:PORT or the config key listen.port`;
  if (e.code === 'EADDRINUSE') {
    return new VouchError(
      'io_error',
      `cannot listen on ${at}: port ${config.listen.port} is in use by another process (EADDRINUSE); ` + `stop that process, or ${choose}`,
    );
  }
  if (e.code === 'EACCES') return new VouchError('io_error', `cannot listen on ${at}: permission denied (EACCES; ports below 1024 need privileges); ${choose}`);
  if (e.code === 'EADDRNOTAVAIL')
    return new VouchError(
      'io_error',
      `cannot listen on ${at}: ${config.listen.host} is not an address of this machine (EADDRNOTAVAIL); set listen.host or --listen HOST:PORT`,
    );
  return new VouchError('io_error', `cannot listen on ${at}: ${e.code ?? e.message}; ${choose}`);
}

/** A read-only gateway's chain directory must exist; the message says how to make one. */
function checkChainExists(dir: string): void {
  const how =
    `create a chain there with vouch init --chain ${dir} --key KEY_FILE --signer NAME, clone one there (git clone URL ${dir}), ` +
    'or set chain.remote and chain.public_key to mirror one';
  if (!existsSync(dir)) throw new VouchError('not_a_chain', `chain.dir ${dir} does not exist: ${how}`, { resource: dir });
  if (!existsSync(join(dir, '.git'))) throw new VouchError('not_a_chain', `chain.dir ${dir} holds no chain (no .git): ${how}`, { resource: dir });
}

/** What the cosigner sends: the committed checkpoint note (no cosignatures) and consistency proofs of the chain's tree. */
function checkpointSourceOf(state: ChainState): CheckpointSource {
  return {
    note: () => state.note?.text ?? null,
    consistencyProof: (from, to) => state.tree.consistencyProof(from, to),
  };
}

/**
 * The witness's view of this gateway's own chain: its origin (from the
 * committed note) and the online key in force (the verified chain's: it
 * follows key events; the chain itself was verified against `pinned`).
 */
function ownChainLog(state: ChainState): WitnessedLog | null {
  const origin = state.note?.checkpoint.origin;
  const key = base64Decode(state.keys.online.publicKey);
  return origin === undefined || key === null ? null : { origin, name: origin, publicKey: key };
}

/**
 * Seam (issue 17), until the gateway's Merkle tree answers roots: the record
 * hashes of the verified chain for the tree edge (store/chain-append.ts
 * HeadEdge), from the index image ChainState.load leaves in .git (what it
 * verified; no block file read), when it holds exactly `size` blocks.
 */
function verifiedRecordHashes(dir: string): (size: number) => (() => Iterable<string>) | null {
  return (size) => {
    const found = lastVerifiedImage(dir);
    if (found === null || found.size !== size) return null;
    const compact = CompactIndex.fromImage(found.image);
    if (compact.size !== size) return null;
    return function* () {
      for (let i = 0; i < size; i++) yield compact.recordHashOf(i);
    };
  };
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

function syncReport(s: SyncStatus): SyncReport {
  return {
    remote: s.remote,
    last_success: iso(s.lastSuccess),
    last_attempt: iso(s.lastAttempt),
    last_error: s.lastError,
    consecutive_failures: s.consecutiveFailures,
    stale_seconds: Math.round(s.staleSeconds),
    remote_head: s.remoteHead,
    local_size: s.localSize,
    behind_blocks: s.behindBlocks,
    notifications: s.notifications,
    next_attempt: iso(s.nextAttempt),
  };
}

function pushReport(s: PushStatus): PushReport {
  return {
    remote: s.remote,
    remote_head: s.remoteHead,
    backlog: s.backlog ?? 0,
    last_push: s.lastPush?.at ?? null,
    last_error: s.lastError ? { code: s.lastError.code, message: s.lastError.message } : null,
    consecutive_failures: s.consecutiveFailures,
  };
}

/**
 * Today's UTC date (YYYY-MM-DD) by `now`, formatted once per day rather than
 * on every lookup (revocations take effect by date).
 */
export function utcDay(now: () => number): () => string {
  const DAY = 86_400_000;
  let start = NaN;
  let text = '';
  return () => {
    const t = now();
    if (!(t >= start && t < start + DAY)) {
      start = t - (((t % DAY) + DAY) % DAY);
      text = new Date(start).toISOString().slice(0, 10);
    }
    return text;
  };
}

/**
 * The start line naming the mode and the chain directory, and where the mode
 * comes from: the embedded default, a file's authority section, the default's
 * authority merged under a file, or `authority: null` (config.ts merge rule).
 */
export function modeLine(config: Config): string {
  const chain = `chain: ${config.chain.dir}`;
  if (config.authority !== null) {
    const from =
      config.source === null
        ? 'the embedded default, used without --config'
        : config.authority_from_default
          ? "the embedded default's development authority, merged under the config file; set authority: null to serve read-only"
          : "the config file's authority section";
    return `mode: authority (submit enabled, signer ${config.authority.signer}; ${from}); ${chain}`;
  }
  const why =
    config.source === null
      ? 'no authority section'
      : config.chain.remote !== null
        ? 'a config file with chain.remote gets an authority only from its own authority section'
        : 'the config file sets authority: null';
  if (config.chain.remote !== null) return `mode: mirror of ${config.chain.remote} (read-only: ${why}); ${chain}`;
  return `mode: read-only (${why}); ${chain}`;
}

/** The banner lines after the mode: --dev's warning, every proxy route, the authority's witnesses. */
export function bannerLines(config: Config, dev: boolean): string[] {
  const lines: string[] = [];
  if (dev || config.origin.allow_private) {
    lines.push(
      dev
        ? 'dev mode: loopback and private origins are allowed (origin.allow_private: true) because of --dev; never use --dev in production'
        : 'origin.allow_private: true: loopback and private origins are allowed; use it for local testing only',
    );
  }
  const routes = config.proxy.routes;
  if (routes.length === 0) lines.push('routes: none (proxy.routes in a config file adds npm, pypi, goproxy, maven, oci or plain routes)');
  for (const r of routes) {
    const at = r.prefix !== null ? r.prefix : `host ${r.host}`;
    lines.push(
      `route: ${at} kind ${r.kind}, origin ${r.origin}${r.canonical !== null ? `, canonical ${r.canonical}` : ''} (${r.mode}, unendorsed ${r.unendorsed})`,
    );
  }
  if (config.authority !== null) {
    const w = config.authority.witnesses;
    if (w.length === 0) lines.push('witnesses: none (authority.witnesses in a config file asks witnesses to cosign checkpoints)');
    for (const x of w) lines.push(`witness asked to cosign: ${x.url} (${x.vkey.split('+')[0]})`);
  }
  return lines;
}

/**
 * `server.maxConnections`: `clients.max_connections`, lowered (with a warning)
 * when the process may not open that many files besides the ones it needs.
 */
function connectionBound(max: number, log: Logger): number {
  const files = openFileLimit();
  if (files === null || max + FILES_RESERVED <= files) return max;
  const bound = Math.max(16, files - FILES_RESERVED);
  log.warn('clients.max_connections lowered: the process may not open that many files (ulimit -n)', { max_connections: max, open_files: files, bound });
  return bound;
}

export async function startGateway(config: Config, options: StartOptions = {}): Promise<RunningGateway> {
  const log = options.log ?? createLogger();
  const say = options.announce ?? ((l: string) => process.stdout.write(l + '\n'));
  const now = options.now ?? Date.now;
  const mirrorMode = config.chain.remote !== null && config.authority === null;
  if (mirrorMode && config.chain.public_key === null) {
    throw new VouchError(
      'usage',
      'config: a mirror (chain.remote without authority) needs chain.public_key, the pinned authority key it verifies every block against',
    );
  }
  say(modeLine(config));
  for (const line of bannerLines(config, options.dev === true)) say(line);
  if (config.authority !== null) checkChainWritable(config.chain.dir);
  // A read-only gateway serves an existing chain: found missing now, before it says it is listening.
  if (config.authority === null && !mirrorMode) checkChainExists(config.chain.dir);
  // An authority is the chain's one writer while it runs (a new chain is locked once created, below).
  let chainLock: ChainLock | null = config.authority && existsSync(join(config.chain.dir, '.git')) ? acquireChainLock(config.chain.dir) : null;
  let authority: AuthorityParts | null;
  let witness: Witness | null;
  let notifier: SyncNotifier | null = null;
  let syncTokenHash: Buffer | null = null;
  try {
    authority = config.authority ? prepareAuthority(config, options, say, log) : null;
    // Sync hints (docs/guide/fleet.md): the authority's tokens for its mirrors, a mirror's own token for POST /v1/sync.
    if (config.authority !== null && config.authority.notify.length > 0) {
      notifier = new SyncNotifier(
        config.authority.notify.map((n) => ({ url: n.url, token: readSecretFile(n.token_file, 'authority.notify token file') })),
        log,
      );
    }
    if (mirrorMode && config.chain.sync_token_file !== null) {
      syncTokenHash = createHash('sha256').update(readSecretFile(config.chain.sync_token_file, 'chain.sync_token_file')).digest();
    }
    witness = config.witness ? openWitness(config.witness, nodeBackend, log, now) : null;
    if (witness) {
      say(`witness: ${witness.vkey}`);
      log.info('witness', { vkey: witness.vkey, state_file: config.witness!.state_file });
    }
  } catch (e) {
    chainLock?.release();
    throw e;
  }

  const fetcher = new OriginFetcher({
    timeoutMs: config.origin.timeout * 1000,
    connectTimeoutMs: Math.min(10_000, config.origin.timeout * 1000),
    maxBytes: config.origin.max_bytes,
    maxRedirects: config.origin.max_redirects,
    // Redirect hops of downloads to loopback/private addresses on another host need origin.allow_private.
    allowPrivate: config.origin.allow_private,
    ...(options.originTransport ? { transport: options.originTransport } : {}),
  });
  const mirror = new Mirror({
    memoryBytes: config.mirror.memory_bytes,
    diskDir: config.mirror.disk_dir,
    diskBytes: config.mirror.disk_bytes,
    // One memory budget for artifact bytes in flight, held for readers and in the memory tier (2 × memory_bytes unless set).
    budgetBytes: config.mirror.budget_bytes,
  });
  // Started by the first large origin body, or once listening when a kind: oci route pulls layers (below); unref'd, stopped by close().
  const hashWorkers = new HashWorkers();
  const ctx: GatewayContext = {
    config,
    state: null,
    artifacts: new VerifiedFetcher({ fetcher, mirror, hashWorkers, upstream: config.mirror.upstream_gateway }),
    submitter: null,
    submitTokenHash: authority?.tokenHash ?? null,
    vibecode: { spec: `${config.public_url}/v1/openapi.json`, skills: [`${config.public_url}${SKILL_PATH}`] },
    today: utcDay(now),
    log,
    startedAt: Date.now(),
    witness,
    syncTokenHash,
    syncNotifyStats: notifier ? () => notifier!.stats() : null,
  };

  // The whole request (line, headers, body) must arrive within clients.request_timeout; the answer
  // (a download of any length) is not bounded by it. node:http checks at connectionsCheckingInterval.
  const requestMs = Math.round(config.clients.request_timeout * 1000);
  // The proxy routes (bad routes fail the start here) and the metrics, which read the proxy's and the mirror's counters.
  const proxy = new ProxyRoutes(ctx);
  const metrics = new GatewayMetrics(ctx, { proxy, mirror: () => mirror.stats() });
  const server = createServer(
    {
      requestTimeout: requestMs,
      headersTimeout: Math.min(30_000, requestMs),
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(requestMs / 4))),
      // Longer than the idle time of the clients' pools (npm's, pip's, go's; a reverse proxy's), so a client reusing an idle
      // connection does not race its close (node's 5 s default: npm, busy resolving a large tree, met ECONNRESET on reuse).
      keepAliveTimeout: Math.round(config.clients.keep_alive_timeout * 1000),
    },
    createRequestHandler(ctx, { proxy, metrics, ...(options.hotPath ? { hotPath: options.hotPath } : {}) }),
  );
  server.maxConnections = connectionBound(config.clients.max_connections, log);
  let dropped = 0;
  let droppedLogged = 0;
  server.on('drop', () => {
    dropped++;
    if (Date.now() - droppedLogged < 60_000) return;
    droppedLogged = Date.now();
    try {
      log.warn('connections over clients.max_connections closed on arrival', { max_connections: server.maxConnections, dropped });
    } catch (e) {
      reportUnexpected(log, metrics, 'server', e);
    }
  });
  // Requests node:http cannot even parse (or that ran out of time) still get a JSON answer, never its plain-text default.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    try {
      answerClientError(err, socket);
    } catch (e) {
      reportUnexpected(log, metrics, 'client_error', e);
      socket.destroy();
    }
  });
  const answerClientError = (err: NodeJS.ErrnoException, socket: Socket): void => {
    if (FAULT !== null) injectFault('client_error', 'client_error');
    // An answer already started or sent for this request (a download under way, an early 401 whose body still trickles): nothing more to say.
    const answering = (socket as Socket & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
    if (
      !socket.writable ||
      answering?.headersSent === true ||
      answeredBeforeBody(socket) ||
      ((err as { bytesParsed?: number }).bytesParsed === 0 && err.code === 'ECONNRESET')
    ) {
      socket.destroy();
      return;
    }
    const tooLarge = err.code === 'HPE_HEADER_OVERFLOW';
    const status = tooLarge ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    const body = JSON.stringify({
      success: false,
      status: 'bad_request',
      message: tooLarge ? 'request headers too large' : status === 408 ? 'request timed out' : 'malformed HTTP request',
    });
    const reason = tooLarge ? 'Request Header Fields Too Large' : status === 408 ? 'Request Timeout' : 'Bad Request';
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
    // node:http keeps sockets half-open: a client that never closes its side is closed after a short linger.
    setTimeout(() => socket.destroy(), LINGER_MS).unref();
  };
  // The last word on an exception that reached the process (see the header): one JSON line, then Node ends it.
  const onUncaught = (e: unknown, origin: string) => {
    try {
      log.error('uncaught exception outside the request path: the gateway exits', {
        origin,
        error: (e as Error)?.message ?? String(e),
        stack: (e as Error)?.stack ?? null,
      });
    } catch {
      // Node prints it anyway
    }
  };
  process.on('uncaughtExceptionMonitor', onUncaught);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => reject(listenError(config, e)));
    server.listen(config.listen.port, config.listen.host, resolve);
  }).catch((e) => {
    chainLock?.release();
    process.off('uncaughtExceptionMonitor', onUncaught);
    throw e;
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;
  if (config.listen.port === 0 && config.public_url.endsWith(':0')) {
    config.public_url = url;
    ctx.vibecode = { spec: `${url}/v1/openapi.json`, skills: [`${url}${SKILL_PATH}`] };
  }
  say(`listening on ${url}`);
  // Image layers are large bodies: the workers boot now (each is a Node isolate), not under the first pull, whose first layer
  // would otherwise be hashed on the event loop while they start; `ready` waits for them (their start-up is no pull's CPU).
  const workersBooted = config.proxy.routes.some((r) => r.kind === 'oci') ? hashWorkers.booted() : null;

  let pusher: ChainPusher | null = null;
  let sync: ChainSync | null = null;
  // Background work of the chain (the rewrite of packs git made), stopped by close().
  const background = new AbortController();
  let wholePackRun: Promise<void> | null = null;
  let answersRun: Promise<void> | null = null;
  const ready = (async () => {
    // Test hook: hold the not-ready phase open so tests can observe 503 answers.
    const delay = Number(process.env.VOUCH_TEST_READY_DELAY_MS ?? 0);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    const mirror = mirrorMode
      ? (
          await prepareMirror(config.chain.dir, config.chain.remote!, {
            pinnedPublicKey: config.chain.public_key,
            log,
            ...(options.onProgress ? { fetch: { onProgress: (d: number, t: number) => options.onProgress!(d, t, 'cloning the chain') } } : {}),
          })
        ).repo
      : null;
    const repo: ChainStore = mirror ?? (await openChain(config, authority, now));
    if (authority && chainLock === null) chainLock = acquireChainLock(config.chain.dir);
    for (const r of repo.repairs) log.warn('chain repository repaired after an interrupted append', { ...r });
    // An authority's chain is its own: after verification, the online key in force must be one it holds
    // (key_file or next_key_file, `AuthorityKeys.open`), whatever block 0's key is (docs/spec/key-events.md).
    const pinned = config.chain.public_key;
    if (pinned === null && !authority) log.warn('no chain.public_key pinned: trusting the key of block 0 on first use', { dir: config.chain.dir });
    const { state, report } = await ChainState.load(repo, {
      pinnedPublicKey: pinned,
      ...(options.onProgress ? { onProgress: (d: number, t: number) => options.onProgress!(d, t, 'verifying the chain') } : {}),
    });
    const keys = authority ? openAuthorityKeys(config, authority, state, now()) : null;
    if (keys !== null && keys.signer().id !== config.authority!.signer) {
      // The chain names the signer of the key in force (a key statement may name a new one): it wins over the config.
      log.warn("authority.signer differs from the signer of the chain's online key in force; signing as the chain says", {
        configured: config.authority!.signer,
        signer: keys.signer().id,
        since: state.keys.online.since,
      });
    }
    if (keys !== null && keys.source !== config.authority!.key_file) {
      const inForce = base64Encode(keys.signer().publicKey);
      say(`online key in force: ${inForce} (since block ${state.keys.online.since}), from authority.next_key_file ${keys.source}`);
      log.info('signing with the online key in force from authority.next_key_file', {
        next_key_file: keys.source,
        public_key: inForce,
        since: state.keys.online.since,
      });
    }
    const trusted = keys ? trustedHead(repo, keys.signer(), state.keys) : null;
    // The log's origin: the committed note's; a configured chain.origin must agree (refused at start, exit 2).
    const origin = trusted ? noteOrigin(trusted.note, config.chain.origin, logOrigin(config), 'config: chain.origin') : null;
    if (!trusted && config.chain.origin !== null) {
      // A mirror (or read-only gateway) configured with an origin: the committed note (opened with the key in force) must be under it too.
      noteOrigin(state.note?.checkpoint ?? null, config.chain.origin, config.chain.origin, 'config: chain.origin');
    }
    // A load that verified many blocks leaves far more garbage outside the heap than it keeps (RSS 724 MiB
    // for 480 MiB held at 1M blocks): collected now, not whenever traffic first makes V8 collect.
    const collected = report.verified >= COLLECT_AFTER_BLOCKS && (await collectGarbage());
    log.info('chain loaded', { ...report, head: state.head.record_hash, dir: config.chain.dir, collected });
    if (authority) {
      ctx.submitter = new Submitter(
        {
          repo,
          keys: keys!,
          backend: nodeBackend,
          index: state.index,
          head: () => state.head,
          digest: (url, algorithm, signal) => digestUrl(url, algorithm, { fetcher, guardPrivate: !config.origin.allow_private, ...(signal ? { signal } : {}) }),
          claims: (url, kinds, signal) => claimDigestsUrl(url, kinds, { fetcher, guardPrivate: !config.origin.allow_private, ...(signal ? { signal } : {}) }),
          now,
          // The root of each round's note from the tree edge kept beside the chain (.git/vouch-tree-edge, what
          // `vouch endorse` reads too); applyCommitted checks every committed note against the gateway's own tree.
          note: (() => {
            const edge = new HeadEdge(repo, () => trusted!.note, verifiedRecordHashes(repo.dir));
            return {
              origin: origin!,
              rootWith: (e: readonly Uint8Array[]) => edge.rootWith(e),
              committed: (e: readonly Uint8Array[]) => edge.advance(e),
              indexRootWith: (blocks: readonly Block[]) => state.indexRootWith(blocks),
            };
          })(),
          onAppended: (blocks, committed) => {
            try {
              // From what the branch holds, not the working tree (which may lag after a failed write).
              state.applyCommitted(blocks, committed.checkpointText, committed.blockTexts, committed.noteText ?? undefined);
              log.info('appended', { blocks: blocks.map((b) => b.index), head: blocks[blocks.length - 1]!.record_hash });
              pusher?.notify(repo.head);
              ctx.cosigner?.notify();
            } catch (e) {
              log.error('an appended block did not verify', { error: (e as Error).message, blocks: blocks.map((b) => b.index) });
            }
          },
        },
        { log: (m) => log.error(m) },
      );
    }
    if (authority && config.chain.remote !== null) {
      // While the remote is down the pusher probes every 5 s (and an append cuts a wait short), so the push after
      // an outage does not wait out a backoff of minutes; each push that moved main tells the mirrors to sync.
      pusher = new ChainPusher({
        dir: config.chain.dir,
        remote: config.chain.remote,
        log,
        probeMs: 5_000,
        ...(notifier ? { onPushed: (head: string) => notifier!.notify(state.size, head) } : {}),
      });
      ctx.pushReport = () => pushReport(pusher!.status());
      pusher.notify(repo.head); // sends anything appended while the remote was unreachable
    }
    if (mirrorMode) {
      sync = new ChainSync({
        repo: mirror!,
        remote: config.chain.remote!,
        state,
        pinnedPublicKey: config.chain.public_key,
        origin: config.chain.origin,
        rootWith: (e) => state.rootWith(e),
        intervalSeconds: config.chain.sync_interval,
        log,
      });
      ctx.syncReport = () => syncReport(sync!.status());
      ctx.mirrorSync = sync;
      sync.start();
    }
    ctx.state = state;
    if (witness && (pinned !== null || authority)) witness.ownLog = () => ownChainLog(state);
    if (authority) {
      const cosigner = openCosigner(config.authority!, config.chain.dir, checkpointSourceOf(state), nodeBackend, log);
      if (cosigner !== null) {
        ctx.cosigner = cosigner;
        state.withCosignatures = (note) => cosigner.served(note);
        cosigner.start();
      }
    }
    if (report.mode === 'warm') {
      // A warm start served the verified texts without reading every block file: compare them now, in the background.
      state.recheckFiles().then(
        (i) => {
          if (i !== null)
            log.error('a block file in the chain directory differs from the verified chain being served; run vouch verify', {
              index: i,
              dir: config.chain.dir,
            });
        },
        (e) => log.warn('could not re-check the block files', { error: (e as Error).message }),
      );
    }
    if (FAULT !== null && FAULT.stage === 'uncaught') setTimeout(() => injectFault('uncaught', FAULT!.route), 200);
    await workersBooted;
    say(`ready: ${state.size} blocks, head ${state.head.record_hash} (${report.mode} start, ${report.verified} verified in ${Math.round(report.ms)} ms)`);
    // A chain git packed (a clone, git gc, a git server's pack): its packs rewritten whole in the background, for lookups.
    const wholePacks: WholePackStats = { done: 0, failed: 0, running: false };
    ctx.wholePacks = wholePacks;
    if (config.chain.repack_deltas) wholePackRun = repackDeltasAfterReady(repo, log, wholePacks, background.signal);
    // The answer store (gateway/cache/answer-store.ts): built after the packs are whole, as lookups read its blocks from them.
    if (config.chain.answer_store && options.hotPath?.answerStore !== false)
      answersRun = (wholePackRun ?? Promise.resolve()).then(() => buildAnswersAfterReady(state, log, background.signal));
    // The try line answers with no network at all; the submit line is a template (the gateway fetches the URL it is given).
    // curl --fail-with-body: an error answer is printed and curl exits non-zero (22), never a silent success.
    say(`try: curl -sS --fail-with-body '${url}/v1/authority'`);
    if (authority) {
      say(
        `to submit an artifact (the gateway fetches its URL, hashes and signs it): curl -sS --fail-with-body -H "Authorization: Bearer $(cat ${config.authority!.submit_token_file})" ` +
          `-H 'content-type: application/json' -d '{"url":"https://<host>/<file>","name":"<owner>/<name>","semver":"1.0.0","license":"MIT"}' ${url}/v1/submit`,
      );
    }
  })();
  ready.catch(() => {});

  return {
    url,
    server,
    ctx,
    ready,
    async close() {
      // Stop accepting, let requests in flight finish (bounded), then cut what is left.
      await new Promise<void>((r) => {
        const force = setTimeout(() => server.closeAllConnections(), options.drainMs ?? 10_000);
        server.close(() => {
          clearTimeout(force);
          r();
        });
        server.closeIdleConnections();
      });
      background.abort();
      await wholePackRun;
      await answersRun;
      await sync?.stop();
      notifier?.close();
      await ctx.cosigner?.close();
      await pusher?.stop();
      await fetcher.close();
      await proxy.close();
      await mirror.close?.();
      await hashWorkers.close();
      chainLock?.release();
      process.off('uncaughtExceptionMonitor', onUncaught);
    },
  };
}

/**
 * Brings the answer store up to the served chain in the background; logs
 * `answer store built` (the scale bench waits for it) or why lookups read
 * the blocks instead. Never throws.
 */
async function buildAnswersAfterReady(state: ChainState, log: Logger, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return;
  state.onAnswersCorrupt = (blocks) =>
    log.error('a record of the answer store did not read back as written: the store is dropped and rebuilt; lookups read the blocks meanwhile', { blocks });
  try {
    const r = await state.buildAnswers(signal);
    if (signal.aborted) return;
    const s = state.answerStore;
    if (r === null || s.blocks < state.size) {
      log.warn('the answer store could not be opened or written (a read-only chain directory?); lookups read the blocks');
      return;
    }
    log.info('answer store built', { blocks: s.blocks, added: r.added, ms: Math.round(r.ms), bytes: s.bytes });
  } catch (e) {
    log.warn('could not build the answer store; lookups read the blocks', { error: (e as Error).message });
  }
}
