/**
 * Refusals a test expects: a promise that must reject, or a call that must
 * throw, with a VouchError (chain/errors.ts), checked by its stable code.
 */
import * as assert from 'uvu/assert';
import { VouchError } from '../../chain/errors.ts';

/** Awaits a promise that must reject with a VouchError, and returns that error. */
export async function refusal(p: Promise<unknown>): Promise<VouchError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof VouchError) return e;
    throw e;
  }
  throw new Error('expected a VouchError');
}

/** Calls `fn`, which must throw a VouchError with `code` (and a message matching `pattern` when given). */
export function refuses(fn: () => unknown, code: string, pattern?: RegExp): void {
  try {
    fn();
  } catch (e) {
    assert.instance(e, VouchError);
    assert.is((e as VouchError).code, code, (e as Error).message);
    if (pattern) assert.match((e as Error).message, pattern);
    return;
  }
  assert.unreachable(`expected VouchError ${code}`);
}
