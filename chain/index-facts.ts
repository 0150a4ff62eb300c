/**
 * index-facts: what the chain index needs of a verified block, and nothing
 * else (issue 16: an index that does not hold the chain).
 *
 * Owns: `IndexFacts` and `indexFactsOf`. A verification worker computes
 * them next to the checks it makes anyway, so the thread that builds the
 * index never parses a block a second time.
 *
 * Trusts: the caller to hand over a block that verified.
 * Must hold: pure (no I/O); `indexFactsOf` reads only fields the chain
 * format fixes (docs/spec/design.md §1.2-1.6).
 */
import type { Block, Intent } from './block.ts';

export interface IndexFacts {
  /** The block's record_hash (64 hex digits). */
  recordHash: string;
  intent: Intent;
  /** `YYYY-MM-DD` */
  effectiveDate: string;
  /** The unit the block names (`owner/name`). */
  uns: string;
  /** artifact_url of every endorsement, in block order (empty unless intent is endorse). */
  urls: string[];
  /** name and semver of every endorsement, parallel to `urls` (the completeness index, docs/spec/index.md). */
  names?: string[];
  semvers?: string[];
  /** target_hash of a revoke block, else null. */
  target: string | null;
  /** A compromise declaration's void blocks (inclusive index range, docs/spec/key-events.md), else null. */
  voids: [number, number] | null;
}

export function indexFactsOf(block: Block): IndexFacts {
  const p = block.payload;
  return {
    recordHash: block.record_hash,
    intent: p.intent,
    effectiveDate: p.effective_date,
    uns: p.uns,
    urls: p.intent === 'endorse' ? p.endorsements.map((e) => e.artifact_url) : [],
    names: p.intent === 'endorse' ? p.endorsements.map((e) => e.name) : [],
    semvers: p.intent === 'endorse' ? p.endorsements.map((e) => e.semver) : [],
    target: p.intent === 'revoke' ? p.target_hash : null,
    voids: voidsOf(block),
  };
}

function voidsOf(block: Block): [number, number] | null {
  const st = block.payload.statement;
  if (block.payload.intent !== 'key' || st?.action !== 'compromise' || st.good_through + 1 > block.index - 1) return null;
  return [st.good_through + 1, block.index - 1];
}
