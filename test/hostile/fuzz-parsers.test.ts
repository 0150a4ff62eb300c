/**
 * Property-based fuzzing (fast-check, fixed seed, bounded runs) of the
 * parsers of untrusted input: block files, checkpoints, the selection query
 * and submit bodies. Whatever the input, a parser either accepts it or throws
 * the documented VouchError — never another exception, never a hang; and
 * verification of a mutated chain never accepts it. A client's walk of a
 * `/v1/keys` answer (chain/key-walk.ts) refuses any mutation it cannot
 * tell apart from the honest answer with a KeyWalkError, and otherwise ends
 * in the honest key state.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { parseBlock, parseBlockText, parseCheckpoint, verifyChain, canonicalize, VouchError } from '../../chain/index.ts';
import { formatBlockFile, isDate, isDateTime, isHex64, parseBlockFile, readJson } from '../../chain/block.ts';
import { parsedPayloadJcs, recordJcsAround } from '../../chain/build.ts';
import { parseSelectionQuery, parseJsonBody, acceptsJson } from '../../gateway/http/http-util.ts';
import { parseRevokeRequest, parseSubmitBody, parseSubmitRequest } from '../../gateway/routes/submit-request.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { buildFeatureChain } from '../helpers/chain-fixture.ts';
import { KeyWalkError, parseKeysAnswer, parseTrail, startTrail, walkKeyEvents } from '../../chain/key-walk.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { base64Encode, hexDecode } from '../../chain/encoding.ts';
import { b64, buildKeyLifeChain, ONLINE } from '../helpers/key-fixture.ts';

const SEED = 20261122;
const RUNS = 400;
const { blocks, checkpoint } = buildFeatureChain();

function onlyCoded(fn: () => unknown, codes: string[]): void {
  try {
    fn();
  } catch (e) {
    if (!(e instanceof VouchError)) throw new Error(`threw a ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`);
    if (!codes.includes(e.code)) throw new Error(`threw ${e.code}, expected one of ${codes}`);
  }
}

/** Arbitrary JSON-ish values, including the awkward ones. */
const jsonValue = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.string(),
    fc.string({ unit: 'binary' }),
    fc.integer(),
    fc.double(),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(fc.oneof(fc.string(), fc.constantFrom('__proto__', 'constructor', 'payload', 'index')), tie('value'), { maxKeys: 5 }),
  ),
})).value;

test('parseBlock: arbitrary values are accepted or refused as malformed, never crash', () => {
  fc.assert(
    fc.property(jsonValue, fc.nat(3), (v, pos) => {
      onlyCoded(() => parseBlock(v, pos), ['malformed']);
    }),
    { seed: SEED, numRuns: RUNS },
  );
});

test('parseBlockText: arbitrary text (and truncations of real block files) never crash', () => {
  const real = JSON.stringify(blocks[2], null, 2);
  fc.assert(
    fc.property(
      fc.oneof(
        fc.string(),
        fc.string({ unit: 'binary' }),
        fc.nat(real.length).map((n) => real.slice(0, n)),
      ),
      (t) => {
        onlyCoded(() => parseBlockText(t, 2), ['malformed']);
      },
    ),
    { seed: SEED, numRuns: RUNS },
  );
});

test('a real block with one member replaced by an arbitrary value never verifies', () => {
  const paths: string[][] = [];
  const walk = (o: any, p: string[]) => {
    for (const [k, v] of Object.entries(o)) {
      paths.push([...p, k]);
      if (v && typeof v === 'object') walk(v, [...p, k]);
    }
  };
  walk(blocks[2], []);
  fc.assert(
    fc.property(fc.constantFrom(...paths), jsonValue, (path, value) => {
      const chain = structuredClone(blocks) as any[];
      let o = chain[2];
      for (const k of path.slice(0, -1)) o = o[k];
      const last = path[path.length - 1]!;
      const before = canonicalSafe(o[last]);
      o[last] = value;
      if (canonicalSafe(o[last]) === before) return; // not a change
      const r = verifyChain(chain, { backend: nodeBackend, checkpoint });
      assert.is(r.ok, false, `accepted ${path.join('.')} = ${JSON.stringify(value)}`);
    }),
    { seed: SEED, numRuns: RUNS },
  );
});

test("parsedPayloadJcs (the verifier's schema-driven JCS) equals canonicalize on every payload parseBlock accepts", () => {
  for (const b of blocks) assert.is(parsedPayloadJcs(parseBlock(b, b.index).payload), canonicalize(b.payload));
  let accepted = 0;
  // Member names JCS orders differently from insertion and from V8's own order (integer-like names first).
  const tagName = fc.oneof(
    fc.string({ minLength: 1, maxLength: 6 }),
    fc.constantFrom('10', '9', '0', '__proto__', 'Z', 'a', '\u00e9', '\ud83d\ude00', '\uffff'),
  );
  const text = fc.oneof(
    fc.string({ maxLength: 12 }),
    fc.string({ unit: 'binary', maxLength: 12 }),
    fc.constantFrom('"', '\\', '\u2028', '</script>', '\u0000'),
  );
  const url = fc.tuple(fc.constantFrom('https://a.example/', 'http://b.example:8080/x/'), text).map(([u, t]) => u + t);
  fc.assert(
    fc.property(fc.dictionary(tagName, fc.boolean(), { maxKeys: 6 }), text, text, text, url, (tags, comment, entryComment, vc, artifactUrl) => {
      const b = structuredClone(blocks[2]) as any;
      b.payload.tags = tags;
      b.payload.endorsements[0].artifact_url = artifactUrl;
      b.payload.endorsements[0].artifact_hash = `sha256:"${comment}`;
      b.signature = `x"\\${entryComment}`;
      b.comment = comment;
      b.payload.endorsements[0].comment = entryComment;
      b.payload.vibecode.license = vc;
      let parsed;
      try {
        parsed = parseBlock(b, 2);
      } catch {
        return;
      }
      accepted++;
      assert.is(parsedPayloadJcs(parsed.payload), canonicalize(b.payload));
      const { record_hash: _r, ...unhashed } = b;
      const [before, after] = recordJcsAround(parsed);
      assert.is(before + parsedPayloadJcs(parsed.payload) + after, canonicalize(unhashed));
    }),
    { seed: SEED, numRuns: RUNS },
  );
  assert.ok(accepted > RUNS / 4, `only ${accepted} generated blocks parsed: the property says little`);
});

test('the hand-written date, time and hex checks agree with their regular-expression definitions', () => {
  // Days in the month from the platform's calendar (setUTCFullYear: Date.UTC maps years 0-99 to 19xx).
  const daysIn = (y: number, m: number) => {
    const t = new Date(0);
    t.setUTCFullYear(y, m, 0);
    return t.getUTCDate();
  };
  const realDate = (y: number, m: number, d: number) => m >= 1 && m <= 12 && d >= 1 && d <= daysIn(y, m);
  const refDate = (s: string) => {
    const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
    return !!m && realDate(+m[1]!, +m[2]!, +m[3]!);
  };
  const refTime = (s: string) => {
    const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z$/.exec(s);
    return !!m && realDate(+m[1]!, +m[2]!, +m[3]!) && +m[4]! < 24 && +m[5]! < 60 && +m[6]! < 60;
  };
  const digit = fc.constantFrom('0', '1', '2', '3', '5', '9', 'a', '/', ':', '-', ' ');
  const two = fc.tuple(digit, digit).map((a) => a.join(''));
  const year = fc.oneof(
    fc.constantFrom('2000', '1900', '2024', '2023', '0000', '9999', '2026'),
    fc.tuple(digit, digit, digit, digit).map((a) => a.join('')),
  );
  const month = fc.oneof(fc.constantFrom('01', '02', '12', '13', '00'), two);
  const day = fc.oneof(fc.constantFrom('01', '28', '29', '30', '31', '00', '32'), two);
  const hms = fc.oneof(fc.constantFrom('00', '23', '24', '59', '60'), two);
  const sepd = fc.constantFrom('-', '-', '-', '/', '');
  const date = fc.tuple(year, sepd, month, sepd, day).map((a) => a.join(''));
  const time = fc
    .tuple(
      date,
      fc.constantFrom('T', 'T', 't', ' '),
      hms,
      fc.constantFrom(':', ':', '-'),
      hms,
      fc.constantFrom(':', ':'),
      hms,
      fc.constantFrom('Z', 'Z', 'z', '', 'ZZ'),
    )
    .map((a) => a.join(''));
  fc.assert(
    fc.property(fc.oneof(date, time, fc.string({ maxLength: 22 })), (s) => {
      assert.is(isDate(s), refDate(s), `isDate(${JSON.stringify(s)})`);
      assert.is(isDateTime(s), refTime(s), `isDateTime(${JSON.stringify(s)})`);
    }),
    { seed: SEED, numRuns: 4 * RUNS },
  );
  const hexChar = fc.constantFrom(...'0123456789abcdefABCDEFg/:`@G');
  fc.assert(
    fc.property(
      fc.oneof(
        fc.array(hexChar, { minLength: 62, maxLength: 66 }).map((a) => a.join('')),
        fc.string(),
      ),
      (s) => {
        assert.is(isHex64(s), /^[0-9a-f]{64}$/.test(s), `isHex64(${JSON.stringify(s)})`);
      },
    ),
    { seed: SEED, numRuns: 4 * RUNS },
  );
  for (const s of ['2024-02-29', '2023-02-29', '1900-02-29', '2000-02-29', '2026-04-31', '2026-12-31T23:59:59Z', '2026-12-31T24:00:00Z']) {
    assert.is(isDate(s.slice(0, 10)), refDate(s.slice(0, 10)), s);
    assert.is(isDateTime(s), refTime(s), s);
  }
});

function canonicalSafe(v: unknown): string {
  try {
    return canonicalize(v);
  } catch {
    return `unrepresentable:${String(v)}`;
  }
}

test('parseCheckpoint: arbitrary values never crash', () => {
  fc.assert(
    fc.property(jsonValue, (v) => {
      onlyCoded(() => parseCheckpoint(v), ['checkpoint_mismatch']);
    }),
    { seed: SEED, numRuns: RUNS },
  );
});

test('parseSelectionQuery: arbitrary query strings give a query or bad_request', () => {
  const piece = fc.oneof(
    fc.string(),
    fc.constantFrom('url=', 'semver=', 'at=', '&', '%', '%zz', '%00', '%0d%0a', '+', '=', 'url=https%3A%2F%2Fa.example%2Fx', 'semver=1.0.0', 'at=2026-01-01'),
  );
  fc.assert(
    fc.property(
      fc.array(piece, { maxLength: 8 }).map((a) => a.join('')),
      (q) => {
        onlyCoded(() => {
          const r = parseSelectionQuery(q);
          assert.ok(/^https?:\/\//.test(r.url));
        }, ['bad_request']);
      },
    ),
    { seed: SEED, numRuns: RUNS * 2 },
  );
});

test('parseSelectionQuery: the one-`url` fast path answers as URLSearchParams does (value or error), with or without the form check', () => {
  const outcome = (q: string, checkUrl: boolean) => {
    try {
      return parseSelectionQuery(q, { checkUrl });
    } catch (e) {
      return `${(e as { code?: string }).code}: ${(e as Error).message}`;
    }
  };
  const piece = fc.oneof(
    fc.string(),
    fc.string({ unit: 'binary' }),
    fc.constantFrom('%', '%zz', '%2', '%E0%A4%A', '%E2%82%AC', '%2B', '+', '=', '%26', 'https%3A%2F%2Fa.example%2Fx', 'ftp://x/y', 'https://a.example/a b'),
  );
  fc.assert(
    fc.property(
      fc.array(piece, { maxLength: 6 }).map((a) => a.join('').replace(/&/g, '')),
      fc.boolean(),
      (v, checkUrl) => {
        // `url=V` takes the fast path; `url=V&` the general one (URLSearchParams ignores the empty pair).
        assert.equal(outcome(`url=${v}`, checkUrl), outcome(`url=${v}&`, checkUrl), v);
      },
    ),
    { seed: SEED, numRuns: RUNS * 2 },
  );
});

test('submit bodies: arbitrary JSON gives a request or bad_request; arbitrary bytes give bad_request', () => {
  fc.assert(
    fc.property(jsonValue, (v) => {
      onlyCoded(() => parseSubmitRequest(v), ['bad_request']);
    }),
    { seed: SEED, numRuns: RUNS },
  );
  fc.assert(
    fc.property(fc.array(jsonValue, { maxLength: 4 }), (list) => {
      onlyCoded(() => parseSubmitBody({ blocks: list }), ['bad_request']);
    }),
    { seed: SEED, numRuns: RUNS },
  );
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (b) => {
      onlyCoded(() => parseJsonBody(Buffer.from(b)), ['bad_request']);
    }),
    { seed: SEED, numRuns: RUNS },
  );
  onlyCoded(() => parseJsonBody(Buffer.from('['.repeat(100_000))), ['bad_request']);
});

test('revoke bodies: arbitrary JSON, and objects of the right members with arbitrary values, give a request or bad_request', () => {
  fc.assert(
    fc.property(jsonValue, (v) => {
      onlyCoded(() => parseRevokeRequest(v), ['bad_request']);
    }),
    { seed: SEED, numRuns: RUNS },
  );
  const member = fc.oneof(jsonValue, fc.string(), fc.integer(), fc.constantFrom('https://a.example/x.tgz', '1.0.0', '2026-11-29', 1, 0, -1, 2 ** 53));
  const body = fc.dictionary(fc.constantFrom('url', 'semver', 'block', 'effective_date', 'comment'), member);
  fc.assert(
    fc.property(body, (v) => {
      let req;
      try {
        req = parseRevokeRequest(v);
      } catch (e) {
        if (!(e instanceof VouchError) || e.code !== 'bad_request') throw e;
        return;
      }
      // Accepted: exactly one target, of the documented forms.
      if ('block' in req.target) assert.ok(Number.isSafeInteger(req.target.block) && req.target.block >= 0 && !('url' in v));
      else assert.ok(typeof req.target.url === 'string' && !('block' in v));
      if (req.effectiveDate !== undefined) assert.ok(isDate(req.effectiveDate));
    }),
    { seed: SEED, numRuns: RUNS },
  );
});

test('acceptsJson never throws', () => {
  fc.assert(
    fc.property(fc.string(), (a) => {
      acceptsJson(a);
    }),
    { seed: SEED, numRuns: RUNS },
  );
});

test('exact member sets: once blocks were accepted, the same names in another order pass and a renamed, extra or missing member at any level is refused', () => {
  const b = blocks[1]!;
  for (let k = 0; k < 3; k++) parseBlock(structuredClone(b), 1); // the usual member order, accepted (and remembered)
  const reversed = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).reverse());
  const r = structuredClone(b) as any;
  r.payload.endorsements[0] = reversed(r.payload.endorsements[0]);
  r.payload.vibecode = reversed(r.payload.vibecode);
  r.payload.grammar = reversed(r.payload.grammar);
  assert.equal(parseBlock(reversed({ ...r, payload: reversed(r.payload) }), 1), parseBlock(structuredClone(b), 1));
  const at: [string, (x: any) => Record<string, unknown>][] = [
    ['block', (x) => x],
    ['payload', (x) => x.payload],
    ['endorsement', (x) => x.payload.endorsements[0]],
    ['grammar', (x) => x.payload.grammar],
    ['vibecode', (x) => x.payload.vibecode],
  ];
  for (const [where, pick] of at) {
    const names = Object.keys(pick(b as any));
    for (const name of names) {
      const renamed = structuredClone(b) as any;
      const o = pick(renamed);
      const v = o[name];
      delete o[name];
      assert.throws(() => parseBlock(renamed, 1), /missing member/, `${where}: ${name} missing`);
      o[name + '_'] = v;
      assert.throws(() => parseBlock(renamed, 1), /unknown member/, `${where}: ${name} renamed`);
      parseBlock(structuredClone(b), 1);
    }
    const extra = structuredClone(b) as any;
    pick(extra).zz = 1;
    assert.throws(() => parseBlock(extra, 1), /unknown member "zz"/, `${where}: extra member`);
  }
});

test('isHex64: exactly 64 characters of 0-9a-f', () => {
  const ok = '0123456789abcdef'.repeat(4);
  assert.ok(isHex64(ok));
  for (const bad of ['A', 'g', '/', ':', '`', 'G', '\u00e9', '\u0130', ' ']) {
    for (const at of [0, 31, 63]) assert.not.ok(isHex64(ok.slice(0, at) + JSON.parse(`"${bad}"`) + ok.slice(at + 1)), `${bad} at ${at}`);
  }
  assert.not.ok(isHex64(ok.slice(1)));
  assert.not.ok(isHex64(ok + '0'));
  assert.not.ok(isHex64(''));
});

test("parseBlockFile (the verifier's reader) gives exactly what readJson then parseBlock give: the block, or the same failure (generated repeats, colons, escapes)", () => {
  // The reference: the two steps every other reader takes, failures worded as BlockFacts.malformed.
  const reference = (text: string, pos: number) => {
    const j = readJson(text);
    if (j.error !== null) return { block: null, malformed: j.error };
    try {
      return { block: parseBlock(j.value, pos), malformed: null };
    } catch (e) {
      if (e instanceof VouchError) return { block: null, malformed: e.message };
      throw e;
    }
  };
  // A value as a list of members, so a member can be written twice.
  type W = { o: [string, W][] } | { a: W[] } | { v: unknown };
  const tree = (v: unknown): W =>
    Array.isArray(v) ? { a: v.map(tree) } : v !== null && typeof v === 'object' ? { o: Object.entries(v).map(([k, x]) => [k, tree(x)]) } : { v };
  const objects = (w: W, out: { o: [string, W][] }[] = []): { o: [string, W][] }[] => {
    if ('o' in w) {
      out.push(w);
      for (const [, x] of w.o) objects(x, out);
    } else if ('a' in w) for (const x of w.a) objects(x, out);
    return out;
  };
  const str = (s: string, escape: boolean) =>
    escape ? '"' + [...s].map((c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')).join('') + '"' : JSON.stringify(s);
  const write = (w: W, escape: boolean, ind: string): string => {
    const inner = ind + '  ';
    if ('o' in w)
      return w.o.length === 0 ? '{}' : '{\n' + w.o.map(([k, x]) => `${inner}${str(k, escape)}: ${write(x, escape, inner)}`).join(',\n') + `\n${ind}}`;
    if ('a' in w) return w.a.length === 0 ? '[]' : '[\n' + w.a.map((x) => inner + write(x, escape, inner)).join(',\n') + `\n${ind}]`;
    return typeof w.v === 'string' ? str(w.v, escape) : JSON.stringify(w.v);
  };
  const colony = fc.constantFrom('a:b', ':', '::x', 'plain', 'https://x.example:1/', '');
  let repeated = 0;
  let accepted = 0;
  let hidden = 0;
  fc.assert(
    fc.property(
      fc.nat(blocks.length - 1),
      fc.dictionary(colony, fc.boolean(), { maxKeys: 3 }),
      colony,
      colony,
      fc.option(fc.tuple(fc.nat(), fc.nat(), fc.oneof(colony, fc.constantFrom('comment', 'artifact_url', 'index', 'tags', 'signer', 'uns'))), { nil: null }),
      fc.boolean(),
      fc.boolean(),
      (at, tags, comment, license, dup, escape, sameValue) => {
        const b = structuredClone(blocks[at]) as any;
        b.payload.tags = tags;
        b.comment = comment.length > 0 ? comment : b.comment;
        if (b.payload.endorsements.length > 0)
          b.payload.endorsements[0].license = license.length > 0 && license !== ':' ? 'MIT' + license.replace(/[^:a-z]/g, '') : 'MIT';
        const w = tree(b);
        if (dup !== null) {
          const objs = objects(w);
          const target = objs[dup[0] % objs.length]!;
          const name = target.o.length > 0 && dup[1] % 3 === 0 ? target.o[dup[1] % target.o.length]![0] : dup[2];
          const existing = target.o.find(([k]) => k === name);
          const value: W = sameValue && existing ? existing[1] : { v: comment };
          target.o.splice(dup[1] % (target.o.length + 1), 0, [name, value]);
          if (existing) repeated++;
        }
        const text = write(w, escape, '') + '\n';
        const got = parseBlockFile(text, at);
        const want = reference(text, at);
        assert.equal(got, want, text);
        if (got.block !== null) accepted++;
        // The case the count exists for: JSON.parse keeps the last of two members and the block parses.
        if (want.block === null && /repeats the member name/.test(want.malformed)) {
          try {
            parseBlock(JSON.parse(text), at);
            if (!text.includes('\\')) hidden++;
          } catch {
            /* refused anyway */
          }
        }
      },
    ),
    { seed: SEED, numRuns: 3 * RUNS },
  );
  assert.ok(repeated > RUNS / 2, `only ${repeated} texts repeat a member name`);
  assert.ok(hidden > RUNS / 8, `only ${hidden} texts repeat a member name JSON.parse hides`);
  assert.ok(accepted > RUNS / 4, `only ${accepted} texts parsed: the property says little`);
  // Real block files, unchanged, parse (the fast path's usual case).
  for (const b of blocks) assert.equal(parseBlockFile(formatBlockFile(b), b.index), { block: parseBlock(structuredClone(b), b.index), malformed: null });
});

test('/v1/keys answers: arbitrary JSON gives an answer or a KeyWalkError; a mutated honest answer walks to the honest state or is refused', () => {
  const isWalkError = (f: () => unknown): void => {
    try {
      f();
    } catch (e) {
      if (!(e instanceof KeyWalkError)) throw new Error(`threw a ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`);
    }
  };
  fc.assert(
    fc.property(jsonValue, (v) => {
      isWalkError(() => parseKeysAnswer(v, 'fuzz'));
      parseTrail(v);
    }),
    { seed: SEED, numRuns: RUNS },
  );
  const life = buildKeyLifeChain();
  const tree = new MerkleTree(nodeBackend);
  for (const b of life.blocks) tree.append(hexDecode(b.record_hash)!);
  const cp = { size: tree.size, root: tree.root() };
  const honest = {
    chain: life.blocks[0]!.record_hash,
    size: tree.size,
    checkpoint: '',
    first_block: { block: life.blocks[0], proof: tree.inclusionProof(0, tree.size).map(base64Encode) },
    events: [2, 4, 8, 10].map((i) => ({
      index: i,
      sequence: life.blocks[i]!.payload.statement!.sequence,
      block: life.blocks[i],
      proof: tree.inclusionProof(i, tree.size).map(base64Encode),
    })),
  };
  const walk = (v: unknown) => {
    const a = parseKeysAnswer(v, 'fuzz');
    return walkKeyEvents(nodeBackend, startTrail(nodeBackend, a, cp, b64(ONLINE.A), 'fuzz'), a.events, cp, 'fuzz').state;
  };
  const expected = JSON.stringify(walk(honest));
  /** Every path to a scalar or object inside the honest answer. */
  const paths: (string | number)[][] = [];
  const collect = (v: unknown, at: (string | number)[]) => {
    paths.push(at);
    if (typeof v === 'object' && v !== null) for (const [k, x] of Object.entries(v)) collect(x, [...at, Array.isArray(v) ? Number(k) : k]);
  };
  collect(honest, []);
  const mutation = fc.record({
    path: fc.constantFrom(...paths.filter((p) => p.length > 0)),
    value: fc.oneof(jsonValue, fc.constantFrom(0, 1, 2, 3, 11, 12, '', 'AAAA', b64(ONLINE.B), b64(ONLINE.D))),
  });
  fc.assert(
    fc.property(mutation, ({ path, value }) => {
      const v = structuredClone(honest) as Record<string | number, unknown>;
      let o = v;
      for (const k of path.slice(0, -1)) o = o[k] as Record<string | number, unknown>;
      o[path[path.length - 1]!] = value;
      try {
        assert.is(JSON.stringify(walk(v)), expected, `accepted a mutation of ${path.join('.')} into another state`);
      } catch (e) {
        if (!(e instanceof KeyWalkError)) throw e;
      }
    }),
    { seed: SEED, numRuns: RUNS },
  );
});

test.run();
