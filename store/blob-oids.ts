/**
 * The blob ids of block files, by block index, learnt from the full leaf
 * trees (1,000 blocks each) the sparse layout's block reads walk through:
 * a random read of a block whose shard was read once before goes straight
 * to its blob, not through a 42 KB tree (issue 33: lookups over the whole
 * chain). 20 bytes and a bit a block, grown as shards are learnt.
 * Owns: the table. Trusts: the caller to pass a shard's leaf tree of branch
 * main and to clear the table when the branch moves.
 * Must hold: an id is kept only for an entry that is a regular file with its
 * block's own name at its own position, every entry before it in step (42
 * bytes, its own name), so a strict entry-by-entry reading of the tree finds
 * the same id; anything else is left to the tree walk (test/fuzz: blob-oids).
 */
import { blockPath } from '../chain/layout.ts';

const SHARD = 1000;
/** Bytes of one leaf tree entry: `100644 DDDDDDDDD.json\0` and a 20-byte id. */
const ENTRY = 42;

/** The 6 bytes at `at` hold neither a space nor a NUL (the entry's mode ends where its name's space is). */
function sixDigitMode(body: Buffer, at: number): boolean {
  for (let i = at; i < at + 6; i++) if (body[i] === 0x20 || body[i] === 0) return false;
  return true;
}

export class BlobOids {
  private oids = new Uint8Array(0);
  private known = new Uint8Array(0);

  /** The blob id of block `index` if its shard was learnt, else null. */
  get(index: number): string | null {
    if (index >= this.known.length * 8 || (this.known[index >> 3]! & (1 << (index & 7))) === 0) return null;
    return Buffer.from(this.oids.buffer, this.oids.byteOffset + index * 20, 20).toString('hex');
  }

  /** Learn the ids of the shard starting at block `base` from its leaf tree's bytes. */
  learnShard(base: number, body: Buffer): void {
    this.reserve(base + SHARD);
    for (let k = 0; k < SHARD; k++) {
      const at = k * ENTRY;
      if (at + ENTRY > body.length) break;
      // Out of step (a 5-digit mode, another name, a longer entry): a strict reading of what follows is not by position.
      if (body.toString('latin1', at + 6, at + 22) !== ` ${blockPath(base + k).slice(15)}\0` || !sixDigitMode(body, at)) break;
      if (body.toString('latin1', at, at + 6) !== '100644') continue;
      body.copy(this.oids, (base + k) * 20, at + 22, at + ENTRY);
      this.known[(base + k) >> 3]! |= 1 << ((base + k) & 7);
    }
  }

  clear(): void {
    this.oids = new Uint8Array(0);
    this.known = new Uint8Array(0);
  }

  private reserve(n: number): void {
    if (n <= this.known.length * 8) return;
    const blocks = Math.max(n, Math.ceil(this.known.length * 8 * 1.5));
    const oids = new Uint8Array(blocks * 20);
    oids.set(this.oids);
    const known = new Uint8Array(Math.ceil(blocks / 8));
    known.set(this.known);
    this.oids = oids;
    this.known = known;
  }
}
