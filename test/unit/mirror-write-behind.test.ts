/**
 * The disk copy of verified bytes the memory tier keeps is written behind
 * their handing out (issue 36: the write held a cold pull's layer back
 * before its first byte went out).
 * Must hold: `putBytes` resolves with the bytes before their disk copy is
 * written; the mirror counts them as held meanwhile; bytes that left memory
 * before their copy was written are found on disk, not missed; `settled()`
 * and `close()` await the copies, which a new mirror over the same directory
 * reads back intact; a large copy this process verified is served from its
 * file without a read into memory first, unless its file changed since.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Mirror } from '../../artifacts/mirror.ts';

const MiB = 1024 * 1024;
const dir = mkdtempSync(join(tmpdir(), 'vouch-write-behind-'));

function artifact(size: number, seed: number): { bytes: Buffer; hash: string } {
  const bytes = Buffer.alloc(size);
  for (let i = 0; i < size; i += 4) bytes.writeUInt32LE((Math.imul(i, 2654435761) + seed) >>> 0, i);
  return { bytes, hash: `sha256:${createHash('sha256').update(bytes).digest('hex')}` };
}

/** What a mirror answered: its bytes in memory, or its file's. */
function bytesOf(hit: { bytes?: Buffer; path?: string }): Buffer {
  return hit.bytes ?? readFileSync(hit.path!);
}

test.after(() => rmSync(dir, { recursive: true, force: true }));

test('putBytes hands the bytes out before their disk copy is written; settled() and close() await it; a new mirror reads it back', async () => {
  const diskDir = join(dir, 'a');
  const mirror = new Mirror({ memoryBytes: 64 * MiB, diskDir });
  await mirror.ready;
  const a = artifact(24 * MiB, 1);
  const got = await mirror.putBytes(a.hash, a.bytes, 'application/octet-stream');
  assert.ok(bytesOf(got).equals(a.bytes));
  assert.is(mirror.stats().disk.entries, 0, 'not on disk yet: the write follows the handing out');
  assert.ok(mirror.has(a.hash));
  got.release();
  await mirror.settled();
  assert.is(mirror.stats().disk.entries, 1);
  assert.is(mirror.stats().diskWriteErrors, 0);
  const b = artifact(3 * MiB, 2);
  (await mirror.putBytes(b.hash, b.bytes, 'application/octet-stream')).release();
  await mirror.close(); // awaits b's copy
  const again = new Mirror({ memoryBytes: 64 * MiB, diskDir });
  for (const x of [a, b]) {
    const hit = await again.get(x.hash);
    assert.is(hit?.tier, 'disk', x.hash);
    assert.ok(bytesOf(hit!).equals(x.bytes));
    hit!.release();
  }
  await again.close();
});

test('bytes pushed out of memory before their copy is written are found on disk, not missed', async () => {
  const diskDir = join(dir, 'b');
  // Room in memory for one of these at a time: the second put evicts the first while its copy may still be written.
  const mirror = new Mirror({ memoryBytes: 12 * MiB, spoolThreshold: 8 * MiB, diskDir });
  await mirror.ready;
  const a = artifact(7 * MiB, 3);
  const b = artifact(7 * MiB, 4);
  (await mirror.putBytes(a.hash, a.bytes, 'application/octet-stream')).release();
  (await mirror.putBytes(b.hash, b.bytes, 'application/octet-stream')).release();
  const hit = await mirror.get(a.hash);
  assert.ok(hit !== null, 'a miss while the copy was being written');
  assert.ok(bytesOf(hit!).equals(a.bytes));
  hit!.release();
  assert.is(mirror.stats().misses, 0);
  await mirror.close();
});

test('a large file this process verified is served from the file at once; written over since, it is hashed again and refused', async () => {
  const diskDir = join(dir, 'c');
  const mirror = new Mirror({ memoryBytes: 12 * MiB, spoolThreshold: 8 * MiB, diskDir });
  await mirror.ready;
  const a = artifact(7 * MiB, 5);
  const b = artifact(7 * MiB, 6);
  (await mirror.putBytes(a.hash, a.bytes, 'application/octet-stream')).release();
  await mirror.settled();
  (await mirror.putBytes(b.hash, b.bytes, 'application/octet-stream')).release(); // pushes a out of memory
  await mirror.settled();
  const inFlight = mirror.stats().budget;
  const hit = await mirror.get(a.hash);
  assert.is(hit?.tier, 'disk');
  // Not read whole into memory before its first byte can go out (a 56 MiB layer waited for that read).
  assert.is(hit!.bytes, undefined);
  assert.ok(readFileSync(hit!.path!).equals(a.bytes));
  assert.equal(mirror.stats().budget, inFlight, 'nothing charged to the memory budget');
  hit!.release();
  // The same bytes' file written over (same length): its stamp changed, so it is hashed again, deleted and a miss.
  const wrong = artifact(7 * MiB, 7).bytes;
  writeFileSync(hit!.path!, wrong);
  assert.is(await mirror.get(a.hash), null);
  assert.is(mirror.stats().corrupt, 1);
  await mirror.close();
});

test.run();
