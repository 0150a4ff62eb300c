/**
 * `keys` of `GET /v1/authority` (docs/spec/key-events.md): the verified chain's
 * key state and the note verifier key of each online key a checkpoint note
 * is signed with now: the key in force first, then the previous key while a
 * rollover lasts.
 *
 * Trusts: the chain state's verified key state and its served note.
 * Must hold: the rollover key is named only when the served note carries a
 * valid signature by it and the last key event that changed the online key
 * was a routine one (a compromised key never co-signs); no pass over the
 * chain (one block read, one signature checked per new note).
 */
import { base64Decode } from '../../chain/encoding.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import type { GatewayContext } from '../context.ts';
import { noteVerifierKey } from './transparency.ts';

type State = NonNullable<GatewayContext['state']>;

/** The last answer of `rolloverKey`, by the note text it was found in. */
let lastRollover: { text: string; since: number; key: string | null } | null = null;

/** The previous online key co-signing the served note (a rollover), or null. */
function rolloverKey(state: State): string | null {
  const keys = state.keys;
  const text = state.note?.text ?? null;
  const previous = keys.retired[keys.retired.length - 1];
  if (text === null || previous === undefined || keys.online.since === 0) return null;
  if (lastRollover !== null && lastRollover.text === text && lastRollover.since === keys.online.since) return lastRollover.key;
  let key: string | null = null;
  const action = state.index.block(keys.online.since)?.payload.statement?.action;
  if (action !== undefined && action !== 'compromise' && !keys.compromised.includes(previous)) {
    try {
      openCheckpoint(nodeBackend, text, { publicKey: base64Decode(previous)! });
      key = previous;
    } catch {
      key = null; // the note carries no signature by it: the rollover is over
    }
  }
  lastRollover = { text, since: keys.online.since, key };
  return key;
}

/** The `keys` member of `/v1/authority`. */
export function authorityKeysJson(ctx: GatewayContext, state: State): Record<string, unknown> {
  const keys = state.keys;
  const online = noteVerifierKey(ctx, state);
  const previous = rolloverKey(state);
  const rollover = previous === null ? null : { public_key: previous, verifier_key: noteVerifierKey(ctx, state, previous) };
  return {
    sequence: keys.sequence,
    root: keys.root === null ? null : { version: keys.root.version, threshold: keys.root.threshold, keys: [...keys.root.keys] },
    online: { signer: keys.online.signer, public_key: keys.online.publicKey, since: keys.online.since, verifier_key: online },
    retired: [...keys.retired],
    compromised: [...keys.compromised],
    voids: keys.voids.map(([a, b]) => [a, b]),
    rollover,
    verifier_keys: [online, rollover?.verifier_key ?? null].filter((k): k is string => k !== null),
  };
}
