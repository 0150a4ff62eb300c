/**
 * A hostile gateway answering package listings from an OLDER state of the
 * same log (issue 37 item 7): a relay in front of a real authority gateway
 * that replays the npm packument (both forms), the PyPI page (HTML and
 * JSON) and the Go @v/list it recorded before a revocation or a newer
 * version was logged. With the current note and the current (real) unit
 * proof, `vouch check-listing` names the hidden revocation or the missing
 * version; without a proof, `no_proof`; with the older proof, `bad_proof`;
 * a whole older state (older note and proof) is caught with --state.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { vouchAsync } from '../helpers/processes.ts';
import { LATEST, ListingFixture, LISTINGS } from '../helpers/listing-fixture.ts';

interface Recorded {
  headers: Record<string, string>;
  body: Buffer;
}
type Mode = 'current' | 'link' | 'none' | 'older-proof' | 'recorded';

let f: ListingFixture;
let hostile: Server;
let H = '';
const HOP = ['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'date', 'content-encoding'];
/** Listing answers replayed, by path and Accept; and how their proof headers are edited. */
let replay = new Map<string, Recorded>();
let mode: Mode = 'current';

async function grab(base: string, path: string, accept: string): Promise<Recorded> {
  const r = await fetch(base + path, { headers: { accept } });
  assert.is(r.status, 200, `${path} ${accept}`);
  const headers: Record<string, string> = {};
  r.headers.forEach((v, k) => {
    if (!HOP.includes(k)) headers[k] = v;
  });
  return { headers, body: Buffer.from(await r.arrayBuffer()) };
}

async function recordAll(): Promise<Map<string, Recorded>> {
  const m = new Map<string, Recorded>();
  for (const l of [...LISTINGS, LATEST]) m.set(`${l.path}\n${l.accept}`, await grab(f.gw.url, l.path, l.accept));
  return m;
}

const isProofHeader = (k: string) => k.startsWith('vouch-index-');

async function answer(path: string, accept: string, old: Recorded): Promise<Recorded> {
  const keep = Object.fromEntries(Object.entries(old.headers).filter(([k]) => !isProofHeader(k)));
  if (mode === 'none') return { headers: keep, body: old.body };
  if (mode === 'recorded') return old;
  const now = await grab(f.gw.url, path, accept);
  const proofs = Object.fromEntries(Object.entries(now.headers).filter(([k]) => isProofHeader(k)));
  if (mode === 'older-proof') proofs['vouch-index-proof'] = old.headers['vouch-index-proof']!;
  if (mode === 'link') {
    // as for a proof too long for a header: only the side route's path
    delete proofs['vouch-index-proof'];
    delete proofs['vouch-index-checkpoint'];
  }
  return { headers: { ...keep, ...proofs }, body: old.body };
}

async function startHostile(): Promise<void> {
  hostile = createServer((req, res) => {
    (async () => {
      const path = req.url ?? '/';
      const accept = req.headers.accept ?? '';
      const old = replay.get(`${path}\n${accept}`);
      const a = old === undefined ? await grab(f.gw.url, path, accept).catch(() => null) : await answer(path, accept, old);
      if (a === null) {
        // not a listing: relayed as it is (the side route, proofs, checkpoints)
        const r = await fetch(f.gw.url + path, { headers: { accept } });
        const headers: Record<string, string> = {};
        r.headers.forEach((v, k) => {
          if (!HOP.includes(k)) headers[k] = v;
        });
        res.writeHead(r.status, headers);
        res.end(Buffer.from(await r.arrayBuffer()));
        return;
      }
      res.writeHead(200, a.headers);
      res.end(a.body);
    })().catch(() => res.destroy());
  });
  await new Promise<void>((ok) => hostile.listen(0, '127.0.0.1', ok));
  H = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
}

let beforeRevoke: Map<string, Recorded>;
let beforeNewest: Map<string, Recorded>;

test.before(async () => {
  f = await ListingFixture.start();
  await f.endorse(['1.0.0', '1.1.0']);
  beforeRevoke = await recordAll();
  await f.revoke('1.1.0');
  beforeNewest = await recordAll();
  await f.endorse(['2.0.0']);
  await startHostile();
});

test.after(async () => {
  hostile?.close();
  await f?.close();
});

let n = 0;
function checkListing(l: (typeof LISTINGS)[number] | typeof LATEST, more: string[] = []) {
  return vouchAsync(
    ['check-listing', '--public-key', f.pub, '--ecosystem', l.eco, '--package', l.pkg, '--url', H + l.path, '--form', l.form, '--timeout', '30', ...more],
    {},
    90_000,
  );
}

test('control: through the relay untouched, every listing checks', async () => {
  replay = new Map();
  for (const l of LISTINGS) {
    const r = await checkListing(l);
    assert.is(r.status, 0, `${l.path} ${l.form}: ${r.stderr}`);
  }
});

test('an older listing still showing a revoked version, with the current note and real proof: "hidden revocation"', async () => {
  replay = beforeRevoke;
  mode = 'current';
  for (const l of LISTINGS) {
    const r = await checkListing(l);
    assert.is(r.status, 1, `${l.path} ${l.form}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, /^index_mismatch: hidden revocation: the listing of .* shows 1\.1\.0, revoked in the log's index at size \d+\n$/, l.path);
  }
});

test('an older listing without the newest version: "missing version"', async () => {
  replay = beforeNewest;
  mode = 'current';
  for (const l of LISTINGS) {
    const r = await checkListing(l);
    assert.is(r.status, 1, `${l.path} ${l.form}: ${r.stdout}${r.stderr}`);
    const newest = l.eco === 'go' ? '1\\.2\\.0' : '2\\.0\\.0';
    assert.match(r.stderr, new RegExp(`^index_mismatch: missing version: the listing of .* leaves out ${newest}, endorsed and not revoked`), l.path);
  }
});

test('a proof only by the side route (Vouch-Index-Proof-Url): the current listing checks, the older one is "missing version"', async () => {
  mode = 'link';
  for (const [replayed, ok] of [
    [await recordAll(), true],
    [beforeNewest, false],
  ] as const) {
    replay = replayed;
    for (const l of LISTINGS.filter((x) => x.form !== 'full' && x.form !== 'html')) {
      const r = await checkListing(l);
      assert.is(r.status, ok ? 0 : 1, `${l.path} ${l.form}: ${r.stdout}${r.stderr}`);
      if (!ok) assert.match(r.stderr, /^index_mismatch: missing version: /);
    }
  }
});

test('Go @latest replayed from older states: "hidden revocation" (v1.1.0, revoked since), "older version" (v1.0.0)', async () => {
  mode = 'current';
  replay = beforeRevoke;
  let r = await checkListing(LATEST);
  assert.is(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /^index_mismatch: hidden revocation: @latest of example\.com\/demo names v1\.1\.0, the log's index at size \d+ makes it v1\.2\.0\n$/);
  replay = beforeNewest;
  r = await checkListing(LATEST);
  assert.is(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /^index_mismatch: older version: @latest of example\.com\/demo names v1\.0\.0, the log's index at size \d+ makes it v1\.2\.0\n$/);
  replay = new Map();
  r = await checkListing(LATEST);
  assert.is(r.status, 0, r.stderr);
});

test("the older listing without a proof: no_proof; with the older state's proof under the current note: bad_proof", async () => {
  replay = beforeNewest;
  for (const l of LISTINGS) {
    mode = 'none';
    let r = await checkListing(l);
    assert.is(r.status, 1, r.stderr);
    assert.match(r.stderr, /^no_proof: .* carries no completeness proof/);
    mode = 'older-proof';
    r = await checkListing(l);
    assert.is(r.status, 1, r.stderr);
    assert.match(r.stderr, /^bad_proof: index proof is for log size \d+, the checkpoint is \d+/);
  }
});

test('a whole older state (its note and proof): consistent in itself, refused once a newer checkpoint was seen (--state)', async () => {
  replay = beforeNewest;
  mode = 'recorded';
  for (const l of LISTINGS) {
    const state = join(f.work, `state-${++n}.json`);
    replay = new Map();
    const honest = await checkListing(l, ['--state', state]);
    assert.is(honest.status, 0, honest.stderr);
    replay = beforeNewest;
    const r = await checkListing(l, ['--state', state]);
    assert.is(r.status, 1, r.stderr);
    assert.match(r.stderr, /^stale_checkpoint: .* answered with a checkpoint of size \d+, older than the size \d+ already seen/);
  }
});

test.run();
