/**
 * The shapes shared by the lockfile readers (npm.ts, pip.ts, go.ts) and the
 * command that endorses what they read (tools/commands/endorse-lockfile.ts).
 *
 * Owns: nothing but types. Must hold: a `Pinned` is complete before any
 * byte is fetched: its name, semver and licence are already checked.
 */
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import type { DigestName } from './digests.ts';

/** One artifact to fetch, check against the lockfile, and endorse. */
export interface Pinned {
  /** How the lockfile names it, for messages: `leftpad@1.0.0`, `requests==2.31`, `golang.org/x/mod v0.14.0/go.mod`. */
  label: string;
  /** The canonical URL: fetched through the origin map, endorsed as is. */
  url: string;
  /** The endorsement's unit name (chain/unit-names.ts). */
  name: string;
  semver: string;
  license: string;
  comment: string;
  /** The algorithm of the endorsed artifact_hash. */
  endorseAlgorithm: HashAlgorithm;
  check: Check;
  /**
   * What the lockfile claims of the bytes, as POST /v1/submit's `expect` takes it (any one matches):
   * when absent, every `<alg>:<hex>` of a digest check, or the `h1:` of a Go check.
   */
  claims?: string[];
}

export type Check =
  | {
      kind: 'digest';
      /** Accepted digests (lowercase hex) per algorithm: the bytes match when any one equals. */
      want: Partial<Record<DigestName, string[]>>;
      /** A mismatch fails the run (true), or only drops the file (false: a pip file the index gave no hash for). */
      strict: boolean;
      /** The failure line for the digests that were computed. */
      mismatch(got: ReadonlyMap<DigestName, string>): string;
    }
  | { kind: 'go-zip' | 'go-mod'; h1: string; module: string; version: string };

/** The outcome of fetching one `Pinned`. */
export interface Fetched {
  pinned: Pinned;
  /** Digests of the bytes under every algorithm asked for. */
  digests: ReadonlyMap<DigestName, string>;
  bytes: number;
  /** The bytes satisfy the check (false only for a non-strict digest check). */
  matched: boolean;
}

/** Why lockfile entries were not endorsed, counted by reason. */
export type SkipCounts = Record<string, number>;

export interface Options {
  /** `--license`: the licence of entries that name none. */
  license: string | undefined;
  licenseUnchecked: boolean;
  comment: string | undefined;
}
