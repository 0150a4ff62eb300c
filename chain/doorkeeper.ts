/**
 * Admission to a cache on a key's second sighting within a window of
 * sightings (the doorkeeper of TinyLFU: a bitset cleared every window), so
 * reads at random over a large chain do not fill a cache, and the collector,
 * with entries asked for once (issue 33: lookups over the whole chain). A
 * `strict` admission (for a full cache, where admitting means evicting)
 * also wants the key sighted in the window before: a key asked for again
 * and again passes it, one drawn at random from many rarely does.
 * Owns: the bitsets. Trusts: keys to be non-negative integers below 2^53.
 * Must hold: pure; constant time a call; a collision only admits early.
 */
export class Doorkeeper {
  private bits: Uint32Array;
  /** The sightings of the window before this one (`strict`). */
  private prev: Uint32Array;
  private readonly mask: number;
  private sightings = 0;

  /** `window` sightings between clears; a bitset of 2^`log2Bits` bits (at least 32). */
  constructor(
    private readonly window: number,
    log2Bits = 20,
  ) {
    const n = 2 ** Math.max(5, Math.min(30, Math.floor(log2Bits)));
    this.bits = new Uint32Array(n / 32);
    this.prev = new Uint32Array(n / 32);
    this.mask = n - 1;
  }

  /**
   * Whether `key` was sighted since the last clear (and, when `strict`,
   * also in the window before that); sights it.
   */
  admit(key: number, strict = false): boolean {
    if (++this.sightings > this.window) {
      const old = this.prev;
      this.prev = this.bits;
      this.bits = old.fill(0);
      this.sightings = 1;
    }
    const i = ((key % 4294967296) ^ Math.floor(key / 4294967296)) & this.mask;
    const word = i >>> 5;
    const bit = 1 << (i & 31);
    if ((this.bits[word]! & bit) !== 0) return !strict || (this.prev[word]! & bit) !== 0;
    this.bits[word]! |= bit;
    return false;
  }
}
