/**
 * GET|HEAD /v1/download (docs/spec/design.md §3.2): select the block (§3.3),
 * get bytes from the mirror or the origin, hash with the block's algorithm,
 * serve only on equality. Every verified answer carries `Vouch-Proof` and a
 * head within HEADER_BUDGET (UNS compact where the block does not fit,
 * chain/uns-header.ts), made once per block, URL and proof.
 * Trusts: the verified index; `ArtifactSource.obtain` (hash-checked bytes).
 * Must hold: no artifact byte reaches the client before the check passed;
 * failures have an empty body and §3.2's status; memory per download is
 * bounded (large artifacts stream from a file, through a buffer from the
 * memory budget); a client that takes no piece for `origin.timeout` is cut
 * and its artifact released.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { open } from 'node:fs/promises';
import { finished } from 'node:stream';
import { isVouchError } from '../../chain/errors.ts';
import type { Selection } from '../../chain/select.ts';
import { asciiJson, parseSelectionQuery, sendEmpty, statusOf, type SelectionQuery } from '../http/http-util.ts';
import type { GatewayContext } from '../context.ts';
import { proofJson } from './transparency.ts';
import type { BlockProof } from '../chain/verified-state.ts';
import { LRUCache } from 'lru-cache';
import { compactUns, fullUns } from '../../chain/uns-header.ts';

/** Every verified answer's head (status line, headers, and what node:http adds) stays within this. */
export const HEADER_BUDGET = 8 * 1024;
/** What node:http adds to a head (Date, Connection, Keep-Alive, the blank line), with room to spare. */
const NODE_HEAD_BYTES = 256;
/** Longest `Vouch-Proof` value: witness cosignature lines past it are left out (`omitted_cosignatures`). */
export const PROOF_HEADER_MAX = 3 * 1024;

/**
 * Header values made once and kept (issue 31): the UNS forms by block and by
 * block and URL, bounded in bytes. A block's record_hash fixes its content,
 * so the key is that plus what else goes into the text (service name, base).
 */
const unsTexts = new LRUCache<string, string>({ maxSize: 8 * 1024 * 1024, sizeCalculation: (v, k) => v.length + k.length + 64 });
const NO_FULL = ''; // cached: the full form is over UNS_FULL_MAX

/**
 * The UNS header value for the version `sel` serves (chain/uns-header.ts):
 * the whole block where it fits UNS_FULL_MAX and `compact` is not asked,
 * else the compact form for the URL served.
 */
export function unsHeader(ctx: GatewayContext, sel: Selection, compact = false): string {
  const service = ctx.config.service_name;
  const base = ctx.config.public_url;
  const key = `${service} ${base} ${sel.block.record_hash}`;
  if (!compact) {
    let full = unsTexts.get(key);
    if (full === undefined) {
      full = fullUns(service, sel.block) ?? NO_FULL;
      unsTexts.set(key, full);
    }
    if (full !== NO_FULL) return full;
  }
  const ckey = `${key} ${sel.entry.artifact_url}`;
  let text = unsTexts.get(ckey);
  if (text === undefined) {
    text = compactUns(service, sel.block, sel.entry, base);
    unsTexts.set(ckey, text);
  }
  return text;
}

const vibecodeTexts = new WeakMap<object, string>();

export function vibecodeHeader(ctx: GatewayContext): string {
  let text = vibecodeTexts.get(ctx.vibecode);
  if (text === undefined) {
    text = asciiJson(ctx.vibecode);
    vibecodeTexts.set(ctx.vibecode, text);
  }
  return text;
}

const proofHeaders = new WeakMap<BlockProof, string>();

/**
 * The `Vouch-Proof` header value for block `index`: minified, pure-ASCII JSON
 * `{"index","size","proof":[b64...],"checkpoint":"<signed note>"}`, the
 * block's inclusion proof in the checkpoint `/checkpoint` serves. Null when
 * that checkpoint does not cover the block (no note yet, or the block is
 * newer than it): no proof rather than a wrong one. Past PROOF_HEADER_MAX
 * the note keeps the authority's signature and the witness cosignatures
 * that fit, in the order served, and `"omitted_cosignatures":K` counts the
 * others (the lookup's `proof=1` member carries them all). Made once per
 * proof object (one per block and served note).
 */
export function proofHeader(ctx: GatewayContext, index: number): string | null {
  const p = ctx.state?.proofFor(index) ?? null;
  if (p === null) return null;
  let text = proofHeaders.get(p);
  if (text === undefined) {
    text = boundedProofJson(p, ctx.state?.note?.text ?? null);
    proofHeaders.set(p, text);
  }
  return text;
}

/** Longest `Vouch-Index-Proof` value (a URL endorsed ~100 times and more): past it the header is left out. */
export const INDEX_PROOF_HEADER_MAX = 3072;

/**
 * The `Vouch-Index-Proof` header value for a URL: the base64 of its
 * completeness-index proof (docs/spec/index.md 6) against the same served
 * note as Vouch-Proof's; null when the note commits no index, or the proof
 * is longer than INDEX_PROOF_HEADER_MAX.
 */
export function indexProofHeader(ctx: GatewayContext, url: string): string | null {
  const p = ctx.state?.indexProof('url', url) ?? null;
  if (p === null) return null;
  const text = Buffer.from(p).toString('base64');
  return text.length <= INDEX_PROOF_HEADER_MAX ? text : null;
}

/** `proofJson(p)`, or, when longer than PROOF_HEADER_MAX, with the cosignature lines past `committed` that fit. */
export function boundedProofJson(p: BlockProof, committed: string | null): string {
  const whole = proofJson(p);
  if (whole.length <= PROOF_HEADER_MAX || committed === null || !p.checkpoint.startsWith(committed)) return whole;
  const lines = p.checkpoint
    .slice(committed.length)
    .split('\n')
    .filter((l) => l !== '');
  const base = asciiJson({ ...p, checkpoint: committed, omitted_cosignatures: lines.length });
  let room = PROOF_HEADER_MAX - base.length;
  let kept = 0;
  for (const line of lines) {
    const cost = asciiJson(line + '\n').length - 2;
    if (cost > room) break;
    room -= cost;
    kept++;
  }
  const note =
    committed +
    lines
      .slice(0, kept)
      .map((l) => l + '\n')
      .join('');
  return asciiJson({ ...p, checkpoint: note, omitted_cosignatures: lines.length - kept });
}

/** Bytes a header adds to a head: `name: value` and CRLF. */
function headBytes(headers: Record<string, string>): number {
  let n = 0;
  for (const k in headers) n += k.length + headers[k]!.length + 4;
  return n;
}

/** Whether an If-None-Match value names `etag` (weak or strong) or is `*`. */
export function etagMatches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch.split(',').some((t) => {
    const v = t.trim().replace(/^W\//, '');
    return v === '*' || v === etag;
  });
}

/**
 * Most bytes handed to the socket per write. A write of the whole body lets
 * the kernel copy many MiB into the socket at once, and the client then
 * reads them back from further out in the memory hierarchy; pieces that each
 * wait for the previous one to drain keep what is in flight close to the L2
 * size. Measured (mirror hits of one 16 MiB artifact, wrk -c1 on loopback,
 * gateway / the test origin, medians of 3-6 interleaved 4 s runs): whole
 * body 0.95, 4 MiB 0.95, 2 MiB 1.14, 1 MiB 1.17, 512 KiB 1.01. Spool and
 * disk files are read into two buffers of the same size when the memory
 * budget has room for them (the 64 KiB default of a read stream: spooled cold
 * downloads 0.28 of the proxy in `npm run bench -- gateway --quick`; 1 MiB:
 * 0.44), else of MIN_PIECE.
 */
export const SEND_PIECE = 1024 * 1024;
/** The piece a file is sent in when the memory budget has no room for two SEND_PIECE buffers. */
export const MIN_PIECE = 64 * 1024;

/**
 * Tears `res` down when `progress()` is not called for `ms` (the client
 * takes nothing); stops watching when the response is done either way.
 */
export function stallGuard(res: ServerResponse, ms: number): () => void {
  const timer = setTimeout(() => {
    if (!res.writableFinished) res.destroy();
  }, ms);
  timer.unref();
  finished(res, () => clearTimeout(timer));
  return () => {
    timer.refresh();
  };
}

/** Writes `bytes` as the whole body in SEND_PIECE pieces, each after the previous one drained; stops if the response is torn down. */
export function sendPaced(res: ServerResponse, bytes: Buffer, progress: () => void): void {
  if (bytes.length <= SEND_PIECE) {
    res.end(bytes);
    return;
  }
  let offset = 0;
  const next = (): void => {
    progress();
    while (!res.destroyed) {
      const end = Math.min(offset + SEND_PIECE, bytes.length);
      const piece = bytes.subarray(offset, end);
      offset = end;
      if (offset === bytes.length) {
        res.end(piece);
        return;
      }
      if (!res.write(piece)) {
        res.once('drain', next);
        return;
      }
    }
  };
  next();
}

/** Resolves once `piece` is handed to the socket (or the response is gone), so its buffer may be reused. */
function written(res: ServerResponse, piece: Buffer, last: boolean): Promise<boolean> {
  return new Promise((resolve) => {
    if (res.destroyed) return resolve(false);
    const gone = () => resolve(false);
    res.once('close', gone);
    const done = (e?: Error | null) => {
      res.off('close', gone);
      resolve(!e && !res.destroyed);
    };
    if (last) res.end(piece, () => done());
    else res.write(piece, done);
  });
}

/**
 * Sends `size` bytes of the file at `path` from `start` (default: the whole
 * file) as the whole body through the two halves of `buffer`: each piece is
 * read while the one before it goes out, and a half is read into again only
 * once its piece was handed to the socket; stops if the response is torn down.
 */
export async function sendFile(res: ServerResponse, path: string, size: number, buffer: Buffer, progress: () => void, start = 0): Promise<void> {
  if (size === 0) {
    res.end();
    return;
  }
  const half = buffer.length >> 1;
  const halves = [buffer.subarray(0, half), buffer.subarray(half, 2 * half)];
  const fh = await open(path, 'r');
  try {
    let at = 0;
    let sending: Promise<boolean> = Promise.resolve(true);
    for (let i = 0; at < size; i ^= 1) {
      const into = halves[i]!;
      const { bytesRead } = await fh.read(into, 0, Math.min(half, size - at), start + at);
      if (bytesRead === 0) throw new Error('the file is shorter than its artifact');
      at += bytesRead;
      if (!(await sending)) return; // the piece before is out (its half free again), or the response is gone
      if (at > bytesRead) progress();
      sending = written(res, into.subarray(0, bytesRead), at === size);
    }
    await sending;
    progress();
  } finally {
    await fh.close();
  }
}

/** Selects what /v1/download would serve; null when nothing is signed. */
export function selectForDownload(ctx: GatewayContext, q: SelectionQuery): Selection | null {
  return ctx.state!.index.select(q.url, { semver: q.semver, at: q.at, today: ctx.today() });
}

export async function handleDownload(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse, search: string): Promise<void> {
  let q: SelectionQuery;
  try {
    q = parseSelectionQuery(search);
  } catch {
    return sendEmpty(res, 400);
  }
  if (ctx.state === null) return sendEmpty(res, 503, { 'retry-after': '1' });
  const sel = selectForDownload(ctx, q);
  if (sel === null) return sendEmpty(res, 404);
  if (sel.revokedBy) return sendEmpty(res, 410);
  await serveVerified(ctx, req, res, sel, {});
}

/** Longest origin content type passed on (a longer one is not a media type a client uses). */
const MAX_CONTENT_TYPE = 256;

/**
 * Fits a verified answer's head in HEADER_BUDGET: a full UNS that does not
 * fit becomes the compact form, then the kept origin headers (`extra`) go,
 * longest first. `common` and `extra` are changed in place.
 */
function fitHead(ctx: GatewayContext, sel: Selection, common: Record<string, string>, extra: Record<string, string>, contentType: string | null): void {
  const size = () => 17 + NODE_HEAD_BYTES + headBytes(common) + headBytes(extra) + (contentType === null ? 0 : 40 + contentType.length);
  if (size() <= HEADER_BUDGET) return;
  common.uns = unsHeader(ctx, sel, true);
  const names = Object.keys(extra)
    .filter((n) => !n.startsWith('x-vouch-'))
    .sort((a, b) => extra[b]!.length - extra[a]!.length);
  for (const name of names) {
    if (size() <= HEADER_BUDGET) return;
    delete extra[name];
  }
}

/**
 * Serves the selected version's bytes after the hash check, with the
 * download headers of docs/spec/design.md §3.2 (plus `extraHeaders`, e.g. an origin's
 * headers on proxy routes). The head stays within HEADER_BUDGET whatever
 * the block (`fitHead`); `o.compactUns` sends the compact UNS form whatever
 * the block's size (package-manager routes: their clients do not read it).
 */
export async function serveVerified(
  ctx: GatewayContext,
  req: IncomingMessage,
  res: ServerResponse,
  sel: Selection,
  extraHeaders: Record<string, string>,
  o: { compactUns?: boolean } = {},
): Promise<void> {
  const etag = `"${sel.entry.artifact_hash}"`;
  const common: Record<string, string> = {
    etag,
    uns: unsHeader(ctx, sel, o.compactUns === true),
    vibecode: vibecodeHeader(ctx),
    'x-content-type-options': 'nosniff',
    'content-security-policy': 'sandbox',
  };
  const proof = proofHeader(ctx, sel.block.index);
  if (proof !== null) common['vouch-proof'] = proof;
  const indexProof = indexProofHeader(ctx, sel.entry.artifact_url);
  if (proof !== null && indexProof !== null) common['vouch-index-proof'] = indexProof;
  if (etagMatches(req.headers['if-none-match'], etag)) {
    fitHead(ctx, sel, common, {}, null);
    res.writeHead(304, common);
    res.end();
    return;
  }
  const abort = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on('close', onClose);
  let obtained;
  try {
    obtained = await ctx.artifacts.obtain(sel.entry.artifact_url, sel.entry.artifact_hash, { signal: abort.signal });
  } catch (e) {
    res.off('close', onClose);
    if (abort.signal.aborted) {
      res.destroy();
      return;
    }
    if (isVouchError(e) && e.kind === 'integrity')
      ctx.log.warn('hash mismatch: refused to serve', { url: sel.entry.artifact_url, expected: sel.entry.artifact_hash, ...(e.evidence ?? {}) });
    const status = isVouchError(e) && e.code === 'too_large' ? 502 : statusOf(e);
    return sendEmpty(res, status);
  }
  res.off('close', onClose);
  const { artifact } = obtained;
  let inFlight = false;
  try {
    const contentType = artifact.contentType && artifact.contentType.length <= MAX_CONTENT_TYPE ? artifact.contentType : 'application/octet-stream';
    const extra = { ...extraHeaders };
    fitHead(ctx, sel, common, extra, contentType);
    res.writeHead(200, { ...extra, 'content-type': contentType, 'content-length': String(artifact.size), ...common });
    if (req.method === 'HEAD') {
      res.end();
    } else if (artifact.bytes !== undefined) {
      // The socket reads the bytes until the response is done (or torn down): released then, not before.
      inFlight = true;
      finished(res, () => artifact.release());
      sendPaced(res, artifact.bytes, stallGuard(res, ctx.config.origin.timeout * 1000));
    } else {
      const progress = stallGuard(res, ctx.config.origin.timeout * 1000);
      // The read buffer is charged to the memory budget while it has room; else the file goes out in small pieces.
      const window = ctx.artifacts.sendBuffer?.(2 * SEND_PIECE, 2 * MIN_PIECE) ?? { buffer: Buffer.allocUnsafeSlow(2 * MIN_PIECE), release: () => {} };
      try {
        await sendFile(res, artifact.path!, artifact.size, window.buffer, progress).catch(() => res.destroy());
      } finally {
        window.release();
      }
    }
  } finally {
    if (!inFlight) artifact.release();
  }
}
