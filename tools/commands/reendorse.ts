/**
 * `vouch reendorse`: after a compromise declaration (docs/spec/key-events.md),
 * endorses again what the void blocks endorsed, in one command: each
 * artifact is fetched again (as offline `vouch endorse` fetches) and
 * endorsed only when its bytes still hash to what the void block claimed;
 * one new block per void block, its entries grouped as the original's.
 * Offline it signs with the online key in force; with --gateway the running
 * authority fetches, hashes and signs, the void block's hashes sent as
 * claims it checks (`expect`), the void entries read from a local clone.
 * Trusts: nothing a void block says but as a claim to check against the
 * origin's bytes now. Must hold: an entry whose bytes differ (possibly the
 * attacker's) or cannot be fetched is listed and never endorsed (exit 1);
 * --dry-run appends nothing; the offline append is one commit.
 */
import { UsageError, emit, type Command } from '../command.ts';
import { type Block, parseBlockText } from '../../chain/block.ts';
import { buildCheckpoint, buildEndorseBlock, type EndorsementInput } from '../../chain/build.ts';
import { base64Encode } from '../../chain/encoding.ts';
import { VouchError } from '../../chain/errors.ts';
import { parseArtifactHash } from '../../chain/hash-algorithms.ts';
import { isVoid, type KeyState } from '../../chain/key-events.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend, nodeSigner, rawPublicKey } from '../../platform/node-crypto.ts';
import { notInForce } from '../chain-keys.ts';
import { assertChainWritable } from '../../store/chain-lock.ts';
import type { ChainReads, ChainStore } from '../../store/chain-repo.ts';
import { findEndorsements, trustedHead, type TrustedHead } from '../../store/chain-append.ts';
import { appendWithNote } from '../signed-append.ts';
import { offlineIndexRootWith } from '../offline-index.ts';
import { commentOf, verifiedChain, type Refusal, type VoidGroup } from '../key-statements.ts';

/** Artifacts fetched at once. */
const CONCURRENCY = 8;

/** The endorse blocks among the void ones, each with its entries. */
function voidGroups(repo: ChainReads, keys: KeyState): VoidGroup[] {
  const out: VoidGroup[] = [];
  for (const [a, b] of keys.voids) {
    for (let i = a; i <= b; i++) {
      const block = parseBlockText(repo.readBlockFile(i), i); // verified whole by verifiedChain
      if (block.payload.intent !== 'endorse') continue; // a void revoke revokes nothing, and is not made again
      out.push({
        block,
        entries: block.payload.endorsements.map((e) => ({
          url: e.artifact_url,
          artifactHash: e.artifact_hash,
          name: e.name,
          semver: e.semver,
          license: e.license,
          comment: e.comment,
        })),
      });
    }
  }
  return out;
}

const label = (e: EndorsementInput, g: VoidGroup) => `${e.url} (${e.name} ${e.semver}, void block ${g.block.index})`;

/**
 * Drops the entries a block in force already decides: the same URL and
 * version with these bytes (already endorsed again: nothing to do) or with
 * other bytes (refused, as offline endorse refuses a semver_conflict).
 */
function againstHistory(repo: ChainReads, keys: KeyState, groups: VoidGroup[], refused: Refusal[]): { already: number } {
  const history = findEndorsements(repo, [...new Set(groups.flatMap((g) => g.entries.map((e) => e.url)))]);
  let already = 0;
  for (const g of groups) {
    g.entries = g.entries.filter((e) => {
      const inForce = history.get(e.url)!.filter((h) => !isVoid(keys, h.block.index) && h.semver === e.semver);
      if (inForce.some((h) => h.artifactHash === e.artifactHash)) {
        already++;
        return false;
      }
      const other = inForce.find((h) => h.artifactHash !== e.artifactHash);
      if (other) {
        refused.push({
          url: e.url,
          line: `refused: ${label(e, g)}: version ${e.semver} is signed in block ${other.block.index} with ${other.artifactHash}, not ${e.artifactHash}`,
        });
        return false;
      }
      return true;
    });
  }
  return { already };
}

/** Fetches every entry again; keeps those whose bytes hash to the void block's claim. */
async function fetchAndCompare(groups: VoidGroup[], refused: Refusal[]): Promise<void> {
  const { digestUrl } = await import('../../artifacts/artifact-digest.ts');
  const jobs = groups.flatMap((g) => g.entries.map((e) => ({ g, e })));
  const bad = new Set<EndorsementInput>();
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const { g, e } = jobs[next++]!;
      const claim = parseArtifactHash(e.artifactHash);
      if (typeof claim === 'string') {
        refused.push({ url: e.url, line: `refused: ${label(e, g)}: ${claim}` });
        bad.add(e);
        continue;
      }
      try {
        const got = await digestUrl(e.url, claim.algorithm);
        if (got.artifactHash !== e.artifactHash) {
          refused.push({
            url: e.url,
            line: `refused: ${label(e, g)}: its bytes now hash to ${got.artifactHash}, the void block claimed ${e.artifactHash} (possibly the attacker's): not endorsed`,
          });
          bad.add(e);
        }
      } catch (err) {
        refused.push({ url: e.url, line: `refused: ${label(e, g)}: cannot fetch it: ${(err as Error).message.split('\n')[0]}` });
        bad.add(e);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, jobs.length) }, worker));
  for (const g of groups) g.entries = g.entries.filter((e) => !bad.has(e));
}

export const reendorse: Command = {
  name: 'reendorse',
  usage: '--chain DIR --key ONLINE.pem [--dry-run]\n       vouch reendorse --chain CLONE --gateway URL --token-file FILE [--dry-run]',
  summary:
    'Endorses again what the void blocks of a compromise endorsed, one block per void block, each artifact only when its bytes still hash to what the void block claimed. Offline with the online key in force, or through a running authority.',
  details: [
    'Every endorse block a compromise declaration voided (vouch key compromise, vouch root apply) is read from the',
    'chain, verified whole. Each artifact is fetched again from its URL: when its bytes hash to what the void block',
    'claimed, it is endorsed again (same name, version, licence, effective date), the entries of one void block in',
    "one new block. An entry whose bytes differ (possibly the attacker's), that cannot be fetched, or whose version",
    'a block in force signs with other bytes is listed on stderr, one line each, and not endorsed (exit 1).',
    'Entries a block in force already endorses with these bytes are skipped. --dry-run lists and appends nothing.',
    'With --gateway URL --token-file FILE, --chain is a local clone the void entries are read from, and the',
    "running authority fetches and signs (POST /v1/submit), checking the void block's hash as a claim.",
  ].join('\n'),
  options: {
    chain: { type: 'string', value: 'DIR', help: "the chain (offline), or a clone of the authority's (with --gateway)", required: true },
    key: { type: 'string', value: 'ONLINE.pem', help: 'offline: the private key of the online key in force' },
    gateway: { type: 'string', value: 'URL', help: 'submit through this running authority instead of writing the chain' },
    'token-file': { type: 'string', value: 'FILE', help: 'with --gateway: a file holding the submit token' },
    'dry-run': { type: 'boolean', help: 'list what would be endorsed again and what is refused; append nothing' },
  },
  async run(v) {
    const dry = v['dry-run'] === true;
    if (v.gateway !== undefined) {
      if (v.key !== undefined) throw new UsageError('--key does not apply with --gateway: the running authority signs with its own key');
      if (v['token-file'] === undefined) throw new UsageError("--gateway needs --token-file FILE (the authority's submit token)");
    } else {
      if (v['token-file'] !== undefined) throw new UsageError('--token-file applies only with --gateway');
      if (v.key === undefined) throw new UsageError('missing --key (or --gateway URL --token-file FILE to re-endorse through a running authority)');
      if (!dry) assertChainWritable(v.chain, 'POST /v1/submit');
    }
    const { repo, state } = await verifiedChain(v.chain, v.gateway === undefined && !dry);
    const keys = state.keys;
    const quiet = v.quiet === true || v.json === true;
    const groups = voidGroups(repo, keys);
    const total = groups.reduce((n, g) => n + g.entries.length, 0);
    if (total === 0) {
      emit(
        v,
        keys.voids.length === 0
          ? 'no void blocks: nothing to re-endorse'
          : `void blocks ${keys.voids.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`)).join(', ')} endorse nothing: nothing to re-endorse`,
        { status: 'nothing', voids: keys.voids, blocks: [], refused: [] },
      );
      return 0;
    }
    const refused: Refusal[] = [];
    const { already } = againstHistory(repo, keys, groups, refused);
    let posted: { index: number; record_hash: string; void_block: number; entries: number }[];
    if (v.gateway !== undefined) {
      posted = await (await import('./reendorse-gateway.ts')).reendorseThroughGateway(v, groups, refused, dry, keys);
    } else {
      const key = readKeyFile(v.key);
      const pub = base64Encode(rawPublicKey(key));
      if (pub !== keys.online.publicKey) throw new VouchError('key_error', notInForce(keys, pub));
      const signer = nodeSigner(keys.online.signer, key);
      // The head as the checkpoint signs it, before anything is fetched.
      const trusted = trustedHead(repo, signer, keys);
      if (trusted.head.index + 1 !== state.size || trusted.head.record_hash !== state.head) {
        throw new VouchError('checkpoint_mismatch', `the verified chain (${state.size} blocks) is not the one the checkpoint signs; nothing appended`, {
          index: null,
        });
      }
      await fetchAndCompare(groups, refused);
      posted = dry ? [] : await appendOffline(repo, trusted, signer, groups);
    }
    if (!quiet) for (const r of refused) process.stderr.write(r.line + '\n');
    const kept = groups.filter((g) => g.entries.length > 0);
    const text = dry
      ? kept.map((g) => `would re-endorse ${g.entries.length} of ${g.block.payload.endorsements.length} entries of void block ${g.block.index}`).join('\n') ||
        'nothing would be re-endorsed'
      : posted
          .map((p) => `${p.index} ${p.record_hash} re-endorses ${p.entries} entr${p.entries === 1 ? 'y' : 'ies'} of void block ${p.void_block}`)
          .join('\n') || 'nothing re-endorsed';
    emit(
      v,
      `${text}\n${total} void entries: ${kept.reduce((n, g) => n + g.entries.length, 0)} ${dry ? 'to re-endorse' : 're-endorsed'}, ${already} already in force, ${refused.length} refused`,
      {
        ...(refused.length > 0 ? { ok: false } : {}), // exit 1: some void entries are not endorsed again
        status: dry ? 'dry_run' : posted.length ? 'posted' : 'nothing',
        blocks: posted,
        already,
        refused: refused.map((r) => ({ url: r.url, message: r.line.replace(/^refused: /, '') })),
        ...(dry ? { would: kept.map((g) => ({ void_block: g.block.index, urls: g.entries.map((e) => e.url) })) } : {}),
      },
    );
    if (refused.length > 0) {
      process.stderr.write(`vouch reendorse: ${refused.length} void entr${refused.length === 1 ? 'y was' : 'ies were'} not re-endorsed (listed above)\n`);
      return 1;
    }
    return 0;
  },
};

async function appendOffline(
  repo: ChainStore,
  trusted: TrustedHead,
  signer: ReturnType<typeof nodeSigner>,
  groups: VoidGroup[],
): Promise<{ index: number; record_hash: string; void_block: number; entries: number }[]> {
  const kept = groups.filter((g) => g.entries.length > 0);
  if (kept.length === 0) return [];
  const now = Date.now();
  const blocks: Block[] = [];
  let prev = trusted.head;
  for (const g of kept) {
    const block = buildEndorseBlock({
      prev,
      signer,
      backend: nodeBackend,
      now,
      entries: g.entries,
      uns: g.block.payload.uns,
      semver: g.block.payload.semver,
      comment: commentOf(g),
      effectiveDate: g.block.payload.effective_date,
    });
    blocks.push(block);
    prev = block;
  }
  const checkpoint = buildCheckpoint({ head: prev, signer, now });
  await appendWithNote(repo, trusted, signer, blocks, checkpoint, now, undefined, undefined, offlineIndexRootWith(repo));
  return blocks.map((b, i) => ({ index: b.index, record_hash: b.record_hash, void_block: kept[i]!.block.index, entries: kept[i]!.entries.length }));
}
