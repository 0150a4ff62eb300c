/** `vouch init`: a new chain repository with its authority block and checkpoint. */
import type { Command } from '../command.ts';
import { UsageError, emit } from '../command.ts';
import { buildAuthorityBlock, buildCheckpoint } from '../../chain/build.ts';
import { formatBlockFile, formatCheckpointFile, isUnitName } from '../../chain/block.ts';
import { base64Encode } from '../../chain/encoding.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { commitFor } from '../../store/chain-store.ts';

export const init: Command = {
  name: 'init',
  usage: '--chain DIR --key FILE --signer ID [--uns OWNER/NAME] [--layout full|sparse]',
  summary: 'Creates a new chain repository in DIR (a git repository) holding the signed authority block and checkpoint.',
  options: {
    chain: { type: 'string', value: 'DIR', help: 'directory of the new chain (must not exist or be empty)', required: true },
    key: { type: 'string', value: 'FILE', help: 'the authority private key (PKCS#8 PEM, mode 0600)', required: true },
    signer: { type: 'string', value: 'ID', help: 'the signer id written into every block', required: true },
    uns: { type: 'string', value: 'OWNER/NAME', help: 'name of the chain itself (default: vouch/provenance-chain)' },
    layout: { type: 'string', value: 'full|sparse', help: 'full (default): every block file checked out; sparse: block files only in git objects (README "Layouts")' },
  },
  async run(v) {
    const uns = v.uns ?? 'vouch/provenance-chain';
    if (!isUnitName(uns)) throw new UsageError(`--uns must be OWNER/NAME, got ${JSON.stringify(uns)}`);
    if (!/^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$/.test(v.signer)) throw new UsageError('--signer must be 1-128 letters, digits, . _ @ -, starting with a letter or digit');
    const layout = v.layout ?? 'full';
    if (layout !== 'full' && layout !== 'sparse') throw new UsageError(`--layout must be full or sparse, got ${JSON.stringify(layout)}`);
    const signer = nodeSigner(v.signer, readKeyFile(v.key));
    const now = Date.now();
    const block = buildAuthorityBlock({ signer, backend: nodeBackend, now, uns });
    const checkpoint = buildCheckpoint({ head: block, signer, now });
    await ChainRepo.init(v.chain, [{ index: 0, content: formatBlockFile(block) }], formatCheckpointFile(checkpoint), commitFor([block], now), { sparse: layout === 'sparse' });
    emit(v, `initialized ${v.chain}: authority ${v.signer} ${base64Encode(signer.publicKey)}, head ${block.record_hash}`,
      { chain: v.chain, layout, signer: v.signer, public_key: base64Encode(signer.publicKey), head: block.record_hash });
    return 0;
  },
};
