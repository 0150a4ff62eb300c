/**
 * The disk copy of verified bytes the memory tier keeps is written behind
 * their handing out (issue 36: the write held a cold pull's layer back
 * before its first byte went out).
 * Must hold: `putBytes` resolves with the bytes before their disk copy is
 * written; the mirror counts them as held meanwhile; bytes that left memory
 * before their copy was written are found on disk, not missed; `settled()`
 * and `close()` await the copies, which a new mirror over the same directory
 * reads back intact; a large copy this process verified is served from its
 * file without a read into memory first, unless its file changed since; a
 * copy waits until the memory tier is quiet: no response reads bytes from
 * memory, no body is being received into it (WRITE_BEHIND_MAX_MS at most).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Mirror, WRITE_BEHIND_MAX_MS } from '../../artifacts/mirror.ts';

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

test('the disk copy waits behind the readers of the moment: written once they released the bytes, after WRITE_BEHIND_MAX_MS at the latest, at once when settled() asks', async () => {
  const mirror = new Mirror({ memoryBytes: 64 * MiB, diskDir: join(dir, 'd') });
  await mirror.ready;
  const entries = () => mirror.stats().disk.entries;
  const until = async (n: number, ms: number) => {
    for (const t0 = Date.now(); entries() < n && Date.now() - t0 < ms; ) await new Promise((r) => setTimeout(r, 10));
  };
  // A response still sending the bytes: no copying beside it.
  const a = artifact(4 * MiB, 8);
  const got = await mirror.putBytes(a.hash, a.bytes, 'application/octet-stream');
  const sending = got.retain();
  got.release();
  await new Promise((r) => setTimeout(r, 300));
  assert.is(entries(), 0, 'the copy was written while a response still read the bytes');
  sending.release(); // the response is done: the copy goes now, without settled()
  await until(1, 1000);
  assert.is(entries(), 1);
  // A reader that holds on: the copy goes after WRITE_BEHIND_MAX_MS anyway.
  const b = artifact(2 * MiB, 9);
  const t0 = Date.now();
  const slow = await mirror.putBytes(b.hash, b.bytes, 'application/octet-stream');
  await until(2, WRITE_BEHIND_MAX_MS + 3000);
  assert.is(entries(), 2);
  assert.ok(Date.now() - t0 >= WRITE_BEHIND_MAX_MS - 50, `written after ${Date.now() - t0} ms`);
  slow.release();
  // settled() (and close()) start a waiting copy at once.
  const c = artifact(2 * MiB, 10);
  const held = await mirror.putBytes(c.hash, c.bytes, 'application/octet-stream');
  const t1 = Date.now();
  await mirror.settled();
  assert.is(entries(), 3);
  assert.ok(Date.now() - t1 < WRITE_BEHIND_MAX_MS, 'settled() waited for the reader');
  held.release();
  await mirror.close();
});

test('bytes pushed out of memory while a response still reads them: a get() starts their waiting copy, it does not wait behind the reader', async () => {
  const mirror = new Mirror({ memoryBytes: 12 * MiB, spoolThreshold: 8 * MiB, diskDir: join(dir, 'e') });
  await mirror.ready;
  const a = artifact(7 * MiB, 11);
  const b = artifact(7 * MiB, 12);
  const sending = await mirror.putBytes(a.hash, a.bytes, 'application/octet-stream');
  (await mirror.putBytes(b.hash, b.bytes, 'application/octet-stream')).release(); // pushes a out of memory
  const t0 = Date.now();
  const hit = await mirror.get(a.hash);
  assert.ok(Date.now() - t0 < WRITE_BEHIND_MAX_MS, `get() waited ${Date.now() - t0} ms`);
  assert.ok(hit !== null && bytesOf(hit).equals(a.bytes));
  hit!.release();
  sending.release();
  await mirror.close();
});

test('the disk copy waits behind the memory traffic of the moment, not only its own readers: another artifact being sent, a body being received', async () => {
  const mirror = new Mirror({ memoryBytes: 64 * MiB, diskDir: join(dir, 'f') });
  await mirror.ready;
  const entries = () => mirror.stats().disk.entries;
  // A pull's other layer still going out to its client, and its next layer still arriving into a pooled buffer.
  const other = artifact(4 * MiB, 13);
  const sending = await mirror.putBytes(other.hash, other.bytes, 'application/octet-stream');
  const receiving = mirror.buffer(4 * MiB);
  assert.ok(receiving !== null);
  // This layer's own response is done at once: nothing of it is read any more.
  const a = artifact(4 * MiB, 14);
  (await mirror.putBytes(a.hash, a.bytes, 'application/octet-stream')).release();
  await new Promise((r) => setTimeout(r, 500));
  assert.is(entries(), 0, 'a copy was written beside the transfers (it competes with them for the cores)');
  sending.release();
  await new Promise((r) => setTimeout(r, 200));
  assert.is(entries(), 0, 'a copy was written while a body was still being received into memory');
  const t0 = Date.now();
  mirror.giveBack(receiving!); // the transfer ended (here: failed); the memory tier is quiet
  for (; entries() < 2 && Date.now() - t0 < 1500; ) await new Promise((r) => setTimeout(r, 10));
  assert.is(entries(), 2, 'both copies written once the tier was quiet');
  assert.is(mirror.stats().diskWriteErrors, 0);
  await mirror.close();
});

test.run();
