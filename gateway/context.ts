/**
 * What the request handlers share: configuration, the verified chain state
 * (null until loaded), the artifact source, the submitter (authority mode
 * only), the hashed submit token, the clock and the logger.
 */
import type { Config } from './config.ts';
import type { ChainState } from './chain-state.ts';
import type { ArtifactSource } from './download.ts';
import type { Logger } from './log.ts';
import type { PushReport, SyncReport } from './health.ts';

export interface SubmitHandler {
  submit(body: unknown): Promise<{ httpStatus: 200 | 201; body: Record<string, unknown> }>;
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
  /** Authority with a remote: the pusher's report. */
  pushReport?: (() => PushReport) | null;
}
