/**
 * The `vouch get` client as a library (as tessera's client/): another
 * program imports `verifiedGet` and gets what the CLI gets. Before FILE
 * appears (temp file, renamed last) it checks: the UNS block is signed by
 * the pinned key and endorses the URL; the `Vouch-Proof` note is signed by
 * that key and proves the block; the checkpoint extends the newest one seen
 * before (state file) and meets the policy's quorum; the bytes hash to
 * artifact_hash. With several gateways their checkpoints must be consistent
 * and their selections agree or be explained (./tlog-client.ts `decide`).
 * Trusts: the request's pin, origin and policy; the state file's past.
 * Must hold: `ok` only after every check passed; a refusal leaves FILE and
 * the state file untouched; any answer outside the protocol is a refusal
 * (`bad_answer`), never an internal error; an unreachable gateway, its
 * server errors and a timeout throw (VouchError, the CLI's exit 2).
 */
import { createWriteStream, renameSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { finished } from 'node:stream/promises';
import { Agent, request } from 'undici';
import { VouchError } from '../../chain/errors.ts';
import { parseBlock, type Block } from '../../chain/block.ts';
import { computeRecordHash, payloadMessage } from '../../chain/build.ts';
import { base64Decode, base64Encode, bytesEqual, hexEncode } from '../../chain/encoding.ts';
import { parseArtifactHash, formatArtifactHash } from '../../chain/hash-algorithms.ts';
import { parseUns, sameEntry } from '../../chain/uns-header.ts';
import type { Policy } from '../../chain/tlog-policy.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { checkSelection } from './index-check.ts';
import { loadState, saveCheckpoint } from './checkpoint-state.ts';
import { KeyFollower, type KeyPin } from './key-follower.ts';
import {
  Refusal,
  checkBlockProof,
  checkPolicy,
  decide,
  openVerified,
  parseConsistencyAnswer,
  parseInclusionAnswer,
  parseProofObject,
  proveExtends,
  staleCheckpoint,
  type Authority,
  type GatewayAnswer,
  type ProofObject,
  type RevocationEvidence,
  type VerifiedCheckpoint,
} from './tlog-client.ts';

const STATUS_TEXT: Record<number, [string, 1 | 2]> = {
  400: ['the gateway refused the parameters', 2],
  404: ['no signed block for this URL / version', 1],
  409: ['the gateway refused: the origin bytes differ from what was signed', 1],
  410: ['the selected version is revoked', 1],
  502: ['the origin failed (unreachable, error, truncated or too large)', 2],
  503: ['the gateway is not ready yet, or (a mirror) behind the tree size asked for (--min-tree-size)', 2],
  504: ['the origin was too slow', 2],
};

/** A lookup answer is a block plus a few members; bigger is not a gateway speaking the protocol. */
const MAX_JSON_BYTES = 8 * 1024 * 1024;
/** Headers undici accepts from a gateway (a UNS block can be large); more is `bad_answer`. */
const MAX_HEADER_BYTES = 4 * 1024 * 1024;

/**
 * What an HTTP client error says of a gateway's answer: a description when
 * the answer itself was broken (not HTTP/1.1, headers too large, a body
 * shorter than its Content-Length, a connection closed mid-answer), null for
 * a failure to reach the gateway at all.
 */
function brokenAnswer(e: unknown): string | null {
  const err = e as { code?: unknown; name?: unknown; message?: unknown; socket?: { bytesRead?: unknown } } | null;
  const code = typeof err?.code === 'string' ? err.code : '';
  if (code.startsWith('HPE_') || err?.name === 'HTTPParserError') return `the answer is not HTTP/1.1 (${code || String(err?.message ?? '')})`;
  if (code === 'UND_ERR_HEADERS_OVERFLOW') return `the answer's headers are larger than ${MAX_HEADER_BYTES} bytes`;
  if (code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH') return "the answer's body is not as long as its Content-Length";
  if (code === 'UND_ERR_SOCKET' && typeof err?.socket?.bytesRead === 'number' && err.socket.bytesRead > 0)
    return 'the gateway closed the connection in the middle of its answer';
  return null;
}

const isTimeout = (e: unknown) => (e as Error)?.name === 'TimeoutError' || (e as Error)?.name === 'AbortError';

/** A single header value; a header sent twice is not one answer (`bad_answer`). */
function oneHeader(headers: Record<string, string | string[] | undefined>, name: string, where: string): string | undefined {
  const h = headers[name];
  if (Array.isArray(h)) throw new Refusal('bad_answer', `${where} sent the ${name} header ${h.length} times`);
  return h;
}

const jsonKind = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'an array' : `a ${typeof v}`);

/** Checks a block's form and record hash (its signature is `signedWith`'s). */
function parseHashed(raw: unknown, what: string): Block {
  const index = typeof (raw as { index?: unknown })?.index === 'number' ? (raw as { index: number }).index : -1;
  const block = parseBlock(raw, index);
  if (computeRecordHash(block, nodeBackend) !== block.record_hash)
    throw new VouchError('record_hash_mismatch', `the ${what}'s record_hash does not match its content`);
  return block;
}

/** Whether `block` is signed by `publicKey`. */
function signedWith(block: Block, publicKey: Uint8Array): boolean {
  const sig = base64Decode(block.signature);
  return sig !== null && nodeBackend.verify(publicKey, payloadMessage(block.payload), sig);
}

/** Checks a block on its own: form, record hash, signature by the pinned key. */
export function checkBlockObject(raw: unknown, publicKey: Uint8Array, what: string): Block {
  const block = parseHashed(raw, what);
  if (!signedWith(block, publicKey)) throw new VouchError('bad_signature', `the ${what} is not signed by the pinned authority key`);
  return block;
}

/**
 * Checks a UNS header in its full form on its own: `{"<service>":{"endorsement":<block>}}`
 * with a block signed by the pinned key. The compact form (a reference to
 * the block) needs the block fetched: `vouch get` does that.
 */
export function checkUnsBlock(uns: string, publicKey: Uint8Array): Block {
  const form = parseUns(uns);
  if (typeof form === 'string') throw new VouchError('malformed', form);
  if (form.form !== 'full') throw new VouchError('malformed', 'the UNS header is the compact form: the block must be fetched to check it');
  return checkBlockObject(form.block, publicKey, 'UNS block');
}

/** What is asked for: the URL, and an exact version or a date. */
export interface Want {
  url: string;
  semver?: string;
  at?: string;
}

/** The endorsement of `want.url` in `block`, matching the asked version and date. */
function entryFor(block: Block, want: Want, source: string) {
  const entry = block.payload.endorsements.find((e) => e.artifact_url === want.url);
  if (!entry) throw new VouchError('malformed', `${source}: the block does not endorse this URL`);
  if (want.semver && entry.semver !== want.semver) throw new VouchError('malformed', `${source}: the block is version ${entry.semver}, not ${want.semver}`);
  if (want.at && block.payload.effective_date > want.at)
    throw new VouchError('malformed', `${source}: the block takes effect ${block.payload.effective_date}, after ${want.at}`);
  return entry;
}

/** One verified download: what to ask of which gateways, trusting what. */
export interface GetRequest {
  /** Base URLs of the gateways (http(s), no trailing slash); several must agree. */
  gateways: readonly string[];
  url: string;
  semver?: string;
  /** A date YYYY-MM-DD: the version in effect then. */
  at?: string;
  /** The log's first key or its root (./key-follower.ts `readRootPin`). */
  pin: KeyPin;
  /** The log origin the checkpoint must name (default: the one it names). */
  origin?: string;
  /** A witness quorum the checkpoint must carry (chain/tlog-policy.ts), or null. */
  policy: Policy | null;
  /** Checkpoints seen before (./checkpoint-state.ts): read, and written after a verified download. */
  statePath: string;
  timeoutMs: number;
  /** Vouch-Min-Tree-Size asked for (read your writes through mirrors); the state's last size for `origin` is the floor. */
  minTreeSize?: number;
  /** Where the verified bytes go (a temporary file beside it until every check passed). */
  output: string;
}

/** What a verified download wrote and what proved it. */
export interface GetVerified {
  file: string;
  bytes: number;
  name: string;
  semver: string;
  index: number;
  record_hash: string;
  artifact_hash: string;
  origin: string;
  size: number;
  /** The checkpoint's root hash, base64. */
  root: string;
  gateways: number;
}

/**
 * The outcome of `verifiedGet`: verified (the file written), or refused
 * with a catalogue or `http_<status>` code, the line to show, details for a
 * JSON report, the CLI's exit code, and the evidence of a fork when there is one.
 */
export type GetOutcome =
  | { ok: true; verified: GetVerified }
  | { ok: false; code: string; line: string; extra: Record<string, unknown>; exit: 1 | 2; evidenceText?: string };

const refused = (code: string, line: string, extra: Record<string, unknown> = {}, exit: 1 | 2 = 1): GetOutcome & { ok: false } => ({
  ok: false,
  code,
  line,
  extra,
  exit,
});

/**
 * Downloads `req.url` through the gateways and verifies it (see the file
 * header); writes `req.output` and the state file only when every check passed.
 * @throws VouchError for what is no refusal: an unreachable gateway
 *   (`origin_error`), a timeout (`origin_timeout`), a file that cannot be
 *   written (`io_error`), a broken state file.
 */
export async function verifiedGet(req: GetRequest): Promise<GetOutcome> {
  const v = { url: req.url, semver: req.semver, at: req.at, output: req.output };
  const gateways = req.gateways;
  const timeoutMs = req.timeoutMs;
  const pin = req.pin;
  const pinnedOrigin = req.origin !== undefined ? { origin: req.origin } : {};
  /** The authority as known now: the online key in force (block 0's until a key event is walked). */
  const authorityNow = (): Authority => ({ publicKey: follower.online(), ...pinnedOrigin });
  const authority: { origin?: string } = pinnedOrigin;
  const policy = req.policy;
  const statePath = req.statePath;
  const state = loadState(statePath);
  // Vouch-Min-Tree-Size (docs/guide/fleet.md): what was asked, else what this client already saw of the origin (a mirror behind it syncs first).
  const minTreeSize = Math.max(req.minTreeSize ?? 0, req.origin !== undefined ? (state.get(req.origin)?.size ?? 0) : 0);
  const want: Want = { url: v.url, ...(v.semver ? { semver: v.semver } : {}), ...(v.at ? { at: v.at } : {}) };
  const q = new URLSearchParams({ url: v.url });
  if (v.semver) q.set('semver', v.semver);
  if (v.at) q.set('at', v.at);

  const dispatcher = new Agent({ maxHeaderSize: MAX_HEADER_BYTES, connectTimeout: Math.min(timeoutMs, 30_000) });
  const signal = AbortSignal.timeout(timeoutMs);
  const tmp = `${v.output}.vouch-${process.pid}.tmp`;

  const send = async (target: string, headers: Record<string, string> = {}) => {
    let res;
    try {
      const sent = minTreeSize > 0 ? { ...headers, 'vouch-min-tree-size': String(minTreeSize) } : headers;
      res = await request(target, { dispatcher, signal, maxRedirections: 0, headers: sent } as Parameters<typeof request>[1]);
    } catch (e) {
      if (isTimeout(e)) throw e;
      const broken = brokenAnswer(e);
      if (broken !== null) throw new Refusal('bad_answer', `${target}: ${broken}`);
      throw new VouchError('origin_error', `cannot reach the gateway ${new URL(target).origin}: ${(e as { code?: string }).code ?? (e as Error).message}`);
    }
    // 200 or a documented error status (docs/spec/http.md "Status codes"); anything else of 1xx-3xx is no answer of the protocol.
    if (res.statusCode !== 200 && res.statusCode < 400) {
      await res.body.dump().catch(() => {});
      const location = typeof res.headers.location === 'string' ? ` to ${JSON.stringify(res.headers.location.slice(0, 200))}` : '';
      throw new Refusal(
        'bad_answer',
        res.statusCode >= 300 && res.statusCode < 400
          ? `${target}: HTTP ${res.statusCode}, a redirect${location}: a gateway answers itself (vouch get follows no redirect)`
          : `${target}: HTTP ${res.statusCode} is not an answer of the protocol (200 or an error status)`,
      );
    }
    return res;
  };
  /** Reads a whole body (at most `max` bytes): a broken, oversized or mis-framed body is `bad_answer`. */
  const readBody = async (
    res: Awaited<ReturnType<typeof send>>,
    target: string,
    max: number,
    sink: (chunk: Uint8Array) => void | Promise<void>,
  ): Promise<number> => {
    const declared = oneHeader(res.headers, 'content-length', target);
    if (declared !== undefined && !/^\d{1,15}$/.test(declared)) {
      throw new Refusal('bad_answer', `${target}: Content-Length ${JSON.stringify(declared.slice(0, 40))} is not a length`);
    }
    if (declared !== undefined && Number(declared) > max) throw new Refusal('bad_answer', `${target}: answer of ${declared} bytes, more than ${max}`);
    let n = 0;
    try {
      for await (const c of res.body) {
        n += (c as Buffer).length;
        if (n > max) throw new Refusal('bad_answer', `${target}: answer larger than ${max} bytes`);
        await sink(c as Uint8Array);
      }
    } catch (e) {
      if (e instanceof Refusal || isTimeout(e) || e instanceof VouchError) throw e;
      if ((e as NodeJS.ErrnoException)?.syscall === 'write' || (e as NodeJS.ErrnoException)?.syscall === 'open') throw e; // our file, not the answer
      throw new Refusal(
        'bad_answer',
        `${target}: ${brokenAnswer(e) ?? `the answer broke off after ${n} bytes (${String((e as Error)?.message ?? e).split('\n')[0]})`}`,
      );
    }
    if (declared !== undefined && n !== Number(declared))
      throw new Refusal('bad_answer', `${target}: a body of ${n} bytes, not its Content-Length ${declared}`);
    return n;
  };
  const getJson = async (target: string): Promise<{ status: number; json: unknown }> => {
    const res = await send(target, { accept: 'application/json' });
    const type = oneHeader(res.headers, 'content-type', target);
    if (res.statusCode === 200 && !/^application\/json\s*(;|$)/i.test(type ?? '')) {
      await res.body.dump().catch(() => {});
      throw new Refusal(
        'bad_answer',
        `${target}: the answer is ${type === undefined ? 'of no content type' : `of type ${JSON.stringify(type.slice(0, 100))}`}, not application/json`,
      );
    }
    const chunks: Buffer[] = [];
    await readBody(res, target, MAX_JSON_BYTES, (c) => void chunks.push(c as Buffer));
    let json: unknown = null;
    try {
      json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      if (res.statusCode === 200) throw new Refusal('bad_answer', `${target}: the answer is not JSON`);
    }
    if (res.statusCode === 200 && (typeof json !== 'object' || json === null || Array.isArray(json))) {
      throw new Refusal('bad_answer', `${target}: the answer is JSON ${jsonKind(json)}, not an object`);
    }
    return { status: res.statusCode, json };
  };
  const follower = new KeyFollower(pin, async (g, since) => {
    const r = await getJson(`${g}/v1/keys?since=${since}`);
    if (r.status === 404) return null;
    if (r.status !== 200) throw new Refusal('bad_answer', `${g}/v1/keys answers HTTP ${r.status}: the log's key events cannot be checked`);
    return r.json;
  });
  follower.loadFrom(state, authority.origin ?? null);
  /**
   * Checks `block`'s signature by the online key in force at its index
   * (void: refused); when the keys known do not verify it, walks
   * /v1/keys of `gateway` once and checks again.
   */
  const checkSigned = async (block: Block, what: string, gateway: string): Promise<Block> => {
    if (follower.needsWalk) await follower.walk(gateway);
    const once = (): boolean => {
      const k = follower.keyAt(block.index);
      if (k === 'void')
        throw new Refusal(
          'void_block',
          `${gateway}: the ${what} (block ${block.index}) is void: signed by a compromised online key after its last good block (docs/spec/key-events.md)`,
        );
      return signedWith(block, k);
    };
    if (once() || ((await follower.walk(gateway)) && once())) return block;
    throw new VouchError(
      'bad_signature',
      follower.changed || follower.stored() !== undefined
        ? `the ${what} is not signed by the online key in force at block ${block.index}`
        : `the ${what} is not signed by the pinned authority key`,
    );
  };
  const signedBlock = async (raw: unknown, what: string, gateway: string): Promise<Block> => checkSigned(parseHashed(raw, what), what, gateway);
  /**
   * `checkBlockProof` with the online key in force; a note by a key not
   * known yet: one walk of /v1/keys, then again, and the block's signature
   * once more against what the walk showed (a compromise may void it, a
   * rotation move its key).
   */
  const provenIn = async (block: Block, p: ProofObject, gateway: string, what: string): Promise<VerifiedCheckpoint> => {
    try {
      return checkBlockProof(nodeBackend, block, p, authorityNow(), gateway);
    } catch (e) {
      if (!(e instanceof Refusal && e.code === 'bad_checkpoint') || !(await follower.walk(gateway))) throw e;
      const cp = checkBlockProof(nodeBackend, block, p, authorityNow(), gateway);
      await checkSigned(block, what, gateway);
      return cp;
    }
  };
  /**
   * A 404 against the completeness index (docs/spec/index.md 8): the
   * lookup's 404 with proof=1 carries the URL's index proof and the note it
   * is against; that note verified (and extending what was seen before),
   * the index must select nothing. A gateway whose note commits an index
   * and that sends no proof is refused (no_proof).
   */
  const checkAbsence = async (gateway: string): Promise<void> => {
    const r = await getJson(`${gateway}/v1/endorsement?${q}&proof=1`);
    const body = typeof r.json === 'object' && r.json !== null ? (r.json as { index_proof?: unknown; checkpoint?: unknown }) : {};
    let noteText = typeof body.checkpoint === 'string' ? body.checkpoint : null;
    if (noteText === null) {
      const c = await send(`${gateway}/checkpoint`);
      if (c.statusCode !== 200) {
        await c.body.dump().catch(() => {});
        return; // no note: nothing committed to check against
      }
      const chunks: Buffer[] = [];
      await readBody(c, `${gateway}/checkpoint`, MAX_JSON_BYTES, (x) => void chunks.push(x as Buffer));
      noteText = Buffer.concat(chunks).toString('utf8');
    }
    // A note by a key this client does not know yet: one walk of /v1/keys, then again (as provenIn).
    let cp: VerifiedCheckpoint;
    try {
      cp = openVerified(nodeBackend, noteText, authorityNow(), `${gateway}/checkpoint`);
    } catch (e) {
      if (!(e instanceof Refusal && e.code === 'bad_checkpoint') || !(await follower.walk(gateway))) throw e;
      cp = openVerified(nodeBackend, noteText, authorityNow(), `${gateway}/checkpoint`);
    }
    await accept(cp, remembered(authority.origin ?? cp.origin), gateway);
    if (r.status !== 404) throw new Refusal('gateways_disagree', `${gateway} answers its download with 404 and its lookup with HTTP ${r.status}`);
    checkSelection(
      nodeBackend,
      cp,
      v.url,
      { semver: v.semver, at: v.at, today: new Date().toISOString().slice(0, 10) },
      typeof body.index_proof === 'string' ? body.index_proof : undefined,
      null,
      gateway,
    );
  };
  /** `revoked_by` of a lookup or block answer: absent, or `{"index": n, ...}`. */
  const revokedIndex = (value: unknown, where: string): number | undefined => {
    if (value === undefined) return undefined;
    const at = (value as { index?: unknown } | null)?.index;
    if (typeof value !== 'object' || value === null || Array.isArray(value) || typeof at !== 'number' || !Number.isSafeInteger(at) || at < 0) {
      throw new Refusal('bad_answer', `${where}: "revoked_by" is not an object with a block index`);
    }
    return at;
  };
  /** The revocation a lookup at `gateway` names for the selected version, or null (no answer, none named, a malformed one). */
  const revokedByOf = async (gateway: string): Promise<{ block: number; index: number; date: string | null } | null> => {
    try {
      const r = await getJson(`${gateway}/v1/endorsement?${q}`);
      const j = r.json as { index?: unknown; revoked_by?: { effective_date?: unknown } } | null;
      if (r.status !== 200 || typeof j?.index !== 'number') return null;
      const index = revokedIndex(j.revoked_by, `the lookup of ${gateway}`);
      if (index === undefined) return null;
      const d = j.revoked_by?.effective_date;
      return { block: j.index, index, date: typeof d === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(d) ? d : null };
    } catch {
      return null;
    }
  };
  /** A consistency proof from `gateway` (untrusted: the caller verifies it). */
  const consistencyFrom = (gateway: string) => async (from: number, to: number) => {
    const r = await getJson(`${gateway}/v1/proof/consistency?from=${from}&to=${to}`);
    if (r.status !== 200) {
      throw new Refusal(
        'bad_proof',
        `${gateway} gives no consistency proof from size ${from} to ${to} (HTTP ${r.status}): it cannot show that its checkpoint extends the one seen before`,
      );
    }
    return { hashes: parseConsistencyAnswer(r.json, from, to, gateway), source: gateway };
  };

  /** A block's JSON from `/v1/block` of `gateway`, checked like any block (null when it answers no block). */
  const blockFrom = async (gateway: string, index: number): Promise<{ block: Block; revokedBy: number | undefined } | null> => {
    const r = await getJson(`${gateway}/v1/block?index=${index}`);
    if (r.status !== 200) return null;
    const { success: _s, revoked_by: revokedBy, ...raw } = r.json as Record<string, unknown>;
    const block = await signedBlock(raw, `block ${index} from ${gateway}`, gateway);
    if (block.index !== index) throw new Refusal('bad_answer', `${gateway} answers block ${block.index} when asked for block ${index}`);
    return { block, revokedBy: revokedIndex(revokedBy, `block ${index} from ${gateway}`) };
  };
  /**
   * `decide`'s evidence that `older`'s block is revoked in `newest`'s tree:
   * the revoke block `newest` names for it, and its inclusion proof in
   * `newest`'s checkpoint (null when `newest` names none).
   */
  const revocationFrom = async (older: GatewayAnswer, newest: GatewayAnswer): Promise<RevocationEvidence | null> => {
    const g = newest.gateway;
    const target = await blockFrom(g, older.block.index);
    if (target === null || target.block.record_hash !== older.block.record_hash) return null;
    const at = target.revokedBy;
    if (at === undefined) return null;
    const revoke = await blockFrom(g, at);
    if (revoke === null) return null;
    const p = await getJson(`${g}/v1/proof/inclusion?index=${at}&size=${newest.cp.size}`);
    if (p.status !== 200) throw new Refusal('bad_proof', `${g} gives no inclusion proof of block ${at} in size ${newest.cp.size} (HTTP ${p.status})`);
    return { revoke: revoke.block, proof: parseInclusionAnswer(p.json, at, newest.cp.size, g) };
  };

  /**
   * The block a download's UNS header names, checked: the full form's
   * block, or for the compact form block N from `/v1/block` of the same
   * gateway (the header's own `url` is not followed), whose index and
   * record_hash must be the header's and whose entry for the URL must be
   * the header's `entry` when it gives one.
   */
  const unsBlock = async (uns: string, gateway: string): Promise<Block> => {
    const form = parseUns(uns);
    if (typeof form === 'string') throw new Refusal('bad_answer', `${gateway}: ${form}`);
    if (form.form === 'full') return signedBlock(form.block, 'UNS block', gateway);
    const got = await blockFrom(gateway, form.index);
    if (got === null) throw new Refusal('bad_answer', `${gateway}: the UNS header names block ${form.index}, which /v1/block does not give`);
    if (got.block.record_hash !== form.recordHash) {
      throw new Refusal(
        'bad_answer',
        `${gateway}: the UNS header names block ${form.index} with record_hash ${form.recordHash}, /v1/block gives ${got.block.record_hash}`,
      );
    }
    if (form.entry !== null) {
      const signed = got.block.payload.endorsements.find((e) => e.artifact_url === want.url);
      if (signed === undefined || !sameEntry(form.entry, signed))
        throw new Refusal('bad_answer', `${gateway}: the UNS header's entry is not block ${form.index}'s entry for this URL`);
    }
    return got.block;
  };
  /**
   * The Vouch-Proof object; when the header left witness cosignatures out
   * (`omitted_cosignatures`) and a policy needs them, the lookup's
   * `proof=1` member for the same block, which carries them all.
   */
  const fullProof = async (header: string, block: Block, gateway: string) => {
    const p = parseProofObject(header, gateway);
    let omitted: unknown = 0;
    try {
      omitted = (JSON.parse(header) as { omitted_cosignatures?: unknown }).omitted_cosignatures ?? 0;
    } catch {
      /* parseProofObject refused it already */
    }
    if (policy === null || !(typeof omitted === 'number' && omitted > 0)) return p;
    const r = await getJson(`${gateway}/v1/endorsement?${q}&proof=1`);
    const o = r.status === 200 && typeof r.json === 'object' && r.json !== null ? (r.json as Record<string, unknown>) : null;
    if (o === null || o.record_hash !== block.record_hash || o.proof === undefined) {
      throw new Refusal(
        'bad_proof',
        `${gateway}: its Vouch-Proof leaves ${String(omitted)} cosignatures out and its lookup gives no proof of block ${block.index} with them`,
      );
    }
    return parseProofObject(o.proof, gateway);
  };

  let origin: string | null = authority.origin ?? null;
  let seen: VerifiedCheckpoint | null | undefined; // undefined: not looked up yet
  /** The remembered checkpoint for the origin, re-verified against the key. */
  const remembered = (o: string): VerifiedCheckpoint | null => {
    if (seen !== undefined) return seen;
    const s = state.get(o);
    if (s === undefined) return (seen = null);
    // Signed by one of the online keys known, newest first (the remembered note may predate a rotation walked since).
    const opened = (keys: Uint8Array[]): VerifiedCheckpoint => {
      try {
        return openVerified(nodeBackend, s.note, { publicKey: keys[0]!, origin: o }, `state file ${statePath}`);
      } catch (e) {
        if (!(e instanceof Refusal)) throw e;
        if (keys.length > 1) return opened(keys.slice(1));
        throw new Refusal(
          'bad_state',
          `the state file's checkpoint for ${o} does not verify with --public-key (${e.line}); a different key signs this origin now, or the state was edited: use another --state only if you know why`,
        );
      }
    };
    seen = opened(follower.noteKeys());
    if (seen.size !== s.size || base64Encode(seen.root) !== s.root)
      throw new Refusal('bad_state', `the state file's entry for ${o} does not match its own note`);
    return seen;
  };
  /** The policy's `log` line names the key in force, or (after key events) the log's first key the client pinned. */
  const policyCheck = (p: Policy, cp: VerifiedCheckpoint): void => {
    try {
      checkPolicy(nodeBackend, p, cp, authorityNow());
    } catch (e) {
      const first = follower.firstKey();
      if (!(e instanceof Refusal && e.code === 'policy') || first === null || bytesEqual(first, authorityNow().publicKey)) throw e;
      checkPolicy(nodeBackend, p, cp, { ...pinnedOrigin, publicKey: first });
    }
  };
  /** Requires `cp` to be of the expected origin, to satisfy the policy, and to extend `current` (proof from `gateway`). */
  const accept = async (cp: VerifiedCheckpoint, current: VerifiedCheckpoint | null, gateway: string) => {
    if (origin === null) origin = cp.origin;
    else if (cp.origin !== origin)
      throw new Refusal('bad_checkpoint', `${cp.source}: checkpoint of origin ${JSON.stringify(cp.origin)}, expected ${JSON.stringify(origin)}`);
    if (policy) policyCheck(policy, cp);
    if (current === null) return;
    if (cp.size < current.size) throw staleCheckpoint(current, cp);
    await proveExtends(nodeBackend, current, cp, consistencyFrom(gateway), statePath);
  };

  try {
    // Several gateways: each answers the lookup with its proof; their trees must agree.
    let decided: GatewayAnswer | null = null;
    if (gateways.length > 1) {
      const lookup = `/v1/endorsement?${q}&proof=1`;
      const answers = await Promise.all(
        gateways.map(async (g): Promise<GatewayAnswer | { gateway: string; status: number; message: string }> => {
          const r = await getJson(`${g}${lookup}`);
          if (r.status !== 200) return { gateway: g, status: r.status, message: String((r.json as { message?: unknown })?.message ?? '') };
          const { success: _s, proof, revoked_by: revokedBy, index_proof: _indexProof, ...raw } = r.json as Record<string, unknown>;
          const block = await signedBlock(raw, `block from ${g}`, g);
          if (proof === undefined)
            throw new Refusal('no_proof', `${g} sent no proof with its lookup (proof=1): nothing shows its block is in the log everybody sees`);
          const cp = await provenIn(block, parseProofObject(proof, g), g, `block from ${g}`);
          const revokedAt = revokedIndex(revokedBy, `the lookup of ${g}`);
          if (revokedAt !== undefined) throw new Refusal('revoked', `${g}: the selected version is revoked (block ${revokedAt})`);
          entryFor(block, want, g);
          return { gateway: g, block, cp };
        }),
      );
      const failed = answers.filter((a): a is { gateway: string; status: number; message: string } => 'status' in a);
      if (failed.length === answers.length && failed.every((f) => f.status === failed[0]!.status)) {
        const [text, exit] = STATUS_TEXT[failed[0]!.status] ?? [`unexpected HTTP ${failed[0]!.status}`, 2];
        return refused(`http_${failed[0]!.status}`, `HTTP ${failed[0]!.status} from every gateway: ${text}`, { status: failed[0]!.status }, exit);
      }
      if (failed.length > 0) {
        throw new Refusal(
          'gateways_disagree',
          `the gateways disagree: ${answers.map((a) => ('status' in a ? `${a.gateway} answers HTTP ${a.status}` : `${a.gateway} selects block ${a.block.index} (checkpoint size ${a.cp.size})`)).join('; ')}`,
        );
      }
      const ok = answers as GatewayAnswer[];
      for (const a of ok) {
        if (origin === null) origin = a.cp.origin;
        if (a.cp.origin !== origin)
          throw new Refusal(
            'gateways_disagree',
            `${a.gateway} shows a checkpoint of origin ${JSON.stringify(a.cp.origin)}, ${ok[0]!.gateway} of ${JSON.stringify(origin)}`,
          );
        if (policy) policyCheck(policy, a.cp);
      }
      const newest = ok.reduce((a, b) => (b.cp.size > a.cp.size ? b : a));
      for (const a of ok) if (a !== newest) await proveExtends(nodeBackend, a.cp, newest.cp, consistencyFrom(newest.gateway), statePath);
      decided = await decide(ok, v.at ?? new Date().toISOString().slice(0, 10), revocationFrom, nodeBackend);
      await accept(decided.cp, remembered(origin!), decided.gateway);
    }

    const gateway = decided?.gateway ?? gateways[0]!;
    const res = await send(`${gateway}/v1/download?${q}`);
    if (res.statusCode !== 200) {
      await res.body.dump();
      const [text, exit] = STATUS_TEXT[res.statusCode] ?? [`unexpected HTTP ${res.statusCode}`, 2];
      if (decided)
        throw new Refusal(
          'gateways_disagree',
          `${gateway} selected block ${decided.block.index} on lookup but its download answers HTTP ${res.statusCode}: ${text}`,
        );
      if (res.statusCode === 410) {
        // Name the revocation: the lookup carries revoked_by (the gateway's word, as the 410 is; nothing is written either way).
        const by = await revokedByOf(gateway);
        if (by !== null) {
          return refused(
            'http_410',
            `HTTP 410: ${v.url}${v.semver ? ` ${v.semver}` : ''} (block ${by.block}) is revoked by block ${by.index}${by.date ? ` from ${by.date}` : ''}`,
            { status: 410, block: by.block, revoked_by: by.index },
            exit,
          );
        }
      }
      if (res.statusCode === 404 && !decided) await checkAbsence(gateway);
      return refused(`http_${res.statusCode}`, `HTTP ${res.statusCode}: ${text}`, { status: res.statusCode }, exit);
    }
    const uns = oneHeader(res.headers, 'uns', gateway);
    if (typeof uns !== 'string') {
      await res.body.dump();
      throw new VouchError('malformed', 'the gateway sent no UNS header: nothing proves what these bytes are');
    }
    const block = await unsBlock(uns, gateway);
    const entry = entryFor(block, want, gateway);
    const proofHeader = oneHeader(res.headers, 'vouch-proof', gateway);
    if (typeof proofHeader !== 'string') {
      await res.body.dump();
      throw new Refusal(
        'no_proof',
        `${gateway} sent no Vouch-Proof header: nothing shows this block is in the log everybody sees (a gateway without transparency support, or one hiding its checkpoint)`,
      );
    }
    const cp = await provenIn(block, await fullProof(proofHeader, block, gateway), gateway, 'UNS block');
    const current = decided?.cp ?? remembered(authority.origin ?? cp.origin);
    await accept(cp, current, gateway);
    // The completeness index the note commits (docs/spec/index.md 8): the block served must be the one the log selects.
    checkSelection(
      nodeBackend,
      cp,
      v.url,
      { semver: v.semver, at: v.at, today: new Date().toISOString().slice(0, 10) },
      oneHeader(res.headers, 'vouch-index-proof', gateway),
      { index: block.index, revoked: false },
      gateway,
    );
    if (decided && block.record_hash !== decided.block.record_hash) {
      await res.body.dump();
      throw new Refusal('gateways_disagree', `${gateway} selected block ${decided.block.index} on lookup but downloads block ${block.index}`);
    }
    const signed = parseArtifactHash(entry.artifact_hash);
    if (typeof signed === 'string') throw new VouchError('bad_artifact_hash', signed);

    const h = nodeBackend.createHash(signed.algorithm);
    const out = createWriteStream(tmp, { mode: 0o644 });
    // Settles once the file is closed or failed, whenever that happens (and observes its error: never an uncaught one).
    const written = finished(out).then(
      () => null,
      (e: NodeJS.ErrnoException) => e,
    );
    let bytes: number;
    try {
      bytes = await readBody(res, `${gateway}/v1/download`, Number.MAX_SAFE_INTEGER, async (chunk) => {
        h.update(chunk);
        if (out.write(chunk)) return;
        const failed = await Promise.race([
          once(out, 'drain').then(
            () => null,
            (e: NodeJS.ErrnoException) => e,
          ),
          written,
        ]);
        if (failed !== null) throw new VouchError('io_error', `cannot write ${tmp}: ${failed.code ?? failed.message}`);
      });
    } finally {
      out.end();
    }
    const failed = await written;
    if (failed !== null) throw new VouchError('io_error', `cannot write ${tmp}: ${failed.code ?? failed.message}`);
    const got = formatArtifactHash(signed.algorithm, hexEncode(h.digest()));
    if (got !== entry.artifact_hash) {
      throw new VouchError('hash_mismatch', `the bytes hash to ${got}; the signed block says ${entry.artifact_hash}`);
    }
    const keys = follower.stored();
    saveCheckpoint(statePath, cp.origin, { size: cp.size, root: base64Encode(cp.root), note: cp.text, ...(keys !== undefined ? { keys } : {}) });
    renameSync(tmp, v.output);
    return {
      ok: true,
      verified: {
        file: v.output,
        bytes,
        name: entry.name,
        semver: entry.semver,
        index: block.index,
        record_hash: block.record_hash,
        artifact_hash: entry.artifact_hash,
        origin: cp.origin,
        size: cp.size,
        root: base64Encode(cp.root),
        gateways: gateways.length,
      },
    };
  } catch (e) {
    rmSync(tmp, { force: true });
    if (e instanceof Refusal) {
      return { ...refused(e.code, e.line, e.evidenceText ? { evidence: e.evidenceText } : {}), ...(e.evidenceText ? { evidenceText: e.evidenceText } : {}) };
    }
    if (e instanceof VouchError && e.kind === 'integrity') return refused(e.code, e.message, {});
    if (isTimeout(e)) throw new VouchError('origin_timeout', `no complete answer within ${timeoutMs / 1000} s`);
    throw e;
  } finally {
    rmSync(tmp, { force: true });
    await dispatcher.destroy().catch(() => {}); // aborts what a refusal left unread (a large body, other gateways' answers)
  }
}
