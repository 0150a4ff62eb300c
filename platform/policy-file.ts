/**
 * A C2SP tlog-policy file read from disk: the gateway's
 * `authority.policy_file` and `vouch get --policy` read it here, so both say
 * the same of a file they cannot use.
 *
 * Owns: how a policy file's failures read.
 * Trusts: chain/tlog-policy.ts for the format and its line-numbered errors.
 * Must hold: an unreadable file is `io_error` and a malformed one `usage`,
 * each one line naming `what` (where the path was given) and the path; a
 * malformed one also the policy's first failing line. Never the file's text
 * beyond what the parser quotes of that line.
 */
import { readFileSync } from 'node:fs';
import { VouchError } from '../chain/errors.ts';
import type { CryptoBackend } from '../chain/crypto-backend.ts';
import { parsePolicy, type Policy } from '../chain/tlog-policy.ts';

/** Reads and parses the policy at `path`; `what` names where the path came from (`config: authority.policy_file`, `--policy`). */
export function readPolicyFile(backend: CryptoBackend, path: string, what: string): Policy {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new VouchError('io_error', `${what} ${path}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  try {
    return parsePolicy(backend, text);
  } catch (e) {
    throw new VouchError('usage', `${what} ${path}: ${(e as Error).message.split('\n')[0]}`);
  }
}
