/**
 * Large memory-tier artifacts: received into recycled shared buffers
 * (`BytePool`) while hash workers (`HashWorkers`) hash them.
 *
 * Checks: size classes; reuse and the bound of the free lists; `booted()`; digests from
 * the workers equal node:crypto's for every algorithm and any chunking; a
 * busy pool answers null (the caller hashes); abandoned and dead workers;
 * through the verified fetcher against a real origin: the pooled path
 * verifies, refuses tampered and cut-short bodies and gives their buffers
 * back; a buffer held by a reader is never recycled under it, however many
 * artifacts pass through the tier meanwhile; and through a real gateway
 * process, a slow client keeps receiving the right bytes while the artifact
 * it reads is evicted and other downloads recycle buffers.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash, randomBytes } from 'node:crypto';
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { isVouchError } from '../../chain/errors.ts';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { createKeyFile } from '../../platform/key-file.ts';
import { BytePool, sizeClass } from '../../artifacts/byte-pool.ts';
import { HashWorkers, NOTIFY_STEP } from '../../artifacts/hash-workers.ts';
import { SLEEPING } from '../../artifacts/hash-worker.ts';
import { Mirror } from '../../artifacts/mirror.ts';
import { OriginFetcher } from '../../artifacts/origin-fetcher.ts';
import { VerifiedFetcher } from '../../artifacts/verified-fetch.ts';
import { OriginServer, digestOf, pattern, patternBytes } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const MiB = 1024 * 1024;
const work = mkdtempSync(join(tmpdir(), 'vouch-pool-'));
let origin: OriginServer;
let fetcher: OriginFetcher;
const workers = new HashWorkers(2);

test.before(async () => {
  origin = await OriginServer.start();
  fetcher = new OriginFetcher({ timeoutMs: 10_000 });
  await workers.warm();
});

test.after(async () => {
  await workers.close();
  await fetcher.close();
  await origin.close();
  rmSync(work, { recursive: true, force: true });
});

async function rejects(p: Promise<unknown>, re: RegExp): Promise<void> {
  const e = await p.then(
    () => null,
    (x: unknown) => x,
  );
  assert.ok(e instanceof Error && re.test(e.message), `expected a rejection matching ${re}, got ${String(e)}`);
}

function hex(alg: HashAlgorithm, bytes: Uint8Array): string {
  const h = nodeBackend.createHash(alg);
  h.update(bytes);
  return Buffer.from(h.digest()).toString('hex');
}

// ---------------------------------------------------------------------------- BytePool

test('booted(): resolves once every worker listens; each then takes a job at once and answers its digest', async () => {
  const fresh = new HashWorkers(2);
  try {
    await fresh.booted();
    assert.is(fresh.workers, 2);
    const bufs = [0, 1].map((i) => {
      const b = Buffer.from(new SharedArrayBuffer(64 * 1024));
      b.fill(i + 1);
      return b;
    });
    const jobs = bufs.map((b) => fresh.start('sha256', b));
    assert.ok(
      jobs.every((j) => j !== null),
      'both workers idle and listening',
    );
    for (const [i, j] of jobs.entries()) {
      j!.advance(bufs[i]!.length);
      assert.is(Buffer.from(await j!.finish()).toString('hex'), createHash('sha256').update(bufs[i]!).digest('hex'));
    }
  } finally {
    await fresh.close();
  }
});

test('size classes: never smaller than asked, at most 25 % slack above 64 KiB, monotone', () => {
  let prev = 0;
  for (let size = 1; size < 300 * MiB; size = Math.ceil(size * 1.07) + 1) {
    const c = sizeClass(size);
    assert.ok(c >= size, `class of ${size}`);
    assert.ok(c >= prev, `monotone at ${size}`);
    if (size > 64 * 1024) assert.ok(c <= size * 1.25 + 1, `slack at ${size}: ${c}`);
    prev = c;
  }
  for (const exact of [MiB, 16 * MiB, 20 * MiB, 24 * MiB, 28 * MiB, 64 * MiB]) assert.is(sizeClass(exact), exact);
});

test('the pool hands a given-back buffer out again, bounded by maxFreeBytes', () => {
  const pool = new BytePool(4 * MiB);
  const a = pool.take(3 * MiB);
  assert.is(a.length, 3 * MiB);
  assert.ok(a.buffer instanceof SharedArrayBuffer);
  assert.is(BytePool.capacity(a), 3 * MiB);
  const b = pool.take(3 * MiB - 5); // same class
  assert.is.not(b.buffer, a.buffer);
  pool.give(a);
  assert.is(pool.stats().freeBytes, 3 * MiB);
  pool.give(b); // 6 MiB would be over the bound: dropped
  assert.equal(pool.stats(), { reused: 0, allocated: 2, dropped: 1, freeBytes: 3 * MiB });
  const c = pool.take(3 * MiB - 100);
  assert.is(c.buffer, a.buffer, 'the free buffer of that class is reused');
  assert.is(c.length, 3 * MiB - 100);
  const d = pool.take(3 * MiB);
  assert.is.not(d.buffer, a.buffer, 'a buffer in use is never handed out twice');
  assert.is(pool.stats().reused, 1);
  assert.throws(() => pool.give(Buffer.alloc(MiB)), /not a buffer of this pool/);
  assert.throws(() => pool.give(c.subarray(1)), /not a buffer of this pool/);
  const none = new BytePool(0);
  none.give(none.take(MiB));
  assert.is(none.stats().freeBytes, 0);
});

// ---------------------------------------------------------------------------- HashWorkers

test('worker digests equal node:crypto for every algorithm and any chunking', async () => {
  for (const alg of ['sha256', 'sha512', 'sha3-256', 'blake3'] as HashAlgorithm[]) {
    const data = randomBytes(3 * MiB + 17);
    const buf = new BytePool(0).take(data.length);
    const job = workers.start(alg, buf);
    assert.ok(job !== null, 'an idle worker takes the job');
    let at = 0;
    while (at < data.length) {
      const n = Math.min(data.length - at, 1 + Math.floor(Math.random() * 200_000));
      data.copy(buf, at, at, at + n);
      at += n;
      job!.advance(at);
      if (Math.random() < 0.1) await new Promise((r) => setImmediate(r)); // let the worker catch up and sleep sometimes
    }
    const digest = await job!.finish();
    assert.is(Buffer.from(digest).toString('hex'), hex(alg, data), alg);
  }
});

test('a sleeping worker is woken once per NOTIFY_STEP of bytes, not per socket read; the digest still covers every byte', async () => {
  const data = randomBytes(8 * MiB);
  const buf = new BytePool(0).take(data.length);
  const job = workers.start('sha256', buf)!;
  const sleeping = () => Atomics.load(job.controlWords, SLEEPING) === 1n;
  let reads = 0;
  for (let at = 0; at < data.length; reads++) {
    // 64 KiB reads, each after the worker went to sleep again (as on a socket slower than hashing).
    for (const t0 = Date.now(); !sleeping() && Date.now() - t0 < 1000; ) await new Promise((r) => setImmediate(r));
    const n = Math.min(64 * 1024, data.length - at);
    data.copy(buf, at, at, at + n);
    at += n;
    job.advance(at);
  }
  assert.is(Buffer.from(await job.finish()).toString('hex'), hex('sha256', data));
  assert.is(reads, 128);
  assert.ok(job.wakeUps <= data.length / NOTIFY_STEP, `woken ${job.wakeUps} times for ${reads} reads`);
});

test('a digest covers exactly the bytes advanced to, not the whole buffer', async () => {
  const buf = new BytePool(0).take(2 * MiB);
  buf.fill(7);
  const job = workers.start('sha256', buf)!;
  job.advance(MiB + 3);
  assert.is(
    Buffer.from(await job.finish()).toString('hex'),
    createHash('sha256')
      .update(buf.subarray(0, MiB + 3))
      .digest('hex'),
  );
});

test('busy workers: start answers null; an abandoned job frees its worker', async () => {
  const pool = new BytePool(0);
  const a = workers.start('sha256', pool.take(MiB))!;
  const b = workers.start('sha256', pool.take(MiB))!;
  assert.ok(a !== null && b !== null);
  assert.is(workers.start('sha256', pool.take(MiB)), null, 'both workers busy');
  assert.is(workers.start('sha256', Buffer.alloc(MiB)), null, 'not shared memory');
  a.abandon();
  await rejects(a.finish(), /abandoned/);
  const c = workers.start('sha256', pool.take(MiB));
  assert.ok(c !== null, 'the abandoned job gave its worker back');
  b.abandon();
  c!.abandon();
  await Promise.allSettled([b.finish(), c!.finish()]);
});

test('a worker that dies fails its job and is not used again; close stops the rest', async () => {
  const own = new HashWorkers(2);
  await own.warm();
  assert.is(own.workers, 2);
  const job = own.start('sha256', new BytePool(0).take(MiB))!;
  const slots = (own as unknown as { slots: { worker: { terminate(): Promise<number> }; busy: boolean }[] }).slots;
  await slots.find((s) => s.busy)!.worker.terminate();
  await rejects(job.finish(), /hash worker stopped/);
  assert.is(own.workers, 1);
  const next = own.start('sha256', new BytePool(0).take(MiB));
  assert.ok(next !== null, 'the other worker still works');
  next!.advance(0);
  assert.is(Buffer.from(await next!.finish()).toString('hex'), createHash('sha256').digest('hex'));
  await own.close();
  assert.is(own.workers, 0);
  assert.is(own.start('sha256', new BytePool(0).take(MiB)), null);
});

test('file jobs: a worker hashes a file as it is appended to, exactly up to the last advance', async () => {
  const path = join(work, 'appended.bin');
  const data = randomBytes(5 * MiB + 3);
  writeFileSync(path, '');
  const job = workers.startFile('sha256', path)!;
  assert.ok(job !== null);
  let at = 0;
  while (at < data.length) {
    const n = Math.min(data.length - at, 1 + Math.floor(Math.random() * 700_000));
    appendFileSync(path, data.subarray(at, at + n));
    at += n;
    job.advance(at);
    if (Math.random() < 0.2) await new Promise((r) => setImmediate(r));
  }
  appendFileSync(path, 'bytes after the last advance are not hashed');
  assert.is(Buffer.from(await job.finish()).toString('hex'), hex('sha256', data));
  const missing = workers.startFile('sha256', join(work, 'no-such-file'))!;
  missing.advance(10);
  await rejects(missing.finish(), /ENOENT/);
});

// ---------------------------------------------------------------------------- verified fetcher, pooled path

function setup(memoryBytes = 16 * MiB, poolBytes?: number) {
  const mirror = new Mirror({ memoryBytes, poolBytes, spoolDir: mkdtempSync(join(work, 'spool-')) });
  const vf = new VerifiedFetcher({ fetcher, mirror, hashWorkers: workers });
  return { mirror, vf };
}

test('pooled path: a large artifact is verified into a pooled buffer and served from memory', async () => {
  const { mirror, vf } = setup();
  const body = pattern(2 * MiB + 5, 31);
  origin.route('/pooled.bin', { body });
  const got = await vf.obtain(origin.url('/pooled.bin'), digestOf(body));
  assert.is(got.source, 'origin');
  assert.ok(got.artifact.bytes!.buffer instanceof SharedArrayBuffer, 'received into a pooled buffer');
  assert.ok(got.artifact.bytes!.equals(patternBytes(body)));
  got.artifact.release();
  // The same bytes signed with another algorithm are another artifact: fetched and hashed (sha512, by a worker) anew.
  const other = await vf.obtain(origin.url('/pooled.bin'), digestOf(body, 'sha512'));
  assert.is(other.source, 'origin');
  assert.ok(other.artifact.bytes!.equals(patternBytes(body)));
  other.artifact.release();
  const hit = await vf.obtain(origin.url('/pooled.bin'), digestOf(body));
  assert.is(hit.source, 'memory');
  assert.ok(hit.artifact.bytes!.equals(patternBytes(body)));
  hit.artifact.release();
  assert.is(mirror.stats().pool.allocated >= 1, true);
  assert.is(mirror.stats().memory.bytes, sizeClass(2 * MiB + 5) + sizeClass(2 * MiB + 5), 'each pooled entry counts its whole size class');
});

test('pooled path: tampered and cut-short bodies are refused, nothing cached, the buffers go back to the pool', async () => {
  const { mirror, vf } = setup();
  const body = pattern(3 * MiB, 32);
  origin.route('/pooled-tampered.bin', { body, tamper: true });
  const e = await vf.obtain(origin.url('/pooled-tampered.bin'), digestOf(body)).catch((x: unknown) => x);
  assert.ok(isVouchError(e) && e.code === 'hash_mismatch', String(e));
  assert.not.ok(mirror.has(digestOf(body)));
  assert.is(mirror.stats().pool.freeBytes, 3 * MiB, 'the refused buffer is free for reuse');
  origin.route('/pooled-short.bin', { body, truncate: MiB + 1 });
  const cut = await vf.obtain(origin.url('/pooled-short.bin'), digestOf(body)).catch((x: unknown) => x);
  assert.ok(isVouchError(cut) && cut.code === 'origin_error', String(cut));
  assert.not.ok(mirror.has(digestOf(body)));
  const s = mirror.stats().pool;
  assert.is(s.reused, 1, "the second fetch reused the first one's buffer");
  assert.is(s.freeBytes, 3 * MiB);
  // The real bytes still verify afterwards.
  origin.route('/pooled-good.bin', { body });
  const ok = await vf.obtain(origin.url('/pooled-good.bin'), digestOf(body));
  assert.ok(ok.artifact.bytes!.equals(patternBytes(body)));
  ok.artifact.release();
});

test('a held buffer is never recycled under its reader, however many artifacts pass through the tier', async () => {
  const { mirror, vf } = setup(8 * MiB, 8 * MiB); // spool threshold 2 MiB: up to 4 pooled 2 MiB entries
  const bodies = Array.from({ length: 12 }, (_, i) => pattern(2 * MiB, 100 + i));
  bodies.forEach((b, i) => origin.route(`/turn-${i}.bin`, { body: b }));
  const held = await vf.obtain(origin.url('/turn-0.bin'), digestOf(bodies[0]!));
  const heldBytes = held.artifact.bytes!;
  const expected = createHash('sha256').update(heldBytes).digest('hex');
  for (let i = 1; i < bodies.length; i++) {
    const o = await vf.obtain(origin.url(`/turn-${i}.bin`), digestOf(bodies[i]!));
    assert.ok(o.artifact.bytes!.buffer !== heldBytes.buffer, `artifact ${i} was received into the held buffer`);
    assert.ok(o.artifact.bytes!.equals(patternBytes(bodies[i]!)), `artifact ${i}`);
    o.artifact.release();
  }
  assert.not.ok(mirror.has(digestOf(bodies[0]!)), 'the held artifact was evicted meanwhile');
  assert.ok(mirror.stats().pool.reused >= 5, `evicted buffers were recycled: ${JSON.stringify(mirror.stats().pool)}`);
  assert.is(createHash('sha256').update(heldBytes).digest('hex'), expected, "the reader's bytes never changed");
  const before = mirror.stats().pool.freeBytes;
  held.artifact.release();
  held.artifact.release(); // idempotent: the buffer goes back once
  assert.is(mirror.stats().pool.freeBytes, before + 2 * MiB, 'released: back to the pool');
  const next = await vf.obtain(origin.url('/turn-0.bin'), digestOf(bodies[0]!));
  assert.ok(next.artifact.bytes!.equals(patternBytes(bodies[0]!)));
  next.artifact.release();
});

test('a pooled artifact is written through to the disk tier and read back intact by a new mirror', async () => {
  const diskDir = mkdtempSync(join(work, 'disk-'));
  const mirror = new Mirror({ memoryBytes: 16 * MiB, diskDir });
  const vf = new VerifiedFetcher({ fetcher, mirror, hashWorkers: workers });
  const body = pattern(2 * MiB + 7, 60);
  origin.route('/pooled-disk.bin', { body });
  const got = await vf.obtain(origin.url('/pooled-disk.bin'), digestOf(body));
  assert.ok(got.artifact.bytes!.buffer instanceof SharedArrayBuffer);
  got.artifact.release();
  await mirror.settled(); // the disk copy is written after the bytes are handed out
  assert.is(mirror.stats().disk.entries, 1);
  const again = new Mirror({ memoryBytes: 16 * MiB, diskDir });
  const hit = await again.get(digestOf(body));
  assert.is(hit?.tier, 'disk');
  assert.ok(hit!.bytes!.equals(patternBytes(body)));
  hit!.release();
});

test('without workers (or with none idle) the fetcher hashes on its own thread: same answers', async () => {
  const mirror = new Mirror({ memoryBytes: 16 * MiB, spoolDir: mkdtempSync(join(work, 'spool-')) });
  const vf = new VerifiedFetcher({ fetcher, mirror });
  const body = pattern(2 * MiB, 40);
  origin.route('/inline-bad.bin', { body, tamper: true });
  const e = await vf.obtain(origin.url('/inline-bad.bin'), digestOf(body)).catch((x: unknown) => x);
  assert.ok(isVouchError(e) && e.code === 'hash_mismatch', String(e));
  origin.route('/inline.bin', { body });
  const got = await vf.obtain(origin.url('/inline.bin'), digestOf(body));
  assert.ok(got.artifact.bytes!.buffer instanceof SharedArrayBuffer, 'a pooled buffer');
  assert.ok(got.artifact.bytes!.equals(patternBytes(body)), 'the bytes');
  got.artifact.release();
  assert.is(mirror.stats().pool.reused, 1, "the refused body's buffer was reused");
});

test('a hash worker that dies mid-body: the fetcher hashes the received bytes itself, same verdicts', async () => {
  const own = new HashWorkers(1);
  await own.warm();
  const slots = (own as unknown as { slots: { worker: { terminate(): Promise<number> } }[] }).slots;
  const start = own.start.bind(own);
  let killed = 0;
  own.start = (alg, data) => {
    const job = start(alg, data);
    if (job !== null) {
      killed++;
      void slots[0]!.worker.terminate();
    }
    return job;
  };
  const mirror = new Mirror({ memoryBytes: 16 * MiB, spoolDir: mkdtempSync(join(work, 'spool-')) });
  const vf = new VerifiedFetcher({ fetcher, mirror, hashWorkers: own });
  const body = pattern(2 * MiB, 41);
  origin.route('/dying-bad.bin', { body, tamper: true });
  const e = await vf.obtain(origin.url('/dying-bad.bin'), digestOf(body)).catch((x: unknown) => x);
  assert.ok(isVouchError(e) && e.code === 'hash_mismatch', String(e));
  assert.is(killed, 1);
  origin.route('/dying.bin', { body });
  const got = await vf.obtain(origin.url('/dying.bin'), digestOf(body));
  assert.ok(got.artifact.bytes!.equals(patternBytes(body)));
  got.artifact.release();
  for (let t = 0; t < 50 && own.workers > 0; t++) await new Promise((r) => setTimeout(r, 20)); // its exit event may come after the fetch
  assert.is(own.workers, 0, 'the dead worker is gone; the second body was hashed on this thread');
  await own.close();
});

test('spooled bodies (declared over the spool threshold) are hashed by a worker reading the spool file', async () => {
  const spoolDir = mkdtempSync(join(work, 'spool-'));
  const mirror = new Mirror({ memoryBytes: 4 * MiB, spoolDir }); // spool threshold 1 MiB
  const vf = new VerifiedFetcher({ fetcher, mirror, hashWorkers: workers });
  const body = pattern(6 * MiB + 11, 50);
  origin.route('/spooled-bad.bin', { body, tamper: true });
  const e = await vf.obtain(origin.url('/spooled-bad.bin'), digestOf(body)).catch((x: unknown) => x);
  assert.ok(isVouchError(e) && e.code === 'hash_mismatch', String(e));
  assert.equal(readdirSync(spoolDir), [], 'the refused spool file is removed');
  origin.route('/spooled.bin', { body });
  const got = await vf.obtain(origin.url('/spooled.bin'), digestOf(body, 'sha512'));
  assert.is(got.artifact.tier, 'spool');
  assert.ok(readFileSync(got.artifact.path!).equals(patternBytes(body)));
  got.artifact.release();
  // The file is unlinked asynchronously after the last release.
  for (let t = 0; t < 100 && readdirSync(spoolDir).length > 0; t++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(readdirSync(spoolDir), [], 'released: the spool file is gone');
});

test('a hash worker that dies on a spooled body: the file is hashed on this thread instead', async () => {
  const own = new HashWorkers(1);
  await own.warm();
  const slots = (own as unknown as { slots: { worker: { terminate(): Promise<number> } }[] }).slots;
  const startFile = own.startFile.bind(own);
  own.startFile = (alg, path) => {
    const job = startFile(alg, path);
    if (job !== null) void slots[0]!.worker.terminate();
    return job;
  };
  const mirror = new Mirror({ memoryBytes: 4 * MiB, spoolDir: mkdtempSync(join(work, 'spool-')) });
  const vf = new VerifiedFetcher({ fetcher, mirror, hashWorkers: own });
  const body = pattern(3 * MiB, 51);
  origin.route('/spooled-dying.bin', { body });
  const got = await vf.obtain(origin.url('/spooled-dying.bin'), digestOf(body));
  assert.ok(readFileSync(got.artifact.path!).equals(patternBytes(body)));
  got.artifact.release();
  for (let t = 0; t < 50 && own.workers > 0; t++) await new Promise((r) => setTimeout(r, 20));
  assert.is(own.workers, 0);
  await own.close();
});

// ---------------------------------------------------------------------------- a real gateway

test('gateway: a slow client gets intact bytes while its artifact is evicted and its neighbours recycle buffers', async () => {
  const dir = mkdtempSync(join(work, 'gw-'));
  const token = 'pool-token-' + 'p'.repeat(30);
  createKeyFile(join(dir, 'authority.pem'));
  writeFileSync(join(dir, 'submit.token'), token, { mode: 0o600 });
  let gw: GatewayProcess | null = null;
  const agent = new Agent();
  try {
    gw = await startGatewayProcess(
      [
        '--config',
        writeConfig(dir, {
          listen: { port: 0 },
          chain: { dir: join(dir, 'chain') },
          authority: { key_file: join(dir, 'authority.pem'), signer: 'pool', submit_token_file: join(dir, 'submit.token') },
          origin: { allow_private: true },
          mirror: { memory_bytes: 64 * MiB }, // spool threshold 16 MiB: four 16 MiB artifacts fit
        }),
      ],
      { env: { TMPDIR: dir } },
    );
    // Larger than the loopback socket buffers hold: most of it stays with the gateway while the client waits.
    const SIZE = 16 * MiB;
    const bodies = Array.from({ length: 6 }, (_, i) => pattern(SIZE, 200 + i));
    for (let i = 0; i < bodies.length; i++) {
      origin.route(`/gw-${i}.bin`, { body: bodies[i]! });
      const r = await request(`${gw.url}/v1/submit`, {
        method: 'POST',
        dispatcher: agent,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url: origin.url(`/gw-${i}.bin`), name: 'acme/pool', semver: `1.0.${i}`, license: 'MIT' }),
      });
      assert.is(r.statusCode, 201, await r.body.text());
    }
    const path = (i: number) => `/v1/download?url=${encodeURIComponent(origin.url(`/gw-${i}.bin`))}`;
    // The slow client: asks for artifact 0 over a raw socket and reads only its first bytes for now.
    const port = Number(new URL(gw.url).port);
    const sock = connect(port, '127.0.0.1');
    const received: Buffer[] = [];
    let got = 0;
    let slow = true;
    sock.on('data', (d: Buffer) => {
      received.push(d);
      got += d.length;
      if (slow && got > 256 * 1024) sock.pause();
    });
    sock.write(`GET ${path(0)} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    for (let t = 0; got <= 256 * 1024 && t < 200; t++) await new Promise((r) => setTimeout(r, 25));
    assert.ok(got > 256 * 1024, 'the slow client started receiving');
    // Meanwhile: the other artifacts pass through the tier twice, evicting 0 and recycling buffers.
    for (let round = 0; round < 2; round++) {
      for (let i = 1; i < bodies.length; i++) {
        const r = await request(gw.url + path(i), { dispatcher: agent });
        const bytes = Buffer.from(await r.body.arrayBuffer());
        assert.is(r.statusCode, 200);
        assert.is(createHash('sha256').update(bytes).digest('hex'), digestOf(bodies[i]!).slice('sha256:'.length), `artifact ${i}`);
      }
    }
    const metrics = await (await request(gw.url + '/metrics', { dispatcher: agent })).body.text();
    const reused = Number(/vouch_mirror_pool_buffers_total\{outcome="reused"\} (\d+)/.exec(metrics)?.[1]);
    assert.ok(reused >= 3, `buffers were recycled meanwhile (${reused})`);
    const served = (m: string) => Number(/vouch_http_requests_total\{route="\/v1\/download",method="GET",status="200"\} (\d+)/.exec(m)?.[1]);
    assert.is(served(metrics), 2 * (bodies.length - 1), 'the slow download is still being sent');
    // Now read the rest of artifact 0.
    const done = new Promise<void>((resolve) => sock.on('end', () => resolve()));
    slow = false;
    sock.resume();
    await done;
    const all = Buffer.concat(received);
    const split = all.indexOf('\r\n\r\n');
    assert.match(all.subarray(0, split).toString('latin1'), /^HTTP\/1\.1 200 /);
    const payload = all.subarray(split + 4);
    assert.is(payload.length, SIZE);
    assert.ok(payload.equals(patternBytes(bodies[0]!)), 'the slow client got the verified bytes, unchanged');
    const after = await (await request(gw.url + '/metrics', { dispatcher: agent })).body.text();
    assert.is(served(after), 2 * (bodies.length - 1) + 1);
  } finally {
    await agent.close();
    await gw?.stop();
  }
});

test.run();
