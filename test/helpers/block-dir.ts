/**
 * A directory of block files (`blocks/DDD/DDD/DDDDDDDDD.json` and
 * `checkpoint.json`, no git) as a verifier's block source: what the
 * verifier's working-tree path (store/parallel-verify.ts `listBlockFiles`)
 * reads, for tests that forge files in place.
 * Owns: nothing (reads the directory it is given).
 * Must hold: the listing is every entry under blocks/ in path order, index
 * null for a path that is no block's, `why` for an entry not a regular file.
 */
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { blockPath, parseBlockPath } from '../../chain/layout.ts';
import type { BlockSource } from '../../store/parallel-verify.ts';

export function blockDirSource(dir: string): BlockSource & { dir: string; listBlockFiles: NonNullable<BlockSource['listBlockFiles']> } {
  const listBlockFiles = (): { index: number | null; path: string; why?: string }[] => {
    const out: { index: number | null; path: string; why?: string }[] = [];
    const walk = (abs: string, rel: string): void => {
      let entries;
      try {
        entries = readdirSync(abs, { withFileTypes: true });
      } catch {
        return;
      }
      for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
        const r = `${rel}/${e.name}`;
        const index = parseBlockPath(r);
        if (index === null && e.isDirectory()) walk(join(abs, e.name), r);
        else if (index !== null && !e.isFile())
          out.push({ index, path: r, why: `is ${e.isDirectory() ? 'a directory' : 'not a regular file'}, not a regular file` });
        else out.push({ index, path: r });
      }
    };
    walk(join(dir, 'blocks'), 'blocks');
    return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  };
  const readCheckpoint = (): string | null => {
    try {
      return readFileSync(join(dir, 'checkpoint.json'), 'utf8');
    } catch {
      return null;
    }
  };
  return { dir, listBlockFiles, readCheckpoint };
}

/** Write block texts (by index) and the checkpoint into `dir` as a directory of block files. */
export function writeBlockDir(dir: string, blocks: { index: number; content: string }[], checkpoint: string): void {
  for (const b of blocks) {
    const p = join(dir, blockPath(b.index));
    mkdirSync(dirname(p), { recursive: true });
    writeFileSync(p, b.content);
  }
  writeFileSync(join(dir, 'checkpoint.json'), checkpoint);
}
