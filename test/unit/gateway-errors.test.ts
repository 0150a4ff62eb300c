/**
 * The error contract in one place: the gateway's HTTP statuses
 * (gateway/http/error-status.ts) match the status table of docs/spec/http.md, server-side
 * failures surface as 500 internal_error (JSON on JSON paths, empty on
 * downloads) without any internal detail, and the Accept rule.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ERROR_CATALOGUE, VouchError, type ErrorCode } from '../../chain/errors.ts';
import { PUBLIC_CODES, acceptsJson, rawHeader } from '../../gateway/http/http-util.ts';
import { HTTP_STATUS } from '../../gateway/http/error-status.ts';
import { utcDay } from '../../gateway/gateway.ts';
import { request as httpRequest } from 'node:http';
import { createRequestHandler } from '../../gateway/http/server.ts';
import { createLogger } from '../../gateway/observability/logger.ts';
import { defaultConfig } from '../../gateway/config.ts';
import type { GatewayContext } from '../../gateway/context.ts';
import { repoRoot } from '../helpers/vectors.ts';

test("the HTTP contract's status table (docs/spec/http.md), the error catalogue and the gateway's statuses agree, both ways", () => {
  const spec = readFileSync(join(repoRoot, 'docs', 'spec', 'http.md'), 'utf8');
  const section = spec.slice(spec.indexOf('## Status codes'));
  const rows = [...section.matchAll(/^\| (\d{3}) \| `([a-z_]+)` \|/gm)].map((m) => [Number(m[1]), m[2] as ErrorCode] as const);
  assert.ok(rows.length >= 14, `only ${rows.length} rows found`);
  for (const [status, code] of rows) {
    assert.ok(code in ERROR_CATALOGUE, `docs/spec/http.md lists unknown code ${code}`);
    assert.is(HTTP_STATUS[code], status, `docs/spec/http.md says ${code} is ${status}`);
  }
  for (const code of PUBLIC_CODES)
    assert.ok(
      rows.some(([, c]) => c === code),
      `${code} is missing from the table in docs/spec/http.md`,
    );
});

let server: Server;
let base = '';
const logged: string[] = [];
const ctx: GatewayContext = {
  config: defaultConfig('/nonexistent'),
  state: {
    index: {
      select: () => {
        throw new Error('disk on fire at /secret/path');
      },
    },
    get authority(): never {
      throw new VouchError('io_error', 'cannot read /secret/path/blocks/000/000/000000000.json');
    },
  } as any,
  artifacts: {
    obtain: async () => {
      throw new Error('boom');
    },
  },
  submitter: null,
  submitTokenHash: null,
  vibecode: { spec: 'x', skills: [] },
  today: () => '2026-01-01',
  log: createLogger('debug', (l) => logged.push(l)),
  startedAt: Date.now(),
};

test.before(async () => {
  server = createServer(createRequestHandler(ctx));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
test.after(() => new Promise<void>((r) => server.close(() => r())));

test('an unexpected exception is a 500 internal_error JSON answer without details; the server keeps serving', async () => {
  for (const path of ['/v1/endorsement?url=https%3A%2F%2Fa.example%2Fx', '/v1/authority']) {
    const r = await fetch(base + path);
    assert.is(r.status, 500);
    const j = (await r.json()) as any;
    assert.equal([j.success, j.status, j.message], [false, 'internal_error', 'internal error']);
    assert.not.match(JSON.stringify(j), /secret|fire|at \//);
  }
  const d = await fetch(base + '/v1/download?url=https%3A%2F%2Fa.example%2Fx');
  assert.is(d.status, 500);
  assert.is((await d.arrayBuffer()).byteLength, 0);
  assert.is((await fetch(base + '/nope')).status, 404);
  assert.ok(
    logged.some((l) => l.includes('disk on fire')),
    'the cause was not logged for the operator',
  );
});

test('submit on a gateway without an authority is 404 JSON', async () => {
  const r = await fetch(base + '/v1/submit', { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
  assert.is(r.status, 404);
  assert.is(((await r.json()) as any).status, 'not_found');
});

test('Accept: the most specific matching range decides', () => {
  const yes = [
    undefined,
    '',
    '*/*',
    'application/json',
    'application/*',
    'text/html, application/json;q=0.1',
    'application/problem+json',
    'application/json; charset=utf-8',
  ];
  const no = ['text/html', 'text/*', 'application/json;q=0', 'application/json;q=0, */*', 'image/png, text/plain', '*/*;q=0'];
  for (const a of yes) assert.ok(acceptsJson(a), `should accept ${a}`);
  for (const a of no) assert.not.ok(acceptsJson(a), `should refuse ${a}`);
});

test('rawHeader reads a header as req.headers would: any case, repeated fields joined', async () => {
  const seen: { raw: (string | undefined)[]; parsed: (string | undefined)[] }[] = [];
  const server = createServer((req, res) => {
    seen.push({ raw: [rawHeader(req, 'accept'), rawHeader(req, 'x-none')], parsed: [req.headers.accept, req.headers['x-none'] as string | undefined] });
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  const send = (headers: string[]) =>
    new Promise<void>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: '/', headers: ['Host', `127.0.0.1:${port}`, ...headers] }, (res) => {
        res.resume();
        res.on('end', () => resolve());
      });
      req.on('error', reject);
      req.end();
    });
  try {
    await send(['ACCEPT', 'text/html', 'Accept', 'application/json;q=0.5']);
    await send(['accept', '*/*']);
    await send([]);
  } finally {
    server.close();
  }
  assert.is(seen.length, 3, 'every request reached the handler');
  assert.equal(
    seen.map((x) => x.raw),
    [
      ['text/html, application/json;q=0.5', undefined],
      ['*/*', undefined],
      [undefined, undefined],
    ],
  );
  for (const x of seen) assert.equal(x.raw, x.parsed);
});

test('utcDay: the UTC date by the clock, recomputed when the day changes (also before 1970)', () => {
  let t = Date.UTC(2026, 10, 22, 23, 59, 59, 999);
  const today = utcDay(() => t);
  assert.is(today(), '2026-11-22');
  t += 1;
  assert.is(today(), '2026-11-23');
  t = Date.UTC(2026, 10, 22, 0, 0, 0);
  assert.is(today(), '2026-11-22', 'the clock going back is followed too');
  t = Date.UTC(1969, 11, 31, 12);
  assert.is(today(), '1969-12-31');
  t = Date.UTC(2028, 1, 29, 5);
  assert.is(today(), '2028-02-29');
});

test.run();
