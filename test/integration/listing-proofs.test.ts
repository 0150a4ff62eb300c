/**
 * Listings carry their unit's completeness proof (issue 37 item 3,
 * docs/spec/index.md 11): the npm packument (both forms), the PyPI page
 * (HTML and JSON), the Go @v/list and @latest of a real gateway carry
 * Vouch-Index-* headers whose proof checks against the served note, and
 * show exactly the live versions; `vouch check-listing` (item 4) accepts
 * them by URL and from files, and the side route answers the same proof.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { verifyIndexProof } from '../../chain/index-proof.ts';
import { expectedListing, judgeListing, LISTING_HEADER } from '../../chain/index-listing.ts';
import { indexRootOfNote } from '../../tools/client/index-check.ts';
import { listingUnit, shownVersions } from '../../tools/listing-read.ts';
import { vouchAsync } from '../helpers/processes.ts';
import { GO_MODULE, LATEST, ListingFixture, LISTINGS } from '../helpers/listing-fixture.ts';

let f: ListingFixture;

test.before(async () => {
  f = await ListingFixture.start();
  await f.endorse(['1.0.0', '1.1.0']);
  await f.revoke('1.1.0');
  await f.endorse(['2.0.0']);
});

test.after(async () => {
  await f?.close();
});

const today = () => new Date().toISOString().slice(0, 10);

test('every listing carries its unit proof against the served note, and shows exactly the live versions', async () => {
  for (const l of LISTINGS) {
    const r = await fetch(f.gw.url + l.path, { headers: { accept: l.accept } });
    assert.is(r.status, 200, `${l.path} ${l.form}`);
    const unit = listingUnit(l.eco, l.pkg);
    assert.ok(unit.ok);
    if (!unit.ok) continue;
    assert.is(r.headers.get(LISTING_HEADER.unit), unit.value);
    assert.is(r.headers.get(LISTING_HEADER.proofUrl), `/v1/index/proof?unit=${encodeURIComponent(unit.value)}`);
    const note = Buffer.from(r.headers.get(LISTING_HEADER.checkpoint) ?? '', 'base64').toString('utf8');
    const size = Number(note.split('\n')[1]);
    assert.is(r.headers.get(LISTING_HEADER.size), String(size));
    const root = indexRootOfNote(note);
    assert.ok(root, 'the note commits an index');
    const v = verifyIndexProof(nodeBackend, Buffer.from(r.headers.get(LISTING_HEADER.proof) ?? '', 'base64'), 'unit', unit.value, { root: root!, size });
    assert.ok(v.ok, v.ok ? '' : v.reason);
    if (!v.ok) continue;
    const exp = expectedListing(v.value.events, v.value.voids, today());
    assert.equal(exp, { live: ['1.0.0', l.eco === 'go' ? '1.2.0' : '2.0.0'], revoked: ['1.1.0'] }, l.path);
    const shown = shownVersions(l.eco, l.pkg, new Uint8Array(await r.arrayBuffer()), r.headers.get('content-type'));
    assert.ok(judgeListing(exp, shown.shown, 'deny').ok, `${l.path} ${l.form}: ${JSON.stringify(shown)}`);
  }
});

test('Go @latest carries the proof of the state its pick was made from; the side route answers the same proof as JSON', async () => {
  const r = await fetch(`${f.gw.url}/go/${GO_MODULE}/@latest`);
  assert.is(r.status, 200);
  assert.is(((await r.json()) as { Version: string }).Version, 'v1.2.0');
  assert.is(r.headers.get(LISTING_HEADER.unit), 'go/example.com+demo');
  const inline = r.headers.get(LISTING_HEADER.proof);
  assert.ok(inline);
  const side = (await (await fetch(`${f.gw.url}${r.headers.get(LISTING_HEADER.proofUrl)}`)).json()) as Record<string, unknown>;
  assert.is(side.kind, 'unit');
  assert.is(side.name, 'go/example.com+demo');
  assert.is(side.index_proof, inline);
  assert.is(String(side.size), r.headers.get(LISTING_HEADER.size));
  // a unit no block names: its absence proof; bad parameters: 400
  const none = (await (await fetch(`${f.gw.url}/v1/index/proof?unit=npm/never`)).json()) as { index_proof: string; checkpoint: string; size: number };
  const v = verifyIndexProof(nodeBackend, Buffer.from(none.index_proof, 'base64'), 'unit', 'npm/never', {
    root: indexRootOfNote(none.checkpoint)!,
    size: none.size,
  });
  assert.ok(v.ok && !v.value.present);
  for (const q of ['', '?unit=a/b&url=https://x.test/a', '?unit=nope', '?what=1']) assert.is((await fetch(`${f.gw.url}/v1/index/proof${q}`)).status, 400, q);
});

let n = 0;
async function checkListing(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return vouchAsync(['check-listing', '--public-key', f.pub, '--timeout', '30', ...args], {}, 90_000);
}

test('vouch check-listing accepts each listing of the honest gateway (by URL, every form), and from files', async () => {
  for (const l of LISTINGS) {
    const r = await checkListing(['--ecosystem', l.eco, '--package', l.pkg, '--url', f.gw.url + l.path, '--form', l.form]);
    assert.is(r.status, 0, `${l.path} ${l.form}: ${r.stderr}`);
    assert.match(r.stdout, /^listing ok: .* exactly the 2 version\(s\) .* proves for .*; revoked, not shown: 1\.1\.0/);
  }
  const latest = await checkListing(['--ecosystem', 'go', '--package', GO_MODULE, '--url', f.gw.url + LATEST.path]);
  assert.is(latest.status, 0, latest.stderr);
  assert.match(latest.stdout, /^listing ok: @latest of example\.com\/demo is v1\.2\.0, the latest of the 2 live version\(s\)/);
  const page = await fetch(`${f.gw.url}/pypi/simple/demo/`, { headers: { accept: 'application/vnd.pypi.simple.v1+html' } });
  const listing = join(f.work, `page-${++n}.html`);
  writeFileSync(listing, Buffer.from(await page.arrayBuffer()));
  const proofFile = join(f.work, `proof-${n}.json`);
  writeFileSync(proofFile, await (await fetch(`${f.gw.url}/v1/index/proof?unit=pypi/demo`)).text());
  const r = await checkListing(['--ecosystem', 'pypi', '--package', 'demo', '--file', listing, '--proof-file', proofFile, '--json']);
  assert.is(r.status, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout).versions, ['1.0.0', '2.0.0']);
  // usage: exit 2, one line
  const u = await checkListing(['--ecosystem', 'maven', '--package', 'x', '--url', f.gw.url]);
  assert.is(u.status, 2);
  assert.match(u.stderr, /^vouch check-listing: --ecosystem must be npm, pypi or go\n$/);
  const h = await vouchAsync(['check-listing', '--help']);
  assert.is(h.status, 0);
  assert.match(h.stdout, /usage: vouch check-listing/);
});

test.run();
