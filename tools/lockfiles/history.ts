/**
 * What the chain already says about a set of artifact URLs, for
 * `vouch endorse --lockfile` (thousands of URLs at once).
 *
 * The full scan, used when the last verified state cannot answer
 * (tools/endorse-history.ts). Owns: one pass over the block files, each read once and JSON-parsed
 * once, looking its URLs up in a set: the cost grows with the chain, not
 * with chain x URLs (store/chain-append.ts findEndorsements searches the text
 * of each block for each URL, which suits one release's few URLs). A block
 * that names one of the URLs is then parsed strictly (parseBlockText).
 *
 * Must hold: the same answer as findEndorsements: every earlier endorsement
 * of each URL, oldest first; revoke blocks are not consulted (as in the
 * single-URL mode).
 */
import { type Block, parseBlockText } from '../../chain/block.ts';
import type { ChainReads } from '../../store/chain-repo.ts';

export interface Prior {
  block: Block;
  artifactHash: string;
  semver: string;
}

export function endorsementsOf(repo: ChainReads, urls: Iterable<string>): Map<string, Prior[]> {
  const out = new Map<string, Prior[]>();
  for (const u of urls) out.set(u, []);
  for (let i = 1; i < repo.size; i++) {
    const text = repo.readBlockFile(i);
    let loose: unknown;
    try {
      loose = JSON.parse(text);
    } catch {
      parseBlockText(text, i); // throws `malformed` with the reason
    }
    const list = (loose as { payload?: { endorsements?: unknown } } | null)?.payload?.endorsements;
    if (!Array.isArray(list)) continue;
    if (!list.some((e) => typeof e?.artifact_url === 'string' && out.has(e.artifact_url))) continue;
    const block = parseBlockText(text, i);
    if (block.payload.intent !== 'endorse') continue;
    for (const e of block.payload.endorsements) {
      out.get(e.artifact_url)?.push({ block, artifactHash: e.artifact_hash, semver: e.semver });
    }
  }
  return out;
}
