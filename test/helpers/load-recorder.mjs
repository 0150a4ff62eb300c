/**
 * `node --import ./test/helpers/load-recorder.mjs`: appends the URL of every
 * module the process resolves (ES modules, through node:module `register`)
 * to the file named by VOUCH_LOAD_LOG, one per line, for
 * test/integration/cli-startup.test.ts. Records only; changes nothing it resolves.
 */
import { register } from 'node:module';

if (process.env.VOUCH_LOAD_LOG) register('./load-recorder-hooks.mjs', import.meta.url, { data: { log: process.env.VOUCH_LOAD_LOG } });
