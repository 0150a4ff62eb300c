/**
 * The mirror's memory tier and the memory budget behind it: an lru-cache
 * bounded in bytes for artifacts up to `spoolThreshold`, large ones in
 * `BytePool` buffers (back to the pool once out of the cache and released);
 * every artifact byte in memory charged to `MemoryBudget` as `in_flight`
 * (reserved before a body is received), `tier`, or `held` (out of the tier,
 * still being sent); a reservation past the limit is refused (the fetcher
 * spools instead).
 * Trusts: the mirror to store only verified bytes.
 * Must hold: bytes handed out are not reused before every holder called
 * `release()`; entries are charged from their reservation until dropped,
 * once, under the use that matches their state.
 */
import { LRUCache } from 'lru-cache';
import { BytePool, MemoryBudget, sizeClass, type BudgetUse, type BytePoolStats, type MemoryBudgetStats } from './byte-pool.ts';
import type { StoredArtifact } from './stored-artifact.ts';

/** Bodies at least this large are received into pooled buffers (`Mirror.buffer`). */
export const POOLED_MIN = 1024 * 1024;

interface MemoryEntry {
  bytes: Buffer;
  contentType: string;
  headers: Record<string, string>;
  /** The bytes are a `BytePool` buffer: given back once out of the cache and unread. */
  pooled: boolean;
  /** Readers holding the bytes (artifacts handed out and not yet released). */
  refs: number;
  /** In the memory tier's LRU. */
  cached: boolean;
  /** Bytes charged to the memory budget for this entry, and under which use (null: not, or no longer). */
  charge: number;
  use: BudgetUse | null;
}

export interface MemoryTierOptions {
  /** Capacity in bytes (0 disables the tier). */
  memoryBytes: number;
  /** The largest artifact kept. */
  spoolThreshold: number;
  /** Bytes of recycled buffers kept for reuse. */
  poolBytes: number;
  /** The memory budget's limit. */
  budgetBytes: number;
}

export class MemoryTier {
  readonly capacity: number;
  readonly spoolThreshold: number;
  /** Entries evicted for room. */
  evictions = 0;
  private readonly cache: LRUCache<string, MemoryEntry> | null;
  private readonly pool: BytePool;
  private readonly budget: MemoryBudget;
  /** The entry behind each handle this tier gave out. */
  private readonly handles = new WeakMap<StoredArtifact, MemoryEntry>();
  /** Handles out that read bytes for a response (not the mirror's own holds: `holdQuietly`). */
  private readers = 0;
  /** Called once the tier is quiet (`quiet`). */
  private quietWaiters: Array<() => void> = [];

  constructor(options: MemoryTierOptions) {
    this.capacity = options.memoryBytes;
    this.spoolThreshold = options.spoolThreshold;
    this.cache =
      this.capacity > 0 && this.spoolThreshold > 0
        ? new LRUCache<string, MemoryEntry>({
            maxSize: this.capacity,
            maxEntrySize: Math.min(this.capacity, sizeClass(this.spoolThreshold)),
            // Pooled bytes occupy their whole size class.
            sizeCalculation: (e) => Math.max(1, e.pooled ? BytePool.capacity(e.bytes) : e.bytes.length),
            dispose: (e, _k, reason) => {
              if (reason === 'evict') this.evictions++;
              e.cached = false;
              this.account(e);
              this.recycle(e);
            },
          })
        : null;
    this.budget = new MemoryBudget(options.budgetBytes);
    this.pool = new BytePool(this.cache === null ? 0 : Math.max(0, options.poolBytes));
  }

  /** The tier would keep an artifact of `size` bytes. */
  keeps(size: number): boolean {
    return this.cache !== null && size <= this.spoolThreshold;
  }

  has(artifactHash: string): boolean {
    return this.cache?.has(artifactHash) === true;
  }

  /** A reader's handle on a cached artifact (counted as used), or null. */
  get(artifactHash: string): StoredArtifact | null {
    const hit = this.cache?.get(artifactHash);
    return hit === undefined ? null : this.artifact(artifactHash, hit, 'memory');
  }

  /**
   * Takes verified bytes, kept in the tier when they fit; returns a reader's
   * handle on them. The bytes are charged to the budget until they leave
   * memory: `reserved` bytes the caller reserved are taken over (a pooled
   * buffer's reservation always is); bytes beyond it are counted too.
   */
  put(artifactHash: string, bytes: Buffer, contentType: string, headers: Record<string, string>, pooled: boolean, reserved: number): StoredArtifact {
    // Charged from the caller's reservation (what the bytes really occupy; bytes beyond it are counted anyway: they exist).
    const charge = pooled ? BytePool.capacity(bytes) : bytes.length;
    if (pooled) reserved = charge; // `buffer()` reserved it whole
    if (charge > reserved) this.budget.force('in_flight', charge - reserved);
    else this.budget.release('in_flight', reserved - charge);
    const entry: MemoryEntry = { bytes, contentType, headers, pooled, refs: 0, cached: false, charge, use: 'in_flight' };
    // Held from here on: a disk write still reads the bytes if the entry is evicted meanwhile.
    const artifact = this.artifact(artifactHash, entry, 'memory');
    if (this.keeps(bytes.length)) {
      this.cache!.set(artifactHash, entry);
      entry.cached = this.cache!.peek(artifactHash) === entry;
    }
    this.account(entry);
    this.wakeQuiet();
    return artifact;
  }

  /** Keeps bytes read back from the disk tier (`reserved` of the budget is taken over); the handle says `disk`. */
  putReadBack(artifactHash: string, bytes: Buffer, contentType: string, headers: Record<string, string>, reserved: number): StoredArtifact {
    const m: MemoryEntry = { bytes, contentType, headers, pooled: false, refs: 0, cached: false, charge: reserved, use: 'in_flight' };
    const artifact = this.artifact(artifactHash, m, 'disk');
    this.cache!.set(artifactHash, m);
    m.cached = this.cache!.peek(artifactHash) === m;
    this.account(m);
    this.wakeQuiet();
    return artifact;
  }

  /** See `Mirror.buffer`. */
  buffer(size: number): Buffer | null {
    if (this.cache === null || size > this.spoolThreshold || size < POOLED_MIN || sizeClass(size) > this.capacity) return null;
    // Charged to the memory budget whole (its size class) until the bytes leave memory; refused past the limit.
    if (!this.budget.reserve(sizeClass(size))) return null;
    const buf = this.pool.take(size);
    this.pool.trim(this.budget.spare); // free buffers count against the budget's spare too
    return buf;
  }

  giveBack(buf: Buffer): void {
    this.budget.release('in_flight', BytePool.capacity(buf));
    this.pool.give(buf, this.budget.spare);
    this.wakeQuiet();
  }

  reserve(n: number, optional = false): boolean {
    if (!this.budget.reserve(n, !optional)) return false;
    this.pool.trim(this.budget.spare); // free buffers count against the budget's spare too
    return true;
  }

  /** Reserves `n` bytes to read a disk hit into memory (the free pool left as it is). */
  reserveReadBack(n: number): boolean {
    return this.budget.reserve(n);
  }

  hold(n: number): boolean {
    if (!this.budget.reserve(n, false, 'held')) return false;
    this.pool.trim(this.budget.spare);
    return true;
  }

  unhold(n: number): void {
    this.budget.release('held', n);
  }

  unreserve(n: number): void {
    this.budget.release('in_flight', n);
    this.wakeQuiet();
  }

  stats(): { memory: { bytes: number; entries: number; capacity: number }; pool: BytePoolStats; budget: MemoryBudgetStats } {
    return {
      memory: { bytes: this.cache?.calculatedSize ?? 0, entries: this.cache?.size ?? 0, capacity: this.capacity },
      pool: this.pool.stats(),
      budget: this.budget.stats(),
    };
  }

  clear(): void {
    this.cache?.clear();
    this.pool.clear();
  }

  /**
   * Resolves once no response reads bytes of this tier (every handle but
   * those of `holdQuietly` released) and no body is being received into
   * memory (nothing reserved in flight): the gateway's memory traffic is done
   * for the moment. At once when it is.
   */
  quiet(): Promise<void> {
    if (this.isQuiet()) return Promise.resolve();
    return new Promise<void>((resolve) => this.quietWaiters.push(resolve));
  }

  /**
   * Another handle on the bytes of `handle` (one this tier gave out) that
   * holds them like any handle but is no reader for `quiet` (the mirror's
   * hold while their disk copy waits), or null for a handle of another tier.
   */
  holdQuietly(handle: StoredArtifact): StoredArtifact | null {
    const entry = this.handles.get(handle);
    return entry === undefined ? null : this.artifact(handle.artifactHash, entry, handle.tier as 'memory' | 'disk', false);
  }

  private isQuiet(): boolean {
    return this.readers === 0 && this.budget.stats().in_flight === 0;
  }

  private wakeQuiet(): void {
    if (this.quietWaiters.length === 0 || !this.isQuiet()) return;
    const waiting = this.quietWaiters;
    this.quietWaiters = [];
    for (const go of waiting) go();
  }

  /** A handle on memory bytes (a reader's unless `reader` is false); the bytes stay theirs until `release()`. */
  private artifact(artifactHash: string, entry: MemoryEntry, tier: 'memory' | 'disk' | 'spool', reader = true): StoredArtifact {
    entry.refs++;
    if (reader) this.readers++;
    let released = false;
    const handle: StoredArtifact = {
      artifactHash,
      contentType: entry.contentType,
      headers: entry.headers,
      size: entry.bytes.length,
      bytes: entry.bytes,
      tier,
      release: () => {
        if (released) return;
        released = true;
        this.handles.delete(handle);
        entry.refs--;
        this.account(entry);
        this.recycle(entry);
        if (reader) {
          this.readers--;
          this.wakeQuiet();
        }
      },
      retain: () => this.artifact(artifactHash, entry, tier),
    };
    this.handles.set(handle, entry);
    return handle;
  }

  /** Moves an entry's charge to the use its state calls for: `tier` when cached, `held` while read, released when neither. */
  private account(entry: MemoryEntry): void {
    if (entry.use === null) return;
    const want: BudgetUse | null = entry.cached ? 'tier' : entry.refs > 0 ? 'held' : null;
    if (want === entry.use) return;
    if (want === null) this.budget.release(entry.use, entry.charge);
    else this.budget.move(entry.use, want, entry.charge);
    entry.use = want;
  }

  /** Pooled bytes that left the cache and have no reader go back to the pool (once), if the budget has room for them. */
  private recycle(entry: MemoryEntry): void {
    if (!entry.pooled || entry.cached || entry.refs > 0) return;
    entry.pooled = false;
    this.pool.give(entry.bytes, this.budget.spare);
  }
}
