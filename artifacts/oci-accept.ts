/**
 * What a registry needs to hear to answer a manifest as it is stored: the
 * media types of OCI and Docker schema 2 manifests and indexes in `accept`
 * (the distribution registry answers an OCI manifest by tag only to a client
 * that accepts it, and converts a Docker one to schema 1 for `*` / `*`), and
 * its `WWW-Authenticate` challenge when it wants a token first.
 * Owns: the list, the path test, the challenge parser (bounded). Pure.
 */
import { VouchError } from '../chain/errors.ts';

/** Largest `WWW-Authenticate` value parsed, and its most parameters. */
export const MAX_CHALLENGE_BYTES = 4096;
const MAX_CHALLENGE_PARAMS = 16;
export const OCI_MANIFEST_TYPES: readonly string[] = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
];
export const OCI_MANIFEST_ACCEPT = OCI_MANIFEST_TYPES.join(', ');

/** Whether a URL path is a registry's manifest endpoint (`/v2/<name>/manifests/<reference>`). */
export function isOciManifestPath(pathname: string): boolean {
  return pathname.length <= 1024 && /^(?:\/[^/]+)*\/v2\/[a-z0-9._/-]+\/manifests\/[A-Za-z0-9_.:-]+$/.test(pathname);
}

/**
 * A `WWW-Authenticate` challenge: its scheme (lower-case) and parameters
 * (lower-case names), e.g. `Bearer realm="https://auth.example/token",service="registry",scope="repository:a:pull"`.
 * Only the first challenge is read. @throws VouchError bad_request / too_large.
 */
export function parseChallenge(value: string): { scheme: string; params: Record<string, string> } {
  if (value.length > MAX_CHALLENGE_BYTES) throw new VouchError('too_large', `WWW-Authenticate longer than ${MAX_CHALLENGE_BYTES} bytes`);
  const m = /^\s*([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*)\s*/.exec(value);
  if (m === null) throw new VouchError('bad_request', 'WWW-Authenticate: no scheme');
  const params: Record<string, string> = Object.create(null);
  let at = m[0].length;
  let count = 0;
  const param = /([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]*))\s*(,\s*)?/y;
  while (at < value.length) {
    param.lastIndex = at;
    const p = param.exec(value);
    if (p === null) break; // a second challenge, or a token68: not read
    if (++count > MAX_CHALLENGE_PARAMS) throw new VouchError('too_large', `WWW-Authenticate: more than ${MAX_CHALLENGE_PARAMS} parameters`);
    params[p[1]!.toLowerCase()] = p[2] !== undefined ? p[2].replace(/\\(.)/g, '$1') : p[3]!;
    at = param.lastIndex;
    if (p[4] === undefined) break;
  }
  return { scheme: m[1]!.toLowerCase(), params };
}
