/**
 * Logs and metrics through a real `vouch serve` process and a real origin
 * on 127.0.0.1: after lookups, downloads (cold, mirror hit, hash mismatch,
 * client gone), unknown paths, submits (right, wrong and missing token) and
 * proxy requests, `/metrics` parses as Prometheus text and counts them by
 * route template, method and status, with the chain, origin, mirror,
 * submit and proxy figures; every request left exactly one JSON log line
 * with its fields and no secret; `VOUCH_LOG_LEVEL=warn` drops request lines.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { once } from 'node:events';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { createKeyFile } from '../../platform/key-file.ts';
import { createLogger } from '../../gateway/observability/logger.ts';
import { ROUTES } from '../../gateway/http/server.ts';
import { GatewayMetrics } from '../../gateway/observability/metrics.ts';
import { ProxyRoutes } from '../../gateway/routes/proxy-handler.ts';
import type { GatewayContext } from '../../gateway/context.ts';
import { OriginServer, digestOf } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-obs-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const chainDir = join(work, 'chain');
const token = 'obs-submit-token-' + 'q'.repeat(32);
const wrongToken = 'obs-wrong-token-' + 'w'.repeat(32);
const agent = new Agent({ keepAliveTimeout: 1000 });
const A = Buffer.from('artifact A, verified and mirrored\n'.repeat(64));
const B = Buffer.from('artifact B, tampered at the origin\n'.repeat(32));
const C = Buffer.from('artifact C, slow origin\n');
let origin: OriginServer;
let gw: GatewayProcess;
const enc = encodeURIComponent;

/** What the test sent, in order: the request lines must match it one to one. */
const sent: Array<{ method: string; path: string; status: number; url?: string }> = [];

function config(extra: Record<string, unknown> = {}) {
  return {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: chainDir },
    authority: { key_file: keyFile, signer: 'obs-authority', submit_token_file: tokenFile },
    origin: { allow_private: true, timeout: 5 },
    proxy: { routes: [{ prefix: '/p/', origin: origin.url('/'), unendorsed: 'deny' }] },
    ...extra,
  };
}

async function call(method: string, target: string, opts: { headers?: Record<string, string>; body?: string; url?: string } = {}) {
  const r = await request(gw.url + target, { method: method as 'GET', headers: opts.headers ?? {}, body: opts.body ?? null, dispatcher: agent });
  const body = Buffer.from(await r.body.arrayBuffer());
  sent.push({ method, path: target.split('?')[0]!, status: r.statusCode, ...(opts.url ? { url: opts.url } : {}) });
  return { status: r.statusCode, headers: r.headers as Record<string, string>, body };
}

function submit(url: string, semver: string, authorization: string | null) {
  return call('POST', '/v1/submit', {
    headers: { 'content-type': 'application/json', ...(authorization === null ? {} : { authorization }) },
    body: JSON.stringify({ url, name: 'acme/obs', semver, license: 'MIT' }),
  });
}

// ---------------------------------------------------------------------------
// A small parser of the Prometheus text format (0.0.4)

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parseProm(text: string): { samples: Sample[]; types: Map<string, string> } {
  const types = new Map<string, string>();
  const helps = new Set<string>();
  const samples: Sample[] = [];
  const lines = text.split('\n');
  assert.is(lines[lines.length - 1], '', 'the exposition must end with a newline');
  for (const line of lines) {
    if (line === '') continue;
    let m = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (m) {
      assert.not.ok(helps.has(m[1]!), `HELP twice for ${m[1]}`);
      helps.add(m[1]!);
      continue;
    }
    m = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (m) {
      assert.not.ok(types.has(m[1]!), `TYPE twice for ${m[1]}`);
      types.set(m[1]!, m[2]!);
      continue;
    }
    assert.not.ok(line.startsWith('#'), `unexpected comment: ${line}`);
    m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `not a sample line: ${line}`);
    const [, name, labelText, valueText] = m!;
    const labels: Record<string, string> = {};
    if (labelText) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)/gy;
      let consumed = 0;
      for (let lm; (lm = re.exec(labelText)) !== null; ) {
        labels[lm[1]!] = lm[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
        consumed = re.lastIndex;
      }
      assert.is(consumed, labelText.length, `bad labels: ${line}`);
    }
    const value = valueText === '+Inf' ? Infinity : valueText === '-Inf' ? -Infinity : /^nan$/i.test(valueText!) ? NaN : Number(valueText);
    assert.ok(!Number.isNaN(value) || /^nan$/i.test(valueText!), `bad value: ${line}`);
    const family = types.has(name!) ? name! : name!.replace(/_(bucket|sum|count)$/, '');
    assert.ok(types.has(family), `sample before its TYPE: ${line}`);
    samples.push({ name: name!, labels, value });
  }
  return { samples, types };
}

/** The sum of the samples named `name` whose labels include `labels` (null: none). */
function valueOf(samples: Sample[], name: string, labels: Record<string, string> = {}): number | null {
  const hits = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return hits.length === 0 ? null : hits.reduce((t, s) => t + s.value, 0);
}

async function scrape() {
  const r = await call('GET', '/metrics');
  assert.is(r.status, 200);
  assert.match(r.headers['content-type'] ?? '', /^text\/plain; version=0\.0\.4/);
  return parseProm(r.body.toString('utf8'));
}

// ---------------------------------------------------------------------------
// Log lines

/** The complete JSON lines of `text` (a line still being written is left out). */
function jsonLines(text: string): Array<Record<string, any>> {
  const complete = text.slice(0, text.lastIndexOf('\n') + 1);
  return complete
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));
}

/** Waits until the process has written at least `n` request lines (info lines are buffered). */
async function requestLines(p: GatewayProcess, n: number): Promise<Array<Record<string, any>>> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const lines = jsonLines(p.stderr()).filter((l) => l.msg === 'request');
    if (lines.length >= n || Date.now() > deadline) return lines;
    await new Promise((r) => setTimeout(r, 20));
  }
}

// ---------------------------------------------------------------------------

test.before(async () => {
  createKeyFile(keyFile);
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  origin.route('/a.tgz', { body: A, contentType: 'application/gzip' });
  origin.route('/b.tgz', { body: B });
  origin.route('/c.tgz', { body: C });
  gw = await startGatewayProcess(['--config', writeConfig(work, config())], { env: { VOUCH_LOG_LEVEL: 'info', VOUCH_LOG_FORMAT: 'json' } });
});

test.after(async () => {
  await gw?.stop();
  await origin?.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

test('createLogger: levels, one JSON line per call, secrets redacted', () => {
  const lines: string[] = [];
  const log = createLogger('info', (l) => lines.push(l));
  log.debug('hidden');
  log.info('shown', { n: 1, authorization: `Bearer ${token}`, headers: { authorization: `Bearer ${token}`, cookie: 'c=1', host: 'h' }, token });
  log.error('failed', { error: 'x' });
  assert.is(lines.length, 2);
  assert.ok(lines.every((l) => l.endsWith('\n') && l.indexOf('\n') === l.length - 1));
  const [a, b] = lines.map((l) => JSON.parse(l));
  assert.is(a.level, 'info');
  assert.is(a.msg, 'shown');
  assert.is(a.n, 1);
  assert.is(a.headers.host, 'h');
  assert.ok(!Number.isNaN(Date.parse(a.time)));
  assert.is(b.level, 'error');
  assert.not.ok(lines.join('').includes(token), 'a secret was logged');
  assert.not.ok(lines.join('').includes('c=1'), 'a cookie was logged');
  assert.is(log.enabled?.('debug'), false);
  assert.is(log.enabled?.('warn'), true);
});

test('collect-time metrics: absent sources give no sample, a throwing source does not fail the scrape, sync and push reports', async () => {
  const ctx = {
    config: { proxy: { routes: [] } },
    state: null,
    artifacts: {
      obtain: async () => {
        throw new Error('unused');
      },
      stats: () => {
        throw new Error('stats broke');
      },
    },
    submitter: null,
    syncReport: () => ({
      remote: 'r',
      last_success: null,
      last_attempt: null,
      last_error: null,
      consecutive_failures: 2,
      stale_seconds: null,
      remote_head: null,
    }),
    pushReport: () => ({ remote: 'r', remote_head: null, backlog: 5, last_push: null, last_error: null, consecutive_failures: 0 }),
  } as unknown as GatewayContext;
  const m = new GatewayMetrics(ctx, { proxy: new ProxyRoutes(ctx) });
  m.observe('/v1/endorsement', 'GET', 200, 0.002, 100);
  m.observe('/v1/endorsement', 'BREW', 200, 0.002, 100);
  const { samples } = parseProm(await m.text());
  assert.is(valueOf(samples, 'vouch_http_requests_total', { route: '/v1/endorsement', method: 'GET' }), 1);
  assert.is(valueOf(samples, 'vouch_http_requests_total', { route: '/v1/endorsement', method: 'other' }), 1);
  assert.is(valueOf(samples, 'vouch_chain_ready'), 0);
  assert.is(valueOf(samples, 'vouch_chain_size'), null);
  assert.is(valueOf(samples, 'vouch_origin_fetches_total'), null);
  assert.is(valueOf(samples, 'vouch_mirror_hits_total'), null);
  assert.is(valueOf(samples, 'vouch_submits_total'), null);
  assert.is(valueOf(samples, 'vouch_chain_sync_stale_seconds'), Infinity, 'never synced');
  assert.is(valueOf(samples, 'vouch_chain_sync_consecutive_failures'), 2);
  assert.is(valueOf(samples, 'vouch_chain_push_backlog_blocks'), 5);
  assert.is(valueOf(samples, 'vouch_proxy_requests_total', { outcome: 'verified' }), 0);
});

test('/metrics: requests by route, method and status; chain, origin, mirror, submit and proxy figures', async () => {
  const aUrl = origin.url('/a.tgz');
  const bUrl = origin.url('/b.tgz');
  const cUrl = origin.url('/c.tgz');
  assert.is((await submit(aUrl, '1.0.0', `Bearer ${wrongToken}`)).status, 401);
  assert.is((await submit(aUrl, '1.0.0', null)).status, 401);
  assert.is((await submit(aUrl, '1.0.0', `Bearer ${token}`)).status, 201);
  assert.is((await submit(bUrl, '1.0.0', `Bearer ${token}`)).status, 201);
  assert.is((await submit(cUrl, '1.0.0', `Bearer ${token}`)).status, 201);

  for (let i = 0; i < 3; i++) assert.is((await call('GET', `/v1/endorsement?url=${enc(aUrl)}`, { url: aUrl })).status, 200);
  assert.is((await call('GET', `/v1/endorsement?url=${enc('https://none.example/x.tgz')}&semver=1.0.0`, { url: 'https://none.example/x.tgz' })).status, 404);
  assert.is((await call('GET', '/v1/endorsement')).status, 400);
  assert.is((await call('GET', '/no/such/path?secret=s3cret-query-value')).status, 404);
  assert.is((await call('GET', '/')).status, 200); // the explorer page

  const cold = await call('GET', `/v1/download?url=${enc(aUrl)}`, { url: aUrl });
  assert.is(cold.status, 200);
  assert.ok(cold.body.equals(A));
  assert.is((await call('GET', `/v1/download?url=${enc(aUrl)}`, { url: aUrl })).status, 200); // mirror hit
  origin.route('/b.tgz', { body: B, tamper: true });
  assert.is((await call('GET', `/v1/download?url=${enc(bUrl)}`, { url: bUrl })).status, 409);
  assert.is((await call('GET', '/p/a.tgz')).status, 200); // proxy, verified from the mirror
  assert.is((await call('GET', '/p/none.tgz')).status, 404); // proxy, unendorsed: denied

  // A client that leaves before the answer: 499.
  origin.route('/c.tgz', { body: C, delayMs: 2_000 });
  const gone = new AbortController();
  const pending = request(`${gw.url}/v1/download?url=${enc(cUrl)}`, { dispatcher: agent, signal: gone.signal }).catch(() => null);
  await new Promise((r) => setTimeout(r, 200));
  gone.abort();
  await pending;
  sent.push({ method: 'GET', path: '/v1/download', status: 499, url: cUrl });
  await new Promise((r) => setTimeout(r, 100));

  const head = await call('HEAD', '/metrics');
  assert.is(head.status, 200);
  assert.is(head.body.length, 0);

  const { samples, types } = await scrape();
  const req = (route: string, method: string, status: number) => valueOf(samples, 'vouch_http_requests_total', { route, method, status: String(status) });
  assert.is(types.get('vouch_http_requests_total'), 'counter');
  assert.is(types.get('vouch_http_request_duration_seconds'), 'histogram');
  assert.is(req('/v1/submit', 'POST', 401), 2);
  assert.is(req('/v1/submit', 'POST', 201), 3);
  assert.is(req('/v1/endorsement', 'GET', 200), 3);
  assert.is(req('/v1/endorsement', 'GET', 404), 1);
  assert.is(req('/v1/endorsement', 'GET', 400), 1);
  assert.is(req('unknown', 'GET', 404), 1);
  assert.is(req('explorer', 'GET', 200), 1);
  assert.is(req('/v1/download', 'GET', 200), 2);
  assert.is(req('/v1/download', 'GET', 409), 1);
  assert.is(req('/v1/download', 'GET', 499), 1);
  assert.is(req('proxy', 'GET', 200), 1);
  assert.is(req('proxy', 'GET', 404), 1);
  assert.is(req('/metrics', 'HEAD', 200), 1);
  assert.is(valueOf(samples, 'vouch_http_requests_total'), sent.length - 1, 'every request but this scrape is counted');

  // Bounded labels: route templates only, never a raw path, URL or query value.
  const allowed = new Set([...Object.keys(ROUTES).filter((p) => ROUTES[p]!.handler.name !== 'handleExplorer'), 'proxy', 'explorer', 'unknown']);
  for (const s of samples.filter((x) => x.name.startsWith('vouch_http_'))) {
    assert.ok(allowed.has(s.labels.route!), `route label ${s.labels.route}`);
  }
  const everyLabel = samples.flatMap((s) => Object.values(s.labels)).join('\n');
  for (const raw of ['none.example', '/no/such', 's3cret', '127.0.0.1', '/p/a.tgz', token]) assert.not.ok(everyLabel.includes(raw), `a label carries ${raw}`);

  // The latency histogram of lookups: 5 observations, cumulative buckets ending in +Inf.
  const count = valueOf(samples, 'vouch_http_request_duration_seconds_count', { route: '/v1/endorsement' });
  assert.is(count, 5);
  const buckets = samples.filter((s) => s.name === 'vouch_http_request_duration_seconds_bucket' && s.labels.route === '/v1/endorsement');
  assert.ok(buckets.length > 5);
  for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i]!.value >= buckets[i - 1]!.value, 'buckets are cumulative');
  assert.is(buckets[buckets.length - 1]!.labels.le, '+Inf');
  assert.is(buckets[buckets.length - 1]!.value, 5);
  assert.ok(valueOf(samples, 'vouch_http_request_duration_seconds_sum', { route: '/v1/endorsement' })! > 0);
  assert.ok(valueOf(samples, 'vouch_http_response_bytes_total', { route: '/v1/download' })! > 2 * A.length);

  // Chain, submits.
  assert.is(valueOf(samples, 'vouch_chain_ready'), 1);
  assert.is(valueOf(samples, 'vouch_chain_size'), 4);
  assert.is(valueOf(samples, 'vouch_chain_head_index'), 3);
  assert.ok(valueOf(samples, 'vouch_chain_checkpoint_timestamp_seconds')! > 1.7e9);
  assert.is(valueOf(samples, 'vouch_submits_total', { outcome: 'posted' }), 3);
  assert.is(valueOf(samples, 'vouch_submits_total', { outcome: 'unchanged' }), 0);
  assert.is(valueOf(samples, 'vouch_submit_blocks_total'), 3);
  // Origin fetches for downloads: a cold, b (mismatch), c (abandoned); a's second download and the proxy hit the mirror.
  assert.is(valueOf(samples, 'vouch_origin_fetches_total'), 3);
  assert.ok(valueOf(samples, 'vouch_origin_fetch_bytes_total')! >= A.length + B.length);
  assert.is(valueOf(samples, 'vouch_hash_mismatches_total'), 1);
  assert.is(valueOf(samples, 'vouch_mirror_hits_total', { tier: 'memory' }), 2);
  assert.is(valueOf(samples, 'vouch_mirror_hits_total', { tier: 'disk' }), 0);
  assert.is(valueOf(samples, 'vouch_mirror_misses_total'), 3);
  assert.is(valueOf(samples, 'vouch_mirror_entries', { tier: 'memory' }), 1);
  assert.ok(valueOf(samples, 'vouch_mirror_bytes', { tier: 'memory' })! >= A.length);
  assert.is(valueOf(samples, 'vouch_mirror_bytes', { tier: 'disk' }), null, 'no disk tier configured');
  // Proxy outcomes.
  assert.is(valueOf(samples, 'vouch_proxy_requests_total', { outcome: 'verified' }), 1);
  assert.is(valueOf(samples, 'vouch_proxy_requests_total', { outcome: 'denied' }), 1);
  // No sync loop, no push remote: no sample at all.
  for (const n of ['vouch_chain_sync_stale_seconds', 'vouch_chain_sync_consecutive_failures', 'vouch_chain_push_backlog_blocks']) {
    assert.ok(types.has(n), `${n} is declared`);
    assert.is(valueOf(samples, n), null, `${n} has a sample`);
  }
  // Default process metrics.
  assert.ok(valueOf(samples, 'process_cpu_seconds_total')! > 0);
  assert.ok(valueOf(samples, 'nodejs_heap_size_used_bytes')! > 0);

  // The scrape itself shows up in the next one.
  const again = await scrape();
  assert.is(valueOf(again.samples, 'vouch_http_requests_total', { route: '/metrics', method: 'GET', status: '200' }), 1);
  assert.is((await call('POST', '/metrics')).status, 405);
});

test('one JSON log line per request, with its fields; no token, no Authorization; notable events logged', async () => {
  const lines = await requestLines(gw, sent.length);
  assert.equal(
    lines.map((l) => `${l.method} ${l.path} ${l.status}`),
    sent.map((s) => `${s.method} ${s.path} ${s.status}`),
    'one line per request, in order',
  );
  const fields = new Set(['level', 'time', 'msg', 'method', 'path', 'url', 'route', 'status', 'ms', 'bytes', 'remote', 'aborted']);
  lines.forEach((l, i) => {
    for (const k of Object.keys(l)) assert.ok(fields.has(k), `unexpected field ${k}`);
    assert.is(l.level, 'info');
    assert.ok(!Number.isNaN(Date.parse(l.time)));
    assert.type(l.route, 'string');
    assert.ok(typeof l.ms === 'number' && l.ms >= 0);
    assert.ok(Number.isInteger(l.bytes) && l.bytes >= 0);
    assert.is(l.remote, '127.0.0.1');
    assert.is(l.url, sent[i]!.url, `url of ${l.method} ${l.path}`);
    if (l.status === 499) assert.is(l.aborted, true);
    else assert.ok(l.bytes > 0);
  });
  const download = lines.find((l) => l.path === '/v1/download' && l.status === 200)!;
  assert.ok(download.bytes > A.length, 'bytes counts what was sent');
  assert.is(download.route, '/v1/download');

  const err = gw.stderr();
  const out = gw.stdout();
  assert.not.ok(err.includes(token) || out.includes(token), 'the submit token was logged');
  assert.not.ok(err.includes(wrongToken), 'a presented token was logged');
  assert.not.ok(/authorization|bearer/i.test(err), 'an Authorization header was logged');
  assert.not.ok(err.includes('s3cret-query-value'), 'a query value was logged');

  const all = jsonLines(err);
  assert.ok(all.some((l) => l.msg === 'chain loaded' && l.level === 'info'));
  assert.ok(all.some((l) => l.msg === 'appended' && Array.isArray(l.blocks)));
  const mismatch = all.find((l) => l.msg === 'hash mismatch: refused to serve');
  assert.ok(mismatch, 'the hash mismatch was not logged');
  assert.is(mismatch!.level, 'warn');
  assert.is(mismatch!.url, origin.url('/b.tgz'));
  assert.is(mismatch!.expected, digestOf(B));
  assert.type(mismatch!.actual, 'string');
  assert.is.not(mismatch!.actual, mismatch!.expected);
});

/**
 * Sends `targets` on ONE keep-alive connection, each after the answer to
 * the one before (`pipelined`: all of them in one write, before any
 * answer); the bytes of each whole answer (head and body) as they came.
 */
async function onOneConnection(targets: string[], pipelined = false): Promise<number[]> {
  const { hostname, port } = new URL(gw.url);
  const socket = connect({ host: hostname, port: Number(port) });
  await once(socket, 'connect');
  let got = Buffer.alloc(0);
  const sizes: number[] = [];
  const requestOf = (t: string) => `GET ${t} HTTP/1.1\r\nHost: ${hostname}:${port}\r\n\r\n`;
  try {
    if (pipelined) socket.write(targets.map(requestOf).join(''));
    for (const t of targets) {
      if (!pipelined) socket.write(requestOf(t));
      for (;;) {
        const end = got.indexOf('\r\n\r\n');
        const length = end === -1 ? NaN : Number(/\r\ncontent-length: *(\d+)/i.exec(got.subarray(0, end).toString('latin1'))?.[1]);
        if (end !== -1 && got.length >= end + 4 + length) {
          sizes.push(end + 4 + length);
          got = got.subarray(end + 4 + length);
          break;
        }
        const [chunk] = (await once(socket, 'data')) as [Buffer];
        got = Buffer.concat([got, chunk]);
      }
    }
  } finally {
    socket.destroy();
  }
  return sizes;
}

test('bytes: each request on a keep-alive connection logs the bytes of its own answer', async () => {
  const targets = [
    `/v1/endorsement?url=${enc('https://bytes.example/1.tgz')}`,
    '/healthz',
    `/v1/endorsement?url=${enc('https://bytes.example/1.tgz')}`,
    '/nope-bytes',
    `/v1/endorsement?url=${enc(origin.url('/a.tgz'))}`,
    `/v1/endorsement?url=${enc(origin.url('/a.tgz'))}`,
  ];
  const before = (await requestLines(gw, 0)).length;
  const sizes = await onOneConnection(targets);
  const lines = (await requestLines(gw, before + targets.length)).slice(before);
  assert.equal(
    lines.map((l) => `${l.method} ${l.path}`),
    targets.map((t) => `GET ${t.split('?')[0]}`),
  );
  assert.equal(
    lines.map((l) => l.bytes),
    sizes,
    'bytes logged per request = bytes of that answer on the wire',
  );
  assert.ok(new Set(sizes).size > 1, 'answers of different sizes');
});

test('bytes: pipelined requests, lookups (written by the end-of-turn batch) among others, each log their own answer, in order', async () => {
  const lookupA = `/v1/endorsement?url=${enc(origin.url('/a.tgz'))}`;
  const targets = [lookupA, '/healthz', lookupA, `/v1/endorsement?url=${enc('https://bytes.example/2.tgz')}`, lookupA, '/nope-pipelined', lookupA];
  const before = (await requestLines(gw, 0)).length;
  const sizes = await onOneConnection(targets, true);
  const lines = (await requestLines(gw, before + targets.length)).slice(before);
  assert.equal(
    lines.map((l) => `${l.method} ${l.path} ${l.status}`),
    targets.map((t, i) => `GET ${t.split('?')[0]} ${[200, 200, 200, 404, 200, 404, 200][i]}`),
  );
  assert.equal(
    lines.map((l) => l.bytes),
    sizes,
    'bytes logged per request = bytes of that answer on the wire',
  );
  assert.ok(new Set(sizes).size > 2, 'answers of different sizes');
});

test('VOUCH_LOG_LEVEL=warn: no request lines, warnings still logged, metrics still counted', async () => {
  await gw.stop();
  // Read-only on the same chain, no pinned key: warns that it trusts block 0 on first use.
  const cfg = writeConfig(work, { listen: { host: '127.0.0.1', port: 0 }, chain: { dir: chainDir } }, 'quiet.yaml');
  gw = await startGatewayProcess(['--config', cfg], { env: { VOUCH_LOG_LEVEL: 'warn', VOUCH_LOG_FORMAT: 'json' } });
  const aUrl = origin.url('/a.tgz');
  assert.is((await call('GET', `/v1/endorsement?url=${enc(aUrl)}`)).status, 200);
  assert.is((await call('GET', '/nope')).status, 404);
  const { samples } = await scrape();
  assert.is(valueOf(samples, 'vouch_http_requests_total', { route: '/v1/endorsement', status: '200' }), 1);
  assert.is(valueOf(samples, 'vouch_submits_total'), null, 'not an authority: no submit samples');
  await gw.stop();
  const lines = jsonLines(gw.stderr());
  assert.ok(
    lines.some((l) => l.level === 'warn' && /public_key/.test(l.msg)),
    'the warning was not logged',
  );
  assert.ok(
    lines.every((l) => l.level === 'warn' || l.level === 'error'),
    'a line below warn was logged',
  );
  assert.not.ok(lines.some((l) => l.msg === 'request'));
});

test.run();
