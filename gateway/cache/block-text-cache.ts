/**
 * What the served chain's verified block texts are: one append-only index
 * file (`.git/vouch-blocks.idx`: length and sha256 per block) and the hashes
 * in memory; the texts themselves are read from git objects through
 * `source` on demand (the one layout, docs/decisions/one-layout.md), each
 * checked against its hash. The text file an earlier version kept beside
 * it (`.git/vouch-blocks.cache`) is removed.
 * Owns: the index file, the hashes in memory and a running digest of the file.
 * Trusts: its caller to append verified texts only and to use a scanned
 * file only when its digest is the one recorded after verification.
 * Must hold: `text(i)` returns only a text whose sha256 is block i's;
 * count, length, hashes and digest describe the same records; a crash's
 * leftovers are never read; a file with other hard links is never written.
 */
import { createHash, hash, type Hash } from 'node:crypto';
import { closeSync, constants, fstatSync, ftruncateSync, mkdtempSync, openSync, readSync, renameSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { preadAll, pwriteAll } from '../../platform/durable-file.ts';

const REC = 36;

/** sha256 of bytes, or of a string's UTF-8 (encoded by node:crypto, no Buffer made). */
function sha256(b: Uint8Array | string): Buffer {
  return hash('sha256', b, 'buffer') as Buffer; // one-shot: a few us less a read than createHash
}

export class BlockTextCache {
  private idxFd = -1;
  /** Records known good. */
  count = 0;
  /** Bytes the records' texts take, 4 more each (a length prefix): what a snapshot names with the digest. */
  length = 0;
  private hashes = new Uint8Array(1024 * 32);
  private running: Hash = createHash('sha256');
  /** False when the file lives outside the chain directory (read-only directory): nothing to name in a snapshot. */
  persistent = true;
  private pending: string | null = null;

  /** `path`: the text file of earlier versions (removed), the index file beside it; `source`: where texts are read. */
  constructor(
    readonly path: string,
    private readonly source: (i: number) => string,
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
    this.hashes = new Uint8Array(1024 * 32);
    this.running = createHash('sha256');
  }

  /** Makes room for `count` records in one allocation (a rewrite of a chain of known size). */
  reserve(count: number): void {
    if ((count + 1) * 32 < this.hashes.length) return;
    const h = new Uint8Array((count + 2) * 32);
    h.set(this.hashes.subarray(0, this.count * 32));
    this.hashes = h;
  }

  private room(count: number): void {
    if ((count + 1) * 32 < this.hashes.length) return;
    this.reserve(Math.max(count + 2, (this.hashes.length / 32) * 2) - 2);
  }

  /** Removes the text file an earlier version kept (the texts are read from git objects now). */
  private dropTextFile(): void {
    try {
      unlinkSync(this.path);
    } catch {
      /* none */
    }
  }

  /**
   * Opens the existing index file and takes its first `count` records when
   * they hash to `digest`. False otherwise (then the cache is empty). Reads
   * 36 bytes a block.
   */
  scan(count: number, digest: string): boolean {
    this.close();
    this.resetState();
    try {
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
        this.hashes.set(idx.subarray(o + 4, o + REC), i * 32);
      }
      this.count = count;
      this.length = at;
      this.dropTextFile();
      return true;
    } catch {
      this.close();
      this.resetState();
      return false;
    }
  }

  /** Starts an empty cache in a new index file (renamed over the old one by `commitRewrite`). */
  beginRewrite(): void {
    this.close();
    this.resetState();
    this.persistent = true;
    const tmp = `${this.idxPath}.${process.pid}.tmp`;
    const flags = constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC;
    try {
      this.idxFd = openSync(tmp, flags, 0o644);
      this.pending = tmp;
    } catch {
      this.close();
      // A read-only chain directory: an unnamed file elsewhere, for this process only.
      const p = join(mkdtempSync(join(tmpdir(), 'vouch-cache-')), 'blocks.idx');
      this.idxFd = openSync(p, flags, 0o600);
      unlinkSync(p);
      this.persistent = false;
      this.pending = null;
    }
  }

  /** Drops a rewrite that will not be committed (its file is removed). */
  abandonRewrite(): void {
    if (this.pending === null) return;
    this.close();
    try {
      unlinkSync(this.pending);
    } catch {
      /* already gone */
    }
    this.pending = null;
    this.resetState();
  }

  commitRewrite(): void {
    if (this.pending === null) return;
    try {
      renameSync(this.pending, this.idxPath);
      this.dropTextFile();
    } catch {
      this.persistent = false;
    }
    this.pending = null;
  }

  /** Appends verified texts after the good records. */
  append(texts: readonly string[]): void {
    if (texts.length === 0) return;
    if (this.idxFd < 0) throw new Error('block cache is not open');
    if (this.pending === null && this.persistent) this.unshare();
    const idx = Buffer.allocUnsafe(texts.length * REC);
    this.room(this.count + texts.length);
    let at = this.length;
    texts.forEach((t, k) => {
      const n = Buffer.byteLength(t, 'utf8');
      idx.writeUInt32BE(n, k * REC);
      sha256(t).copy(idx, k * REC + 4);
      at += 4 + n;
    });
    pwriteAll(this.idxFd, idx, this.count * REC);
    this.hashes.set(hashesOf(idx), this.count * 32);
    this.running.update(idx);
    this.count += texts.length;
    this.length = at;
    try {
      ftruncateSync(this.idxFd, this.count * REC);
    } catch {
      // Leftovers after the records are never read.
    }
  }

  /** Copies an index file that has other hard links, so appends never write into someone else's copy. */
  private unshare(): void {
    if (fstatSync(this.idxFd).nlink <= 1) return;
    const size = this.count * REC;
    const tmp = `${this.idxPath}.${process.pid}.tmp`;
    const out = openSync(tmp, constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC, 0o644);
    const buf = Buffer.allocUnsafe(16 << 20);
    for (let pos = 0; pos < size; ) {
      const got = readSync(this.idxFd, buf, 0, Math.min(buf.length, size - pos), pos);
      if (got <= 0) throw new Error('block cache: short read while copying');
      pwriteAll(out, buf.subarray(0, got), pos);
      pos += got;
    }
    renameSync(tmp, this.idxPath);
    closeSync(this.idxFd);
    this.idxFd = out;
  }

  /** Whether `text` is the verified text of block i. */
  isText(i: number, text: string | Uint8Array): boolean {
    if (!(i >= 0 && i < this.count)) return false;
    const h = sha256(typeof text === 'string' ? Buffer.from(text, 'utf8') : text);
    for (let k = 0; k < 32; k++) if (h[k] !== this.hashes[i * 32 + k]) return false;
    return true;
  }

  /** The verified text of block i (i < count), read from git objects; null when it cannot be read or is not the verified one. */
  text(i: number): string | null {
    if (!(i >= 0 && i < this.count)) throw new RangeError(`block cache: no block ${i}`);
    let t: string;
    try {
      t = this.source(i);
    } catch {
      return null;
    }
    return this.isText(i, t) ? t : null;
  }

  close(): void {
    if (this.idxFd >= 0) {
      try {
        closeSync(this.idxFd);
      } catch {
        /* already closed */
      }
    }
    this.idxFd = -1;
  }
}

/** The sha256 fields of index records, back to back (32 bytes each). */
function hashesOf(idx: Buffer): Uint8Array {
  const out = new Uint8Array((idx.length / REC) * 32);
  for (let k = 0; k * REC < idx.length; k++) out.set(idx.subarray(k * REC + 4, (k + 1) * REC), k * 32);
  return out;
}
