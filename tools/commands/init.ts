/**
 * `vouch init`: a new chain repository with its authority block, checkpoint
 * and signed tlog checkpoint note (`checkpoint.note`, origin `--origin`,
 * default `vouch/<signer>`); prints the note verifier key.
 */
import type { Command } from '../command.ts';
import { UsageError, emit } from '../command.ts';
import { buildAuthorityBlock, buildCheckpoint } from '../../chain/build.ts';
import { formatBlockFile, formatCheckpointFile, isUnitName } from '../../chain/block.ts';
import { base64Encode } from '../../chain/encoding.ts';
import { SIG_ED25519, isValidKeyName, verifierKey } from '../../chain/note.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { createChain } from '../../store/chain-repo.ts';
import { commitFor, defaultOrigin, entryOf } from '../../store/chain-append.ts';
import { signNoteText } from '../../platform/note-signer.ts';
import { TreeEdge, writeEdgeFile } from '../../store/tree-edge.ts';

export const init: Command = {
  name: 'init',
  usage: '--chain DIR --key FILE --signer ID [--uns OWNER/NAME] [--origin NAME] [--layout sparse]',
  summary:
    'Creates a new chain repository in DIR (a git repository) holding the signed authority block and checkpoint. It commits the signed checkpoint note (checkpoint.note) too and prints its verifier key.',
  options: {
    chain: { type: 'string', value: 'DIR', help: 'directory of the new chain (must not exist or be empty)', required: true },
    key: { type: 'string', value: 'FILE', help: 'the authority private key (PKCS#8 PEM, mode 0600)', required: true },
    signer: { type: 'string', value: 'ID', help: 'the signer id written into every block', required: true },
    uns: { type: 'string', value: 'OWNER/NAME', help: 'name of the chain itself (default: vouch/provenance-chain)' },
    origin: { type: 'string', value: 'NAME', help: "the log's origin: first line of checkpoint.note and its key name (default: vouch/<signer>)" },
    layout: {
      type: 'string',
      value: 'sparse',
      help: 'sparse, the only layout: block files only in git objects (docs/spec/repository.md "Layouts"); full was removed (docs/decisions/one-layout.md)',
    },
  },
  async run(v) {
    const uns = v.uns ?? 'vouch/provenance-chain';
    if (!isUnitName(uns)) throw new UsageError(`--uns must be OWNER/NAME, got ${JSON.stringify(uns)}`);
    if (!/^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$/.test(v.signer))
      throw new UsageError('--signer must be 1-128 letters, digits, . _ @ -, starting with a letter or digit');
    const layout = v.layout ?? 'sparse';
    if (layout === 'full')
      throw new UsageError(
        '--layout full was removed: vouch writes the sparse layout only, and a chain in the full layout converts when opened for writing (docs/decisions/one-layout.md)',
      );
    if (layout !== 'sparse') throw new UsageError(`--layout must be sparse, got ${JSON.stringify(layout)}`);
    const origin: string = v.origin ?? defaultOrigin(v.signer);
    if (!isValidKeyName(origin)) throw new UsageError(`--origin must be a note key name (no spaces, "+" or control characters), got ${JSON.stringify(origin)}`);
    const signer = nodeSigner(v.signer, readKeyFile(v.key));
    const now = Date.now();
    const block = buildAuthorityBlock({ signer, backend: nodeBackend, now, uns });
    const checkpoint = buildCheckpoint({ head: block, signer, now });
    const edge = TreeEdge.empty(nodeBackend);
    edge.append(entryOf(block.record_hash));
    const note = signNoteText(signer, origin, 1, edge.root());
    await createChain(v.chain, [{ index: 0, content: formatBlockFile(block) }], { json: formatCheckpointFile(checkpoint), note }, commitFor([block], now));
    writeEdgeFile(v.chain, edge);
    const vkey = verifierKey(nodeBackend, origin, SIG_ED25519, signer.publicKey);
    emit(v, `initialized ${v.chain}: authority ${v.signer} ${base64Encode(signer.publicKey)}, head ${block.record_hash}\nverifier key: ${vkey}`, {
      chain: v.chain,
      layout,
      signer: v.signer,
      public_key: base64Encode(signer.publicKey),
      head: block.record_hash,
      origin,
      verifier_key: vkey,
    });
    return 0;
  },
};
