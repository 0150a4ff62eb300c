/**
 * chain/index-tree.ts's in-memory layout (node and leaf records in
 * interleaved arrays, grown by copies): thousands of random keys, revokes and
 * voids, with trials kept, taken and rolled back and an image read back
 * half-way, give at every step the root of a naive crit-bit computation over
 * a plain map of events (docs/spec/index.md), and proofs that check against
 * it and equal those of an index built in one go from the same blocks.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Block } from '../../chain/block.ts';
import { CompletenessIndex, indexKey, indexRoot, type IndexEvent } from '../../chain/index-tree.ts';
import { verifyIndexProof } from '../../chain/index-proof.ts';
import { naiveTrie } from '../helpers/index-naive.ts';
import { nodeBackend as c } from '../../platform/node-crypto.ts';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

function rng(seed: number): (k: number) => number {
  let x = seed >>> 0 || 1;
  return (k) => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x % k;
  };
}

type Entry = { artifact_url: string; name: string; semver: string };

/** Blocks with the fields the index reads: endorsements (new URLs mostly, some again), revokes of earlier endorsements, key compromises. */
function randomBlocks(n: number, seed: number): Block[] {
  const r = rng(seed);
  const out: Block[] = [];
  const endorsed: number[] = [];
  for (let i = 0; i < n; i++) {
    const date = `2026-${String(1 + r(12)).padStart(2, '0')}-1${r(9)}`;
    const base = { index: i, record_hash: `${seed}-${i}`.padStart(64, '0') };
    const roll = r(40);
    if (roll === 0 && i > 3) {
      out.push({ ...base, payload: { intent: 'key', effective_date: date, statement: { action: 'compromise', good_through: r(i - 1) } } } as unknown as Block);
    } else if (roll < 5 && endorsed.length > 0) {
      const t = endorsed[r(endorsed.length)]!;
      out.push({ ...base, payload: { intent: 'revoke', effective_date: date, target_hash: out[t]!.record_hash } } as unknown as Block);
    } else {
      const entries: Entry[] = [];
      for (let k = 1 + r(3); k > 0; k--) {
        const u = r(4) === 0 && i > 0 ? r(i) : i * 3 + k; // a URL again now and then
        const unit = r(50);
        entries.push({ artifact_url: `https://a.example/u${u}/v${r(5)}.tgz`, name: `npm/p${unit}`, semver: `1.${r(9)}.${r(3)}` });
      }
      endorsed.push(i);
      out.push({ ...base, payload: { intent: 'endorse', effective_date: date, endorsements: entries } } as unknown as Block);
    }
  }
  return out;
}

/** The index as a plain map: key -> events in chain order, as docs/spec/index.md 3 states it. */
class Model {
  leaves = new Map<string, { key: Uint8Array; events: IndexEvent[] }>();
  voids: [number, number][] = [];
  size = 0;
  private byHash = new Map<string, Block>();
  add(b: Block): void {
    const p = b.payload as any;
    const push = (key: Uint8Array, ev: IndexEvent) => {
      const k = hex(key);
      if (!this.leaves.has(k)) this.leaves.set(k, { key, events: [] });
      this.leaves.get(k)!.events.push(ev);
    };
    if (p.intent === 'endorse') {
      for (const e of p.endorsements as Entry[]) {
        const ev: IndexEvent = { kind: 'endorse', block: b.index, date: p.effective_date, semver: e.semver };
        push(indexKey(c, 'url', e.artifact_url), ev);
        push(indexKey(c, 'unit', e.name), ev);
      }
      this.byHash.set(b.record_hash, b);
    } else if (p.intent === 'revoke') {
      const t = this.byHash.get(p.target_hash)!;
      const seen = new Set<string>();
      for (const e of (t.payload as any).endorsements as Entry[]) {
        for (const key of [indexKey(c, 'url', e.artifact_url), indexKey(c, 'unit', e.name)]) {
          if (seen.has(hex(key))) continue;
          seen.add(hex(key));
          push(key, { kind: 'revoke', block: b.index, target: t.index, date: p.effective_date });
        }
      }
    } else if (p.statement.good_through + 1 <= b.index - 1) {
      this.voids.push([p.statement.good_through + 1, b.index - 1]);
    }
    this.size++;
  }
  root(): Uint8Array {
    const trie = this.leaves.size === 0 ? new Uint8Array(32) : naiveTrie(c, [...this.leaves.values()]);
    return indexRoot(c, this.size, trie, this.voids);
  }
}

test('random blocks, trials and an image read back: roots equal the naive computation; proofs check and equal a fresh build', () => {
  for (const seed of [3, 37]) {
    const blocks = randomBlocks(1600, seed);
    const byHash = new Map(blocks.map((b) => [b.record_hash, b.index]));
    const target = (h: string) => byHash.get(h) ?? -1;
    const model = new Model();
    let idx = new CompletenessIndex(c);
    const r = rng(seed + 1);
    let at = 0;
    while (at < blocks.length) {
      const batch = blocks.slice(at, at + 1 + r(4));
      const move = r(6);
      if (move === 0) {
        // a trial rolled back by another call, then the blocks added one by one
        idx.rootWith(batch, target);
        assert.is(idx.size, at);
        for (const b of batch) idx.addBlock(b, target);
      } else if (move === 1) {
        // a trial, then the commit of the same blocks (the gateway's append path)
        const tried = hex(idx.rootWith(batch, target));
        assert.is(hex(idx.rootWith(structuredClone(batch), target, () => true)), tried);
      } else if (move === 2) {
        // a trial the judge refuses: nothing changes
        const before = hex(idx.root());
        idx.rootWith(batch, target, () => false);
        assert.is(hex(idx.root()), before);
        for (const b of batch) idx.addBlock(b, target);
      } else {
        for (const b of batch) idx.addBlock(b, target);
      }
      for (const b of batch) model.add(b);
      at += batch.length;
      assert.is(idx.size, at);
      if (r(5) === 0) idx.root(); // hashes brought up to date now and then, as checkpoints do
      if (r(30) === 0 || at === blocks.length) assert.is(hex(idx.root()), hex(model.root()), `seed ${seed}, root after ${at} blocks`);
      if (at >= blocks.length / 2 && at < blocks.length / 2 + 4) {
        const back = CompletenessIndex.fromImage(c, idx.toImage());
        assert.ok(back, 'the image reads back');
        idx = back!;
      }
    }
    assert.ok(model.leaves.size > 2500, `${model.leaves.size} keys: the arrays grew several times`);
    const fresh = new CompletenessIndex(c);
    for (const b of blocks) fresh.addBlock(b, target);
    const root = idx.root();
    assert.is(hex(fresh.root()), hex(root));
    for (let k = 0; k < 300; k++) {
      const b = blocks[r(blocks.length)]!;
      const p = b.payload as any;
      const names: ['url' | 'unit', string][] =
        p.intent === 'endorse'
          ? [
              ['url', p.endorsements[0].artifact_url],
              ['unit', p.endorsements[0].name],
            ]
          : [['url', `https://nowhere.example/${k}`]];
      for (const [kind, name] of names) {
        const proof = idx.prove(kind, name);
        assert.is(hex(proof), hex(fresh.prove(kind, name)), `${kind} ${name}: the same proof as a fresh build`);
        const checked = verifyIndexProof(c, proof, kind, name, { root, size: idx.size });
        assert.ok(checked.ok, `${kind} ${name}: the proof checks`);
        const want = model.leaves.get(hex(indexKey(c, kind, name)))?.events ?? [];
        assert.equal(checked.ok && checked.value.events, want, `${kind} ${name}: its events`);
      }
    }
  }
});

test.run();
