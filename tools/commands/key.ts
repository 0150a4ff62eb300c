/**
 * `vouch key rotate` and `vouch key compromise`: statement files for the
 * root holders to sign (docs/spec/key-events.md): a routine rotation of the
 * online key, or the declaration that the online key in force is
 * compromised after block N (its later blocks void) with a new key taking
 * over. Drafted from the chain verified whole (or a running authority's
 * GET /v1/keys); what applyKeyEvent would
 * refuse without signatures is refused at once and no file is written.
 */
import { UsageError, emit, type Command } from '../command.ts';
import { compromiseStatement, keyStatement, type OnlineKey, type KeyState, type Statement } from '../../chain/key-events.ts';
import { base64Encode } from '../../chain/encoding.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { rawPublicKey } from '../../platform/node-crypto.ts';
import { describeStatement, draftState, fullOrderKey, precheck, publicKeyArg, statementText, writeAtomically } from '../key-statements.ts';

const NEW_KEY_OPTIONS = {
  chain: { type: 'string', value: 'DIR', help: 'the chain (a clone is enough): verified whole for its key state' },
  gateway: { type: 'string', value: 'URL', help: "instead of --chain: a running authority's GET /v1/keys" },
  'new-key': { type: 'string', value: 'NEW.pem', help: "the new online key's private key file (vouch keygen); only its public key is read" },
  'new-public': { type: 'string', value: 'B64', help: 'instead of --new-key: the new online key (base64)' },
  signer: { type: 'string', value: 'ID', help: "the new key's signer id (default: the current one)" },
  out: { type: 'string', value: 'FILE', help: 'where to write the statement file (never overwritten)', required: true },
} as const;

function newOnline(v: Record<string, any>, keys: KeyState): OnlineKey {
  if ((v['new-key'] === undefined) === (v['new-public'] === undefined)) throw new UsageError('give --new-key NEW.pem or --new-public B64');
  const pub = v['new-key'] !== undefined ? base64Encode(rawPublicKey(readKeyFile(v['new-key']))) : publicKeyArg(v['new-public'], '--new-public');
  if (v.signer !== undefined && (typeof v.signer !== 'string' || v.signer.length === 0)) throw new UsageError('--signer must not be empty');
  return { signer: v.signer ?? keys.online.signer, public_key: fullOrderKey(pub, 'the online key') };
}

function write(v: Record<string, any>, keys: KeyState, statement: Statement): number {
  writeAtomically(v.out, statementText({ statement, signatures: [] }), 'create');
  emit(
    v,
    `${v.out}: ${describeStatement(statement)}\nneeds: ${keys.root!.threshold} of the root's ${keys.root!.keys.length} holders (vouch root sign --key HOLDER.pem ${v.out}), then vouch root apply --key with the new key`,
    {
      status: 'written',
      file: v.out,
      statement,
      needs: { current: keys.root!.threshold },
    },
  );
  return 0;
}

export const keyRotate: Command = {
  name: 'key rotate',
  usage: '(--chain DIR | --gateway URL) (--new-key NEW.pem | --new-public B64) [--signer ID] --out FILE',
  summary:
    'Writes a routine rotation statement: a new online key takes over at its key block, and the old key signs nothing after it. The root holders sign it (vouch root sign), then vouch root apply appends it.',
  details: [
    'Refused at once (exit 1, bad_statement; no file written): a chain without a root (adopt one first: vouch root',
    'init), the key already in force, a key retired or compromised earlier, a root key, a weak key.',
  ].join('\n'),
  options: { ...NEW_KEY_OPTIONS },
  async run(v) {
    const { keys, at } = await draftState(v);
    const statement = keyStatement(keys, newOnline(v, keys));
    precheck(keys, statement, at);
    return write(v, keys, statement);
  },
};

export const keyCompromise: Command = {
  name: 'key compromise',
  usage: '(--chain DIR | --gateway URL) --good-through N (--new-key NEW.pem | --new-public B64) [--signer ID] --out FILE',
  summary:
    'Writes a compromise statement: the online key in force is declared compromised after block N (the last block known good), every later block it signed is void, and a new key takes over. The root holders sign it, then vouch root apply appends it.',
  details: [
    'Refused at once (exit 1, bad_statement; no file written): a chain without a root, N beyond the head or before',
    "the compromised key's first block (the key block that put it in force, or 0), a new key that is retired, a",
    'root key or weak. After apply, `vouch reendorse` endorses again what the void blocks endorsed, when the',
    'artifacts still hash to what they claimed.',
  ].join('\n'),
  options: {
    ...NEW_KEY_OPTIONS,
    'good-through': { type: 'string', value: 'N', help: 'the last block known good', required: true },
  },
  async run(v) {
    if (!/^(0|[1-9][0-9]{0,14})$/.test(v['good-through']))
      throw new UsageError(`--good-through must be a block index (an integer >= 0), got ${JSON.stringify(v['good-through'])}`);
    const { keys, at } = await draftState(v);
    const statement = compromiseStatement(keys, Number(v['good-through']), newOnline(v, keys));
    precheck(keys, statement, at);
    return write(v, keys, statement);
  },
};
