/**
 * `vouch get` with ONE gateway against a hostile gateway that answers from
 * an older state of the same log (issue 37): a relay in front of a real
 * authority gateway that, for one URL, replays the download answer it
 * recorded before a newer version (or a revocation) was logged, with a real
 * inclusion proof of that older block in the CURRENT checkpoint. Without
 * the completeness index nothing refuses it; with it `vouch get` exits 1
 * naming the check: an older block, a hidden revocation, a missing or an
 * older-state index proof (docs/spec/index.md 8).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { CompletenessIndex } from '../../chain/index-tree.ts';
import { ChainIndex } from '../../chain/select.ts';
import { selectFromEvents, verifyIndexProof } from '../../chain/index-proof.ts';
import { indexRootOfNote } from '../../tools/client/index-check.ts';
import type { Block } from '../../chain/block.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { vouchAsync } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-index-hostile-'));
const keyFile = join(work, 'authority.pem');
const tokenFile = join(work, 'submit.token');
const token = 'index-hostile-' + 'k'.repeat(32);
let pub = '';
let origin: OriginServer;
let gw: GatewayProcess;
let hostile: Server;
let H = '';

interface Recorded {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}
/** Download answers the hostile gateway replays, by URL; and how it edits them. */
const replay = new Map<string, Recorded>();
/** URLs the hostile gateway answers 404 for (true: with an index proof). */
const fake404 = new Map<string, boolean>();
let editIndexProof: (current: string | undefined, recorded: string | undefined) => string | undefined = (current) => current;

async function download(base: string, url: string): Promise<Recorded> {
  const r = await fetch(`${base}/v1/download?url=${encodeURIComponent(url)}`);
  const headers: Record<string, string> = {};
  r.headers.forEach((v, k) => {
    headers[k] = v;
  });
  return { status: r.status, headers, body: Buffer.from(await r.arrayBuffer()) };
}

const ascii = (s: string) => s.replace(/[\u0080-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));

/** The recorded older answer, its Vouch-Proof renewed: the old block's real inclusion proof in the current checkpoint. */
async function stale(url: string, old: Recorded): Promise<Recorded> {
  const index = (JSON.parse(old.headers['vouch-proof']!) as { index: number }).index;
  const note = await (await fetch(`${gw.url}/checkpoint`)).text();
  const p = (await (await fetch(`${gw.url}/v1/proof/inclusion?index=${index}`)).json()) as { size: number; proof: string[] };
  const current = await download(gw.url, url);
  const headers: Record<string, string> = { ...old.headers, 'vouch-proof': ascii(JSON.stringify({ index, size: p.size, proof: p.proof, checkpoint: note })) };
  // A revoked URL's download is a 410 without proofs: the hostile gateway makes the index proof itself, from the log.
  const ip = editIndexProof(current.headers['vouch-index-proof'] ?? (await proofFromLog(url, p.size)), old.headers['vouch-index-proof']);
  if (ip === undefined) delete headers['vouch-index-proof'];
  else headers['vouch-index-proof'] = ip;
  return { status: 200, headers, body: old.body };
}

/** The URL's index proof at `size`, computed from the log's blocks as any replica can. */
async function proofFromLog(url: string, size: number): Promise<string> {
  const idx = new CompletenessIndex(nodeBackend);
  const ch = new ChainIndex();
  for (let i = 0; i < size; i++) {
    const b = (await (await fetch(`${gw.url}/v1/block?index=${i}`)).json()) as Block;
    idx.addBlock(b, (h) => ch.indexOfHash(h));
    ch.add(b);
  }
  return Buffer.from(idx.prove('url', url)).toString('base64');
}

async function startHostile(): Promise<void> {
  hostile = createServer((req, res) => {
    (async () => {
      const u = new URL(req.url ?? '/', 'http://x');
      const hidden = u.searchParams.get('url');
      if (hidden !== null && fake404.has(hidden) && (u.pathname === '/v1/download' || u.pathname === '/v1/endorsement')) {
        // A false 404: the download empty, the lookup's JSON with (unless told not to) a real index proof and the current note.
        if (u.pathname === '/v1/download') {
          res.writeHead(404);
          res.end();
          return;
        }
        const note = await (await fetch(`${gw.url}/checkpoint`)).text();
        const size = Number(note.split('\n')[1]);
        const body: Record<string, unknown> = {
          success: false,
          status: 'not_found',
          message: `no provenance block is on file for ${hidden}`,
          resource: hidden,
        };
        if (fake404.get(hidden)) {
          body.index_proof = await proofFromLog(hidden, size);
          body.checkpoint = note;
        }
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
        return;
      }
      const asked = u.pathname === '/v1/download' ? u.searchParams.get('url') : null;
      const old = asked === null ? undefined : replay.get(asked);
      const a = old !== undefined ? await stale(asked!, old) : null;
      if (a !== null) {
        const headers = { ...a.headers };
        for (const h of ['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'date', 'content-encoding']) delete headers[h];
        res.writeHead(a.status, headers);
        res.end(a.body);
        return;
      }
      const r = await fetch(gw.url + (req.url ?? '/'));
      const headers: Record<string, string> = {};
      r.headers.forEach((v, k) => {
        if (!['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'date', 'content-encoding'].includes(k)) headers[k] = v;
      });
      res.writeHead(r.status, headers);
      res.end(Buffer.from(await r.arrayBuffer()));
    })().catch(() => res.destroy());
  });
  await new Promise<void>((ok) => hostile.listen(0, '127.0.0.1', ok));
  H = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
}

const U = () => origin.url('/widget.js');
const V = () => origin.url('/gadget.js');
let oldU: Recorded;
let oldV: Recorded;

test.before(async () => {
  pub = createKeyFile(keyFile).publicKeyB64;
  writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
  origin = await OriginServer.start();
  const dir = join(work, 'gw');
  gw = await startGatewayProcess([
    '--config',
    writeConfig(dir, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: join(dir, 'chain'), origin: 'log.index-hostile.test' },
      authority: { key_file: keyFile, signer: 'test-authority', submit_token_file: tokenFile },
      origin: { allow_private: true, timeout: 5 },
    }),
  ]);
  origin.route('/widget.js', { body: 'widget 1.0.0\n', contentType: 'text/javascript' });
  origin.route('/gadget.js', { body: 'gadget 1.0.0\n', contentType: 'text/javascript' });
  await submitEntry(gw.url, token, { url: U(), name: 'acme/widget', semver: '1.0.0', license: 'MIT' });
  await submitEntry(gw.url, token, { url: V(), name: 'acme/gadget', semver: '1.0.0', license: 'MIT' });
  oldU = await download(gw.url, U());
  oldV = await download(gw.url, V());
  assert.is(oldU.status, 200);
  assert.ok(oldU.headers['vouch-index-proof'], 'downloads carry Vouch-Index-Proof');
  // The log moves on: a newer widget, and the gadget revoked.
  origin.route('/widget.js', { body: 'widget 2.0.0\n', contentType: 'text/javascript' });
  await submitEntry(gw.url, token, { url: U(), name: 'acme/widget', semver: '2.0.0', license: 'MIT' });
  const rv = await fetch(gw.url + '/v1/revoke', {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: V(), semver: '1.0.0' }),
  });
  assert.is(rv.status, 201, await rv.text());
  await startHostile();
});

test.after(async () => {
  hostile?.close();
  await gw?.stop();
  await origin?.close();
  rmSync(work, { recursive: true, force: true });
});

let n = 0;
async function get(gateway: string, url: string): Promise<{ status: number; stderr: string; stdout: string; file: string }> {
  const file = join(work, `out-${++n}`);
  const r = await vouchAsync(
    ['get', '--gateway', gateway, '--url', url, '--public-key', pub, '-o', file, '--state', join(work, `state-${n}.json`), '--timeout', '60'],
    {},
    90_000,
  );
  return { status: r.status ?? -1, stderr: r.stderr, stdout: r.stdout, file };
}

test('control: through the real gateway and through the relay untouched, vouch get takes the newest version', async () => {
  const r = await get(gw.url, U());
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /2\.0\.0/);
  const relayed = await get(H, U());
  assert.is(relayed.status, 0, relayed.stderr);
  // lookups with proof=1 carry the index proof; the selection redone from it is the block served, in every mode
  for (const [q, want] of [
    ['', 3],
    ['&semver=1.0.0', 1],
    ['&semver=2.0.0', 3],
  ] as const) {
    const l = (await (await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(U())}${q}&proof=1`)).json()) as {
      index: number;
      proof: { size: number; checkpoint: string };
      index_proof: string;
    };
    assert.is(l.index, want);
    const root = indexRootOfNote(l.proof.checkpoint)!;
    const v = verifyIndexProof(nodeBackend, Buffer.from(l.index_proof, 'base64'), 'url', U(), { root, size: l.proof.size });
    assert.ok(v.ok);
    if (v.ok)
      assert.is(
        selectFromEvents(v.value.events, v.value.voids, {
          semver: q.includes('semver') ? q.split('=')[1] : undefined,
          today: new Date().toISOString().slice(0, 10),
        })?.block,
        want,
      );
  }
  const nf = (await (await fetch(`${gw.url}/v1/endorsement?url=${encodeURIComponent(origin.url('/nothing.js'))}&proof=1`)).json()) as {
    index_proof?: string;
    checkpoint?: string;
  };
  assert.ok(typeof nf.index_proof === 'string' && typeof nf.checkpoint === 'string', '404 with proof=1 carries the index proof');
  const absent = verifyIndexProof(nodeBackend, Buffer.from(nf.index_proof!, 'base64'), 'url', origin.url('/nothing.js'), {
    root: indexRootOfNote(nf.checkpoint!)!,
    size: 5,
  });
  assert.ok(absent.ok && !absent.value.present);
});

test('an older block with a real inclusion proof in the current checkpoint: refused, "older block"', async () => {
  replay.set(U(), oldU);
  editIndexProof = (current) => current;
  const r = await get(H, U());
  assert.is(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /^index_mismatch: older block: .* served block 1 .* selects block 3/m);
  assert.not.ok(existsSync(r.file));
});

test("the older block without an index proof, or with the older state's: refused (no_proof, bad_proof)", async () => {
  replay.set(U(), oldU);
  editIndexProof = () => undefined;
  let r = await get(H, U());
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^no_proof: .*Vouch-Index-Proof/m);
  editIndexProof = (_current, recorded) => recorded;
  r = await get(H, U());
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^bad_proof: .*index proof is for log size 3, the checkpoint is 5/m);
});

test('a revoked version served as usable: refused, "hidden revocation"', async () => {
  assert.is((await download(gw.url, V())).status, 410);
  replay.set(V(), oldV);
  editIndexProof = (current) => current;
  const r = await get(H, V());
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^index_mismatch: hidden revocation: .* block 4 revokes it/m);
});

test('a false 404 for an endorsed URL: refused, "false 404"; without an index proof: no_proof; a true 404 stays a 404', async () => {
  replay.clear();
  fake404.set(U(), true);
  let r = await get(H, U());
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^index_mismatch: false 404: .* selects block 3/m);
  fake404.set(U(), false);
  r = await get(H, U());
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /^no_proof: /m);
  fake404.clear();
  r = await get(gw.url, origin.url('/never-endorsed.js'));
  assert.is(r.status, 1, r.stderr);
  assert.match(r.stderr, /http_404/);
  assert.not.match(r.stderr, /index_mismatch|no_proof/);
});

test.run();
