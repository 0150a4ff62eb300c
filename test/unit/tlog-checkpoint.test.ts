/**
 * chain/tlog-checkpoint.ts: the C2SP checkpoint body (spec example byte for
 * byte), every body refusal, signCheckpoint -> openCheckpoint round trips on
 * both backends, and openCheckpoint's refusals (malformed vs
 * checkpoint_mismatch).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { nobleBackend, nobleSigner } from '../../chain/backend-noble.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { base64Encode, hexEncode } from '../../chain/encoding.ts';
import type { CryptoBackend, Signer } from '../../chain/crypto-backend.ts';
import { cosign, formatNote, noteKeyId, parseNote, SIG_ED25519, signNote, verifierKey, verifyCosignature } from '../../chain/note.ts';
import { formatCheckpoint, openCheckpoint, parseCheckpoint, signCheckpoint, type Checkpoint } from '../../chain/tlog-checkpoint.ts';
import { refuses } from '../helpers/refusal.ts';

// c2sp.org/tlog-checkpoint, the example at the top (repository C2SP/C2SP, tlog-checkpoint.md, commit 2793893976c835db049c194d8f2c4f946dcb70ba).
const SPEC_BODY = 'example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n';
const SPEC_NOTE = SPEC_BODY + '\n— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n';

test('the spec example: body parses and formats back byte for byte; the note parses', () => {
  const cp = parseCheckpoint(SPEC_BODY);
  assert.is(cp.origin, 'example.com/behind-the-sofa');
  assert.is(cp.size, 20852163);
  assert.is(hexEncode(cp.root), '0ac5186a91863e8e1d90c808014aa89bf5da8e3ee1d9f07630f0378f68f1ab62');
  assert.equal(cp.extensions, []);
  assert.is(formatCheckpoint(cp), SPEC_BODY);
  const n = parseNote(SPEC_NOTE);
  assert.is(n.text, SPEC_BODY);
  assert.is(formatNote(n), SPEC_NOTE);
  assert.is(hexEncode(n.signatures[0]!.keyId), '033de0ae');
  // Signed by a key we do not have: a checkpoint_mismatch for any other authority key.
  refuses(() => openCheckpoint(nobleBackend, SPEC_NOTE, { publicKey: new Uint8Array(32).fill(1) }), 'checkpoint_mismatch', /no signature by the authority key/);
});

test('bodies: extension lines, size 0, and every refusal', () => {
  const root = base64Encode(new Uint8Array(32));
  assert.equal(parseCheckpoint(`o\n0\n${root}\next one\next two\n`).extensions, ['ext one', 'ext two']);
  assert.is(parseCheckpoint(`o\n9007199254740991\n${root}\n`).size, 2 ** 53 - 1);
  const bad: [string, RegExp][] = [
    [`o\n1\n${root}`, /newline/],
    [`o\n1\n`, /lines/],
    [`\n1\n${root}\n`, /origin line is empty/],
    [`o\n01\n${root}\n`, /leading zeros/],
    [`o\n00\n${root}\n`, /leading zeros/],
    [`o\n+1\n${root}\n`, /leading zeros/],
    [`o\n-1\n${root}\n`, /leading zeros/],
    [`o\n1.0\n${root}\n`, /leading zeros/],
    [`o\n 1\n${root}\n`, /leading zeros/],
    [`o\n\n${root}\n`, /leading zeros/],
    [`o\n9007199254740992\n${root}\n`, /2\^53/],
    [`o\n1\n${root.slice(0, -1)}\n`, /base64/],
    [`o\n1\n${root.replace('A', '-')}\n`, /base64/],
    [`o\n1\n${base64Encode(new Uint8Array(31))}\n`, /31 bytes/],
    [`o\n1\n${base64Encode(new Uint8Array(33))}\n`, /33 bytes/],
    [`o\n1\n${root}\n\n`, /empty extension/],
    [`o\n1\n${root}\nx\n\ny\n`, /empty extension/],
    [`o\r\n1\n${root}\n`, /control/],
  ];
  for (const [b, why] of bad) refuses(() => parseCheckpoint(b), 'malformed', why);
  const good: Checkpoint = { origin: 'o', size: 1, root: new Uint8Array(32), extensions: [] };
  refuses(() => formatCheckpoint({ ...good, origin: '' }), 'bad_request');
  refuses(() => formatCheckpoint({ ...good, origin: 'a\nb' }), 'bad_request');
  refuses(() => formatCheckpoint({ ...good, size: -1 }), 'bad_request');
  refuses(() => formatCheckpoint({ ...good, size: 1.5 }), 'bad_request');
  refuses(() => formatCheckpoint({ ...good, root: new Uint8Array(31) }), 'bad_request');
  refuses(() => formatCheckpoint({ ...good, extensions: [''] }), 'bad_request');
});

const backends: [string, CryptoBackend, (seed: Uint8Array) => Signer][] = [
  ['node', nodeBackend, (seed) => nodeSigner('t', privateKeyFromSeed(seed))],
  ['noble', nobleBackend, (seed) => nobleSigner('t', seed)],
];

for (const [bname, c, mkSigner] of backends) {
  const authority = mkSigner(new Uint8Array(32).fill(5));
  const other = mkSigner(new Uint8Array(32).fill(6));
  const cp: Checkpoint = { origin: '127.0.0.1:8080', size: 42, root: new Uint8Array(32).map((_, i) => i), extensions: [] };

  test(`${bname}: signCheckpoint -> openCheckpoint; the note has the contract's exact shape`, () => {
    const note = signCheckpoint(c, cp, authority);
    const keyId = noteKeyId(c, cp.origin, SIG_ED25519, authority.publicKey);
    const lines = note.split('\n');
    assert.is(lines.slice(0, 4).join('\n'), `127.0.0.1:8080\n42\n${base64Encode(cp.root)}\n`);
    assert.match(lines[4]!, new RegExp(`^— 127\\.0\\.0\\.1:8080 ${base64Encode(keyId).slice(0, 4).replace(/[+/]/g, '\\$&')}`));
    assert.is(lines.length, 6);
    const opened = openCheckpoint(c, note, { publicKey: authority.publicKey, origin: '127.0.0.1:8080' });
    assert.equal(opened.checkpoint, cp);
    assert.is(opened.note.text, formatCheckpoint(cp));
    assert.is(
      verifierKey(c, cp.origin, SIG_ED25519, authority.publicKey),
      `127.0.0.1:8080+${hexEncode(keyId)}+${base64Encode(Uint8Array.of(1, ...authority.publicKey))}`,
    );
    // Without an expected origin, the note's own origin names the key.
    assert.equal(openCheckpoint(c, note, { publicKey: authority.publicKey }).checkpoint.size, 42);
  });

  test(`${bname}: openCheckpoint refusals`, () => {
    const note = signCheckpoint(c, cp, authority);
    refuses(() => openCheckpoint(c, note, { publicKey: other.publicKey }), 'checkpoint_mismatch', /no signature by the authority key 127\.0\.0\.1:8080\+/);
    refuses(() => openCheckpoint(c, note, { publicKey: authority.publicKey, origin: 'elsewhere' }), 'checkpoint_mismatch', /origin/);
    // Altered size: the signature no longer verifies.
    refuses(() => openCheckpoint(c, note.replace('\n42\n', '\n43\n'), { publicKey: authority.publicKey }), 'checkpoint_mismatch', /does not verify/);
    // Signed under another name (origin changed in the body only).
    const renamed = signCheckpoint(c, { ...cp, origin: 'other.example' }, authority).replace(/^other\.example\n/, '127.0.0.1:8080\n');
    refuses(() => openCheckpoint(c, renamed, { publicKey: authority.publicKey }), 'checkpoint_mismatch');
    // A witness cosignature only, by the authority key: not an authority signature.
    const body = formatCheckpoint(cp);
    const cosigned = formatNote({ text: body, signatures: [cosign(c, body, cp.origin, authority, 1)] });
    refuses(() => openCheckpoint(c, cosigned, { publicKey: authority.publicKey }), 'checkpoint_mismatch');
    // Malformed note / body.
    refuses(() => openCheckpoint(c, note.slice(0, -1), { publicKey: authority.publicKey }), 'malformed');
    refuses(() => openCheckpoint(c, note.replace('\n42\n', '\n042\n'), { publicKey: authority.publicKey }), 'malformed');
    const noRoot = formatNote({ text: '127.0.0.1:8080\n42\n', signatures: [signNote(c, '127.0.0.1:8080\n42\n', cp.origin, authority)] });
    refuses(() => openCheckpoint(c, noRoot, { publicKey: authority.publicKey }), 'malformed');
    refuses(() => signCheckpoint(c, { ...cp, origin: 'has space' }, authority), 'bad_request');
    refuses(() => signCheckpoint(c, { ...cp, origin: 'a+b' }, authority), 'bad_request');
  });

  test(`${bname}: witness cosignatures added to a signed checkpoint keep it open and verify`, () => {
    const note = signCheckpoint(c, cp, authority);
    const body = formatCheckpoint(cp);
    const withWitness = note + cosign(c, body, 'witness.example/w', other, 1_700_000_000).line + '\n';
    const opened = openCheckpoint(c, withWitness, { publicKey: authority.publicKey, origin: cp.origin });
    assert.is(opened.note.signatures.length, 2);
    assert.equal(verifyCosignature(c, opened.note, 'witness.example/w', other.publicKey), { ok: true, timestamp: 1_700_000_000 });
  });
}

test.run();
