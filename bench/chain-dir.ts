/**
 * The benchmarks' shared chain directories: a signed chain of `n` blocks
 * (test/helpers/chain-fixture.ts `buildLongChain`) in `bench/out/chain-<n>`,
 * built once and reused (bench/out is git-ignored).
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatBlockFile, formatCheckpointFile } from '../chain/block.ts';
import { ChainRepo } from '../store/chain-repo.ts';
import { buildLongChain } from '../test/helpers/chain-fixture.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

export async function benchChainDir(n: number): Promise<string> {
  const dir = join(root, 'bench', 'out', `chain-${n}`);
  if (!existsSync(join(dir, 'checkpoint.json'))) {
    console.log(`building a ${n}-block chain at ${dir}...`);
    const { blocks, checkpoint } = buildLongChain(n);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(join(root, 'bench', 'out'), { recursive: true });
    await ChainRepo.init(
      dir,
      blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
      formatCheckpointFile(checkpoint),
      { message: `bench chain of ${n} blocks\n`, authorName: 'bench', authorEmail: 'bench@vouch.invalid', timestamp: 1_790_000_000 },
    );
  }
  return dir;
}
