/**
 * chain/merkle.ts: RFC 6962 hashing and the two RFC 9162 verifiers.
 * transparency-dev/merkle's reference tree and every inclusion / consistency
 * probe it ships (test/vectors/transparency-dev/, README there) byte for
 * byte; every proof of a naive recursive tree (test/helpers/merkle-naive.ts)
 * accepted and each corrupted variant refused; malformed input answers
 * false, never throws; the @noble backend gives the same answers.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { leafHash, nodeHash, rootOfEntries, verifyInclusion, verifyConsistency, type Hash } from '../../chain/merkle.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { nobleBackend } from '../../chain/backend-noble.ts';
import type { CryptoBackend } from '../../chain/crypto-backend.ts';
import { loadReferenceTree, transparencyDevDir } from '../helpers/vectors.ts';
import { entries, naiveLeaf, naiveMth, naivePath, naiveProof, naivePathLength, naiveProofLength } from '../helpers/merkle-naive.ts';

const hex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'hex'));
const b64 = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'base64'));
const toHex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const ref = loadReferenceTree();

function probes(dir: string): { file: string; p: Record<string, unknown> }[] {
  const out: { file: string; p: Record<string, unknown> }[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d).sort()) {
      const f = join(d, name);
      if (statSync(f).isDirectory()) walk(f);
      else if (name.endsWith('.json')) out.push({ file: f.slice(transparencyDevDir.length + 1), p: JSON.parse(readFileSync(f, 'utf8')) });
    }
  };
  walk(join(transparencyDevDir, 'testdata', dir));
  return out;
}
/**
 * Where vouch answers otherwise than transparency-dev, on purpose: roots must
 * be 32 bytes (this probe has equal 12-byte "roots" for sizes 1 and 1,
 * which transparency-dev accepts by comparing them).
 */
const DEVIATIONS: Record<string, boolean> = { 'testdata/consistency/additional/sizes-are-equal-one-and-proof-is-empty.json': false };
const proofOf = (v: unknown): Hash[] => ((v as string[] | null) ?? []).map(b64);

for (const c of [nodeBackend, nobleBackend] as CryptoBackend[]) {
  test(`${c.name}: leaf, node and roots of the RFC 6962 reference tree, byte for byte`, () => {
    const leaves = ref.leafInputs.map(hex);
    ref.nodeHashes[0]!.forEach((h, i) => assert.is(toHex(leafHash(c, leaves[i]!)), h, `leaf ${i}`));
    for (let l = 1; l < ref.nodeHashes.length; l++) {
      ref.nodeHashes[l]!.forEach((h, i) =>
        assert.is(toHex(nodeHash(c, hex(ref.nodeHashes[l - 1]![2 * i]!), hex(ref.nodeHashes[l - 1]![2 * i + 1]!))), h, `node ${l}/${i}`),
      );
    }
    ref.rootHashes.forEach((h, n) => assert.is(toHex(rootOfEntries(c, leaves.slice(0, n))), h, `root of ${n}`));
  });

  test(`${c.name}: every transparency-dev inclusion probe answers as wantErr says`, () => {
    const all = probes('inclusion');
    assert.ok(all.length >= 80, `${all.length} probes`);
    let happy = 0;
    for (const { file, p } of all) {
      const ok = verifyInclusion(c, p.leafIdx as number, p.treeSize as number, b64(p.leafHash as string), proofOf(p.proof), b64(p.root as string));
      assert.is(ok, DEVIATIONS[file] ?? !p.wantErr, file);
      if (ok) happy++;
    }
    assert.ok(happy >= 6, `${happy} accepted`);
  });

  test(`${c.name}: every transparency-dev consistency probe answers as wantErr says`, () => {
    const all = probes('consistency');
    assert.ok(all.length >= 90, `${all.length} probes`);
    for (const { file, p } of all) {
      const ok = verifyConsistency(c, p.size1 as number, p.size2 as number, b64(p.root1 as string), b64(p.root2 as string), proofOf(p.proof));
      assert.is(ok, DEVIATIONS[file] ?? !p.wantErr, file);
    }
  });
}

/** Variants of a valid proof that must all be refused. */
function corruptions(proof: readonly Hash[]): Hash[][] {
  const out: Hash[][] = [];
  proof.forEach((h, i) => {
    for (const at of [0, 31]) {
      const bad = proof.map((x) => x.slice());
      bad[i]![at]! ^= 0x01;
      out.push(bad);
    }
    out.push(proof.filter((_, j) => j !== i)); // one component removed
    out.push([...proof.slice(0, i), h.slice(0, 31), ...proof.slice(i + 1)]); // short hash
  });
  out.push([...proof, proof[0] ?? new Uint8Array(32)]); // extended
  out.push([new Uint8Array(32), ...proof]); // garbage before
  if (proof.length > 0) out.push(proof.slice(0, -1)); // truncated
  return out;
}
const flip = (h: Hash): Hash => {
  const x = h.slice();
  x[7]! ^= 0x80;
  return x;
};

test('naive tree: all inclusion proofs index < size <= 130 verify; every corruption is refused', () => {
  const c = nodeBackend;
  const leaves = entries(130).map(naiveLeaf);
  let checked = 0;
  for (let size = 1; size <= 130; size++) {
    const root = naiveMth(leaves, 0, size);
    const tree = leaves.slice(0, size);
    for (let i = 0; i < size; i++) {
      const proof = naivePath(tree, i);
      assert.ok(verifyInclusion(c, i, size, leaves[i]!, proof, root), `${i}/${size}`);
      checked++;
      // Cheap refusals for every pair.
      assert.not.ok(verifyInclusion(c, i, size, flip(leaves[i]!), proof, root));
      assert.not.ok(verifyInclusion(c, i, size, leaves[i]!, proof, flip(root)));
      if (size > 1) assert.not.ok(verifyInclusion(c, (i + 1) % size, size, leaves[i]!, proof, root), `wrong index ${i}/${size}`);
      // A wrong size is refused whenever it changes the proof's shape. (Where
      // it does not — index 0 of 3 and of 4 — the root binds the entries and
      // the signed checkpoint binds the size.)
      for (const wrong of [size + 1, size - 1, size * 2, Math.floor(size / 2)]) {
        if (wrong <= i || wrong === size) continue;
        if (naivePathLength(i, wrong) !== proof.length) assert.not.ok(verifyInclusion(c, i, wrong, leaves[i]!, proof, root), `size ${wrong} for ${i}/${size}`);
      }
      assert.not.ok(verifyInclusion(c, size, size, leaves[i]!, proof, root));
      // The full mutation sweep on a sample (all sizes <= 20, then every 7th pair).
      if (size <= 20 || (i * 31 + size) % 7 === 0) {
        for (const bad of corruptions(proof)) assert.not.ok(verifyInclusion(c, i, size, leaves[i]!, bad, root), `corrupted ${i}/${size}`);
      }
    }
  }
  assert.is(checked, (130 * 131) / 2);
});

test('naive tree: all consistency proofs 1 <= from <= to <= 130 verify; every corruption is refused', () => {
  const c = nodeBackend;
  const leaves = entries(130).map(naiveLeaf);
  const roots = [naiveMth([]), ...leaves.map((_, n) => naiveMth(leaves, 0, n + 1))];
  for (let to = 1; to <= 130; to++) {
    const tree = leaves.slice(0, to);
    for (let from = 1; from <= to; from++) {
      const proof = naiveProof(tree, from);
      assert.ok(verifyConsistency(c, from, to, roots[from]!, roots[to]!, proof), `${from}->${to}`);
      assert.not.ok(verifyConsistency(c, from, to, flip(roots[from]!), roots[to]!, proof));
      assert.not.ok(verifyConsistency(c, from, to, roots[from]!, flip(roots[to]!), proof));
      if (from < to) {
        assert.not.ok(verifyConsistency(c, to, from, roots[to]!, roots[from]!, proof), 'swapped');
        // Wrong sizes, refused whenever they change the proof's shape (see above).
        for (const [f, t] of [
          [from, to + 1],
          [from, to - 1],
          [from - 1, to],
          [from + 1, to],
          [from, to * 2],
          [Math.floor(from / 2), to],
        ] as const) {
          if (f < 1 || f >= t || (f === from && t === to)) continue;
          if (naiveProofLength(f, t) !== proof.length)
            assert.not.ok(verifyConsistency(c, f, t, roots[from]!, roots[to]!, proof), `${f}->${t} for ${from}->${to}`);
        }
        if (to <= 24 || (from * 13 + to) % 7 === 0) {
          for (const bad of corruptions(proof)) assert.not.ok(verifyConsistency(c, from, to, roots[from]!, roots[to]!, bad), `corrupted ${from}->${to}`);
        }
      } else {
        assert.not.ok(verifyConsistency(c, from, to, roots[from]!, roots[to]!, [roots[from]!]), 'from = to needs an empty proof');
      }
    }
    // From the empty tree: meaningless, refused (Go tlog.CheckTree, transparency-dev).
    assert.not.ok(verifyConsistency(c, 0, to, roots[0]!, roots[to]!, []));
  }
});

test('verifiers answer false and never throw on malformed input', () => {
  const c = nodeBackend;
  const leaves = entries(5).map(naiveLeaf);
  const root = naiveMth(leaves);
  const proof = naivePath(leaves, 2);
  assert.ok(verifyInclusion(c, 2, 5, leaves[2]!, proof, root));
  const junk: unknown[] = [null, undefined, -1, 1.5, NaN, Infinity, 2 ** 60, '2', {}, [], new Uint8Array(31), new Uint8Array(33)];
  for (const j of junk) {
    assert.not.ok(verifyInclusion(c, j as number, 5, leaves[2]!, proof, root));
    assert.not.ok(verifyInclusion(c, 2, j as number, leaves[2]!, proof, root));
    assert.not.ok(verifyInclusion(c, 2, 5, j as Hash, proof, root));
    assert.not.ok(verifyInclusion(c, 2, 5, leaves[2]!, j as Hash[], root));
    assert.not.ok(verifyInclusion(c, 2, 5, leaves[2]!, [...proof.slice(0, 2), j as Hash], root));
    assert.not.ok(verifyInclusion(c, 2, 5, leaves[2]!, proof, j as Hash));
    assert.not.ok(verifyConsistency(c, j as number, 5, root, root, proof));
    assert.not.ok(verifyConsistency(c, 3, j as number, root, root, proof));
    assert.not.ok(verifyConsistency(c, 3, 5, j as Hash, root, proof));
    assert.not.ok(verifyConsistency(c, 3, 5, root, j as Hash, proof));
    assert.not.ok(verifyConsistency(c, 3, 5, root, root, j as Hash[]));
  }
  // Far too long a proof, and an index beyond the size.
  assert.not.ok(
    verifyInclusion(
      c,
      2,
      5,
      leaves[2]!,
      Array.from({ length: 200 }, () => leaves[0]!),
      root,
    ),
  );
  assert.not.ok(verifyInclusion(c, 5, 5, leaves[2]!, proof, root));
  assert.not.ok(verifyInclusion(c, 0, 0, leaves[2]!, [], root));
  // Huge but safe sizes do not throw (no 32-bit arithmetic).
  assert.not.ok(verifyInclusion(c, 2 ** 40 + 3, 2 ** 52, leaves[2]!, proof, root));
  assert.not.ok(verifyConsistency(c, 2 ** 40 + 3, 2 ** 52, root, root, proof));
});

test('noble and node backends agree on leaf and node hashes of any length', () => {
  for (const len of [0, 1, 31, 32, 33, 100]) {
    const e = new Uint8Array(len).map((_, i) => i * 7);
    assert.equal(leafHash(nobleBackend, e), leafHash(nodeBackend, e));
    assert.equal(leafHash(nodeBackend, e), naiveLeaf(e));
  }
  const [a, b] = entries(2);
  assert.equal(nodeHash(nobleBackend, a!, b!), nodeHash(nodeBackend, a!, b!));
  // Results are fresh arrays: later hashing does not change an earlier result.
  const first = nodeHash(nodeBackend, a!, b!);
  const copy = first.slice();
  nodeHash(nodeBackend, b!, a!);
  assert.equal(first, copy);
});

test.run();
