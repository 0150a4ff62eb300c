/**
 * store/git-pack-index.ts PackReceiver: a pack indexed as it arrives, written
 * to a temporary file under `objects/pack`, read back from the file (not
 * held) through a small cache; named only once whole; removed on failure.
 * Checked against `git index-pack` (the `.idx`, byte for byte) and
 * `git verify-pack`.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { deflateSync } from 'node:zlib';
import { buildCheckpoint } from '../../chain/build.ts';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { VouchError } from '../../chain/errors.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { commitFor } from '../../store/chain-append.ts';
import { buildLongChain, testSigner, T0 } from '../helpers/chain-fixture.ts';
import { GitServer } from '../helpers/git-server.ts';
import { objectId } from '../../store/git-objects.ts';
import { OFS_DELTA, REF_DELTA, encodeObjectHeader } from '../../store/git-pack.ts';
import { PackReceiver } from '../../store/git-pack-index.ts';
import { makeDelta } from '../../store/git-pack-writer.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const work = mkdtempSync(join(tmpdir(), 'vouch-pack-rx-'));
let seq = 0;
const fresh = () => join(work, `d${seq++}`, 'objects', 'pack');

function ofsDistance(n: number): Buffer {
  const out = [n & 0x7f];
  while ((n = Math.floor(n / 128)) > 0) out.unshift(0x80 | (--n & 0x7f));
  return Buffer.from(out);
}

/**
 * A pack of `n` blobs (~1.5 KiB each, distinct): every third an OFS_DELTA on
 * the blob before it, every seventh a REF_DELTA on the *next* blob (a base
 * later in the pack); returns the pack and the ids of every object.
 */
function testPack(n: number): { pack: Buffer; oids: string[] } {
  const bodies = Array.from({ length: n }, (_, i) => Buffer.from(`{"index":${i},"text":"${`block ${i} `.repeat(150)}"}\n`));
  const parts: Buffer[] = [Buffer.from('PACK\0\0\0\x02\0\0\0\0', 'latin1')];
  parts[0]!.writeUInt32BE(n, 8);
  let offset = 12;
  let prevAt = -1;
  const order = Array.from({ length: n }, (_, i) => i);
  for (const i of order) {
    const body = bodies[i]!;
    let entry: Buffer;
    const deltaPrev = i % 3 === 2 ? makeDelta(bodies[i - 1]!, body) : null;
    const deltaNext = i % 7 === 5 && i + 1 < n ? makeDelta(bodies[i + 1]!, body) : null;
    if (deltaPrev) entry = Buffer.concat([encodeObjectHeader(OFS_DELTA, deltaPrev.length), ofsDistance(offset - prevAt), deflateSync(deltaPrev)]);
    else if (deltaNext)
      entry = Buffer.concat([encodeObjectHeader(REF_DELTA, deltaNext.length), Buffer.from(objectId('blob', bodies[i + 1]!), 'hex'), deflateSync(deltaNext)]);
    else entry = Buffer.concat([encodeObjectHeader(3, body.length), deflateSync(body)]);
    parts.push(entry);
    prevAt = offset;
    offset += entry.length;
  }
  const body = Buffer.concat(parts);
  return { pack: Buffer.concat([body, createHash('sha1').update(body).digest()]), oids: bodies.map((b) => objectId('blob', b)) };
}

/** Feed `pack` in pieces of varying sizes (1 byte to 70 KiB). */
function feed(rx: PackReceiver, pack: Buffer): void {
  const sizes = [1, 7, 64, 1000, 70_000, 3, 65_515];
  for (let at = 0, i = 0; at < pack.length; i++) {
    const n = sizes[i % sizes.length]!;
    rx.push(pack.subarray(at, at + n));
    at += n;
  }
}

const tmps = (dir: string) => readdirSync(dir).filter((f) => f.startsWith('tmp_'));

test('a pack streamed in odd pieces with a 16 KiB cache: every object resolves from the file, the .idx is what git index-pack writes', async () => {
  const { pack, oids } = testPack(3000);
  const dir = fresh();
  const rx = new PackReceiver(dir, 16 << 10); // far smaller than the pack (~2 MiB): bases are read back with pread
  feed(rx, pack);
  const p = await rx.finish();
  assert.is(p.count, 3000);
  assert.is(p.unique, 3000);
  assert.not.ok(p.thin);
  assert.is(p.checksum, pack.toString('hex', pack.length - 20));
  for (const oid of [oids[0]!, oids[2]!, oids[5]!, oids[6]!, oids[2999]!, oids[1234]!]) {
    const o = p.get(oid)!;
    assert.ok(o, oid);
    assert.is(o.type, 'blob');
    assert.is(objectId('blob', o.body), oid);
  }
  assert.ok(p.keep(dir));
  const name = `pack-${p.checksum}`;
  assert.equal(readFileSync(join(dir, `${name}.pack`)), pack, 'the file holds exactly the bytes received');
  assert.equal(tmps(dir), []);
  const gitIdx = join(work, `git-${seq++}.idx`);
  const r = spawnSync('git', ['index-pack', '-o', gitIdx, join(dir, `${name}.pack`)], { encoding: 'utf8' });
  assert.is(r.status, 0, r.stderr);
  assert.equal(p.idxFile(), readFileSync(gitIdx), 'the .idx is byte for byte git index-pack');
  p.close();
});

for (const [what, cut, expect] of [
  ['cut in the middle', (b: Buffer) => b.subarray(0, b.length >> 1), /bad pack: truncated/],
  ['cut inside the trailer', (b: Buffer) => b.subarray(0, b.length - 5), /bad pack: truncated/],
  [
    'a wrong trailer',
    (b: Buffer) => {
      const c = Buffer.from(b);
      c[c.length - 1]! ^= 1;
      return c;
    },
    /bad pack: checksum mismatch/,
  ],
  [
    'a flipped byte inside an object',
    (b: Buffer) => {
      const c = Buffer.from(b);
      c[c.length >> 1]! ^= 0x40;
      return c;
    },
    /bad pack: /,
  ],
  ['bytes after the trailer', (b: Buffer) => Buffer.concat([b, Buffer.from('junk')]), /bad pack: trailing bytes/],
] as const) {
  test(`a pack with ${what} is refused and abort() leaves no file`, async () => {
    const { pack } = testPack(400);
    const dir = fresh();
    const rx = new PackReceiver(dir, 16 << 10);
    let err: unknown = null;
    try {
      feed(rx, cut(pack));
      await rx.finish();
    } catch (e) {
      err = e;
      rx.abort();
    }
    assert.ok(err instanceof VouchError, String(err));
    assert.match((err as VouchError).message, expect);
    assert.equal(readdirSync(dir), [], 'nothing left in objects/pack');
  });
}

/** Two full collections a turn apart: garbage whose finalizers ran in the first (streams, handles) goes in the second. */
async function settledHeap(): Promise<void> {
  gc();
  await new Promise((r) => setImmediate(r));
  gc();
}

test('memory per object: the index of 200,000 objects holds < 64 bytes each (FETCH_LIMITS.objects: < 128 MiB), nothing per object on the heap', async () => {
  const n = 200_000;
  const parts: Buffer[] = [Buffer.from('PACK\0\0\0\x02\0\0\0\0', 'latin1')];
  parts[0]!.writeUInt32BE(n, 8);
  // Distinct objects (empty blobs would all be one id), stored uncompressed.
  for (let i = 0; i < n; i++) {
    const b = Buffer.from(i.toString(36));
    parts.push(Buffer.concat([encodeObjectHeader(3, b.length), deflateSync(b, { level: 0 })]));
  }
  const body = Buffer.concat(parts);
  const pack = Buffer.concat([body, createHash('sha1').update(body).digest()]);
  const dir = fresh();
  await settledHeap();
  const before = process.memoryUsage();
  const rx = new PackReceiver(dir, 1 << 20);
  for (let at = 0; at < pack.length; at += 65_515) rx.push(pack.subarray(at, at + 65_515));
  const p = await rx.finish();
  await settledHeap();
  const after = process.memoryUsage();
  const held = after.heapUsed - before.heapUsed + (after.arrayBuffers - before.arrayBuffers);
  assert.is(p.unique, n);
  // The 1 MiB cache is full of small bodies: count it out (its entries cost CACHE_ENTRY_COST each, by design).
  const perObject = (held - (1 << 20)) / n;
  assert.ok(perObject < 64, `${perObject.toFixed(1)} bytes per object`);
  assert.ok(statSync(p.path).size === pack.length);
  p.discard();
  p.close();
  assert.equal(readdirSync(dir), []);
});

test('a clone over git http-backend: the pack lands in objects/pack as pack-<sum>.pack + .idx (git verify-pack agrees), no temporary file (failures: test/hostile/hostile-remote.test.ts)', async () => {
  const root = join(work, `srv-${seq++}`);
  mkdirSync(root, { recursive: true });
  const server = await GitServer.start(root);
  try {
    server.initBare('chain.git');
    const blocks = buildLongChain(300).blocks;
    const authority = join(work, `authority-${seq++}`);
    await ChainRepo.init(
      authority,
      blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
      formatCheckpointFile(buildCheckpoint({ head: blocks[blocks.length - 1]!, signer: testSigner(), now: T0 + 40_000 })),
      commitFor([blocks[0]!], T0),
    );
    // Asynchronously: the git server answers from this process's event loop.
    await promisify(execFile)('git', ['-C', authority, 'push', '-q', server.url('chain.git'), 'main']);
    const dir = join(work, `mirror-${seq++}`);
    const repo = await ChainRepo.clone(server.url('chain.git'), dir);
    assert.is(repo.size, 300);
    const packDir = join(dir, '.git', 'objects', 'pack');
    const names = readdirSync(packDir).sort();
    assert.is(names.length, 2, names.join(' '));
    assert.match(names[0]!, /^pack-[0-9a-f]{40}\.idx$/);
    assert.is(names[1], names[0]!.replace(/\.idx$/, '.pack'));
    const v = spawnSync('git', ['verify-pack', join(packDir, names[0]!)], { encoding: 'utf8' });
    assert.is(v.status, 0, v.stderr);
    repo.dropFetched();
  } finally {
    await server.stop();
  }
});

test.after(() => rmSync(work, { recursive: true, force: true }));
test.run();
