#!/usr/bin/env node
// The `vouch` command (package.json "bin"; `npm start`, the tests and the
// benches run it too).
//
// Owns: the choice of what runs. The build in dist/ (`npm run build`,
// tools/build.mjs; `npm ci`, `npm start`, `npm test` and `npm run bench` make
// it) when it is up to date: plain JavaScript, no TypeScript loader (a
// gateway idles ~20 MiB smaller). When dist/ is missing or older than the
// sources (a source edited since the last build, an install that skipped
// scripts), tools/cli.ts runs from sources through tsx's loader, a dev
// dependency, as it did before there was a build: the command works the same,
// only heavier, and on a terminal one line on stderr says so. Without tsx
// (an install without the dev dependencies) it exits 2 with one line on
// stderr telling to build.
// Must hold: a stale build never runs (tools/build.mjs `distState` compares
// the content of every input with what the build was made from).
import { distState } from './build.mjs';

const state = distState();
if (state === 'fresh') {
  await import('../dist/cli.mjs');
} else {
  const why = state === 'missing' ? 'dist/ is not built' : 'dist/ is older than the sources';
  let register;
  try {
    ({ register } = await import('tsx/esm/api'));
  } catch (e) {
    if (e?.code !== 'ERR_MODULE_NOT_FOUND') throw e;
    process.stderr.write(`vouch: ${why}, and tsx (a dev dependency) is not installed to run the sources: run \`npm ci\` (it builds; \`npm run build\` after an edit)\n`);
    process.exit(2);
  }
  if (process.stderr.isTTY) process.stderr.write(`vouch: ${why}; running the sources through tsx (\`npm run build\` makes it lighter)\n`);
  register();
  await import('./cli.ts');
}
