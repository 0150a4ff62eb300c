/**
 * The index of a verified chain and version selection (docs/spec/design.md
 * §3.3, revocation §1.5). Pure: "today" is a parameter.
 * Owns: URL -> versions and which endorse blocks are revoked from which
 * date, over a `CompactIndex` of facts; blocks are read on demand through an
 * injected reader (small parsed-block cache). Selection: newest by default;
 * `semver=X` the newest with exactly X; `at=D` the greatest effective_date
 * <= D; revoked versions skipped unless asked by exact semver, and a best
 * candidate that is revoked is returned flagged (410, not 404).
 * Trusts: the reader to return the verified block of an index.
 * Must hold: only verified blocks are added, in chain order; candidates
 * found by URL hash are confirmed against the block's artifact_url.
 */
import { Doorkeeper } from './doorkeeper.ts';
import type { Block, Endorsement } from './block.ts';
import { CompactIndex, type UrlHash } from './compact-index.ts';
import { indexFactsOf, type IndexFacts } from './index-facts.ts';

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

export type BlockReader = (index: number) => Block;

export interface ChainIndexOptions {
  /** Reads verified block i (i < size); without one, added blocks are kept. */
  reader?: BlockReader;
  /** Parsed blocks kept at most (default 65,536; a block is kept from its second read within as many reads)... */
  cacheBlocks?: number;
  /**
   * ...and their estimated size at most (default 64 MiB; a parsed block of
   * one endorsement takes ~1.2 KB of heap, counted as 768 bytes + 512 an
   * entry).
   */
  cacheBytes?: number;
  /** For tests: another URL hash (and its name, written into images). */
  urlHash?: UrlHash;
  urlHashId?: string;
}

export class ChainIndex {
  private compact: CompactIndex;
  private readonly reader: BlockReader | null;
  /** Blocks added whole and not yet known to the reader. */
  private readonly held = new Map<number, Block>();
  private readonly cache = new Map<number, Block>();
  private readonly cacheMax: number;
  private readonly cacheBytesMax: number;
  private cacheBytes = 0;
  private readonly admission: Doorkeeper;
  private authorityBlock: Block | undefined;
  private headBlock: Block | undefined;

  constructor(options: ChainIndexOptions = {}, compact?: CompactIndex) {
    this.reader = options.reader ?? null;
    this.cacheMax = options.cacheBlocks ?? 65_536;
    this.cacheBytesMax = options.cacheBytes ?? 64 * 1024 * 1024;
    this.admission = new Doorkeeper(this.cacheMax);
    this.compact = compact ?? new CompactIndex(options.urlHash, options.urlHashId);
  }

  /** An index read back from `toImage` (throws TypeError when the image is not whole). */
  static fromImage(image: Uint8Array, options: ChainIndexOptions & { reader: BlockReader }): ChainIndex {
    return new ChainIndex(options, CompactIndex.fromImage(image, options.urlHash, options.urlHashId));
  }

  /** The facts of every block as one binary image. */
  toImage(): Uint8Array {
    return this.compact.toImage();
  }

  get size(): number {
    return this.compact.size;
  }

  /** Parsed blocks the cache holds now. */
  get cachedBlocks(): number {
    return this.cache.size;
  }

  get head(): Block | undefined {
    const n = this.compact.size;
    if (n === 0) return undefined;
    if (this.headBlock?.index !== n - 1) this.headBlock = this.block(n - 1);
    return this.headBlock;
  }

  get authority(): Block | undefined {
    if (this.compact.size === 0) return undefined;
    return (this.authorityBlock ??= this.block(0));
  }

  /** Block i's record_hash as 32 bytes (a view: copy it to keep it); what entry i of the Merkle tree is. */
  recordHashBytes(i: number): Uint8Array {
    return this.compact.recordHashBytes(i);
  }

  /** Makes room for `blocks` blocks in one allocation (see `CompactIndex.reserve`). */
  reserve(blocks: number): void {
    this.compact.reserve(blocks);
  }

  /** Adds the next verified block. */
  add(block: Block): void {
    if (block.index !== this.size) throw new TypeError(`index expects block ${this.size}, got ${block.index}`);
    this.compact.add(indexFactsOf(block));
    this.held.set(block.index, block);
  }

  /** Adds the facts of the next verified block (the reader returns the block itself). */
  addFacts(facts: IndexFacts): void {
    if (this.reader === null) throw new TypeError('index: facts without a block reader');
    this.compact.add(facts);
  }

  /** Every block added so far can now be read through the reader: stop holding them. */
  settled(): void {
    if (this.reader !== null) this.held.clear();
  }

  block(index: number): Block | undefined {
    if (!Number.isInteger(index) || index < 0 || index >= this.size) return undefined;
    const held = this.held.get(index);
    if (held !== undefined) return held;
    let b = this.cache.get(index);
    if (b !== undefined) {
      this.cache.delete(index);
      this.cache.set(index, b);
      return b;
    }
    if (this.reader === null) return undefined;
    b = this.reader(index);
    if (b.index !== index) throw new TypeError(`index: the reader returned block ${b.index} for ${index}`);
    if (!this.admission.admit(index)) return b; // kept from its second read on (./doorkeeper.ts)
    this.cache.set(index, b);
    this.cacheBytes += weight(b);
    while (this.cache.size > this.cacheMax || this.cacheBytes > this.cacheBytesMax) {
      const [oldest, old] = this.cache.entries().next().value!;
      this.cache.delete(oldest);
      this.cacheBytes -= weight(old);
    }
    return b;
  }

  /** The index of the block with this record_hash, or -1 (no block is read). */
  indexOfHash(recordHash: string): number {
    return this.compact.indexOfHash(recordHash);
  }

  /** The intent of block i (no block is read). */
  intentOf(index: number): Block['payload']['intent'] {
    return this.compact.intentOf(index);
  }

  blockByHash(recordHash: string): Block | undefined {
    const i = this.compact.indexOfHash(recordHash);
    return i < 0 ? undefined : this.block(i);
  }

  /** Where the URL may be endorsed, oldest first, as [block, entry] pairs flattened (unconfirmed: no block is read). */
  urlCandidates(url: string): number[] {
    return this.compact.urlCandidates(url);
  }

  /** Whether any revoke block (not void) names endorse block i (no block is read). */
  hasRevocations(i: number): boolean {
    return this.compact.revocationsOf(i).length > 0;
  }

  /** Every endorsement of the URL, oldest first. */
  versions(url: string): readonly IndexedVersion[] {
    const c = this.compact.urlCandidates(url);
    if (c.length === 0) return [];
    const out: IndexedVersion[] = [];
    for (let k = 0; k < c.length; k += 2) {
      const block = this.block(c[k]!)!;
      const entry = block.payload.intent === 'endorse' ? block.payload.endorsements[c[k + 1]!] : undefined;
      if (entry !== undefined && entry.artifact_url === url) out.push({ block, entry });
    }
    return out;
  }

  /** Whether block i is void (docs/spec/key-events.md): it stays in the log as evidence and is never selected. */
  isVoid(i: number): boolean {
    return this.compact.isVoid(i);
  }

  /** The void block ranges (inclusive), in chain order. */
  voids(): [number, number][] {
    return this.compact.voids();
  }

  /** Indexes of the endorse blocks of a unit (`owner/name`), oldest first (no block is read). */
  blockIndexesOf(uns: string): number[] {
    return this.compact.blocksOfName(uns);
  }

  /** Endorse blocks of a unit (`owner/name`), oldest first. */
  blocksOf(uns: string): readonly Block[] {
    return this.compact.blocksOfName(uns).map((i) => this.block(i)!);
  }

  /** The earliest-effective revoke block of `block` in force on `date`, or null. */
  revocationOf(block: Block, date: string): Block | null {
    const i = this.compact.indexOfHash(block.record_hash);
    return i < 0 ? null : this.revocationAt(i, date);
  }

  /** `revocationOf` for a block of this index, by its index (no hash to look up; no block read unless it has revokes). */
  private revocationAt(i: number, date: string): Block | null {
    const revokes = this.compact.revocationsOf(i);
    if (revokes.length === 0) return null;
    let best: Block | null = null;
    for (const ri of revokes) {
      const r = this.block(ri)!;
      if (r.payload.effective_date <= date && (best === null || r.payload.effective_date < best.payload.effective_date)) best = r;
    }
    return best;
  }

  /** Version selection (docs/spec/design.md §3.3 and §1.5). */
  select(url: string, q: SelectQuery): Selection | null {
    return selectVersion(this.versions(url), q, this.revokedOn);
  }

  /** `revocationOf` for the blocks `versions` returns (read through this index, so `index` is theirs here). */
  private readonly revokedOn = (b: Block, date: string): Block | null => this.revocationAt(b.index, date);
}

/** Estimated heap bytes of a parsed block. */
function weight(b: Block): number {
  return 768 + (b.payload.intent === 'endorse' ? b.payload.endorsements.length * 512 : 0);
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
  // Named fields, not a spread of `chosen`: the spread took microseconds per lookup.
  return { block: chosen.block, entry: chosen.entry, revokedBy: revocationOf(chosen.block, ref) };
}
