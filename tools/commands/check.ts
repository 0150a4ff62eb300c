/**
 * `vouch check`: offline, does FILE match what the chain signed for URL?
 * Verifies the whole chain first (a tampered chain vouches for nothing),
 * selects the version (docs/spec/design.md §3.3) and compares the file's hash.
 */
import type { Command } from '../command.ts';
import { UsageError, emit, refuse } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';
import { isDate, isSemver, parseBlockText } from '../../chain/block.ts';
import { ChainIndex } from '../../chain/select.ts';
import { parseArtifactHash } from '../../chain/hash-algorithms.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import { openChainReadOnly } from '../../store/chain-repo.ts';
import { digestFile } from '../../artifacts/artifact-digest.ts';

export const check: Command = {
  name: 'check',
  usage: '--chain DIR --url URL [--semver V | --at D] [--public-key B64] FILE',
  summary:
    'Verifies the chain, selects the block signed for URL and checks that FILE hashes to its artifact_hash. Exit 0 match, 1 no match (or nothing signed), 2 usage or environment error.',
  options: {
    chain: { type: 'string', value: 'DIR', help: 'the chain directory', required: true },
    url: { type: 'string', value: 'URL', help: 'the artifact URL as endorsed', required: true },
    semver: { type: 'string', value: 'V', help: 'exact version' },
    at: { type: 'string', value: 'D', help: 'date YYYY-MM-DD: the version in force then' },
    'public-key': { type: 'string', value: 'B64', help: 'pinned authority public key (base64)' },
  },
  positionals: [{ name: 'FILE', required: true }],
  async run(v, [file]) {
    if (v.semver !== undefined && !isSemver(v.semver)) throw new UsageError(`--semver must be a SemVer 2.0.0 version, got ${JSON.stringify(v.semver)}`);
    if (v.at !== undefined && !isDate(v.at)) throw new UsageError('--at must be a date YYYY-MM-DD');
    const repo = await openChainReadOnly(v.chain);
    try {
      await verifyDirectory(repo, { pinnedPublicKey: v['public-key'] ?? null });
    } catch (e) {
      if (e instanceof VouchError && e.kind === 'integrity') {
        return refuse(v, e.code, `the chain does not verify: ${e.message}`, { index: e.index ?? null });
      }
      throw e;
    }
    const index = new ChainIndex();
    for (let i = 0; i < repo.size; i++) index.add(parseBlockText(repo.readBlockFile(i), i));
    const today = new Date().toISOString().slice(0, 10);
    const sel = index.select(v.url, { semver: v.semver, at: v.at, today });
    if (sel === null) {
      return refuse(v, 'not_found', `no provenance block is on file for ${v.url}${v.semver ? ` ${v.semver}` : ''}${v.at ? ` at ${v.at}` : ''}`);
    }
    const signed = parseArtifactHash(sel.entry.artifact_hash);
    if (typeof signed === 'string') throw new VouchError('bad_artifact_hash', signed);
    const { artifactHash } = await digestFile(file!, signed.algorithm);
    const what = `${sel.entry.name} ${sel.entry.semver} (block ${sel.block.index})`;
    if (sel.revokedBy) {
      return refuse(v, 'revoked', `${what} was revoked by block ${sel.revokedBy.index} from ${sel.revokedBy.payload.effective_date}`, {
        index: sel.block.index,
      });
    }
    if (artifactHash !== sel.entry.artifact_hash) {
      return refuse(v, 'hash_mismatch', `${file} hashes to ${artifactHash}, the chain signed ${sel.entry.artifact_hash} for ${v.url} ${what}`, {
        expected: sel.entry.artifact_hash,
        actual: artifactHash,
        index: sel.block.index,
      });
    }
    emit(v, `match: ${file} is ${v.url} ${what}, ${artifactHash}`, {
      file,
      url: v.url,
      name: sel.entry.name,
      semver: sel.entry.semver,
      index: sel.block.index,
      record_hash: sel.block.record_hash,
      artifact_hash: artifactHash,
    });
    return 0;
  },
};
