/**
 * `vouch endorse`: appends one endorsement block. Hashes `--file` when given,
 * else fetches the URL. Several `--url` (each with its `--file`, in order)
 * make one block endorsing several artifacts of one release.
 */
import type { Command } from '../command.ts';
import { UsageError, emit } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';
import { buildCheckpoint, buildEndorseBlock, type EndorsementInput } from '../../chain/build.ts';
import { parseBlockText, isArtifactUrl, isDate, isLicenseId, isSemver, isUnitName, LIMITS } from '../../chain/block.ts';
import { isHashAlgorithm, DEFAULT_HASH_ALGORITHM, HASH_ALGORITHMS } from '../../chain/hash-algorithms.ts';
import { readKeyFile } from '../../lib/key-file.ts';
import { nodeBackend, nodeSigner } from '../../lib/node-crypto.ts';
import { ChainRepo } from '../../lib/chain-repo.ts';
import { appendSigned, findEndorsements, trustedHead } from '../../lib/chain-store.ts';
import { digestFile, digestUrl } from '../../lib/artifact-digest.ts';

export const endorse: Command = {
  name: 'endorse',
  usage: '--chain DIR --key FILE --url URL --name OWNER/NAME --semver V --license ID [--file PATH] [--comment T] [--effective-date D] [--algorithm A]',
  summary: 'Appends one endorsement block binding URL to the hash of its bytes, signed by the authority key; prints the block index and record_hash.',
  details: [
    'The bytes are read from --file when given, otherwise fetched from the URL.',
    'Repeat --url (and --file, in the same order) to endorse several artifacts in one block.',
    `Algorithms: ${Object.keys(HASH_ALGORITHMS).join(', ')} (default ${DEFAULT_HASH_ALGORITHM}).`,
    'Refuses (exit 1, semver_conflict) a URL already signed under the same semver with other bytes;',
    'bytes identical to the newest version of the URL are reported as unchanged and nothing is appended.',
  ].join('\n'),
  options: {
    chain: { type: 'string', value: 'DIR', help: 'the chain repository', required: true },
    key: { type: 'string', value: 'FILE', help: 'the authority private key', required: true },
    url: { type: 'string', multiple: true, value: 'URL', help: 'absolute http(s) URL of the artifact', required: true },
    name: { type: 'string', value: 'OWNER/NAME', help: 'the unit the artifact belongs to', required: true },
    semver: { type: 'string', value: 'V', help: 'its SemVer 2.0.0 version', required: true },
    license: { type: 'string', value: 'ID', help: 'SPDX license id', required: true },
    file: { type: 'string', multiple: true, value: 'PATH', help: 'local copy of the artifact bytes (else the URL is fetched)' },
    comment: { type: 'string', value: 'T', help: 'free text for the block and its entries' },
    'effective-date': { type: 'string', value: 'D', help: 'YYYY-MM-DD used by at= selection (default: today, UTC)' },
    algorithm: { type: 'string', value: 'A', help: `hash algorithm (default ${DEFAULT_HASH_ALGORITHM})` },
  },
  async run(v) {
    const urls: string[] = v.url;
    const files: string[] = v.file ?? [];
    if (files.length !== 0 && files.length !== urls.length) throw new UsageError(`give one --file per --url (${urls.length} URLs, ${files.length} files)`);
    for (const u of urls) if (!isArtifactUrl(u)) throw new UsageError(`--url must be an absolute http(s) URL, got ${JSON.stringify(u)}`);
    if (new Set(urls).size !== urls.length) throw new UsageError('a URL may appear only once in a block');
    if (!isUnitName(v.name)) throw new UsageError(`--name must be OWNER/NAME, got ${JSON.stringify(v.name)}`);
    if (!isSemver(v.semver)) throw new UsageError(`--semver must be a SemVer 2.0.0 version, got ${JSON.stringify(v.semver)}`);
    if (!isLicenseId(v.license)) throw new UsageError(`--license must be an SPDX-style id, got ${JSON.stringify(v.license)}`);
    if (v['effective-date'] !== undefined && !isDate(v['effective-date'])) throw new UsageError('--effective-date must be a date YYYY-MM-DD');
    if (v.comment !== undefined && v.comment.length > LIMITS.comment) throw new UsageError(`--comment is longer than ${LIMITS.comment} characters`);
    const algorithm = v.algorithm ?? DEFAULT_HASH_ALGORITHM;
    if (!isHashAlgorithm(algorithm)) throw new UsageError(`unknown --algorithm ${JSON.stringify(algorithm)} (${Object.keys(HASH_ALGORITHMS).join(', ')})`);

    const key = readKeyFile(v.key);
    const repo = await ChainRepo.open(v.chain);
    const authority = parseBlockText(repo.readBlockFile(0), 0).payload.authority!;
    const keyed = nodeSigner(authority.signer, key);
    const { head } = trustedHead(repo, keyed);

    const digests: { artifactHash: string; bytes: number }[] = [];
    for (let i = 0; i < urls.length; i++) {
      digests.push(files.length ? await digestFile(files[i]!, algorithm) : await digestUrl(urls[i]!, algorithm));
    }
    const history = findEndorsements(repo, urls);
    let unchanged = 0;
    for (let i = 0; i < urls.length; i++) {
      const versions = history.get(urls[i]!)!;
      const conflict = versions.find((x) => x.semver === v.semver && x.artifactHash !== digests[i]!.artifactHash);
      if (conflict) {
        throw new VouchError('semver_conflict', `${urls[i]} ${v.semver} is already signed in block ${conflict.block.index} with ${conflict.artifactHash}, not ${digests[i]!.artifactHash}`, { resource: urls[i]! });
      }
      const newest = versions[versions.length - 1];
      if (newest && newest.artifactHash === digests[i]!.artifactHash && newest.semver === v.semver) unchanged++;
    }
    if (unchanged === urls.length) {
      const newest = history.get(urls[0]!)!.at(-1)!;
      emit(v, `unchanged: ${urls.length === 1 ? urls[0] : `all ${urls.length} URLs`} already signed with these bytes in block ${newest.block.index} ${newest.block.record_hash}`,
        { status: 'unchanged', index: newest.block.index, record_hash: newest.block.record_hash, urls });
      return 0;
    }
    const entries: EndorsementInput[] = urls.map((url, i) => ({
      url, artifactHash: digests[i]!.artifactHash, name: v.name, semver: v.semver, license: v.license, comment: v.comment ?? '',
    }));
    const now = Date.now();
    const block = buildEndorseBlock({
      prev: head, signer: keyed, backend: nodeBackend, now, entries, uns: v.name, semver: v.semver,
      ...(v.comment !== undefined ? { comment: v.comment } : {}),
      ...(v['effective-date'] !== undefined ? { effectiveDate: v['effective-date'] } : {}),
    });
    const checkpoint = buildCheckpoint({ head: block, signer: keyed, now });
    await appendSigned(repo, [block], checkpoint, now);
    emit(v, `${block.index} ${block.record_hash}`, {
      status: 'posted', index: block.index, record_hash: block.record_hash, urls, artifact_hashes: digests.map((d) => d.artifactHash),
    });
    return 0;
  },
};
