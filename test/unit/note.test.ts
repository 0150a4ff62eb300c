/**
 * chain/note.ts: C2SP signed notes, verifier keys, ed25519 note signatures
 * and tlog-cosignature/v1, against Go's golang.org/x/mod/sumdb/note test
 * vectors byte for byte, round trips with both crypto backends, and every
 * refusal.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { nobleBackend, nobleSigner } from '../../chain/backend-noble.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { base64Decode, base64Encode, hexEncode } from '../../chain/encoding.ts';
import type { CryptoBackend, Signer } from '../../chain/crypto-backend.ts';
import {
  cosign,
  formatNote,
  MAX_NOTE_SIGNATURES,
  noteKeyId,
  openNote,
  parseNote,
  parseVerifierKey,
  signNote,
  verifierKey,
  verifyCosignature,
  verifyNoteSignature,
  SIG_COSIGNATURE_V1,
  SIG_ED25519,
} from '../../chain/note.ts';
import { refuses } from '../helpers/refusal.ts';

// Vendored from golang.org/x/mod, sumdb/note/note_test.go (TestSign, TestOpen, TestNewVerifier), repository
// golang/mod at commit 02c991387e35f9e4c0a9b7ce137717055f8d716d (identical in v0.7.0, Debian golang-golang-x-mod-dev 0.7.0-1).
const PETER_SKEY = 'PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz';
const PETER_VKEY = 'PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW';
const ENOCH_VKEY = 'EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop';
const TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
const PETER_SIG = '— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n';
const ENOCH_SIG = '— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n';

const peterSeed = base64Decode(PETER_SKEY.split('+').slice(4).join('+'))!.slice(1);
const backends: [string, CryptoBackend, (seed: Uint8Array) => Signer][] = [
  ['node', nodeBackend, (seed) => nodeSigner('t', privateKeyFromSeed(seed))],
  ['noble', nobleBackend, (seed) => nobleSigner('t', seed)],
];

for (const [bname, c, mkSigner] of backends) {
  const peter = mkSigner(peterSeed);

  test(`${bname}: Go's PeterNeumann key gives Go's verifier key, key ID and signed note byte for byte`, () => {
    assert.is(verifierKey(c, 'PeterNeumann', SIG_ED25519, peter.publicKey), PETER_VKEY);
    assert.is(hexEncode(noteKeyId(c, 'PeterNeumann', SIG_ED25519, peter.publicKey)), 'c74f20a3');
    const sig = signNote(c, TEXT, 'PeterNeumann', peter);
    assert.is(sig.line + '\n', PETER_SIG);
    assert.is(formatNote({ text: TEXT, signatures: [sig] }), TEXT + '\n' + PETER_SIG);
  });

  test(`${bname}: Go's signed note opens; Enoch's signature is kept unverified and verifies with its own key`, () => {
    const n = parseNote(TEXT + '\n' + PETER_SIG + ENOCH_SIG);
    assert.is(n.text, TEXT);
    assert.equal(
      n.signatures.map((s) => s.name),
      ['PeterNeumann', 'EnochRoot'],
    );
    assert.is(formatNote(n), TEXT + '\n' + PETER_SIG + ENOCH_SIG);
    const p = parseVerifierKey(c, PETER_VKEY);
    const e = parseVerifierKey(c, ENOCH_VKEY);
    assert.is(p.type, SIG_ED25519);
    assert.ok(verifyNoteSignature(c, n, 'PeterNeumann', p.publicKey));
    assert.ok(verifyNoteSignature(c, n, 'EnochRoot', e.publicKey));
    // Wrong key, wrong name: no signature of that (name, key ID).
    assert.not.ok(verifyNoteSignature(c, n, 'PeterNeumann', e.publicKey));
    assert.not.ok(verifyNoteSignature(c, n, 'EnochRoot', p.publicKey));
    assert.not.ok(verifyNoteSignature(c, n, 'CarmenSandiego', p.publicKey));
    // Unsigned by a known key.
    assert.not.ok(verifyNoteSignature(c, parseNote(TEXT + '\n' + ENOCH_SIG), 'PeterNeumann', p.publicKey));
  });

  test(`${bname}: altered text, altered signature, wrong key ID do not verify`, () => {
    const p = parseVerifierKey(c, PETER_VKEY).publicKey;
    const altered = parseNote(TEXT.replace('answer', 'Answer') + '\n' + PETER_SIG);
    assert.not.ok(verifyNoteSignature(c, altered, 'PeterNeumann', p));
    // Go's "Invalid signature" case: four base64 characters inserted.
    const badSig = parseNote(TEXT + '\n' + PETER_SIG.slice(0, 60) + 'ABCD' + PETER_SIG.slice(60));
    assert.not.ok(verifyNoteSignature(c, badSig, 'PeterNeumann', p));
    // Go's wrong-hash case: key ID changed, so the line is not Peter's any more.
    const wrongId = parseNote(TEXT + '\n' + PETER_SIG.replace('x08g', 'xxxx'));
    assert.not.ok(verifyNoteSignature(c, wrongId, 'PeterNeumann', p));
  });

  test(`${bname}: sign -> format -> parse -> verify round trip, and a cosigner on top`, () => {
    const authority = mkSigner(new Uint8Array(32).fill(7));
    const witness = mkSigner(new Uint8Array(32).fill(9));
    const body = 'example.com/log\n3\n' + base64Encode(new Uint8Array(32).fill(1)) + '\n';
    const sig = signNote(c, body, 'example.com/log', authority);
    const cos = cosign(c, body, 'witness.example/w1', witness, 1_700_000_000);
    const text = formatNote({ text: body, signatures: [sig, cos] });
    const n = parseNote(text);
    assert.is(formatNote(n), text);
    assert.ok(verifyNoteSignature(c, n, 'example.com/log', authority.publicKey));
    assert.equal(verifyCosignature(c, n, 'witness.example/w1', witness.publicKey), { ok: true, timestamp: 1_700_000_000 });
    // A cosignature is no note signature and the reverse.
    assert.not.ok(verifyNoteSignature(c, n, 'witness.example/w1', witness.publicKey));
    assert.equal(verifyCosignature(c, n, 'example.com/log', authority.publicKey), { ok: false });
    // Same key, both types: key IDs differ by the type byte.
    assert.not.equal(noteKeyId(c, 'n', SIG_ED25519, witness.publicKey), noteKeyId(c, 'n', SIG_COSIGNATURE_V1, witness.publicKey));
    const both = parseNote(formatNote({ text: body, signatures: [signNote(c, body, 'n', witness)] }));
    assert.equal(verifyCosignature(c, both, 'n', witness.publicKey), { ok: false });
    // Wrong key for the witness.
    assert.equal(verifyCosignature(c, n, 'witness.example/w1', authority.publicKey), { ok: false });
    // Altered body: neither verifies.
    const altered = parseNote(text.replace('\n3\n', '\n4\n'));
    assert.not.ok(verifyNoteSignature(c, altered, 'example.com/log', authority.publicKey));
    assert.equal(verifyCosignature(c, altered, 'witness.example/w1', witness.publicKey), { ok: false });
  });

  test(`${bname}: cosignature timestamps: the signed message, a changed timestamp, bounds`, () => {
    const witness = mkSigner(new Uint8Array(32).fill(3));
    const body = 'example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n';
    const cos = cosign(c, body, 'w', witness, 1679315147);
    // The spec's example message (c2sp.org/tlog-cosignature "Ed25519 signed message").
    const msg = new TextEncoder().encode(
      'cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n',
    );
    assert.ok(c.verify(witness.publicKey, msg, cos.bytes.slice(8)));
    assert.is(hexEncode(cos.bytes.slice(0, 8)), '00000000641850cb');
    assert.is(cos.bytes.length, 72);
    // Re-stamp the same signature with another time: refused.
    const other = cos.bytes.slice();
    other[7]! ^= 1;
    const n = { text: body, signatures: [{ ...cos, bytes: other }] };
    assert.equal(verifyCosignature(c, n, 'w', witness.publicKey), { ok: false });
    // Timestamps beyond 2^53-1 are refused without verifying.
    const huge = cos.bytes.slice();
    huge.set([0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], 0);
    assert.equal(verifyCosignature(c, { text: body, signatures: [{ ...cos, bytes: huge }] }, 'w', witness.publicKey), { ok: false });
    // Two lines of one key (Go's Open): the first decides, the later ones are not read.
    assert.equal(verifyCosignature(c, { text: body, signatures: [cos, { ...cos, bytes: other }] }, 'w', witness.publicKey), {
      ok: true,
      timestamp: 1679315147,
    });
    assert.equal(verifyCosignature(c, { text: body, signatures: [{ ...cos, bytes: other }, cos] }, 'w', witness.publicKey), { ok: false });
    const ns = signNote(c, body, 'w', witness);
    const nsBad = { ...ns, bytes: ns.bytes.map((b, i) => (i === 0 ? b ^ 1 : b)) };
    assert.ok(verifyNoteSignature(c, { text: body, signatures: [ns] }, 'w', witness.publicKey));
    assert.ok(verifyNoteSignature(c, { text: body, signatures: [ns, nsBad] }, 'w', witness.publicKey));
    assert.not.ok(verifyNoteSignature(c, { text: body, signatures: [nsBad, ns] }, 'w', witness.publicKey));
    refuses(() => cosign(c, body, 'w', witness, -1), 'bad_request');
    refuses(() => cosign(c, body, 'w', witness, 1.5), 'bad_request');
    refuses(() => cosign(c, body, 'w', witness, 2 ** 53), 'bad_request');
    assert.equal(verifyCosignature(c, parseNote(formatNote({ text: body, signatures: [cosign(c, body, 'w', witness, 0)] })), 'w', witness.publicKey), {
      ok: true,
      timestamp: 0,
    });
  });
}

test("parseNote: Go's malformed notes are refused", () => {
  const bad = [
    TEXT,
    TEXT + '\n',
    TEXT + '\n' + PETER_SIG.slice(0, -1), // missing final newline
    '\x01' + TEXT + '\n' + PETER_SIG, // control character
    '\ud800' + TEXT + '\n' + PETER_SIG, // not UTF-8 (Go: "\xff")
    TEXT + '\n' + '— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=',
    TEXT + '\n' + PETER_SIG + 'Unexpected line.\n',
    TEXT + '\n' + PETER_SIG.repeat(MAX_NOTE_SIGNATURES + 1), // too many
  ];
  for (const m of bad) refuses(() => parseNote(m), 'malformed');
});

test('parseNote: every other refusal', () => {
  const sigB64 = PETER_SIG.slice('— PeterNeumann '.length, -1);
  const cases: [string, RegExp][] = [
    [TEXT + '\n' + '— PeterNeumann ' + sigB64.slice(0, -1) + '\n', /base64/], // bad padding
    [TEXT + '\n' + '— PeterNeumann ' + sigB64.replace('/', '_') + '\n', /base64/], // URL alphabet
    [TEXT + '\n' + '— PeterNeumann\n', /base64/],
    [TEXT + '\n' + '— PeterNeumann AAAAAA==\n', /shorter/],
    [TEXT + '\n' + '— a+b ' + sigB64 + '\n', /bad key name/],
    [TEXT + '\n' + '—  ' + sigB64 + '\n', /bad key name/],
    [TEXT + '\n' + '— a\u00a0b ' + sigB64 + '\n', /bad key name/],
    [TEXT + '\n' + '- PeterNeumann ' + sigB64 + '\n', /does not start/],
    [TEXT + '\n' + PETER_SIG.replace('\n', '\r\n'), /control character/],
    [TEXT.replace('\n', '\t\n') + '\n' + PETER_SIG, /control character 0x09/],
    ['x'.repeat((1 << 20) + 1) + '\n\n' + PETER_SIG, /longer/],
  ];
  for (const [m, why] of cases) refuses(() => parseNote(m), 'malformed', why);
  // Repeated lines are kept as they came (openNote decides what they mean), so the note round-trips.
  const twice = TEXT + '\n' + PETER_SIG + PETER_SIG;
  assert.is(parseNote(twice).signatures.length, 2);
  assert.is(formatNote(parseNote(twice)), twice);
  // 100 distinct signatures are fine (Go's limit), empty lines inside the text too.
  const many = Array.from({ length: MAX_NOTE_SIGNATURES }, (_, i) => `— k${i} ${sigB64}\n`).join('');
  assert.is(parseNote('a\n\nb\n\n' + many).signatures.length, 100);
  assert.is(parseNote('a\n\nb\n\n' + many).text, 'a\n\nb\n');
});

test("parseVerifierKey: Go's manglings and wrong types are refused with bad_request", () => {
  const c = nobleBackend;
  // Every proper substring and every single-byte change of the key (Go's TestNewVerifier).
  for (let i = 0; i <= PETER_VKEY.length; i++) {
    for (let j = i + 1; j <= PETER_VKEY.length; j++) {
      if (i === 0 && j === PETER_VKEY.length) continue;
      refuses(() => parseVerifierKey(c, PETER_VKEY.slice(i, j)), 'bad_request');
    }
  }
  for (let i = 0; i < PETER_VKEY.length; i++) {
    const k = PETER_VKEY.slice(0, i) + String.fromCharCode(PETER_VKEY.charCodeAt(i) + 1) + PETER_VKEY.slice(i + 1);
    if (k.toLowerCase() === PETER_VKEY.toLowerCase()) continue; // upper-case hex digits are the same key ID
    refuses(() => parseVerifierKey(c, k), 'bad_request');
  }
  refuses(() => parseVerifierKey(c, 'PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY=='), 'bad_request');
  refuses(() => parseVerifierKey(c, 'PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW'), 'bad_request', /type 0x65/);
  // Key of type 0x04 (transparency-dev/formats note/note_cosigv1_test.go, commit 091ce41666c09683aa9350785e572be27f0c026d).
  const w = parseVerifierKey(c, 'remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2');
  assert.is(w.type, SIG_COSIGNATURE_V1);
  assert.is(verifierKey(c, w.name, SIG_COSIGNATURE_V1, w.publicKey), 'remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2');
  // A plus in the base64 part (same file).
  assert.is(parseVerifierKey(c, 'TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6').name, 'TEST');
  refuses(() => verifierKey(c, 'a b', SIG_ED25519, w.publicKey), 'bad_request');
  refuses(() => verifierKey(c, 'ab', SIG_ED25519, w.publicKey.slice(1)), 'bad_request');
});

test('signNote refuses a text without final newline, with control characters, and a bad name', () => {
  const s = nobleSigner('t', peterSeed);
  refuses(() => signNote(nobleBackend, 'abc', 'PeterNeumann', s), 'malformed');
  refuses(() => signNote(nobleBackend, 'a\rb\n', 'PeterNeumann', s), 'malformed');
  refuses(() => signNote(nobleBackend, TEXT, 'a+b', s), 'bad_request');
  refuses(() => signNote(nobleBackend, TEXT, '', s), 'bad_request');
});

test("openNote is Go's note.Open: unknown keys ignored (repeats once), a known key's first line decides, at most 100 lines", () => {
  const c = nodeBackend;
  const peter = parseVerifierKey(c, PETER_VKEY);
  const enoch = parseVerifierKey(c, ENOCH_VKEY);
  const P = { name: 'PeterNeumann', publicKey: peter.publicKey };
  const E = { name: 'EnochRoot', publicKey: enoch.publicKey };
  const badPeter = PETER_SIG.replace('x08go/ZJ', 'x08go/ZK');
  // An unknown key's line, twice: ignored, kept once.
  const r1 = openNote(c, TEXT + '\n' + PETER_SIG + ENOCH_SIG + ENOCH_SIG, [P]);
  assert.ok(r1.ok);
  if (r1.ok) {
    assert.equal(
      r1.verified.map((s) => s.name),
      ['PeterNeumann'],
    );
    assert.equal(
      r1.unverified.map((s) => s.name),
      ['EnochRoot'],
    );
  }
  // A known key twice: the first verifies, the second (invalid) is dropped unread; the reverse refuses.
  assert.ok(openNote(c, TEXT + '\n' + PETER_SIG + badPeter, [P]).ok);
  const r2 = openNote(c, TEXT + '\n' + badPeter + PETER_SIG, [P]);
  assert.ok(!r2.ok && r2.why === 'invalid');
  // An invalid line of a known key refuses the note even when another known key verified.
  const r3 = openNote(c, TEXT + '\n' + PETER_SIG + ENOCH_SIG.replace('rwz+eBzm', 'rwz+eBzn'), [P, E]);
  assert.ok(!r3.ok && r3.why === 'invalid');
  // No known key: unverified.
  const r4 = openNote(c, TEXT + '\n' + ENOCH_SIG, [P]);
  assert.ok(!r4.ok && r4.why === 'unverified');
  // 100 lines (repeats counted) are fine, 101 malformed.
  assert.ok(openNote(c, TEXT + '\n' + PETER_SIG + ENOCH_SIG.repeat(99), [P]).ok);
  refuses(() => openNote(c, TEXT + '\n' + PETER_SIG + ENOCH_SIG.repeat(100), [P]), 'malformed');
});

test.run();
