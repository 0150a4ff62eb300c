/**
 * `vouch get`: the command line of the client that trusts no single
 * gateway (tools/client/verified-get.ts, which another program can import):
 * flags read and checked here, the download verified there, its outcome
 * printed here (one line, or a JSON object with --json).
 * Trusts: `--public-key`, `--root`, `--origin`, `--policy`; the state file's past.
 * Must hold: exit 0 only after every check passed; a refusal exits 1 and
 * leaves FILE and the state file untouched; any answer outside the protocol
 * is a refusal with a catalogue code (`bad_answer`), never an internal
 * error; only an unreachable gateway, its server errors and a timeout exit 2.
 */
import type { Command } from '../command.ts';
import { UsageError, emit, refuse } from '../command.ts';
import { isArtifactUrl, isDate, isSemver } from '../../chain/block.ts';
import { base64Decode, base64Encode } from '../../chain/encoding.ts';
import type { Policy } from '../../chain/tlog-policy.ts';
import { readPolicyFile } from '../../platform/policy-file.ts';
import { parseVerifierKey, SIG_ED25519 } from '../../chain/note.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { defaultStatePath } from '../client/checkpoint-state.ts';
import { readRootPin, type KeyPin } from '../client/key-follower.ts';

const TRUST = `Transparency: every answer must carry the log's signed checkpoint and the block's inclusion proof. \
The client remembers, per log origin, the newest checkpoint it verified (--state) and refuses a checkpoint that is older \
(a stale or replayed answer) or that is not proven to extend it (a fork or rollback: SECURITY ERROR with the evidence). \
What this cannot show with one gateway: that the block is the newest for the URL. A gateway can answer with an older block \
that is really in the log (or hold back its newer checkpoints from a client that never saw one). Asking several independent \
gateways (--gateway repeated: same tree, same block, or a newer tree that explains the difference) and requiring witness \
cosignatures (--policy: the checkpoint was seen by witnesses, so it is the one everybody is shown) are the answers. \
The first checkpoint seen for an origin is trusted on first use unless --policy or several gateways back it.

Key events (docs/spec/key-events.md): the client pins the log's first key (--public-key) or a root (--root: a root statement \
file, or {"threshold": K, "keys": [...]}) and remembers the keys it verified in the state file. When a block or a checkpoint \
is not signed by the key it knows, it asks the same gateway once for /v1/keys, checks each key block's inclusion proof and \
holders' signatures, and follows the rotation (at most 32 key events in one update: key_walk_limit beyond). A block signed \
by a compromised key after its last good block is refused (void_block).`;

export const get: Command = {
  name: 'get',
  usage:
    '--gateway BASE [--gateway BASE...] --url URL [--semver V | --at D] (--public-key B64 | --root FILE) -o FILE [--state FILE] [--origin NAME] [--policy FILE]',
  summary:
    "Downloads an artifact through a gateway and verifies the UNS block's signature, its inclusion in the log's signed checkpoint, the checkpoint's consistency with the last one seen, and the bytes' hash itself before writing FILE.",
  details: `Exit 0 verified and written; 1 refused (nothing signed, revoked, bad signature or proof, stale or inconsistent checkpoint, gateways disagreeing, missing witness quorum, hash mismatch, an answer that is not the protocol's: bad_answer); 2 usage, file or network error. FILE is never left partial.\n\n${TRUST}`,
  options: {
    gateway: { type: 'string', multiple: true, value: 'BASE', help: 'base URL of a gateway; repeat to require several to agree', required: true },
    url: { type: 'string', value: 'URL', help: 'the artifact URL as endorsed', required: true },
    semver: { type: 'string', value: 'V', help: 'exact version' },
    at: { type: 'string', value: 'D', help: 'date YYYY-MM-DD' },
    'public-key': {
      type: 'string',
      value: 'B64',
      help: "the authority public key you trust (base64; block 0's key), or its note verifier key ORIGIN+HEX8+B64 (also pins --origin)",
    },
    root: { type: 'string', value: 'FILE', help: 'instead of --public-key: the root you trust, a root statement file or {"threshold":K,"keys":[...]}' },
    output: { type: 'string', short: 'o', value: 'FILE', help: 'where to write the verified bytes', required: true },
    state: {
      type: 'string',
      value: 'FILE',
      help: 'checkpoints seen before (default $XDG_STATE_HOME/vouch/checkpoints.json, else ~/.local/state/vouch/checkpoints.json)',
    },
    origin: { type: 'string', value: 'NAME', help: 'the log origin the checkpoint must name (default: the one it names)' },
    policy: { type: 'string', value: 'FILE', help: 'C2SP tlog-policy file: the checkpoint must carry its witness quorum' },
    timeout: { type: 'string', value: 'S', help: 'seconds before giving up (default 300)' },
    'min-tree-size': {
      type: 'string',
      value: 'N',
      help: "read your writes through mirrors: ask for a tree of at least N blocks (the Vouch-Tree-Size of a submit's answer, or tree_size of vouch endorse --gateway --json); a mirror behind syncs first or answers 503 behind, never 404 (default: the size the state file last saw for --origin)",
    },
  },
  async run(v) {
    if (!isArtifactUrl(v.url)) throw new UsageError(`--url must be an absolute http(s) URL, got ${JSON.stringify(v.url)}`);
    const gateways = [...new Set((v.gateway as string[]).map((g) => g.replace(/\/+$/, '')))];
    for (const g of gateways)
      if (!/^https?:\/\//.test(g) || !URL.canParse(g)) throw new UsageError(`--gateway must be an http(s) URL, got ${JSON.stringify(g)}`);
    if (v.semver !== undefined && !isSemver(v.semver)) throw new UsageError('--semver must be a SemVer 2.0.0 version');
    if (v.at !== undefined && !isDate(v.at)) throw new UsageError('--at must be a date YYYY-MM-DD');
    if ((v['public-key'] === undefined) === (v.root === undefined))
      throw new UsageError("give --public-key (the log's first key) or --root FILE (its root), one of them");
    let key = v['public-key'] === undefined ? null : base64Decode(v['public-key']);
    if (key === null && v['public-key']?.includes('+')) {
      // A note verifier key (`/v1/authority` verifier_key, `vouch keygen --origin`): the key, and the origin it pins.
      let vkey;
      try {
        vkey = parseVerifierKey(nodeBackend, v['public-key']);
      } catch (e) {
        throw new UsageError(`--public-key: ${(e as Error).message}`);
      }
      if (vkey.type !== SIG_ED25519) throw new UsageError('--public-key: a verifier key of type 0x01 (ed25519 note signatures) is needed, not a witness key');
      if (v.origin !== undefined && v.origin !== vkey.name) throw new UsageError(`--origin ${v.origin} differs from the verifier key's name ${vkey.name}`);
      key = vkey.publicKey;
      v.origin = vkey.name;
    }
    if (v.root === undefined && (key === null || key.length !== 32))
      throw new UsageError('--public-key must be base64 of a 32-byte ed25519 key, or a note verifier key NAME+HEX8+BASE64');
    let pin: KeyPin;
    try {
      pin = v.root !== undefined ? readRootPin(v.root) : { kind: 'key', publicKey: base64Encode(key!) };
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    const timeoutMs = Number(v.timeout ?? 300) * 1000;
    if (!(timeoutMs > 0)) throw new UsageError('--timeout must be a positive number of seconds');
    if (v.origin !== undefined && v.origin === '') throw new UsageError('--origin must not be empty');
    const policy: Policy | null = v.policy === undefined ? null : readPolicyFile(nodeBackend, v.policy, '--policy');
    const statePath: string = v.state ?? defaultStatePath();
    if (v['min-tree-size'] !== undefined && !/^\d{1,15}$/.test(v['min-tree-size']))
      throw new UsageError('--min-tree-size must be a non-negative integer (a tree size)');
    // Loaded here: it brings the HTTP client (undici), which `vouch get --help` and a usage error need not load.
    const { verifiedGet } = await import('../client/verified-get.ts');
    const outcome = await verifiedGet({
      gateways,
      url: v.url,
      ...(v.semver !== undefined ? { semver: v.semver as string } : {}),
      ...(v.at !== undefined ? { at: v.at as string } : {}),
      pin,
      ...(v.origin !== undefined ? { origin: v.origin as string } : {}),
      policy,
      statePath,
      timeoutMs,
      ...(v['min-tree-size'] !== undefined ? { minTreeSize: Number(v['min-tree-size']) } : {}),
      output: v.output,
    });
    if (!outcome.ok) {
      if (outcome.evidenceText) process.stderr.write(outcome.evidenceText + '\n');
      return refuse(v, outcome.code, outcome.line, outcome.extra, outcome.exit);
    }
    const r = outcome.verified;
    emit(
      v,
      `ok: ${r.file} ${r.bytes} bytes, ${r.name} ${r.semver}, block ${r.index} ${r.record_hash}, ${r.artifact_hash}; in ${r.origin} size ${r.size}${r.gateways > 1 ? ` (${r.gateways} gateways agree)` : ''}`,
      { ...r },
    );
    return 0;
  },
};
