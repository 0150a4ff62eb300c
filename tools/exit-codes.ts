/**
 * The `vouch` exit status of every error code: the one place the command
 * line decides one. `chain/errors.ts` owns the codes and knows nothing of
 * shells; this map is total over `ErrorCode`, so adding a code does not
 * type-check until it has an exit status here.
 *
 * 1 = the chain or an artifact is not what was signed, or the question has a
 * definite "no" (a revoked version, a semver signed with other bytes), or
 * `vouch get` refuses a gateway's answer (every `answer` code);
 * 2 = the command could not do its job (bad usage, files, keys, git, network).
 * Anything that is not a `VouchError` is 2.
 */
import type { ErrorCode } from '../chain/errors.ts';

export type ExitCode = 1 | 2;

export const EXIT_CODE: Readonly<Record<ErrorCode, ExitCode>> = {
  // integrity
  malformed: 1,
  index_gap: 1,
  prev_hash_mismatch: 1,
  record_hash_mismatch: 1,
  weak_key: 1,
  untrusted_authority: 1,
  signer_mismatch: 1,
  bad_signature: 1,
  retired_key: 1,
  bad_key_event: 1,
  time_regression: 1,
  bad_artifact_hash: 1,
  checkpoint_mismatch: 1,
  history_rewritten: 1,
  hash_mismatch: 1,

  // request
  bad_request: 2,
  unauthorized: 2,
  not_found: 2,
  method_not_allowed: 2,
  not_acceptable: 2,
  semver_conflict: 1,
  too_large: 2,
  unsupported_media_type: 2,
  revoked: 1,
  already_revoked: 1,
  bad_statement: 1,
  stale_statement: 1,
  key_unavailable: 1,
  usage: 2,

  // environment
  origin_error: 2,
  origin_timeout: 2,
  not_ready: 2,
  behind: 2,
  internal_error: 2,
  not_a_chain: 2,
  chain_exists: 2,
  key_error: 2,
  io_error: 2,

  // answer (vouch get)
  bad_answer: 1,
  no_proof: 1,
  bad_proof: 1,
  bad_checkpoint: 1,
  bad_state: 1,
  stale_checkpoint: 1,
  security_error: 1,
  gateways_disagree: 1,
  policy: 1,
  quorum: 1,
  void_block: 1,
  index_mismatch: 1,
  key_walk_limit: 1,
};
