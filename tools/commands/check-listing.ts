/**
 * `vouch check-listing`: is a package listing (npm packument, PyPI simple
 * page, Go `@v/list`) fetched through any gateway, or read from a file, the
 * log's complete answer? The unit's completeness proof it carries
 * (`Vouch-Index-*` headers or the side route) is checked against the
 * `vouch-index/v1` root of a note signed by the pinned key or the key the
 * log's key events put in force since (one /v1/keys walk, as `vouch get`),
 * the versions shown against the proved ones (docs/spec/index.md 11).
 * Owns: the options, fetching (bounded), the refusal lines. Trusts:
 * `--public-key` (and `--origin`); chain/ for the proofs.
 * Must hold: exit 0 only when the note verifies, the proof leads to its
 * index root and the listing shows exactly the live versions; every refusal
 * is one line naming the check (`no_proof`, `bad_proof`, `bad_checkpoint`,
 * `stale_checkpoint`, `index_mismatch`).
 */
import { readFileSync, statSync } from 'node:fs';
import { type Command, UsageError, emit, refuse } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';
import { base64Decode, base64Encode } from '../../chain/encoding.ts';
import { verifyIndexProof } from '../../chain/index-proof.ts';
import { expectedListing, judgeListing, LISTING_HEADER, parseListingProof, type ListingProof } from '../../chain/index-listing.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { latestOf } from '../../gateway/ecosystems/goproxy.ts';
import { indexRootOfNote } from '../client/index-check.ts';
import { listingUnit, ListingError, shownVersions, type Ecosystem } from '../listing-read.ts';
import {
  openVerified,
  parseConsistencyAnswer,
  proveExtends,
  Refusal,
  staleCheckpoint,
  type Authority,
  type VerifiedCheckpoint,
} from '../client/tlog-client.ts';
import { loadState, saveCheckpoint } from '../client/checkpoint-state.ts';
import { KeyFollower } from '../client/key-follower.ts';

/** Largest listing or side-route answer read (a packument of the public registry's largest packages stays below). */
export const MAX_LISTING_BYTES = 64 * 1024 * 1024;
const ACCEPT: Record<Ecosystem, Record<string, string>> = {
  npm: { abbreviated: 'application/vnd.npm.install-v1+json', full: 'application/json' },
  pypi: { json: 'application/vnd.pypi.simple.v1+json', html: 'application/vnd.pypi.simple.v1+html' },
  go: { text: '*/*' },
};

interface Got {
  status: number;
  headers: Headers;
  body: Uint8Array;
}

async function fetchCapped(url: string, accept: string, timeoutMs: number): Promise<Got> {
  let r: Response;
  try {
    r = await fetch(url, { headers: { accept }, redirect: 'follow', signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    throw new VouchError('origin_error', `cannot fetch ${url}: ${((e as Error).cause as Error | undefined)?.message ?? (e as Error).message}`);
  }
  const chunks: Uint8Array[] = [];
  let n = 0;
  if (r.body !== null) {
    for await (const c of r.body as unknown as AsyncIterable<Uint8Array>) {
      n += c.length;
      if (n > MAX_LISTING_BYTES) throw new VouchError('too_large', `${url}: the answer is over ${MAX_LISTING_BYTES} bytes`);
      chunks.push(c);
    }
  }
  return { status: r.status, headers: r.headers, body: Buffer.concat(chunks) };
}

function readCapped(path: string): Uint8Array {
  try {
    if (statSync(path).size > MAX_LISTING_BYTES) throw new VouchError('too_large', `${path} is over ${MAX_LISTING_BYTES} bytes`);
    return readFileSync(path);
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw new VouchError('io_error', `cannot read ${path}: ${(e as Error).message}`);
  }
}

function sideProof(body: Uint8Array, where: string): ListingProof {
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(body).toString('utf8'));
  } catch {
    throw new Refusal('bad_proof', `${where}: not JSON`);
  }
  const p = parseListingProof(json);
  if (typeof p === 'string') throw new Refusal('bad_proof', `${where}: ${p}`);
  return p;
}

export const checkListing: Command = {
  name: 'check-listing',
  usage: '--ecosystem npm|pypi|go --package NAME --public-key B64 (--url LISTING_URL | --file FILE --proof-file FILE) [options]',
  summary:
    "Checks that a package listing (npm packument, PyPI simple page, Go @v/list) shows exactly the versions the log's completeness index proves for its unit. Exit 0 complete, 1 a check failed (named on stderr), 2 usage or environment error.",
  details: [
    'With --url the listing is fetched (any gateway) and its Vouch-Index-Proof and Vouch-Index-Checkpoint headers are used, or, when the',
    'proof is too long for a header, the side route Vouch-Index-Proof-Url names (of the same size, else the listing is fetched again).',
    'With --file the listing is read from FILE and the proof from --proof-file (the JSON of GET /v1/index/proof?unit=NAME).',
    'The note must verify with --public-key; its vouch-index/v1 root must be reached by the unit proof; the versions shown must be',
    'every endorsed version not revoked today (none missing), no revoked one, and (--unendorsed deny, the default) no other.',
    'See docs/spec/index.md section 11 and docs/guide/completeness.md.',
  ].join('\n'),
  options: {
    ecosystem: { type: 'string', value: 'npm|pypi|go', help: 'the kind of listing', required: true },
    package: { type: 'string', value: 'NAME', help: 'npm package (@scope/name), PyPI project or Go module path', required: true },
    'public-key': {
      type: 'string',
      value: 'B64',
      help: "the log's block 0 key (base64): notes must be signed by it or by the key its key events put in force since",
      required: true,
    },
    origin: { type: 'string', value: 'NAME', help: "the log's origin line, when pinned" },
    url: { type: 'string', value: 'URL', help: 'the listing URL through a gateway (e.g. http://gw/npm/leftpad, .../simple/x/, .../@v/list or .../@latest)' },
    gateway: { type: 'string', value: 'URL', help: "the gateway's base URL for the side route and consistency proofs (default: --url's origin)" },
    file: { type: 'string', value: 'FILE', help: 'read the listing from FILE instead of fetching it' },
    'proof-file': { type: 'string', value: 'FILE', help: 'with --file: the JSON answer of /v1/index/proof for the unit' },
    form: { type: 'string', value: 'F', help: 'what to ask for with --url: npm abbreviated|full, pypi json|html (default abbreviated / json)' },
    unendorsed: { type: 'string', value: 'deny|pass', help: "the route's policy: pass allows versions the log does not endorse (default deny)" },
    state: { type: 'string', value: 'FILE', help: 'remember the newest checkpoint per origin here and refuse an older one (as vouch get --state)' },
    timeout: { type: 'string', value: 'S', help: 'seconds per request (default 30)' },
  },
  async run(v) {
    const eco = v.ecosystem as Ecosystem;
    if (!(eco in ACCEPT)) throw new UsageError('--ecosystem must be npm, pypi or go');
    const unitM = listingUnit(eco, v.package);
    if (!unitM.ok) throw new UsageError(`--package: ${unitM.reason}`);
    const unit = unitM.value;
    const key = base64Decode(v['public-key']);
    if (key === null || key.length !== 32) throw new UsageError('--public-key must be base64 of a 32-byte ed25519 public key');
    if ((v.url === undefined) === (v.file === undefined)) throw new UsageError('give exactly one of --url and --file');
    if (v.file !== undefined && v['proof-file'] === undefined) throw new UsageError('--file needs --proof-file');
    const policy = v.unendorsed ?? 'deny';
    if (policy !== 'deny' && policy !== 'pass') throw new UsageError('--unendorsed must be deny or pass');
    const timeoutMs = v.timeout === undefined ? 30_000 : Number(v.timeout) * 1000;
    if (!(timeoutMs > 0 && timeoutMs <= 3_600_000)) throw new UsageError('--timeout must be seconds, 1 to 3600');
    const forms = ACCEPT[eco];
    const form = v.form ?? Object.keys(forms)[0]!;
    if (forms[form] === undefined) throw new UsageError(`--form for ${eco} must be one of ${Object.keys(forms).join(', ')}`);
    let gateway: string | null = v.gateway ?? null;
    if (gateway === null && v.url !== undefined) {
      try {
        gateway = new URL(v.url).origin;
      } catch {
        throw new UsageError('--url is not a URL');
      }
    }
    gateway = gateway?.replace(/\/+$/, '') ?? null;
    if (v.state !== undefined && gateway === null) throw new UsageError('--state with --file needs --gateway (for consistency proofs)');
    const authority = { publicKey: key, ...(v.origin !== undefined ? { origin: v.origin as string } : {}) };

    try {
      // 1. The listing and the proof it carries (docs/spec/index.md 11).
      let body: Uint8Array;
      let contentType: string | null = null;
      let proof: ListingProof;
      if (v.file !== undefined) {
        body = readCapped(v.file);
        proof = sideProof(readCapped(v['proof-file']), v['proof-file']);
      } else {
        let found: { body: Uint8Array; contentType: string | null; proof: ListingProof } | null = null;
        for (let attempt = 0; attempt < 3 && found === null; attempt++) {
          const got = await fetchCapped(v.url, forms[form]!, timeoutMs);
          if (got.status !== 200) throw new Refusal('bad_answer', `${v.url} answered ${got.status}: no listing to check`);
          const h = (n: string) => got.headers.get(n);
          const inline = h(LISTING_HEADER.proof);
          const note = h(LISTING_HEADER.checkpoint);
          const size = h(LISTING_HEADER.size);
          const link = h(LISTING_HEADER.proofUrl);
          let p: ListingProof;
          if (inline !== null && note !== null) {
            const noteBytes = base64Decode(note.trim());
            if (noteBytes === null) throw new Refusal('bad_proof', `${v.url}: Vouch-Index-Checkpoint is not base64`);
            p = {
              kind: 'unit',
              name: h(LISTING_HEADER.unit) ?? unit,
              size: Number(size ?? -1),
              proof: inline.trim(),
              checkpoint: Buffer.from(noteBytes).toString('utf8'),
            };
          } else if (link !== null && gateway !== null) {
            if (!link.startsWith('/')) throw new Refusal('bad_proof', `${v.url}: Vouch-Index-Proof-Url is not a path on the gateway`);
            const side = await fetchCapped(gateway + link, 'application/json', timeoutMs);
            if (side.status !== 200) throw new Refusal('no_proof', `${gateway + link} answered ${side.status}: no completeness proof for ${unit}`);
            p = sideProof(side.body, gateway + link);
            if (size !== null && String(p.size) !== size) continue; // the log moved between the two answers: ask again
          } else {
            throw new Refusal(
              'no_proof',
              `${v.url} carries no completeness proof (no Vouch-Index-Proof or Vouch-Index-Proof-Url): nothing shows the listing is complete`,
            );
          }
          found = { body: got.body, contentType: got.headers.get('content-type'), proof: p };
        }
        if (found === null) throw new Refusal('bad_proof', `${v.url}: the side route's proof never matched the listing's Vouch-Index-Size (3 attempts)`);
        ({ body, contentType, proof } = found);
      }
      if (proof.kind !== 'unit' || proof.name !== unit)
        throw new Refusal(
          'bad_proof',
          `the proof is for ${proof.kind} ${JSON.stringify(proof.name.slice(0, 200))}, the listing of ${v.package} is unit ${unit}`,
        );

      // 2. The checkpoint: signed by the pinned key, not older than one seen before, its index root.
      // The key that signs notes now: the pinned one, or the one the log's key events put in force since
      // (walked once from the gateway's /v1/keys when the note does not open with the keys known, as vouch get does).
      const follower = new KeyFollower({ kind: 'key', publicKey: v['public-key'] }, async (g, since) => {
        const r = await fetchCapped(`${g}/v1/keys?since=${since}`, 'application/json', timeoutMs);
        if (r.status === 404) return null;
        if (r.status !== 200) throw new Refusal('bad_answer', `${g}/v1/keys answers HTTP ${r.status}: the log's key events cannot be checked`);
        try {
          return JSON.parse(Buffer.from(r.body).toString('utf8')) as unknown;
        } catch {
          throw new Refusal('bad_answer', `${g}/v1/keys: the answer is not JSON`);
        }
      });
      if (v.state !== undefined) follower.loadFrom(loadState(v.state), v.origin ?? null);
      const source = v.url ?? v['proof-file'];
      let cp: VerifiedCheckpoint;
      try {
        cp = openVerified(nodeBackend, proof.checkpoint, { ...authority, publicKey: follower.online() }, source);
      } catch (e) {
        if (!(e instanceof Refusal && e.code === 'bad_checkpoint') || gateway === null || !(await follower.walk(gateway))) throw e;
        cp = openVerified(nodeBackend, proof.checkpoint, { ...authority, publicKey: follower.online() }, source);
      }
      if (v.state !== undefined) await checkState(v.state, cp, authority, follower, gateway!, timeoutMs);
      const root = indexRootOfNote(cp.text);
      if (root === null)
        throw new Refusal(
          'no_proof',
          `the checkpoint of size ${cp.size} commits no completeness index (no vouch-index/v1 line): the listing cannot be checked`,
        );
      if (proof.size !== cp.size) throw new Refusal('bad_proof', `the proof is said to be for size ${proof.size}, its checkpoint is size ${cp.size}`);
      const bytes = base64Decode(proof.proof);
      if (bytes === null) throw new Refusal('bad_proof', 'the index proof is not base64');
      const checked = verifyIndexProof(nodeBackend, bytes, 'unit', unit, { root, size: cp.size });
      if (!checked.ok) throw new Refusal('bad_proof', checked.reason);

      // 3. The versions shown against the proved ones.
      let listing: ReturnType<typeof shownVersions>;
      try {
        listing = shownVersions(eco, v.package, body, contentType);
      } catch (e) {
        if (e instanceof ListingError) throw new Refusal('bad_answer', `the listing of ${v.package}: ${e.message}`);
        throw e;
      }
      const today = new Date().toISOString().slice(0, 10);
      const exp = expectedListing(checked.value.events, checked.value.voids, today);
      if (listing.latest !== undefined) {
        // Go @latest: the go command's latest of the live versions (releases first).
        const want = latestOf(exp.live.map((s) => `v${s}`));
        if (want !== listing.latest) {
          const rev = exp.revoked.includes(listing.latest.slice(1));
          throw new Refusal(
            'index_mismatch',
            `${rev ? 'hidden revocation' : 'older version'}: @latest of ${v.package} names ${listing.latest}, the log's index at size ${cp.size} makes it ${want ?? 'none (no live version)'}`,
          );
        }
        emit(
          v,
          `listing ok: @latest of ${v.package} is ${want}, the latest of the ${exp.live.length} live version(s) the log's index at size ${cp.size} proves for ${unit}`,
          {
            unit,
            size: cp.size,
            index_root: base64Encode(root),
            latest: want,
            versions: exp.live,
            revoked: exp.revoked,
          },
        );
        return 0;
      }
      const verdict = judgeListing(exp, listing.shown, policy);
      const at = `the log's index at size ${cp.size}`;
      const list = (xs: string[]) => xs.slice(0, 10).join(', ') + (xs.length > 10 ? `, ... (${xs.length})` : '');
      if (verdict.revokedShown.length > 0)
        throw new Refusal('index_mismatch', `hidden revocation: the listing of ${v.package} shows ${list(verdict.revokedShown)}, revoked in ${at}`);
      if (verdict.missing.length > 0)
        throw new Refusal(
          'index_mismatch',
          `missing version: the listing of ${v.package} leaves out ${list(verdict.missing)}, endorsed and not revoked in ${at}`,
        );
      if (verdict.added.length > 0)
        throw new Refusal(
          'index_mismatch',
          `added version: the listing of ${v.package} shows ${list(verdict.added)}, which ${at} does not endorse for ${unit}`,
        );
      if (policy === 'deny' && listing.unreadable.length > 0)
        throw new Refusal(
          'index_mismatch',
          `added version: the listing of ${v.package} shows ${list(listing.unreadable)}, whose version has no chain spelling`,
        );
      emit(
        v,
        `listing ok: ${v.package} shows exactly the ${exp.live.length} version(s) ${at} proves for ${unit}${exp.live.length ? ` (${list(exp.live)})` : ''}${exp.revoked.length ? `; revoked, not shown: ${list(exp.revoked)}` : ''}`,
        { unit, size: cp.size, index_root: base64Encode(root), versions: exp.live, revoked: exp.revoked },
      );
      return 0;
    } catch (e) {
      if (e instanceof Refusal) return refuse(v, e.code, e.line);
      throw e;
    }
  },
};

/** `--state`: the checkpoint must not be older than the one remembered, and must extend it (consistency proof from the gateway). */
async function checkState(
  path: string,
  cp: VerifiedCheckpoint,
  authority: Authority,
  follower: KeyFollower,
  gateway: string,
  timeoutMs: number,
): Promise<void> {
  const state = loadState(path);
  const s = state.get(cp.origin);
  if (s !== undefined) {
    // The remembered note was signed by a key in force then: the pinned one or one walked since.
    let seen: VerifiedCheckpoint | null = null;
    let why = '';
    for (const key of follower.noteKeys()) {
      try {
        seen = openVerified(nodeBackend, s.note, { ...authority, publicKey: key }, `state file ${path}`);
        break;
      } catch (e) {
        if (!(e instanceof Refusal)) throw e;
        why ||= e.line;
      }
    }
    if (seen === null)
      throw new Refusal('bad_state', `the state file's checkpoint for ${cp.origin} does not verify with --public-key or a key walked since (${why})`);
    if (seen.size !== s.size || base64Encode(seen.root) !== s.root)
      throw new Refusal('bad_state', `the state file's entry for ${cp.origin} does not match its own note`);
    if (cp.size < seen.size) throw staleCheckpoint(seen, cp);
    await proveExtends(
      nodeBackend,
      seen,
      cp,
      async (from, to) => {
        const r = await fetchCapped(`${gateway}/v1/proof/consistency?from=${from}&to=${to}`, 'application/json', timeoutMs);
        if (r.status !== 200) throw new Refusal('bad_proof', `${gateway} gives no consistency proof from size ${from} to ${to} (HTTP ${r.status})`);
        return { hashes: parseConsistencyAnswer(JSON.parse(Buffer.from(r.body).toString('utf8')), from, to, gateway), source: gateway };
      },
      path,
    );
  }
  const keys = follower.stored();
  saveCheckpoint(path, cp.origin, { size: cp.size, root: base64Encode(cp.root), note: cp.text, ...(keys !== undefined ? { keys } : {}) });
}
