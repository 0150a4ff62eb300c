/**
 * Full-order check of ed25519 public keys (docs/spec/design.md §1.7 step 5, `weak_key`).
 *
 * Why: the identity and the other small-order points (and points with a
 * small-order component) let forged signatures verify in lax ed25519
 * implementations, OpenSSL included. The authority key must be a canonical
 * encoding of a point of prime order L. Runs once per chain, so the portable
 * @noble point arithmetic is fast enough everywhere.
 */
import * as ed from '@noble/ed25519';

/** True when `raw` is a canonical 32-byte encoding of a point of order L. */
export function isFullOrderPublicKey(raw: Uint8Array): boolean {
  if (raw.length !== 32) return false;
  let point: ed.Point;
  try {
    point = ed.Point.fromBytes(raw, false);
  } catch {
    return false;
  }
  if (point.is0() || point.isSmallOrder()) return false;
  if (!point.isTorsionFree()) return false;
  // Canonical: re-encoding gives the same bytes (no y >= p, no -0).
  const again = point.toBytes();
  for (let i = 0; i < 32; i++) if (again[i] !== raw[i]) return false;
  return true;
}
