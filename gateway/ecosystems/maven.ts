/**
 * The Maven repository route (`kind: maven`): the maven2 layout in front of
 * a repository. Artifacts are verified by the framework; `<file>.{md5,sha1,
 * sha256,sha512}` are digests of the verified bytes, never the origin's side
 * files; `maven-metadata.xml` is rewritten on deny routes to the versions
 * endorsed in force (checksums made from the rewrite); SNAPSHOT metadata is
 * refused on deny routes; `.asc` passes through.
 * Owns: request paths, what a version's endorsement is, the metadata
 * rewrite, the checksum answers.
 * Trusts: `MetadataIO`; origin metadata only under maven-metadata.ts's caps.
 * Must hold: a deny route offers no version without an endorsement in
 * force; a checksum answer is of bytes that passed the hash check; only
 * plain maven2 segments reach the origin.
 */
import { MAVEN_ID, MavenMetadataError, parseMavenMetadata, writeMavenMetadata, type MavenMetadata } from '../../artifacts/maven-metadata.ts';
import type { Classified, EcosystemHandler, MetadataIO, MetadataResponse, RenderView } from './ecosystem.ts';
import { digestsOfText, type ChecksumAlgorithm } from './maven-checksums.ts';

/** Longest path (after the prefix) accepted. */
export const MAX_MAVEN_PATH = 1024;
/** One segment of a maven2 path: group path elements, artifactIds, versions, file names. */
const SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9_.+~-]{0,254}$/;
const CHECKSUM = /\.(md5|sha1|sha256|sha512)$/;
const TEXT = 'text/plain; charset=utf-8';
const XML = 'text/xml; charset=utf-8';
/** The refusals of an artifact (or its checksum) by the chain: unendorsed on a deny route, revoked. */
const POLICY_REFUSAL = /is not endorsed by the authority, refused$|is revoked by the authority, refused$/;
/** Files a client asks for and goes on without (Gradle's module metadata): their refusal stays a 404. */
const OPTIONAL = /\.module(?:\.(?:md5|sha1|sha256|sha512))?(?:\?|$)/;
const FETCH = { accept: 'application/xml, text/xml, */*', form: 'maven' } as const;

/** A request under a Maven route. */
export type MavenRequest =
  /** `dir/maven-metadata.xml` (its checksum when `checksum` is set); `dir` is the path's directories. */
  | { what: 'metadata'; dir: string[]; checksum: ChecksumAlgorithm | null }
  /** A checksum side file of the artifact at `artifact` (path after the prefix). */
  | { what: 'checksum'; artifact: string; checksum: ChecksumAlgorithm }
  /** A PGP signature or its checksum: passed through. */
  | { what: 'signature' }
  | { what: 'artifact' };

/**
 * Sorts a path after the route's prefix; null when it is not a plain maven2
 * path (a segment with other characters, percent-encoding, too long, fewer
 * than two directories).
 */
export function parseMavenPath(rest: string): MavenRequest | null {
  if (rest.length > MAX_MAVEN_PATH) return null;
  const segs = rest.split('/');
  if (segs.length < 2 || !segs.every((s) => SEGMENT.test(s))) return null;
  const file = segs.at(-1)!;
  const m = CHECKSUM.exec(file);
  const checksum = m === null ? null : (m[1] as ChecksumAlgorithm);
  const base = m === null ? file : file.slice(0, -m[0].length);
  if (base === 'maven-metadata.xml') return { what: 'metadata', dir: segs.slice(0, -1), checksum };
  if (base.endsWith('.asc')) return { what: 'signature' };
  if (base === '' || CHECKSUM.test(base)) return null; // `x.sha1.sha1`: no such file in the layout
  if (checksum !== null) return { what: 'checksum', artifact: [...segs.slice(0, -1), base].join('/'), checksum };
  if (segs.length < 4) return null; // group/…, artifactId, version, file
  return { what: 'artifact' };
}

/** `groupId:artifactId` of an artifact-level metadata directory. */
const coordinates = (dir: readonly string[]): string => `${dir.slice(0, -1).join('.')}:${dir.at(-1)}`;

/** The artifact URLs whose endorsement in force makes `version` of the artifact at `dir` offered: its .pom, else its .jar. */
export function versionUrls(view: Pick<RenderView, 'artifactUrlOf' | 'originUrl'>, dir: readonly string[], version: string): string[] {
  const a = dir.at(-1)!;
  const out: string[] = [];
  for (const ext of ['pom', 'jar']) {
    const u = view.artifactUrlOf(view.originUrl(`${dir.join('/')}/${version}/${a}-${version}.${ext}`));
    if (u !== null) out.push(u);
  }
  return out;
}

/** `YYYY-MM-DDTHH:MM:SSZ` (a block's `posted`) as Maven's `yyyyMMddHHmmss`; null when it is not that form. */
function mavenTime(posted: string): string | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})/.exec(posted);
  return m === null ? null : m.slice(1, 7).join('');
}

/** What the route sends for an origin maven-metadata.xml: the rewritten text and its digests, or the refusal. */
export type MetadataAnswer = { ok: true; text: string; digests: Record<ChecksumAlgorithm, string> } | { ok: false; status: number; message: string };

/**
 * The metadata a deny route offers for the origin's document at `dir`:
 * versions whose .pom or .jar has an endorsement in force (SNAPSHOT versions
 * never), in the origin's order; `latest` and `release` the last of them,
 * `lastUpdated` the newest endorsing block's time; group-level plugin
 * prefixes kept (they name artifactIds, no version: those resolve through
 * their own, filtered, metadata).
 */
export function rewriteMetadata(
  view: Pick<RenderView, 'artifactUrlOf' | 'originUrl' | 'endorsed'>,
  dir: readonly string[],
  body: Uint8Array | string,
): MetadataAnswer {
  let m: MavenMetadata;
  try {
    m = parseMavenMetadata(body);
  } catch (e) {
    if (!(e instanceof MavenMetadataError)) throw e;
    return { ok: false, status: 502, message: `vouch: the origin's maven-metadata.xml for ${dir.join('/')} is not usable: ${e.message}` };
  }
  if (m.snapshot) return { ok: false, status: 404, message: snapshotRefusal(dir) };
  const out: MavenMetadata = { ...m, version: null, versions: null, latest: null, release: null, lastUpdated: null, snapshot: false };
  if (m.versions !== null || m.plugins === null) {
    const artifactId = dir.at(-1)!;
    const groupId = dir.slice(0, -1).join('.');
    if (
      (m.artifactId !== null && m.artifactId !== artifactId) ||
      (m.groupId !== null && m.groupId !== groupId) ||
      !MAVEN_ID.test(artifactId) ||
      groupId === ''
    ) {
      return {
        ok: false,
        status: 502,
        message: `vouch: the origin's maven-metadata.xml at ${dir.join('/')} names another artifact (${m.groupId ?? '?'}:${m.artifactId ?? '?'}), refused`,
      };
    }
    let newest: string | null = null;
    const kept: string[] = [];
    for (const v of m.versions ?? []) {
      if (v.endsWith('-SNAPSHOT')) continue;
      const sel = versionUrls(view, dir, v)
        .map((u) => view.endorsed(u))
        .find((s) => s !== null);
      if (sel === undefined || sel === null) continue;
      kept.push(v);
      const t = mavenTime(sel.block.posted);
      if (t !== null && (newest === null || t > newest)) newest = t;
    }
    if (kept.length === 0) {
      if (m.plugins === null) return { ok: false, status: 404, message: `vouch: no version of ${coordinates(dir)} is endorsed by the authority, refused` };
    } else {
      Object.assign(out, {
        groupId: m.groupId ?? groupId,
        artifactId: m.artifactId ?? artifactId,
        versions: kept,
        latest: kept.at(-1)!,
        release: kept.at(-1)!,
        lastUpdated: newest,
      });
    }
  }
  if (out.versions === null) Object.assign(out, { artifactId: null, groupId: m.groupId });
  const text = writeMavenMetadata(out);
  return { ok: true, text, digests: digestsOfText(text) };
}

function snapshotRefusal(dir: readonly string[]): string {
  return `vouch: SNAPSHOT metadata (${dir.join('/')}) is not served through vouch: a SNAPSHOT changes under one version; endorse a release, refused`;
}

/** A non-200 origin answer for metadata: 404 / 410 as they are (Maven then reports the artifact missing), else 502. */
function originRefused(io: MetadataIO, r: MetadataResponse, what: string): void {
  const status = r.status === 404 || r.status === 410 ? r.status : 502;
  io.fail(status, `vouch: the origin has no ${what} (it answered ${r.status})`);
}

async function answerMetadata(io: MetadataIO, dir: string[], checksum: ChecksumAlgorithm | null): Promise<void> {
  if (io.unendorsed === 'pass') return io.passThrough();
  if (dir.at(-1)!.endsWith('-SNAPSHOT')) return io.fail(404, snapshotRefusal(dir));
  const r = await io.fetch(`${dir.join('/')}/maven-metadata.xml`, FETCH);
  if (r.status !== 200) return originRefused(io, r, `maven-metadata.xml at ${dir.join('/')}`);
  const answer = io.remember(r, 'maven metadata', (view) => {
    const a = rewriteMetadata(view, dir, r.body);
    if (!a.ok) view.log.warn('maven: origin metadata not offered', { dir: dir.join('/'), status: a.status });
    return { value: a, bytes: a.ok ? 2 * a.text.length + 512 : a.message.length };
  });
  if (!answer.ok) return io.fail(answer.status, answer.message);
  if (checksum === null) return io.send(200, XML, answer.text);
  io.send(200, TEXT, answer.digests[checksum]);
}

async function answerChecksum(io: MetadataIO, artifact: string, algorithm: ChecksumAlgorithm): Promise<void> {
  const d = await io.verifiedDigest(artifact, algorithm);
  if (d.ok === 'pass') return io.passThrough();
  if (!d.ok) return io.fail(d.status, d.message);
  io.send(200, TEXT, d.hex);
}

export const maven: EcosystemHandler = {
  kind: 'maven',
  classify(rest: string, query: string): Classified {
    if (query !== '') return { type: 'other' }; // the layout has no queries
    const r = parseMavenPath(rest);
    if (r === null) return { type: 'other' };
    switch (r.what) {
      case 'artifact':
        return { type: 'artifact' };
      case 'metadata':
        return { type: 'metadata', answer: (io) => answerMetadata(io, r.dir, r.checksum) };
      case 'checksum':
        return { type: 'metadata', answer: (io) => answerChecksum(io, r.artifact, r.checksum) };
      case 'signature':
        return {
          type: 'metadata',
          answer: async (io) => {
            if (!(await io.serveArtifact())) await io.passThrough();
          },
        };
    }
  },
  // Maven prints the status line's reason phrase ("status code: 409, reason phrase: …"), not the body;
  // on 404 / 410 it prints only "Could not find artifact", so a refusal by the chain goes out as 403.
  errorBody: (message, status, target) => {
    const line = message.replace(/[\r\n]+/g, ' ');
    const forbid = (status === 404 || status === 410) && POLICY_REFUSAL.test(line) && !OPTIONAL.test(target ?? '');
    return { contentType: TEXT, body: `${line}\n`, reason: line, ...(forbid ? { status: 403 } : {}) };
  },
};
