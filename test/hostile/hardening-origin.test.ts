/**
 * Origin hardening (issue 14 items 2, 6, 8 and 13), each attack against the
 * code that must refuse it: scripted raw TCP origins and node:http origins on
 * 127.0.0.1, the OriginFetcher directly, and real gateway processes end to
 * end. Every packet goes to 127.0.0.1 (a name that stands for an internal
 * host is answered by an injected resolver, never by DNS).
 *
 * - Redirect hops of download fetches are guarded: an endorsed origin that
 *   answers `302 Location: http://127.0.0.1:<port>/admin` (another port, so
 *   another host) is refused before anything reaches that port — the same
 *   502 for an open and a closed port — on /v1/download and proxy routes;
 *   a hop on the signed URL's own host, a trusted host or with allowPrivate
 *   is followed; a guarded hop connects to the address it checked;
 *   pass-through and metadata fetches never follow a redirect at all.
 * - Only a complete 200 is an artifact: 202, 203, 204, 205 and an unsolicited
 *   206 are refused by submit (nothing signed, the version not burned) and by
 *   downloads.
 * - Framing the signer must not accept: Transfer-Encoding in HTTP/1.0,
 *   `chunked, chunked`, `gzip, chunked`, control characters in chunk
 *   extensions, trailers and the reason phrase.
 * - Content-Encoding: the hash covers the bytes as sent, and the header is
 *   served with them (from the origin and from the mirror) so clients decode.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint, buildEndorseBlock } from '../../chain/build.ts';
import type { Block } from '../../chain/block.ts';
import { base64Encode } from '../../chain/index.ts';
import { isVouchError, type VouchError } from '../../chain/errors.ts';
import { createKeyFile } from '../../platform/key-file.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { OriginFetcher } from '../../artifacts/origin-fetcher.ts';
import type { Resolver } from '../../artifacts/address-guard.ts';
import { initChainRepo, testSigner } from '../helpers/chain-fixture.ts';
import { OriginServer, digestOf } from '../helpers/origin-server.ts';
import { postSubmit, startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { rawRequest, type RawAnswer } from '../helpers/raw-http.ts';
import { closedPort } from '../helpers/free-port.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-hardening-'));
const token = 'hardening-token-' + 'h'.repeat(30);
const sha256 = (b: string | Uint8Array) => artifactHashOf(nodeBackend, 'sha256', typeof b === 'string' ? Buffer.from(b) : b);

/** A raw TCP origin on 127.0.0.1: `answer` gets each request head and writes whatever bytes it likes. */
class RawOrigin {
  connections = 0;
  private readonly sockets = new Set<Socket>();
  private constructor(private readonly server: Server) {}

  static async start(answer: (socket: Socket, path: string) => void): Promise<RawOrigin> {
    let self!: RawOrigin;
    const server = createServer((socket) => {
      self.connections++;
      self.sockets.add(socket);
      socket.on('close', () => self.sockets.delete(socket));
      socket.on('error', () => {});
      let buffered = '';
      socket.on('data', (d) => {
        buffered += d.toString('latin1');
        const end = buffered.indexOf('\r\n\r\n');
        if (end < 0) return;
        const path = /^GET (\S+) HTTP\/1\.1/.exec(buffered)?.[1] ?? '';
        buffered = buffered.slice(end + 4);
        answer(socket, path);
      });
    });
    self = new RawOrigin(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return self;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  url(path: string): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server.close(r));
  }
}

async function failure(p: Promise<unknown>): Promise<VouchError> {
  try {
    await p;
  } catch (e) {
    if (isVouchError(e)) return e;
    throw e;
  }
  throw new Error('expected a VouchError');
}

async function readAll(res: { body: AsyncIterable<unknown> }): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of res.body) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

type Answer = RawAnswer;

/** A GET that decodes nothing and follows nothing: the bytes and headers exactly as the gateway sent them. */
function get(base: string, path: string): Promise<Answer> {
  return rawRequest(base, path);
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------------------
// Fixtures: an internal service (must never be reached), origins, gateways

let inner: OriginServer; // stands for an internal admin port
let origin: OriginServer; // endorsed origin (node:http)
let raw: RawOrigin; // endorsed origin writing exact bytes
let closed = 0;
let guarded: GatewayProcess; // read-only, origin.allow_private off
let authority: GatewayProcess; // authority, origin.allow_private on (so it can submit loopback URLs)

const FINAL = 'the artifact after a same-host redirect';
const WHOLE = 'a whole artifact, sent as an unsolicited 206';
const PLAIN = 'hello, encoded';
const GZ = gzipSync(Buffer.from(PLAIN));

/** Framing the signer must refuse: raw answers of the raw origin, by path. */
const BAD_FRAMING: Record<string, string> = {
  '/te-http10': 'HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  '/te-chunked-twice': `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\nf\r\n5\r\nhello\r\n0\r\n\r\n\r\n0\r\n\r\n`,
  '/te-chunked-repeated': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  '/te-gzip-chunked': `HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n${GZ.length.toString(16)}\r\n${GZ.toString('latin1')}\r\n0\r\n\r\n`,
  '/te-gzip': `HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n${GZ.toString('latin1')}`,
  '/ext-nul': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;a=\u0000\r\nhello\r\n0\r\n\r\n',
  '/ext-esc': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;a="\u001b[2J"\r\nhello\r\n0\r\n\r\n',
  '/trailer-nul': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nx-t: a\u0000b\r\n\r\n',
  '/reason-nul': 'HTTP/1.1 200 O\u0000K\r\ncontent-length: 5\r\n\r\nhello',
  '/reason-esc': 'HTTP/1.1 200 \u001b[31mOK\r\ncontent-length: 5\r\n\r\nhello',
};

test.before(async () => {
  inner = await OriginServer.start();
  inner.route('/admin', { body: 'internal admin page' });
  closed = await closedPort();
  origin = await OriginServer.start();
  raw = await RawOrigin.start((s, path) => {
    const answer = BAD_FRAMING[path] ?? 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello';
    s.end(Buffer.from(answer, 'latin1'));
  });
  const O = origin.origin;
  const toOpen = `http://127.0.0.1:${inner.port}/admin`;
  const toClosed = `http://127.0.0.1:${closed}/admin`;
  origin.route('/d/to-open', { redirect: toOpen });
  origin.route('/d/to-closed', { redirect: toClosed, status: 307 });
  origin.route('/d/same', { redirect: '/d/final', status: 301 });
  origin.route('/d/final', { body: FINAL });
  origin.route('/d/partial', { status: 206, body: WHOLE, headers: { 'content-range': `bytes 0-${WHOLE.length - 1}/${WHOLE.length}` } });
  origin.route('/d/unsigned-redirect', { redirect: toOpen });
  origin.route('/npm/leftpad/-/leftpad-1.0.0.tgz', { redirect: toOpen });
  origin.route('/npm/rightpad/-/rightpad-1.0.0.tgz', { redirect: toClosed });
  origin.route('/npm/moved', { redirect: toOpen });
  origin.route('/c/admin', { redirect: toOpen }); // the origin of a route whose canonical host is the inner server

  // The guarded gateway serves a chain made here (no submit: allow_private is off).
  const signer = testSigner('hardening');
  const now = Date.now() - 60_000;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now, uns: 'acme/hardening' })];
  const endorse = (url: string, artifactHash: string, name = 'acme/widget') => {
    blocks.push(
      buildEndorseBlock({
        prev: blocks[blocks.length - 1]!,
        signer,
        backend: nodeBackend,
        now: now + blocks.length,
        entries: [{ url, artifactHash, name, semver: '1.0.0', license: 'MIT' }],
      }),
    );
  };
  endorse(`${O}/d/to-open`, sha256('internal admin page'));
  endorse(`${O}/d/to-closed`, sha256('internal admin page'));
  endorse(`${O}/d/same`, sha256(FINAL));
  endorse(`${O}/d/partial`, sha256(WHOLE));
  endorse(`${O}/npm/leftpad/-/leftpad-1.0.0.tgz`, sha256('internal admin page'), 'npm/leftpad');
  endorse(`${O}/npm/rightpad/-/rightpad-1.0.0.tgz`, sha256('internal admin page'), 'npm/rightpad');
  endorse(`http://127.0.0.1:${inner.port}/admin`, sha256('internal admin page'));
  const chainDir = join(work, 'guarded-chain');
  await initChainRepo(chainDir, blocks, buildCheckpoint({ head: blocks[blocks.length - 1]!, signer, now: now + blocks.length }), {
    timestamp: Math.floor(now / 1000),
  });

  createKeyFile(join(work, 'authority.pem'));
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  [guarded, authority] = await Promise.all([
    startGatewayProcess([
      '--config',
      writeConfig(join(work, 'guarded'), {
        listen: { port: 0 },
        chain: { dir: chainDir, public_key: base64Encode(signer.publicKey) },
        origin: { allow_private: false, timeout: 3 },
        proxy: {
          routes: [
            { prefix: '/r/', origin: `${O}/d/`, unendorsed: 'deny' },
            { prefix: '/p/', origin: `${O}/d/`, unendorsed: 'pass' },
            { prefix: '/npm/', kind: 'npm', origin: `${O}/npm/`, unendorsed: 'deny' },
            { prefix: '/c/', origin: `${O}/c/`, canonical: `http://127.0.0.1:${inner.port}/`, unendorsed: 'deny' },
          ],
        },
      }),
    ]),
    startGatewayProcess([
      '--config',
      writeConfig(join(work, 'authority'), {
        listen: { port: 0 },
        chain: { dir: join(work, 'authority-chain') },
        authority: { key_file: join(work, 'authority.pem'), signer: 'hardening', submit_token_file: join(work, 'submit.token') },
        origin: { allow_private: true, timeout: 3 },
        mirror: { memory_bytes: 8 * 1024 * 1024 },
        proxy: { routes: [{ prefix: '/enc/', origin: `${O}/enc/`, unendorsed: 'deny' }] },
      }),
    ]),
  ]);
});

test.after(async () => {
  await Promise.all([guarded?.stop(), authority?.stop()]);
  await Promise.all([inner?.close(), origin?.close(), raw?.close()]);
  rmSync(work, { recursive: true, force: true });
});

async function submit(url: string, semver = '1.0.0'): Promise<{ status: number; body: any }> {
  const r = await postSubmit(authority.url, token, { url, name: 'acme/hardening', semver, license: 'MIT' });
  return { status: r.status, body: r.json };
}

async function chainSize(): Promise<number> {
  return ((await (await fetch(`${authority.url}/v1/checkpoint`)).json()) as { size: number }).size;
}

// ---------------------------------------------------------------------------
// Item 2: redirect hops cannot reach internal hosts

test('fetcher: a redirect to another loopback port is refused unreached, open or closed, with one answer; same host, trusted host and allowPrivate are followed', async () => {
  const f = new OriginFetcher({ timeoutMs: 2_000 });
  const allowing = new OriginFetcher({ timeoutMs: 2_000, allowPrivate: true });
  const reached = inner.connections;
  try {
    const open = await failure(f.fetch(origin.url('/d/to-open')));
    const shut = await failure(f.fetch(origin.url('/d/to-closed')));
    for (const e of [open, shut]) {
      assert.is(e.code, 'origin_error', e.message);
      assert.match(e.message, /redirect to 127\.0\.0\.1:\d+ refused: not a public address/);
      assert.match(e.message, /origin\.allow_private/);
    }
    const sameAnswer = (e: VouchError) => e.message.replace(/:\d+/g, ':PORT').replace('/d/to-closed', '/d/to-X').replace('/d/to-open', '/d/to-X');
    assert.is(sameAnswer(open), sameAnswer(shut), 'an open and a closed port answer alike');
    assert.is(inner.connections, reached, 'nothing reached the internal port');
    // The signed URL's own host (and port) is the operator's choice: followed.
    assert.is((await readAll(await f.fetch(origin.url('/d/same')))).toString(), FINAL);
    // A host the caller trusts (a proxy route's canonical host), and origin.allow_private: followed.
    const trusted = await f.fetch(origin.url('/d/to-open'), { trustedHosts: [`127.0.0.1:${inner.port}`] });
    assert.is((await readAll(trusted)).toString(), 'internal admin page');
    assert.is((await readAll(await allowing.fetch(origin.url('/d/to-open')))).toString(), 'internal admin page');
    // Without the guard a closed port is a different answer (that is what the guard hides).
    const refused = (await failure(allowing.fetch(origin.url('/d/to-closed')))).message;
    assert.match(refused, /connection refused/, refused);
    // guardPrivate (submit) still refuses the first hop itself, as bad_request.
    assert.is((await failure(f.fetch(origin.url('/d/same'), { guardPrivate: true }))).code, 'bad_request');
  } finally {
    await f.destroy();
    await allowing.destroy();
  }
});

test('fetcher: a guarded hop to a name is resolved once and connects to the address it checked', async () => {
  const asked: string[] = [];
  const resolver: Resolver = async (name) => {
    asked.push(name);
    // A rebinding resolver: the first answer is the allowed address, any later one is not.
    return [{ address: asked.length === 1 ? '127.0.0.1' : '10.0.0.1', family: 4 }];
  };
  origin.route('/d/to-name', { redirect: `http://internal.test:${inner.port}/admin` });
  const refusing = new OriginFetcher({ timeoutMs: 2_000, guard: { resolver: async () => [{ address: '127.0.0.1', family: 4 }] } });
  const f = new OriginFetcher({ timeoutMs: 2_000, guard: { resolver, allow: ['127.0.0.1'] } });
  const reached = inner.connections;
  try {
    // An IP literal first: a fetcher that does not guard redirect hops fails here, before the
    // system resolver could be asked for the name below.
    assert.is((await failure(refusing.fetch(origin.url('/d/to-open')))).code, 'origin_error');
    const e = await failure(refusing.fetch(origin.url('/d/to-name')));
    assert.is(e.code, 'origin_error');
    assert.match(e.message, /redirect to internal\.test:\d+ refused/);
    assert.not.match(e.message.replace(origin.origin, ''), /127\.0\.0\.1/, 'the address a name resolved to is not told');
    assert.is(inner.connections, reached);
    const res = await f.fetch(origin.url('/d/to-name'));
    assert.is((await readAll(res)).toString(), 'internal admin page');
    assert.equal(asked, ['internal.test'], 'resolved once');
    assert.is(inner.records('/admin').at(-1)!.headers.host, `internal.test:${inner.port}`);
  } finally {
    await refusing.destroy();
    await f.destroy();
  }
});

test('gateway (allow_private off): downloads and proxy routes refuse redirect hops to another port alike, open or closed; same-host redirects still serve', async () => {
  const O = origin.origin;
  const reached = inner.connections;
  for (const path of [`/v1/download?url=${enc(`${O}/d/to-open`)}`, `/v1/download?url=${enc(`${O}/d/to-closed`)}`, '/r/to-open', '/r/to-closed']) {
    const r = await get(guarded.url, path);
    assert.is(r.status, 502, path);
    assert.is(r.body.length, 0, path);
  }
  // On an ecosystem route the reason is in the body: the same for an open and a closed port.
  const open = await get(guarded.url, '/npm/leftpad/-/leftpad-1.0.0.tgz');
  const shut = await get(guarded.url, '/npm/rightpad/-/rightpad-1.0.0.tgz');
  assert.is(open.status, 502);
  assert.is(shut.status, 502);
  const reason = (a: Answer) =>
    String(JSON.parse(a.body.toString()).error)
      .replace(/:\d+/g, ':PORT')
      .replace(/[lr]\w+pad/g, 'PKG');
  assert.is(reason(open), reason(shut));
  assert.match(reason(open), /refused: not a public address/);
  assert.is(inner.connections, reached, 'the internal port was never reached');
  // Same host as the signed URL: followed.
  const same = await get(guarded.url, `/v1/download?url=${enc(`${O}/d/same`)}`);
  assert.is(same.status, 200);
  assert.is(same.body.toString(), FINAL);
  assert.is((await get(guarded.url, '/r/same')).body.toString(), FINAL);
});

test("gateway (allow_private off): a proxy route's canonical host is the operator's: its origin's redirect there is followed", async () => {
  const reached = inner.connections;
  const viaCanonical = await get(guarded.url, '/c/admin');
  assert.is(viaCanonical.status, 200);
  assert.is(viaCanonical.body.toString(), 'internal admin page');
  assert.ok(inner.connections > reached, 'the canonical host was reached');
  // (The same hop from the /r/ route's origin was refused in the test before; now the mirror holds these bytes, verified.)
});

test('gateway: pass-through and metadata fetches never follow a redirect (the 3xx goes to the client)', async () => {
  const reached = inner.connections;
  const passed = await get(guarded.url, '/p/unsigned-redirect');
  assert.is(passed.status, 302);
  assert.is(passed.headers.location, `http://127.0.0.1:${inner.port}/admin`);
  const meta = await get(guarded.url, '/npm/moved');
  assert.ok(meta.status >= 300 && meta.status !== 200, `metadata: ${meta.status}`);
  assert.not.match(meta.body.toString(), /internal admin page/);
  assert.is(inner.connections, reached, 'the internal port was never reached');
});

// ---------------------------------------------------------------------------
// Item 6: only a complete 200 is an artifact

test('submit signs only a 200: 202, 203, 204, 205 and an unsolicited 206 are origin errors, nothing signed, the version not burned', async () => {
  const size = await chainSize();
  for (const status of [202, 203, 204, 205, 206]) {
    const path = `/s/status-${status}.bin`;
    origin.route(path, {
      status,
      body: status === 204 || status === 205 ? '' : 'some bytes',
      ...(status === 206 ? { headers: { 'content-range': 'bytes 0-9/10' } } : {}),
    });
    const r = await submit(origin.url(path));
    assert.is(r.status, 502, `${status}: ${JSON.stringify(r.body)}`);
    assert.is(r.body.status, 'origin_error', String(status));
    assert.match(r.body.message, new RegExp(`HTTP ${status}`));
  }
  assert.is(await chainSize(), size, 'nothing was signed');
  // The same URL and version, answered properly now, is signed.
  origin.route('/s/status-204.bin', { body: 'the real bytes' });
  const ok = await submit(origin.url('/s/status-204.bin'));
  assert.is(ok.status, 201, JSON.stringify(ok.body));
  const block = (await (await fetch(`${authority.url}/v1/endorsement?url=${enc(origin.url('/s/status-204.bin'))}`)).json()) as any;
  assert.is(block.payload.endorsements[0].artifact_hash, digestOf('the real bytes'));
});

test('downloads accept only a 200: an unsolicited 206 with the whole signed bytes is an origin error', async () => {
  const r = await get(guarded.url, `/v1/download?url=${enc(`${origin.origin}/d/partial`)}`);
  assert.is(r.status, 502);
  assert.is(r.body.length, 0);
  assert.is((await get(guarded.url, '/r/partial')).status, 502);
});

// ---------------------------------------------------------------------------
// Items 13 and 8: framing the signer must refuse

test('submit refuses transfer codings other than one chunked in HTTP/1.1, and control characters in chunk extensions, trailers and the reason phrase', async () => {
  const size = await chainSize();
  for (const path of Object.keys(BAD_FRAMING)) {
    const r = await submit(raw.url(path));
    assert.is(r.status, 502, `${path}: ${JSON.stringify(r.body)}`);
    assert.is(r.body.status, 'origin_error', path);
    assert.match(r.body.message, /malformed response/, path);
  }
  assert.is(await chainSize(), size, 'nothing was signed');
  // A well-framed answer from the same origin is signed.
  assert.is((await submit(raw.url('/fine'))).status, 201);
});

// ---------------------------------------------------------------------------
// Item 8: Content-Encoding

test('an encoded answer is hashed as sent and served with its Content-Encoding, from the origin and from the mirror', async () => {
  origin.route('/enc/page.txt', { body: GZ, contentType: 'text/plain', headers: { 'content-encoding': 'gzip' } });
  const url = origin.url('/enc/page.txt');
  const r = await submit(url);
  assert.is(r.status, 201, JSON.stringify(r.body));
  const block = (await (await fetch(`${authority.url}/v1/endorsement?url=${enc(url)}`)).json()) as any;
  assert.is(block.payload.endorsements[0].artifact_hash, sha256(GZ), 'the hash covers the encoded bytes');
  assert.ok(origin.records('/enc/page.txt').every((rec) => rec.headers['accept-encoding'] === 'identity'));
  for (const source of ['origin', 'mirror']) {
    const got = await get(authority.url, '/enc/page.txt');
    assert.is(got.status, 200, source);
    assert.is(got.headers['content-encoding'], 'gzip', `${source}: Content-Encoding kept`);
    assert.ok(got.body.equals(GZ), `${source}: the signed bytes`);
    assert.is(gunzipSync(got.body).toString(), PLAIN);
  }
  assert.is(origin.requests('/enc/page.txt'), 2, 'the second answer came from the mirror');
});

test.run();
