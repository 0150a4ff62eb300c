/**
 * sync-notify: the authority's sync hints to its mirrors (issue 35): after
 * each push that moved the remote's main, `POST <mirror>/v1/sync` with the
 * mirror's bearer token and `{"size": N, "head": "<commit>"}`, so a mirror
 * syncs now (asking for that commit at once) instead of at its next interval
 * (docs/guide/fleet.md).
 *
 * Owns: one request at a time per mirror (a hint made meanwhile is sent once
 * after it, the newest), a 5 s bound per request, counts for the metrics, a
 * log line when a mirror stops (or starts again) answering, not one a hint.
 * Trusts: nothing it is answered; a hint is only a wake-up call (the
 * mirror verifies what it fetches), so a lost hint costs one sync interval.
 * Must hold: `notify` never throws and never waits; tokens are never logged.
 */
import type { Logger } from '../observability/logger.ts';

export interface NotifyTarget {
  url: string;
  token: string;
}

export interface NotifyStats {
  sent: number;
  failed: number;
}

const HINT_TIMEOUT_MS = 5_000;

interface TargetState {
  target: NotifyTarget;
  inflight: boolean;
  pending: { size: number; head: string | null } | null;
  failing: boolean;
}

export class SyncNotifier {
  private readonly targets: TargetState[];
  private sent = 0;
  private failed = 0;
  private closed = false;

  constructor(
    targets: readonly NotifyTarget[],
    private readonly log: Logger,
  ) {
    this.targets = targets.map((target) => ({ target, inflight: false, pending: null, failing: false }));
  }

  /** Tells every mirror the chain now has `size` blocks on the remote, its main at `head` (a commit id). Returns at once. */
  notify(size: number, head: string | null = null): void {
    if (this.closed) return;
    for (const t of this.targets) {
      if (t.inflight) t.pending = { size: Math.max(t.pending?.size ?? 0, size), head };
      else void this.send(t, size, head);
    }
  }

  stats(): NotifyStats {
    return { sent: this.sent, failed: this.failed };
  }

  close(): void {
    this.closed = true;
  }

  private async send(t: TargetState, size: number, head: string | null): Promise<void> {
    t.inflight = true;
    try {
      const r = await fetch(`${t.target.url}/v1/sync`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.target.token}`, 'content-type': 'application/json' },
        body: JSON.stringify(head === null ? { size } : { size, head }),
        signal: AbortSignal.timeout(HINT_TIMEOUT_MS),
      });
      await r.arrayBuffer().catch(() => undefined);
      if (r.status !== 202 && r.status !== 200) throw new Error(`HTTP ${r.status}`);
      this.sent++;
      if (t.failing) {
        t.failing = false;
        this.log.info('sync hint: the mirror answers again', { mirror: t.target.url });
      }
    } catch (e) {
      this.failed++;
      if (!t.failing) {
        t.failing = true;
        this.log.warn('sync hint failed; the mirror syncs at its interval', { mirror: t.target.url, error: (e as Error)?.message ?? String(e) });
      }
    } finally {
      t.inflight = false;
      const next = t.pending;
      t.pending = null;
      if (next !== null && !this.closed) void this.send(t, next.size, next.head);
    }
  }
}
