/**
 * The mirror's side of a git fetch over smart HTTP (protocol v0): the ref
 * advertisement and one `POST git-upload-pack` for `main` at depth 1, with
 * side-band demultiplexing. Hand-written: isomorphic-git's fetch has no
 * bound on refs, lines, bytes or time (test/hostile/hostile-remote.test.ts).
 * Owns: what is asked (want, shallow, deepen 1; side-band-64k, thin-pack,
 * ofs-delta, no-progress), what is kept (`refs/heads/main`, the pack,
 * shallow lines), the wording of a failed fetch.
 * Trusts: nothing remote: bounded by FETCH_LIMITS; ids checked for form
 * here, the pack by ./git-pack-index.ts.
 * Must hold: at most `maxBytes` of answer, to disk; at most
 * FETCH_LIMITS.refs refs looked at; a failed fetch leaves no file.
 */
import type { Dispatcher } from 'undici';
import { VouchError } from '../chain/errors.ts';
import { FETCH_LIMITS } from './fetch-limits.ts';
import { BRANCH_REF, OID_RE } from './git-objects.ts';
import { type ExternalBase, type PackData, PackReceiver } from './git-pack-index.ts';
import { FLUSH, PktReader, pktLine } from './pkt-line.ts';
import { type ExchangeFailure, exchange, gitUrl, remoteText, shownUrl } from './smart-http.ts';

const AGENT = 'vouch/0.1';

/** How fetches reach the remote. */
export interface FetchOptions {
  /** undici dispatcher to reach the remote through (default: the shared agent of ./smart-http.ts). */
  dispatcher?: Dispatcher;
  /** Cancels the network part (discovery, download). */
  signal?: AbortSignal;
  /** Bound on each HTTP exchange, headers and body (default 120 s; the ref advertisement: at most 20 s, FETCH_LIMITS). */
  timeoutMs?: number;
  /** Longest wait for the next byte of an answer, headers included (default 30 s; git servers send a keep-alive every 5 s). */
  stallMs?: number;
  /** Extra request headers (e.g. authorization); never logged. */
  headers?: Record<string, string>;
  /** Largest upload-pack answer accepted, the pack and its framing (default FETCH_LIMITS.packBytes; written to disk, not held). */
  maxBytes?: number;
  /** Clone only: files written so far while checking out (for a progress bar). */
  onProgress?: (done: number, total: number) => void;
}

/** What a fetch brought in. */
export interface FetchResult {
  /** The remote's `refs/heads/main`, now in the local object store and at `refs/remotes/origin/main`. */
  commit: string;
  /** Objects received (0 when the commit was already here). */
  objects: number;
  /** Pack bytes received. */
  bytes: number;
}

/** How a failed fetch exchange is put (the messages test/hostile/hostile-remote.test.ts and operators read). */
function fetchFailure(shown: string, timeoutMs: number, stallMs: number, why: ExchangeFailure, cause: unknown): VouchError {
  const msg = cause instanceof Error ? cause.message : String(cause);
  switch (why) {
    case 'stall':
      return new VouchError('io_error', `${shown} sent nothing for ${stallMs / 1000} s`, { cause });
    case 'timeout':
      return new VouchError('io_error', `${shown} did not answer in time (${timeoutMs / 1000} s)`, { cause });
    case 'cancelled':
      return new VouchError('io_error', 'fetch cancelled', { cause });
    case 'unreachable':
      return new VouchError('io_error', `cannot reach ${shown}: ${msg}`, { cause });
    default:
      return new VouchError('io_error', `the connection to ${shown} failed: ${msg}`, { cause });
  }
}

/** One bounded exchange of a fetch: status 200 and `expectType` required at the headers, the body to `sink` (./git-fetch-proxy.ts forwards through it too). */
export async function fetchExchange(
  opts: FetchOptions,
  bounds: { timeoutMs: number; maxBytes: number; msPerMiB?: number },
  url: string,
  method: 'GET' | 'POST',
  headers: Record<string, string>,
  body: Buffer | null,
  expectType: string,
  sink: (chunk: Buffer) => void | Promise<void>,
): Promise<void> {
  const shown = shownUrl(url);
  const stallMs = opts.stallMs ?? FETCH_LIMITS.stallMs;
  await exchange({
    url,
    method,
    body,
    headers: { 'user-agent': `git/${AGENT}`, ...opts.headers, ...headers },
    timeoutMs: bounds.timeoutMs,
    msPerMiB: bounds.msPerMiB,
    stallMs,
    maxBytes: bounds.maxBytes,
    signal: opts.signal,
    dispatcher: opts.dispatcher,
    lenient: true,
    onHead: (status, type) => {
      if (status !== 200) throw new VouchError('io_error', `${shown} answered HTTP ${status}`);
      if (!type.startsWith(expectType)) throw new VouchError('io_error', `${shown} is not a git smart-HTTP server (content-type ${JSON.stringify(type)})`);
      return sink;
    },
    fail: (why, cause) => fetchFailure(shown, bounds.timeoutMs, stallMs, why, cause),
    tooLarge: (limit) => new VouchError('io_error', `${shown} sent more than ${limit} bytes`),
  });
}

/**
 * The remote's refs and capabilities (`info/refs?service=git-upload-pack`).
 * `tee`: each chunk of the advertisement (inflated), once its pkt-lines passed the checks.
 */
export async function discoverRefs(url: string, opts: FetchOptions, tee?: (chunk: Buffer) => void): Promise<{ refs: Map<string, string>; caps: Set<string> }> {
  /** Only the branch a chain lives on is kept: other refs are counted, not stored. */
  const refs = new Map<string, string>();
  const caps = new Set<string>();
  let first = true;
  const reader = new PktReader(
    (line) => {
      if (line === null) return;
      let text = line.toString('utf8').replace(/\n$/, '');
      if (text.startsWith('# service=')) return;
      if (text.startsWith('ERR ')) throw new VouchError('io_error', `the remote refused: ${remoteText(text.slice(4))}`);
      const nul = text.indexOf('\0');
      if (nul >= 0) {
        if (first) for (const c of text.slice(nul + 1).split(' ')) if (c) caps.add(c);
        text = text.slice(0, nul);
      }
      first = false;
      const [oid, name] = text.split(' ');
      if (oid && name === BRANCH_REF && OID_RE.test(oid)) refs.set(name, oid);
    },
    FETCH_LIMITS.refs + 8,
    `advertised more than ${FETCH_LIMITS.refs} refs`,
  );
  const bounds = {
    timeoutMs: Math.min(opts.timeoutMs ?? FETCH_LIMITS.exchangeMs, FETCH_LIMITS.advertisementMs),
    maxBytes: Math.min(opts.maxBytes ?? Infinity, FETCH_LIMITS.advertisementBytes),
  };
  await fetchExchange(
    opts,
    bounds,
    gitUrl(url, 'info/refs?service=git-upload-pack'),
    'GET',
    { accept: '*/*' },
    null,
    'application/x-git-upload-pack-advertisement',
    (c) => {
      reader.push(c);
      tee?.(c);
    },
  );
  reader.end();
  return { refs, caps };
}

/**
 * Ask upload-pack for `want` (depth 1), telling it what we have: the pack's
 * bytes go to `pack` as they arrive (side-band channel 1); returns the
 * shallow updates and the pack bytes received.
 */
export async function uploadPack(
  url: string,
  opts: FetchOptions,
  caps: Set<string>,
  want: string,
  haves: string[],
  shallows: string[],
  pack: (bytes: Buffer) => void,
): Promise<{ bytes: number; shallow: string[]; unshallow: string[] }> {
  const band = caps.has('side-band-64k') ? 'side-band-64k' : caps.has('side-band') ? 'side-band' : null;
  if (!band) throw new VouchError('io_error', 'the remote does not offer side-band: not supported');
  if (!caps.has('shallow')) throw new VouchError('io_error', 'the remote does not offer shallow fetches: not supported');
  const ask = [
    band,
    'shallow',
    'thin-pack',
    ...(caps.has('ofs-delta') ? ['ofs-delta'] : []),
    ...(caps.has('no-progress') ? ['no-progress'] : []),
    `agent=${AGENT}`,
  ];
  const parts = [pktLine(`want ${want} ${ask.join(' ')}\n`), ...shallows.map((s) => pktLine(`shallow ${s}\n`)), pktLine('deepen 1\n'), FLUSH];
  for (const h of haves) parts.push(pktLine(`have ${h}\n`));
  parts.push(pktLine('done\n'));
  let bytes = 0;
  const shallow: string[] = [];
  const unshallow: string[] = [];
  const reader = new PktReader((line) => {
    if (line === null || line.length === 0) return;
    const b = line[0]!;
    if (b === 1) {
      bytes += line.length - 1;
      pack(line.subarray(1));
    } else if (b === 2)
      return; // progress
    else if (b === 3) throw new VouchError('io_error', `the remote failed: ${remoteText(line.toString('utf8', 1))}`);
    else {
      const text = line.toString('utf8').trim();
      if (text.startsWith('shallow ') || text.startsWith('unshallow ')) {
        if (shallow.length + unshallow.length >= FETCH_LIMITS.shallowLines)
          throw new VouchError('io_error', `the remote sent more than ${FETCH_LIMITS.shallowLines} shallow lines`);
        if (text.startsWith('shallow ')) shallow.push(text.slice(8));
        else unshallow.push(text.slice(10));
      } else if (text.startsWith('ERR ')) throw new VouchError('io_error', `the remote refused: ${remoteText(text.slice(4))}`);
      // NAK / ACK: nothing to do
    }
  }, FETCH_LIMITS.resultPktLines);
  const bounds = {
    timeoutMs: opts.timeoutMs ?? FETCH_LIMITS.exchangeMs,
    maxBytes: opts.maxBytes ?? FETCH_LIMITS.packBytes,
    msPerMiB: FETCH_LIMITS.packMsPerMiB,
  };
  await fetchExchange(
    opts,
    bounds,
    gitUrl(url, 'git-upload-pack'),
    'POST',
    {
      'content-type': 'application/x-git-upload-pack-request',
      accept: 'application/x-git-upload-pack-result',
    },
    Buffer.concat(parts),
    'application/x-git-upload-pack-result',
    (c) => reader.push(c),
  );
  reader.end();
  if (bytes === 0) throw new VouchError('io_error', 'the remote sent no pack');
  return { bytes, shallow: shallow.filter((o) => OID_RE.test(o)), unshallow: unshallow.filter((o) => OID_RE.test(o)) };
}

/**
 * `uploadPack` into a PackReceiver in `packDir` (./git-pack-index.ts): the
 * pack is written to a temporary file there and indexed as it arrives,
 * its trailer checked, and it must hold `want`. On any failure the file is
 * removed. The caller stores the pack (`PackData.keep` and its `.idx`, or
 * loose objects) or discards it, and closes it once read.
 */
export async function fetchPack(
  url: string,
  opts: FetchOptions,
  caps: Set<string>,
  want: string,
  haves: string[],
  shallows: string[],
  packDir: string,
  external?: ExternalBase,
): Promise<{ pack: PackData; bytes: number; shallow: string[]; unshallow: string[] }> {
  const rx = new PackReceiver(packDir);
  try {
    const got = await uploadPack(url, opts, caps, want, haves, shallows, (c) => rx.push(c));
    const pack = await rx.finish(external);
    if (!pack.has(want)) throw new VouchError('io_error', `the pack from ${shownUrl(url)} does not hold commit ${want}`);
    return { pack, ...got };
  } catch (e) {
    rx.abort();
    throw e;
  }
}
