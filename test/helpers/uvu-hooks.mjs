/**
 * Preloaded by test/run.ts: makes a throwing uvu hook a visible failure. uvu 0.5 drops the
 * error of `before` (its runner returns from a `finally`: the suite's tests show "(0 / N)",
 * with no message, and the file exits 0) and of `after.each`, and `after`'s rejects its run
 * (the process dies before the summary). Redirects `import … from 'uvu'` here (a resolve hook)
 * and wraps those hooks of `test` and of every `suite()`: the error's message and stack go to
 * stdout among uvu's lines, one line per error to VOUCH_TEST_HOOKS_FILE (the runner counts
 * each as a failure), and the exit code is 1. `before` still throws (its suite's tests do not
 * run); `after` and `after.each` do not (the run goes on). `before.each` is left to uvu,
 * which reports it as a failure of each test.
 */
import { appendFileSync } from 'node:fs';
import { register } from 'node:module';
import { exec, suite as uvuSuite, test as uvuTest } from 'uvu';

const hooksFile = process.env.VOUCH_TEST_HOOKS_FILE;
let errors = 0;

function report(hook, state, err) {
  errors++;
  const where = `${state?.__suite__ ? `suite "${state.__suite__}"` : 'test'}.${hook}${hook === 'after.each' && state?.__test__ ? ` (after "${state.__test__}")` : ''}`;
  const e = err instanceof Error ? err : new Error(String(err));
  // The stack as uvu prints a test's: without node's own frames, nor this wrapper's.
  const stack = (e.stack ?? '')
    .split('\n')
    .slice(1)
    .map((l) => l.trim())
    .filter((l) => l && !/\((?:node:|internal\/)|^at node:/.test(l) && !l.includes(import.meta.url));
  process.stdout.write(
    `\n   FAIL  hook ${where} threw${hook === 'before' ? ' (its tests did not run)' : ''}\n    ${e.message}\n${stack.map((l) => `    ${l}\n`).join('')}\n`,
  );
  if (hooksFile) appendFileSync(hooksFile, `${where}: ${e.message.split('\n')[0]}\n`);
}

function wrap(t) {
  const { before, after } = t;
  const beforeEach = before.each;
  const afterEach = after.each;
  const guard = (hook, rethrow) => (fn) => async (state) => {
    try {
      await fn(state);
    } catch (err) {
      report(hook, state, err);
      if (rethrow) throw err;
    }
  };
  const b = guard('before', true);
  const a = guard('after', false);
  const ae = guard('after.each', false);
  t.before = (fn) => before(b(fn));
  t.before.each = beforeEach;
  t.after = (fn) => after(a(fn));
  t.after.each = (fn) => afterEach(ae(fn));
  return t;
}

export const test = wrap(uvuTest);
export const suite = (name, state) => wrap(uvuSuite(name, state));
export { exec };

process.on('exit', () => {
  if (errors > 0) process.exitCode = 1;
});
// On the loader thread: 'uvu' imported by any module but this one resolves to this one.
const redirect = `let self;
export function initialize(url) { self = url; }
export async function resolve(specifier, context, next) {
  return specifier === 'uvu' && context.parentURL !== self ? { url: self, shortCircuit: true } : next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(redirect)}`, { data: import.meta.url });
