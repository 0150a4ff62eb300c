/**
 * The request line and the stderr sink (gateway/observability/logger.ts, gateway/observability/log-sink.ts):
 * the hand-written request line carries what pino's line carried (same keys,
 * order and values) and stays one line whatever the URL or path holds
 * (quotes, backslashes, control characters, newlines, U+2028, lone
 * surrogates); the sink keeps lines in order, writes warn/error lines
 * through, survives a reader that stalls (backlog, then counted drops and a
 * notice) or is gone; and a real gateway whose stderr is a file has written
 * the line of its last request when it exits on SIGTERM, as a process that
 * dies of an uncaught exception has written its lines.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { createLogger, hundredthsNumber, jsonString, lineSafe, logRequest, requestLine, type RequestRecord } from '../../gateway/observability/logger.ts';
import { LineSink, isoNow, isoOf, wallClock } from '../../gateway/observability/log-sink.ts';
import { urlParam } from '../../gateway/http/server.ts';
import { writeConfig } from '../helpers/gateway-process.ts';
import { repoRoot } from '../helpers/vectors.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-loglines-'));
test.after(() => rmSync(work, { recursive: true, force: true }));

const HOSTILE = [
  'https://a.example/pkg/"quoted"/x.tgz',
  'https://a.example/back\\slash\\"x',
  'line\nbreak\r\nand\ttab\u0000nul\u001bescape\u007fdel',
  'para\u2028graph\u2029sep',
  'lone high \ud800 and lone low \udc00 and a pair \ud83d\ude00',
  '\udfff\ud800',
  'ünïcödé 日本 ',
  '{"level":"error","msg":"forged"}\n{"x":1}',
  'x'.repeat(5000),
];

/** Checks that `line` is one JSON line: one final newline, no raw control character, U+2028/9 or lone surrogate. */
function assertOneLine(line: string): void {
  assert.ok(line.endsWith('\n'));
  assert.is(line.indexOf('\n'), line.length - 1, 'a raw newline inside the line');
  assert.not.ok(/[\u0000-\u001f\u2028\u2029]/.test(line.slice(0, -1)), 'a raw control character or line separator');
  assert.not.ok(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(line), 'a raw lone surrogate');
}

function record(extra: Partial<RequestRecord> = {}): RequestRecord {
  return {
    method: 'GET',
    path: '/v1/endorsement',
    route: '/v1/endorsement',
    status: 200,
    ms: 0.07,
    bytes: 1370,
    remote: '127.0.0.1',
    url: 'https://a.example/pkg/1/artifact-1.tgz',
    aborted: false,
    ...extra,
  };
}

test('the request line is the line pino wrote for the same fields: keys, order, values', () => {
  const lines: string[] = [];
  const log = createLogger('info', (l) => lines.push(l));
  const cases: RequestRecord[] = [
    record(),
    record({ url: null, status: 404, remote: null }),
    record({ status: 499, aborted: true, bytes: 0, ms: 12.34 }),
    record({ method: 'HEAD', path: '/v1/download', route: '/v1/download', url: 'https://cdn.example/w.tgz' }),
  ];
  for (const r of cases) {
    lines.length = 0;
    logRequest({ debug() {}, info: log.info, warn() {}, error() {} }, r); // a logger without `request`: pino makes the line
    log.request!(r); // the hand-written line
    assert.is(lines.length, 2);
    const [viaPino, byHand] = lines.map((l) => l.replace(/"time":"[^"]*"/, '"time":"T"'));
    assert.is(byHand, viaPino);
    const parsed = JSON.parse(lines[1]!);
    assert.equal(Object.keys(parsed), [
      'level',
      'time',
      'method',
      'path',
      'route',
      'status',
      'ms',
      'bytes',
      'remote',
      ...(r.url != null ? ['url'] : []),
      ...(r.aborted ? ['aborted'] : []),
      'msg',
    ]);
    assert.is(parsed.msg, 'request');
    assert.is(parsed.level, 'info');
    assert.ok(Math.abs(Date.parse(parsed.time) - Date.now()) < 60_000);
  }
});

test('hostile URLs and paths: one line each, the same strings back', () => {
  for (const s of HOSTILE) {
    const line = requestLine(record({ url: s, path: s, route: 'unknown' }));
    assertOneLine(line);
    const parsed = JSON.parse(line);
    assert.is(parsed.url, s);
    assert.is(parsed.path, s);
    assert.is(parsed.msg, 'request', 'a field was forged');
    assert.is(parsed.level, 'info');
    assert.is(JSON.parse(jsonString(s)), s);
  }
  // Lines pino makes (every other line) are made line-safe too.
  const lines: string[] = [];
  const log = createLogger('info', (l) => lines.push(l));
  for (const s of HOSTILE) log.warn('hash mismatch: refused to serve', { url: s });
  assert.is(lines.length, HOSTILE.length);
  lines.forEach((l, i) => {
    assertOneLine(l);
    assert.is(JSON.parse(l).url, HOSTILE[i]);
  });
  assert.is(lineSafe('{"a":"b"}'), '{"a":"b"}');
});

test('the url parameter: first one, decoded, cut at 1,024 characters (a cut pair still logs as one line)', () => {
  const enc = encodeURIComponent;
  assert.is(urlParam(''), null);
  assert.is(urlParam('semver=1.0.0'), null);
  assert.is(urlParam('xurl=a'), null);
  assert.is(urlParam(`url=${enc('https://a.example/x y?z=1&w')}`), 'https://a.example/x y?z=1&w');
  assert.is(urlParam('semver=1&url=https%3A%2F%2Fa.example%2Fa+b&url=second'), 'https://a.example/a b');
  assert.is(urlParam('url=%E0%A4%A'), null, 'undecodable');
  const cut = urlParam(`url=${enc('a'.repeat(1023) + '\u{1f600}')}`)!;
  assert.is(cut.length, 1024);
  assert.is(cut.charCodeAt(1023), 0xd83d);
  const line = requestLine(record({ url: cut }));
  assertOneLine(line);
  assert.is(JSON.parse(line).url, cut);
});

test('ms: hundredths written as String() writes them; other numbers as JSON.stringify does', () => {
  for (let h = 0; h <= 2_000_000; h++) {
    const ms = Math.round(h) / 100;
    if (hundredthsNumber(ms) !== String(ms)) assert.unreachable(`${ms}: ${hundredthsNumber(ms)}`);
  }
  for (const seconds of [0.000_012_34, 0.000_5, 0.123_456, 1.5, 61.007, 3_600.000_01]) {
    const ms = Math.round(seconds * 1e5) / 100; // what the request handler logs
    assert.is(hundredthsNumber(ms), String(ms));
  }
  for (const n of [0.125, 1 / 3, -1, -0.5, 1e21, 2 ** 60, NaN, Infinity, -Infinity]) assert.is(hundredthsNumber(n), JSON.stringify(n), String(n));
  assert.is(JSON.parse(requestLine(record({ ms: 12.3 }))).ms, 12.3);
  assert.is(JSON.parse(requestLine(record({ ms: NaN }))).ms, null);
});

test("time: isoOf is toISOString (made from the second's prefix), years 0 to 9999 and beyond", () => {
  const cases = [
    0, 1, 999, 1000, 1001, -1, -999, -1000, -1001, 1_767_225_599_999, 1_767_225_600_000, 253_402_300_799_999, 253_402_300_800_000, -62_167_219_200_000,
    -62_167_219_200_001,
  ];
  for (let k = 0; k < 20_000; k++) cases.push(Math.floor((k * 7_919_993_311) % 4e12) - 1e12, 1_767_225_600_000 + k * 37);
  for (const ms of cases) if (isoOf(ms) !== new Date(ms).toISOString()) assert.unreachable(`${ms}: ${isoOf(ms)}`);
  const before = Date.now();
  const now = Date.parse(isoNow());
  assert.ok(now >= before && now <= Date.now(), 'isoNow is now');
});

test('time: a request line made with `time` carries that time; wallClock is Date.now() read from performance.now(), the wall clock read again past a second', () => {
  const at = Date.UTC(2026, 0, 2, 3, 4, 5, 6);
  const line = requestLine(record({ time: at }));
  assert.is(JSON.parse(line).time, '2026-01-02T03:04:05.006Z');
  assert.not.ok(/"time":.*"time":/.test(line), 'time is written once');
  const p = performance.now();
  const w = wallClock(p);
  assert.ok(Math.abs(w - Date.now()) <= 2, `wallClock ${w} vs Date.now() ${Date.now()}`);
  // Within the second: from the offset already read (the clock is not read again).
  assert.ok(Math.abs(wallClock(p + 500) - (w + 500)) <= 1);
  // Past it (or back in time): the wall clock is read again, here giving what Date.now() says now, not w + 1500.
  assert.ok(Math.abs(wallClock(p + 1500) - Date.now()) <= 2, 'read again after a second');
  assert.ok(Math.abs(wallClock(p) - Date.now()) <= 2, 'read again when the time goes back');
});

test('createLogger: request lines only at info and below', () => {
  const lines: string[] = [];
  createLogger('warn', (l) => lines.push(l)).request!(record());
  assert.is(lines.length, 0);
  createLogger('debug', (l) => lines.push(l)).request!(record());
  assert.is(lines.length, 1);
});

// ---------------------------------------------------------------------------
// The sink

/** A write(2) double: records what it was given; `refuse` makes it throw EAGAIN (or another code). */
function fakeFd() {
  const state = { out: '', calls: 0, refuse: null as string | null, takeAtMost: Infinity };
  const write = (_fd: number, buf: Buffer, off: number, len: number) => {
    state.calls++;
    if (state.refuse !== null) throw Object.assign(new Error(state.refuse), { code: state.refuse });
    const n = Math.min(len, state.takeAtMost);
    state.out += buf.subarray(off, off + n).toString('utf8');
    return n;
  };
  return { state, write };
}

const lineN = (i: number) => `{"n":${i},"pad":"${'p'.repeat(40)}"}\n`;

test('sink: buffered until full or flushMs, urgent lines written through in order, big lines whole', async () => {
  const { state, write } = fakeFd();
  const sink = new LineSink(99, { bufferBytes: 1024, flushMs: 30, write });
  sink.write(lineN(0));
  assert.is(state.calls, 0, 'written at once');
  for (let i = 1; i < 40; i++) sink.write(lineN(i));
  assert.ok(state.calls >= 1 && state.calls <= 3, `${state.calls} writes for 40 lines`);
  sink.write('{"level":"warn"}\n', true);
  const expected = Array.from({ length: 40 }, (_, i) => lineN(i)).join('') + '{"level":"warn"}\n';
  assert.is(state.out, expected, 'urgent: everything before it, and it, written in order');
  sink.write(lineN(40));
  const big = `{"big":"${'b'.repeat(5000)}"}\n`;
  sink.write(big);
  sink.write(lineN(41));
  await new Promise((r) => setTimeout(r, 80));
  assert.is(state.out, expected + lineN(40) + big + lineN(41), 'written within flushMs, in order');
  // Multi-byte text: bytes counted, not characters.
  sink.write('{"u":"日本\u{1f600}"}\n');
  sink.flush();
  assert.ok(state.out.endsWith('{"u":"日本\u{1f600}"}\n'));
});

test('sink: a stalled reader (EAGAIN) gets a bounded backlog, then drops are counted and reported once it reads', () => {
  const { state, write } = fakeFd();
  const sink = new LineSink(99, { bufferBytes: 256, backlogBytes: 2048, flushMs: 10_000, urgentWaitMs: 20, write });
  state.refuse = 'EAGAIN';
  for (let i = 0; i < 200; i++) sink.write(lineN(i));
  assert.ok(sink.dropped > 100, `dropped ${sink.dropped}`);
  const kept = 200 - sink.dropped;
  const t0 = performance.now();
  sink.write('{"level":"error","msg":"urgent"}\n', true);
  assert.ok(performance.now() - t0 >= 15, 'an urgent line waits for the reader a while');
  assert.ok(performance.now() - t0 < 2_000, 'but not for ever');
  state.refuse = null;
  state.takeAtMost = 100; // a slow reader: partial writes
  sink.flush();
  const lines = state.out
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  const numbered = lines.filter((l) => typeof l.n === 'number').map((l) => l.n);
  assert.equal(
    numbered,
    Array.from({ length: kept }, (_, i) => i),
    'the lines kept, whole and in order, the first ones',
  );
  assert.ok(
    lines.some((l) => l.msg === 'urgent'),
    'the urgent line, written once the reader was back',
  );
  const notice = lines.find((l) => typeof l.dropped === 'number');
  assert.ok(notice, 'no line says lines were dropped');
  assert.is(notice.dropped, sink.dropped);
  assert.is(notice.level, 'warn');
  // Once reported, not again.
  sink.write(lineN(999));
  sink.flush();
  assert.is(state.out.split('\n').filter((l) => l.includes('"dropped"')).length, 1);
});

test('sink: what a stalled reader refused is written once it reads again, with no new line to prompt it', async () => {
  const { state, write } = fakeFd();
  const sink = new LineSink(99, { bufferBytes: 256, flushMs: 20, write });
  state.refuse = 'EAGAIN';
  for (let i = 0; i < 20; i++) sink.write(lineN(i));
  await new Promise((r) => setTimeout(r, 60)); // the flush after flushMs is refused too
  assert.is(state.out, '');
  state.refuse = null;
  await new Promise((r) => setTimeout(r, 120));
  assert.is(state.out, Array.from({ length: 20 }, (_, i) => lineN(i)).join(''));
  assert.is(sink.dropped, 0);
});

test('sink: a reader that is gone (EPIPE) costs lines, never an exception', () => {
  const { state, write } = fakeFd();
  const sink = new LineSink(99, { bufferBytes: 256, write });
  state.refuse = 'EPIPE';
  for (let i = 0; i < 50; i++) sink.write(lineN(i));
  sink.write('{"level":"error"}\n', true);
  sink.flush();
  assert.ok(sink.dropped >= 40);
});

// ---------------------------------------------------------------------------
// Real processes, stderr to a file as an operator keeps it

function spawnLogged(args: string[], logFile: string, env: Record<string, string> = {}) {
  const fd = openSync(logFile, 'a');
  const child = spawn(process.execPath, args, { cwd: repoRoot, env: { ...process.env, VOUCH_LOG_FORMAT: 'json', ...env }, stdio: ['ignore', 'pipe', fd] });
  closeSync(fd);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d;
  });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return { child, exited, out: () => out };
}

const requestLines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .filter((l) => l.msg === 'request');

test('a gateway stopped by SIGTERM right after answering has written the line of its last request', async () => {
  const keyFile = join(work, 'authority.pem');
  const tokenFile = join(work, 'submit.token');
  createKeyFile(keyFile);
  writeFileSync(tokenFile, 'loglines-token-' + 't'.repeat(32) + '\n', { mode: 0o600 });
  const cfg = writeConfig(work, {
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: join(work, 'chain') },
    authority: { key_file: keyFile, signer: 'loglines', submit_token_file: tokenFile },
  });
  const logFile = join(work, 'gateway.log');
  const gw = spawnLogged([join(repoRoot, 'tools', 'vouch.js'), 'serve', '--config', cfg], logFile);
  const deadline = Date.now() + 60_000;
  while (!/^ready: /m.test(gw.out())) {
    assert.ok(Date.now() < deadline, `not ready: ${gw.out()}\n${readFileSync(logFile, 'utf8')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  const url = /listening on (http:\/\/\S+)/.exec(gw.out())![1]!;
  const n = 25;
  for (let i = 0; i < n; i++) {
    const res = await fetch(`${url}/v1/endorsement?url=${encodeURIComponent(`https://a.example/missing-${i}.tgz`)}`);
    assert.is(res.status, 404);
    await res.arrayBuffer();
  }
  const last = `https://a.example/last/"${'\u2028'}.tgz`;
  const res = await fetch(`${url}/v1/endorsement?url=${encodeURIComponent(last)}`);
  await res.arrayBuffer();
  gw.child.kill('SIGTERM'); // well within the sink's 100 ms: the last lines are still in its buffer
  assert.is(await gw.exited, 0);
  const lines = requestLines(logFile);
  assert.is(lines.length, n + 1, 'a request line is missing');
  assert.is(lines.at(-1)!.url, last);
  const text = readFileSync(logFile, 'utf8');
  assert.ok(text.endsWith('\n'));
  assert.ok(text.includes('"msg":"stopping"'));
});

test('a process that dies of an uncaught exception has written its buffered lines', async () => {
  const script = join(work, 'crash.ts');
  writeFileSync(
    script,
    [
      `import { createLogger } from ${JSON.stringify(join(repoRoot, 'gateway', 'observability', 'logger.ts'))};`,
      'const log = createLogger("info");',
      'for (let i = 0; i < 500; i++) log.request!({ method: "GET", path: "/p", route: "unknown", status: 404, ms: 1, bytes: 10, remote: "127.0.0.1", url: `u${i}` });',
      'setTimeout(() => { throw new Error("boom"); }, 5);',
    ].join('\n'),
  );
  const logFile = join(work, 'crash.log');
  const p = spawnLogged(['--import', 'tsx', script], logFile);
  assert.is.not(await p.exited, 0);
  const lines = requestLines(logFile);
  assert.is(lines.length, 500);
  assert.is(lines.at(-1)!.url, 'u499');
  const text = readFileSync(logFile, 'utf8');
  assert.ok(text.indexOf('boom') > text.indexOf('"url":"u499"'), 'the exception, after the lines logged before it');
});

test.run();
