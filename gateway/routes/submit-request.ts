/**
 * Strict, bounded parsing of the `POST /v1/submit` body (docs/spec/design.md
 * §3.5) and of `POST /v1/revoke` (`parseRevokeRequest`).
 * Owns: the accepted forms: single {url, name, semver, license, ...}, multi
 * {uns, semver, endorsements: [...]}, and blocks {blocks: [multi, ...]}
 * (appended together, all or none; a URL once per body); `expect` claims
 * (1..64 artifact hashes or Go `h1:`), compared with the fetched bytes,
 * never signed as given.
 * Trusts: nothing in the body (content type, size, JSON syntax and the
 * token were checked by the HTTP layer).
 * Must hold: what this accepts builds a block the strict parser of
 * chain/block.ts accepts unchanged, under `LIMITS.blockFileBytes`; every
 * refusal is `bad_request` with one line naming the field.
 */
import { VouchError } from '../../chain/errors.ts';
import { LIMITS, isArtifactUrl, isDate, isLicenseId, isSemver, isUnitName } from '../../chain/block.ts';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import type { ClaimKind } from '../../artifacts/claim-digest.ts';
import { DEFAULT_HASH_ALGORITHM, HASH_ALGORITHMS, isHashAlgorithm, parseArtifactHash } from '../../chain/hash-algorithms.ts';

/** Most artifacts one submit may endorse (one block, or all blocks of the blocks form together). */
export const MAX_SUBMIT_ENDORSEMENTS = 1000;
/** Most blocks of one submit in the blocks form. */
export const MAX_SUBMIT_BLOCKS = 256;

export interface SubmitEntry {
  url: string;
  name: string;
  semver: string;
  license: string;
  /** Entry comment ('' when absent). */
  comment: string;
  /** The claimed hashes (any one must match the fetched bytes): `<alg>:<hex>` or `h1:<base64>`. */
  expect?: string[];
  /** The algorithm of this entry's artifact_hash (the request's when absent). */
  algorithm?: HashAlgorithm;
}

export interface SubmitRequest {
  form: 'single' | 'multi';
  /** The published unit (`owner/name`): `uns`, or `name` in the single form. */
  uns: string;
  semver: string;
  /** Block comment; undefined = the builder's default (`<uns> <semver>`). */
  comment: string | undefined;
  /** `YYYY-MM-DD`; undefined = today (UTC) at signing time. */
  effectiveDate: string | undefined;
  tags: Record<string, boolean>;
  algorithm: HashAlgorithm;
  /** At least one; URLs distinct, in request order. */
  entries: SubmitEntry[];
}

const SINGLE_KEYS = ['url', 'name', 'semver', 'license', 'comment', 'expect', 'effective_date', 'tags', 'algorithm'] as const;
const MULTI_KEYS = ['uns', 'semver', 'comment', 'effective_date', 'tags', 'algorithm', 'endorsements'] as const;
const ENTRY_KEYS = ['url', 'name', 'semver', 'license', 'comment', 'expect', 'algorithm'] as const;
const H1_RE = /^h1:[A-Za-z0-9+/]{43}=$/;
const EXTRA_CLAIM_RE = /^(sha1:[0-9a-f]{40}|sha384:[0-9a-f]{96})$/;
/** Most claims one entry may carry. */
export const MAX_CLAIMS = 64;

export function claimKind(claim: string): ClaimKind {
  if (claim.startsWith('h1:')) return 'h1';
  return claim.slice(0, claim.indexOf(':')) as ClaimKind;
}

function isClaim(v: string): boolean {
  return H1_RE.test(v) || EXTRA_CLAIM_RE.test(v) || typeof parseArtifactHash(v) !== 'string';
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
// eslint-disable-next-line no-control-regex
const CONTROL_RE = /[\u0000-\u001f\u007f]/;
/** Names a plain-object assignment would not store (the block parser builds tags that way). */
const RESERVED_TAG_NAMES = new Set(['__proto__']);
/** Generous per-entry and per-block overhead of the pretty-printed block file. */
const ENTRY_OVERHEAD = 1024;
const BLOCK_OVERHEAD = 4096;

function bad(message: string): never {
  throw new VouchError('bad_request', message);
}

type Obj = Record<string, unknown>;

function isObject(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function has(o: Obj, k: string): boolean {
  return Object.hasOwn(o, k);
}

function checkMembers(o: Obj, where: string, allowed: readonly string[], hint: string): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) bad(`${where}unknown member ${JSON.stringify(k.slice(0, 64))}${hint}`);
  }
}

function str(o: Obj, key: string, field: string, max: number): string {
  if (!has(o, key)) bad(`missing ${field}`);
  const v = o[key];
  if (typeof v !== 'string') bad(`${field} must be a string`);
  if (v.length > max) bad(`${field} is longer than ${max} characters`);
  if (LONE_SURROGATE.test(v)) bad(`${field} holds a lone surrogate`);
  return v;
}

function optStr(o: Obj, key: string, field: string, max: number): string | undefined {
  return has(o, key) ? str(o, key, field, max) : undefined;
}

function formed(o: Obj, key: string, field: string, test: (s: string) => boolean, form: string, max: number = LIMITS.shortText): string {
  const s = str(o, key, field, max);
  if (!test(s)) bad(`${field} must be ${form}, got ${JSON.stringify(s.slice(0, 100))}`);
  return s;
}

const url = (o: Obj, field: string) => formed(o, 'url', field, isArtifactUrl, 'an absolute http(s) URL', LIMITS.url);
const unit = (o: Obj, key: string, field: string) => formed(o, key, field, isUnitName, '<owner>/<name>');
const semver = (o: Obj, field: string) => formed(o, 'semver', field, isSemver, 'a SemVer 2.0.0 version');
const license = (o: Obj, field: string) => formed(o, 'license', field, isLicenseId, 'an SPDX-style license id');

function expect(o: Obj, field: string): { expect?: string[] } {
  if (!has(o, 'expect')) return {};
  const raw = o.expect;
  const list = Array.isArray(raw) ? raw : [raw];
  if (list.length === 0 || list.length > MAX_CLAIMS) bad(`${field} must hold 1 to ${MAX_CLAIMS} claims`);
  const out: string[] = [];
  list.forEach((v: unknown, i: number) => {
    const where = Array.isArray(raw) ? `${field}[${i}]` : field;
    if (typeof v !== 'string' || v.length > 200 || !isClaim(v)) {
      bad(
        `${where} must be <${['sha1', 'sha384', ...Object.keys(HASH_ALGORITHMS)].join('|')}>:<lowercase hex> or h1:<base64>, got ${JSON.stringify(String(v).slice(0, 100))}`,
      );
    }
    if (!out.includes(v)) out.push(v);
  });
  return { expect: out };
}

function tags(o: Obj): Record<string, boolean> {
  if (!has(o, 'tags')) return {};
  const t = o.tags;
  if (!isObject(t)) bad('tags must be an object of tag name -> boolean');
  const names = Object.keys(t);
  if (names.length > LIMITS.tags) bad(`tags has more than ${LIMITS.tags} entries`);
  const out: [string, boolean][] = [];
  for (const k of names) {
    const shown = JSON.stringify(k.slice(0, 64));
    if (k.length === 0 || k.length > LIMITS.shortText || CONTROL_RE.test(k) || LONE_SURROGATE.test(k)) {
      bad(`tags name ${shown} must be a non-empty single-line string of at most ${LIMITS.shortText} characters`);
    }
    if (RESERVED_TAG_NAMES.has(k)) bad(`tags name ${shown} is reserved`);
    if (typeof t[k] !== 'boolean') bad(`tags.${k.slice(0, 64)} must be a boolean`);
    out.push([k, t[k] as boolean]);
  }
  // fromEntries defines own data properties (no setter is ever invoked).
  return Object.fromEntries(out);
}

function algorithmOf(o: Obj, field: string): HashAlgorithm {
  const a = str(o, 'algorithm', field, LIMITS.shortText);
  if (!isHashAlgorithm(a)) bad(`${field} must be one of ${Object.keys(HASH_ALGORITHMS).join(', ')}, got ${JSON.stringify(a.slice(0, 64))}`);
  return a;
}

function common(o: Obj): Pick<SubmitRequest, 'comment' | 'effectiveDate' | 'tags' | 'algorithm'> {
  const comment = optStr(o, 'comment', 'comment', LIMITS.comment);
  const effectiveDate = has(o, 'effective_date') ? formed(o, 'effective_date', 'effective_date', isDate, 'a date YYYY-MM-DD') : undefined;
  const t = tags(o);
  const algorithm = has(o, 'algorithm') ? algorithmOf(o, 'algorithm') : DEFAULT_HASH_ALGORITHM;
  return { comment, effectiveDate, tags: t, algorithm };
}

/** Rough upper bound of the block file's length, from the request's strings. */
function estimatedBlockChars(req: SubmitRequest): number {
  const s = (x: string) => JSON.stringify(x).length;
  let n = BLOCK_OVERHEAD + s(req.uns) * 2 + s(req.semver) * 2 + s(req.comment ?? `${req.uns} ${req.semver}`);
  for (const [k] of Object.entries(req.tags)) n += s(k) + 16;
  for (const e of req.entries) n += ENTRY_OVERHEAD + s(e.url) + s(e.name) + s(e.semver) + s(e.license) + s(e.comment);
  return n;
}

/**
 * Validates a submit body (already JSON-parsed).
 * @throws VouchError `bad_request` naming the first offending field.
 */
export function parseSubmitRequest(body: unknown): SubmitRequest {
  if (!isObject(body)) bad('the body must be a JSON object');
  let req: SubmitRequest;
  if (has(body, 'uns') || has(body, 'endorsements')) {
    checkMembers(body, '', MULTI_KEYS, ' (the multi-artifact form takes uns, semver, endorsements, comment, effective_date, tags, algorithm)');
    const uns = unit(body, 'uns', 'uns');
    const sv = semver(body, 'semver');
    const c = common(body);
    if (!has(body, 'endorsements')) bad('missing endorsements');
    const list = body.endorsements;
    if (!Array.isArray(list)) bad('endorsements must be an array');
    if (list.length === 0) bad('endorsements must hold at least one entry');
    if (list.length > MAX_SUBMIT_ENDORSEMENTS) bad(`endorsements has more than ${MAX_SUBMIT_ENDORSEMENTS} entries`);
    const entries: SubmitEntry[] = [];
    const seen = new Set<string>();
    list.forEach((item: unknown, i: number) => {
      const where = `endorsements[${i}]`;
      if (!isObject(item)) bad(`${where} must be an object`);
      checkMembers(item, `${where}: `, ENTRY_KEYS, ' (an entry takes url, name, semver, license, comment, expect, algorithm)');
      const e: SubmitEntry = {
        url: url(item, `${where}.url`),
        name: unit(item, 'name', `${where}.name`),
        semver: semver(item, `${where}.semver`),
        license: license(item, `${where}.license`),
        comment: optStr(item, 'comment', `${where}.comment`, LIMITS.comment) ?? '',
        ...expect(item, `${where}.expect`),
        ...(has(item, 'algorithm') ? { algorithm: algorithmOf(item, `${where}.algorithm`) } : {}),
      };
      if (seen.has(e.url)) bad(`${where}.url repeats ${JSON.stringify(e.url.slice(0, 200))}: a URL appears at most once per block`);
      seen.add(e.url);
      entries.push(e);
    });
    req = { form: 'multi', uns, semver: sv, ...c, entries };
  } else {
    checkMembers(
      body,
      '',
      SINGLE_KEYS,
      ' (the body takes url, name, semver, license, comment, expect, effective_date, tags, algorithm; or uns, semver, endorsements)',
    );
    const u = url(body, 'url');
    const name = unit(body, 'name', 'name');
    const sv = semver(body, 'semver');
    const lic = license(body, 'license');
    const c = common(body);
    const x = expect(body, 'expect');
    req = { form: 'single', uns: name, semver: sv, ...c, entries: [{ url: u, name, semver: sv, license: lic, comment: c.comment ?? '', ...x }] };
  }
  if (estimatedBlockChars(req) > LIMITS.blockFileBytes) {
    bad(`endorsements: the block would be larger than ${LIMITS.blockFileBytes} bytes (shorten comments or split the release)`);
  }
  return req;
}

/** A submit body: one block's request, or the blocks form's several (`batch`). */
export interface SubmitBody {
  requests: SubmitRequest[];
  batch: boolean;
}

/**
 * Validates a submit body of any form (already JSON-parsed): the blocks form
 * `{blocks: [...]}`, each element a multi-form body, or a single or multi body.
 * @throws VouchError `bad_request` naming the first offending field.
 */
export function parseSubmitBody(body: unknown): SubmitBody {
  if (!isObject(body) || !has(body, 'blocks')) return { requests: [parseSubmitRequest(body)], batch: false };
  checkMembers(body, '', ['blocks'], ' (the blocks form takes only blocks: an array of multi-artifact bodies)');
  const list = body.blocks;
  if (!Array.isArray(list)) bad('blocks must be an array');
  if (list.length === 0 || list.length > MAX_SUBMIT_BLOCKS) bad(`blocks must hold 1 to ${MAX_SUBMIT_BLOCKS} blocks`);
  const requests: SubmitRequest[] = [];
  const seen = new Set<string>();
  let entries = 0;
  list.forEach((item: unknown, k: number) => {
    if (!isObject(item) || !has(item, 'endorsements')) bad(`blocks[${k}] must be a multi-artifact body (uns, semver, endorsements, ...)`);
    let req: SubmitRequest;
    try {
      req = parseSubmitRequest(item);
    } catch (e) {
      if (e instanceof VouchError) bad(`blocks[${k}]: ${e.message}`);
      throw e;
    }
    entries += req.entries.length;
    if (entries > MAX_SUBMIT_ENDORSEMENTS) bad(`blocks hold more than ${MAX_SUBMIT_ENDORSEMENTS} entries together`);
    req.entries.forEach((e, i) => {
      if (seen.has(e.url)) bad(`blocks[${k}].endorsements[${i}].url repeats ${JSON.stringify(e.url.slice(0, 200))}: a URL appears at most once per submit`);
      seen.add(e.url);
    });
    requests.push(req);
  });
  return { requests, batch: true };
}

/** A `POST /v1/revoke` body: `{url, semver?}` or `{block}`, with optional effective_date and comment. */
export interface RevokeRequest {
  target: { url: string; semver?: string } | { block: number };
  effectiveDate: string | undefined;
  comment: string | undefined;
}

const REVOKE_KEYS = ['url', 'semver', 'block', 'effective_date', 'comment'] as const;

/**
 * Validates a revoke body (already JSON-parsed).
 * @throws VouchError `bad_request` naming the first offending field.
 */
export function parseRevokeRequest(body: unknown): RevokeRequest {
  if (!isObject(body)) bad('the body must be a JSON object');
  checkMembers(body, '', REVOKE_KEYS, ' (the body takes url and semver, or block; and effective_date, comment)');
  const effectiveDate = has(body, 'effective_date') ? formed(body, 'effective_date', 'effective_date', isDate, 'a date YYYY-MM-DD') : undefined;
  const comment = optStr(body, 'comment', 'comment', LIMITS.comment);
  if (has(body, 'block')) {
    if (has(body, 'url') || has(body, 'semver')) bad('give either block or url (with semver), not both');
    const n = body.block;
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) bad('block must be a block index (an integer >= 0)');
    return { target: { block: n }, effectiveDate, comment };
  }
  if (!has(body, 'url')) bad('missing url (or block)');
  const u = url(body, 'url');
  const sv = has(body, 'semver') ? semver(body, 'semver') : undefined;
  return { target: sv === undefined ? { url: u } : { url: u, semver: sv }, effectiveDate, comment };
}
