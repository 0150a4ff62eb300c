/**
 * The in-memory index of a verified chain and version selection
 * (DESIGN 3.3, revocation 1.5).
 *
 * Owns: URL -> versions (every endorsement of the URL, in chain order), and
 * which endorse blocks are revoked from which date. Pure: "today" is a
 * parameter.
 *
 * Selection for a URL:
 * - neither `semver` nor `at`: the newest block (highest index);
 * - `semver=X`: the newest block with exactly version X;
 * - `at=D`: the greatest effective_date <= D, ties to the highest index;
 * - both: both conditions.
 * A version is revoked when a revoke block names its block and the revoke's
 * effective_date <= (at ?? today). Revoked versions are skipped unless asked
 * for by exact `semver`; when every candidate is revoked the best one is
 * returned flagged, so callers can answer 410 rather than 404.
 *
 * Must hold: only verified blocks are added, in chain order.
 */
import type { Block, Endorsement } from './block.ts';

export interface IndexedVersion {
  /** The block that endorses the URL. */
  block: Block;
  /** The entry of that block for the URL. */
  entry: Endorsement;
}

export interface Selection extends IndexedVersion {
  /** The revoke block in force for this version, or null. */
  revokedBy: Block | null;
}

export interface SelectQuery {
  semver?: string | undefined;
  /** `YYYY-MM-DD` */
  at?: string | undefined;
  /** `YYYY-MM-DD`: the caller's current date, for revocations. */
  today: string;
}

export class ChainIndex {
  private readonly byUrl = new Map<string, IndexedVersion[]>();
  private readonly byHash = new Map<string, Block>();
  private readonly revocations = new Map<string, Block[]>();
  private readonly byName = new Map<string, Block[]>();
  private blocks: Block[] = [];

  get size(): number {
    return this.blocks.length;
  }

  get head(): Block | undefined {
    return this.blocks[this.blocks.length - 1];
  }

  get authority(): Block | undefined {
    return this.blocks[0];
  }

  /** Adds the next verified block. */
  add(block: Block): void {
    if (block.index !== this.blocks.length) throw new TypeError(`index expects block ${this.blocks.length}, got ${block.index}`);
    this.blocks.push(block);
    this.byHash.set(block.record_hash, block);
    const p = block.payload;
    if (p.intent === 'endorse') {
      for (const entry of p.endorsements) {
        let list = this.byUrl.get(entry.artifact_url);
        if (list === undefined) this.byUrl.set(entry.artifact_url, (list = []));
        list.push({ block, entry });
      }
      let named = this.byName.get(p.uns);
      if (named === undefined) this.byName.set(p.uns, (named = []));
      named.push(block);
    } else if (p.intent === 'revoke') {
      const target = this.byHash.get(p.target_hash);
      if (target !== undefined && target.payload.intent === 'endorse') {
        let list = this.revocations.get(p.target_hash);
        if (list === undefined) this.revocations.set(p.target_hash, (list = []));
        list.push(block);
      }
    }
  }

  block(index: number): Block | undefined {
    return this.blocks[index];
  }

  blockByHash(recordHash: string): Block | undefined {
    return this.byHash.get(recordHash);
  }

  /** Every endorsement of the URL, oldest first. */
  versions(url: string): readonly IndexedVersion[] {
    return this.byUrl.get(url) ?? [];
  }

  /** Endorse blocks of a unit (`owner/name`), oldest first. */
  blocksOf(uns: string): readonly Block[] {
    return this.byName.get(uns) ?? [];
  }

  /** The earliest-effective revoke block of `block` in force on `date`, or null. */
  revocationOf(block: Block, date: string): Block | null {
    let best: Block | null = null;
    for (const r of this.revocations.get(block.record_hash) ?? []) {
      if (r.payload.effective_date <= date && (best === null || r.payload.effective_date < best.payload.effective_date)) best = r;
    }
    return best;
  }

  /** Version selection (DESIGN 3.3 and 1.5). */
  select(url: string, q: SelectQuery): Selection | null {
    return selectVersion(this.versions(url), q, (b, d) => this.revocationOf(b, d));
  }
}

function better(a: IndexedVersion, b: IndexedVersion | null, byDate: boolean): boolean {
  if (b === null) return true;
  if (byDate && a.block.payload.effective_date !== b.block.payload.effective_date) {
    return a.block.payload.effective_date > b.block.payload.effective_date;
  }
  return a.block.index > b.block.index;
}

/** Selection over one URL's versions; `revocationOf` says which are revoked. */
export function selectVersion(
  versions: readonly IndexedVersion[],
  q: SelectQuery,
  revocationOf: (block: Block, date: string) => Block | null,
): Selection | null {
  const byDate = q.at !== undefined;
  const ref = q.at ?? q.today;
  let best: IndexedVersion | null = null;
  let bestLive: IndexedVersion | null = null;
  for (const v of versions) {
    if (q.semver !== undefined && v.entry.semver !== q.semver) continue;
    if (q.at !== undefined && v.block.payload.effective_date > q.at) continue;
    if (better(v, best, byDate)) best = v;
    if (q.semver === undefined && revocationOf(v.block, ref) === null && better(v, bestLive, byDate)) bestLive = v;
  }
  const chosen = bestLive ?? best;
  if (chosen === null) return null;
  return { ...chosen, revokedBy: revocationOf(chosen.block, ref) };
}
