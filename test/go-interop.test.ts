/**
 * Interop with Go's reference code (golang.org/x/mod/sumdb/note and
 * sumdb/tlog, Debian's golang-golang-x-mod-dev, GOPATH mode): the program
 * test/go-interop/checknote.go opens a checkpoint note signed by
 * chain/tlog-checkpoint.ts with the verifier key of chain/note.ts, and
 * refuses it with one byte changed or under another key. It also checks
 * inclusion proofs (tlog.CheckRecord) and consistency proofs (tlog.CheckTree);
 * it is fed the proofs of a hand-built three-leaf RFC 6962 tree, and a
 * checkpoint with inclusion and consistency proofs of chain/merkle-tree.ts
 * over 1,000 entries (sizes around powers of two), and refuses altered ones.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../platform/node-crypto.ts';
import { base64Encode } from '../chain/encoding.ts';
import { cosign, SIG_ED25519, verifierKey } from '../chain/note.ts';
import { formatCheckpoint, signCheckpoint } from '../chain/tlog-checkpoint.ts';
import { MerkleTree } from '../chain/merkle-tree.ts';
import { buildCheckNote, type CheckNoteRun } from './helpers/go-checknote.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-go-interop-'));
let run: (input: unknown) => CheckNoteRun;

test.before(() => {
  run = buildCheckNote(work);
});
test.after(() => rmSync(work, { recursive: true, force: true }));

function check(input: unknown): { status: number | null; out: string } {
  const r = run(input);
  return { status: r.status, out: r.stdout + r.stderr };
}

const c = nodeBackend;
const authority = nodeSigner('authority', privateKeyFromSeed(new Uint8Array(32).fill(21)));
const other = nodeSigner('other', privateKeyFromSeed(new Uint8Array(32).fill(22)));
const origin = '127.0.0.1:8080';
const vkey = verifierKey(c, origin, SIG_ED25519, authority.publicKey);

// A three-leaf RFC 6962 tree built by hand (entries are 32-byte record hashes).
const sha = (...parts: Uint8Array[]) => new Uint8Array(createHash('sha256').update(Buffer.concat(parts)).digest());
const entries = [1, 2, 3].map((i) => new Uint8Array(32).fill(i));
const leaf = entries.map((e) => sha(Uint8Array.of(0), e));
const node = (l: Uint8Array, r: Uint8Array) => sha(Uint8Array.of(1), l, r);
const root2 = node(leaf[0]!, leaf[1]!);
const root3 = node(root2, leaf[2]!);
const b64 = base64Encode;

test('Go opens a checkpoint note signed by chain/tlog-checkpoint.ts, also with a witness cosignature', () => {
  const note = signCheckpoint(c, { origin, size: 3, root: root3, extensions: [] }, authority);
  const r = check({ vkey, note });
  assert.is(r.status, 0, r.out);
  assert.is(r.out, `ok note ${origin} size=3 root=${b64(root3)} sigs=1\n`);
  const body = formatCheckpoint({ origin, size: 3, root: root3, extensions: [] });
  const cosigned = note + cosign(c, body, 'witness.example/w', other, 1_700_000_000).line + '\n';
  const r2 = check({ vkey, note: cosigned });
  assert.is(r2.status, 0, r2.out);
  assert.match(r2.out, /^ok note .* sigs=1\n$/);
});

test('Go refuses the note with one byte changed and under another key', () => {
  const note = signCheckpoint(c, { origin, size: 3, root: root3, extensions: [] }, authority);
  // One byte of the root line changed (another base64 letter).
  const rootLine = note.split('\n')[2]!;
  const flipped = note.replace(rootLine, (rootLine[0] === 'A' ? 'B' : 'A') + rootLine.slice(1));
  const r = check({ vkey, note: flipped });
  assert.is(r.status, 1, r.out);
  assert.match(r.out, /FAIL note\.Open: invalid signature for key 127\.0\.0\.1:8080\+/);
  // One byte of the signature changed.
  const sigStart = note.lastIndexOf(' ') + 10;
  const badSig = note.slice(0, sigStart) + (note[sigStart] === 'A' ? 'B' : 'A') + note.slice(sigStart + 1);
  assert.is(check({ vkey, note: badSig }).status, 1);
  // Another key under the same name: the note carries no signature Go knows.
  const r2 = check({ vkey: verifierKey(c, origin, SIG_ED25519, other.publicKey), note });
  assert.is(r2.status, 1, r2.out);
  assert.match(r2.out, /FAIL note\.Open: note has no verifiable signatures/);
  // The right key under another name.
  const r3 = check({ vkey: verifierKey(c, 'elsewhere.example', SIG_ED25519, authority.publicKey), note });
  assert.is(r3.status, 1, r3.out);
});

test('Go checks inclusion and consistency proofs (hand-built three-leaf tree) and refuses a wrong root', () => {
  const good = {
    inclusion: [
      { index: 0, size: 3, leaf_entry_b64: b64(entries[0]!), proof: [b64(leaf[1]!), b64(leaf[2]!)], root_b64: b64(root3) },
      { index: 2, size: 3, leaf_entry_b64: b64(entries[2]!), proof: [b64(root2)], root_b64: b64(root3) },
      { index: 1, size: 2, leaf_entry_b64: b64(entries[1]!), proof: [b64(leaf[0]!)], root_b64: b64(root2) },
    ],
    consistency: [
      { from: 2, to: 3, old_root: b64(root2), new_root: b64(root3), proof: [b64(leaf[2]!)] },
      { from: 1, to: 3, old_root: b64(leaf[0]!), new_root: b64(root3), proof: [b64(leaf[1]!), b64(leaf[2]!)] },
    ],
  };
  const r = check(good);
  assert.is(r.status, 0, r.out);
  assert.is(r.out, 'ok inclusion 0/3\nok inclusion 2/3\nok inclusion 1/2\nok consistency 2->3\nok consistency 1->3\n');
  const badInclusion = check({ inclusion: [{ ...good.inclusion[0]!, root_b64: b64(root2) }] });
  assert.is(badInclusion.status, 1, badInclusion.out);
  assert.match(badInclusion.out, /^FAIL inclusion 0\/3: /);
  const badConsistency = check({ consistency: [{ ...good.consistency[0]!, proof: [b64(leaf[1]!)] }] });
  assert.is(badConsistency.status, 1, badConsistency.out);
  assert.match(badConsistency.out, /^FAIL consistency 2->3: /);
});

test('Go checks a checkpoint, inclusion and consistency proofs made by chain/merkle-tree.ts (1,000 entries)', () => {
  const tree = new MerkleTree(c);
  const recordHashes = Array.from({ length: 1000 }, (_, i) => sha(new TextEncoder().encode(`record ${i}`)));
  for (const e of recordHashes) tree.append(e);
  const size = tree.size;
  const note = signCheckpoint(c, { origin, size, root: tree.root(), extensions: [] }, authority);
  const sizes = [1, 2, 3, 7, 8, 9, 255, 256, 257, 511, 512, 513, 999, 1000];
  const inclusion = [];
  for (const s of sizes) {
    for (const index of new Set([0, s >> 1, s - 1, Math.max(0, s - 2)])) {
      inclusion.push({ index, size: s, leaf_entry_b64: b64(recordHashes[index]!), proof: tree.inclusionProof(index, s).map(b64), root_b64: b64(tree.root(s)) });
    }
  }
  const consistency = [];
  for (const to of sizes) {
    for (const from of sizes) {
      if (from > to) continue;
      consistency.push({ from, to, old_root: b64(tree.root(from)), new_root: b64(tree.root(to)), proof: tree.consistencyProof(from, to).map(b64) });
    }
  }
  const r = check({ vkey, note, inclusion, consistency });
  assert.is(r.status, 0, r.out);
  assert.ok(r.out.startsWith(`ok note ${origin} size=1000 root=${b64(tree.root())} sigs=1\n`), r.out);
  assert.is(r.out.split('\n').filter((l) => l.startsWith('ok inclusion')).length, inclusion.length);
  assert.is(r.out.split('\n').filter((l) => l.startsWith('ok consistency')).length, consistency.length);
  // A proof of another index, and a consistency proof with one hash changed: refused by Go.
  const wrongIndex = { ...inclusion[1]!, index: inclusion[1]!.index + 1 };
  assert.is(check({ inclusion: [wrongIndex] }).status, 1);
  const last = consistency[consistency.length - 2]!;
  const flipped = last.proof.map((h, i) => (i === 0 ? b64(sha(new TextEncoder().encode(h))) : h));
  assert.ok(last.proof.length > 0);
  assert.is(check({ consistency: [{ ...last, proof: flipped }] }).status, 1);
});

test.run();
