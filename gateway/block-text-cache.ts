/**
 * block-text-cache: the verified texts of the served chain's blocks, in
 * order, in one append-only file (`.git/vouch-blocks.cache`: records of a
 * 4-byte big-endian length and the UTF-8 text), read back one block at a
 * time by offset (issue 16: the index does not hold the chain, it reads
 * blocks from here on demand).
 *
 * Owns: the file, the offsets of its records, and a digest of its bytes
 * that is cheap to extend: sha256 over the sha256 of each 1 MiB segment,
 * then of the partial last segment. An append hashes only the bytes it adds.
 *
 * Trusts: its caller to append verified texts only, and to use a file read
 * back (`scan`) only when its digest is the one recorded after verification.
 * Must hold: `count`, `length`, the offsets and the digest always describe
 * the same records; bytes after `length` (a crash's leftovers) are never
 * read and are overwritten by the next append; a file with other hard links
 * (a copied chain directory) is never written in place.
 */
import { createHash, type Hash } from 'node:crypto';
import {
  closeSync, fstatSync, ftruncateSync, mkdtempSync, openSync, readSync, renameSync, unlinkSync, writeSync, constants,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const SEGMENT = 1 << 20;
const CHUNK = 16 << 20;

export class BlockTextCache {
  private fd = -1;
  /** Records known good. */
  count = 0;
  /** Bytes of those records. */
  length = 0;
  /** starts[i]: offset of record i; starts[count] = length. */
  private starts = new Float64Array(1024);
  private segments: Hash = createHash('sha256');
  private partial: Hash = createHash('sha256');
  private partialLen = 0;
  /** False when the file lives outside the chain directory (read-only directory): nothing to name in a snapshot. */
  persistent = true;

  constructor(readonly path: string) {}

  /** Digest of the first `length` bytes (hex). */
  digest(): string {
    return this.segments.copy().update(this.partial.copy().digest()).digest('hex');
  }

  private resetState(): void {
    this.count = 0;
    this.length = 0;
    this.starts = new Float64Array(1024);
    this.segments = createHash('sha256');
    this.partial = createHash('sha256');
    this.partialLen = 0;
  }

  private feed(buf: Uint8Array): void {
    let off = 0;
    while (off < buf.length) {
      const take = Math.min(SEGMENT - this.partialLen, buf.length - off);
      this.partial.update(buf.subarray(off, off + take));
      this.partialLen += take;
      off += take;
      if (this.partialLen === SEGMENT) {
        this.segments.update(this.partial.digest());
        this.partial = createHash('sha256');
        this.partialLen = 0;
      }
    }
  }

  private pushStart(at: number): void {
    if (this.count + 1 >= this.starts.length) {
      const next = new Float64Array(this.starts.length * 2);
      next.set(this.starts);
      this.starts = next;
    }
    this.starts[this.count + 1] = at;
  }

  /**
   * Opens the existing file and reads its first `length` bytes as `count`
   * records, hashing them. False when the file is missing, short, or its
   * records do not end exactly there (then the cache is empty).
   */
  scan(length: number, count: number): boolean {
    this.close();
    this.resetState();
    try {
      this.fd = openSync(this.path, constants.O_RDWR);
    } catch {
      return false;
    }
    const buf = Buffer.allocUnsafe(CHUNK);
    let pos = 0;
    /** Offset of the next record's length prefix. */
    let next = 0;
    const lenBuf = Buffer.alloc(4);
    let lenHave = 0;
    while (pos < length) {
      const got = readSync(this.fd, buf, 0, Math.min(CHUNK, length - pos), pos);
      if (got <= 0) break;
      const chunk = buf.subarray(0, got);
      this.feed(chunk);
      // Walk the record boundaries that fall in this chunk.
      while (next < pos + got) {
        const at = next - pos;
        if (lenHave > 0 || at + 4 > got) {
          // A length prefix split across chunks.
          while (lenHave < 4 && next + lenHave < pos + got) { lenBuf[lenHave] = chunk[next + lenHave - pos]!; lenHave++; }
          if (lenHave < 4) break;
          lenHave = 0;
          next = next + 4 + lenBuf.readUInt32BE(0);
        } else next = next + 4 + chunk.readUInt32BE(at);
        if (this.count >= count) { this.close(); this.resetState(); return false; }
        this.pushStart(next);
        this.count++;
      }
      pos += got;
    }
    // pushStart wrote starts[count] for each record's end; starts[0] = 0.
    if (pos !== length || next !== length || this.count !== count || lenHave !== 0) {
      this.close();
      this.resetState();
      return false;
    }
    this.length = length;
    return true;
  }

  /** Starts an empty cache in a new file (renamed over the old one by `commitRewrite`). */
  beginRewrite(): void {
    this.close();
    this.resetState();
    this.persistent = true;
    const tmp = `${this.path}.${process.pid}.tmp`;
    try {
      this.fd = openSync(tmp, constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC, 0o644);
      this.pendingRename = tmp;
    } catch {
      // A read-only chain directory: an unnamed file elsewhere, for this process only.
      const dir = mkdtempSync(join(tmpdir(), 'vouch-cache-'));
      const p = join(dir, 'blocks.cache');
      this.fd = openSync(p, constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC, 0o600);
      unlinkSync(p);
      this.persistent = false;
      this.pendingRename = null;
    }
  }

  private pendingRename: string | null = null;

  commitRewrite(): void {
    if (this.pendingRename === null) return;
    try {
      renameSync(this.pendingRename, this.path);
    } catch {
      this.persistent = false;
    }
    this.pendingRename = null;
  }

  private static encode(texts: readonly string[]): Buffer {
    let total = 0;
    const bufs = texts.map((t) => { const b = Buffer.from(t, 'utf8'); total += 4 + b.length; return b; });
    const out = Buffer.allocUnsafe(total);
    let off = 0;
    for (const b of bufs) {
      out.writeUInt32BE(b.length, off);
      b.copy(out, off + 4);
      off += 4 + b.length;
    }
    return out;
  }

  /** Appends texts after the good records. */
  append(texts: readonly string[]): void {
    if (texts.length === 0) return;
    if (this.fd < 0) throw new Error('block cache is not open');
    if (this.pendingRename === null && this.persistent && fstatSync(this.fd).nlink > 1) this.unshare();
    const data = BlockTextCache.encode(texts);
    let off = 0;
    while (off < data.length) off += writeSync(this.fd, data, off, data.length - off, this.length + off);
    let at = this.length;
    for (const t of texts) {
      at += 4 + Buffer.byteLength(t, 'utf8');
      this.pushStart(at);
      this.count++;
    }
    this.feed(data);
    this.length += data.length;
    try {
      ftruncateSync(this.fd, this.length);
    } catch {
      // Leftovers after `length` are never read.
    }
  }

  /** Copies a file that has other hard links, so appends never write into someone else's copy. */
  private unshare(): void {
    const tmp = `${this.path}.${process.pid}.tmp`;
    const out = openSync(tmp, constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC, 0o644);
    const buf = Buffer.allocUnsafe(CHUNK);
    for (let pos = 0; pos < this.length;) {
      const got = readSync(this.fd, buf, 0, Math.min(CHUNK, this.length - pos), pos);
      if (got <= 0) throw new Error('block cache: short read while copying');
      let w = 0;
      while (w < got) w += writeSync(out, buf, w, got - w, pos + w);
      pos += got;
    }
    renameSync(tmp, this.path);
    closeSync(this.fd);
    this.fd = out;
  }

  /** The verified text of block i (i < count). */
  text(i: number): string {
    if (!(i >= 0 && i < this.count)) throw new RangeError(`block cache: no block ${i}`);
    const start = this.starts[i]! + 4;
    const end = this.starts[i + 1]!;
    const buf = Buffer.allocUnsafe(end - start);
    let off = 0;
    while (off < buf.length) {
      const got = readSync(this.fd, buf, off, buf.length - off, start + off);
      if (got <= 0) throw new Error(`block cache: short read at block ${i}`);
      off += got;
    }
    return buf.toString('utf8');
  }

  close(): void {
    if (this.fd >= 0) {
      try { closeSync(this.fd); } catch { /* already closed */ }
      this.fd = -1;
    }
  }
}
