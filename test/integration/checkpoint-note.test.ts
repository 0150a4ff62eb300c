/**
 * The signed checkpoint note committed with the chain (issue 17):
 * `checkpoint.note` beside `checkpoint.json` in every append's commit (vouch
 * init, vouch endorse, the gateway's submits; full and sparse layouts), its
 * root the RFC 6962 root over every block's record hash (checked against
 * chain/merkle-tree.ts recomputing it), signed by the authority under the
 * origin; `vouch verify` checking it; mirrors refusing a remote whose note
 * is bad; older chains without a note gaining one; the tree edge of
 * store/tree-edge.ts against MerkleTree.
 *
 * Owns: nothing outside its temporary directory. Real CLI and gateway
 * processes, real git, an origin and a git server on 127.0.0.1.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildAuthorityBlock, buildCheckpoint, buildEndorseBlock, artifactHashOf } from '../../chain/build.ts';
import { formatBlockFile, formatCheckpointFile, type Block } from '../../chain/block.ts';
import { base64Decode, base64Encode, hexDecode, utf8 } from '../../chain/encoding.ts';
import { MerkleTree } from '../../chain/merkle-tree.ts';
import { rootOfEntries } from '../../chain/merkle.ts';
import { SIG_ED25519, verifierKey } from '../../chain/note.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { VouchError } from '../../chain/errors.ts';
import { createKeyFile, readKeyFile } from '../../platform/key-file.ts';
import { nodeBackend, nodeSigner } from '../../platform/node-crypto.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { appendSigned, commitFor } from '../../store/chain-append.ts';
import { signNoteText } from '../../platform/note-signer.ts';
import { TreeEdge, readEdgeFile } from '../../store/tree-edge.ts';
import { ChainState } from '../../gateway/chain/verified-state.ts';
import { ChainSync } from '../../gateway/chain/mirror-sync.ts';
import { logOrigin, resolveConfig } from '../../gateway/config.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { GitServer } from '../helpers/git-server.ts';
import { memoryLog } from '../helpers/memory-log.ts';
import { startGatewayProcess, submitEntry, writeConfig } from '../helpers/gateway-process.ts';
import { gitAsync, gitIn, vouch, vouchAsync, vouchEndorse } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-note-'));
const keyFile = join(work, 'authority.pem');
let pub = '';
let seq = 0;
const fresh = (name: string) => join(work, `${name}-${seq++}`);

/** The record hashes of the chain's block files (as branch main commits them), as MerkleTree entries. */
function treeOf(dir: string): MerkleTree {
  const tree = new MerkleTree(nodeBackend);
  const size = gitIn(dir, 'ls-tree', '-r', '--name-only', 'main', 'blocks').split('\n').filter(Boolean).length;
  for (let i = 0; i < size; i++) {
    const d = String(i).padStart(9, '0');
    tree.append(hexDecode(JSON.parse(gitIn(dir, 'show', `main:blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`)).record_hash)!);
  }
  return tree;
}

/** The committed note opens with the authority key, names the chain's size and carries the Merkle root of its record hashes. */
function assertNote(dir: string, tree: MerkleTree, origin: string, key = pub): void {
  const committed = gitIn(dir, 'show', 'main:checkpoint.note');
  const { checkpoint } = openCheckpoint(nodeBackend, committed, { publicKey: base64Decode(key)!, origin });
  assert.is(checkpoint.size, tree.size);
  assert.is(base64Encode(checkpoint.root), base64Encode(tree.root()), 'note root = MerkleTree root');
  assert.is(JSON.parse(gitIn(dir, 'show', 'main:checkpoint.json')).size, tree.size, 'checkpoint.json stays beside it');
  if (existsSync(join(dir, 'checkpoint.note'))) assert.is(readFileSync(join(dir, 'checkpoint.note'), 'utf8'), committed);
}

function assertClean(dir: string): void {
  assert.is(gitIn(dir, 'status', '--porcelain', '--untracked-files=all'), '', 'git status');
}

function verifyJson(dir: string, extra: string[] = []) {
  const r = vouch(['verify', '--chain', dir, '--json', ...extra]);
  return { r, out: r.stdout.trim() ? JSON.parse(r.stdout) : null };
}

async function endorse(chain: string, i: number, extra: string[] = [], env: Record<string, string> = {}) {
  const file = join(work, `artifact-${i}.txt`);
  writeFileSync(file, `artifact ${i}\n`);
  return vouchEndorse(
    chain,
    keyFile,
    ['--url', `https://a.example/note/artifact-${i}.tgz`, '--file', file, '--name', 'acme/note', '--semver', `1.${i}.0`, '--license', 'MIT', ...extra],
    env,
  );
}

/** A git commit replacing checkpoint.note in a plain clone (what a tampering party can do). */
function commitNote(dir: string, text: string): void {
  writeFileSync(join(dir, 'checkpoint.note'), text);
  gitIn(dir, '-c', 'user.name=t', '-c', 'user.email=t@t.invalid', 'commit', '-q', '-am', 'replace the note');
}

test.before(() => {
  pub = createKeyFile(keyFile).publicKeyB64;
});

test.after(() => rmSync(work, { recursive: true, force: true }));

// ---------------------------------------------------------------------------

test('TreeEdge: root = MerkleTree root for sizes 0..300; fromTree, rootWith (edge unchanged) and the text form agree', () => {
  const tree = new MerkleTree(nodeBackend);
  const edge = TreeEdge.empty(nodeBackend);
  const entries: Uint8Array[] = [];
  for (let n = 0; n <= 300; n++) {
    assert.is(base64Encode(edge.root()), base64Encode(tree.root()), `size ${n}`);
    if (n > 0 && n % 7 === 0) {
      const from = TreeEdge.fromTree(nodeBackend, tree);
      assert.is(base64Encode(from.root()), base64Encode(tree.root()), `fromTree ${n}`);
      const parsed = TreeEdge.parse(nodeBackend, edge.toText())!;
      assert.is(parsed.size, n);
      assert.is(base64Encode(parsed.root()), base64Encode(edge.root()));
    }
    const e = nodeBackend.digest!('sha256', utf8(`entry ${n}`));
    entries.push(e);
    if (n % 50 === 0) {
      const before = base64Encode(edge.root());
      assert.is(base64Encode(edge.rootWith([e])), base64Encode(rootOfEntries(nodeBackend, entries)));
      assert.is(base64Encode(edge.root()), before, 'rootWith leaves the edge as it was');
    }
    tree.append(e);
    edge.append(e);
  }
  assert.is(TreeEdge.parse(nodeBackend, 'vouch-tree-edge v1\n3\n'), null, 'size 3 needs two hashes');
  assert.is(TreeEdge.parse(nodeBackend, 'nonsense\n'), null);
});

test('TreeEdge.fromImage: the edge of a tree image read off it, for every size; null for what is not an image', () => {
  const tree = new MerkleTree(nodeBackend);
  const sizes = new Set([...Array.from({ length: 70 }, (_, i) => i + 1), 127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 3000]);
  for (let n = 1; n <= 3000; n++) {
    tree.append(nodeBackend.digest!('sha256', utf8(`image entry ${n}`)));
    if (!sizes.has(n)) continue;
    const edge = TreeEdge.fromImage(nodeBackend, tree.toImage());
    assert.ok(edge, `size ${n}`);
    assert.is(edge!.size, n);
    assert.is(base64Encode(edge!.root()), base64Encode(tree.root()), `size ${n}`);
    assert.is(edge!.toText(), TreeEdge.fromTree(nodeBackend, tree).toText(), `size ${n}: the same hashes as the tree's edge`);
  }
  const image = tree.toImage();
  assert.is(TreeEdge.fromImage(nodeBackend, image.subarray(0, image.length - 1)), null, 'one byte short');
  assert.is(TreeEdge.fromImage(nodeBackend, Buffer.concat([image, Buffer.alloc(1)])), null, 'one byte more');
  const badMagic = Buffer.from(image);
  badMagic[0] = badMagic[0]! ^ 1;
  assert.is(TreeEdge.fromImage(nodeBackend, badMagic), null, 'not the magic');
  assert.is(TreeEdge.fromImage(nodeBackend, image.subarray(0, 10)), null, 'shorter than the header');
});

test('config: chain.origin is checked; the default origin is public_url without its scheme', () => {
  assert.is(logOrigin(resolveConfig({ public_url: 'http://127.0.0.1:8080/' }, work, null)), '127.0.0.1:8080');
  assert.is(logOrigin(resolveConfig({ public_url: 'https://vouch.example.org', chain: { origin: 'example.org/log' } }, work, null)), 'example.org/log');
  assert.throws(() => resolveConfig({ chain: { origin: 'has space' } }, work, null), /chain\.origin/);
  assert.throws(() => resolveConfig({ chain: { origin: 'a+b' } }, work, null), /chain\.origin/);
});

test('keygen prints the verifier key only with --origin, the public key first', () => {
  const k = join(work, 'k2.pem');
  const r = vouch(['keygen', '--out', k, '--origin', 'example.org/log']);
  assert.is(r.status, 0, r.stderr);
  const [first, second] = r.stdout.trim().split('\n');
  assert.match(first!, /^[A-Za-z0-9+/]{43}=$/);
  assert.is(second, `verifier key: ${verifierKey(nodeBackend, 'example.org/log', SIG_ED25519, base64Decode(first!)!)}`);
  const plain = vouch(['keygen', '--out', join(work, 'k3.pem')]);
  assert.is(plain.stdout.trim().split('\n').length, 1);
  assert.is(vouch(['keygen', '--out', join(work, 'k4.pem'), '--origin', 'a b']).status, 2);
});

test('init commits the note (origin vouch/<signer>) and prints the verifier key; CLI appends keep it the Merkle root, from the kept edge', async () => {
  const chain = fresh('cli');
  const r = vouch(['init', '--chain', chain, '--key', keyFile, '--signer', 'acme-authority']);
  assert.is(r.status, 0, r.stderr);
  const vkey = verifierKey(nodeBackend, 'vouch/acme-authority', SIG_ED25519, base64Decode(pub)!);
  assert.match(r.stdout, new RegExp(`\\nverifier key: ${vkey.replace(/[+/]/g, '\\$&')}\\n$`));
  assertNote(chain, treeOf(chain), 'vouch/acme-authority');
  assert.match(gitIn(chain, 'ls-tree', '--name-only', 'main'), /^blocks\ncheckpoint\.json\ncheckpoint\.note\n$/);
  assertClean(chain);
  for (let i = 1; i <= 4; i++) {
    const e = await endorse(chain, i, [], { VOUCH_TIMINGS: '1' });
    assert.is(e.status, 0, e.stderr);
    assert.match(e.stderr, /append\(edge file\)/, 'the root came from the kept edge, not a scan');
    const tree = treeOf(chain);
    assert.is(tree.size, i + 1);
    assertNote(chain, tree, 'vouch/acme-authority');
    assert.is(readEdgeFile(nodeBackend, chain)!.size, i + 1);
  }
  assertClean(chain);
  assert.match(gitIn(chain, 'show', '--stat', '--format=', 'main'), /checkpoint\.note/, "the note changes in the append's own commit");
  const { r: v, out } = verifyJson(chain, ['--public-key', pub]);
  assert.is(v.status, 0, v.stderr);
  assert.is(out.origin, 'vouch/acme-authority');
  assert.is(out.root, base64Encode(treeOf(chain).root()));
  assert.is(out.note, true);
  // A lost or stale edge file: the next append recomputes the root from the record hashes.
  writeFileSync(join(chain, '.git', 'vouch-tree-edge'), TreeEdge.empty(nodeBackend).toText());
  const e = await endorse(chain, 5, [], { VOUCH_TIMINGS: '1' });
  assert.is(e.status, 0, e.stderr);
  assert.match(e.stderr, /append\(edge scan\)/);
  assertNote(chain, treeOf(chain), 'vouch/acme-authority');
});

test('init --origin; the sparse layout commits and checks out the note too', async () => {
  const chain = fresh('sparse');
  const r = vouch(['init', '--chain', chain, '--key', keyFile, '--signer', 'acme-authority', '--origin', 'example.org/sparse', '--layout', 'sparse']);
  assert.is(r.status, 0, r.stderr);
  assert.is(vouch(['init', '--chain', fresh('bad'), '--key', keyFile, '--signer', 'x', '--origin', 'a+b']).status, 2);
  for (let i = 1; i <= 3; i++) assert.is((await endorse(chain, i)).status, 0);
  assert.ok(!existsSync(join(chain, 'blocks')), 'sparse: no block files');
  assert.ok(existsSync(join(chain, 'checkpoint.note')));
  assertClean(chain);
  const tree = new MerkleTree(nodeBackend);
  for (let i = 0; i < 4; i++) {
    const d = String(i).padStart(9, '0');
    tree.append(hexDecode(JSON.parse(gitIn(chain, 'show', `main:blocks/${d.slice(0, 3)}/${d.slice(3, 6)}/${d}.json`)).record_hash)!);
  }
  assertNote(chain, tree, 'example.org/sparse');
  const { r: v, out } = verifyJson(chain);
  assert.is(v.status, 0, v.stderr);
  assert.is(out.root, base64Encode(tree.root()));
  assert.is(out.origin, 'example.org/sparse');
});

test('vouch verify refuses a tampered note, a note of another size, one signed by another key (checkpoint_mismatch, exit 1)', async () => {
  const chain = fresh('tamper');
  assert.is(vouch(['init', '--chain', chain, '--key', keyFile, '--signer', 'acme-authority']).status, 0);
  for (let i = 1; i <= 3; i++) assert.is((await endorse(chain, i)).status, 0);
  const good = readFileSync(join(chain, 'checkpoint.note'), 'utf8');
  const signer = nodeSigner('acme-authority', readKeyFile(keyFile));
  const tree = treeOf(chain);
  const otherKey = join(work, 'other.pem');
  createKeyFile(otherKey);
  const other = nodeSigner('acme-authority', readKeyFile(otherKey));
  const cases: [string, string, RegExp][] = [
    ['a changed root', good.replace(/^(.*\n.*\n)(.)/, (_m, a: string, c: string) => a + (c === 'A' ? 'B' : 'A')), /does not open|does not verify/],
    ['another size, well signed', signNoteText(signer, 'vouch/acme-authority', 3, tree.root(3)), /names 3 entries, the chain has 4/],
    ['the right size, another root, well signed', signNoteText(signer, 'vouch/acme-authority', 4, tree.root(3)), /is not the Merkle root/],
    ['another key', signNoteText(other, 'vouch/acme-authority', 4, tree.root()), /no signature by the authority key/],
  ];
  for (const [what, text, why] of cases) {
    const clone = fresh('tamper-clone');
    gitIn(work, 'clone', '-q', chain, clone);
    commitNote(clone, text);
    for (const threads of ['0', '2']) {
      const r = vouch(['verify', '--chain', clone, '--threads', threads]);
      assert.is(r.status, 1, `${what}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, /^checkpoint_mismatch at checkpoint: checkpoint\.note /, what);
      assert.match(r.stderr, why, what);
    }
    const j = verifyJson(clone).out;
    assert.is(j.code, 'checkpoint_mismatch', what);
    // An append on top of it is refused too (the CLI checks the committed note before signing after it).
    const e = await endorse(clone, 9);
    assert.is(e.status, 1, `${what}: endorse ${e.stderr}`);
    assert.match(e.stderr, /checkpoint_mismatch/);
  }
  // The untouched chain verifies (with 2 threads and inline).
  for (const threads of ['0', '2']) assert.is(vouch(['verify', '--chain', chain, '--threads', threads]).status, 0);
});

/** A chain made the way vouch made them before notes: no checkpoint.note. */
async function oldChain(dir: string, n: number): Promise<Block[]> {
  const signer = nodeSigner('acme-authority', readKeyFile(keyFile));
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now: Date.now() - 100_000, uns: 'acme/old' })];
  for (let i = 1; i < n; i++) {
    blocks.push(
      buildEndorseBlock({
        prev: blocks[i - 1]!,
        signer,
        backend: nodeBackend,
        now: Date.now() - 100_000 + i * 1000,
        entries: [
          {
            url: `https://a.example/old/${i}.tgz`,
            artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(`old ${i}`)),
            name: 'acme/old',
            semver: `0.${i}.0`,
            license: 'MIT',
          },
        ],
      }),
    );
  }
  const cp = buildCheckpoint({ head: blocks[n - 1]!, signer, now: Date.now() - 100_000 + n * 1000 });
  await ChainRepo.init(
    dir,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(cp),
    commitFor([blocks[0]!], Date.now()),
  );
  return blocks;
}

test('an older chain without a note verifies (the absence reported) and gains one with its next append', async () => {
  const chain = fresh('old');
  await oldChain(chain, 5);
  assert.ok(!existsSync(join(chain, 'checkpoint.note')));
  const { r, out } = verifyJson(chain);
  assert.is(r.status, 0, r.stderr);
  assert.is(out.note, false);
  assert.is(out.origin, null);
  assert.is(out.root, base64Encode(treeOf(chain).root()));
  const plain = vouch(['verify', '--chain', chain]);
  assert.is(plain.status, 0);
  assert.match(plain.stdout, /note absent/);
  assert.match(plain.stderr, /no checkpoint\.note/);
  // The next append commits a note whose root came from `edge` (the CLI's timing line says where).
  const gainsNote = async (dir: string, edge: RegExp) => {
    const e = await endorse(dir, 1, [], { VOUCH_TIMINGS: '1' });
    assert.is(e.status, 0, e.stderr);
    assert.match(e.stderr, edge);
    assertNote(dir, treeOf(dir), 'vouch/acme-authority');
    assertClean(dir);
    assert.is(verifyJson(dir).out.note, true);
  };
  await gainsNote(chain, /append\(edge scan\)/);
  // Another older chain, once a gateway has loaded it (its snapshot names its Merkle tree image):
  // the first note's root comes from that image's edge, not from folding every record hash.
  const served = fresh('old-served');
  await oldChain(served, 5);
  const gw = await startGatewayProcess([
    '--config',
    writeConfig(fresh('old-served-config'), { listen: { host: '127.0.0.1', port: 0 }, chain: { dir: served, public_key: pub } }),
  ]);
  await gw.stop();
  assert.ok(existsSync(join(served, '.git', 'vouch-tree.bin')));
  await gainsNote(served, /append\(edge image\)/);
});

test('the gateway commits the note with every submit (group commits too), under chain.origin; a different configured origin refuses to start (exit 2)', async () => {
  const origin = await OriginServer.start();
  const dir = fresh('gw');
  mkdirSync(dir);
  const tokenFile = join(dir, 'submit.token');
  writeFileSync(tokenFile, 'note-token-' + 'x'.repeat(32) + '\n', { mode: 0o600 });
  const chain = join(dir, 'chain');
  const config = (o: string) => ({
    listen: { host: '127.0.0.1', port: 0 },
    chain: { dir: chain, origin: o },
    authority: { key_file: keyFile, signer: 'gw-authority', submit_token_file: tokenFile },
    origin: { allow_private: true },
  });
  try {
    for (let i = 0; i < 8; i++) origin.route(`/gw-${i}.tgz`, { body: `gateway artifact ${i}\n` });
    let gw = await startGatewayProcess(['--config', writeConfig(dir, config('example.org/gw'))]);
    // Each asserts 201.
    const submit = (i: number) =>
      submitEntry(gw.url, `note-token-${'x'.repeat(32)}`, { url: origin.url(`/gw-${i}.tgz`), name: 'acme/gw', semver: `1.${i}.0`, license: 'MIT' });
    try {
      assertNote(chain, treeOf(chain), 'example.org/gw');
      await submit(0);
      assertNote(chain, treeOf(chain), 'example.org/gw');
      await Promise.all([1, 2, 3, 4, 5].map(submit));
      const tree = treeOf(chain);
      assert.is(tree.size, 7);
      assertNote(chain, tree, 'example.org/gw');
    } finally {
      await gw.stop();
    }
    assertClean(chain);
    const { r, out } = verifyJson(chain, ['--public-key', pub]);
    assert.is(r.status, 0, r.stderr);
    assert.is(out.origin, 'example.org/gw');
    // A gateway configured with another origin than the committed note's refuses to start.
    const other = await vouchAsync(['serve', '--config', writeConfig(dir, config('example.org/renamed'), 'renamed.yaml')], {}, 60_000);
    assert.is(other.status, 2, other.stdout + other.stderr);
    assert.match(other.stderr, /chain\.origin/);
    assert.match(other.stderr, /example\.org\/gw/);
    const readOnly = await vouchAsync(
      ['serve', '--config', writeConfig(dir, { listen: { host: '127.0.0.1', port: 0 }, chain: { dir: chain, origin: 'example.org/other' } }, 'ro.yaml')],
      {},
      60_000,
    );
    assert.is(readOnly.status, 2, readOnly.stdout + readOnly.stderr);
    assert.match(readOnly.stderr, /chain\.origin/);
    // Restarted as it was (without the kept edge: the verified index image gives the record hashes), it appends, and the CLI after it too.
    rmSync(join(chain, '.git', 'vouch-tree-edge'));
    gw = await startGatewayProcess(['--config', writeConfig(dir, config('example.org/gw'))]);
    try {
      await submit(6);
    } finally {
      await gw.stop();
    }
    assertNote(chain, treeOf(chain), 'example.org/gw');
    const e = await vouchAsync(
      [
        'endorse',
        '--chain',
        chain,
        '--key',
        keyFile,
        '--url',
        'https://a.example/gw-cli.tgz',
        '--file',
        tokenFile,
        '--name',
        'acme/gw',
        '--semver',
        '9.0.0',
        '--license',
        'MIT',
      ],
      { VOUCH_TIMINGS: '1' },
    );
    assert.is(e.status, 0, e.stderr);
    assert.match(e.stderr, /append\(edge file\)/);
    assertNote(chain, treeOf(chain), 'example.org/gw');
    // Without the kept edge again: the gateway's verified Merkle tree image gives the edge, the record hashes after it the rest.
    const cliEndorse = (k: number) =>
      vouchAsync(
        [
          'endorse',
          '--chain',
          chain,
          '--key',
          keyFile,
          '--url',
          `https://a.example/gw-cli-${k}.tgz`,
          '--file',
          tokenFile,
          '--name',
          'acme/gw',
          '--semver',
          `9.0.${k}`,
          '--license',
          'MIT',
        ],
        { VOUCH_TIMINGS: '1' },
      );
    const treeImage = join(chain, '.git', 'vouch-tree.bin');
    assert.ok(existsSync(treeImage), 'the gateway wrote its tree image');
    rmSync(join(chain, '.git', 'vouch-tree-edge'));
    const e2 = await cliEndorse(1);
    assert.is(e2.status, 0, e2.stderr);
    assert.match(e2.stderr, /append\(edge image\)/);
    assertNote(chain, treeOf(chain), 'example.org/gw');
    // A damaged tree image (no longer the sha256 the snapshot names) is not used: the record hashes give the edge.
    const damaged = readFileSync(treeImage);
    for (let i = 16; i < damaged.length; i++) damaged[i] = damaged[i]! ^ 0x5a;
    writeFileSync(treeImage, damaged);
    rmSync(join(chain, '.git', 'vouch-tree-edge'));
    const e3 = await cliEndorse(2);
    assert.is(e3.status, 0, e3.stderr);
    assert.match(e3.stderr, /append\(edge scan\)/);
    assertNote(chain, treeOf(chain), 'example.org/gw');
  } finally {
    await origin.close();
  }
});

// ---------------------------------------------------------------------------
// Mirrors

test('a mirror takes honest notes and refuses a remote whose note is unsigned, of another size or root, or dropped', async () => {
  mkdirSync(join(work, 'srv'), { recursive: true });
  const server = await GitServer.start(join(work, 'srv'));
  try {
    server.initBare('note.git');
    const url = server.url('note.git');
    const adir = fresh('authority');
    assert.is(vouch(['init', '--chain', adir, '--key', keyFile, '--signer', 'acme-authority']).status, 0);
    const push = async (force = false) => {
      const r = await gitAsync(['-C', adir, 'push', '-q', ...(force ? ['--force'] : []), url, 'main']);
      assert.is(r.status, 0, r.stderr);
    };
    await push();
    const mdir = fresh('mirror');
    const repo = await ChainRepo.clone(url, mdir);
    const { state } = await ChainState.load(repo, { pinnedPublicKey: pub });
    const log = memoryLog();
    const sync = new ChainSync({ repo, remote: url, state, pinnedPublicKey: pub, intervalSeconds: 3600, log });

    // Honest appends with notes: accepted.
    for (let i = 1; i <= 2; i++) assert.is((await endorse(adir, i)).status, 0);
    await push();
    let out = await sync.syncNow();
    assert.is(out.result, 'updated', JSON.stringify(out));
    assert.is(state.size, 3);
    assertNote(mdir, treeOf(mdir), 'vouch/acme-authority');

    const signer = nodeSigner('acme-authority', readKeyFile(keyFile));
    const next = (prev: Block, i: number) =>
      buildEndorseBlock({
        prev,
        signer,
        backend: nodeBackend,
        now: Date.now() + i * 1000,
        entries: [
          {
            url: `https://a.example/mirror/${i}.tgz`,
            artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(`m ${i}`)),
            name: 'acme/m',
            semver: `3.${i}.0`,
            license: 'MIT',
          },
        ],
      });
    const refusedWith = async (noteFor: (tree: MerkleTree, block: Block) => string | null, why: RegExp) => {
      // A fresh history from the mirror's verified head: one block, a bad note.
      const base = fresh('bad');
      gitIn(work, 'clone', '-q', mdir, base);
      const r = await ChainRepo.open(base);
      const tree = treeOf(base);
      const prev = JSON.parse(gitIn(base, 'show', `main:blocks/000/000/${String(r.size - 1).padStart(9, '0')}.json`)) as Block;
      const b = next(prev, r.size);
      tree.append(hexDecode(b.record_hash)!);
      const cp = buildCheckpoint({ head: b, signer, now: Date.now() + 50_000 });
      await r.append([{ index: b.index, content: formatBlockFile(b) }], { json: formatCheckpointFile(cp), note: noteFor(tree, b) }, commitFor([b], Date.now()));
      const pushed = await gitAsync(['-C', base, 'push', '-q', '--force', url, 'main']);
      assert.is(pushed.status, 0, pushed.stderr);
      const before = { size: state.size, head: repo.head };
      const o = await sync.syncNow();
      assert.is(o.result, 'refused', JSON.stringify(o));
      assert.is((o as { code: string }).code, 'checkpoint_mismatch');
      assert.match((o as { message: string }).message, why);
      assert.equal({ size: state.size, head: repo.head }, before, 'the last verified head keeps serving');
      assert.ok(log.lines.some((l) => l.level === 'error' && l.fields.code === 'checkpoint_mismatch'));
    };
    const otherKey = join(work, 'mirror-other.pem');
    createKeyFile(otherKey);
    const other = nodeSigner('acme-authority', readKeyFile(otherKey));
    await refusedWith((t) => signNoteText(other, 'vouch/acme-authority', t.size, t.root()), /no signature by the authority key/);
    await refusedWith((t) => signNoteText(signer, 'vouch/acme-authority', t.size - 1, t.root(t.size - 1)), /names \d+ entries/);
    await refusedWith((t) => signNoteText(signer, 'vouch/acme-authority', t.size, t.root(t.size - 1)), /not the Merkle root/);
    await refusedWith((t) => signNoteText(signer, 'example.org/renamed', t.size, t.root()), /origin/);
    // An append without a note (it drops the committed one): refused once a note was verified.
    await refusedWith(() => null, /the remote has no checkpoint\.note, the verified chain has one/);

    // The authority's honest history again (force-pushed back): accepted.
    for (let i = 3; i <= 4; i++) assert.is((await endorse(adir, i)).status, 0);
    await push(true);
    out = await sync.syncNow();
    assert.is(out.result, 'updated', JSON.stringify(out));
    assert.is(state.size, 5);
    assert.is(JSON.parse(gitIn(adir, 'show', 'main:blocks/000/000/000000004.json')).record_hash, state.head.record_hash);
    assertNote(mdir, treeOf(mdir), 'vouch/acme-authority');
    await sync.stop();
  } finally {
    await server.stop();
  }
});

test('open() repairs checkpoint.note like checkpoint.json: a crash between the ref move and the state file, any difference', async () => {
  for (const layout of ['sparse']) {
    const chain = fresh(`repair-${layout}`);
    assert.is(vouch(['init', '--chain', chain, '--key', keyFile, '--signer', 'acme-authority', '--layout', layout]).status, 0);
    for (let i = 1; i <= 2; i++) assert.is((await endorse(chain, i)).status, 0);
    const want = gitIn(chain, 'show', 'main:checkpoint.note');
    // As if the last append crashed after moving the branch: the state names the commit before, the note is the old one.
    const statePath = join(chain, '.git', 'vouch-state.json');
    const state = JSON.parse(readFileSync(statePath, 'utf8'));
    state.commit = gitIn(chain, 'rev-parse', 'main~1').trim();
    writeFileSync(statePath, JSON.stringify(state));
    writeFileSync(join(chain, 'checkpoint.note'), gitIn(chain, 'show', 'main~1:checkpoint.note'));
    writeFileSync(join(chain, 'checkpoint.note.vouch-tmp'), 'half written');
    const repo = await ChainRepo.open(chain);
    assert.is(readFileSync(join(chain, 'checkpoint.note'), 'utf8'), want, layout);
    assert.ok(
      repo.repairs.some((r) => r.path === 'checkpoint.note' && r.action === 'restored'),
      `${layout}: ${JSON.stringify(repo.repairs)}`,
    );
    assert.ok(!existsSync(join(chain, 'checkpoint.note.vouch-tmp')));
    assert.is(repo.readCheckpointNote(), want);
    assert.is(await repo.committedNote(), want);
    assertClean(chain);
    // Gone altogether: restored too.
    rmSync(join(chain, 'checkpoint.note'));
    writeFileSync(statePath, JSON.stringify(state));
    await ChainRepo.open(chain);
    assert.is(readFileSync(join(chain, 'checkpoint.note'), 'utf8'), want, layout);
    assertClean(chain);
  }
});

test('an append without a note removes the committed one (it would name an older size); ChainRepo refuses a note that is not a string', async () => {
  for (const layout of ['sparse']) {
    const chain = fresh(`drop-${layout}`);
    assert.is(vouch(['init', '--chain', chain, '--key', keyFile, '--signer', 'acme-authority', '--layout', layout]).status, 0);
    const repo = await ChainRepo.open(chain);
    const signer = nodeSigner('acme-authority', readKeyFile(keyFile));
    const head = JSON.parse(repo.readBlockFile(0)) as Block;
    const b = buildEndorseBlock({
      prev: head,
      signer,
      backend: nodeBackend,
      now: Date.now() + 1000,
      entries: [
        {
          url: 'https://a.example/keep.tgz',
          artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8('keep')),
          name: 'acme/keep',
          semver: '1.0.0',
          license: 'MIT',
        },
      ],
    });
    const committed = await appendSigned(repo, [b], buildCheckpoint({ head: b, signer, now: Date.now() + 1000 }), Date.now());
    assert.is(committed.noteText, null);
    assert.not.match(gitIn(chain, 'ls-tree', '--name-only', 'main'), /checkpoint\.note/, layout);
    assert.ok(!existsSync(join(chain, 'checkpoint.note')), layout);
    assertClean(chain);
    try {
      await repo.append([{ index: 2, content: '{}' }], { json: '{}', note: 42 as unknown as string }, commitFor([b], Date.now()));
      assert.unreachable('a note that is not a string was accepted');
    } catch (e) {
      assert.instance(e, VouchError);
      assert.is((e as VouchError).code, 'bad_request');
    }
    // Without a note it verifies (absence reported), and the next CLI append brings one back.
    const r = vouch(['verify', '--chain', chain]);
    assert.is(r.status, 0, r.stderr);
    assert.match(r.stdout, /note absent/);
    assert.is((await endorse(chain, 1)).status, 0);
    assert.match(gitIn(chain, 'ls-tree', '--name-only', 'main'), /checkpoint\.note/);
    assertClean(chain);
    assert.is(verifyJson(chain).out.note, true);
  }
});

test.run();
