/**
 * Worker side of parallel verification: reads a batch of blocks from git
 * objects (the blobs branch main names), runs `examineBlock` on each and
 * walks the batch with its own `ChainVerifier`, answering per batch (first
 * block's facts, state after the last accepted block, the failing block's
 * facts), so the main thread does no per-block work.
 * Owns: how a block object is read (a blob of at most 16 MiB hashing to its
 * id, strict UTF-8, I-JSON: docs/spec/design.md §1.7 "Reading a chain"), and
 * how a root file of the working tree is read (`readChainFile`, the
 * checkpoint's: a regular file only, O_NOFOLLOW, O_NONBLOCK, fstat, bounded).
 * Trusts: the authority and the branch's blob ids from the main thread.
 * Must hold: never decides acceptance: the main thread links, adopts and
 * replays, so the first failure is that of a sequential check.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs';
import { createHash, hash } from 'node:crypto';
import { ChainVerifier, examineParsed, SignatureBatch, type BlockFacts, type TrustedAuthority, type VerifierState, type WalkRecord } from '../chain/verify.ts';
import { isVouchError } from '../chain/errors.ts';
import { LIMITS, parseBlockFile, utf8Text, type Block } from '../chain/block.ts';
import { blockPath } from '../chain/layout.ts';
import { indexFactsOf, type IndexFacts } from '../chain/index-facts.ts';
import { applyKeyEvent, KeyEventError, type KeyState } from '../chain/key-events.ts';
import { leafHash } from '../chain/merkle.ts';
import { nodeBackend } from '../platform/node-crypto.ts';
import { DiskPacks, PackWindow } from './git-pack.ts';
import { readLoose } from './git-objects.ts';
import { GitCatFile } from './git-cat-file.ts';

export interface VerifyTask {
  id: number;
  /** The batch: blocks start..start+count-1. */
  start: number;
  count: number;
  authority: TrustedAuthority;
  /** The key state at `start` (docs/spec/key-events.md); the walk applies the key blocks of the batch. */
  keys: KeyState;
  /**
   * Per block of the batch, the git blob id the branch commits at its path,
   * 20 bytes each, back to back (one buffer, not a string a block).
   */
  oids: Uint8Array;
  /** Also hand back each accepted block's text and index facts (`DirVerifyOptions.onVerified`). */
  texts?: boolean;
  /** With `texts`: the facts alone (`DirVerifyOptions.factsOnly`); the answer has no `texts`. */
  noTexts?: boolean;
  /** Also hand back each accepted block's Merkle leaf hash (`DirVerifyOptions.onLeaves`). */
  leaves?: boolean;
  /**
   * Where the blocks are read from git objects: per block, the number of the
   * pack in `packs` that holds it and its offset there (-1, -1: not in a
   * pack; read as a loose object of `gitdir`).
   */
  objects: { gitdir: string; packDir: string; packs: string[]; where: Float64Array };
  /**
   * Shared with the main thread, one counter a batch: once `cancel[id]` is no
   * longer `gen`, the batch went out again with a newer key state and this
   * run of it stops at the next run of signatures (its answer is `aborted`).
   */
  cancel?: Int32Array;
  gen?: number;
}
export interface VerifyTaskResult {
  id: number;
  /** The key events applied before the batch as the task said (`task.keys.sequence`): the main thread re-verifies a batch handed out with an older key state. */
  sequence: number;
  /** The online key the batch was examined with (`task.authority.publicKey`). */
  key: string;
  /** Facts of the batch's first block (checked by the main thread against the chain so far). */
  first: BlockFacts;
  /** State after the last block of the batch accepted by the worker's walk (null: only the first was examined). */
  walked: VerifierState | null;
  /** What the walk learned (with `walked`): its endorse blocks, and revokes it left to the main thread. */
  walk: WalkRecord | null;
  /** Facts of the first block the walk refused, replayed by the main thread for the exact error. */
  failure: BlockFacts | null;
  /**
   * With `VerifyTask.texts`: the text of each block the worker accepted, from
   * the first on, in order (up to the failure), and its index facts.
   */
  texts?: string[];
  facts?: IndexFacts[];
  /**
   * With `VerifyTask.leaves`: the RFC 6962 leaf hash (SHA-256(0x00 ‖ record
   * hash)) of each block the worker accepted, from the first on, 32 bytes
   * each, back to back.
   */
  leaves?: Uint8Array;
  /** The batch was superseded while it ran (`VerifyTask.cancel`): nothing else in this answer counts. */
  aborted?: boolean;
}

/** RFC 6962 leaf hash of a block whose record_hash (64 hex digits) is `hex`: tree entry i is block i's record hash. */
export function leafOfRecordHash(hex: string): Uint8Array {
  return leafHash(nodeBackend, Buffer.from(hex, 'hex'));
}

const leafInput = Buffer.alloc(33); // 0x00 ‖ record hash

/** `leafOfRecordHash(hex)` written into `out` at `at` (the workers' path: no intermediate buffers). */
function writeLeafOfRecordHash(hex: string, out: Uint8Array, at: number): void {
  leafInput.write(hex, 1, 32, 'hex');
  out.set(hash('sha256', leafInput, 'buffer') as Buffer, at);
}

const scratch = Buffer.allocUnsafe(64 * 1024);
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * A read, or why there is none: `missing` (no such file), `unreadable` (an
 * environment problem: permissions, I/O), `refused` (a file the chain's
 * format does not allow: a link, not a regular file, too large, changing).
 */
export type ChainFileRead =
  | { buf: Buffer; size: number; error: null }
  | { buf: null; size: 0; error: string; why: string; kind: 'missing' | 'unreadable' | 'refused' };

/** `error` is `why` after the path. */
function failed(path: string, kind: 'missing' | 'unreadable' | 'refused', why: string): ChainFileRead {
  return { buf: null, size: 0, error: `${path} ${why}`, why, kind };
}

function kindOf(st: Stats): string {
  return st.isDirectory()
    ? 'a directory'
    : st.isFIFO()
      ? 'a FIFO'
      : st.isCharacterDevice()
        ? 'a character device'
        : st.isBlockDevice()
          ? 'a block device'
          : st.isSocket()
            ? 'a socket'
            : 'not a regular file';
}

/**
 * Reads a chain file: a regular file (not a symbolic link, directory, FIFO
 * or device) of at most `limit` bytes, or the reason it is not one (naming
 * `path`, never quoting content). The bytes are `buf[0, size)`, in a
 * buffer reused by the next call when they fit it (64 KiB).
 */
export function readChainFile(path: string, limit: number): ChainFileRead {
  let fd: number;
  try {
    fd = openSync(path, OPEN_FLAGS);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') return failed(path, 'refused', 'is a symbolic link, not a regular file');
    if (code === 'ENOENT' || code === 'ENOTDIR') return failed(path, 'missing', 'does not exist');
    return failed(path, 'unreadable', `cannot be read (${code ?? (e as Error).message})`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return failed(path, 'refused', `is ${kindOf(st)}, not a regular file`);
    if (st.size > limit) return failed(path, 'refused', `is larger than ${limit} bytes`);
    // One byte more than fstat said, to see a file that grew since; never more than limit + 1.
    const room = st.size + 1;
    const buf = room <= scratch.length ? scratch : Buffer.allocUnsafe(room);
    let n = 0;
    while (n < room) {
      const r = readSync(fd, buf, n, room - n, n);
      n += r;
      if (r === 0 || n < room) break; // a short read of a regular file is its end
    }
    if (n > st.size) return failed(path, 'refused', n > limit ? `is larger than ${limit} bytes` : 'changed while it was read');
    return { buf, size: n, error: null };
  } catch (e) {
    return failed(path, 'unreadable', `cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  } finally {
    closeSync(fd);
  }
}

/** The bytes `readChainFile` returned. */
export function bytesOf(read: { buf: Buffer; size: number }): Buffer {
  return read.buf.subarray(0, read.size);
}

/** What examining a block file found: its facts, and its text and parsed block when it parsed. */
export interface Examined {
  facts: BlockFacts;
  /** The file's text (its exact bytes, strictly decoded), null when it was not read or not a block. */
  text: string | null;
  block: Block | null;
}

/**
 * Examines block `position` read from git objects (the sparse layout): the
 * object `oid` (20 bytes, what the branch's tree names), found in pack
 * `pack` at `offset` (as the main thread's pack index says) or as a loose
 * object. It must be a blob of at most 16 MiB whose bytes hash to `oid`
 * (a damaged pack is a failure at that block, as a changed file is), then
 * it is examined as a file's bytes are.
 */
export function examineObject(
  read: ObjectRead,
  position: number,
  authority: TrustedAuthority | null,
  oid: Uint8Array,
  pack: string | null,
  offset: number,
  batch?: SignatureBatch,
  retired?: readonly string[],
  fetched?: { type: string; body: Buffer },
): Examined {
  const label = blockPath(position);
  const want = Buffer.from(oid.buffer, oid.byteOffset, 20).toString('hex');
  let o: { type: string; body: Buffer } | null;
  try {
    if (fetched) o = fetched;
    else if (pack !== null) {
      let w = read.windows.get(pack);
      if (!w) read.windows.set(pack, (w = new PackWindow(`${read.packs.dir}/${pack}.pack`)));
      o = w.read(offset) ?? read.packs.readAtOffset(pack, offset); // a delta: its base resolved there
    } else o = readLoose(read.gitdir, want);
  } catch (e) {
    return { facts: { position, malformed: `${label} (git object ${want}) cannot be read: ${(e as Error).message}` }, text: null, block: null };
  }
  if (o === null) return { facts: { position, malformed: `${label} (git object ${want}) is missing from the repository` }, text: null, block: null };
  if (o.type !== 'blob') return { facts: { position, malformed: `${label} (git object ${want}) is a ${o.type}, not a blob` }, text: null, block: null };
  if (o.body.length > LIMITS.blockFileBytes)
    return { facts: { position, malformed: `${label} is larger than ${LIMITS.blockFileBytes} bytes` }, text: null, block: null };
  const got = createHash('sha1').update(`blob ${o.body.length}\0`, 'latin1').update(o.body).digest('hex');
  const text = utf8Text(o.body);
  if (text === null) return { facts: { position, malformed: `${label} is not valid UTF-8` }, text: null, block: null };
  const parsed = parseBlockFile(text, position);
  if (parsed.block === null) return { facts: { position, malformed: parsed.malformed }, text: null, block: null };
  const facts = examineParsed(parsed.block, position, authority, nodeBackend, batch, retired);
  if (got !== want && facts.malformed === null) {
    facts.fileError = `${label}: git object ${want}${pack !== null ? ` in ${pack}.pack` : ''} holds other bytes (git blob ${got}): the repository is damaged (git fsck)`;
  }
  return { facts, text, block: parsed.block };
}

/** Where the sparse layout's objects are read: the packs by name (each opened once), and loose objects. */
export interface ObjectRead {
  gitdir: string;
  packs: DiskPacks;
  windows: Map<string, PackWindow>;
}

/** Opens nothing until a read; `closeObjectRead` closes what reads opened. */
export function objectReadOf(gitdir: string, packDir: string): ObjectRead {
  return { gitdir, packs: new DiskPacks(packDir), windows: new Map() };
}

/** Closes the descriptors of an ObjectRead (file descriptors are the process's: a worker ending closes none). */
export function closeObjectRead(read: ObjectRead | null): void {
  if (read === null) return;
  for (const w of read.windows.values()) w.close();
  read.windows.clear();
  read.packs.close();
}

/** Examines and walks one batch (see the header). */
/**
 * Sent by a worker as soon as its walk applies a key block that changes the
 * online key (before its batch is done), so the main thread hands out the
 * batches after it with the new key state at once (`KeyNotice`).
 */
export interface KeyNotice {
  notice: 'keys';
  id: number;
  index: number;
  authority: TrustedAuthority;
  keys: KeyState;
}

/** Where a worker sends a `KeyNotice` (none on the main thread). */
let noticeTo: ((n: KeyNotice) => void) | null = null;

/** `fetched`: blocks of the batch (0 = start) already read (`fetchDeltas`). */
export function runTask(task: VerifyTask, fetched?: Map<number, { type: string; body: Buffer }>): VerifyTaskResult {
  const read = objectReadOf(task.objects.gitdir, task.objects.packDir);
  try {
    return walkTask(task, read, fetched);
  } finally {
    closeObjectRead(read);
  }
}

/**
 * Who reads the sparse layout's blocks stored as deltas (a chain packed by
 * git: a clone, `git gc`): `git` (the default), one `git cat-file --batch`
 * per worker, asked for a batch's deltas at once, which resolves them with
 * git's delta-base cache; `vouch` (`VOUCH_PACK_READER=vouch`), the
 * hand-written DiskPacks, base by base. Whole objects are read through
 * PackWindow either way (docs/performance-git.md has both side by side).
 */
export function packReader(): 'git' | 'vouch' {
  return process.env.VOUCH_PACK_READER === 'vouch' ? 'vouch' : 'git';
}

/** The worker's `git cat-file --batch` (one per repository; ended with the worker's handles, or by a failure). */
let catFile: GitCatFile | null = null;

/**
 * The blocks of a sparse batch that its pack stores as deltas, read by git
 * (`packReader() === 'git'`), with the whole objects read on the way. Any
 * failure leaves the block unread here: `examineObject` reads it as before,
 * and reports what is wrong with it there.
 */
export async function fetchDeltas(task: VerifyTask): Promise<Map<number, { type: string; body: Buffer }> | undefined> {
  const objects = task.objects;
  if (packReader() !== 'git') return undefined;
  const got = new Map<number, { type: string; body: Buffer }>();
  const deltas: number[] = [];
  const read = objectReadOf(objects.gitdir, objects.packDir);
  try {
    for (let i = 0; i < task.count; i++) {
      const k = objects.where[2 * i]!;
      if (k < 0) continue;
      const pack = objects.packs[k]!;
      let w = read.windows.get(pack);
      if (!w) read.windows.set(pack, (w = new PackWindow(`${objects.packDir}/${pack}.pack`)));
      try {
        const o = w.read(objects.where[2 * i + 1]!);
        if (o) got.set(i, o);
        else deltas.push(i);
      } catch {
        /* examineObject reads it again and reports it */
      }
    }
  } finally {
    closeObjectRead(read);
  }
  if (deltas.length === 0) return got;
  if (catFile?.gitdir !== objects.gitdir) {
    catFile?.close();
    catFile = new GitCatFile(objects.gitdir);
  }
  const cf = catFile;
  const answers = await Promise.allSettled(deltas.map((i) => cf.read(Buffer.from(task.oids.buffer, task.oids.byteOffset + 20 * i, 20).toString('hex'))));
  answers.forEach((a, j) => {
    if (a.status === 'fulfilled' && a.value) got.set(deltas[j]!, a.value);
  });
  return got;
}

/**
 * Blocks examined before their signatures are checked together
 * (`SignatureBatch`): enough to keep ed25519's code and tables in cache for
 * a run of checks, few enough that the blocks examined past a failure cost
 * nothing noticeable.
 */
const SIGNATURE_RUN = 64;

function walkTask(task: VerifyTask, read: ObjectRead, fetched?: Map<number, { type: string; body: Buffer }>): VerifyTaskResult {
  // The key in force as the blocks are examined: the task's, then the one each key block of the batch puts in force.
  let authority = task.authority;
  let retired: readonly string[] = task.keys.retired;
  const objects = task.objects;
  const examine = (i: number, b: SignatureBatch | undefined): Examined => {
    const k = objects.where[2 * i]!;
    return examineObject(
      read,
      task.start + i,
      authority,
      task.oids.subarray(20 * i, 20 * i + 20),
      k >= 0 ? objects.packs[k]! : null,
      objects.where[2 * i + 1]!,
      b,
      retired,
      fetched?.get(i),
    );
  };
  const keep = task.texts === true;
  const withTexts = task.noTexts !== true;
  const texts: string[] = [];
  const facts: IndexFacts[] = [];
  const leaves = task.leaves === true ? new Uint8Array(32 * task.count) : null;
  let leafCount = 0;
  const kept = (x: Examined) => {
    if (keep) {
      if (withTexts) texts.push(x.text!);
      facts.push(indexFactsOf(x.block!));
    }
    if (leaves !== null) writeLeafOfRecordHash((x.facts as { recordHash: string }).recordHash, leaves, 32 * leafCount++);
  };
  const result: VerifyTaskResult = {
    id: task.id,
    sequence: task.keys.sequence,
    key: task.authority.publicKey,
    first: { position: task.start, malformed: 'not examined' },
    walked: null,
    walk: null,
    failure: null,
  };
  if (keep) {
    if (withTexts) result.texts = texts;
    result.facts = facts;
  }
  const cancel = task.cancel;
  const cancelled = (): boolean => cancel !== undefined && Atomics.load(cancel, task.id) !== task.gen;
  // First every block of the batch is read and parsed, its signature check put off to its run's
  // SignatureBatch. A key block seen here puts its key in force for the blocks after it at once,
  // and the main thread hears of it now (a KeyNotice), before any signature of the batch is checked:
  // the batches after this one then go out with the new key instead of failing with the old one.
  // The walk below applies every key block again and stays the judge (this is only a head start).
  const runs: SignatureBatch[] = [];
  const examined: Examined[] = [];
  /** The online key each key block of the batch put in force here (by batch offset). */
  const putInForce = new Map<number, string>();
  let keys = task.keys;
  for (let i = 0; i < task.count; i++) {
    if (i % SIGNATURE_RUN === 0) {
      if (cancelled()) {
        result.aborted = true;
        return result;
      }
      runs.push(new SignatureBatch());
    }
    const x = examine(i, runs[runs.length - 1]);
    examined.push(x);
    if (x.facts.malformed !== null) break; // the walk stops at it
    const event = x.facts.keyEvent;
    if (event === null) continue;
    try {
      keys = applyKeyEvent(nodeBackend, keys, event, task.start + i);
    } catch (e) {
      if (e instanceof KeyEventError) break; // the walk refuses it
      throw e;
    }
    if (keys.online.publicKey !== authority.publicKey)
      noticeTo?.({ notice: 'keys', id: task.id, index: task.start + i, authority: { signer: keys.online.signer, publicKey: keys.online.publicKey }, keys });
    authority = { signer: keys.online.signer, publicKey: keys.online.publicKey };
    retired = keys.retired;
    putInForce.set(i, authority.publicKey);
  }
  /** After the walk applied the key block at offset i: were the blocks after it examined with the key it put in force? Else they are examined again with it. */
  const rekey = (state: VerifierState, i: number): void => {
    if (putInForce.get(i) === state.authority!.publicKey) return;
    authority = state.authority!;
    retired = state.keys!.retired;
    for (let j = i + 1; j < examined.length; j++) examined[j] = examine(j, undefined);
  };
  let walker: ChainVerifier | null = null;
  for (let r = 0; r < runs.length && result.failure === null; r++) {
    if (r > 0 && cancelled()) {
      result.aborted = true;
      return result;
    }
    runs[r]!.check(nodeBackend);
    const to = Math.min(examined.length, (r + 1) * SIGNATURE_RUN);
    for (let i = r * SIGNATURE_RUN; i < to; i++) {
      const x = examined[i]!;
      if (walker === null) {
        const first = (result.first = x.facts);
        if (first.malformed !== null) return result; // the main thread stops at it
        kept(x);
        let keys = task.keys;
        if (first.keyEvent !== null) {
          try {
            keys = applyKeyEvent(nodeBackend, keys, first.keyEvent, task.start);
          } catch (e) {
            if (e instanceof KeyEventError) return result; // the main thread refuses it
            throw e;
          }
        }
        const state: VerifierState = {
          size: task.start + 1,
          head: first.recordHash,
          lastPosted: first.posted,
          authority: { signer: keys.online.signer, publicKey: keys.online.publicKey },
          keys,
        };
        walker = new ChainVerifier({ backend: nodeBackend, state, recordWalk: true });
        if (first.endorse) walker.learnEndorsed([first.recordHash]);
        if (first.keyEvent !== null) rekey(state, i);
        continue;
      }
      try {
        walker.addFacts(x.facts);
      } catch (e) {
        if (!isVouchError(e) || e.kind !== 'integrity') throw e;
        result.failure = x.facts;
        break;
      }
      kept(x);
      examined[i] = undefined as unknown as Examined; // nothing held past its walk
      if (x.facts.malformed === null && x.facts.keyEvent !== null) rekey(walker.state, i);
    }
  }
  result.walked = walker!.state;
  if (leaves !== null) result.leaves = leafCount === task.count ? leaves : leaves.slice(0, 32 * leafCount);
  const walk = walker!.walk;
  result.walk = { endorsed: walk.endorsed.slice(), deferred: walk.deferred }; // a copy of the view: only its bytes are sent
  return result;
}

// Only in a verification worker (parallel-verify.ts starts it with this workerData): the module
// is also imported on the main thread, and by repo-reader.ts for `readChainFile`.
if ((workerData as { vouch?: string } | null)?.vouch === 'verify-worker') {
  noticeTo = (n) => parentPort!.postMessage(n);
  // Tasks run one after another, in the order they came (reading a batch's deltas through git is asynchronous).
  let queue: Promise<void> = Promise.resolve();
  parentPort?.on('message', (task: VerifyTask | { stop: true }) => {
    // Told to stop: between two tasks' synchronous runs (never inside one, where terminate() could
    // interrupt a zlib inflate half set up and abort the process), so at once.
    if ('stop' in task) process.exit(0);
    queue = queue.then(async () => {
      const result = runTask(task, await fetchDeltas(task));
      const transfer: ArrayBuffer[] = result.walk ? [result.walk.endorsed.buffer as ArrayBuffer] : [];
      if (result.leaves) transfer.push(result.leaves.buffer as ArrayBuffer);
      parentPort!.postMessage(result, transfer);
    });
  });
}
