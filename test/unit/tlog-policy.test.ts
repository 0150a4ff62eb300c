/**
 * chain/tlog-policy.ts: the c2sp.org/tlog-policy example (two levels of
 * groups) with real keys, quorum counting only cosignatures that verify,
 * and every refusal of the parser (unknown witness, forward references /
 * cycles, threshold > members, duplicates, `none`, character set).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { nobleBackend, nobleSigner } from '../../chain/backend-noble.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { VouchError } from '../../chain/errors.ts';
import { cosign, formatNote, parseNote, SIG_COSIGNATURE_V1, SIG_ED25519, signNote, verifierKey, type NoteSignature } from '../../chain/note.ts';
import { formatCheckpoint, signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { checkQuorum, parsePolicy, policyLogFor } from '../../chain/tlog-policy.ts';

const c = nodeBackend;
const seed = (n: number) => new Uint8Array(32).fill(n);
const log = nobleSigner('log', seed(1));
const LOG_VKEY = verifierKey(c, 'example.com/log', SIG_ED25519, log.publicKey);
const names = ['X1', 'X2', 'X3', 'Y1', 'Y2', 'Y3'];
const witnesses = new Map(names.map((n, i) => [n, nobleSigner(n, seed(10 + i))]));
const wkey = (n: string) => verifierKey(c, `witness.example/${n}`, SIG_COSIGNATURE_V1, witnesses.get(n)!.publicKey);

// The example of c2sp.org/tlog-policy ("Example policy"; repository C2SP/C2SP, tlog-policy.md,
// commit bdd4bab63b57172f6d47c46e00421a3ba0f98425) with its elided <vkey>s filled in.
const EXAMPLE = `log ${LOG_VKEY}

witness X1 ${wkey('X1')}
witness X2 ${wkey('X2')}
witness X3 ${wkey('X3')}
group X-witnesses 2 X1 X2 X3

witness Y1 ${wkey('Y1')}
witness Y2 ${wkey('Y2')}
witness Y3 ${wkey('Y3')}
group Y-witnesses any Y1 Y2 Y3

group X-and-Y all X-witnesses Y-witnesses
quorum X-and-Y
`;

const cp = { origin: 'example.com/log', size: 10, root: new Uint8Array(32).fill(2), extensions: [] };
const body = formatCheckpoint(cp);
const signedBy = (who: string[], extra: NoteSignature[] = []) => {
  const base = parseNote(signCheckpoint(c, cp, log));
  const cos = who.map((n) => cosign(c, body, `witness.example/${n}`, witnesses.get(n)!, 1_700_000_000));
  return parseNote(formatNote({ text: body, signatures: [...base.signatures, ...cos, ...extra] }));
};

function refuses(text: string, pattern: RegExp): void {
  try {
    parsePolicy(c, text);
  } catch (e) {
    assert.instance(e, VouchError);
    assert.is((e as VouchError).code, 'bad_request');
    assert.match((e as Error).message, pattern);
    return;
  }
  assert.unreachable(`policy accepted, expected ${pattern}:\n${text}`);
}

test('the spec example parses: one log, six witnesses, three groups, quorum X-and-Y', () => {
  const p = parsePolicy(c, EXAMPLE);
  assert.is(p.logs.length, 1);
  assert.is(p.logs[0]!.name, 'example.com/log');
  assert.equal([...p.witnesses.keys()], names);
  assert.is(p.witnesses.get('X2')!.keyName, 'witness.example/X2');
  assert.equal(p.groups.get('X-witnesses'), { name: 'X-witnesses', threshold: 2, members: ['X1', 'X2', 'X3'] });
  assert.is(p.groups.get('Y-witnesses')!.threshold, 1);
  assert.is(p.groups.get('X-and-Y')!.threshold, 2);
  assert.is(p.quorum, 'X-and-Y');
});

test('quorum of the spec example: 2 of X and 1 of Y, counting only cosignatures that verify', () => {
  for (const backend of [nodeBackend, nobleBackend]) {
    const p = parsePolicy(backend, EXAMPLE);
    const ok = checkQuorum(backend, p, signedBy(['X1', 'X3', 'Y2']));
    assert.equal(ok, { ok: true, signed: ['X1', 'X3', 'Y2'] });
    assert.is(policyLogFor(backend, p, signedBy([]))?.name, 'example.com/log');
    const onlyX = checkQuorum(backend, p, signedBy(['X1', 'X2', 'X3']));
    assert.is(onlyX.ok, false);
    assert.match(onlyX.why!, /X-and-Y needs 2 of 2/);
    assert.is(checkQuorum(backend, p, signedBy(['X1', 'Y1', 'Y2', 'Y3'])).ok, false);
  }
  const p = parsePolicy(c, EXAMPLE);
  // A cosignature that does not verify does not count: X3's line re-signed by another key under X3's name and key ID.
  const forged = cosign(c, body, 'witness.example/X3', nobleSigner('z', seed(99)), 1_700_000_000);
  const x3 = cosign(c, body, 'witness.example/X3', witnesses.get('X3')!, 1);
  const bad = { ...forged, keyId: x3.keyId };
  const r = checkQuorum(c, p, signedBy(['X1', 'Y1'], [bad]));
  assert.equal(r.signed, ['X1', 'Y1']);
  assert.is(r.ok, false);
  // A cosignature over another checkpoint (altered body) does not count.
  const other = cosign(c, formatCheckpoint({ ...cp, size: 11 }), 'witness.example/X3', witnesses.get('X3')!, 1);
  assert.is(checkQuorum(c, p, signedBy(['X1', 'Y1'], [other])).ok, false);
  // An ed25519 note signature (type 0x01) by a witness key is no cosignature.
  const plain = ['X1', 'X2', 'Y1'].map((w) => signNote(c, body, `witness.example/${w}`, witnesses.get(w)!));
  assert.equal(checkQuorum(c, p, signedBy([], plain)), { ok: false, signed: [], why: checkQuorum(c, p, signedBy([])).why });
  // Unknown witnesses' cosignatures are ignored.
  const stranger = cosign(c, body, 'witness.example/stranger', nobleSigner('s', seed(77)), 1);
  assert.equal(checkQuorum(c, p, signedBy(['X1', 'X2', 'Y3'], [stranger])), { ok: true, signed: ['X1', 'X2', 'Y3'] });
});

test('quorum forms: a single witness, none, any, all, numeric', () => {
  const head = `log ${LOG_VKEY}\n` + names.map((n) => `witness ${n} ${wkey(n)}`).join('\n') + '\n';
  const single = parsePolicy(c, head + 'quorum Y3\n');
  assert.is(checkQuorum(c, single, signedBy(['Y3'])).ok, true);
  const miss = checkQuorum(c, single, signedBy(['Y2']));
  assert.equal(miss, { ok: false, signed: ['Y2'], why: 'witness Y3 did not cosign' });
  const none = parsePolicy(c, `# no witnesses\nlog ${LOG_VKEY}\nquorum none\n`);
  assert.is(none.quorum, null);
  assert.equal(checkQuorum(c, none, signedBy([])), { ok: true, signed: [] });
  const all = parsePolicy(c, head + 'group g all X1 X2 X3\nquorum g\n');
  assert.is(checkQuorum(c, all, signedBy(['X1', 'X2'])).ok, false);
  assert.is(checkQuorum(c, all, signedBy(['X1', 'X2', 'X3'])).ok, true);
  const three = parsePolicy(c, head + 'group g 3 X1 X2 X3 Y1 Y2\nquorum g\n');
  assert.is(checkQuorum(c, three, signedBy(['X1', 'Y2'])).ok, false);
  assert.is(checkQuorum(c, three, signedBy(['X1', 'Y2', 'X3'])).ok, true);
  // Whitespace: tabs, leading/trailing blanks, indented comments, URLs.
  const ws = parsePolicy(c, `  log\t${LOG_VKEY}   https://log.example/  \n\t# comment\nwitness\tX1 ${wkey('X1')} https://w.example/\nquorum   X1\t\n`);
  assert.is(ws.logs[0]!.url, 'https://log.example/');
  assert.is(ws.witnesses.get('X1')!.url, 'https://w.example/');
});

test('policy refusals name the line', () => {
  const w = (n: string) => `witness ${n} ${wkey(n)}\n`;
  refuses(`log ${LOG_VKEY}\n`, /no quorum line/);
  refuses(w('X1') + 'quorum X2\n', /line 2: quorum "X2" is not a witness or group defined above/); // unknown witness
  refuses(w('X1') + 'group g any X1 X9\nquorum g\n', /line 2: member "X9"/);
  refuses(w('X1') + 'group g any g\nquorum g\n', /lists itself/); // cycle of one
  refuses(w('X1') + 'group a any X1 b\ngroup b any X1 a\nquorum a\n', /line 2: member "b"/); // cycle of two: forward reference
  refuses(w('X1') + 'quorum g\ngroup g any X1\n', /line 2: quorum "g"/); // quorum before its group
  refuses(w('X1') + w('X2') + 'group g 3 X1 X2\nquorum g\n', /threshold 3 is more than the 2 members/);
  refuses(w('X1') + 'group g 0 X1\nquorum g\n', /threshold "0"/);
  refuses(w('X1') + 'group g 01 X1\nquorum g\n', /threshold "01"/);
  refuses(w('X1') + 'group g some X1\nquorum g\n', /threshold "some"/);
  refuses(w('X1') + 'group g any\nquorum g\n', /expected "group/);
  refuses(w('X1') + 'group g any X1 X1\nquorum g\n', /listed twice/);
  refuses(w('X1') + 'group g any none\nquorum g\n', /"none" cannot be a group member/);
  refuses(w('X1') + 'quorum X1\nquorum X1\n', /second quorum/);
  refuses(w('X1') + w('X1') + 'quorum X1\n', /already defined/);
  refuses(w('X1') + `witness none ${wkey('X2')}\nquorum X1\n`, /reserved/);
  refuses(w('X1') + `witness X2 ${wkey('X1')}\nquorum X1\n`, /duplicate witness key/);
  refuses(`log ${LOG_VKEY}\nlog ${verifierKey(c, 'other.example', SIG_ED25519, log.publicKey)}\nquorum none\n`, /duplicate log key/);
  refuses(`witness X1 ${LOG_VKEY}\nquorum X1\n`, /type 0x04/); // a log key (0x01) as witness
  refuses(`log ${wkey('X1')}\nquorum none\n`, /type 0x01/); // a witness key (0x04) as log
  refuses(`log ${LOG_VKEY.replace(/\+[0-9a-f]{8}\+/, '+00000000+')}\nquorum none\n`, /key ID does not match/);
  refuses(`witness X1\nquorum none\n`, /expected "witness/);
  refuses(`frobnicate x\nquorum none\n`, /unknown keyword "frobnicate"/);
  refuses(`quorum none\r\n`, /control character 0x0d/);
  refuses(`quorum none\n\x00\n`, /line 2: control character 0x00/);
});

test.run();
