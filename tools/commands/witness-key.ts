/**
 * `vouch witness-key --key FILE --name NAME`: the note verifier key of a
 * witness (C2SP tlog-cosignature, ed25519, type 0x04) for the key in FILE
 * (made by `vouch keygen`) under the witness name NAME — the line an
 * authority puts in `authority.witnesses[].vkey` and a tlog-policy's
 * `witness` line. Prints the public part only.
 */
import { emit, type Command } from '../command.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend, rawPublicKey } from '../../platform/node-crypto.ts';
import { verifierKey } from '../../chain/note.ts';

export const witnessKey: Command = {
  name: 'witness-key',
  usage: '--key FILE --name NAME',
  summary: 'Prints the witness verifier key (name+hex8+base64, cosignature type 0x04) of the ed25519 key in FILE under NAME.',
  details: 'NAME is the witness.name of the gateway that cosigns with FILE (its witness.key_file); the gateway prints the same key at start.',
  options: {
    key: { type: 'string', value: 'FILE', help: 'the witness private key (PKCS#8 PEM, mode 0600; vouch keygen makes one)', required: true },
    name: { type: 'string', value: 'NAME', help: 'the witness name (a schema-less URL, e.g. witness.example.org/w1)', required: true },
  },
  async run(v) {
    const vkey = verifierKey(nodeBackend, v.name, 0x04, rawPublicKey(readKeyFile(v.key)));
    emit(v, vkey, { vkey, name: v.name });
    return 0;
  },
};
