/**
 * The metadata cache of ecosystem routes (packuments, simple pages, version
 * lists), so a package manager keeps installing endorsed packages while its
 * registry is down: fresh for `metadata_ttl`, then served stale for up to
 * `metadata_max_stale` while the origin fails. Concurrent misses share one
 * request; each body has a serial, and answers derived from it (`derive`)
 * are kept under it, so a body is parsed once.
 * Owns: the entries (MAX_CACHE_BYTES), derived answers (MAX_DERIVED_BYTES),
 * single flight, the fresh / stale decision.
 * Trusts: `load` for bounded bodies and VouchErrors.
 * Must hold: only 200 and 404/410 answers are kept; a failure never replaces
 * a kept answer; memory stays under the bounds.
 */
import { LRUCache } from 'lru-cache';
import { VouchError } from '../../chain/errors.ts';
import type { MetadataResponse } from './ecosystem.ts';

/** Bytes of origin metadata kept across all ecosystem routes. */
export const MAX_CACHE_BYTES = 64 * 1024 * 1024;
/** Bytes of answers derived from origin metadata (rendered pages, refusals) kept across all ecosystem routes. */
export const MAX_DERIVED_BYTES = 64 * 1024 * 1024;

export interface OriginAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

interface Entry extends OriginAnswer {
  /** Epoch ms the origin answered. */
  at: number;
  /** The body's serial (kept by a reload with the same status, headers and body). */
  id: number;
}

/** A value derived from an origin body, and what it occupies. */
export interface Derived<T> {
  value: T;
  bytes: number;
}

/** Whether an origin failure lets a stale entry be served (not: a definite answer such as 404). */
function originFailed(status: number): boolean {
  return status >= 500;
}

export class MetadataCache {
  private readonly entries = new LRUCache<string, Entry>({
    maxSize: MAX_CACHE_BYTES,
    sizeCalculation: (e, k) => Math.max(1, e.body.length + k.length + 256),
  });
  private readonly flights = new Map<string, Promise<Entry>>();
  private readonly derived = new LRUCache<string, Derived<unknown>>({
    maxSize: MAX_DERIVED_BYTES,
    sizeCalculation: (d, k) => Math.max(1, d.bytes + k.length + 64),
  });
  private readonly deriving = new Map<string, Promise<Derived<unknown>>>();
  private serial = 0;

  constructor(private readonly now: () => number = Date.now) {}

  /**
   * The answer for `key`: the kept one while fresh (`ttlMs`), else `load()`'s;
   * when `load` fails (rejects, or answers 5xx) and a kept answer is younger
   * than `ttlMs + maxStaleMs`, that one, marked stale.
   * @throws what `load` threw, or VouchError origin_error for a 5xx, when nothing usable is kept.
   */
  async get(key: string, ttlMs: number, maxStaleMs: number, load: () => Promise<OriginAnswer>): Promise<MetadataResponse> {
    const kept = this.entries.get(key);
    const now = this.now();
    if (kept !== undefined && now - kept.at < ttlMs) return this.response(kept, false);
    let flight = this.flights.get(key);
    if (flight === undefined) {
      flight = this.load(key, load);
      this.flights.set(key, flight);
      flight.then(
        () => this.flights.delete(key),
        () => this.flights.delete(key),
      );
    }
    try {
      return this.response(await flight, false);
    } catch (e) {
      const usable = kept !== undefined && this.now() - kept.at < ttlMs + maxStaleMs;
      if (usable) return this.response(kept, true);
      throw e;
    }
  }

  /**
   * The value `make` derives from the origin body `id` under `key`: made
   * once and kept (bounded, least recently used first out) while that body
   * is, so every request that needs the same thing shares it.
   */
  derive<T>(id: number, key: string, make: () => Derived<T>): T {
    const k = `${id}\u0000${key}`;
    const kept = this.derived.get(k);
    if (kept !== undefined) return kept.value as T;
    const d = make();
    this.derived.set(k, d);
    return d.value;
  }

  /** As `derive`, for a value made asynchronously: concurrent callers of one key share one `make`. */
  async deriveAsync<T>(id: number, key: string, make: () => Promise<Derived<T>>): Promise<T> {
    const k = `${id}\u0000${key}`;
    const kept = this.derived.get(k);
    if (kept !== undefined) return kept.value as T;
    let flight = this.deriving.get(k) as Promise<Derived<T>> | undefined;
    if (flight === undefined) {
      flight = make().then((d) => {
        this.derived.set(k, d);
        return d;
      });
      this.deriving.set(k, flight);
      const drop = () => this.deriving.delete(k);
      flight.then(drop, drop);
    }
    return (await flight).value;
  }

  /** Whether the value derived from body `id` under `key` is kept now. */
  hasDerived(id: number, key: string): boolean {
    return this.derived.has(`${id}\u0000${key}`);
  }

  /** Entries and bytes held (for tests and metrics). */
  stats(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.entries.calculatedSize };
  }

  private async load(key: string, load: () => Promise<OriginAnswer>): Promise<Entry> {
    const a = await load();
    if (originFailed(a.status)) {
      throw new VouchError('origin_error', `the origin answered ${a.status}`);
    }
    const before = this.entries.peek(key);
    const same =
      before !== undefined && before.status === a.status && before.body.equals(a.body) && JSON.stringify(before.headers) === JSON.stringify(a.headers);
    const entry: Entry = same ? { ...before, at: this.now() } : { ...a, at: this.now(), id: ++this.serial };
    if (a.status === 200 || a.status === 404 || a.status === 410) this.entries.set(key, entry);
    return entry;
  }

  private response(e: Entry, stale: boolean): MetadataResponse {
    return { id: e.id, status: e.status, headers: e.headers, body: e.body, age: Math.max(0, Math.round((this.now() - e.at) / 1000)), stale };
  }
}
