/**
 * Fuzz targets of the origin client's HTTP/1.1 framing (artifacts/h1/parser.ts):
 * response heads through `HeadReader` and bodies through `ChunkedDecoder`.
 * Property: a result or `origin_error`; the same outcome whole or read in
 * small pieces; a decoded body never longer than its input; chunked bodies
 * written here decode to their data (round trip).
 */
import fc from 'fast-check';
import { ChunkedDecoder, HeadReader, type ResponseHead } from '../../../artifacts/h1/parser.ts';
import { check, mix, mutatedBytes, mutatedLines, randomInput, refusedOnly, type FuzzTarget } from '../target.ts';

const HEAD_TOKENS = ['HTTP/1.1 ', 'HTTP/1.0 ', '200', '100', '101', '204', '304', ' OK', '\r\n', '\r\n\r\n', '\n', ':', ', ',
  'Content-Length: ', 'Transfer-Encoding: chunked', 'Connection: close', 'Connection: keep-alive', 'Keep-Alive: timeout=', '99999999999999999', '\x00', '\x7f', '\xff', ' \t'];

function readHeads(input: Buffer, piece: number): { head: ResponseHead; rest: Buffer } | null | 'refused' {
  const r = new HeadReader();
  let out: { head: ResponseHead; rest: Buffer } | null = null;
  const got = refusedOnly(() => {
    for (let i = 0; i < input.length && out === null; i += piece) out = r.push(input.subarray(i, i + piece));
    return true;
  }, ['origin_error']);
  return got === undefined ? 'refused' : out;
}

function headOutcome(o: ReturnType<typeof readHeads>): string {
  if (o === null || o === 'refused') return String(o);
  return JSON.stringify(o.head);
}

export const h1Head: FuzzTarget = {
  name: 'h1-head',
  about: 'HeadReader/parseHead: a head or origin_error, the same whole or in 1- and 5-byte reads; a sane framing',
  arbitrary: (seeds) => mix(randomInput(HEAD_TOKENS), mutatedBytes(seeds, { tokens: HEAD_TOKENS }), mutatedLines(seeds, ['Content-Length: 1, 1', 'Content-Length: 2', 'Transfer-Encoding: gzip, chunked', 'HTTP/1.1 100 Continue\r', 'X: \x01', '\r'])),
  check(input) {
    const whole = readHeads(input, Math.max(1, input.length));
    check(headOutcome(whole) === headOutcome(readHeads(input, 1)), 'byte-by-byte reads end differently from one read');
    check(headOutcome(whole) === headOutcome(readHeads(input, 5)), '5-byte reads end differently from one read');
    if (whole !== null && whole !== 'refused') {
      const h = whole.head;
      check(h.statusCode >= 200 && h.statusCode <= 999, `final status ${h.statusCode}`);
      if (h.mode === 'length') check(Number.isSafeInteger(h.contentLength) && h.contentLength! > 0, `content-length ${h.contentLength}`);
      check(h.idleMs >= 0 && Number.isFinite(h.idleMs), `idleMs ${h.idleMs}`);
    }
  },
  runs: 400,
};

function decodeAll(input: Buffer, piece: number): { data: Buffer; complete: boolean } | undefined {
  const d = new ChunkedDecoder();
  const parts: Buffer[] = [];
  return refusedOnly(() => {
    for (let i = 0; i < input.length; i += piece) {
      let view = input.subarray(i, Math.min(input.length, i + piece));
      for (let guard = 0; ; guard++) {
        check(guard < 1_000_000, 'decode made no progress');
        const stop = d.decode(view, (b) => { parts.push(Buffer.from(b)); return true; });
        if (stop.state === 'partial') break;
        if (stop.state === 'complete') return { data: Buffer.concat(parts), complete: true };
        check(stop.at > 0 || view.length === 0, 'a sliced decode that took nothing');
        view = view.subarray(stop.at);
      }
    }
    return { data: Buffer.concat(parts), complete: false };
  }, ['origin_error']);
}

/** A chunked coding of `data`, cut at `cuts`, with extensions and trailers: what an origin may send. */
const chunkedBody = fc.record({
  data: fc.uint8Array({ maxLength: 600 }),
  cuts: fc.array(fc.integer({ min: 1, max: 200 }), { minLength: 1, maxLength: 8 }),
  upper: fc.boolean(),
  ext: fc.constantFrom('', ';a=b', ' ;x', ';q="v"'),
  trailers: fc.constantFrom('', 'Expires: 0\r\n', 'A: b\r\nC-d: e f\r\n'),
}).map(({ data, cuts, upper, ext, trailers }) => {
  const out: Buffer[] = [];
  let i = 0;
  let k = 0;
  while (i < data.length) {
    const n = Math.min(cuts[k++ % cuts.length]!, data.length - i);
    const hex = n.toString(16);
    out.push(Buffer.from(`${upper ? hex.toUpperCase() : hex}${ext}\r\n`, 'latin1'), Buffer.from(data.subarray(i, i + n)), Buffer.from('\r\n'));
    i += n;
  }
  out.push(Buffer.from(`0${ext}\r\n${trailers}\r\n`, 'latin1'));
  return { data: Buffer.from(data), body: Buffer.concat(out) };
});

const CHUNK_TOKENS = ['\r\n', '0\r\n\r\n', 'ffffffffffff\r\n', '1000000000000\r\n', ';', '\r', '\n', 'X: y\r\n', '\x00', ' '];

export const h1Chunked: FuzzTarget = {
  name: 'h1-chunked',
  about: 'ChunkedDecoder: data or origin_error, the same whole or in 1- and 7-byte reads, never more data than input; round trip of generated codings',
  arbitrary: (seeds) => mix(randomInput(CHUNK_TOKENS), mutatedBytes(seeds, { tokens: CHUNK_TOKENS }), chunkedBody.map((c) => c.body)),
  check(input) {
    const whole = decodeAll(input, Math.max(1, input.length));
    for (const piece of [1, 7]) {
      const split = decodeAll(input, piece);
      check((whole === undefined) === (split === undefined), `${piece}-byte reads refuse differently from one read`);
      if (whole !== undefined && split !== undefined && whole.complete) {
        check(split.complete && split.data.equals(whole.data), `${piece}-byte reads decode differently`);
      }
    }
    if (whole !== undefined) check(whole.data.length <= input.length, 'decoded more bytes than it was given');
  },
  runs: 400,
};

/** Not a byte target: the encoder side, checked by fast-check directly (see fuzz.test.ts). */
export const chunkedRoundTrip = fc.property(chunkedBody, fc.integer({ min: 1, max: 50 }), ({ data, body }, piece) => {
  const got = decodeAll(body, piece);
  check(got !== undefined && got.complete && got.data.equals(data), 'a chunked body written by the rules did not decode to its data');
});
