/**
 * The listing rule of docs/spec/index.md 11 (chain/index-listing.ts): the
 * versions a unit's listing must show, redone from its proved events (void
 * blocks left out, revocations in force on the date, a semver live when any
 * of its endorsements is), and the verdict on what a listing shows.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { IndexEvent } from '../../chain/index-tree.ts';
import { expectedListing, judgeListing, parseListingProof } from '../../chain/index-listing.ts';

const e = (block: number, semver: string, date = '2026-01-01'): IndexEvent => ({ kind: 'endorse', block, date, semver });
const r = (block: number, target: number, date = '2026-02-01'): IndexEvent => ({ kind: 'revoke', block, target, date });

test('expectedListing: live and revoked semvers; a future revocation, a re-endorsement and void blocks', () => {
  const events = [e(1, '1.0.0'), e(2, '1.1.0'), e(3, '2.0.0'), r(4, 2), e(5, '1.1.0'), e(6, '3.0.0'), r(7, 3, '2027-01-01'), e(9, '4.0.0'), r(10, 1)];
  // block 5 re-endorses 1.1.0 after its revocation: live; 2.0.0's revocation is not in force yet; block 9 is void, so is revoke 10
  assert.equal(expectedListing(events, [[9, 10]], '2026-06-01'), { live: ['1.0.0', '1.1.0', '2.0.0', '3.0.0'], revoked: [] });
  assert.equal(expectedListing(events, [], '2026-06-01'), { live: ['1.1.0', '2.0.0', '3.0.0', '4.0.0'], revoked: ['1.0.0'] });
  assert.equal(expectedListing(events, [], '2027-06-01'), { live: ['1.1.0', '3.0.0', '4.0.0'], revoked: ['1.0.0', '2.0.0'] });
  assert.equal(expectedListing([], [], '2026-06-01'), { live: [], revoked: [] });
});

test('judgeListing: missing, added (deny only), a revoked version shown (marked or not)', () => {
  const exp = { live: ['1.0.0', '2.0.0'], revoked: ['1.1.0'] };
  const s = (semver: string, endorsed = true) => ({ semver, endorsed });
  assert.ok(judgeListing(exp, [s('1.0.0'), s('2.0.0')], 'deny').ok);
  assert.equal(judgeListing(exp, [s('1.0.0')], 'deny').missing, ['2.0.0']);
  assert.equal(judgeListing(exp, [s('1.0.0'), s('2.0.0', false)], 'pass').missing, ['2.0.0'], 'shown but marked unendorsed');
  assert.equal(judgeListing(exp, [s('1.0.0'), s('2.0.0'), s('9.0.0')], 'deny').added, ['9.0.0']);
  assert.ok(judgeListing(exp, [s('1.0.0'), s('2.0.0'), s('9.0.0', false)], 'pass').ok);
  assert.ok(judgeListing(exp, [s('1.0.0'), s('2.0.0'), s('9.0.0')], 'pass').ok);
  assert.equal(judgeListing(exp, [s('1.0.0'), s('2.0.0'), s('1.1.0', false)], 'pass').revokedShown, ['1.1.0']);
  assert.not.ok(judgeListing(exp, [s('1.0.0'), s('2.0.0'), s('1.1.0')], 'deny').ok);
});

test('parseListingProof: the side route answer, or a reason', () => {
  const good = { success: true, kind: 'unit', name: 'npm/x', size: 7, index_proof: 'AQ==', checkpoint: 'n' };
  assert.equal(parseListingProof(good), { kind: 'unit', name: 'npm/x', size: 7, proof: 'AQ==', checkpoint: 'n' });
  for (const bad of [
    null,
    [],
    'x',
    { ...good, kind: 'other' },
    { ...good, size: -1 },
    { ...good, size: 1.5 },
    { ...good, index_proof: 3 },
    { ...good, checkpoint: undefined },
  ]) {
    assert.type(parseListingProof(bad), 'string', JSON.stringify(bad));
  }
});

test.run();
