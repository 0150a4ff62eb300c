/**
 * Backpressure on a writable that may go away: wait for its 'drain' or its
 * 'close', whichever comes first (`once(w, 'drain')` would wait forever on a
 * socket that closed instead).
 * Must hold: both listeners are removed whichever event came.
 */
import type { EventEmitter } from 'node:events';

/** Resolves at `w`'s next 'drain' or 'close'. */
export function drainedOrClosed(w: EventEmitter): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      w.off('drain', done);
      w.off('close', done);
      resolve();
    };
    w.on('drain', done);
    w.on('close', done);
  });
}
