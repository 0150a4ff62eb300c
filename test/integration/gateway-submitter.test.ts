/**
 * Submit (docs/spec/design.md §3.5) end to end below HTTP: body validation, posted /
 * unchanged / semver_conflict, the multi-artifact form, group commit under
 * concurrency, origin failures, and an injected append failure — against a
 * real chain repository in a temp dir, a real node:http origin and the real
 * git CLI for auditing what landed on the branch.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { VouchError } from '../../chain/errors.ts';
import { statusOf } from '../../gateway/http/http-util.ts';
import { type Block, formatBlockFile, formatCheckpointFile, formatDateTime, parseBlockText } from '../../chain/block.ts';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint } from '../../chain/build.ts';
import { utf8 } from '../../chain/encoding.ts';
import { ChainIndex } from '../../chain/select.ts';
import { verifyChain } from '../../chain/verify.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { commitFor } from '../../store/chain-append.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { digestUrl } from '../../artifacts/artifact-digest.ts';
import { Submitter, type SubmitResult } from '../../gateway/chain/submitter.ts';
import { T0, testSigner } from '../helpers/chain-fixture.ts';
import { refusal } from '../helpers/refusal.ts';
import { gitIn } from '../helpers/processes.ts';

const signer = testSigner();
const work = mkdtempSync(join(tmpdir(), 'vouch-submit-'));
const dir = join(work, 'chain');
let repo: ChainRepo;
const index = new ChainIndex();
let submitter: Submitter;
let base = '';
let server: Server;

// ---------------------------------------------------------------- the origin

/** path -> bytes, or a function of the request number for that path. */
const artifacts = new Map<string, string | ((n: number) => string)>();
const hits = new Map<string, number>();
/** When set, every origin response waits for it. */
let gate: Promise<void> | null = null;
let arrived = 0;
let onArrive: (() => void) | null = null;

function setArtifact(path: string, body: string | ((n: number) => string)): string {
  artifacts.set(path, body);
  return base + path;
}

/** Holds origin answers until `n` requests have arrived (so that they finish together). */
function barrier(n: number): void {
  arrived = 0;
  let release!: () => void;
  gate = new Promise<void>((r) => (release = r));
  onArrive = () => {
    if (++arrived >= n) {
      gate = null;
      onArrive = null;
      release();
    }
  };
}

// ---------------------------------------------------------------- faults and clock

let failAppends = 0;
let appendStarted: (() => void) | null = null;
let appendGate: Promise<void> | null = null;
let clock = Date.UTC(2026, 5, 15, 12, 0, 0);

/** The real repository, with an append that can be made to fail (fault injection). */
function faultyRepo(real: ChainRepo): ChainRepo {
  return new Proxy(real, {
    get(target, prop) {
      if (prop === 'append') {
        return async (...args: Parameters<ChainRepo['append']>) => {
          appendStarted?.();
          if (appendGate) await appendGate;
          if (failAppends > 0) {
            failAppends--;
            throw new Error('injected append fault');
          }
          return target.append(...args);
        };
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

// ---------------------------------------------------------------- audit helpers

const git = (...args: string[]) => gitIn(dir, ...args).trim();
const commitCount = () => Number(git('rev-list', '--count', 'HEAD'));

function allBlocks(): Block[] {
  const out: Block[] = [];
  for (let i = 0; i < repo.size; i++) out.push(parseBlockText(repo.readBlockFile(i), i));
  return out;
}

function assertSound(): void {
  const blocks = allBlocks();
  const r = verifyChain(blocks, { backend: nodeBackend, checkpoint: JSON.parse(repo.readCheckpoint()!) });
  assert.ok(r.ok, r.ok ? '' : `chain does not verify: ${r.message}`);
  assert.is(index.size, repo.size, 'index and repository sizes differ');
  assert.is(index.head!.record_hash, blocks[blocks.length - 1]!.record_hash, 'index head is not the repository head');
  assert.is(git('status', '--porcelain'), '', 'git status is not clean');
}

const hashOf = (text: string, alg: 'sha256' | 'sha512' = 'sha256') => artifactHashOf(nodeBackend, alg, utf8(text));
const single = (url: string, semver = '1.0.0', extra: Record<string, unknown> = {}) => ({ url, name: 'acme/widget', semver, license: 'MIT', ...extra });

// ---------------------------------------------------------------- setup

test.before(async () => {
  server = createServer(async (req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const n = (hits.get(path) ?? 0) + 1;
    hits.set(path, n);
    onArrive?.();
    if (gate) await gate;
    const a = artifacts.get(path);
    if (a === undefined) {
      res.writeHead(404).end('no');
      return;
    }
    const body = Buffer.from(typeof a === 'function' ? a(n) : a);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const authority = buildAuthorityBlock({ signer, backend: nodeBackend, now: T0, uns: 'acme/chain' });
  const checkpoint = buildCheckpoint({ head: authority, signer, now: T0 });
  repo = await ChainRepo.init(dir, [{ index: 0, content: formatBlockFile(authority) }], formatCheckpointFile(checkpoint), commitFor([authority], T0));
  index.add(authority);
  submitter = new Submitter(
    {
      repo: faultyRepo(repo),
      signer,
      backend: nodeBackend,
      index,
      head: () => index.head!,
      digest: (url, algorithm) => digestUrl(url, algorithm, { limits: { timeoutMs: 5_000, maxBytes: 1 << 20, maxRedirects: 2 } }),
      now: () => (clock += 1000),
    },
    { log: () => {} },
  );
});

test.after(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(work, { recursive: true, force: true });
});

// ---------------------------------------------------------------- validation

test('body validation: each bad field is a bad_request naming it', async () => {
  const u = 'https://a.example/x.js';
  const entry = { url: u, name: 'acme/w', semver: '1.0.0', license: 'MIT' };
  const multi = (extra: Record<string, unknown>) => ({ uns: 'acme/w', semver: '1.0.0', endorsements: [entry], ...extra });
  const many = Array.from({ length: 1001 }, (_, i) => ({ ...entry, url: `https://a.example/${i}` }));
  const cases: [unknown, RegExp][] = [
    [null, /JSON object/],
    [[single(u)], /JSON object/],
    ['x', /JSON object/],
    [{ name: 'acme/w', semver: '1.0.0', license: 'MIT' }, /missing url/],
    [single(u, '1.0.0', { extra: 1 }), /unknown member "extra"/],
    [single('ftp://a.example/x'), /^url must be an absolute http\(s\) URL/],
    [single('/relative/x.js'), /^url /],
    [single('https://a.example/a b'), /^url /],
    [{ ...single(u), url: 42 }, /^url must be a string/],
    [single(u, '1.0'), /^semver must be a SemVer/],
    [single(u, '01.0.0'), /^semver /],
    [{ ...single(u), name: 'widget' }, /^name must be <owner>\/<name>/],
    [{ ...single(u), license: '' }, /^license /],
    [{ ...single(u), license: 'MIT\nX' }, /^license /],
    [single(u, '1.0.0', { comment: 7 }), /^comment must be a string/],
    [single(u, '1.0.0', { comment: 'x'.repeat(64 * 1024 + 1) }), /^comment is longer/],
    [single(u, '1.0.0', { comment: 'a\uD800b' }), /^comment holds a lone surrogate/],
    [single(u, '1.0.0', { effective_date: '2026-02-30' }), /^effective_date must be a date/],
    [single(u, '1.0.0', { effective_date: '2026-1-01' }), /^effective_date /],
    [single(u, '1.0.0', { algorithm: 'md5' }), /^algorithm must be one of/],
    [single(u, '1.0.0', { tags: ['release'] }), /^tags must be an object/],
    [single(u, '1.0.0', { tags: { release: 'yes' } }), /^tags\.release must be a boolean/],
    [single(u, '1.0.0', { tags: { '': true } }), /^tags name "" /],
    [single(u, '1.0.0', { tags: JSON.parse('{"__proto__": true}') }), /^tags name "__proto__" is reserved/],
    [single(u, '1.0.0', { tags: Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`t${i}`, true])) }), /^tags has more than 1000/],
    [multi({ url: u }), /unknown member "url"/],
    [{ uns: 'acme/w', semver: '1.0.0' }, /missing endorsements/],
    [multi({ uns: 'nope' }), /^uns must be <owner>\/<name>/],
    [multi({ semver: 'v1' }), /^semver /],
    [multi({ endorsements: {} }), /^endorsements must be an array/],
    [multi({ endorsements: [] }), /^endorsements must hold at least one/],
    [multi({ endorsements: many }), /^endorsements has more than 1000/],
    [multi({ endorsements: [entry, 'x'] }), /^endorsements\[1\] must be an object/],
    [multi({ endorsements: [{ ...entry, sha: 'x' }] }), /^endorsements\[0\]: unknown member "sha"/],
    [multi({ endorsements: [{ ...entry, url: 'mailto:a@b' }] }), /^endorsements\[0\]\.url /],
    [multi({ endorsements: [{ ...entry, name: 'w' }] }), /^endorsements\[0\]\.name /],
    [multi({ endorsements: [{ ...entry, semver: '1' }] }), /^endorsements\[0\]\.semver /],
    [multi({ endorsements: [{ ...entry, license: '(' }] }), /^endorsements\[0\]\.license /],
    [multi({ endorsements: [{ ...entry, comment: false }] }), /^endorsements\[0\]\.comment /],
    [multi({ endorsements: [entry, { ...entry }] }), /^endorsements\[1\]\.url repeats/],
    [
      multi({ endorsements: Array.from({ length: 300 }, (_, i) => ({ ...entry, url: `https://a.example/${i}`, comment: 'c'.repeat(60_000) })) }),
      /^endorsements: the block would be larger/,
    ],
  ];
  const before = commitCount();
  for (const [body, want] of cases) {
    const e = await refusal(submitter.submit(body));
    assert.is(e.code, 'bad_request', `${JSON.stringify(body)?.slice(0, 80)}: ${e.code} ${e.message}`);
    assert.is(statusOf(e), 400);
    assert.match(e.message, want, `${JSON.stringify(body)?.slice(0, 80)} -> ${e.message}`);
    assert.not.match(e.message, /\n/);
  }
  assert.is(hits.size, 0, 'a refused body must not reach the origin');
  assert.is(commitCount(), before);
  assert.is(submitter.stats().invalid, cases.length);
});

// ---------------------------------------------------------------- posted, unchanged, conflict

test('201 posted: the block is committed, on disk, in the index, and the chain verifies', async () => {
  const url = setArtifact('/widget-1.0.0.js', 'console.log("widget 1.0.0");\n');
  const before = commitCount();
  const r = await submitter.submit(single(url, '1.0.0', { tags: { release: true }, comment: 'first release' }));
  assert.is(r.httpStatus, 201);
  assert.equal(Object.keys(r.body).sort(), ['index', 'record_hash', 'status', 'success', 'url']);
  assert.is(r.body.success, true);
  assert.is(r.body.status, 'posted');
  assert.is(r.body.url, url);
  assert.is(r.body.index, 1);
  const onDisk = parseBlockText(repo.readBlockFile(1), 1);
  assert.is(onDisk.record_hash, r.body.record_hash);
  const e = onDisk.payload.endorsements[0]!;
  assert.is(e.artifact_url, url);
  assert.is(e.artifact_hash, hashOf('console.log("widget 1.0.0");\n'));
  assert.is(e.comment, 'first release');
  assert.equal(onDisk.payload.tags, { release: true });
  assert.is(onDisk.payload.effective_date, formatDateTime(clock).slice(0, 10), 'effective_date defaults to today (UTC) from now()');
  assert.is(index.versions(url).length, 1);
  assert.is(index.versions(url)[0]!.block.record_hash, r.body.record_hash);
  assert.is(commitCount(), before + 1);
  assert.match(git('log', '-1', '--format=%B'), new RegExp(`^block 1: endorse acme/widget 1\\.0\\.0\\n\\n${url.replace(/[.]/g, '\\.')}`));
  assertSound();
});

test('200 unchanged: same bytes and semver answer the existing block; no commit (also under another algorithm)', async () => {
  const url = base + '/widget-1.0.0.js';
  const existing = index.versions(url)[0]!.block;
  const before = commitCount();
  const r = await submitter.submit(single(url));
  assert.is(r.httpStatus, 200);
  assert.equal(r.body, { success: true, status: 'unchanged', url, index: existing.index, record_hash: existing.record_hash });
  const r2 = await submitter.submit(single(url, '1.0.0', { algorithm: 'sha512' }));
  assert.is(r2.httpStatus, 200, 'the same bytes hashed with sha512 are recognised as unchanged');
  assert.is(r2.body.record_hash, existing.record_hash);
  assert.is(commitCount(), before);
  assert.is(repo.size, 2);
  assertSound();
});

test('409 semver_conflict: same URL + semver with other bytes; a new semver then posts', async () => {
  const url = setArtifact('/widget-1.0.0.js', 'console.log("tampered");\n');
  const before = commitCount();
  for (const algorithm of ['sha256', 'sha512']) {
    const e = await refusal(submitter.submit(single(url, '1.0.0', { algorithm })));
    assert.is(e.code, 'semver_conflict');
    assert.is(statusOf(e), 409);
    assert.is(e.resource, url);
    assert.match(e.message, /already signed in block 1/);
  }
  assert.is(commitCount(), before);
  const r = await submitter.submit(single(url, '1.0.1', { algorithm: 'sha512' }));
  assert.is(r.httpStatus, 201);
  assert.is(r.body.index, 2);
  assert.is(index.versions(url).length, 2);
  assert.match(index.versions(url)[1]!.entry.artifact_hash, /^sha512:[0-9a-f]{128}$/);
  // The newest version is now 1.0.1: resubmitting it is unchanged, 1.0.0 still conflicts.
  assert.is((await submitter.submit(single(url, '1.0.1'))).httpStatus, 200);
  assert.is((await refusal(submitter.submit(single(url, '1.0.0')))).code, 'semver_conflict');
  assertSound();
});

test('multi-artifact form: one block for the release; unchanged on resubmit; one changed file conflicts', async () => {
  const files = ['app.js', 'app.css', 'app.wasm'];
  const urls = files.map((f) => setArtifact(`/rel/2.0.0/${f}`, `bytes of ${f}`));
  const body = {
    uns: 'acme/app',
    semver: '2.0.0',
    comment: 'release 2.0.0',
    effective_date: '2026-06-01',
    tags: { lts: false },
    endorsements: urls.map((url, i) => ({ url, name: 'acme/app', semver: '2.0.0', license: 'Apache-2.0', ...(i === 0 ? { comment: 'entry' } : {}) })),
  };
  const before = commitCount();
  const r = await submitter.submit(body);
  assert.is(r.httpStatus, 201);
  assert.is(r.body.status, 'posted');
  assert.is(r.body.url, urls[0]);
  assert.equal(r.body.urls, urls);
  const block = parseBlockText(repo.readBlockFile(r.body.index as number), r.body.index as number);
  assert.is(block.comment, 'release 2.0.0');
  assert.is(block.payload.uns, 'acme/app');
  assert.is(block.payload.effective_date, '2026-06-01');
  assert.equal(
    block.payload.endorsements.map((e) => e.artifact_url),
    urls,
  );
  assert.equal(
    block.payload.endorsements.map((e) => e.artifact_hash),
    files.map((f) => hashOf(`bytes of ${f}`)),
  );
  assert.is(block.payload.endorsements[0]!.comment, 'entry');
  assert.is(block.payload.endorsements[1]!.comment, '');
  assert.is(commitCount(), before + 1);

  const again = await submitter.submit(body);
  assert.is(again.httpStatus, 200);
  assert.equal(again.body, { success: true, status: 'unchanged', url: urls[0], index: block.index, record_hash: block.record_hash, urls });

  setArtifact('/rel/2.0.0/app.css', 'rebuilt css');
  const e = await refusal(submitter.submit(body));
  assert.is(e.code, 'semver_conflict');
  assert.is(e.resource, urls[1]);

  // One file already signed identically, one new: a block with both is posted.
  const extra = setArtifact('/rel/2.0.0/app.map', 'source map');
  const mixed = await submitter.submit({
    ...body,
    endorsements: [body.endorsements[0]!, { url: extra, name: 'acme/app', semver: '2.0.0', license: 'Apache-2.0' }],
  });
  assert.is(mixed.httpStatus, 201);
  assert.is(commitCount(), before + 2);
  assertSound();
});

// ---------------------------------------------------------------- group commit

test('group commit: 20 concurrent submits of distinct URLs share commits; every block exactly once', async () => {
  const N = 20;
  const urls = Array.from({ length: N }, (_, i) => setArtifact(`/group/lib-${i}.tgz`, `library ${i}`));
  const beforeCommits = commitCount();
  const beforeSize = repo.size;
  const statsBefore = submitter.stats();
  barrier(8); // the submitter keeps at most 8 origin fetches in flight (default)
  const results = await Promise.all(urls.map((url, i) => submitter.submit({ url, name: `acme/lib${i}`, semver: '0.1.0', license: 'MIT' })));
  assert.ok(
    results.every((r) => r.httpStatus === 201),
    JSON.stringify(results.map((r) => r.httpStatus)),
  );
  const made = commitCount() - beforeCommits;
  assert.ok(made >= 1 && made < N, `${made} commits for ${N} submits`);
  assert.is(repo.size, beforeSize + N);
  const indexes = results.map((r) => r.body.index as number).sort((a, b) => a - b);
  assert.equal(
    indexes,
    Array.from({ length: N }, (_, i) => beforeSize + i),
    'one block per submit, no gaps',
  );
  const seen = new Map<string, number>();
  for (const b of allBlocks()) for (const e of b.payload.endorsements) seen.set(e.artifact_url, (seen.get(e.artifact_url) ?? 0) + 1);
  for (const url of urls) assert.is(seen.get(url), 1, `${url} endorsed ${seen.get(url)} times`);
  for (const r of results) assert.is(index.block(r.body.index as number)!.record_hash, r.body.record_hash);
  const s = submitter.stats();
  assert.is(s.commits - statsBefore.commits, made);
  assert.is(s.blocks - statsBefore.blocks, N);
  assert.ok(s.maxBlocksPerCommit > 1);
  assert.is(s.queued, 0);
  assertSound();
});

test('concurrent conflicting submits (same URL + semver, different bytes): exactly one 201, the rest 409', async () => {
  const N = 6;
  const url = setArtifact('/race/tool.bin', (n) => `variant ${n}`);
  const before = commitCount();
  barrier(N);
  const settled = await Promise.allSettled(Array.from({ length: N }, () => submitter.submit(single(url, '3.0.0'))));
  const ok = settled.filter((s): s is PromiseFulfilledResult<SubmitResult> => s.status === 'fulfilled');
  const codes = settled.map((s) => (s.status === 'fulfilled' ? s.value.httpStatus : (s.reason as VouchError).code));
  assert.is(ok.length, 1, JSON.stringify(codes));
  assert.is(ok[0]!.value.httpStatus, 201);
  assert.is(codes.filter((c) => c === 'semver_conflict').length, N - 1, JSON.stringify(codes));
  assert.is(index.versions(url).length, 1);
  assert.is(commitCount(), before + 1);
  assertSound();
});

test('concurrent identical submits: one posts, the others are unchanged with the same record_hash', async () => {
  const N = 6;
  const url = setArtifact('/race/same.bin', 'identical bytes');
  const before = commitCount();
  barrier(N);
  const results = await Promise.all(Array.from({ length: N }, () => submitter.submit(single(url, '4.0.0'))));
  assert.is(results.filter((r) => r.httpStatus === 201).length, 1);
  assert.is(results.filter((r) => r.httpStatus === 200 && r.body.status === 'unchanged').length, N - 1);
  assert.is(new Set(results.map((r) => r.body.record_hash)).size, 1);
  assert.is(index.versions(url).length, 1);
  assert.is(commitCount(), before + 1);
  assertSound();
});

// ---------------------------------------------------------------- failures

test('origin 404 (alone or inside a release): origin_error, nothing appended', async () => {
  const before = commitCount();
  const size = repo.size;
  const missing = base + '/nope/missing.js';
  const e = await refusal(submitter.submit(single(missing)));
  assert.is(e.code, 'origin_error');
  assert.is(statusOf(e), 502);
  assert.is(e.resource, missing);
  const good = setArtifact('/nope/present.js', 'present');
  const e2 = await refusal(
    submitter.submit({
      uns: 'acme/nope',
      semver: '1.0.0',
      endorsements: [
        { url: good, name: 'acme/nope', semver: '1.0.0', license: 'MIT' },
        { url: missing, name: 'acme/nope', semver: '1.0.0', license: 'MIT' },
      ],
    }),
  );
  assert.is(e2.code, 'origin_error');
  assert.is(e2.resource, missing);
  assert.is(commitCount(), before);
  assert.is(repo.size, size);
  assert.is(index.versions(good).length, 0);
  assertSound();
});

test('append failure: every waiter of the failed rounds gets an error, index and head unchanged; the next submit succeeds', async () => {
  const beforeCommits = commitCount();
  const size = repo.size;
  const head = index.head!;
  const failuresBefore = submitter.stats().commitFailures;
  const urls = [0, 1, 2].map((i) => setArtifact(`/fault/f${i}.js`, `fault ${i}`));
  // Round 1 (A alone) is held inside append while B and C queue up behind it as round 2; both rounds fail.
  failAppends = 2;
  let release!: () => void;
  appendGate = new Promise<void>((r) => (release = r));
  const started = new Promise<void>((r) => (appendStarted = r));
  const a = submitter.submit(single(urls[0]!, '1.0.0'));
  await started;
  appendStarted = null;
  const b = submitter.submit(single(urls[1]!, '1.0.0'));
  const c = submitter.submit(single(urls[2]!, '1.0.0'));
  for (let i = 0; i < 200 && submitter.stats().queued < 2; i++) await new Promise((r) => setTimeout(r, 5));
  assert.is(submitter.stats().queued, 2, 'B and C wait for the writer');
  appendGate = null;
  release();
  const errors = await Promise.all([a, b, c].map(refusal));
  for (const e of errors) {
    assert.is(e.code, 'internal_error');
    assert.is(statusOf(e), 500);
    assert.match(e.message, /append failed, nothing was posted/);
  }
  assert.is(submitter.stats().commitFailures - failuresBefore, 2, 'B and C failed together in one round');
  assert.is(index.size, size);
  assert.is(index.head, head);
  for (const url of urls) assert.is(index.versions(url).length, 0, 'no phantom block');
  assert.is(repo.size, size);
  assert.is(commitCount(), beforeCommits);
  assertSound();

  const r = await submitter.submit(single(urls[1]!, '1.0.0'));
  assert.is(r.httpStatus, 201);
  assert.is(r.body.index, size);
  assert.is(commitCount(), beforeCommits + 1);
  assertSound();
});

test('the answer comes only after the commit is on the branch', async () => {
  const url = setArtifact('/held/h.js', 'held');
  const before = commitCount();
  let release!: () => void;
  appendGate = new Promise<void>((r) => (release = r));
  const started = new Promise<void>((r) => (appendStarted = r));
  let settled = false;
  const p = submitter.submit(single(url)).finally(() => {
    settled = true;
  });
  await started;
  appendStarted = null;
  await new Promise((r) => setTimeout(r, 50));
  assert.is(settled, false, 'answered before the commit');
  assert.is(index.versions(url).length, 0, 'indexed before the commit');
  assert.is(commitCount(), before);
  appendGate = null;
  release();
  const r = await p;
  assert.is(r.httpStatus, 201);
  assert.is(commitCount(), before + 1);
  assert.is(git('show', `HEAD:blocks/000/000/${String(r.body.index).padStart(9, '0')}.json`).includes(url), true);
  assertSound();
});

test('counters add up', () => {
  const s = submitter.stats();
  assert.ok(s.posted > 0 && s.unchanged > 0 && s.conflict > 0 && s.failed > 0 && s.invalid > 0);
  assert.is(s.blocks, repo.size - 1);
  assert.is(s.commits, commitCount() - 1);
  assert.is(s.queued, 0);
});

test.run();
