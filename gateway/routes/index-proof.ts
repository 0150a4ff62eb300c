/**
 * `GET /v1/index/proof?unit=NAME` or `?url=URL`: a key's completeness-index
 * proof (docs/spec/index.md 6) with the served checkpoint note it is
 * against, as JSON. The listing answers link it (`Vouch-Index-Proof-Url`)
 * for a proof or note too long for a header; the explorer asks it for a
 * unit's listing.
 * Owns: the parameters and the answer's members (kind, name, size,
 * index_proof, checkpoint). Trusts: the chain state's index and note.
 * Must hold: the proof and the note are of one size; a key with no events
 * gets its absence proof (200); no committed index is a 404.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { VouchError } from '../../chain/errors.ts';
import { isArtifactUrl, isUnitName } from '../../chain/block.ts';
import { sendJson } from '../http/http-util.ts';
import type { GatewayContext } from '../context.ts';

export function handleIndexProof(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse, search: string): void {
  const p = new URLSearchParams(search);
  for (const k of p.keys()) if (k !== 'unit' && k !== 'url') throw new VouchError('bad_request', `unknown parameter ${k.slice(0, 40)}`);
  const units = p.getAll('unit');
  const urls = p.getAll('url');
  if (units.length + urls.length !== 1) throw new VouchError('bad_request', 'give exactly one of unit=NAME or url=URL');
  const kind = units.length === 1 ? 'unit' : 'url';
  const name = units[0] ?? urls[0]!;
  if (kind === 'unit' && !isUnitName(name)) throw new VouchError('bad_request', 'unit must be owner/name');
  if (kind === 'url' && !isArtifactUrl(name)) throw new VouchError('bad_request', 'url must be an artifact URL');
  const state = ctx.state;
  if (state === null) throw new VouchError('not_ready', 'the chain is not loaded yet; retry shortly');
  const note = state.note;
  const text = state.servedCheckpointNote();
  const proof = state.indexProof(kind, name);
  if (note === null || text === null || proof === null) {
    throw new VouchError('not_found', 'the served checkpoint commits no completeness index at this size (an older log, or a note catching up: retry)', {
      resource: name,
    });
  }
  sendJson(res, 200, { success: true, kind, name, size: note.checkpoint.size, index_proof: Buffer.from(proof).toString('base64'), checkpoint: text });
}
