/**
 * Health probes: `/healthz` (the process is alive and answering; an
 * authority with witnesses adds `witnesses`: cosignatures held for its
 * committed checkpoint and `quorum` met, unmet or none) and
 * `/readyz` (the chain is loaded and verified, and — for a mirror — not
 * staler than `chain.max_staleness`). Both answer JSON with `success`;
 * `/readyz` answers 503 `not_ready` with the same details when not ready, so
 * a load balancer can take the instance out and an operator can see why.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendJson } from '../http-util.ts';
import type { GatewayContext } from '../context.ts';

export function handleHealthz(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse): void {
  const body: Record<string, unknown> = { success: true, status: 'alive', uptime_seconds: Math.round((Date.now() - ctx.startedAt) / 1000) };
  // An authority with witnesses or a policy: the cosignatures of its committed checkpoint, and whether they meet the quorum.
  if (ctx.cosigner) body.witnesses = ctx.cosigner.report();
  sendJson(res, 200, body);
}

export function readiness(ctx: GatewayContext): { ready: boolean; body: Record<string, unknown> } {
  const state = ctx.state;
  const sync = ctx.syncReport?.() ?? null;
  const push = ctx.pushReport?.() ?? null;
  const mode = ctx.submitter ? 'authority' : sync ? 'mirror' : 'read-only';
  const chain = state === null ? null : {
    size: state.size,
    head: state.head.record_hash,
    checkpoint_timestamp: state.checkpoint?.timestamp ?? null,
  };
  let problem: string | null = null;
  if (state === null) problem = 'the chain is not loaded and verified yet';
  else if (sync !== null && (sync.stale_seconds === null || sync.stale_seconds > ctx.config.chain.max_staleness)) {
    problem = `the mirror has not synced for ${sync.stale_seconds ?? 'ever'} s (limit ${ctx.config.chain.max_staleness} s)` +
      (sync.last_error ? `: ${sync.last_error.code}: ${sync.last_error.message}` : '');
  }
  const details = { mode, chain, sync, push };
  return problem === null
    ? { ready: true, body: { success: true, status: 'ready', ...details } }
    : { ready: false, body: { success: false, status: 'not_ready', message: problem, ...details } };
}

export function handleReadyz(ctx: GatewayContext, _req: IncomingMessage, res: ServerResponse): void {
  const r = readiness(ctx);
  sendJson(res, r.ready ? 200 : 503, r.body);
}
