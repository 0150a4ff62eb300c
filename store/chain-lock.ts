/**
 * One writer per chain directory while an authority gateway runs: it holds
 * `<chain>/.git/vouch.lock`; `ChainRepo` checks it before any other write
 * (a CLI append is refused naming the gateway's pid; a second authority
 * refuses to start). A one-off write only checks the lock, it does not take it.
 * Owns: the lock file (one JSON line: pid, host, token, since), created whole
 * and exclusively (`link()`), stale takeover, removal at release and exit,
 * the refusal messages.
 * Trusts: live pids on this host to be unique; a lock of another host or a
 * reused pid counts as held (the message names the file). Advisory only:
 * git and hand edits ignore it.
 * Must hold: a live holder's lock is never removed or taken over; no process
 * is refused by its own lock; only its holder (by token) removes a lock.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { VouchError } from '../chain/errors.ts';

export const LOCK_FILE = 'vouch.lock';

interface LockRecord {
  pid: number;
  host: string;
  token: string;
  since: string;
}

export interface ChainLock {
  readonly path: string;
  /** Removes the lock file (if it is still this hold's). Idempotent. */
  release(): void;
}

/** The lock file of the chain in `dir`. */
export function lockPathOf(dir: string): string {
  return join(resolve(dir), '.git', LOCK_FILE);
}

/** Locks this process holds: path -> its record. */
const held = new Map<string, LockRecord>();
let exitHook = false;

function readRecord(path: string): LockRecord | null | 'absent' {
  let text: string;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
    throw e;
  }
  try {
    const r = JSON.parse(text) as LockRecord;
    return Number.isSafeInteger(r.pid) && r.pid > 0 && typeof r.host === 'string' && typeof r.token === 'string' ? r : null;
  } catch {
    return null;
  }
}

/** Whether the holder of `r` may still be running (it cannot be told for another host). */
function holderAlive(r: LockRecord): boolean {
  if (r.host !== hostname()) return true;
  // Our own pid in a lock we do not hold: a previous process with the same pid (a container's pid 1).
  if (r.pid === process.pid) return false;
  try {
    process.kill(r.pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
  try {
    // A zombie (exited, not yet reaped) is gone for our purpose.
    const stat = fs.readFileSync(`/proc/${r.pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true;
  }
}

/** Who holds the lock, and what to do instead: for another gateway (`starting`), or for a writer. */
function refusal(dir: string, path: string, holder: LockRecord | null, starting: boolean, route = 'POST /v1/submit'): VouchError {
  const far = holder !== null && holder.host !== hostname();
  const who = holder === null ? `an unreadable lock ${path}` : `a running gateway (pid ${holder.pid}${far ? ` on ${holder.host}` : ''}, lock ${path})`;
  let advice = starting
    ? 'stop it first, or give this gateway another chain.dir'
    : route === 'POST /v1/submit'
      ? 'endorse through it (vouch endorse --gateway URL --token-file FILE, i.e. POST /v1/submit) or stop it first'
      : route === 'POST /v1/root'
        ? 'apply the statement through it (vouch root apply --gateway URL --token-file FILE, i.e. POST /v1/root) or stop it first'
        : `${route === 'POST /v1/revoke' ? 'revoke' : 'write'} through it (${route}) or stop it first`;
  if (holder === null || far) advice += `; if no such gateway runs, remove ${path}`;
  return new VouchError('io_error', `chain ${dir} is in use by ${who}: ${advice}`, {
    resource: dir,
    evidence: { lock: path, holder_pid: holder?.pid ?? null },
  });
}

function releaseAllAtExit(): void {
  for (const [path, record] of held) {
    try {
      const r = readRecord(path);
      if (r !== 'absent' && r !== null && r.token === record.token) fs.unlinkSync(path);
    } catch {
      /* best effort */
    }
  }
  held.clear();
}

/**
 * Takes the lock of the chain in `dir` for an authority gateway (its `.git/`
 * must exist). Refuses with an `io_error` naming the holder when a live
 * process, this one included, holds it; takes over the lock of a process
 * that is gone.
 */
export function acquireChainLock(dir: string): ChainLock {
  const abs = resolve(dir);
  const path = lockPathOf(abs);
  const mine = held.get(path);
  if (mine) throw refusal(abs, path, mine, true);
  const record: LockRecord = { pid: process.pid, host: hostname(), token: randomBytes(12).toString('hex'), since: new Date().toISOString() };
  const text = JSON.stringify(record) + '\n';
  for (let attempt = 0; ; attempt++) {
    const tmp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}`;
    try {
      fs.writeFileSync(tmp, text, { flag: 'wx', mode: 0o644 });
    } catch (e) {
      throw new VouchError('io_error', `cannot write the chain lock ${tmp}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, { resource: abs });
    }
    let linked = false;
    try {
      fs.linkSync(tmp, path);
      linked = true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new VouchError('io_error', `cannot create the chain lock ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, {
          resource: abs,
        });
      }
    } finally {
      fs.rmSync(tmp, { force: true });
    }
    if (linked) {
      held.set(path, record);
      if (!exitHook) {
        exitHook = true;
        process.on('exit', releaseAllAtExit);
      }
      return release(path, record);
    }
    const other = readRecord(path);
    if (other === 'absent') continue; // released meanwhile
    if (other === null || holderAlive(other) || attempt >= 5) throw refusal(abs, path, other, true);
    takeOver(path, other);
  }
}

/** Removes the stale lock `stale` unless someone replaced it meanwhile (then it is put back). */
function takeOver(path: string, stale: LockRecord): void {
  const moved = `${path}.stale.${process.pid}.${randomBytes(6).toString('hex')}`;
  try {
    fs.renameSync(path, moved);
  } catch {
    return; // gone already: someone else took it over
  }
  const r = readRecord(moved);
  if (r === 'absent' || r === null || r.token !== stale.token) {
    // A fresh lock replaced the stale one between our read and the rename: put it back.
    try {
      fs.linkSync(moved, path);
    } catch {
      /* a third process locked meanwhile */
    }
  }
  fs.rmSync(moved, { force: true });
}

function release(path: string, record: LockRecord): ChainLock {
  let released = false;
  return {
    path,
    release() {
      if (released) return;
      released = true;
      if (held.get(path)?.token !== record.token) return;
      held.delete(path);
      const r = readRecord(path);
      if (r !== 'absent' && r !== null && r.token === record.token) fs.rmSync(path, { force: true });
    },
  };
}

/**
 * Refuses (`io_error`, one line naming the gateway's pid and the lock, and
 * `route`: the gateway endpoint to write through instead) a write to the chain in `dir` while another live process holds its lock.
 * Costs one failed `open()` when there is no lock; a stale lock is left for
 * the next gateway to take over.
 */
export function assertChainWritable(dir: string, route?: string): void {
  const abs = resolve(dir);
  const path = lockPathOf(abs);
  if (held.has(path)) return;
  const r = readRecord(path);
  if (r === 'absent') return;
  if (r === null || holderAlive(r)) throw refusal(abs, path, r, false, route);
}
