/**
 * The HTTP status of every error code: the one place the gateway decides a
 * status (docs/spec/design.md §3.1). `chain/errors.ts` owns the codes and knows nothing of
 * transports; this map is total over `ErrorCode`, so adding a code does not
 * type-check until it has a status here.
 *
 * Must hold: the statuses of client-visible codes match README's status
 * table (test/unit/gateway-errors.test.ts keeps them in step); server-side codes
 * (files, keys, a broken chain) are 500, as `publicCode` reports them as
 * `internal_error`.
 */
import type { ErrorCode } from '../../chain/errors.ts';

export const HTTP_STATUS: Readonly<Record<ErrorCode, number>> = {
  // integrity: the chain is broken (500), or the artifact bytes are not what was signed (409)
  malformed: 500,
  index_gap: 500,
  prev_hash_mismatch: 500,
  record_hash_mismatch: 500,
  weak_key: 500,
  untrusted_authority: 500,
  signer_mismatch: 500,
  bad_signature: 500,
  retired_key: 500,
  bad_key_event: 500,
  time_regression: 500,
  bad_artifact_hash: 500,
  checkpoint_mismatch: 500,
  history_rewritten: 500,
  hash_mismatch: 409,

  // request
  bad_request: 400,
  unauthorized: 401,
  not_found: 404,
  method_not_allowed: 405,
  not_acceptable: 406,
  semver_conflict: 409,
  too_large: 413,
  unsupported_media_type: 415,
  revoked: 410,
  already_revoked: 409,
  bad_statement: 400,
  stale_statement: 409,
  key_unavailable: 409,
  usage: 400,

  // environment
  origin_error: 502,
  origin_timeout: 504,
  behind: 503,
  not_ready: 503,
  internal_error: 500,
  not_a_chain: 500,
  chain_exists: 500,
  key_error: 500,
  io_error: 500,

  // answer: vouch get's refusals of a gateway's answer; never a gateway's own status
  bad_answer: 500,
  no_proof: 500,
  bad_proof: 500,
  bad_checkpoint: 500,
  bad_state: 500,
  stale_checkpoint: 500,
  security_error: 500,
  gateways_disagree: 500,
  policy: 500,
  quorum: 500,
  void_block: 500,
  index_mismatch: 500,
  key_walk_limit: 500,
};
