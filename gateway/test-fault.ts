/**
 * Fault injection for test/hostile/crash-containment.test.ts, TEST-ONLY:
 * `VOUCH_TEST_FAULT=<stage>@<route>` makes the code at `<stage>` throw for
 * every request on the route template `<route>` (`client_error` for
 * node:http's 'clientError'); `uncaught@ready` throws from a timer once
 * ready, outside every request.
 * Owns: reading the variable, once, when the module loads.
 * Must hold: inert unless set at process start (`FAULT` is null and every
 * call site tests it); nothing in a request can set it; an unknown stage or
 * a value without `@` is ignored.
 */

/** Where a fault may be injected (the stages of `vouch_http_unexpected_errors_total` that a request reaches). */
export const FAULT_STAGES = ['handler', 'handler_async', 'body', 'finish', 'close', 'batch', 'log', 'metrics', 'proxy', 'client_error', 'uncaught'] as const;
export type FaultStage = (typeof FAULT_STAGES)[number];

function read(): { stage: FaultStage; route: string } | null {
  const v = process.env.VOUCH_TEST_FAULT;
  if (v === undefined) return null;
  const at = v.indexOf('@');
  const stage = v.slice(0, at) as FaultStage;
  return at > 0 && FAULT_STAGES.includes(stage) ? { stage, route: v.slice(at + 1) } : null;
}

/** The injected fault, or null (always, outside the tests). */
export const FAULT = read();

/** Throws the injected fault when it is `stage`'s on `route` (call only when `FAULT` is not null). */
export function injectFault(stage: FaultStage, route: string): void {
  if (FAULT !== null && FAULT.stage === stage && FAULT.route === route) {
    throw new Error(`injected fault at ${stage} (VOUCH_TEST_FAULT, tests only)`);
  }
}
