/**
 * answer-batch: answers written together at the end of the event loop's
 * I/O phase (a `setImmediate`), in the order they were made, instead of
 * each one as soon as its request was parsed.
 *
 * Why: one turn of the event loop reads every connection that has a
 * request, then the batch writes all their answers back to back. A client
 * on the same host (a reverse proxy, a CI runner, the benchmark's wrk) is
 * woken once for several answers rather than once per answer, and the
 * gateway runs its read path and its write path each as one stretch. On
 * 2 cores with wrk beside it, lookups at 50,000 blocks went from 0.62 to
 * 0.85-0.91 of bare node:http (bench/RESULTS.md, "Lookups at 50k with
 * answers written in batches"); bare node:http batched the same way gains
 * more still (some 41,000/s against 33,000), which RESULTS reports beside
 * it. For remote clients only the second half holds (their wake-ups are
 * not the gateway's to pay). An answer waits at most for the rest of that
 * turn's reads; under light load the batch is one answer and the wait is
 * one `setImmediate`.
 *
 * Owns: the queue and when it is written.
 * Trusts: `lost` not to throw.
 * Must hold: every added item is handed to `write` exactly once, in the
 * order added, within the turn of the event loop it was added in (the
 * `setImmediate` after it); an exception thrown by `write` for one item
 * goes to `failed` for that item, one thrown by `failed` to `lost`, and
 * neither keeps the others from being written nor leaves the drain (it
 * runs from `setImmediate`: an exception there would end the process).
 */
export class AnswerBatch<T> {
  private items: T[] = [];

  constructor(
    private readonly write: (item: T) => void,
    private readonly failed: (item: T, e: unknown) => void,
    private readonly lost: (item: T, e: unknown) => void = () => {},
  ) {}

  /** Queues `item` to be written at the end of this turn's I/O phase. */
  add(item: T): void {
    if (this.items.push(item) === 1) setImmediate(this.drain);
  }

  /** Items waiting to be written (tests). */
  get waiting(): number {
    return this.items.length;
  }

  private readonly drain = (): void => {
    const items = this.items;
    this.items = [];
    for (let i = 0; i < items.length; i++) {
      const item = items[i]!;
      try {
        this.write(item);
      } catch (e) {
        try {
          this.failed(item, e);
        } catch (e2) {
          this.lost(item, e2);
        }
      }
    }
  };
}
