/**
 * `vouch verify`: offline verification of a chain directory (a plain `git
 * clone` is enough), signatures on all cores, a progress bar on a terminal,
 * one summary line, or the first failure as `<code> at block <index>`
 * (exit 1). What is verified is what branch main commits
 * (store/parallel-verify.ts). Safe on an untrusted clone: bounded reads per
 * file, no links followed, no FIFO waited on, no work planned from an
 * unverified size.
 * Must hold: each block's leaf hash is folded into the Merkle tree's right
 * edge in chain order, and the committed `checkpoint.note` must open with
 * the authority key, name the chain's size and carry that root.
 */
import type { Command } from '../command.ts';
import { progressReporter } from '../command.ts';
import { VouchError, isVouchError } from '../../chain/errors.ts';
import { base64Decode, base64Encode, bytesEqual } from '../../chain/encoding.ts';
import { openCheckpoint, type Checkpoint as LogCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { ed25519Engine, nodeBackend } from '../../platform/node-crypto.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import { type ChainReads, openChainReadOnly } from '../../store/chain-repo.ts';
import { parseBlockText } from '../../chain/block.ts';
import type { KeyState } from '../../chain/key-events.ts';
import { TreeEdge } from '../../store/tree-edge.ts';
import { CompletenessIndex, INDEX_EXTENSION } from '../../chain/index-tree.ts';
import { type IndexFacts, indexFactsOf } from '../../chain/index-facts.ts';
import { indexRootOf } from '../../chain/index-proof.ts';
import { type WorktreeStatus, worktreeStatus } from '../../store/worktree-status.ts';

/**
 * The committed checkpoint.note against the verified chain: signed by the
 * authority under its origin, naming `size`, with the recomputed `root`.
 * @throws VouchError checkpoint_mismatch
 */
function checkNote(text: string, publicKey: Uint8Array, size: number, root: Uint8Array): LogCheckpoint {
  const bad = (why: string, evidence: Record<string, unknown> = {}) =>
    new VouchError('checkpoint_mismatch', `checkpoint_mismatch: checkpoint.note ${why}`, { index: null, evidence });
  let cp: LogCheckpoint;
  try {
    cp = openCheckpoint(nodeBackend, text, { publicKey }).checkpoint;
  } catch (e) {
    throw bad(
      `does not open with the online key in force (${base64Encode(publicKey)}): ${(e as Error).message.replace(/^checkpoint_mismatch: /, '')}`,
      (e as VouchError).evidence ?? {},
    );
  }
  if (cp.size !== size) throw bad(`names ${cp.size} entries, the chain has ${size} blocks`, { origin: cp.origin, note_size: cp.size, size });
  if (!bytesEqual(cp.root, root)) {
    throw bad(`root ${base64Encode(cp.root)} is not the Merkle root of the chain's record hashes, ${base64Encode(root)}`, {
      origin: cp.origin,
      size,
      note_root: base64Encode(cp.root),
      root: base64Encode(root),
    });
  }
  return cp;
}

/**
 * The note's `vouch-index/v1` line (docs/spec/index.md 5) against the index
 * recomputed from the verified chain: the root when they agree, null when
 * the note has no line (a note from before the index, or one `vouch endorse` wrote).
 * @throws VouchError checkpoint_mismatch
 */
function checkIndexLine(note: LogCheckpoint, recomputed: Uint8Array): Uint8Array | null {
  const line = indexRootOf(note.extensions);
  if (line === null) return null;
  if ('malformed' in line) throw new VouchError('checkpoint_mismatch', `checkpoint_mismatch: checkpoint.note: ${line.malformed}`, { index: null });
  if (!bytesEqual(line, recomputed)) {
    throw new VouchError(
      'checkpoint_mismatch',
      `checkpoint_mismatch: checkpoint.note's vouch-index/v1 root ${base64Encode(line)} is not the completeness index recomputed from the chain, ${base64Encode(recomputed)}`,
      {
        index: null,
        evidence: { size: note.size, note_index_root: base64Encode(line), index_root: base64Encode(recomputed) },
      },
    );
  }
  return line;
}

/** The working tree's comparison, waited for at most `ms` more (then git is stopped and nothing is said but that). */
async function settleWithin(tree: ReturnType<typeof worktreeStatus>, ms: number): Promise<WorktreeStatus> {
  const timer = setTimeout(() => tree.cancel(`git status took longer than ${(ms / 1000).toFixed(1)} s after the verification`), ms);
  try {
    return await tree.result;
  } finally {
    clearTimeout(timer);
  }
}

/** Whether a note's text has a `vouch-index/v1` extension line (well-formed or not: checkIndexLine judges it). */
function commitsIndex(noteText: string | null): boolean {
  return (
    noteText !== null &&
    noteText
      .split('\n\n', 1)[0]!
      .split('\n')
      .some((l) => l.startsWith(INDEX_EXTENSION + ' ') || l === INDEX_EXTENSION)
  );
}

/** Each void range with the compromised key that signed it and the index of the block declaring it. */
function voidReport(repo: ChainReads, keys: KeyState): { from: number; to: number; compromised: string; declared_at: number }[] {
  return keys.voids.map(([from, to]) => {
    // The compromise block follows its void range (good_through + 1 .. compromise index - 1): verified with the chain.
    const st = parseBlockText(repo.readBlockFile(to + 1), to + 1).payload.statement;
    return { from, to, compromised: st?.action === 'compromise' ? st.compromised : 'unknown', declared_at: to + 1 };
  });
}

function keyLine(keys: KeyState): string {
  const root = keys.root ? `root v${keys.root.version} ${keys.root.threshold}-of-${keys.root.keys.length}` : 'no root';
  return (
    `online key ${keys.online.signer} ${keys.online.publicKey} since block ${keys.online.since}, ${root}, ${keys.sequence} key event${keys.sequence === 1 ? '' : 's'}` +
    (keys.voids.length ? `, ${keys.voids.reduce((n, [a, b]) => n + b - a + 1, 0)} void blocks` : '')
  );
}

/** The verification codes of a block, in the order they are checked (chain/verify.ts), for --help. */
const BLOCK_CHECKS: [string, string][] = [
  [
    'malformed',
    "not a block of this format (types, dates, intent, a URL twice in a block, a member name twice in an object, invalid UTF-8, a revoke of no earlier endorse block), not a regular file of at most 16 MiB, a file under blocks/ that is no block's (at the index it would hold), or a file that is not what branch main commits",
  ],
  ['index_gap', "the block's index differs from its position (a missing or extra block)"],
  ['prev_hash_mismatch', 'prev_hash does not name the previous block'],
  ['record_hash_mismatch', 'the block was edited after it was hashed'],
  ['weak_key', "block 0's key is not a full-order ed25519 key (small-order keys accept forged signatures)"],
  ['untrusted_authority', "block 0's key differs from --public-key"],
  ['signer_mismatch', 'the block names another signer than the online key in force'],
  ['bad_signature', 'the payload signature does not verify with the online key in force at its index (a key block: with the key its statement names)'],
  ['retired_key', 'the block is signed by an online key retired before it (the old key signs nothing after its rotation)'],
  ['bad_key_event', 'a key block whose statement the key state refuses (threshold, keys, sequence; a forged key block signed by the online key alone)'],
  ['time_regression', "posted is earlier than the previous block's"],
  ['bad_artifact_hash', 'an artifact_hash is not <algorithm>:<hex> of a known algorithm and length'],
];

export const verify: Command = {
  name: 'verify',
  usage: '--chain DIR [--public-key B64] [--json | --quiet] [--threads N] [--no-index]',
  summary: 'Verifies every block of the chain in DIR and its checkpoint, offline. Exit 0 valid, 1 invalid, 2 usage or environment error.',
  details: [
    'Each block is checked in this order; the first failure is reported as `<code> at block <index>` (exit 1):',
    ...BLOCK_CHECKS.map(([code, what]) => `  ${code.padEnd(22)}${what}`),
    'Key events (docs/spec/key-events.md): every block is checked against the online key in force at its index; the',
    'summary names the root, the online key in force and the number of key events. Blocks voided by a compromise',
    'declaration are a warning on stderr naming their indices and the compromised key (exit 0: kept as evidence).',
    'Then the checkpoint (`checkpoint_mismatch at checkpoint`): checkpoint.json must be signed by the online key in force',
    "and name this chain's size and head block. Without checkpoint.json a warning says a dropped newest block",
    "would go unnoticed. The Merkle tree over every block's record_hash (RFC 6962) is recomputed, and the",
    'checkpoint.note branch main commits must be signed by the online key in force under its origin (key name = origin),',
    "name the chain's size and carry that root; a chain without one (made before notes) is reported, not refused.",
    'When the note carries a `vouch-index/v1` line, the completeness index (docs/spec/index.md) is recomputed from',
    'every block and the line must carry its root (checkpoint_mismatch at checkpoint otherwise, exit 1); a note without',
    'the line (a chain from before the index) is reported as `index absent`. --no-index skips the index (the summary',
    'says `index not checked`); --index recomputes it even when the note has no line (the summary names no root then).',
    '',
    'What is verified is what branch main commits: blocks are read from git objects, not the working tree, and',
    'checkpoint.json in DIR must be the blob the branch holds. A working tree that differs from HEAD (git status:',
    'files edited, deleted or added after the checkout) is a warning on stderr naming the count and the first file',
    '(exit 0); with no working tree to compare (a bare repository) a note says so.',
    '',
    'Without --public-key the key of block 0 is trusted on first use; pin it to detect a substituted authority',
    "(the pin is block 0's key, also after rotations).",
  ].join('\n'),
  options: {
    chain: { type: 'string', value: 'DIR', help: 'the chain directory (a clone is enough)', required: true },
    'public-key': { type: 'string', value: 'B64', help: 'pinned authority public key (base64)' },
    threads: { type: 'string', value: 'N', help: 'worker threads for signature checks (default: all cores)' },
    index: {
      type: 'boolean',
      help: 'recompute the completeness index (docs/spec/index.md) even when the note carries no vouch-index/v1 line (checked by default when it does)',
    },
    'no-index': {
      type: 'boolean',
      help: "skip the completeness index: the note's vouch-index/v1 line is not checked",
    },
  },
  async run(v) {
    const started = performance.now();
    const threads = v.threads === undefined ? undefined : Number(v.threads);
    if (threads !== undefined && (!Number.isInteger(threads) || threads < 0 || threads > 256)) {
      throw new VouchError('usage', '--threads must be an integer from 0 to 256');
    }
    if (v.index === true && v['no-index'] === true) throw new VouchError('usage', '--index and --no-index exclude each other');
    const bar = v.json || v.quiet ? null : progressReporter('verifying');
    let tree: ReturnType<typeof worktreeStatus> | null = null;
    try {
      const repo = await openChainReadOnly(v.chain);
      // git status runs beside the verification: a working tree edited after the checkout is a warning, not a failure.
      tree = worktreeStatus(repo.dir);
      const edge = TreeEdge.empty(nodeBackend);
      // The completeness index (docs/spec/index.md), from the facts the workers hand back with each verified batch.
      let completeness = new CompletenessIndex(nodeBackend);
      let handedOver = true;
      // The completeness index is recomputed when the committed note commits one (or with --index), unless --no-index;
      // it is built on this thread from the facts the workers send (bench/RESULTS.md "Completeness index").
      const withIndex = v['no-index'] !== true && (v.index === true || commitsIndex(await repo.committedNote()));
      const result = await verifyDirectory(repo, {
        pinnedPublicKey: v['public-key'] ?? null,
        ...(withIndex
          ? {
              factsOnly: true,
              onVerified: (start: number, _texts: string[], facts: IndexFacts[]) => {
                if (!handedOver || start !== completeness.size) {
                  handedOver = false;
                  return;
                }
                for (const f of facts) completeness.addFacts(f);
              },
            }
          : {}),
        onLeaves: (_start, leaves) => {
          for (let o = 0; o < leaves.length; o += 32) edge.appendLeafHash(leaves.subarray(o, o + 32));
        },
        ...(threads !== undefined ? { threads } : {}),
        ...(bar ? { onProgress: bar.update } : {}),
      });
      bar?.done();
      const s = result.state;
      if (edge.size !== s.size) throw new VouchError('internal_error', `verify: ${edge.size} leaf hashes for ${s.size} blocks`);
      const root = edge.root();
      const noteText = await repo.committedNote();
      const note = noteText === null ? null : checkNote(noteText, base64Decode(s.authority!.publicKey)!, s.size, root);
      if (withIndex && (!handedOver || completeness.size !== s.size)) {
        // Blocks the workers did not hand over in order: read from the (verified) files, as the gateway does.
        completeness = new CompletenessIndex(nodeBackend);
        for (let i = 0; i < s.size; i++) completeness.addFacts(indexFactsOf(parseBlockText(repo.readBlockFile(i), i)));
      }
      const indexRoot = note === null || !withIndex ? null : checkIndexLine(note, completeness.root());
      const seconds = (performance.now() - started) / 1000;
      const keys = s.keys!;
      const voids = voidReport(repo, keys);
      const worktree = await settleWithin(tree, Math.max(2000, 0.05 * (performance.now() - started)));
      const summary = {
        ok: true,
        blocks: s.size,
        head: s.head,
        authority: { signer: s.authority!.signer, public_key: s.authority!.publicKey, pinned: v['public-key'] !== undefined },
        checkpoint: result.checkpoint ? { size: result.checkpoint.size, timestamp: result.checkpoint.timestamp } : null,
        keys: {
          events: keys.sequence,
          root: keys.root ? { version: keys.root.version, threshold: keys.root.threshold, keys: keys.root.keys } : null,
          online: { signer: keys.online.signer, public_key: keys.online.publicKey, since: keys.online.since },
          retired: keys.retired,
          compromised: keys.compromised,
          voids,
        },
        root: base64Encode(root),
        index_root: indexRoot === null ? null : base64Encode(indexRoot),
        index_checked: withIndex,
        origin: note?.origin ?? null,
        note: note !== null,
        working_tree: worktree.compared ? { compared: true, differs: worktree.differs, first: worktree.first } : { compared: false, why: worktree.why },
        seconds: Number(seconds.toFixed(3)),
        blocks_per_second: Math.round(s.size / seconds),
        // What checked the signatures: libsodium, then OpenSSL for what it refused (the same answers), or OpenSSL alone.
        ed25519: ed25519Engine() === 'libsodium' ? 'libsodium+openssl' : 'openssl',
      };
      if (v.json) process.stdout.write(JSON.stringify(summary) + '\n');
      else if (!v.quiet) {
        process.stdout.write(
          `ok: ${s.size} blocks, ` +
            (keys.sequence === 0
              ? `authority ${s.authority!.signer} ${s.authority!.publicKey}${v['public-key'] ? ' (pinned)' : ' (not pinned)'}, `
              : `${keyLine(keys)}, block 0's key ${keys.first}${v['public-key'] ? ' (pinned)' : ' (not pinned)'}, `) +
            `head ${s.head}, checkpoint ${result.checkpoint ? 'ok' : 'absent'}, ` +
            `note ${note ? `ok (origin ${note.origin}, root ${base64Encode(root)})` : 'absent'}, ` +
            `index ${v['no-index'] === true ? 'not checked (--no-index)' : indexRoot ? `ok (${base64Encode(indexRoot)})` : 'absent'}, ${seconds.toFixed(2)} s (${summary.blocks_per_second} blocks/s)\n`,
        );
        if (!result.checkpoint) process.stderr.write('warning: no checkpoint.json: a dropped newest block would go unnoticed\n');
        for (const w of voids) {
          process.stderr.write(
            `warning: void blocks ${w.from}-${w.to}: signed by ${w.compromised} after its last good block ${w.from - 1}, declared compromised at block ${w.declared_at}; ` +
              'kept as evidence, never selected (vouch reendorse endorses again what they endorsed)\n',
          );
        }
        if (!note) process.stderr.write('note: no checkpoint.note (a chain from before signed tlog checkpoints): it gains one with its next append\n');
      }
      if (!v.json) {
        if (!worktree.compared) {
          if (!v.quiet) process.stderr.write(`note: the working tree was not compared with HEAD (${worktree.why}); verified the committed blocks\n`);
        } else if (worktree.differs > 0) {
          process.stderr.write(
            `vouch verify: warning: the working tree differs from HEAD in ${worktree.differs} file${worktree.differs === 1 ? '' : 's'} (first: ${worktree.first}); ` +
              'verified the committed blocks, not the files checked out (git status; docs/guide/auditing.md)\n',
          );
        }
      }
      return 0;
    } catch (e) {
      bar?.done();
      tree?.cancel('verify failed');
      if (isVouchError(e) && e.kind === 'integrity') {
        const where = e.code === 'checkpoint_mismatch' ? ' at checkpoint' : typeof e.index === 'number' ? ` at block ${e.index}` : '';
        if (v.json) {
          process.stdout.write(JSON.stringify({ ok: false, code: e.code, index: e.index ?? null, message: e.message, evidence: e.evidence ?? null }) + '\n');
        }
        const detail = e.message.replace(new RegExp(`^${e.code}( at [^:]+)?: ?`), '');
        process.stderr.write(`${e.code}${where}${detail ? ': ' + detail : ''}\n`);
        return 1;
      }
      throw e;
    }
  },
};
