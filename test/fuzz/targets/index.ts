/** Every fuzz target, by name (test/hostile/fuzz.test.ts runs them all; `npm run fuzz -- NAME` one). */
import type { FuzzTarget } from '../target.ts';
import { h1Chunked, h1ClientTarget, h1Head } from './h1.ts';
import { gitSmartHttpTarget, gitDeltaTarget, gitIndexTarget, gitPackDiskTarget, gitPackTarget, pktLineTarget, gitCatFileTarget } from './git.ts';
import {
  tlogPolicyTarget,
  tlogProofTarget,
  addCheckpointTarget,
  blockFileTarget,
  checkpointTarget,
  jcsTarget,
  noteTarget,
  queryTarget,
  tileTarget,
} from './chain.ts';
import { mavenLockTarget, mavenMetadataTarget } from './maven.ts';
import { indexProofTarget } from './index-proof.ts';
import { blobOidsTarget } from './blob-oids.ts';
import { answerLz4Target } from './answer-lz4.ts';
import { ociManifestTarget, ociTextTarget } from './oci.ts';
import {
  configTarget,
  goProxyTarget,
  goSumTarget,
  goZipTarget,
  jsonShapeTarget,
  npmLockTarget,
  npmPackumentTarget,
  pipIndexTarget,
  pipLockTarget,
  pypiHtmlTarget,
  pypiJsonTarget,
} from './ecosystems.ts';

export const TARGETS: readonly FuzzTarget[] = [
  h1Head,
  h1Chunked,
  h1ClientTarget,
  pktLineTarget,
  gitSmartHttpTarget,
  gitPackTarget,
  gitDeltaTarget,
  gitPackDiskTarget,
  gitIndexTarget,
  gitCatFileTarget,
  blobOidsTarget,
  answerLz4Target,
  blockFileTarget,
  jcsTarget,
  noteTarget,
  checkpointTarget,
  addCheckpointTarget,
  tlogPolicyTarget,
  tlogProofTarget,
  indexProofTarget,
  tileTarget,
  queryTarget,
  pypiHtmlTarget,
  pypiJsonTarget,
  npmPackumentTarget,
  jsonShapeTarget,
  goProxyTarget,
  goZipTarget,
  npmLockTarget,
  pipLockTarget,
  pipIndexTarget,
  goSumTarget,
  configTarget,
  mavenMetadataTarget,
  mavenLockTarget,
  ociManifestTarget,
  ociTextTarget,
];

export function targetNamed(name: string): FuzzTarget | undefined {
  return TARGETS.find((t) => t.name === name);
}
