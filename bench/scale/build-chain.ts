/**
 * `node --max-old-space-size=14000 --import tsx bench/scale/build-chain.ts N`:
 * builds (or finds cached) the N-block fixture chain of bench/chain-dir.ts in
 * its own process, with the heap a million blocks need, and prints its
 * directory as the last line.
 */
import { benchChainDir } from '../chain-dir.ts';

const n = Number(process.argv[2]);
if (!Number.isInteger(n) || n < 2) {
  console.error('usage: build-chain.ts N');
  process.exit(2);
}
console.log(await benchChainDir(n));
