/**
 * The packfile a push sends (gitformat-pack v2): whole objects, except a
 * tree sent as a REF_DELTA of its previous version when that is smaller
 * (prefix/suffix delta: trees are what grows with the chain, so a push stays
 * flat; bench/RESULTS.md "Mirrors and push"); streamed in chunks, the SHA-1
 * trailer computed as it goes.
 * Owns: which objects go as deltas (at most MAX_DELTA_DEPTH, remote bases
 * only in a thin pack) and `makeDelta`.
 * Trusts: the objects the local repository gives.
 * Must hold: every object of `entries` is in the pack exactly once with the
 * expected type; a delta's base is earlier in the pack or, thin, on the
 * remote.
 */
import { createHash } from 'node:crypto';
import { deflateSync } from 'node:zlib';
import { VouchError } from '../chain/errors.ts';
import { REF_DELTA, encodeObjectHeader } from './git-pack.ts';

export type ObjType = 'commit' | 'tree' | 'blob' | 'tag';
const TYPE_CODE: Record<ObjType, number> = { commit: 1, tree: 2, blob: 3, tag: 4 };

/** Reads the objects a pack is made of. */
export interface ObjectReader {
  read(oid: string): Promise<{ type: string; body: Buffer }>;
}

/** One object of the pack; a tree may name the previous version of itself (same path, parent commit) to be sent as a delta of. */
export interface PackEntry {
  oid: string;
  type: ObjType;
  deltaBase?: string;
}

/** Longest delta chain we create (git's own default pack.depth). */
const MAX_DELTA_DEPTH = 50;

function deltaSize(n: number, out: number[]): void {
  do {
    let b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
}

/**
 * A git delta (gitformat-pack, "Deltified representation") turning `base`
 * into `target`: copy the common prefix, insert the middle, copy the common
 * suffix. That is all a tree needs between two versions that differ in a few
 * entries (an append adds one entry at the end of a shard tree). Null when it
 * would not be much smaller than the target itself.
 */
export function makeDelta(base: Buffer, target: Buffer): Buffer | null {
  const max = Math.min(base.length, target.length);
  let p = 0;
  while (p < max && base[p] === target[p]) p++;
  let q = 0;
  while (q < max - p && base[base.length - 1 - q] === target[target.length - 1 - q]) q++;
  const middle = target.length - p - q;
  if (middle > target.length / 2) return null;
  const out: number[] = [];
  deltaSize(base.length, out);
  deltaSize(target.length, out);
  const copy = (offset: number, size: number): void => {
    while (size > 0) {
      const n = Math.min(size, 0xffffff);
      let op = 0x80;
      const bytes: number[] = [];
      for (let k = 0; k < 4; k++) {
        const b = Math.floor(offset / 2 ** (8 * k)) & 0xff;
        if (b) {
          op |= 1 << k;
          bytes.push(b);
        }
      }
      for (let k = 0; k < 3; k++) {
        const b = (n >> (8 * k)) & 0xff;
        if (b) {
          op |= 1 << (4 + k);
          bytes.push(b);
        }
      }
      out.push(op, ...bytes);
      offset += n;
      size -= n;
    }
  };
  copy(0, p);
  for (let at = p; at < p + middle; at += 127) {
    const n = Math.min(127, p + middle - at);
    out.push(n);
    for (let k = 0; k < n; k++) out.push(target[at + k]!);
  }
  copy(base.length - q, q);
  return Buffer.from(out);
}

/**
 * The pack of `entries` in chunks of about 256 KiB. Trees with a `deltaBase`
 * go as REF_DELTA of it when that is smaller: bases in the same pack up to a
 * chain of MAX_DELTA_DEPTH, bases on the remote (a thin pack, completed by
 * the remote's index-pack --fix-thin) only when `thin` is allowed.
 */
export async function* packChunks(objects: ObjectReader, entries: PackEntry[], thin: boolean): AsyncGenerator<Buffer> {
  const hash = createHash('sha1');
  const header = Buffer.alloc(12);
  header.write('PACK', 0, 'latin1');
  header.writeUInt32BE(2, 4);
  header.writeUInt32BE(entries.length, 8);
  let parts: Buffer[] = [header];
  let size = header.length;
  const inPack = new Set(entries.map((e) => e.oid));
  const depth = new Map<string, number>();
  for (const e of entries) {
    const o = await objects.read(e.oid);
    if (o.type !== e.type) throw new VouchError('not_a_chain', `object ${e.oid} is a ${o.type}, expected a ${e.type}`);
    let delta: Buffer | null = null;
    const base = e.deltaBase;
    const baseDepth = base === undefined ? Infinity : inPack.has(base) ? (depth.get(base) ?? Infinity) : thin ? 0 : Infinity;
    if (base !== undefined && baseDepth < MAX_DELTA_DEPTH) delta = makeDelta((await objects.read(base)).body, o.body);
    let h: Buffer;
    let z: Buffer;
    if (delta) {
      h = Buffer.concat([encodeObjectHeader(REF_DELTA, delta.length), Buffer.from(base!, 'hex')]);
      z = deflateSync(delta, { level: 1 });
      depth.set(e.oid, baseDepth + 1);
    } else {
      h = encodeObjectHeader(TYPE_CODE[e.type], o.body.length);
      z = deflateSync(o.body, { level: 1 });
      depth.set(e.oid, 0);
    }
    parts.push(h, z);
    size += h.length + z.length;
    if (size >= 256 * 1024) {
      const chunk = Buffer.concat(parts, size);
      hash.update(chunk);
      yield chunk;
      parts = [];
      size = 0;
    }
  }
  const tail = Buffer.concat(parts, size);
  hash.update(tail);
  yield Buffer.concat([tail, hash.digest()]);
}
