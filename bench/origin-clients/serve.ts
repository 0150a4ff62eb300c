/**
 * `node --import tsx bench/origin-clients/serve.ts CLIENT CONFIG [PART...]`:
 * a gateway as `vouch serve --config CONFIG` runs it, from the sources, whose
 * origin fetcher uses CLIENT (`h1`, the shipped one; `undici`; `node-http`),
 * for the gateway bench's side-by-side rows (issue 33 items 2 and 5). PARTs
 * swap a hot-path part: `cache=clock` (the CLOCK cache lru-cache replaced;
 * `cache=lru` is the default's own), `batch=off` (one write per answer),
 * `sink=pino-async` or `sink=pino-sync` (pino.destination on fd 2 for the
 * log). Stops on SIGTERM or SIGINT.
 */
import { LRUCache } from 'lru-cache';
import pino from 'pino';
import { loadConfigFile } from '../../gateway/config.ts';
import { startGateway, type StartOptions } from '../../gateway/gateway.ts';
import { createLogger } from '../../gateway/observability/logger.ts';
import type { HotPathParts } from '../../gateway/http/server.ts';
import type { OriginFetcherOptions } from '../../artifacts/origin-fetcher.ts';
import { ClockCache } from '../hot-path/clock-cache.ts';
import { NodeHttpOriginClient } from './node-http.ts';
import { UndiciOriginClient } from './undici.ts';

export const ORIGIN_CLIENTS: Record<string, OriginFetcherOptions['transport'] | undefined> = {
  h1: undefined,
  undici: (o) => new UndiciOriginClient(o),
  'node-http': (o) => new NodeHttpOriginClient(o),
};

/** The hot-path parts by `name=value`, as StartOptions. */
function partOptions(parts: string[]): StartOptions {
  const hotPath: HotPathParts = {};
  const o: StartOptions = { hotPath };
  for (const part of parts) {
    if (part === 'cache=clock') hotPath.answerCache = (maxBytes) => new ClockCache(maxBytes);
    else if (part === 'cache=lru') hotPath.answerCache = (maxBytes) => new LRUCache({ maxSize: maxBytes, sizeCalculation: (v) => Math.max(1, v.bytes) });
    else if (part === 'batch=off') hotPath.batching = false;
    else if (part === 'batch=on') hotPath.batching = true;
    else if (part === 'sink=pino-async' || part === 'sink=pino-sync') {
      const dest = pino.destination(part === 'sink=pino-sync' ? { dest: 2, sync: true } : { dest: 2, sync: false, minLength: 4096 });
      if (part === 'sink=pino-async') process.on('exit', () => dest.flushSync());
      o.log = createLogger(undefined, (line) => dest.write(line));
    } else throw new Error(`serve.ts: unknown part ${part}`);
  }
  return o;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [client, configFile, ...parts] = process.argv.slice(2);
  if (client === undefined || !(client in ORIGIN_CLIENTS) || configFile === undefined) {
    process.stderr.write(`usage: serve.ts ${Object.keys(ORIGIN_CLIENTS).join('|')} CONFIG [cache=clock|lru] [batch=off] [sink=pino-async|pino-sync]\n`);
    process.exit(2);
  }
  const transport = ORIGIN_CLIENTS[client];
  const gw = await startGateway(loadConfigFile(configFile, { dev: false }), { ...partOptions(parts), ...(transport ? { originTransport: transport } : {}) });
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.on(signal, () => {
      gw.close().finally(() => process.exit(0));
      setTimeout(() => process.exit(0), 12_000).unref();
    });
  await gw.ready;
}
