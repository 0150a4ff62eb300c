/**
 * Browsing endpoints for the explorer and for scripts (all JSON with
 * `success`, read-only, bounded):
 * - GET /v1/blocks?before=N&limit=L  newest blocks first (summaries; `void: true` on a voided block)
 * - GET /v1/block?index=N | ?hash=H  one block, as stored (`void: true` when a compromise voided it)
 * - GET /v1/versions?url=U           every endorsement of a URL, newest first
 * - GET /v1/units?name=owner/name    the blocks of a unit, newest first
 * Key events (docs/spec/key-events.md): a key block's summary carries
 * `key_event` (what it did), a void block `void` (its range and the
 * compromise block that voided it) in every answer above.
 * Must hold: answers come only from the verified index; list sizes are
 * capped; bad parameters are 400 `bad_request`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { VouchError } from '../../chain/errors.ts';
import { isArtifactUrl, isHex64, isUnitName, type Block } from '../../chain/block.ts';
import { sendJson } from '../http/http-util.ts';
import type { GatewayContext } from '../context.ts';

export const MAX_LIST = 200;

function params(search: string, allowed: string[]): Record<string, string> {
  const p = new URLSearchParams(search);
  const out: Record<string, string> = {};
  for (const name of allowed) {
    const all = p.getAll(name);
    if (all.length > 1) throw new VouchError('bad_request', `parameter ${name} given ${all.length} times`);
    if (all[0] !== undefined) out[name] = all[0];
  }
  return out;
}

function int(value: string | undefined, name: string, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d{1,15}$/.test(value)) throw new VouchError('bad_request', `${name} must be a non-negative integer`);
  const n = Number(value);
  if (n < min || n > max) throw new VouchError('bad_request', `${name} must be from ${min} to ${max}`);
  return n;
}

function state(ctx: GatewayContext) {
  if (ctx.state === null) throw new VouchError('not_ready', 'the chain is not loaded yet; retry shortly');
  return ctx.state;
}

/** What a key block did, for lists and the explorer. */
export function keyEventOf(b: Block): Record<string, unknown> | null {
  const s = b.payload.statement;
  if (b.payload.intent !== 'key' || !s) return null;
  const common = { action: s.action, sequence: s.sequence, online: s.online.public_key, signatures: b.payload.signatures?.length ?? 0 };
  if (s.action === 'root') return { ...common, root: { version: s.root.version, threshold: s.root.threshold, keys: s.root.keys.length } };
  if (s.action === 'compromise')
    return {
      ...common,
      compromised: s.compromised,
      good_through: s.good_through,
      voids: s.good_through + 1 <= b.index - 1 ? [s.good_through + 1, b.index - 1] : null,
    };
  return common;
}

/** The void range holding block `i` and the compromise block after it (`{from, to, compromise}`), or null. */
export function voidOf(index: { isVoid(i: number): boolean; voids(): [number, number][] }, i: number): { from: number; to: number; compromise: number } | null {
  if (!index.isVoid(i)) return null;
  const r = index.voids().find(([a, b]) => i >= a && i <= b)!;
  return { from: r[0], to: r[1], compromise: r[1] + 1 };
}

/** A one-line view of a block for lists. */
export function blockSummary(b: Block, revokedBy: Block | null = null, isVoid = false): Record<string, unknown> {
  const keyEvent = keyEventOf(b);
  return {
    index: b.index,
    record_hash: b.record_hash,
    posted: b.posted,
    intent: b.payload.intent,
    uns: b.payload.uns,
    semver: b.payload.semver,
    effective_date: b.payload.effective_date,
    endorsements: b.payload.endorsements.length,
    comment: b.comment.length > 200 ? b.comment.slice(0, 200) + '…' : b.comment,
    ...(b.payload.intent === 'revoke' ? { target_hash: b.payload.target_hash } : {}),
    ...(revokedBy ? { revoked_by: revokedBy.index } : {}),
    ...(keyEvent ? { key_event: keyEvent } : {}),
    ...(isVoid ? { void: true } : {}),
  };
}

export function handleBlocks(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse, search: string): void {
  const s = state(ctx);
  const p = params(search, ['before', 'limit']);
  const before = int(p.before, 'before', 0, s.size, s.size);
  const limit = int(p.limit, 'limit', 1, MAX_LIST, 20);
  const blocks: Record<string, unknown>[] = [];
  for (let i = before - 1; i >= 0 && blocks.length < limit; i--) blocks.push(blockSummary(s.index.block(i)!, null, s.index.isVoid(i)));
  sendJson(res, 200, { success: true, size: s.size, before, blocks });
}

export function handleBlock(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse, search: string): void {
  const s = state(ctx);
  const p = params(search, ['index', 'hash']);
  let block: Block | undefined;
  if (p.hash !== undefined) {
    if (!isHex64(p.hash)) throw new VouchError('bad_request', 'hash must be 64 lowercase hex digits');
    block = s.index.blockByHash(p.hash);
  } else if (p.index !== undefined) {
    block = s.index.block(int(p.index, 'index', 0, Number.MAX_SAFE_INTEGER, 0));
  } else throw new VouchError('bad_request', 'give index or hash');
  if (!block) throw new VouchError('not_found', 'no such block', { resource: p.hash ?? p.index });
  const revokedBy = block.payload.intent === 'endorse' ? s.index.revocationOf(block, ctx.today()) : null;
  const voided = voidOf(s.index, block.index);
  sendJson(res, 200, {
    success: true,
    ...block,
    ...(revokedBy ? { revoked_by: { index: revokedBy.index, record_hash: revokedBy.record_hash, effective_date: revokedBy.payload.effective_date } } : {}),
    ...(voided ? { void: voided } : {}),
  });
}

export function handleVersions(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse, search: string): void {
  const s = state(ctx);
  const { url } = params(search, ['url']);
  if (url === undefined || !isArtifactUrl(url)) throw new VouchError('bad_request', 'url must be an absolute http or https URL', url ? { resource: url } : {});
  const versions = s.index.versions(url);
  if (versions.length === 0) throw new VouchError('not_found', `no provenance block is on file for ${url}`, { resource: url });
  const today = ctx.today();
  const list = [...versions]
    .reverse()
    .slice(0, MAX_LIST)
    .map((v) => {
      const revokedBy = s.index.revocationOf(v.block, today);
      return {
        index: v.block.index,
        record_hash: v.block.record_hash,
        semver: v.entry.semver,
        effective_date: v.block.payload.effective_date,
        posted: v.block.posted,
        artifact_hash: v.entry.artifact_hash,
        license: v.entry.license,
        ...(revokedBy ? { revoked_by: revokedBy.index } : {}),
      };
    });
  sendJson(res, 200, { success: true, url, total: versions.length, versions: list });
}

export function handleUnits(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse, search: string): void {
  const s = state(ctx);
  const { name } = params(search, ['name']);
  if (name === undefined || !isUnitName(name)) throw new VouchError('bad_request', 'name must be owner/name');
  const blocks = s.index.blockIndexesOf(name); // indexes: only the blocks listed are read
  if (blocks.length === 0) throw new VouchError('not_found', `no blocks for ${name}`, { resource: name });
  const today = ctx.today();
  sendJson(res, 200, {
    success: true,
    name,
    total: blocks.length,
    blocks: blocks
      .slice(-MAX_LIST)
      .reverse()
      .map((i) => {
        const b = s.index.block(i)!;
        return blockSummary(b, s.index.revocationOf(b, today));
      }),
  });
}
