/**
 * C2SP signed notes (c2sp.org/signed-note): ed25519 signatures (type 0x01),
 * verifier keys (`name+hex8+base64`) and tlog-cosignature v1 witness
 * cosignatures (type 0x04). Pure: no I/O, no clock.
 * Owns: the byte format of a note and its signature lines, key IDs, the
 * signed messages of both types. Parsing and verifying follow Go's
 * golang.org/x/mod/sumdb/note `Open` (unknown keys ignored, only the first
 * line of a known key verified); test/e2e/go-interop.test.ts and
 * test/unit/note.test.ts (Go's PeterNeumann vector) hold it to Go's behaviour.
 * Trusts: the injected `CryptoBackend` and `Signer`.
 * Must hold: `formatNote(parseNote(s)) === s` for every accepted note; a
 * verify function answers false, never throws; a cosignature never passes
 * as a note signature nor the reverse.
 */
import { VouchError } from './errors.ts';
import { base64Decode, base64Encode, bytesEqual, hexDecode, hexEncode, utf8 } from './encoding.ts';
import { hashBytes, type CryptoBackend, type Signer } from './crypto-backend.ts';

export interface NoteSignature {
  /** Key name. */
  name: string;
  /** The 4-byte key ID (first bytes of the decoded signature). */
  keyId: Uint8Array;
  /** The signature bytes after the key ID (ed25519: 64; cosignature v1: 8 + 64). */
  bytes: Uint8Array;
  /** The signature line without its final newline: `— <name> <base64>`. */
  line: string;
}

export interface Note {
  /** The signed text, ending in a newline (not the separating blank line). */
  text: string;
  signatures: NoteSignature[];
}

/** Signature type bytes of c2sp.org/signed-note. */
export const SIG_ED25519 = 0x01;
export const SIG_COSIGNATURE_V1 = 0x04;
export type NoteSignatureType = typeof SIG_ED25519 | typeof SIG_COSIGNATURE_V1;

/** Go's sumdb/note limit (the spec asks for at least 16). */
export const MAX_NOTE_SIGNATURES = 100;
/** Our limit on a whole note (the spec leaves the size to the verifier): 1 MiB of UTF-16 code units. */
export const MAX_NOTE_CHARS = 1 << 20;

const EM_DASH_PREFIX = '\u2014 ';
const COSIGNATURE_HEADER = 'cosignature/v1\n';
/** Unicode White_Space (what Go's unicode.IsSpace accepts beyond ASCII). */
const UNICODE_SPACE = /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** A JS string is valid UTF-8 once encoded iff it has no lone surrogate. */
function wellFormed(s: string): boolean {
  return !LONE_SURROGATE.test(s);
}

function malformed(message: string): VouchError {
  return new VouchError('malformed', `signed note: ${message}`);
}

/** A key name as signed-note allows it: non-empty, no Unicode space, no `+`, well-formed. */
export function isValidKeyName(name: string): boolean {
  return name.length > 0 && !UNICODE_SPACE.test(name) && !name.includes('+') && wellFormed(name) && !hasControl(name);
}

/** true when `s` has an ASCII control character other than newline. */
function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const ch = s.charCodeAt(i);
    if (ch < 0x20 && ch !== 0x0a) return true;
  }
  return false;
}

/** Checks the character rules of a whole note or note text; throws `malformed`. */
function checkCharacters(s: string, what: string): void {
  if (!wellFormed(s)) throw malformed(`${what} is not valid UTF-8 (lone surrogate)`);
  for (let i = 0; i < s.length; i++) {
    const ch = s.charCodeAt(i);
    if (ch < 0x20 && ch !== 0x0a) throw malformed(`${what} has control character 0x${ch.toString(16).padStart(2, '0')} at ${i}`);
  }
}

export function parseNote(note: string): Note {
  if (note.length > MAX_NOTE_CHARS) throw malformed(`longer than ${MAX_NOTE_CHARS} characters`);
  checkCharacters(note, 'note');
  const split = note.lastIndexOf('\n\n');
  if (split < 0) throw malformed('no blank line before the signatures');
  const text = note.slice(0, split + 1);
  const block = note.slice(split + 2);
  if (block.length === 0) throw malformed('no signature lines');
  if (!block.endsWith('\n')) throw malformed('does not end in a newline');
  const lines = block.slice(0, -1).split('\n');
  if (lines.length > MAX_NOTE_SIGNATURES) throw malformed(`more than ${MAX_NOTE_SIGNATURES} signatures`);
  const signatures: NoteSignature[] = [];
  for (const line of lines) {
    if (!line.startsWith(EM_DASH_PREFIX)) throw malformed(`signature line does not start with "— ": ${JSON.stringify(line.slice(0, 80))}`);
    const rest = line.slice(EM_DASH_PREFIX.length);
    const space = rest.indexOf(' ');
    const name = space < 0 ? rest : rest.slice(0, space);
    const b64 = space < 0 ? '' : rest.slice(space + 1);
    if (!isValidKeyName(name)) throw malformed(`bad key name ${JSON.stringify(name.slice(0, 80))}`);
    const raw = b64 === '' ? null : base64Decode(b64);
    if (raw === null) throw malformed(`signature of ${name} is not standard base64`);
    if (raw.length < 5) throw malformed(`signature of ${name} is shorter than a key ID and one byte`);
    signatures.push({ name, keyId: raw.slice(0, 4), bytes: raw.slice(4), line });
  }
  return { text, signatures };
}

/** The note's bytes: text, blank line, one line per signature (rebuilt from name, key ID and bytes). */
export function formatNote(n: Note): string {
  if (!n.text.endsWith('\n')) throw malformed('text does not end in a newline');
  if (n.signatures.length === 0) throw malformed('no signatures');
  let out = n.text + '\n';
  for (const s of n.signatures) out += signatureLine(s.name, s.keyId, s.bytes) + '\n';
  return out;
}

function signatureLine(name: string, keyId: Uint8Array, bytes: Uint8Array): string {
  const raw = new Uint8Array(4 + bytes.length);
  raw.set(keyId, 0);
  raw.set(bytes, 4);
  return `${EM_DASH_PREFIX}${name} ${base64Encode(raw)}`;
}

/** SHA-256(name ‖ 0x0A ‖ type ‖ publicKey)[:4]. */
export function noteKeyId(c: CryptoBackend, name: string, type: NoteSignatureType, publicKey: Uint8Array): Uint8Array {
  const n = utf8(name);
  const buf = new Uint8Array(n.length + 2 + publicKey.length);
  buf.set(n, 0);
  buf[n.length] = 0x0a;
  buf[n.length + 1] = type;
  buf.set(publicKey, n.length + 2);
  return hashBytes(c, 'sha256', buf).slice(0, 4);
}

/** The key ID function of ed25519 note signatures (type 0x01) for `name`. */
export function ed25519KeyId(c: CryptoBackend, name: string): (publicKey: Uint8Array) => Uint8Array {
  return (publicKey) => noteKeyId(c, name, SIG_ED25519, publicKey);
}

function checkKeyInput(name: string, publicKey: Uint8Array): void {
  if (!isValidKeyName(name)) throw new VouchError('bad_request', `note key name ${JSON.stringify(name)} is empty or has a space, "+" or a control character`);
  if (publicKey.length !== 32) throw new VouchError('bad_request', `ed25519 public key must be 32 bytes, got ${publicKey.length}`);
}

/** The verifier key text `name+hex8+base64(type ‖ key)`. */
export function verifierKey(c: CryptoBackend, name: string, type: NoteSignatureType, publicKey: Uint8Array): string {
  checkKeyInput(name, publicKey);
  const tk = new Uint8Array(33);
  tk[0] = type;
  tk.set(publicKey, 1);
  return `${name}+${hexEncode(noteKeyId(c, name, type, publicKey))}+${base64Encode(tk)}`;
}

/**
 * Parses a verifier key of type 0x01 or 0x04 (ed25519 key of 32 bytes).
 * Throws `bad_request` when it is malformed, of another type, or its key ID
 * is not the one its name and key give.
 */
export function parseVerifierKey(c: CryptoBackend, vkey: string): { name: string; type: NoteSignatureType; keyId: Uint8Array; publicKey: Uint8Array } {
  const bad = (why: string) => new VouchError('bad_request', `verifier key ${JSON.stringify(vkey.slice(0, 120))}: ${why}`);
  const p1 = vkey.indexOf('+');
  const p2 = p1 < 0 ? -1 : vkey.indexOf('+', p1 + 1);
  if (p2 < 0) throw bad('not <name>+<hex8>+<base64>');
  const name = vkey.slice(0, p1);
  const hex = vkey.slice(p1 + 1, p2);
  const b64 = vkey.slice(p2 + 1);
  if (!isValidKeyName(name)) throw bad('bad key name');
  if (!/^[0-9a-fA-F]{8}$/.test(hex)) throw bad('key ID is not 8 hex digits');
  const raw = base64Decode(b64);
  if (raw === null || raw.length === 0) throw bad('key is not standard base64');
  const type = raw[0]!;
  if (type !== SIG_ED25519 && type !== SIG_COSIGNATURE_V1)
    throw bad(`signature type 0x${type.toString(16).padStart(2, '0')} is not supported (0x01 ed25519, 0x04 cosignature/v1)`);
  const publicKey = raw.slice(1);
  if (publicKey.length !== 32) throw bad(`ed25519 key must be 32 bytes, got ${publicKey.length}`);
  const keyId = hexDecode(hex.toLowerCase())!;
  if (!bytesEqual(keyId, noteKeyId(c, name, type, publicKey))) throw bad('key ID does not match the name and key');
  return { name, type, keyId, publicKey };
}

/** Signs `text` (the note text, ending in a newline) with an ed25519 (0x01) note signature named `name`. */
export function signNote(c: CryptoBackend, text: string, name: string, signer: Signer): NoteSignature {
  checkKeyInput(name, signer.publicKey);
  if (!text.endsWith('\n')) throw malformed('text does not end in a newline');
  checkCharacters(text, 'text');
  const keyId = noteKeyId(c, name, SIG_ED25519, signer.publicKey);
  const bytes = signer.sign(utf8(text));
  return { name, keyId, bytes, line: signatureLine(name, keyId, bytes) };
}

/** The first signature line by (name, key ID): the one Go's `Open` verifies (it drops the later ones). */
function firstSignatureOf(n: Note, name: string, keyId: Uint8Array): NoteSignature | undefined {
  return n.signatures.find((s) => s.name === name && bytesEqual(s.keyId, keyId));
}

/**
 * Does `n` carry a valid ed25519 (0x01) signature by (name, publicKey)?
 * Go's `Open` with that one key: the first line by its name and key ID
 * must verify; later lines by it are not read.
 */
export function verifyNoteSignature(c: CryptoBackend, n: Note, name: string, publicKey: Uint8Array): boolean {
  if (publicKey.length !== 32 || !isValidKeyName(name)) return false;
  const s = firstSignatureOf(n, name, noteKeyId(c, name, SIG_ED25519, publicKey));
  return s !== undefined && s.bytes.length === 64 && c.verify(publicKey, utf8(n.text), s.bytes);
}

/** A key a note is opened with (Go's `note.Verifier`): an ed25519 note key (0x01) by name and public key. */
export interface NoteKey {
  name: string;
  publicKey: Uint8Array;
}

/** What `openNote` found: the note's text, the lines of known keys that verified, and the unknown keys' lines (each distinct line once). */
export type OpenedNote =
  | { ok: true; text: string; verified: NoteSignature[]; unverified: NoteSignature[] }
  /** A known key's first line does not verify (Go: `InvalidSignatureError`). */
  | { ok: false; why: 'invalid'; signature: NoteSignature }
  /** No line by a known key (Go: `UnverifiedNoteError`). */
  | { ok: false; why: 'unverified'; unverified: NoteSignature[] };

/**
 * Go's `note.Open(note, VerifierList(known...))`: the note's format as
 * `parseNote` (malformed: thrown), then each signature line in order: a
 * line by an unknown (name, key ID) is set aside, repeated identical lines
 * once; the first line by a known key is verified (one that fails refuses
 * the whole note), its later lines are dropped. At least one known key
 * must have signed.
 * @throws VouchError malformed
 */
export function openNote(c: CryptoBackend, note: string, known: readonly NoteKey[]): OpenedNote {
  const n = parseNote(note);
  const keys = known
    .filter((k) => k.publicKey.length === 32 && isValidKeyName(k.name))
    .map((k) => ({ ...k, id: `${k.name}+${hexEncode(noteKeyId(c, k.name, SIG_ED25519, k.publicKey))}` }));
  const msg = utf8(n.text);
  const seen = new Set<string>();
  const seenUnverified = new Set<string>();
  const verified: NoteSignature[] = [];
  const unverified: NoteSignature[] = [];
  for (const s of n.signatures) {
    const id = `${s.name}+${hexEncode(s.keyId)}`;
    const key = keys.find((k) => k.id === id);
    if (key === undefined) {
      if (!seenUnverified.has(s.line)) {
        seenUnverified.add(s.line);
        unverified.push(s);
      }
      continue;
    }
    if (seen.has(id)) continue;
    seen.add(id);
    if (!(s.bytes.length === 64 && c.verify(key.publicKey, msg, s.bytes))) return { ok: false, why: 'invalid', signature: s };
    verified.push(s);
  }
  return verified.length === 0 ? { ok: false, why: 'unverified', unverified } : { ok: true, text: n.text, verified, unverified };
}

/** The message a v1 cosignature signs: `cosignature/v1\ntime <t>\n` ‖ checkpoint body. */
export function cosignatureMessage(checkpointBody: string, timestamp: number): Uint8Array {
  return utf8(`${COSIGNATURE_HEADER}time ${timestamp}\n${checkpointBody}`);
}

/**
 * A tlog-cosignature/v1 (type 0x04) signature line by (name, signer) over
 * `checkpointBody` at `timestamp` (POSIX seconds, an integer 0..2^53-1: the
 * spec's bound is 2^63-1, JavaScript numbers stop being exact at 2^53).
 */
export function cosign(c: CryptoBackend, checkpointBody: string, name: string, signer: Signer, timestamp: number): NoteSignature {
  checkKeyInput(name, signer.publicKey);
  if (!Number.isSafeInteger(timestamp) || timestamp < 0)
    throw new VouchError('bad_request', `cosignature timestamp must be an integer of seconds >= 0, got ${timestamp}`);
  if (!checkpointBody.endsWith('\n')) throw malformed('checkpoint body does not end in a newline');
  checkCharacters(checkpointBody, 'checkpoint body');
  const keyId = noteKeyId(c, name, SIG_COSIGNATURE_V1, signer.publicKey);
  const sig = signer.sign(cosignatureMessage(checkpointBody, timestamp));
  const bytes = new Uint8Array(8 + sig.length);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(timestamp));
  bytes.set(sig, 8);
  return { name, keyId, bytes, line: signatureLine(name, keyId, bytes) };
}

/**
 * Does `n` carry a valid v1 cosignature by (name, publicKey) over its text?
 * Returns its timestamp. A timestamp above 2^53-1 is refused (not exact in
 * JavaScript; above 2^63-1 the spec refuses it anyway). The caller decides
 * about timestamps in the future (no clock here).
 */
export function verifyCosignature(c: CryptoBackend, n: Note, name: string, publicKey: Uint8Array): { ok: true; timestamp: number } | { ok: false } {
  if (publicKey.length !== 32 || !isValidKeyName(name)) return { ok: false };
  // As Go's `Open` with this one key: its first line decides, later ones are dropped.
  const s = firstSignatureOf(n, name, noteKeyId(c, name, SIG_COSIGNATURE_V1, publicKey));
  if (s === undefined || s.bytes.length !== 72) return { ok: false };
  const t = new DataView(s.bytes.buffer, s.bytes.byteOffset, 8).getBigUint64(0);
  if (t > BigInt(Number.MAX_SAFE_INTEGER)) return { ok: false };
  const timestamp = Number(t);
  if (!c.verify(publicKey, cosignatureMessage(n.text, timestamp), s.bytes.slice(8))) return { ok: false };
  return { ok: true, timestamp };
}
