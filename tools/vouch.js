#!/usr/bin/env node
// The `vouch` command (package.json "bin"; `npm start`, tests and benches
// run it too).
// Owns: the choice of what runs: the build in dist/ (tools/build.mjs) when
// it is up to date, plain JavaScript without a TypeScript loader; else
// tools/cli.ts from sources through tsx's loader (a dev dependency), saying
// so in one stderr line on a terminal. Without tsx it exits 2 with one line
// telling to build.
// Must hold: a stale build never runs (tools/build.mjs `distState` compares
// every input with what the build was made from: by its stat, as git's index
// does, and by its content when the stat differs or was racy).
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
    process.stderr.write(
      `vouch: ${why}, and tsx (a dev dependency) is not installed to run the sources: run \`npm ci\` (it builds; \`npm run build\` after an edit)\n`,
    );
    process.exit(2);
  }
  if (process.stderr.isTTY) process.stderr.write(`vouch: ${why}; running the sources through tsx (\`npm run build\` makes it lighter)\n`);
  register();
  await import('./cli.ts');
}
