/** Lockfile fixtures: digests in the forms lockfiles write, files under a work dir, package-lock entries served by an origin. */
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { OriginServer } from './origin-server.ts';

/** The raw digest of `b` with `alg` (a node:crypto name). */
export const sha = (alg: string, b: Buffer | string): Buffer => createHash(alg).update(b).digest();
/** A Subresource Integrity string (`sha512-<base64>`), as package-lock.json's `integrity`. */
export const sri = (alg: string, b: Buffer | string): string => `${alg}-${sha(alg, b).toString('base64')}`;
/** The hex digest of `b` with `alg`. */
export const hex = (alg: string, b: Buffer | string): string => sha(alg, b).toString('hex');

/** A writer of files under `dir` (parent folders made); each call returns the file's path. */
export function writerIn(dir: string): (name: string, content: string | Buffer) => string {
  return (name, content) => {
    const p = join(dir, name);
    mkdirSync(dirname(p), { recursive: true });
    writeFileSync(p, content);
    return p;
  };
}

/** A package-lock v3 `packages` map entry for a tarball that `origin` serves at `path`. */
export function lockTarball(origin: OriginServer, path: string, bytes: Buffer, extra: Record<string, unknown> = {}): Record<string, unknown> {
  origin.route(path, { body: bytes, contentType: 'application/octet-stream' });
  return { resolved: origin.url(path), integrity: sri('sha512', bytes), ...extra };
}
