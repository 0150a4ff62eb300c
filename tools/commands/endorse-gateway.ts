/**
 * `vouch endorse --gateway URL --token-file FILE`: endorsing through a
 * running authority (POST /v1/submit) instead of writing the chain. `--url`
 * makes one submit; `--lockfile` reads and packs the lockfile as the offline
 * command does and sends the blocks form, in as few submits as its bounds
 * allow (bench/RESULTS.md "Endorsing a lockfile through the running
 * authority"); each entry carries the lockfile's hash as `expect`. Progress
 * comes back as NDJSON: a bar on a terminal, a line per block otherwise.
 * Trusts: nothing it sends: the authority fetches, hashes and checks claims.
 * Must hold: one line per refused entry naming the package; the offline
 * command's exit codes; the token is never printed.
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
import { resolveRequirements } from '../lockfiles/pip.ts';
import { resolveMaven } from '../lockfiles/maven.ts';
import { packBlocks } from '../lockfiles/blocks.ts';
import type { Pinned } from '../lockfiles/types.ts';
import { byUrlOf, CONCURRENCY, readLockfileRun, skippedText } from './endorse-lockfile.ts';
import { checkUrlOptions } from './endorse-options.ts';

/** Most entries and blocks the gateway takes in one submit (gateway/routes/submit-request.ts MAX_SUBMIT_ENDORSEMENTS, MAX_SUBMIT_BLOCKS). */
const SUBMIT_MAX_ENTRIES = 1000;
const SUBMIT_MAX_BLOCKS = 256;
/** Most bytes of one submit body sent (the gateway reads at most 1 MiB, gateway/http/server.ts SUBMIT_BODY_LIMIT). */
const SUBMIT_MAX_BODY_BYTES = 768 * 1024;
const TOKEN_MAX_BYTES = 4096;
/**
 * Submits of one lockfile being hashed by the authority at once. 1: submit k+1 is sent when submit k is
 * hashed, so it queues behind k and the blocks land in lockfile order, while its fetches overlap k's commit.
 */
const IN_FLIGHT = 1;
/** One NDJSON line of the answer at most (the result line names the block's URLs). */
const LINE_MAX_BYTES = 4 * 1024 * 1024;

interface SubmitEntryBody {
  url: string;
  name: string;
  semver: string;
  license: string;
  comment: string;
  expect?: string[];
  algorithm?: HashAlgorithm;
}

export interface Answer {
  httpStatus: number;
  body: Record<string, any>;
}

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
  const code = typeof a.body.status === 'string' && a.body.status in EXIT_CODE ? (a.body.status as ErrorCode) : 'internal_error';
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
    try {
      parsed = JSON.parse(text.slice(0, LINE_MAX_BYTES));
    } catch {
      /* not JSON: the status says it */
    }
    return { httpStatus: res.status, body: parsed };
  }
  const decoder = new TextDecoder();
  let pending = '';
  let result: Answer | null = null;
  const take = (line: string) => {
    if (line.trim() === '') return;
    let o: Record<string, any>;
    try {
      o = JSON.parse(line);
    } catch {
      throw new VouchError('bad_answer', `the gateway sent a line that is not JSON: ${JSON.stringify(line.slice(0, 100))}`);
    }
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
  if (result === null)
    throw new VouchError(
      'origin_error',
      `the gateway ${base} closed the answer before its result line: the block may or may not be signed (look it up, or submit again: a resubmit of the same bytes is answered unchanged)`,
    );
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
    update(done: number) {
      reporter?.update(done, total);
    },
    done() {
      reporter?.done();
    },
  };
}

export async function endorseGateway(v: Record<string, any>): Promise<number> {
  if (v.chain !== undefined || v.key !== undefined)
    throw new UsageError('--chain and --key do not apply with --gateway: the running authority signs with its own key');
  if (v['token-file'] === undefined) throw new UsageError("--gateway needs --token-file FILE (the authority's submit token)");
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
    uns: v.name,
    semver: v.semver,
    algorithm,
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
    emit(v, `unchanged: ${urls.length === 1 ? urls[0] : `all ${urls.length} URLs`} already signed with these bytes in block ${index} ${recordHash}`, {
      status: 'unchanged',
      index,
      record_hash: recordHash,
      urls,
    });
  } else {
    // tree_size: what `vouch get --min-tree-size` (Vouch-Min-Tree-Size) asks a mirror for to read this block (docs/guide/fleet.md).
    emit(v, `${index} ${recordHash}`, {
      status: 'posted',
      index,
      record_hash: recordHash,
      urls,
      ...(typeof index === 'number' ? { tree_size: index + 1 } : {}),
    });
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
    const body = (await res.json()) as Record<string, unknown>;
    if (res.ok && typeof body.signer === 'string') return body.signer;
  } catch {
    /* the submit below reports an unreachable gateway */
  }
  return 'vouch';
}

async function lockfileThroughGateway(v: Record<string, any>, base: string): Promise<number> {
  const run = readLockfileRun(v);
  const { file, fileName, type, indexUrl, options, requirements, skipped, notes, uns, semver, quiet } = run;
  const token = readToken(v['token-file']);
  let pinned = run.pinned;
  if (type === 'pip') {
    // The index pages name the files; the authority fetches and hashes the files themselves.
    // Loaded here only: undici, which the HTTP client needs, is not loaded by a run that fetches nothing itself.
    const { Http } = await import('../lockfiles/http.ts');
    const http = new Http(run.origins);
    try {
      ({ pinned } = await resolveRequirements(requirements, http, indexUrl, options, CONCURRENCY));
    } finally {
      await http.close();
    }
  }
  if (type === 'maven') {
    // The repository's checksums (and the parent POMs of a list) are read here; the authority fetches and hashes the files.
    const { Http } = await import('../lockfiles/http.ts');
    const http = new Http(run.origins);
    try {
      pinned = await resolveMaven(run.mavenFiles, http, run.mavenRepo, options, CONCURRENCY, run.followPoms, notes);
    } finally {
      await http.close();
    }
  }
  const byUrl = byUrlOf(pinned);
  const unique = [...byUrl.values()];

  // The blocks the offline command would make, measured with a placeholder hash of each entry's algorithm.
  const { prev: probe, signer } = probePrev(await authoritySigner(base));
  const inputs: EndorsementInput[] = unique.map((p) => ({
    url: p.url,
    artifactHash: `${p.endorseAlgorithm}:${'0'.repeat(HASH_ALGORITHMS[p.endorseAlgorithm].hexLength)}`,
    name: p.name,
    semver: p.semver,
    license: p.license,
    comment: p.comment,
  }));
  const commentOf = (part: number, parts: number) => v.comment ?? `${uns} ${semver} from ${fileName}${parts > 1 ? ` part ${part} of ${parts}` : ''}`;
  const probeBlocks = packBlocks(
    inputs,
    { maxEntries: Math.min(run.maxEntries, SUBMIT_MAX_ENTRIES), maxBytes: run.maxBytes, maxUnsBytes: UNS_FULL_MAX },
    (chunk, prev, part, parts) =>
      buildEndorseBlock({
        prev: prev ?? probe,
        signer,
        backend: nodeBackend,
        now: Date.now(),
        entries: chunk,
        uns,
        semver,
        comment: commentOf(part, parts),
      }),
  );
  const parts = probeBlocks.length;

  // The blocks' bodies, grouped into submits of the blocks form within the gateway's bounds.
  const bodies = probeBlocks.map((b, k) => ({
    uns,
    semver,
    comment: commentOf(k + 1, parts),
    ...(v['effective-date'] !== undefined ? { effective_date: v['effective-date'] } : {}),
    endorsements: b.payload.endorsements.map((e): SubmitEntryBody => {
      const p = byUrl.get(e.artifact_url)!;
      return {
        url: p.url,
        name: p.name,
        semver: p.semver,
        license: p.license,
        comment: p.comment,
        ...(claimsOf(p).length > 0 ? { expect: claimsOf(p) } : {}),
        algorithm: p.endorseAlgorithm,
      };
    }),
  }));
  /** Each submit's first block and its number of blocks. */
  const submits: { from: number; count: number; entries: number }[] = [];
  let bytes = 0;
  bodies.forEach((body, k) => {
    const size = Buffer.byteLength(JSON.stringify(body)) + 1;
    const last = submits[submits.length - 1];
    if (last && last.count < SUBMIT_MAX_BLOCKS && last.entries + body.endorsements.length <= SUBMIT_MAX_ENTRIES && bytes + size <= SUBMIT_MAX_BODY_BYTES) {
      last.count++;
      last.entries += body.endorsements.length;
      bytes += size;
    } else {
      submits.push({ from: k, count: 1, entries: body.endorsements.length });
      bytes = size;
    }
  });

  const progress = bar(quiet, unique.length);
  const posted: { index: number; record_hash: string; entries: number }[] = [];
  let unchanged = 0;
  let first = null as VouchError | null;
  let firstAt = submits.length;
  let fatal: unknown = null;
  const doneOf = new Array<number>(submits.length).fill(0);
  const show = () => progress.update(doneOf.reduce((a, b) => a + b, 0));
  const labelOf = (url: string) => byUrl.get(url)?.label ?? url;
  // Each submit's stderr lines, printed in lockfile order as soon as the submits before it are reported.
  const report = new Array<string[] | null>(submits.length).fill(null);
  let reported = 0;
  const flush = () => {
    while (reported < submits.length && report[reported] !== null) {
      if (!quiet) for (const line of report[reported]!) process.stderr.write(line);
      reported++;
    }
  };
  const blockLine = (k: number) => `block ${k + 1} of ${parts} (${bodies[k]!.endorsements.length} entries)`;
  /**
   * One submit's blocks. The next submit is sent once this one is hashed (its last progress line): it then
   * waits in the authority's queue behind this one, so the blocks land in lockfile order while the
   * authority fetches the next submit's during this one's commit.
   */
  const one = async (g: number, hashed: () => void): Promise<void> => {
    const { from, count, entries } = submits[g]!;
    const body = { blocks: bodies.slice(from, from + count) };
    let answer: Answer;
    try {
      answer = await submit(base, token, body, (d) => {
        doneOf[g] = d;
        show();
        if (d >= entries) hashed();
      });
    } finally {
      hashed();
    }
    doneOf[g] = entries;
    show();
    const lines: string[] = [];
    if (answer.httpStatus === 201 || answer.httpStatus === 200) {
      const answered = answer.body.blocks;
      if (!Array.isArray(answered) || answered.length !== count)
        throw new VouchError('bad_answer', `the gateway answered ${answer.httpStatus} without the status of each of the ${count} blocks sent`);
      answered.forEach((b: { status?: unknown; index?: unknown; record_hash?: unknown }, i: number) => {
        if (b.status === 'posted')
          posted.push({ index: b.index as number, record_hash: b.record_hash as string, entries: bodies[from + i]!.endorsements.length });
        else unchanged += bodies[from + i]!.endorsements.length;
        if (!progress.tty) lines.push(`${blockLine(from + i)}: ${b.status === 'posted' ? `posted at index ${b.index}` : `unchanged (block ${b.index})`}\n`);
      });
      report[g] = lines;
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
    lines.push(
      count === 1
        ? `${blockLine(from)}: refused, nothing of it signed\n`
        : `blocks ${from + 1} to ${from + count} of ${parts} (${entries} entries, sent together): refused, nothing of them signed\n`,
    );
    report[g] = lines;
    if (first === null || g < firstAt) {
      first = err;
      firstAt = g;
    }
  };
  const running: Promise<void>[] = [];
  try {
    const gates: Promise<void>[] = [];
    for (let g = 0; g < submits.length && fatal === null; g++) {
      // At most IN_FLIGHT submits being hashed by the authority at once.
      if (g >= IN_FLIGHT) await gates[g - IN_FLIGHT];
      let hashed!: () => void;
      gates.push(
        new Promise<void>((r) => {
          hashed = r;
        }),
      );
      running.push(
        one(g, hashed).then(
          () => {
            progress.done();
            flush();
            show();
          },
          (e) => {
            fatal ??= e;
            report[g] = [];
          },
        ),
      );
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
    throw new VouchError(
      first.code,
      `${first.message.replace(/^the gateway refused: /, '')}; ${posted.length} of ${parts} blocks posted`,
      first.resource !== undefined ? { resource: first.resource } : {},
    );
  }
  const where =
    posted.length === 1
      ? `1 block (index ${posted[0]!.index})`
      : posted.length === 0
        ? '0 blocks'
        : `${posted.length} blocks (indexes ${posted.map((b) => b.index).join(', ')})`;
  const skippedTotal = Object.values(skipped).reduce((a, b) => a + b, 0);
  emit(v, `posted ${entries} entries in ${where} through ${base}; ${unchanged} unchanged, ${skippedText(skipped)}`, {
    status: posted.length ? 'posted' : 'unchanged',
    lockfile: file,
    type,
    uns,
    semver,
    gateway: base,
    entries,
    unchanged,
    skipped: skippedTotal,
    skipped_by_reason: skipped,
    notes,
    blocks: posted,
  });
  return 0;
}
