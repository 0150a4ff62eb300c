/**
 * clock-cache: a map bounded in bytes with CLOCK eviction, an approximation
 * of LRU whose hit is one Map lookup and a mark (the lookup answers of
 * `gateway/http/server.ts`: an LRU list's bookkeeping on every hit cost a lookup a few
 * microseconds, most of them cache misses at 20,000 URLs).
 *
 * Owns: its entries and their byte count.
 * Trusts: callers to give each entry its `bytes` (what it holds in memory).
 * Must hold: the entries' `bytes` add up to at most `maxBytes` once `set`
 * returns (an entry larger than that is not kept); over budget, the oldest
 * entries are looked at in insertion order: a marked one (used since it was
 * last looked at) is unmarked and moved to the end, the first unmarked one
 * is evicted.
 */
export class ClockCache<V extends { bytes: number; used: boolean }> {
  private readonly map = new Map<string, V>();
  private bytes = 0;
  constructor(private readonly maxBytes: number) {}

  /** Entries held. */
  get size(): number {
    return this.map.size;
  }

  /** Bytes of the entries held. */
  get byteCount(): number {
    return this.bytes;
  }

  get(key: string): V | undefined {
    const v = this.map.get(key);
    if (v !== undefined) v.used = true;
    return v;
  }

  set(key: string, v: V): void {
    const old = this.map.get(key);
    if (old !== undefined) {
      this.map.delete(key);
      this.bytes -= old.bytes;
    }
    if (v.bytes > this.maxBytes) return;
    v.used = false;
    this.map.set(key, v);
    this.bytes += v.bytes;
    while (this.bytes > this.maxBytes) {
      const [k, e] = this.map.entries().next().value!;
      this.map.delete(k);
      if (e.used) {
        e.used = false;
        this.map.set(k, e);
      } else this.bytes -= e.bytes;
    }
  }
}
