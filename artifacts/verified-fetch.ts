/**
 * Verified bytes for a signed `artifact_hash` (docs/spec/design.md §3.2,
 * §3.4): the mirror first; on a miss the origin, hashed while it streams,
 * and only on equality stored in the mirror and handed out.
 * Owns: the hash check, single flight per URL and hash (one bad origin fails
 * only its URL), waiter counts that decide cancellation, the bound on origin
 * fetches, temp files; `upstream` (a fleet's origin shield, another vouch
 * gateway) asked first, its bytes checked like the origin's.
 * Trusts: `OriginFetcher` for limits and complete bodies; `Mirror`; the
 * caller for which hash is signed.
 * Must hold: `obtain` resolves only after the bytes hashed to `artifactHash`;
 * nothing unverified enters the mirror; bodies enter memory only under a
 * budget reservation (else a spool file), so memory is bounded by
 * configuration; every temp file is removed on failure.
 */
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { VouchError } from '../chain/errors.ts';
import { hashBytes, type CryptoBackend } from '../chain/crypto-backend.ts';
import { hexDecode, hexEncode } from '../chain/encoding.ts';
import { parseArtifactHash, type ArtifactHash } from '../chain/hash-algorithms.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import type { Mirror } from './mirror.ts';
import { hashFile } from './mirror-disk.ts';
import { POOLED_MIN } from './mirror-memory.ts';
import type { StoredArtifact } from './stored-artifact.ts';
import type { OriginFetcher, OriginResponse } from './origin-fetcher.ts';
import type { HashWorkers, SharedHash } from './hash-workers.ts';

export interface VerifiedFetcherOptions {
  fetcher: Pick<OriginFetcher, 'fetch'>;
  mirror: Mirror;
  /** Distinct origin fetches at once; more wait for a slot (default 64). */
  maxConcurrent?: number;
  /** Apply the address guard to origin fetches (default false: signed URLs are the authority's). */
  guardPrivate?: boolean;
  backend?: CryptoBackend;
  /**
   * Hash workers for bodies received into pooled buffers (hashed beside the
   * receiving); without them, or when none is idle, this thread hashes.
   */
  hashWorkers?: HashWorkers | null;
  /** Base URL of a vouch gateway asked first on a miss (`mirror.upstream_gateway`); its bytes are verified here too. */
  upstream?: string | null;
}

export interface Obtained {
  /** Verified bytes; `release()` it when done reading. */
  artifact: StoredArtifact;
  source: 'memory' | 'disk' | 'origin';
  /**
   * The origin's response headers when fetched now (all of them); on mirror
   * hits, the kept subset stored with the bytes (`KEPT_ORIGIN_HEADERS`).
   */
  originHeaders: Record<string, string>;
}

export interface VerifiedFetcherStats {
  /** Artifacts being obtained now, by URL and hash (each one origin fetch at most). */
  inflight: number;
  /** Origin fetches running / waiting for a slot. */
  active: number;
  queued: number;
  originFetches: number;
  originBytes: number;
  mismatches: number;
  /** Calls that joined a fetch already in flight. */
  joined: number;
  /**
   * Bytes of large bodies (pooled, or spooled from a declared length) hashed
   * on this thread because no hash worker was idle (or one failed).
   */
  hashedInline: number;
}

const WRITE_BATCH = 1024 * 1024;
/** A body declared over the spool threshold is received into a window this large and written out window by window. */
const SPOOL_WINDOW = 2 * 1024 * 1024;
/** The window when the memory budget has no room for SPOOL_WINDOW (a fetch that spools because memory is spent takes little). */
const SMALL_WINDOW = 128 * 1024;

interface Waiter {
  resolve: (o: Obtained) => void;
  reject: (e: unknown) => void;
  done: boolean;
  detach: () => void;
}

interface Flight {
  /** The flight's key in `flights`: the artifact hash and the URL fetched. */
  key: string;
  /** The signed artifact_hash (the mirror's key). */
  hash: string;
  waiters: Set<Waiter>;
  /** Hosts a redirect hop may reach unguarded besides the URL's own (a proxy route's canonical host). */
  trustedHosts: readonly string[];
  /** Request headers for the URL's own host (a registry's accept and authorization). */
  headers: Readonly<Record<string, string>> | undefined;
  controller: AbortController;
  settled: boolean;
}

/** A counting semaphore whose waiters can give up. */
class Slots {
  active = 0;
  private readonly queue: Array<{ go: () => void }> = [];
  constructor(private readonly max: number) {}

  get queued(): number {
    return this.queue.length;
  }

  acquire(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.active < this.max) {
      this.active++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const item = {
        go: () => {
          signal.removeEventListener('abort', onAbort);
          this.active++;
          resolve();
        },
      };
      const onAbort = () => {
        const i = this.queue.indexOf(item);
        if (i >= 0) this.queue.splice(i, 1);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.queue.push(item);
    });
  }

  release(): void {
    this.active--;
    const next = this.queue.shift();
    if (next !== undefined) next.go();
  }
}

async function writeAll(fh: FileHandle, buffers: Buffer[], total: number): Promise<void> {
  const buf = buffers.length === 1 ? buffers[0]! : Buffer.concat(buffers, total);
  for (let off = 0; off < buf.length; ) {
    const { bytesWritten } = await fh.write(buf, off, buf.length - off);
    off += bytesWritten;
  }
}

function ioError(e: unknown, what: string): VouchError {
  return new VouchError('io_error', `${what}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
}

export class VerifiedFetcher {
  private readonly fetcher: Pick<OriginFetcher, 'fetch'>;
  private readonly mirror: Mirror;
  private readonly guardPrivate: boolean;
  private readonly backend: CryptoBackend;
  private readonly hashWorkers: HashWorkers | null;
  private readonly slots: Slots;
  private readonly flights = new Map<string, Flight>();
  private readonly counters = { originFetches: 0, originBytes: 0, mismatches: 0, joined: 0, hashedInline: 0, upstreamFetches: 0, upstreamFailures: 0 };
  private readonly upstream: string | null;

  constructor(options: VerifiedFetcherOptions) {
    this.fetcher = options.fetcher;
    this.mirror = options.mirror;
    this.guardPrivate = options.guardPrivate ?? false;
    this.backend = options.backend ?? nodeBackend;
    this.hashWorkers = options.hashWorkers ?? null;
    this.upstream = options.upstream ? options.upstream.replace(/\/+$/, '') : null;
    const max = options.maxConcurrent ?? 64;
    if (!Number.isInteger(max) || max < 1) throw new TypeError('verified fetcher: maxConcurrent must be a positive integer');
    this.slots = new Slots(max);
  }

  /**
   * Verified bytes of `artifactHash`, fetched from `url` on a mirror miss.
   * Rejects with `hash_mismatch` (evidence: expected, actual; nothing
   * cached), the origin fetcher's VouchError, `io_error` (spool file),
   * `bad_artifact_hash`, or — when `signal` aborts — with its reason. The
   * shared origin fetch is cancelled only when every waiting caller aborted.
   */
  async obtain(
    url: string,
    artifactHash: string,
    options: { signal?: AbortSignal; trustedHosts?: readonly string[]; headers?: Readonly<Record<string, string>> } = {},
  ): Promise<Obtained> {
    const parsed = parseArtifactHash(artifactHash);
    if (typeof parsed === 'string') throw new VouchError('bad_artifact_hash', parsed, { resource: url });
    const { signal } = options;
    if (signal?.aborted) throw signal.reason;
    // Joined per URL: the mirror shares verified bytes by hash, but an origin's failure is its URL's alone.
    const trustedHosts = options.trustedHosts ?? [];
    const key = `${artifactHash} ${url} ${trustedHosts.join(' ')}`;
    let flight = this.flights.get(key);
    if (flight === undefined) {
      const hit = await this.mirror.get(artifactHash);
      if (hit !== null) {
        if (signal?.aborted) {
          hit.release();
          throw signal.reason;
        }
        return { artifact: hit, source: hit.tier === 'memory' ? 'memory' : 'disk', originHeaders: { ...hit.headers } };
      }
      if (signal?.aborted) throw signal.reason;
      flight = this.flights.get(key); // another caller may have started it meanwhile
    }
    if (flight !== undefined) {
      this.counters.joined++;
    } else {
      flight = { key, hash: artifactHash, waiters: new Set(), trustedHosts, headers: options.headers, controller: new AbortController(), settled: false };
      this.flights.set(key, flight);
      this.run(flight, url, parsed);
    }
    return this.join(flight, signal);
  }

  /** A buffer to send a file through: `want` bytes charged to the memory budget (as held) while it has room, else `small` ones. */
  sendBuffer(want: number, small: number): { buffer: Buffer; release(): void } {
    const held = this.mirror.hold(want);
    let released = !held;
    return {
      buffer: Buffer.allocUnsafeSlow(held ? want : small),
      release: () => {
        if (released) return;
        released = true;
        this.mirror.unhold(want);
      },
    };
  }

  /** Charges `n` bytes a response sends from memory to the memory budget (as held), if it has room. */
  holdBytes(n: number): boolean {
    return this.mirror.hold(n);
  }

  /** Gives back `n` bytes charged by `holdBytes`. */
  unholdBytes(n: number): void {
    this.mirror.unhold(n);
  }

  /** Whether the mirror holds `artifactHash` (memory or disk index; not checked, not counted). */
  has(artifactHash: string): boolean {
    return this.mirror.has(artifactHash);
  }

  stats(): VerifiedFetcherStats {
    return { inflight: this.flights.size, active: this.slots.active, queued: this.slots.queued, ...this.counters };
  }

  // -------------------------------------------------------------------------

  private join(flight: Flight, signal: AbortSignal | undefined): Promise<Obtained> {
    return new Promise<Obtained>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, done: false, detach: () => {} };
      if (signal !== undefined) {
        const onAbort = () => this.leave(flight, waiter, signal.reason);
        signal.addEventListener('abort', onAbort, { once: true });
        waiter.detach = () => signal.removeEventListener('abort', onAbort);
      }
      flight.waiters.add(waiter);
    });
  }

  /** A waiter gave up; the last one to leave cancels the origin fetch. */
  private leave(flight: Flight, waiter: Waiter, reason: unknown): void {
    if (waiter.done) return;
    waiter.done = true;
    waiter.detach();
    flight.waiters.delete(waiter);
    waiter.reject(reason);
    if (flight.waiters.size === 0 && !flight.settled) {
      flight.settled = true;
      if (this.flights.get(flight.key) === flight) this.flights.delete(flight.key);
      flight.controller.abort(reason);
    }
  }

  private run(flight: Flight, url: string, h: ArtifactHash): void {
    this.work(flight, url, h).then(
      (result) => {
        // Stored in the mirror by now: later callers find it there.
        if (this.flights.get(flight.key) === flight) this.flights.delete(flight.key);
        flight.settled = true;
        for (const w of flight.waiters) {
          w.done = true;
          w.detach();
          w.resolve({ artifact: result.artifact.retain(), source: result.source, originHeaders: { ...result.originHeaders } });
        }
        flight.waiters.clear();
        result.artifact.release();
      },
      (e: unknown) => {
        if (this.flights.get(flight.key) === flight) this.flights.delete(flight.key);
        flight.settled = true;
        for (const w of flight.waiters) {
          w.done = true;
          w.detach();
          w.reject(e);
        }
        flight.waiters.clear();
      },
    );
  }

  private async work(flight: Flight, url: string, h: ArtifactHash): Promise<Obtained> {
    const signal = flight.controller.signal;
    await this.slots.acquire(signal);
    try {
      // A flight that finished just before this one started may have stored it.
      if (this.mirror.has(flight.hash)) {
        const hit = await this.mirror.get(flight.hash);
        if (hit !== null) return { artifact: hit, source: hit.tier === 'memory' ? 'memory' : 'disk', originHeaders: { ...hit.headers } };
      }
      if (this.upstream !== null) {
        // The shield's answer is verified like the origin's; anything but its verified bytes (not endorsed there yet,
        // down, refused, wrong bytes) falls back to the origin, so a shield can delay a download but never decide it.
        try {
          const got = await this.fetchVerified(url, flight.hash, h, signal, [], undefined, `${this.upstream}/v1/download?url=${encodeURIComponent(url)}`);
          this.counters.upstreamFetches++;
          return got;
        } catch {
          if (signal.aborted) throw signal.reason;
          this.counters.upstreamFailures++;
        }
      }
      return await this.fetchVerified(url, flight.hash, h, signal, flight.trustedHosts, flight.headers);
    } finally {
      this.slots.release();
    }
  }

  /**
   * One origin fetch: hash while streaming; a body of declared length that
   * the memory tier keeps goes into one pooled buffer when the memory budget
   * has room for it, else (like any declared body of 1 MiB or more the
   * memory tier does not take) into a spool file from its first byte; a
   * smaller or undeclared body into memory chunk by chunk while the budget
   * and the spool threshold allow, then a spool file.
   */
  private async fetchVerified(
    url: string,
    artifactHash: string,
    h: ArtifactHash,
    signal: AbortSignal,
    trustedHosts: readonly string[],
    headers?: Readonly<Record<string, string>>,
    from?: string,
  ): Promise<Obtained> {
    if (from === undefined) this.counters.originFetches++;
    const res = await this.fetcher.fetch(from ?? url, { signal, guardPrivate: this.guardPrivate, trustedHosts, ...(headers !== undefined ? { headers } : {}) });
    const into = res.contentLength !== null ? this.mirror.buffer(res.contentLength) : null;
    if (into !== null) return this.receivePooled(url, artifactHash, h, signal, res, into);
    const threshold = this.mirror.spoolThreshold;
    const hash = this.backend.createHash(h.algorithm);
    let size = 0;
    let chunks: Buffer[] = [];
    let spoolPath: string | null = null;
    let fh: FileHandle | null = null;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let flushed = 0;
    let reserved = 0; // budget bytes reserved for `chunks`
    let windowReserved = 0; // budget bytes reserved for the spool window
    // A body declared too large for memory goes to a spool file from its first byte; a hash worker then reads it back as it is written.
    let job: SharedHash | null = null;

    const openSpool = async () => {
      spoolPath = await this.mirror.newSpoolPath();
      try {
        fh = await open(spoolPath, 'wx', 0o600);
      } catch (e) {
        spoolPath = null;
        throw ioError(e, 'cannot create a spool file');
      }
    };
    const flush = async () => {
      if (pendingBytes === 0) return;
      const batch = pending;
      const bytes = pendingBytes;
      pending = [];
      pendingBytes = 0;
      try {
        await writeAll(fh!, batch, bytes);
      } catch (e) {
        throw ioError(e, 'cannot write the spool file');
      }
      flushed += bytes;
      job?.advance(flushed);
    };

    try {
      if (res.contentLength !== null && (res.contentLength > threshold || res.contentLength >= POOLED_MIN)) {
        await openSpool();
        job = this.hashWorkers?.startFile(h.algorithm, spoolPath!) ?? null;
        // Straight from the socket into one window, written out each time it fills; charged to the memory budget when it has room.
        const want = Math.min(SPOOL_WINDOW, res.contentLength);
        windowReserved = this.mirror.reserve(want, true) ? want : 0;
        const window = Buffer.allocUnsafeSlow(windowReserved > 0 ? want : Math.min(SMALL_WINDOW, want));
        await res.receiveWindows(window, async (filled) => {
          if (job === null) {
            hash.update(filled);
            this.counters.hashedInline += filled.length;
          }
          size += filled.length;
          this.counters.originBytes += filled.length;
          pending = [filled];
          pendingBytes = filled.length;
          await flush();
        });
      } else
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          if (job === null) hash.update(chunk);
          size += chunk.length;
          this.counters.originBytes += chunk.length;
          if (fh === null) {
            chunks.push(chunk);
            if (size <= threshold && this.mirror.reserve(chunk.length)) {
              reserved += chunk.length;
              continue;
            }
            await openSpool(); // over the threshold or the memory budget: what is held so far goes to the file
            this.mirror.unreserve(reserved);
            reserved = 0;
            pending = chunks;
            pendingBytes = size;
            chunks = [];
          } else {
            pending.push(chunk);
            pendingBytes += chunk.length;
          }
          if (pendingBytes >= WRITE_BATCH) await flush();
        }
      if (fh !== null) {
        await flush();
        const handle: FileHandle = fh;
        fh = null;
        await handle.close().catch((e: unknown) => {
          throw ioError(e, 'cannot write the spool file');
        });
      }
      // A worker that died (or could not read the file): the file is hashed here instead.
      const digest =
        job === null
          ? hash.digest()
          : await job.finish().catch(async () => {
              const r = await hashFile(spoolPath!, h.algorithm, this.backend, false);
              this.counters.hashedInline += r.size;
              return hexDecode(r.hex)!;
            });
      this.check(url, artifactHash, `${h.algorithm}:${hexEncode(digest)}`);
      if (spoolPath !== null) {
        const path: string = spoolPath;
        spoolPath = null; // the mirror owns it now, also if putFile fails
        const artifact = await this.mirror.putFile(artifactHash, path, size, res.contentType, res.headers);
        return { artifact, source: 'origin', originHeaders: res.headers };
      }
      const held = reserved;
      reserved = 0; // the mirror's now, also if putBytes fails
      const artifact = await this.mirror.putBytes(artifactHash, Buffer.concat(chunks, size), res.contentType, res.headers, false, held);
      return { artifact, source: 'origin', originHeaders: res.headers };
    } catch (e) {
      if (reserved > 0) this.mirror.unreserve(reserved);
      job?.abandon();
      res.cancel();
      if (fh !== null) await (fh as FileHandle).close().catch(() => {});
      if (spoolPath !== null) await unlink(spoolPath).catch(() => {});
      if (signal.aborted) throw signal.reason;
      throw e;
    } finally {
      if (windowReserved > 0) this.mirror.unreserve(windowReserved);
    }
  }

  /**
   * Receives a body of declared length into `into` (a pooled buffer of that
   * length), hashed by a worker as it arrives when one is idle. The buffer
   * goes to the mirror when the hash matches, else back to the pool.
   */
  private async receivePooled(url: string, artifactHash: string, h: ArtifactHash, signal: AbortSignal, res: OriginResponse, into: Buffer): Promise<Obtained> {
    const job: SharedHash | null = this.hashWorkers?.start(h.algorithm, into) ?? null;
    const hash = job === null ? this.backend.createHash(h.algorithm) : null;
    let received = 0;
    let owned = true; // `into` is still ours to give back
    try {
      // The bytes land in `into` straight from the socket; the worker hashes up to what has arrived.
      await res.receiveInto(into, (n) => {
        this.counters.originBytes += n - received;
        if (job !== null) job.advance(n);
        else {
          hash!.update(into.subarray(received, n));
          this.counters.hashedInline += n - received;
        }
        received = n;
      });
      // A worker that died leaves the bytes complete here: hashed on this thread instead.
      const digest =
        job === null
          ? hash!.digest()
          : await job.finish().catch(() => {
              this.counters.hashedInline += into.length;
              return hashBytes(this.backend, h.algorithm, into);
            });
      this.check(url, artifactHash, `${h.algorithm}:${hexEncode(digest)}`);
      owned = false; // the mirror's now, also if putBytes fails
      const artifact = await this.mirror.putBytes(artifactHash, into, res.contentType, res.headers, true);
      return { artifact, source: 'origin', originHeaders: res.headers };
    } catch (e) {
      job?.abandon();
      res.cancel();
      if (owned) this.mirror.giveBack(into);
      if (signal.aborted) throw signal.reason;
      throw e;
    }
  }

  /** Throws `hash_mismatch` (with the evidence) unless `actual` is the signed hash. */
  private check(url: string, artifactHash: string, actual: string): void {
    if (actual === artifactHash) return;
    this.counters.mismatches++;
    throw new VouchError('hash_mismatch', `${url}: the origin's bytes hash to ${actual}, not to the signed ${artifactHash}`, {
      resource: url,
      evidence: { expected: artifactHash, actual },
    });
  }
}
