/**
 * The completeness index of chains written offline, and of chains older
 * than it (issue 37 items 5 and 6): a chain whose notes carry no
 * `vouch-index/v1` line (as every note before the index) verifies, with the
 * index reported absent; the next note an offline writer signs (`vouch
 * endorse`, `vouch revoke`) carries the root of the index computed from the
 * whole history; `vouch verify --index` recomputes and accepts it; a mirror
 * clones it (checking the line at load) and syncs the next offline append
 * (checking the line against its own index). Real processes, real git, a
 * git smart-HTTP server on 127.0.0.1. The authority gateway over a chain
 * from before the index commits it with its first note (POST /v1/revoke).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildAuthorityBlock, buildCheckpoint, buildEndorseBlock, buildRevokeBlock, artifactHashOf } from '../../chain/build.ts';
import { formatBlockFile, formatCheckpointFile, parseBlockText, type Block } from '../../chain/block.ts';
import { base64Encode, utf8 } from '../../chain/encoding.ts';
import { CompletenessIndex } from '../../chain/index-tree.ts';
import { indexFactsOf } from '../../chain/index-facts.ts';
import { indexExtensionLine } from '../../chain/index-proof.ts';
import { parseNote } from '../../chain/note.ts';
import { parseCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { createKeyFile, readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend as c, nodeSigner } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { commitFor, defaultOrigin, entryOf } from '../../store/chain-append.ts';
import { signNoteText } from '../../platform/note-signer.ts';
import { TreeEdge } from '../../store/tree-edge.ts';
import { ChainState } from '../../gateway/chain/verified-state.ts';
import { ChainSync, prepareMirror } from '../../gateway/chain/mirror-sync.ts';
import { GitServer } from '../helpers/git-server.ts';
import { memoryLog } from '../helpers/memory-log.ts';
import { gitAsync, vouchAsync, type Run } from '../helpers/processes.ts';
import { startGatewayProcess, writeConfig } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-offline-index-'));
const keyFile = join(work, 'authority.pem');
const chain = join(work, 'chain');
const preIndex = join(work, 'pre-index');
let pub = '';
let server: GitServer;
let remote = '';
const today = new Date().toISOString().slice(0, 10);
const U = (p: string) => `https://artifacts.example.org${p}`;
const ok = (r: Run) => {
  assert.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
  return r;
};

/** The note's extension lines. */
const noteLines = (dir: string): string[] => parseCheckpoint(parseNote(readFileSync(join(dir, 'checkpoint.note'), 'utf8')).text).extensions;

/** The index line of the completeness index recomputed from every block file of `dir`. */
async function recomputed(dir: string): Promise<string> {
  const repo = await ChainRepo.open(dir, { repair: false });
  const idx = new CompletenessIndex(c);
  for (let i = 0; i < repo.size; i++) idx.addFacts(indexFactsOf(parseBlockText(repo.readBlockFile(i), i)));
  return indexExtensionLine(idx.root());
}

let n = 0;
async function endorse(url: string, semver: string): Promise<void> {
  const f = join(work, `f-${n++}`);
  writeFileSync(f, `${url} ${semver}`);
  ok(
    await vouchAsync([
      'endorse',
      '--chain',
      chain,
      '--key',
      keyFile,
      '--url',
      url,
      '--name',
      'acme/widget',
      '--semver',
      semver,
      '--license',
      'MIT',
      '--file',
      f,
    ]),
  );
}

test.before(async () => {
  pub = createKeyFile(keyFile).publicKeyB64;
  // A chain from before the index: 14 blocks (a revoke among them), its note without a vouch-index/v1 line.
  const signer = nodeSigner('pre-index', readKeyFile(keyFile));
  const t = Date.now() - 3_600_000;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: c, now: t, uns: 'acme/releases' })];
  for (let i = 1; i < 13; i++) {
    const entries = [
      {
        url: U(`/lib-${i % 4}.tgz`),
        artifactHash: artifactHashOf(c, 'sha256', utf8(`old ${i}`)),
        name: `acme/lib-${i % 4}`,
        semver: `1.${i}.0`,
        license: 'MIT',
      },
    ];
    blocks.push(buildEndorseBlock({ prev: blocks[i - 1]!, signer, backend: c, now: t + i * 1000, entries, effectiveDate: today }));
  }
  blocks.push(buildRevokeBlock({ prev: blocks[12]!, target: blocks[5]!, signer, backend: c, now: t + 13_000, effectiveDate: today }));
  const edge = TreeEdge.empty(c);
  for (const b of blocks) edge.append(entryOf(b.record_hash));
  const note = signNoteText(signer, defaultOrigin('pre-index'), blocks.length, edge.root());
  await ChainRepo.init(
    chain,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    { json: formatCheckpointFile(buildCheckpoint({ head: blocks.at(-1)!, signer, now: t + 13_000 })), note },
    commitFor([blocks[0]!], t),
  );
  cpSync(chain, preIndex, { recursive: true }); // as it was, for the gateway's migration below
  mkdirSync(join(work, 'srv'));
  server = await GitServer.start(join(work, 'srv'));
  server.initBare('chain.git');
  remote = server.url('chain.git');
});

test.after(async () => {
  await server?.stop();
  rmSync(work, { recursive: true, force: true });
});

test('a chain from before the index verifies, the index reported absent', async () => {
  assert.equal(noteLines(chain), []);
  const r = ok(await vouchAsync(['verify', '--chain', chain, '--public-key', pub, '--index', '--json']));
  const j = JSON.parse(r.stdout);
  assert.is(j.index_checked, true);
  assert.is(j.index_root, null);
});

test('its next offline note (vouch endorse) commits the index computed from the whole history; vouch verify --index recomputes it', async () => {
  await endorse(U('/lib-1.tgz'), '2.0.0');
  const lines = noteLines(chain);
  assert.is(lines.length, 1);
  assert.is(lines[0], await recomputed(chain));
  const r = ok(await vouchAsync(['verify', '--chain', chain, '--public-key', pub, '--index', '--json']));
  assert.is(`vouch-index/v1 ${JSON.parse(r.stdout).index_root}`, lines[0]);
});

test('vouch revoke offline: the note carries the index with the revocation', async () => {
  const before = noteLines(chain)[0];
  ok(await vouchAsync(['revoke', '--chain', chain, '--key', keyFile, '--url', U('/lib-1.tgz')]));
  const lines = noteLines(chain);
  assert.is(lines[0], await recomputed(chain));
  assert.is.not(lines[0], before);
  ok(await vouchAsync(['verify', '--chain', chain, '--public-key', pub, '--index']));
});

test('a mirror clones the offline chain and syncs the next offline append, checking the index line both times', async () => {
  const pushed = await gitAsync(['-C', chain, 'push', '-q', remote, 'main']);
  assert.is(pushed.status, 0, pushed.stderr);
  const dir = join(work, 'mirror');
  const { repo } = await prepareMirror(dir, remote, { pinnedPublicKey: pub });
  const { state } = await ChainState.load(repo, { pinnedPublicKey: pub });
  assert.is(indexExtensionLine(state.completeness.root()), noteLines(chain)[0]);
  assert.ok(state.indexProof('url', U('/lib-1.tgz')), 'the mirror serves index proofs against the offline note');
  // a gateway over the authority's own directory leaves its image: the next offline writer starts from it
  await ChainState.load(await ChainRepo.open(chain, { repair: false }), { pinnedPublicKey: pub });
  await endorse(U('/lib-2.tgz'), '3.0.0');
  assert.is(noteLines(chain)[0], await recomputed(chain));
  assert.is((await gitAsync(['-C', chain, 'push', '-q', remote, 'main'])).status, 0);
  const sync = new ChainSync({ repo, remote, state, pinnedPublicKey: pub, intervalSeconds: 3600, log: memoryLog(), now: () => Date.now() });
  const out = await sync.syncNow();
  assert.is(out.result, 'updated', JSON.stringify(out));
  assert.is(state.size, 17);
  assert.is(indexExtensionLine(state.completeness.root()), noteLines(chain)[0]);
  assert.is(base64Encode(state.completeness.root()).length, 44);
});

test('the authority gateway over a chain from before the index: its first note commits the index computed from the whole history', async () => {
  assert.equal(noteLines(preIndex), []);
  const tokenFile = join(work, 'submit.token');
  const token = `migrate-${'m'.repeat(40)}`;
  writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
  const gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { host: '127.0.0.1', port: 0 },
      chain: { dir: preIndex },
      authority: { key_file: keyFile, signer: 'pre-index', submit_token_file: tokenFile },
    }),
  ]);
  try {
    const r = await fetch(`${gw.url}/v1/revoke`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ block: 7 }),
    });
    assert.is(r.status, 201, await r.text());
  } finally {
    await gw.stop();
  }
  const lines = noteLines(preIndex);
  assert.is(lines.length, 1);
  assert.is(lines[0], await recomputed(preIndex));
  ok(await vouchAsync(['verify', '--chain', preIndex, '--public-key', pub, '--index']));
});

test.run();
