/**
 * `node --import tsx bench/origin-clients/serve.ts CLIENT CONFIG`: a gateway
 * as `vouch serve --config CONFIG` runs it, from the sources, whose origin
 * fetcher uses CLIENT (`h1`, the shipped one; `undici`; `node-http`), for
 * the gateway bench's side-by-side origin rows (VOUCH_BENCH_ORIGIN_COMPARE).
 * Stops on SIGTERM or SIGINT.
 */
import { loadConfigFile } from '../../gateway/config.ts';
import { startGateway } from '../../gateway/gateway.ts';
import type { OriginFetcherOptions } from '../../artifacts/origin-fetcher.ts';
import { NodeHttpOriginClient } from './node-http.ts';
import { UndiciOriginClient } from './undici.ts';

export const ORIGIN_CLIENTS: Record<string, OriginFetcherOptions['transport'] | undefined> = {
  h1: undefined,
  undici: (o) => new UndiciOriginClient(o),
  'node-http': (o) => new NodeHttpOriginClient(o),
};

const [client, configFile] = process.argv.slice(2);
if (import.meta.url === `file://${process.argv[1]}`) {
  if (client === undefined || !(client in ORIGIN_CLIENTS) || configFile === undefined) {
    process.stderr.write(`usage: serve.ts ${Object.keys(ORIGIN_CLIENTS).join('|')} CONFIG\n`);
    process.exit(2);
  }
  const transport = ORIGIN_CLIENTS[client];
  const gw = await startGateway(loadConfigFile(configFile, { dev: false }), transport ? { originTransport: transport } : {});
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.on(signal, () => {
      gw.close().finally(() => process.exit(0));
      setTimeout(() => process.exit(0), 12_000).unref();
    });
  await gw.ready;
}
