/**
 * C2SP transparency-log checkpoints (c2sp.org/tlog-checkpoint): the body
 * `<origin>\n<size>\n<base64 root>\n[extensions]` and the authority's signed
 * `checkpoint.note` (key name = origin). Pure: no I/O.
 * Owns: the body format and its refusals (origin non-empty; size decimal,
 * no leading zeros, at most 2^53-1; root canonical base64 of 32 bytes;
 * extension lines non-empty). test/unit/tlog-checkpoint.test.ts parses the
 * C2SP example.
 * Trusts: chain/note.ts, the injected `CryptoBackend` and `Signer`.
 * Must hold: `parseCheckpoint(formatCheckpoint(cp))` is `cp`;
 * `openCheckpoint` returns only a checkpoint signed by the authority's key
 * under its own (or the expected) origin; a bad note is `malformed`, an
 * unsigned or foreign one `checkpoint_mismatch`.
 */
import { VouchError } from './errors.ts';
import { base64Decode, base64Encode, hexEncode } from './encoding.ts';
import type { CryptoBackend, Signer } from './crypto-backend.ts';
import { formatNote, isValidKeyName, noteKeyId, parseNote, signNote, SIG_ED25519, verifyNoteSignature, type Note } from './note.ts';

export interface Checkpoint {
  origin: string;
  size: number;
  /** RFC 6962 root hash, 32 bytes. */
  root: Uint8Array;
  /** Extension lines (without newlines); vouch writes none. */
  extensions: string[];
}

const SIZE = /^(0|[1-9][0-9]*)$/;

function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) < 0x20) return true;
  return false;
}

export function formatCheckpoint(cp: Checkpoint): string {
  const bad = (why: string) => new VouchError('bad_request', `checkpoint: ${why}`);
  if (cp.origin.length === 0 || hasControl(cp.origin)) throw bad('origin is empty or has a control character');
  if (!Number.isSafeInteger(cp.size) || cp.size < 0) throw bad(`size ${cp.size} is not an integer 0..2^53-1`);
  if (cp.root.length !== 32) throw bad(`root must be 32 bytes, got ${cp.root.length}`);
  for (const e of cp.extensions) if (e.length === 0 || hasControl(e)) throw bad('extension line is empty or has a control character');
  return [cp.origin, String(cp.size), base64Encode(cp.root), ...cp.extensions].map((l) => l + '\n').join('');
}

export function parseCheckpoint(body: string): Checkpoint {
  const bad = (why: string) => new VouchError('malformed', `checkpoint: ${why}`);
  if (!body.endsWith('\n')) throw bad('body does not end in a newline');
  const lines = body.slice(0, -1).split('\n');
  if (lines.length < 3) throw bad(`body has ${lines.length} lines, needs origin, size and root`);
  for (const l of lines) if (hasControl(l)) throw bad('control character in the body');
  const [origin, sizeText, rootText, ...extensions] = lines as [string, string, string, ...string[]];
  if (origin.length === 0) throw bad('origin line is empty');
  if (!SIZE.test(sizeText)) throw bad(`size ${JSON.stringify(sizeText.slice(0, 40))} is not a decimal without leading zeros`);
  const size = Number(sizeText);
  if (!Number.isSafeInteger(size)) throw bad(`size ${sizeText} is beyond 2^53-1`);
  const root = base64Decode(rootText);
  if (root === null) throw bad('root is not standard base64');
  if (root.length !== 32) throw bad(`root is ${root.length} bytes, not 32`);
  for (const e of extensions) if (e.length === 0) throw bad('empty extension line');
  return { origin, size, root, extensions };
}

/**
 * Body + the authority's signature line (key name = origin), as committed in
 * checkpoint.note. Several signers (a key rollover, docs/spec/key-events.md): one
 * line each under the same origin, in the order given (the key in force
 * first); verifiers ignore the lines of keys they do not know.
 */
export function signCheckpoint(c: CryptoBackend, cp: Checkpoint, signer: Signer | readonly Signer[]): string {
  if (!isValidKeyName(cp.origin))
    throw new VouchError('bad_request', `checkpoint origin ${JSON.stringify(cp.origin)} cannot be a note key name (space or "+")`);
  const signers = Array.isArray(signer) ? (signer as readonly Signer[]) : [signer as Signer];
  if (signers.length === 0) throw new VouchError('bad_request', 'a checkpoint note needs at least one signer');
  const body = formatCheckpoint(cp);
  return formatNote({ text: body, signatures: signers.map((s) => signNote(c, body, cp.origin, s)) });
}

/**
 * Parses and verifies a checkpoint note against the authority: the signature
 * must be by `publicKey` under the name = the checkpoint's origin, and that
 * origin must be `authority.origin` when given. Other signature lines
 * (witness cosignatures, other keys) are kept in `note` and not judged here.
 */
export function openCheckpoint(c: CryptoBackend, note: string, authority: { publicKey: Uint8Array; origin?: string }): { checkpoint: Checkpoint; note: Note } {
  const n = parseNote(note);
  const checkpoint = parseCheckpoint(n.text);
  const origin = checkpoint.origin;
  if (authority.origin !== undefined && origin !== authority.origin) {
    throw new VouchError('checkpoint_mismatch', `checkpoint origin ${JSON.stringify(origin)} is not the expected ${JSON.stringify(authority.origin)}`, {
      index: null,
      evidence: { origin, expected: authority.origin },
    });
  }
  if (!verifyNoteSignature(c, n, origin, authority.publicKey)) {
    const keyId = isValidKeyName(origin) && authority.publicKey.length === 32 ? hexEncode(noteKeyId(c, origin, SIG_ED25519, authority.publicKey)) : null;
    const has = keyId !== null && n.signatures.some((s) => s.name === origin && hexEncode(s.keyId) === keyId);
    throw new VouchError(
      'checkpoint_mismatch',
      has
        ? `checkpoint signature by ${origin}+${keyId} does not verify`
        : `checkpoint carries no signature by the authority key ${keyId === null ? '' : `${origin}+${keyId}`}`.trimEnd(),
      {
        index: null,
        evidence: { origin, key_id: keyId, signers: n.signatures.map((s) => `${s.name}+${hexEncode(s.keyId)}`) },
      },
    );
  }
  return { checkpoint, note: n };
}
