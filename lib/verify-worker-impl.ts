/**
 * Worker side of parallel verification: reads a batch of block files, parses
 * them and runs `examineBlock` (record hash, signature, artifact hash forms)
 * with the node:crypto backend, then walks the batch with its own
 * `ChainVerifier`, starting from the state the batch's first block leads to.
 * It answers per batch, not per block: the first block's facts, the state
 * after the last block it accepted, and the facts of the block that failed
 * (if one did), so the main thread does no per-block work.
 *
 * Trusts: the authority handed over by the main thread (block 0 was checked
 * there first). Never decides acceptance: the main thread checks the first
 * block against the real chain state, adopts the walked state, and replays
 * the failing block's facts, so the first failure and its code are exactly
 * those of a sequential check.
 */
import { parentPort } from 'node:worker_threads';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { ChainVerifier, examineBlock, type BlockFacts, type TrustedAuthority, type VerifierState } from '../chain/verify.ts';
import { isVouchError } from '../chain/errors.ts';
import { LIMITS } from '../chain/block.ts';
import { nodeBackend } from './node-crypto.ts';

export interface VerifyTask { id: number; start: number; paths: string[]; authority: TrustedAuthority }
export interface VerifyTaskResult {
  id: number;
  /** Facts of the batch's first block (checked by the main thread against the chain so far). */
  first: BlockFacts;
  /** State after the last block of the batch accepted by the worker's walk (null: only the first was examined). */
  walked: VerifierState | null;
  /** Facts of the first block the walk refused, replayed by the main thread for the exact error. */
  failure: BlockFacts | null;
}

const scratch = Buffer.allocUnsafe(64 * 1024);

/** Reads a (usually small) file into a reused buffer: no fstat, no allocation per file. */
function readText(path: string): string {
  const fd = openSync(path, 'r');
  try {
    const n = readSync(fd, scratch, 0, scratch.length, 0);
    if (n < scratch.length) return scratch.toString('utf8', 0, n);
  } finally {
    closeSync(fd);
  }
  return readFileSync(path, 'utf8'); // larger than the scratch buffer
}

export function examineFile(path: string, position: number, authority: TrustedAuthority | null): BlockFacts {
  let text: string;
  try {
    text = readText(path);
  } catch (e) {
    return { position, malformed: `cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` };
  }
  if (text.length > LIMITS.blockFileBytes) return { position, malformed: `file larger than ${LIMITS.blockFileBytes} bytes` };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { position, malformed: `not JSON (${(e as Error).message})` };
  }
  return examineBlock(value, position, authority, nodeBackend).facts;
}

/** Examines and walks one batch (see the header). */
export function runTask(task: VerifyTask): VerifyTaskResult {
  const first = examineFile(task.paths[0]!, task.start, task.authority);
  const result: VerifyTaskResult = { id: task.id, first, walked: null, failure: null };
  if (first.malformed !== null) return result; // the main thread stops at it
  const walker = new ChainVerifier({
    backend: nodeBackend,
    state: { size: task.start + 1, head: first.recordHash, lastPosted: first.posted, authority: task.authority },
  });
  for (let i = 1; i < task.paths.length; i++) {
    const facts = examineFile(task.paths[i]!, task.start + i, task.authority);
    try {
      walker.addFacts(facts);
    } catch (e) {
      if (!isVouchError(e) || e.kind !== 'integrity') throw e;
      result.failure = facts;
      break;
    }
  }
  result.walked = walker.state;
  return result;
}

parentPort?.on('message', (task: VerifyTask) => {
  parentPort!.postMessage(runTask(task));
});
