/**
 * The JSON Schema (draft 2020-12) of the version 1.0 payload, as vouch ships
 * it, and the grammar hash blocks carry: `grammar.hash` =
 * sha256(JCS(PAYLOAD_SCHEMA)). Verification checks only that the grammar
 * version is known and the hash is 64 hex digits (docs/spec/design.md §1.3); the schema is
 * published for other implementations and tooling.
 */
import type { CryptoBackend } from './crypto-backend.ts';
import { hashBytes } from './crypto-backend.ts';
import { canonicalize } from './jcs.ts';
import { hexEncode, utf8 } from './encoding.ts';

const unitName = { type: 'string', pattern: '^[A-Za-z0-9@_][A-Za-z0-9._@+-]{0,127}/[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}$' };
const semver = { type: 'string', description: 'SemVer 2.0.0' };
const hex64 = { type: 'string', pattern: '^[0-9a-f]{64}$' };

export const PAYLOAD_SCHEMA = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  $id: 'urn:vouch:payload:1.0',
  title: 'vouch block payload, grammar 1.0',
  type: 'object',
  additionalProperties: false,
  required: ['intent', 'effective_date', 'endorsements', 'grammar', 'tags', 'target_hash', 'uns', 'semver', 'vibecode'],
  properties: {
    intent: { enum: ['authority', 'endorse', 'revoke'] },
    effective_date: { type: 'string', pattern: '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' },
    endorsements: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['endorsement', 'artifact_url', 'artifact_hash', 'signature_algorithm', 'name', 'semver', 'license', 'comment'],
        properties: {
          endorsement: { const: 'provenance' },
          artifact_url: { type: 'string', pattern: '^[Hh][Tt][Tt][Pp][Ss]?://' },
          artifact_hash: { type: 'string', pattern: '^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}|sha3-256:[0-9a-f]{64}|blake3:[0-9a-f]{64})$' },
          signature_algorithm: { const: 'ed25519' },
          name: unitName,
          semver,
          license: { type: 'string' },
          comment: { type: 'string' },
        },
      },
    },
    grammar: {
      type: 'object',
      additionalProperties: false,
      required: ['hash', 'version'],
      properties: { hash: hex64, version: { const: '1.0' } },
    },
    tags: { type: 'object', additionalProperties: { type: 'boolean' } },
    target_hash: { anyOf: [{ const: 'self' }, hex64] },
    uns: unitName,
    semver,
    vibecode: {
      type: 'object',
      additionalProperties: false,
      required: ['endorsement', 'intent', 'license', 'signer', 'uns', 'semver'],
      properties: Object.fromEntries(['endorsement', 'intent', 'license', 'signer', 'uns', 'semver'].map((k) => [k, { type: 'string' }])),
    },
    authority: {
      type: 'object',
      additionalProperties: false,
      required: ['signer', 'public_key', 'signature_algorithm'],
      properties: {
        signer: { type: 'string' },
        public_key: { type: 'string', contentEncoding: 'base64' },
        signature_algorithm: { const: 'ed25519' },
      },
    },
  },
} as const;

const cache = new WeakMap<CryptoBackend, string>();

/** sha256 of JCS of the shipped payload schema (the `grammar.hash` of new blocks). */
export function grammarHash(backend: CryptoBackend): string {
  let h = cache.get(backend);
  if (h === undefined) {
    h = hexEncode(hashBytes(backend, 'sha256', utf8(canonicalize(PAYLOAD_SCHEMA))));
    cache.set(backend, h);
  }
  return h;
}

/**
 * Grammar 1.1: the payload of a key block (intent `key`, docs/spec/key-events.md):
 * 1.0's members with the intent `key`, the root-signed `statement` and the
 * holders' `signatures`. Every other block stays 1.0.
 */
const b64key = { type: 'string', contentEncoding: 'base64', minLength: 44, maxLength: 44 };
const online = {
  type: 'object',
  additionalProperties: false,
  required: ['signer', 'public_key'],
  properties: { signer: { type: 'string' }, public_key: b64key },
};
export const KEY_PAYLOAD_SCHEMA = {
  ...PAYLOAD_SCHEMA,
  $id: 'urn:vouch:payload:1.1',
  title: 'vouch key block payload, grammar 1.1',
  required: [...PAYLOAD_SCHEMA.required, 'statement', 'signatures'],
  properties: {
    ...PAYLOAD_SCHEMA.properties,
    intent: { const: 'key' },
    endorsements: { type: 'array', maxItems: 0 },
    grammar: { ...PAYLOAD_SCHEMA.properties.grammar, properties: { hash: hex64, version: { const: '1.1' } } },
    target_hash: { const: 'self' },
    statement: {
      type: 'object',
      required: ['action', 'chain', 'sequence', 'online'],
      properties: {
        action: { enum: ['root', 'key', 'compromise'] },
        chain: hex64,
        sequence: { type: 'integer', minimum: 1 },
        online,
        root: {
          type: 'object',
          additionalProperties: false,
          required: ['version', 'threshold', 'keys'],
          properties: {
            version: { type: 'integer', minimum: 1 },
            threshold: { type: 'integer', minimum: 1 },
            keys: { type: 'array', items: b64key, minItems: 1, maxItems: 32 },
          },
        },
        compromised: b64key,
        good_through: { type: 'integer', minimum: 0 },
      },
    },
    signatures: {
      type: 'array',
      maxItems: 64,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['public_key', 'signature'],
        properties: { public_key: b64key, signature: { type: 'string', contentEncoding: 'base64' } },
      },
    },
  },
} as const;

const keyCache = new WeakMap<CryptoBackend, string>();

/** sha256 of JCS of the key block schema (the `grammar.hash` of key blocks). */
export function keyGrammarHash(backend: CryptoBackend): string {
  let h = keyCache.get(backend);
  if (h === undefined) {
    h = hexEncode(hashBytes(backend, 'sha256', utf8(canonicalize(KEY_PAYLOAD_SCHEMA))));
    keyCache.set(backend, h);
  }
  return h;
}
