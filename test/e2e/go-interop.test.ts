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
 * Go's note.Open and chain/note.ts's openNote (and the checks built on it:
 * verifyNoteSignature, openCheckpoint) are given the same notes with
 * repeated, unknown, invalid and too many signature lines, and must agree.
 * Key events (docs/spec/key-events.md): Go opens a rollover note served by a
 * gateway (two signature lines) with either key's verifier key, and a note
 * by the key in force after a compromise with the verifier key `/v1/keys`
 * publishes, not with the compromised or an older one.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { base64Encode } from '../../chain/encoding.ts';
import { cosign, openNote, parseNote, signNote, SIG_ED25519, verifierKey, verifyNoteSignature } from '../../chain/note.ts';
import { hexEncode } from '../../chain/encoding.ts';
import { isVouchError } from '../../chain/errors.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { formatCheckpoint, signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { buildCheckNote, type CheckNoteRun } from '../helpers/go-checknote.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { b64 as keyB64, buildKeyLifeChain, ONLINE } from '../helpers/key-fixture.ts';
import { initKeyRepo } from '../helpers/key-log.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-go-interop-'));
let run: (input: unknown) => CheckNoteRun;

test.before(() => {
  run = buildCheckNote(work);
});
const gateways: GatewayProcess[] = [];
test.after(async () => {
  for (const g of gateways) await g.stop();
  rmSync(work, { recursive: true, force: true });
});

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

/** What Go's note.Open says of `note` with `vkeys`: accepted with its verified and unverified lines, or the kind of refusal. */
function goOpen(vkeys: string[], note: string): string {
  const r = check({ open: { vkeys, note } });
  if (r.status === 0) return r.out.trim().replace(/^ok open /, 'ok ');
  if (/malformed note/.test(r.out)) return 'malformed';
  if (/invalid signature for key/.test(r.out)) return 'invalid';
  if (/no verifiable signatures/.test(r.out)) return 'unverified';
  throw new Error(`go: ${r.out}`);
}

/** The same in chain/note.ts's terms. */
function ourOpen(keys: { name: string; publicKey: Uint8Array }[], note: string): string {
  try {
    const o = openNote(c, note, keys);
    if (!o.ok) return o.why;
    const ids = (sigs: { name: string; keyId: Uint8Array }[]) => sigs.map((s) => `${s.name}+${hexEncode(s.keyId)}`).join(',');
    return `ok verified=${ids(o.verified)} unverified=${ids(o.unverified)}`;
  } catch (e) {
    if (isVouchError(e) && e.code === 'malformed') return 'malformed';
    throw e;
  }
}

test("Go's note.Open and openNote agree: unknown keys repeated, a known key twice (second invalid, or first), over 100 lines", () => {
  const body = formatCheckpoint({ origin, size: 3, root: root3, extensions: [] });
  const mine = signNote(c, body, origin, authority).line + '\n';
  const badMine = signNote(c, body.replace('\n3\n', '\n4\n'), origin, authority).line + '\n'; // same key, a signature of other text
  const stranger = nodeSigner('s', privateKeyFromSeed(new Uint8Array(32).fill(23)));
  const unknown = signNote(c, body, 'stranger.example/k', stranger).line + '\n';
  const unknown2 = signNote(c, body, 'stranger.example/k2', stranger).line + '\n';
  const otherVkey = verifierKey(c, 'other.example/k', SIG_ED25519, other.publicKey);
  const otherLine = signNote(c, body, 'other.example/k', other).line + '\n';
  const badOther = signNote(c, 'other text\n', 'other.example/k', other).line + '\n';
  const key = { name: origin, publicKey: authority.publicKey };
  const otherKey = { name: 'other.example/k', publicKey: other.publicKey };
  const cases: [string, string, boolean][] = [
    ['unknown key twice', mine + unknown + unknown, false],
    ['unknown key twice before the known one, another unknown between', unknown + unknown2 + unknown + mine, false],
    ['known key twice, the second invalid', mine + badMine, false],
    ['known key twice, the first invalid', badMine + mine, false],
    ['known key twice, identical', mine + mine, false],
    ['only unknown keys, repeated', unknown + unknown, false],
    ['100 lines, repeats counted', mine + unknown.repeat(99), false],
    ['101 lines, repeats counted', mine + unknown.repeat(100), false],
    ['101 lines, all identical', mine.repeat(101), false],
    ['two known keys, the second one invalid', mine + badOther, true],
    ['two known keys, both valid, each twice', mine + otherLine + mine + otherLine, true],
    ['two known keys, the first absent, the second valid then invalid', unknown + otherLine + badOther, true],
  ];
  for (const [what, lines, both] of cases) {
    const note = body + '\n' + lines;
    const vkeys = both ? [vkey, otherVkey] : [vkey];
    const keys = both ? [key, otherKey] : [key];
    const go = goOpen(vkeys, note);
    assert.is(ourOpen(keys, note), go, `${what}: Go says ${go}`);
    // With the authority's key alone, openCheckpoint / verifyNoteSignature accept exactly what Go's Open accepts.
    const goAlone = both ? goOpen([vkey], note) : go;
    let accepted: boolean;
    try {
      openCheckpoint(c, note, { publicKey: authority.publicKey, origin });
      accepted = true;
    } catch (e) {
      if (!isVouchError(e)) throw e;
      accepted = false;
    }
    assert.is(accepted, goAlone.startsWith('ok '), `${what}: openCheckpoint ${accepted}, Go ${goAlone}`);
    if (goAlone !== 'malformed') assert.is(verifyNoteSignature(c, parseNote(note), origin, authority.publicKey), goAlone.startsWith('ok '), what);
  }
  // The cases above are not vacuous: Go accepts some and refuses others of each kind.
  const outcomes = new Set(cases.map(([, lines, both]) => goOpen(both ? [vkey, otherVkey] : [vkey], body + '\n' + lines).split(' ')[0]));
  assert.equal([...outcomes].sort(), ['invalid', 'malformed', 'ok', 'unverified']);
});

test("key events: Go opens a rollover note with either key's verifier key, and the note by the key in force after a compromise with the one /v1/keys publishes", async () => {
  const life = buildKeyLifeChain(); // A -> B at 4, B compromised after 5 at 8 (C), root rotation at 10
  const logOrigin = 'vouch.example/go-keys';
  const vk = (s: typeof ONLINE.A) => verifierKey(c, logOrigin, SIG_ED25519, s.publicKey);
  const served = async (name: string, size: number, signers?: (typeof ONLINE.A)[]) => {
    const dir = join(work, name);
    await initKeyRepo(join(dir, 'chain'), life.blocks, size, logOrigin, signers);
    const gw = await startGatewayProcess([
      '--config',
      writeConfig(dir, { listen: { port: 0 }, chain: { dir: join(dir, 'chain'), public_key: keyB64(ONLINE.A) } }),
    ]);
    gateways.push(gw);
    const note = await (await fetch(`${gw.url}/checkpoint`)).text();
    const keys = (await (await fetch(`${gw.url}/v1/keys`)).json()) as { verifier_keys: string[]; checkpoint: string };
    assert.is(keys.checkpoint, note);
    return { note, published: keys.verifier_keys };
  };
  // The rollover after the rotation to B: both keys sign; a verifier pinned to either opens it.
  const rollover = await served('go-rollover', 6, [ONLINE.B, ONLINE.A]);
  assert.is(parseNote(rollover.note).signatures.length, 2);
  assert.equal(rollover.published, [vk(ONLINE.B), vk(ONLINE.A)]);
  for (const key of [vk(ONLINE.A), vk(ONLINE.B), rollover.published[0]!]) {
    const r = check({ vkey: key, note: rollover.note });
    assert.is(r.status, 0, r.out);
    assert.match(r.out, /^ok note vouch\.example\/go-keys size=6 .* sigs=1\n$/);
  }
  // After the compromise: C signs; Go opens the note with the verifier key /v1/keys publishes first, and not with A's or B's.
  const after = await served('go-after', 12);
  assert.is(after.published[0], vk(ONLINE.C));
  assert.not.ok(after.published.includes(vk(ONLINE.B)), 'a compromised key is not published');
  const ok = check({ vkey: after.published[0], note: after.note });
  assert.is(ok.status, 0, ok.out);
  for (const old of [vk(ONLINE.A), vk(ONLINE.B)]) {
    const r = check({ vkey: old, note: after.note });
    assert.is(r.status, 1, r.out);
    assert.match(r.out, /no verifiable signatures/);
  }
});

test.run();
