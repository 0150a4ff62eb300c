/**
 * The chain explorer in a real headless Chromium (Debian's `chromium`,
 * driven by playwright-core): load, browse, search, open a block, see
 * "signature valid" computed in the browser, and "signature invalid" for a
 * block the test serves tampered, a version revoked through POST /v1/revoke
 * marked. A chain with key events (test/helpers/key-fixture.ts): every block
 * "signature valid" with the key in force at its index, key blocks saying
 * what they did, void blocks marked. A screenshot is kept for the record.
 * Chromium missing is a failure, never a silent skip (.ci/run installs it).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { CHROMIUM, launchChromium } from '../helpers/chromium.ts';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { repoRoot } from '../helpers/vectors.ts';
import { b64, buildKeyLifeChain, ONLINE } from '../helpers/key-fixture.ts';
import { initKeyRepo } from '../helpers/key-log.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-explorer-'));
const token = 'explorer-token-' + 'e'.repeat(30);
const agent = new Agent();
let gw: GatewayProcess;
let keyed: GatewayProcess | undefined;
let origin: OriginServer;
let browser: Browser;
let page: Page;
let pub = '';

test.before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)`);
  pub = createKeyFile(join(work, 'authority.pem')).publicKeyB64;
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  origin = await OriginServer.start();
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { port: 0 },
      chain: { dir: join(work, 'chain') },
      authority: { key_file: join(work, 'authority.pem'), signer: 'explorer-test', submit_token_file: join(work, 'submit.token') },
      origin: { allow_private: true },
    }),
  ]);
  const submit = async (path: string, body: string, name: string, semver: string) => {
    origin.route(path, { body });
    const r = await request(gw.url + '/v1/submit', {
      method: 'POST',
      dispatcher: agent,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: origin.url(path), name, semver, license: 'MIT', comment: `release ${semver} — “Grüße”` }),
    });
    assert.is(r.statusCode, 201, await r.body.text());
  };
  await submit('/a-1.tgz', 'artifact 1', 'acme/widget', '1.0.0'); // block 1
  await submit('/a-1.tgz', 'artifact 1 v2', 'acme/widget', '2.0.0'); // block 2: same URL, new version
  await submit('/a-3.tgz', 'artifact 3', 'beta/tool', '3.0.0'); // block 3
  browser = await launchChromium();
  page = await browser.newPage();
  page.setDefaultTimeout(15_000);
});

test.after(async () => {
  await browser?.close();
  await gw?.stop();
  await keyed?.stop();
  await origin?.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

test('the page loads from the gateway alone, shows the authority and the newest blocks', async () => {
  const external: string[] = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(gw.url)) external.push(r.url());
  });
  await page.goto(gw.url + '/');
  await page.waitForSelector('table.blocks tbody tr');
  assert.is(await page.textContent('#authority-key'), pub);
  assert.match((await page.textContent('#authority')) ?? '', /authority block valid/);
  const rows = await page.$$eval('table.blocks tbody tr', (trs) => trs.map((t) => t.getAttribute('data-index')));
  assert.equal(rows.slice(0, 4), ['3', '2', '1', '0']);
  assert.equal(external, [], 'the page fetched something from elsewhere');
});

test('search by URL shows the version history; by owner/name the unit; open a block: "signature valid"', async () => {
  await page.fill('#search input', origin.url('/a-1.tgz'));
  await page.click('#search button');
  await page.waitForSelector('table.versions tbody tr');
  const versions = await page.$$eval('table.versions tbody tr td:nth-child(2)', (tds) => tds.map((t) => t.textContent));
  assert.equal(versions, ['2.0.0', '1.0.0']);
  await page.fill('#search input', 'beta/tool');
  await page.click('#search button');
  await page.waitForFunction(() => document.querySelector('h2')?.textContent === 'Blocks of beta/tool');
  await page.click('table.blocks tbody tr td a');
  await page.waitForSelector('#verify-result');
  assert.match((await page.textContent('#verify-result')) ?? '', /^signature valid/);
  assert.match((await page.textContent('#main')) ?? '', /release 3\.0\.0 — “Grüße”/);
  mkdirSync(join(repoRoot, 'test', 'out'), { recursive: true });
  await page.screenshot({ path: join(repoRoot, 'test', 'out', 'explorer-block.png'), fullPage: true });
});

test('a block served tampered is shown as "signature invalid"', async () => {
  await page.route('**/v1/block?index=2', async (route) => {
    const res = await route.fetch();
    const json = await res.json();
    json.payload.endorsements[0].artifact_hash = 'sha256:' + 'e'.repeat(64);
    await route.fulfill({ response: res, json });
  });
  await page.goto(gw.url + '/#/block/2');
  // Only a hash change: wait for the new view, not the previous one's result.
  await page.waitForFunction(() => document.querySelector('h2')?.textContent === 'Block 2' && document.querySelector('#verify-result'));
  assert.match((await page.textContent('#verify-result')) ?? '', /^signature invalid/);
  await page.screenshot({ path: join(repoRoot, 'test', 'out', 'explorer-tampered.png'), fullPage: true });
  await page.unroute('**/v1/block?index=2');
  await page.goto(gw.url + '/#/block/1');
  await page.waitForFunction(() => document.querySelector('h2')?.textContent === 'Block 1');
  assert.match((await page.textContent('#verify-result')) ?? '', /^signature valid/);
});

test('a version revoked through POST /v1/revoke is marked: "(revoked)" in its history, "revoked by" on its block', async () => {
  const r = await request(gw.url + '/v1/revoke', {
    method: 'POST',
    dispatcher: agent,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: origin.url('/a-1.tgz'), semver: '2.0.0' }),
  });
  assert.is(r.statusCode, 201);
  const revoke = (await r.body.json()) as { index: number; effective_date: string };
  await page.goto(gw.url + '/');
  await page.fill('#search input', origin.url('/a-1.tgz'));
  await page.click('#search button');
  await page.waitForFunction(() => document.querySelector('table.versions tbody tr td:nth-child(2)')?.textContent?.includes('(revoked)'));
  const versions = await page.$$eval('table.versions tbody tr td:nth-child(2)', (tds) => tds.map((t) => t.textContent));
  assert.equal(versions, ['2.0.0 (revoked)', '1.0.0']);
  await page.goto(gw.url + '/#/block/2');
  await page.waitForFunction(() => document.querySelector('h2')?.textContent === 'Block 2' && document.querySelector('#verify-result'));
  assert.match((await page.textContent('#main')) ?? '', `revoked byblock ${revoke.index} from ${revoke.effective_date}`);
  assert.match((await page.textContent('#verify-result')) ?? '', /^signature valid/);
  await page.goto(gw.url + `/#/block/${revoke.index}`);
  await page.waitForFunction((i) => document.querySelector('h2')?.textContent === `Block ${i}` && document.querySelector('#verify-result'), revoke.index);
  assert.match((await page.textContent('#main')) ?? '', /intentrevoke/);
  assert.match((await page.textContent('#verify-result')) ?? '', /^signature valid/);
});

test('a search sent while the explorer still loads is kept: routed once the authority has loaded, never a reload', async () => {
  // The authority's answer held back 1 s: the form is there and clicked before the app has finished starting.
  let release: () => void = () => {};
  const held = new Promise<void>((r) => {
    release = r;
  });
  await page.route('**/v1/authority', async (route) => {
    await held;
    await route.continue().catch(() => {}); // the page may have gone (the reload this test is about)
  });
  try {
    await page.goto(gw.url + '/');
    await page.fill('#search input', origin.url('/a-1.tgz'));
    await page.click('#search button');
    assert.is(new URL(page.url()).search, '', 'the form was not submitted to the server');
    release();
    await page.waitForFunction(() => document.querySelectorAll('table.versions tbody tr').length > 0);
    assert.match(page.url(), /#\/search\/https?%3A/);
  } finally {
    release();
    await page.unroute('**/v1/authority');
  }
});

test('a chain with key events: every block verifies with the key in force at its index, key blocks say what they did, void blocks are marked', async () => {
  const life = buildKeyLifeChain(); // root at 2, A -> B at 4, B compromised after 5 at 8 (6-7 void, C), root rotation at 10
  const dir = join(work, 'keyed');
  await initKeyRepo(join(dir, 'chain'), life.blocks, 12, 'vouch.example/explorer-keys');
  keyed = await startGatewayProcess(['--config', writeConfig(dir, { listen: { port: 0 }, chain: { dir: join(dir, 'chain'), public_key: b64(ONLINE.A) } })]);
  await page.goto(keyed.url + '/');
  await page.waitForSelector('table.blocks tbody tr');
  assert.is(await page.textContent('#authority-key'), b64(ONLINE.A));
  await page.waitForSelector('#online-key');
  assert.is(await page.textContent('#online-key'), b64(ONLINE.C));
  const rows = await page.$$eval('table.blocks tbody tr', (trs) =>
    trs.map((t) => [t.getAttribute('data-index'), t.className, t.children[4]!.textContent, t.children[6]!.textContent]),
  );
  const row = (i: number) => rows.find((r) => r[0] === String(i))!;
  assert.equal([row(6)[1], row(6)[2]], ['void', '1.6.0 (void)']);
  assert.equal([row(7)[1], row(7)[2]], ['void', '1.7.0 (void)']);
  assert.is(row(5)[1], '');
  assert.match(row(8)[3]!, new RegExp(`^compromise of ${b64(ONLINE.B).replace(/[+/]/g, '\\$&')} after block 5: blocks 6–7 void; `));
  assert.match(row(10)[3]!, /^root version 2: 2 of 3 holders/);
  assert.match(row(4)[3]!, /^rotation: /);
  for (let i = 0; i < 12; i++) {
    await page.goto(keyed.url + `/#/block/${i}`);
    await page.waitForFunction((n) => document.querySelector('h2')?.textContent === `Block ${n}` && document.querySelector('#verify-result'), i);
    assert.match((await page.textContent('#verify-result')) ?? '', /^signature valid/, `block ${i}: ${await page.textContent('#verify-result')}`);
    const banner = await page.$('#void-banner');
    assert.is(banner !== null, i === 6 || i === 7, `block ${i} void banner`);
  }
  await page.goto(keyed.url + '/#/block/6');
  await page.waitForFunction(() => document.querySelector('h2')?.textContent === 'Block 6' && document.querySelector('#void-banner'));
  assert.match((await page.textContent('#void-banner')) ?? '', /^VOID: .* block 8 declares blocks 6–7 void/);
  mkdirSync(join(repoRoot, 'test', 'out'), { recursive: true });
  await page.screenshot({ path: join(repoRoot, 'test', 'out', 'explorer-void.png'), fullPage: true });
  await page.goto(keyed.url + '/#/block/2');
  await page.waitForFunction(() => document.querySelector('h2')?.textContent === 'Block 2' && document.querySelector('#verify-result'));
  assert.match((await page.textContent('#main')) ?? '', /key eventroot version 1: 2 of 3 holders \(2 holders' signatures\)/);
});

test.run();
