/**
 * Fuzz targets of what a container registry and a user hand the OCI route
 * and `vouch endorse --oci`: manifests and image indexes (parseManifest),
 * and the small grammars: request paths, tag lists and their pages,
 * `WWW-Authenticate` challenges, `Range`, image references and files of
 * them (lines, compose / Kubernetes YAML).
 * Property: a result or the documented VouchError (bad_request, too_large);
 * every digest a manifest yields is an OCI digest; a page is a slice of the
 * sorted tags after `last`.
 */
import { VouchError } from '../../../chain/errors.ts';
import { DIGEST, pageOf, parseChallenge, parseManifest, parseOciPath, parseTagList, isRepository } from '../../../gateway/ecosystems/oci.ts';
import { parseRange } from '../../../gateway/ecosystems/oci-route.ts';
import { parseImageRef, readImageRefs } from '../../../tools/lockfiles/oci.ts';
import { check, mix, mutatedBytes, mutatedJson, mutatedLines, randomInput, refusedOnly, type FuzzTarget } from '../target.ts';

const utf8 = (b: Buffer) => b.toString('utf8');
const DIG = `sha256:${'a'.repeat(64)}`;
const TOKENS = [
  '{',
  '}',
  '[',
  ']',
  '"',
  ':',
  ',',
  '"digest"',
  `"${DIG}"`,
  '"manifests"',
  '"layers"',
  '"config"',
  '"mediaType"',
  '"schemaVersion":2',
  'null',
  '1e999',
];

export const ociManifestTarget: FuzzTarget = {
  name: 'oci-manifest',
  about: 'parseManifest (manifests and indexes, OCI and Docker schema 2): facts whose digests are all OCI digests, or VouchError bad_request / too_large',
  arbitrary: (seeds) => mix(randomInput(TOKENS), mutatedBytes(seeds, { tokens: TOKENS }), mutatedJson(seeds)),
  check(input) {
    const facts = refusedOnly(() => parseManifest(input), ['bad_request', 'too_large']);
    if (facts === undefined) return;
    for (const d of [...facts.manifests, ...facts.blobs]) check(DIGEST.test(d), `a digest that is not one: ${d}`);
    check(facts.manifests.length === 0 || facts.blobs.length === 0, 'an index with blobs, or a manifest with manifests');
  },
  runs: 500,
};

const TEXT_TOKENS = [
  '/',
  ':',
  '@',
  '#',
  '\n',
  'image: ',
  '- ',
  'manifests',
  'blobs',
  'tags/list',
  DIG,
  'Bearer ',
  'realm="',
  '",',
  '\\"',
  'bytes=',
  '-',
  ',',
  '---\n',
  '&a',
  '*a',
  '[',
  '{',
];

export const ociTextTarget: FuzzTarget = {
  name: 'oci-text',
  about:
    'parseOciPath, parseTagList + pageOf, parseChallenge, parseRange, parseImageRef, readImageRefs: a result, null or the documented VouchError, never another throw',
  arbitrary: (seeds) =>
    mix(randomInput(TEXT_TOKENS), mutatedBytes(seeds, { tokens: TEXT_TOKENS }), mutatedLines(seeds, ['image: a/b:1', '  image: x', 'bytes=-0'])),
  check(input) {
    const text = utf8(input);
    const p = refusedOnly(() => parseOciPath(text), []);
    if (p && p.type !== 'base') check(isRepository(p.repo), `a path of repository ${JSON.stringify(p.repo)}`);
    const tags = refusedOnly(() => parseTagList(input), ['bad_request', 'too_large']);
    if (tags !== undefined) {
      const sorted = [...tags.tags].sort();
      const last = sorted[Math.floor(sorted.length / 2)] ?? null;
      const page = pageOf(sorted, 3, last);
      check(page.tags.length <= 3 && page.tags.every((t) => last === null || t > last), 'a page not after last or longer than n');
    }
    refusedOnly(() => parseChallenge(text), ['bad_request', 'too_large']);
    const r = refusedOnly(() => parseRange(text, 1000), []);
    if (r !== undefined && r !== null && r !== 'bad') check(r.start >= 0 && r.end < 1000 && r.start <= r.end, `range ${JSON.stringify(r)}`);
    const ref = refusedOnly(() => parseImageRef(text), ['bad_request']);
    if (ref !== undefined) check(isRepository(ref.repo) && (ref.tag !== null || ref.digest !== null), 'a reference without repository or tag');
    for (const name of ['images.txt', 'compose.yaml']) {
      const refs = refusedOnly(
        () => readImageRefs(text, name),
        ['bad_request', 'too_large'],
        (e) => e instanceof VouchError && (e.code === 'bad_request' || e.code === 'too_large'),
      );
      if (refs !== undefined) check(refs.length > 0, 'no references but no refusal');
    }
  },
  runs: 500,
};
