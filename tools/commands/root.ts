/**
 * `vouch root init`, `vouch root sign`, `vouch root apply`: the offline root
 * of trust (docs/spec/key-events.md, the runbook docs/guide/key-runbook.md).
 * `init` drafts a root statement from the chain's verified key state;
 * `sign` adds one holder's signature on the holder's own machine (no chain,
 * no network); `apply` appends the key block to an offline chain (signed by
 * the online key the statement puts in force, with a checkpoint and note by
 * it) or hands the statement to a running authority (POST /v1/root).
 * Must hold: a statement is applied only when applyKeyEvent accepts it on
 * the chain as verified; any refusal appends nothing; a statement file is
 * replaced whole or not at all; a holder signs a statement once.
 */
import { UsageError, emit, type Command } from '../command.ts';
import { buildCheckpoint, buildKeyBlock } from '../../chain/build.ts';
import { base64Decode, base64Encode } from '../../chain/encoding.ts';
import { VouchError } from '../../chain/errors.ts';
import type { Signer } from '../../chain/crypto-backend.ts';
import { applyKeyEvent, KeyEventError, rootStatement, signStatement, type KeyState, type SignedStatement } from '../../chain/key-events.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend, nodeSigner, rawPublicKey } from '../../platform/node-crypto.ts';
import { assertChainWritable } from '../../store/chain-lock.ts';
import { trustedHead } from '../../store/chain-append.ts';
import { appendWithNote } from '../signed-append.ts';
import { offlineIndexRootWith } from '../offline-index.ts';
import {
  describeStatement,
  draftState,
  fullOrderKey,
  keyStateLine,
  precheck,
  publicKeyArg,
  readStatementFile,
  signatureReport,
  statementError,
  statementText,
  verifiedChain,
  writeAtomically,
} from '../key-statements.ts';

export const rootInit: Command = {
  name: 'root init',
  usage: '(--chain DIR | --gateway URL) --holder B64|PEMFILE... --threshold K [--online-public B64 --signer ID] --out FILE',
  summary:
    'Writes a root statement for the holders to sign: it adopts a root of the --holder keys (version 1) on a chain without one, or rotates the root (version v+1). Nothing is appended until `vouch root apply`.',
  details: [
    "The statement names the chain (its block 0) and the next key event's sequence, from the chain verified whole",
    "(--chain) or from a running authority's GET /v1/keys (--gateway). Adopting a root keeps the online key in",
    'force; a root rotation may name a new online key (--online-public, --signer; apply then needs its private key).',
    "Signatures needed: adoption, K of the new root; rotation, the current root's threshold AND K of the new one.",
    'Refused at once (exit 1, bad_statement; no file written): a weak (small-order, non-canonical) or repeated key,',
    'K outside 1..n, an online key that is a root key or was retired. --out is never overwritten.',
    "Then: `vouch root sign --key HOLDER.pem FILE` on each holder's machine, `vouch root apply`.",
  ].join('\n'),
  options: {
    chain: { type: 'string', value: 'DIR', help: 'the chain (a clone is enough): verified whole for its key state' },
    gateway: { type: 'string', value: 'URL', help: "instead of --chain: a running authority's GET /v1/keys" },
    holder: { type: 'string', multiple: true, value: 'B64|PEMFILE', help: "a root holder's public key (base64 or PEM file; repeat, 1..32)", required: true },
    threshold: { type: 'string', value: 'K', help: 'how many holders must sign a key event', required: true },
    'online-public': { type: 'string', value: 'B64', help: 'root rotation only: a new online key taking over in the same block' },
    signer: { type: 'string', value: 'ID', help: 'with --online-public: its signer id (default: the current one)' },
    out: { type: 'string', value: 'FILE', help: 'where to write the statement file (never overwritten)', required: true },
  },
  async run(v) {
    if (!/^[1-9][0-9]{0,2}$/.test(v.threshold)) throw new UsageError(`--threshold must be an integer from 1, got ${JSON.stringify(v.threshold)}`);
    if (v.signer !== undefined && v['online-public'] === undefined) throw new UsageError('--signer applies only with --online-public');
    const holders = (v.holder as string[]).map((h) => fullOrderKey(publicKeyArg(h, '--holder'), 'root key'));
    const threshold = Number(v.threshold);
    if (holders.length > 32) throw new UsageError(`at most 32 --holder keys, got ${holders.length}`);
    if (threshold > holders.length) throw new UsageError(`--threshold ${threshold} is more than the ${holders.length} holders`);
    const { keys, at } = await draftState(v);
    const online =
      v['online-public'] === undefined
        ? undefined
        : { signer: v.signer ?? keys.online.signer, public_key: fullOrderKey(publicKeyArg(v['online-public'], '--online-public'), 'the online key') };
    const statement = rootStatement(keys, { threshold, keys: holders }, online);
    precheck(keys, statement, at);
    const signed: SignedStatement = { statement, signatures: [] };
    writeAtomically(v.out, statementText(signed), 'create');
    const needs =
      keys.root === null
        ? `${threshold} of the ${holders.length} new holders`
        : `${keys.root.threshold} of the current root's ${keys.root.keys.length} holders and ${threshold} of the new ${holders.length}`;
    emit(v, `${v.out}: ${describeStatement(statement)}\nneeds: ${needs}; each signs with vouch root sign --key HOLDER.pem ${v.out}`, {
      status: 'written',
      file: v.out,
      statement,
      needs: { current: keys.root ? keys.root.threshold : null, new: threshold },
    });
    return 0;
  },
};

export const rootSign: Command = {
  name: 'root sign',
  usage: '--key HOLDER.pem STATEMENT',
  summary:
    "Adds this holder's signature to a statement file (root, key rotation or compromise), in place. Runs offline: it needs the holder's private key and the file, nothing else.",
  details: [
    'Prints what the statement does, which holders have signed (each signature checked) and, for a root statement,',
    "how many of the new root's threshold are met; with --chain (a clone) also the current root's (otherwise",
    '`vouch root apply` checks it).',
    'The file is replaced whole (a temporary file renamed over it). A holder signs once: a second signature by the',
    'same key is refused (exit 1, bad_statement) and the file is left as it was.',
  ].join('\n'),
  positionals: [{ name: 'STATEMENT', required: true }],
  options: {
    key: { type: 'string', value: 'HOLDER.pem', help: "this holder's private key (PKCS#8 PEM, mode 0600)", required: true },
    chain: { type: 'string', value: 'DIR', help: "optional: a clone of the chain, to count the current root's threshold too (not needed to sign)" },
  },
  async run(v, [file]) {
    const signed = readStatementFile(file!);
    const key = readKeyFile(v.key);
    const holder = nodeSigner('holder', key);
    const pub = base64Encode(holder.publicKey);
    const s = signed.statement;
    if (s.online.public_key === pub)
      throw new VouchError('bad_statement', `${pub} is the online key this statement puts in force, not a root holder's key; the file is unchanged`);
    // A signature by a key outside the root(s) concerned makes the statement refused: never added when that is known.
    if (s.action === 'root' && s.root.version === 1 && !s.root.keys.includes(pub)) {
      throw new VouchError('bad_statement', `${pub} is not a key of the root this statement adopts; the file is unchanged`);
    }
    const chained = v.chain === undefined ? null : (await verifiedChain(v.chain)).state;
    if (chained !== null) {
      const holders = [...(chained.keys.root?.keys ?? []), ...(s.action === 'root' ? s.root.keys : [])];
      if (!holders.includes(pub))
        throw new VouchError(
          'bad_statement',
          `${pub} is not a key of the chain's root${s.action === 'root' ? ' nor of the new one' : ''}; the file is unchanged`,
        );
    } else if (s.action === 'root' && !s.root.keys.includes(pub) && !v.quiet && !v.json) {
      process.stderr.write(`note: ${pub} is not a key of the new root: it counts only as a holder of the current root\n`);
    }
    let next: SignedStatement;
    try {
      next = signStatement(signed, holder);
    } catch (e) {
      if (e instanceof KeyEventError) throw new VouchError('bad_statement', `${e.why}; the file is unchanged`);
      throw e;
    }
    writeAtomically(file!, statementText(next), 'replace');
    const { valid, invalid } = signatureReport(next);
    const lines = [describeStatement(s), `signed by ${pub}; ${valid.length} signature${valid.length === 1 ? '' : 's'}: ${valid.join(', ')}`];
    if (invalid.length) lines.push(`warning: ${invalid.length} signature(s) do not verify over this statement or repeat a holder: ${invalid.join(', ')}`);
    let met: Record<string, unknown> = {};
    if (s.action === 'root') {
      const n = s.root.keys.filter((k) => valid.includes(k)).length;
      lines.push(
        `new root (version ${s.root.version}): ${n} of ${s.root.threshold} needed${n >= s.root.threshold ? ' (met)' : ''}` +
          (s.root.version > 1 ? `; the current root's threshold is checked when applied (${valid.length - n} signature(s) by keys outside the new root)` : ''),
      );
      met = { new_root: { signed: n, threshold: s.root.threshold, met: n >= s.root.threshold } };
    }
    if (chained !== null) {
      const state = chained;
      const root = state.keys.root;
      const n = root === null ? 0 : root.keys.filter((k) => valid.includes(k)).length;
      if (root !== null) {
        lines.push(
          `${s.action === 'root' ? 'current' : 'the'} root (version ${root.version}): ${n} of ${root.threshold} needed${n >= root.threshold ? ' (met)' : ''}`,
        );
        met = { ...met, current_root: { signed: n, threshold: root.threshold, met: n >= root.threshold } };
      }
      if (s.chain !== state.keys.chain) lines.push(`warning: the statement is for chain ${s.chain}, not this one (${state.keys.chain})`);
      else if (s.sequence !== state.keys.sequence + 1)
        lines.push(
          `warning: the chain has applied ${state.keys.sequence} key events: this statement (sequence ${s.sequence}) ${s.sequence <= state.keys.sequence ? 'is stale' : 'skips ahead'}`,
        );
    } else if (s.action !== 'root') {
      lines.push(`the chain's root threshold is checked when applied (vouch root apply; --chain DIR counts it here): ${valid.length} holder(s) have signed`);
    }
    emit(v, lines.join('\n'), { status: 'signed', file, action: s.action, sequence: s.sequence, signed_by: pub, signatures: valid, invalid, ...met });
    return 0;
  },
};

export const rootApply: Command = {
  name: 'root apply',
  usage: '--chain DIR --key ONLINE.pem STATEMENT\n       vouch root apply --gateway URL --token-file FILE STATEMENT',
  summary:
    'Appends a signed statement (root, key rotation or compromise) as a key block once applyKeyEvent accepts it on the chain as verified. Offline (--chain): the block, checkpoint and note are signed by the online key the statement puts in force; --gateway: the running authority applies it (POST /v1/root).',
  details: [
    "Offline: the chain is verified whole first; --key must hold the private key of the statement's online key",
    '(for a rotation or a compromise: the NEW key). The commit carries the key block, checkpoint.json and',
    'checkpoint.note signed by that key. A running gateway holds the chain: apply through it (--gateway).',
    'Refused, nothing appended: too few signatures, a signature by a key outside the root, a holder counted twice,',
    "a weak or retired key, a good_through outside the compromised key's blocks (exit 1, bad_statement); a",
    "replayed, superseded or conflicting statement (exit 1, stale_statement); another key than the statement's",
    'online key (exit 2, key_error).',
  ].join('\n'),
  positionals: [{ name: 'STATEMENT', required: true }],
  options: {
    chain: { type: 'string', value: 'DIR', help: 'the chain repository (offline)' },
    key: { type: 'string', value: 'ONLINE.pem', help: 'offline: the private key of the online key the statement puts in force' },
    gateway: { type: 'string', value: 'URL', help: 'apply through this running authority (POST /v1/root)' },
    'token-file': { type: 'string', value: 'FILE', help: 'with --gateway: a file holding the submit token' },
  },
  async run(v, [file]) {
    if (v.gateway !== undefined) {
      if (v.chain !== undefined || v.key !== undefined)
        throw new UsageError('--chain and --key do not apply with --gateway: the running authority signs the key block with the new key it holds');
      if (v['token-file'] === undefined) throw new UsageError("--gateway needs --token-file FILE (the authority's submit token)");
      return applyThroughGateway(v, file!);
    }
    if (v['token-file'] !== undefined) throw new UsageError('--token-file applies only with --gateway');
    for (const o of ['chain', 'key'])
      if (v[o] === undefined) throw new UsageError(`missing --${o} (or --gateway URL --token-file FILE to apply through a running authority)`);
    const signed = readStatementFile(file!);
    assertChainWritable(v.chain, 'POST /v1/root');
    const key = readKeyFile(v.key);
    const { repo, state } = await verifiedChain(v.chain, true);
    let next: KeyState;
    try {
      next = applyKeyEvent(nodeBackend, state.keys, signed, state.size);
    } catch (e) {
      if (e instanceof KeyEventError) throw statementError(e);
      throw e;
    }
    const s = signed.statement;
    const pub = base64Encode(rawPublicKey(key));
    if (pub !== s.online.public_key) {
      throw new VouchError(
        'key_error',
        `--key holds ${pub}, but the key block is signed by the online key the statement puts in force, ${s.online.public_key}` +
          (s.online.public_key !== state.keys.online.publicKey ? ' (the NEW key: give its private key file)' : '') +
          '; nothing appended',
      );
    }
    // The head as the checkpoint of the key in force signs it, and the verified chain is that chain.
    const current: Signer = {
      id: state.keys.online.signer,
      publicKey: base64Decode(state.keys.online.publicKey)!,
      sign: () => {
        throw new TypeError('the key in force only verifies here: the new key signs');
      },
    };
    const trusted = trustedHead(repo, current, state.keys);
    if (trusted.head.index + 1 !== state.size || trusted.head.record_hash !== state.head) {
      throw new VouchError('checkpoint_mismatch', `the verified chain (${state.size} blocks) is not the one the checkpoint signs; nothing appended`, {
        index: null,
      });
    }
    const signer = nodeSigner(s.online.signer, key);
    const now = Date.now();
    const block = buildKeyBlock({ prev: trusted.head, signer, backend: nodeBackend, now, signed });
    const checkpoint = buildCheckpoint({ head: block, signer, now });
    await appendWithNote(repo, trusted, signer, [block], checkpoint, now, undefined, undefined, offlineIndexRootWith(repo));
    emit(
      v,
      `${block.index} ${block.record_hash} ${describeStatement(s)}\nnow: ${keyStateLine(next)}` +
        (next.voids.length > state.keys.voids.length
          ? `\nvoid: blocks ${next.voids.at(-1)![0]}-${next.voids.at(-1)![1]} (re-endorse what they endorsed: vouch reendorse)`
          : ''),
      {
        status: 'applied',
        index: block.index,
        record_hash: block.record_hash,
        sequence: s.sequence,
        action: s.action,
        online: { signer: next.online.signer, public_key: next.online.publicKey, since: next.online.since },
        root: next.root,
        voids: next.voids,
      },
    );
    return 0;
  },
};

/** POST /v1/root with the statement file; 201 {index, record_hash, sequence, action, online}, else the API's JSON error. */
async function applyThroughGateway(v: Record<string, any>, file: string): Promise<number> {
  const { gatewayBase, gatewayError, readToken } = await import('./endorse-gateway.ts'); // the gateway client, loaded only when used
  const base = gatewayBase(v.gateway);
  const token = readToken(v['token-file']);
  const signed = readStatementFile(file);
  let res: Response;
  try {
    res = await fetch(`${base}/v1/root`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ statement: signed.statement, signatures: signed.signatures }),
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new VouchError('origin_error', `cannot reach the gateway ${base}: ${cause?.code ?? cause?.message ?? (e as Error).message}`);
  }
  const text = await res.text();
  let body: Record<string, any> = {};
  try {
    const parsed = JSON.parse(text.slice(0, 1024 * 1024));
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) body = parsed;
  } catch {
    /* not JSON: the status says it */
  }
  if (res.status !== 201) {
    if (res.status === 404 && (Object.keys(body).length === 0 || String(body.message ?? '').startsWith('no such path'))) {
      throw new VouchError('not_found', `${base} has no POST /v1/root (a gateway from before key events)`);
    }
    throw gatewayError({ httpStatus: res.status, body });
  }
  const { index, record_hash: recordHash, sequence, action, online } = body;
  emit(v, `${index} ${recordHash} ${describeStatement(signed.statement)} (applied by ${base})`, {
    status: 'applied',
    index,
    record_hash: recordHash,
    sequence,
    action,
    online,
    gateway: base,
  });
  return 0;
}
