/**
 * The authority key file: PKCS#8 PEM ed25519, as `openssl genpkey
 * -algorithm ed25519` writes it.
 *
 * Must hold: keys are created with mode 0600 and never overwrite a file; a
 * key file readable or writable by group or others is refused, as ssh does;
 * errors name the file, never its content.
 */
import { generateKeyPairSync, createPrivateKey, type KeyObject } from 'node:crypto';
import { openSync, writeSync, closeSync, readFileSync, statSync } from 'node:fs';
import { VouchError } from '../chain/errors.ts';
import { base64Encode } from '../chain/encoding.ts';
import { rawPublicKey } from './node-crypto.ts';

/** Creates a new ed25519 key at `path` (mode 0600, refusing to overwrite). */
export function createKeyFile(path: string): { privateKey: KeyObject; publicKeyB64: string } {
  const { privateKey } = generateKeyPairSync('ed25519');
  const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }) as string;
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o600);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'EEXIST') throw new VouchError('key_error', `${path} already exists; refusing to overwrite a key`);
    throw new VouchError('io_error', `cannot create ${path}: ${err.code ?? err.message}`);
  }
  try {
    writeSync(fd, pem);
  } finally {
    closeSync(fd);
  }
  return { privateKey, publicKeyB64: base64Encode(rawPublicKey(privateKey)) };
}

/** Reads an ed25519 private key, refusing insecure permissions. */
export function readKeyFile(path: string): KeyObject {
  let mode: number;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw new VouchError('key_error', `${path} is not a file`);
    mode = st.mode;
  } catch (e) {
    if (e instanceof VouchError) throw e;
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ENOENT') throw new VouchError('key_error', `cannot read key file ${path}: no such file; create one with: vouch keygen --out ${path}`);
    throw new VouchError('key_error', `cannot read key file ${path}: ${err.code ?? err.message}`);
  }
  if ((mode & 0o077) !== 0) {
    throw new VouchError('key_error', `key file ${path} is accessible by group or others (mode ${(mode & 0o777).toString(8)}); run: chmod 600 ${path}`);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(readFileSync(path));
  } catch {
    throw new VouchError('key_error', `${path} is not a PEM private key`);
  }
  if (key.asymmetricKeyType !== 'ed25519') {
    throw new VouchError('key_error', `${path} holds a ${key.asymmetricKeyType} key; vouch needs ed25519`);
  }
  return key;
}
