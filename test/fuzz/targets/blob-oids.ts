/**
 * Fuzz target of the leaf trees the block reads learn blob ids from
 * (store/blob-oids.ts `BlobOids.learnShard`): genuine leaf trees written by
 * git (`git mktree`), mutated as bytes and as entries (dropped, renamed,
 * re-moded, cut short, a long name holding a well-formed entry).
 * Property: never a throw; nothing learnt outside the shard; every id learnt
 * is the one a strict reading of the tree (store/git-objects.ts `parseTree`,
 * entry by entry) gives that block's name as a regular file.
 */
import fc from 'fast-check';
import { blockPath } from '../../../chain/layout.ts';
import { BlobOids } from '../../../store/blob-oids.ts';
import { parseTree } from '../../../store/git-objects.ts';
import { check, mix, mustNotThrow, mutatedBytes, randomInput, type FuzzTarget } from '../target.ts';

const SHARD = 1000;
const nameOf = (i: number) => blockPath(i).slice(15);

/** The shard a tree is learnt as: the one its first entry's name claims, else 0 (a wrong guess only learns nothing). */
function shardOf(body: Buffer): number {
  const m = /^\d+ (\d{9})\.json\0/.exec(body.toString('latin1', 0, 32));
  return m ? Number(m[1]) - (Number(m[1]) % SHARD) : 0;
}

/** The entries of the longest prefix of `body` that parses entry by entry (what a tree walk finds before a corrupt entry). */
function strictEntries(body: Buffer): Map<string, { mode: string; oid: string }> {
  const out = new Map<string, { mode: string; oid: string }>();
  let off = 0;
  while (off < body.length) {
    const sp = body.indexOf(0x20, off);
    const nul = sp < 0 ? -1 : body.indexOf(0, sp);
    if (sp < 0 || nul < 0 || nul + 21 > body.length) break;
    for (const e of parseTree(body.subarray(off, nul + 21), 'fuzz')) if (!out.has(e.name)) out.set(e.name, { mode: e.mode, oid: e.oid });
    off = nul + 21;
  }
  return out;
}

/** Splits a genuine tree into its entries (42 bytes each). */
function entriesOf(seed: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at + 42 <= seed.length; at += 42) out.push(seed.subarray(at, at + 42));
  return out;
}

/** Entry-level edits of a genuine tree: the shapes a forged or damaged leaf tree takes. */
function mutatedEntries(seeds: readonly Buffer[]): fc.Arbitrary<Buffer> {
  const op = fc.record({
    k: fc.constantFrom('drop', 'rename', 'mode', 'cut', 'swap', 'hold'),
    at: fc.nat(),
    n: fc.nat(64),
  });
  return fc.tuple(fc.nat(Math.max(0, seeds.length - 1)), fc.array(op, { minLength: 1, maxLength: 4 })).map(([i, ops]) => {
    let entries: Buffer[] = entriesOf(seeds[i] ?? Buffer.alloc(0));
    let tail: Buffer = Buffer.alloc(0);
    for (const o of ops) {
      if (entries.length === 0) break;
      const k = o.at % entries.length;
      const e = entries[k]!;
      const name = e.toString('latin1', 7, 21);
      const oid = e.subarray(22, 42);
      if (o.k === 'drop') entries = entries.filter((_, j) => j !== k);
      else if (o.k === 'rename') entries[k] = Buffer.concat([Buffer.from(`100644 ${nameOf(Number(name.slice(0, 9)) + 1 + (o.n % 3))}\0`, 'latin1'), oid]);
      else if (o.k === 'mode') entries[k] = Buffer.concat([Buffer.from(`${['100755', '120000', '160000', '40000', '644'][o.n % 5]} ${name}\0`, 'latin1'), oid]);
      else if (o.k === 'swap') [entries[k], entries[(k + 1) % entries.length]] = [entries[(k + 1) % entries.length]!, e];
      else if (o.k === 'cut') {
        tail = e.subarray(0, o.n % 42);
        entries = entries.slice(0, k);
      } else {
        // A name that holds, 42 bytes on, the well-formed entry of the next position; its own id is the one a misreading learns.
        const next = Number(name.slice(0, 9)) + 1;
        const filler = 'x'.repeat(42 - 7 - (o.n % 2));
        entries[k] = Buffer.concat([Buffer.from(`100644 ${name}${filler.slice(14)}100644 ${nameOf(next)}\0`, 'latin1'), oid]);
      }
    }
    return Buffer.concat([...entries, tail]);
  });
}

export const blobOidsTarget: FuzzTarget = {
  name: 'blob-oids',
  about:
    'leaf trees the block reads learn ids from (store/blob-oids.ts learnShard): no throw, nothing outside the shard, every id learnt is the one a strict reading gives the block',
  arbitrary: (seeds) =>
    mix(
      randomInput(['100644 ', '.json\0', '000000000', '40000 ']),
      mutatedBytes(seeds, { tokens: ['100644 ', '100755 ', '.json\0', '\0'] }),
      mutatedEntries(seeds),
    ),
  check(input) {
    const base = shardOf(input);
    const t = new BlobOids();
    mustNotThrow(() => t.learnShard(base, input), 'learnShard');
    const strict = strictEntries(input);
    for (let i = base; i < base + SHARD; i++) {
      const got = t.get(i);
      if (got === null) continue;
      const e = strict.get(nameOf(i));
      check(
        e !== undefined && e.mode === '100644' && e.oid === got,
        `block ${i}: learnt ${got}, a strict reading gives ${e ? `${e.mode} ${e.oid}` : 'no such entry'}`,
      );
    }
    check(t.get(base - 1) === null && t.get(base + SHARD) === null, 'an id learnt outside the shard');
  },
  runs: 400,
};
