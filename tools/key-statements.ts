/**
 * What `vouch root …`, `vouch key …` and `vouch reendorse` share
 * (docs/spec/key-events.md): a chain's verified key state, statement files read
 * (bounded, strict) and written (atomically, never over another file), the
 * checks applyKeyEvent makes that need no signature, and a statement told
 * in words.
 *
 * Trusts: a chain directory only as far as `verifyDirectory` verifies it; a
 * gateway's GET /v1/keys only to draft a statement (the holders sign what
 * they read, and the chain checks it again when it is applied).
 * Must hold: a refused statement is a `bad_statement` or `stale_statement`
 * VouchError naming applyKeyEvent's reason; nothing here writes a chain.
 */
import { linkSync, readFileSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { createPublicKey } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import type { Block } from '../chain/block.ts';
import type { EndorsementInput } from '../chain/build.ts';
import type { CryptoBackend } from '../chain/crypto-backend.ts';
import { base64Decode, base64Encode } from '../chain/encoding.ts';
import { VouchError } from '../chain/errors.ts';
import {
  applyKeyEvent,
  KeyEventError,
  parseSignedStatement,
  statementMessage,
  type KeyState,
  type SignedStatement,
  type Statement,
} from '../chain/key-events.ts';
import type { VerifierState } from '../chain/verify.ts';
import { isFullOrderPublicKey } from '../chain/weak-key.ts';
import { nodeBackend, rawPublicKey } from '../platform/node-crypto.ts';
import { writeDurably } from '../platform/durable-file.ts';
import { type ChainStore, openChain } from '../store/chain-repo.ts';
import { verifyDirectory } from '../store/parallel-verify.ts';
import { UsageError } from './command.ts';

/** Largest statement file read (64 signatures and 32 root keys fit in ~20 KiB). */
export const STATEMENT_MAX_BYTES = 256 * 1024;

/** A KeyEventError as the CLI reports it: stale_statement for a used sequence, else bad_statement. */
export function statementError(e: KeyEventError, tail = '; nothing appended'): VouchError {
  return new VouchError(e.stale ? 'stale_statement' : 'bad_statement', `${e.why}${tail}`);
}

/** The chain in DIR verified whole (every block, the checkpoint), with its key state; `write`: opened to append (as vouch endorse opens it). */
export async function verifiedChain(dir: string, write = false): Promise<{ repo: ChainStore; state: VerifierState & { keys: KeyState } }> {
  const repo = await openChain(dir, { repair: write });
  const { state } = await verifyDirectory(repo, {});
  if (state.keys === null) throw new VouchError('not_a_chain', `${dir} holds no block 0`);
  return { repo, state: state as VerifierState & { keys: KeyState } };
}

/** The key state a running gateway serves (GET /v1/keys: `chain`, `state`, `size` of its checkpoint), to draft a statement from. */
export async function gatewayKeyState(base: string): Promise<{ keys: KeyState; size: number }> {
  let res: Response;
  try {
    res = await fetch(`${base}/v1/keys`, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(30_000) });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new VouchError('origin_error', `cannot reach the gateway ${base}: ${cause?.code ?? cause?.message ?? (e as Error).message}`);
  }
  const text = await res.text();
  let body: { chain?: unknown; state?: KeyState; size?: unknown; message?: unknown };
  try {
    body = JSON.parse(text.slice(0, 16 * 1024 * 1024));
  } catch {
    if (res.status === 404) throw new VouchError('not_found', `${base} has no GET /v1/keys (a gateway from before key events): use --chain DIR with a clone`);
    throw new VouchError('bad_answer', `GET ${base}/v1/keys answered ${res.status}, not JSON`);
  }
  if (res.status === 404 && typeof body.message === 'string' && body.message.startsWith('no such path')) {
    throw new VouchError('not_found', `${base} has no GET /v1/keys (a gateway from before key events): use --chain DIR with a clone`);
  }
  if (!res.ok) throw (await import('./commands/endorse-gateway.ts')).gatewayError({ httpStatus: res.status, body: body as Record<string, any> });
  const s = body.state;
  const isKey = (k: unknown) => typeof k === 'string' && base64Decode(k)?.length === 32;
  if (
    typeof s !== 'object' ||
    s === null ||
    s.chain !== body.chain ||
    typeof s.chain !== 'string' ||
    !/^[0-9a-f]{64}$/.test(s.chain) ||
    !Number.isSafeInteger(s.sequence) ||
    typeof s.online?.signer !== 'string' ||
    !isKey(s.online?.publicKey) ||
    !Number.isSafeInteger(s.online?.since) ||
    !Array.isArray(s.retired) ||
    !Array.isArray(s.compromised) ||
    !Array.isArray(s.voids) ||
    !isKey(s.first) ||
    (s.root !== null &&
      (typeof s.root !== 'object' || !Array.isArray(s.root.keys) || !Number.isSafeInteger(s.root.threshold) || !Number.isSafeInteger(s.root.version)))
  ) {
    throw new VouchError('bad_answer', `GET ${base}/v1/keys: its state is not a key state (docs/spec/key-events.md)`);
  }
  const size = typeof body.size === 'number' && Number.isSafeInteger(body.size) && body.size > 0 ? body.size : Number.MAX_SAFE_INTEGER;
  return { keys: s, size };
}

/**
 * The key state to draft a statement from, and the index its key block
 * would take: a chain directory verified whole (--chain), or a running
 * authority's GET /v1/keys (--gateway; the size of its checkpoint).
 */
export async function draftState(v: Record<string, any>): Promise<{ keys: KeyState; at: number }> {
  if ((v.chain === undefined) === (v.gateway === undefined)) throw new UsageError('give --chain DIR (a clone is enough) or --gateway URL');
  if (v.chain !== undefined) {
    const { state } = await verifiedChain(v.chain);
    return { keys: state.keys, at: state.size };
  }
  const { gatewayBase } = await import('./commands/endorse-gateway.ts'); // the gateway client, loaded only when used
  const { keys, size } = await gatewayKeyState(gatewayBase(v.gateway));
  return { keys, at: size };
}

/** A public key given as base64 (raw 32 bytes) or as a PEM file (public or private key). @throws UsageError */
export function publicKeyArg(given: string, what: string): string {
  if (/^[A-Za-z0-9+/]{43}=$/.test(given)) {
    const raw = base64Decode(given);
    if (raw !== null && raw.length === 32) return given;
  }
  let pem: Buffer;
  try {
    if (statSync(given).size > 64 * 1024) throw new UsageError(`${what} ${given} is larger than a key file`);
    pem = readFileSync(given);
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw new UsageError(
      `${what} must be base64 of a raw 32-byte ed25519 key or a PEM key file; ${JSON.stringify(given.slice(0, 100))} is neither (${(e as NodeJS.ErrnoException).code ?? 'unreadable'})`,
    );
  }
  try {
    const key = createPublicKey(pem);
    if (key.asymmetricKeyType !== 'ed25519') throw new UsageError(`${what} ${given} holds a ${key.asymmetricKeyType} key; vouch needs ed25519`);
    return base64Encode(rawPublicKey(key));
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw new UsageError(`${what} ${given} is not a PEM ed25519 key`);
  }
}

/** Refuses a weak key at once (small-order, mixed-order, non-canonical): applyKeyEvent would. */
export function fullOrderKey(b64: string, what: string): string {
  if (!isFullOrderPublicKey(base64Decode(b64)!))
    throw new VouchError('bad_statement', `${what} ${b64} is not a full-order ed25519 key (small-order or non-canonical): refused`);
  return b64;
}

/**
 * What applyKeyEvent refuses of `statement` on a chain in `keys` (the
 * block at index `at`) that needs no signature: it runs with every holder
 * concerned counted as signing.
 * @throws VouchError bad_statement / stale_statement
 */
export function precheck(keys: KeyState, statement: Statement, at: number): KeyState {
  const holders = new Set([...(keys.root?.keys ?? []), ...(statement.action === 'root' ? statement.root.keys : [])]);
  const anyone: CryptoBackend = { ...nodeBackend, verify: () => true };
  const sig = base64Encode(new Uint8Array(64));
  try {
    return applyKeyEvent(anyone, keys, { statement, signatures: [...holders].map((public_key) => ({ public_key, signature: sig })) }, at);
  } catch (e) {
    if (e instanceof KeyEventError) throw statementError(e, '; no statement written');
    throw e;
  }
}

/** Reads a statement file (bounded, strict). @throws VouchError io_error / bad_statement */
export function readStatementFile(path: string): SignedStatement {
  let text: string;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw new VouchError('io_error', `${path} is not a file`);
    if (st.size > STATEMENT_MAX_BYTES) throw new VouchError('bad_statement', `${path} is larger than a statement file (${STATEMENT_MAX_BYTES} bytes at most)`);
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw new VouchError('io_error', `cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new VouchError('bad_statement', `${path} is not JSON (a statement file: {"statement": …, "signatures": […]})`);
  }
  try {
    return parseSignedStatement(value);
  } catch (e) {
    if (e instanceof KeyEventError) throw new VouchError('bad_statement', `${path}: ${e.why}`);
    throw e;
  }
}

export function statementText(signed: SignedStatement): string {
  return JSON.stringify({ statement: signed.statement, signatures: signed.signatures }, null, 2) + '\n';
}

/**
 * Writes `text` to `path` whole: a temporary file in the same directory,
 * synced, then linked (`create`: never over an existing file) or renamed
 * (replacing `path` in one step).
 */
export function writeAtomically(path: string, text: string, mode: 'create' | 'replace'): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${Date.now()}.tmp`);
  try {
    writeDurably(tmp, Buffer.from(text), 0o644, 'wx');
    if (mode === 'create') {
      try {
        linkSync(tmp, path);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'EEXIST')
          throw new VouchError('io_error', `${path} exists: a statement file is never overwritten (give another --out)`);
        throw e;
      }
      unlinkSync(tmp);
    } else {
      renameSync(tmp, path);
    }
  } catch (e) {
    try {
      unlinkSync(tmp);
    } catch {
      /* gone already */
    }
    if (e instanceof VouchError) throw e;
    throw new VouchError('io_error', `cannot write ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/** One line saying what a statement does. */
export function describeStatement(s: Statement): string {
  const online = `online key ${s.online.signer} ${s.online.public_key}`;
  switch (s.action) {
    case 'root':
      return `key event ${s.sequence} on chain ${s.chain.slice(0, 16)}…: ${s.root.version === 1 ? 'adopts' : 'rotates to'} root version ${s.root.version}, ${s.root.threshold} of ${s.root.keys.length} holders; ${online}`;
    case 'key':
      return `key event ${s.sequence} on chain ${s.chain.slice(0, 16)}…: routine rotation to the ${online}`;
    case 'compromise':
      return `key event ${s.sequence} on chain ${s.chain.slice(0, 16)}…: declares ${s.compromised} compromised after block ${s.good_through} (its later blocks void); the ${online} takes over`;
  }
}

/** Which signatures verify over the statement (each holder once). */
export function signatureReport(signed: SignedStatement): { valid: string[]; invalid: string[] } {
  const message = statementMessage(signed.statement);
  const valid: string[] = [];
  const invalid: string[] = [];
  for (const s of signed.signatures) {
    const ok = nodeBackend.verify(base64Decode(s.public_key)!, message, base64Decode(s.signature)!);
    (ok && !valid.includes(s.public_key) ? valid : invalid).push(s.public_key);
  }
  return { valid, invalid };
}

/** The key state on one line (verify's summary, apply's result). */
export function keyStateLine(k: KeyState): string {
  const root = k.root ? `root v${k.root.version} ${k.root.threshold}-of-${k.root.keys.length}` : 'no root';
  return `${root}, online key ${k.online.signer} ${k.online.publicKey} since block ${k.online.since}, ${k.sequence} key event${k.sequence === 1 ? '' : 's'}`;
}

/** One void block of a compromise and its entries still to decide (vouch reendorse). */
export interface VoidGroup {
  block: Block;
  entries: EndorsementInput[];
}
/** An entry vouch reendorse does not endorse again: its URL and the line that says why. */
export interface Refusal {
  url: string;
  line: string;
}

/** The comment of a re-endorsement block: which void block it replaces. */
export function commentOf(g: VoidGroup): string {
  const c = `re-endorsed from void block ${g.block.index}`;
  return g.block.comment ? `${c}: ${g.block.comment}`.slice(0, 4096) : c;
}
