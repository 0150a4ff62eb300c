/**
 * fetch-limits: every bound on what a git remote may make vouch do, in one
 * place (docs/spec/http.md "Limits", SECURITY.md "hostile remote"). Read by the pkt-line
 * reader, the transport, the upload-pack conversation, the pack indexer and
 * the clone's bounding proxy (./git-fetch-proxy.ts: not the per-object ones);
 * test/hostile/hostile-remote.test.ts drives a remote past each of them.
 *
 * Owns: the numbers. Trusts: nothing. Must hold: each bound is checked as
 * the bytes arrive (never after buffering past it), and passing one fails
 * the clone or fetch with `io_error`, leaving no file behind.
 */

/**
 * What a remote may send in one clone or fetch, so that a hostile or broken
 * git server costs bounded memory, disk, CPU and time (docs/spec/http.md "Limits",
 * SECURITY.md). The pack streams to a temporary file and is indexed as it
 * arrives (./git-pack-index.ts): a fetch holds in memory one object's zlib
 * bytes (at most twice its size plus 1 MiB), a 32 MiB cache of resolved
 * objects and ~55 bytes per object (`objects`: at most ~110 MiB), and on
 * disk at most `packBytes`. A chain's pack takes ~420-800 bytes per block
 * (50,000 blocks: 20 MiB; 1,000,000 blocks as vouch packs them: 796 MB), so
 * an honest remote stays inside them up to ~2,000,000 blocks in one clone.
 * Past any of them the clone or fetch fails with `io_error`; the temporary
 * file is removed and nothing is named.
 */
export const FETCH_LIMITS = Object.freeze({
  /** Largest pkt-line, its 4-byte length included (git's LARGE_PACKET_MAX). */
  pktLineBytes: 65520,
  /** The ref advertisement (`info/refs`): most bytes, most pkt-lines (refs), longest it may take. */
  advertisementBytes: 16 << 20,
  refs: 100_000,
  advertisementMs: 20_000,
  /** One upload-pack answer: most bytes (FetchOptions.maxBytes), pkt-lines, `shallow`/`unshallow` lines. */
  packBytes: 2 * 2 ** 30,
  resultPktLines: 1_000_000,
  shallowLines: 1000,
  /** Delta bases a pack may name that are neither in it nor here (an honest thin pack: none). */
  missingBases: 1000,
  /** Most objects in a pack; the largest object, inflated (a block file is at most 16 MiB, a tree ~41 KiB). */
  objects: 2_000_000,
  objectBytes: 32 << 20,
  /** Deepest delta chain (git's own maximum). */
  deltaDepth: 4095,
  /** Bytes a pack may make the reader inflate or rebuild from deltas: 1 GiB plus 16 per pack byte (an honest pack needs ~5). */
  resolveBase: 1 << 30,
  resolvePerPackByte: 16,
  /**
   * Each HTTP exchange in all (FetchOptions.timeoutMs), and the longest silence (FetchOptions.stallMs);
   * the pack's exchange gets `packMsPerMiB` more for each MiB received (the indexing runs as it arrives:
   * a 1,000,000-block clone's 710 MB take ~1-2 min here; a remote must average 1 MiB/s past the first 120 s).
   */
  exchangeMs: 120_000,
  packMsPerMiB: 1000,
  stallMs: 30_000,
});
/** Largest object accepted from a remote (a block file is a few KiB). */
export const MAX_OBJECT_BYTES = FETCH_LIMITS.objectBytes;
/** What a cached object costs beyond its bytes (map entry, buffer object): a pack of empty objects fills the cache too. */
export const CACHE_ENTRY_COST = 256;
