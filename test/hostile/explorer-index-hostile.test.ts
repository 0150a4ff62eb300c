/**
 * The explorer checks the completeness index in the browser (issue 37 items
 * 4 and 7), in a real headless Chromium: a URL's version history through the
 * real gateway is "index proof valid"; through a hostile relay answering
 * from an OLDER state of the same log (the history recorded before a newer
 * block, a revocation stripped, a false 404, the older state's index proof
 * under the current note) it is "index proof INVALID" with the reason. A
 * unit's versions are listed from its index proof only when it verifies.
 * Chromium missing is a failure, never a silent skip (.ci/run installs it).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { CHROMIUM, launchChromium } from '../helpers/chromium.ts';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-explorer-index-'));
const token = `explorer-index-${'x'.repeat(30)}`;
let gw: GatewayProcess;
let origin: OriginServer;
let browser: Browser;
let page: Page;
let hostile: Server;
let H = '';
const HOP = ['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'date', 'content-encoding'];

/** How the relay answers a request (path with query): null relays it as it is. */
let edit: (path: string) => Promise<{ status: number; json: unknown } | null> = async () => null;

const U = () => origin.url('/widget.js');
let olderVersions: unknown;
let olderLookup: { index_proof: string };
let olderUnit: { index_proof: string };

async function json(path: string): Promise<unknown> {
  return (await fetch(gw.url + path, { headers: { accept: 'application/json' } })).json();
}

test.before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)`);
  createKeyFile(join(work, 'authority.pem'));
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  origin = await OriginServer.start();
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: join(work, 'chain'), origin: 'log.explorer-index.test' },
      authority: { key_file: join(work, 'authority.pem'), signer: 'explorer-index', submit_token_file: join(work, 'submit.token') },
      origin: { allow_private: true },
    }),
  ]);
  origin.route('/widget.js', { body: 'widget 1\n' });
  await submitEntry(gw.url, token, { url: U(), name: 'acme/widget', semver: '1.0.0', license: 'MIT' }); // block 1
  const q = encodeURIComponent(U());
  olderVersions = await json(`/v1/versions?url=${q}`);
  olderLookup = (await json(`/v1/endorsement?url=${q}&proof=1`)) as { index_proof: string };
  olderUnit = (await json('/v1/index/proof?unit=acme/widget')) as { index_proof: string };
  origin.route('/widget.js', { body: 'widget 2\n' });
  await submitEntry(gw.url, token, { url: U(), name: 'acme/widget', semver: '2.0.0', license: 'MIT' }); // block 2
  const rv = await fetch(`${gw.url}/v1/revoke`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: U(), semver: '1.0.0' }),
  }); // block 3 revokes block 1
  assert.is(rv.status, 201, await rv.text());
  hostile = createServer((req, res) => {
    (async () => {
      const path = req.url ?? '/';
      const e = await edit(path);
      if (e !== null) {
        res.writeHead(e.status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(e.json));
        return;
      }
      const r = await fetch(gw.url + path, { headers: { accept: req.headers.accept ?? '*/*' } });
      const headers: Record<string, string> = {};
      r.headers.forEach((v, k) => {
        if (!HOP.includes(k)) headers[k] = v;
      });
      res.writeHead(r.status, headers);
      res.end(Buffer.from(await r.arrayBuffer()));
    })().catch(() => res.destroy());
  });
  await new Promise<void>((ok) => hostile.listen(0, '127.0.0.1', ok));
  H = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
  browser = await launchChromium();
  page = await browser.newPage();
  page.setDefaultTimeout(20_000);
});

test.after(async () => {
  await browser?.close();
  hostile?.close();
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

/** The explorer's verdict on U's history, through `base`. */
async function verdict(base: string): Promise<string> {
  await page.goto(`${base}/`);
  await page.waitForSelector('table.blocks tbody tr');
  await page.goto(`${base}/#/search/${encodeURIComponent(U())}`);
  await page.waitForSelector('#index-result');
  return (await page.textContent('#index-result')) ?? '';
}

const isVersions = (p: string) => p.startsWith('/v1/versions?');

test('through the real gateway (and the relay untouched) the history is "index proof valid: complete"', async () => {
  edit = async () => null;
  assert.match(await verdict(gw.url), /^index proof valid: complete — the 2 block\(s\) shown are all the log's index at size 4 lists/);
  assert.match(await verdict(H), /^index proof valid: complete/);
});

test('the history recorded before block 2 (an older state): INVALID, block 2 left out', async () => {
  edit = async (p) => (isVersions(p) ? { status: 200, json: olderVersions } : null);
  assert.match(await verdict(H), /^index proof INVALID — the history shown leaves out block 2, which the log's index at size 4 lists/);
});

test('the current history with its revocation stripped: INVALID, shown as usable', async () => {
  edit = async (p) => {
    if (!isVersions(p)) return null;
    const v = (await json(p)) as { versions: Record<string, unknown>[] };
    for (const x of v.versions) delete x.revoked_by;
    return { status: 200, json: v };
  };
  assert.match(await verdict(H), /^index proof INVALID — block 1 is shown as usable, but block 3 revokes it from /);
});

test('a false 404 for the URL: INVALID; the older index proof under the current note: INVALID', async () => {
  edit = async (p) =>
    isVersions(p) ? { status: 404, json: { success: false, status: 'not_found', message: `no provenance block is on file for ${U()}` } } : null;
  assert.match(await verdict(H), /^index proof INVALID — the history shown leaves out block 1, 2/);
  edit = async (p) => {
    if (!p.startsWith('/v1/endorsement?')) return null;
    const cur = (await json(p)) as Record<string, unknown>;
    return { status: 200, json: { ...cur, index_proof: olderLookup.index_proof } };
  };
  assert.match(await verdict(H), /^index proof INVALID — index proof is for log size 2, the checkpoint is 4/);
});

test("a unit's versions from its index proof: listed when the proof verifies; the older state's proof through the relay: INVALID, nothing listed", async () => {
  edit = async () => null;
  const unitView = async (base: string) => {
    await page.goto(`${base}/`);
    await page.waitForSelector('table.blocks tbody tr');
    await page.goto(`${base}/#/search/acme%2Fwidget`);
    await page.waitForSelector('#index-result');
    return {
      verdict: (await page.textContent('#index-result')) ?? '',
      rows: await page.$$eval('table.unit-versions tbody tr td:nth-child(2)', (tds) => tds.map((t) => t.textContent)),
    };
  };
  const honest = await unitView(gw.url);
  assert.match(honest.verdict, /^index proof valid: complete — every endorsement of acme\/widget in the log at size 4: 2 version\(s\)/);
  assert.equal(honest.rows, ['1.0.0 (revoked)', '2.0.0']);
  edit = async (p) => {
    if (!p.startsWith('/v1/index/proof?')) return null;
    const cur = (await json(p)) as Record<string, unknown>;
    return { status: 200, json: { ...cur, index_proof: olderUnit.index_proof } };
  };
  const h = await unitView(H);
  assert.match(h.verdict, /^index proof INVALID — index proof is for log size 2, the checkpoint is 4/);
  assert.equal(h.rows, []);
});

test.run();
