/**
 * Durable file writes, the one place every layer takes them from: a file
 * written whole and fsynced before it is renamed into place, and the fsync
 * of a directory after a name in it was created, renamed or removed (git's
 * refs and packs in store/, the witness's and cosigner's state in gateway/,
 * the CLI's checkpoint state and statements in tools/), and whole reads and
 * writes at a file offset (the gateway's answer store and block-text index).
 * Trusts: the file system to make a rename atomic and an fsync durable.
 * Must hold: a file replaced with `writeDurably` + rename + `fsyncDir` is,
 * after a power loss, the old or the new content, never a mix or empty.
 */
import * as fs from 'node:fs';

/**
 * Writes a new file whole and fsyncs it before returning (the caller renames
 * it into place). `flags` 'wx' refuses a file that exists.
 */
export function writeDurably(path: string, data: Buffer, mode: number, flags: 'w' | 'wx' = 'w'): void {
  const fd = fs.openSync(path, flags, mode);
  try {
    for (let off = 0; off < data.length; ) off += fs.writeSync(fd, data, off, data.length - off);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** fsyncs a directory, so the names created, renamed or removed in it survive a power loss. */
export function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Reads buf.length bytes at `pos` (looping over short reads); false when the file ends first. */
export function preadAll(fd: number, buf: Buffer, pos: number): boolean {
  let off = 0;
  while (off < buf.length) {
    const got = fs.readSync(fd, buf, off, buf.length - off, pos + off);
    if (got <= 0) return false;
    off += got;
  }
  return true;
}

/** Writes all of buf at `pos` (looping over short writes). */
export function pwriteAll(fd: number, buf: Uint8Array, pos: number): void {
  let off = 0;
  while (off < buf.length) off += fs.writeSync(fd, buf, off, buf.length - off, pos + off);
}
