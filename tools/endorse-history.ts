/**
 * What the chain already says about the URLs `vouch endorse` is about to
 * sign (`semver_conflict`, `unchanged`), and the record hashes for the note
 * an append signs, in time that does not grow with the chain when the last
 * verified state allows: the gateway's snapshot and index image, tied to
 * the trusted head by hashing every block file of the gap after it; else
 * the full scan of every block file. Past CLI_REFRESH_BLOCKS of gap,
 * `refreshIfBehind` has gateway/chain/verified-state.ts load warm and write a new
 * snapshot.
 * Trusts: the local disk as much as the chain directory (the image only
 * where it agrees with the block files).
 * Must hold: the same answer as the full scan on a chain that verifies;
 * nothing is written that ChainState did not verify.
 */
import { type Block, parseBlockText } from '../chain/block.ts';
import { computeRecordHash } from '../chain/build.ts';
import { ChainIndex } from '../chain/select.ts';
import { CompactIndex } from '../chain/compact-index.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import type { ChainReads } from '../store/chain-repo.ts';
import { ChainState, lastVerifiedImage, lastVerifiedTreeEdge } from '../gateway/chain/verified-state.ts';
import type { EdgeSeed } from '../store/chain-append.ts';
import { isVoid, type KeyState } from '../chain/key-events.ts';

export interface Prior {
  block: Block;
  artifactHash: string;
  semver: string;
}
export type History = Map<string, Prior[]>;

export interface HistoryReport {
  history: History;
  /** `image`: from the last verified state; `scan`: every block file was read. */
  source: 'image' | 'scan';
  /** Block files read in full (the gap, or the whole chain). */
  scanned: number;
  /** Why the image was not used (when source is `scan`). */
  why?: string;
  /** With source `image`: every block's record_hash in order (the image's, then the gap's), for the tree edge. */
  recordHashes?: () => Iterable<string>;
  /**
   * With source `image`: the edge of the gateway's verified Merkle tree
   * image (the one its snapshot names) and the record hashes after it, when
   * that image is not larger than the index image: the tree edge without
   * the O(n) fold of `recordHashes` (store/chain-append.ts `headEdge`).
   */
  edgeSeed?: EdgeSeed;
}

class Unusable extends Error {}

/** Block i from its file, which must hash to its record_hash. */
function readChecked(repo: ChainReads, i: number): Block {
  const block = parseBlockText(repo.readBlockFile(i), i);
  if (computeRecordHash(block, nodeBackend) !== block.record_hash) throw new Unusable(`block ${i}'s file does not hash to its record_hash`);
  return block;
}

/**
 * The earlier endorsements of `urls`, from the last verified state when it
 * is usable, else by `fullScan`. `head`: the trusted head (trustedHead).
 */
export function priorEndorsements(
  repo: ChainReads,
  urls: Iterable<string>,
  head: Block,
  fullScan: (repo: ChainReads, urls: readonly string[]) => History,
  keys: KeyState | null = null,
): HistoryReport {
  const list = [...new Set(urls)];
  let report: HistoryReport;
  try {
    const { history, gap, recordHashes, edgeSeed } = fromImage(repo, list, head);
    report = { history, source: 'image', scanned: gap, recordHashes, edgeSeed };
  } catch (e) {
    if (!(e instanceof Unusable) && !(e instanceof TypeError)) throw e;
    report = { history: fullScan(repo, list), source: 'scan', scanned: repo.size, why: e.message };
  }
  // Void blocks (signed by a compromised key after its last good block) endorse nothing: neither unchanged nor a conflict.
  if (keys !== null && keys.voids.length > 0) {
    for (const [url, priors] of report.history)
      report.history.set(
        url,
        priors.filter((p) => !isVoid(keys, p.block.index)),
      );
  }
  return report;
}

function fromImage(
  repo: ChainReads,
  urls: readonly string[],
  head: Block,
): { history: History; gap: number; recordHashes: () => Iterable<string>; edgeSeed: EdgeSeed } {
  const found = lastVerifiedImage(repo.dir);
  if (found === null) throw new Unusable('no verified index image (a gateway start over this directory writes one)');
  const n = found.size;
  if (n > repo.size || n > head.index + 1) throw new Unusable(`the index image holds ${n} blocks, the chain ${repo.size}`);
  const compact = CompactIndex.fromImage(found.image);
  const index = new ChainIndex({ reader: (i) => readChecked(repo, i), cacheBlocks: 1024 }, compact);
  if (index.size !== n) throw new Unusable('the index image is not of the size the snapshot names');
  // Tie the image to the trusted head: its last block is that block file, and the gap links up to the head.
  const last = parseBlockText(repo.readBlockFile(n - 1), n - 1);
  if (index.indexOfHash(last.record_hash) !== n - 1) throw new Unusable(`block ${n - 1}'s file is not the block the index image holds`);
  const out: History = new Map(urls.map((u) => [u, []]));
  for (const url of urls) {
    for (const v of index.versions(url)) {
      // readChecked recomputed its record_hash; it must be the one the image holds at that index.
      if (index.indexOfHash(v.block.record_hash) !== v.block.index) throw new Unusable(`block ${v.block.index}'s file is not the block the index image holds`);
      out.get(url)!.push({ block: v.block, artifactHash: v.entry.artifact_hash, semver: v.entry.semver });
    }
  }
  let prev = last.record_hash;
  const gapHashes: string[] = [];
  for (let i = n; i < repo.size; i++) {
    const block = readChecked(repo, i);
    if (block.prev_hash !== prev) throw new Unusable(`block ${i} does not follow block ${i - 1}`);
    prev = block.record_hash;
    gapHashes.push(prev);
    if (block.payload.intent !== 'endorse') continue;
    for (const e of block.payload.endorsements) out.get(e.artifact_url)?.push({ block, artifactHash: e.artifact_hash, semver: e.semver });
  }
  if (prev !== head.record_hash || repo.size !== head.index + 1) throw new Unusable("the blocks after the index image do not lead to the checkpoint's head");
  const recordHashes = function* (): Iterable<string> {
    for (let i = 0; i < n; i++) yield compact.recordHashOf(i);
    yield* gapHashes;
  };
  const edgeSeed: EdgeSeed = () => {
    const edge = lastVerifiedTreeEdge(repo.dir);
    if (edge === null || edge.size > n) return null;
    const rest = function* (): Iterable<string> {
      for (let i = edge.size; i < n; i++) yield compact.recordHashOf(i);
      yield* gapHashes;
    };
    return { edge, rest: rest() };
  };
  return { history: out, gap: repo.size - n, recordHashes, edgeSeed };
}

/** Gap (blocks after the image) at which a CLI append refreshes the snapshot and image (see the header). */
export const CLI_REFRESH_BLOCKS = 2_000;

/**
 * After an append: when the image used was at least CLI_REFRESH_BLOCKS
 * behind, loads the chain through ChainState (warm: only the blocks after
 * the snapshot are verified), which writes the snapshot and image anew.
 * Returns whether it did. Failures are ignored: the state is an
 * optimisation only (a read-only .git, a snapshot gone meanwhile).
 */
export async function refreshIfBehind(repo: ChainReads, report: HistoryReport, appended: number, limit = CLI_REFRESH_BLOCKS): Promise<boolean> {
  if (report.source !== 'image' || report.scanned + appended < limit) return false;
  try {
    await ChainState.load(repo);
    return true;
  } catch {
    return false;
  }
}

/** Says once on stderr that the full scan was taken and why, unless quiet. */
export function noteScan(report: HistoryReport, quiet: boolean): void {
  if (report.source !== 'scan' || quiet || report.scanned < 10_000) return;
  process.stderr.write(
    `note: searched all ${report.scanned} block files for earlier endorsements (${report.why}); ` +
      'the verified state a gateway start (vouch serve) leaves in .git makes this constant time\n',
  );
}
