/**
 * The mirror (DESIGN 3.4): verified artifact bytes, content-addressed by
 * `artifact_hash` (`<alg>:<hex>`).
 *
 * Owns three places bytes can live:
 * - memory: an lru-cache bounded in bytes, holding artifacts up to
 *   `spoolThreshold` bytes as `{ bytes, contentType, headers }`; large
 *   ones sit in `BytePool` buffers (`buffer()`), which go back to the pool
 *   when they have left the cache and the last reader released them;
 * - the memory budget (`MemoryBudget`, `budgetBytes`): every artifact byte in
 *   memory is charged to it — reserved as `in_flight` before a body is
 *   received into memory (`buffer()`, `reserve()`), `tier` while in the
 *   memory tier, `held` while out of it and still being sent — and a
 *   reservation past the limit is refused (the fetcher spools instead);
 * - disk (optional, `diskDir`, bounded by `diskBytes`, LRU by access time,
 *   survives restarts): `<diskDir>/<alg>/<hex[0:2]>/<hex>` plus
 *   `<hex>.meta` (JSON: content type, size and the kept origin headers),
 *   written atomically (temp file in `<diskDir>/tmp`, then rename; the data
 *   file last, so a data file always has its metadata), re-hashed every time
 *   it is read back;
 * - spool files: large artifacts (over `spoolThreshold`) are written to a file
 *   in `spoolDir` while they are hashed (by the verified fetcher) and served
 *   from it; without a disk tier the file is deleted after its last reader.
 *
 * Trusts: its one writer, the verified fetcher, to call `putBytes`/`putFile`
 * only with bytes whose hash it has just checked against `artifactHash` (the
 * mirror does not hash them again on the way in). It trusts nothing it reads
 * back from disk: those bytes are hashed again and a mismatching file is
 * deleted and reported as a miss.
 *
 * Must hold: only verified bytes are returned; memory bytes handed out
 * are not reused for another artifact before every holder called
 * `release()` (the server releases when the response is done); a file handed out as
 * `StoredArtifact.path` is not deleted (evicted, replaced by a corrupt-file
 * purge, or cleaned up) before every holder called `release()`; large
 * artifacts never sit in the heap; memory entries are charged to the budget
 * from the reservation that received them until their bytes are dropped
 * (once, under the use that matches their state); one process owns a
 * `diskDir` (its `tmp` is emptied at start).
 */
import { createReadStream } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LRUCache } from 'lru-cache';
import { VouchError } from '../chain/errors.ts';
import type { CryptoBackend, HashAlgorithm } from '../chain/crypto-backend.ts';
import { hexEncode } from '../chain/encoding.ts';
import { HASH_ALGORITHMS, parseArtifactHash, type ArtifactHash } from '../chain/hash-algorithms.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { BytePool, MemoryBudget, sizeClass, type BudgetUse, type BytePoolStats, type MemoryBudgetStats } from './byte-pool.ts';

const MiB = 1024 * 1024;

/**
 * Origin response headers kept with the bytes (besides Content-Type) and
 * served with them on every later hit, so a mirror hit answers like the
 * origin fetch did. Only descriptive headers that are the same for every
 * client: never Set-Cookie, Vary, validators (the gateway sets its own
 * ETag) or lengths. Content-Encoding is kept: the signed hash is over the
 * bytes as the origin sent them, so an origin that answers `gzip` despite
 * `accept-encoding: identity` has its encoded bytes hashed and served, and
 * the client needs the header to decode them.
 */
export const KEPT_ORIGIN_HEADERS: readonly string[] = ['content-disposition', 'last-modified', 'cache-control', 'content-language', 'content-encoding'];
const MAX_KEPT_HEADER = 1024;

/** The kept subset of origin response headers (lower-case names; overlong values dropped). */
export function keptOriginHeaders(headers: Readonly<Record<string, unknown>> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (headers === undefined || headers === null || typeof headers !== 'object') return out;
  for (const name of KEPT_ORIGIN_HEADERS) {
    const v = Object.prototype.hasOwnProperty.call(headers, name) ? headers[name] : undefined;
    if (typeof v === 'string' && v.length <= MAX_KEPT_HEADER && /^[\t\x20-\x7e\x80-\xff]*$/.test(v)) out[name] = v;
  }
  return out;
}

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

/** Bodies at least this large are received into pooled buffers (`Mirror.buffer`). */
export const POOLED_MIN = 1024 * 1024;

/** One verified artifact handed to a reader. */
export interface StoredArtifact {
  readonly artifactHash: string;
  readonly contentType: string;
  /** The kept origin headers stored with the bytes (`KEPT_ORIGIN_HEADERS`); absent when none were stored. */
  readonly headers?: Readonly<Record<string, string>>;
  readonly size: number;
  /** The bytes, when they are in memory. */
  readonly bytes?: Buffer;
  /** The file holding the bytes, when they are not in memory. Valid until `release()`. */
  readonly path?: string;
  /** Where the mirror had it: `memory`, `disk`, or a `spool` file of a fresh fetch. */
  readonly tier: 'memory' | 'disk' | 'spool';
  /** Done reading (also done sending: a socket may still read `bytes`); the bytes or file may go. Idempotent. Every artifact handed out must be released. */
  release(): void;
  /** Another reference for another reader (released separately). */
  retain(): StoredArtifact;
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

interface MemoryEntry {
  bytes: Buffer;
  contentType: string;
  headers: Record<string, string>;
  /** The bytes are a `BytePool` buffer: given back once out of the cache and unread. */
  pooled: boolean;
  /** Readers holding the bytes (artifacts handed out and not yet released). */
  refs: number;
  /** In the memory tier's LRU. */
  cached: boolean;
  /** Bytes charged to the memory budget for this entry, and under which use (null: not, or no longer). */
  charge: number;
  use: BudgetUse | null;
}

interface DiskEntry {
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
}

/** Reference counting of one file shared by readers. */
class FileRefs {
  refs = 0;
  constructor(private readonly onLast: () => void) {}
  acquire(): () => void {
    this.refs++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.refs === 0) this.onLast();
    };
  }
}

function fileArtifact(artifactHash: string, path: string, size: number, contentType: string, headers: Record<string, string>, tier: 'disk' | 'spool', refs: FileRefs): StoredArtifact {
  const release = refs.acquire();
  return {
    artifactHash, contentType, headers, size, path, tier, release,
    retain: () => fileArtifact(artifactHash, path, size, contentType, headers, tier, refs),
  };
}

/** Hashes a file by streaming it; the file's bytes too when `keep` (small files). */
export async function hashFile(path: string, algorithm: HashAlgorithm, backend: CryptoBackend, keep: boolean): Promise<{ hex: string; size: number; bytes: Buffer | null }> {
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

function tempName(prefix: string): string {
  return `${prefix}-${process.pid}-${randomBytes(8).toString('hex')}.tmp`;
}

const ignore = () => { /* best effort */ };

export class Mirror {
  readonly spoolThreshold: number;
  /** Resolves when the disk index is loaded (never rejects; a broken disk tier is disabled and reported in stats). */
  readonly ready: Promise<void>;
  private readonly memory: LRUCache<string, MemoryEntry> | null;
  private readonly memoryCapacity: number;
  private readonly pool: BytePool;
  private readonly budget: MemoryBudget;
  private readonly backend: CryptoBackend;
  private readonly diskDir: string | null;
  private readonly diskCapacity: number;
  private diskEnabled: boolean;
  private diskError: string | null = null;
  private readonly disk = new Map<string, DiskEntry>(); // oldest access first
  private diskTotal = 0;
  private readonly configuredSpoolDir: string | null;
  private spoolDirPromise: Promise<string> | null = null;
  private privateSpoolDir: string | null = null;
  private readonly spoolFiles = new Map<string, number>(); // path -> size, held by readers
  private readonly counters = { memoryHits: 0, diskHits: 0, misses: 0, corrupt: 0, memoryEvictions: 0, diskEvictions: 0, diskWriteErrors: 0 };

  constructor(options: MirrorOptions = {}) {
    const memoryBytes = options.memoryBytes ?? 256 * MiB;
    this.memoryCapacity = memoryBytes;
    this.spoolThreshold = options.spoolThreshold ?? Math.min(64 * MiB, Math.floor(memoryBytes / 4));
    this.backend = options.backend ?? nodeBackend;
    this.memory = memoryBytes > 0 && this.spoolThreshold > 0
      ? new LRUCache<string, MemoryEntry>({
        maxSize: memoryBytes,
        maxEntrySize: Math.min(memoryBytes, sizeClass(this.spoolThreshold)),
        // Pooled bytes occupy their whole size class.
        sizeCalculation: (e) => Math.max(1, e.pooled ? BytePool.capacity(e.bytes) : e.bytes.length),
        dispose: (e, _k, reason) => {
          if (reason === 'evict') this.counters.memoryEvictions++;
          e.cached = false;
          this.account(e);
          this.recycle(e);
        },
      })
      : null;
    this.budget = new MemoryBudget(options.budgetBytes ?? 2 * memoryBytes);
    this.pool = new BytePool(this.memory === null ? 0 : Math.max(0, options.poolBytes ?? Math.min(64 * MiB, Math.floor(memoryBytes / 4))));
    this.diskDir = options.diskDir ?? null;
    this.diskCapacity = options.diskBytes ?? 10 * 1024 * MiB;
    this.diskEnabled = this.diskDir !== null && this.diskCapacity > 0;
    this.configuredSpoolDir = options.spoolDir ?? (this.diskDir !== null ? join(this.diskDir, 'tmp') : null);
    this.ready = this.diskEnabled ? this.loadDisk().catch((e: unknown) => this.disableDisk(e)) : Promise.resolve();
  }

  /**
   * The verified artifact, or null on a miss. Disk hits are hashed again
   * first (small ones move into memory); a corrupt disk file is deleted and
   * counts as a miss. The caller must `release()` what it gets.
   */
  async get(artifactHash: string): Promise<StoredArtifact | null> {
    const parsed = this.parse(artifactHash);
    const hit = this.memory?.get(artifactHash);
    if (hit !== undefined) {
      this.counters.memoryHits++;
      return this.memoryArtifact(artifactHash, hit, 'memory');
    }
    await this.ready;
    const entry = this.diskEnabled ? this.disk.get(artifactHash) : undefined;
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
    return this.memory?.has(artifactHash) === true || (this.diskEnabled && this.disk.has(artifactHash));
  }

  /**
   * Stores verified bytes (at most `spoolThreshold` of them): memory tier,
   * and the disk tier when there is one (awaited; a disk failure is counted,
   * not thrown). Returns them as an artifact. `headers`: origin response
   * headers; only their kept subset (`KEPT_ORIGIN_HEADERS`) is stored.
   * The bytes are charged to the memory budget until they leave memory:
   * `reserved` bytes the caller reserved (`reserve()`) are taken over (a
   * pooled buffer's reservation always is); bytes beyond it are counted too.
   */
  async putBytes(artifactHash: string, bytes: Buffer, contentType: string, headers: Readonly<Record<string, string>> = {}, pooled = false, reserved = 0): Promise<StoredArtifact> {
    try {
      this.parse(artifactHash);
    } catch (e) {
      if (pooled) this.giveBack(bytes);
      else this.unreserve(reserved);
      throw e;
    }
    const kept = keptOriginHeaders(headers);
    // Charged from the caller's reservation (what the bytes really occupy; bytes beyond it are counted anyway: they exist).
    const charge = pooled ? BytePool.capacity(bytes) : bytes.length;
    if (pooled) reserved = charge; // `buffer()` reserved it whole
    if (charge > reserved) this.budget.force('in_flight', charge - reserved);
    else this.budget.release('in_flight', reserved - charge);
    const entry: MemoryEntry = { bytes, contentType, headers: kept, pooled, refs: 0, cached: false, charge, use: 'in_flight' };
    // Held from here on: a disk write below still reads the bytes if the entry is evicted meanwhile.
    const artifact = this.memoryArtifact(artifactHash, entry, 'memory');
    if (this.memory !== null && bytes.length <= this.spoolThreshold) {
      this.memory.set(artifactHash, entry);
      entry.cached = this.memory.peek(artifactHash) === entry;
    }
    this.account(entry);
    await this.ready;
    if (this.diskEnabled && bytes.length <= this.diskCapacity && !this.disk.has(artifactHash)) {
      let temp: string | null = null;
      try {
        const dir = await this.spoolDirectory(true);
        temp = join(dir, tempName('put'));
        await writeFile(temp, bytes, { flag: 'wx' });
        await this.adoptIntoDisk(artifactHash, temp, bytes.length, contentType, kept);
        temp = null;
      } catch {
        this.counters.diskWriteErrors++;
      } finally {
        if (temp !== null) await unlink(temp).catch(ignore);
      }
    }
    return artifact;
  }

  /**
   * A buffer of exactly `size` bytes (contents undefined) to receive a body
   * the memory tier will keep, or null when it would not keep one that large
   * (or it is too small to be worth pooling). Hand it to `putBytes(...,
   * pooled = true)` once verified, or back to `recycle` — never both, and not
   * used afterwards either way.
   */
  buffer(size: number): Buffer | null {
    if (this.memory === null || size > this.spoolThreshold || size < POOLED_MIN || sizeClass(size) > this.memoryCapacity) return null;
    // Charged to the memory budget whole (its size class) until the bytes leave memory; refused past the limit.
    if (!this.budget.reserve(sizeClass(size))) return null;
    const buf = this.pool.take(size);
    this.pool.trim(this.budget.spare); // free buffers count against the budget's spare too
    return buf;
  }

  /** Gives back an unused buffer from `buffer()` (a failed fetch), and its reservation. */
  giveBack(buf: Buffer): void {
    this.budget.release('in_flight', BytePool.capacity(buf));
    this.pool.give(buf, this.budget.spare);
  }

  /**
   * Reserves `n` bytes of the memory budget for a body received into memory
   * outside `buffer()` (chunks of unknown total length); false past the
   * limit (receive into a spool file instead; counted as refused unless
   * `optional`, a reservation the caller can do without). Hand the
   * reservation to `putBytes(..., reserved)` or back to `unreserve`.
   */
  reserve(n: number, optional = false): boolean {
    if (!this.budget.reserve(n, !optional)) return false;
    this.pool.trim(this.budget.spare); // free buffers count against the budget's spare too
    return true;
  }

  /**
   * Charges `n` bytes a response holds to send a file (its read buffer) to
   * the memory budget as `held`, if it has room; false (not counted as
   * refused: the response sends in small pieces instead) if not. Give them
   * back with `unhold`.
   */
  hold(n: number): boolean {
    if (!this.budget.reserve(n, false, 'held')) return false;
    this.pool.trim(this.budget.spare);
    return true;
  }

  /** Gives back `n` bytes charged by `hold`. */
  unhold(n: number): void {
    this.budget.release('held', n);
  }

  /** Gives back `n` reserved bytes that were not handed to `putBytes`. */
  unreserve(n: number): void {
    this.budget.release('in_flight', n);
  }

  /**
   * Takes ownership of a verified spool file (from `newSpoolPath`) of `size`
   * bytes: moves it into the disk tier when there is one and it fits, else
   * serves it as it is and deletes it after the last reader's `release()`.
   * The temp path is gone from the caller's point of view either way.
   * `headers` as for `putBytes`.
   */
  async putFile(artifactHash: string, tempPath: string, size: number, contentType: string, headers: Readonly<Record<string, string>> = {}): Promise<StoredArtifact> {
    const kept = keptOriginHeaders(headers);
    try {
      this.parse(artifactHash);
    } catch (e) {
      await unlink(tempPath).catch(ignore);
      throw e;
    }
    await this.ready;
    if (this.diskEnabled && size <= this.diskCapacity) {
      try {
        const entry = await this.adoptIntoDisk(artifactHash, tempPath, size, contentType, kept);
        return this.diskArtifact(entry, 'spool');
      } catch {
        this.counters.diskWriteErrors++;
      }
    }
    this.spoolFiles.set(tempPath, size);
    const refs = new FileRefs(() => {
      this.spoolFiles.delete(tempPath);
      unlink(tempPath).catch(ignore);
    });
    return fileArtifact(artifactHash, tempPath, size, contentType, kept, 'spool', refs);
  }

  /** A fresh path in the spool directory for the fetcher to write to (created with `wx`). */
  async newSpoolPath(): Promise<string> {
    await this.ready; // loading the disk tier empties <diskDir>/tmp
    return join(await this.spoolDirectory(false), tempName('spool'));
  }

  stats(): MirrorStats {
    let spoolBytes = 0;
    for (const s of this.spoolFiles.values()) spoolBytes += s;
    return {
      hits: { memory: this.counters.memoryHits, disk: this.counters.diskHits },
      misses: this.counters.misses,
      corrupt: this.counters.corrupt,
      evictions: { memory: this.counters.memoryEvictions, disk: this.counters.diskEvictions },
      diskWriteErrors: this.counters.diskWriteErrors,
      memory: { bytes: this.memory?.calculatedSize ?? 0, entries: this.memory?.size ?? 0, capacity: this.memoryCapacity },
      disk: { enabled: this.diskEnabled, bytes: this.diskTotal, entries: this.disk.size, capacity: this.diskCapacity, error: this.diskError },
      spool: { files: this.spoolFiles.size, bytes: spoolBytes },
      pool: this.pool.stats(),
      budget: this.budget.stats(),
    };
  }

  /** Empties the memory tier and removes the private spool directory (if the mirror made one). Disk files stay. */
  async close(): Promise<void> {
    this.memory?.clear();
    this.pool.clear();
    if (this.privateSpoolDir !== null) await rm(this.privateSpoolDir, { recursive: true, force: true }).catch(ignore);
  }

  // -------------------------------------------------------------------------

  /** A reader's handle on memory bytes; the bytes stay theirs until `release()`. */
  private memoryArtifact(artifactHash: string, entry: MemoryEntry, tier: 'memory' | 'disk' | 'spool'): StoredArtifact {
    entry.refs++;
    let released = false;
    return {
      artifactHash, contentType: entry.contentType, headers: entry.headers, size: entry.bytes.length, bytes: entry.bytes, tier,
      release: () => {
        if (released) return;
        released = true;
        entry.refs--;
        this.account(entry);
        this.recycle(entry);
      },
      retain: () => this.memoryArtifact(artifactHash, entry, tier),
    };
  }

  /** Moves an entry's charge to the use its state calls for: `tier` when cached, `held` while read, released when neither. */
  private account(entry: MemoryEntry): void {
    if (entry.use === null) return;
    const want: BudgetUse | null = entry.cached ? 'tier' : entry.refs > 0 ? 'held' : null;
    if (want === entry.use) return;
    if (want === null) this.budget.release(entry.use, entry.charge);
    else this.budget.move(entry.use, want, entry.charge);
    entry.use = want;
  }

  /** Pooled bytes that left the cache and have no reader go back to the pool (once), if the budget has room for them. */
  private recycle(entry: MemoryEntry): void {
    if (!entry.pooled || entry.cached || entry.refs > 0) return;
    entry.pooled = false;
    this.pool.give(entry.bytes, this.budget.spare);
  }

  private parse(artifactHash: string): ArtifactHash {
    const parsed = parseArtifactHash(artifactHash);
    if (typeof parsed === 'string') throw new VouchError('bad_artifact_hash', `${parsed}: ${JSON.stringify(artifactHash.slice(0, 200))}`);
    return parsed;
  }

  private dataPath(h: ArtifactHash): string {
    return join(this.diskDir!, h.algorithm, h.hex.slice(0, 2), h.hex);
  }

  private async spoolDirectory(forDisk: boolean): Promise<string> {
    if (forDisk) {
      const dir = join(this.diskDir!, 'tmp');
      await mkdir(dir, { recursive: true });
      return dir;
    }
    this.spoolDirPromise ??= (async () => {
      if (this.configuredSpoolDir !== null) {
        await mkdir(this.configuredSpoolDir, { recursive: true });
        return this.configuredSpoolDir;
      }
      this.privateSpoolDir = await mkdtemp(join(tmpdir(), 'vouch-spool-'));
      return this.privateSpoolDir;
    })();
    try {
      return await this.spoolDirPromise;
    } catch (e) {
      this.spoolDirPromise = null;
      throw new VouchError('io_error', `cannot create the spool directory: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
    }
  }

  private disableDisk(e: unknown): void {
    this.diskEnabled = false;
    this.diskError = `disk tier disabled: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
  }

  /** Rebuilds the disk index from `diskDir`, oldest access first; drops incomplete entries and leftovers in tmp. */
  private async loadDisk(): Promise<void> {
    const root = this.diskDir!;
    await mkdir(root, { recursive: true });
    const tmp = join(root, 'tmp');
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { recursive: true });
    const found: Array<{ entry: DiskEntry; at: number }> = [];
    for (const algorithm of Object.keys(HASH_ALGORITHMS) as HashAlgorithm[]) {
      const hexLength = HASH_ALGORITHMS[algorithm].hexLength;
      const algDir = join(root, algorithm);
      let shards: string[];
      try { shards = await readdir(algDir); } catch { continue; }
      for (const shard of shards) {
        if (!/^[0-9a-f]{2}$/.test(shard)) continue;
        const dir = join(algDir, shard);
        let names: string[];
        try { names = await readdir(dir); } catch { continue; }
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
          found.push({ entry: { key, path, size: meta.size, contentType: meta.contentType, headers: meta.headers, refs: 0, doomed: false, checking: null }, at: Math.max(st.atimeMs, st.mtimeMs) });
        }
      }
    }
    found.sort((a, b) => a.at - b.at);
    for (const { entry } of found) {
      this.disk.set(entry.key, entry);
      this.diskTotal += entry.size;
    }
    await this.evictDisk(null);
  }

  /** Moves a verified temp file into the disk tier (metadata first, then the data file). */
  private async adoptIntoDisk(artifactHash: string, tempPath: string, size: number, contentType: string, headers: Record<string, string>): Promise<DiskEntry> {
    const h = this.parse(artifactHash);
    const path = this.dataPath(h);
    await mkdir(join(this.diskDir!, h.algorithm, h.hex.slice(0, 2)), { recursive: true });
    const tmpDir = await this.spoolDirectory(true);
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
    let entry = this.disk.get(artifactHash);
    if (entry !== undefined) {
      // Replaced in place (same verified bytes); readers of the old inode keep it.
      this.disk.delete(artifactHash);
      this.diskTotal -= entry.size;
      entry.size = size;
      entry.contentType = contentType;
      entry.headers = headers;
    } else {
      entry = { key: artifactHash, path, size, contentType, headers, refs: 0, doomed: false, checking: null };
    }
    this.disk.set(artifactHash, entry);
    this.diskTotal += size;
    await this.evictDisk(entry);
    return entry;
  }

  /** Evicts least recently used disk entries until the tier fits (never `keep`); resolves when their files are gone. */
  private async evictDisk(keep: DiskEntry | null): Promise<void> {
    const unlinks: Array<Promise<void>> = [];
    for (const entry of this.disk.values()) {
      if (this.diskTotal <= this.diskCapacity) break;
      if (entry === keep) continue;
      this.counters.diskEvictions++;
      unlinks.push(this.dropDisk(entry));
    }
    await Promise.all(unlinks);
  }

  /** Takes an entry out of the index; its files go now, or when its last reader releases it. */
  private async dropDisk(entry: DiskEntry): Promise<void> {
    if (this.disk.get(entry.key) === entry) {
      this.disk.delete(entry.key);
      this.diskTotal -= entry.size;
    }
    entry.doomed = true;
    if (entry.refs === 0) await this.unlinkDisk(entry);
  }

  private async unlinkDisk(entry: DiskEntry): Promise<void> {
    // A newer entry may have been written to the same path since: leave it.
    if (this.disk.has(entry.key)) return;
    await Promise.all([unlink(entry.path).catch(ignore), unlink(`${entry.path}.meta`).catch(ignore)]);
  }

  /** A reference to a disk entry; counted on the entry, so eviction and purges wait for its release. */
  private diskArtifact(entry: DiskEntry, tier: 'disk' | 'spool'): StoredArtifact {
    entry.refs++;
    let released = false;
    return {
      artifactHash: entry.key, contentType: entry.contentType, headers: entry.headers, size: entry.size, path: entry.path, tier,
      release: () => {
        if (released) return;
        released = true;
        if (--entry.refs === 0 && entry.doomed) void this.unlinkDisk(entry);
      },
      retain: () => this.diskArtifact(entry, tier),
    };
  }

  /** Re-hashes a disk entry; the artifact when it is intact, null (and the files deleted) when not. */
  private async readBack(entry: DiskEntry, h: ArtifactHash): Promise<StoredArtifact | null> {
    const held = this.diskArtifact(entry, 'disk'); // nothing deletes it while it is checked
    // Read into memory only what the memory tier keeps and the budget has room for; else checked and served from the file.
    const reserved = this.memory !== null && entry.size <= this.spoolThreshold && this.budget.reserve(entry.size) ? entry.size : 0;
    const small = reserved > 0;
    entry.checking ??= (async () => {
      try {
        const r = await hashFile(entry.path, h.algorithm, this.backend, small);
        if (r.hex !== h.hex || r.size !== entry.size) return false;
        return r.bytes ?? true;
      } catch {
        return false;
      } finally {
        entry.checking = null;
      }
    })();
    const result = await entry.checking;
    if (!(result instanceof Buffer && reserved > 0)) this.unreserve(reserved);
    if (result === false) {
      if (!entry.doomed) this.counters.corrupt++;
      held.release();
      await this.dropDisk(entry);
      return null;
    }
    // Recently used: to the end of the LRU order, on disk too.
    if (this.disk.get(entry.key) === entry) {
      this.disk.delete(entry.key);
      this.disk.set(entry.key, entry);
      const now = new Date();
      utimes(entry.path, now, now).catch(ignore);
    }
    if (result instanceof Buffer && reserved > 0) {
      held.release();
      const m: MemoryEntry = { bytes: result, contentType: entry.contentType, headers: entry.headers, pooled: false, refs: 0, cached: false, charge: reserved, use: 'in_flight' };
      const artifact = this.memoryArtifact(entry.key, m, 'disk');
      this.memory!.set(entry.key, m);
      m.cached = this.memory!.peek(entry.key) === m;
      this.account(m);
      return artifact;
    }
    return held;
  }
}

/** A disk entry's metadata; `headers` is optional (older files have none) and filtered to the kept set. */
async function readMeta(path: string): Promise<{ contentType: string; size: number; headers: Record<string, string> } | null> {
  try {
    const m = JSON.parse(await readFile(path, 'utf8')) as { contentType?: unknown; size?: unknown; headers?: unknown };
    if (typeof m.contentType !== 'string' || typeof m.size !== 'number' || !Number.isSafeInteger(m.size) || m.size < 0) return null;
    return { contentType: m.contentType, size: m.size, headers: keptOriginHeaders(m.headers as Record<string, unknown> | undefined) };
  } catch {
    return null;
  }
}
