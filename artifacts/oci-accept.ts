/**
 * What a registry needs to hear to answer a manifest as it is stored: the
 * media types of OCI and Docker schema 2 manifests and indexes in `accept`
 * (the distribution registry answers an OCI manifest by tag only to a client
 * that accepts it, and converts a Docker one to schema 1 for `*` / `*`).
 * Owns: the list and the path test. Pure.
 */
export const OCI_MANIFEST_TYPES: readonly string[] = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
];
export const OCI_MANIFEST_ACCEPT = OCI_MANIFEST_TYPES.join(', ');

/** Whether a URL path is a registry's manifest endpoint (`/v2/<name>/manifests/<reference>`). */
export function isOciManifestPath(pathname: string): boolean {
  return pathname.length <= 1024 && /^(?:\/[^/]+)*\/v2\/[a-z0-9._\/-]+\/manifests\/[A-Za-z0-9_.:-]+$/.test(pathname);
}
