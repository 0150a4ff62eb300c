/** The module hooks of ./load-recorder.mjs: every resolved URL, appended to the log file. */
import { appendFileSync } from 'node:fs';

let log = '';

export function initialize(data) {
  log = data.log;
}

export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  appendFileSync(log, r.url + '\n');
  return r;
}
