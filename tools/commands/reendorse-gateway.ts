/**
 * `vouch reendorse --gateway URL --token-file FILE`: the void entries (read
 * from a local clone by reendorse.ts) submitted through the running
 * authority (POST /v1/submit), one submit per void block, each entry with
 * the void block's hash as its claim (`expect`): the authority fetches and
 * hashes, and refuses a block whose bytes contradict a claim. A refused
 * entry (hash_mismatch, or one the authority names as unfetchable or
 * conflicting) is listed and the rest of its block submitted again.
 */
import { isVoid, type KeyState } from '../../chain/key-events.ts';
import { parseArtifactHash } from '../../chain/hash-algorithms.ts';
import { gatewayBase, gatewayError, readToken, submit } from './endorse-gateway.ts';
import { commentOf, type Refusal, type VoidGroup } from '../key-statements.ts';

export async function reendorseThroughGateway(
  v: Record<string, any>,
  groups: VoidGroup[],
  refused: Refusal[],
  dry: boolean,
  keys: KeyState,
): Promise<{ index: number; record_hash: string; void_block: number; entries: number }[]> {
  const base = gatewayBase(v.gateway);
  const token = readToken(v['token-file']);
  const posted: { index: number; record_hash: string; void_block: number; entries: number }[] = [];
  if (dry) return posted; // the authority would fetch: a dry run lists what would be submitted
  for (const g of groups) {
    const drop = (url: string, line: string) => {
      refused.push({ url, line: `refused: ${url} (void block ${g.block.index}): ${line}` });
      g.entries = g.entries.filter((e) => e.url !== url);
    };
    // Each retry drops at least one entry, so this ends.
    while (g.entries.length > 0) {
      const body = {
        uns: g.block.payload.uns,
        semver: g.block.payload.semver,
        comment: commentOf(g),
        effective_date: g.block.payload.effective_date,
        endorsements: g.entries.map((e) => {
          const claim = parseArtifactHash(e.artifactHash);
          return {
            url: e.url,
            name: e.name,
            semver: e.semver,
            license: e.license,
            comment: e.comment ?? '',
            expect: [e.artifactHash],
            ...(typeof claim === 'string' ? {} : { algorithm: claim.algorithm }),
          };
        }),
      };
      const answer = await submit(base, token, body, () => {});
      if (answer.httpStatus === 201 || answer.httpStatus === 200) {
        const index = answer.body.index as number;
        if (answer.httpStatus === 200 && isVoid(keys, index)) {
          for (const e of g.entries) drop(e.url, `the authority answered unchanged, naming void block ${index}: it does not know the block is void`);
          break;
        }
        if (answer.httpStatus === 201) posted.push({ index, record_hash: answer.body.record_hash, void_block: g.block.index, entries: g.entries.length });
        break;
      }
      const err = gatewayError(answer);
      const refusedList = answer.body.refused as { url: string; expected: string[]; fetched: string[] }[] | undefined;
      if (err.code === 'hash_mismatch' && Array.isArray(refusedList) && refusedList.length > 0) {
        for (const r of refusedList)
          drop(
            r.url,
            `its bytes now hash to ${r.fetched.join(' ')}, the void block claimed ${r.expected.join(' or ')} (possibly the attacker's): not endorsed`,
          );
      } else if (
        ['origin_error', 'origin_timeout', 'too_large', 'semver_conflict'].includes(err.code) &&
        typeof answer.body.resource === 'string' &&
        g.entries.some((e) => e.url === answer.body.resource)
      ) {
        drop(answer.body.resource, String(answer.body.message ?? err.message));
      } else {
        throw err;
      }
    }
  }
  return posted;
}
