/**
 * The shape issue 33 item 3 asked of the store, kept so: the chain
 * repository is composed of parts (no class under store/ extends another),
 * gateway/ and tools/ depend on the narrow interfaces of store/chain-api.ts
 * (never on the concrete `ChainRepo`), storage signs nothing (the note's
 * signer is handed in: platform/note-signer.ts), and durable writes come
 * from one module (platform/durable-file.ts).
 * Owns: nothing; reads the sources tracked by git.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../helpers/vectors.ts';

function sources(...dirs: string[]): { path: string; text: string }[] {
  const out = execFileSync('git', ['ls-files', '--', ...dirs], { cwd: repoRoot, encoding: 'utf8' });
  return out
    .split('\n')
    .filter((f) => /\.(ts|mts|mjs|js)$/.test(f))
    .map((path) => ({ path, text: readFileSync(join(repoRoot, path), 'utf8') }));
}

/** The source without comments (a name in a comment is not a dependency). */
const code = (text: string): string => text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/[^\n]*/g, '$1');

test('store/: the chain repository is composed of parts, no class extends another', () => {
  const found = sources('store').flatMap(({ path, text }) =>
    [...code(text).matchAll(/\bclass\s+(\w+)\s+extends\s+(\w+)/g)].map((m) => `${path}: ${m[1]} extends ${m[2]}`),
  );
  assert.equal(found, []);
  // The parts exist, each its own file, and ChainRepo holds them.
  const repo = readFileSync(join(repoRoot, 'store/chain-repo.ts'), 'utf8');
  for (const part of ['RepoReader', 'RepoWriter', 'RepoReplicator', 'RepoRepair', 'RepoState']) assert.match(repo, new RegExp(`new ${part}\\(`), part);
});

test('gateway/ and tools/ name the narrow store interfaces, never the concrete ChainRepo', () => {
  const found = sources('gateway', 'tools')
    .filter(({ text }) => /\bChainRepo\b/.test(code(text)))
    .map((f) => f.path);
  assert.equal(found, []);
  const api = readFileSync(join(repoRoot, 'store/chain-api.ts'), 'utf8');
  for (const name of ['ChainReads', 'ChainStore', 'MirrorStore']) assert.match(api, new RegExp(`export interface ${name}\\b`), name);
});

test('store/ signs nothing: no signing function is imported there; an append is handed its note signer', () => {
  const signing = /\b(signCheckpoint|signNoteText|nodeSigner|createPrivateKey|signNote\w*Text)\b/;
  const found = sources('store')
    .filter(({ text }) =>
      code(text)
        .split('\n')
        .some((l) => /^\s*import\b/.test(l) && signing.test(l)),
    )
    .map((f) => f.path);
  assert.equal(found, []);
  assert.match(readFileSync(join(repoRoot, 'store/chain-append.ts'), 'utf8'), /signer: NoteSigner;/);
});

test('durable writes come from platform/durable-file.ts alone', () => {
  const defs = sources('chain', 'platform', 'store', 'artifacts', 'gateway', 'tools')
    .filter(({ text }) => /export function (writeDurably|fsyncDir)\b/.test(text))
    .map((f) => f.path);
  assert.equal(defs, ['platform/durable-file.ts']);
  const borrowed = sources('gateway', 'tools')
    .filter(({ text }) => /from '[./]+\/store\/git-files\.ts'/.test(text))
    .map((f) => f.path);
  assert.equal(borrowed, [], 'gateway/ and tools/ borrow nothing from store/git-files.ts');
  // A directory fsync written out by hand (open O_DIRECTORY, fsync) outside the shared module.
  const byHand = sources('store', 'artifacts', 'gateway', 'tools')
    .filter(({ text }) => /O_DIRECTORY/.test(code(text)))
    .map((f) => f.path);
  assert.equal(byHand, []);
});

test.run();
