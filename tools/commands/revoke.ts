/**
 * `vouch revoke`: appends one revoke block naming an endorse block, offline
 * (a running authority gateway revokes through POST /v1/revoke instead; the
 * chain lock refuses this command meanwhile and says so).
 * What `--url U [--semver V]` or `--block N` names, and every refusal, is
 * chain/revoke.ts: the block a lookup selects for U today (with V: the
 * newest block with exactly V); never block 0, a revoke block, a block
 * already revoked, or a block of several artifacts named by one URL.
 * The chain is loaded verified first, as a gateway start loads it
 * (gateway/chain/verified-state.ts: warm from the last verified state in .git, only
 * the blocks after it verified; else every block): a revocation is decided
 * on the chain as signed. The commit carries the signed checkpoint note of the new size
 * as `vouch endorse`'s does. A refusal appends nothing.
 */
import type { Command } from '../command.ts';
import { UsageError, emit } from '../command.ts';
import { buildCheckpoint, buildRevokeBlock } from '../../chain/build.ts';
import { isArtifactUrl, isDate, isSemver, formatDateTime, LIMITS } from '../../chain/block.ts';
import { VouchError } from '../../chain/errors.ts';
import { hexEncode } from '../../chain/encoding.ts';
import { resolveRevokeTarget, type RevokeTarget } from '../../chain/revoke.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { openChain } from '../../store/chain-repo.ts';
import { signerForChain } from '../chain-keys.ts';
import { assertChainWritable } from '../../store/chain-lock.ts';
import { trustedHead } from '../../store/chain-append.ts';
import { appendWithNote } from '../signed-append.ts';
import { offlineIndexRootWith } from '../offline-index.ts';

export const revoke: Command = {
  name: 'revoke',
  usage: '--chain DIR --key FILE (--url URL [--semver V] | --block N) [--effective-date D] [--comment T]',
  summary: 'Appends one revoke block naming the endorse block selected for URL (or block N), signed by the authority key; prints its index and record_hash.',
  details: [
    '--url names the block a lookup selects for URL today: the newest version in force; with --semver, the newest block',
    'with exactly that version. A block that endorses several artifacts (a release, a lockfile) is revoked whole:',
    'name it with --block N (a --url that resolves to one is refused and the message gives N).',
    'From --effective-date (default: today, UTC) lookups carry revoked_by, downloads answer 410 and the ecosystem',
    'routes stop listing the version; at= before that date still selects it.',
    'Refused, nothing appended: nothing endorsed for URL (exit 2, not_found), block 0 or a revoke block (exit 2,',
    'bad_request), a block already revoked (exit 1, already_revoked), a chain a running gateway holds (exit 2:',
    'revoke through it, POST /v1/revoke). See docs/guide/revoking.md.',
  ].join('\n'),
  options: {
    chain: { type: 'string', value: 'DIR', help: 'the chain repository', required: true },
    key: { type: 'string', value: 'FILE', help: 'the authority private key', required: true },
    url: { type: 'string', value: 'URL', help: 'revoke the block selected for this artifact URL' },
    semver: { type: 'string', value: 'V', help: 'with --url: the newest block endorsing exactly this version' },
    block: { type: 'string', value: 'N', help: 'revoke endorse block N' },
    'effective-date': { type: 'string', value: 'D', help: 'YYYY-MM-DD from which the revocation is in force (default: today, UTC)' },
    comment: { type: 'string', value: 'T', help: 'free text for the block (default "revoke block N")' },
  },
  async run(v) {
    if ((v.url === undefined) === (v.block === undefined))
      throw new UsageError('give --url URL (optionally --semver V) or --block N (see vouch revoke --help)');
    if (v.semver !== undefined && v.url === undefined) throw new UsageError('--semver applies only with --url');
    let target: RevokeTarget;
    if (v.block !== undefined) {
      if (!/^(0|[1-9][0-9]{0,14})$/.test(v.block)) throw new UsageError(`--block must be a block index (an integer >= 0), got ${JSON.stringify(v.block)}`);
      target = { block: Number(v.block) };
    } else {
      if (!isArtifactUrl(v.url)) throw new UsageError(`--url must be an absolute http(s) URL, got ${JSON.stringify(v.url)}`);
      if (v.semver !== undefined && !isSemver(v.semver)) throw new UsageError(`--semver must be a SemVer 2.0.0 version, got ${JSON.stringify(v.semver)}`);
      target = { url: v.url, semver: v.semver };
    }
    if (v['effective-date'] !== undefined && !isDate(v['effective-date'])) throw new UsageError('--effective-date must be a date YYYY-MM-DD');
    if (v.comment !== undefined && v.comment.length > LIMITS.comment) throw new UsageError(`--comment is longer than ${LIMITS.comment} characters`);

    assertChainWritable(v.chain, 'POST /v1/revoke');
    const key = readKeyFile(v.key);
    const repo = await openChain(v.chain);
    // The online key in force (block 0's, or the one key events put in force: tools/chain-keys.ts).
    const { signer: keyed, keys } = signerForChain(repo, key);
    const trusted = trustedHead(repo, keyed, keys);
    // The verified chain, as a gateway start loads it: warm from the last verified state, else every block verified.
    const { ChainState } = await import('../../gateway/chain/verified-state.ts');
    const { state } = await ChainState.load(repo);
    const index = state.index;
    if (index.size !== trusted.head.index + 1 || index.head?.record_hash !== trusted.head.record_hash) {
      throw new VouchError(
        'checkpoint_mismatch',
        `the verified chain (${index.size} blocks) is not the one the checkpoint signs (${trusted.head.index + 1} blocks); nothing appended`,
        { index: null },
      );
    }
    const recordHashes = function* (): Iterable<string> {
      for (let i = 0; i < index.size; i++) yield hexEncode(index.recordHashBytes(i));
    };
    const now = Date.now();
    const today = formatDateTime(now).slice(0, 10);
    const revoked = resolveRevokeTarget(index, target, today);
    const block = buildRevokeBlock({
      prev: trusted.head,
      target: revoked,
      signer: keyed,
      backend: nodeBackend,
      now,
      effectiveDate: v['effective-date'] ?? today,
      ...(v.comment !== undefined ? { comment: v.comment } : {}),
    });
    const checkpoint = buildCheckpoint({ head: block, signer: keyed, now });
    await appendWithNote(repo, trusted, keyed, [block], checkpoint, now, recordHashes, undefined, offlineIndexRootWith(repo));
    const urls = revoked.payload.endorsements.map((e) => e.artifact_url);
    emit(
      v,
      `${block.index} ${block.record_hash} revokes block ${revoked.index} (${revoked.payload.uns} ${revoked.payload.semver}, ${urls.length} artifact${urls.length === 1 ? '' : 's'}) from ${block.payload.effective_date}`,
      {
        status: 'revoked',
        index: block.index,
        record_hash: block.record_hash,
        effective_date: block.payload.effective_date,
        revokes: { index: revoked.index, record_hash: revoked.record_hash, urls },
      },
    );
    return 0;
  },
};
