/**
 * Building and signing blocks and checkpoints (docs/spec/design.md §1.2–1.6), and the two
 * digests every check recomputes: the signed message and the record hash.
 *
 * Trusts: the `Signer` it is handed (the authority key) and the caller's
 * clock (`posted` is a parameter; `chain/` never reads the time).
 * Must hold: everything built here parses with `parseBlock` and verifies
 * with `ChainVerifier`; `posted` never goes back in time (a clock behind the
 * previous block is clamped to the previous block's time).
 */
import type { CryptoBackend, HashAlgorithm, Signer } from './crypto-backend.ts';
import { hashBytes } from './crypto-backend.ts';
import { canonicalize } from './jcs.ts';
import { base64Encode, hexEncode, utf8 } from './encoding.ts';
import { grammarHash, keyGrammarHash } from './schema.ts';
import type { SignedStatement } from './key-events.ts';
import { formatArtifactHash } from './hash-algorithms.ts';
import {
  type Block,
  type Checkpoint,
  type Endorsement,
  type Payload,
  type UnhashedBlock,
  GRAMMAR_VERSIONS,
  KEY_GRAMMAR_VERSION,
  SIGNATURE_ALGORITHM,
  ZERO_HASH,
  formatDateTime,
  parseBlock,
} from './block.ts';

/** The bytes an authority signs for a block: UTF-8 of JCS(payload). */
export function payloadMessage(payload: Payload): Uint8Array {
  return utf8(canonicalize(payload));
}

/** sha256(JCS(block without record_hash)), lowercase hex. */
export function computeRecordHash(block: UnhashedBlock | Block, backend: CryptoBackend): string {
  const { record_hash: _drop, ...rest } = block as Block;
  return hexEncode(hashBytes(backend, 'sha256', utf8(canonicalize(rest))));
}

/**
 * JCS of a *parsed* payload (from `parseBlock`), written from the schema
 * instead of sorting member names at run time: the verifier's hot path.
 * Valid only because the parser fixes the member set and rejects lone
 * surrogates (so `JSON.stringify` of a string is its JCS form); values whose
 * parsed form admits no character JSON escapes (hex, dates, SemVer, unit
 * names, license ids, enumerations, base64) are quoted without it. Equal to
 * `canonicalize(payload)` byte for byte (test/hostile/fuzz-parsers.test.ts checks it
 * on real and generated payloads, test/unit/chain-vectors.test.ts on the vectors).
 * Members in UTF-16 order.
 */
export function parsedPayloadJcs(p: Payload): string {
  if (p.intent === 'key') return canonicalize(p); // rare: the general JCS
  const s = JSON.stringify;
  let out = '{';
  if (p.authority) {
    const a = p.authority;
    out += `"authority":{"public_key":"${a.public_key}","signature_algorithm":"${a.signature_algorithm}","signer":${s(a.signer)}},`;
  }
  out += `"effective_date":"${p.effective_date}","endorsements":[`;
  for (let i = 0; i < p.endorsements.length; i++) {
    const e = p.endorsements[i]!;
    out +=
      (i ? ',' : '') +
      `{"artifact_hash":${s(e.artifact_hash)},"artifact_url":${s(e.artifact_url)},"comment":${s(e.comment)},` +
      `"endorsement":"${e.endorsement}","license":"${e.license}","name":"${e.name}","semver":"${e.semver}",` +
      `"signature_algorithm":"${e.signature_algorithm}"}`;
  }
  const g = p.grammar;
  out += `],"grammar":{"hash":"${g.hash}","version":"${g.version}"},"intent":"${p.intent}","semver":"${p.semver}","tags":{`;
  const names = Object.keys(p.tags);
  if (names.length > 1) names.sort();
  for (let i = 0; i < names.length; i++) out += (i ? ',' : '') + s(names[i]) + ':' + (p.tags[names[i]!] ? 'true' : 'false');
  const v = p.vibecode;
  return (
    out +
    `},"target_hash":"${p.target_hash}","uns":"${p.uns}","vibecode":{"endorsement":${s(v.endorsement)},` +
    `"intent":${s(v.intent)},"license":${s(v.license)},"semver":${s(v.semver)},"signer":${s(v.signer)},"uns":${s(v.uns)}}}`
  );
}

/**
 * JCS of a *parsed* block without record_hash is `before + payloadJcs +
 * after`: the two strings around the payload's JCS (verification computes
 * that anyway for the signature). Valid only for blocks from `parseBlock`,
 * whose member set is exact; members in JCS order: comment, index, payload,
 * posted, prev_hash, signature, signer.
 */
export function recordJcsAround(block: Block): [before: string, after: string] {
  const s = JSON.stringify;
  // posted and prev_hash are parsed forms without characters JSON escapes.
  return [
    `{"comment":${s(block.comment)},"index":${block.index},"payload":`,
    `,"posted":"${block.posted}","prev_hash":"${block.prev_hash}","signature":${s(block.signature)},"signer":${s(block.signer)}}`,
  ];
}

/** The bytes an authority signs for a checkpoint: JCS of it without `signature`. */
export function checkpointMessage(checkpoint: Omit<Checkpoint, 'signature'> | Checkpoint): Uint8Array {
  const { signature: _drop, ...rest } = checkpoint as Checkpoint;
  return utf8(canonicalize(rest));
}

/** Hex digest of bytes under an artifact hash algorithm, as `<alg>:<hex>`. */
export function artifactHashOf(backend: CryptoBackend, algorithm: HashAlgorithm, bytes: Uint8Array): string {
  return formatArtifactHash(algorithm, hexEncode(hashBytes(backend, algorithm, bytes)));
}

export interface EndorsementInput {
  url: string;
  /** `<algorithm>:<hex>` of the artifact bytes. */
  artifactHash: string;
  name: string;
  semver: string;
  license: string;
  comment?: string;
}

interface CommonInput {
  signer: Signer;
  backend: CryptoBackend;
  /** Milliseconds since the epoch: the caller's clock. */
  now: number;
  comment?: string;
  /** `YYYY-MM-DD`; default: the UTC date of `posted`. */
  effectiveDate?: string;
  tags?: Record<string, boolean>;
}

function postedAfter(prev: Block | null, now: number): string {
  const posted = formatDateTime(now);
  return prev !== null && posted < prev.posted ? prev.posted : posted;
}

function seal(unsigned: Omit<UnhashedBlock, 'signature'>, signer: Signer, backend: CryptoBackend): Block {
  const signature = base64Encode(signer.sign(payloadMessage(unsigned.payload)));
  const body: UnhashedBlock = { ...unsigned, signature };
  const block: Block = { ...body, record_hash: computeRecordHash(body, backend) };
  // Whatever we sign must pass our own strict parser (which throws otherwise).
  parseBlock(block, block.index);
  return block;
}

/** Block 0: names the signer id and public key of the authority. */
export function buildAuthorityBlock(input: CommonInput & { uns: string; semver?: string; license?: string }): Block {
  const posted = postedAfter(null, input.now);
  const semver = input.semver ?? '1.0.0';
  const license = input.license ?? 'CC0-1.0';
  return seal(
    {
      comment: input.comment ?? 'authority block',
      index: 0,
      prev_hash: ZERO_HASH,
      posted,
      signer: input.signer.id,
      payload: {
        authority: { public_key: base64Encode(input.signer.publicKey), signature_algorithm: SIGNATURE_ALGORITHM, signer: input.signer.id },
        effective_date: input.effectiveDate ?? posted.slice(0, 10),
        endorsements: [],
        grammar: { hash: grammarHash(input.backend), version: GRAMMAR_VERSIONS[0]! },
        intent: 'authority',
        semver,
        tags: input.tags ?? {},
        target_hash: 'self',
        uns: input.uns,
        vibecode: { endorsement: 'authority', intent: 'authority', license, signer: input.signer.id, uns: input.uns, semver },
      },
    },
    input.signer,
    input.backend,
  );
}

/**
 * An `endorse` block after `prev` (the current head) binding each URL to its
 * artifact hash. `uns`/`semver` name the published unit (default: the
 * first entry's name and semver).
 */
export function buildEndorseBlock(
  input: CommonInput & {
    prev: Block;
    entries: EndorsementInput[];
    uns?: string;
    semver?: string;
  },
): Block {
  const first = input.entries[0];
  if (first === undefined) throw new TypeError('an endorse block needs at least one entry');
  const uns = input.uns ?? first.name;
  const semver = input.semver ?? first.semver;
  const posted = postedAfter(input.prev, input.now);
  const endorsements: Endorsement[] = input.entries.map((e) => ({
    artifact_hash: e.artifactHash,
    artifact_url: e.url,
    comment: e.comment ?? '',
    endorsement: 'provenance',
    license: e.license,
    name: e.name,
    semver: e.semver,
    signature_algorithm: SIGNATURE_ALGORITHM,
  }));
  return seal(
    {
      comment: input.comment ?? `${uns} ${semver}`,
      index: input.prev.index + 1,
      prev_hash: input.prev.record_hash,
      posted,
      signer: input.signer.id,
      payload: {
        effective_date: input.effectiveDate ?? posted.slice(0, 10),
        endorsements,
        grammar: { hash: grammarHash(input.backend), version: GRAMMAR_VERSIONS[0]! },
        intent: 'endorse',
        semver,
        tags: input.tags ?? {},
        target_hash: 'self',
        uns,
        vibecode: { endorsement: 'provenance', intent: 'endorse', license: first.license, signer: input.signer.id, uns, semver },
      },
    },
    input.signer,
    input.backend,
  );
}

/** A `revoke` block after `prev` naming the endorse block `target`. */
export function buildRevokeBlock(input: CommonInput & { prev: Block; target: Block }): Block {
  const { target } = input;
  const posted = postedAfter(input.prev, input.now);
  return seal(
    {
      comment: input.comment ?? `revoke block ${target.index}`,
      index: input.prev.index + 1,
      prev_hash: input.prev.record_hash,
      posted,
      signer: input.signer.id,
      payload: {
        effective_date: input.effectiveDate ?? posted.slice(0, 10),
        endorsements: [],
        grammar: { hash: grammarHash(input.backend), version: GRAMMAR_VERSIONS[0]! },
        intent: 'revoke',
        semver: target.payload.semver,
        tags: input.tags ?? {},
        target_hash: target.record_hash,
        uns: target.payload.uns,
        vibecode: {
          endorsement: 'provenance',
          intent: 'revoke',
          license: target.payload.vibecode.license,
          signer: input.signer.id,
          uns: target.payload.uns,
          semver: target.payload.semver,
        },
      },
    },
    input.signer,
    input.backend,
  );
}

/**
 * A `key` block after `prev` carrying a root-signed statement
 * (docs/spec/key-events.md). `signer` must be the online key the statement puts
 * in force (it signs the block: proof it holds the key). The caller checks
 * the statement against the chain's key state first (`applyKeyEvent`).
 */
export function buildKeyBlock(input: CommonInput & { prev: Block; signed: SignedStatement }): Block {
  const st = input.signed.statement;
  const posted = postedAfter(input.prev, input.now);
  const what =
    st.action === 'root'
      ? `root version ${st.root.version}`
      : st.action === 'key'
        ? 'online key rotation'
        : `compromise of ${st.compromised} after block ${st.good_through}`;
  const semver = `${st.sequence}.0.0`;
  return seal(
    {
      comment: input.comment ?? `key event ${st.sequence}: ${what}`,
      index: input.prev.index + 1,
      prev_hash: input.prev.record_hash,
      posted,
      signer: input.signer.id,
      payload: {
        effective_date: input.effectiveDate ?? posted.slice(0, 10),
        endorsements: [],
        grammar: { hash: keyGrammarHash(input.backend), version: KEY_GRAMMAR_VERSION },
        intent: 'key',
        semver,
        signatures: input.signed.signatures.map((x) => ({ public_key: x.public_key, signature: x.signature })),
        statement: st,
        tags: input.tags ?? {},
        target_hash: 'self',
        uns: 'vouch/keys',
        vibecode: { endorsement: 'key', intent: 'key', license: 'CC0-1.0', signer: input.signer.id, uns: 'vouch/keys', semver },
      },
    },
    input.signer,
    input.backend,
  );
}

/** The signed statement of the chain head (docs/spec/design.md §1.6). */
export function buildCheckpoint(input: { head: Block; signer: Signer; now: number }): Checkpoint {
  const timestamp = postedAfter(input.head, input.now);
  const unsigned = { head: input.head.record_hash, signer: input.signer.id, size: input.head.index + 1, timestamp };
  return { ...unsigned, signature: base64Encode(input.signer.sign(checkpointMessage(unsigned))) };
}
