/**
 * Loads the test vectors vendored in `test/vectors/` (see its README): the
 * chain vectors of an independent implementation, the RFC 8785 reference
 * data and transparency-dev/merkle's reference tree and proof probes
 * (`test/vectors/transparency-dev/`). Tests need nothing beside the
 * repository.
 *
 * Owns: where the vendored vectors are (`vectorsDir`) and where the
 * developers' shared copy would be (`sharedVectorsDir`, `../shared/vectors`
 * or `$VOUCH_SHARED_DIR/vectors`), which test/unit/vendored-vectors.test.ts
 * compares byte for byte when it exists.
 * Must hold: the vendored files are never edited by hand; they are copies.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
export const vectorsDir = join(repoRoot, 'test', 'vectors');
export const sharedVectorsDir = join(process.env.VOUCH_SHARED_DIR ?? join(repoRoot, '..', 'shared'), 'vectors');

export interface InvalidCase {
  name: string;
  description: string;
  expect: { ok: false; code: string; index: number | null };
  blocks: any[];
  pinned_public_key?: string;
  checkpoint?: any;
}

export interface ChainVectors {
  key: { seed_hex: string; public_key: string; signer: string };
  artifacts: Record<string, string>;
  valid: { blocks: any[]; checkpoint: any; payload_jcs: Record<string, string>; record_jcs: Record<string, string> };
  invalid: InvalidCase[];
}

export function loadChainVectors(): ChainVectors {
  return JSON.parse(readFileSync(join(vectorsDir, 'chain-v1.json'), 'utf8'));
}

/** transparency-dev/merkle's test data (README there): `reference-tree.json`, `testdata/{inclusion,consistency}/`. */
export const transparencyDevDir = join(vectorsDir, 'transparency-dev');

/** transparency-dev/merkle's reference tree: its leaf inputs, the hashes of every level, the root of every size (hex). */
export interface ReferenceTree {
  leafInputs: string[];
  nodeHashes: string[][];
  rootHashes: string[];
}

export function loadReferenceTree(): ReferenceTree {
  return JSON.parse(readFileSync(join(transparencyDevDir, 'reference-tree.json'), 'utf8'));
}

export function loadJcsVectors(): { name: string; input: string; output: Buffer }[] {
  const dir = join(vectorsDir, 'jcs');
  return readdirSync(dir)
    .filter((f) => f.endsWith('.input.json'))
    .sort()
    .map((f) => {
      const name = f.replace('.input.json', '');
      return { name, input: readFileSync(join(dir, f), 'utf8'), output: readFileSync(join(dir, `${name}.output.json`)) };
    });
}
