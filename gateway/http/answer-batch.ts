/**
 * Answers written together at the end of the event loop's I/O phase (a
 * `setImmediate`), in the order they were made: a local client is woken once
 * for several answers and the read and write paths each run as one stretch
 * (bench/RESULTS.md "Lookups at 50k with answers written in batches"). An
 * answer waits at most for the rest of that turn's reads. On by default
 * (`hotPath.batching: false` turns it off; the bench's `unbatched` variant:
 * docs/decisions/gateway-hot-path.md, "Answer batching").
 * Owns: the queue and when it is written.
 * Trusts: `lost` not to throw.
 * Must hold: every item is handed to `write` exactly once, in order, within
 * the turn it was added in; an exception of `write` goes to `failed` for
 * that item, one of `failed` to `lost`, and neither stops the others or
 * escapes the drain.
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
