/**
 * Worker side of parallel verification: reads block files, parses them and
 * runs `examineBlock` (record hash, signature, artifact hash forms) with the
 * node:crypto backend, answering plain `BlockFacts` per block.
 *
 * Trusts: the authority handed over by the main thread (block 0 was checked
 * there first). Never decides acceptance: the main thread walks the facts.
 */
import { parentPort } from 'node:worker_threads';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { examineBlock, type BlockFacts, type TrustedAuthority } from '../chain/verify.ts';
import { LIMITS } from '../chain/block.ts';
import { nodeBackend } from './node-crypto.ts';

export interface VerifyTask { id: number; start: number; paths: string[]; authority: TrustedAuthority }
export interface VerifyTaskResult { id: number; facts: BlockFacts[] }

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

parentPort?.on('message', (task: VerifyTask) => {
  const facts = task.paths.map((p, i) => examineFile(p, task.start + i, task.authority));
  parentPort!.postMessage({ id: task.id, facts } satisfies VerifyTaskResult);
});
