/**
 * The answer store (gateway/cache/answer-store.ts): lookups answered from
 * it are byte for byte those of the index path (revocations, several
 * versions of a URL, a multi-entry block, void blocks, key blocks, proof=1,
 * semver= and at=, 404s with index proofs); records are LZ4-compressed; a
 * torn or corrupt file, or one written with another dictionary, is cut or
 * dropped and rebuilt, never served; a restart takes its records back;
 * blocks appended by the writer and by a mirror's sync (applyCommitted with
 * and without the texts) extend it; `chain.answer_store: false` turns it
 * off. Real git chains, real gateways in this process.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, openSync, writeFileSync, readSync, rmSync, statSync, truncateSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { artifactHashOf, buildCheckpoint, buildEndorseBlock, buildRevokeBlock, utf8, type Block } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned } from '../../store/chain-append.ts';
import { ChainState } from '../../gateway/chain/verified-state.ts';
import { AnswerStore, DICTIONARY_ID, HEADER, IDX_PREFIX_AT, IDX_RECORD, answerRecord, plainAnswerText } from '../../gateway/cache/answer-store.ts';
import { loadConfigFile } from '../../gateway/config.ts';
import { startGateway, type RunningGateway } from '../../gateway/gateway.ts';
import { createLogger } from '../../gateway/observability/logger.ts';
import { T0 } from '../helpers/chain-fixture.ts';
import { buildKeyLifeChain, ONLINE, b64 } from '../helpers/key-fixture.ts';
import { rawRequest } from '../helpers/raw-http.ts';
import { until, writeConfig } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-answers-'));
const dir = join(work, 'chain');
const data = join(dir, '.git', 'vouch-answers.lz4');
test.after(() => rmSync(work, { recursive: true, force: true }));

const urlOf = (i: number) => `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`;
const MULTI = ['https://m.example/one.tgz', 'https://m.example/Grüße/zwei.tgz?x=1&y=%C3%A9', urlOf(5)];

// Blocks 0-11: every key event, 6-7 void (buildKeyLifeChain); 12: artifact-6 again (its first block is void); 13: artifact-3 a
// second time; 14: three entries, one of them artifact-5's URL a second time; 15: a revoke of 13 (artifact-3 falls back
// to block 3); 16: a revoke of 9 in force from 2026-06-01 (artifact-9: 404 after, block 9 before).
const life = buildKeyLifeChain();
life.endorse(6);
life.endorse(3);
const signer = life.signer;
const blocks: Block[] = life.blocks;
const multi = buildEndorseBlock({
  prev: blocks[blocks.length - 1]!,
  signer,
  backend: nodeBackend,
  now: T0 + 500_000,
  entries: MULTI.map((url, k) => ({
    url,
    artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(`multi ${k}`)),
    name: 'acme/multi',
    semver: `2.${k}.0`,
    license: 'MIT',
    comment: 'Grüße, 世界 — 🎉',
  })),
});
blocks.push(multi);
blocks.push(buildRevokeBlock({ prev: multi, target: blocks[13]!, signer, backend: nodeBackend, now: T0 + 600_000 }));
blocks.push(buildRevokeBlock({ prev: blocks[15]!, target: blocks[9]!, signer, backend: nodeBackend, now: T0 + 700_000, effectiveDate: '2026-06-01' }));
const checkpoint = buildCheckpoint({ head: blocks[blocks.length - 1]!, signer, now: T0 + 800_000 });
const pub = b64(ONLINE.A);

const queries = (size: number): string[] => {
  const urls = [...Array.from({ length: 12 }, (_, i) => urlOf(i)), ...MULTI, 'https://nowhere.example/x.tgz'];
  for (let i = 17; i < size; i++) urls.push(urlOf(i));
  const out: string[] = [];
  for (const u of urls) {
    const q = `url=${encodeURIComponent(u)}`;
    out.push(q, `${q}&proof=1`, `proof=1&${q}`, `${q}&semver=1.3.0`, `${q}&at=2026-01-01`, `${q}&at=2025-01-01`);
  }
  return out;
};

async function load(): Promise<ChainState> {
  const repo = await ChainRepo.open(dir, { repair: false });
  return (await ChainState.load(repo, { pinnedPublicKey: pub })).state;
}

/** Every URL's plain answer from the store is the index path's, or the store says "ask the index" (revocations). */
function sameAsIndex(s: ChainState, today = '2026-12-01'): number {
  let stored = 0;
  for (const q of queries(s.size)) {
    const url = decodeURIComponent(q.slice(4).split('&')[0]!);
    if (q.includes('&')) continue;
    const a = s.storedAnswer(url);
    const sel = s.index.select(url, { today });
    if (a === undefined) continue;
    stored++;
    assert.ok(sel !== null && sel.revokedBy === null, `stored answer for ${url} where the index has none`);
    assert.is(a.index, sel!.block.index, url);
    assert.is(a.text, plainAnswerText(sel!.block), url);
    assert.is(a.length, Buffer.byteLength(a.text), `${url}: its length in UTF-8 bytes`);
    assert.is(a.recordHash, sel!.block.record_hash, `${url}: its block's record_hash (the ETag)`);
  }
  return stored;
}

/** Where block i's record lies in the data file, from the index file's lengths. */
function recordSpan(i: number): { at: number; len: number } {
  const fd = openSync(`${data}.idx`, 'r');
  const idx = Buffer.alloc((i + 1) * IDX_RECORD);
  readSync(fd, idx, 0, idx.length, 0);
  closeSync(fd);
  let at = HEADER.length;
  for (let k = 0; k < i; k++) at += idx.readUInt32BE(k * IDX_RECORD);
  return { at, len: idx.readUInt32BE(i * IDX_RECORD) };
}

test.before(async () => {
  const { initChainRepo } = await import('../helpers/chain-fixture.ts');
  await initChainRepo(dir, blocks, checkpoint);
});

test('built from the verified blocks; answers byte for byte those of the index path; revoked and void ones left to it', async () => {
  const s = await load();
  assert.is(s.storedAnswer(urlOf(1)), undefined, 'nothing before the build');
  const r = await s.buildAnswers();
  assert.equal(r?.added, blocks.length);
  assert.is(s.answerStore.blocks, blocks.length);
  assert.ok(statSync(data).size > 0);
  assert.is(sameAsIndex(s), 7, "artifacts 1, 5 (twice: its own URL and in the multi-entry block), 6, 11 and the multi-entry block's other two");
  assert.is(s.storedAnswer(urlOf(6))?.index, 12, 'the void block 6 is never selected');
  assert.is(s.storedAnswer(urlOf(5))?.index, 14, 'the newest of two blocks');
  assert.is(s.storedAnswer(MULTI[1]!)?.index, 14);
  assert.is(s.storedAnswer(urlOf(3)), undefined, 'a candidate is revoked: the index path');
  assert.is(s.storedAnswer(urlOf(9)), undefined, 'revoked from a date: the index path');
  assert.is(s.storedAnswer(urlOf(7)), undefined, 'only in a void block');
  assert.is(s.storedAnswer('https://nowhere.example/x.tgz'), undefined);
  const plain = blocks.reduce((n, b) => n + Buffer.byteLength(plainAnswerText(b), 'utf8'), 0);
  assert.ok(statSync(data).size < plain * 0.6, `records compressed: ${statSync(data).size} bytes for ${plain} of answers`);
});

test('a gateway with the store answers every lookup with the same bytes as one without', async () => {
  const config = loadConfigFile(writeConfig(work, { listen: { host: '127.0.0.1', port: 0 }, chain: { dir, public_key: pub } }), {});
  const off = loadConfigFile(
    writeConfig(work, { listen: { host: '127.0.0.1', port: 0 }, chain: { dir, public_key: pub, answer_store: false } }, 'off.yaml'),
    {},
  );
  const quiet = { announce: () => {}, log: createLogger('silent') };
  const plain: RunningGateway = await startGateway(off, quiet); // chain.answer_store: false
  const stored: RunningGateway = await startGateway(config, quiet);
  try {
    await Promise.all([plain.ready, stored.ready]);
    await until('the store built', async () => stored.ctx.state?.answerStore.blocks === blocks.length && !stored.ctx.state.answerStore.building);
    assert.is(plain.ctx.state!.answerStore.blocks, 0, 'the gateway without it never built it');
    for (const q of queries(blocks.length)) {
      // Twice: the second is served from the answer cache once the doorkeeper admits it.
      for (let k = 0; k < 2; k++) {
        const path = `/v1/endorsement?${q}`;
        const [a, b] = await Promise.all([rawRequest(plain.url, path), rawRequest(stored.url, path)]);
        assert.is(b.status, a.status, q);
        assert.is(b.headers.etag, a.headers.etag, q);
        assert.is(b.body.toString('utf8'), a.body.toString('utf8'), q);
      }
    }
  } finally {
    await Promise.all([plain.close(), stored.close()]);
  }
});

test('a restart takes the records back; a torn tail is cut and rebuilt; a corrupt record is never served and the store rebuilt', async () => {
  let s = await load();
  assert.equal((await s.buildAnswers())?.added, 0, 'every record taken back');
  const full = statSync(data).size;
  truncateSync(data, full - 100); // a crash during the last record's write
  s = await load();
  assert.equal((await s.buildAnswers())?.added, 1, 'the torn record cut and made again');
  assert.is(statSync(data).size, full);
  assert.is(sameAsIndex(s), 7);
  // A byte changed inside block 12's compressed answer (artifact-6): found on read, not decoded or served, then everything rebuilt.
  const text = s.storedAnswer(urlOf(6))!.text;
  const { at, len } = recordSpan(12);
  const fd = openSync(data, 'r+');
  const was = Buffer.alloc(1);
  readSync(fd, was, 0, 1, at + len - 40);
  writeSync(fd, Buffer.from([was[0]! ^ 0x20]), 0, 1, at + len - 40);
  closeSync(fd);
  const corrupt: number[] = [];
  s.onAnswersCorrupt = (n) => corrupt.push(n);
  assert.is(s.storedAnswer(urlOf(6)), undefined, 'the changed record is not served');
  assert.equal(corrupt, [blocks.length]);
  await until('rebuilt', async () => s.answerStore.blocks === blocks.length && !s.answerStore.building);
  assert.is(s.storedAnswer(urlOf(6))?.text, text);
  assert.is(sameAsIndex(s), 7);
  // A byte changed in the signature's bytes, kept in the record's head (not in the compressed answer): found the same way.
  const sig = Buffer.from(blocks[12]!.signature, 'base64');
  const again = recordSpan(12);
  const rec = Buffer.alloc(again.len);
  const f2 = openSync(data, 'r+');
  readSync(f2, rec, 0, rec.length, again.at);
  const sigAt = rec.indexOf(sig);
  assert.ok(sigAt > 0, "the signature's 64 bytes are in the record");
  writeSync(f2, Buffer.from([rec[sigAt + 10]! ^ 1]), 0, 1, again.at + sigAt + 10);
  closeSync(f2);
  assert.is(s.storedAnswer(urlOf(6)), undefined, 'the changed signature is not served');
  assert.equal(corrupt, [blocks.length, blocks.length]);
  await until('rebuilt', async () => s.answerStore.blocks === blocks.length && !s.answerStore.building);
  assert.is(s.storedAnswer(urlOf(6))?.text, text);
  // A store of another chain (a record_hash that is not the served block's) is not taken back past that block.
  const other = Buffer.alloc(1);
  const idx = openSync(`${data}.idx`, 'r+');
  readSync(idx, other, 0, 1, 5 * IDX_RECORD + IDX_PREFIX_AT);
  writeSync(idx, Buffer.from([other[0]! ^ 1]), 0, 1, 5 * IDX_RECORD + IDX_PREFIX_AT);
  closeSync(idx);
  s = await load();
  assert.equal((await s.buildAnswers())?.added, blocks.length - 5, 'records from block 5 on made again');
  assert.is(sameAsIndex(s), 7);
});

test('a store written with another dictionary (or format) is emptied and rebuilt, never decoded with this one', async () => {
  let s = await load();
  await s.buildAnswers();
  const full = statSync(data).size;
  // The header's last byte is the dictionary id's: a store another build wrote with another dictionary.
  const fd = openSync(data, 'r+');
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, HEADER.length - 1);
  writeSync(fd, Buffer.from([b[0]! ^ 1]), 0, 1, HEADER.length - 1);
  closeSync(fd);
  s = await load();
  const corrupt: number[] = [];
  s.onAnswersCorrupt = (n) => corrupt.push(n);
  assert.equal((await s.buildAnswers())?.added, blocks.length, 'every record made again');
  assert.is(statSync(data).size, full);
  assert.is(sameAsIndex(s), 7);
  assert.equal(corrupt, [], 'no record was read with the wrong dictionary');
  // A store of format 2 (a u32 entry count first in each record, hashes and signature as text in the answer, 68-byte index
  // records) with this dictionary: its header names format 2, so it is emptied and rebuilt, never read as format 3.
  const two = Buffer.concat([Buffer.from('vouchans', 'latin1'), Buffer.from([0, 0, 0, 2]), DICTIONARY_ID]);
  assert.is(two.length, HEADER.length);
  assert.not.ok(two.equals(HEADER));
  const f1 = openSync(data, 'r+');
  writeSync(f1, two, 0, two.length, 0);
  closeSync(f1);
  writeFileSync(`${data}.idx`, Buffer.alloc(blocks.length * 68));
  s = await load();
  s.onAnswersCorrupt = (n) => corrupt.push(n);
  assert.equal((await s.buildAnswers())?.added, blocks.length, 'a format 2 store is not taken back');
  assert.is(statSync(data).size, full);
  assert.is(statSync(`${data}.idx`).size, blocks.length * IDX_RECORD);
  assert.is(sameAsIndex(s), 7);
  assert.equal(corrupt, []);
  // A store of the format before (no header: the first record at offset 0) is emptied the same way.
  const body = Buffer.alloc(full - HEADER.length);
  const f2 = openSync(data, 'r+');
  readSync(f2, body, 0, body.length, HEADER.length);
  closeSync(f2);
  truncateSync(data, 0);
  const f3 = openSync(data, 'r+');
  writeSync(f3, body, 0, body.length, 0);
  closeSync(f3);
  s = await load();
  assert.equal((await s.buildAnswers())?.added, blocks.length, 'a headerless file is not taken back');
  assert.is(sameAsIndex(s), 7);
  // The uncompressed store's files (an earlier version's names) are removed when the store opens.
  const old = join(dir, '.git', 'vouch-answers');
  writeFileSync(old, body);
  writeFileSync(`${old}.idx`, Buffer.alloc(IDX_RECORD));
  s = await load();
  await s.buildAnswers();
  assert.not.ok(existsSync(old) || existsSync(`${old}.idx`), 'the files of the earlier format are gone');
});

test("an entry's sha256 artifact_hash and the signature are kept as bytes, out of the compressed answer, and answered exactly", () => {
  const b = blocks[12]!;
  assert.ok(b.payload.endorsements[0]!.artifact_hash.startsWith('sha256:'));
  const rec = answerRecord(b);
  const hashBytes = Buffer.from(b.payload.endorsements[0]!.artifact_hash.slice(7), 'hex');
  assert.ok(rec.includes(hashBytes), "the artifact_hash's 32 bytes are in the record");
  assert.ok(rec.includes(Buffer.from(b.signature, 'base64')), "the signature's 64 bytes are in the record");
  // Neither text is in the record, not even a quarter of it as a literal: LZ4 took them from the record's dictionary.
  const hex = b.payload.endorsements[0]!.artifact_hash.slice(7);
  for (let k = 0; k + 16 <= 64; k += 16) assert.not.ok(rec.includes(hex.slice(k, k + 16)), `hex ${k}..${k + 16} not in the record`);
  for (let k = 0; k + 22 <= 88; k += 22) assert.not.ok(rec.includes(b.signature.slice(k, k + 22)), `base64 ${k}..${k + 22} not in the record`);
});

test('other forms (sha512, uppercase hex, a short hash, non-canonical or short base64) are kept as text and answered exactly', () => {
  const f = join(work, 'forms.lz4');
  const base = blocks.slice(0, 15);
  const alt = (k: number, e: Partial<Block['payload']['endorsements'][0]>, signature?: string): Block => {
    const b = structuredClone(base[k]!);
    if (e) b.payload.endorsements = b.payload.endorsements.map((x, j) => (j === 0 ? { ...x, ...e } : x));
    if (signature !== undefined) b.signature = signature;
    return b;
  };
  const sig = blocks[12]!.signature;
  const lastBits = sig.slice(0, 85) + String.fromCharCode(sig.charCodeAt(85) ^ 1) + '=='; // padding bits not zero: decodes, not canonical
  const weird = [
    alt(12, { artifact_hash: artifactHashOf(nodeBackend, 'sha512', utf8('x')) }),
    alt(12, { artifact_hash: blocks[12]!.payload.endorsements[0]!.artifact_hash.toUpperCase().replace('SHA256', 'sha256') }),
    alt(12, { artifact_hash: 'sha256:abcd' }),
    alt(12, {}, lastBits),
    alt(12, {}, sig.slice(0, 86)), // no padding
    alt(12, {}, Buffer.alloc(63, 7).toString('base64')), // 63 bytes
    alt(12, { artifact_hash: 'SHA256:' + blocks[12]!.payload.endorsements[0]!.artifact_hash.slice(7) }, ' ' + sig),
  ];
  assert.ok(Buffer.from(lastBits, 'base64').toString('base64') !== lastBits, 'the odd base64 is not canonical');
  // Each one in a chain of its own at block 12 (the store answers blocks 0..12). The answer is the compressed text itself
  // (the bytes only seed the dictionary), so it is exact either way; bytes that do not give the text back are not kept.
  for (const [w, b] of weird.entries()) {
    const rec = answerRecord(b);
    const h = b.payload.endorsements[0]!.artifact_hash;
    const hashBytes = Buffer.from(h.slice(h.indexOf(':') + 1), 'hex');
    const sigBytes = Buffer.from(b.signature, 'base64');
    const odd = { hash: h !== blocks[12]!.payload.endorsements[0]!.artifact_hash, sig: b.signature !== sig };
    if (hashBytes.length >= 32) assert.is(rec.includes(hashBytes), !odd.hash, `form ${w}: the hash's bytes kept only when they give its text back`);
    assert.is(rec.includes(sigBytes), !odd.sig, `form ${w}: the signature's bytes kept only when they give its text back`);
    const store = new AnswerStore(f);
    const chain = [...base.slice(0, 12), b];
    const hashes = chain.map((x) => Buffer.from(x.record_hash, 'hex'));
    store.open(chain.length, (i) => hashes[i]!);
    store.reset();
    store.append(chain);
    const url = b.payload.endorsements[0]!.artifact_url;
    assert.is(store.answerFor(12, 0, url), plainAnswerText(b), `form ${w}: the exact answer`);
    assert.is(store.answerBytes, Buffer.byteLength(plainAnswerText(b)));
    assert.is(store.answerHash, b.record_hash);
    assert.is(store.answerFor(12, 0, `${url}x`), null);
    assert.not.ok(store.corrupted);
    store.close();
  }
  rmSync(f);
  rmSync(`${f}.idx`);
});

test('a store of another chain whose record_hashes share the first bytes is taken back at open but never served', () => {
  const f = join(work, 'other.lz4');
  const chain = blocks.slice(0, 13);
  const hashes = chain.map((x) => Buffer.from(x.record_hash, 'hex'));
  let store = new AnswerStore(f);
  store.open(chain.length, (i) => hashes[i]!);
  store.append(chain);
  const url = chain[12]!.payload.endorsements[0]!.artifact_url;
  assert.is(store.answerFor(12, 0, url), plainAnswerText(chain[12]!));
  store.close();
  // Another chain: block 12's record_hash differs past the bytes the index keeps.
  const other = hashes.map((h, i) => (i === 12 ? Buffer.concat([h.subarray(0, 8), Buffer.alloc(24, 0x55)]) : h));
  store = new AnswerStore(f);
  store.open(chain.length, (i) => other[i]!);
  assert.is(store.count, 13, 'taken back on the index prefix');
  assert.is(store.answerFor(12, 0, url), undefined, 'the digest covers the whole record_hash: not served');
  assert.ok(store.corrupted);
  store.close();
  rmSync(f);
  rmSync(`${f}.idx`);
});

test('blocks appended by the writer and by a sync (no texts given) extend the store; a new revoke sends its URL to the index path', async () => {
  const s = await load();
  await s.buildAnswers();
  const repo = s.repo as ChainRepo;
  const next = (prev: Block, i: number, url = urlOf(i)) =>
    buildEndorseBlock({
      prev,
      signer,
      backend: nodeBackend,
      now: T0 + 900_000 + i * 1000,
      entries: [{ url, artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(`late ${i}`)), name: 'acme/late', semver: `3.${i}.0`, license: 'MIT' }],
    });
  const a = next(s.head, 17);
  const c1 = await appendSigned(repo, [a], buildCheckpoint({ head: a, signer, now: T0 + 950_000 }), T0 + 950_000);
  s.applyCommitted([a], c1.checkpointText, c1.blockTexts); // the writer's form
  assert.is(s.answerStore.blocks, 18);
  assert.is(s.storedAnswer(urlOf(17))?.index, 17);
  const b = next(a, 18, urlOf(11)); // artifact-11 a second time
  const c2 = await appendSigned(repo, [b], buildCheckpoint({ head: b, signer, now: T0 + 960_000 }), T0 + 960_000);
  s.applyCommitted([b], c2.checkpointText); // a mirror's sync: texts read from git objects
  assert.is(s.answerStore.blocks, 19);
  assert.is(s.storedAnswer(urlOf(11))?.index, 18);
  const r = buildRevokeBlock({ prev: b, target: a, signer, backend: nodeBackend, now: T0 + 970_000 });
  const c3 = await appendSigned(repo, [r], buildCheckpoint({ head: r, signer, now: T0 + 980_000 }), T0 + 980_000);
  s.applyCommitted([r], c3.checkpointText, c3.blockTexts);
  assert.is(s.answerStore.blocks, 20);
  assert.is(s.storedAnswer(urlOf(17)), undefined, 'revoked now: the index path answers');
  assert.is(sameAsIndex(s), 7);
  const warm = await load();
  assert.equal((await warm.buildAnswers())?.added, 0, 'appended records taken back at restart');
  assert.is(sameAsIndex(warm), 7);
});

test.run();
