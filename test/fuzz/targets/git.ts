/**
 * Fuzz targets of git's formats as vouch reads them (store/): pkt-lines and
 * the receive-pack report, packs received (PackReceiver, the delta codec) and
 * read from disk (DiskPacks through their `.idx`), and `.git/index` files
 * (versions 2-4, the split index's link extension and its EWAH bitmaps),
 * and the answers of `git cat-file --batch`.
 * Property: a result or `io_error`; what is accepted is consistent (objects
 * found under the id of their bytes, an index written again reads the same).
 */
import fc from 'fast-check';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VouchError } from '../../../chain/errors.ts';
import { createServer } from 'node:http';
import { fetchRefs, parseReport, resolvedTimeouts } from '../../../store/receive-pack.ts';
import { discoverRefs, uploadPack } from '../../../store/upload-pack.ts';
import { defaultDispatcher, parseRemote } from '../../../store/smart-http.ts';
import { PktReader, parsePktLines, pktLine } from '../../../store/pkt-line.ts';
import { DiskPacks, applyDelta, encodeObjectHeader, idxCount } from '../../../store/git-pack.ts';
import { deflateSync } from 'node:zlib';
import { PackReceiver } from '../../../store/git-pack-index.ts';
import { parseIndex, serializeIndex } from '../../../store/git-index-format.ts';
import { objectId } from '../../../store/git-objects.ts';
import { AnswerParser } from '../../../store/git-cat-file.ts';
import { check, mix, mutatedBytes, randomInput, refusedOnly, refusedOnlyAsync, type FuzzTarget } from '../target.ts';

const remote = { base: 'http://127.0.0.1:1/chain.git', shown: 'http://127.0.0.1:1/chain.git' } as Parameters<typeof parseReport>[1];

const PKT_TOKENS = [
  '0000',
  '0001',
  '0002',
  '0003',
  '0004',
  'fff0',
  'fff1',
  'ffff',
  '000a',
  '001e# service=git-upload-pack\n',
  'unpack ok\n',
  'ok refs/heads/main\n',
  'ng refs/heads/main ',
  'ERR ',
];

function linesOf(input: Buffer, piece: number): string | undefined {
  const out: string[] = [];
  return refusedOnly(() => {
    const r = new PktReader((l) => {
      out.push(l === null ? '<flush>' : l.toString('latin1'));
    }, 64);
    for (let i = 0; i < input.length; i += piece) r.push(input.subarray(i, i + piece));
    r.end();
    return JSON.stringify(out);
  }, ['io_error']);
}

export const pktLineTarget: FuzzTarget = {
  name: 'pkt-line',
  about: 'PktReader, parsePktLines and parseReport: lines or io_error, the same whole or in 1- and 3-byte reads; pktLine round trip',
  arbitrary: (seeds) =>
    mix(
      randomInput(PKT_TOKENS),
      mutatedBytes(seeds, { tokens: PKT_TOKENS }),
      fc
        .array(fc.oneof(fc.constant(null), fc.uint8Array({ maxLength: 40 })), { maxLength: 12 })
        .map((ls) => Buffer.concat(ls.map((l) => (l === null ? Buffer.from('0000') : pktLine(Buffer.from(l)))))),
    ),
  check(input) {
    const whole = linesOf(input, Math.max(1, input.length));
    check(whole === linesOf(input, 1), 'byte-by-byte reads differ from one read');
    check(whole === linesOf(input, 3), '3-byte reads differ from one read');
    const lines = refusedOnly(() => parsePktLines(input, 'fuzz', 64), ['io_error']);
    check((lines === undefined) === (whole === undefined), 'parsePktLines and PktReader disagree');
    if (lines !== undefined) {
      // Round trip: the lines written again are the input (flush, delim and response-end all read as flushes).
      const again = Buffer.concat(lines.map((l) => (l === null ? Buffer.from('0000') : pktLine(l))));
      check(again.length === input.length, 'lines written again have another length');
    }
    refusedOnly(() => parseReport(input, remote), ['io_error']);
  },
  runs: 400,
};

// --- packs -------------------------------------------------------------------

/** A pack with its SHA-1 trailer recomputed (so a mutation reaches the objects, not only the checksum). */
export function packTrailerFixed(b: Buffer): Buffer {
  if (b.length < 32) return b;
  const body = b.subarray(0, b.length - 20);
  return Buffer.concat([body, createHash('sha1').update(body).digest()]);
}

let scratch: string | null = null;
/** A scratch directory for the targets that need files (removed at exit). */
export function scratchDir(): string {
  if (scratch === null) {
    scratch = fs.mkdtempSync(join(tmpdir(), 'vouch-fuzz-'));
    const dir = scratch;
    process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  }
  return scratch;
}

const PACK_TOKENS = [
  Buffer.from('PACK\0\0\0\x02', 'latin1'),
  Buffer.from([0x78, 0x9c]),
  Buffer.from([0x78, 0x01]),
  Buffer.from([0x60]),
  Buffer.from([0x70]),
  Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f]),
  Buffer.from([0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
];

/**
 * Packs written here from generated objects: blobs, and deltas (OFS or REF)
 * on an earlier object or on an id not in the pack (a thin pack), with the
 * header's size, the delta's sizes or the base distance sometimes off by a
 * little; valid zlib and trailer, so the parse reaches delta resolution.
 */
export const generatedPack = fc
  .array(
    fc.record({
      kind: fc.constantFrom('blob', 'blob', 'ofs', 'ref', 'thin'),
      data: fc.uint8Array({ maxLength: 120 }),
      base: fc.nat(),
      ops: fc.array(fc.oneof(fc.record({ off: fc.nat(), len: fc.integer({ min: 1, max: 200 }) }), fc.uint8Array({ minLength: 1, maxLength: 12 })), {
        maxLength: 5,
      }),
      lie: fc.constantFrom(0, 0, 0, 0, 1, -1, 2),
      where: fc.constantFrom('size', 'src', 'dst', 'distance'),
    }),
    { minLength: 1, maxLength: 8 },
  )
  .map((objs) => {
    const parts: Buffer[] = [];
    const head = Buffer.from('PACK\0\0\0\x02\0\0\0\0', 'latin1');
    head.writeUInt32BE(objs.length, 8);
    parts.push(head);
    const made: { at: number; body: Buffer; oid: string }[] = [];
    let at = 12;
    const varint = (v: number) => {
      const out: number[] = [];
      do {
        let c = v & 0x7f;
        v = Math.floor(v / 128);
        if (v > 0) c |= 0x80;
        out.push(c);
      } while (v > 0);
      return Buffer.from(out);
    };
    for (const o of objs) {
      const lie = (w: string) => (o.where === w ? o.lie : 0);
      let entry: Buffer;
      let body: Buffer;
      if (o.kind === 'blob' || (made.length === 0 && o.kind !== 'thin')) {
        body = Buffer.from(o.data);
        entry = Buffer.concat([encodeObjectHeader(3, Math.max(0, body.length + lie('size'))), deflateSync(body)]);
      } else {
        const base = o.kind === 'thin' ? { at: 0, body: Buffer.from('thin base\n'), oid: 'ab'.repeat(20) } : made[o.base % made.length]!;
        const out: Buffer[] = [];
        const ins: Buffer[] = [];
        for (const op of o.ops) {
          if (op instanceof Uint8Array) {
            ins.push(Buffer.from([op.length]), Buffer.from(op));
            out.push(Buffer.from(op));
            continue;
          }
          if (base.body.length === 0) continue;
          const off = op.off % base.body.length;
          const len = Math.min(op.len, base.body.length - off);
          ins.push(Buffer.from([0x80 | 0x01 | 0x02 | 0x10 | 0x20, off & 0xff, (off >> 8) & 0xff, len & 0xff, (len >> 8) & 0xff]));
          out.push(base.body.subarray(off, off + len));
        }
        body = Buffer.concat(out);
        const delta = Buffer.concat([varint(Math.max(0, base.body.length + lie('src'))), varint(Math.max(0, body.length + lie('dst'))), ...ins]);
        if (o.kind === 'ofs') {
          let n = Math.max(1, at - base.at + lie('distance'));
          const bytes = [n & 0x7f];
          while ((n = Math.floor(n / 128)) > 0) {
            n--;
            bytes.unshift(0x80 | (n & 0x7f));
          }
          entry = Buffer.concat([encodeObjectHeader(6, delta.length + lie('size')), Buffer.from(bytes), deflateSync(delta)]);
        } else {
          entry = Buffer.concat([encodeObjectHeader(7, delta.length + lie('size')), Buffer.from(base.oid, 'hex'), deflateSync(delta)]);
        }
      }
      made.push({ at, body, oid: objectId('blob', body) });
      parts.push(entry);
      at += entry.length;
    }
    return packTrailerFixed(Buffer.concat([...parts, Buffer.alloc(20)]));
  });

export const gitPackTarget: FuzzTarget = {
  name: 'git-pack',
  about:
    'PackReceiver (received packs, deltas resolved in and outside the pack): a PackData or io_error; each object is found under the id of its bytes; the .idx written reads back',
  arbitrary: (seeds) =>
    mix(
      randomInput(),
      mutatedBytes(seeds, { tokens: PACK_TOKENS, fixup: packTrailerFixed }),
      generatedPack,
      generatedPack.chain((p) => mutatedBytes([p], { fixup: packTrailerFixed })),
    ),
  async check(input) {
    const dir = join(scratchDir(), 'pack');
    const rx = new PackReceiver(dir, 1 << 20);
    const data = await refusedOnlyAsync(async () => {
      try {
        for (let i = 0; i < input.length; i += 97) rx.push(input.subarray(i, i + 97));
        return await rx.finish(async (oid) => (oid === 'ab'.repeat(20) ? { type: 'blob', body: Buffer.from('thin base\n') } : null));
      } catch (e) {
        rx.abort();
        throw e;
      }
    }, ['io_error']);
    if (data === undefined) return;
    try {
      for (let k = 0; k < data.count; k++) {
        const oid = data.oidOf(k);
        const obj = data.get(oid);
        check(obj !== null, `object ${oid} of the pack cannot be read`);
        check(objectId(obj!.type, obj!.body) === oid, `object ${k} is known under an id that is not that of its bytes`);
      }
      const idx = data.idxFile();
      check(idxCount(idx) === data.unique, `the .idx written counts ${idxCount(idx)} objects, the pack ${data.unique}`);
    } finally {
      data.discard();
    }
  },
  runs: 250,
};

/**
 * A strict reading of git's delta format (gitformat-pack "Deltified
 * representation"), written apart from store/git-pack.ts: the reference the
 * codec is compared with.
 */
function referenceDelta(delta: Buffer, base: Buffer): Buffer | null {
  let pos = 0;
  const varint = (): number | null => {
    let v = 0;
    let shift = 0;
    for (;;) {
      if (pos >= delta.length) return null;
      const c = delta[pos++]!;
      v += (c & 0x7f) * 2 ** shift;
      shift += 7;
      if (!(c & 0x80)) return v;
    }
  };
  const src = varint();
  const dst = varint();
  if (src === null || dst === null || src !== base.length || dst > 64 << 20) return null;
  const out: Buffer[] = [];
  let n = 0;
  while (pos < delta.length) {
    const op = delta[pos++]!;
    if (op & 0x80) {
      const bytes: number[] = [];
      for (let bit = 0; bit < 7; bit++) {
        if (op & (1 << bit)) {
          if (pos >= delta.length) return null;
          bytes.push(delta[pos++]! * 2 ** (8 * (bit < 4 ? bit : bit - 4)));
        } else bytes.push(0);
      }
      const off = bytes[0]! + bytes[1]! + bytes[2]! + bytes[3]!;
      const len = bytes[4]! + bytes[5]! + bytes[6]! || 0x10000;
      if (off + len > base.length || n + len > dst) return null;
      out.push(base.subarray(off, off + len));
      n += len;
    } else if (op > 0) {
      if (pos + op > delta.length || n + op > dst) return null;
      out.push(delta.subarray(pos, pos + op));
      pos += op;
      n += op;
    } else return null;
  }
  return n === dst ? Buffer.concat(out) : null;
}

/** A delta input: 2 bytes of base length, the base, then the delta. */
function splitDelta(input: Buffer): { base: Buffer; delta: Buffer } {
  const n = input.length >= 2 ? input.readUInt16BE(0) % Math.max(1, input.length - 1) : 0;
  return { base: input.subarray(2, 2 + n), delta: input.subarray(2 + n) };
}

/** Deltas that follow the format, over a random base (copies, inserts, cuts). */
const wellFormedDelta = fc
  .record({
    base: fc.uint8Array({ minLength: 1, maxLength: 300 }),
    ops: fc.array(fc.oneof(fc.record({ off: fc.nat(), len: fc.integer({ min: 1, max: 80 }) }), fc.uint8Array({ minLength: 1, maxLength: 20 })), {
      maxLength: 8,
    }),
  })
  .map(({ base, ops }) => {
    const b = Buffer.from(base);
    const varint = (v: number) => {
      const out: number[] = [];
      do {
        let c = v & 0x7f;
        v = Math.floor(v / 128);
        if (v > 0) c |= 0x80;
        out.push(c);
      } while (v > 0);
      return out;
    };
    const body: number[] = [];
    let size = 0;
    for (const op of ops) {
      if (op instanceof Uint8Array) {
        body.push(op.length, ...op);
        size += op.length;
        continue;
      }
      const off = op.off % b.length;
      const len = Math.min(op.len, b.length - off);
      const bytes = [off & 0xff, (off >> 8) & 0xff, (off >> 16) & 0xff, (off >> 24) & 0xff, len & 0xff, (len >> 8) & 0xff, (len >> 16) & 0xff];
      let code = 0x80;
      const args: number[] = [];
      bytes.forEach((x, i) => {
        if (x !== 0) {
          code |= 1 << i;
          args.push(x);
        }
      });
      body.push(code, ...args);
      size += len;
    }
    const delta = Buffer.from([...varint(b.length), ...varint(size), ...body]);
    const head = Buffer.alloc(2);
    head.writeUInt16BE(b.length);
    return Buffer.concat([head, b, delta]);
  });

export const gitDeltaTarget: FuzzTarget = {
  name: 'git-delta',
  about: 'applyDelta against a strict reference reading of the delta format: the same bytes, or io_error where the reference refuses',
  arbitrary: (seeds) =>
    mix(
      randomInput(),
      wellFormedDelta,
      mutatedBytes(seeds),
      wellFormedDelta.chain((d) => mutatedBytes([d])),
    ),
  check(input) {
    const { base, delta } = splitDelta(input);
    const got = refusedOnly(() => applyDelta(delta, base), ['io_error']);
    const want = referenceDelta(delta, base);
    if (want === null) check(got === undefined, `applyDelta accepted a delta the format refuses (${got?.length} bytes)`);
    else check(got?.equals(want) === true, 'applyDelta refused or changed a well-formed delta');
  },
  runs: 1000,
};

/** A stored pack and its .idx: 4 bytes of .idx length, the .idx, the pack. */
export const gitPackDiskTarget: FuzzTarget = {
  name: 'git-pack-disk',
  about: 'DiskPacks reading a stored pack through its version-2 .idx (both mutated): objects or io_error',
  arbitrary: (seeds) => mix(mutatedBytes(seeds, { tokens: PACK_TOKENS }), mutatedBytes(seeds, { tokens: PACK_TOKENS, fixup: packTrailerFixed })),
  check(input) {
    if (input.length < 4) return;
    const n = Math.min(input.readUInt32BE(0), input.length - 4);
    const idx = input.subarray(4, 4 + n);
    const pack = input.subarray(4 + n);
    const dir = join(scratchDir(), 'disk', 'objects', 'pack');
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(join(dir, 'pack-fuzz.idx'), idx);
    fs.writeFileSync(join(dir, 'pack-fuzz.pack'), pack);
    const packs = new DiskPacks(dir);
    try {
      const count = idxCount(idx);
      for (let k = 0; k < Math.min(count, 64); k++) {
        const oid = idx.toString('hex', 8 + 1024 + k * 20, 8 + 1024 + k * 20 + 20);
        const obj = refusedOnly(() => packs.read(oid), ['io_error']);
        if (obj) check(['commit', 'tree', 'blob', 'tag'].includes(obj.type), `object type ${obj.type}`);
      }
      refusedOnly(() => packs.read('0'.repeat(40)), ['io_error']);
    } finally {
      packs.close();
    }
  },
  runs: 250,
};

// --- the index ---------------------------------------------------------------

/** An index file with its SHA-1 trailer recomputed. */
function indexTrailerFixed(b: Buffer): Buffer {
  return packTrailerFixed(b);
}

const INDEX_TOKENS = [
  Buffer.from('DIRC'),
  Buffer.from('link'),
  Buffer.from('sdir'),
  Buffer.from('TREE'),
  Buffer.from('REUC'),
  Buffer.from([0, 0, 0, 2]),
  Buffer.from([0, 0, 0, 3]),
  Buffer.from([0, 0, 0, 4]),
  Buffer.from([0x40, 0]),
  Buffer.from([0x0f, 0xff]),
];

export const gitIndexTarget: FuzzTarget = {
  name: 'git-index',
  about: 'parseIndex (versions 2-4, the sdir extension, a split index recognised): a ParsedIndex or io_error; entries written again read the same',
  arbitrary: (seeds) =>
    mix(
      randomInput(),
      mutatedBytes(seeds, { tokens: INDEX_TOKENS, fixup: indexTrailerFixed }),
      mutatedBytes(seeds, { tokens: INDEX_TOKENS, fixup: indexTrailerFixed }),
    ),
  check(input) {
    const parsed = refusedOnly(() => parseIndex(input), ['io_error']);
    if (parsed === undefined || parsed.version === 4 || parsed.split) return;
    const valid = parsed.entries.every((e) => Buffer.from(e.path, 'utf8').length < 0xfff && !e.path.includes('\0') && !e.path.includes('\ufffd'));
    if (!valid) return;
    const again = refusedOnly(() => parseIndex(serializeIndex(parsed.entries)), ['io_error']);
    check(again !== undefined && JSON.stringify(again.entries) === JSON.stringify(parsed.entries), 'an index written again reads differently');
  },
  runs: 400,
};

export function isIoError(e: unknown): boolean {
  return e instanceof VouchError && e.code === 'io_error';
}

// --- smart HTTP answers, from a loopback server ---------------------------------------

let answer: Buffer = Buffer.alloc(0);
let server: Promise<string> | null = null;
/** A server on 127.0.0.1 answering every request with `answer` (the content type a git server gives for the path). */
function smartServer(): Promise<string> {
  server ??= new Promise((resolve) => {
    const s = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const path = req.url ?? '';
        const service = /service=(git-[a-z-]+)/.exec(path)?.[1];
        res.writeHead(200, { 'content-type': service ? `application/x-${service}-advertisement` : 'application/x-git-upload-pack-result' });
        res.end(answer);
      });
    });
    s.listen(0, '127.0.0.1', () => {
      s.unref();
      resolve(`http://127.0.0.1:${(s.address() as { port: number }).port}/chain.git`);
    });
  });
  return server;
}

const dispatcher = defaultDispatcher();
const WANT = '1'.repeat(40);

export const gitSmartHttpTarget: FuzzTarget = {
  name: 'git-smart-http',
  about: 'what a git server answers over smart HTTP (ref advertisements for fetch and push, the side-band upload-pack result): refs, a pack stream or io_error',
  arbitrary: (seeds) =>
    mix(
      mutatedBytes(seeds, { tokens: PKT_TOKENS }),
      mutatedBytes(seeds, { tokens: [...PKT_TOKENS, '0005\x01', '0005\x02', '0009\x03fail', 'shallow ', 'unshallow '] }),
    ),
  async check(input) {
    answer = input;
    const url = await smartServer();
    const opts = { dispatcher, timeoutMs: 5000, stallMs: 5000 };
    const refs = await refusedOnlyAsync(() => discoverRefs(url, opts), ['io_error']);
    if (refs) for (const [name, oid] of refs.refs) check(name === 'refs/heads/main' && /^[0-9a-f]{40}$/.test(oid), `ref ${name} ${oid}`);
    const pushRefs = await refusedOnlyAsync(() => fetchRefs(parseRemote(url), resolvedTimeouts(), dispatcher), ['io_error']);
    if (pushRefs?.main) check(/^[0-9a-f]{40}$/.test(pushRefs.main), `main ${pushRefs.main}`);
    let packBytes = 0;
    const got = await refusedOnlyAsync(
      () =>
        uploadPack(url, opts, new Set(['side-band-64k', 'shallow']), WANT, [], [], (b) => {
          packBytes += b.length;
        }),
      ['io_error'],
    );
    if (got) check(got.bytes === packBytes && packBytes <= input.length, `pack bytes ${got.bytes} / ${packBytes}`);
  },
  runs: 80,
};

/** Bodies of what `cat-file --batch` answers, by a strict reading of its format (null: not that format). */
function referenceCatFile(input: Buffer, max: number): { oid: string; type?: string; body?: string }[] | null {
  const out: { oid: string; type?: string; body?: string }[] = [];
  let at = 0;
  while (at < input.length) {
    const nl = input.indexOf(10, at);
    if (nl < 0) return input.length - at > 128 ? null : out; // a header still coming
    if (nl - at > 128) return null;
    const m = /^([0-9a-f]{40}) (?:(missing|ambiguous)|(blob|tree|commit|tag) (\d{1,12}))$/.exec(input.toString('latin1', at, nl));
    if (!m) return null;
    at = nl + 1;
    if (m[2]) {
      out.push({ oid: m[1]! });
      continue;
    }
    const size = Number(m[4]);
    if (size > max) return null;
    if (at + size >= input.length) return out; // cut short: what came whole so far
    if (input[at + size] !== 10) return null;
    out.push({ oid: m[1]!, type: m[3]!, body: input.toString('latin1', at, at + size) });
    at += size + 1;
  }
  return out;
}

export const gitCatFileTarget: FuzzTarget = {
  name: 'git-cat-file',
  about:
    'the answers of git cat-file --batch (store/git-cat-file.ts AnswerParser), fed in pieces: the objects a strict reading finds, or io_error where it refuses',
  arbitrary: (seeds) => mix(randomInput(), mutatedBytes(seeds, { tokens: [' blob ', ' tree ', ' missing\n', '\n', ' 0\n', ' 99999\n'] })),
  check(input) {
    const got: { oid: string; type?: string; body?: string }[] = [];
    const piece = 1 + (input.length % 97);
    const ok = refusedOnly(() => {
      const p = new AnswerParser(4096, (oid, o) => got.push(o ? { oid, type: o.type, body: o.body.toString('latin1') } : { oid }));
      for (let i = 0; i < input.length; i += piece) p.push(input.subarray(i, i + piece));
      return true;
    }, ['io_error']);
    const want = referenceCatFile(input, 4096);
    if (want === null) check(ok === undefined, `accepted answers a strict reading refuses (${got.length} objects)`);
    else {
      check(ok === true, 'refused answers a strict reading accepts');
      check(JSON.stringify(got) === JSON.stringify(want), 'objects differ from a strict reading');
    }
  },
  runs: 1000,
};
