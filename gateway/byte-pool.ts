/**
 * Recycled buffers for artifacts the mirror holds in memory.
 *
 * A verified download of a large artifact that misses the mirror writes the
 * origin's body into one buffer of the declared length, and that buffer is
 * what the memory tier keeps and serves. Allocating a fresh one per miss
 * costs a page fault per 4 KiB on first touch and, worse, makes V8 collect
 * its whole heap every few downloads (fresh external memory counts towards
 * its GC trigger). So when the memory tier lets go of such a buffer and no
 * response is still sending it, the buffer comes back here and the next miss
 * of that size class reuses it.
 *
 * Buffers are views over a SharedArrayBuffer, so that a hash worker
 * (`hash-workers.ts`) can read the bytes while they arrive.
 *
 * Owns: the free lists, per size class (a power of two times 1, 1.25, 1.5 or
 * 1.75: at most 25 % slack), and their bound in bytes.
 * Must hold: a buffer is given back only by its one owner, once, after the
 * last reader is done (the mirror's reference count decides); the free lists
 * never hold more than `maxFreeBytes`; `take` never hands out a buffer that
 * is in use.
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

  /** The shared memory under a buffer from `take`, which must not be read or written by its owner any more. */
  give(buf: Buffer): void {
    const sab = buf.buffer;
    if (!(sab instanceof SharedArrayBuffer) || buf.byteOffset !== 0 || sab.byteLength !== sizeClass(buf.length)) {
      throw new TypeError('byte pool: not a buffer of this pool');
    }
    if (this.freeBytes + sab.byteLength > this.maxFreeBytes) {
      this.counters.dropped++;
      return;
    }
    let list = this.free.get(sab.byteLength);
    if (list === undefined) this.free.set(sab.byteLength, list = []);
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

  /** Drops every free buffer. */
  clear(): void {
    this.free.clear();
    this.freeBytes = 0;
  }
}
