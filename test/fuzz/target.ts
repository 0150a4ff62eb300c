/**
 * What a fuzz target is, and the generators every target shares.
 *
 * Owns: `FuzzTarget` (a parser's inputs as bytes, its generator, its
 * property), `refusedOnly` (the property's core: accepted, or refused with
 * the documented error, nothing else), the byte, text and JSON mutators
 * over genuine seed inputs, and the corpus on disk (test/fuzz/corpus/<name>/).
 *
 * Must hold: every input is a Buffer, so a counterexample is a file that
 * replays as it is (`npm run fuzz -- NAME --replay FILE`); generators are
 * pure functions of fast-check's random source (a seed reproduces a run).
 */
import fc from 'fast-check';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { VouchError, type ErrorCode } from '../../chain/errors.ts';

export const CORPUS_DIR = fileURLToPath(new URL('./corpus/', import.meta.url));

export interface FuzzTarget {
  name: string;
  /** What is parsed and what the property says, one line. */
  about: string;
  /** Inputs from the genuine seeds (the committed corpus): random bytes, byte-, text- and structure-level mutations. */
  arbitrary(seeds: Buffer[]): fc.Arbitrary<Buffer>;
  /** The property: returns when the parser accepted or refused as documented; throws `FuzzFailure` (or anything) otherwise. */
  check(input: Buffer): void | Promise<void>;
  /** Runs of the bounded pass in the test suite (default 300). */
  runs?: number;
}

/** A property violated: the message says how. */
export class FuzzFailure extends Error {}

/**
 * Runs `fn`; a throw must be `expected` (by default: a VouchError with one of
 * `codes`). Returns the value when accepted, undefined when refused.
 */
export function refusedOnly<T>(fn: () => T, codes: readonly ErrorCode[], expected?: (e: unknown) => boolean): T | undefined {
  try {
    return fn();
  } catch (e) {
    if (expected ? expected(e) : e instanceof VouchError && codes.includes(e.code)) return undefined;
    throw new FuzzFailure(`undocumented failure: ${describe(e)}`, { cause: e });
  }
}

/** The async form of `refusedOnly`. */
export async function refusedOnlyAsync<T>(fn: () => Promise<T>, codes: readonly ErrorCode[], expected?: (e: unknown) => boolean): Promise<T | undefined> {
  try {
    return await fn();
  } catch (e) {
    if (expected ? expected(e) : e instanceof VouchError && codes.includes(e.code)) return undefined;
    throw new FuzzFailure(`undocumented failure: ${describe(e)}`, { cause: e });
  }
}

/** Runs `fn`, which must not throw at all (`what` says what failed if it does). */
export function mustNotThrow<T>(fn: () => T, what: string): T {
  try {
    return fn();
  } catch (e) {
    throw new FuzzFailure(`${what}: ${describe(e)}`, { cause: e });
  }
}

export function describe(e: unknown): string {
  if (e instanceof VouchError) return `VouchError ${e.code}: ${e.message}`;
  if (e instanceof Error) return `${e.constructor.name}: ${e.message}\n${e.stack?.split('\n').slice(1, 6).join('\n')}`;
  return `non-error thrown: ${String(e)}`;
}

export function check(cond: boolean, what: string): void {
  if (!cond) throw new FuzzFailure(what);
}

// --- corpus ------------------------------------------------------------------

/** The committed inputs of a target: its seeds and its regressions (file name, bytes). */
export function corpusOf(name: string): { file: string; bytes: Buffer }[] {
  const dir = join(CORPUS_DIR, name);
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch {
    return [];
  }
  return names.filter((n) => !n.startsWith('.') && statSync(join(dir, n)).isFile()).map((n) => ({ file: join(dir, n), bytes: readFileSync(join(dir, n)) }));
}

/** Saves a counterexample as `regress-<sha256:12>` in the target's corpus; returns its path. */
export function saveRegression(name: string, input: Buffer): string {
  const dir = join(CORPUS_DIR, name);
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `regress-${createHash('sha256').update(input).digest('hex').slice(0, 12)}`);
  writeFileSync(file, input);
  return file;
}

// --- byte mutations ----------------------------------------------------------

const INTERESTING = [0, 1, 0x7f, 0x80, 0xff, 0x0a, 0x0d, 0x00, 0x20, 0x22, 0x5c, 0x30, 0x39, 0x3a, 0x2c, 0x7b, 0x5b];
const INTERESTING_WORDS = [0, 1, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff];

type Op =
  | { k: 'flip'; at: number; bit: number }
  | { k: 'set'; at: number; v: number }
  | { k: 'word'; at: number; v: number }
  | { k: 'del'; at: number; len: number }
  | { k: 'ins'; at: number; bytes: Uint8Array }
  | { k: 'dup'; at: number; len: number; times: number }
  | { k: 'cut'; at: number }
  | { k: 'splice'; at: number; from: number; other: number; len: number }
  | { k: 'token'; at: number; token: number; replace: number };

function opArb(tokens: readonly Buffer[]): fc.Arbitrary<Op> {
  const at = fc.nat();
  const ops: fc.Arbitrary<Op>[] = [
    fc.record({ k: fc.constant('flip' as const), at, bit: fc.nat(7) }),
    fc.record({ k: fc.constant('set' as const), at, v: fc.oneof(fc.constantFrom(...INTERESTING), fc.nat(255)) }),
    fc.record({ k: fc.constant('word' as const), at, v: fc.constantFrom(...INTERESTING_WORDS) }),
    fc.record({ k: fc.constant('del' as const), at, len: fc.nat(64) }),
    fc.record({ k: fc.constant('ins' as const), at, bytes: fc.uint8Array({ maxLength: 16 }) }),
    fc.record({ k: fc.constant('dup' as const), at, len: fc.integer({ min: 1, max: 64 }), times: fc.integer({ min: 1, max: 40 }) }),
    fc.record({ k: fc.constant('cut' as const), at }),
    fc.record({ k: fc.constant('splice' as const), at, from: fc.nat(), other: fc.nat(), len: fc.nat(256) }),
  ];
  if (tokens.length > 0) ops.push(fc.record({ k: fc.constant('token' as const), at, token: fc.nat(tokens.length - 1), replace: fc.nat(8) }));
  return fc.oneof(...ops);
}

function applyOp(b: Buffer, op: Op, seeds: readonly Buffer[], tokens: readonly Buffer[]): Buffer {
  const n = b.length;
  const at = n === 0 ? 0 : op.at % (n + 1);
  switch (op.k) {
    case 'flip':
      if (n === 0) return b;
      {
        const c = Buffer.from(b);
        c[at % n]! ^= 1 << op.bit;
        return c;
      }
    case 'set':
      if (n === 0) return b;
      {
        const c = Buffer.from(b);
        c[at % n] = op.v;
        return c;
      }
    case 'word': {
      if (n < 4) return b;
      const c = Buffer.from(b);
      c.writeUInt32BE(op.v >>> 0, Math.min(at, n - 4));
      return c;
    }
    case 'del':
      return Buffer.concat([b.subarray(0, at), b.subarray(at + op.len)]);
    case 'ins':
      return Buffer.concat([b.subarray(0, at), op.bytes, b.subarray(at)]);
    case 'dup': {
      const piece = b.subarray(at, at + op.len);
      return Buffer.concat([b.subarray(0, at), ...Array<Buffer>(op.times).fill(piece), b.subarray(at)]);
    }
    case 'cut':
      return b.subarray(0, at);
    case 'splice': {
      const o = seeds[op.other % Math.max(1, seeds.length)] ?? b;
      const from = o.length === 0 ? 0 : op.from % o.length;
      return Buffer.concat([b.subarray(0, at), o.subarray(from, from + op.len), b.subarray(at)]);
    }
    case 'token': {
      const t = tokens[op.token]!;
      return Buffer.concat([b.subarray(0, at), t, b.subarray(Math.min(n, at + op.replace))]);
    }
  }
}

/**
 * Byte-level mutations of the seeds (1-6 operations each: bit flips,
 * interesting bytes and 32-bit words, deletions, insertions, repeats,
 * truncation, splices of other seeds, dictionary tokens), then `fixup`
 * (e.g. a recomputed checksum) half of the time.
 */
export function mutatedBytes(seeds: readonly Buffer[], o: { tokens?: readonly (string | Buffer)[]; fixup?: (b: Buffer) => Buffer } = {}): fc.Arbitrary<Buffer> {
  const tokens = (o.tokens ?? []).map((t) => (typeof t === 'string' ? Buffer.from(t, 'latin1') : t));
  const pool = seeds.length > 0 ? seeds : [Buffer.alloc(0)];
  return fc.tuple(fc.nat(pool.length - 1), fc.array(opArb(tokens), { minLength: 1, maxLength: 6 }), fc.boolean()).map(([i, ops, fix]) => {
    let b = pool[i]!;
    for (const op of ops) b = applyOp(b, op, pool, tokens);
    return fix && o.fixup ? o.fixup(b) : b;
  });
}

/** Random bytes, random text (ASCII and full Unicode) and the tokens run together. */
export function randomInput(tokens: readonly string[] = []): fc.Arbitrary<Buffer> {
  const arbs: fc.Arbitrary<Buffer>[] = [
    fc.uint8Array({ maxLength: 300 }).map((u) => Buffer.from(u)),
    fc.string({ maxLength: 200 }).map((s) => Buffer.from(s, 'utf8')),
    fc.string({ unit: 'binary', maxLength: 100 }).map((s) => Buffer.from(s, 'utf8')),
  ];
  if (tokens.length > 0)
    arbs.push(fc.array(fc.oneof(fc.constantFrom(...tokens), fc.string({ maxLength: 4 })), { maxLength: 30 }).map((a) => Buffer.from(a.join(''), 'utf8')));
  return fc.oneof(...arbs);
}

// --- line mutations ----------------------------------------------------------

/** Line-level mutations of text seeds: lines dropped, repeated, swapped, replaced by a token line or cut mid-way. */
export function mutatedLines(seeds: readonly Buffer[], lineTokens: readonly string[] = []): fc.Arbitrary<Buffer> {
  const pool = seeds.length > 0 ? seeds : [Buffer.alloc(0)];
  const op = fc.record({
    k: fc.constantFrom('drop', 'repeat', 'swap', 'token', 'cut', 'join'),
    at: fc.nat(),
    other: fc.nat(),
    times: fc.integer({ min: 1, max: 50 }),
    token: fc.nat(),
  });
  return fc.tuple(fc.nat(pool.length - 1), fc.array(op, { minLength: 1, maxLength: 5 })).map(([i, ops]) => {
    const lines = pool[i]!.toString('utf8').split('\n');
    for (const o of ops) {
      const at = o.at % Math.max(1, lines.length);
      const line = lines[at] ?? '';
      switch (o.k) {
        case 'drop':
          lines.splice(at, 1);
          break;
        case 'repeat':
          lines.splice(at, 0, ...Array<string>(o.times).fill(line));
          break;
        case 'swap': {
          const j = o.other % Math.max(1, lines.length);
          lines[at] = lines[j] ?? '';
          lines[j] = line;
          break;
        }
        case 'token':
          if (lineTokens.length > 0) lines.splice(at, 0, lineTokens[o.token % lineTokens.length]!);
          break;
        case 'cut':
          lines[at] = line.slice(0, o.other % (line.length + 1));
          break;
        case 'join':
          lines.splice(at, 2, line + (lines[at + 1] ?? ''));
          break;
      }
    }
    return Buffer.from(lines.join('\n'), 'utf8');
  });
}

// --- JSON mutations ----------------------------------------------------------

/** Arbitrary JSON values, including the awkward ones (prototype names, big numbers, lone surrogates). */
export const jsonValue: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.string(),
    fc.string({ unit: 'binary', maxLength: 8 }),
    fc.integer(),
    fc.double(),
    fc.boolean(),
    fc.constant(null),
    fc.constantFrom('', '0', '1.0.0', '-1', '1e400', 'https://a.example/x', '__proto__', 'sha512-', '\ud800'),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(
      fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom('__proto__', 'constructor', 'toString', 'name', 'version', 'versions', 'dist')),
      tie('value'),
      { maxKeys: 4 },
    ),
  ),
})).value;

type Path = (string | number)[];

function paths(v: unknown, p: Path, out: Path[], limit: number): void {
  if (out.length >= limit) return;
  out.push(p);
  if (Array.isArray(v)) v.forEach((x, i) => paths(x, [...p, i], out, limit));
  else if (v !== null && typeof v === 'object') for (const [k, x] of Object.entries(v)) paths(x, [...p, k], out, limit);
}

/**
 * Structure-aware mutations of JSON seeds: at a few places (any member or
 * element, found by walking the seed) a value replaced by an arbitrary one,
 * removed, repeated in its array, wrapped in an array or nested deeper; then
 * written back, compact or indented.
 */
export function mutatedJson(seeds: readonly Buffer[]): fc.Arbitrary<Buffer> {
  const docs = seeds
    .map((s) => {
      try {
        return JSON.parse(s.toString('utf8')) as unknown;
      } catch {
        return undefined;
      }
    })
    .filter((d) => d !== undefined);
  if (docs.length === 0) return jsonValue.map((v) => Buffer.from(JSON.stringify(v) ?? 'null'));
  const edit = fc.record({
    at: fc.nat(),
    k: fc.constantFrom('replace', 'replace', 'remove', 'repeat', 'wrap', 'deepen'),
    value: jsonValue,
    times: fc.integer({ min: 2, max: 200 }),
  });
  return fc.tuple(fc.nat(docs.length - 1), fc.array(edit, { minLength: 1, maxLength: 4 }), fc.boolean()).map(([i, edits, pretty]) => {
    let doc = structuredClone(docs[i]);
    for (const e of edits) {
      const all: Path[] = [];
      paths(doc, [], all, 4096);
      const p = all[e.at % all.length]!;
      if (p.length === 0) {
        doc = e.k === 'wrap' ? [doc] : e.k === 'replace' ? e.value : doc;
        continue;
      }
      let parent: any = doc;
      for (const k of p.slice(0, -1)) parent = parent[k];
      const key = p[p.length - 1]!;
      const old = parent[key];
      switch (e.k) {
        case 'replace':
          parent[key] = e.value;
          break;
        case 'remove':
          if (Array.isArray(parent)) parent.splice(key as number, 1);
          else delete parent[key];
          break;
        case 'repeat':
          if (Array.isArray(parent)) parent.splice(key as number, 0, ...Array(e.times).fill(old));
          else parent[`${String(key)}${e.times}`] = old;
          break;
        case 'wrap':
          parent[key] = [old];
          break;
        case 'deepen': {
          let v: unknown = old;
          for (let d = 0; d < e.times; d++) v = { [String(key)]: v };
          parent[key] = v;
          break;
        }
      }
    }
    return Buffer.from(JSON.stringify(doc, null, pretty ? 2 : undefined) ?? 'null', 'utf8');
  });
}

/** The usual mix: random input, byte mutations, and the target's own structure-aware generators. */
export function mix(...arbs: fc.Arbitrary<Buffer>[]): fc.Arbitrary<Buffer> {
  return fc.oneof(...arbs);
}
