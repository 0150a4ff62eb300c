/**
 * Child process of the chain benchmark: reads every block file of a chain
 * directory, parses it strictly and builds the in-memory index, then prints
 * {ms, blocks, maxRssMiB} as JSON. Run alone so peak RSS is its own
 * (`peakRssMiB`).
 */
import { parseBlockText } from '../chain/block.ts';
import { ChainIndex } from '../chain/select.ts';
import { ChainRepo } from '../store/chain-repo.ts';
import { peakRssMiB } from './peak-rss.ts';

const dir = process.argv[2]!;
const t0 = performance.now();
const repo = await ChainRepo.open(dir, { repair: false });
const index = new ChainIndex();
for (let i = 0; i < repo.size; i++) index.add(parseBlockText(repo.readBlockFile(i), i));
const ms = performance.now() - t0;
console.log(JSON.stringify({ ms, blocks: index.size, maxRssMiB: peakRssMiB() }));
