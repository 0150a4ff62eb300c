/**
 * The one error type of vouch, and the one catalogue of its codes.
 * Owns: every stable error code, its kind and meaning. It knows no
 * transport: gateway/http/error-status.ts maps codes to HTTP statuses and
 * tools/exit-codes.ts to exit statuses, both total over `ErrorCode`.
 * Kinds: `integrity` (the chain or an artifact is not what was signed,
 * docs/spec/design.md §1.7; logged with evidence); `request` (the caller
 * asked for something wrong or absent); `environment` (files, keys, git,
 * network); `answer` (`vouch get` refuses what a gateway answered; never a
 * gateway status).
 * Must hold: codes are never renamed (clients and auditors match on them).
 */

export type IntegrityCode =
  | 'malformed'
  | 'index_gap'
  | 'prev_hash_mismatch'
  | 'record_hash_mismatch'
  | 'weak_key'
  | 'untrusted_authority'
  | 'signer_mismatch'
  | 'bad_signature'
  | 'retired_key'
  | 'bad_key_event'
  | 'time_regression'
  | 'bad_artifact_hash'
  | 'checkpoint_mismatch'
  | 'history_rewritten'
  | 'hash_mismatch';

export type RequestCode =
  | 'bad_request'
  | 'unauthorized'
  | 'not_found'
  | 'method_not_allowed'
  | 'not_acceptable'
  | 'semver_conflict'
  | 'too_large'
  | 'unsupported_media_type'
  | 'revoked'
  | 'already_revoked'
  | 'bad_statement'
  | 'stale_statement'
  | 'key_unavailable'
  | 'usage';

export type EnvironmentCode =
  | 'origin_error'
  | 'origin_timeout'
  | 'not_ready'
  | 'behind'
  | 'internal_error'
  | 'not_a_chain'
  | 'chain_exists'
  | 'key_error'
  | 'io_error';

export type AnswerCode =
  | 'bad_answer'
  | 'no_proof'
  | 'bad_proof'
  | 'bad_checkpoint'
  | 'bad_state'
  | 'stale_checkpoint'
  | 'security_error'
  | 'gateways_disagree'
  | 'policy'
  | 'quorum'
  | 'void_block'
  | 'index_mismatch'
  | 'key_walk_limit';

export type ErrorCode = IntegrityCode | RequestCode | EnvironmentCode | AnswerCode;

export type ErrorKind = 'integrity' | 'request' | 'environment' | 'answer';

interface CatalogueEntry {
  kind: ErrorKind;
  /** What the code means, for docs and default messages. */
  summary: string;
}

const integrity = (summary: string): CatalogueEntry => ({ kind: 'integrity', summary });
const request = (summary: string): CatalogueEntry => ({ kind: 'request', summary });
const environment = (summary: string): CatalogueEntry => ({ kind: 'environment', summary });
const answer = (summary: string): CatalogueEntry => ({ kind: 'answer', summary });

export const ERROR_CATALOGUE: Readonly<Record<ErrorCode, CatalogueEntry>> = {
  malformed: integrity('a block or checkpoint does not have the chain format'),
  index_gap: integrity('a block index differs from its position in the chain'),
  prev_hash_mismatch: integrity('prev_hash does not name the previous block'),
  record_hash_mismatch: integrity('record_hash does not match the block content'),
  weak_key: integrity('the authority public key is not a full-order ed25519 key'),
  untrusted_authority: integrity('the authority key differs from the pinned key'),
  signer_mismatch: integrity('the block signer is not the authority in force'),
  bad_signature: integrity('the signature does not verify with the authority key'),
  retired_key: integrity('the block is signed by an online key retired earlier (it signs nothing after its retirement)'),
  bad_key_event: integrity("a key block's statement is not valid for the chain's keys: threshold, root, sequence or key (docs/spec/key-events.md)"),
  time_regression: integrity('posted is earlier than the previous block'),
  bad_artifact_hash: integrity('artifact_hash is not <algorithm>:<hex> of a known algorithm'),
  checkpoint_mismatch: integrity('the checkpoint does not sign this chain head'),
  history_rewritten: integrity('the remote does not extend the last verified head'),
  hash_mismatch: integrity('the artifact bytes hash differently from what was signed'),

  bad_request: request('missing or invalid parameters'),
  unauthorized: request('missing or wrong credentials'),
  not_found: request('no provenance block is on file'),
  method_not_allowed: request('method not allowed on this path'),
  not_acceptable: request('the Accept header rules out JSON'),
  semver_conflict: request('this URL and semver are signed with different bytes'),
  too_large: request('request body or artifact too large'),
  unsupported_media_type: request('request body is not JSON'),
  revoked: request('the selected version is revoked'),
  already_revoked: request('the block is already revoked'),
  bad_statement: request('a key statement cannot be applied: too few signatures, a key outside the root, a holder twice, a weak or retired key, a bad index'),
  stale_statement: request('a key statement was already applied or superseded (its sequence is used)'),
  key_unavailable: request('the authority does not hold the private key the statement puts in force (authority.next_key_file)'),
  usage: request('bad command line'),

  origin_error: environment('the origin failed or sent a bad response'),
  origin_timeout: environment('the origin was too slow'),
  not_ready: environment('the chain is not loaded yet'),
  behind: environment('this mirror holds fewer blocks than the request asked for (Vouch-Min-Tree-Size) and did not catch up in time'),
  internal_error: environment('internal error'),
  not_a_chain: environment('the directory is not a vouch chain repository'),
  chain_exists: environment('a chain already exists there'),
  key_error: environment('the key file is missing, unreadable or insecure'),
  io_error: environment('a file could not be read or written'),

  bad_answer: answer(
    "a gateway's answer is malformed: not the protocol's status, type, shape or length (truncated, oversized, a redirect, JSON of the wrong shape, a header twice)",
  ),
  no_proof: answer('a gateway sent no inclusion proof with its block'),
  bad_proof: answer("a gateway's inclusion or consistency proof is malformed or does not verify"),
  bad_checkpoint: answer('a checkpoint note is not signed by the pinned key under the expected origin'),
  bad_state: answer("the state file's checkpoint does not verify with the pinned key"),
  stale_checkpoint: answer('a checkpoint older than the newest one seen for the log'),
  security_error: answer('two signed checkpoints of the log that cannot both be true (a fork or rewritten history)'),
  gateways_disagree: answer('gateways select different blocks that their trees do not explain'),
  policy: answer("the policy names no log with the pinned key under the checkpoint's origin"),
  quorum: answer('the checkpoint lacks the witness quorum of the policy'),
  index_mismatch: answer("the log's completeness index (docs/spec/index.md) contradicts the answer: an older block, a false 404 or a hidden revocation"),
  void_block: answer('the block is void: signed by a compromised online key after its last good block (docs/spec/key-events.md)'),
  key_walk_limit: answer("more key events since the last verified than a client walks in one update (32): pin the log's current root or key afresh"),
};

export interface VouchErrorOptions {
  /** Block position the failure concerns (verification); null = the checkpoint. */
  index?: number | null;
  /** The artifact URL or path the failure concerns. */
  resource?: string;
  /** Evidence for auditors (expected/actual hashes, heads...). Never secrets. */
  evidence?: Record<string, unknown>;
  cause?: unknown;
}

export class VouchError extends Error {
  readonly code: ErrorCode;
  readonly index: number | null | undefined;
  readonly resource: string | undefined;
  readonly evidence: Record<string, unknown> | undefined;

  constructor(code: ErrorCode, message?: string, options: VouchErrorOptions = {}) {
    super(message ?? ERROR_CATALOGUE[code].summary, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'VouchError';
    this.code = code;
    this.index = options.index;
    this.resource = options.resource;
    this.evidence = options.evidence;
  }

  get kind(): ErrorKind {
    return ERROR_CATALOGUE[this.code].kind;
  }
}

export function isVouchError(e: unknown): e is VouchError {
  return e instanceof VouchError;
}
