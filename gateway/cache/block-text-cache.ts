/**
 * The verified texts of the served chain's blocks, in order, in one
 * append-only file (`.git/vouch-blocks.cache`, length-prefixed records),
 * read back by offset on demand (the index does not hold the chain).
 * Owns: the text file, its index file (`.git/vouch-blocks.idx`: length and
 * sha256 per block), offsets and hashes in memory, and a running digest of
 * the index file. With a `source` (sparse layout) only the index file is
 * written and texts are read from git objects.
 * Trusts: its caller to append verified texts only and to use a scanned
 * file only when its digest is the one recorded after verification.
 * Must hold: `text(i)` returns only a text whose sha256 is block i's;
 * counts, offsets, hashes and digest describe the same records; a crash's
 * leftovers are never read; a file with other hard links is never written.
 */
import { createHash, hash, type Hash } from 'node:crypto';
import { closeSync, constants, fstatSync, ftruncateSync, mkdtempSync, openSync, readSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const REC = 36;

/** sha256 of bytes, or of a string's UTF-8 (encoded by node:crypto, no Buffer made). */
function sha256(b: Uint8Array | string): Buffer {
  return hash('sha256', b, 'buffer') as Buffer; // one-shot: a few us less a read than createHash
}

function preadAll(fd: number, buf: Buffer, pos: number): boolean {
  let off = 0;
  while (off < buf.length) {
    const got = readSync(fd, buf, off, buf.length - off, pos + off);
    if (got <= 0) return false;
    off += got;
  }
  return true;
}

function pwriteAll(fd: number, buf: Buffer, pos: number): void {
  let off = 0;
  while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off, pos + off);
}

export class BlockTextCache {
  private fd = -1;
  private idxFd = -1;
  /** Records known good. */
  count = 0;
  /** Bytes of those records in the text file. */
  length = 0;
  /** starts[i]: offset of record i; starts[count] = length. */
  private starts = new Float64Array(1024);
  private hashes = new Uint8Array(1024 * 32);
  private running: Hash = createHash('sha256');
  /** False when the files live outside the chain directory (read-only directory): nothing to name in a snapshot. */
  persistent = true;
  private pending: { text: string; idx: string } | null = null;

  /** `source`: where texts are read when they are not kept here (see the header). */
  constructor(
    readonly path: string,
    private readonly source: ((i: number) => string) | null = null,
  ) {}

  private get idxPath(): string {
    return this.path.replace(/\.cache$/, '') + '.idx';
  }

  /** Digest of the index records (hex): names every text by its sha256. */
  digest(): string {
    return this.running.copy().digest('hex');
  }

  private resetState(): void {
    this.count = 0;
    this.length = 0;
    this.starts = new Float64Array(1024);
    this.hashes = new Uint8Array(1024 * 32);
    this.running = createHash('sha256');
  }

  /** Makes room for `count` records in one allocation (a rewrite of a chain of known size). */
  reserve(count: number): void {
    if (count + 1 < this.starts.length) return;
    const s = new Float64Array(count + 2);
    s.set(this.starts.subarray(0, this.count + 1));
    this.starts = s;
    const h = new Uint8Array((count + 2) * 32);
    h.set(this.hashes.subarray(0, this.count * 32));
    this.hashes = h;
  }

  private room(count: number): void {
    if (count + 1 < this.starts.length) return;
    this.reserve(Math.max(count + 2, this.starts.length * 2) - 2);
  }

  /**
   * Opens the existing files and takes the first `count` records of the
   * index file when they hash to `digest` and the text file is long enough.
   * False otherwise (then the cache is empty). Reads 36 bytes a block.
   */
  scan(count: number, digest: string): boolean {
    this.close();
    this.resetState();
    try {
      if (this.source === null) this.fd = openSync(this.path, constants.O_RDWR);
      this.idxFd = openSync(this.idxPath, constants.O_RDWR);
      const idx = Buffer.allocUnsafe(count * REC);
      if (!preadAll(this.idxFd, idx, 0)) throw new Error('short');
      this.running.update(idx);
      if (this.digest() !== digest) throw new Error('digest');
      this.room(count);
      let at = 0;
      for (let i = 0; i < count; i++) {
        const o = i * REC;
        at += 4 + idx.readUInt32BE(o);
        this.starts[i + 1] = at;
        this.hashes.set(idx.subarray(o + 4, o + REC), i * 32);
      }
      if (this.source === null && fstatSync(this.fd).size < at) throw new Error('short');
      this.count = count;
      this.length = at;
      if (this.source !== null) {
        try {
          unlinkSync(this.path);
        } catch {
          /* none: texts a full layout kept, not needed with a source */
        }
      }
      return true;
    } catch {
      this.close();
      this.resetState();
      return false;
    }
  }

  /** Starts an empty cache in new files (renamed over the old ones by `commitRewrite`). */
  beginRewrite(): void {
    this.close();
    this.resetState();
    this.persistent = true;
    const tmp = { text: `${this.path}.${process.pid}.tmp`, idx: `${this.idxPath}.${process.pid}.tmp` };
    const flags = constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC;
    try {
      if (this.source === null) this.fd = openSync(tmp.text, flags, 0o644);
      this.idxFd = openSync(tmp.idx, flags, 0o644);
      this.pending = tmp;
    } catch {
      this.close();
      // A read-only chain directory: unnamed files elsewhere, for this process only.
      const dir = mkdtempSync(join(tmpdir(), 'vouch-cache-'));
      for (const name of ['blocks.cache', 'blocks.idx']) {
        const p = join(dir, name);
        if (name === 'blocks.cache' && this.source !== null) continue;
        const fd = openSync(p, flags, 0o600);
        unlinkSync(p);
        if (name === 'blocks.cache') this.fd = fd;
        else this.idxFd = fd;
      }
      this.persistent = false;
      this.pending = null;
    }
  }

  /** Drops a rewrite that will not be committed (its files are removed). */
  abandonRewrite(): void {
    if (this.pending === null) return;
    this.close();
    for (const p of [this.pending.text, this.pending.idx]) {
      try {
        unlinkSync(p);
      } catch {
        /* already gone */
      }
    }
    this.pending = null;
    this.resetState();
  }

  commitRewrite(): void {
    if (this.pending === null) return;
    try {
      renameSync(this.pending.idx, this.idxPath);
      if (this.source === null) renameSync(this.pending.text, this.path);
      else {
        try {
          unlinkSync(this.path);
        } catch {
          /* none: texts of the full layout, not needed any more */
        }
      }
    } catch {
      this.persistent = false;
    }
    this.pending = null;
  }

  /** Appends verified texts after the good records. */
  append(texts: readonly string[]): void {
    if (texts.length === 0) return;
    if (this.idxFd < 0 || (this.source === null && this.fd < 0)) throw new Error('block cache is not open');
    if (this.pending === null && this.persistent) this.unshare();
    // Encoded straight into the records written (a Buffer per text was garbage: some 2 GB of it over a
    // cold start at 1M blocks, which the collector reclaims late); with a source, no text is written at all.
    const lengths = texts.map((t) => Buffer.byteLength(t, 'utf8'));
    let total = 0;
    for (const n of lengths) total += 4 + n;
    const data = this.source === null ? Buffer.allocUnsafe(total) : null;
    const idx = Buffer.allocUnsafe(texts.length * REC);
    this.room(this.count + texts.length);
    let off = 0;
    texts.forEach((t, k) => {
      const n = lengths[k]!;
      idx.writeUInt32BE(n, k * REC);
      if (data !== null) {
        data.writeUInt32BE(n, off);
        data.write(t, off + 4, n, 'utf8');
        sha256(data.subarray(off + 4, off + 4 + n)).copy(idx, k * REC + 4);
      } else sha256(t).copy(idx, k * REC + 4);
      off += 4 + n;
    });
    if (data !== null) pwriteAll(this.fd, data, this.length);
    pwriteAll(this.idxFd, idx, this.count * REC);
    let at = this.length;
    lengths.forEach((n, k) => {
      at += 4 + n;
      this.starts[this.count + k + 1] = at;
      this.hashes.set(idx.subarray(k * REC + 4, (k + 1) * REC), (this.count + k) * 32);
    });
    this.running.update(idx);
    this.count += texts.length;
    this.length = at;
    try {
      if (this.source === null) ftruncateSync(this.fd, this.length);
      ftruncateSync(this.idxFd, this.count * REC);
    } catch {
      // Leftovers after the records are never read.
    }
  }

  /** Copies a file that has other hard links, so appends never write into someone else's copy. */
  private unshare(): void {
    for (const which of ['text', 'idx'] as const) {
      const fd = which === 'text' ? this.fd : this.idxFd;
      if (fd < 0) continue; // no text file with a source
      if (fstatSync(fd).nlink <= 1) continue;
      const path = which === 'text' ? this.path : this.idxPath;
      const size = which === 'text' ? this.length : this.count * REC;
      const tmp = `${path}.${process.pid}.tmp`;
      const out = openSync(tmp, constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC, 0o644);
      const buf = Buffer.allocUnsafe(16 << 20);
      for (let pos = 0; pos < size; ) {
        const got = readSync(fd, buf, 0, Math.min(buf.length, size - pos), pos);
        if (got <= 0) throw new Error('block cache: short read while copying');
        pwriteAll(out, buf.subarray(0, got), pos);
        pos += got;
      }
      renameSync(tmp, path);
      closeSync(fd);
      if (which === 'text') this.fd = out;
      else this.idxFd = out;
    }
  }

  /** Whether `text` is the verified text of block i. */
  isText(i: number, text: string | Uint8Array): boolean {
    if (!(i >= 0 && i < this.count)) return false;
    const h = sha256(typeof text === 'string' ? Buffer.from(text, 'utf8') : text);
    for (let k = 0; k < 32; k++) if (h[k] !== this.hashes[i * 32 + k]) return false;
    return true;
  }

  /** The verified text of block i (i < count), or null when the file no longer holds it. */
  text(i: number): string | null {
    if (!(i >= 0 && i < this.count)) throw new RangeError(`block cache: no block ${i}`);
    if (this.source !== null) {
      let t: string;
      try {
        t = this.source(i);
      } catch {
        return null;
      }
      return this.isText(i, t) ? t : null;
    }
    const start = this.starts[i]! + 4;
    const buf = Buffer.allocUnsafe(this.starts[i + 1]! - start);
    if (!preadAll(this.fd, buf, start) || !this.isText(i, buf)) return null;
    return buf.toString('utf8');
  }

  close(): void {
    for (const fd of [this.fd, this.idxFd]) {
      if (fd >= 0) {
        try {
          closeSync(fd);
        } catch {
          /* already closed */
        }
      }
    }
    this.fd = -1;
    this.idxFd = -1;
  }
}
