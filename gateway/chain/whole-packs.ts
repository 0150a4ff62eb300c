/**
 * After ready: when the served chain's block blobs are stored as deltas (a
 * chain git packed: a clone, `git gc`, a mirror's pack from a git server),
 * rewrite its packs with every object whole by stock git, in the
 * background, so a lookup past the caches reads one object instead of
 * resolving a chain of bases (issue 33; docs/performance-git.md "Serving a
 * chain git packed"). `chain.repack_deltas: false` turns it off.
 * Owns: the decision (a sample of block blobs), the run's log lines and counts.
 * Trusts: the store to run it as its single writer (store/whole-pack.ts).
 * Must hold: the gateway serves throughout; a failure is logged and counted, never thrown.
 */
import type { ChainReads } from '../../store/chain-api.ts';
import type { Logger } from '../observability/logger.ts';

/** Block blobs looked at, spread over the chain. */
const SAMPLES = 64;
/** Git is killed past this; the old packs stay. */
const TIMEOUT_MS = 3 * 3_600_000;

export interface WholePackStats {
  done: number;
  failed: number;
  running: boolean;
}

/** Whether a sample says the packs store the chain's block blobs as deltas (a quarter or more of those sampled). */
export function storedAsDeltas(repo: ChainReads): { sampled: number; deltas: number; yes: boolean } {
  const s = repo.blockStorage(SAMPLES);
  return { ...s, yes: s.sampled > 0 && s.deltas * 4 >= s.sampled };
}

/**
 * Start the rewrite when the sample calls for it; resolves when it is over
 * (done, failed, stopped by `signal`, or not needed).
 */
export async function repackDeltasAfterReady(repo: ChainReads, log: Logger, stats: WholePackStats, signal: AbortSignal): Promise<void> {
  if (stats.running) return;
  let sample: ReturnType<typeof storedAsDeltas>;
  try {
    sample = storedAsDeltas(repo);
  } catch (e) {
    log.warn('could not tell how the packs store the blocks; left as they are', { error: (e as Error).message });
    return;
  }
  if (!sample.yes) return;
  stats.running = true;
  log.info('the chain was packed by git (block blobs stored as deltas): rewriting its packs with every object whole, in the background', {
    sampled: sample.sampled,
    deltas: sample.deltas,
  });
  try {
    const r = await repo.repackWhole({ timeoutMs: TIMEOUT_MS, signal });
    stats.done++;
    log.info('packs rewritten whole', { ms: Math.round(r.ms), pack_bytes_before: r.before, pack_bytes_after: r.after });
  } catch (e) {
    if (signal.aborted) {
      log.info('the rewrite of the packs was stopped with the gateway; the packs are as they were');
      return;
    }
    stats.failed++;
    log.warn('could not rewrite the packs whole; lookups read the deltas', { error: (e as Error).message });
  } finally {
    stats.running = false;
  }
}
