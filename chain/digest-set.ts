/**
 * A set of 32-byte digests (record hashes) held as bytes in an
 * open-addressing table (at most half full), not as strings: a verifier of a
 * large chain keeps every endorse block's record_hash, and adding one
 * allocates nothing.
 * Owns: `DigestSet` and the packed form of a list of digests (`packHex`), in
 * which verification workers hand theirs over in one buffer.
 * Trusts: nothing. Must hold: pure (no I/O); `has` is exact (every byte
 * compared; the all-zero digest is a digest like any other).
 */

const HEX = new Int8Array(128).fill(-1);
for (let i = 0; i < 16; i++) HEX['0123456789abcdef'.charCodeAt(i)] = i;

/**
 * Writes the 32 bytes a string of 64 lowercase hex digits spells into `out`
 * at `at`; false (nothing meaningful written) when it is not one (the form
 * of every record_hash and target_hash the parser accepts, so equal strings
 * and equal bytes are the same test).
 */
export function hexInto(hex: string, out: Uint8Array, at: number): boolean {
  if (hex.length !== 64) return false;
  let bad = 0;
  for (let i = 0; i < 32; i++) {
    const a = hex.charCodeAt(2 * i);
    const b = hex.charCodeAt(2 * i + 1);
    const hi = a < 128 ? HEX[a]! : -1;
    const lo = b < 128 ? HEX[b]! : -1;
    bad |= hi | lo;
    out[at + i] = (hi << 4) | lo;
  }
  return bad >= 0;
}

/** 64 lowercase hex digits of the 32 bytes at `at`. */
export function hexOf(bytes: Uint8Array, at: number): string {
  let s = '';
  for (let i = at; i < at + 32; i++) s += (bytes[i]! < 16 ? '0' : '') + bytes[i]!.toString(16);
  return s;
}

/** A list of digests packed 32 bytes each (growable), for handing over in one buffer. */
export class DigestList {
  private buf = new Uint8Array(32 * 64);
  private n = 0;

  get length(): number {
    return this.n;
  }

  /** Appends a digest given as 64 lowercase hex digits. @throws TypeError when it is not. */
  pushHex(hex: string): void {
    if (32 * (this.n + 1) > this.buf.length) {
      const bigger = new Uint8Array(this.buf.length * 2);
      bigger.set(this.buf);
      this.buf = bigger;
    }
    if (!hexInto(hex, this.buf, 32 * this.n)) throw new TypeError('a digest must be 64 lowercase hex digits');
    this.n++;
  }

  /** The packed digests (a view: valid until the next push). */
  get bytes(): Uint8Array {
    return this.buf.subarray(0, 32 * this.n);
  }
}

export class DigestSet {
  /** 8 words a slot; a slot is in use when its bit in `used` is set. */
  private words: Uint32Array;
  private used: Uint8Array;
  private mask: number;
  private n = 0;
  private readonly probe = new Uint8Array(32);
  private readonly probeWords = new Uint32Array(this.probe.buffer);

  constructor(capacity = 1024) {
    let slots = 1024;
    while (slots < 2 * capacity) slots *= 2;
    this.words = new Uint32Array(8 * slots);
    this.used = new Uint8Array(slots);
    this.mask = slots - 1;
  }

  get size(): number {
    return this.n;
  }

  /** Adds the 32 bytes at `at` of `bytes`; returns false when they were there already. */
  add(bytes: Uint8Array, at = 0): boolean {
    this.load(bytes, at);
    return this.insert();
  }

  /** Adds every digest of a packed list (32 bytes each). */
  addAll(packed: Uint8Array): void {
    if (packed.length % 32 !== 0) throw new TypeError('a packed digest list is 32 bytes a digest');
    for (let at = 0; at < packed.length; at += 32) this.add(packed, at);
  }

  /** Adds a digest given as 64 lowercase hex digits. @throws TypeError when it is not. */
  addHex(hex: string): boolean {
    if (!hexInto(hex, this.probe, 0)) throw new TypeError('a digest must be 64 lowercase hex digits');
    return this.insert();
  }

  has(bytes: Uint8Array, at = 0): boolean {
    this.load(bytes, at);
    return this.find() >= 0;
  }

  /** Whether the digest 64 hex digits spell is in the set (false for anything that is not 64 lowercase hex digits). */
  hasHex(hex: string): boolean {
    return hexInto(hex, this.probe, 0) && this.find() >= 0;
  }

  private load(bytes: Uint8Array, at: number): void {
    if (at < 0 || at + 32 > bytes.length) throw new RangeError('a digest is 32 bytes');
    this.probe.set(bytes.subarray(at, at + 32));
  }

  /** Slot of the probe digest, or -1. */
  private find(): number {
    const p = this.probeWords;
    const w = this.words;
    for (let slot = this.home(); ; slot = (slot + 1) & this.mask) {
      if (this.used[slot] === 0) return -1;
      const o = 8 * slot;
      if (
        w[o] === p[0] &&
        w[o + 1] === p[1] &&
        w[o + 2] === p[2] &&
        w[o + 3] === p[3] &&
        w[o + 4] === p[4] &&
        w[o + 5] === p[5] &&
        w[o + 6] === p[6] &&
        w[o + 7] === p[7]
      )
        return slot;
    }
  }

  private home(): number {
    // Digests are uniform; a multiplicative mix still spreads a chosen one (a revoke's target) evenly.
    return (Math.imul(this.probeWords[0]! ^ this.probeWords[5]!, 0x9e3779b1) >>> 0) & this.mask;
  }

  private insert(): boolean {
    if (this.find() >= 0) return false;
    if (2 * (this.n + 1) > this.used.length) this.grow();
    let slot = this.home();
    while (this.used[slot] !== 0) slot = (slot + 1) & this.mask;
    this.words.set(this.probeWords, 8 * slot);
    this.used[slot] = 1;
    this.n++;
    return true;
  }

  private grow(): void {
    const oldWords = this.words;
    const oldUsed = this.used;
    const slots = oldUsed.length * 2;
    this.words = new Uint32Array(8 * slots);
    this.used = new Uint8Array(slots);
    this.mask = slots - 1;
    const keep = new Uint32Array(this.probeWords);
    for (let s = 0; s < oldUsed.length; s++) {
      if (oldUsed[s] === 0) continue;
      this.probeWords.set(oldWords.subarray(8 * s, 8 * s + 8));
      let slot = this.home();
      while (this.used[slot] !== 0) slot = (slot + 1) & this.mask;
      this.words.set(this.probeWords, 8 * slot);
      this.used[slot] = 1;
    }
    this.probeWords.set(keep);
  }
}
