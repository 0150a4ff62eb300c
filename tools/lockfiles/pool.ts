/**
 * Bounded concurrency for the lockfile fetches.
 *
 * Owns: running at most `limit` tasks at once, in item order. Must hold: on
 * the first failure no new task starts, the running ones are aborted through
 * the signal they were given, and the first failure is what is thrown once
 * every started task has settled (no task outlives the call).
 */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  task: (item: T, signal: AbortSignal) => Promise<R>,
  onDone?: (done: number, total: number) => void,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  const abort = new AbortController();
  let next = 0;
  let done = 0;
  let failure: { error: unknown } | null = null;
  const worker = async () => {
    while (failure === null && next < items.length) {
      const i = next++;
      try {
        results[i] = await task(items[i]!, abort.signal);
        done++;
        onDone?.(done, items.length);
      } catch (e) {
        if (failure === null) {
          failure = { error: e };
          abort.abort(e);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  if (failure !== null) throw (failure as { error: unknown }).error;
  return results;
}
