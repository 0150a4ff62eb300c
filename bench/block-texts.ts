/**
 * Block texts of a bench chain as branch main holds them, read by one
 * `git cat-file --batch` (the one layout keeps no block file in the
 * working tree: docs/decisions/one-layout.md).
 * Owns: nothing kept. Must hold: throws unless every block asked for is a blob on main.
 */
import { spawnSync } from 'node:child_process';
import { blockPath } from '../chain/layout.ts';

export function blockTexts(dir: string, indexes: readonly number[]): string[] {
  const r = spawnSync('git', ['-C', dir, 'cat-file', '--batch'], {
    input: indexes.map((i) => `main:${blockPath(i)}\n`).join(''),
    maxBuffer: 1 << 30,
  });
  if (r.status !== 0) throw new Error(`bench: git cat-file --batch in ${dir} failed: ${r.stderr}`);
  const out = r.stdout;
  const texts: string[] = [];
  let at = 0;
  for (const i of indexes) {
    const nl = out.indexOf(10, at);
    const head = out.toString('latin1', at, nl).split(' ');
    if (head[1] !== 'blob') throw new Error(`bench: block ${i} is not a blob on main in ${dir}: ${head.join(' ')}`);
    const size = Number(head[2]);
    texts.push(out.toString('utf8', nl + 1, nl + 1 + size));
    at = nl + 1 + size + 1;
  }
  return texts;
}
