/**
 * Full garbage collections on demand, after a load that made far more
 * garbage than it keeps (a cold start over a large chain): memory outside
 * V8's heap (ArrayBuffers) is given back only by major collections, which
 * an idle process may not run for a long time (bench/RESULTS.md "A million
 * blocks", the cold-start RSS rows).
 * Owns: getting V8's gc function without --expose-gc (flag set at run time,
 * function taken from a new context, flag cleared), and two collections a
 * turn apart.
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
    try {
      setFlagsFromString('--no-expose-gc');
    } catch {
      /* the flag only names gc in new contexts */
    }
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
