/**
 * chain/index-tree.ts and chain/index-proof.ts (docs/spec/index.md): the
 * completeness index of the log. Selection redone from a proof's events
 * equals ChainIndex.select for every URL and mode; absence proven; a proof
 * of an older state, a tampered one and a truncated one refused; the root
 * equals an independent naive crit-bit computation and does not depend on
 * the backend; voided blocks are never selected; the vectors in
 * test/vectors/index-v1/index-v1.json hold.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { buildAuthorityBlock, buildEndorseBlock, buildRevokeBlock, artifactHashOf } from '../../chain/build.ts';
import type { Block } from '../../chain/block.ts';
import { ChainIndex } from '../../chain/select.ts';
import { CompletenessIndex, indexKey, indexRoot, type IndexEvent } from '../../chain/index-tree.ts';
import { indexExtensionLine, indexRootOf, selectFromEvents, unitVersions, verifyIndexProof } from '../../chain/index-proof.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { nobleBackend } from '../../chain/backend-noble.ts';
import { utf8 } from '../../chain/encoding.ts';
import { indexFactsOf } from '../../chain/index-facts.ts';
import { buildLongChain, T0, testSigner } from '../helpers/chain-fixture.ts';
import type { CryptoBackend } from '../../chain/crypto-backend.ts';
import { buildKeyLifeChain } from '../helpers/key-fixture.ts';
import { indexVectors, buildVectorChain } from '../helpers/index-vectors.ts';
import { naiveTrie } from '../helpers/index-naive.ts';

const c = nodeBackend;
const DAY = 86_400_000;
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** A chain of `n` endorse blocks over a few URLs with several versions, effective dates out of order, and revocations. */
function randomChain(n: number, seed = 7): Block[] {
  let s = seed;
  const rnd = (k: number) => {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    return s % k;
  };
  const signer = testSigner();
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: c, now: T0, uns: 'acme/chain' })];
  for (let i = 1; i < n; i++) {
    const prev = blocks[i - 1]!;
    const endorsed = blocks.filter((b) => b.payload.intent === 'endorse');
    if (endorsed.length > 3 && rnd(5) === 0) {
      const target = endorsed[rnd(endorsed.length)]!;
      blocks.push(buildRevokeBlock({ prev, target, signer, backend: c, now: T0 + i * DAY, effectiveDate: `2026-0${1 + rnd(6)}-1${rnd(9)}` }));
      continue;
    }
    const k = 1 + rnd(2);
    const first = rnd(12);
    const entries = [];
    for (let j = 0; j < k; j++) {
      const u = (first + 5 * j) % 12;
      entries.push({
        url: `https://a.example/p${u}/a.tgz`,
        artifactHash: artifactHashOf(c, 'sha256', utf8(`${i}.${j}`)),
        name: `npm/p${u % 5}`,
        semver: `1.${rnd(4)}.0`,
        license: 'MIT',
      });
    }
    blocks.push(buildEndorseBlock({ prev, signer, backend: c, now: T0 + i * DAY, entries, effectiveDate: `2026-0${1 + rnd(6)}-1${rnd(9)}` }));
  }
  return blocks;
}

function build(blocks: readonly Block[], backend = c): { idx: CompletenessIndex; chain: ChainIndex } {
  const idx = new CompletenessIndex(backend);
  const chain = new ChainIndex();
  for (const b of blocks) {
    idx.addBlock(b, (h) => chain.indexOfHash(h));
    chain.add(b);
  }
  return { idx, chain };
}

const DATES = ['2026-01-01', '2026-02-15', '2026-03-13', '2026-04-01', '2026-05-20', '2026-07-01', '2027-01-01'];

test('selection from a proof equals ChainIndex.select: default, semver=, at=, today', () => {
  const blocks = randomChain(120);
  const { idx, chain } = build(blocks);
  const root = idx.root();
  let checked = 0;
  for (let u = 0; u < 13; u++) {
    const url = `https://a.example/p${u}/a.tgz`;
    const r = verifyIndexProof(c, idx.prove('url', url), 'url', url, { root, size: idx.size });
    assert.ok(r.ok, r.ok ? '' : r.reason);
    if (!r.ok) continue;
    for (const today of DATES) {
      for (const semver of [undefined, '1.0.0', '1.1.0', '1.3.0', '9.9.9']) {
        for (const at of [undefined, ...DATES]) {
          const want = chain.select(url, { semver, at, today });
          const got = selectFromEvents(r.value.events, r.value.voids, { semver, at, today });
          assert.is(got?.block ?? null, want?.block.index ?? null, `${url} semver=${semver} at=${at} today=${today}`);
          assert.is(got?.revokedBy?.block ?? null, want?.revokedBy?.index ?? null);
          checked++;
        }
      }
    }
    if (u === 12) assert.is(r.value.present, false, 'p12 was never endorsed');
  }
  assert.ok(checked > 3000);
});

test('unit proofs list every endorsed version of a unit and its revocations', () => {
  const blocks = randomChain(80, 11);
  const { idx, chain } = build(blocks);
  const root = idx.root();
  for (let p = 0; p < 5; p++) {
    const name = `npm/p${p}`;
    const r = verifyIndexProof(c, idx.prove('unit', name), 'unit', name, { root, size: idx.size });
    assert.ok(r.ok);
    if (!r.ok) continue;
    const got = unitVersions(r.value.events, r.value.voids, '2026-12-31');
    const want: string[] = [];
    for (const b of blocks) {
      if (b.payload.intent !== 'endorse') continue;
      for (const e of b.payload.endorsements) {
        if (e.name !== name) continue;
        const rev = chain.revocationOf(b, '2026-12-31');
        want.push(`${b.index} ${e.semver} ${rev?.index ?? '-'}`);
      }
    }
    assert.equal(
      got.map((v) => `${v.block} ${v.semver} ${v.revokedBy?.block ?? '-'}`),
      want,
    );
  }
});

test('a proof from an older state of the same log, a tampered proof and a truncated one are refused', () => {
  const blocks = randomChain(60, 3);
  const old = build(blocks.slice(0, 40)).idx;
  const { idx } = build(blocks);
  const root = idx.root();
  const urls = [...new Set(blocks.slice(0, 40).flatMap((b) => (b.payload.intent === 'endorse' ? b.payload.endorsements.map((e) => e.artifact_url) : [])))];
  const [url, url2] = urls as [string, string];
  // the older state, answered as if it were the current size
  const stale = old.prove('url', url);
  assert.not.ok(verifyIndexProof(c, stale, 'url', url, { root, size: idx.size }).ok);
  const relabeled = stale.slice();
  relabeled.set(idx.prove('url', url).subarray(2, 10), 2);
  const r = verifyIndexProof(c, relabeled, 'url', url, { root, size: idx.size });
  assert.not.ok(r.ok);
  assert.match(r.ok ? '' : r.reason, /committed index root/);
  const good = idx.prove('url', url);
  const r0 = verifyIndexProof(c, good, 'url', url, { root, size: idx.size });
  assert.ok(r0.ok);
  for (let i = 0; i < good.length; i += 7) {
    const bad = good.slice();
    bad[i] = bad[i]! ^ 1;
    assert.not.ok(verifyIndexProof(c, bad, 'url', url, { root, size: idx.size }).ok, `flip at ${i}`);
  }
  for (const cut of [0, 5, 10, 40, good.length - 1]) assert.not.ok(verifyIndexProof(c, good.subarray(0, cut), 'url', url, { root, size: idx.size }).ok);
  // a proof for another key does not pass for this one
  const other = verifyIndexProof(c, idx.prove('url', url2), 'url', url2, { root, size: idx.size });
  assert.ok(other.ok && other.value.present && r0.ok && r0.value.present, 'both URLs endorsed');
  assert.not.ok(verifyIndexProof(c, idx.prove('url', url2), 'url', url, { root, size: idx.size }).ok);
  // absence of an endorsed URL cannot be shown: a non-member proof of another key fails for it
  const absent = idx.prove('url', 'https://nowhere.example/x');
  assert.ok(verifyIndexProof(c, absent, 'url', 'https://nowhere.example/x', { root, size: idx.size }).ok);
  assert.not.ok(verifyIndexProof(c, absent, 'url', url, { root, size: idx.size }).ok);
});

test('the root equals a naive crit-bit computation and is the same with @noble', () => {
  const blocks = randomChain(50, 5);
  const { idx, chain } = build(blocks);
  const leaves = new Map<string, { key: Uint8Array; events: IndexEvent[] }>();
  const add = (key: Uint8Array, ev: IndexEvent) => {
    const k = hex(key);
    if (!leaves.has(k)) leaves.set(k, { key, events: [] });
    leaves.get(k)!.events.push(ev);
  };
  for (const b of blocks) {
    const p = b.payload;
    if (p.intent === 'endorse') {
      for (const e of p.endorsements) {
        const ev: IndexEvent = { kind: 'endorse', block: b.index, date: p.effective_date, semver: e.semver };
        add(indexKey(c, 'url', e.artifact_url), ev);
        add(indexKey(c, 'unit', e.name), ev);
      }
    } else if (p.intent === 'revoke') {
      const t = chain.block(chain.indexOfHash(p.target_hash))!;
      const ev: IndexEvent = { kind: 'revoke', block: b.index, target: t.index, date: p.effective_date };
      const keys = new Set<string>();
      for (const e of t.payload.endorsements) {
        for (const k of [indexKey(c, 'url', e.artifact_url), indexKey(c, 'unit', e.name)])
          if (!keys.has(hex(k))) {
            keys.add(hex(k));
            add(k, ev);
          }
      }
    }
  }
  const trie = naiveTrie(c, [...leaves.values()]);
  assert.is(hex(idx.root()), hex(indexRoot(c, blocks.length, trie, [])));
  assert.is(hex(build(blocks, nobleBackend).idx.root()), hex(idx.root()));
  // from facts alone (vouch verify: revoke targets looked up by the index itself)
  const fromFacts = new CompletenessIndex(c);
  for (const b of blocks) fromFacts.addFacts(indexFactsOf(b));
  assert.is(hex(fromFacts.root()), hex(idx.root()));
  // lazily rehashed roots along the way equal roots of fresh builds
  const inc = new CompletenessIndex(c);
  const ch = new ChainIndex();
  for (const b of blocks) {
    inc.addBlock(b, (h) => ch.indexOfHash(h));
    ch.add(b);
    if (b.index % 9 === 0) assert.is(hex(inc.root()), hex(build(blocks.slice(0, b.index + 1)).idx.root()));
  }
});

test('rootWith: the root with pending blocks, the index left as it was', () => {
  const blocks = randomChain(90, 13);
  const idx = new CompletenessIndex(c);
  const ch = new ChainIndex();
  let at = 0;
  while (at < blocks.length) {
    const batch = blocks.slice(at, at + 1 + (at % 4));
    const before = hex(idx.root());
    const trial = hex(idx.rootWith(batch, (h) => ch.indexOfHash(h)));
    assert.is(hex(idx.root()), before, 'unchanged after the trial');
    assert.is(idx.size, at);
    // a trial that is abandoned (another batch) leaves no trace either
    if (at + batch.length + 2 <= blocks.length) idx.rootWith(blocks.slice(at, at + batch.length + 2), (h) => ch.indexOfHash(h));
    for (const b of batch) {
      idx.addBlock(b, (h) => ch.indexOfHash(h));
      ch.add(b);
    }
    at += batch.length;
    assert.is(hex(idx.root()), trial, `root after ${at}`);
    assert.is(trial, hex(build(blocks.slice(0, at)).idx.root()));
  }
  const url = blocks[1]!.payload.endorsements[0]!.artifact_url;
  assert.ok(verifyIndexProof(c, idx.prove('url', url), 'url', url, { root: idx.root(), size: idx.size }).ok);
});

/** nodeBackend with its sha256 calls counted. */
function countingBackend(): { backend: typeof c; calls: () => number } {
  let n = 0;
  const backend = {
    ...c,
    digest: (alg: Parameters<NonNullable<typeof c.digest>>[0], d: Uint8Array) => {
      n++;
      return c.digest!(alg, d);
    },
    // the index's own path (written in place)
    sha256To: (d: Uint8Array, out: Uint8Array) => {
      n++;
      c.sha256To!(d, out);
    },
  };
  return { backend, calls: () => n };
}

test("rootWith: the writer's commit of the blocks it tried costs no hashing; a rolled-back trial leaves the hashes as they were", () => {
  const blocks = randomChain(120, 21);
  const counted = countingBackend();
  const idx = new CompletenessIndex(counted.backend);
  const ch = new ChainIndex();
  const target = (h: string) => ch.indexOfHash(h);
  let at = 0;
  while (at < blocks.length) {
    const batch = blocks.slice(at, at + 1 + (at % 3));
    const trial = hex(idx.rootWith(batch, target));
    assert.is(idx.size, at, 'a pending trial is not counted');
    // the commit path (the gateway's takeIndexLine): structured copies of the same blocks, kept when the note agrees
    const before = counted.calls();
    let judged = '';
    const kept = hex(
      idx.rootWith(structuredClone(batch), target, (r) => {
        judged = hex(r);
        return true;
      }),
    );
    assert.is(counted.calls() - before, 0, `no sha256 call to commit blocks ${at}..`);
    assert.is(kept, trial);
    assert.is(judged, trial);
    for (const b of batch) ch.add(b);
    at += batch.length;
    assert.is(idx.size, at);
    // takePending: the same commit when the caller's chain index took the blocks first (gateway/chain/verified-state.ts)
    if (at + 1 <= blocks.length) {
      const next = blocks.slice(at, at + 1);
      const tried = hex(idx.rootWith(next, target));
      assert.not.ok(idx.takePending(at, ['0'.repeat(64)]), 'other blocks: not taken');
      const b3 = counted.calls();
      assert.ok(
        idx.takePending(
          at,
          next.map((b) => b.record_hash),
        ),
      );
      assert.is(counted.calls() - b3, 0);
      for (const b of next) ch.add(b);
      at += 1;
      assert.is(idx.size, at);
      assert.is(hex(idx.root()), tried);
    }
    assert.is(hex(idx.root()), hex(build(blocks.slice(0, at)).idx.root()), `root after ${at}`);
    // a trial rolled back by a proof, then asked again: the proof is of the committed state, and the hashes come back without rehashing
    if (at + 2 <= blocks.length) {
      const next = blocks.slice(at, at + 2);
      idx.rootWith(next, target);
      const url = blocks[1]!.payload.endorsements[0]!.artifact_url;
      assert.ok(verifyIndexProof(c, idx.prove('url', url), 'url', url, { root: idx.root(), size: at }).ok);
      const b2 = counted.calls();
      idx.root();
      assert.is(counted.calls() - b2, 1, 'only the committed root (a rolled-back trial leaves every node hash current)');
    }
  }
});

test('void blocks are never selected, and the void list is committed', () => {
  const k = buildKeyLifeChain();
  const { idx, chain } = build(k.blocks);
  assert.equal(idx.voids(), [[6, 7]]);
  const root = idx.root();
  for (const b of k.blocks) {
    if (b.payload.intent !== 'endorse') continue;
    const url = b.payload.endorsements[0]!.artifact_url;
    const r = verifyIndexProof(c, idx.prove('url', url), 'url', url, { root, size: idx.size });
    assert.ok(r.ok);
    if (!r.ok) continue;
    const want = chain.select(url, { today: '2026-12-31' });
    const got = selectFromEvents(r.value.events, r.value.voids, { today: '2026-12-31' });
    assert.is(got?.block ?? null, chain.isVoid(b.index) ? null : (want?.block.index ?? null));
    if (chain.isVoid(b.index)) assert.is(got, null, `void block ${b.index}`);
  }
});

test('empty index: absence of anything is proven; checkpoint extension line round-trips', () => {
  const idx = new CompletenessIndex(c);
  const root = idx.root();
  const r = verifyIndexProof(c, idx.prove('unit', 'npm/x'), 'unit', 'npm/x', { root, size: 0 });
  assert.ok(r.ok && !r.value.present);
  const line = indexExtensionLine(root);
  assert.equal(indexRootOf(['other ext', line]), root);
  assert.is(indexRootOf(['x']), null);
  assert.ok('malformed' in (indexRootOf([line, line]) as object));
});

test('test/vectors/index-v1/index-v1.json: roots and proofs a second implementation must reproduce', () => {
  const file = JSON.parse(readFileSync(new URL('../vectors/index-v1/index-v1.json', import.meta.url), 'utf8'));
  assert.equal(file, indexVectors(buildVectorChain()));
});

test('toImage / fromImage: the index read back has the same root and proofs, and grows like the original; a damaged image is refused', () => {
  const blocks = randomChain(160, 5);
  const k = buildKeyLifeChain();
  for (const chain of [blocks, k.blocks]) {
    const half = Math.floor(chain.length / 2);
    const { idx } = build(chain.slice(0, half));
    const image = idx.toImage();
    const back = CompletenessIndex.fromImage(c, image);
    assert.ok(back);
    assert.is(back!.size, half);
    assert.is(hex(back!.root()), hex(idx.root()));
    const ch = new ChainIndex();
    for (const b of chain.slice(0, half)) ch.add(b);
    for (const b of chain.slice(half)) {
      back!.addBlock(b, (h) => ch.indexOfHash(h));
      ch.add(b);
    }
    const full = build(chain).idx;
    assert.is(hex(back!.root()), hex(full.root()));
    assert.equal(back!.voids(), full.voids());
    for (const b of chain) {
      if (b.payload.intent !== 'endorse') continue;
      const url = b.payload.endorsements[0]!.artifact_url;
      assert.is(hex(back!.prove('url', url)), hex(full.prove('url', url)));
    }
    // unaligned bytes are read too (a Buffer from a file)
    const shifted = new Uint8Array(image.length + 3).subarray(3);
    shifted.set(image);
    assert.is(hex(CompletenessIndex.fromImage(c, shifted)!.root()), hex(idx.root()));
  }
  const image = build(blocks).idx.toImage();
  assert.is(CompletenessIndex.fromImage(c, image.subarray(0, image.length - 8)), null, 'truncated');
  assert.is(CompletenessIndex.fromImage(c, new Uint8Array(image.length)), null, 'zeros');
  const bad = image.slice();
  bad[36 + 8] = 0x7f; // a node's bit past 255
  bad[37 + 8] = 0x7f;
  assert.is(CompletenessIndex.fromImage(c, bad), null, 'an index out of range');
});

test('image v2: no hash of a small subtree and no acc in it; read back without hashing, the root at once, a first proof a few dozen hashes; the same proofs, trials and appends; older or damaged images refused', () => {
  const { blocks } = buildLongChain(2500);
  const half = 2000;
  const { idx, chain } = build(blocks.slice(0, half));
  const full = build(blocks).idx;
  const image = idx.toImage();
  const [, version, n, , l, arenaUsed, , , stored] = new Uint32Array(image.buffer, image.byteOffset, 9);
  assert.is(version, 2);
  assert.is(n, 2 * l! - 1);
  assert.ok(stored! > 0 && stored! < n! / 4, `${stored} of ${n} node hashes kept`);
  // shape (10 B a node), key and head (36 B a leaf), the kept hashes, the arena: nothing else
  assert.ok(image.length < 10 * n! + 36 * l! + 32 * stored! + arenaUsed! + 64, `${image.length} bytes`);
  let calls = 0;
  const counting: CryptoBackend = {
    ...c,
    sha256To: (d, o) => {
      calls++;
      c.sha256To!(d, o);
    },
    digest: (a, d) => {
      calls++;
      return c.digest!(a, d);
    },
  };
  const back = CompletenessIndex.fromImage(counting, image)!;
  assert.ok(back);
  assert.is(calls, 0, 'reading the image hashes nothing');
  assert.is(hex(back.root()), hex(idx.root()));
  assert.is(calls, 1, 'the root: the committed root over the kept trie root, no node rehashed');
  const url = (b: Block) => (b.payload as any).endorsements[0].artifact_url as string;
  const unit = (b: Block) => (b.payload as any).endorsements[0].name as string;
  let most = 0;
  for (let i = 1; i < half; i += 29) {
    for (const [kind, name] of [
      ['url', url(blocks[i]!)],
      ['unit', unit(blocks[i]!)],
      ['url', `https://nowhere.example/${i}`],
    ] as const) {
      calls = 0;
      const p = back.prove(kind, name);
      most = Math.max(most, calls);
      assert.is(hex(p), hex(idx.prove(kind, name)), `${kind} ${name}`);
    }
  }
  assert.ok(most > 1 && most <= 80, `a first proof: ${most} hashes`);
  // a trial on the read-back index, left pending then rolled back by a proof, then refused: nothing changes
  const target = (h: string) => chain.indexOfHash(h);
  back.rootWith(blocks.slice(half, half + 7), target);
  assert.is(hex(back.prove('url', url(blocks[half - 1]!))), hex(idx.prove('url', url(blocks[half - 1]!))));
  back.rootWith(blocks.slice(half, half + 7), target, () => false);
  assert.is(hex(back.root()), hex(idx.root()));
  // appends: the same roots and proofs as the index built from every block, and its own image reads back
  for (const b of blocks.slice(half)) back.addBlock(b, target);
  assert.is(hex(back.root()), hex(full.root()));
  for (let i = 1; i < blocks.length; i += 41) {
    assert.is(hex(back.prove('url', url(blocks[i]!))), hex(full.prove('url', url(blocks[i]!))));
    assert.is(hex(back.prove('unit', unit(blocks[i]!))), hex(full.prove('unit', unit(blocks[i]!))));
  }
  const again = CompletenessIndex.fromImage(c, back.toImage())!;
  assert.is(hex(again.root()), hex(full.root()));
  assert.is(hex(again.prove('unit', unit(blocks[7]!))), hex(full.prove('unit', unit(blocks[7]!))));
  // an image of the first version, and damaged shapes, are refused
  const pad8 = (x: number) => (x + 7) & ~7;
  const at = { left: 40 + pad8(2 * n!), heads: 0 };
  at.heads = at.left + 2 * pad8(4 * n!) + 32 * stored! + 32 * l!;
  const edit = (f: (w: DataView) => void) => {
    const b = image.slice();
    f(new DataView(b.buffer));
    return CompletenessIndex.fromImage(c, b);
  };
  assert.is(
    edit((w) => w.setUint32(4, 1, true)),
    null,
    'version 1',
  );
  const bits = new Int16Array(image.buffer, image.byteOffset + 40, n!);
  const leafNodes = [...bits.keys()].filter((k) => bits[k]! < 0);
  const lefts = new Int32Array(image.buffer, image.byteOffset + at.left, n!);
  assert.is(
    edit((w) => w.setInt32(at.left + 4 * leafNodes[1]!, lefts[leafNodes[0]!]!, true)),
    null,
    'two nodes on one leaf',
  );
  assert.is(
    edit((w) => w.setUint32(at.heads, arenaUsed! + 64, true)),
    null,
    "a key's events past the arena",
  );
  const arenaAt = at.heads + pad8(4 * l!);
  const firstEvent = new DataView(image.buffer, image.byteOffset).getUint32(at.heads, true);
  assert.is(
    edit((w) => w.setUint16(arenaAt + firstEvent + 4, 5)),
    null,
    'an event shorter than any',
  );
  const inner = [...bits.keys()].find((k) => bits[k]! > 0)!;
  const rootNode = new Uint32Array(image.buffer, image.byteOffset, 9)[3]! - 1;
  assert.is(
    edit((w) => w.setInt32(at.left + 4 * inner, rootNode, true)),
    null,
    'a cycle',
  );
});

test.run();
