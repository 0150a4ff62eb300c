/**
 * store/smart-http.ts exchange(): what it delivers to its sink is not kept.
 * A 384 MiB answer from a node:http server on 127.0.0.1, handed to a sink
 * that drops it, must not raise this process's memory by more than a
 * fraction of it (racing each chunk against one long-lived abort promise
 * once kept every chunk until the exchange ended: a 710 MB pack at
 * 1,000,000 blocks).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { VouchError } from '../../chain/errors.ts';
import { exchange } from '../../store/smart-http.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const MiB = 1 << 20;

test('a 384 MiB answer streamed to a sink that drops it: memory stays flat, every byte delivered', async () => {
  const total = 384 * MiB;
  const piece = Buffer.alloc(64 * 1024, 0x61);
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    let sent = 0;
    const more = (): void => {
      while (sent < total) {
        sent += piece.length;
        if (!res.write(piece)) {
          res.once('drain', more);
          return;
        }
      }
      res.end();
    };
    more();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    gc();
    const before = process.memoryUsage();
    let got = 0;
    let peak = 0;
    await exchange({
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/big`,
      method: 'GET',
      headers: {},
      body: null,
      timeoutMs: 60_000,
      stallMs: 10_000,
      maxBytes: total,
      onHead: (status) => {
        assert.is(status, 200);
        return (chunk) => {
          got += chunk.length;
          if ((got & (16 * MiB - 1)) < chunk.length) {
            gc();
            const m = process.memoryUsage();
            peak = Math.max(peak, m.arrayBuffers - before.arrayBuffers + m.heapUsed - before.heapUsed);
          }
        };
      },
      fail: (why) => new VouchError('io_error', why),
      tooLarge: () => new VouchError('io_error', 'too large'),
    });
    assert.is(got, total);
    assert.ok(peak < 48 * MiB, `held ${Math.round(peak / MiB)} MiB while streaming ${total / MiB} MiB`);
  } finally {
    server.close();
  }
});

test.run();
