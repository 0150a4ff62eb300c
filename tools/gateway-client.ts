/**
 * What the commands that talk to a running authority gateway share: the
 * `--token-file` (one token, never printed) and the `--gateway` base URL,
 * a JSON POST, and a refusal turned into the error the offline command
 * would raise (the API's JSON error body: `status`/`message`, or
 * `error.code`/`error.message`).
 */
import { readFileSync } from 'node:fs';
import { VouchError, type ErrorCode } from '../chain/errors.ts';
import { UsageError } from './command.ts';
import { EXIT_CODE } from './exit-codes.ts';

const TOKEN_MAX_BYTES = 4096;
const ANSWER_MAX_BYTES = 4 * 1024 * 1024;

export interface Answer { httpStatus: number; body: Record<string, any> }

export function readToken(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new VouchError('io_error', `cannot read --token-file ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const token = text.trim();
  if (token.length === 0 || token.length > TOKEN_MAX_BYTES || /\s/.test(token)) {
    throw new UsageError(`--token-file ${file} must hold one token (no spaces, at most ${TOKEN_MAX_BYTES} bytes)`);
  }
  return token;
}

export function gatewayBase(given: string): string {
  if (!/^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/i.test(given)) throw new UsageError(`--gateway must be an absolute http(s) URL, got ${JSON.stringify(given)}`);
  return given.replace(/\/+$/, '');
}

/** A gateway's failure as the error the offline command would have raised. */
export function gatewayError(a: Answer): VouchError {
  const b = a.body;
  const given = typeof b.status === 'string' ? b.status : typeof b.error?.code === 'string' ? b.error.code : null;
  const code = given !== null && given in EXIT_CODE ? given as ErrorCode : 'internal_error';
  const said = typeof b.message === 'string' ? b.message : typeof b.error?.message === 'string' ? b.error.message : null;
  const message = said ?? `the gateway answered ${a.httpStatus}`;
  return new VouchError(code, `the gateway refused: ${message}`, typeof b.resource === 'string' ? { resource: b.resource } : {});
}

/** POST `body` as JSON with the submit token; the answer's status and JSON body (empty when it is not JSON). */
export async function postJson(base: string, path: string, token: string, body: unknown): Promise<Answer> {
  let res: Response;
  try {
    res = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new VouchError('origin_error', `cannot reach the gateway ${base}: ${cause?.code ?? cause?.message ?? (e as Error).message}`);
  }
  const text = await res.text();
  let parsed: Record<string, any> = {};
  try {
    const v = JSON.parse(text.slice(0, ANSWER_MAX_BYTES));
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) parsed = v;
  } catch { /* not JSON: the status says it */ }
  return { httpStatus: res.status, body: parsed };
}
