/**
 * How a `kind: oci` route sends a blob it holds in memory (issue 36, item 2):
 * over a real HTTP server and client on 127.0.0.1, `sendQueued` writes views
 * of the held bytes in SEND_PIECE pieces, keeping up to SEND_QUEUE of them
 * queued on the socket.
 * Must hold: the client receives exactly the bytes, in order, from a fast
 * reader and from one that pauses; the event loop tops the queue up about
 * once per SEND_QUEUE (each turn calls `progress`), not once per piece; a
 * client that goes away stops the sending.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SEND_QUEUE, sendQueued } from '../../gateway/ecosystems/oci-route.ts';

const MiB = 1024 * 1024;
const body = Buffer.alloc(96 * MiB);
for (let i = 0; i < body.length; i += 4) body.writeUInt32LE(Math.imul(i, 2654435761) >>> 0, i);
const digest = createHash('sha256').update(body).digest('hex');
let server: Server;
let url = '';
let turns = 0;
let finishedSends = 0;

test.before(async () => {
  server = createServer((_req, res) => {
    res.writeHead(200, { 'content-length': String(body.length), 'content-type': 'application/octet-stream' });
    res.on('finish', () => finishedSends++);
    sendQueued(res, body, () => turns++);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
});

test.after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

/** GETs the body; `pauseMs` > 0 pauses reading that long after each 4 MiB. */
function get(pauseMs: number): Promise<{ hex: string; size: number }> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      const h = createHash('sha256');
      let size = 0;
      let mark = 0;
      res.on('data', (c: Buffer) => {
        h.update(c);
        size += c.length;
        if (pauseMs > 0 && size - mark >= 4 * MiB) {
          mark = size;
          res.pause();
          setTimeout(() => res.resume(), pauseMs);
        }
      });
      res.on('end', () => resolve({ hex: h.digest('hex'), size }));
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

test('the whole body arrives, in order, to a fast reader and to one that pauses; about one event-loop turn per SEND_QUEUE, not per piece', async () => {
  for (const pauseMs of [0, 15]) {
    turns = 0;
    const got = await get(pauseMs);
    assert.is(got.size, body.length);
    assert.is(got.hex, digest);
    // One turn to start, one per queue drained (the socket's own buffers hold more besides); 1 MiB pieces each after a drain would be ~96.
    const most = Math.ceil(body.length / SEND_QUEUE) + 2;
    assert.ok(turns <= most, `${turns} turns for ${body.length / MiB} MiB (at most ${most})`);
  }
});

test('a client that goes away stops the sending', async () => {
  await new Promise((r) => setTimeout(r, 300)); // the responses before this one have finished on the server's side too
  const before = finishedSends;
  await new Promise<void>((resolve, reject) => {
    const req = request(url, (res) => {
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size >= 2 * MiB) req.destroy();
      });
      res.on('close', () => resolve());
    });
    req.on('error', () => resolve());
    req.on('close', () => resolve());
    req.end();
    setTimeout(() => reject(new Error('no close')), 20_000).unref();
  });
  await new Promise((r) => setTimeout(r, 200));
  assert.is(finishedSends, before, 'the response did not finish: it was torn down');
});

test.run();
