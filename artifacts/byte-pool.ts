/**
 * Recycled buffers for artifacts the mirror holds in memory: a miss writes
 * the origin's body into one buffer of the declared length, and reusing
 * freed buffers per size class spares page faults and V8 collections.
 * Buffers are views over a SharedArrayBuffer so a hash worker can read them.
 * Owns: the free lists per size class (at most 25 % slack) and their bound;
 * `MemoryBudget`, the one count of artifact bytes in memory against
 * `mirror.budget_bytes`, charged by the mirror and asked by the fetcher.
 * Must hold: a buffer is given back once, by its owner, after its last
 * reader; the free lists never exceed `maxFreeBytes`; `take` never hands
 * out a buffer in use; budget uses never go negative and `reserve` never
 * passes the limit (only `force`, for bytes already in memory, may).
 */

const MIN_CLASS = 64 * 1024;

/** The capacity a buffer of `size` bytes is allocated with. */
export function sizeClass(size: number): number {
  if (size <= MIN_CLASS) return MIN_CLASS;
  const top = 2 ** Math.floor(Math.log2(size));
  for (const f of [1, 1.25, 1.5, 1.75, 2]) {
    const c = top * f;
    if (c >= size) return c;
  }
  return top * 2;
}

export interface BytePoolStats {
  /** Buffers handed out that came from the free lists / were allocated new. */
  reused: number;
  allocated: number;
  /** Bytes waiting in the free lists. */
  freeBytes: number;
  /** Given-back buffers dropped because the free lists were full. */
  dropped: number;
}

export class BytePool {
  private readonly free = new Map<number, SharedArrayBuffer[]>();
  private freeBytes = 0;
  private readonly counters = { reused: 0, allocated: 0, dropped: 0 };

  /** `maxFreeBytes`: bound of the free lists (0: nothing is kept, every `take` allocates). */
  constructor(readonly maxFreeBytes: number) {
    if (!Number.isSafeInteger(maxFreeBytes) || maxFreeBytes < 0) throw new TypeError('byte pool: maxFreeBytes must be a non-negative integer');
  }

  /** A buffer of exactly `size` bytes (contents undefined) over shared memory of its size class. */
  take(size: number): Buffer {
    if (!Number.isSafeInteger(size) || size < 0) throw new TypeError('byte pool: size must be a non-negative integer');
    const cls = sizeClass(size);
    const list = this.free.get(cls);
    const sab = list?.pop();
    if (sab !== undefined) {
      this.freeBytes -= cls;
      this.counters.reused++;
      return Buffer.from(sab, 0, size);
    }
    this.counters.allocated++;
    return Buffer.from(new SharedArrayBuffer(cls), 0, size);
  }

  /**
   * The shared memory under a buffer from `take`, which must not be read or
   * written by its owner any more. Kept for reuse only while the free lists
   * stay within `maxFreeBytes` and within `room` (the memory budget's spare).
   */
  give(buf: Buffer, room = Infinity): void {
    const sab = buf.buffer;
    if (!(sab instanceof SharedArrayBuffer) || buf.byteOffset !== 0 || sab.byteLength !== sizeClass(buf.length)) {
      throw new TypeError('byte pool: not a buffer of this pool');
    }
    if (this.freeBytes + sab.byteLength > Math.min(this.maxFreeBytes, room)) {
      this.counters.dropped++;
      return;
    }
    let list = this.free.get(sab.byteLength);
    if (list === undefined) this.free.set(sab.byteLength, (list = []));
    list.push(sab);
    this.freeBytes += sab.byteLength;
  }

  /** Capacity of the shared memory under a buffer from `take` (what it really occupies). */
  static capacity(buf: Buffer): number {
    return buf.buffer.byteLength;
  }

  stats(): BytePoolStats {
    return { ...this.counters, freeBytes: this.freeBytes };
  }

  /** Drops free buffers until at most `bytes` remain in the free lists. */
  trim(bytes: number): void {
    for (const [cls, list] of this.free) {
      while (this.freeBytes > bytes && list.length > 0) {
        list.pop();
        this.freeBytes -= cls;
        this.counters.dropped++;
      }
      if (list.length === 0) this.free.delete(cls);
      if (this.freeBytes <= bytes) return;
    }
  }

  /** Drops every free buffer. */
  clear(): void {
    this.free.clear();
    this.freeBytes = 0;
  }
}

/** What artifact bytes in memory are for (`vouch_memory_budget_bytes{use}`). */
export type BudgetUse = 'in_flight' | 'held' | 'tier';

export interface MemoryBudgetStats {
  limit: number;
  in_flight: number;
  held: number;
  tier: number;
  /** Reservations refused (the body went to a spool file instead). */
  refused: number;
}

/**
 * One limit on the artifact bytes a gateway keeps in memory, whatever holds
 * them: `in_flight` (bodies being received from origins, reserved before the
 * first byte), `held` (bytes out of the memory tier that a response is still
 * sending) and `tier` (the memory tier). A body whose reservation is refused
 * is received into a spool file instead; nothing waits.
 */
export class MemoryBudget {
  private readonly used: Record<BudgetUse, number> = { in_flight: 0, held: 0, tier: 0 };
  private refusedCount = 0;

  constructor(readonly limit: number) {
    if (!Number.isSafeInteger(limit) || limit < 0) throw new TypeError('memory budget: limit must be a non-negative integer');
  }

  /** Bytes counted now (every use). */
  get total(): number {
    return this.used.in_flight + this.used.held + this.used.tier;
  }

  /** Bytes left under the limit (0 when over it). */
  get spare(): number {
    return Math.max(0, this.limit - this.total);
  }

  /** Counts `n` bytes under `use` (in flight unless told) if they fit under the limit; false (counted as refused when `counted`) if not. */
  reserve(n: number, counted = true, use: BudgetUse = 'in_flight'): boolean {
    if (this.total + n > this.limit) {
      if (counted) this.refusedCount++;
      return false;
    }
    this.used[use] += n;
    return true;
  }

  /** Counts `n` bytes already in memory under `use`, even past the limit. */
  force(use: BudgetUse, n: number): void {
    this.used[use] += n;
  }

  /** `n` bytes counted under `from` now count under `to`. */
  move(from: BudgetUse, to: BudgetUse, n: number): void {
    if (from === to) return;
    this.release(from, n);
    this.used[to] += n;
  }

  /** `n` bytes counted under `use` are no longer in memory (or no longer the budget's). */
  release(use: BudgetUse, n: number): void {
    this.used[use] = Math.max(0, this.used[use] - n);
  }

  stats(): MemoryBudgetStats {
    return { limit: this.limit, ...this.used, refused: this.refusedCount };
  }
}
