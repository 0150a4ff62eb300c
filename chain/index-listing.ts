/**
 * Listings against the completeness index (docs/spec/index.md 11): which
 * versions an npm packument, a PyPI simple page or a Go `@v/list` must show
 * for a unit, redone from the unit's proved events, and the verdict on the
 * versions a listing shows (none missing, none added, revocations honoured).
 *
 * Owns: the listing headers' names, `expectedListing`, `judgeListing`,
 * `parseListingProof` (the side route's JSON answer).
 * Trusts: the caller to have checked the unit's proof (`verifyIndexProof`).
 * Must hold: pure (runs in a browser); the verdict depends only on the
 * events, the void list, the date and the semvers the listing shows.
 */
import type { IndexEvent } from './index-tree.ts';
import { unitVersions } from './index-proof.ts';

/** Response headers of a listing answer (lower case, as Node and fetch give them). */
export const LISTING_HEADER = {
  /** The unit whose key the proof is for (`npm/leftpad`, `pypi/x`, `go/example.com+m`). */
  unit: 'vouch-index-unit',
  /** The log size the listing was built from (the served checkpoint's). */
  size: 'vouch-index-size',
  /** Base64 of the unit's index proof (docs/spec/index.md 6), when it fits. */
  proof: 'vouch-index-proof',
  /** Base64 of the signed checkpoint note (UTF-8) the proof is against, sent with the proof. */
  checkpoint: 'vouch-index-checkpoint',
  /** The gateway path of the side route that answers the same proof as JSON (always sent). */
  proofUrl: 'vouch-index-proof-url',
} as const;

/** What a listing of a unit must show, as of `today`. */
export interface ListingExpectation {
  /** Semvers with an endorsement not void and not revoked in force: each must be shown as endorsed. */
  live: string[];
  /** Semvers whose every non-void endorsement is revoked in force: none may be shown. */
  revoked: string[];
}

/** The expectation from a unit's proved events (docs/spec/index.md 11, steps 1-2). */
export function expectedListing(events: readonly IndexEvent[], voids: readonly (readonly [number, number])[], today: string): ListingExpectation {
  const live = new Set<string>();
  const seen = new Set<string>();
  for (const v of unitVersions(events, voids, today)) {
    seen.add(v.semver);
    if (v.revokedBy === null) live.add(v.semver);
  }
  return { live: [...live].sort(), revoked: [...seen].filter((s) => !live.has(s)).sort() };
}

/** One version a listing shows: its semver in the chain's spelling, and whether it is offered as endorsed (npm marks unendorsed ones on pass routes). */
export interface ShownVersion {
  semver: string;
  endorsed: boolean;
}

export interface ListingVerdict {
  ok: boolean;
  /** Live semvers not shown as endorsed. */
  missing: string[];
  /** Semvers shown as endorsed that are not live (counted on deny routes only). */
  added: string[];
  /** Revoked semvers shown (endorsed or marked). */
  revokedShown: string[];
}

/**
 * The verdict on a listing (docs/spec/index.md 11, step 3): `unendorsed`
 * is the route's policy as the client knows it; on a `pass` route versions
 * the log does not endorse may be shown, never a revoked one.
 */
export function judgeListing(exp: ListingExpectation, shown: readonly ShownVersion[], unendorsed: 'deny' | 'pass'): ListingVerdict {
  const endorsed = new Set(shown.filter((s) => s.endorsed).map((s) => s.semver));
  const all = new Set(shown.map((s) => s.semver));
  const live = new Set(exp.live);
  const missing = exp.live.filter((s) => !endorsed.has(s));
  const added = unendorsed === 'deny' ? [...endorsed].filter((s) => !live.has(s)).sort() : [];
  const revokedShown = exp.revoked.filter((s) => all.has(s));
  return { ok: missing.length === 0 && added.length === 0 && revokedShown.length === 0, missing, added, revokedShown };
}

/** The side route's answer (`GET /v1/index/proof?unit=NAME`), its members checked for form only. */
export interface ListingProof {
  kind: 'unit' | 'url';
  name: string;
  size: number;
  /** Base64 proof. */
  proof: string;
  /** The signed checkpoint note. */
  checkpoint: string;
}

/** Longest side-route answer member accepted (a proof of a unit with tens of thousands of versions stays below). */
const MAX_MEMBER = 8 * 1024 * 1024;

/** Reads a side-route answer; a reason string when it is not one. */
export function parseListingProof(value: unknown): ListingProof | string {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'not a JSON object';
  const o = value as Record<string, unknown>;
  if (o.kind !== 'unit' && o.kind !== 'url') return '"kind" is not "unit" or "url"';
  for (const k of ['name', 'index_proof', 'checkpoint']) {
    if (typeof o[k] !== 'string' || (o[k] as string).length > MAX_MEMBER) return `"${k}" is not a string of at most ${MAX_MEMBER} characters`;
  }
  if (typeof o.size !== 'number' || !Number.isSafeInteger(o.size) || o.size < 0) return '"size" is not a non-negative integer';
  return { kind: o.kind, name: o.name as string, size: o.size, proof: o.index_proof as string, checkpoint: o.checkpoint as string };
}
