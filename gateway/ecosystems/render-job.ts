/**
 * A metadata rendering split where it can leave the event loop: the part
 * that reads the origin's body (decode, structure caps, parse: chain-
 * independent, `prepareJob`) and the part that rewrites it against the
 * chain and writes it back (`finishJob`), which asks the chain only about
 * the URLs `urlsOf` lists. The render worker (render-worker.ts) runs both
 * with the main thread's answers for those URLs (`decide`, `viewOf`);
 * without a worker, `renderJob` runs them here.
 *
 * Owns: the job and decision shapes between the threads.
 * Trusts: the ecosystem modules' prepare / finish functions.
 * Must hold: a rendering from decisions is the rendering from the view the
 * decisions were made with (every question the rewrite asks is one of
 * `urlsOf`'s URLs, or the artifact URL the decision names for it).
 */
import type { Selection } from '../../chain/select.ts';
import type { IndexPage } from '../../artifacts/pypi-simple.ts';
import type { Rendered, RenderJob, RenderView } from './ecosystem.ts';
import { finishPackument, preparePackument, tarballsOf } from './npm.ts';
import { finishPage, linksOf, preparePage } from './pypi.ts';

export type { RenderJob };
export type Parsed = { kind: 'npm'; doc: unknown } | { kind: 'pypi'; page: IndexPage };

/** What the main thread answers for one URL a rendering asks about. */
export interface Decision {
  artifactUrl: string | null;
  gatewayUrl: string | null;
  tail: string | null;
  endorsed: { semver: string; artifact_hash: string } | null;
  /** What the URL selects is revoked (RenderView.revoked). */
  revoked: boolean;
}

/** The body read under the job's caps, or its refusal. */
export function prepareJob(job: RenderJob, body: Uint8Array, log: RenderView['log']): Parsed | Rendered {
  if (job.kind === 'npm') {
    const p = preparePackument(body, job, log);
    return 'ok' in p ? p : { kind: 'npm', doc: p.doc };
  }
  const p = preparePage(body, job, log);
  return 'ok' in p ? p : { kind: 'pypi', page: p.page };
}

/** The URLs the rewrite of `p` asks the chain about. */
export function urlsOf(p: Parsed): string[] {
  return p.kind === 'npm' ? tarballsOf(p.doc) : linksOf(p.page);
}

export function finishJob(job: RenderJob, p: Parsed, view: RenderView): Rendered {
  if (job.kind === 'npm' && p.kind === 'npm') return finishPackument(p.doc, job, view);
  if (job.kind === 'pypi' && p.kind === 'pypi') return finishPage(p.page, job, view);
  throw new TypeError('render job: a job and a parsed body of different kinds');
}

/** The whole rendering on this thread. */
export function renderJob(job: RenderJob, body: Uint8Array, view: RenderView): Rendered {
  const p = prepareJob(job, body, view.log);
  return 'ok' in p ? p : finishJob(job, p, view);
}

/** The main thread's answers for `urls` (each once). */
export function decide(urls: readonly string[], view: RenderView): Array<[string, Decision]> {
  const out = new Map<string, Decision>();
  for (const u of urls) {
    if (out.has(u)) continue;
    const artifactUrl = view.artifactUrlOf(u);
    const sel = artifactUrl === null ? null : view.endorsed(artifactUrl);
    out.set(u, {
      artifactUrl,
      gatewayUrl: artifactUrl === null ? null : view.gatewayUrlOf(artifactUrl),
      tail: artifactUrl === null ? null : view.artifactTailOf(artifactUrl),
      endorsed: sel === null ? null : { semver: sel.entry.semver, artifact_hash: sel.entry.artifact_hash },
      revoked: artifactUrl !== null && view.revoked?.(artifactUrl) === true,
    });
  }
  return [...out];
}

/** A view that answers from decisions (in the worker). */
export function viewOf(decisions: ReadonlyArray<[string, Decision]>, unendorsed: 'deny' | 'pass', log: RenderView['log']): RenderView {
  const byUrl = new Map(decisions);
  const byArtifact = new Map<string, Decision>();
  for (const [, d] of decisions) if (d.artifactUrl !== null) byArtifact.set(d.artifactUrl, d);
  return {
    unendorsed,
    log,
    artifactUrlOf: (u) => byUrl.get(u)?.artifactUrl ?? null,
    gatewayUrlOf: (a) => byArtifact.get(a)?.gatewayUrl ?? null,
    artifactTailOf: (a) => byArtifact.get(a)?.tail ?? null,
    revoked: (a) => byArtifact.get(a)?.revoked ?? false,
    endorsed: (a) => {
      const e = byArtifact.get(a)?.endorsed ?? null;
      return e === null ? null : ({ entry: { semver: e.semver, artifact_hash: e.artifact_hash } } as Selection);
    },
    originUrl: () => {
      throw new TypeError('render job: originUrl is not available off the main thread');
    },
  };
}
