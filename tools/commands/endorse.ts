/**
 * `vouch endorse`: appends one endorsement block. Hashes `--file` when given,
 * else fetches the URL. Several `--url` (each with its `--file`, in order)
 * make one block endorsing several artifacts of one release. `--lockfile`
 * endorses every artifact a lockfile pins instead (endorse-lockfile.ts).
 * Licences are SPDX expressions (tools/lockfiles/licenses.ts) unless
 * `--license-unchecked`. The head is checked against the checkpoint and the
 * key every time; earlier endorsements of the URLs come from the last
 * verified state when there is one (tools/endorse-history.ts), else from a
 * scan of every block file. The commit carries the signed checkpoint note
 * of the new size (tools/signed-append.ts `appendWithNote`: the root from the
 * tree edge kept in .git when it agrees with the committed note, else from
 * every block's record hash).
 */
import type { Command } from '../command.ts';
import { UsageError, emit } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';
import { buildCheckpoint, buildEndorseBlock, type EndorsementInput } from '../../chain/build.ts';
import { DEFAULT_HASH_ALGORITHM, HASH_ALGORITHMS } from '../../chain/hash-algorithms.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { openChain } from '../../store/chain-repo.ts';
import { signerForChain } from '../chain-keys.ts';
import { findEndorsements, trustedHead } from '../../store/chain-append.ts';
import { appendWithNote } from '../signed-append.ts';
import { offlineIndexRootWith } from '../offline-index.ts';
import { noteScan, priorEndorsements, refreshIfBehind } from '../endorse-history.ts';
import { checkUrlOptions } from './endorse-options.ts';
import { LOCKFILE_ONLY, DEFAULT_GOPROXY, DEFAULT_MAVEN_REPO, DEFAULT_INDEX_URL } from '../lockfiles/defaults.ts';

/** Phase timings on stderr when VOUCH_TIMINGS=1 (for benches). */
function phaseTimer(): { mark(name: string): void; done(): void } {
  const on = process.env.VOUCH_TIMINGS === '1';
  const parts: string[] = [];
  let t = performance.now();
  return {
    mark(name) {
      if (!on) return;
      const now = performance.now();
      parts.push(`${name} ${(now - t).toFixed(0)}`);
      t = now;
    },
    done() {
      if (on) process.stderr.write(`timings ms: process ${performance.now().toFixed(0)}; ${parts.join(', ')}\n`);
    },
  };
}

export const endorse: Command = {
  name: 'endorse',
  usage:
    '--chain DIR --key FILE --url URL --name OWNER/NAME --semver V --license ID [--file PATH] [--comment T] [--effective-date D] [--algorithm A] [--license-unchecked]\n' +
    '       vouch endorse --chain DIR --key FILE --lockfile FILE [--lockfile-type npm|pip|go|maven] [--index-url URL] [--goproxy URL] [--maven-repo URL] [--origin CANONICAL=FETCH]... ' +
    '[--license ID] [--name OWNER/NAME] [--semver V] [--comment T] [--effective-date D] [--license-unchecked]\n' +
    '       vouch endorse --gateway URL --token-file FILE (--url URL... --name OWNER/NAME --semver V --license ID | --lockfile FILE ...)\n' +
    '       vouch endorse (--chain DIR --key FILE | --gateway URL --token-file FILE) (--oci REF... | --oci-file FILE) --license ID [--origin CANONICAL=FETCH]... [--registry-auth FILE]',
  summary: 'Appends one endorsement block binding URL to the hash of its bytes, signed by the authority key; prints the block index and record_hash.',
  details: [
    'The bytes are read from --file when given, otherwise fetched from the URL.',
    'Repeat --url (and --file, in the same order) to endorse several artifacts in one block.',
    `Algorithms: ${Object.keys(HASH_ALGORITHMS).join(', ')} (default ${DEFAULT_HASH_ALGORITHM}).`,
    'Refuses (exit 1, semver_conflict) a URL already signed under the same semver with other bytes;',
    'bytes identical to the newest version of the URL are reported as unchanged and nothing is appended.',
    'Licences must be SPDX license expressions (LicenseRef-<id> for others) unless --license-unchecked.',
    '',
    'With --lockfile: fetches every artifact a package-lock.json / npm-shrinkwrap.json, pip requirements file',
    "(--hash mode) or go.sum pins, checks it against the lockfile's hash, and endorses them all in as few blocks",
    'as the format allows (one commit). Entry names: npm/<name>, @scope/<name>, pypi/<PEP 503 name>,',
    'go/<module path with / as +>, maven/<groupId>+<artifactId>. Exit 1 on a mismatch or semver_conflict, and nothing is appended.',
    'Maven: --lockfile takes `mvn dependency:list -DoutputFile=FILE` output (the files, their POMs and parent POMs)',
    "or a local repository directory (the files Maven downloaded into it); each is checked against --maven-repo's",
    ".sha256 / .sha1 where present (and a directory's against the local file).",
    '',
    'With --gateway URL --token-file FILE (instead of --chain and --key): the running authority gateway fetches,',
    'hashes and signs (POST /v1/submit); lockfile hashes are sent as claims it checks, the blocks together',
    '(one commit, all or none, as offline), a refused entry is one line naming the package, and the exit codes',
    'are the offline ones.',
    'See docs/guide/endorsing-lockfiles.md.',
    '',
    'With --oci REF (repeatable) or --oci-file FILE (one image reference a line, or the image: fields of a compose file',
    'or Kubernetes manifests): resolves each tag at its registry and endorses https://<registry>/v2/<repository>/manifests/<tag>',
    'with the digest of the manifest or image index (docs/guide/oci.md).',
  ].join('\n'),
  options: {
    chain: { type: 'string', value: 'DIR', help: 'the chain repository (required without --gateway)' },
    key: { type: 'string', value: 'FILE', help: 'the authority private key (required without --gateway)' },
    gateway: { type: 'string', value: 'URL', help: 'endorse through this running authority gateway instead of writing the chain' },
    'token-file': { type: 'string', value: 'FILE', help: 'with --gateway: a file holding the submit token' },
    url: { type: 'string', multiple: true, value: 'URL', help: 'absolute http(s) URL of the artifact (required without --lockfile)' },
    name: { type: 'string', value: 'OWNER/NAME', help: "the unit the artifact belongs to (required without --lockfile; with it, the blocks' uns)" },
    semver: { type: 'string', value: 'V', help: "its SemVer 2.0.0 version (required without --lockfile; with it, the blocks' semver)" },
    license: { type: 'string', value: 'ID', help: 'SPDX license expression (required without --lockfile; with it, for entries that name none)' },
    'license-unchecked': { type: 'boolean', help: 'accept a licence that is not an SPDX expression (it must still be a chain licence id)' },
    file: { type: 'string', multiple: true, value: 'PATH', help: 'local copy of the artifact bytes (else the URL is fetched)' },
    comment: { type: 'string', value: 'T', help: 'free text for the block and its entries' },
    'effective-date': { type: 'string', value: 'D', help: 'YYYY-MM-DD used by at= selection (default: today, UTC)' },
    algorithm: { type: 'string', value: 'A', help: `hash algorithm (default ${DEFAULT_HASH_ALGORITHM})` },
    lockfile: {
      type: 'string',
      value: 'FILE',
      help: 'endorse every artifact this lockfile pins (package-lock.json, npm-shrinkwrap.json, *.txt, go.sum, a Maven dependency list or local repository)',
    },
    'lockfile-type': { type: 'string', value: 'npm|pip|go|maven', help: "the lockfile's type when its name does not tell" },
    'index-url': { type: 'string', value: 'URL', help: `pip: the PEP 503 simple index (default ${DEFAULT_INDEX_URL})` },
    goproxy: { type: 'string', value: 'URL', help: `go: the module proxy (default ${DEFAULT_GOPROXY})` },
    'maven-repo': { type: 'string', value: 'URL', help: `maven: the repository the build resolved from (default ${DEFAULT_MAVEN_REPO})` },
    origin: {
      type: 'string',
      multiple: true,
      value: 'CANONICAL=FETCH',
      help: 'with --lockfile or --oci: fetch URLs under CANONICAL from FETCH instead, endorsing the canonical URL',
    },
    oci: { type: 'string', multiple: true, value: 'REF', help: 'endorse this container image tag ([registry/]name[:tag][@digest]) with its manifest digest' },
    'oci-file': { type: 'string', value: 'FILE', help: 'endorse every image a file names (one a line, or compose / Kubernetes image: fields)' },
    'registry-auth': {
      type: 'string',
      value: 'FILE',
      help: "with --oci: credentials for private registries (Docker's config.json auths, or one line user:password); never logged",
    },
  },
  async run(v) {
    // The lockfile mode and the artifact fetcher are loaded only when used (start-up: tools/command-list.ts).
    if (v.oci !== undefined || v['oci-file'] !== undefined) return (await import('./endorse-oci.ts')).endorseOci(v);
    if (v['registry-auth'] !== undefined) throw new UsageError('--registry-auth applies only with --oci / --oci-file');
    if (v.gateway !== undefined) return (await import('./endorse-gateway.ts')).endorseGateway(v);
    if (v['token-file'] !== undefined) throw new UsageError('--token-file applies only with --gateway');
    for (const o of ['chain', 'key'])
      if (v[o] === undefined) throw new UsageError(`missing --${o} (or --gateway URL --token-file FILE to endorse through a running authority)`);
    if (v.lockfile !== undefined) return (await import('./endorse-lockfile.ts')).endorseLockfile(v);
    for (const o of LOCKFILE_ONLY) if (v[o] !== undefined) throw new UsageError(`--${o} applies only with --lockfile`);
    for (const o of ['url', 'name', 'semver', 'license']) {
      if (v[o] === undefined) throw new UsageError(`missing --${o} (see vouch endorse --help)`);
    }
    const urls: string[] = v.url;
    const files: string[] = v.file ?? [];
    if (files.length !== 0 && files.length !== urls.length) throw new UsageError(`give one --file per --url (${urls.length} URLs, ${files.length} files)`);
    const algorithm = checkUrlOptions(v, urls);

    const timings = phaseTimer();
    const key = readKeyFile(v.key);
    const repo = await openChain(v.chain);
    timings.mark('open');
    // The online key in force (block 0's, or the one key events put in force: tools/chain-keys.ts).
    const { signer: keyed, keys } = signerForChain(repo, key);
    const trusted = trustedHead(repo, keyed, keys);
    const { head } = trusted;
    timings.mark('head');

    const { digestFile, digestUrl } = await import('../../artifacts/artifact-digest.ts');
    const digests: { artifactHash: string; bytes: number }[] = [];
    for (let i = 0; i < urls.length; i++) {
      digests.push(files.length ? await digestFile(files[i]!, algorithm) : await digestUrl(urls[i]!, algorithm));
    }
    const report = priorEndorsements(repo, urls, head, findEndorsements, keys);
    noteScan(report, v.quiet === true || v.json === true);
    const history = report.history;
    timings.mark(`history(${report.source},${report.scanned})`);
    let unchanged = 0;
    for (let i = 0; i < urls.length; i++) {
      const versions = history.get(urls[i]!)!;
      const conflict = versions.find((x) => x.semver === v.semver && x.artifactHash !== digests[i]!.artifactHash);
      if (conflict) {
        throw new VouchError(
          'semver_conflict',
          `${urls[i]} ${v.semver} is already signed in block ${conflict.block.index} with ${conflict.artifactHash}, not ${digests[i]!.artifactHash}`,
          { resource: urls[i]! },
        );
      }
      const newest = versions[versions.length - 1];
      if (newest && newest.artifactHash === digests[i]!.artifactHash && newest.semver === v.semver) unchanged++;
    }
    if (unchanged === urls.length) {
      const newest = history.get(urls[0]!)!.at(-1)!;
      emit(
        v,
        `unchanged: ${urls.length === 1 ? urls[0] : `all ${urls.length} URLs`} already signed with these bytes in block ${newest.block.index} ${newest.block.record_hash}`,
        { status: 'unchanged', index: newest.block.index, record_hash: newest.block.record_hash, urls },
      );
      timings.done();
      return 0;
    }
    const entries: EndorsementInput[] = urls.map((url, i) => ({
      url,
      artifactHash: digests[i]!.artifactHash,
      name: v.name,
      semver: v.semver,
      license: v.license,
      comment: v.comment ?? '',
    }));
    const now = Date.now();
    const block = buildEndorseBlock({
      prev: head,
      signer: keyed,
      backend: nodeBackend,
      now,
      entries,
      uns: v.name,
      semver: v.semver,
      ...(v.comment !== undefined ? { comment: v.comment } : {}),
      ...(v['effective-date'] !== undefined ? { effectiveDate: v['effective-date'] } : {}),
    });
    const checkpoint = buildCheckpoint({ head: block, signer: keyed, now });
    const { edgeSource } = await appendWithNote(
      repo,
      trusted,
      keyed,
      [block],
      checkpoint,
      now,
      report.recordHashes,
      report.edgeSeed,
      offlineIndexRootWith(repo),
    );
    timings.mark(`append(edge ${edgeSource})`);
    if (await refreshIfBehind(repo, report, 1)) timings.mark('refresh');
    timings.done();
    emit(v, `${block.index} ${block.record_hash}`, {
      status: 'posted',
      index: block.index,
      record_hash: block.record_hash,
      urls,
      artifact_hashes: digests.map((d) => d.artifactHash),
    });
    return 0;
  },
};
