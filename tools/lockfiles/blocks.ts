/**
 * Packing many endorsements into as few blocks as the format allows: at most
 * LIMITS.endorsements entries and LIMITS.blockFileBytes bytes a block, and
 * with `maxUnsBytes` a full UNS header form within it (issue 31; an entry
 * too large alone gets its own block, answered in the compact form).
 * Chunks are cut by estimate, then every block is built and checked; one
 * over the limit is split and rebuilt, so the limit holds by construction.
 * Trusts: `build` to make the block that will be appended; the caller for
 * URLs appearing once in the list.
 * Must hold: entries keep their order; blocks chain; a single entry too
 * large for a block is an error.
 */
import { type Block, formatBlockFile } from '../../chain/block.ts';
import { VouchError } from '../../chain/errors.ts';
import type { EndorsementInput } from '../../chain/build.ts';
import { asciiJson } from '../../chain/uns-header.ts';

/** The longest gateway `service_name` (gateway/config.ts): the UNS key a block's header form is measured under. */
const LONGEST_SERVICE = 'x'.repeat(64);

/** Bytes of a block's full UNS header value under the longest service name. */
export function unsBytes(block: Block): number {
  return asciiJson({ [LONGEST_SERVICE]: { endorsement: block } }).length;
}

/** Bytes an entry adds to a block's UNS header value (its minified ASCII JSON and a comma). */
export function entryUnsBytes(e: EndorsementInput): number {
  return (
    asciiJson({
      artifact_hash: e.artifactHash,
      artifact_url: e.url,
      comment: e.comment ?? '',
      endorsement: 'provenance',
      license: e.license,
      name: e.name,
      semver: e.semver,
      signature_algorithm: 'ed25519',
    }).length + 1
  );
}

/** Bytes an entry adds to a block file: its pretty-printed form at the depth of payload.endorsements[i]. */
export function entryBytes(e: EndorsementInput): number {
  const shape = {
    artifact_hash: e.artifactHash,
    artifact_url: e.url,
    comment: e.comment ?? '',
    endorsement: 'provenance',
    license: e.license,
    name: e.name,
    semver: e.semver,
    signature_algorithm: 'ed25519',
  };
  const text = JSON.stringify(shape, null, 2);
  const lines = text.split('\n').length;
  return Buffer.byteLength(text) + lines * 6 + 2;
}

/**
 * Builds the blocks for `entries`. `build(chunk, prev, part, parts)` makes
 * block `part` (1-based) of `parts` after `prev` (null for the first).
 */
export function packBlocks(
  entries: readonly EndorsementInput[],
  limits: { maxEntries: number; maxBytes: number; maxUnsBytes?: number },
  build: (chunk: EndorsementInput[], prev: Block | null, part: number, parts: number) => Block,
): Block[] {
  if (entries.length === 0) return [];
  // The block around the entries, measured (comments saying "part k of K" may grow a little: 256 bytes spare).
  const probe = build([entries[0]!], null, 1, 1);
  const overhead = Buffer.byteLength(formatBlockFile(probe)) - entryBytes(entries[0]!) + 256;
  const maxUns = limits.maxUnsBytes ?? Infinity;
  const unsOverhead = unsBytes(probe) - entryUnsBytes(entries[0]!) + 64;
  const tooLarge = (e: EndorsementInput) =>
    new VouchError('bad_request', `the endorsement of ${e.url} alone would make a block larger than ${limits.maxBytes} bytes`);
  // Cut by estimate.
  const cuts: number[] = [0];
  let size = overhead;
  let uns = unsOverhead;
  let count = 0;
  entries.forEach((e, i) => {
    const b = entryBytes(e);
    const u = entryUnsBytes(e);
    if (overhead + b > limits.maxBytes) throw tooLarge(e);
    if (count > 0 && (count >= limits.maxEntries || size + b > limits.maxBytes || uns + u > maxUns)) {
      cuts.push(i);
      size = overhead;
      uns = unsOverhead;
      count = 0;
    }
    size += b;
    uns += u;
    count++;
  });
  cuts.push(entries.length);
  // Build and measure; split what is over and rebuild.
  for (;;) {
    const blocks: Block[] = [];
    let over = -1;
    for (let k = 0; k + 1 < cuts.length; k++) {
      const block = build(entries.slice(cuts[k], cuts[k + 1]), blocks.at(-1) ?? null, k + 1, cuts.length - 1);
      const n = cuts[k + 1]! - cuts[k]!;
      if (Buffer.byteLength(formatBlockFile(block)) > limits.maxBytes || (n > 1 && unsBytes(block) > maxUns)) {
        over = k;
        break;
      }
      blocks.push(block);
    }
    if (over < 0) return blocks;
    const from = cuts[over]!;
    const to = cuts[over + 1]!;
    if (to - from < 2) throw tooLarge(entries[from]!);
    cuts.splice(over + 1, 0, from + Math.floor((to - from) / 2));
  }
}
