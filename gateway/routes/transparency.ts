/**
 * The transparency routes (issue 17): `GET /checkpoint` (the committed note
 * and cosignatures), `/tile/<L>/<N>[.p/<W>]` and `/tile/entries/<N>` (C2SP
 * tlog-tiles), `/v1/proof/inclusion?index=&size=` and
 * `/v1/proof/consistency?from=&to=` (JSON).
 * Trusts: the chain state's tree (verified blocks only) and its served note,
 * opened against the tree.
 * Must hold: every answer is bounded and costs O(log n) lookups, never a
 * pass over the chain; tiles and bundles name only entries the tree holds
 * (404 beyond, 400 for a non-tile path) and never change once served;
 * sizes beyond the tree are 404, malformed or out-of-order parameters 400.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { VouchError } from '../../chain/errors.ts';
import { base64Decode, base64Encode } from '../../chain/encoding.ts';
import { isValidKeyName, SIG_ED25519, verifierKey } from '../../chain/note.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { entryBundle, parseTilePath, TILE_WIDTH } from '../../chain/merkle-tree.ts';
import { asciiJson, sendEmpty, sendJson } from '../http/http-util.ts';
import type { BlockProof } from '../chain/verified-state.ts';
import type { GatewayContext } from '../context.ts';

/**
 * Cache-Control of every tile and bundle, full or partial: the bytes at a
 * tile path never change (C2SP tlog-tiles: a partial tile of width W is
 * the same W hashes forever; a grown tree is served under another width).
 */
export const TILE_CACHE = 'public, max-age=31536000, immutable';

function ready(ctx: GatewayContext): NonNullable<GatewayContext['state']> {
  if (ctx.state === null) throw new VouchError('not_ready', 'the chain is not loaded yet; retry shortly');
  return ctx.state;
}

/**
 * The note verifier key (`<origin>+<hex8 key ID>+<base64(0x01 ‖ key)>`) of
 * an online key (base64; default: the key in force, docs/spec/key-events.md) for
 * `/v1/authority`: the origin of the served checkpoint, else the configured
 * `chain.origin`; null when neither is known.
 */
export function noteVerifierKey(
  ctx: GatewayContext,
  state: NonNullable<GatewayContext['state']>,
  publicKey: string = state.keys.online.publicKey,
): string | null {
  const configured = (ctx.config.chain as { origin?: unknown }).origin;
  const origin = state.note?.checkpoint.origin ?? (typeof configured === 'string' && configured !== '' ? configured : null);
  const key = base64Decode(publicKey);
  if (origin === null || key === null || key.length !== 32 || !isValidKeyName(origin)) return null;
  return verifierKey(nodeBackend, origin, SIG_ED25519, key);
}

/** Proofs' JSON by the proof (the chain state keeps a proof object per block and served note). */
const proofTexts = new WeakMap<BlockProof, string>();

/**
 * A block's proof as minified pure-ASCII JSON (non-ASCII as \uXXXX: the
 * note's em dash is \u2014): the `Vouch-Proof` header value, and member
 * `proof` of a `proof=1` lookup. Made once per proof object.
 */
export function proofJson(p: BlockProof): string {
  let text = proofTexts.get(p);
  if (text === undefined) {
    text = asciiJson(p);
    proofTexts.set(p, text);
  }
  return text;
}

const proofTags = new WeakMap<BlockProof, string>();

/**
 * What a proof-carrying lookup's ETag adds to the block's: the note's size
 * and the first 16 hex digits of the sha256 of the note text served (its
 * cosignatures included), so the tag changes whenever the body does: a
 * newer note, or cosignatures arriving for the same one. Made once per
 * proof object.
 */
export function proofTag(p: BlockProof): string {
  let tag = proofTags.get(p);
  if (tag === undefined) {
    tag = `${p.size}-${createHash('sha256').update(p.checkpoint, 'utf8').digest('hex').slice(0, 16)}`;
    proofTags.set(p, tag);
  }
  return tag;
}

/** `GET /checkpoint`: the served checkpoint note, as text. */
export function handleCheckpointNote(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse): void {
  const text = ready(ctx).servedCheckpointNote();
  if (text === null)
    throw new VouchError('not_found', 'this chain has no checkpoint.note yet (it gains one with its next append)', { resource: '/checkpoint' });
  const body = Buffer.from(text, 'utf8');
  res.writeHead(200, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': String(body.length),
    'cache-control': 'no-cache',
    'x-content-type-options': 'nosniff',
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}

/** `GET /tile/...`: a hash tile or an entry bundle; failures are empty-bodied (a byte endpoint). */
export function handleTile(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse, path: string): void {
  const ref = parseTilePath(path.slice(1));
  if (ref === null) return sendEmpty(res, 400);
  if (ctx.state === null) return sendEmpty(res, 503, { 'retry-after': '1' });
  const state = ctx.state;
  const first = ref.index * TILE_WIDTH;
  let body: Uint8Array;
  if (ref.kind === 'entries') {
    if (first + ref.width > state.size || first + ref.width > state.tree.size) return sendEmpty(res, 404);
    const entries: Uint8Array[] = [];
    for (let i = first; i < first + ref.width; i++) entries.push(state.index.recordHashBytes(i));
    body = entryBundle(entries);
  } else {
    // Tree level 8L holds floor(size / 256^L) complete subtrees: the tile needs `first + width` of them.
    const available = Math.floor(state.tree.size / 2 ** (8 * ref.level));
    if (first + ref.width > available) return sendEmpty(res, 404);
    body = state.tree.tile(ref.level, ref.index, ref.width);
  }
  res.writeHead(200, {
    'content-type': 'application/octet-stream',
    'content-length': String(body.length),
    'cache-control': TILE_CACHE,
    'x-content-type-options': 'nosniff',
  });
  res.end(req.method === 'HEAD' ? undefined : Buffer.from(body.buffer, body.byteOffset, body.length));
}

/** The non-negative integer parameters `names` of a query (undefined when absent); 400 when malformed or repeated. */
export function intParams(search: string, names: readonly string[]): Record<string, number | undefined> {
  if (search.length > 1024) throw new VouchError('bad_request', 'query string longer than 1024 bytes');
  const params = new URLSearchParams(search);
  const out: Record<string, number | undefined> = {};
  for (const name of names) {
    const all = params.getAll(name);
    if (all.length > 1) throw new VouchError('bad_request', `parameter ${name} given ${all.length} times`);
    const v = all[0];
    if (v === undefined) continue;
    if (!/^(0|[1-9][0-9]{0,15})$/.test(v) || !Number.isSafeInteger(Number(v))) throw new VouchError('bad_request', `${name} must be a non-negative integer`);
    out[name] = Number(v);
  }
  return out;
}

/** The size a proof is against when the client names none: the served checkpoint's, else the tree's. */
function defaultSize(state: NonNullable<GatewayContext['state']>): number {
  return state.note?.checkpoint.size ?? state.tree.size;
}

/** `GET /v1/proof/inclusion?index=I[&size=N]`. */
export function handleInclusionProof(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse, search: string): void {
  const { index, size } = intParams(search, ['index', 'size']);
  if (index === undefined) throw new VouchError('bad_request', 'missing index parameter');
  const state = ready(ctx);
  const tree = state.tree;
  if (size !== undefined && size > tree.size)
    throw new VouchError('not_found', `size ${size} is beyond the log's ${tree.size} entries`, { resource: `size=${size}` });
  const n = size ?? defaultSize(state);
  if (index >= n) {
    if (size !== undefined) throw new VouchError('bad_request', `index ${index} is not below size ${size}`);
    throw new VouchError('not_found', `index ${index} is beyond the checkpoint's ${n} entries`, { resource: `index=${index}` });
  }
  sendJson(res, 200, {
    success: true,
    index,
    size: n,
    leaf_hash: base64Encode(tree.leafHashAt(index)),
    proof: tree.inclusionProof(index, n).map(base64Encode),
  });
}

/** `GET /v1/proof/consistency?from=A[&to=B]`. */
export function handleConsistencyProof(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse, search: string): void {
  const { from, to } = intParams(search, ['from', 'to']);
  if (from === undefined) throw new VouchError('bad_request', 'missing from parameter');
  const state = ready(ctx);
  const tree = state.tree;
  if (to !== undefined && to > tree.size) throw new VouchError('not_found', `size ${to} is beyond the log's ${tree.size} entries`, { resource: `to=${to}` });
  const n = to ?? defaultSize(state);
  if (from > n) {
    if (to !== undefined) throw new VouchError('bad_request', `from ${from} is greater than to ${to}`);
    throw new VouchError('not_found', `from ${from} is beyond the checkpoint's ${n} entries`, { resource: `from=${from}` });
  }
  sendJson(res, 200, { success: true, from, to: n, proof: tree.consistencyProof(from, n).map(base64Encode) });
}
