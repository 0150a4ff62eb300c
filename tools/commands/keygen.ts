/**
 * `vouch keygen --out FILE [--origin NAME]`: a new ed25519 authority key
 * (PKCS#8 PEM, mode 0600). stdout's first line is always the base64 public
 * key (scripts read it); with --origin a second line gives the note
 * verifier key `<origin>+<hex8>+<base64>` (issue 17).
 */
import { UsageError, emit, type Command } from '../command.ts';
import { base64Decode } from '../../chain/encoding.ts';
import { SIG_ED25519, isValidKeyName, verifierKey } from '../../chain/note.ts';
import { createKeyFile } from '../../platform/key-file.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';

export const keygen: Command = {
  name: 'keygen',
  usage: '--out FILE [--origin NAME]',
  summary:
    'Creates a new ed25519 key as PKCS#8 PEM with mode 0600 (never overwrites) and prints its public key (base64) on stdout. With --origin, a second line gives the note verifier key.',
  options: {
    out: { type: 'string', value: 'FILE', help: 'where to write the private key', required: true },
    origin: {
      type: 'string',
      value: 'NAME',
      help: 'the log origin the key will sign checkpoints under (vouch init --origin; default there vouch/<signer>): prints the verifier key too',
    },
  },
  async run(v) {
    if (v.origin !== undefined && !isValidKeyName(v.origin))
      throw new UsageError(`--origin must be a note key name (no spaces, "+" or control characters), got ${JSON.stringify(v.origin)}`);
    const { publicKeyB64 } = createKeyFile(v.out);
    const vkey = v.origin === undefined ? null : verifierKey(nodeBackend, v.origin, SIG_ED25519, base64Decode(publicKeyB64)!);
    emit(v, vkey === null ? publicKeyB64 : `${publicKeyB64}\nverifier key: ${vkey}`, {
      public_key: publicKeyB64,
      key_file: v.out,
      ...(vkey === null ? {} : { origin: v.origin, verifier_key: vkey }),
    });
    return 0;
  },
};
