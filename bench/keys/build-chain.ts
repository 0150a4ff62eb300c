/**
 * `node --max-old-space-size=14000 --import tsx bench/keys/build-chain.ts N EVERY`:
 * builds (or finds cached) an N-block chain in `bench/out/keys-<N>-<EVERY>`
 * (test/helpers/key-fixture.ts `buildRotatingChain`: a 2-of-3 root adopted
 * at block 1, the online key rotated every EVERY blocks; EVERY 0: the same
 * chain with neither root nor rotation, the baseline) in its own process, with
 * the heap a million blocks need; prints its directory as the last line.
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { buildRotatingChain, KeyChain } from '../../test/helpers/key-fixture.ts';

const n = Number(process.argv[2]);
const every = Number(process.argv[3]);
if (!Number.isInteger(n) || n < 2 || !Number.isInteger(every) || every < 0) {
  console.error('usage: build-chain.ts N EVERY');
  process.exit(2);
}
const root = fileURLToPath(new URL('../..', import.meta.url));
const dir = join(root, 'bench', 'out', `keys-${n}-${every}`);
if (!existsSync(join(dir, 'checkpoint.json'))) {
  console.log(`building a ${n}-block chain (${every === 0 ? 'no key events' : `rotation every ${every}`}) at ${dir}...`);
  let c: KeyChain;
  if (every === 0) {
    c = new KeyChain();
    while (c.blocks.length < n) c.endorse(c.blocks.length);
  } else c = buildRotatingChain(n, every);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(root, 'bench', 'out'), { recursive: true });
  await ChainRepo.init(
    dir,
    c.blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(c.checkpoint()),
    { message: `bench chain of ${n} blocks\n`, authorName: 'bench', authorEmail: 'bench@vouch.invalid', timestamp: 1_790_000_000 },
  );
}
console.log(dir);
