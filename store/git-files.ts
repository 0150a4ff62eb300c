/**
 * The files of a git directory vouch writes or reads outside the object
 * store: refs (`refs/heads/main`, packed-refs, `.git/shallow`), lock files
 * (`<file>.lock`, O_EXCL, renamed over the file, as git does; durable:
 * fsync of the file before its rename, of the directory after, with
 * platform/durable-file.ts).
 * Moving `main` is every append's commit point, hence hand-written with
 * the lock and both fsyncs (isomorphic-git writes refs with neither).
 * Owns: the lock protocol shared with git (a lock older than 10 s is a
 * crash leftover); the test hooks `VOUCH_CRASH_POINT`, `VOUCH_FAIL_POINT`.
 * Trusts: the file system to make a rename atomic and an fsync durable.
 * Must hold: a file replaced durably is, after a power loss, the old or the
 * new content, never a mix or empty.
 */
import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { dirname, join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import { fsyncDir } from '../platform/durable-file.ts';
import { BRANCH_REF, OID_RE, ioError, objectId } from './git-objects.ts';

export function readShallow(gitdir: string): string[] {
  try {
    return fs
      .readFileSync(join(gitdir, 'shallow'), 'utf8')
      .split('\n')
      .filter((l) => OID_RE.test(l));
  } catch {
    return [];
  }
}

/** A loose ref's object id, or null. */
export function readRef(gitdir: string, ref: string): string | null {
  try {
    const oid = fs.readFileSync(join(gitdir, ref), 'utf8').trim();
    return OID_RE.test(oid) ? oid : null;
  } catch {
    return null;
  }
}

export function writeFileAtomic(path: string, data: Buffer | string, mode?: number): void {
  const tmp = `${path}.vouch-${process.pid}.tmp`;
  fs.writeFileSync(tmp, data, mode === undefined ? undefined : { mode });
  fs.renameSync(tmp, path);
}

// ---------------------------------------------------------------------------
// Refs, state, files

/** The commit `main` points at (loose ref first, then packed-refs), or null when it has none. Throws when HEAD is not on main. */
export function readBranch(gitdir: string): string | null {
  let head: string;
  try {
    head = fs.readFileSync(join(gitdir, 'HEAD'), 'utf8').trim();
  } catch {
    throw new VouchError('not_a_chain', `${gitdir} has no HEAD: not a git repository`);
  }
  if (head !== `ref: ${BRANCH_REF}`) throw new VouchError('not_a_chain', `HEAD of ${gitdir} is not branch main (${head.slice(0, 60)})`);
  try {
    const oid = fs.readFileSync(join(gitdir, BRANCH_REF), 'utf8').trim();
    if (!OID_RE.test(oid)) throw new VouchError('io_error', `${BRANCH_REF} holds no object id`);
    return oid;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e instanceof VouchError ? e : ioError(`cannot read ${BRANCH_REF}`, e);
  }
  let packed = '';
  try {
    packed = fs.readFileSync(join(gitdir, 'packed-refs'), 'utf8');
  } catch {
    return null;
  }
  for (const line of packed.split('\n')) {
    const [oid, name] = line.split(' ');
    if (name === BRANCH_REF && oid && OID_RE.test(oid)) return oid;
  }
  return null;
}

export function isDir(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}

export function lstatOrNull(p: string): BigIntStats | null {
  try {
    return fs.lstatSync(p, { bigint: true });
  } catch {
    return null;
  }
}

export function hashFile(p: string): string | null {
  try {
    return objectId('blob', fs.readFileSync(p));
  } catch {
    return null;
  }
}

/** Test hook: VOUCH_CRASH_POINT=after-objects|after-ref|after-files|after-index kills the process there. */
export function crashPoint(name: 'after-objects' | 'after-ref' | 'after-files' | 'after-index'): void {
  if (process.env.VOUCH_CRASH_POINT === name) process.kill(process.pid, 'SIGKILL');
}

let failPointUsed = false;
/** Fault tests: `VOUCH_FAIL_POINT=working-tree` fails the working-tree write of one append (after its commit point), as a full disk would. */
export function failPoint(name: 'working-tree'): void {
  if (process.env.VOUCH_FAIL_POINT === name && !failPointUsed) {
    failPointUsed = true;
    // Stands for node's own error of a full disk (an Error with code ENOSPC), which is what the caller must cope with.
    throw Object.assign(new Error('ENOSPC: no space left on device (VOUCH_FAIL_POINT)'), { code: 'ENOSPC' });
  }
}

// ---------------------------------------------------------------------------
// Lock files

const STALE_LOCK_MS = 10_000;
const LOCK_WAIT_MS = 12_000;

/**
 * Create `lockPath` exclusively and return its descriptor. A lock held by
 * someone else is waited for; one older than 10 s is taken to be a crash
 * leftover and removed (`onStale` is told). Throws `io_error` on timeout.
 */
export async function acquireLock(lockPath: string, onStale?: (path: string) => void): Promise<number> {
  const started = Date.now();
  for (;;) {
    try {
      return fs.openSync(lockPath, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY, 0o644);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new VouchError('io_error', `cannot create ${lockPath}: ${(e as Error).message}`, { cause: e });
      }
    }
    let age = 0;
    try {
      age = Date.now() - fs.statSync(lockPath).mtimeMs;
    } catch {
      continue; // released meanwhile
    }
    if (age > STALE_LOCK_MS) {
      try {
        fs.unlinkSync(lockPath);
        onStale?.(lockPath);
      } catch {
        /* someone else removed it */
      }
      continue;
    }
    if (Date.now() - started > LOCK_WAIT_MS) {
      throw new VouchError('io_error', `${lockPath} is held by another process (remove it if no git command is running)`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Write `data` to the lock (descriptor `fd` at `lockPath`) and rename it onto
 * `target`. `durable`: the lock file is fsynced before the rename and the
 * directory after it, so the new content is what a power loss leaves (the
 * branch ref: the commit point of an acknowledged append).
 */
export function commitLock(fd: number, lockPath: string, target: string, data: Buffer | string, opts: { durable?: boolean } = {}): void {
  try {
    if (typeof data === 'string') fs.writeSync(fd, data);
    else fs.writeSync(fd, data);
    if (opts.durable) fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(lockPath, target);
    if (opts.durable) fsyncDir(dirname(target));
  } catch (e) {
    try {
      fs.closeSync(fd);
    } catch {
      /* already closed */
    }
    try {
      fs.unlinkSync(lockPath);
    } catch {
      /* gone */
    }
    throw new VouchError('io_error', `cannot write ${target}: ${(e as Error).message}`, { cause: e });
  }
}

export function releaseLock(fd: number, lockPath: string): void {
  try {
    fs.closeSync(fd);
  } catch {
    /* closed */
  }
  try {
    fs.unlinkSync(lockPath);
  } catch {
    /* gone */
  }
}
