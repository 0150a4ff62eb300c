/**
 * The origin fetcher and the address guard against a real origin on loopback:
 * statuses, redirects, limits, truncation, timeouts, cancellation, and the
 * guard's refusals. Every packet goes to 127.0.0.0/8 or ::1; names that stand
 * for private addresses come from an injected resolver and are refused
 * before any connection is made.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isVouchError, type VouchError } from '../../chain/errors.ts';
import { statusOf } from '../../gateway/http/http-util.ts';
import { AddressGuard, classifyAddress, parseIp, type Resolver } from '../../artifacts/address-guard.ts';
import { OriginFetcher, type OriginResponse } from '../../artifacts/origin-fetcher.ts';
import { OriginServer, pattern, patternBytes } from '../helpers/origin-server.ts';
import { closedPort } from '../helpers/free-port.ts';

let origin: OriginServer;
let fetcher: OriginFetcher;

test.before(async () => {
  origin = await OriginServer.start();
  fetcher = new OriginFetcher({ timeoutMs: 2_000, connectTimeoutMs: 1_000, maxBytes: 1024 * 1024, maxRedirects: 3 });
});

test.after(async () => {
  await fetcher.destroy();
  await origin.close();
});

async function readAll(res: OriginResponse): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of res.body) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

/** The VouchError a promise rejects with (fails when it resolves or rejects with anything else). */
async function failure(p: Promise<unknown>): Promise<VouchError> {
  try {
    await p;
  } catch (e) {
    if (!isVouchError(e)) throw new Error(`expected a VouchError, got ${String(e)}`);
    assert.not.ok(e.message.includes('\n'), `one line: ${e.message}`);
    assert.is(e.cause, undefined, 'no undici cause attached');
    return e;
  }
  throw new Error('expected a failure, got success');
}

async function bodyFailure(url: string, f: OriginFetcher = fetcher): Promise<VouchError> {
  return failure((async () => readAll(await f.fetch(url)))());
}

test('serves a body with its content type, length and headers', async () => {
  origin.route('/ok.txt', { body: 'hello origin', contentType: 'text/plain; charset=utf-8', headers: { 'x-extra': 'yes' } });
  const res = await fetcher.fetch(origin.url('/ok.txt'));
  assert.is(res.status, 200);
  assert.is(res.finalUrl, origin.url('/ok.txt'));
  assert.is(res.contentType, 'text/plain; charset=utf-8');
  assert.is(res.contentLength, 12);
  assert.is(res.headers['x-extra'], 'yes');
  assert.is((await readAll(res)).toString(), 'hello origin');
});

test('no content type -> application/octet-stream; chunked body -> contentLength null', async () => {
  origin.route('/bare', { body: Buffer.from([1, 2, 3]), contentType: null, contentLength: 'none' });
  const res = await fetcher.fetch(origin.url('/bare'));
  assert.is(res.contentType, 'application/octet-stream');
  assert.is(res.contentLength, null);
  assert.equal([...(await readAll(res))], [1, 2, 3]);
});

test('keep-alive: sequential fetches reuse one connection', async () => {
  const o = await OriginServer.start();
  try {
    o.route('/k', { body: 'k' });
    for (let i = 0; i < 3; i++) {
      await readAll(await fetcher.fetch(o.url('/k')));
      await new Promise((r) => setTimeout(r, 10)); // undici returns the socket to the pool just after 'end'
    }
    assert.is(o.requests('/k'), 3);
    assert.is(o.connections, 1);
  } finally {
    await o.close();
  }
});

test('non-2xx final status -> origin_error naming the status', async () => {
  origin.route('/missing', { status: 404, body: 'nope' });
  origin.route('/broken', { status: 500, body: 'boom' });
  origin.route('/nocontent', { status: 304 });
  for (const [path, status] of [
    ['/missing', 404],
    ['/broken', 500],
    ['/nocontent', 304],
    ['/unregistered', 404],
  ] as const) {
    const e = await failure(fetcher.fetch(origin.url(path)));
    assert.is(e.code, 'origin_error', path);
    assert.ok(e.message.includes(`HTTP ${status}`), e.message);
    assert.is(e.resource, origin.url(path));
    assert.is(statusOf(e), 502);
  }
});

test('connection refused -> origin_error', async () => {
  const url = `http://127.0.0.1:${await closedPort()}/gone`;
  const e = await failure(fetcher.fetch(url));
  assert.is(e.code, 'origin_error');
  assert.ok(/refused/.test(e.message), e.message);
});

test('not an absolute http(s) URL -> bad_request', async () => {
  for (const url of ['ftp://127.0.0.1/x', 'not a url', 'file:///etc/passwd', 'http://user:pw@127.0.0.1/x']) {
    assert.is((await failure(fetcher.fetch(url))).code, 'bad_request', url);
  }
});

test('redirects: every kind followed, relative locations, finalUrl', async () => {
  origin.route('/target', { body: 'landed' });
  for (const status of [301, 302, 303, 307, 308]) {
    origin.route(`/r${status}`, { redirect: '/target', status });
    const res = await fetcher.fetch(origin.url(`/r${status}`));
    assert.is(res.finalUrl, origin.url('/target'));
    assert.is((await readAll(res)).toString(), 'landed');
  }
  origin.route('/abs', { redirect: origin.url('/r302'), status: 301 });
  const res = await fetcher.fetch(origin.url('/abs'));
  assert.is((await readAll(res)).toString(), 'landed');
});

test('redirect limit and loops -> origin_error', async () => {
  origin.route('/c1', { redirect: '/c2' }).route('/c2', { redirect: '/c3' }).route('/c3', { redirect: '/c4' });
  origin.route('/c4', { redirect: '/target' });
  const landed = origin.requests('/target');
  const e = await failure(fetcher.fetch(origin.url('/c1'))); // 4 hops, limit 3
  assert.is(e.code, 'origin_error');
  assert.ok(e.message.includes('more than 3 redirects'), e.message);
  assert.is(e.resource, origin.url('/c1'));
  assert.is(origin.requests('/target'), landed);
  assert.is(origin.requests('/c4'), 1);
  const ok = await fetcher.fetch(origin.url('/c2')); // 3 hops
  assert.is((await readAll(ok)).toString(), 'landed');

  origin.route('/loopA', { redirect: '/loopB' }).route('/loopB', { redirect: '/loopA' });
  assert.is((await failure(fetcher.fetch(origin.url('/loopA')))).code, 'origin_error');
  assert.is(origin.requests('/loopA') + origin.requests('/loopB'), 4);

  const none = new OriginFetcher({ maxRedirects: 0, timeoutMs: 2_000 });
  try {
    assert.is((await failure(none.fetch(origin.url('/r301')))).code, 'origin_error');
  } finally {
    await none.destroy();
  }
  origin.route('/toftp', { redirect: 'ftp://127.0.0.1/x' });
  assert.is((await failure(fetcher.fetch(origin.url('/toftp')))).code, 'origin_error');
});

test('size cap: declared Content-Length over the cap is refused before reading', async () => {
  // Larger than socket buffers can hold, so the origin sees the client hang up.
  origin.route('/declared-big', { body: pattern(64 * 1024 * 1024) });
  const e = await failure(fetcher.fetch(origin.url('/declared-big')));
  assert.is(e.code, 'too_large');
  assert.is(statusOf(e), 413);
  assert.is(e.resource, origin.url('/declared-big'));
  await origin.waitForClientClose('/declared-big');
  const rec = origin.records('/declared-big')[0]!;
  assert.ok(rec.bytesSent < 64 * 1024 * 1024, `only part was sent: ${rec.bytesSent}`);
});

test('size cap: a body without length that streams past the cap errors', async () => {
  origin.route('/streamed-big', { body: pattern(64 * 1024 * 1024), contentLength: 'none' });
  const res = await fetcher.fetch(origin.url('/streamed-big'));
  assert.is(res.contentLength, null);
  let got = 0;
  const e = await failure(
    (async () => {
      for await (const c of res.body) got += (c as Buffer).length;
    })(),
  );
  assert.is(e.code, 'too_large');
  assert.ok(got <= 1024 * 1024, `never more than maxBytes delivered: ${got}`);
  await origin.waitForClientClose('/streamed-big');
});

test('truncated body (clean close before Content-Length) -> origin_error', async () => {
  origin.route('/trunc', { body: pattern(200_000), truncate: 50_000 });
  const e = await bodyFailure(origin.url('/trunc'));
  assert.is(e.code, 'origin_error');
  assert.ok(/before the response was complete|cut short/.test(e.message), e.message);
  origin.route('/trunc-chunked', { body: pattern(200_000), truncate: 50_000, contentLength: 'none' });
  assert.is((await bodyFailure(origin.url('/trunc-chunked'))).code, 'origin_error');
});

test('connection reset mid-body -> origin_error', async () => {
  origin.route('/reset', { body: pattern(500_000), reset: 100_000 });
  const e = await bodyFailure(origin.url('/reset'));
  assert.is(e.code, 'origin_error');
});

test('timeouts: no headers, stalled body, trickle past the total deadline -> origin_timeout', async () => {
  const quick = new OriginFetcher({ timeoutMs: 300, connectTimeoutMs: 300, maxBytes: 1024 * 1024 });
  try {
    origin.route('/no-headers', { stall: 'headers' });
    let t0 = Date.now();
    let e = await failure(quick.fetch(origin.url('/no-headers')));
    assert.is(e.code, 'origin_timeout');
    assert.is(statusOf(e), 504);
    assert.ok(Date.now() - t0 < 1_500, `took ${Date.now() - t0} ms`);

    origin.route('/stall-body', { body: pattern(100_000), stall: 'body' });
    e = await bodyFailure(origin.url('/stall-body'), quick);
    assert.is(e.code, 'origin_timeout');

    origin.route('/stall-mid', { body: pattern(100_000), stall: 10_000 });
    e = await bodyFailure(origin.url('/stall-mid'), quick);
    assert.is(e.code, 'origin_timeout');

    // Each piece arrives well within any idle timeout; the total deadline still holds.
    origin.route('/trickle', { body: pattern(10_000), trickle: { bytes: 1_000, everyMs: 80 } });
    t0 = Date.now();
    e = await bodyFailure(origin.url('/trickle'), quick);
    assert.is(e.code, 'origin_timeout');
    assert.ok(Date.now() - t0 < 700, `deadline, not the end of the trickle: ${Date.now() - t0} ms`);
    await origin.waitForClientClose('/trickle');

    // The deadline covers a body nobody reads, too.
    origin.route('/unread', { body: pattern(100_000), stall: 5_000 });
    const res = await quick.fetch(origin.url('/unread'));
    await origin.waitForClientClose('/unread', 1, 2_000);
    res.body.on('error', () => {});
  } finally {
    await quick.destroy();
  }
});

test('slow but within the deadline is fine', async () => {
  origin.route('/slow-ok', { body: pattern(5_000), trickle: { bytes: 1_000, everyMs: 20 } });
  const res = await fetcher.fetch(origin.url('/slow-ok'));
  assert.ok((await readAll(res)).equals(patternBytes(pattern(5_000))));
});

test('caller abort before headers cancels the origin request', async () => {
  origin.route('/abort-early', { stall: 'headers' });
  const ac = new AbortController();
  const p = fetcher.fetch(origin.url('/abort-early'), { signal: ac.signal });
  await origin.waitForRequests('/abort-early');
  const reason = new Error('client went away');
  ac.abort(reason);
  try {
    await p;
    assert.unreachable('should reject');
  } catch (e) {
    assert.is(e, reason, 'rejects with the abort reason');
  }
  await origin.waitForClientClose('/abort-early');
});

test('caller abort during the body cancels the origin request', async () => {
  origin.route('/abort-body', { body: pattern(500_000), stall: 50_000 });
  const ac = new AbortController();
  const res = await fetcher.fetch(origin.url('/abort-body'), { signal: ac.signal });
  const errored = new Promise<unknown>((resolve) => res.body.on('error', resolve));
  res.body.resume();
  await new Promise((r) => setTimeout(r, 50));
  ac.abort(new Error('bye'));
  const e = await errored;
  assert.is((e as Error).message, 'bye');
  await origin.waitForClientClose('/abort-body');
});

test('an already aborted signal never reaches the origin', async () => {
  origin.route('/never', { body: 'x' });
  const ac = new AbortController();
  ac.abort(new Error('already'));
  try {
    await fetcher.fetch(origin.url('/never'), { signal: ac.signal });
    assert.unreachable();
  } catch (e) {
    assert.is((e as Error).message, 'already');
  }
  assert.is(origin.requests('/never'), 0);
});

// ---------------------------------------------------------------------------
// Address guard

test('classification of addresses (no packets: pure)', () => {
  const cases: Array<[string, string]> = [
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['::1', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['172.32.0.1', 'public'],
    ['172.15.255.255', 'public'],
    ['8.8.8.8', 'public'],
    ['93.184.216.34', 'public'],
    ['169.254.169.254', 'link-local'],
    ['fe80::1', 'link-local'],
    ['febf::1', 'link-local'],
    ['fc00::1', 'private'],
    ['fd12:3456::1', 'private'],
    ['0.0.0.0', 'unspecified'],
    ['::', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['100.64.0.1', 'shared'],
    ['100.127.255.255', 'shared'],
    ['100.128.0.1', 'public'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['ff02::1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['198.18.0.1', 'reserved'],
    ['192.0.2.1', 'documentation'],
    ['2001:db8::1', 'documentation'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['::ffff:10.0.0.1', 'private'],
    ['::ffff:169.254.1.1', 'link-local'],
    ['::ffff:8.8.8.8', 'public'],
    ['::ffff:0.0.0.0', 'unspecified'],
    ['64:ff9b::a9fe:a9fe', 'link-local'],
    ['64:ff9b::808:808', 'public'],
    ['2002:7f00:1::', 'loopback'],
    ['2002:808:808::1', 'public'],
    ['::127.0.0.1', 'reserved'],
    ['2001::1', 'reserved'],
    ['2606:4700::1111', 'public'],
    ['[fe80::1%eth0]', 'link-local'],
  ];
  for (const [ip, want] of cases) assert.is(classifyAddress(ip), want, ip);
  assert.is(classifyAddress('localhost'), null);
  assert.is(parseIp('1.2.3'), null);
  assert.equal([...parseIp('1:2::3.4.5.6')!], [0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 3, 4, 5, 6]);
});

test('guard: every loopback spelling is refused with bad_request before connecting', async () => {
  const o = await OriginServer.start();
  try {
    o.route('/x', { body: 'secret' });
    const p = o.port;
    const spellings = [
      `http://127.0.0.1:${p}/x`,
      `http://localhost:${p}/x`,
      `http://[::1]:${p}/x`,
      `http://0x7f000001:${p}/x`,
      `http://127.1:${p}/x`,
      `http://[::ffff:127.0.0.1]:${p}/x`,
      `http://0.0.0.0:${p}/x`,
      `http://2130706433:${p}/x`,
      `http://0177.0.0.1:${p}/x`,
    ];
    for (const url of spellings) {
      const e = await failure(fetcher.fetch(url, { guardPrivate: true }));
      assert.is(e.code, 'bad_request', url);
      assert.is(statusOf(e), 400);
      assert.ok(e.message.includes('not allowed'), e.message);
      assert.is(e.resource, url);
    }
    assert.is(o.connections, 0, 'no connection reached the origin');
    // The same URL unguarded works (it is the guard that refused).
    assert.is((await readAll(await fetcher.fetch(`http://127.0.0.1:${p}/x`))).toString(), 'secret');
  } finally {
    await o.close();
  }
});

test('guard: names resolving to private, link-local or mixed addresses are refused (injected resolver)', async () => {
  const table: Record<string, string[]> = {
    'private.test': ['10.0.0.7'],
    'metadata.test': ['169.254.169.254'],
    'mixed.test': ['93.184.216.34', '192.168.1.20'],
    'ula.test': ['fd00::5'],
    'linklocal6.test': ['fe80::1'],
    'mapped.test': ['::ffff:10.0.0.1'],
    'cgnat.test': ['100.64.1.1'],
    'zero.test': ['0.0.0.0'],
  };
  const calls: string[] = [];
  const resolver: Resolver = async (name) => {
    calls.push(name);
    const list = table[name];
    if (!list) throw Object.assign(new Error('nx'), { code: 'ENOTFOUND' });
    return list.map((address) => ({ address, family: address.includes(':') ? (6 as const) : (4 as const) }));
  };
  const guarded = new OriginFetcher({ timeoutMs: 1_000, guard: { resolver } });
  try {
    for (const name of Object.keys(table)) {
      const e = await failure(guarded.fetch(`http://${name}/a.tgz`, { guardPrivate: true }));
      assert.is(e.code, 'bad_request', name);
      assert.ok(e.message.includes(name) && e.message.includes('not allowed'), e.message);
    }
    assert.equal(calls, Object.keys(table), 'resolved once each');
    const e = await failure(guarded.fetch('http://nowhere.test/x', { guardPrivate: true }));
    assert.is(e.code, 'origin_error');
    assert.ok(e.message.includes('ENOTFOUND'), e.message);
  } finally {
    await guarded.destroy();
  }
});

test('guard: connects to the checked address with the URL host, resolving once (no rebinding)', async () => {
  let calls = 0;
  // A rebinding resolver: the first answer is the allowed address, any later one is not.
  const resolver: Resolver = async () => (calls++ === 0 ? [{ address: '127.0.0.1', family: 4 }] : [{ address: '127.0.0.2', family: 4 }]);
  const guarded = new OriginFetcher({ timeoutMs: 2_000, guard: { resolver, allow: ['127.0.0.1'] } });
  try {
    origin.route('/named', { body: 'by name' });
    const before = origin.requests('/named');
    const res = await guarded.fetch(`http://allowed.test:${origin.port}/named`, { guardPrivate: true });
    assert.is((await readAll(res)).toString(), 'by name');
    assert.is(calls, 1);
    assert.is(origin.requests('/named'), before + 1);
    assert.is(origin.records('/named').at(-1)!.headers.host, `allowed.test:${origin.port}`);
    assert.is(res.finalUrl, `http://allowed.test:${origin.port}/named`);
  } finally {
    await guarded.destroy();
  }
});

test('guard: redirects are re-checked at every hop (127.0.0.1 allowed, 127.0.0.2 not)', async () => {
  let second: OriginServer | null = null;
  try {
    second = await OriginServer.start({ host: '127.0.0.2' });
  } catch {
    second = null; // a system without 127.0.0.2: the refusal is still checked below
  }
  const port2 = second?.port ?? 9;
  second?.route('/inner', { body: 'internal' });
  const resolver: Resolver = async (name) => [{ address: name === 'inner.test' ? '127.0.0.2' : '127.0.0.1', family: 4 }];
  const guarded = new OriginFetcher({ timeoutMs: 2_000, guard: { resolver, allow: ['127.0.0.1'] }, allowPrivate: true }); // unguarded fetches follow hops to private space (origin.allow_private)
  try {
    origin.route('/hop-ip', { redirect: `http://127.0.0.2:${port2}/inner` });
    origin.route('/hop-name', { redirect: `http://inner.test:${port2}/inner`, status: 307 });
    origin.route('/hop-mapped', { redirect: `http://[::ffff:127.0.0.2]:${port2}/inner` });
    for (const path of ['/hop-ip', '/hop-name', '/hop-mapped']) {
      const e = await failure(guarded.fetch(origin.url(path), { guardPrivate: true }));
      assert.is(e.code, 'bad_request', path);
      assert.ok(e.message.includes('127.0.0.2') || e.message.includes('7f00:2'), e.message);
      assert.is(e.resource, origin.url(path));
      assert.is(origin.requests(path) >= 1, true);
    }
    if (second !== null) {
      assert.is(second.connections, 0, 'the refused hop never connected');
      // Unguarded, the same redirect is followed (so it was the guard that refused).
      const res = await guarded.fetch(origin.url('/hop-ip'));
      assert.is((await readAll(res)).toString(), 'internal');
    }
  } finally {
    await guarded.destroy();
    await second?.close();
  }
});

test('IPv6 loopback origin: plain, and guarded with ::1 allowed (connect by bracketed IP)', async () => {
  let v6: OriginServer;
  try {
    v6 = await OriginServer.start({ host: '::1' });
  } catch {
    console.log('  (no ::1 on this system: skipped)');
    return;
  }
  const allowing = new OriginFetcher({ timeoutMs: 2_000, guard: { allow: ['::1'], resolver: async () => [{ address: '::1', family: 6 }] } });
  try {
    v6.route('/six', { body: 'over v6' });
    assert.is((await readAll(await fetcher.fetch(v6.url('/six')))).toString(), 'over v6');
    assert.is((await readAll(await allowing.fetch(v6.url('/six'), { guardPrivate: true }))).toString(), 'over v6');
    const named = await allowing.fetch(`http://six.test:${v6.port}/six`, { guardPrivate: true });
    assert.is((await readAll(named)).toString(), 'over v6');
    assert.is(v6.records('/six').at(-1)!.headers.host, `six.test:${v6.port}`);
    assert.is((await failure(fetcher.fetch(v6.url('/six'), { guardPrivate: true }))).code, 'bad_request');
  } finally {
    await allowing.destroy();
    await v6.close();
  }
});

test('guard: allow list takes CIDR ranges and rejects nonsense', () => {
  const g = new AddressGuard({ allow: ['10.1.0.0/16', '::1'] });
  assert.is(g.refusal('10.1.200.3'), null);
  assert.is(g.refusal('::ffff:10.1.0.9'), null);
  assert.is(g.refusal('10.2.0.1'), 'private');
  assert.is(g.refusal('::1'), null);
  assert.is(g.refusal('127.0.0.1'), 'loopback');
  assert.is(g.refusal('8.8.8.8'), null);
  assert.throws(() => new AddressGuard({ allow: ['nope'] }));
  assert.throws(() => new AddressGuard({ allow: ['10.0.0.0/33'] }));
});

test.run();
