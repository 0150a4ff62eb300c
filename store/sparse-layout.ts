/**
 * The chain repository without a working tree of block files (issue 16):
 * git's own sparse checkout in cone mode with a sparse index, only the
 * root's files checked out and one `blocks/` sparse-directory entry; the
 * blocks live only in git objects. It is the only layout vouch writes: a
 * chain checked out in full (`core.sparseCheckout` unset) is converted when
 * opened for writing (./repo-repair.ts `syncSparse`); reads never need it.
 * Owns: that configuration, the pattern file, the sparse index's bytes.
 * Trusts: nothing it reads: unreadable configuration is "not sparse", an
 * unexpected index is rewritten by the caller.
 * Must hold: the index written is one `git status` reads as clean
 * (test/integration/sparse-layout.test.ts checks with git itself).
 */
import * as fs from 'node:fs';
import { join } from 'node:path';
import { type IndexEntry, buildIndexFile, comparePaths, parseIndex, serializeEntry } from './git-index-format.ts';

/** Cone mode with no directory: every file of the root, nothing below it. */
export const SPARSE_PATTERNS = '/*\n!/*/\n';
/** The skip-worktree bit of an entry's extended flags. */
const SKIP_WORKTREE = 0x4000;
const DIR_MODE = 0o40000;

/** A git boolean value as `git config` reads it. */
function truthy(v: string): boolean {
  return /^(true|yes|on|1)$/i.test(v.trim());
}

/** `section.key` values of a git config file (lower-cased names; subsections ignored); later lines win. */
function readConfig(path: string): Map<string, string> {
  const out = new Map<string, string>();
  let text: string;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch {
    return out;
  }
  let section = '';
  for (const raw of text.split('\n')) {
    const line = raw.replace(/[#;].*$/, '').trim();
    if (line === '') continue;
    const head = /^\[\s*([A-Za-z0-9.-]+)(?:\s+"[^"]*")?\s*\]$/.exec(line);
    if (head) {
      section = line.includes('"') ? '' : head[1]!.toLowerCase();
      continue;
    }
    const kv = /^([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$/.exec(line);
    if (kv && section !== '') out.set(`${section}.${kv[1]!.toLowerCase()}`, kv[2] === undefined ? 'true' : kv[2]);
  }
  return out;
}

/** Whether git's configuration puts the repository in a sparse checkout (then vouch keeps no block files in the working tree). */
export function isSparse(gitdir: string): boolean {
  const main = readConfig(join(gitdir, 'config'));
  let v = main.get('core.sparsecheckout');
  if (truthy(main.get('extensions.worktreeconfig') ?? 'false')) {
    const wt = readConfig(join(gitdir, 'config.worktree')).get('core.sparsecheckout');
    if (wt !== undefined) v = wt;
  }
  return v !== undefined && truthy(v);
}

/** The configuration lines of the layout, for a new repository's `.git/config`. */
export const SPARSE_CONFIG = '\tsparseCheckout = true\n\tsparseCheckoutCone = true\n';
export const SPARSE_INDEX_CONFIG = '[index]\n\tsparse = true\n';

/**
 * Put a repository checked out in full (a plain `git clone`, the full
 * layout of earlier versions) in the sparse layout's configuration: the
 * settings appended to `.git/config` in place of any earlier value of
 * them, written whole through a temporary file. True when it changed anything.
 */
export function ensureSparseConfig(gitdir: string): boolean {
  if (isSparse(gitdir)) return false;
  // With extensions.worktreeConfig, git reads core.sparseCheckout from config.worktree first.
  const file = join(gitdir, truthy(readConfig(join(gitdir, 'config')).get('extensions.worktreeconfig') ?? 'false') ? 'config.worktree' : 'config');
  let text = '';
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    /* missing: written anew */
  }
  // The keys set once: earlier values of them are dropped (git refuses to set a key that has several, as
  // `git sparse-checkout disable` does), every other line is kept as it is.
  const ours = new Set(['core.sparsecheckout', 'core.sparsecheckoutcone', 'index.sparse']);
  let section = '';
  const kept = text.split('\n').filter((raw) => {
    const line = raw.replace(/[#;].*$/, '').trim();
    const head = /^\[\s*([A-Za-z0-9.-]+)(?:\s+"[^"]*")?\s*\]/.exec(line);
    if (head) section = line.includes('"') ? '' : head[1]!.toLowerCase();
    const key = /^([A-Za-z][A-Za-z0-9-]*)\s*(?:=|$)/.exec(line);
    return head !== null || key === null || !ours.has(`${section}.${key[1]!.toLowerCase()}`);
  });
  text = kept.join('\n');
  if (text !== '' && !text.endsWith('\n')) text += '\n';
  fs.writeFileSync(`${file}.vouch-tmp`, `${text}[core]\n${SPARSE_CONFIG}${SPARSE_INDEX_CONFIG}`);
  fs.renameSync(`${file}.vouch-tmp`, file);
  return true;
}

/** The pattern file: true when it was already right, else it is (re)written. */
export function ensurePatterns(gitdir: string): boolean {
  const file = join(gitdir, 'info', 'sparse-checkout');
  try {
    if (fs.readFileSync(file, 'utf8') === SPARSE_PATTERNS) return true;
  } catch {
    /* missing */
  }
  fs.mkdirSync(join(gitdir, 'info'), { recursive: true });
  fs.writeFileSync(`${file}.vouch-tmp`, SPARSE_PATTERNS);
  fs.renameSync(`${file}.vouch-tmp`, file);
  return false;
}

/**
 * The sparse index for a head whose root directories (by name: `blocks`,
 * and any other) have the given tree ids, with the root files' entries
 * (their stat data from the working tree).
 */
export function sparseIndexBytes(dirs: ReadonlyMap<string, string>, rootFiles: readonly IndexEntry[]): Buffer {
  const sparseDirs = [...dirs].map(
    ([name, oid]): IndexEntry => ({
      path: `${name}/`,
      oid,
      mode: DIR_MODE,
      ctimeSec: 0,
      ctimeNsec: 0,
      mtimeSec: 0,
      mtimeNsec: 0,
      dev: 0,
      ino: 0,
      uid: 0,
      gid: 0,
      size: 0,
      flags: 0,
      extFlags: SKIP_WORKTREE,
    }),
  );
  const entries = [...sparseDirs, ...rootFiles].sort((a, b) => comparePaths(a.path, b.path));
  return buildIndexFile(
    entries.map((e) => serializeEntry(e)),
    entries.length,
    true,
    'sdir',
  );
}

/**
 * The entries of `.git/index` when it is a sparse index of root files and
 * sparse directories of the root (name → tree id); null for anything else
 * (missing, corrupt, a full index, a path below the root, a merge stage):
 * the caller then writes it anew.
 */
export function readSparseIndex(gitdir: string): { dirs: Map<string, string>; files: Map<string, IndexEntry> } | null {
  let parsed;
  try {
    parsed = parseIndex(fs.readFileSync(join(gitdir, 'index')));
  } catch {
    return null;
  }
  if (!parsed.sparse || parsed.split) return null;
  const dirs = new Map<string, string>();
  const files = new Map<string, IndexEntry>();
  for (const e of parsed.entries) {
    if (((e.flags >> 12) & 3) !== 0) return null; // a merge stage
    if (e.mode === DIR_MODE) {
      const name = e.path.slice(0, -1);
      if (!e.path.endsWith('/') || name.includes('/') || (e.extFlags & SKIP_WORKTREE) === 0) return null;
      dirs.set(name, e.oid);
    } else if (e.path.includes('/') || e.extFlags !== 0) return null;
    else files.set(e.path, e);
  }
  return { dirs, files };
}
