/** `vouch keygen --out FILE`: a new ed25519 authority key (PKCS#8 PEM, mode 0600). */
import { emit, type Command } from '../command.ts';
import { createKeyFile } from '../../platform/key-file.ts';

export const keygen: Command = {
  name: 'keygen',
  usage: '--out FILE',
  summary: 'Creates a new ed25519 key as PKCS#8 PEM with mode 0600 (never overwrites) and prints its public key (base64) on stdout.',
  options: { out: { type: 'string', value: 'FILE', help: 'where to write the private key', required: true } },
  async run(v) {
    const { publicKeyB64 } = createKeyFile(v.out);
    emit(v, publicKeyB64, { public_key: publicKeyB64, key_file: v.out });
    return 0;
  },
};
