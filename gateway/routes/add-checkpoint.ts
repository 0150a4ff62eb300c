/**
 * `POST /add-checkpoint` (C2SP tlog-witness) on a gateway configured with a
 * `witness` section: the body (at most WITNESS_BODY_LIMIT bytes, else 413)
 * goes to `gateway/transparency/witness.ts`, whose answer is sent as the spec says:
 * 200 with the cosignature line(s) (`text/plain; charset=utf-8`), 409 with
 * the recorded size and a newline (`text/x.tlog.size`), 400, 403, 404, 422
 * with a one-line `text/plain` reason. Without a witness: 404.
 *
 * Must hold: the answer is sent only after the witness returned, that is,
 * after a new record was persisted (tlog-witness: "persist before
 * responding").
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isVouchError } from '../../chain/errors.ts';
import { readBody } from '../http/http-util.ts';
import type { GatewayContext } from '../context.ts';

/** Bound of an add-checkpoint body: 63 proof lines and a note with a few signatures fit many times over. */
export const WITNESS_BODY_LIMIT = 64 * 1024;

function sendText(res: ServerResponse, status: number, text: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, {
    'content-type': type,
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
  });
  res.end(text);
}

export async function handleAddCheckpoint(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const witness = ctx.witness ?? null;
  if (witness === null) {
    req.resume();
    sendText(res, 404, 'this gateway is not a witness (no witness section in its configuration)\n');
    return;
  }
  let body: Buffer;
  try {
    body = await readBody(req, WITNESS_BODY_LIMIT, '/add-checkpoint');
  } catch (e) {
    if (isVouchError(e) && e.code === 'too_large') {
      witness.countTooLarge();
      sendText(res, 413, `the body is over ${WITNESS_BODY_LIMIT} bytes\n`);
      return;
    }
    throw e;
  }
  await witness.learnKeys(body); // a note by a key not trusted yet: the log's key events first (docs/spec/key-events.md)
  const a = witness.addCheckpoint(body);
  if (a.status === 200) sendText(res, 200, a.lines.map((l) => l + '\n').join(''));
  else if (a.status === 409) sendText(res, 409, `${a.size}\n`, 'text/x.tlog.size');
  else sendText(res, a.status, a.message.replace(/[\r\n]+/g, ' ') + '\n');
}
