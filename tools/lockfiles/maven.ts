/**
 * What a Maven build resolved, for `vouch endorse --lockfile`: the output of
 * `mvn dependency:list -DoutputFile=FILE` (each artifact, its .pom, parent
 * POMs and imported BOMs) or a local repository directory (files recorded in
 * `_remote.repositories`), against `--maven-repo` (default Central). Each
 * file is checked against the repository's `.sha256` (else `.sha1`).
 * Owns: the two readers (bounded: lines, files, depth, side-file size),
 * Maven's type -> extension rule, the unit name
 * (`maven/<groupId>+<artifactId>`), `mavenSemver`.
 * Trusts: nothing read; a side file only says what the bytes must be.
 * Must hold: a Pinned is complete before its bytes are fetched; a local file
 * that disagrees with the repository's checksum fails the run.
 */
import { createHash } from 'node:crypto';
import { createReadStream, lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { VouchError } from '../../chain/errors.ts';
import { isSemver, isUnitName } from '../../chain/block.ts';
import { MavenMetadataError, readXmlTree } from '../../artifacts/maven-metadata.ts';
import { checkLicense } from './licenses.ts';
import type { Http } from './http.ts';
import { MiB } from './origin-map.ts';
import { mapLimit } from './pool.ts';
import type { DigestName } from './digests.ts';
import type { Options, Pinned, SkipCounts } from './types.ts';

/** Most lines of a dependency list, files of a directory, POMs followed for parents. */
export const MAX_MAVEN_ENTRIES = 100_000;
const MAX_DIR_DEPTH = 64;
const MAX_POM_BYTES = 4 * MiB;
const MAX_SIDE_FILE_BYTES = 1024;
/** Parent / BOM chains longer than this are refused (Maven's own are a handful deep). */
const MAX_PARENT_DEPTH = 32;

const ID = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$/;
/** A groupId: dot-separated ids, none empty (each becomes a path segment). */
const GROUP_ID = /^(?=.{1,200}$)[A-Za-z0-9_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_][A-Za-z0-9_-]*)*$/;
const VERSION = /^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$/;
const CLASSIFIER = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$/;

function bad(msg: string): never {
  throw new VouchError('bad_request', msg);
}

/** One file of the maven2 layout, by its path below the repository. */
export interface MavenFile {
  groupId: string;
  artifactId: string;
  version: string;
  /** `groupId:artifactId:ext[:classifier]:version`. */
  label: string;
  path: string;
  /** For a directory: the local file, checked against the repository's checksum and the fetched bytes. */
  local?: string;
}

/** `maven/<groupId>+<artifactId>`, or the reason it is not a unit name. */
export function mavenUnitName(groupId: string, artifactId: string): { ok: true; value: string } | { ok: false; reason: string } {
  const name = `maven/${groupId}+${artifactId}`;
  return isUnitName(name)
    ? { ok: true, value: name }
    : { ok: false, reason: `${groupId}:${artifactId}: ${JSON.stringify(name.slice(0, 200))} is not a unit name (at most 128 characters after maven/)` };
}

const PRE = /^(alpha|a|beta|b|milestone|m|rc|cr|snapshot)(?=$|[0-9.-])/i;

/**
 * A Maven version as SemVer: leading numbers padded to three (`1.0` ->
 * `1.0.0`, Maven's equal version), further numbers as build `rel.N`; a
 * qualifier Maven sorts before the release (alpha, beta, milestone, rc, cr,
 * snapshot) as the pre-release, any other (`-jre`, `.Final`) as build
 * metadata; identifiers split at `.` and `-`. Refused when no SemVer results.
 */
export function mavenSemver(version: string): { ok: true; value: string } | { ok: false; reason: string } {
  const m = /^([0-9]+(?:\.[0-9]+)*)(.*)$/.exec(version);
  const what = `Maven version ${JSON.stringify(version.slice(0, 200))}`;
  if (m === null) return { ok: false, reason: `${what} does not start with a number: no SemVer mapping` };
  const nums = m[1]!.split('.').map((n) => n.replace(/^0+(?=\d)/, ''));
  while (nums.length < 3) nums.push('0');
  const core = nums.slice(0, 3).join('.');
  const build = nums.length > 3 ? ['rel', ...nums.slice(3)] : [];
  const qualifier = m[2]!.replace(/^[-.]/, '');
  const ids = qualifier === '' ? [] : qualifier.split(/[.-]/);
  let pre: string[] = [];
  if (ids.length > 0 && PRE.test(qualifier)) pre = ids.map((x) => (/^[0-9]+$/.test(x) ? x.replace(/^0+(?=\d)/, '') : x));
  else build.push(...ids);
  const s = core + (pre.length ? `-${pre.join('.')}` : '') + (build.length ? `+${build.join('.')}` : '');
  return isSemver(s) ? { ok: true, value: s } : { ok: false, reason: `${what} maps to ${JSON.stringify(s.slice(0, 200))}, which is not SemVer 2.0.0` };
}

/** The file extension and classifier of a dependency type (Maven's default artifact handlers). */
function extensionOf(type: string, classifier: string | null): { ext: string; classifier: string | null } {
  switch (type) {
    case 'test-jar':
      return { ext: 'jar', classifier: classifier ?? 'tests' };
    case 'ejb-client':
      return { ext: 'jar', classifier: classifier ?? 'client' };
    case 'java-source':
      return { ext: 'jar', classifier: classifier ?? 'sources' };
    case 'javadoc':
      return { ext: 'jar', classifier: classifier ?? 'javadoc' };
    case 'ejb':
    case 'bundle':
    case 'maven-plugin':
      return { ext: 'jar', classifier };
    default:
      return { ext: type, classifier };
  }
}

export function mavenFile(groupId: string, artifactId: string, version: string, ext: string, classifier: string | null): MavenFile {
  const file = `${artifactId}-${version}${classifier === null ? '' : `-${classifier}`}.${ext}`;
  return {
    groupId,
    artifactId,
    version,
    label: `${groupId}:${artifactId}:${ext}${classifier === null ? '' : `:${classifier}`}:${version}`,
    path: `${groupId.replace(/\./g, '/')}/${artifactId}/${version}/${file}`,
  };
}

/**
 * The files of a `mvn dependency:list -DoutputFile=…` output: each
 * dependency's file and its .pom (`module …` / `(optional)` notes and an
 * absolute file name at the end are read past).
 * @throws VouchError bad_request naming the line.
 */
export function readDependencyList(text: string, fileName: string): MavenFile[] {
  const out: MavenFile[] = [];
  const lines = text.split(/\r?\n/);
  if (lines.length > MAX_MAVEN_ENTRIES) bad(`${fileName} has more than ${MAX_MAVEN_ENTRIES} lines`);
  lines.forEach((raw, i) => {
    const at = `${fileName} line ${i + 1}`;
    const line = raw
      .replace(/ -- module .*$/, '')
      .replace(/ \(optional\)\s*$/, '')
      .trim();
    if (line === '' || line === 'none' || /^The following files have been resolved:?$/.test(line)) return;
    if (line.length > 2048) bad(`${at}: longer than 2048 characters`);
    let f = line.split(':');
    // -DoutputAbsoluteArtifactFilename: the path follows (it may hold a drive letter's colon).
    const pathAt = f.findIndex((x, k) => k >= 5 && (x.includes('/') || x.includes('\\')));
    if (pathAt !== -1) f = f.slice(0, pathAt - (pathAt > 5 && /^[A-Za-z]$/.test(f[pathAt - 1]!) ? 1 : 0));
    if (f.length !== 5 && f.length !== 6) bad(`${at}: not "groupId:artifactId:type[:classifier]:version:scope": ${JSON.stringify(line.slice(0, 200))}`);
    const [groupId, artifactId, type] = f as [string, string, string];
    const classifier = f.length === 6 ? f[3]! : null;
    const version = f.at(-2)!;
    if (!GROUP_ID.test(groupId) || !ID.test(artifactId)) bad(`${at}: ${JSON.stringify(`${groupId}:${artifactId}`.slice(0, 200))} is not a groupId:artifactId`);
    if (!VERSION.test(version)) bad(`${at}: ${JSON.stringify(version.slice(0, 200))} is not a version`);
    if (!ID.test(type) || (classifier !== null && !CLASSIFIER.test(classifier))) bad(`${at}: the type or classifier is not valid`);
    const { ext, classifier: cls } = extensionOf(type, classifier);
    out.push(mavenFile(groupId, artifactId, version, ext, cls));
    if (ext !== 'pom' || cls !== null) out.push(mavenFile(groupId, artifactId, version, 'pom', null));
  });
  return out;
}

/**
 * The files of a local repository that Maven downloaded from a repository
 * (listed in their directory's `_remote.repositories` with a repository id).
 * @throws VouchError bad_request / io_error for an unreadable or oversized tree.
 */
export function readLocalRepository(root: string, skipped: SkipCounts): MavenFile[] {
  const out: MavenFile[] = [];
  let seen = 0;
  const walk = (dir: string, depth: number) => {
    if (depth > MAX_DIR_DEPTH) bad(`${root}: deeper than ${MAX_DIR_DEPTH} directories`);
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch (e) {
      throw new VouchError('io_error', `cannot read ${dir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    const downloaded = new Set<string>();
    if (names.includes('_remote.repositories')) {
      const text = readFileSync(join(dir, '_remote.repositories'), 'utf8').slice(0, 1 * MiB);
      for (const l of text.split(/\r?\n/)) {
        const m = /^([^#>][^>]*)>([^=]*)=\s*$/.exec(l.trim());
        if (m !== null && m[2]!.trim() !== '') downloaded.add(m[1]!);
      }
    }
    for (const name of names.sort()) {
      if (++seen > MAX_MAVEN_ENTRIES) bad(`${root}: more than ${MAX_MAVEN_ENTRIES} files`);
      const p = join(dir, name);
      const st = lstatSync(p);
      if (st.isSymbolicLink()) {
        skipped['symlinked'] = (skipped['symlinked'] ?? 0) + 1;
        continue;
      }
      if (st.isDirectory()) {
        walk(p, depth + 1);
        continue;
      }
      if (
        !st.isFile() ||
        name === '_remote.repositories' ||
        /\.(lastUpdated|sha1|md5|sha256|sha512|asc)$/.test(name) ||
        name.startsWith('maven-metadata') ||
        name === 'resolver-status.properties'
      )
        continue;
      if (!downloaded.has(name)) {
        skipped['not downloaded'] = (skipped['not downloaded'] ?? 0) + 1;
        continue;
      }
      const segs = relative(root, p).split(sep);
      if (segs.length < 4) continue;
      const [artifactId, version] = segs.slice(-3, -1) as [string, string];
      const groupId = segs.slice(0, -3).join('.');
      if (!GROUP_ID.test(groupId) || !ID.test(artifactId) || !VERSION.test(version) || !name.startsWith(`${artifactId}-${version}`)) {
        skipped['not in the maven2 layout'] = (skipped['not in the maven2 layout'] ?? 0) + 1;
        continue;
      }
      const rest = name.slice(`${artifactId}-${version}`.length);
      const dot = rest.indexOf('.');
      const classifier = rest.startsWith('-') && dot > 1 ? rest.slice(1, dot) : null;
      const ext = rest.slice(dot + 1);
      out.push({ ...mavenFile(groupId, artifactId, version, ext, classifier), path: segs.join('/'), local: p });
    }
  };
  walk(root, 0);
  return out;
}

/** The hex digest in a checksum side file (`hex` or `hex  filename`), or null when it holds none of that length. */
export function parseSideFile(text: string, alg: 'sha1' | 'sha256'): string | null {
  if (text.length > MAX_SIDE_FILE_BYTES) return null;
  const hex = text.trim().split(/\s+/)[0]?.toLowerCase() ?? '';
  return new RegExp(`^[0-9a-f]{${alg === 'sha1' ? 40 : 64}}$`).test(hex) ? hex : null;
}

/** The repository's checksum of `url`: `.sha256`, else `.sha1`; null when it has neither (a 404). */
async function sideDigest(http: Http, url: string, signal: AbortSignal): Promise<{ alg: 'sha1' | 'sha256'; hex: string } | null> {
  for (const alg of ['sha256', 'sha1'] as const) {
    let text: string;
    try {
      text = (await http.bytes(`${url}.${alg}`, { maxBytes: MAX_SIDE_FILE_BYTES, signal })).bytes.toString('utf8');
    } catch (e) {
      if (e instanceof VouchError && / HTTP 404$/.test(e.message.split('\n')[0]!)) continue;
      throw e;
    }
    const hex = parseSideFile(text, alg);
    if (hex === null) throw new VouchError('bad_request', `${url}.${alg} holds no ${alg} digest`, { resource: url });
    return { alg, hex };
  }
  return null;
}

async function localDigests(path: string): Promise<{ sha1: string; sha256: string }> {
  const a = createHash('sha1');
  const b = createHash('sha256');
  for await (const chunk of createReadStream(path)) {
    a.update(chunk as Buffer);
    b.update(chunk as Buffer);
  }
  return { sha1: a.digest('hex'), sha256: b.digest('hex') };
}

/** `<parent>` and imported BOMs (literal versions) of a POM, as .pom files. */
export function pomReferences(pom: Uint8Array | string): MavenFile[] {
  const root = readXmlTree(pom);
  const kid = (n: typeof root | undefined, name: string) => n?.children.find((c) => c.name === name);
  const text = (n: typeof root | undefined) => n?.text.trim() ?? '';
  const ref = (n: typeof root | undefined): MavenFile | null => {
    const g = text(kid(n, 'groupId'));
    const a = text(kid(n, 'artifactId'));
    const v = text(kid(n, 'version'));
    return GROUP_ID.test(g) && ID.test(a) && VERSION.test(v) ? mavenFile(g, a, v, 'pom', null) : null;
  };
  const out: MavenFile[] = [];
  const parent = ref(kid(root, 'parent'));
  if (parent !== null) out.push(parent);
  for (const d of kid(kid(root, 'dependencyManagement'), 'dependencies')?.children ?? []) {
    if (d.name !== 'dependency' || text(kid(d, 'scope')) !== 'import' || text(kid(d, 'type')) !== 'pom') continue;
    const r = ref(d);
    if (r !== null) out.push(r);
  }
  return out;
}

/**
 * Pins every file: for a dependency list, the parent POMs and BOMs its POMs
 * name are added (fetched here, bounded); each file gets the repository's
 * checksum as its check (and, from a directory, the local file's sha256).
 * @throws VouchError for a repository that fails, a side file that holds no
 * digest, a local file that disagrees with the repository.
 */
export async function resolveMaven(
  files: MavenFile[],
  http: Http,
  repo: string,
  options: Options,
  concurrency: number,
  followPoms: boolean,
  notes: string[],
): Promise<Pinned[]> {
  const base = repo.endsWith('/') ? repo : `${repo}/`;
  if (options.license === undefined) bad('a Maven dependency list or repository names no licences: pass --license');
  const license = checkLicense(options.license, options.licenseUnchecked, { option: '--license' });
  const byPath = new Map<string, MavenFile>();
  for (const f of files) if (!byPath.has(f.path)) byPath.set(f.path, f);
  if (followPoms) {
    let level = [...byPath.values()].filter((f) => f.path.endsWith('.pom'));
    for (let depth = 0; level.length > 0; depth++) {
      if (depth >= MAX_PARENT_DEPTH) bad(`parent POMs nest deeper than ${MAX_PARENT_DEPTH} (from ${level[0]!.label})`);
      const found = await mapLimit(level, concurrency, async (f, signal) => {
        const { bytes } = await http.bytes(base + f.path, { maxBytes: MAX_POM_BYTES, signal });
        try {
          return pomReferences(bytes);
        } catch (e) {
          if (!(e instanceof MavenMetadataError)) throw e;
          throw new VouchError('bad_request', `${f.label}: ${base}${f.path} is not a POM that can be read: ${e.message}`, { resource: base + f.path });
        }
      });
      level = [];
      for (const r of found.flat()) {
        if (byPath.has(r.path)) continue;
        if (byPath.size >= MAX_MAVEN_ENTRIES) bad(`more than ${MAX_MAVEN_ENTRIES} files with parent POMs`);
        byPath.set(r.path, r);
        level.push(r);
      }
    }
    const added = byPath.size - new Set(files.map((f) => f.path)).size;
    if (added > 0) notes.push(`${added} parent or imported POMs added to what the list names`);
  }
  const unchecked = { n: 0 };
  const pinned = await mapLimit([...byPath.values()], concurrency, async (f, signal): Promise<Pinned> => {
    const url = base + f.path;
    const name = mavenUnitName(f.groupId, f.artifactId);
    if (!name.ok) bad(name.reason);
    const semver = mavenSemver(f.version);
    if (!semver.ok) bad(`${f.label}: ${semver.reason}`);
    const side = await sideDigest(http, url, signal);
    const want: Partial<Record<DigestName, string[]>> = {};
    let against = side === null ? 'nothing' : `the repository's .${side.alg}`;
    if (f.local !== undefined) {
      const local = await localDigests(f.local);
      if (side !== null && local[side.alg] !== side.hex) {
        throw new VouchError(
          'hash_mismatch',
          `${f.label}: the local file ${f.local} has ${side.alg} ${local[side.alg]}, the repository's .${side.alg} says ${side.hex}`,
          { resource: url },
        );
      }
      want.sha256 = [local.sha256];
      against = `the local file${side === null ? '' : ` and ${against}`}`;
    } else if (side !== null) {
      want[side.alg] = [side.hex];
    }
    // No side file and no local file: nothing to check against (`want` empty: the bytes fetched are endorsed).
    const check: Pinned['check'] = {
      kind: 'digest',
      want,
      strict: true,
      mismatch: (got) => `${f.label}: ${url} does not match ${against} (fetched: ${[...got].map(([k, v]) => `${k}:${v}`).join(', ')})`,
    };
    if (side === null && f.local === undefined) unchecked.n++;
    return { label: f.label, url, name: name.value, semver: semver.value, license, comment: options.comment ?? '', endorseAlgorithm: 'sha256', check };
  });
  if (unchecked.n > 0) notes.push(`${unchecked.n} files have no .sha256 or .sha1 in the repository: endorsed as fetched`);
  return pinned;
}
