/**
 * The baseline and origin servers of `npm run bench -- gateway`, each its
 * own process (`node --import tsx bench/gateway-servers.ts MODE ...`), so it
 * competes for the CPU like the gateway. Each prints `listening
 * http://127.0.0.1:PORT` and stops on SIGTERM. Modes:
 * - `origin ROUTES_JSON`: pattern bytes per path, streamed;
 * - `proxy ORIGIN`: an unverified streaming pass-through;
 * - `hash-proxy ORIGIN`: the same, but each blob (`GET …/blobs/sha256:…`) held
 *   whole, hashed as it arrives and sent only if it matches (storeAndForward);
 * - `bare BODY_FILE ETAG` and `bare-batched`: one JSON body with the
 *   lookups' headers, written at once or as gateway/http/answer-batch.ts does;
 * - `answers ANSWERS_FILE`: each lookup's own answer from a Map (the file: one JSON array [query, text, etag] a line);
 * - `blob SIZE`: SIZE random bytes in one `res.end()`.
 */
import { createServer, request as httpRequest, Agent, type IncomingMessage, type OutgoingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { AddressInfo } from 'node:net';
import { OriginServer, pattern } from '../test/helpers/origin-server.ts';
import { AnswerBatch } from '../gateway/http/answer-batch.ts';

const HOST = '127.0.0.1';

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, HOST, () => resolve());
  });
  return `http://${HOST}:${(server.address() as AddressInfo).port}`;
}

function onStop(stop: () => Promise<void>): void {
  let stopping = false;
  const handler = () => {
    if (stopping) return;
    stopping = true;
    stop().finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 3_000).unref();
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}

async function origin(routesJson: string): Promise<void> {
  const routes = JSON.parse(routesJson) as Record<string, { size: number; seed: number }>;
  const server = await OriginServer.start({ host: HOST });
  for (const [path, r] of Object.entries(routes)) server.route(path, { body: pattern(r.size, r.seed) });
  // The helper keeps a record per request; a long benchmark makes thousands, which is fine.
  onStop(() => server.close());
  console.log(`listening ${server.origin}`);
}

/** A blob's digest in a GET's path (`…/blobs/sha256:HEX`), or null. */
const BLOB = /\/blobs\/sha256:([0-9a-f]{64})$/;

/**
 * Receives a blob whole into one buffer of its Content-Length, hashing each
 * piece as it arrives, and sends it only if it hashes to `hex`.
 */
function storeAndForward(ures: IncomingMessage, res: ServerResponse, hex: string, out: OutgoingHttpHeaders): void {
  const size = Number(ures.headers['content-length']);
  if (ures.statusCode !== 200 || !Number.isSafeInteger(size) || size < 0 || size > 2 ** 31) {
    res.writeHead(ures.statusCode ?? 502, out);
    ures.pipe(res);
    return;
  }
  const body = Buffer.allocUnsafeSlow(size);
  const hash = createHash('sha256');
  let at = 0;
  ures.on('data', (piece: Buffer) => {
    if (at + piece.length > size) return void ures.destroy(new Error('longer than its content-length'));
    piece.copy(body, at);
    at += piece.length;
    hash.update(piece);
  });
  ures.on('end', () => {
    if (at !== size || hash.digest('hex') !== hex) return void res.writeHead(502, { 'content-length': '0' }).end();
    res.writeHead(200, out);
    res.end(body);
  });
}

async function proxy(originBase: string, verify: boolean): Promise<void> {
  const target = new URL(originBase);
  if (target.hostname !== HOST) throw new Error(`proxy: origin ${originBase} is not ${HOST}`);
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const server = createServer((req, res) => {
    const headers = { ...req.headers, host: target.host };
    delete headers.connection;
    const blob = verify && req.method === 'GET' ? BLOB.exec(req.url ?? '') : null;
    if (blob !== null) delete headers.range;
    const up = httpRequest({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers, agent }, (ures) => {
      const out = { ...ures.headers };
      delete out.connection;
      delete out['keep-alive'];
      ures.on('error', () => res.destroy());
      if (blob !== null) return storeAndForward(ures, res, blob[1]!, out);
      res.writeHead(ures.statusCode ?? 502, out);
      ures.pipe(res);
    });
    up.on('error', () => {
      if (!res.headersSent) res.writeHead(502, { 'content-length': '0' }).end();
      else res.destroy();
    });
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  });
  server.keepAliveTimeout = 5_000;
  const url = await listen(server);
  onStop(async () => {
    server.closeAllConnections();
    server.close();
    agent.destroy();
  });
  console.log(`listening ${url}`);
}

/** A lookup's answer with the same header set as the gateway's (http-util sendJsonTagged + ETag). */
function sendAnswer(res: ServerResponse, body: Buffer, etag: string): void {
  res.writeHead(200, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': body.length,
    'x-content-type-options': 'nosniff',
    'cache-control': 'no-cache',
    etag,
  });
  res.end(body);
}

/** Listens with the gateway's keep-alive timeout, says where, and closes every connection on SIGTERM. */
async function serve(server: Server): Promise<void> {
  server.keepAliveTimeout = 5_000;
  const url = await listen(server);
  onStop(async () => {
    server.closeAllConnections();
    server.close();
  });
  console.log(`listening ${url}`);
}

async function bare(bodyFile: string, etag: string): Promise<void> {
  const body = readFileSync(bodyFile);
  await serve(
    createServer((req, res) => {
      req.resume();
      sendAnswer(res, body, etag);
    }),
  );
}

async function bareBatched(bodyFile: string, etag: string): Promise<void> {
  const body = readFileSync(bodyFile);
  const batch = new AnswerBatch<ServerResponse>(
    (res) => sendAnswer(res, body, etag),
    (res) => res.destroy(),
  );
  await serve(
    createServer((req, res) => {
      req.resume();
      batch.add(res);
    }),
  );
}

async function answers(file: string): Promise<void> {
  const byQuery = new Map<string, { body: Buffer; etag: string }>();
  // One JSON array [query, text, etag] a line (bench/scale/gateway-rows.ts), read line by line: a million answers outgrow one string.
  for await (const line of createInterface({ input: createReadStream(file), crlfDelay: Number.POSITIVE_INFINITY })) {
    if (line === '') continue;
    const [q, text, etag] = JSON.parse(line) as [string, string, string];
    byQuery.set(q, { body: Buffer.from(text), etag });
  }
  await serve(
    createServer((req, res) => {
      req.resume();
      const target = req.url ?? '';
      const a = byQuery.get(target.slice(target.indexOf('?') + 1));
      if (a === undefined) res.writeHead(404, { 'content-length': '0' }).end();
      else sendAnswer(res, a.body, a.etag);
    }),
  );
}

async function blob(size: number): Promise<void> {
  const body = randomBytes(size);
  await serve(
    createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
      res.end(body);
    }),
  );
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'origin') await origin(args[0]!);
else if (mode === 'proxy') await proxy(args[0]!, false);
else if (mode === 'hash-proxy') await proxy(args[0]!, true);
else if (mode === 'bare') await bare(args[0]!, args[1]!);
else if (mode === 'bare-batched') await bareBatched(args[0]!, args[1]!);
else if (mode === 'answers') await answers(args[0]!);
else if (mode === 'blob') await blob(Number(args[0]));
else {
  console.error(
    'usage: gateway-servers.ts origin ROUTES_JSON | proxy ORIGIN | hash-proxy ORIGIN | bare BODY_FILE ETAG | bare-batched BODY_FILE ETAG | answers ANSWERS_FILE | blob SIZE',
  );
  process.exit(2);
}
