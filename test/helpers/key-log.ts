/**
 * Chains with key events as an authority commits them (docs/spec/key-events.md):
 * a prefix of a `KeyChain` written to a chain repository with its
 * checkpoint.json and checkpoint.note signed by the key in force (or, in a
 * rollover, by several keys), and later prefixes appended as one commit each.
 */
import { artifactHashOf, buildCheckpoint, buildEndorseBlock } from '../../chain/build.ts';
import type { Block } from '../../chain/block.ts';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import type { Signer } from '../../chain/crypto-backend.ts';
import { hexDecode, utf8 } from '../../chain/encoding.ts';
import { rootOfEntries } from '../../chain/merkle.ts';
import { formatNote, signNote } from '../../chain/note.ts';
import { formatCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { verifyChain } from '../../chain/verify.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { T0 } from './chain-fixture.ts';
import { b64, ONLINE, type KeyChain } from './key-fixture.ts';

/** The online key in force after `blocks`: one of ONLINE, or of `chain.signer`s seen by `initKeyRepo`/`appendTo` callers (`known`). */
const known: Signer[] = [...Object.values(ONLINE)];
export function keyInForce(blocks: readonly Block[]): Signer {
  const r = verifyChain([...blocks], { backend: nodeBackend });
  if (!r.ok) throw new Error(r.message);
  const s = known.find((k) => b64(k) === r.keys.online.publicKey);
  if (s === undefined) throw new Error(`keyInForce: no signer known for ${r.keys.online.publicKey} (knowSigner it)`);
  return s;
}

/** Makes `signer` known to `keyInForce` (an online key outside ONLINE). */
export function knowSigner(signer: Signer): void {
  known.push(signer);
}

/** The checkpoint note of the first `size` blocks under `origin`, one signature line per signer, in order. */
export function noteOf(blocks: readonly Block[], size: number, origin: string, signers: readonly Signer[]): string {
  const root = rootOfEntries(
    nodeBackend,
    blocks.slice(0, size).map((b) => hexDecode(b.record_hash)!),
  );
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
  return ChainRepo.init(
    dir,
    blocks.slice(0, size).map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    rootFilesOf(blocks, size, origin, noteSigners),
    commitInfo(size),
  );
}

/** Appends blocks repo.size..size-1 with the checkpoint and note of `size`, in one commit. */
export async function appendTo(repo: ChainRepo, blocks: readonly Block[], size: number, origin: string, noteSigners?: readonly Signer[]): Promise<void> {
  const files = blocks.slice(repo.size, size).map((b) => ({ index: b.index, content: formatBlockFile(b) }));
  await repo.append(files, rootFilesOf(blocks, size, origin, noteSigners), commitInfo(size));
}

/** Appends to `chain` an endorse block of `url` with the sha256 of `body`, signed by `by` (default: the key in force). */
export function endorseAt(chain: KeyChain, url: string, body: string, semver: string, by: Signer = chain.signer): Block {
  const block = buildEndorseBlock({
    prev: chain.head,
    signer: by,
    backend: nodeBackend,
    now: Date.parse(chain.head.posted) + 1000,
    entries: [{ url, artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(body)), name: 'acme/followed', semver, license: 'MIT' }],
  });
  chain.blocks.push(block);
  return block;
}
