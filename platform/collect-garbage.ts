/**
 * Full garbage collections on demand, for the moment after a load that made
 * far more garbage than it keeps (a cold start over a large chain). Memory
 * outside V8's heap (ArrayBuffers: the blocks read, batches handed to and
 * from the verify workers) is given back only by major collections, which
 * an idle process may not run for a long time: a gateway ready after a
 * cold start at 1M blocks held some 270 MB of such garbage (RSS 724 MiB
 * against 480 MiB once collected) until traffic came.
 *
 * Owns: getting V8's gc function without the --expose-gc command-line flag
 * (the flag set at run time, the function taken from a new context, the
 * flag cleared again, as the expose-gc package does); the two collections
 * a turn apart (the first frees dead ArrayBuffers in the background, the
 * second settles their memory).
 * Must hold: never throws; resolves false when no collection could run.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

let gc: (() => void) | null | undefined;

function gcFunction(): (() => void) | null {
  if (gc !== undefined) return gc;
  const exposed = (globalThis as { gc?: unknown }).gc;
  if (typeof exposed === 'function') return (gc = exposed as () => void);
  try {
    setFlagsFromString('--expose-gc');
    const f = runInNewContext('gc') as unknown;
    gc = typeof f === 'function' ? (f as () => void) : null;
  } catch {
    gc = null;
  } finally {
    try { setFlagsFromString('--no-expose-gc'); } catch { /* the flag only names gc in new contexts */ }
  }
  return gc;
}

/** Runs two full collections `gapMs` apart; false when V8's gc function is not to be had. */
export async function collectGarbage(gapMs = 50): Promise<boolean> {
  const f = gcFunction();
  if (f === null) return false;
  try {
    f();
    await new Promise((r) => setTimeout(r, gapMs));
    f();
    return true;
  } catch {
    return false;
  }
}
