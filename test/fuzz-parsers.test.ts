/**
 * Property-based fuzzing (fast-check, fixed seed, bounded runs) of the
 * parsers of untrusted input: block files, checkpoints, the selection query
 * and submit bodies. Whatever the input, a parser either accepts it or throws
 * the documented VouchError — never another exception, never a hang; and
 * verification of a mutated chain never accepts it.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { parseBlock, parseBlockText, parseCheckpoint, verifyChain, canonicalize, VouchError } from '../chain/index.ts';
import { parseSelectionQuery, parseJsonBody, acceptsJson } from '../gateway/http-util.ts';
import { parseSubmitRequest } from '../gateway/submit-request.ts';
import { nodeBackend } from '../lib/node-crypto.ts';
import { buildFeatureChain } from './helpers/chain-fixture.ts';

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
    fc.string(), fc.string({ unit: 'binary' }), fc.integer(), fc.double(), fc.boolean(), fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(fc.oneof(fc.string(), fc.constantFrom('__proto__', 'constructor', 'payload', 'index')), tie('value'), { maxKeys: 5 }),
  ),
})).value;

test('parseBlock: arbitrary values are accepted or refused as malformed, never crash', () => {
  fc.assert(fc.property(jsonValue, fc.nat(3), (v, pos) => { onlyCoded(() => parseBlock(v, pos), ['malformed']); }), { seed: SEED, numRuns: RUNS });
});

test('parseBlockText: arbitrary text (and truncations of real block files) never crash', () => {
  const real = JSON.stringify(blocks[2], null, 2);
  fc.assert(fc.property(fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.nat(real.length).map((n) => real.slice(0, n))), (t) => {
    onlyCoded(() => parseBlockText(t, 2), ['malformed']);
  }), { seed: SEED, numRuns: RUNS });
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
  fc.assert(fc.property(fc.constantFrom(...paths), jsonValue, (path, value) => {
    const chain = structuredClone(blocks) as any[];
    let o = chain[2];
    for (const k of path.slice(0, -1)) o = o[k];
    const last = path[path.length - 1]!;
    const before = canonicalSafe(o[last]);
    o[last] = value;
    if (canonicalSafe(o[last]) === before) return; // not a change
    const r = verifyChain(chain, { backend: nodeBackend, checkpoint });
    assert.is(r.ok, false, `accepted ${path.join('.')} = ${JSON.stringify(value)}`);
  }), { seed: SEED, numRuns: RUNS });
});

function canonicalSafe(v: unknown): string {
  try { return canonicalize(v); } catch { return `unrepresentable:${String(v)}`; }
}

test('parseCheckpoint: arbitrary values never crash', () => {
  fc.assert(fc.property(jsonValue, (v) => { onlyCoded(() => parseCheckpoint(v), ['checkpoint_mismatch']); }), { seed: SEED, numRuns: RUNS });
});

test('parseSelectionQuery: arbitrary query strings give a query or bad_request', () => {
  const piece = fc.oneof(fc.string(), fc.constantFrom('url=', 'semver=', 'at=', '&', '%', '%zz', '%00', '%0d%0a', '+', '=', 'url=https%3A%2F%2Fa.example%2Fx', 'semver=1.0.0', 'at=2026-01-01'));
  fc.assert(fc.property(fc.array(piece, { maxLength: 8 }).map((a) => a.join('')), (q) => {
    onlyCoded(() => {
      const r = parseSelectionQuery(q);
      assert.ok(/^https?:\/\//.test(r.url));
    }, ['bad_request']);
  }), { seed: SEED, numRuns: RUNS * 2 });
});

test('submit bodies: arbitrary JSON gives a request or bad_request; arbitrary bytes give bad_request', () => {
  fc.assert(fc.property(jsonValue, (v) => { onlyCoded(() => parseSubmitRequest(v), ['bad_request']); }), { seed: SEED, numRuns: RUNS });
  fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), (b) => { onlyCoded(() => parseJsonBody(Buffer.from(b)), ['bad_request']); }), { seed: SEED, numRuns: RUNS });
  onlyCoded(() => parseJsonBody(Buffer.from('['.repeat(100_000))), ['bad_request']);
});

test('acceptsJson never throws', () => {
  fc.assert(fc.property(fc.string(), (a) => { acceptsJson(a); }), { seed: SEED, numRuns: RUNS });
});

test.run();
