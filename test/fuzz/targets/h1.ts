/**
 * Fuzz targets of the origin client's HTTP/1.1 framing (artifacts/h1/parser.ts):
 * response heads through `HeadReader` and bodies through `ChunkedDecoder`.
 * Property: a result or `origin_error`; the same outcome whole or read in
 * small pieces; a decoded body never longer than its input; chunked bodies
 * written here decode to their data (round trip).
 */
import fc from 'fast-check';
import { createServer as createNetServer } from 'node:net';
import { ChunkedDecoder, HeadReader, type ResponseHead } from '../../../artifacts/h1/parser.ts';
import { H1Client } from '../../../artifacts/h1/pool.ts';
import { VouchError } from '../../../chain/errors.ts';
import { check, mix, mutatedBytes, mutatedLines, randomInput, refusedOnly, refusedOnlyAsync, type FuzzTarget } from '../target.ts';

const HEAD_TOKENS = [
  'HTTP/1.1 ',
  'HTTP/1.0 ',
  '200',
  '100',
  '101',
  '204',
  '304',
  ' OK',
  '\r\n',
  '\r\n\r\n',
  '\n',
  ':',
  ', ',
  'Content-Length: ',
  'Transfer-Encoding: chunked',
  'Connection: close',
  'Connection: keep-alive',
  'Keep-Alive: timeout=',
  '99999999999999999',
  '\x00',
  '\x7f',
  '\xff',
  ' \t',
];

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
  arbitrary: (seeds) =>
    mix(
      randomInput(HEAD_TOKENS),
      mutatedBytes(seeds, { tokens: HEAD_TOKENS }),
      mutatedLines(seeds, ['Content-Length: 1, 1', 'Content-Length: 2', 'Transfer-Encoding: gzip, chunked', 'HTTP/1.1 100 Continue\r', 'X: \x01', '\r']),
    ),
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
        const stop = d.decode(view, (b) => {
          parts.push(Buffer.from(b));
          return true;
        });
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
const chunkedBody = fc
  .record({
    data: fc.uint8Array({ maxLength: 600 }),
    cuts: fc.array(fc.integer({ min: 1, max: 200 }), { minLength: 1, maxLength: 8 }),
    upper: fc.boolean(),
    ext: fc.constantFrom('', ';a=b', ' ;x', ';q="v"'),
    trailers: fc.constantFrom('', 'Expires: 0\r\n', 'A: b\r\nC-d: e f\r\n'),
  })
  .map(({ data, cuts, upper, ext, trailers }) => {
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
  arbitrary: (seeds) =>
    mix(
      randomInput(CHUNK_TOKENS),
      mutatedBytes(seeds, { tokens: CHUNK_TOKENS }),
      chunkedBody.map((c) => c.body),
    ),
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
  check(got?.complete === true && got.data.equals(data), 'a chunked body written by the rules did not decode to its data');
});

// --- the whole origin client, against a raw loopback server --------------------------------

let rawAnswer: Buffer = Buffer.alloc(0);
let rawServer: Promise<number> | null = null;
/** A TCP server on 127.0.0.1 that answers each request head with `rawAnswer`, in pieces, then closes. */
function rawOrigin(): Promise<number> {
  rawServer ??= new Promise((resolve) => {
    const s = createNetServer((sock) => {
      let got = '';
      sock.on('error', () => {});
      sock.on('data', (d) => {
        got += d.toString('latin1');
        if (!got.includes('\r\n\r\n')) return;
        const a = rawAnswer;
        for (let i = 0; i < a.length; i += 1000) sock.write(a.subarray(i, i + 1000));
        sock.end();
      });
    });
    s.listen(0, '127.0.0.1', () => {
      s.unref();
      resolve((s.address() as { port: number }).port);
    });
  });
  return rawServer;
}

const client = new H1Client({ connectTimeoutMs: 5000, headersTimeoutMs: 5000, keepAliveTimeoutMs: 1000 });

export const h1ClientTarget: FuzzTarget = {
  name: 'h1-client',
  about:
    "the origin client (H1Client: head, framing, body stream, connection reuse) against a loopback server sending the input: a body or origin_error (or the socket's own error)",
  arbitrary: (seeds) =>
    mix(
      mutatedBytes(seeds, { tokens: [...HEAD_TOKENS, ...CHUNK_TOKENS] }),
      mutatedLines(seeds, ['Content-Length: 0', 'Content-Length: 100', 'Transfer-Encoding: chunked', '5\r', '0\r', 'HTTP/1.1 100 Continue\r']),
    ),
  async check(input) {
    rawAnswer = input;
    const port = await rawOrigin();
    const body = await refusedOnlyAsync(
      async () => {
        const res = await client.request({
          secure: false,
          host: '127.0.0.1',
          port,
          servername: undefined,
          hostHeader: `127.0.0.1:${port}`,
          path: '/a',
          headers: {},
          signal: AbortSignal.timeout(10_000),
        });
        const parts: Buffer[] = [];
        for await (const p of res.stream()) parts.push(p as Buffer);
        return { res, data: Buffer.concat(parts) };
      },
      ['origin_error'],
      (e) => (e instanceof VouchError && e.code === 'origin_error') || /^E[A-Z]+$/.test(String((e as NodeJS.ErrnoException)?.code)),
    );
    if (body === undefined) return;
    check(body.data.length <= input.length, 'a body longer than what was sent');
    if (body.res.contentLength !== null && body.res.contentLength > 0)
      check(body.data.length === body.res.contentLength, `a body of ${body.data.length} bytes where ${body.res.contentLength} were declared`);
  },
  runs: 150,
};
