/**
 * The origin of `npm run bench -- soak`, its own process:
 * `node --import tsx bench/soak-origin.ts ROUTES_FILE`. ROUTES_FILE is JSON
 * mapping a path to `{size, seed}`, served as `pattern(size, seed)` by the
 * test helper's origin server on 127.0.0.1. Prints
 * `listening http://127.0.0.1:PORT` once it accepts connections.
 *
 * On SIGUSR2 it prints one line `stats {"<first path segment>": requests}`
 * counting the requests received since the previous SIGUSR2 (or the start)
 * by the first segment of their path (`/c/12.bin` counts under `c`), then
 * forgets them, so the helper's per-request log stays bounded. Stops on
 * SIGTERM/SIGINT.
 */
import { readFileSync } from 'node:fs';
import { OriginServer, pattern } from '../test/helpers/origin-server.ts';

const file = process.argv[2];
if (!file) {
  console.error('usage: soak-origin.ts ROUTES_FILE');
  process.exit(2);
}
const routes = JSON.parse(readFileSync(file, 'utf8')) as Record<string, { size: number; seed: number }>;
const server = await OriginServer.start({ host: '127.0.0.1' });
for (const [path, r] of Object.entries(routes)) server.route(path, { body: pattern(r.size, r.seed) });

process.on('SIGUSR2', () => {
  const counts: Record<string, number> = {};
  for (const r of server.log) {
    const k = r.path.split('/')[1] ?? '';
    counts[k] = (counts[k] ?? 0) + 1;
  }
  server.resetCounters();
  console.log(`stats ${JSON.stringify(counts)}`);
});

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  server.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 3_000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
console.log(`listening ${server.origin}`);
