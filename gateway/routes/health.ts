/**
 * Health probes: `/healthz` (the process is alive and answering; an
 * authority with witnesses adds `witnesses`: cosignatures held for its
 * committed checkpoint and `quorum` met, unmet or none) and
 * `/readyz` (the chain is loaded and verified: `ready`; a mirror staler
 * than `chain.max_staleness` still answers 200, `degraded`, with `reasons`,
 * unless `chain.unready_when_stale` is set — stale but verified beats down,
 * docs/guide/fleet.md). `/healthz` carries the mirror's sync state and the
 * authority's push state. Both answer JSON with `success`; `/readyz`
 * answers 503 `not_ready` with the same details when not ready, so a load
 * balancer can take the instance out and an operator can see why.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendJson } from '../http/http-util.ts';
import type { GatewayContext } from '../context.ts';

export function handleHealthz(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse): void {
  const body: Record<string, unknown> = { success: true, status: 'alive', uptime_seconds: Math.round((Date.now() - ctx.startedAt) / 1000) };
  // A mirror's sync state, an authority's push state (issue 35): what an operator looks at first.
  const sync = ctx.syncReport?.() ?? null;
  if (sync !== null) body.sync = sync;
  const push = ctx.pushReport?.() ?? null;
  if (push !== null) body.push = push;
  // An authority with witnesses or a policy: the cosignatures of its committed checkpoint, and whether they meet the quorum.
  if (ctx.cosigner) body.witnesses = ctx.cosigner.report();
  sendJson(res, 200, body);
}

export function readiness(ctx: GatewayContext): { ready: boolean; body: Record<string, unknown> } {
  const state = ctx.state;
  const sync = ctx.syncReport?.() ?? null;
  const push = ctx.pushReport?.() ?? null;
  const mode = ctx.submitter ? 'authority' : sync ? 'mirror' : 'read-only';
  const chain =
    state === null
      ? null
      : {
          size: state.size,
          head: state.head.record_hash,
          checkpoint_timestamp: state.checkpoint?.timestamp ?? null,
        };
  let problem: string | null = null;
  let stale: string | null = null;
  if (state === null) problem = 'the chain is not loaded and verified yet';
  else if (sync !== null && (sync.stale_seconds === null || sync.stale_seconds > ctx.config.chain.max_staleness)) {
    stale =
      `the mirror has not synced for ${sync.stale_seconds ?? 'ever'} s (limit ${ctx.config.chain.max_staleness} s)` +
      (sync.last_error ? `: ${sync.last_error.code}: ${sync.last_error.message}` : '');
    // chain.unready_when_stale: out of rotation; by default it keeps serving its verified chain, degraded.
    if (ctx.config.chain.unready_when_stale) problem = stale;
  }
  const details = { mode, chain, sync, push };
  if (problem !== null) return { ready: false, body: { success: false, status: 'not_ready', message: problem, ...details } };
  if (stale !== null) {
    return {
      ready: true,
      body: {
        success: true,
        status: 'degraded',
        reasons: [{ code: 'stale', message: `${stale}; serving the last verified chain (chain.unready_when_stale: false)` }],
        ...details,
      },
    };
  }
  return { ready: true, body: { success: true, status: 'ready', reasons: [], ...details } };
}

export function handleReadyz(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse): void {
  const r = readiness(ctx);
  sendJson(res, r.ready ? 200 : 503, r.body);
}
