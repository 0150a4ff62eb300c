/**
 * `vouch check-listing` follows the log's key events (issue 32 item 6 for
 * the issue 37 client): pinned to block 0's key, it checks a listing whose
 * note is signed by a rotated online key alone (no rollover) after one walk
 * of /v1/keys, keeps the walked keys in its --state file, and still refuses
 * a note no key of the log signed.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { base64Encode } from '../../chain/encoding.ts';
import { applyKeyEvent, initialKeyState, keyStatement, rootStatement, signStatement, type KeyState, type Statement } from '../../chain/key-events.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { vouchAsync } from '../helpers/processes.ts';
import { b64, HOLDERS, seededKey } from '../helpers/key-fixture.ts';
import { ListingFixture } from '../helpers/listing-fixture.ts';

let f: ListingFixture;
let ks: KeyState;

test.before(async () => {
  f = await ListingFixture.start({ rollover_days: 0 });
  await f.endorse(['1.0.0']);
  const block0 = (await (await fetch(`${f.gw.url}/v1/block?index=0`)).json()) as { record_hash: string };
  ks = initialKeyState(block0.record_hash, 'test-authority', f.pub);
});

test.after(async () => {
  await f?.close();
});

/** A statement signed by the first two holders, applied through the running authority. */
async function apply(statement: Statement): Promise<void> {
  let signed = { statement, signatures: [] as { public_key: string; signature: string }[] };
  for (const h of HOLDERS.slice(0, 2)) signed = signStatement(signed, h);
  const r = await fetch(`${f.gw.url}/v1/root`, {
    method: 'POST',
    headers: { authorization: `Bearer ${f.token}`, 'content-type': 'application/json' },
    body: JSON.stringify(signed),
  });
  const json = (await r.json()) as { index: number };
  assert.is(r.status, 201, JSON.stringify(json));
  ks = applyKeyEvent(nodeBackend, ks, signed, json.index);
}

const checkListing = (args: string[]) =>
  vouchAsync(
    ['check-listing', '--public-key', f.pub, '--timeout', '30', '--ecosystem', 'npm', '--package', 'leftpad', '--url', `${f.gw.url}/npm/leftpad`, ...args],
    {},
    90_000,
  );

test('pinned to block 0 key: a listing whose note the rotated key alone signs is checked after one /v1/keys walk; the walk is kept in --state', async () => {
  const state = join(f.work, 'listing-state.json');
  const before = await checkListing(['--state', state]);
  assert.is(before.status, 0, before.stderr);

  await apply(rootStatement(ks, { threshold: 2, keys: HOLDERS.slice(0, 3).map(b64) }));
  const next = seededKey('listing-rotated');
  writeFileSync(join(f.work, 'authority.pem.next'), next.export({ format: 'pem', type: 'pkcs8' }) as string, { mode: 0o600 });
  const nextPub = base64Encode(nodeSigner('test-authority', next).publicKey);
  await apply(keyStatement(ks, { signer: 'test-authority', public_key: nextPub }));
  await f.endorse(['2.0.0']);
  const note = await (await fetch(`${f.gw.url}/checkpoint`)).text();
  assert.is(note.split('\n').filter((l) => l.startsWith('— ')).length, 1, `one signature (no rollover):\n${note}`);

  const fresh = await checkListing([]);
  assert.is(fresh.status, 0, fresh.stderr);
  assert.match(fresh.stdout, /listing ok: leftpad shows exactly the 2 version\(s\)/);

  const after = await checkListing(['--state', state]);
  assert.is(after.status, 0, after.stderr);
  const kept = JSON.parse(readFileSync(state, 'utf8')) as { logs: Record<string, { size: number; keys?: { trail?: unknown } }> };
  const entry = Object.values(kept.logs)[0]!;
  assert.ok(entry.keys?.trail, `the walked keys are kept: ${JSON.stringify(entry)}`);

  // Pinned to a key the log never had: no walk helps, the refusal stands.
  const stranger = base64Encode(nodeSigner('x', seededKey('a stranger')).publicKey);
  const wrong = await vouchAsync(
    ['check-listing', '--public-key', stranger, '--timeout', '30', '--ecosystem', 'npm', '--package', 'leftpad', '--url', `${f.gw.url}/npm/leftpad`],
    {},
    90_000,
  );
  assert.is(wrong.status, 1);
  assert.match(wrong.stderr, /bad_checkpoint/);
});

test.run();
