/**
 * A working copy of a shared bench fixture (bench/out) that costs no disk
 * and can never write into it: the pack files (read-only, never rewritten
 * in place by git or vouch) are hard-linked, every other file is copied.
 * Owns: `dst` (created; the caller removes it).
 * Must hold: no file a writer opens for writing is shared with `src`.
 */
import { copyFileSync, linkSync, mkdirSync, readdirSync, statSync, utimesSync } from 'node:fs';
import { join, sep } from 'node:path';

export function linkCopy(src: string, dst: string): void {
  mkdirSync(dst, { recursive: true });
  for (const e of readdirSync(src, { withFileTypes: true })) {
    const from = join(src, e.name);
    const to = join(dst, e.name);
    if (e.isDirectory()) linkCopy(from, to);
    else if (e.isFile() && from.includes(`${sep}objects${sep}pack${sep}`) && /\.(pack|idx|rev|bitmap)$/.test(e.name)) linkSync(from, to);
    else if (e.isFile()) copyFileSync(from, to);
  }
}

/**
 * The times of `src`'s pack files, and a function that puts them back: git
 * "freshens" a pack (utime, contents untouched) when an object it was
 * about to write is already in it, and a link copy shares the inode.
 */
export function keepPackTimes(src: string): () => void {
  const dir = join(src, '.git', 'objects', 'pack');
  const times = readdirSync(dir).map((f) => {
    const st = statSync(join(dir, f));
    return { path: join(dir, f), atime: st.atimeMs / 1000, mtime: st.mtimeMs / 1000, mtimeMs: st.mtimeMs };
  });
  return () => {
    for (const t of times) if (statSync(t.path).mtimeMs !== t.mtimeMs) utimesSync(t.path, t.atime, t.mtime);
  };
}
