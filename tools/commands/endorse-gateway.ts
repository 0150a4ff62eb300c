/**
 * `vouch endorse --gateway URL --token-file FILE`: endorsing through a
 * running authority gateway (POST /v1/submit) instead of writing the chain.
 *
 * Owns: the client side. `--url` makes one submit; `--lockfile` reads the
 * lockfile as the offline command does (endorse-lockfile.ts), packs its
 * entries into the blocks the offline command would make (blocks.ts) and
 * makes one submit per block, each entry carrying the lockfile's hash as a
 * claim (`expect`) and its algorithm. Progress comes back as NDJSON lines;
 * a bar on a terminal, one plain line per block otherwise.
 *
 * Trusts: nothing it sends: the authority fetches and hashes every artifact
 * and refuses a block whose bytes contradict a claim. Must hold: one line
 * per refused entry naming the lockfile's package; the exit codes of the
 * offline command (tools/exit-codes.ts); the token is never printed.
 */
import { readFileSync } from 'node:fs';
import { emit, progressReporter, UsageError } from '../command.ts';
import { VouchError, type ErrorCode } from '../../chain/errors.ts';
import { buildAuthorityBlock, buildEndorseBlock, type EndorsementInput } from '../../chain/build.ts';
import type { Block } from '../../chain/block.ts';
import { HASH_ALGORITHMS } from '../../chain/hash-algorithms.ts';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { UNS_FULL_MAX } from '../../chain/uns-header.ts';
import { EXIT_CODE } from '../exit-codes.ts';
import { Http } from '../lockfiles/http.ts';
import { resolveRequirements } from '../lockfiles/pip.ts';
import { packBlocks } from '../lockfiles/blocks.ts';
import type { Pinned } from '../lockfiles/types.ts';
import { byUrlOf, CONCURRENCY, readLockfileRun, skippedText } from './endorse-lockfile.ts';
import { checkUrlOptions } from './endorse-options.ts';

/** Most entries the gateway takes in one submit (gateway/routes/submit-request.ts MAX_SUBMIT_ENDORSEMENTS). */
const SUBMIT_MAX_ENTRIES = 1000;
const TOKEN_MAX_BYTES = 4096;
/**
 * Blocks of one lockfile being hashed by the authority at once. 1: block k+1 is sent when block k is hashed,
 * so it queues behind k and the blocks land in lockfile order, while its fetches overlap k's commit (4 was
 * no faster here: the authority fetches 8 artifacts at a time over all submits).
 */
const IN_FLIGHT = 1;
/** One NDJSON line of the answer at most (the result line names the block's URLs). */
const LINE_MAX_BYTES = 4 * 1024 * 1024;

interface SubmitEntryBody { url: string; name: string; semver: string; license: string; comment: string; expect?: string[]; algorithm?: HashAlgorithm }

interface Answer { httpStatus: number; body: Record<string, any> }

export function readToken(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new VouchError('io_error', `cannot read --token-file ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const token = text.trim();
  if (token.length === 0 || token.length > TOKEN_MAX_BYTES || /\s/.test(token)) {
    throw new UsageError(`--token-file ${file} must hold one token (no spaces, at most ${TOKEN_MAX_BYTES} bytes)`);
  }
  return token;
}

export function gatewayBase(given: string): string {
  if (!/^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/i.test(given)) throw new UsageError(`--gateway must be an absolute http(s) URL, got ${JSON.stringify(given)}`);
  return given.replace(/\/+$/, '');
}

/** A gateway's failure as the error the offline command would have raised. */
export function gatewayError(a: Answer): VouchError {
  const code = typeof a.body.status === 'string' && a.body.status in EXIT_CODE ? a.body.status as ErrorCode : 'internal_error';
  const message = typeof a.body.message === 'string' ? a.body.message : `the gateway answered ${a.httpStatus}`;
  return new VouchError(code, `the gateway refused: ${message}`, typeof a.body.resource === 'string' ? { resource: a.body.resource } : {});
}

/** POST /v1/submit asking for NDJSON progress; `onProgress(done)` per entry hashed. */
export async function submit(base: string, token: string, body: Record<string, unknown>, onProgress: (done: number) => void): Promise<Answer> {
  let res: Response;
  try {
    res = await fetch(`${base}/v1/submit`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/x-ndjson, application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new VouchError('origin_error', `cannot reach the gateway ${base}: ${cause?.code ?? cause?.message ?? (e as Error).message}`);
  }
  const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-ndjson') {
    // An error before the submit started (401, 400, 404 ...) is plain JSON.
    const text = await res.text();
    let parsed: Record<string, any> = {};
    try { parsed = JSON.parse(text.slice(0, LINE_MAX_BYTES)); } catch { /* not JSON: the status says it */ }
    return { httpStatus: res.status, body: parsed };
  }
  const decoder = new TextDecoder();
  let pending = '';
  let result: Answer | null = null;
  const take = (line: string) => {
    if (line.trim() === '') return;
    let o: Record<string, any>;
    try { o = JSON.parse(line); } catch { throw new VouchError('bad_answer', `the gateway sent a line that is not JSON: ${JSON.stringify(line.slice(0, 100))}`); }
    if (o.progress && typeof o.progress.done === 'number') onProgress(o.progress.done);
    else if (typeof o.http_status === 'number') {
      const { http_status: httpStatus, ...rest } = o;
      result = { httpStatus, body: rest };
    }
  };
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    pending += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      take(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
    }
    if (pending.length > LINE_MAX_BYTES) throw new VouchError('bad_answer', `the gateway sent a line longer than ${LINE_MAX_BYTES} bytes`);
  }
  take(pending);
  if (result === null) throw new VouchError('origin_error', `the gateway ${base} closed the answer before its result line: the block may or may not be signed (look it up, or submit again: a resubmit of the same bytes is answered unchanged)`);
  return result;
}

/** What the lockfile claims of an entry's bytes (POST /v1/submit `expect`). */
function claimsOf(p: Pinned): string[] {
  if (p.claims) return p.claims;
  if (p.check.kind === 'digest') return Object.entries(p.check.want).flatMap(([alg, list]) => list!.map((hex) => `${alg}:${hex}`));
  return [p.check.h1];
}

/** A progress sink: a bar on a terminal; nothing otherwise (the caller prints a line per block). */
function bar(quiet: boolean, total: number) {
  const tty = process.stderr.isTTY === true && !quiet;
  const reporter = tty ? progressReporter('authority hashing') : null;
  return {
    tty,
    update(done: number) { reporter?.update(done, total); },
    done() { reporter?.done(); },
  };
}

export async function endorseGateway(v: Record<string, any>): Promise<number> {
  if (v.chain !== undefined || v.key !== undefined) throw new UsageError('--chain and --key do not apply with --gateway: the running authority signs with its own key');
  if (v['token-file'] === undefined) throw new UsageError('--gateway needs --token-file FILE (the authority\'s submit token)');
  for (const o of ['file', 'origin']) {
    if (v[o] !== undefined) throw new UsageError(`--${o} does not apply with --gateway: the authority fetches every artifact from its own URL itself`);
  }
  const base = gatewayBase(v.gateway);
  return v.lockfile !== undefined ? lockfileThroughGateway(v, base) : urlsThroughGateway(v, base);
}

async function urlsThroughGateway(v: Record<string, any>, base: string): Promise<number> {
  for (const o of ['url', 'name', 'semver', 'license']) {
    if (v[o] === undefined) throw new UsageError(`missing --${o} (see vouch endorse --help)`);
  }
  const urls: string[] = v.url;
  if (urls.length > SUBMIT_MAX_ENTRIES) throw new UsageError(`at most ${SUBMIT_MAX_ENTRIES} --url per submit`);
  const algorithm = checkUrlOptions(v, urls);
  const token = readToken(v['token-file']);
  const quiet = v.quiet === true || v.json === true;

  const body: Record<string, unknown> = {
    uns: v.name, semver: v.semver, algorithm,
    endorsements: urls.map((url) => ({ url, name: v.name, semver: v.semver, license: v.license, comment: v.comment ?? '' })),
    ...(v.comment !== undefined ? { comment: v.comment } : {}),
    ...(v['effective-date'] !== undefined ? { effective_date: v['effective-date'] } : {}),
  };
  const progress = bar(quiet, urls.length);
  let answer: Answer;
  try {
    answer = await submit(base, token, body, (d) => progress.update(d));
  } finally {
    progress.done();
  }
  if (answer.httpStatus !== 200 && answer.httpStatus !== 201) throw gatewayError(answer);
  const { index, record_hash: recordHash } = answer.body;
  if (answer.httpStatus === 200) {
    emit(v, `unchanged: ${urls.length === 1 ? urls[0] : `all ${urls.length} URLs`} already signed with these bytes in block ${index} ${recordHash}`,
      { status: 'unchanged', index, record_hash: recordHash, urls });
  } else {
    emit(v, `${index} ${recordHash}`, { status: 'posted', index, record_hash: recordHash, urls });
  }
  return 0;
}

/** A prev block for measuring packed blocks (never sent): signed by a throwaway key under the authority's signer id. */
function probePrev(signerId: string): { prev: Block; signer: ReturnType<typeof nodeSigner> } {
  const key = privateKeyFromSeed(new Uint8Array(32).fill(7));
  const signer = nodeSigner(signerId, key);
  return { prev: buildAuthorityBlock({ signer, backend: nodeBackend, now: Date.now(), uns: 'vouch/probe' }), signer };
}

async function authoritySigner(base: string): Promise<string> {
  try {
    const res = await fetch(`${base}/v1/authority`, { headers: { accept: 'application/json' } });
    const body = await res.json() as Record<string, unknown>;
    if (res.ok && typeof body.signer === 'string') return body.signer;
  } catch { /* the submit below reports an unreachable gateway */ }
  return 'vouch';
}

async function lockfileThroughGateway(v: Record<string, any>, base: string): Promise<number> {
  const run = readLockfileRun(v);
  const { file, fileName, type, indexUrl, options, requirements, skipped, notes, uns, semver, quiet } = run;
  const token = readToken(v['token-file']);
  let pinned = run.pinned;
  if (type === 'pip') {
    // The index pages name the files; the authority fetches and hashes the files themselves.
    const http = new Http(run.origins);
    try {
      ({ pinned } = await resolveRequirements(requirements, http, indexUrl, options, CONCURRENCY));
    } finally {
      await http.close();
    }
  }
  const byUrl = byUrlOf(pinned);
  const unique = [...byUrl.values()];

  // The blocks the offline command would make, measured with a placeholder hash of each entry's algorithm.
  const { prev: probe, signer } = probePrev(await authoritySigner(base));
  const inputs: EndorsementInput[] = unique.map((p) => ({
    url: p.url, artifactHash: `${p.endorseAlgorithm}:${'0'.repeat(HASH_ALGORITHMS[p.endorseAlgorithm].hexLength)}`,
    name: p.name, semver: p.semver, license: p.license, comment: p.comment,
  }));
  const commentOf = (part: number, parts: number) => v.comment ?? `${uns} ${semver} from ${fileName}${parts > 1 ? ` part ${part} of ${parts}` : ''}`;
  const probeBlocks = packBlocks(inputs, { maxEntries: Math.min(run.maxEntries, SUBMIT_MAX_ENTRIES), maxBytes: run.maxBytes, maxUnsBytes: UNS_FULL_MAX },
    (chunk, prev, part, parts) => buildEndorseBlock({
      prev: prev ?? probe, signer, backend: nodeBackend, now: Date.now(), entries: chunk, uns, semver, comment: commentOf(part, parts),
    }));
  const parts = probeBlocks.length;

  const progress = bar(quiet, unique.length);
  const posted: { index: number; record_hash: string; entries: number }[] = [];
  let unchanged = 0;
  let first = null as VouchError | null;
  let firstAt = parts;
  let fatal: unknown = null;
  const doneOf = new Array<number>(parts).fill(0);
  const show = () => progress.update(doneOf.reduce((a, b) => a + b, 0));
  const labelOf = (url: string) => byUrl.get(url)?.label ?? url;
  // Each block's stderr lines, printed in block order as soon as the blocks before it are reported.
  const report = new Array<string[] | null>(parts).fill(null);
  let reported = 0;
  const flush = () => {
    while (reported < parts && report[reported] !== null) {
      if (!quiet) for (const line of report[reported]!) process.stderr.write(line);
      reported++;
    }
  };
  /**
   * One block's submit. The next block is sent once this one is hashed (its last progress line): it then
   * waits in the authority's queue behind this one, so the blocks land in lockfile order while the
   * authority fetches the next block during this one's commit (and waiting blocks share a commit).
   */
  const one = async (k: number, hashed: () => void): Promise<void> => {
    const chunk = probeBlocks[k]!.payload.endorsements.map((e) => byUrl.get(e.artifact_url)!);
    const body: Record<string, unknown> = {
      uns, semver, comment: commentOf(k + 1, parts),
      ...(v['effective-date'] !== undefined ? { effective_date: v['effective-date'] } : {}),
      endorsements: chunk.map((p): SubmitEntryBody => ({
        url: p.url, name: p.name, semver: p.semver, license: p.license, comment: p.comment, expect: claimsOf(p), algorithm: p.endorseAlgorithm,
      })),
    };
    let answer: Answer;
    try {
      answer = await submit(base, token, body, (d) => {
        doneOf[k] = d;
        show();
        if (d >= chunk.length) hashed();
      });
    } finally {
      hashed();
    }
    doneOf[k] = chunk.length;
    show();
    const where = `block ${k + 1} of ${parts} (${chunk.length} entries)`;
    const lines: string[] = [];
    if (answer.httpStatus === 201 || answer.httpStatus === 200) {
      if (answer.httpStatus === 201) posted.push({ index: answer.body.index, record_hash: answer.body.record_hash, entries: chunk.length });
      else unchanged += chunk.length;
      if (!progress.tty) lines.push(`${where}: ${answer.httpStatus === 201 ? `posted at index ${answer.body.index}` : `unchanged (block ${answer.body.index})`}\n`);
      report[k] = lines;
      return;
    }
    const err = gatewayError(answer);
    if (err.code === 'hash_mismatch' && Array.isArray(answer.body.refused)) {
      for (const r of answer.body.refused as { url: string; expected: string[]; fetched: string[] }[]) {
        lines.push(`refused: ${labelOf(r.url)}: ${r.url} hashes ${r.fetched.join(' ')}, ${fileName} claims ${r.expected.join(' or ')}\n`);
      }
    } else if (err.code === 'semver_conflict' || err.code === 'origin_error' || err.code === 'origin_timeout' || err.code === 'too_large') {
      const url = typeof answer.body.resource === 'string' ? answer.body.resource : '';
      lines.push(`refused: ${labelOf(url)}: ${answer.body.message}\n`);
    } else {
      throw err;
    }
    lines.push(`${where}: refused, nothing of it signed\n`);
    report[k] = lines;
    if (first === null || k < firstAt) { first = err; firstAt = k; }
  };
  const running: Promise<void>[] = [];
  try {
    const gates: Promise<void>[] = [];
    for (let k = 0; k < parts && fatal === null; k++) {
      // At most IN_FLIGHT blocks being hashed by the authority at once.
      if (k >= IN_FLIGHT) await gates[k - IN_FLIGHT];
      let hashed!: () => void;
      gates.push(new Promise<void>((r) => { hashed = r; }));
      running.push(one(k, hashed).then(() => { progress.done(); flush(); show(); }, (e) => { fatal ??= e; report[k] = []; }));
    }
    await Promise.all(running);
  } finally {
    progress.done();
  }
  flush();
  if (fatal !== null) throw fatal;
  posted.sort((a, b) => a.index - b.index);
  if (!quiet) for (const n of notes) process.stderr.write(`note: ${n}\n`);
  const entries = posted.reduce((a, b) => a + b.entries, 0);
  if (first) {
    throw new VouchError(first.code, `${first.message.replace(/^the gateway refused: /, '')}; ${posted.length} of ${parts} blocks posted`,
      first.resource !== undefined ? { resource: first.resource } : {});
  }
  const where = posted.length === 1 ? `1 block (index ${posted[0]!.index})`
    : posted.length === 0 ? '0 blocks' : `${posted.length} blocks (indexes ${posted.map((b) => b.index).join(', ')})`;
  const skippedTotal = Object.values(skipped).reduce((a, b) => a + b, 0);
  emit(v, `posted ${entries} entries in ${where} through ${base}; ${unchanged} unchanged, ${skippedText(skipped)}`, {
    status: posted.length ? 'posted' : 'unchanged', lockfile: file, type, uns, semver, gateway: base,
    entries, unchanged, skipped: skippedTotal, skipped_by_reason: skipped, notes, blocks: posted,
  });
  return 0;
}
