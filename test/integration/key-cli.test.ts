/**
 * Key events through the command line (issue 32 items 3, 4, 5, 8;
 * docs/spec/key-events.md), real `vouch` processes, real git and a real origin on
 * 127.0.0.1: the whole offline ceremony on one chain: a 2-of-3 root
 * (`root init`, three holders' `root sign`, `root apply`), a routine
 * rotation, a block by the retired key caught by `vouch verify`
 * (retired_key), a compromise after the test, as the attacker, appended
 * blocks with the stolen key (offline `vouch endorse`), `vouch verify`'s
 * void warning, `vouch reendorse` (good entries endorsed again, one whose
 * origin bytes changed refused), and a root rotation to a new holder set.
 * Every bad statement: its exact stderr line, its exit code, and the chain
 * unchanged (same head commit, same block files).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildCheckpoint, buildEndorseBlock, buildKeyBlock, artifactHashOf } from '../../chain/build.ts';
import { parseBlockText } from '../../chain/block.ts';
import { blockPath } from '../../chain/layout.ts';
import { utf8 } from '../../chain/encoding.ts';
import { signStatement } from '../../chain/key-events.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { signNoteText } from '../../platform/note-signer.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { git, gitIn, vouchAsync, type Run } from '../helpers/processes.ts';
import { startGatewayProcess, writeConfig } from '../helpers/gateway-process.ts';
import { chainFile } from '../helpers/chain-files.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-key-cli-'));
const chain = join(work, 'chain');
const at = (name: string) => join(work, name);
const pubs: Record<string, string> = {};
let origin: Server;
let base = '';
const served = new Map<string, Buffer>();

const vouch = (...args: string[]) => vouchAsync(args);
const ok = (r: Run) => {
  assert.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
  return r;
};
const head = (dir = chain) => git(['-C', dir, 'rev-parse', 'HEAD']).stdout.trim();
const blockFiles = (dir = chain) =>
  gitIn(dir, 'ls-tree', '-r', '--name-only', 'main', 'blocks')
    .split('\n')
    .filter((f) => f.endsWith('.json')).length;
const U = (p: string) => `${base}${p}`;

/** Runs a refused command: exactly `line` on stderr, exit `code`, and the chain as it was. */
async function refused(args: string[], line: string | RegExp, code: number, dir = chain): Promise<Run> {
  const before = { head: head(dir), files: blockFiles(dir) };
  const r = await vouchAsync(args);
  assert.is(r.status, code, `exit ${r.status}: ${r.stdout}\n${r.stderr}`);
  if (typeof line === 'string') assert.is(r.stderr, line + '\n');
  else {
    assert.is(r.stderr.trimEnd().split('\n').length, 1, `one stderr line: ${r.stderr}`);
    assert.match(r.stderr, line);
  }
  assert.is(head(dir), before.head, 'nothing committed');
  assert.is(blockFiles(dir), before.files, 'no block file written');
  return r;
}

async function size(dir = chain): Promise<number> {
  return JSON.parse(ok(await vouch('verify', '--chain', dir, '--json')).stdout).blocks as number;
}

async function endorse(keyName: string, url: string, semver: string, more: string[] = []): Promise<number> {
  const r = ok(
    await vouch(
      'endorse',
      '--chain',
      chain,
      '--key',
      at(`${keyName}.pem`),
      '--url',
      url,
      '--name',
      'acme/widget',
      '--semver',
      semver,
      '--license',
      'MIT',
      ...more,
    ),
  );
  return Number(r.stdout.split(' ')[0]);
}

/** A copy of a statement file (each test step signs its own). */
function copy(from: string, to: string): string {
  writeFileSync(at(to), readFileSync(at(from)));
  return at(to);
}

const sign = async (file: string, ...holders: string[]) => {
  for (const h of holders) ok(await vouch('root', 'sign', '--key', at(`${h}.pem`), file));
};

test.before(async () => {
  origin = createServer((req, res) => {
    const body = served.get(req.url ?? '');
    if (!body) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-length': body.length }).end(body);
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
  for (const k of ['A', 'B', 'C', 'D', 'H1', 'H2', 'H3', 'H4']) {
    const r = ok(await vouch('keygen', '--out', at(`${k}.pem`)));
    pubs[k] = r.stdout.trim();
  }
  ok(await vouch('init', '--chain', chain, '--key', at('A.pem'), '--signer', 'acme', '--uns', 'acme/releases'));
  for (let i = 1; i <= 8; i++) served.set(`/widget-${i}.tgz`, Buffer.from(`widget ${i} bytes\n`));
});

test.after(async () => {
  await new Promise<void>((r) => origin.close(() => r()));
  rmSync(work, { recursive: true, force: true });
});

test('vouch help lists the key commands; `vouch root` alone asks for a subcommand', async () => {
  const help = ok(await vouch('help')).stdout;
  for (const c of ['root init', 'root sign', 'root apply', 'key rotate', 'key compromise', 'reendorse'])
    assert.ok(help.includes(`  ${c} `), `${c} in vouch help`);
  const r = await vouch('root');
  assert.is(r.status, 2);
  assert.is(r.stderr, 'vouch root: give a subcommand: init, sign, apply (vouch root <subcommand> --help)\n');
  assert.match(ok(await vouch('root', 'apply', '--help')).stdout, /^usage: vouch root apply --chain DIR --key ONLINE.pem STATEMENT/);
});

test('before a root: a small-order holder key and a rotation are refused at once, no file written', async () => {
  const small = 'AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='; // the identity point: order 1
  await refused(
    ['root', 'init', '--chain', chain, '--holder', pubs.H1!, '--holder', small, '--threshold', '1', '--out', at('weak.json')],
    `vouch root init: root key ${small} is not a full-order ed25519 key (small-order or non-canonical): refused`,
    1,
  );
  assert.not.ok(existsSync(at('weak.json')));
  const nonCanonical = Buffer.from([0xed, ...new Array(30).fill(0xff), 0x7f]).toString('base64'); // y = p: a non-canonical encoding
  await refused(
    ['root', 'init', '--chain', chain, '--holder', pubs.H1!, '--holder', nonCanonical, '--threshold', '1', '--out', at('weak.json')],
    `vouch root init: root key ${nonCanonical} is not a full-order ed25519 key (small-order or non-canonical): refused`,
    1,
  );
  await refused(
    ['root', 'init', '--chain', chain, '--holder', pubs.H1!, '--holder', pubs.A!, '--threshold', '1', '--out', at('weak.json')],
    `vouch root init: the online key in force cannot be a root key: root keys stay offline; no statement written`,
    1,
  );
  assert.not.ok(existsSync(at('weak.json')));
  await refused(
    ['key', 'rotate', '--chain', chain, '--new-key', at('B.pem'), '--out', at('early.json')],
    'vouch key rotate: a key statement needs a root: this chain has none (adopt one with a root statement first); no statement written',
    1,
  );
  assert.not.ok(existsSync(at('early.json')));
});

let good = 0; // the last block known good before the attacker's
test('the ceremony: endorse, root init 2-of-3, refused with one signature, applied with two', async () => {
  await endorse('A', U('/widget-1.tgz'), '1.0.0');
  await endorse('A', U('/widget-2.tgz'), '2.0.0');
  const init = ok(
    await vouch(
      'root',
      'init',
      '--chain',
      chain,
      '--holder',
      pubs.H1!,
      '--holder',
      at('H2.pem'),
      '--holder',
      pubs.H3!,
      '--threshold',
      '2',
      '--out',
      at('root1.json'),
    ),
  );
  assert.match(init.stdout, /adopts root version 1, 2 of 3 holders/);
  // --out is never overwritten
  await refused(
    ['root', 'init', '--chain', chain, '--holder', pubs.H1!, '--threshold', '1', '--out', at('root1.json')],
    `vouch root init: ${at('root1.json')} exists: a statement file is never overwritten (give another --out)`,
    2,
  );

  const one = copy('root1.json', 'root1-one.json');
  const s1 = ok(await vouch('root', 'sign', '--key', at('H1.pem'), one));
  assert.match(s1.stdout, /new root \(version 1\): 1 of 2 needed\n/);
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('A.pem'), one],
    "vouch root apply: the new root (version 1) needs 2 of its 3 holders' signatures, the statement has 1; nothing appended",
    1,
  );
  // a holder signs once
  await refused(['root', 'sign', '--key', at('H1.pem'), one], `vouch root sign: holder ${pubs.H1} has already signed this statement; the file is unchanged`, 1);

  // a signature by a key outside the root: root sign refuses to add it; added by hand, apply refuses it
  const outside = copy('root1.json', 'root1-outside.json');
  await sign(outside, 'H1');
  await refused(
    ['root', 'sign', '--key', at('H4.pem'), outside],
    `vouch root sign: ${pubs.H4} is not a key of the root this statement adopts; the file is unchanged`,
    1,
  );
  writeFileSync(outside, JSON.stringify(signStatement(JSON.parse(readFileSync(outside, 'utf8')), nodeSigner('h4', readKeyFile(at('H4.pem'))))));
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('A.pem'), outside],
    `vouch root apply: signature by ${pubs.H4}, which is not a key of the root; nothing appended`,
    1,
  );

  // one holder counted twice (the file edited by hand)
  const twice = copy('root1.json', 'root1-twice.json');
  await sign(twice, 'H1');
  const f = JSON.parse(readFileSync(twice, 'utf8'));
  f.signatures.push(f.signatures[0]);
  writeFileSync(twice, JSON.stringify(f));
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('A.pem'), twice],
    `vouch root apply: holder ${pubs.H1} signed twice (each holder counts once); nothing appended`,
    1,
  );

  // three holders sign; a 2-of-3 statement applies
  await sign(at('root1.json'), 'H1', 'H2');
  const s3 = ok(await vouch('root', 'sign', '--key', at('H3.pem'), at('root1.json')));
  assert.match(s3.stdout, /new root \(version 1\): 3 of 2 needed \(met\)/);

  // a running gateway holds the chain: apply through it
  const lock = join(chain, '.git', 'vouch.lock');
  writeFileSync(lock, JSON.stringify({ pid: process.pid, host: hostname(), token: 't', since: new Date().toISOString() }) + '\n');
  try {
    await refused(
      ['root', 'apply', '--chain', chain, '--key', at('A.pem'), at('root1.json')],
      /apply the statement through it \(vouch root apply --gateway URL --token-file FILE, i\.e\. POST \/v1\/root\)/,
      2,
    );
  } finally {
    rmSync(lock);
  }

  const applied = ok(await vouch('root', 'apply', '--chain', chain, '--key', at('A.pem'), at('root1.json'), '--json'));
  const a = JSON.parse(applied.stdout);
  assert.is(a.index, 3);
  assert.is(a.action, 'root');
  assert.equal(a.root, { version: 1, threshold: 2, keys: [pubs.H1, pubs.H2, pubs.H3] });
  const v = JSON.parse(ok(await vouch('verify', '--chain', chain, '--json')).stdout);
  assert.equal(v.keys.root, { version: 1, threshold: 2, keys: [pubs.H1, pubs.H2, pubs.H3] });
  assert.is(v.keys.events, 1);
  assert.equal(v.keys.online, { signer: 'acme', public_key: pubs.A, since: 0 });

  // replayed: stale
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('A.pem'), at('root1.json')],
    'vouch root apply: statement sequence 1 was already used (this chain has applied 1 key events): a replayed or superseded statement; nothing appended',
    1,
  );
});

let rotatedAt = 0;
test('routine rotation A -> B: signed by two holders, applied with the NEW key; a conflicting statement is stale; the old key signs nothing', async () => {
  ok(await vouch('key', 'rotate', '--chain', chain, '--new-key', at('B.pem'), '--out', at('rotate-b.json')));
  ok(await vouch('key', 'rotate', '--chain', chain, '--new-public', pubs.D!, '--out', at('rotate-d.json'))); // conflicting: same sequence
  await sign(at('rotate-b.json'), 'H2', 'H3');
  await sign(at('rotate-d.json'), 'H1', 'H2');
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('A.pem'), at('rotate-b.json')],
    `vouch root apply: --key holds ${pubs.A}, but the key block is signed by the online key the statement puts in force, ${pubs.B} (the NEW key: give its private key file); nothing appended`,
    2,
  );
  const r = JSON.parse(ok(await vouch('root', 'apply', '--chain', chain, '--key', at('B.pem'), at('rotate-b.json'), '--json')).stdout);
  rotatedAt = r.index;
  assert.equal(r.online, { signer: 'acme', public_key: pubs.B, since: rotatedAt });
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('D.pem'), at('rotate-d.json')],
    'vouch root apply: statement sequence 2 was already used (this chain has applied 2 key events): a replayed or superseded statement; nothing appended',
    1,
  );

  // the offline writer refuses the retired key
  await refused(
    ['endorse', '--chain', chain, '--key', at('A.pem'), '--url', U('/widget-3.tgz'), '--name', 'acme/widget', '--semver', '3.0.0', '--license', 'MIT'],
    `vouch endorse: this key (${pubs.A}) was retired; the online key in force is ${pubs.B} (since block ${rotatedAt})`,
    2,
  );
  // rotation back to the retired key
  await refused(
    ['key', 'rotate', '--chain', chain, '--new-key', at('A.pem'), '--out', at('back.json')],
    `vouch key rotate: the online key ${pubs.A} was retired earlier: a retired key never signs again; no statement written`,
    1,
  );
  good = await endorse('B', U('/widget-3.tgz'), '3.0.0');

  // a forged key block (a rotation to D signed by no holder, the block by D itself): bad_key_event at its index
  const forged = at('clone-forged');
  git(['clone', '-q', chain, forged]);
  const frepo = await ChainRepo.open(forged);
  const fprev = parseBlockText(frepo.readBlockFile(frepo.size - 1), frepo.size - 1);
  const d = nodeSigner('acme', readKeyFile(at('D.pem')));
  const statement = {
    action: 'key' as const,
    chain: parseBlockText(frepo.readBlockFile(0), 0).record_hash,
    sequence: 3,
    online: { signer: 'acme', public_key: pubs.D! },
  };
  const kb = buildKeyBlock({ prev: fprev, signer: d, backend: nodeBackend, now: Date.now(), signed: { statement, signatures: [] } });
  await appendSigned(frepo, [kb], buildCheckpoint({ head: kb, signer: d, now: Date.now() }), Date.now());
  const fv = await vouch('verify', '--chain', forged);
  assert.is(fv.status, 1);
  assert.is(fv.stderr, `bad_key_event at block ${kb.index}: the root (version 1) needs 2 of its 3 holders' signatures, the statement has 0\n`);

  // checkpoint.note must open with the key in force: one signed by the old key alone (on a clone) is refused
  const noted = at('clone-note');
  git(['clone', '-q', chain, noted]);
  const text = readFileSync(join(noted, 'checkpoint.note'), 'utf8');
  const cp = openCheckpoint(nodeBackend, text, { publicKey: nodeSigner('acme', readKeyFile(at('B.pem'))).publicKey }).checkpoint;
  writeFileSync(join(noted, 'checkpoint.note'), signNoteText(nodeSigner('acme', readKeyFile(at('A.pem'))), cp.origin, cp.size, cp.root));
  ok(git(['-C', noted, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qam', 'note by the old key']));
  const n = await vouch('verify', '--chain', noted);
  assert.is(n.status, 1);
  assert.match(
    n.stderr,
    new RegExp(
      `^checkpoint_mismatch at checkpoint: checkpoint\\.note does not open with the online key in force \\(${pubs.B!.replace(/[+/]/g, '\\$&')}\\): checkpoint carries no signature by the authority key `,
    ),
  );

  // a block appended with the old key by hand (on a clone): vouch verify fails with retired_key at its index
  const clone = at('clone-retired');
  git(['clone', '-q', chain, clone]);
  const repo = await ChainRepo.open(clone);
  const prev = parseBlockText(repo.readBlockFile(repo.size - 1), repo.size - 1);
  const old = nodeSigner('acme', readKeyFile(at('A.pem')));
  const block = buildEndorseBlock({
    prev,
    signer: old,
    backend: nodeBackend,
    now: Date.now(),
    entries: [
      {
        url: U('/widget-8.tgz'),
        artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8('widget 8 bytes\n')),
        name: 'acme/widget',
        semver: '8.0.0',
        license: 'MIT',
      },
    ],
  });
  await appendSigned(repo, [block], buildCheckpoint({ head: block, signer: old, now: Date.now() }), Date.now());
  const v = await vouch('verify', '--chain', clone);
  assert.is(v.status, 1);
  assert.is(v.stderr, `retired_key at block ${block.index}: signed by the retired key ${pubs.A}; the key in force since block ${rotatedAt} is ${pubs.B}\n`);
  const j = JSON.parse((await vouch('verify', '--chain', clone, '--json')).stdout);
  assert.is(j.code, 'retired_key');
  assert.is(j.index, block.index);
});

const attacker: number[] = [];
test('compromise: the attacker appends with the stolen key B; bad good-through refused; declared with two holders, C takes over', async () => {
  // The attacker, holding B, endorses through the offline command: one block of two artifacts whose origin bytes
  // are the real ones, and one whose bytes the origin no longer serves (the attacker's).
  const evil = at('evil.tgz');
  writeFileSync(evil, 'attacker bytes\n');
  attacker.push(
    Number(
      ok(
        await vouch(
          'endorse',
          '--chain',
          chain,
          '--key',
          at('B.pem'),
          '--url',
          U('/widget-4.tgz'),
          '--url',
          U('/widget-5.tgz'),
          '--name',
          'acme/widget',
          '--semver',
          '4.0.0',
          '--license',
          'MIT',
        ),
      ).stdout.split(' ')[0],
    ),
  );
  // and one block mixing them: widget-6 with the attacker's bytes, widget-7 with the real ones
  const real7 = at('widget-7.tgz');
  writeFileSync(real7, served.get('/widget-7.tgz')!);
  attacker.push(
    Number(
      ok(
        await vouch(
          'endorse',
          '--chain',
          chain,
          '--key',
          at('B.pem'),
          '--url',
          U('/widget-6.tgz'),
          '--file',
          evil,
          '--url',
          U('/widget-7.tgz'),
          '--file',
          real7,
          '--name',
          'acme/widget',
          '--semver',
          '6.0.0',
          '--license',
          'MIT',
        ),
      ).stdout.split(' ')[0],
    ),
  );
  const headIndex = attacker[1]!;

  await refused(
    ['key', 'compromise', '--chain', chain, '--good-through', String(headIndex + 1), '--new-key', at('C.pem'), '--out', at('c-far.json')],
    `vouch key compromise: good_through ${headIndex + 1} is beyond the head (the last block is ${headIndex}); no statement written`,
    1,
  );
  await refused(
    ['key', 'compromise', '--chain', chain, '--good-through', String(rotatedAt - 1), '--new-key', at('C.pem'), '--out', at('c-early.json')],
    `vouch key compromise: good_through ${rotatedAt - 1} is before the compromised key's first block ${rotatedAt}; no statement written`,
    1,
  );
  await refused(
    ['key', 'compromise', '--chain', chain, '--good-through', String(good), '--new-key', at('A.pem'), '--out', at('c-retired.json')],
    `vouch key compromise: the online key ${pubs.A} was retired earlier: a retired key never signs again; no statement written`,
    1,
  );
  assert.not.ok(existsSync(at('c-far.json')) || existsSync(at('c-early.json')) || existsSync(at('c-retired.json')));

  ok(await vouch('key', 'compromise', '--chain', chain, '--good-through', String(good), '--new-key', at('C.pem'), '--out', at('compromise.json')));
  const h1 = ok(await vouch('root', 'sign', '--key', at('H1.pem'), '--chain', chain, at('compromise.json')));
  assert.match(h1.stdout, /\nthe root \(version 1\): 1 of 2 needed\n?$/);
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('C.pem'), at('compromise.json')],
    "vouch root apply: the root (version 1) needs 2 of its 3 holders' signatures, the statement has 1; nothing appended",
    1,
  );
  await sign(at('compromise.json'), 'H3');
  const r = ok(await vouch('root', 'apply', '--chain', chain, '--key', at('C.pem'), at('compromise.json')));
  assert.match(r.stdout, new RegExp(`\\nvoid: blocks ${good + 1}-${headIndex} \\(re-endorse`));

  const v = ok(await vouch('verify', '--chain', chain));
  assert.is(
    v.stderr,
    `warning: void blocks ${good + 1}-${headIndex}: signed by ${pubs.B} after its last good block ${good}, declared compromised at block ${headIndex + 1}; ` +
      'kept as evidence, never selected (vouch reendorse endorses again what they endorsed)\n',
  );
  assert.match(
    v.stdout,
    new RegExp(
      `^ok: ${headIndex + 2} blocks, online key acme ${pubs.C!.replace(/[+/]/g, '\\$&')} since block ${headIndex + 1}, root v1 2-of-3, 3 key events, 2 void blocks`,
    ),
  );
  const j = JSON.parse(ok(await vouch('verify', '--chain', chain, '--json')).stdout);
  assert.equal(j.keys.voids, [{ from: good + 1, to: headIndex, compromised: pubs.B, declared_at: headIndex + 1 }]);
  assert.equal(j.keys.compromised, [pubs.B]);
  assert.equal(j.keys.retired, [pubs.A, pubs.B]);
  // the stolen key signs nothing more
  await refused(
    ['endorse', '--chain', chain, '--key', at('B.pem'), '--url', U('/widget-7.tgz'), '--name', 'acme/widget', '--semver', '7.0.0', '--license', 'MIT'],
    `vouch endorse: this key (${pubs.B}) was declared compromised; the online key in force is ${pubs.C} (since block ${headIndex + 1})`,
    2,
  );
});

test('reendorse --gateway: the void entries of the local clone submitted with their hashes as claims; the authority refuses the changed one, the rest is signed', async () => {
  // The authority here serves another chain (a gateway on a chain with key events is the writer side's): what is
  // tested is the client, against the real POST /v1/submit and its claim check.
  const dir = at('gw');
  const tokenFile = at('submit.token');
  writeFileSync(tokenFile, 'reendorse-token-' + 'k'.repeat(32) + '\n', { mode: 0o600 });
  const gw = await startGatewayProcess([
    '--config',
    writeConfig(dir, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: join(dir, 'chain') },
      authority: { key_file: at('D.pem'), signer: 'acme-gw', submit_token_file: tokenFile },
      origin: { allow_private: true, timeout: 5 },
    }),
  ]);
  try {
    const before = { head: head(), files: blockFiles() };
    const r = await vouch('reendorse', '--chain', chain, '--gateway', gw.url, '--token-file', tokenFile);
    assert.is(r.status, 1, r.stderr);
    const lines = r.stderr.trimEnd().split('\n');
    assert.is(lines.length, 2, r.stderr);
    assert.match(
      lines[0]!,
      new RegExp(
        `^refused: ${U('/widget-6.tgz').replace(/[.]/g, '\\.')} \\(void block ${attacker[1]}\\): its bytes now hash to sha256:[0-9a-f]{64}, the void block claimed sha256:[0-9a-f]{64} \\(possibly the attacker's\\): not endorsed$`,
      ),
    );
    assert.is(lines[1], 'vouch reendorse: 1 void entry was not re-endorsed (listed above)');
    // void block attacker[1]: refused whole by the authority (hash_mismatch), then widget-7 alone submitted again
    assert.match(
      r.stdout,
      new RegExp(
        `^1 [0-9a-f]{64} re-endorses 2 entries of void block ${attacker[0]}\\n2 [0-9a-f]{64} re-endorses 1 entry of void block ${attacker[1]}\\n` +
          '4 void entries: 3 re-endorsed, 0 already in force, 1 refused\\n$',
      ),
    );
    // the local clone is only read
    assert.equal({ head: head(), files: blockFiles() }, before);
    const served = JSON.parse(ok(await vouch('verify', '--chain', join(dir, 'chain'), '--json')).stdout);
    assert.is(served.blocks, 3);
    assert.ok(chainFile(join(dir, 'chain'), blockPath(2)).includes(U('/widget-7.tgz')));
    const text = chainFile(join(dir, 'chain'), blockPath(1));
    assert.ok(text.includes(U('/widget-4.tgz')) && text.includes(U('/widget-5.tgz')) && !text.includes(U('/widget-6.tgz')));
  } finally {
    await gw.stop();
  }
});

test('reendorse: the good void entries endorsed again (one block per void block), the changed one refused', async () => {
  const refusedLine = (r: Run) => r.stderr.split('\n').find((l) => l.startsWith('refused: '));
  const want = new RegExp(
    `^refused: ${U('/widget-6.tgz').replace(/[.]/g, '\\.')} \\(acme/widget 6\\.0\\.0, void block ${attacker[1]}\\): its bytes now hash to sha256:[0-9a-f]{64}, the void block claimed sha256:[0-9a-f]{64} \\(possibly the attacker's\\): not endorsed$`,
  );
  const before = { head: head(), files: blockFiles() };
  const dry = await vouch('reendorse', '--chain', chain, '--key', at('C.pem'), '--dry-run');
  assert.is(dry.status, 1, dry.stderr);
  assert.match(refusedLine(dry)!, want);
  assert.match(
    dry.stdout,
    new RegExp(`^would re-endorse 2 of 2 entries of void block ${attacker[0]}\\nwould re-endorse 1 of 2 entries of void block ${attacker[1]}\\n`),
  );
  assert.equal({ head: head(), files: blockFiles() }, before);

  await refused(
    ['reendorse', '--chain', chain, '--key', at('B.pem')],
    `vouch reendorse: this key (${pubs.B}) was declared compromised; the online key in force is ${pubs.C} (since block ${attacker[1]! + 1})`,
    2,
  );

  const r = await vouch('reendorse', '--chain', chain, '--key', at('C.pem'), '--json');
  assert.is(r.status, 1, r.stderr);
  const j = JSON.parse(r.stdout);
  assert.equal(
    j.blocks.map((b: { void_block: number; entries: number }) => [b.void_block, b.entries]),
    [
      [attacker[0], 2],
      [attacker[1], 1],
    ],
  );
  assert.is(j.refused.length, 1);
  assert.is(j.ok, false);
  assert.is(r.stderr.trimEnd().split('\n').at(-1), 'vouch reendorse: 1 void entry was not re-endorsed (listed above)');
  const block = parseBlockText(chainFile(chain, blockPath(j.blocks[0].index)), j.blocks[0].index);
  assert.equal(
    block.payload.endorsements.map((e) => e.artifact_url),
    [U('/widget-4.tgz'), U('/widget-5.tgz')],
  );
  assert.is(block.signer, 'acme');
  const second = parseBlockText(chainFile(chain, blockPath(j.blocks[1].index)), j.blocks[1].index);
  assert.equal(
    second.payload.endorsements.map((e) => [e.artifact_url, e.semver]),
    [[U('/widget-7.tgz'), '6.0.0']],
  );
  assert.is(second.comment, `re-endorsed from void block ${attacker[1]}: acme/widget 6.0.0`);
  ok(await vouch('verify', '--chain', chain));
  // run again: the good ones are in force already, the changed one still refused, nothing appended
  const again = await refused(
    ['reendorse', '--chain', chain, '--key', at('C.pem'), '--quiet'],
    'vouch reendorse: 1 void entry was not re-endorsed (listed above)',
    1,
  );
  assert.is(again.stdout, '');
  // the operator endorses the real widget 6.0.0: the attacker's void block is no semver_conflict (nor "unchanged")
  const real = await endorse('C', U('/widget-6.tgz'), '6.0.0');
  assert.is(real, (await size()) - 1);
});

test('root rotation 2-of-3 -> {H1, H2, H4}: needs 2 of the old root and 2 of the new', async () => {
  ok(
    await vouch(
      'root',
      'init',
      '--chain',
      chain,
      '--holder',
      pubs.H1!,
      '--holder',
      pubs.H2!,
      '--holder',
      at('H4.pem'),
      '--threshold',
      '2',
      '--out',
      at('root2.json'),
    ),
  );
  await sign(at('root2.json'), 'H1', 'H4');
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('C.pem'), at('root2.json')],
    "vouch root apply: the current root (version 1) needs 2 of its 3 holders' signatures, the statement has 1; nothing appended",
    1,
  );
  const h3 = ok(await vouch('root', 'sign', '--key', at('H3.pem'), '--chain', chain, at('root2.json')));
  assert.match(
    h3.stdout,
    /\nnew root \(version 2\): 2 of 2 needed \(met\); the current root's threshold is checked when applied \(1 signature\(s\) by keys outside the new root\)\ncurrent root \(version 1\): 2 of 2 needed \(met\)\n?$/,
  );
  const r = JSON.parse(ok(await vouch('root', 'apply', '--chain', chain, '--key', at('C.pem'), at('root2.json'), '--json')).stdout);
  assert.equal(r.root, { version: 2, threshold: 2, keys: [pubs.H1, pubs.H2, pubs.H4] });
  const v = JSON.parse(ok(await vouch('verify', '--chain', chain, '--json')).stdout);
  assert.is(v.keys.root.version, 2);
  assert.is(v.keys.events, 4);
  // a holder of the old root alone no longer counts
  ok(await vouch('key', 'rotate', '--chain', chain, '--new-key', at('D.pem'), '--out', at('rotate-d2.json')));
  await refused(
    ['root', 'sign', '--key', at('H3.pem'), '--chain', chain, at('rotate-d2.json')],
    `vouch root sign: ${pubs.H3} is not a key of the chain's root; the file is unchanged`,
    1,
  );
  await sign(at('rotate-d2.json'), 'H3', 'H1'); // without --chain, sign cannot know: apply refuses
  await refused(
    ['root', 'apply', '--chain', chain, '--key', at('D.pem'), at('rotate-d2.json')],
    `vouch root apply: signature by ${pubs.H3}, which is not a key of the root; nothing appended`,
    1,
  );
  assert.is(await size(), r.index + 1);
});

test.run();
