/**
 * Chains with key events as an authority commits them (docs/key-events.md):
 * a prefix of a `KeyChain` written to a chain repository with its
 * checkpoint.json and checkpoint.note signed by the key in force (or, in a
 * rollover, by several keys), and later prefixes appended as one commit each.
 */
import { buildCheckpoint } from '../../chain/build.ts';
import type { Block } from '../../chain/block.ts';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import type { Signer } from '../../chain/crypto-backend.ts';
import { hexDecode } from '../../chain/encoding.ts';
import { rootOfEntries } from '../../chain/merkle.ts';
import { formatNote, signNote } from '../../chain/note.ts';
import { formatCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { verifyChain } from '../../chain/verify.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { T0 } from './chain-fixture.ts';
import { b64, ONLINE } from './key-fixture.ts';

/** The online key in force after `blocks` (one of ONLINE). */
export function keyInForce(blocks: readonly Block[]): Signer {
  const r = verifyChain([...blocks], { backend: nodeBackend });
  if (!r.ok) throw new Error(r.message);
  return Object.values(ONLINE).find((s) => b64(s) === r.keys.online.publicKey)!;
}

/** The checkpoint note of the first `size` blocks under `origin`, one signature line per signer, in order. */
export function noteOf(blocks: readonly Block[], size: number, origin: string, signers: readonly Signer[]): string {
  const root = rootOfEntries(nodeBackend, blocks.slice(0, size).map((b) => hexDecode(b.record_hash)!));
  const body = formatCheckpoint({ origin, size, root, extensions: [] });
  return formatNote({ text: body, signatures: signers.map((s) => signNote(nodeBackend, body, origin, s)) });
}

/** checkpoint.json and checkpoint.note of the first `size` blocks (note signers default to the key in force). */
export function rootFilesOf(blocks: readonly Block[], size: number, origin: string, noteSigners?: readonly Signer[]): { json: string; note: string } {
  const prefix = blocks.slice(0, size);
  const signer = keyInForce(prefix);
  const cp = buildCheckpoint({ head: prefix[size - 1]!, signer, now: T0 + size * 1000 + 500 });
  return { json: formatCheckpointFile(cp), note: noteOf(blocks, size, origin, noteSigners ?? [signer]) };
}

const commitInfo = (size: number) => ({ message: `blocks to ${size}\n`, authorName: 't', authorEmail: 't@vouch.invalid', timestamp: 1_790_000_000 + size });

/** A chain repository at `dir` holding the first `size` blocks, its checkpoint and note. */
export function initKeyRepo(dir: string, blocks: readonly Block[], size: number, origin: string, noteSigners?: readonly Signer[]): Promise<ChainRepo> {
  return ChainRepo.init(dir, blocks.slice(0, size).map((b) => ({ index: b.index, content: formatBlockFile(b) })), rootFilesOf(blocks, size, origin, noteSigners), commitInfo(size));
}

/** Appends blocks repo.size..size-1 with the checkpoint and note of `size`, in one commit. */
export async function appendTo(repo: ChainRepo, blocks: readonly Block[], size: number, origin: string, noteSigners?: readonly Signer[]): Promise<void> {
  const files = blocks.slice(repo.size, size).map((b) => ({ index: b.index, content: formatBlockFile(b) }));
  await repo.append(files, rootFilesOf(blocks, size, origin, noteSigners), commitInfo(size));
}
