/**
 * The ecosystem modules by route kind (`plain` routes have none).
 */
import type { RouteKind } from '../config.ts';
import type { EcosystemHandler } from './ecosystem.ts';
import { npm } from './npm.ts';
import { pypi } from './pypi.ts';
import { goproxy } from './goproxy.ts';
import { maven } from './maven.ts';
import { oci } from './oci.ts';

export function ecosystemFor(kind: RouteKind): EcosystemHandler | null {
  switch (kind) {
    case 'npm':
      return npm;
    case 'pypi':
      return pypi;
    case 'goproxy':
      return goproxy;
    case 'maven':
      return maven;
    case 'oci':
      return oci;
    case 'plain':
      return null;
  }
}
