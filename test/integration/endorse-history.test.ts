/**
 * `vouch endorse` finds earlier endorsements from the last verified state
 * (tools/endorse-history.ts): with a gateway's snapshot and index image the
 * full scan of the block files is never called (a scan that throws proves
 * it) and the answers are the scan's, blocks appended after the image
 * included; a tampered or stale image or snapshot, or a block file that is
 * not the one the image holds, falls back to the scan with the same
 * answers; the CLI (single and the lockfile's history) takes the same path.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, cpSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { artifactHashOf, buildCheckpoint, buildEndorseBlock, formatBlockFile, formatCheckpointFile, utf8, type Block } from '../../chain/index.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { ChainRepo, blockPath } from '../../store/chain-repo.ts';
import { appendSigned, findEndorsements, trustedHead } from '../../store/chain-append.ts';
import { ChainState } from '../../gateway/chain/verified-state.ts';
import { priorEndorsements, refreshIfBehind, type History } from '../../tools/endorse-history.ts';
import { endorsementsOf } from '../../tools/lockfiles/history.ts';
import { buildLongChain, initChainRepo, T0, TEST_SEED } from '../helpers/chain-fixture.ts';
import { vouch, vouchAsync } from '../helpers/processes.ts';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash } from 'node:crypto';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { chainFile, forgeChainFiles } from '../helpers/chain-files.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-endorse-history-'));
const base = join(work, 'base');
test.after(() => rmSync(work, { recursive: true, force: true }));

const { blocks, signer } = buildLongChain(200);
const url = (i: number) => `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`;
const hashOf = (text: string) => artifactHashOf(nodeBackend, 'sha256', utf8(text));
const key = join(work, 'key.pem');
writeFileSync(key, privateKeyFromSeed(TEST_SEED).export({ format: 'pem', type: 'pkcs8' }) as string, { mode: 0o600 });

/** Appends one block endorsing `url` with `text`'s hash under `semver`. */
async function endorseIn(dir: string, u: string, text: string, semver: string): Promise<Block> {
  const repo = await ChainRepo.open(dir);
  const { head } = trustedHead(repo, signer);
  const now = T0 + (head.index + 1) * 1000;
  const block = buildEndorseBlock({
    prev: head,
    signer,
    backend: nodeBackend,
    now,
    uns: 'acme/again',
    semver,
    entries: [{ url: u, artifactHash: hashOf(text), name: 'acme/again', semver, license: 'MIT', comment: '' }],
  });
  await appendSigned(repo, [block], buildCheckpoint({ head: block, signer, now }), now);
  return block;
}

test.before(async () => {
  await initChainRepo(base, blocks, buildCheckpoint({ head: blocks[199]!, signer, now: T0 + 200 * 1000 }));
  await endorseIn(base, url(5), 'five again', '2.0.0'); // block 200: url(5) twice, both in the image
  const repo = await ChainRepo.open(base, { repair: false });
  await ChainState.load(repo); // the gateway's snapshot and index image of 201 blocks
  await endorseIn(base, url(7), 'seven again', '3.0.0'); // block 201: after the image (the gap)
  await endorseIn(base, 'https://b.example/new.tgz', 'new', '1.0.0'); // block 202
});

let copies = 0;
const copy = () => {
  const dir = join(work, `c${copies++}`);
  cpSync(base, dir, { recursive: true });
  return dir;
};
const URLS = [url(5), url(7), url(150), url(199), 'https://b.example/new.tgz', 'https://b.example/never.tgz'];
const noScan = (): History => {
  throw new Error('the full scan was called');
};
const plain = (h: History) => [...h].map(([u, list]) => [u, list.map((p) => [p.block.index, p.block.record_hash, p.artifactHash, p.semver])]);

async function history(dir: string, scan: typeof findEndorsements = findEndorsements) {
  const repo = await ChainRepo.open(dir, { repair: false });
  return priorEndorsements(repo, URLS, trustedHead(repo, signer).head, scan);
}
async function scanned(dir: string) {
  return plain(findEndorsements(await ChainRepo.open(dir, { repair: false }), URLS));
}

test("with a valid snapshot the scan is never called; the image and the gap give the scan's answers", async () => {
  const r = await history(base, noScan);
  assert.is(r.source, 'image');
  assert.is(r.scanned, 2, 'only blocks 201 and 202 (after the image) are read in full');
  assert.equal(plain(r.history), await scanned(base));
  assert.equal(
    r.history.get(url(5))!.map((p) => [p.block.index, p.semver]),
    [
      [5, '1.5.0'],
      [200, '2.0.0'],
    ],
  );
  assert.equal(
    r.history.get(url(7))!.map((p) => [p.block.index, p.semver]),
    [
      [7, '1.7.0'],
      [201, '3.0.0'],
    ],
    'the gap block is found',
  );
  assert.equal(r.history.get('https://b.example/never.tgz'), []);
  // The lockfile's scan gives the same answers.
  const repo = await ChainRepo.open(base, { repair: false });
  assert.equal(plain(priorEndorsements(repo, URLS, trustedHead(repo, signer).head, endorsementsOf).history), plain(endorsementsOf(repo, URLS)));
});

const fallsBack = async (dir: string, why: RegExp) => {
  const r = await history(dir);
  assert.is(r.source, 'scan');
  assert.match(r.why ?? '', why);
  assert.equal(plain(r.history), await scanned(dir));
  assert.equal(plain(r.history), plain((await history(base)).history), 'the same answers as from the image');
};

test('a tampered index image, a snapshot naming another sha256 or none, fall back to the scan', async () => {
  const a = copy();
  const img = readFileSync(join(a, '.git', 'vouch-index.bin'));
  img.writeUInt8(img.readUInt8(img.length - 20) ^ 1, img.length - 20);
  writeFileSync(join(a, '.git', 'vouch-index.bin'), img);
  await fallsBack(a, /no verified index image/);
  const b = copy();
  const snap = JSON.parse(readFileSync(join(b, '.git', 'vouch-snapshot.json'), 'utf8'));
  snap.image.sha256 = '0'.repeat(64);
  writeFileSync(join(b, '.git', 'vouch-snapshot.json'), JSON.stringify(snap));
  await fallsBack(b, /no verified index image/);
  const c = copy();
  unlinkSync(join(c, '.git', 'vouch-snapshot.json'));
  await fallsBack(c, /no verified index image/);
});

test('an image of another chain (its last block is not the file), or larger than the chain, falls back to the scan', async () => {
  // Another chain of the same authority: the same first 100 blocks, then others.
  const other = join(work, 'other');
  const alt: Block[] = blocks.slice(0, 100);
  for (let i = 100; i < 201; i++) {
    alt.push(
      buildEndorseBlock({
        prev: alt[i - 1]!,
        signer,
        backend: nodeBackend,
        now: T0 + i * 1000 + 1,
        entries: [{ url: url(i), artifactHash: hashOf(`other ${i}`), name: 'acme/other', semver: '1.0.0', license: 'MIT', comment: '' }],
      }),
    );
  }
  await initChainRepo(other, alt, buildCheckpoint({ head: alt[200]!, signer, now: T0 + 300 * 1000 }), { message: 'other\n' });
  await ChainState.load(await ChainRepo.open(other, { repair: false }));
  const d = copy();
  for (const f of ['vouch-snapshot.json', 'vouch-index.bin']) cpSync(join(other, '.git', f), join(d, '.git', f));
  await fallsBack(d, /is not the block the index image holds/);
  // The other chain's image on a chain shorter than it.
  const short = join(work, 'short');
  await initChainRepo(short, blocks.slice(0, 50), buildCheckpoint({ head: blocks[49]!, signer, now: T0 + 50 * 1000 }), { message: 'short\n' });
  for (const f of ['vouch-snapshot.json', 'vouch-index.bin']) cpSync(join(other, '.git', f), join(short, '.git', f));
  const r = await (async () => {
    const repo = await ChainRepo.open(short, { repair: false });
    return priorEndorsements(repo, URLS, trustedHead(repo, signer).head, findEndorsements);
  })();
  assert.is(r.source, 'scan');
  assert.match(r.why ?? '', /holds 201 blocks, the chain 50/);
});

test('a candidate block file that is not the verified block, or a gap block that does not link, falls back to the scan', async () => {
  const e = copy();
  // Block 150's file re-signed with other bytes: it still parses, but is not the block the image holds.
  const forged = buildEndorseBlock({
    prev: blocks[149]!,
    signer,
    backend: nodeBackend,
    now: T0 + 150 * 1000,
    entries: [{ url: url(150), artifactHash: hashOf('forged'), name: 'acme/pkg150', semver: '1.150.0', license: 'MIT', comment: '' }],
  });
  forgeChainFiles(e, { [blockPath(150)]: formatBlockFile(forged) });
  const r = await history(e);
  assert.is(r.source, 'scan');
  assert.match(r.why ?? '', /block 150's file is not the block the index image holds/);
  const f = copy();
  const gap = chainFile(f, blockPath(201));
  forgeChainFiles(f, { [blockPath(201)]: gap.replace('"3.0.0"', '"3.0.1"') });
  const r2 = await history(f);
  assert.is(r2.source, 'scan');
  assert.match(r2.why ?? '', /block 201's file does not hash to its record_hash/);
});

test('vouch endorse: unchanged and semver_conflict from the image (timings show it), a new block found by the next run', () => {
  const dir = copy();
  const file = join(work, 'seven.txt');
  writeFileSync(file, 'seven again');
  const run = (u: string, semver: string, f = file) =>
    vouch(['endorse', '--chain', dir, '--key', key, '--url', u, '--file', f, '--name', 'acme/again', '--semver', semver, '--license', 'MIT'], {
      VOUCH_TIMINGS: '1',
    });
  const same = run(url(7), '3.0.0');
  assert.is(same.status, 0, same.stderr);
  assert.match(same.stdout, /^unchanged: .* block 201 /);
  const conflict = run(url(5), '2.0.0');
  assert.is(conflict.status, 1);
  assert.match(conflict.stderr, /semver_conflict|already signed in block 200/);
  const posted = run('https://b.example/posted.tgz', '1.0.0');
  assert.is(posted.status, 0, posted.stderr);
  assert.match(posted.stderr, /history\(image,2\)/, posted.stderr);
  assert.match(posted.stdout, /^203 /);
  const again = run('https://b.example/posted.tgz', '1.0.0');
  assert.match(again.stdout, /^unchanged: .* block 203 /, again.stderr);
  const third = run('https://b.example/third.tgz', '1.0.0');
  assert.match(third.stderr, /history\(image,3\)/, 'the gap grew by the block appended');
  // Without the snapshot: the scan, the same answers.
  unlinkSync(join(dir, '.git', 'vouch-snapshot.json'));
  const scan = run('https://b.example/posted.tgz', '1.0.0');
  assert.match(scan.stdout, /^unchanged: .* block 203 /);
  assert.match(scan.stderr, /history\(scan,/, scan.stderr);
});

test('refreshIfBehind: once the gap reaches the limit, ChainState writes a new snapshot and image (warm: the gap verified); below it nothing', async () => {
  const dir = copy();
  const repo = await ChainRepo.open(dir, { repair: false });
  const head = trustedHead(repo, signer).head;
  const r = priorEndorsements(repo, URLS, head, noScan);
  assert.is(r.scanned, 2);
  const before = readFileSync(join(dir, '.git', 'vouch-snapshot.json'), 'utf8');
  assert.is(await refreshIfBehind(repo, r, 1, 4), false);
  assert.is(readFileSync(join(dir, '.git', 'vouch-snapshot.json'), 'utf8'), before, 'below the limit nothing is written');
  assert.is(await refreshIfBehind(repo, r, 1, 3), true);
  assert.is(JSON.parse(readFileSync(join(dir, '.git', 'vouch-snapshot.json'), 'utf8')).image.size, 203);
  const after = priorEndorsements(repo, URLS, head, noScan);
  assert.is(after.scanned, 0, 'the new image holds every block');
  assert.equal(plain(after.history), plain(r.history));
  // A gap block that does not verify (re-signed by another key, its record_hash recomputed) is never taken in.
  const bad = copy();
  const other = nodeSigner('vouch-test', privateKeyFromSeed(new Uint8Array(32).fill(7)));
  const forged = buildEndorseBlock({
    prev: JSON.parse(chainFile(bad, blockPath(200))) as Block,
    signer: other,
    backend: nodeBackend,
    now: T0 + 201 * 1000,
    entries: [{ url: url(7), artifactHash: hashOf('seven again'), name: 'acme/again', semver: '3.0.0', license: 'MIT', comment: '' }],
    uns: 'acme/again',
    semver: '3.0.0',
  });
  forgeChainFiles(bad, { [blockPath(201)]: formatBlockFile(forged) });
  const next = JSON.parse(chainFile(bad, blockPath(202)));
  next.prev_hash = forged.record_hash;
  const relinked = buildEndorseBlock({
    prev: forged,
    signer,
    backend: nodeBackend,
    now: T0 + 202 * 1000,
    entries: next.payload.endorsements.map((e: any) => ({
      url: e.artifact_url,
      artifactHash: e.artifact_hash,
      name: e.name,
      semver: e.semver,
      license: e.license,
      comment: e.comment,
    })),
    uns: next.payload.uns,
    semver: next.payload.semver,
  });
  forgeChainFiles(bad, { [blockPath(202)]: formatBlockFile(relinked) });
  writeFileSync(join(bad, 'checkpoint.json'), formatCheckpointFile(buildCheckpoint({ head: relinked, signer, now: T0 + 202 * 1000 })));
  const badRepo = await ChainRepo.open(bad, { repair: false });
  const br = priorEndorsements(badRepo, URLS, trustedHead(badRepo, signer).head, noScan);
  assert.is(br.source, 'image', "the links hold: the history is read (signatures are the verifier's)");
  const snapBefore = readFileSync(join(bad, '.git', 'vouch-snapshot.json'), 'utf8');
  assert.is(await refreshIfBehind(badRepo, br, 1, 1), false);
  assert.is(readFileSync(join(bad, '.git', 'vouch-snapshot.json'), 'utf8'), snapBefore, 'nothing unverified is written');
});

test('the CLI never scans with a usable image: a garbled old block file that a scan would trip on goes unread (single and --lockfile)', async () => {
  const dir = copy();
  // Block 100's file garbled, naming the URLs: findEndorsements and the lockfile's scan both throw malformed on it.
  const tarUrl = await new Promise<{ url: string; close: () => void; bytes: Buffer }>((resolve) => {
    const bytes = Buffer.from('lockfile tarball bytes');
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-length': bytes.length }).end(bytes);
    });
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/x/-/x-1.0.0.tgz`, close: () => server.close(), bytes }),
    );
  });
  const original100 = chainFile(dir, blockPath(100));
  try {
    forgeChainFiles(dir, { [blockPath(100)]: `{"garbled": ${JSON.stringify(url(7))}, ${JSON.stringify(tarUrl.url)}` });
    const file = join(work, 'seven2.txt');
    writeFileSync(file, 'seven again');
    const same = vouch([
      'endorse',
      '--chain',
      dir,
      '--key',
      key,
      '--url',
      url(7),
      '--file',
      file,
      '--name',
      'acme/again',
      '--semver',
      '3.0.0',
      '--license',
      'MIT',
    ]);
    assert.is(same.status, 0, same.stderr);
    assert.match(same.stdout, /^unchanged: .* block 201 /);
    const lock = join(work, 'package-lock.json');
    writeFileSync(
      lock,
      JSON.stringify({
        name: 'app',
        version: '1.0.0',
        lockfileVersion: 3,
        packages: {
          '': { name: 'app', version: '1.0.0' },
          'node_modules/x': {
            version: '1.0.0',
            license: 'MIT',
            resolved: tarUrl.url,
            integrity: `sha512-${createHash('sha512').update(tarUrl.bytes).digest('base64')}`,
          },
        },
      }),
    );
    const first = await vouchAsync(['endorse', '--chain', dir, '--key', key, '--lockfile', lock, '--json']);
    assert.is(first.status, 0, first.stderr + first.stdout);
    assert.is(JSON.parse(first.stdout).status, 'posted');
    // The note the append committed carries the Merkle root over every block's committed record_hash (from the image, not the garbled file).
    const committed = await ChainRepo.open(dir, { repair: false });
    const tree = new MerkleTree(nodeBackend);
    // Block 100 as the authority signed it (the garbled commit above stands in for a file damaged after the image was made).
    for (let i = 0; i < committed.size; i++)
      tree.append(Buffer.from(JSON.parse(i === 100 ? original100 : await committed.readBlockFromGit(i)).record_hash, 'hex'));
    const note = openCheckpoint(nodeBackend, readFileSync(join(dir, 'checkpoint.note'), 'utf8'), { publicKey: signer.publicKey }).checkpoint;
    assert.is(note.size, committed.size);
    assert.is(Buffer.from(note.root).toString('base64'), Buffer.from(tree.root()).toString('base64'));
    const again = await vouchAsync(['endorse', '--chain', dir, '--key', key, '--lockfile', lock, '--json']);
    assert.is(again.status, 0, again.stderr + again.stdout);
    assert.is(JSON.parse(again.stdout).unchanged, 1, 'the block the first run appended (after the image) is found');
    // Without the snapshot the scan reads the garbled file: proof the runs above did not.
    unlinkSync(join(dir, '.git', 'vouch-snapshot.json'));
    const scan = await vouchAsync(['endorse', '--chain', dir, '--key', key, '--lockfile', lock, '--json']);
    assert.is(scan.status, 1, scan.stderr + scan.stdout);
    assert.match(scan.stderr + scan.stdout, /malformed/);
  } finally {
    tarUrl.close();
  }
});

test.run();
