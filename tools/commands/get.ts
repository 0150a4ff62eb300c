/**
 * `vouch get`: the client that trusts no gateway. Downloads through a
 * gateway, then checks itself that the UNS block is signed by the pinned key,
 * endorses the URL (and the asked version), and that the bytes hash to its
 * artifact_hash — before FILE appears (written to a temp file, renamed last).
 */
import { createWriteStream, renameSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { Agent, request } from 'undici';
import type { Command } from '../command.ts';
import { UsageError, emit, refuse } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';
import { isArtifactUrl, isDate, isSemver, parseBlock, type Block } from '../../chain/block.ts';
import { computeRecordHash, payloadMessage } from '../../chain/build.ts';
import { base64Decode, hexEncode } from '../../chain/encoding.ts';
import { parseArtifactHash, formatArtifactHash } from '../../chain/hash-algorithms.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';

const STATUS_TEXT: Record<number, [string, 1 | 2]> = {
  400: ['the gateway refused the parameters', 2],
  404: ['no signed block for this URL / version', 1],
  409: ['the gateway refused: the origin bytes differ from what was signed', 1],
  410: ['the selected version is revoked', 1],
  502: ['the origin failed (unreachable, error, truncated or too large)', 2],
  503: ['the gateway is not ready yet', 2],
  504: ['the origin was too slow', 2],
};

/** Checks a UNS block on its own: form, record hash, signature by the pinned key. */
export function checkUnsBlock(uns: string, publicKey: Uint8Array): Block {
  let obj: unknown;
  try {
    obj = JSON.parse(uns);
  } catch {
    throw new VouchError('malformed', 'the UNS header is not JSON');
  }
  const values = typeof obj === 'object' && obj !== null ? Object.values(obj) : [];
  const inner = values.length === 1 ? (values[0] as { endorsement?: unknown }) : null;
  if (!inner || typeof inner !== 'object' || !('endorsement' in inner)) throw new VouchError('malformed', 'the UNS header is not {"<service>":{"endorsement":<block>}}');
  const raw = inner.endorsement as { index?: unknown };
  const block = parseBlock(raw, typeof raw?.index === 'number' ? raw.index : -1);
  if (computeRecordHash(block, nodeBackend) !== block.record_hash) throw new VouchError('record_hash_mismatch', 'the UNS block\'s record_hash does not match its content');
  const sig = base64Decode(block.signature);
  if (sig === null || !nodeBackend.verify(publicKey, payloadMessage(block.payload), sig)) {
    throw new VouchError('bad_signature', 'the UNS block is not signed by the pinned authority key');
  }
  return block;
}

export const get: Command = {
  name: 'get',
  usage: '--gateway BASE --url URL [--semver V | --at D] --public-key B64 -o FILE',
  summary: 'Downloads an artifact through a gateway and verifies the UNS block\'s signature and the bytes\' hash itself before writing FILE.',
  details: 'Exit 0 verified and written; 1 refused (nothing signed, revoked, bad signature, hash mismatch); 2 usage or network error. FILE is never left partial.',
  options: {
    gateway: { type: 'string', value: 'BASE', help: 'base URL of the gateway', required: true },
    url: { type: 'string', value: 'URL', help: 'the artifact URL as endorsed', required: true },
    semver: { type: 'string', value: 'V', help: 'exact version' },
    at: { type: 'string', value: 'D', help: 'date YYYY-MM-DD' },
    'public-key': { type: 'string', value: 'B64', help: 'the authority public key you trust (base64)', required: true },
    output: { type: 'string', short: 'o', value: 'FILE', help: 'where to write the verified bytes', required: true },
    timeout: { type: 'string', value: 'S', help: 'seconds before giving up (default 300)' },
  },
  async run(v) {
    if (!isArtifactUrl(v.url)) throw new UsageError(`--url must be an absolute http(s) URL, got ${JSON.stringify(v.url)}`);
    if (!/^https?:\/\//.test(v.gateway) || !URL.canParse(v.gateway)) throw new UsageError('--gateway must be an http(s) URL');
    if (v.semver !== undefined && !isSemver(v.semver)) throw new UsageError('--semver must be a SemVer 2.0.0 version');
    if (v.at !== undefined && !isDate(v.at)) throw new UsageError('--at must be a date YYYY-MM-DD');
    const key = base64Decode(v['public-key']);
    if (key === null || key.length !== 32) throw new UsageError('--public-key must be base64 of a 32-byte ed25519 key');
    const timeoutMs = Number(v.timeout ?? 300) * 1000;
    if (!(timeoutMs > 0)) throw new UsageError('--timeout must be a positive number of seconds');

    const q = new URLSearchParams({ url: v.url });
    if (v.semver) q.set('semver', v.semver);
    if (v.at) q.set('at', v.at);
    const target = `${v.gateway.replace(/\/+$/, '')}/v1/download?${q}`;
    const dispatcher = new Agent({ maxHeaderSize: 4 * 1024 * 1024, connectTimeout: Math.min(timeoutMs, 30_000) });
    const signal = AbortSignal.timeout(timeoutMs);
    const tmp = `${v.output}.vouch-${process.pid}.tmp`;
    try {
      let res;
      try {
        res = await request(target, { dispatcher, signal, maxRedirections: 0 } as Parameters<typeof request>[1]);
      } catch (e) {
        throw new VouchError('origin_error', `cannot reach the gateway: ${(e as { code?: string }).code ?? (e as Error).message}`);
      }
      if (res.statusCode !== 200) {
        await res.body.dump();
        const [text, exit] = STATUS_TEXT[res.statusCode] ?? [`unexpected HTTP ${res.statusCode}`, 2];
        return refuse(v, `http_${res.statusCode}`, `HTTP ${res.statusCode}: ${text}`, { status: res.statusCode }, exit);
      }
      const uns = res.headers['uns'];
      if (typeof uns !== 'string') {
        await res.body.dump();
        throw new VouchError('malformed', 'the gateway sent no UNS header: nothing proves what these bytes are');
      }
      const block = checkUnsBlock(uns, key);
      const entry = block.payload.endorsements.find((e) => e.artifact_url === v.url);
      if (!entry) throw new VouchError('malformed', 'the UNS block does not endorse this URL');
      if (v.semver && entry.semver !== v.semver) throw new VouchError('malformed', `the UNS block is version ${entry.semver}, not ${v.semver}`);
      if (v.at && block.payload.effective_date > v.at) throw new VouchError('malformed', `the UNS block takes effect ${block.payload.effective_date}, after ${v.at}`);
      const signed = parseArtifactHash(entry.artifact_hash);
      if (typeof signed === 'string') throw new VouchError('bad_artifact_hash', signed);

      const h = nodeBackend.createHash(signed.algorithm);
      const out = createWriteStream(tmp, { mode: 0o644 });
      let bytes = 0;
      for await (const chunk of res.body) {
        h.update(chunk as Uint8Array);
        bytes += (chunk as Uint8Array).length;
        if (!out.write(chunk)) await once(out, 'drain');
      }
      out.end();
      await once(out, 'close');
      const got = formatArtifactHash(signed.algorithm, hexEncode(h.digest()));
      if (got !== entry.artifact_hash) {
        throw new VouchError('hash_mismatch', `the bytes hash to ${got}; the signed block says ${entry.artifact_hash}`);
      }
      renameSync(tmp, v.output);
      emit(v, `ok: ${v.output} ${bytes} bytes, ${entry.name} ${entry.semver}, block ${block.index} ${block.record_hash}, ${entry.artifact_hash}`, {
        file: v.output, bytes, name: entry.name, semver: entry.semver, index: block.index, record_hash: block.record_hash, artifact_hash: entry.artifact_hash,
      });
      return 0;
    } catch (e) {
      if (e instanceof VouchError && e.kind === 'integrity') {
        rmSync(tmp, { force: true });
        return refuse(v, e.code, e.message, {});
      }
      if ((e as Error).name === 'TimeoutError' || (e as Error).name === 'AbortError') throw new VouchError('origin_timeout', `no complete answer within ${timeoutMs / 1000} s`);
      throw e;
    } finally {
      rmSync(tmp, { force: true });
      await dispatcher.close().catch(() => {});
    }
  },
};
