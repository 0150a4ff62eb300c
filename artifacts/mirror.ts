/**
 * The mirror (docs/spec/design.md §3.4): verified artifact bytes by
 * `artifact_hash`, in memory (`mirror-memory.ts`, LRU bounded in bytes, the
 * memory budget), on disk (`mirror-disk.ts`, optional, LRU, survives
 * restarts) and in spool files (`mirror-spool.ts`, large artifacts).
 * Owns: the tiers' order, the counters, the verified fetcher's entry point.
 * Trusts: the verified fetcher to put only bytes it just hashed; nothing
 * read back from disk (hashed again, unless this process verified the file
 * and its stamp is unchanged: then a large one is served from the file as
 * it is; a mismatch is deleted and a miss).
 * Must hold: only verified bytes are returned; memory and files handed out
 * are neither reused nor deleted before every holder called `release()`;
 * large artifacts never sit in the heap; memory entries are charged to the
 * budget until dropped; one process owns a `diskDir`.
 */
import { writeFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import type { CryptoBackend } from '../chain/crypto-backend.ts';
import { parseArtifactHash, type ArtifactHash } from '../chain/hash-algorithms.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import type { BytePoolStats, MemoryBudgetStats } from './byte-pool.ts';
import { DiskTier, type DiskEntry } from './mirror-disk.ts';
import { MemoryTier, POOLED_MIN } from './mirror-memory.ts';
import { ignore, SpoolFiles, tempName } from './mirror-spool.ts';
import { keptOriginHeaders, type StoredArtifact } from './stored-artifact.ts';

const MiB = 1024 * 1024;
/**
 * A disk copy of bytes just stored waits at most this long for the memory
 * tier to be quiet: no response reading its bytes, no body being received
 * into memory (`putBytes`); `settled()`, `close()` and a `get()` of the
 * bytes start the waiting ones at once.
 */
export const WRITE_BEHIND_MAX_MS = 2000;

export interface MirrorOptions {
  /** Memory tier capacity in bytes (default 256 MiB; 0 disables it). */
  memoryBytes?: number;
  /** Artifacts larger than this are spooled to files, never kept in the heap. Default min(64 MiB, memoryBytes / 4). */
  spoolThreshold?: number;
  /** Where spool files go. Default `<diskDir>/tmp`, else a private directory under the OS temp dir (removed by `close()`). */
  spoolDir?: string | null;
  /** Disk tier directory; null or absent: no disk tier. */
  diskDir?: string | null;
  /** Disk tier capacity in bytes (default 10 GiB). */
  diskBytes?: number;
  /** Hashing of disk read-backs (default node:crypto). */
  backend?: CryptoBackend;
  /** Bytes of recycled buffers kept for reuse (default min(64 MiB, memoryBytes / 4)). */
  poolBytes?: number;
  /**
   * The memory budget: artifact bytes in memory at once, in flight, held for
   * readers and in the memory tier together (default 2 × memoryBytes).
   */
  budgetBytes?: number | null;
}

export interface MirrorStats {
  hits: { memory: number; disk: number };
  misses: number;
  /** Disk files whose bytes no longer hashed to their name (deleted). */
  corrupt: number;
  evictions: { memory: number; disk: number };
  diskWriteErrors: number;
  memory: { bytes: number; entries: number; capacity: number };
  disk: { enabled: boolean; bytes: number; entries: number; capacity: number; error: string | null };
  /** Spool files currently held by readers (large artifacts outside the disk tier). */
  spool: { files: number; bytes: number };
  /** Recycled buffers of large memory-tier artifacts. */
  pool: BytePoolStats;
  /** The memory budget: its limit and what is charged to it, by use. */
  budget: MemoryBudgetStats;
}

export class Mirror {
  readonly spoolThreshold: number;
  /** Resolves when the disk index is loaded (never rejects; a broken disk tier is disabled and reported in stats). */
  readonly ready: Promise<void>;
  private readonly memory: MemoryTier;
  private readonly disk: DiskTier | null;
  private readonly diskCapacity: number;
  private diskEnabled: boolean;
  private diskError: string | null = null;
  private readonly spool: SpoolFiles;
  private readonly counters = { memoryHits: 0, diskHits: 0, misses: 0, corrupt: 0, diskWriteErrors: 0 };
  /** Copies of memory-tier bytes being written to the disk tier, by artifact hash (each holds its bytes until written). */
  private readonly writing = new Map<string, Promise<void>>();
  /** Starts a disk copy still waiting behind its readers, by artifact hash. */
  private readonly waitingCopies = new Map<string, () => void>();

  constructor(options: MirrorOptions = {}) {
    const memoryBytes = options.memoryBytes ?? 256 * MiB;
    this.spoolThreshold = options.spoolThreshold ?? Math.min(64 * MiB, Math.floor(memoryBytes / 4));
    this.memory = new MemoryTier({
      memoryBytes,
      spoolThreshold: this.spoolThreshold,
      poolBytes: options.poolBytes ?? Math.min(64 * MiB, Math.floor(memoryBytes / 4)),
      budgetBytes: options.budgetBytes ?? 2 * memoryBytes,
    });
    const diskDir = options.diskDir ?? null;
    this.diskCapacity = options.diskBytes ?? 10 * 1024 * MiB;
    this.disk = diskDir === null ? null : new DiskTier(diskDir, this.diskCapacity, options.backend ?? nodeBackend);
    this.diskEnabled = diskDir !== null && this.diskCapacity > 0;
    this.spool = new SpoolFiles(options.spoolDir ?? (diskDir !== null ? join(diskDir, 'tmp') : null));
    this.ready = this.diskEnabled ? this.disk!.load().catch((e: unknown) => this.disableDisk(e)) : Promise.resolve();
  }

  /**
   * The verified artifact, or null on a miss. Disk hits are hashed again
   * first (small ones move into memory) unless this process verified the
   * file and its stamp is unchanged; a corrupt disk file is deleted and
   * counts as a miss. The caller must `release()` what it gets.
   */
  async get(artifactHash: string): Promise<StoredArtifact | null> {
    const parsed = this.parse(artifactHash);
    const hit = this.memory.get(artifactHash);
    if (hit !== null) {
      this.counters.memoryHits++;
      return hit;
    }
    await this.ready;
    // Gone from memory before its copy reached the disk tier: that copy is started now if it waits, and awaited, not fetched again.
    this.waitingCopies.get(artifactHash)?.();
    await this.writing.get(artifactHash);
    const entry = this.diskEnabled ? this.disk!.get(artifactHash) : undefined;
    if (entry !== undefined) {
      const found = await this.readBack(entry, parsed);
      if (found !== null) {
        this.counters.diskHits++;
        return found;
      }
    }
    this.counters.misses++;
    return null;
  }

  /** Whether the mirror holds the artifact (memory or disk index), without checking or counting. */
  has(artifactHash: string): boolean {
    return this.memory.has(artifactHash) || (this.diskEnabled && (this.disk!.has(artifactHash) || this.writing.has(artifactHash)));
  }

  /** Resolves once the disk copies `putBytes` started so far are written (or failed, counted). */
  async settled(): Promise<void> {
    while (this.writing.size > 0) {
      for (const go of [...this.waitingCopies.values()]) go();
      await Promise.all(this.writing.values());
    }
  }

  /**
   * Stores verified bytes (at most `spoolThreshold` of them): memory tier,
   * and the disk tier when there is one, written after this resolves, once
   * the memory tier is quiet: no response reads bytes from memory and no
   * body is being received into it (at most WRITE_BEHIND_MAX_MS later; they
   * are served from memory meanwhile and held until written; a disk
   * failure is counted, not thrown; `settled()` and `close()` await the
   * writes). Returns them as an artifact. `headers`: origin response
   * headers; only their kept subset (`KEPT_ORIGIN_HEADERS`) is stored.
   * The bytes are charged to the memory budget until they leave memory:
   * `reserved` bytes the caller reserved (`reserve()`) are taken over (a
   * pooled buffer's reservation always is); bytes beyond it are counted too.
   */
  async putBytes(
    artifactHash: string,
    bytes: Buffer,
    contentType: string,
    headers: Readonly<Record<string, string>> = {},
    pooled = false,
    reserved = 0,
  ): Promise<StoredArtifact> {
    let h: ArtifactHash;
    try {
      h = this.parse(artifactHash);
    } catch (e) {
      if (pooled) this.giveBack(bytes);
      else this.unreserve(reserved);
      throw e;
    }
    const kept = keptOriginHeaders(headers);
    // Held from here on: the disk write below still reads the bytes if the entry is evicted meanwhile.
    const artifact = this.memory.put(artifactHash, bytes, contentType, kept, pooled, reserved);
    await this.ready;
    if (this.diskEnabled && bytes.length <= this.disk!.capacity && !this.disk!.has(artifactHash) && !this.writing.has(artifactHash)) {
      // Not awaited: a verified layer goes out from memory while its copy waits, then is written (the write held a cold pull's
      // last layer back): behind the transfers of the moment (a pull's other layers too), so its copying does not compete with
      // their receiving, hashing and sending for the cores.
      const held = this.memory.holdQuietly(artifact) ?? artifact.retain();
      const written = this.behind(artifactHash)
        .then(() => this.writeCopy(h, artifactHash, bytes, contentType, kept))
        .finally(() => {
          held.release();
          this.writing.delete(artifactHash);
        });
      this.writing.set(artifactHash, written);
    }
    return artifact;
  }

  /** Resolves once the memory tier is quiet (the copy's own hold is no reader), after WRITE_BEHIND_MAX_MS, or when `get()` or `settled()` asks. */
  private behind(artifactHash: string): Promise<void> {
    return new Promise<void>((resolve) => {
      const go = () => {
        if (this.waitingCopies.get(artifactHash) !== go) return;
        this.waitingCopies.delete(artifactHash);
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(go, WRITE_BEHIND_MAX_MS);
      this.waitingCopies.set(artifactHash, go);
      void this.memory.quiet().then(go);
    });
  }

  /** Writes verified bytes into the disk tier (a temp file, then adopted); a failure is counted, never thrown. */
  private async writeCopy(h: ArtifactHash, artifactHash: string, bytes: Buffer, contentType: string, kept: Record<string, string>): Promise<void> {
    let temp: string | null = null;
    try {
      const dir = await this.disk!.tmpDirectory();
      temp = join(dir, tempName('put'));
      await writeFile(temp, bytes, { flag: 'wx' });
      if (this.diskEnabled) await this.disk!.adopt(h, artifactHash, temp, bytes.length, contentType, kept);
      temp = null;
    } catch {
      this.counters.diskWriteErrors++;
    } finally {
      if (temp !== null) await unlink(temp).catch(ignore);
    }
  }

  /**
   * A buffer of exactly `size` bytes (contents undefined) to receive a body
   * the memory tier will keep, or null when it would not keep one that large
   * (or it is too small to be worth pooling). Hand it to `putBytes(...,
   * pooled = true)` once verified, or back to `recycle` — never both, and not
   * used afterwards either way.
   */
  buffer(size: number): Buffer | null {
    return this.memory.buffer(size);
  }

  /** Gives back an unused buffer from `buffer()` (a failed fetch), and its reservation. */
  giveBack(buf: Buffer): void {
    this.memory.giveBack(buf);
  }

  /**
   * Reserves `n` bytes of the memory budget for a body received into memory
   * outside `buffer()` (chunks of unknown total length); false past the
   * limit (receive into a spool file instead; counted as refused unless
   * `optional`, a reservation the caller can do without). Hand the
   * reservation to `putBytes(..., reserved)` or back to `unreserve`.
   */
  reserve(n: number, optional = false): boolean {
    return this.memory.reserve(n, optional);
  }

  /**
   * Charges `n` bytes a response holds to send a file (its read buffer) to
   * the memory budget as `held`, if it has room; false (not counted as
   * refused: the response sends in small pieces instead) if not. Give them
   * back with `unhold`.
   */
  hold(n: number): boolean {
    return this.memory.hold(n);
  }

  /** Gives back `n` bytes charged by `hold`. */
  unhold(n: number): void {
    this.memory.unhold(n);
  }

  /** Gives back `n` reserved bytes that were not handed to `putBytes`. */
  unreserve(n: number): void {
    this.memory.unreserve(n);
  }

  /**
   * Takes ownership of a verified spool file (from `newSpoolPath`) of `size`
   * bytes: moves it into the disk tier when there is one and it fits, else
   * serves it as it is and deletes it after the last reader's `release()`.
   * The temp path is gone from the caller's point of view either way.
   * `headers` as for `putBytes`.
   */
  async putFile(
    artifactHash: string,
    tempPath: string,
    size: number,
    contentType: string,
    headers: Readonly<Record<string, string>> = {},
  ): Promise<StoredArtifact> {
    const kept = keptOriginHeaders(headers);
    let h: ArtifactHash;
    try {
      h = this.parse(artifactHash);
    } catch (e) {
      await unlink(tempPath).catch(ignore);
      throw e;
    }
    await this.ready;
    if (this.diskEnabled && size <= this.disk!.capacity) {
      try {
        const entry = await this.disk!.adopt(h, artifactHash, tempPath, size, contentType, kept);
        return this.disk!.artifact(entry, 'spool');
      } catch {
        this.counters.diskWriteErrors++;
      }
    }
    return this.spool.serve(artifactHash, tempPath, size, contentType, kept);
  }

  /** A fresh path in the spool directory for the fetcher to write to (created with `wx`). */
  async newSpoolPath(): Promise<string> {
    await this.ready; // loading the disk tier empties <diskDir>/tmp
    return join(await this.spool.directory(), tempName('spool'));
  }

  stats(): MirrorStats {
    const m = this.memory.stats();
    return {
      hits: { memory: this.counters.memoryHits, disk: this.counters.diskHits },
      misses: this.counters.misses,
      corrupt: this.counters.corrupt,
      evictions: { memory: this.memory.evictions, disk: this.disk?.evictions ?? 0 },
      diskWriteErrors: this.counters.diskWriteErrors,
      memory: m.memory,
      disk: { enabled: this.diskEnabled, bytes: this.disk?.bytes ?? 0, entries: this.disk?.entries ?? 0, capacity: this.diskCapacity, error: this.diskError },
      spool: this.spool.stats(),
      pool: m.pool,
      budget: m.budget,
    };
  }

  /** Empties the memory tier and removes the private spool directory (if the mirror made one). Disk files stay. */
  async close(): Promise<void> {
    await this.settled();
    this.memory.clear();
    await this.spool.close();
  }

  // -------------------------------------------------------------------------

  private parse(artifactHash: string): ArtifactHash {
    const parsed = parseArtifactHash(artifactHash);
    if (typeof parsed === 'string') throw new VouchError('bad_artifact_hash', `${parsed}: ${JSON.stringify(artifactHash.slice(0, 200))}`);
    return parsed;
  }

  private disableDisk(e: unknown): void {
    this.diskEnabled = false;
    this.diskError = `disk tier disabled: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
  }

  /** Re-hashes a disk entry; the artifact when it is intact, null (and the files deleted) when not. */
  private async readBack(entry: DiskEntry, h: ArtifactHash): Promise<StoredArtifact | null> {
    const disk = this.disk!;
    const held = disk.artifact(entry, 'disk'); // nothing deletes it while it is checked
    // Read into memory only what the memory tier keeps and the budget has room for; else checked and served from the file.
    // A large file this process verified is served from the file at once (its stamp checked, nothing read first): reading
    // it whole into memory held its first byte back for the whole read, where a file is sent through two small halves.
    const fromFile = entry.size >= POOLED_MIN && entry.verified != null;
    const reserved = !fromFile && this.memory.keeps(entry.size) && this.memory.reserveReadBack(entry.size) ? entry.size : 0;
    const result = await disk.check(entry, h, reserved > 0);
    if (!(result instanceof Buffer && reserved > 0)) this.unreserve(reserved);
    if (result === false) {
      if (!entry.doomed) this.counters.corrupt++;
      held.release();
      await disk.drop(entry);
      return null;
    }
    disk.touch(entry);
    if (result instanceof Buffer && reserved > 0) {
      held.release();
      return this.memory.putReadBack(entry.key, result, entry.contentType, entry.headers, reserved);
    }
    return held;
  }
}
