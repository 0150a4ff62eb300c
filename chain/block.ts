/**
 * The vouch chain format, version 1 (docs/spec/design.md §1.2–1.6): types and strict parsers.
 *
 * A chain is a list of blocks. Block 0 is the authority block: it names the
 * signer id and the ed25519 public key every later block is signed with.
 * Each block holds a signed `payload` and links to its predecessor:
 *
 *   signature   = base64(ed25519_sign(key, UTF8(JCS(payload))))
 *   record_hash = hex(sha256(UTF8(JCS(block without record_hash))))
 *   prev_hash   = record_hash of block index-1 (64 zeros for block 0)
 *
 * JCS is RFC 8785 canonical JSON (`chain/jcs.ts`). Worked example — block 1
 * of `shared/vectors/chain-v1.json`, signed with seed
 * 10b966b805f342e4b3f32b0f46939b1f26f165b5463d869454598fc1150f7683
 * (public key hvDlFny040Jdtl6L3Vq3jYgQ5mDtkbSfsNF2F1P3LNU=); test/unit/spec-example.test.ts
 * rebuilds it from these lines and checks every value:
 *
 *   EXAMPLE posted: 2026-11-02T12:00:00Z
 *   EXAMPLE prev_hash: 79c5a494ac654376348fc8fb402169ccaa85457ab846f0897af4f80ec757d8bc
 *   EXAMPLE comment: acme/widget 1.0.0
 *   EXAMPLE artifact: console.log("hello from widget 1.0.0");\n
 *   EXAMPLE artifact_hash: sha256:634c324298a4d070bb798d935c104bfe9eab09ce119bba1ffe71660c9fb27eaa
 *   EXAMPLE payload JCS: {"effective_date":"2026-11-02","endorsements":[{"artifact_hash":"sha256:634c324298a4d070bb798d935c104bfe9eab09ce119bba1ffe71660c9fb27eaa","artifact_url":"https://artifacts.example.org/acme/widget/widget-1.0.0.js","comment":"release build","endorsement":"provenance","license":"MIT","name":"acme/widget","semver":"1.0.0","signature_algorithm":"ed25519"}],"grammar":{"hash":"9e6bc86ca2b2f7e2772cdc61eeb3f1a600a7794b43e1c83a9f1a81e2bcf6ee81","version":"1.0"},"intent":"endorse","semver":"1.0.0","tags":{"release":true},"target_hash":"self","uns":"acme/widget","vibecode":{"endorsement":"provenance","intent":"endorse","license":"MIT","semver":"1.0.0","signer":"vouch-test-authority","uns":"acme/widget"}}
 *   EXAMPLE signature: 8o8OhWJ/xeREZZUVui8LEL5csHvpN0/54yJfuiY3aMvEOz4UsPHuL6sKyEWv0/gLjv4Xzh777nNkF3qu1o7bBA==
 *   EXAMPLE record_hash: 7986d553a95cdba3f797ab4932a75baff19d2a6173f8692e3739746d675ee707
 *
 * Parsing is strict and bounded: exact member sets (no extra members, no
 * nulls, integers only where an integer belongs), date and time forms that
 * are real calendar values, SemVer 2.0.0, absolute http(s) URLs, a URL at
 * most once per block, caps on string lengths and list sizes. Anything else
 * is `malformed` at the block's position. The `artifact_hash` form is *not*
 * checked here: docs/spec/design.md §1.7 checks it last, as `bad_artifact_hash`.
 * Reading a file (docs/spec/design.md §1.7 "Reading a chain"): its bytes are decoded
 * strictly as UTF-8 (`utf8Text`) and parsed as I-JSON (`readJson`: an object
 * that repeats a member name is refused, since `JSON.parse` keeps the last
 * one silently and the signed value would not be the one a reader sees).
 */
import { VouchError } from './errors.ts';
import { base64Decode } from './encoding.ts';
import { KeyEventError, parseSignatures, parseStatement, type Statement, type StatementSignature } from './key-events.ts';

export type Intent = 'authority' | 'endorse' | 'revoke' | 'key';

export interface Endorsement {
  endorsement: 'provenance';
  artifact_url: string;
  artifact_hash: string;
  signature_algorithm: 'ed25519';
  name: string;
  semver: string;
  license: string;
  comment: string;
}

export interface Grammar {
  hash: string;
  version: string;
}

export interface Vibecode {
  endorsement: string;
  intent: string;
  license: string;
  signer: string;
  uns: string;
  semver: string;
}

export interface AuthorityInfo {
  signer: string;
  public_key: string;
  signature_algorithm: 'ed25519';
}

export interface Payload {
  intent: Intent;
  effective_date: string;
  endorsements: Endorsement[];
  grammar: Grammar;
  tags: Record<string, boolean>;
  target_hash: string;
  uns: string;
  semver: string;
  vibecode: Vibecode;
  authority?: AuthorityInfo;
  /** intent `key` only (grammar 1.1, docs/spec/key-events.md): the root-signed statement and its holders' signatures. */
  statement?: Statement;
  signatures?: StatementSignature[];
}

export interface Block {
  comment: string;
  index: number;
  prev_hash: string;
  posted: string;
  signer: string;
  payload: Payload;
  signature: string;
  record_hash: string;
}

export type UnhashedBlock = Omit<Block, 'record_hash'>;

export interface Checkpoint {
  size: number;
  head: string;
  signer: string;
  timestamp: string;
  signature: string;
}

export const GRAMMAR_VERSIONS: readonly string[] = ['1.0', '1.1'];
/** The grammar of key blocks (intent `key`); every other block is 1.0. */
export const KEY_GRAMMAR_VERSION = '1.1';
export const ZERO_HASH = '0'.repeat(64);
export const SIGNATURE_ALGORITHM = 'ed25519';

/** Bounds on untrusted input. */
export const LIMITS = {
  blockFileBytes: 16 * 1024 * 1024,
  comment: 64 * 1024,
  shortText: 256,
  url: 8 * 1024,
  endorsements: 10_000,
  tags: 1_000,
} as const;

// ---------------------------------------------------------------- value forms

const SEMVER_RE =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;
const UNIT_NAME_RE = /^[A-Za-z0-9@_][A-Za-z0-9._@+-]{0,127}\/[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}$/;
const LICENSE_RE = /^[A-Za-z0-9][A-Za-z0-9.+:()\- ]{0,127}$/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const nativeWellFormed = (String.prototype as { isWellFormed?: () => boolean }).isWellFormed;
/** No lone surrogate (native `isWellFormed` where the runtime has it). */
const wellFormed: (s: string) => boolean = nativeWellFormed ? (s) => nativeWellFormed.call(s) : (s) => !LONE_SURROGATE.test(s);
// eslint-disable-next-line no-control-regex
const CONTROL_RE = /[\u0000-\u001f\u007f]/;

const MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function realDate(y: number, m: number, d: number): boolean {
  if (m < 1 || m > 12 || d < 1) return false;
  return d <= (m === 2 && ((y % 4 === 0 && y % 100 !== 0) || y % 400 === 0) ? 29 : MONTH_DAYS[m - 1]!);
}

// The value forms below run several times per block on every verification:
// they read characters directly instead of running a regular expression.

/** The number written by the ASCII digits s[from..to), or -1. */
export function digitsAt(s: string, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    n = n * 10 + c;
  }
  return n;
}

/** `YYYY-MM-DD` at s[0..10): a real calendar date. */
function dateAt(s: string): boolean {
  if (s.charCodeAt(4) !== 45 || s.charCodeAt(7) !== 45) return false;
  const y = digitsAt(s, 0, 4);
  const m = digitsAt(s, 5, 7);
  const d = digitsAt(s, 8, 10);
  return y >= 0 && m >= 0 && d >= 0 && realDate(y, m, d);
}

export function isSemver(s: string): boolean {
  return s.length <= LIMITS.shortText && SEMVER_RE.test(s);
}

export function isUnitName(s: string): boolean {
  return UNIT_NAME_RE.test(s);
}

export function isLicenseId(s: string): boolean {
  return LICENSE_RE.test(s);
}

/** `YYYY-MM-DD`, a real calendar date. */
export function isDate(s: string): boolean {
  return s.length === 10 && dateAt(s);
}

/** `YYYY-MM-DDTHH:MM:SSZ`, a real UTC time (no leap seconds). */
export function isDateTime(s: string): boolean {
  if (s.length !== 20 || s.charCodeAt(10) !== 84 /* T */ || s.charCodeAt(13) !== 58 || s.charCodeAt(16) !== 58 || s.charCodeAt(19) !== 90 /* Z */) return false;
  const hh = digitsAt(s, 11, 13);
  const mm = digitsAt(s, 14, 16);
  const ss = digitsAt(s, 17, 19);
  return dateAt(s) && hh >= 0 && hh < 24 && mm >= 0 && mm < 60 && ss >= 0 && ss < 60;
}

/** Formats a time as `YYYY-MM-DDTHH:MM:SSZ` (seconds precision, UTC). */
export function formatDateTime(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

// 1 for the characters 0-9 a-f. Looked up without a branch per character: the
// range tests they replace mispredicted on random hex (three times slower).
const LOWER_HEX = new Uint8Array(128);
for (const c of '0123456789abcdef') LOWER_HEX[c.charCodeAt(0)] = 1;

export function isHex64(s: string): boolean {
  if (s.length !== 64) return false;
  let ok = 1;
  for (let i = 0; i < 64; i++) {
    const c = s.charCodeAt(i);
    ok &= c < 128 ? LOWER_HEX[c]! : 0;
  }
  return ok === 1;
}

/** An absolute http: or https: URL with a host, no whitespace or controls. */
export function isArtifactUrl(s: string): boolean {
  if (s.length === 0 || s.length > LIMITS.url || /\s/.test(s) || CONTROL_RE.test(s)) return false;
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return false;
  }
  return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname.length > 0 && /^https?:\/\//i.test(s);
}

// ---------------------------------------------------------------- strict parsing

class Malformed extends Error {}

type Obj = Record<string, unknown>;

function fail(path: string, what: string): never {
  throw new Malformed(`${path}: ${what}`);
}

const hasOwn = Object.prototype.hasOwnProperty;

/** The exact member lists (the memo below is keyed by these arrays, so they must be these constants). */
const MEMBERS = {
  block: ['comment', 'index', 'prev_hash', 'posted', 'signer', 'payload', 'signature', 'record_hash'],
  payload: ['intent', 'effective_date', 'endorsements', 'grammar', 'tags', 'target_hash', 'uns', 'semver', 'vibecode'],
  payloadOptional: ['authority', 'statement', 'signatures'],
  endorsement: ['endorsement', 'artifact_url', 'artifact_hash', 'signature_algorithm', 'name', 'semver', 'license', 'comment'],
  grammar: ['hash', 'version'],
  vibecode: ['endorsement', 'intent', 'license', 'signer', 'uns', 'semver'],
  authority: ['signer', 'public_key', 'signature_algorithm'],
  checkpoint: ['size', 'head', 'signer', 'timestamp', 'signature'],
} as const satisfies Record<string, readonly string[]>;

// Per member list, the names (in order) of the object it accepted last: files
// written by one writer repeat them, and an equal name list is the same set.
const acceptedNames = new WeakMap<readonly string[], string[]>();

function sameNames(a: string[], b: string[] | undefined): boolean {
  if (b === undefined || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function object(v: unknown, path: string, keys: readonly string[], optional: readonly string[] = []): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(path, 'must be an object');
  const o = v as Obj;
  const names = Object.keys(o);
  if (sameNames(names, acceptedNames.get(keys))) return o;
  // Every required member present and no more names than required + optional present: exact.
  let allowed = keys.length;
  for (let i = 0; i < keys.length; i++) if (!hasOwn.call(o, keys[i]!)) allowed = -1;
  for (let i = 0; i < optional.length; i++) if (hasOwn.call(o, optional[i]!)) allowed++;
  if (allowed === names.length) {
    acceptedNames.set(keys, names);
    return o;
  }
  for (const k of names) {
    if (!keys.includes(k) && !optional.includes(k)) fail(path, `unknown member ${JSON.stringify(k)}`);
  }
  for (const k of keys) if (!hasOwn.call(o, k)) fail(path, `missing member ${JSON.stringify(k)}`);
  return o;
}

function text(v: unknown, path: string, max: number = LIMITS.shortText): string {
  if (typeof v !== 'string') fail(path, 'must be a string');
  if (v.length > max) fail(path, `longer than ${max} characters`);
  if (!wellFormed(v)) fail(path, 'holds a lone surrogate');
  return v;
}

function label(v: unknown, path: string): string {
  const s = text(v, path);
  if (s.length === 0 || CONTROL_RE.test(s)) fail(path, 'must be a non-empty single-line string');
  return s;
}

function formed(v: unknown, path: string, test: (s: string) => boolean, form: string, max?: number): string {
  const s = text(v, path, max);
  if (!test(s)) fail(path, `must be ${form}`);
  return s;
}

function exactly<T extends string>(v: unknown, path: string, want: T): T {
  if (v !== want) fail(path, `must be ${JSON.stringify(want)}`);
  return want;
}

function parseEndorsement(v: unknown, path: string): Endorsement {
  const o = object(v, path, MEMBERS.endorsement);
  return {
    endorsement: exactly(o.endorsement, `${path}.endorsement`, 'provenance'),
    artifact_url: formed(o.artifact_url, `${path}.artifact_url`, isArtifactUrl, 'an absolute http(s) URL', LIMITS.url),
    artifact_hash: text(o.artifact_hash, `${path}.artifact_hash`),
    signature_algorithm: exactly(o.signature_algorithm, `${path}.signature_algorithm`, SIGNATURE_ALGORITHM),
    name: formed(o.name, `${path}.name`, isUnitName, '<owner>/<name>'),
    semver: formed(o.semver, `${path}.semver`, isSemver, 'a SemVer 2.0.0 version'),
    license: formed(o.license, `${path}.license`, isLicenseId, 'an SPDX-style license id'),
    comment: text(o.comment, `${path}.comment`, LIMITS.comment),
  };
}

const isGrammarVersion = (s: string): boolean => GRAMMAR_VERSIONS.includes(s);
const GRAMMAR_VERSION_FORM = `a known grammar version (${GRAMMAR_VERSIONS.join(', ')})`;

function parsePayload(v: unknown, position: number): Payload {
  const path = 'payload';
  const o = object(v, path, MEMBERS.payload, MEMBERS.payloadOptional);
  const intent = o.intent;
  if (intent !== 'authority' && intent !== 'endorse' && intent !== 'revoke' && intent !== 'key')
    fail(`${path}.intent`, `unknown intent ${JSON.stringify(intent)}`);
  if (intent === 'authority' && position !== 0) fail(`${path}.intent`, '"authority" is allowed only in block 0');
  if (intent !== 'authority' && position === 0) fail(`${path}.intent`, 'block 0 must be the authority block');

  const g = object(o.grammar, `${path}.grammar`, MEMBERS.grammar);
  const grammar: Grammar = {
    hash: formed(g.hash, `${path}.grammar.hash`, isHex64, '64 lowercase hex digits'),
    version: formed(g.version, `${path}.grammar.version`, isGrammarVersion, GRAMMAR_VERSION_FORM),
  };
  if ((intent === 'key') !== (grammar.version === KEY_GRAMMAR_VERSION)) {
    fail(
      `${path}.grammar.version`,
      intent === 'key' ? `a key block is grammar ${KEY_GRAMMAR_VERSION}` : `grammar ${grammar.version} is for key blocks only; a ${intent} block is 1.0`,
    );
  }

  if (typeof o.tags !== 'object' || o.tags === null || Array.isArray(o.tags)) fail(`${path}.tags`, 'must be an object');
  const t = o.tags as Obj;
  const tagNames = Object.keys(t);
  if (tagNames.length > LIMITS.tags) fail(`${path}.tags`, `more than ${LIMITS.tags} tags`);
  for (const k of tagNames) {
    label(k, `${path}.tags name`);
    if (typeof t[k] !== 'boolean') fail(`${path}.tags.${k}`, 'must be a boolean');
  }
  // fromEntries defines own members, so a tag named "__proto__" survives (plain assignment would drop it).
  const tags: Record<string, boolean> = tagNames.length === 0 ? {} : Object.fromEntries(tagNames.map((k) => [k, t[k] as boolean]));

  if (!Array.isArray(o.endorsements)) fail(`${path}.endorsements`, 'must be an array');
  if (o.endorsements.length > LIMITS.endorsements) fail(`${path}.endorsements`, `more than ${LIMITS.endorsements} entries`);
  const endorsements = o.endorsements.map((e, i) => parseEndorsement(e, `${path}.endorsements[${i}]`));
  if (intent === 'endorse' && endorsements.length === 0) fail(`${path}.endorsements`, 'an endorse block needs at least one entry');
  if (intent !== 'endorse' && endorsements.length !== 0) fail(`${path}.endorsements`, `must be empty for intent ${intent}`);
  if (endorsements.length > 1) {
    const seen = new Set<string>();
    for (const e of endorsements) {
      if (seen.has(e.artifact_url)) fail(`${path}.endorsements`, `URL endorsed twice in one block: ${e.artifact_url}`);
      seen.add(e.artifact_url);
    }
  }

  const target_hash = text(o.target_hash, `${path}.target_hash`);
  if (intent === 'revoke' ? !isHex64(target_hash) : target_hash !== 'self') {
    fail(`${path}.target_hash`, intent === 'revoke' ? 'must be the record_hash of the revoked block' : 'must be "self"');
  }

  const vc = object(o.vibecode, `${path}.vibecode`, MEMBERS.vibecode);
  const vibecode: Vibecode = {
    endorsement: text(vc.endorsement, `${path}.vibecode.endorsement`),
    intent: text(vc.intent, `${path}.vibecode.intent`),
    license: text(vc.license, `${path}.vibecode.license`),
    signer: text(vc.signer, `${path}.vibecode.signer`),
    uns: text(vc.uns, `${path}.vibecode.uns`),
    semver: text(vc.semver, `${path}.vibecode.semver`),
  };

  const payload: Payload = {
    intent,
    effective_date: formed(o.effective_date, `${path}.effective_date`, isDate, 'a date YYYY-MM-DD'),
    endorsements,
    grammar,
    tags,
    target_hash,
    uns: formed(o.uns, `${path}.uns`, isUnitName, '<owner>/<name>'),
    semver: formed(o.semver, `${path}.semver`, isSemver, 'a SemVer 2.0.0 version'),
    vibecode,
  };
  if (intent === 'authority') {
    if (!('authority' in o)) fail(`${path}.authority`, 'missing on the authority block');
    const a = object(o.authority, `${path}.authority`, MEMBERS.authority);
    const public_key = text(a.public_key, `${path}.authority.public_key`);
    const raw = base64Decode(public_key);
    if (raw === null || raw.length !== 32) fail(`${path}.authority.public_key`, 'must be base64 of a raw 32-byte ed25519 key');
    payload.authority = {
      signer: label(a.signer, `${path}.authority.signer`),
      public_key,
      signature_algorithm: exactly(a.signature_algorithm, `${path}.authority.signature_algorithm`, SIGNATURE_ALGORITHM),
    };
  } else if ('authority' in o) {
    fail(`${path}.authority`, 'allowed only on the authority block');
  }
  if (intent === 'key') {
    if (!('statement' in o) || !('signatures' in o)) fail(path, 'a key block carries "statement" and "signatures"');
    try {
      payload.statement = parseStatement(o.statement, `${path}.statement`);
      payload.signatures = parseSignatures(o.signatures, `${path}.signatures`);
    } catch (e) {
      if (e instanceof KeyEventError) throw new Malformed(e.message);
      throw e;
    }
  } else if ('statement' in o || 'signatures' in o) {
    fail(path, '"statement" and "signatures" are allowed only on a key block');
  }
  return payload;
}

/**
 * Strictly parses one block found at `position` of a chain.
 * @throws VouchError `malformed` with `index: position`.
 */
export function parseBlock(value: unknown, position: number): Block {
  try {
    const o = object(value, 'block', MEMBERS.block);
    if (typeof o.index !== 'number' || !Number.isSafeInteger(o.index) || o.index < 0) fail('index', 'must be a non-negative integer');
    return {
      comment: text(o.comment, 'comment', LIMITS.comment),
      index: o.index,
      prev_hash: formed(o.prev_hash, 'prev_hash', isHex64, '64 lowercase hex digits'),
      posted: formed(o.posted, 'posted', isDateTime, 'a UTC time YYYY-MM-DDTHH:MM:SSZ'),
      signer: label(o.signer, 'signer'),
      payload: parsePayload(o.payload, position),
      signature: text(o.signature, 'signature'),
      record_hash: formed(o.record_hash, 'record_hash', isHex64, '64 lowercase hex digits'),
    };
  } catch (e) {
    if (e instanceof Malformed) throw new VouchError('malformed', `block ${position}: ${e.message}`, { index: position });
    throw e;
  }
}

/**
 * Parses a block file's text (bounded, strict JSON: `readJson`).
 * @throws VouchError `malformed` with `index: position`.
 */
export function parseBlockText(text: string, position: number): Block {
  if (text.length > LIMITS.blockFileBytes) {
    throw new VouchError('malformed', `block ${position}: file larger than ${LIMITS.blockFileBytes} bytes`, { index: position });
  }
  const json = readJson(text);
  if (json.error !== null) throw new VouchError('malformed', `block ${position}: ${json.error}`, { index: position });
  return parseBlock(json.value, position);
}

// ---------------------------------------------------------------- reading files

// Strict: invalid UTF-8 (bad bytes, overlong forms, surrogates) is refused, never
// replaced by U+FFFD; a byte order mark is kept, so it makes the text not JSON.
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The text of a chain file's bytes, decoded strictly as UTF-8; null when they are not valid UTF-8. */
export function utf8Text(bytes: Uint8Array): string | null {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return null;
  }
}

/**
 * JSON text as I-JSON (RFC 7493) requires, which RFC 8785 assumes: what
 * `JSON.parse` accepts, except that an object must not repeat a member name
 * (`JSON.parse` silently keeps the last one, so a name written twice would
 * pass unseen: the hashes and the signature cover the parsed value only).
 * `error` says why not (never quoting the text), else `value` is the result.
 *
 * The check is exact, and costs a count over the text and a walk of the
 * value: in text `JSON.parse` accepted, a `:` outside string literals occurs
 * exactly once per object member (RFC 8259 `member = string name-separator
 * value`; numbers, literals and whitespace hold none), and `JSON.parse` makes
 * one new object per object literal with one own enumerable property per
 * distinct name (CreateDataProperty: even `"__proto__"` is an own property).
 * So the own keys of every object of the result add up to the number of
 * members exactly when no object repeats a name, at any depth.
 * Members are counted as all the text's colons less those inside string
 * literals. With no backslash in the text (no escapes, the usual case), a
 * literal's characters are its string's, so the colons inside literals are
 * at least those of the strings in the result (names and values; a literal
 * the parse dropped with a repeated member only adds to the text's side):
 * the count is then at least the members, and equals the keys only when
 * nothing repeats. Otherwise the literals are skipped one by one.
 */
export function readJson(text: string): { value: unknown; error: null } | { value: undefined; error: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { value: undefined, error: `not JSON (${jsonErrorText(e)})` };
  }
  if (typeof value !== 'object' || value === null) return { value, error: null };
  const plain = text.indexOf('\\') < 0;
  const shape = ownKeyCount(value, plain);
  const members = plain ? colonCount(text) - shape.colons : memberCount(text);
  if (members !== shape.keys) {
    return { value: undefined, error: `an object repeats the member name ${JSON.stringify(repeatedName(text) ?? '?')}` };
  }
  return { value, error: null };
}

/**
 * A block file's text (already decoded) parsed as `readJson` then
 * `parseBlock` parse it: the same block, or the same first failure, worded
 * as a verifier's `BlockFacts.malformed` (`readJson`'s error, or
 * `parseBlock`'s message). The verifier's hot path: it checks that no object
 * repeats a member name without walking the parsed value. Once `parseBlock`
 * has accepted the value, every object in it has an exact member set, so the
 * own keys add up to a number read off the block (`blockMembers`), and the
 * strings that may hold a `:` are a known few (`blockColons`); with no
 * backslash in the text, `readJson`'s count (the text's colons less those
 * of the strings) then equals that number exactly when nothing repeats
 * (see `readJson`). Anything else (a text `JSON.parse` or `parseBlock`
 * refuses, a backslash, a count that differs) takes `readJson`'s own path,
 * which then words the failure.
 */
export function parseBlockFile(text: string, position: number): { block: Block; malformed: null } | { block: null; malformed: string } {
  let block: Block | null = null;
  if (text.indexOf('\\') < 0) {
    try {
      const value: unknown = JSON.parse(text);
      if (typeof value === 'object' && value !== null) block = parseBlock(value, position);
    } catch {
      block = null; // worded below
    }
    // Key blocks (rare) take readJson's path: their statement's members are not counted here.
    if (block !== null && block.payload.intent !== 'key' && colonCount(text) - blockColons(block) === blockMembers(block)) return { block, malformed: null };
  }
  const json = readJson(text);
  if (json.error !== null) return { block: null, malformed: json.error };
  try {
    return { block: parseBlock(json.value, position), malformed: null };
  } catch (e) {
    if (e instanceof VouchError && e.code === 'malformed') return { block: null, malformed: e.message };
    throw e;
  }
}

/** Own keys of every object of a block `parseBlock` accepted (its member sets are exact). */
function blockMembers(b: Block): number {
  const p = b.payload;
  return 8 + 9 + 2 + 6 + Object.keys(p.tags).length + 8 * p.endorsements.length + (p.authority ? 1 + 3 : 0);
}

/**
 * Colons in every member name and string of a block `parseBlock` accepted:
 * only its free texts can hold one (member names are fixed, and hex, dates,
 * SemVer, unit names and enumerations cannot), and `posted` holds two.
 */
function blockColons(b: Block): number {
  const p = b.payload;
  let n = 2 + colonsIn(b.comment) + colonsIn(b.signer) + colonsIn(b.signature) + colonsIn(p.grammar.version);
  for (const k in p.tags) n += colonsIn(k);
  for (let i = 0; i < p.endorsements.length; i++) {
    const e = p.endorsements[i]!;
    n += colonsIn(e.artifact_url) + colonsIn(e.artifact_hash) + colonsIn(e.comment) + colonsIn(e.license);
  }
  const v = p.vibecode;
  n += colonsIn(v.endorsement) + colonsIn(v.intent) + colonsIn(v.license) + colonsIn(v.signer) + colonsIn(v.uns) + colonsIn(v.semver);
  if (p.authority) n += colonsIn(p.authority.signer) + colonsIn(p.authority.public_key);
  return n;
}

/** Every `:` in the text. */
function colonCount(text: string): number {
  let n = 0;
  for (let k = text.indexOf(':'); k >= 0; k = text.indexOf(':', k + 1)) n++;
  return n;
}

/** Colons in a string (most strings have none: one search). */
function colonsIn(s: string): number {
  let n = 0;
  for (let k = s.indexOf(':'); k >= 0; k = s.indexOf(':', k + 1)) n++;
  return n;
}

/** JSON.parse's message without the excerpt of the text V8 quotes in it (file content stays out of errors). */
function jsonErrorText(e: unknown): string {
  const m = e instanceof Error ? e.message : String(e);
  return m.replace(/^Unexpected token [\s\S]* is not valid JSON$/, 'unexpected token').slice(0, 200);
}

/** Colons outside string literals of valid JSON text: its number of object members. */
function memberCount(text: string): number {
  let members = 0;
  let i = 0;
  for (;;) {
    const q = text.indexOf('"', i);
    const end = q < 0 ? text.length : q;
    for (let k = text.indexOf(':', i); k >= 0 && k < end; k = text.indexOf(':', k + 1)) members++;
    if (q < 0) return members;
    // The closing quote: the next one not escaped by an odd run of backslashes.
    let j = q + 1;
    for (;;) {
      j = text.indexOf('"', j);
      let b = j - 1;
      while (text.charCodeAt(b) === 92) b--;
      if (((j - 1 - b) & 1) === 0) break;
      j++;
    }
    i = j + 1;
  }
}

/**
 * Own keys of every object in a parsed JSON value, walked without recursion
 * (any depth); with `strings`, also the colons in every name and string value.
 */
function ownKeyCount(root: object, strings: boolean): { keys: number; colons: number } {
  let keys = 0;
  let colons = 0;
  const stack: object[] = [root];
  while (stack.length > 0) {
    const x = stack.pop()!;
    if (Array.isArray(x)) {
      for (let i = 0; i < x.length; i++) {
        const v: unknown = x[i];
        if (typeof v === 'object' && v !== null) stack.push(v);
        else if (strings && typeof v === 'string') colons += colonsIn(v);
      }
    } else {
      const o = x as Obj;
      for (const k in o) {
        keys++;
        const v = o[k];
        if (typeof v === 'object' && v !== null) stack.push(v);
        else if (strings && typeof v === 'string') colons += colonsIn(v);
        if (strings) colons += colonsIn(k);
      }
    }
  }
  return { keys, colons };
}

/**
 * The first member name repeated in an object of valid JSON text (for the
 * error message only; `readJson` decides by counting).
 */
function repeatedName(text: string): string | null {
  const objects: (Set<string> | null)[] = []; // null: an array
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34) {
      let j = i + 1;
      while (text.charCodeAt(j) !== 34) j += text.charCodeAt(j) === 92 ? 2 : 1;
      const top = objects[objects.length - 1];
      // A string right after `{` or `,` inside an object is a member name.
      let p = i - 1;
      while (p >= 0 && /\s/.test(text[p]!)) p--;
      if (top && (text[p] === '{' || text[p] === ',')) {
        const name = JSON.parse(text.slice(i, j + 1)) as string;
        if (top.has(name)) return name;
        top.add(name);
      }
      i = j;
    } else if (c === 123) objects.push(new Set());
    else if (c === 91) objects.push(null);
    else if (c === 125 || c === 93) objects.pop();
  }
  return null;
}

/**
 * Strictly parses a checkpoint.
 * @throws VouchError `checkpoint_mismatch` (index null) when it is not one.
 */
export function parseCheckpoint(value: unknown): Checkpoint {
  try {
    const o = object(value, 'checkpoint', MEMBERS.checkpoint);
    if (typeof o.size !== 'number' || !Number.isSafeInteger(o.size) || o.size < 1) fail('checkpoint.size', 'must be a positive integer');
    return {
      size: o.size,
      head: formed(o.head, 'checkpoint.head', isHex64, '64 lowercase hex digits'),
      signer: label(o.signer, 'checkpoint.signer'),
      timestamp: formed(o.timestamp, 'checkpoint.timestamp', isDateTime, 'a UTC time YYYY-MM-DDTHH:MM:SSZ'),
      signature: text(o.signature, 'checkpoint.signature'),
    };
  } catch (e) {
    if (e instanceof Malformed) throw new VouchError('checkpoint_mismatch', `malformed checkpoint: ${e.message}`, { index: null });
    throw e;
  }
}

/** The block file form: pretty-printed JSON (2 spaces) and a final newline. */
export function formatBlockFile(block: Block): string {
  return JSON.stringify(block, null, 2) + '\n';
}

export function formatCheckpointFile(checkpoint: Checkpoint): string {
  return JSON.stringify(checkpoint, null, 2) + '\n';
}
