/**
 * The vendored vectors (test/vectors/) are byte-identical copies of the
 * developers' shared ones (../shared/vectors/, or $VOUCH_SHARED_DIR/vectors)
 * when those exist beside the repository; on a plain clone the comparison
 * is skipped with a note, and the vendored files alone must be complete.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { sharedVectorsDir, vectorsDir, loadChainVectors, loadJcsVectors } from '../helpers/vectors.ts';

function filesUnder(root: string, dir = root): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...filesUnder(root, p));
    else out.push(relative(root, p));
  }
  return out;
}

test('the vendored vectors are complete on their own', () => {
  const V = loadChainVectors();
  assert.ok(V.valid.blocks.length > 1, 'a valid chain');
  assert.ok(V.invalid.length >= 10, 'one invalid case per code');
  const jcs = loadJcsVectors().map((v) => v.name);
  assert.equal(jcs, ['arrays', 'french', 'structures', 'unicode', 'values', 'weird']);
  assert.ok(existsSync(join(vectorsDir, 'README.md')), 'test/vectors/README.md says where they came from');
});

// Not test.skip: test/run.ts counts uvu's "Skipped" against its "Total", which already leaves skipped tests out.
const haveShared = existsSync(sharedVectorsDir);
test(`the vendored vectors are byte-identical to ../shared/vectors${haveShared ? '' : ' (skipped: not beside the repository)'}`, () => {
  if (!haveShared) {
    console.log(`  note: ${sharedVectorsDir} does not exist: the byte-for-byte comparison with the shared vectors is skipped`);
    return;
  }
  const shared = filesUnder(sharedVectorsDir);
  // transparency-dev/ is vendored from transparency-dev/merkle, not from ../shared (its own README says where);
  // index-v1/ is vouch's own (docs/spec/index.md 9), made by test/helpers/index-vectors.ts.
  const vendored = filesUnder(vectorsDir).filter((f) => f !== 'README.md' && !f.startsWith('transparency-dev/') && !f.startsWith('index-v1/'));
  assert.equal(vendored, shared, 'the same files');
  for (const f of shared) {
    const a = readFileSync(join(sharedVectorsDir, f));
    const b = readFileSync(join(vectorsDir, f));
    assert.ok(a.equals(b), `test/vectors/${f} differs from ${join(sharedVectorsDir, f)}: copy it again (see test/vectors/README.md)`);
  }
});

test.run();
