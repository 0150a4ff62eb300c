/**
 * The mirror's disk tier (optional, bounded, LRU by access time, survives
 * restarts): `<diskDir>/<alg>/<hex[0:2]>/<hex>` plus `<hex>.meta`, written
 * atomically through `<diskDir>/tmp`, metadata first.
 * Owns: the entry index and byte total, loading it at start (incomplete
 * entries and tmp leftovers removed), adopting verified files, eviction,
 * the shared read-back hash check, deleting files once no reader holds them.
 * Trusts: the mirror to adopt only verified files; nothing it reads back
 * (hashed again before it is served, unless this process verified it and
 * its stamp, inode, size and change times, is unchanged).
 * Must hold: a file handed out is not deleted before every holder called
 * `release()`; one process owns a `diskDir` (its `tmp` emptied at start).
 */
import { createReadStream } from 'node:fs';
import { copyFile, mkdir, readdir, readFile, rename, rm, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import type { BigIntStats } from 'node:fs';
import { join } from 'node:path';
import type { CryptoBackend, HashAlgorithm } from '../chain/crypto-backend.ts';
import { hexEncode } from '../chain/encoding.ts';
import { HASH_ALGORITHMS, type ArtifactHash } from '../chain/hash-algorithms.ts';
import { ignore, tempName } from './mirror-spool.ts';
import { keptOriginHeaders, type StoredArtifact } from './stored-artifact.ts';

const MiB = 1024 * 1024;

export interface DiskEntry {
  key: string;
  path: string;
  size: number;
  contentType: string;
  headers: Record<string, string>;
  refs: number;
  /** Out of the index; the files go when the last reference is released. */
  doomed: boolean;
  /** A read-back hash check in progress, shared by concurrent readers. */
  checking: Promise<Buffer | boolean> | null;
  /**
   * The file's identity and change times (`fileStamp`) when this process
   * last saw its bytes hash to the key (adopted after the fetcher's check, or
   * re-hashed); null: not since it was loaded. A read-back whose stamp is
   * unchanged skips the hash.
   */
  verified?: string | null;
  /** When `touch` last set the file's times (ms). */
  touchedAt?: number;
}

/** How often `touch` sets a file's times at most: the LRU order on disk only orders a restart's load. */
const TOUCH_EVERY_MS = 60_000;

/** Device, inode, size, modification and status-change times (ns): any write, truncate or rename over the file changes it. */
function fileStamp(s: BigIntStats): string {
  return `${s.dev}:${s.ino}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`;
}

/**
 * A re-hashed file's stamp is kept only when its change time is this much
 * older than the hash: a write in the same clock tick as the last change
 * would leave the times as they were.
 */
const STAMP_MARGIN_MS = 50;

async function stampOf(path: string): Promise<{ stamp: string; ctimeMs: number } | null> {
  try {
    const s = await stat(path, { bigint: true });
    return { stamp: fileStamp(s), ctimeMs: Number(s.ctimeNs / 1_000_000n) };
  } catch {
    return null;
  }
}

export async function hashFile(
  path: string,
  algorithm: HashAlgorithm,
  backend: CryptoBackend,
  keep: boolean,
): Promise<{ hex: string; size: number; bytes: Buffer | null }> {
  if (keep) {
    const bytes = await readFile(path);
    const h = backend.createHash(algorithm);
    h.update(bytes);
    return { hex: hexEncode(h.digest()), size: bytes.length, bytes };
  }
  const h = backend.createHash(algorithm);
  let size = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: MiB })) {
    h.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { hex: hexEncode(h.digest()), size, bytes: null };
}

export class DiskTier {
  /** Entries evicted for room. */
  evictions = 0;
  private readonly index = new Map<string, DiskEntry>(); // oldest access first
  private total = 0;

  constructor(
    readonly dir: string,
    readonly capacity: number,
    private readonly backend: CryptoBackend,
  ) {}

  get bytes(): number {
    return this.total;
  }

  get entries(): number {
    return this.index.size;
  }

  get(artifactHash: string): DiskEntry | undefined {
    return this.index.get(artifactHash);
  }

  has(artifactHash: string): boolean {
    return this.index.has(artifactHash);
  }

  /** `<diskDir>/tmp`, where files are written before they are renamed into the tier. */
  async tmpDirectory(): Promise<string> {
    const dir = join(this.dir, 'tmp');
    await mkdir(dir, { recursive: true });
    return dir;
  }

  /** Rebuilds the index from `diskDir`, oldest access first; drops incomplete entries and leftovers in tmp. */
  async load(): Promise<void> {
    const root = this.dir;
    await mkdir(root, { recursive: true });
    const tmp = join(root, 'tmp');
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { recursive: true });
    const found: Array<{ entry: DiskEntry; at: number }> = [];
    for (const algorithm of Object.keys(HASH_ALGORITHMS) as HashAlgorithm[]) {
      const hexLength = HASH_ALGORITHMS[algorithm].hexLength;
      const algDir = join(root, algorithm);
      let shards: string[];
      try {
        shards = await readdir(algDir);
      } catch {
        continue;
      }
      for (const shard of shards) {
        if (!/^[0-9a-f]{2}$/.test(shard)) continue;
        const dir = join(algDir, shard);
        let names: string[];
        try {
          names = await readdir(dir);
        } catch {
          continue;
        }
        const set = new Set(names);
        for (const name of names) {
          const metaOf = /^([0-9a-f]+)\.meta$/.exec(name);
          if (metaOf !== null) {
            if (!set.has(metaOf[1]!)) await unlink(join(dir, name)).catch(ignore); // metadata without data
            continue;
          }
          if (name.length !== hexLength || !/^[0-9a-f]+$/.test(name) || !name.startsWith(shard)) continue;
          const path = join(dir, name);
          const meta = await readMeta(`${path}.meta`);
          const st = await stat(path).catch(() => null);
          if (meta === null || st === null || st.size !== meta.size) {
            await unlink(path).catch(ignore);
            await unlink(`${path}.meta`).catch(ignore);
            continue;
          }
          const key = `${algorithm}:${name}`;
          found.push({
            entry: { key, path, size: meta.size, contentType: meta.contentType, headers: meta.headers, refs: 0, doomed: false, checking: null },
            at: Math.max(st.atimeMs, st.mtimeMs),
          });
        }
      }
    }
    found.sort((a, b) => a.at - b.at);
    for (const { entry } of found) {
      this.index.set(entry.key, entry);
      this.total += entry.size;
    }
    await this.evict(null);
  }

  /** Moves a verified temp file into the tier (metadata first, then the data file). */
  async adopt(h: ArtifactHash, artifactHash: string, tempPath: string, size: number, contentType: string, headers: Record<string, string>): Promise<DiskEntry> {
    const path = join(this.dir, h.algorithm, h.hex.slice(0, 2), h.hex);
    await mkdir(join(this.dir, h.algorithm, h.hex.slice(0, 2)), { recursive: true });
    const tmpDir = await this.tmpDirectory();
    const metaTemp = join(tmpDir, tempName('meta'));
    await writeFile(metaTemp, JSON.stringify({ contentType, size, headers }), { flag: 'wx' });
    try {
      await rename(metaTemp, `${path}.meta`);
    } catch (e) {
      await unlink(metaTemp).catch(ignore);
      throw e;
    }
    try {
      await rename(tempPath, path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EXDEV') throw e;
      // The spool dir is on another file system: copy next to the tier, then rename.
      const near = join(tmpDir, tempName('copy'));
      try {
        await copyFile(tempPath, near);
        await rename(near, path);
      } catch (e2) {
        await unlink(near).catch(ignore);
        throw e2;
      }
      await unlink(tempPath).catch(ignore);
    }
    let entry = this.index.get(artifactHash);
    if (entry !== undefined) {
      // Replaced in place (same verified bytes); readers of the old inode keep it.
      this.index.delete(artifactHash);
      this.total -= entry.size;
      entry.size = size;
      entry.contentType = contentType;
      entry.headers = headers;
    } else {
      entry = { key: artifactHash, path, size, contentType, headers, refs: 0, doomed: false, checking: null };
    }
    // The bytes were hashed by the fetcher on their way into this file: stamped as verified.
    entry.verified = (await stampOf(path))?.stamp ?? null;
    entry.touchedAt = Date.now();
    this.index.set(artifactHash, entry);
    this.total += size;
    await this.evict(entry);
    return entry;
  }

  /** Evicts least recently used entries until the tier fits (never `keep`); resolves when their files are gone. */
  private async evict(keep: DiskEntry | null): Promise<void> {
    const unlinks: Array<Promise<void>> = [];
    for (const entry of this.index.values()) {
      if (this.total <= this.capacity) break;
      if (entry === keep) continue;
      this.evictions++;
      unlinks.push(this.drop(entry));
    }
    await Promise.all(unlinks);
  }

  /** Takes an entry out of the index; its files go now, or when its last reader releases it. */
  async drop(entry: DiskEntry): Promise<void> {
    if (this.index.get(entry.key) === entry) {
      this.index.delete(entry.key);
      this.total -= entry.size;
    }
    entry.doomed = true;
    if (entry.refs === 0) await this.unlink(entry);
  }

  private async unlink(entry: DiskEntry): Promise<void> {
    // A newer entry may have been written to the same path since: leave it.
    if (this.index.has(entry.key)) return;
    await Promise.all([unlink(entry.path).catch(ignore), unlink(`${entry.path}.meta`).catch(ignore)]);
  }

  /** A reference to an entry; counted on the entry, so eviction and purges wait for its release. */
  artifact(entry: DiskEntry, tier: 'disk' | 'spool'): StoredArtifact {
    entry.refs++;
    let released = false;
    return {
      artifactHash: entry.key,
      contentType: entry.contentType,
      headers: entry.headers,
      size: entry.size,
      path: entry.path,
      tier,
      release: () => {
        if (released) return;
        released = true;
        if (--entry.refs === 0 && entry.doomed) void this.unlink(entry);
      },
      retain: () => this.artifact(entry, tier),
    };
  }

  /**
   * Re-hashes an entry's file (one check shared by concurrent readers): its
   * bytes (`keep`) or true when intact, false when not. A file not read into
   * memory whose stamp is the one this process verified is intact without
   * hashing it again (nothing changed it since: a write or a rename over it
   * changes its inode, size or change time, which no utimes can set back).
   */
  check(entry: DiskEntry, h: ArtifactHash, keep: boolean): Promise<Buffer | boolean> {
    return (entry.checking ??= (async () => {
      try {
        const at = Date.now();
        const before = await stampOf(entry.path);
        if (before !== null && entry.verified === before.stamp) {
          if (!keep) return true;
          const bytes = await readFile(entry.path);
          // Read whole: still the stamped file afterwards, else hashed below.
          if (bytes.length === entry.size && (await stampOf(entry.path))?.stamp === before.stamp) return bytes;
        }
        const r = await hashFile(entry.path, h.algorithm, this.backend, keep);
        if (r.hex !== h.hex || r.size !== entry.size) return false;
        const after = await stampOf(entry.path);
        entry.verified = before !== null && after?.stamp === before.stamp && at - before.ctimeMs >= STAMP_MARGIN_MS ? before.stamp : null;
        return r.bytes ?? true;
      } catch {
        return false;
      } finally {
        entry.checking = null;
      }
    })());
  }

  /** Recently used: to the end of the LRU order, on disk too. */
  touch(entry: DiskEntry): void {
    if (this.index.get(entry.key) !== entry) return;
    this.index.delete(entry.key);
    this.index.set(entry.key, entry);
    const at = Date.now();
    if (entry.touchedAt !== undefined && at - entry.touchedAt < TOUCH_EVERY_MS) return;
    entry.touchedAt = at;
    entry.verified = null; // the times change: the next read-back hashes again
    const now = new Date(at);
    utimes(entry.path, now, now).catch(ignore);
  }
}

/** An entry's metadata; `headers` is optional (older files have none) and filtered to the kept set. */
async function readMeta(path: string): Promise<{ contentType: string; size: number; headers: Record<string, string> } | null> {
  try {
    const m = JSON.parse(await readFile(path, 'utf8')) as { contentType?: unknown; size?: unknown; headers?: unknown };
    if (typeof m.contentType !== 'string' || typeof m.size !== 'number' || !Number.isSafeInteger(m.size) || m.size < 0) return null;
    return { contentType: m.contentType, size: m.size, headers: keptOriginHeaders(m.headers as Record<string, unknown> | undefined) };
  } catch {
    return null;
  }
}
