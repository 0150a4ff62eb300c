/**
 * The mirror and the verified fetcher against a real origin on 127.0.0.1:
 * verification before anything is cached or handed out, spooling of large
 * artifacts (heap stays flat), single flight and its cancellation rules,
 * the disk tier across restarts and its read-back check, LRU by bytes, and
 * no temp file left behind by any failure.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { isVouchError, type VouchError } from '../../chain/errors.ts';
import { statusOf } from '../../gateway/http/http-util.ts';
import { Mirror, type MirrorOptions } from '../../artifacts/mirror.ts';
import { OriginFetcher } from '../../artifacts/origin-fetcher.ts';
import { VerifiedFetcher } from '../../artifacts/verified-fetch.ts';
import { OriginServer, digestOf, pattern, patternBytes } from '../helpers/origin-server.ts';
import { until } from '../helpers/gateway-process.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const MiB = 1024 * 1024;
let origin: OriginServer;
let fetcher: OriginFetcher;
const dirs: string[] = [];

function tempDir(name: string): string {
  const d = mkdtempSync(join(tmpdir(), `vouch-${name}-`));
  dirs.push(d);
  return d;
}

function setup(mirrorOptions: MirrorOptions = {}, maxConcurrent?: number) {
  const spoolDir = mirrorOptions.spoolDir ?? tempDir('spool');
  const mirror = new Mirror({ memoryBytes: 4 * MiB, ...mirrorOptions, spoolDir });
  const vf = new VerifiedFetcher({ fetcher, mirror, ...(maxConcurrent ? { maxConcurrent } : {}) });
  return { mirror, vf, spoolDir };
}

function files(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => join(d.parentPath ?? d.path, d.name));
}

async function failure(p: Promise<unknown>): Promise<VouchError> {
  try {
    await p;
  } catch (e) {
    if (!isVouchError(e)) throw new Error(`expected a VouchError, got ${String(e)}`);
    return e;
  }
  throw new Error('expected a failure');
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error('expected a rejection');
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const c of createReadStream(path)) h.update(c as Buffer);
  return `sha256:${h.digest('hex')}`;
}

test.before(async () => {
  origin = await OriginServer.start();
  fetcher = new OriginFetcher({ timeoutMs: 10_000, connectTimeoutMs: 2_000, maxBytes: 128 * MiB, maxRedirects: 3 });
});

test.after(async () => {
  await fetcher.destroy();
  await origin.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test('a small artifact: verified from the origin, then served from memory', async () => {
  const { vf, mirror } = setup();
  const body = 'tarball bytes';
  origin.route('/small.tgz', { body, contentType: 'application/gzip', headers: { 'x-origin': 'o1' } });
  const hash = digestOf(body);
  const first = await vf.obtain(origin.url('/small.tgz'), hash);
  assert.is(first.source, 'origin');
  assert.is(first.artifact.bytes?.toString(), body);
  assert.is(first.artifact.contentType, 'application/gzip');
  assert.is(first.artifact.size, body.length);
  assert.is(first.artifact.artifactHash, hash);
  assert.is(first.originHeaders['x-origin'], 'o1');
  first.artifact.release();
  const second = await vf.obtain(origin.url('/small.tgz'), hash);
  assert.is(second.source, 'memory');
  assert.is(second.artifact.bytes?.toString(), body);
  assert.is(second.artifact.contentType, 'application/gzip');
  assert.is(origin.requests('/small.tgz'), 1);
  const s = mirror.stats();
  assert.is(s.hits.memory, 1);
  assert.is(s.misses, 1);
  assert.is(s.memory.entries, 1);
  assert.is(s.memory.bytes, body.length);
  assert.is(vf.stats().originFetches, 1);
});

test('every hash algorithm is checked with its own function', async () => {
  const { vf } = setup();
  origin.route('/algos', { body: 'algorithm test' });
  for (const alg of ['sha256', 'sha512', 'sha3-256', 'blake3'] as const) {
    const got = await vf.obtain(origin.url('/algos'), digestOf('algorithm test', alg));
    assert.is(got.artifact.bytes?.toString(), 'algorithm test', alg);
  }
  const e = await failure(vf.obtain(origin.url('/algos'), 'md5:abc'));
  assert.is(e.code, 'bad_artifact_hash');
});

test('tampered bytes -> hash_mismatch with evidence, nothing cached, the next obtain goes to the origin again', async () => {
  const { vf, mirror, spoolDir } = setup();
  origin.route('/tampered.tgz', { body: 'the real bytes', tamper: true });
  const signed = digestOf('the real bytes');
  const e = await failure(vf.obtain(origin.url('/tampered.tgz'), signed));
  assert.is(e.code, 'hash_mismatch');
  assert.is(statusOf(e), 409);
  assert.is(e.resource, origin.url('/tampered.tgz'));
  const tamperedBytes = Buffer.from('the real bytes');
  tamperedBytes[0] = tamperedBytes[0]! ^ 0xff;
  assert.equal(e.evidence, { expected: signed, actual: digestOf(tamperedBytes) });
  assert.not.ok(mirror.has(signed));
  assert.is((await failure(vf.obtain(origin.url('/tampered.tgz'), signed))).code, 'hash_mismatch');
  assert.is(origin.requests('/tampered.tgz'), 2);
  assert.is(vf.stats().mismatches, 2);
  assert.equal(files(spoolDir), []);
});

test('a large tampered artifact (spooled) -> hash_mismatch, spool file removed, nothing on disk', async () => {
  const diskDir = tempDir('disk');
  const { vf, mirror, spoolDir } = setup({ memoryBytes: 4 * MiB, diskDir, diskBytes: 100 * MiB });
  const p = pattern(6 * MiB, 7);
  origin.route('/big-tampered', { body: p, tamper: true });
  const e = await failure(vf.obtain(origin.url('/big-tampered'), digestOf(p)));
  assert.is(e.code, 'hash_mismatch');
  assert.equal(files(spoolDir), []);
  assert.equal(
    files(diskDir).filter((f) => !f.includes(`${join(diskDir, 'tmp')}`)),
    [],
  );
  assert.is(mirror.stats().disk.entries, 0);
});

test('origin failures come through with their codes and leave no temp file', async () => {
  const { vf, mirror, spoolDir } = setup({ memoryBytes: 4 * MiB }); // spool threshold 1 MiB
  const p = pattern(5 * MiB, 3);
  const h = digestOf(p);
  origin.route('/f-trunc', { body: p, truncate: 3 * MiB });
  origin.route('/f-reset', { body: p, reset: 2 * MiB });
  origin.route('/f-404', { status: 404 });
  origin.route('/f-chunked-trunc', { body: p, contentLength: 'none', truncate: 4 * MiB });
  for (const [path, code] of [
    ['/f-trunc', 'origin_error'],
    ['/f-reset', 'origin_error'],
    ['/f-404', 'origin_error'],
    ['/f-chunked-trunc', 'origin_error'],
  ] as const) {
    const e = await failure(vf.obtain(origin.url(path), h));
    assert.is(e.code, code, path);
    assert.equal(files(spoolDir), [], `no temp file after ${path}`);
  }
  const small = new OriginFetcher({ maxBytes: 2 * MiB, timeoutMs: 300 });
  try {
    const vf2 = new VerifiedFetcher({ fetcher: small, mirror });
    origin.route('/f-big-streamed', { body: p, contentLength: 'none' });
    assert.is((await failure(vf2.obtain(origin.url('/f-big-streamed'), h))).code, 'too_large');
    assert.is((await failure(vf2.obtain(origin.url('/f-trunc'), h))).code, 'too_large'); // declared
    origin.route('/f-stall', { body: p, contentLength: 'none', stall: MiB });
    assert.is((await failure(vf2.obtain(origin.url('/f-stall'), h))).code, 'origin_timeout');
    assert.equal(files(spoolDir), []);
  } finally {
    await small.destroy();
  }
  assert.not.ok(mirror.has(h));
});

test('64 MiB artifact: verified intact, served from a file, heap stays flat, file removed after release', async () => {
  const { vf, mirror, spoolDir } = setup({ memoryBytes: 32 * MiB }); // threshold 8 MiB, no disk tier
  const p = pattern(64 * MiB, 64);
  const hash = digestOf(p);
  origin.route('/huge.bin', { body: p });
  // Live memory, sampled with a full GC each time (garbage awaiting collection is not growth).
  gc();
  const base = process.memoryUsage();
  let peak = 0;
  const sampler = setInterval(() => {
    gc();
    const m = process.memoryUsage();
    peak = Math.max(peak, m.heapUsed + m.arrayBuffers - base.heapUsed - base.arrayBuffers);
  }, 5);
  const t0 = Date.now();
  // Cleared however obtain ends: a sampler left running would hold the file open for good.
  const got = await vf.obtain(origin.url('/huge.bin'), hash).finally(() => clearInterval(sampler));
  const ms = Date.now() - t0;
  gc();
  const after = process.memoryUsage();
  const retained = after.heapUsed + after.arrayBuffers - base.heapUsed - base.arrayBuffers;
  console.log(`  64 MiB obtained in ${ms} ms; live heap+buffers peak growth ${(peak / MiB).toFixed(1)} MiB, retained ${(retained / MiB).toFixed(1)} MiB`);
  assert.ok(peak < 16 * MiB, `peak live heap+buffers growth ${(peak / MiB).toFixed(1)} MiB`);
  assert.ok(retained < 4 * MiB, `retained ${(retained / MiB).toFixed(1)} MiB`);
  assert.is(got.source, 'origin');
  assert.is(got.artifact.bytes, undefined);
  assert.is(got.artifact.tier, 'spool');
  assert.is(got.artifact.size, 64 * MiB);
  const path = got.artifact.path!;
  assert.ok(path.startsWith(spoolDir));
  assert.is(statSync(path).size, 64 * MiB);
  assert.is(await sha256File(path), hash);
  assert.is(mirror.stats().spool.files, 1);
  const again = got.artifact.retain();
  got.artifact.release();
  got.artifact.release(); // idempotent
  assert.ok(existsSync(path), 'still held by the second reference');
  again.release();
  await until('the spool file removed after its last release', () => !existsSync(path), 5_000, 10);
  assert.equal(files(spoolDir), []);
  assert.is(mirror.stats().spool.files, 0);
});

test('50 concurrent obtains of one cold artifact -> exactly one origin request', async () => {
  const { vf } = setup();
  const body = patternBytes(pattern(300_000, 50));
  origin.route('/popular.tgz', { body, delayMs: 100 });
  const hash = digestOf(body);
  const all = await Promise.all(Array.from({ length: 50 }, () => vf.obtain(origin.url('/popular.tgz'), hash)));
  assert.is(origin.requests('/popular.tgz'), 1);
  for (const o of all) {
    assert.ok(o.artifact.bytes!.equals(body));
    assert.is(o.source, 'origin');
    o.artifact.release();
  }
  assert.is(vf.stats().joined, 49);
  assert.is(vf.stats().inflight, 0);
});

test('50 concurrent obtains of one cold large artifact share one spool file', async () => {
  const { vf, spoolDir } = setup({ memoryBytes: 4 * MiB });
  const p = pattern(3 * MiB, 51);
  origin.route('/popular-big', { body: p, delayMs: 50 });
  const all = await Promise.all(Array.from({ length: 50 }, () => vf.obtain(origin.url('/popular-big'), digestOf(p))));
  assert.is(origin.requests('/popular-big'), 1);
  const paths = new Set(all.map((o) => o.artifact.path));
  assert.is(paths.size, 1);
  const path = [...paths][0]!;
  for (const o of all.slice(1)) o.artifact.release();
  assert.ok(existsSync(path));
  all[0]!.artifact.release();
  await until('the spool file removed after its last release', () => files(spoolDir).length === 0, 5_000, 10);
});

test('aborting the only waiter cancels the origin request and removes the spool file', async () => {
  const { vf, spoolDir, mirror } = setup({ memoryBytes: 4 * MiB }); // threshold 1 MiB
  const p = pattern(20 * MiB, 9);
  origin.route('/lonely', { body: p, stall: 3 * MiB });
  const ac = new AbortController();
  const pending = vf.obtain(origin.url('/lonely'), digestOf(p), { signal: ac.signal });
  await origin.waitForRequests('/lonely');
  await until('spooling to begin', () => files(spoolDir).length > 0, 3_000, 10);
  assert.is(files(spoolDir).length, 1);
  const reason = new Error('client disconnected');
  ac.abort(reason);
  assert.is(await rejection(pending), reason);
  await origin.waitForClientClose('/lonely');
  // The fetch's cleanup (close, then unlink) ends before its slot is released; on a loaded machine it can outlast a fixed sleep.
  await until('the fetch slot released', () => vf.stats().active === 0, 5_000, 10);
  assert.is(vf.stats().active, 0);
  assert.equal(files(spoolDir), []);
  assert.is(vf.stats().inflight, 0);
  assert.not.ok(mirror.has(digestOf(p)));
});

test('aborting 1 of 2 waiters does not cancel the origin request', async () => {
  const { vf } = setup();
  const body = patternBytes(pattern(200_000, 12));
  origin.route('/shared', { body, trickle: { bytes: 50_000, everyMs: 60 } });
  const hash = digestOf(body);
  const impatient = new AbortController();
  const a = vf.obtain(origin.url('/shared'), hash, { signal: impatient.signal });
  const patient = new AbortController();
  const b = vf.obtain(origin.url('/shared'), hash, { signal: patient.signal });
  await origin.waitForRequests('/shared');
  impatient.abort(new Error('gone'));
  assert.is(((await rejection(a)) as Error).message, 'gone');
  const got = await b;
  assert.ok(got.artifact.bytes!.equals(body));
  assert.is(origin.requests('/shared'), 1);
  assert.is(origin.clientCloses('/shared'), 0);
  got.artifact.release();
});

test('a new caller after every waiter left starts a fresh fetch', async () => {
  const { vf } = setup();
  const body = 'second chance';
  origin.route('/retry', { body, delayMs: 150 });
  const ac = new AbortController();
  const a = vf.obtain(origin.url('/retry'), digestOf(body), { signal: ac.signal });
  await origin.waitForRequests('/retry');
  ac.abort(new Error('x'));
  await rejection(a);
  const b = await vf.obtain(origin.url('/retry'), digestOf(body));
  assert.is(b.artifact.bytes?.toString(), body);
  assert.is(origin.requests('/retry'), 2);
});

test('distinct origin fetches are bounded (excess waits)', async () => {
  const { vf } = setup({}, 2);
  const bodies = ['q1', 'q2', 'q3', 'q4', 'q5'];
  for (const b of bodies) origin.route(`/queue-${b}`, { body: b, delayMs: 150 });
  const all = bodies.map((b) => vf.obtain(origin.url(`/queue-${b}`), digestOf(b)));
  // Each origin answers after 150 ms: until then, two fetches run and three wait.
  await until('two fetches at the origin', () => bodies.reduce((n, b) => n + origin.requests(`/queue-${b}`), 0) >= 2, 5_000, 5);
  assert.is(vf.stats().active, 2);
  assert.is(vf.stats().queued, 3);
  assert.is(
    bodies.reduce((n, b) => n + origin.requests(`/queue-${b}`), 0),
    2,
  );
  const done = await Promise.all(all);
  assert.equal(
    done.map((d) => d.artifact.bytes!.toString()),
    bodies,
  );
  assert.is(vf.stats().active, 0);
});

test('a queued fetch whose waiters all left never reaches the origin', async () => {
  const { vf } = setup({}, 1);
  origin.route('/slot-holder', { body: 'h', delayMs: 200 });
  origin.route('/slot-waiter', { body: 'w' });
  const holder = vf.obtain(origin.url('/slot-holder'), digestOf('h'));
  const ac = new AbortController();
  const waiter = vf.obtain(origin.url('/slot-waiter'), digestOf('w'), { signal: ac.signal });
  await until('the second fetch queued', () => vf.stats().queued === 1, 5_000, 5);
  ac.abort(new Error('left'));
  await rejection(waiter);
  assert.is(vf.stats().queued, 0);
  await holder;
  assert.is(origin.requests('/slot-waiter'), 0);
});

test('disk tier: survives a new Mirror over the same dir (small and large), files at <alg>/<hex[0:2]>/<hex>', async () => {
  const diskDir = tempDir('disk');
  const small = 'kept on disk';
  const big = pattern(3 * MiB, 33);
  origin.route('/disk-small', { body: small, contentType: 'text/x-small' });
  origin.route('/disk-big', { body: big, contentType: 'application/x-big' });
  const hs = digestOf(small);
  const hb = digestOf(big);
  {
    const { vf, mirror } = setup({ memoryBytes: 4 * MiB, diskDir, diskBytes: 50 * MiB });
    (await vf.obtain(origin.url('/disk-small'), hs)).artifact.release();
    const b = await vf.obtain(origin.url('/disk-big'), hb);
    const hex = hb.slice('sha256:'.length);
    assert.is(b.artifact.path, join(diskDir, 'sha256', hex.slice(0, 2), hex));
    b.artifact.release();
    // The small one's disk copy is written behind its answer, once the memory tier is quiet.
    await mirror.settled();
    assert.is(mirror.stats().disk.entries, 2);
    assert.ok(existsSync(join(diskDir, 'sha256', hex.slice(0, 2), `${hex}.meta`)));
  }
  const { vf, mirror } = setup({ memoryBytes: 4 * MiB, diskDir, diskBytes: 50 * MiB });
  await mirror.ready;
  assert.is(mirror.stats().disk.entries, 2);
  assert.is(mirror.stats().disk.bytes, small.length + 3 * MiB);
  const s = await vf.obtain(origin.url('/disk-small'), hs);
  assert.is(s.source, 'disk');
  assert.is(s.artifact.bytes?.toString(), small);
  assert.is(s.artifact.contentType, 'text/x-small');
  const s2 = await vf.obtain(origin.url('/disk-small'), hs);
  assert.is(s2.source, 'memory', 'promoted to memory after the check');
  const b = await vf.obtain(origin.url('/disk-big'), hb);
  assert.is(b.source, 'disk');
  assert.is(b.artifact.contentType, 'application/x-big');
  assert.is(await sha256File(b.artifact.path!), hb);
  b.artifact.release();
  assert.is(origin.requests('/disk-small'), 1);
  assert.is(origin.requests('/disk-big'), 1);
  assert.is(mirror.stats().hits.disk, 2);
});

test('disk tier: a corrupted file is re-hashed, deleted and refetched; never served', async () => {
  const diskDir = tempDir('disk');
  const big = pattern(2 * MiB, 44);
  const small = 'small and corruptible';
  origin.route('/corrupt-big', { body: big });
  origin.route('/corrupt-small', { body: small });
  const hb = digestOf(big);
  const hs = digestOf(small);
  const pathOf = (h: string) => {
    const hex = h.slice(7);
    return join(diskDir, 'sha256', hex.slice(0, 2), hex);
  };
  {
    const { vf, mirror } = setup({ memoryBytes: 4 * MiB, diskDir });
    (await vf.obtain(origin.url('/corrupt-big'), hb)).artifact.release();
    (await vf.obtain(origin.url('/corrupt-small'), hs)).artifact.release();
    await mirror.settled(); // disk copies are written after the bytes are handed out
  }
  // Flip one byte in each file, keeping the size.
  for (const h of [hb, hs]) {
    const bytes = readFileSync(pathOf(h));
    bytes[100 % bytes.length] = bytes[100 % bytes.length]! ^ 1;
    writeFileSync(pathOf(h), bytes);
  }
  const { vf, mirror } = setup({ memoryBytes: 4 * MiB, diskDir });
  const b = await vf.obtain(origin.url('/corrupt-big'), hb);
  assert.is(b.source, 'origin');
  assert.is(await sha256File(b.artifact.path!), hb);
  b.artifact.release();
  const s = await vf.obtain(origin.url('/corrupt-small'), hs);
  assert.is(s.source, 'origin');
  assert.is(s.artifact.bytes?.toString(), small);
  assert.is(mirror.stats().corrupt, 2);
  assert.is(origin.requests('/corrupt-big'), 2);
  assert.is(origin.requests('/corrupt-small'), 2);
  // The refetched bytes replaced the corrupt files.
  await mirror.settled();
  assert.is(await sha256File(pathOf(hb)), hb);
  assert.is(await sha256File(pathOf(hs)), hs);
  // A mirror.get of a file corrupted under a running mirror is a miss too.
  writeFileSync(pathOf(hb), Buffer.alloc(2 * MiB));
  assert.is(await mirror.get(hb), null);
  await until('the corrupt file deleted', () => !existsSync(pathOf(hb)), 5_000, 10);
});

test('disk tier: incomplete entries are dropped at start, tmp is emptied', async () => {
  const diskDir = tempDir('disk');
  const hex = 'ab'.repeat(32);
  const { mkdirSync } = await import('node:fs');
  mkdirSync(join(diskDir, 'sha256', 'ab'), { recursive: true });
  mkdirSync(join(diskDir, 'tmp'), { recursive: true });
  writeFileSync(join(diskDir, 'sha256', 'ab', hex), 'no metadata');
  writeFileSync(join(diskDir, 'sha256', 'ab', `${'ab'.repeat(31)}cd.meta`), '{"contentType":"x","size":1}');
  writeFileSync(join(diskDir, 'tmp', 'spool-1-leftover.tmp'), 'crash leftovers');
  const mirror = new Mirror({ diskDir });
  await mirror.ready;
  assert.is(mirror.stats().disk.entries, 0);
  assert.equal(files(diskDir), []);
});

test('memory tier: LRU evicts by bytes', async () => {
  const mirror = new Mirror({ memoryBytes: 1000, spoolThreshold: 400 });
  const art = (n: number) => ({ bytes: Buffer.alloc(300, n), hash: `sha256:${createHash('sha256').update(Buffer.alloc(300, n)).digest('hex')}` });
  const [a, b, c, d] = [art(1), art(2), art(3), art(4)];
  for (const x of [a, b, c]) await mirror.putBytes(x.hash, x.bytes, 'application/octet-stream');
  assert.is(mirror.stats().memory.bytes, 900);
  assert.ok(await mirror.get(a.hash)); // a is now the most recent
  await mirror.putBytes(d.hash, d.bytes, 'application/octet-stream');
  assert.ok(mirror.has(a.hash));
  assert.not.ok(mirror.has(b.hash), 'b was least recently used');
  assert.ok(mirror.has(c.hash));
  assert.ok(mirror.has(d.hash));
  assert.is(mirror.stats().memory.bytes, 900);
  assert.is(mirror.stats().evictions.memory, 1);
  // Over the spool threshold: never kept in memory.
  const big = Buffer.alloc(500, 9);
  const bh = `sha256:${createHash('sha256').update(big).digest('hex')}`;
  await mirror.putBytes(bh, big, 'x');
  assert.not.ok(mirror.has(bh));
});

test('disk tier: LRU by bytes, and a file being read is not deleted under its reader', async () => {
  const diskDir = tempDir('disk');
  const spoolDir = tempDir('spool');
  const mirror = new Mirror({ memoryBytes: 0, diskDir, diskBytes: 1000, spoolDir });
  const put = async (n: number) => {
    const bytes = Buffer.alloc(300, n);
    const hash = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    const tmp = await mirror.newSpoolPath();
    writeFileSync(tmp, bytes);
    const a = await mirror.putFile(hash, tmp, 300, 'application/octet-stream');
    return { hash, a };
  };
  const e1 = await put(1);
  e1.a.release();
  const e2 = await put(2);
  e2.a.release();
  const e3 = await put(3);
  e3.a.release();
  const held = await mirror.get(e1.hash); // touch e1; keep a reader on it
  assert.ok(held?.path);
  const e4 = await put(4);
  e4.a.release();
  assert.not.ok(mirror.has(e2.hash), 'e2 was least recently used');
  assert.not.ok(existsSync(e2.a.path!));
  assert.ok(mirror.has(e1.hash));
  assert.is(mirror.stats().disk.bytes, 900);
  // Two more: e3 goes, then e1 — which is still being read.
  (await put(5)).a.release();
  (await put(6)).a.release();
  assert.not.ok(mirror.has(e1.hash));
  assert.ok(existsSync(held!.path!), 'still there for its reader');
  held!.release();
  await until('the evicted file deleted after its last release', () => !existsSync(held!.path!), 5_000, 10);
  assert.is(mirror.stats().disk.entries, 3);
  assert.ok(mirror.stats().evictions.disk >= 3);
  assert.equal(files(spoolDir), []);
});

test('disk tier on: an artifact larger than the disk tier is served from its spool file', async () => {
  const diskDir = tempDir('disk');
  const { vf, spoolDir, mirror } = setup({ memoryBytes: 4 * MiB, diskDir, diskBytes: 2 * MiB });
  const p = pattern(3 * MiB, 77);
  origin.route('/too-big-for-disk', { body: p });
  const got = await vf.obtain(origin.url('/too-big-for-disk'), digestOf(p));
  assert.is(got.artifact.tier, 'spool');
  assert.ok(got.artifact.path!.startsWith(spoolDir));
  assert.is(mirror.stats().disk.entries, 0);
  got.artifact.release();
  await until('the spool file removed after its release', () => files(spoolDir).length === 0, 5_000, 10);
});

test('default spool dir is private and removed by close()', async () => {
  const mirror = new Mirror({ memoryBytes: 1024 });
  const p = await mirror.newSpoolPath();
  writeFileSync(p, 'x');
  await mirror.close();
  assert.not.ok(existsSync(p));
});

test.run();
