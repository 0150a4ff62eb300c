/**
 * The client's memory of transparency logs: per origin, the newest
 * checkpoint `vouch get` verified (size, root, note text, and a walked key
 * trail), in `--state FILE` (default `$XDG_STATE_HOME/vouch/checkpoints.json`).
 * Owns: reading, validating and writing that file, atomically (temp file
 * 0600, fsync, rename, directory fsync; directory created 0700).
 * Trusts: nothing in the file beyond its form: the caller re-checks the
 * note against the authority key.
 * Must hold: a state that cannot be read is an error (exit 2), never an
 * empty state (that would let a rollback through); `save` never lowers an
 * origin's size below what the file holds (a same-size fork keeps the one on
 * disk and the next run reports it).
 */
import * as fs from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { VouchError } from '../../chain/errors.ts';
import { base64Decode } from '../../chain/encoding.ts';
import { fsyncDir, writeDurably } from '../../platform/durable-file.ts';

export interface SeenCheckpoint {
  size: number;
  /** base64 of the 32-byte root. */
  root: string;
  /** The signed checkpoint note as it was verified. */
  note: string;
  /** The key events walked for this log: `{pin, trail}` (tools/client/key-follower.ts); absent for a log never walked. */
  keys?: { pin: unknown; trail: unknown };
}

export type CheckpointState = Map<string, SeenCheckpoint>;

/** The default state file path. */
export function defaultStatePath(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_STATE_HOME;
  const base = xdg?.startsWith('/') ? xdg : join(env.HOME || homedir(), '.local', 'state');
  return join(base, 'vouch', 'checkpoints.json');
}

const MAX_STATE_BYTES = 16 * 1024 * 1024;

function parseState(text: string, path: string): CheckpointState {
  const bad = (why: string) =>
    new VouchError('io_error', `state file ${path} is unusable (${why}); move it away only if you know why it broke: it is what detects a rollback`);
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch {
    throw bad('not JSON');
  }
  if (typeof obj !== 'object' || obj === null || (obj as { version?: unknown }).version !== 1) throw bad('not {"version":1,...}');
  const logs = (obj as { logs?: unknown }).logs;
  if (typeof logs !== 'object' || logs === null || Array.isArray(logs)) throw bad('"logs" is not an object');
  const out: CheckpointState = new Map();
  for (const [origin, e] of Object.entries(logs)) {
    const s = e as Partial<SeenCheckpoint> | null;
    if (
      typeof s !== 'object' ||
      s === null ||
      !Number.isSafeInteger(s.size) ||
      (s.size as number) < 0 ||
      typeof s.root !== 'string' ||
      base64Decode(s.root)?.length !== 32 ||
      typeof s.note !== 'string'
    ) {
      throw bad(`entry ${JSON.stringify(origin)} is not {size, root, note}`);
    }
    const keys = s.keys;
    if (keys !== undefined && (typeof keys !== 'object' || keys === null || Array.isArray(keys) || !('trail' in keys) || !('pin' in keys)))
      throw bad(`entry ${JSON.stringify(origin)} has "keys" that are not {pin, trail}`);
    out.set(origin, { size: s.size as number, root: s.root, note: s.note, ...(keys !== undefined ? { keys } : {}) });
  }
  return out;
}

const sequenceOf = (k: SeenCheckpoint['keys']): number => {
  const n = (k?.trail as { state?: { sequence?: unknown } } | undefined)?.state?.sequence;
  return typeof n === 'number' ? n : -1;
};

/** Reads the state; a missing file is the empty state. */
export function loadState(path: string): CheckpointState {
  let text: string;
  try {
    const st = fs.statSync(path);
    if (st.size > MAX_STATE_BYTES) throw new VouchError('io_error', `state file ${path} is larger than ${MAX_STATE_BYTES} bytes`);
    text = fs.readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return new Map();
    if (e instanceof VouchError) throw e;
    throw new VouchError('io_error', `cannot read state file ${path}: ${(e as Error).message}`);
  }
  return parseState(text, path);
}

/**
 * Records `seen` for `origin` and writes the file atomically. Re-reads the
 * file first so entries of other origins written meanwhile are kept, and an
 * entry for `origin` that is now larger is not lowered.
 */
export function saveCheckpoint(path: string, origin: string, seen: SeenCheckpoint): void {
  const current = loadState(path);
  const there = current.get(origin);
  if (there === undefined || there.size < seen.size) current.set(origin, seen);
  else if (seen.keys !== undefined && there.size === seen.size && there.root === seen.root && sequenceOf(seen.keys) > sequenceOf(there.keys))
    current.set(origin, { ...there, keys: seen.keys });
  const text = JSON.stringify({ version: 1, logs: Object.fromEntries(current) }, null, 1) + '\n';
  const dir = dirname(path);
  const tmp = `${path}.vouch-${process.pid}.tmp`;
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    writeDurably(tmp, Buffer.from(text), 0o600);
    fs.renameSync(tmp, path);
    fsyncDir(dir);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw new VouchError('io_error', `cannot write state file ${path}: ${(e as Error).message}`);
  }
}
