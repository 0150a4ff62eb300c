/**
 * Reading an HTTP answer's body whole, bounded: what the OCI route and
 * `vouch endorse --oci` read of a registry (manifests, tag lists, token
 * answers). Owns nothing else.
 * Must hold: never holds more than `max` bytes; a larger body is destroyed
 * and refused as `too_large`.
 */
import type { Dispatcher } from 'undici';
import { VouchError } from '../chain/errors.ts';

/** A body read whole, at most `max` bytes (`what` names it in the refusal). */
export async function readBounded(body: Dispatcher.ResponseData['body'], max: number, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of body) {
    size += (c as Buffer).length;
    if (size > max) {
      body.destroy();
      throw new VouchError('too_large', `${what} is larger than ${max} bytes`);
    }
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks, size);
}
