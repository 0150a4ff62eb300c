/**
 * `vouch get` against a gateway that answers anything but the protocol
 * (issue 31): JSON null, arrays and scalars, missing or mistyped members,
 * bad proofs, non-JSON, wrong content types, truncated, oversized and
 * mis-framed bodies, headers twice or unparseable, redirects, broken HTTP.
 * Each is a refusal: exit 1, one line `<catalogue code>: ...` on stderr,
 * nothing written. A real `vouch serve` gateway holds the log; a raw TCP
 * server on 127.0.0.1 plays a second gateway that relays its answers and
 * breaks them; the real `vouch get` runs as a child process. A
 * property-based run (fast-check, fixed seed) mutates genuine answers
 * arbitrarily and requires that vouch get never exits 2.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { Agent, request } from 'undici';
import { ERROR_CATALOGUE, type ErrorCode } from '../../chain/errors.ts';
import { EXIT_CODE } from '../../tools/exit-codes.ts';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouchAsync, type Run } from '../helpers/processes.ts';
import { repoRoot } from '../helpers/vectors.ts';

const LOG = 'log.hostile.test';
const work = mkdtempSync(join(tmpdir(), 'vouch-get-hostile-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'test-token-' + 'h'.repeat(32);
const agent = new Agent({ maxHeaderSize: 1024 * 1024 });
const BYTES = 'console.log("widget 1.0.0");\n';
let pub = '';
let U = '';
let origin: OriginServer;
let gw: GatewayProcess;
let hostile: Server;
let H = '';

// ---------------------------------------------------------------- the hostile gateway

/** A gateway's answer as the hostile server is about to write it. */
interface Answer {
  statusLine: string;
  headers: [string, string][];
  body: Buffer;
  /** The Content-Length written: the body's length unless set (null: none, the body ends with the connection). */
  contentLength?: number | null;
}
type Mutate = (path: string, a: Answer) => Answer | Buffer;
let mutate: Mutate = (_p, a) => a;

const DROPPED = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'date']);

/** Relays `target` to the real gateway and writes the (mutated) answer with its own hand: any bytes at all. */
async function relay(socket: Socket, target: string): Promise<void> {
  const r = await request(gw.url + target, { dispatcher: agent, headers: { accept: 'application/json' } });
  const body = Buffer.from(await r.body.arrayBuffer());
  const headers: [string, string][] = [];
  for (const [k, v] of Object.entries(r.headers)) {
    if (DROPPED.has(k) || v === undefined) continue;
    for (const x of Array.isArray(v) ? v : [v]) headers.push([k, x]);
  }
  const out = mutate(new URL(target, 'http://x').pathname, { statusLine: `HTTP/1.1 ${r.statusCode} X`, headers, body });
  if (Buffer.isBuffer(out)) {
    socket.end(out);
    return;
  }
  const length = out.contentLength === undefined ? out.body.length : out.contentLength;
  const head = [
    out.statusLine,
    ...out.headers.map(([k, v]) => `${k}: ${v}`),
    ...(length === null ? [] : [`content-length: ${length}`]),
    'connection: close',
    '',
    '',
  ].join('\r\n');
  socket.end(Buffer.concat([Buffer.from(head, 'utf8'), out.body]));
}

async function startHostile(): Promise<void> {
  hostile = createServer((socket) => {
    socket.on('error', () => {});
    let got = '';
    socket.on('data', (d) => {
      if (got.includes('\r\n\r\n')) return;
      got += d.toString('latin1');
      if (!got.includes('\r\n\r\n')) return;
      const target = got.split(' ')[1] ?? '/';
      relay(socket, target).catch(() => socket.destroy());
    });
  });
  await new Promise<void>((ok) => hostile.listen(0, '127.0.0.1', ok));
  H = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
}

// ---------------------------------------------------------------- setup

test.before(async () => {
  try {
    pub = createKeyFile(keyFile).publicKeyB64;
    writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
    origin = await OriginServer.start();
    U = origin.url('/widget.js');
    origin.route('/widget.js', { body: BYTES, contentType: 'text/javascript' });
    const dir = join(work, 'gw');
    gw = await startGatewayProcess([
      '--config',
      writeConfig(dir, {
        listen: { host: '127.0.0.1', port: 0 },
        service_name: 'vouch-test',
        chain: { dir: join(dir, 'chain'), origin: LOG },
        authority: { key_file: keyFile, signer: 'test-authority', submit_token_file: tokenFile },
        origin: { allow_private: true, timeout: 5 },
      }),
    ]);
    await submitEntry(gw.url, token, { url: U, name: 'acme/widget', semver: '1.0.0', license: 'MIT' });
    await startHostile();
  } catch (e) {
    console.error(e);
    throw e;
  }
});

test.after(async () => {
  hostile?.close();
  await gw?.stop();
  await origin?.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

let run = 0;
/** `vouch get` through `gateways` with a fresh state file; FILE must not exist unless it exits 0. */
async function get(gateways: string[]): Promise<Run & { file: string }> {
  const n = ++run;
  const file = join(work, `out-${n}.js`);
  const r = await vouchAsync(
    [
      'get',
      ...gateways.flatMap((g) => ['--gateway', g]),
      '--url',
      U,
      '--public-key',
      pub,
      '-o',
      file,
      '--state',
      join(work, `state-${n}.json`),
      '--timeout',
      '60',
    ],
    {},
    90_000,
  );
  return { ...r, file };
}

/** The last stderr line is `<code>: ...` with a catalogue code whose exit is 1. */
function refusalCode(r: Run): string {
  const last = r.stderr.trim().split('\n').at(-1) ?? '';
  const m = /^([a-z_0-9]+): \S/.exec(last);
  assert.ok(m, `no refusal line: ${r.stderr}`);
  assert.ok(m![1]! in ERROR_CATALOGUE, `${m![1]} is not a catalogue code: ${last}`);
  assert.is(EXIT_CODE[m![1] as ErrorCode], 1, last);
  return m![1]!;
}

const json = (a: Answer, value: unknown): Answer => ({ ...a, body: Buffer.from(value === undefined ? '' : JSON.stringify(value)) });
const edit = (a: Answer, f: (o: Record<string, any>) => void): Answer => {
  const o = JSON.parse(a.body.toString());
  f(o);
  return json(a, o);
};
const header = (a: Answer, name: string, value: string | null, twice = false): Answer => ({
  ...a,
  headers: [
    ...a.headers.filter(([k]) => k !== name),
    ...(value === null
      ? []
      : twice
        ? ([
            [name, value],
            [name, value],
          ] as [string, string][])
        : ([[name, value]] as [string, string][])),
  ],
});
const valueOf = (a: Answer, name: string) => a.headers.find(([k]) => k === name)?.[1] ?? '';

test("the CLI guide's refusal table (docs/guide/cli.md) and the catalogue's `answer` codes agree, both ways, each exiting 1", () => {
  const readme = readFileSync(join(repoRoot, 'docs', 'guide', 'cli.md'), 'utf8');
  const from = readme.indexOf('**Refusal codes.**');
  assert.ok(from > 0, 'no refusal table in docs/guide/cli.md');
  const section = readme.slice(from, readme.indexOf('\n\n', readme.indexOf('| Code |', from)));
  const listed = [...section.matchAll(/^\| `([a-z_]+)` +\|/gm)].map((m) => m[1]!).sort();
  const answer = (Object.keys(ERROR_CATALOGUE) as ErrorCode[]).filter((c) => ERROR_CATALOGUE[c].kind === 'answer').sort();
  assert.equal(listed, answer);
  for (const c of answer) assert.is(EXIT_CODE[c], 1, c);
});

test('the honest relay passes: the hostile server itself changes nothing unless told', async () => {
  mutate = (_p, a) => a;
  for (const gateways of [[H], [gw.url, H]]) {
    const r = await get(gateways);
    assert.is(r.status, 0, r.stderr);
    assert.is(readFileSync(r.file, 'utf8'), BYTES);
  }
});

test('FILE that cannot be written (a missing directory) is one line io_error, exit 2, not a crash', async () => {
  mutate = (_p, a) => a;
  const file = join(work, 'missing-dir', 'out.js');
  const r = await vouchAsync(['get', '--gateway', H, '--url', U, '--public-key', pub, '-o', file, '--state', join(work, 'state-missing.json')], {}, 90_000);
  assert.is(r.status, 2, r.stderr);
  assert.is(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /^vouch get: cannot write .*out\.js\.vouch-\d+\.tmp: ENOENT\n$/);
  assert.not.ok(existsSync(join(work, 'state-missing.json')));
});

type Case = [string, 'lookup' | 'download', Mutate, RegExp];

const CASES: Case[] = [
  // The lookup of a second gateway (`--gateway A --gateway H`, H's /v1/endorsement?…&proof=1).
  ['lookup JSON null', 'lookup', (_p, a) => json(a, null), /^bad_answer: .*the answer is JSON null, not an object$/],
  ['lookup JSON array', 'lookup', (_p, a) => json(a, [1]), /^bad_answer: .*the answer is JSON an array, not an object$/],
  ['lookup JSON number', 'lookup', (_p, a) => json(a, 42), /^bad_answer: .*the answer is JSON a number, not an object$/],
  ['lookup JSON string', 'lookup', (_p, a) => json(a, 'block'), /^bad_answer: .*the answer is JSON a string, not an object$/],
  ['lookup not JSON', 'lookup', (_p, a) => ({ ...a, body: Buffer.from('<html>hello</html>') }), /^bad_answer: .*the answer is not JSON$/],
  ['lookup empty body', 'lookup', (_p, a) => ({ ...a, body: Buffer.alloc(0) }), /^bad_answer: .*the answer is not JSON$/],
  ['lookup of type text/html', 'lookup', (_p, a) => header(a, 'content-type', 'text/html'), /^bad_answer: .*of type "text\/html", not application\/json$/],
  ['lookup of no type', 'lookup', (_p, a) => header(a, 'content-type', null), /^bad_answer: .*of no content type, not application\/json$/],
  [
    'lookup content-type twice',
    'lookup',
    (_p, a) => header(a, 'content-type', 'application/json', true),
    /^bad_answer: .*sent the content-type header 2 times$/,
  ],
  ['lookup without the block', 'lookup', (_p, a) => json(a, { success: true, proof: JSON.parse(a.body.toString()).proof }), /^malformed: /],
  [
    'lookup index a string',
    'lookup',
    (_p, a) =>
      edit(a, (o) => {
        o.index = String(o.index);
      }),
    /^malformed: /,
  ],
  [
    'lookup payload null',
    'lookup',
    (_p, a) =>
      edit(a, (o) => {
        o.payload = null;
      }),
    /^malformed: /,
  ],
  [
    'lookup without proof',
    'lookup',
    (_p, a) =>
      edit(a, (o) => {
        delete o.proof;
      }),
    /^no_proof: /,
  ],
  [
    'lookup proof a number',
    'lookup',
    (_p, a) =>
      edit(a, (o) => {
        o.proof = 5;
      }),
    /^bad_proof: .*the proof is not a JSON object$/,
  ],
  [
    'lookup proof hashes a string',
    'lookup',
    (_p, a) =>
      edit(a, (o) => {
        o.proof.proof = 'x';
      }),
    /^bad_proof: .*"proof" is not a list/,
  ],
  [
    'lookup proof checkpoint null',
    'lookup',
    (_p, a) =>
      edit(a, (o) => {
        o.proof.checkpoint = null;
      }),
    /^bad_proof: .*"checkpoint" is not a note text$/,
  ],
  [
    'lookup revoked_by a string',
    'lookup',
    (_p, a) =>
      edit(a, (o) => {
        o.revoked_by = 'yes';
      }),
    /^bad_answer: .*"revoked_by" is not an object with a block index$/,
  ],
  [
    'lookup body cut short of its Content-Length',
    'lookup',
    (_p, a) => ({ ...a, contentLength: a.body.length + 100 }),
    /^bad_answer: .*(not as long as its Content-Length|closed the connection in the middle|broke off)/,
  ],
  ['lookup Content-Length shorter than its body', 'lookup', (_p, a) => ({ ...a, contentLength: a.body.length - 10 }), /^bad_answer: .*the answer is not JSON$/],
  [
    'lookup oversized',
    'lookup',
    (_p, a) => ({ ...a, body: Buffer.concat([a.body, Buffer.alloc(9 * 1024 * 1024, 0x20)]) }),
    /^bad_answer: .*answer of \d+ bytes, more than 8388608$/,
  ],
  [
    'lookup oversized, close-delimited',
    'lookup',
    (_p, a) => ({ ...a, body: Buffer.concat([a.body, Buffer.alloc(9 * 1024 * 1024, 0x20)]), contentLength: null }),
    /^bad_answer: .*answer larger than 8388608 bytes$/,
  ],
  [
    'lookup Content-Length not a number',
    'lookup',
    (_p, a) => ({ ...a, headers: [...a.headers, ['content-length', 'lots']], contentLength: null }),
    /^bad_answer: .*not HTTP\/1\.1/,
  ],
  [
    'lookup redirect',
    'lookup',
    (_p, a) => ({ ...header(a, 'location', 'http://127.0.0.1:1/elsewhere'), statusLine: 'HTTP/1.1 302 Found' }),
    /^bad_answer: .*HTTP 302, a redirect to "http:\/\/127\.0\.0\.1:1\/elsewhere": a gateway answers itself/,
  ],
  [
    'lookup 204',
    'lookup',
    (_p, a) => ({ ...a, statusLine: 'HTTP/1.1 204 No Content', body: Buffer.alloc(0), contentLength: null }),
    /^bad_answer: .*HTTP 204 is not an answer of the protocol/,
  ],
  ['lookup not HTTP', 'lookup', () => Buffer.from('HTTQ/1.1 200 OK\r\n\r\n{}'), /^bad_answer: .*the answer is not HTTP\/1\.1/],
  ['lookup headers of 5 MiB', 'lookup', (_p, a) => header(a, 'x-pad', 'p'.repeat(5 * 1024 * 1024)), /^bad_answer: .*headers are larger than 4194304 bytes$/],
  ['lookup deeply nested JSON', 'lookup', (_p, a) => ({ ...a, body: Buffer.from('['.repeat(200_000) + ']'.repeat(200_000)) }), /^bad_answer: /],
  // The download of the only gateway (`--gateway H`).
  [
    'download body cut short of its Content-Length',
    'download',
    (_p, a) => ({ ...a, contentLength: a.body.length + 1000 }),
    /^bad_answer: .*\/v1\/download: (the answer's body is not as long as its Content-Length|the gateway closed the connection in the middle of its answer)$/,
  ],
  ['download Content-Length shorter than its body', 'download', (_p, a) => ({ ...a, contentLength: a.body.length - 5 }), /^hash_mismatch: /],
  ['download UNS twice', 'download', (_p, a) => header(a, 'uns', valueOf(a, 'uns'), true), /^bad_answer: .*sent the uns header 2 times$/],
  ['download UNS not JSON', 'download', (_p, a) => header(a, 'uns', '{"vouch-test":'), /^bad_answer: .*: the UNS header is not JSON$/],
  ['download UNS JSON null', 'download', (_p, a) => header(a, 'uns', 'null'), /^bad_answer: .*: the UNS header is not \{"<service>":\{\.\.\.\}\}$/],
  ['download UNS without a block', 'download', (_p, a) => header(a, 'uns', '{"vouch-test":{"endorsement":7}}'), /^malformed: /],
  ['download without UNS', 'download', (_p, a) => header(a, 'uns', null), /^malformed: the gateway sent no UNS header/],
  ['download Vouch-Proof JSON null', 'download', (_p, a) => header(a, 'vouch-proof', 'null'), /^bad_proof: .*the proof is not a JSON object$/],
  ['download Vouch-Proof an array', 'download', (_p, a) => header(a, 'vouch-proof', '[]'), /^bad_proof: .*the proof is not a JSON object$/],
  ['download Vouch-Proof not JSON', 'download', (_p, a) => header(a, 'vouch-proof', '{"index":'), /^bad_proof: .*the proof is not JSON$/],
  [
    'download Vouch-Proof twice',
    'download',
    (_p, a) => header(a, 'vouch-proof', valueOf(a, 'vouch-proof'), true),
    /^bad_answer: .*sent the vouch-proof header 2 times$/,
  ],
  [
    'download Vouch-Proof size a string',
    'download',
    (_p, a) => header(a, 'vouch-proof', JSON.stringify({ ...JSON.parse(valueOf(a, 'vouch-proof')), size: '3' })),
    /^bad_proof: .*"size" is not a non-negative integer$/,
  ],
  [
    'download redirect',
    'download',
    (_p, a) => ({ ...header(a, 'location', '/elsewhere'), statusLine: 'HTTP/1.1 301 Moved' }),
    /^bad_answer: .*HTTP 301, a redirect/,
  ],
  ['download 206', 'download', (_p, a) => ({ ...a, statusLine: 'HTTP/1.1 206 Partial' }), /^bad_answer: .*HTTP 206 is not an answer of the protocol/],
  [
    'download head broken off',
    'download',
    (_p, a) => Buffer.from(`HTTP/1.1 200 OK\r\nuns: ${valueOf(a, 'uns').slice(0, 50)}`),
    /^bad_answer: .*closed the connection in the middle of its answer$/,
  ],
  [
    'download chunked body broken off',
    'download',
    (_p, a) =>
      Buffer.concat([
        Buffer.from(`HTTP/1.1 200 OK\r\n${a.headers.map(([k, v]) => `${k}: ${v}\r\n`).join('')}transfer-encoding: chunked\r\n\r\n5\r\n`),
        a.body.subarray(0, 5),
        Buffer.from('\r\n100\r\nabc'),
      ]),
    /^bad_answer: .*\/v1\/download: /,
  ],
];

test('every malformed answer is a refusal: exit 1, one line with its catalogue code, nothing written', async () => {
  const failures: string[] = [];
  for (const [what, where, m, expect] of CASES) {
    const path = where === 'lookup' ? '/v1/endorsement' : '/v1/download';
    mutate = (p, a) => (p === path ? m(p, a) : a);
    const r = await get(where === 'lookup' ? [gw.url, H] : [H]);
    const lines = r.stderr.trim().split('\n');
    if (r.status !== 1 || lines.length !== 1 || !expect.test(lines[0]!) || existsSync(r.file)) {
      failures.push(`${what}: exit ${r.status}, stderr ${JSON.stringify(r.stderr.slice(0, 400))}`);
    }
  }
  assert.is(failures.length, 0, `\n${failures.join('\n')}`);
});

// ---------------------------------------------------------------- arbitrary mutations

/** Sets (or deletes) the member at `path` (indexes into the keys of each level) of a JSON value. */
function mutateJson(doc: unknown, path: number[], value: unknown, del: boolean): unknown {
  if (path.length === 0 || typeof doc !== 'object' || doc === null) return value;
  const keys = Object.keys(doc);
  if (keys.length === 0) return value;
  const k = keys[path[0]! % keys.length]!;
  const o = doc as Record<string, unknown>;
  if (path.length === 1 && del) delete o[k];
  else o[k] = mutateJson(o[k], path.slice(1), value, del);
  return doc;
}

const jsonOrNull = (b: Buffer | string): unknown => {
  try {
    return JSON.parse(b.toString());
  } catch {
    return undefined;
  }
};

const mutation = fc.oneof(
  fc.record({
    kind: fc.constant('member' as const),
    path: fc.array(fc.nat(40), { minLength: 1, maxLength: 4 }),
    value: fc.jsonValue({ maxDepth: 3 }),
    del: fc.boolean(),
  }),
  fc.record({ kind: fc.constant('body' as const), value: fc.jsonValue({ maxDepth: 3 }) }),
  fc.record({ kind: fc.constant('bytes' as const), at: fc.nat(), bytes: fc.uint8Array({ maxLength: 12 }), cut: fc.nat(40) }),
  fc.record({ kind: fc.constant('length' as const), delta: fc.integer({ min: -60, max: 60 }) }),
  fc.record({
    kind: fc.constant('header' as const),
    name: fc.constantFrom('content-type', 'uns', 'vouch-proof', 'content-length'),
    value: fc.option(fc.string({ maxLength: 30 })),
    twice: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant('headerMember' as const),
    name: fc.constantFrom('uns', 'vouch-proof'),
    path: fc.array(fc.nat(40), { minLength: 1, maxLength: 5 }),
    value: fc.jsonValue({ maxDepth: 2 }),
    del: fc.boolean(),
  }),
  fc.record({ kind: fc.constant('status' as const), status: fc.constantFrom(201, 202, 203, 204, 205, 206, 226, 300, 301, 302, 303, 304, 305, 307, 308) }),
);
type Mutation = typeof mutation extends fc.Arbitrary<infer T> ? T : never;

function apply(a: Answer, m: Mutation): Answer {
  switch (m.kind) {
    case 'member': {
      const doc = jsonOrNull(a.body);
      return doc === undefined ? a : json(a, mutateJson(doc, m.path, m.value, m.del));
    }
    case 'body':
      return json(a, m.value);
    case 'bytes': {
      const at = a.body.length === 0 ? 0 : m.at % a.body.length;
      return { ...a, body: Buffer.concat([a.body.subarray(0, at), Buffer.from(m.bytes), a.body.subarray(Math.min(a.body.length, at + m.cut))]) };
    }
    case 'length':
      return { ...a, contentLength: Math.max(0, (a.contentLength ?? a.body.length) + m.delta) };
    case 'header':
      return header(a, m.name, m.value, m.twice);
    case 'headerMember': {
      const doc = jsonOrNull(valueOf(a, m.name));
      return doc === undefined ? a : header(a, m.name, JSON.stringify(mutateJson(doc, m.path, m.value, m.del)) ?? 'null');
    }
    case 'status':
      return { ...a, statusLine: `HTTP/1.1 ${m.status} X` };
  }
}

test('property: arbitrary mutations of genuine answers never make vouch get exit 2 (fast-check, seed 31)', async () => {
  const seen = new Map<string, number>();
  await fc.assert(
    fc.asyncProperty(fc.constantFrom('lookup' as const, 'download' as const), fc.array(mutation, { minLength: 1, maxLength: 3 }), async (where, ms) => {
      const path = where === 'lookup' ? '/v1/endorsement' : '/v1/download';
      mutate = (p, a) => (p === path ? ms.reduce(apply, a) : a);
      const r = await get(where === 'lookup' ? [gw.url, H] : [H]);
      if (r.status === 0) {
        assert.is(readFileSync(r.file, 'utf8'), BYTES, 'exit 0 with other bytes');
        seen.set('ok', (seen.get('ok') ?? 0) + 1);
        return;
      }
      assert.is(r.status, 1, `exit ${r.status}: ${r.stderr}`);
      assert.not.match(r.stderr, /internal error|\n\s+at /);
      assert.not.ok(existsSync(r.file), 'a refused FILE was written');
      const code = refusalCode(r);
      seen.set(code, (seen.get(code) ?? 0) + 1);
    }),
    { seed: 31, numRuns: 40, endOnFailure: true },
  );
  console.log(`  (outcomes: ${[...seen].map(([k, n]) => `${k} ${n}`).join(', ')})`);
  assert.ok(seen.size >= 4, 'the mutations reach too few checks');
});

test.run();
