/**
 * One chain lives through an authority's whole key life (issue 32 item 10,
 * docs/guide/key-runbook.md): a 2-of-3 root adopted by the running authority,
 * endorsements, a lockfile endorsed through the gateway, a revocation, a
 * routine rotation, a compromise in which the test, acting as the attacker,
 * appends blocks signed by the stolen key, recovery (re-endorsement), and a
 * root rotation. After each step every consumer agrees, with no restart and
 * no new configuration: `vouch verify` on a fresh clone (pinned to block 0's
 * key), a syncing mirror, `vouch get` against the authority and the mirror
 * (one state file each, kept across steps), the explorer in Chromium, a
 * witness cosigning the authority's notes, and Go's sumdb/note.
 * Real processes on 127.0.0.1: vouch serve (authority, mirror, witness),
 * git http-backend, the vouch CLI, chromium, a Go program.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { CHROMIUM, launchChromium } from '../helpers/chromium.ts';
import { base64Decode } from '../../chain/encoding.ts';
import { SIG_ED25519, parseNote, verifierKey } from '../../chain/note.ts';
import { parseCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { nodeBackend, rawPublicKey } from '../../platform/node-crypto.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { PushingAuthority, startGatewayProcess, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { gitAsync, vouchAsync } from '../helpers/processes.ts';
import { buildCheckNote, type CheckNoteRun } from '../helpers/go-checknote.ts';

const ORIGIN = 'vouch.example/life';
const WITNESS = 'witness.example.test/life';
const work = mkdtempSync(join(tmpdir(), 'vouch-key-life-'));
const token = 'life-token-' + 'l'.repeat(32);
let origin: OriginServer;
let live: PushingAuthority;
let mirror: GatewayProcess;
let witness: GatewayProcess;
let browser: Browser;
let page: Page;
let checkNote: (input: unknown, timeoutMs?: number) => CheckNoteRun;
let pinA = '';
const holders: Record<string, string> = {}; // name -> public key (base64)
let online = ''; // the online key in force (base64)
let step = 0;

const vouch = (args: string[]) => vouchAsync(args, {}, 180_000);
const ok = (r: { status: number | null; stdout: string; stderr: string }, what: string) => assert.is(r.status, 0, `${what}: ${r.stderr}${r.stdout}`);
const getJson = async (base: string, path: string) => {
  const r = await fetch(base + path);
  return { status: r.status, json: (await r.json()) as any };
};
const body = (n: string) => `life artifact ${n}\n`;
const url = (n: string) => origin.url(`/a/${n}.tgz`);

async function keygen(file: string): Promise<string> {
  const r = await vouch(['keygen', '--out', file]);
  ok(r, `keygen ${file}`);
  return r.stdout.split('\n')[0]!.trim();
}

async function submit(n: string, semver: string): Promise<{ index: number; record_hash: string }> {
  origin.route(`/a/${n}.tgz`, { body: body(n) });
  return live.submit({ url: url(n), name: 'acme/life', semver, license: 'MIT' });
}

/** A statement made by `make`, signed by `signers` on their own key files, applied through the running authority. */
async function ceremony(name: string, make: string[], signers: string[]): Promise<number> {
  const file = join(work, `${name}.json`);
  ok(await vouch([...make, '--out', file]), `${name}: statement`);
  for (const h of signers) ok(await vouch(['root', 'sign', '--key', join(work, `${h}.pem`), file]), `${name}: ${h} signs`);
  const r = await vouch(['root', 'apply', '--gateway', live.authority.url, '--token-file', live.tokenFile, file, '--json']);
  ok(r, `${name}: apply`);
  return JSON.parse(r.stdout).index as number;
}

interface Expect {
  size: number;
  events: number;
  voids: [number, number][];
  /** Artifacts every consumer must serve (name), and ones it must refuse (name and why). */
  live: string[];
  refused: [string, RegExp][];
}

/** Every consumer agrees with the authority at this step. */
async function agree(label: string, e: Expect): Promise<void> {
  step++;
  const a = live.authority.url;
  const authority = (await getJson(a, '/v1/authority')).json;
  assert.is(authority.keys.online.public_key, online, `${label}: the authority's key in force`);
  // 1. vouch verify on a fresh clone, pinned to block 0's key.
  const clone = join(work, `clone-${step}`);
  await until(
    `${label}: the push`,
    async () =>
      (await gitAsync(['ls-remote', live.remote, 'main'])).stdout.split('\t')[0] === (await gitAsync(['-C', live.chainDir, 'rev-parse', 'main'])).stdout.trim(),
  );
  assert.is((await gitAsync(['clone', '-q', live.remote, clone])).status, 0);
  const v = await vouch(['verify', '--chain', clone, '--public-key', pinA, '--json']);
  ok(v, `${label}: vouch verify`);
  const vj = JSON.parse(v.stdout);
  assert.equal(
    [vj.blocks, vj.keys.events, vj.keys.online.public_key, vj.keys.voids.map((x: any) => [x.from, x.to])],
    [e.size, e.events, online, e.voids],
    `${label}: vouch verify`,
  );
  if (e.voids.length > 0) {
    const plain = await vouch(['verify', '--chain', clone, '--public-key', pinA]);
    ok(plain, `${label}: vouch verify (text)`);
    for (const [f, t] of e.voids) assert.match(plain.stderr, new RegExp(`^warning: void blocks ${f}-${t}: `, 'm'), `${label}: the void warning`);
  }
  // 2. The mirror follows (no restart).
  await until(`${label}: the mirror at ${e.size}`, async () => (await getJson(mirror.url, '/v1/checkpoint')).json.size === e.size, 30_000);
  assert.equal((await getJson(mirror.url, '/v1/authority')).json.keys.online.public_key, online, `${label}: the mirror's key in force`);
  // 3. vouch get against both, with state kept across steps.
  for (const [name, base] of [
    ['authority', a],
    ['mirror', mirror.url],
  ] as const) {
    for (const n of e.live) {
      const out = join(work, `get-${step}-${name}-${n}`);
      const r = await vouch(['get', '--gateway', base, '--url', url(n), '--public-key', pinA, '-o', out, '--state', join(work, `get-state-${name}.json`)]);
      ok(r, `${label}: vouch get ${n} from the ${name}`);
      assert.is(readFileSync(out, 'utf8'), body(n));
    }
    for (const [n, why] of e.refused) {
      const r = await vouch([
        'get',
        '--gateway',
        base,
        '--url',
        url(n),
        '--public-key',
        pinA,
        '-o',
        join(work, `refused-${step}`),
        '--state',
        join(work, `get-state-${name}.json`),
      ]);
      assert.is(r.status, 1, `${label}: vouch get ${n} from the ${name} must fail: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, why, `${label}: vouch get ${n} from the ${name}: ${r.stderr}`);
    }
  }
  // 4. The explorer in Chromium, on the mirror: the head verifies with the key in force, void rows are marked.
  await page.goto(`${mirror.url}/`);
  await page.waitForSelector('table.blocks tbody tr');
  await page.waitForSelector('#authority-key');
  if (online === pinA) assert.is(await page.$('#online-key'), null, `${label}: explorer shows no other online key`);
  else {
    await page.waitForSelector('#online-key');
    assert.is(await page.textContent('#online-key'), online, `${label}: explorer's key in force`);
  }
  const rows = await page.$$eval('table.blocks tbody tr', (trs) => trs.map((t) => [Number(t.getAttribute('data-index')), t.className]));
  assert.is(rows[0]![0], e.size - 1, `${label}: explorer's head`);
  const shownVoid = rows
    .filter((r) => r[1] === 'void')
    .map((r) => r[0] as number)
    .sort((x, y) => x - y);
  const expectVoid = e.voids.flatMap(([f, t]) => Array.from({ length: t - f + 1 }, (_, k) => f + k)).filter((i) => rows.some((r) => r[0] === i));
  assert.equal(shownVoid, expectVoid, `${label}: explorer's void rows`);
  await page.goto(`${mirror.url}/#/block/${e.size - 1}`);
  await page.waitForSelector('#verify-result');
  await page.waitForFunction(() => !/checking/.test(document.querySelector('#verify-result')?.textContent ?? 'checking'));
  assert.match((await page.textContent('#verify-result')) ?? '', /^signature valid/, `${label}: explorer verifies the head`);
  // 5. The witness cosigned the authority's note of this size.
  const served = await until(
    `${label}: the witness cosignature at ${e.size}`,
    async () => {
      const r = await fetch(`${a}/checkpoint`);
      const text = await r.text();
      const n = parseNote(text);
      return parseCheckpoint(n.text).size === e.size && n.signatures.some((s) => s.name === WITNESS) ? text : null;
    },
    30_000,
  );
  // 6. Go's sumdb/note opens it with the verifier key /v1/authority publishes for the key in force.
  const vkey = authority.keys.verifier_keys[0] as string;
  assert.is(vkey, verifierKey(nodeBackend, ORIGIN, SIG_ED25519, base64Decode(online)!), `${label}: the published verifier key`);
  const go = checkNote({ open: { vkeys: [vkey], note: served } });
  assert.is(go.status, 0, `${label}: Go's note.Open: ${go.stderr}${go.stdout}`);
}

test.before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: install Debian's chromium`);
  origin = await OriginServer.start();
  live = await PushingAuthority.start(work, { signer: 'life', token, chain: { origin: ORIGIN } });
  pinA = live.pub;
  online = pinA;
  mirror = await live.startMirror(join(work, 'mirror'), { syncInterval: 0.5 });
  // A witness of the authority's log, configured with block 0's key and the mirror's URL (to learn key events).
  const wdir = join(work, 'witness');
  mkdirSync(wdir, { recursive: true });
  await keygen(join(wdir, 'w.pem'));
  await keygen(join(wdir, 'a.pem'));
  writeFileSync(join(wdir, 'w.token'), 'w'.repeat(40), { mode: 0o600 });
  witness = await startGatewayProcess([
    '--config',
    writeConfig(wdir, {
      listen: { port: 0 },
      chain: { dir: join(wdir, 'chain') },
      authority: { key_file: join(wdir, 'a.pem'), signer: 'witness-host', submit_token_file: join(wdir, 'w.token') },
      witness: {
        key_file: join(wdir, 'w.pem'),
        name: WITNESS,
        state_file: join(wdir, 'state.json'),
        logs: [{ vkey: verifierKey(nodeBackend, ORIGIN, SIG_ED25519, base64Decode(pinA)!), url: mirror.url }],
      },
    }),
  ]);
  const wvkey = verifierKey(nodeBackend, WITNESS, 0x04, rawPublicKey(readKeyFile(join(wdir, 'w.pem'))));
  await live.restart({ witnesses: [{ url: witness.url, vkey: wvkey }] });
  for (const h of ['holder-1', 'holder-2', 'holder-3', 'holder-4']) holders[h] = await keygen(join(work, `${h}.pem`));
  browser = await launchChromium();
  page = await browser.newPage();
  page.setDefaultTimeout(20_000);
  checkNote = buildCheckNote(work);
});

test.after(async () => {
  await browser?.close();
  await witness?.stop();
  await live?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

test('one chain through a 2-of-3 root, endorsements, a lockfile, a revocation, a rotation, a compromise, recovery and a root rotation: every consumer agrees after each step', async () => {
  // Endorsements under block 0's key.
  await submit('one', '1.0.0');
  await submit('two', '2.0.0');
  await agree('endorsements', { size: 3, events: 0, voids: [], live: ['one', 'two'], refused: [] });

  // The key ceremony: three holders, two sign; applied through the running authority.
  const h = (n: number) => holders[`holder-${n}`]!;
  let at = await ceremony(
    'root-1',
    ['root', 'init', '--gateway', live.authority.url, '--threshold', '2', '--holder', h(1), '--holder', h(2), '--holder', h(3)],
    ['holder-1', 'holder-3'],
  );
  assert.is(at, 3);
  await agree('root adopted', { size: 4, events: 1, voids: [], live: ['one', 'two'], refused: [] });

  // A project's lockfile, endorsed through the running authority (it fetches and hashes every tarball itself).
  const packages: Record<string, unknown> = { '': { name: 'life-app' } };
  for (const p of ['left', 'right', 'middle']) {
    const bytes = Buffer.from(`npm package ${p}\n`);
    origin.route(`/npm/${p}-1.0.0.tgz`, { body: bytes, contentType: 'application/octet-stream' });
    packages[`node_modules/${p}`] = {
      version: '1.0.0',
      license: 'MIT',
      resolved: origin.url(`/npm/${p}-1.0.0.tgz`),
      integrity: 'sha512-' + createHash('sha512').update(bytes).digest('base64'),
    };
  }
  const lock = join(work, 'package-lock.json');
  writeFileSync(lock, JSON.stringify({ name: 'life-app', version: '1.0.0', lockfileVersion: 3, packages }));
  ok(await vouch(['endorse', '--gateway', live.authority.url, '--token-file', live.tokenFile, '--lockfile', lock]), 'endorse --lockfile --gateway');
  await agree('lockfile', { size: 5, events: 1, voids: [], live: ['one', 'two'], refused: [] });

  // A revocation through the running authority.
  const rv = await fetch(`${live.authority.url}/v1/revoke`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: url('one') }),
  });
  assert.is(rv.status, 201, await rv.text());
  await agree('revocation', { size: 6, events: 1, voids: [], live: ['two'], refused: [['one', /revoked/]] });

  // Routine rotation: the next key where the gateway looks for it, a statement two holders sign.
  const next = `${live.keyFile}.next`;
  const keyB = await keygen(next);
  at = await ceremony('rotate', ['key', 'rotate', '--chain', join(work, `clone-${step}`), '--new-public', keyB], ['holder-1', 'holder-2']);
  assert.is(at, 6);
  online = keyB;
  await submit('three', '3.0.0');
  // The rollover note: both keys sign it; Go opens it with either verifier key.
  const rollover = await (await fetch(`${live.authority.url}/checkpoint`)).text();
  for (const k of [pinA, keyB])
    assert.is(
      checkNote({ open: { vkeys: [verifierKey(nodeBackend, ORIGIN, SIG_ED25519, base64Decode(k)!)], note: rollover } }).status,
      0,
      `rollover note opens with ${k}`,
    );
  await agree('rotation', { size: 8, events: 2, voids: [], live: ['two', 'three'], refused: [['one', /revoked/]] });

  // Compromise: the attacker holds B and appends blocks with it; the operator's own block lands among them.
  const good = 7; // the last block known good
  await submit('evil-1', '6.6.6');
  await submit('four', '4.0.0'); // the operator's, after the theft: voided with the rest, re-endorsed below
  await submit('evil-2', '6.6.7');
  renameSync(next, live.keyFile); // B leaves next_key_file (the gateway keeps it in memory); A is archived
  const keyC = await keygen(next);
  at = await ceremony(
    'compromise',
    ['key', 'compromise', '--chain', join(work, `clone-${step}`), '--good-through', String(good), '--new-public', keyC],
    ['holder-2', 'holder-3'],
  );
  assert.is(at, 11);
  online = keyC;
  const voids: [number, number][] = [[8, 10]];
  await agree('compromise', {
    size: 12,
    events: 3,
    voids,
    live: ['two', 'three'],
    refused: [
      ['evil-1', /no signed block|void/],
      ['four', /no signed block|void/],
    ],
  });

  // Recovery: re-endorse what was voided; the attacker's artifacts (their bytes are gone from the origin) are listed, not endorsed.
  origin.route('/a/evil-1.tgz', { body: 'the real evil-1 bytes\n' });
  origin.route('/a/evil-2.tgz', { body: 'the real evil-2 bytes\n' });
  const clone = join(work, 'recovery-clone');
  assert.is((await gitAsync(['clone', '-q', live.remote, clone])).status, 0);
  const re = await vouch(['reendorse', '--chain', clone, '--gateway', live.authority.url, '--token-file', live.tokenFile]);
  assert.is(re.status, 1, `reendorse lists what it refused: ${re.stdout}${re.stderr}`);
  assert.match(re.stdout + re.stderr, /evil-1/);
  assert.match(re.stdout + re.stderr, /evil-2/);
  await agree('recovery', {
    size: 13,
    events: 3,
    voids,
    live: ['two', 'three', 'four'],
    refused: [
      ['evil-1', /no signed block|void/],
      ['evil-2', /no signed block|void/],
    ],
  });

  // Root rotation: {1, 2, 4}; two of the old root and two of the new sign (holders 1 and 2 are in both).
  at = await ceremony(
    'root-2',
    ['root', 'init', '--gateway', live.authority.url, '--threshold', '2', '--holder', h(1), '--holder', h(2), '--holder', h(4)],
    ['holder-1', 'holder-2', 'holder-4'],
  );
  assert.is(at, 13);
  await submit('five', '5.0.0');
  await agree('root rotation', { size: 15, events: 4, voids, live: ['two', 'three', 'four', 'five'], refused: [['one', /revoked/]] });
});

test.run();
