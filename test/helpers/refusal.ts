/** Awaits a promise that must reject with a VouchError, and returns that error. */
import { VouchError } from '../../chain/errors.ts';

export async function refusal(p: Promise<unknown>): Promise<VouchError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof VouchError) return e;
    throw e;
  }
  throw new Error('expected a VouchError');
}
