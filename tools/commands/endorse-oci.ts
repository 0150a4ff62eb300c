/**
 * `vouch endorse --oci REF... | --oci-file FILE`: endorses container image
 * tags (docs/guide/oci.md): each reference is resolved at its
 * registry to the digest of the manifest or index it names now, and its
 * canonical URL (`https://<registry>/v2/<repository>/manifests/<tag>`) is
 * endorsed with that digest, all in as few blocks as the format allows (one
 * commit) — or, with `--gateway`, in one submit per block to the running
 * authority, each entry claiming the digest (`expect`), which the authority
 * checks against the bytes it fetches itself.
 *
 * Trusts: nothing of the registry but the bytes it serves, hashed here.
 * Must hold: everything is read and resolved before anything is appended;
 * any failure appends nothing; the tags' URLs are the canonical ones even
 * when `--origin` fetched them elsewhere.
 */
import { readFileSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import { emit, UsageError } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';
import { buildCheckpoint, buildEndorseBlock, type EndorsementInput } from '../../chain/build.ts';
import { type Block, parseBlockText, isDate, isSemver, isUnitName, LIMITS } from '../../chain/block.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { openChain } from '../../store/chain-repo.ts';
import { trustedHead } from '../../store/chain-append.ts';
import { appendWithNote } from '../signed-append.ts';
import { offlineIndexRootWith } from '../offline-index.ts';
import { UNS_FULL_MAX } from '../../chain/uns-header.ts';
import { OriginMap } from '../lockfiles/http.ts';
import { checkLicense } from '../lockfiles/licenses.ts';
import { endorsementsOf } from '../lockfiles/history.ts';
import { packBlocks } from '../lockfiles/blocks.ts';
import { mapLimit } from '../lockfiles/pool.ts';
import {
  MAX_AUTH_FILE_BYTES,
  MAX_REF_FILE_BYTES,
  RegistryAuth,
  RegistryClient,
  imageSemver,
  imageUnitName,
  parseImageRef,
  readImageRefs,
  type ImageRef,
  type Resolved,
} from '../lockfiles/oci.ts';
import { noteScan, priorEndorsements, refreshIfBehind } from '../endorse-history.ts';
import { gatewayBase, gatewayError, readToken, submit } from './endorse-gateway.ts';

/** Entries one submit carries at most (gateway/routes/submit-request.ts). */
const SUBMIT_MAX_ENTRIES = 1000;

interface Plan {
  resolved: Resolved[];
  uns: string;
  semver: string;
  license: string;
  comment: string | undefined;
  quiet: boolean;
}

/** Options, the references (all parsed before the network), then every one resolved. */
async function plan(v: Record<string, any>): Promise<Plan> {
  for (const o of ['url', 'file', 'lockfile', 'algorithm', 'lockfile-type', 'index-url', 'goproxy']) {
    if (v[o] !== undefined) throw new UsageError(`--${o} does not apply with --oci / --oci-file`);
  }
  if (v.license === undefined) throw new UsageError('missing --license (the licence the image entries are endorsed under; LicenseRef-<id> for others)');
  const license = checkLicense(v.license, v['license-unchecked'] === true, { option: '--license' });
  if (v.name !== undefined && !isUnitName(v.name)) throw new UsageError(`--name must be OWNER/NAME, got ${JSON.stringify(v.name)}`);
  if (v.semver !== undefined && !isSemver(v.semver)) throw new UsageError(`--semver must be a SemVer 2.0.0 version, got ${JSON.stringify(v.semver)}`);
  if (v['effective-date'] !== undefined && !isDate(v['effective-date'])) throw new UsageError('--effective-date must be a date YYYY-MM-DD');
  if (v.comment !== undefined && v.comment.length > LIMITS.comment) throw new UsageError(`--comment is longer than ${LIMITS.comment} characters`);
  const texts: string[] = [...(v.oci ?? [])];
  const file: string | undefined = v['oci-file'];
  if (file !== undefined) {
    let size: number;
    try {
      size = statSync(file).size;
    } catch (e) {
      throw new VouchError('io_error', `cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    if (size > MAX_REF_FILE_BYTES) throw new VouchError('too_large', `${file} is ${size} bytes, more than ${MAX_REF_FILE_BYTES}`);
    texts.push(...readImageRefs(readFileSync(file, 'utf8').replace(/^\uFEFF/, ''), basename(file)));
  }
  if (texts.length === 0) throw new UsageError('--oci needs an image reference (or --oci-file FILE)');
  const refs = [...new Set(texts)].map(parseImageRef);
  const origins = OriginMap.parse(v.origin ?? []);
  const client = new RegistryClient(origins, v['registry-auth'] === undefined ? null : readAuth(v['registry-auth'], refs));
  let resolved: Resolved[];
  try {
    resolved = await mapLimit(refs, 8, (r) => client.resolve(r));
  } finally {
    await client.close();
  }
  const byUrl = new Map<string, Resolved>();
  for (const r of resolved) {
    const earlier = byUrl.get(r.url);
    if (earlier !== undefined && earlier.digest !== r.digest)
      throw new VouchError('bad_request', `${earlier.ref.text} and ${r.ref.text} name one URL with two digests`);
    byUrl.set(r.url, r);
  }
  const unique = [...byUrl.values()];
  const uns =
    v.name ??
    (unique.length === 1
      ? imageUnitName(unique[0]!.ref.repo)
      : file !== undefined
        ? imageUnitName(
            basename(file)
              .toLowerCase()
              .replace(/[^a-z0-9._-]+/g, '-'),
          )
        : 'oci/images');
  return { resolved: unique, uns, semver: v.semver ?? '0.0.0', license, comment: v.comment, quiet: v.json === true || v.quiet === true };
}

/** The --registry-auth file (bounded; its contents never echoed). */
function readAuth(file: string, refs: readonly ImageRef[]): RegistryAuth {
  let text: string;
  try {
    if (statSync(file).size > MAX_AUTH_FILE_BYTES) throw new VouchError('too_large', `${file} is larger than ${MAX_AUTH_FILE_BYTES} bytes`);
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw new VouchError('io_error', `cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  return RegistryAuth.parse(text, file, refs);
}

function entryOf(p: Plan, r: Resolved): EndorsementInput {
  return {
    url: r.url,
    artifactHash: r.digest,
    name: imageUnitName(r.ref.repo),
    semver: imageSemver(r.ref.tag, r.digest),
    license: p.license,
    comment: p.comment ?? `${r.ref.text} ${r.mediaType}`,
  };
}

export async function endorseOci(v: Record<string, any>): Promise<number> {
  if (v.gateway !== undefined) return throughGateway(v);
  if (v['token-file'] !== undefined) throw new UsageError('--token-file applies only with --gateway');
  for (const o of ['chain', 'key'])
    if (v[o] === undefined) throw new UsageError(`missing --${o} (or --gateway URL --token-file FILE to endorse through a running authority)`);
  // The chain's key and head are checked before the network is used.
  const key = readKeyFile(v.key);
  const repo = await openChain(v.chain);
  const authority = parseBlockText(repo.readBlockFile(0), 0).payload.authority!;
  const keyed = nodeSigner(authority.signer, key);
  const trusted = trustedHead(repo, keyed);
  const { head } = trusted;
  const p = await plan(v);

  const report = priorEndorsements(
    repo,
    p.resolved.map((r) => r.url),
    head,
    endorsementsOf,
  );
  noteScan(report, p.quiet);
  const toPost: EndorsementInput[] = [];
  let unchanged = 0;
  for (const r of p.resolved) {
    const e = entryOf(p, r);
    const priors = report.history.get(r.url) ?? [];
    const conflict = priors.find((x) => x.semver === e.semver && x.artifactHash !== r.digest);
    if (conflict) {
      throw new VouchError(
        'semver_conflict',
        `${r.ref.text}: ${r.url} ${e.semver} is already signed in block ${conflict.block.index} with ${conflict.artifactHash}, not ${r.digest} (the tag moved at the registry)`,
        { resource: r.url },
      );
    }
    const newest = priors.at(-1);
    if (newest && newest.artifactHash === r.digest) {
      unchanged++;
      continue;
    }
    toPost.push(e);
  }
  const now = Date.now();
  const blocks = packBlocks(
    toPost,
    { maxEntries: LIMITS.endorsements, maxBytes: LIMITS.blockFileBytes, maxUnsBytes: UNS_FULL_MAX },
    (chunk, prev: Block | null, part, parts) =>
      buildEndorseBlock({
        prev: prev ?? head,
        signer: keyed,
        backend: nodeBackend,
        now,
        entries: chunk,
        uns: p.uns,
        semver: p.semver,
        comment:
          v.comment ??
          `${p.uns} ${p.semver}: ${p.resolved.length} image reference${p.resolved.length === 1 ? '' : 's'}${parts > 1 ? ` part ${part} of ${parts}` : ''}`,
        ...(v['effective-date'] !== undefined ? { effectiveDate: v['effective-date'] } : {}),
      }),
  );
  const images = p.resolved.map((r) => ({ ref: r.ref.text, url: r.url, digest: r.digest, media_type: r.mediaType }));
  if (blocks.length === 0) {
    emit(v, `posted 0 entries in 0 blocks; ${unchanged} unchanged`, { status: 'unchanged', uns: p.uns, entries: 0, unchanged, images, blocks: [] });
    return 0;
  }
  const last = blocks.at(-1)!;
  const checkpoint = buildCheckpoint({ head: last, signer: keyed, now });
  await appendWithNote(repo, trusted, keyed, blocks, checkpoint, now, report.recordHashes, report.edgeSeed, offlineIndexRootWith(repo));
  await refreshIfBehind(repo, report, blocks.length);
  const lines = p.quiet ? '' : images.map((i) => `${i.ref} ${i.digest} ${i.url}`).join('\n') + '\n';
  emit(
    v,
    `${lines}posted ${toPost.length} entries in ${blocks.length === 1 ? `1 block (index ${last.index})` : `${blocks.length} blocks (indexes ${blocks[0]!.index}..${last.index})`}; ${unchanged} unchanged`,
    {
      status: 'posted',
      uns: p.uns,
      entries: toPost.length,
      unchanged,
      images,
      blocks: blocks.map((b) => ({ index: b.index, record_hash: b.record_hash, entries: b.payload.endorsements.length })),
    },
  );
  return 0;
}

/** Through a running authority: one submit per SUBMIT_MAX_ENTRIES entries, each claiming its digest. */
async function throughGateway(v: Record<string, any>): Promise<number> {
  if (v.chain !== undefined || v.key !== undefined)
    throw new UsageError('--chain and --key do not apply with --gateway: the running authority signs with its own key');
  if (v['token-file'] === undefined) throw new UsageError("--gateway needs --token-file FILE (the authority's submit token)");
  if (v.origin !== undefined) throw new UsageError('--origin does not apply with --gateway: the authority fetches every manifest from its own URL itself');
  if (v['registry-auth'] !== undefined)
    throw new UsageError(
      "--registry-auth does not apply with --gateway: the authority fetches every manifest itself, without these credentials (endorse a private registry's tags offline, with --chain and --key)",
    );
  const base = gatewayBase(v.gateway);
  const token = readToken(v['token-file']);
  const p = await plan(v);
  const entries = p.resolved.map((r) => ({ r, e: entryOf(p, r) }));
  const posted: { index: number; record_hash: string; entries: number; status: string }[] = [];
  for (let at = 0; at < entries.length; at += SUBMIT_MAX_ENTRIES) {
    const chunk = entries.slice(at, at + SUBMIT_MAX_ENTRIES);
    const body: Record<string, unknown> = {
      uns: p.uns,
      semver: p.semver,
      algorithm: 'sha256',
      endorsements: chunk.map(({ r, e }) => ({
        url: e.url,
        name: e.name,
        semver: e.semver,
        license: e.license,
        comment: e.comment,
        expect: [r.digest],
        algorithm: 'sha256',
      })),
      ...(v.comment !== undefined ? { comment: v.comment } : {}),
      ...(v['effective-date'] !== undefined ? { effective_date: v['effective-date'] } : {}),
    };
    const answer = await submit(base, token, body, () => {});
    if (answer.httpStatus !== 200 && answer.httpStatus !== 201) {
      const refused = answer.body.refused as { url: string; expected: string[]; fetched: string[] }[] | undefined;
      if (Array.isArray(refused) && refused.length > 0) {
        for (const r of refused)
          process.stderr.write(
            `refused: ${r.url} hashes ${r.fetched.join(' ')} at the authority, resolved here as ${r.expected.join(' or ')} (the tag moved between the two)\n`,
          );
      }
      throw gatewayError(answer);
    }
    posted.push({
      index: answer.body.index,
      record_hash: answer.body.record_hash,
      entries: chunk.length,
      status: answer.httpStatus === 201 ? 'posted' : 'unchanged',
    });
  }
  const images = p.resolved.map((r) => ({ ref: r.ref.text, url: r.url, digest: r.digest, media_type: r.mediaType }));
  const lines = p.quiet ? '' : images.map((i) => `${i.ref} ${i.digest} ${i.url}`).join('\n') + '\n';
  const news = posted.filter((b) => b.status === 'posted');
  emit(
    v,
    `${lines}${news.length === 0 ? 'unchanged: already signed with these digests' : `posted ${news.reduce((n, b) => n + b.entries, 0)} entries in ${news.length} block${news.length === 1 ? '' : 's'} (${news.map((b) => b.index).join(', ')})`}`,
    {
      status: news.length === 0 ? 'unchanged' : 'posted',
      uns: p.uns,
      images,
      blocks: posted,
    },
  );
  return 0;
}
