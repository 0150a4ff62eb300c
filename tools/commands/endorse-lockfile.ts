/**
 * `vouch endorse --lockfile FILE`: endorses what a project already pins (an
 * npm lockfile, pip requirements with hashes, a go.sum) after fetching each
 * artifact and checking it against the lockfile's hash.
 * Owns the run: options and the whole lockfile read before any fetch; head
 * and key checked before the network; fetches at most 8 at once; earlier
 * endorsements decide `unchanged` (skipped) or `semver_conflict` (exit 1);
 * the rest packed into as few blocks as fit UNS_FULL_MAX
 * (tools/lockfiles/blocks.ts) and appended in one commit.
 * Trusts: the lockfile for what to endorse, never for bytes.
 * Must hold: any failure appends nothing; the endorsed URL is the
 * lockfile's even when `--origin` fetched it elsewhere. Tests may lower the
 * block limits (VOUCH_LOCKFILE_BLOCK_ENTRIES, VOUCH_LOCKFILE_BLOCK_BYTES).
 */
import { readFileSync, statSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { emit, progressReporter, UsageError } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';
import { buildCheckpoint, buildEndorseBlock, type EndorsementInput } from '../../chain/build.ts';
import { type Block, isDate, isSemver, isUnitName, LIMITS } from '../../chain/block.ts';
import { npmUnitName } from '../../chain/unit-names.ts';
import { parseArtifactHash } from '../../chain/hash-algorithms.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { openChain } from '../../store/chain-repo.ts';
import { signerForChain } from '../chain-keys.ts';
import { trustedHead } from '../../store/chain-append.ts';
import { appendWithNote } from '../signed-append.ts';
import { offlineIndexRootWith } from '../offline-index.ts';
import type { Http } from '../lockfiles/http.ts';
import { MiB, OriginMap, hasCredentials } from '../lockfiles/origin-map.ts';
import { MultiHash, type DigestName } from '../lockfiles/digests.ts';
import { checkLicense } from '../lockfiles/licenses.ts';
import { readNpmLock } from '../lockfiles/npm.ts';
import { readRequirements, resolveRequirements, type Requirement } from '../lockfiles/pip.ts';
import { fetchGo, readGoSum } from '../lockfiles/go.ts';
import { readDependencyList, readLocalRepository, resolveMaven, type MavenFile } from '../lockfiles/maven.ts';
import { endorsementsOf } from '../lockfiles/history.ts';
import { noteScan, priorEndorsements, refreshIfBehind } from '../endorse-history.ts';
import { packBlocks } from '../lockfiles/blocks.ts';
import { UNS_FULL_MAX } from '../../chain/uns-header.ts';
import { mapLimit } from '../lockfiles/pool.ts';
import type { Fetched, Options, Pinned, SkipCounts } from '../lockfiles/types.ts';
import { DEFAULT_GOPROXY, DEFAULT_INDEX_URL, DEFAULT_MAVEN_REPO } from '../lockfiles/defaults.ts';

export type LockfileType = 'npm' | 'pip' | 'go' | 'maven';

export const LOCKFILE_MAX_BYTES = 64 * MiB;
/** npm tarballs and Python files are hashed as they stream, never held: the cap is generous. */
export const ARTIFACT_MAX_BYTES = 4096 * MiB;
export const CONCURRENCY = 8;

/** The lockfile type from `--lockfile-type` or the file's name. */
/**
 * The pinned artifacts by URL, the first of each: the same URL twice must agree on what it is.
 * @throws VouchError bad_request when a URL is pinned as two different things.
 */
export function byUrlOf(pinned: readonly Pinned[]): Map<string, Pinned> {
  const byUrl = new Map<string, Pinned>();
  for (const p of pinned) {
    const earlier = byUrl.get(p.url);
    if (earlier && (earlier.name !== p.name || earlier.semver !== p.semver)) {
      throw new VouchError('bad_request', `${p.url} is pinned twice, as ${earlier.label} and as ${p.label}`);
    }
    if (!earlier) byUrl.set(p.url, p);
  }
  return byUrl;
}

export function lockfileType(file: string, given: string | undefined): LockfileType {
  if (given !== undefined) {
    if (given === 'npm' || given === 'pip' || given === 'go' || given === 'maven') return given;
    throw new UsageError(`--lockfile-type must be npm, pip, go or maven, got ${JSON.stringify(given)}`);
  }
  if (isDirectory(file)) return 'maven'; // a local repository
  const name = basename(file);
  if (name === 'package-lock.json' || name === 'npm-shrinkwrap.json') return 'npm';
  if (name === 'go.sum') return 'go';
  if (name.endsWith('.txt')) return 'pip';
  throw new UsageError(
    `cannot tell the lockfile type of ${JSON.stringify(name)} (package-lock.json, npm-shrinkwrap.json, *.txt, go.sum, a directory): pass --lockfile-type npm|pip|go|maven`,
  );
}

function isDirectory(file: string): boolean {
  try {
    return statSync(file).isDirectory();
  } catch {
    return false;
  }
}

/** `lockfile/<directory name>`, the directory name reduced to the unit-name characters. */
export function defaultUns(file: string): string {
  const dir = basename(dirname(resolve(file)));
  const cleaned = dir
    .replace(/[^A-Za-z0-9._+-]+/g, '-')
    .replace(/^[^A-Za-z0-9_]+/, '')
    .slice(0, 128);
  const uns = `lockfile/${cleaned || 'project'}`;
  return isUnitName(uns) ? uns : 'lockfile/project';
}

/** A lower block limit from the environment (tests); never above the format's. */
function envLimit(name: string, max: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return max;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`${name} must be a positive integer`);
  return Math.min(n, max);
}

function readLockfile(file: string): string {
  let size: number;
  try {
    const st = statSync(file);
    if (!st.isFile()) throw new VouchError('io_error', `${file} is not a file`);
    size = st.size;
  } catch (e) {
    if (e instanceof VouchError) throw e;
    const err = e as NodeJS.ErrnoException;
    throw new VouchError('io_error', `cannot read ${file}: ${err.code === 'ENOENT' ? 'no such file' : (err.code ?? err.message)}`);
  }
  if (size > LOCKFILE_MAX_BYTES) throw new VouchError('too_large', `${file} is ${size} bytes, more than ${LOCKFILE_MAX_BYTES}`);
  try {
    return readFileSync(file, 'utf8').replace(/^\uFEFF/, '');
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new VouchError('io_error', `cannot read ${file}: ${err.code ?? err.message}`);
  }
}

async function fetchDigest(http: Http, p: Pinned, algorithms: Set<DigestName>, signal: AbortSignal): Promise<Fetched> {
  const check = p.check;
  if (check.kind !== 'digest') throw new TypeError('not a digest check');
  const answer = await http.get(p.url, { maxBytes: ARTIFACT_MAX_BYTES, signal });
  const hashes = new MultiHash(algorithms);
  for await (const chunk of answer.body) hashes.update(chunk);
  const digests = hashes.digests();
  // An empty `want` checks nothing (a Maven file its repository has no checksum for).
  const matched = Object.keys(check.want).length === 0 || Object.entries(check.want).some(([alg, list]) => list!.includes(digests.get(alg as DigestName)!));
  if (!matched && check.strict) throw new VouchError('hash_mismatch', check.mismatch(digests), { resource: p.url });
  return { pinned: p, digests, bytes: hashes.bytes, matched };
}

/** The algorithms a check compares with. */
function checkAlgorithms(p: Pinned): DigestName[] {
  return p.check.kind === 'digest' ? (Object.keys(p.check.want) as DigestName[]) : ['sha256'];
}

/** A lockfile read whole, with the options that shape its blocks: everything before the chain or the network. */
export interface LockfileRun {
  file: string;
  fileName: string;
  type: LockfileType;
  indexUrl: string;
  goproxy: string;
  origins: OriginMap;
  /** Maven: the repository URL, the files read, and whether parent POMs are followed (a list) or already there (a directory). */
  mavenRepo: string;
  mavenFiles: MavenFile[];
  followPoms: boolean;
  maxEntries: number;
  maxBytes: number;
  options: Options;
  pinned: Pinned[];
  requirements: Requirement[];
  skipped: SkipCounts;
  notes: string[];
  uns: string;
  semver: string;
  quiet: boolean;
}

/**
 * Checks the options and reads the lockfile (offline and through a gateway alike).
 * @throws UsageError for options; VouchError `bad_request` for a lockfile with nothing to endorse, saying why.
 */
export function readLockfileRun(v: Record<string, any>): LockfileRun {
  // ---- options, all before any reading or fetching
  for (const o of ['url', 'file', 'algorithm']) {
    if (v[o] !== undefined) {
      throw new UsageError(
        o === 'algorithm'
          ? "--algorithm does not apply with --lockfile: entries are endorsed with the lockfile's algorithm (sha512/sha256) or sha256"
          : `--${o} does not apply with --lockfile`,
      );
    }
  }
  const file: string = v.lockfile;
  let type = lockfileType(file, v['lockfile-type']);
  if (v['index-url'] !== undefined && type !== 'pip') throw new UsageError('--index-url applies to pip requirements files only');
  if (v.goproxy !== undefined && type !== 'go') throw new UsageError('--goproxy applies to go.sum only');
  const indexUrl: string = v['index-url'] ?? DEFAULT_INDEX_URL;
  const goproxy: string = v.goproxy ?? DEFAULT_GOPROXY;
  const mavenRepo: string = v['maven-repo'] ?? DEFAULT_MAVEN_REPO;
  for (const [opt, u] of [
    ['--index-url', indexUrl],
    ['--goproxy', goproxy],
    ['--maven-repo', mavenRepo],
  ] as const) {
    if (!/^https?:\/\/[^/?#\s]+(\/[^?#\s]*)?$/i.test(u))
      throw new UsageError(`${opt} must be an absolute http(s) URL without query or fragment, got ${JSON.stringify(u)}`);
    if (hasCredentials(u)) throw new UsageError(`${opt} may not carry a user name or password: the URLs endorsed under it are public`);
  }
  if (v.name !== undefined && !isUnitName(v.name)) throw new UsageError(`--name must be OWNER/NAME, got ${JSON.stringify(v.name)}`);
  if (v.semver !== undefined && !isSemver(v.semver)) throw new UsageError(`--semver must be a SemVer 2.0.0 version, got ${JSON.stringify(v.semver)}`);
  const unchecked = v['license-unchecked'] === true;
  if (v.license !== undefined) checkLicense(v.license, unchecked, { option: '--license' });
  if (v['effective-date'] !== undefined && !isDate(v['effective-date'])) throw new UsageError('--effective-date must be a date YYYY-MM-DD');
  if (v.comment !== undefined && v.comment.length > LIMITS.comment) throw new UsageError(`--comment is longer than ${LIMITS.comment} characters`);
  const origins = OriginMap.parse(v.origin ?? []);
  const maxEntries = envLimit('VOUCH_LOCKFILE_BLOCK_ENTRIES', LIMITS.endorsements);
  const maxBytes = envLimit('VOUCH_LOCKFILE_BLOCK_BYTES', LIMITS.blockFileBytes);
  const options: Options = { license: v.license, licenseUnchecked: unchecked, comment: v.comment };

  // ---- the lockfile, whole, before the network
  const directory = type === 'maven' && isDirectory(file);
  const text = directory ? '' : readLockfile(file);
  const fileName = basename(file);
  if (v['lockfile-type'] === undefined && type === 'pip' && /^\s*The following files have been resolved:/.test(text)) type = 'maven'; // mvn dependency:list
  if (v['maven-repo'] !== undefined && type !== 'maven') throw new UsageError('--maven-repo applies to Maven dependency lists and local repositories only');
  let mavenFiles: MavenFile[] = [];
  let pinned: Pinned[] = [];
  let requirements: Requirement[] = [];
  let skipped: SkipCounts = {};
  let notes: string[] = [];
  let uns: string | undefined = v.name;
  let semver: string | undefined = v.semver;
  if (type === 'npm') {
    const lock = readNpmLock(text, options, fileName);
    pinned = lock.pinned;
    skipped = lock.skipped;
    if (uns === undefined && lock.root.name !== undefined) {
      const n = npmUnitName(lock.root.name);
      if (n.ok) uns = n.value;
    }
    if (semver === undefined && lock.root.version !== undefined && isSemver(lock.root.version)) semver = lock.root.version;
  } else if (type === 'pip') {
    ({ requirements, notes } = readRequirements(text, options, fileName));
  } else if (type === 'maven') {
    mavenFiles = directory ? readLocalRepository(file, skipped) : readDependencyList(text, fileName);
  } else {
    pinned = readGoSum(text, goproxy, options, fileName);
  }
  const unsOf = uns ?? defaultUns(file);
  const semverOf = semver ?? '0.0.0';
  const quiet = v.json === true || v.quiet === true;
  if (pinned.length === 0 && requirements.length === 0 && mavenFiles.length === 0) throw nothingToEndorse(fileName, skipped);
  return {
    file,
    fileName,
    type,
    indexUrl,
    goproxy,
    mavenRepo,
    mavenFiles,
    followPoms: !directory,
    origins,
    maxEntries,
    maxBytes,
    options,
    pinned,
    requirements,
    skipped,
    notes,
    uns: unsOf,
    semver: semverOf,
    quiet,
  };
}

/** `n skipped (n reason, ...)`. */
export function skippedText(skipped: SkipCounts): string {
  const total = Object.values(skipped).reduce((a, b) => a + b, 0);
  return total === 0
    ? '0 skipped'
    : `${total} skipped (${Object.entries(skipped)
        .map(([k, n]) => `${n} ${k}`)
        .join(', ')})`;
}

/** The refusal of a lockfile that pins nothing to endorse, with the reason (npm's setting when `resolved` is missing). */
function nothingToEndorse(fileName: string, skipped: SkipCounts): VouchError {
  let why = Object.keys(skipped).length === 0 ? 'it pins no artifact' : `every entry was skipped: ${skippedText(skipped)}`;
  if ((skipped['no resolved'] ?? 0) > 0) {
    why +=
      '; npm wrote no "resolved" URL, which it does when its setting omit-lockfile-registry-resolved is on:' +
      ' turn it off (npm config set omit-lockfile-registry-resolved false) and write the lockfile again' +
      ' (npm install --package-lock-only)';
  }
  return new VouchError('bad_request', `nothing to endorse in ${fileName}: ${why}`);
}

export async function endorseLockfile(v: Record<string, any>): Promise<number> {
  const run = readLockfileRun(v);
  const { file, fileName, type, indexUrl, origins, maxEntries, maxBytes, options, requirements, skipped, notes, uns, semver, quiet } = run;
  let pinned = run.pinned;
  const maxUnsBytes = UNS_FULL_MAX;

  // ---- the chain: key and head checked before any fetch
  const key = readKeyFile(v.key);
  const repo = await openChain(v.chain);
  // The online key in force (block 0's, or the one key events put in force: tools/chain-keys.ts).
  const { signer: keyed, keys } = signerForChain(repo, key);
  const trusted = trustedHead(repo, keyed, keys);
  const { head } = trusted;

  const { Http: HttpClient } = await import('../lockfiles/http.ts');
  const http = new HttpClient(origins);
  const progress = quiet ? null : progressReporter('fetching');
  let barShown = progress !== null;
  const bar = progress && {
    update: progress.update,
    done: () => {
      if (barShown) progress.done();
      barShown = false;
    },
  };
  let fetched: Fetched[];
  try {
    let candidatesOf = new Map<Requirement, Pinned[]>();
    if (type === 'pip') {
      ({ pinned, candidatesOf } = await resolveRequirements(
        requirements,
        http,
        indexUrl,
        options,
        CONCURRENCY,
        bar ? (d, t) => bar.update(d, t, 'index pages') : undefined,
      ));
    }
    if (type === 'maven') pinned = await resolveMaven(run.mavenFiles, http, run.mavenRepo, options, CONCURRENCY, run.followPoms, notes);
    const byUrl = byUrlOf(pinned);
    const unique = [...byUrl.values()];
    const report = priorEndorsements(repo, byUrl.keys(), head, endorsementsOf, keys);
    noteScan(report, quiet);
    const history = report.history;
    const algorithmsOf = (p: Pinned) => {
      const set = new Set<DigestName>([...checkAlgorithms(p), p.endorseAlgorithm]);
      for (const prior of history.get(p.url) ?? []) {
        const parsed = parseArtifactHash(prior.artifactHash);
        if (typeof parsed !== 'string') set.add(parsed.algorithm);
      }
      return set;
    };
    fetched = await mapLimit(
      unique,
      CONCURRENCY,
      (p, signal) => (p.check.kind === 'digest' ? fetchDigest(http, p, algorithmsOf(p), signal) : fetchGo(http, p, algorithmsOf(p), signal)),
      bar ? (d, t) => bar.update(d, t, 'fetching') : undefined,
    );
    bar?.done();
    fetched = fetched.filter((f) => f.matched);
    // pip: every requirement has a file whose bytes match a pin.
    for (const [r, list] of candidatesOf) {
      const urls = new Set(list.map((p) => p.url));
      if (!fetched.some((f) => urls.has(f.pinned.url))) {
        throw new VouchError('hash_mismatch', `${r.label}: no file of version ${r.version} at the index matches a pinned hash (${list.length} fetched)`);
      }
    }

    // ---- what the chain already says
    const toPost: EndorsementInput[] = [];
    let unchanged = 0;
    const conflicts: string[] = [];
    for (const f of fetched) {
      const p = f.pinned;
      const ours = `${p.endorseAlgorithm}:${f.digests.get(p.endorseAlgorithm)}`;
      const sameBytes = (artifactHash: string) => {
        const parsed = parseArtifactHash(artifactHash);
        return typeof parsed !== 'string' && f.digests.get(parsed.algorithm) === parsed.hex;
      };
      const priors = history.get(p.url) ?? [];
      const conflict = priors.find((x) => x.semver === p.semver && !sameBytes(x.artifactHash));
      if (conflict) {
        conflicts.push(`${p.label}: ${p.url} ${p.semver} is already signed in block ${conflict.block.index} with ${conflict.artifactHash}, not ${ours}`);
        continue;
      }
      const newest = priors.at(-1);
      if (newest && newest.semver === p.semver && sameBytes(newest.artifactHash)) {
        unchanged++;
        continue;
      }
      toPost.push({ url: p.url, artifactHash: ours, name: p.name, semver: p.semver, license: p.license, comment: p.comment });
    }
    if (conflicts.length) {
      throw new VouchError('semver_conflict', conflicts[0]! + (conflicts.length > 1 ? ` (and ${conflicts.length - 1} more)` : ''), { resource: conflicts[0]! });
    }

    // ---- blocks, one append
    const skippedTotal = Object.values(skipped).reduce((a, b) => a + b, 0);
    const skippedLine = skippedText(skipped);
    const now = Date.now();
    const blocks = packBlocks(toPost, { maxEntries, maxBytes, maxUnsBytes }, (chunk, prev: Block | null, part, parts) =>
      buildEndorseBlock({
        prev: prev ?? head,
        signer: keyed,
        backend: nodeBackend,
        now,
        entries: chunk,
        uns: uns!,
        semver: semver!,
        comment: v.comment ?? `${uns} ${semver} from ${fileName}${parts > 1 ? ` part ${part} of ${parts}` : ''}`,
        ...(v['effective-date'] !== undefined ? { effectiveDate: v['effective-date'] } : {}),
      }),
    );
    const summary = {
      lockfile: file,
      type,
      uns,
      semver,
      entries: toPost.length,
      unchanged,
      skipped: skippedTotal,
      skipped_by_reason: skipped,
      notes,
    };
    // Notes only after a success: a failure stays one line on stderr.
    const printNotes = () => {
      if (!quiet) for (const n of notes) process.stderr.write(`note: ${n}\n`);
    };
    if (blocks.length === 0) {
      printNotes();
      emit(v, `posted 0 entries in 0 blocks; ${unchanged} unchanged, ${skippedLine}`, { status: 'unchanged', ...summary, blocks: [] });
      return 0;
    }
    const last = blocks.at(-1)!;
    const checkpoint = buildCheckpoint({ head: last, signer: keyed, now });
    await appendWithNote(repo, trusted, keyed, blocks, checkpoint, now, report.recordHashes, report.edgeSeed, offlineIndexRootWith(repo));
    await refreshIfBehind(repo, report, blocks.length);
    printNotes();
    // Split blocks say so: each fits a gateway's UNS header whole (its full form at most maxUnsBytes).
    const where =
      blocks.length === 1
        ? `1 block (index ${last.index})`
        : `${blocks.length} blocks (indexes ${blocks[0]!.index}..${last.index}, each within the ${maxUnsBytes}-byte UNS header bound)`;
    emit(v, `posted ${toPost.length} entries in ${where}; ${unchanged} unchanged, ${skippedLine}`, {
      status: 'posted',
      ...summary,
      uns_header_max: maxUnsBytes,
      blocks: blocks.map((b) => ({ index: b.index, record_hash: b.record_hash, entries: b.payload.endorsements.length })),
    });
    return 0;
  } finally {
    bar?.done();
    await http.close();
  }
}
