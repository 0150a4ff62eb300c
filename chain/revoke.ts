/**
 * Which block a revocation names (docs/spec/design.md §1.5), for `vouch
 * revoke` and `POST /v1/revoke`: `{url, semver?}` resolves to the block a
 * lookup selects today, `{block}` names one. Pure: "today" is a parameter.
 * Owns: the resolution and every refusal: nothing endorsed (`not_found`),
 * block 0, a revoke block or one past the head, a block already revoked
 * (`already_revoked`), a URL whose block endorses other artifacts too
 * (`bad_request`: name it by `block`).
 * Must hold: what this returns is an earlier endorse block no revoke names
 * yet (`vouch verify` accepts the revoke that names it).
 */
import type { Block } from './block.ts';
import { VouchError } from './errors.ts';
import type { ChainIndex } from './select.ts';

export type RevokeTarget = { url: string; semver?: string | undefined } | { block: number };

/** The effective date no revoke can be later than (every revoke is "in force" by then). */
const END_OF_TIME = '9999-12-31';

/** The earliest-effective revoke block naming `target`, whatever its effective date, or null. */
export function anyRevocationOf(index: ChainIndex, target: Block): Block | null {
  return index.revocationOf(target, END_OF_TIME);
}

/**
 * The endorse block a revocation of `what` names.
 * `pending`: indexes of blocks already revoked by revokes not yet in `index`
 * (the gateway's current round).
 * @throws VouchError not_found, bad_request or already_revoked.
 */
export function resolveRevokeTarget(index: ChainIndex, what: RevokeTarget, today: string, pending: ReadonlySet<number> = new Set()): Block {
  let target: Block;
  if ('block' in what) {
    const n = what.block;
    if (n >= index.size) throw new VouchError('not_found', `block ${n} does not exist: the chain has ${index.size} blocks (0-${index.size - 1})`, { index: n });
    if (n === 0) throw new VouchError('bad_request', 'block 0 is the authority block: it cannot be revoked', { index: 0 });
    const b = index.block(n)!;
    if (b.payload.intent !== 'endorse')
      throw new VouchError('bad_request', `block ${n} is a ${b.payload.intent} block: only endorse blocks can be revoked`, { index: n });
    target = b;
  } else {
    const sel = index.select(what.url, { semver: what.semver, today });
    const asked = `${what.url}${what.semver !== undefined ? ` ${what.semver}` : ''}`;
    if (sel === null) throw new VouchError('not_found', `nothing is endorsed for ${asked}: nothing to revoke`, { resource: what.url });
    target = sel.block;
    const n = target.payload.endorsements.length;
    if (n > 1) {
      throw new VouchError(
        'bad_request',
        `${asked} is endorsed in block ${target.index} with ${n - 1} other artifact${n > 2 ? 's' : ''}; a revocation names a whole block: revoke block ${target.index} by its index to revoke all ${n}`,
        { resource: what.url, index: target.index },
      );
    }
  }
  const earlier = anyRevocationOf(index, target);
  if (earlier !== null) {
    throw new VouchError(
      'already_revoked',
      `block ${target.index} is already revoked by block ${earlier.index} (effective ${earlier.payload.effective_date})`,
      {
        index: target.index,
        evidence: { revoked_by: earlier.index, record_hash: earlier.record_hash, effective_date: earlier.payload.effective_date },
      },
    );
  }
  if (pending.has(target.index)) throw new VouchError('already_revoked', `block ${target.index} is being revoked by another request`, { index: target.index });
  return target;
}
