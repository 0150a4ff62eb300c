/**
 * The disk copies of pooled (shared-memory) bytes are written by one worker
 * thread at nice 19 (artifacts/copy-writer.ts, issue 36: a cold pull's
 * copies compete less with its transfers), other bytes on the libuv pool.
 * Must hold: every copy reaches the disk tier intact either way (a new
 * mirror reads it back); the writing thread runs at nice 19 and is the only
 * one of the process that does, until `close()`; the worker refuses to
 * write into a file that exists (as `writeFile`'s `wx` did).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Mirror } from '../../artifacts/mirror.ts';
import { CopyWriter } from '../../artifacts/copy-writer.ts';

const MiB = 1024 * 1024;
const dir = mkdtempSync(join(tmpdir(), 'vouch-copy-writer-'));

function fill(bytes: Buffer, seed: number): string {
  for (let i = 0; i + 4 <= bytes.length; i += 4) bytes.writeUInt32LE((Math.imul(i, 2654435761) + seed) >>> 0, i);
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

/** The nice value of each thread of this process. */
function niceOfThreads(): number[] {
  return readdirSync('/proc/self/task').map((tid) => {
    const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
  });
}

test.after(() => rmSync(dir, { recursive: true, force: true }));

test('pooled bytes are copied to disk by a worker thread at nice 19, other bytes on the pool; a new mirror reads both back', async () => {
  const diskDir = join(dir, 'a');
  const mirror = new Mirror({ memoryBytes: 64 * MiB, diskDir });
  await mirror.ready;
  const pooled = mirror.buffer(6 * MiB + 123)!;
  assert.ok(pooled.buffer instanceof SharedArrayBuffer, 'a pooled buffer is shared memory');
  const pooledHash = fill(pooled, 1);
  const expected = Buffer.from(pooled);
  (await mirror.putBytes(pooledHash, pooled, 'application/octet-stream', {}, true)).release();
  const plain = Buffer.alloc(2 * MiB + 5);
  const plainHash = fill(plain, 2);
  (await mirror.putBytes(plainHash, plain, 'application/octet-stream')).release();
  await mirror.settled();
  const s = mirror.stats();
  assert.equal(s.copies, { worker: 1, pool: 1, nice: 19 });
  assert.is(s.diskWriteErrors, 0);
  assert.is(niceOfThreads().filter((n) => n === 19).length, 1, 'one thread (the copy worker) runs at nice 19');
  await mirror.close();
  assert.is(niceOfThreads().filter((n) => n === 19).length, 0, 'close() stops the copy worker');
  const again = new Mirror({ memoryBytes: 64 * MiB, diskDir });
  for (const [hash, bytes] of [
    [pooledHash, expected],
    [plainHash, plain],
  ] as const) {
    const hit = await again.get(hash);
    assert.is(hit?.tier, 'disk', hash);
    assert.ok((hit!.bytes ?? readFileSync(hit!.path!)).equals(bytes), hash);
    hit!.release();
  }
  await again.close();
});

test('a copy into a file that exists is refused by the worker (wx) and leaves that file alone', async () => {
  const writer = new CopyWriter();
  const sab = new SharedArrayBuffer(MiB);
  const bytes = Buffer.from(sab, 0, MiB);
  bytes.fill(7);
  const target = join(dir, 'exists');
  writeFileSync(target, 'keep');
  const err = await writer.write(target, bytes).then(
    () => null,
    (e: unknown) => e as Error,
  );
  assert.ok(err !== null && /EEXIST/.test(err.message), String(err));
  assert.is(readFileSync(target, 'utf8'), 'keep');
  const fresh = join(dir, 'fresh');
  await writer.write(fresh, bytes);
  assert.ok(readFileSync(fresh).equals(bytes));
  assert.equal(writer.stats(), { worker: 1, pool: 0, nice: 19 });
  await writer.close();
});

test.run();
