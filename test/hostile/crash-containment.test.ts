/**
 * Crash containment (issue 31, item 1), through real `vouch serve`
 * processes on 127.0.0.1:
 *
 * - the 10 MiB submit body: with and without the token, with and without
 *   `Expect: 100-continue`, chunked, aborted mid-body, and pipelined behind
 *   another request on one connection: 413 with the token, 401 without, and
 *   the process alive and serving after each (a chunked one killed it:
 *   `req.socket` was null when its 413 finished);
 * - an exception injected at each stage of the request path
 *   (`VOUCH_TEST_FAULT=<stage>@<route>`, gateway/test-fault.ts): the
 *   process survives, that request gets its 500 in its path's form (JSON
 *   `internal_error`, empty on proxy paths; its normal answer, whole, when
 *   the stage comes after the answer was sent), a slow download and a
 *   parallel request in flight complete, the error is logged once at error
 *   with its stack, and `vouch_http_unexpected_errors_total{stage}` counts it;
 * - an exception outside every request is not swallowed (the process
 *   policy, gateway/gateway.ts): one JSON error line, exit 1.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { Agent, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer, pattern, patternBytes } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { rawRequest, type RawAnswer, type RawOptions } from '../helpers/raw-http.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-crash-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'crash-token-' + 'c'.repeat(32);
const TEN_MIB = 10 * 1024 * 1024;
const SLOW = pattern(256 * 1024, 31);
let origin: OriginServer;
let seq = 0;

test.before(async () => {
  createKeyFile(keyFile);
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  origin.route('/pkg/hello.txt', { body: 'hello through the pass route\n', contentType: 'text/plain' });
});
test.after(async () => {
  await origin.close();
  rmSync(work, { recursive: true, force: true });
});

/** An authority gateway (its own chain), with a pass route to the origin, and `env` (the fault). */
function start(env: Record<string, string> = {}): Promise<GatewayProcess> {
  const dir = join(work, `gw${++seq}`);
  return startGatewayProcess(
    [
      '--config',
      writeConfig(dir, {
        listen: { host: '127.0.0.1', port: 0 },
        chain: { dir: join(dir, 'chain') },
        authority: { key_file: keyFile, signer: 'crash', submit_token_file: tokenFile },
        origin: { allow_private: true, timeout: 20 },
        proxy: { routes: [{ prefix: '/pass/', origin: `${origin.origin}/pkg/`, unendorsed: 'pass' }] },
      }),
    ],
    { env: { VOUCH_LOG_LEVEL: 'info', VOUCH_LOG_FORMAT: 'json', ...env } },
  );
}

function get(base: string, path: string, opts: RawOptions = {}): Promise<RawAnswer> {
  return rawRequest(base, path, { timeoutMs: 30_000, ...opts });
}

const json = (a: RawAnswer) => JSON.parse(a.body.toString()) as Record<string, unknown>;
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The process is alive and answers /healthz and `path` (a route without a fault). */
async function assertServing(gw: GatewayProcess, what: string, path = '/v1/authority'): Promise<void> {
  await sleep(100); // an exit of the process would show by now
  assert.is(gw.child.exitCode, null, `${what}: the gateway exited\n${gw.stderr().slice(-3000)}`);
  const h = await get(gw.url, '/healthz');
  assert.is(h.status, 200, `${what}: /healthz ${h.status}`);
  const a = await get(gw.url, path);
  assert.is(a.status, 200, `${what}: ${path} ${a.status}`);
}

// ---------------------------------------------------------------------------
// The 10 MiB body

/**
 * A POST of `size` bytes to /v1/submit with node's client: through a
 * keep-alive agent (Node's default), or `close` without one (node then
 * sends `Connection: close`); `chunked` leaves out Content-Length; `expect`
 * sends Expect: 100-continue.
 */
function bigPost(
  base: string,
  o: { auth: boolean; expect?: boolean; chunked?: boolean; close?: boolean; size?: number },
): Promise<{ status: number; body: string }> {
  const u = new URL(base);
  const size = o.size ?? TEN_MIB;
  const headers: Record<string, string | number> = { 'content-type': 'application/json' };
  if (o.auth) headers.authorization = `Bearer ${token}`;
  if (!o.chunked) headers['content-length'] = size;
  if (o.expect) headers.expect = '100-continue';
  return new Promise((resolve, reject) => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const req = httpRequest({ host: u.hostname, port: u.port, path: '/v1/submit', method: 'POST', headers, agent: o.close ? false : agent });
    const timer = setTimeout(() => req.destroy(new Error('no answer in 30 s')), 30_000);
    let answered = false;
    req.on('response', (res) => {
      answered = true;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        text += d;
      });
      res.on('end', () => {
        clearTimeout(timer);
        agent.destroy();
        resolve({ status: res.statusCode!, body: text });
      });
    });
    // The server answers before the body is in and closes the connection after a linger: a write error then is expected.
    req.on('error', (e) => {
      if (!answered) {
        clearTimeout(timer);
        agent.destroy();
        reject(e);
      }
    });
    const body = Buffer.alloc(size, 0x20);
    const send = () => {
      if (o.chunked) {
        for (let i = 0; i < size; i += 1 << 20) req.write(body.subarray(i, i + (1 << 20)));
        req.end();
      } else req.end(body);
    };
    if (o.expect) {
      req.on('continue', send);
      req.flushHeaders();
    } else send();
  });
}

test('a 10 MiB submit body: 413 with the token, 401 without, with or without Expect, chunked or not, keep-alive or Connection: close; the gateway serves on', async () => {
  const gw = await start();
  try {
    for (const auth of [true, false])
      for (const expect of [false, true])
        for (const chunked of [false, true]) {
          for (const close of [false, true]) {
            {
              const what = `${auth ? 'token' : 'no token'}, ${expect ? 'Expect: 100-continue' : 'no Expect'}, ${chunked ? 'chunked' : 'Content-Length'}, ${close ? 'Connection: close' : 'keep-alive'}`;
              // Connection: close: the answer came before the body, so the connection is closed once the body is in (not reset under the client).
              const r = await bigPost(gw.url, { auth, expect, chunked, close });
              assert.is(r.status, auth ? 413 : 401, `${what}: ${r.status} ${r.body}`);
              const b = JSON.parse(r.body) as Record<string, unknown>;
              assert.is(b.success, false, what);
              assert.is(b.status, auth ? 'too_large' : 'unauthorized', what);
              await assertServing(gw, what);
            }
          }
        }
    assert.not.match(gw.stderr(), /"level":"error"/);
  } finally {
    await gw.stop();
  }
});

/** Sends `head` then `bodyBytes` of filler on a raw connection, then resets it; resolves with what came back. */
async function abortMidBody(base: string, head: string, bodyBytes: number, chunked: boolean): Promise<string> {
  const u = new URL(base);
  const s = connect(Number(u.port), u.hostname);
  let got = '';
  s.setEncoding('latin1');
  s.on('data', (d: string) => {
    got += d;
  });
  s.on('error', () => {});
  await new Promise<void>((r) => s.once('connect', () => r()));
  s.write(head);
  const piece = Buffer.alloc(64 * 1024, 0x20);
  for (let sent = 0; sent < bodyBytes; sent += piece.length) {
    const ok = s.write(chunked ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]) : piece);
    if (!ok)
      await new Promise<void>((r) => {
        s.once('drain', () => r());
        s.once('close', () => r());
      });
    if (s.destroyed) break;
  }
  await sleep(50);
  s.resetAndDestroy();
  return got;
}

test('a 10 MiB submit body aborted mid-body (with and without the token, chunked or not): the gateway serves on', async () => {
  const gw = await start();
  try {
    for (const auth of [true, false]) {
      for (const chunked of [false, true]) {
        const head =
          `POST /v1/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${auth ? `Authorization: Bearer ${token}\r\n` : ''}` +
          `${chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${TEN_MIB}`}\r\n\r\n`;
        const got = await abortMidBody(gw.url, head, 5 * 1024 * 1024, chunked);
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0);
        // With a declared length the answer comes at once; a chunked body is read until the bound (or the reset).
        if (status !== 0) assert.is(status, auth ? 413 : 401, `${auth}, ${chunked}: ${got.slice(0, 200)}`);
        await assertServing(gw, `aborted mid-body (${auth ? 'token' : 'no token'}, ${chunked ? 'chunked' : 'Content-Length'})`);
      }
    }
  } finally {
    await gw.stop();
  }
});

test('a 10 MiB submit body pipelined behind another request on the same connection: 200 then 413 (401 without the token); the gateway serves on', async () => {
  const gw = await start();
  try {
    const u = new URL(gw.url);
    for (const auth of [true, false]) {
      for (const chunked of [false, true]) {
        const s = connect(Number(u.port), u.hostname);
        let got = '';
        s.setEncoding('latin1');
        s.on('data', (d: string) => {
          got += d;
        });
        s.on('error', () => {});
        const closed = new Promise<void>((r) => s.on('close', () => r()));
        await new Promise<void>((r) => s.once('connect', () => r()));
        const body = Buffer.alloc(TEN_MIB, 0x20);
        const framed = chunked ? Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]) : body;
        s.write(
          `GET /v1/authority HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n` +
            `POST /v1/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${auth ? `Authorization: Bearer ${token}\r\n` : ''}` +
            `${chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${body.length}`}\r\n\r\n`,
        );
        s.write(framed);
        const t = setTimeout(() => s.destroy(), 15_000);
        await closed;
        clearTimeout(t);
        const statuses = [...got.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
        assert.equal(statuses, [200, auth ? 413 : 401], `${auth}, ${chunked}: ${got.slice(0, 300)}`);
        await assertServing(gw, `pipelined (${auth ? 'token' : 'no token'}, ${chunked ? 'chunked' : 'Content-Length'})`);
      }
    }
  } finally {
    await gw.stop();
  }
});

// ---------------------------------------------------------------------------
// Faults injected at each stage

interface Stage {
  stage: string;
  /** The route label the fault is injected on. */
  route: string;
  /** The faulted request. */
  send: (base: string) => Promise<RawAnswer>;
  /** What it must answer. */
  check: (a: RawAnswer) => void;
  /** The parallel request (a route the fault is not on). */
  parallel: string;
}

const internalJson = (a: RawAnswer) => {
  assert.is(a.status, 500, a.body.toString());
  assert.match(String(a.headers['content-type']), /^application\/json/);
  assert.equal(json(a), { success: false, status: 'internal_error', message: 'internal error' });
};
const submitSmall = (base: string) =>
  get(base, '/v1/submit', {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: '{"not":"an entry"}',
  });
/** The metrics text, whole: the stage came after the answer was sent. */
const wholeMetrics = (a: RawAnswer) => {
  assert.is(a.status, 200);
  assert.is(Number(a.headers['content-length']), a.body.length);
  assert.match(a.body.toString(), /^vouch_http_requests_total\{/m);
};
const wholeOpenapi = (a: RawAnswer) => {
  assert.is(a.status, 200);
  assert.is(json(a).success, true);
};

/** A request node:http cannot parse, on a raw connection: what came back before the connection closed (bounded). */
async function malformed(base: string): Promise<RawAnswer> {
  const u = new URL(base);
  const s = connect(Number(u.port), u.hostname);
  let got = '';
  s.setEncoding('latin1');
  s.on('data', (d: string) => {
    got += d;
  });
  s.on('error', () => {});
  const closed = new Promise<void>((r) => s.on('close', () => r()));
  s.write('GET /v1/authority HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header Line\r\n\r\n');
  const t = setTimeout(() => s.destroy(), 5_000);
  await closed;
  clearTimeout(t);
  return { status: 0, headers: {}, body: Buffer.from(got, 'latin1') };
}

const STAGES: Stage[] = [
  { stage: 'handler', route: '/v1/authority', send: (b) => get(b, '/v1/authority'), check: internalJson, parallel: '/v1/openapi.json' },
  { stage: 'handler_async', route: '/v1/authority', send: (b) => get(b, '/v1/authority'), check: internalJson, parallel: '/v1/openapi.json' },
  { stage: 'body', route: '/v1/submit', send: submitSmall, check: internalJson, parallel: '/v1/authority' },
  {
    stage: 'batch',
    route: '/v1/endorsement',
    send: (b) => get(b, `/v1/endorsement?url=${encodeURIComponent(origin.url('/slow.bin'))}`),
    check: internalJson,
    parallel: '/v1/authority',
  },
  // After the answer was written whole (an async handler's answer is recorded by these listeners): nothing to replace.
  { stage: 'finish', route: '/metrics', send: (b) => get(b, '/metrics'), check: wholeMetrics, parallel: '/v1/authority' },
  { stage: 'close', route: '/metrics', send: (b) => get(b, '/metrics'), check: wholeMetrics, parallel: '/v1/authority' },
  { stage: 'log', route: '/v1/openapi.json', send: (b) => get(b, '/v1/openapi.json'), check: wholeOpenapi, parallel: '/v1/authority' },
  { stage: 'metrics', route: '/v1/openapi.json', send: (b) => get(b, '/v1/openapi.json'), check: wholeOpenapi, parallel: '/v1/authority' },
  {
    stage: 'handler',
    route: '/v1/download',
    send: (b) => get(b, `/v1/download?url=${encodeURIComponent(origin.url('/slow.bin'))}`),
    check: (a) => {
      assert.is(a.status, 500);
      assert.is(a.body.length, 0);
    },
    parallel: '/v1/authority',
  },
  // node:http's 'clientError' (a request it cannot parse): the listener that would answer 400 throws, the connection is closed.
  { stage: 'client_error', route: 'client_error', send: (b) => malformed(b), check: (a) => assert.is(a.body.toString(), ''), parallel: '/v1/authority' },
  {
    stage: 'proxy',
    route: 'proxy',
    send: (b) => get(b, '/pass/hello.txt'),
    check: (a) => {
      assert.is(a.status, 500);
      assert.is(a.body.length, 0);
    },
    parallel: '/v1/authority',
  },
];

for (const s of STAGES) {
  test(`a fault at ${s.stage} (${s.route}): that request only, a 500 in its form; a download and a parallel request complete; logged once with its stack; counted`, async () => {
    const gw = await start({ VOUCH_TEST_FAULT: `${s.stage}@${s.route}` });
    try {
      // An endorsed artifact (for the lookup of the batch stage, the download of the proxy stage), whose origin then answers slowly.
      if (s.stage !== 'body') {
        origin.route('/slow.bin', { body: SLOW });
        const submitted = await get(gw.url, '/v1/submit', {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ url: origin.url('/slow.bin'), name: 'crash/slow', semver: '1.0.0', license: 'MIT' }),
        });
        assert.is(submitted.status, 201, submitted.body.toString());
      }
      origin.route('/slow.bin', { body: SLOW, trickle: { bytes: 16 * 1024, everyMs: 40 } });
      origin.route('/pkg/slow.bin', { body: SLOW, trickle: { bytes: 16 * 1024, everyMs: 40 } });
      // A slow download in flight while the fault strikes: a verified one, or a pass-through stream (the proxy stage faults those).
      const started = Date.now();
      const download = get(gw.url, s.stage === 'proxy' ? `/v1/download?url=${encodeURIComponent(origin.url('/slow.bin'))}` : '/pass/slow.bin');
      await sleep(150);
      const [faulted, parallel] = await Promise.all([s.send(gw.url), get(gw.url, s.parallel)]);
      s.check(faulted);
      assert.is(parallel.status, 200, `parallel ${s.parallel}: ${parallel.status}`);
      const d = await download;
      assert.is(d.status, 200, `download: ${d.status}`);
      assert.is(sha(d.body), sha(patternBytes(SLOW)), 'the download completed whole');
      assert.ok(Date.now() - started >= 300, 'the download was in flight while the fault struck');
      await assertServing(gw, s.stage, s.parallel);
      // Logged once, at error, with the stack; counted under its stage.
      await sleep(200);
      const lines = gw
        .stderr()
        .split('\n')
        .filter((l) => l.includes('unexpected exception on the request path'));
      assert.is(lines.length, 1, `one error line, got:\n${lines.join('\n')}`);
      const line = JSON.parse(lines[0]!) as Record<string, unknown>;
      assert.is(line.level, 'error');
      assert.is(line.stage, s.stage);
      assert.match(String(line.stack), new RegExp(`^Error: injected fault at ${s.stage} \\(VOUCH_TEST_FAULT, tests only\\)\\n\\s+at `));
      const metrics = (await get(gw.url, '/metrics')).body.toString();
      assert.match(metrics, new RegExp(`^vouch_http_unexpected_errors_total\\{stage="${s.stage}"\\} 1$`, 'm'));
      assert.is([...metrics.matchAll(/^vouch_http_unexpected_errors_total\{/gm)].length, 1, 'no other stage counted');
    } finally {
      await gw.stop();
    }
  });
}

test('an exception outside every request (a timer) is not swallowed: one JSON error line with its stack, then the process exits 1', async () => {
  const gw = await start({ VOUCH_TEST_FAULT: 'uncaught@ready' });
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([gw.exited, new Promise<string>((r) => (timer = setTimeout(() => r('still running'), 20_000)))]);
  clearTimeout(timer); // a pending 20 s timer would hold the file open that long after its last test
  if (code === 'still running') await gw.stop();
  assert.is(code, 1, gw.stderr().slice(-2000));
  const lines = gw
    .stderr()
    .split('\n')
    .filter((l) => l.includes('uncaught exception outside the request path'));
  assert.is(lines.length, 1, gw.stderr().slice(-2000));
  const line = JSON.parse(lines[0]!) as Record<string, unknown>;
  assert.is(line.level, 'error');
  assert.is(line.origin, 'uncaughtException');
  assert.match(String(line.stack), /^Error: injected fault at uncaught /);
});

test('without VOUCH_TEST_FAULT nothing is injected, whatever the request carries', async () => {
  const gw = await start();
  try {
    for (const path of ['/v1/authority', '/v1/openapi.json', '/pass/hello.txt']) {
      const r = await get(gw.url, path, { headers: { 'vouch-test-fault': 'handler@/v1/authority', 'x-vouch-test-fault': 'handler' } });
      assert.is(r.status, 200, path);
    }
    const r = await submitSmall(gw.url);
    assert.is(r.status, 400);
    const metrics = (await get(gw.url, '/metrics')).body.toString();
    assert.match(metrics, /^# TYPE vouch_http_unexpected_errors_total counter$/m);
    assert.not.match(metrics, /^vouch_http_unexpected_errors_total\{/m);
  } finally {
    await gw.stop();
  }
});

test.run();
