/**
 * Fuzz targets of the Maven route and the Maven lockfile mode: what a
 * repository answers (maven-metadata.xml, POMs, checksum side files, request
 * paths) and what a user hands to `vouch endorse --lockfile` (mvn
 * dependency:list output).
 * Property: a result or the documented refusal (MavenMetadataError, null,
 * VouchError bad_request); a rewritten document parses again and lists only
 * endorsed versions; what the writer writes reads back the same.
 */
import type { Selection } from '../../../chain/select.ts';
import { isSemver } from '../../../chain/block.ts';
import { MavenMetadataError, parseMavenMetadata, writeMavenMetadata } from '../../../artifacts/maven-metadata.ts';
import { parseMavenPath, rewriteMetadata } from '../../../gateway/ecosystems/maven.ts';
import { mavenSemver, parseSideFile, pomReferences, readDependencyList } from '../../../tools/lockfiles/maven.ts';
import { check, mix, mutatedBytes, mutatedLines, randomInput, refusedOnly, type FuzzTarget } from '../target.ts';

const utf8 = (b: Buffer) => b.toString('utf8');
const isMetadataError = (e: unknown) => e instanceof MavenMetadataError;
const ORIGIN = 'http://127.0.0.1:1/repo/';
const CANON = 'https://repo.example.org/maven2/';

/** A view where about half the poms are endorsed (by a hash of the URL). */
const view = {
  originUrl: (rest: string) => ORIGIN + rest,
  artifactUrlOf: (u: string) => (u.startsWith(ORIGIN) ? CANON + u.slice(ORIGIN.length) : null),
  endorsed: (u: string): Selection | null => {
    let h = 0;
    for (let i = 0; i < u.length; i++) h = (h * 31 + u.charCodeAt(i)) | 0;
    return h & 1
      ? null
      : ({ block: { posted: '2026-01-02T03:04:05Z' }, entry: { semver: '1.0.0', artifact_hash: 'sha256:00' }, revokedBy: null } as unknown as Selection);
  },
};

const XML_TOKENS = [
  '<metadata>',
  '</metadata>',
  '<versioning>',
  '</versioning>',
  '<versions>',
  '</versions>',
  '<version>',
  '</version>',
  '<plugins>',
  '<plugin>',
  '<prefix>',
  '<snapshot>',
  '<![CDATA[',
  ']]>',
  '<!DOCTYPE m [<!ENTITY e "x">]>',
  '&e;',
  '&amp;',
  '&#x41;',
  '<?xml version="1.0"?>',
  '<!--',
  '-->',
  '1.0-SNAPSHOT',
  '../',
  '<',
];

export const mavenMetadataTarget: FuzzTarget = {
  name: 'maven-metadata',
  about:
    'parseMavenMetadata (bounded XML), rewriteMetadata and writeMavenMetadata, parseMavenPath: a document or MavenMetadataError; the rewrite parses again and lists only endorsed versions; the writer round-trips',
  arbitrary: (seeds) =>
    mix(
      randomInput(XML_TOKENS),
      mutatedBytes(seeds, { tokens: XML_TOKENS }),
      mutatedLines(seeds, ['<version>9.9</version>', '<version>a/b</version>', '<groupId>x</groupId>']),
    ),
  check(input) {
    const m = refusedOnly(() => parseMavenMetadata(input), [], isMetadataError);
    if (m !== undefined && !m.snapshot) {
      const again = parseMavenMetadata(writeMavenMetadata(m));
      check(
        JSON.stringify(again.versions) === JSON.stringify(m.versions) && JSON.stringify(again.plugins) === JSON.stringify(m.plugins),
        'the written document reads back otherwise',
      );
    }
    for (const dir of [
      ['g', 'h', 'a'],
      ['g', 'h'],
    ]) {
      const a = rewriteMetadata(view, dir, input);
      if (!a.ok) {
        check(a.status === 404 || a.status === 502, `status ${a.status}`);
        continue;
      }
      const r = parseMavenMetadata(a.text);
      for (const v of r.versions ?? []) {
        check(
          view.endorsed(`${CANON}${dir.join('/')}/${v}/${dir.at(-1)}-${v}.pom`) !== null ||
            view.endorsed(`${CANON}${dir.join('/')}/${v}/${dir.at(-1)}-${v}.jar`) !== null,
          `unendorsed ${v} offered`,
        );
      }
      check(r.latest === (r.versions?.at(-1) ?? null), 'latest is not the last version offered');
    }
    const p = parseMavenPath(utf8(input));
    if (p !== null)
      check(
        !utf8(input)
          .split('/')
          .some((s) => s === '..' || s === '.' || s === ''),
        'a path with dot or empty segments was read',
      );
  },
  runs: 400,
};

const LIST_TOKENS = [
  ':jar:',
  ':pom:',
  ':compile',
  ':test',
  ' -- module ',
  ' (optional)',
  'The following files have been resolved:',
  '/home/u/x.jar',
  'C:\\x.jar',
  '..',
  '\n',
  ':',
];

export const mavenLockTarget: FuzzTarget = {
  name: 'lock-maven',
  about:
    'readDependencyList (mvn dependency:list output), pomReferences, parseSideFile, mavenSemver: files or bad_request / MavenMetadataError / null; every path is maven2 segments; a SemVer mapping is SemVer',
  arbitrary: (seeds) =>
    mix(
      randomInput(LIST_TOKENS),
      mutatedBytes(seeds, { tokens: [...LIST_TOKENS, ...XML_TOKENS] }),
      mutatedLines(seeds, ['   a.b:c:jar:1.0:compile', '   a.b:c:war:x:1.0-SNAPSHOT:runtime']),
    ),
  check(input) {
    const text = utf8(input);
    const files = refusedOnly(() => readDependencyList(text, 'deps.txt'), ['bad_request']);
    for (const f of files ?? []) check(!f.path.split('/').some((s) => s === '..' || s === '.' || s === ''), `path ${f.path}`);
    const refs = refusedOnly(() => pomReferences(input), [], isMetadataError);
    for (const r of refs ?? []) check(r.path.endsWith('.pom') && !r.path.includes('..'), `parent ${r.path}`);
    for (const alg of ['sha1', 'sha256'] as const) {
      const hex = parseSideFile(text, alg);
      if (hex !== null) check(hex.length === (alg === 'sha1' ? 40 : 64), 'a digest of the wrong length');
    }
    const s = mavenSemver(text.slice(0, 150));
    if (s.ok) check(isSemver(s.value), `${s.value} is not SemVer`);
  },
  runs: 400,
};
