/**
 * What the request handlers share: configuration, the verified chain state
 * (null until loaded), the artifact source, the submitter (authority mode
 * only), the hashed submit token, the clock and the logger, the witness and
 * the authority's cosigner when configured — and the shapes
 * of what they are handed (artifact source, sync and push reports), defined
 * here so that handlers import this module and it imports none of them.
 */
import type { Config } from './config.ts';
import type { ChainState } from './chain/verified-state.ts';
import type { Logger } from './observability/logger.ts';
import type { Witness } from './transparency/witness.ts';
import type { Cosigner } from './transparency/cosigner.ts';
import type { WholePackStats } from './chain/whole-packs.ts';

export interface SubmitHandler {
  submit(
    body: unknown,
    onProgress?: (p: { done: number; total: number; url: string }) => void,
  ): Promise<{ httpStatus: 200 | 201; body: Record<string, unknown> }>;
  /** POST /v1/revoke: one revoke block through the same writer. */
  revoke(body: unknown): Promise<{ httpStatus: 200 | 201; body: Record<string, unknown> }>;
  /** POST /v1/root: one key statement (docs/spec/key-events.md) through the same writer. */
  statement(body: unknown): Promise<{ httpStatus: 200 | 201; body: Record<string, unknown> }>;
}

export interface GatewayContext {
  config: Config;
  state: ChainState | null;
  artifacts: ArtifactSource;
  submitter: SubmitHandler | null;
  /** sha256 of the submit token (compared in constant time), null when submit is off. */
  submitTokenHash: Buffer | null;
  vibecode: { spec: string; skills: string[] };
  today(): string;
  log: Logger;
  /** Epoch ms of the process start (for /healthz). */
  startedAt: number;
  /** Mirror mode: the sync loop's report. */
  syncReport?: (() => SyncReport) | null;
  /** Mirror mode: the sync loop itself, for the answer headers, Vouch-Min-Tree-Size and POST /v1/sync. */
  mirrorSync?: MirrorSyncControl | null;
  /** Mirror with chain.sync_token_file: sha256 of the POST /v1/sync token. */
  syncTokenHash?: Buffer | null;
  /** Authority with authority.notify: the sync hints sent and failed. */
  syncNotifyStats?: (() => { sent: number; failed: number }) | null;
  /** Authority with a remote: the pusher's report. */
  pushReport?: (() => PushReport) | null;
  /** A `witness` section: the tlog-witness behind `POST /add-checkpoint`. */
  witness?: Witness | null;
  /** Authority with witnesses: the cosignatures gathered for the committed checkpoint. */
  cosigner?: Cosigner | null;
  /** Rewrites of a chain git packed with every object whole (gateway/chain/whole-packs.ts). */
  wholePacks?: WholePackStats | null;
}

export interface StoredArtifactLike {
  contentType: string;
  size: number;
  bytes?: Buffer;
  path?: string;
  release(): void;
}

/** Where verified bytes come from (the mirror, else the origin). */
export interface ArtifactSource {
  /** `headers`: sent to the URL's own host only (a registry's accept and authorization). */
  obtain(
    url: string,
    artifactHash: string,
    opts: { signal?: AbortSignal; trustedHosts?: readonly string[]; headers?: Readonly<Record<string, string>> },
  ): Promise<{
    artifact: StoredArtifactLike;
    source: string;
    originHeaders: Record<string, string>;
  }>;
  /**
   * A buffer to read a file artifact into for sending: `want` bytes when the
   * memory budget has room for them (charged until `release`), else `small`.
   * Absent: `small`.
   */
  sendBuffer?(want: number, small: number): { buffer: Buffer; release(): void };
  /**
   * Charges `n` bytes a response sends from memory (a metadata answer) to the
   * memory budget as held, if it has room; false if not. Absent: not charged.
   */
  holdBytes?(n: number): boolean;
  /** Gives back `n` bytes charged by `holdBytes`. */
  unholdBytes?(n: number): void;
  /** Whether the mirror holds `artifactHash` (not checked, not counted). Absent: unknown (false). */
  has?(artifactHash: string): boolean;
}

/** What the request path may ask of a mirror's sync loop (gateway/chain/mirror-sync.ts ChainSync). */
export interface MirrorSyncControl {
  /** Seconds since the last successful sync (since start when none). */
  ageSeconds(): number;
  /** A sync now (shared with one in flight); resolves when it is over, whatever its outcome. */
  syncNow(): Promise<unknown>;
  /** A sync hint: counted, `size` kept as the remote's known size, and a sync run now (asking for `head` first when given). */
  hint(size: number | null, head?: string | null): Promise<unknown>;
}

/** What a mirror's sync loop reports (snake_case: it is served as is). */
export interface SyncReport {
  remote: string;
  last_success: string | null;
  last_attempt: string | null;
  last_error: { code: string; message: string } | null;
  consecutive_failures: number;
  stale_seconds: number | null;
  remote_head: string | null;
  /** Blocks verified and served here. */
  local_size: number;
  /** Blocks the remote holds (last fetch or sync hint) beyond local_size; null: not known yet. */
  behind_blocks: number | null;
  /** Sync hints received (POST /v1/sync). */
  notifications: number;
  /** Epoch ms of the next attempt, as ISO (null: none scheduled, e.g. syncing now). */
  next_attempt: string | null;
}

/** What the authority's pusher reports. */
export interface PushReport {
  remote: string;
  remote_head: string | null;
  backlog: number;
  last_push: string | null;
  last_error: { code: string; message: string } | null;
  consecutive_failures: number;
}
