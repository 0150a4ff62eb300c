/**
 * C2SP transparency-log checkpoints (c2sp.org/tlog-checkpoint): the note
 * body `<origin>\n<size>\n<base64 root>\n[extension lines]` and the
 * authority's signed checkpoint note (`checkpoint.note`), signed with the
 * authority's ed25519 key under the key name = origin.
 *
 * Owns: the body format and its refusals: origin non-empty; size the ASCII
 * decimal without leading zeros (`0` for the empty tree) and at most
 * 2^53-1; root the padded standard base64 of exactly 32 bytes (canonical);
 * extension lines non-empty; every line ends in a newline.
 *
 * Example (c2sp.org/tlog-checkpoint; test/unit/tlog-checkpoint.test.ts parses it):
 *
 *     example.com/behind-the-sofa
 *     20852163
 *     CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=
 *
 *     — example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=
 *
 * Trusts: chain/note.ts for the note format and signatures, the injected
 * `CryptoBackend` and `Signer`. Pure: no I/O.
 *
 * Must hold: `parseCheckpoint(formatCheckpoint(cp))` gives `cp` back;
 * `openCheckpoint` returns only a checkpoint whose note carries a valid
 * signature of the authority's key named with the checkpoint's own origin
 * (and that origin is the one expected, when the caller names one). A bad
 * note or body is `malformed`; a well-formed one that the authority did not
 * sign (or of another origin) is `checkpoint_mismatch`.
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
 * checkpoint.note. Several signers (a key rollover, docs/key-events.md): one
 * line each under the same origin, in the order given (the key in force
 * first); verifiers ignore the lines of keys they do not know.
 */
export function signCheckpoint(c: CryptoBackend, cp: Checkpoint, signer: Signer | readonly Signer[]): string {
  if (!isValidKeyName(cp.origin)) throw new VouchError('bad_request', `checkpoint origin ${JSON.stringify(cp.origin)} cannot be a note key name (space or "+")`);
  const signers = Array.isArray(signer) ? signer as readonly Signer[] : [signer as Signer];
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
      index: null, evidence: { origin, expected: authority.origin },
    });
  }
  if (!verifyNoteSignature(c, n, origin, authority.publicKey)) {
    const keyId = isValidKeyName(origin) && authority.publicKey.length === 32 ? hexEncode(noteKeyId(c, origin, SIG_ED25519, authority.publicKey)) : null;
    const has = keyId !== null && n.signatures.some((s) => s.name === origin && hexEncode(s.keyId) === keyId);
    throw new VouchError('checkpoint_mismatch', has
      ? `checkpoint signature by ${origin}+${keyId} does not verify`
      : `checkpoint carries no signature by the authority key ${keyId === null ? '' : `${origin}+${keyId}`}`.trimEnd(), {
      index: null, evidence: { origin, key_id: keyId, signers: n.signatures.map((s) => `${s.name}+${hexEncode(s.keyId)}`) },
    });
  }
  return { checkpoint, note: n };
}
