/**
 * Fuzz targets of the chain's own text formats and the gateway's small
 * request grammars: block files, JCS, signed notes and cosignatures,
 * checkpoints (note and JSON), the witness's add-checkpoint body, tile paths
 * and proof parameters, selection queries and JSON bodies.
 * Property: a result or the documented VouchError; round trips where an
 * encoder exists (formatNote, formatCheckpoint, formatAddCheckpoint,
 * tilePath, canonicalize).
 */
import fc from 'fast-check';
import { isArtifactUrl, parseBlockFile, parseCheckpoint as parseCheckpointJson } from '../../../chain/block.ts';
import { canonicalize } from '../../../chain/jcs.ts';
import { formatNote, parseNote, verifyCosignature, verifyNoteSignature } from '../../../chain/note.ts';
import { formatCheckpoint, openCheckpoint, parseCheckpoint } from '../../../chain/tlog-checkpoint.ts';
import { parseTilePath, tilePath } from '../../../chain/merkle-tree.ts';
import { formatAddCheckpoint, parseAddCheckpoint } from '../../../gateway/transparency/witness.ts';
import { intParams } from '../../../gateway/routes/transparency.ts';
import { acceptsJson, parseJsonBody, parseSelectionQuery } from '../../../gateway/http/http-util.ts';
import { checkQuorum, parsePolicy, policyLogFor } from '../../../chain/tlog-policy.ts';
import { Refusal, parseConsistencyAnswer, parseInclusionAnswer, parseProofObject } from '../../../tools/client/tlog-client.ts';
import { nodeBackend } from '../../../platform/node-crypto.ts';
import { testSigner } from '../../helpers/chain-fixture.ts';
import { check, corpusOf, mix, mutatedBytes, mutatedJson, mutatedLines, randomInput, refusedOnly, type FuzzTarget } from '../target.ts';

const utf8 = (b: Buffer) => b.toString('utf8');

export const blockFileTarget: FuzzTarget = {
  name: 'block-file',
  about: "parseBlockFile (the verifier's reader of blocks/…/<n>.json): a block or a malformed reason, never a throw",
  arbitrary: (seeds) =>
    mix(
      randomInput(['{', '}', '"', ':', ',', '[', ']', '\\u0000', '"index"', '"payload"']),
      mutatedBytes(seeds, { tokens: ['\\u', '\\"', '"index": 1,', '1e999', '-0', '\ud800'] }),
      mutatedJson(seeds),
    ),
  check(input) {
    const text = utf8(input);
    for (const pos of [0, 1, 2]) {
      const r = refusedOnly(() => parseBlockFile(text, pos), []);
      check(r !== undefined && (r.block === null) !== (r.malformed === null), 'neither a block nor a reason');
    }
  },
  runs: 400,
};

export const jcsTarget: FuzzTarget = {
  name: 'jcs',
  about: 'canonicalize over parsed JSON: canonical text that parses to the same value and is a fixed point; TypeError only for what JSON cannot hold',
  arbitrary: (seeds) =>
    mix(randomInput(['{', '}', '[', ']', '"', '1e308', '-0', '0.1', '\\ud800', '\\u2028', '1E+2', '"__proto__"']), mutatedBytes(seeds), mutatedJson(seeds)),
  check(input) {
    let v: unknown;
    try {
      v = JSON.parse(utf8(input));
    } catch {
      return;
    }
    const c = refusedOnly(
      () => canonicalize(v),
      [],
      (e) => e instanceof TypeError && !representable(v),
    );
    if (c === undefined) return;
    check(canonicalize(JSON.parse(c)) === c, 'canonical text is not a fixed point');
  },
  runs: 1000,
};

const wellFormed = (s: string) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);

/** Whether JCS can write a parsed JSON value: finite numbers only, strings without lone surrogates (RFC 8785 3.2.2). */
function representable(v: unknown): boolean {
  if (typeof v === 'number') return Number.isFinite(v);
  if (typeof v === 'string') return wellFormed(v);
  if (Array.isArray(v)) return v.every(representable);
  if (v !== null && typeof v === 'object') return Object.entries(v).every(([k, x]) => wellFormed(k) && representable(x));
  return true;
}

// --- notes and checkpoints --------------------------------------------------------

const signer = testSigner('fuzz.example/log');
const NOTE_TOKENS = ['\n', '\n\n', '— ', '\u2014', ' ', '+', 'fuzz.example/log', '=', '==', 'AAAA', '\r', '\t', '\u00a0', '\ud800', 'cosignature/v1\n'];

export const noteTarget: FuzzTarget = {
  name: 'signed-note',
  about: 'parseNote and the signature checks: a note or malformed; formatNote(parseNote(s)) === s; verify answers false, never throws',
  arbitrary: (seeds) =>
    mix(randomInput(NOTE_TOKENS), mutatedBytes(seeds, { tokens: NOTE_TOKENS }), mutatedLines(seeds, ['', '— fuzz.example/log AAAAAAA=', '— x'])),
  check(input) {
    const text = utf8(input);
    const n = refusedOnly(() => parseNote(text), ['malformed']);
    if (n === undefined) return;
    check(formatNote(n) === text, 'formatNote(parseNote(s)) !== s');
    for (const s of n.signatures.slice(0, 4)) {
      refusedOnly(() => verifyNoteSignature(nodeBackend, n, s.name, signer.publicKey), []);
      refusedOnly(() => verifyCosignature(nodeBackend, n, s.name, signer.publicKey), []);
    }
  },
  runs: 400,
};

export const checkpointTarget: FuzzTarget = {
  name: 'tlog-checkpoint',
  about: 'parseCheckpoint and openCheckpoint (C2SP tlog-checkpoint): a checkpoint or malformed / checkpoint_mismatch; formatCheckpoint round trip',
  arbitrary: (seeds) =>
    mix(randomInput(NOTE_TOKENS), mutatedBytes(seeds, { tokens: NOTE_TOKENS }), mutatedLines(seeds, ['0', '18446744073709551616', '01', 'ext', ''])),
  check(input) {
    const text = utf8(input);
    const body = refusedOnly(() => parseCheckpoint(text), ['malformed']);
    if (body !== undefined) check(formatCheckpoint(body) === text, 'formatCheckpoint(parseCheckpoint(s)) !== s');
    const opened = refusedOnly(() => openCheckpoint(nodeBackend, text, { publicKey: signer.publicKey }), ['malformed', 'checkpoint_mismatch']);
    if (opened !== undefined) check(opened.checkpoint.origin === 'fuzz.example/log', 'opened a checkpoint of another origin with this key');
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return;
    }
    refusedOnly(() => parseCheckpointJson(json), ['checkpoint_mismatch']);
  },
  runs: 400,
};

export const addCheckpointTarget: FuzzTarget = {
  name: 'add-checkpoint',
  about: "the witness's POST /add-checkpoint body: a request or bad_request; formatAddCheckpoint round trip",
  arbitrary: (seeds) =>
    mix(
      randomInput(['old ', '0', '\n', '\n\n', 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=', '— ']),
      mutatedBytes(seeds, { tokens: NOTE_TOKENS }),
      mutatedLines(seeds, ['old 01', 'old 9007199254740993', '47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=', '']),
    ),
  check(input) {
    const r = refusedOnly(() => parseAddCheckpoint(input), ['bad_request']);
    if (r === undefined) return;
    check(r.proof.length <= 63, `${r.proof.length} proof lines`);
    check(formatAddCheckpoint(r.old, r.proof, r.note) === utf8(input), 'formatAddCheckpoint(parseAddCheckpoint(b)) !== b');
  },
  runs: 400,
};

// --- transparency paths and parameters ----------------------------------------------

const TILE_TOKENS = ['tile/', 'entries/', '0/', '63/', '64/', 'x000/', 'x001/', '000', '999', '.p/', '.p/255', '.p/256', '/', 'x', '.p'];

export const tileTarget: FuzzTarget = {
  name: 'tile-path',
  about: 'parseTilePath: a tile or null, never a throw; tilePath(parseTilePath(p)) === p; proof parameters: numbers or bad_request',
  arbitrary: (seeds) =>
    mix(
      randomInput(TILE_TOKENS),
      mutatedBytes(seeds, { tokens: TILE_TOKENS }),
      fc
        .array(fc.constantFrom(...TILE_TOKENS, 'index=', 'size=', 'from=', 'to=', '&', '%30', '+', '9007199254740993'), { maxLength: 10 })
        .map((a) => Buffer.from(a.join(''))),
    ),
  check(input) {
    const p = input.toString('latin1');
    const t = refusedOnly(() => parseTilePath(p), []);
    if (t) {
      check(Number.isSafeInteger(t.index) && t.index >= 0 && t.width >= 1 && t.width <= 256, `tile ${JSON.stringify(t)}`);
      check(tilePath(t) === p, `tilePath(parseTilePath(${JSON.stringify(p)})) = ${tilePath(t)}`);
    }
    for (const names of [
      ['index', 'size'],
      ['from', 'to'],
    ]) {
      const q = refusedOnly(() => intParams(p, names), ['bad_request']);
      if (q) for (const v of Object.values(q)) check(v === undefined || (Number.isSafeInteger(v) && v >= 0), `parameter ${v}`);
    }
  },
  runs: 600,
};

// --- queries and bodies ----------------------------------------------------------

const QUERY_TOKENS = [
  'url=',
  'semver=',
  'at=',
  'proof=',
  '&',
  '%',
  '%zz',
  '%00',
  '%0d%0a',
  '+',
  '=',
  'url=https%3A%2F%2Fa.example%2Fx',
  'semver=1.0.0',
  'at=2026-01-01',
  'proof=1',
  '%E2%82%AC',
  '%ED%A0%80',
];

export const queryTarget: FuzzTarget = {
  name: 'query',
  about: 'parseSelectionQuery, acceptsJson and parseJsonBody: a query, a body or bad_request; never another throw',
  arbitrary: (seeds) => mix(randomInput(QUERY_TOKENS), mutatedBytes(seeds, { tokens: QUERY_TOKENS }), mutatedJson(seeds)),
  check(input) {
    const q = input.toString('utf8');
    for (const checkUrl of [true, false]) {
      const r = refusedOnly(() => parseSelectionQuery(q, { checkUrl }), ['bad_request']);
      if (r && checkUrl) check(isArtifactUrl(r.url), `url ${r.url}`);
    }
    refusedOnly(() => acceptsJson(q), []);
    refusedOnly(() => parseJsonBody(input), ['bad_request']);
  },
  runs: 600,
};

export const genuineCheckpointNote = () => {
  // Used by make-seeds: a real signed checkpoint of this target's key.
  return { signer };
};

// --- what `vouch get` and the cosigner read ------------------------------------------

const POLICY_TOKENS = [
  'log ',
  'witness ',
  'group ',
  'quorum ',
  'none',
  'all',
  'any',
  '1',
  '0',
  '257',
  '\n',
  ' ',
  '\t',
  '#',
  'w1',
  'g1',
  'fuzz.example/log+',
  'witness.example/w+',
];

export const tlogPolicyTarget: FuzzTarget = {
  name: 'tlog-policy',
  about: 'parsePolicy (c2sp tlog-policy files) and checkQuorum over a genuine cosigned note: a policy or bad_request; the quorum answers, never throws',
  arbitrary: (seeds) =>
    mix(
      randomInput(POLICY_TOKENS),
      mutatedBytes(seeds, { tokens: POLICY_TOKENS }),
      mutatedLines(seeds, ['group g2 2 w1 w1', 'group g3 any g3', 'quorum g1', 'quorum none', 'witness w1 x+00000000+AQ==', '# comment']),
    ),
  check(input) {
    const policy = refusedOnly(() => parsePolicy(nodeBackend, utf8(input)), ['bad_request']);
    if (policy === undefined) return;
    const cosigned = corpusOf('signed-note').find((c) => c.file.endsWith('/cosigned.note'));
    if (cosigned) {
      const note = parseNote(cosigned.bytes.toString('utf8'));
      const q = refusedOnly(() => checkQuorum(nodeBackend, policy, note), []);
      check(q !== undefined && typeof q.ok === 'boolean', 'checkQuorum gave no answer');
      refusedOnly(() => policyLogFor(nodeBackend, policy, note), []);
    }
  },
  runs: 300,
};

const isRefusal = (e: unknown) => e instanceof Refusal;

export const tlogProofTarget: FuzzTarget = {
  name: 'tlog-proof',
  about: "what vouch get reads of a gateway's proofs (Vouch-Proof header, proof members, /v1/proof answers): a proof or a Refusal",
  arbitrary: (seeds) =>
    mix(
      randomInput(['{', '}', '"index"', '"size"', '"proof"', '"checkpoint"', '"from"', '"to"', '[', ']', '"AAAA"']),
      mutatedBytes(seeds),
      mutatedJson(seeds),
      mutatedJson(seeds),
    ),
  check(input) {
    const text = utf8(input);
    const p = refusedOnly(() => parseProofObject(text, 'fuzz'), [], isRefusal);
    if (p) check(Number.isSafeInteger(p.index) && Number.isSafeInteger(p.size) && p.proof.every((h) => h.length === 32), 'a proof out of form');
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      return;
    }
    refusedOnly(() => parseProofObject(v, 'fuzz'), [], isRefusal);
    refusedOnly(() => parseInclusionAnswer(v, 3, 5, 'fuzz'), [], isRefusal);
    refusedOnly(() => parseConsistencyAnswer(v, 3, 5, 'fuzz'), [], isRefusal);
  },
  runs: 300,
};
