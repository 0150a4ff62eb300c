/**
 * The packs vouch itself writes whole: the one pack of `ChainRepo.init` and
 * the packs a mirror receives (./repo-replicator.ts). The appends' loose
 * objects are packed by stock git (./git-repack.ts).
 * Owns: `PackFileWriter` (pack + `.idx` v2 to temporary files, fsynced,
 * renamed pack first).
 * Trusts: the caller to add each object's true id and bytes.
 * Must hold: an object is readable from the instant the index is named;
 * the pack and its index are durable before that; every pack passes
 * `git verify-pack`.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { crc32, deflateSync } from 'node:zlib';
import { VouchError } from '../chain/errors.ts';
import { fsyncDir } from '../platform/durable-file.ts';
import { REF_DELTA, encodeObjectHeader } from './git-pack.ts';
import { type IdxEntry, idxV2 } from './git-pack-index.ts';

const TYPE_CODE: Record<string, number> = { commit: 1, tree: 2, blob: 3, tag: 4 };

let tmpSeq = 0;

/**
 * A pack written to a temporary file as its entries come, then named
 * `pack-<checksum>.pack` with its `.idx` beside it, durably. With `count`
 * given up front the checksum is computed as the bytes go; without it the
 * header's count is filled in at the end and the file hashed once more.
 */
export class PackFileWriter {
  private readonly tmpPack: string;
  private readonly fd: number;
  private readonly hash = createHash('sha1');
  private buf: Buffer[] = [];
  private bufBytes = 0;
  private offset = 12;
  private readonly entries: IdxEntry[] = [];
  private readonly seen = new Set<string>();
  private closed = false;

  constructor(
    private readonly packDir: string,
    private readonly count: number | null = null,
  ) {
    fs.mkdirSync(packDir, { recursive: true });
    this.tmpPack = join(packDir, `tmp_pack_vouch_${process.pid}_${tmpSeq++}`);
    this.fd = fs.openSync(this.tmpPack, 'w+', 0o444);
    const header = Buffer.alloc(12);
    header.write('PACK', 0, 'latin1');
    header.writeUInt32BE(2, 4);
    header.writeUInt32BE(count ?? 0, 8);
    this.put(header);
  }

  get objects(): number {
    return this.entries.length;
  }

  has(oid: string): boolean {
    return this.seen.has(oid);
  }

  private put(b: Buffer): void {
    if (this.count !== null) this.hash.update(b);
    this.buf.push(b);
    this.bufBytes += b.length;
    if (this.bufBytes >= 1 << 20) this.flush();
  }

  private flush(): void {
    const data = Buffer.concat(this.buf, this.bufBytes);
    for (let off = 0; off < data.length; ) off += fs.writeSync(this.fd, data, off, data.length - off);
    this.buf = [];
    this.bufBytes = 0;
  }

  /** Add an entry given as its bytes in the pack (header, base id of a REF_DELTA, zlib data). Ignored when `oid` is in already. */
  addRaw(oid: string, raw: Buffer[], crc?: number): void {
    if (this.seen.has(oid)) return;
    this.seen.add(oid);
    let c = 0;
    let n = 0;
    for (const r of raw) {
      if (crc === undefined) c = crc32(r, c);
      this.put(r);
      n += r.length;
    }
    this.entries.push({ oid, offset: this.offset, crc: crc ?? c });
    this.offset += n;
  }

  /** Add a whole object. */
  addWhole(oid: string, type: string, body: Buffer): void {
    const code = TYPE_CODE[type];
    if (code === undefined) throw new VouchError('io_error', `cannot pack an object of type ${type}`);
    if (!this.seen.has(oid)) this.addRaw(oid, [encodeObjectHeader(code, body.length), deflateSync(body, { level: 1 })]);
  }

  /** Add an object as a REF_DELTA of `base`, which must be in this pack. */
  addDelta(oid: string, base: string, delta: Buffer): void {
    if (!this.seen.has(base)) throw new VouchError('io_error', `delta base ${base} is not in the pack`);
    if (!this.seen.has(oid)) this.addRaw(oid, [encodeObjectHeader(REF_DELTA, delta.length), Buffer.from(base, 'hex'), deflateSync(delta, { level: 1 })]);
  }

  /**
   * Write the trailer, fsync, write the index (fsynced), rename the pack
   * then its index into place and fsync the directory. Returns the pack's
   * name (`pack-<checksum>`); the objects are readable from the instant the
   * index is named.
   */
  finish(onNamed?: () => void): string {
    if (this.count !== null && this.count !== this.entries.length) {
      throw new VouchError('io_error', `pack of ${this.entries.length} objects announced ${this.count}`);
    }
    this.flush();
    let sum: Buffer;
    if (this.count !== null) sum = this.hash.digest();
    else {
      const head = Buffer.alloc(4);
      head.writeUInt32BE(this.entries.length, 0);
      fs.writeSync(this.fd, head, 0, 4, 8);
      const h = createHash('sha1');
      const chunk = Buffer.allocUnsafe(4 << 20);
      for (let at = 0; at < this.offset; ) {
        const got = fs.readSync(this.fd, chunk, 0, Math.min(chunk.length, this.offset - at), at);
        if (got <= 0) throw new VouchError('io_error', `${this.tmpPack} is shorter than written`);
        h.update(chunk.subarray(0, got));
        at += got;
      }
      sum = h.digest();
    }
    fs.writeSync(this.fd, sum, 0, 20, this.offset);
    fs.fsyncSync(this.fd);
    fs.closeSync(this.fd);
    this.closed = true;
    const name = `pack-${sum.toString('hex')}`;
    const tmpIdx = join(this.packDir, `tmp_idx_vouch_${process.pid}_${tmpSeq++}`);
    const idx = idxV2(this.entries, sum);
    const fd = fs.openSync(tmpIdx, 'w', 0o444);
    try {
      for (let off = 0; off < idx.length; ) off += fs.writeSync(fd, idx, off, idx.length - off);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    const base = join(this.packDir, name);
    if (fs.existsSync(`${base}.idx`)) {
      // The same pack is stored already (same objects in the same order).
      fs.unlinkSync(this.tmpPack);
      fs.unlinkSync(tmpIdx);
      return name;
    }
    fs.renameSync(this.tmpPack, `${base}.pack`);
    onNamed?.();
    fs.renameSync(tmpIdx, `${base}.idx`);
    fsyncDir(this.packDir);
    return name;
  }

  /** Give up: remove the temporary file. */
  abort(): void {
    if (!this.closed) {
      try {
        fs.closeSync(this.fd);
      } catch {
        /* closed */
      }
      this.closed = true;
    }
    try {
      fs.unlinkSync(this.tmpPack);
    } catch {
      /* gone */
    }
  }
}
