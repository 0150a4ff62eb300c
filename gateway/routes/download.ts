/**
 * GET|HEAD /v1/download (DESIGN 3.2): select the block (3.3) -> get bytes
 * from the mirror or the origin -> hash with the block's algorithm ->
 * compare with artifact_hash -> serve only on equality.
 *
 * Trusts: the verified index, and `ArtifactSource.obtain`, which resolves
 * only with bytes that hashed to the artifact_hash it was given.
 * Every verified answer (200, 304, also on the proxy routes, which answer
 * through `serveVerified`) carries `Vouch-Proof`: the block's inclusion
 * proof in the served checkpoint, with that signed note (issue 17).
 * Must hold: no byte of an artifact reaches the client before the check
 * passed; failures have an empty body and the status of the table in 3.2;
 * memory per download stays bounded (large artifacts stream from a file);
 * an answer whose client takes no piece (at most SEND_PIECE bytes; in
 * practice the kernel takes a third of the socket's send buffer at a time)
 * for `origin.timeout` is torn down and its artifact released, so a client that
 * stops reading cannot hold memory (or a spool file) longer than that; the
 * buffer a file is sent through comes out of the memory budget.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { open } from 'node:fs/promises';
import { finished } from 'node:stream';
import { isVouchError } from '../../chain/errors.ts';
import type { Block } from '../../chain/block.ts';
import type { Selection } from '../../chain/select.ts';
import { asciiJson, parseSelectionQuery, sendEmpty, statusOf, type SelectionQuery } from '../http-util.ts';
import type { ArtifactSource, GatewayContext } from '../context.ts';
import { proofJson } from './transparency.ts';

/** The UNS header value: `{"<service>":{"endorsement":<block>}}`, pure ASCII. */
export function unsHeader(serviceName: string, block: Block): string {
  return asciiJson({ [serviceName]: { endorsement: block } });
}

export function vibecodeHeader(ctx: GatewayContext): string {
  return asciiJson(ctx.vibecode);
}

/**
 * The `Vouch-Proof` header value for block `index`: minified, pure-ASCII JSON
 * `{"index","size","proof":[b64...],"checkpoint":"<signed note>"}`, the
 * block's inclusion proof in the checkpoint `/checkpoint` serves. Null when
 * that checkpoint does not cover the block (no note yet, or the block is
 * newer than it): no proof rather than a wrong one.
 */
export function proofHeader(ctx: GatewayContext, index: number): string | null {
  const p = ctx.state?.proofFor(index) ?? null;
  return p === null ? null : proofJson(p);
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
const SEND_PIECE = 1024 * 1024;
/** The piece a file is sent in when the memory budget has no room for two SEND_PIECE buffers. */
const MIN_PIECE = 64 * 1024;

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
  return () => { timer.refresh(); };
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
 * Sends the file at `path` (`size` bytes) as the whole body through the two
 * halves of `buffer`: each piece is read while the one before it goes out,
 * and a half is read into again only once its piece was handed to the
 * socket; stops if the response is torn down.
 */
async function sendFile(res: ServerResponse, path: string, size: number, buffer: Buffer, progress: () => void): Promise<void> {
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
      const { bytesRead } = await fh.read(into, 0, Math.min(half, size - at), at);
      if (bytesRead === 0) throw new Error('the file is shorter than its artifact');
      at += bytesRead;
      if (!await sending) return; // the piece before is out (its half free again), or the response is gone
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

/**
 * Serves the selected version's bytes after the hash check, with the
 * download headers of DESIGN 3.2 (plus `extraHeaders`, e.g. an origin's
 * headers on proxy routes).
 */
export async function serveVerified(
  ctx: GatewayContext,
  req: IncomingMessage,
  res: ServerResponse,
  sel: Selection,
  extraHeaders: Record<string, string>,
): Promise<void> {
  const etag = `"${sel.entry.artifact_hash}"`;
  const uns = unsHeader(ctx.config.service_name, sel.block);
  const common: Record<string, string> = { etag, uns, vibecode: vibecodeHeader(ctx), 'x-content-type-options': 'nosniff', 'content-security-policy': 'sandbox' };
  const proof = proofHeader(ctx, sel.block.index);
  if (proof !== null) common['vouch-proof'] = proof;
  if (etagMatches(req.headers['if-none-match'], etag)) {
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
    if (isVouchError(e) && e.kind === 'integrity') ctx.log.warn('hash mismatch: refused to serve', { url: sel.entry.artifact_url, expected: sel.entry.artifact_hash, ...(e.evidence ?? {}) });
    const status = isVouchError(e) && e.code === 'too_large' ? 502 : statusOf(e);
    return sendEmpty(res, status);
  }
  res.off('close', onClose);
  const { artifact } = obtained;
  let inFlight = false;
  try {
    res.writeHead(200, {
      ...extraHeaders,
      'content-type': artifact.contentType || 'application/octet-stream',
      'content-length': String(artifact.size),
      ...common,
    });
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
