/**
 * The authority's side of a git push over smart HTTP (protocol v0): the ref
 * advertisement, the `POST git-receive-pack` of one command and a pack, and
 * report-status. Hand-written: isomorphic-git's push walks the whole
 * history and cannot refuse a non-fast-forward it did not check
 * (bench/RESULTS.md "Mirrors and push").
 * Owns: the push's timeouts, how a failure is worded (`<stage> <remote>:`,
 * reason `timeout`, `unreachable`, `cancelled`, `http_status`, `protocol`),
 * what is read of the answers.
 * Trusts: the remote only on its own refs: answers bounded, a non-sha1
 * object format refused.
 * Must hold: credentials go only in the Authorization header.
 */
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { VouchError } from '../chain/errors.ts';
import { FETCH_LIMITS } from './fetch-limits.ts';
import { BRANCH_REF, OID_RE, ZERO_OID } from './git-objects.ts';
import { parsePktLines, protocolError } from './pkt-line.ts';
import { type Exchange, type ExchangeFailure, type Remote, defaultDispatcher, exchange, parseRemote } from './smart-http.ts';

const USER_AGENT = 'git/vouch-0.1';
/** A report-status or ref advertisement larger than this is not a git server we can talk to. */
const MAX_RESPONSE_BYTES = 16 << 20;

export interface PushTimeouts {
  /** TCP connect. Default 10 s. */
  connectMs?: number;
  /** Whole `GET info/refs` exchange. Default 30 s. */
  refsMs?: number;
  /** Whole `POST git-receive-pack` exchange (pack upload, remote unpack, report). Default 10 min. */
  pushMs?: number;
  /** Silence while waiting for response headers or body bytes. Default 60 s. */
  idleMs?: number;
}

export interface RemoteRefs {
  /** `refs/heads/main`, or null when the remote has none (an empty repository). */
  main: string | null;
  capabilities: Set<string>;
}

// ---------------------------------------------------------------------------
// Reading local objects

export function resolvedTimeouts(t: PushTimeouts = {}): Required<PushTimeouts> {
  return { connectMs: t.connectMs ?? 10_000, refsMs: t.refsMs ?? 30_000, pushMs: t.pushMs ?? 600_000, idleMs: t.idleMs ?? 60_000 };
}

export function httpStatusError(remote: Remote, stage: string, status: number, text: string): VouchError {
  const hint =
    status === 401 || status === 403
      ? ' (credentials missing or refused)'
      : status === 404
        ? ' (no repository there, or pushes are not enabled)'
        : status >= 300 && status < 400
          ? ' (redirects are not followed: use the final URL)'
          : '';
  const detail = text.trim().split('\n')[0]?.slice(0, 200) ?? '';
  return new VouchError('io_error', `${stage} ${remote.shown}: HTTP ${status}${hint}${detail ? `: ${detail}` : ''}`, {
    evidence: { reason: 'http_status', stage, httpStatus: status },
  });
}

export function headers(remote: Remote, extra: Record<string, string>): Record<string, string> {
  const h: Record<string, string> = { 'user-agent': USER_AGENT, pragma: 'no-cache', ...extra };
  if (remote.auth) h.authorization = remote.auth;
  return h;
}

/** How a failed push exchange is put. */
function pushFailure(remote: Remote, stage: string, totalMs: number, why: ExchangeFailure, cause: unknown): VouchError {
  if (why === 'cancelled') return new VouchError('io_error', `${stage} ${remote.shown}: cancelled`, { evidence: { reason: 'cancelled', stage }, cause });
  const err = cause as (Error & { code?: string }) | undefined;
  const timeout = why === 'timeout' || why === 'stall';
  const what = timeout
    ? `timed out (limit ${totalMs} ms or idle)`
    : `failed: ${err?.code ? `${err.code} ` : ''}${(err?.message ?? String(cause)).split('\n')[0]}`;
  return new VouchError('io_error', `${stage} ${remote.shown} ${what}`, { evidence: { reason: timeout ? 'timeout' : 'unreachable', stage }, cause });
}

/** One exchange of a push, its whole answer collected (at most 16 MiB) whatever the status. */
export async function collect(
  remote: Remote,
  stage: string,
  totalMs: number,
  idleMs: number,
  signal: AbortSignal | undefined,
  dispatcher: Dispatcher,
  req: Pick<Exchange, 'url' | 'method' | 'headers'> & { body: Buffer | Readable | null },
  what: string,
  /** When given: the answer is complete once this holds of the body so far (a 200's rest is then read in the background). */
  complete?: (body: Buffer) => boolean,
): Promise<{ status: number; contentType: string; body: Buffer }> {
  const parts: Buffer[] = [];
  let n = 0;
  let status = 0;
  let contentType = '';
  let early: ((body: Buffer) => void) | null = null;
  const done = new Promise<Buffer>((r) => {
    early = r;
  });
  const whole = exchange({
    ...req,
    timeoutMs: totalMs,
    stallMs: idleMs,
    maxBytes: MAX_RESPONSE_BYTES,
    signal,
    dispatcher,
    onHead: (s, type) => {
      status = s;
      contentType = type;
      return (c) => {
        parts.push(Buffer.from(c));
        n += c.length;
        if (complete !== undefined && status === 200 && early !== null) {
          const body = Buffer.concat(parts, n);
          if (complete(body)) {
            early(body);
            early = null;
          }
        }
      };
    },
    fail: (why, cause) => pushFailure(remote, stage, totalMs, why, cause),
    tooLarge: (limit) => protocolError(`${what}: answer larger than ${limit} bytes`),
  }).then(() => Buffer.concat(parts, n));
  // Complete early: what the server does after its answer (hooks, housekeeping, exiting) is not waited for.
  const body = await Promise.race([whole, done]);
  if (early === null) whole.catch(() => undefined);
  return { status, contentType, body };
}

/** Whether `buf` holds pkt-lines up to and including a flush-pkt (a receive-pack report without side-band is then whole). */
export function endsWithFlush(buf: Buffer): boolean {
  let at = 0;
  while (at + 4 <= buf.length) {
    const hex = buf.toString('latin1', at, at + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(hex)) return false;
    const len = Number.parseInt(hex, 16);
    if (len > 0 && len < 4) return false;
    if (len === 0) return true;
    at += len;
  }
  return false;
}

export async function lsRemote(remoteUrl: string, opts: { timeouts?: PushTimeouts; dispatcher?: Dispatcher; signal?: AbortSignal } = {}): Promise<RemoteRefs> {
  const remote = parseRemote(remoteUrl);
  const t = resolvedTimeouts(opts.timeouts);
  return fetchRefs(remote, t, opts.dispatcher ?? defaultDispatcher(t.connectMs), opts.signal);
}

export async function fetchRefs(remote: Remote, t: Required<PushTimeouts>, dispatcher: Dispatcher, signal?: AbortSignal): Promise<RemoteRefs> {
  const stage = 'GET info/refs of';
  const {
    status,
    contentType: ctype,
    body: buf,
  } = await collect(
    remote,
    stage,
    t.refsMs,
    t.idleMs,
    signal,
    dispatcher,
    {
      url: `${remote.base}/info/refs?service=git-receive-pack`,
      method: 'GET',
      body: null,
      headers: headers(remote, { accept: 'application/x-git-receive-pack-advertisement, */*' }),
    },
    `info/refs of ${remote.shown}`,
  );
  if (status !== 200) throw httpStatusError(remote, stage, status, buf.toString('utf8'));
  if (!ctype.startsWith('application/x-git-receive-pack-advertisement')) {
    throw protocolError(`${remote.shown} is not a smart-HTTP git server accepting pushes (info/refs answered ${ctype || 'no content type'})`);
  }
  const lines = parsePktLines(buf, `info/refs of ${remote.shown}`, FETCH_LIMITS.refs + 8);
  let k = 0;
  if (lines[0]?.toString('latin1').startsWith('# service=')) {
    if (lines[0].toString('latin1').trim() !== '# service=git-receive-pack')
      throw protocolError(`info/refs of ${remote.shown}: wrong service ${lines[0].toString('latin1').trim()}`);
    k = 1;
    while (k < lines.length && lines[k] === null) k++;
  }
  let main: string | null = null;
  let capabilities = new Set<string>();
  let first = true;
  for (; k < lines.length; k++) {
    const line = lines[k];
    if (line === null || line === undefined) break;
    let text = line.toString('utf8');
    if (text.endsWith('\n')) text = text.slice(0, -1);
    if (first) {
      const nul = text.indexOf('\0');
      if (nul >= 0) {
        capabilities = new Set(
          text
            .slice(nul + 1)
            .split(' ')
            .filter(Boolean),
        );
        text = text.slice(0, nul);
      }
      first = false;
    }
    if (text.startsWith('shallow ')) continue;
    const [oid, name] = text.split(' ');
    if (!oid || !OID_RE.test(oid)) throw protocolError(`info/refs of ${remote.shown}: bad ref line ${JSON.stringify(text.slice(0, 100))}`);
    if (name === BRANCH_REF && oid !== ZERO_OID) main = oid;
  }
  for (const cap of capabilities) {
    if (cap.startsWith('object-format=') && cap !== 'object-format=sha1')
      throw protocolError(`${remote.shown} uses ${cap}; vouch chains are sha1 repositories`);
  }
  return { main, capabilities };
}

/** The report-status answer: null when `refs/heads/main` was updated, else why not. */
export function parseReport(buf: Buffer, remote: Remote): { unpack: string; ref: string | null } {
  const lines = parsePktLines(buf, `receive-pack answer of ${remote.shown}`)
    .filter((l): l is Buffer => l !== null)
    .map((l) => l.toString('utf8').replace(/\n$/, ''));
  const unpack = lines.find((l) => l.startsWith('unpack '));
  if (!unpack) throw protocolError(`receive-pack answer of ${remote.shown} has no unpack status: ${JSON.stringify(buf.toString('utf8').slice(0, 200))}`);
  const mine = lines.find((l) => l === `ok ${BRANCH_REF}` || l.startsWith(`ng ${BRANCH_REF} `) || l === `ng ${BRANCH_REF}`);
  return {
    unpack: unpack.slice(7),
    ref:
      mine === undefined
        ? 'no status for refs/heads/main in the report'
        : mine.startsWith('ok ')
          ? null
          : mine.slice(3 + BRANCH_REF.length).trim() || 'refused',
  };
}
