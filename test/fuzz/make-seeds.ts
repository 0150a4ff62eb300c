/**
 * Writes the genuine seed inputs of test/fuzz/corpus/ (re-run to refresh:
 * `npx tsx test/fuzz/make-seeds.ts`): packs, indexes and advertisements made
 * by git itself, heads and chunked bodies sent by node's HTTP server, notes
 * and blocks signed by the chain's code, a registry's packument (hosts
 * renamed to example ones), this repository's lockfile and README config.
 * Regression cases (`regress-*`) are left alone.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { CORPUS_DIR } from './target.ts';
import { buildFeatureChain, testSigner } from '../helpers/chain-fixture.ts';
import { formatBlockFile, formatCheckpointFile } from '../../chain/block.ts';
import { SIG_COSIGNATURE_V1, SIG_ED25519, cosign, formatNote, parseNote, verifierKey } from '../../chain/note.ts';
import { formatCheckpoint, signCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { MerkleTree, tilePath } from '../../chain/merkle-tree.ts';
import { formatAddCheckpoint } from '../../gateway/transparency/witness.ts';
import { pktLine } from '../../store/pkt-line.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';

const root = new URL('../../', import.meta.url).pathname;
const put = (target: string, name: string, bytes: string | Buffer) => {
  fs.mkdirSync(join(CORPUS_DIR, target), { recursive: true });
  fs.writeFileSync(join(CORPUS_DIR, target, name), bytes);
};
const work = fs.mkdtempSync(join(tmpdir(), 'vouch-seeds-'));
const git = (cwd: string, ...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.org', '-c', 'commit.gpgsign=false', ...args], { cwd, maxBuffer: 64 << 20 });

// --- HTTP/1.1, from node's server ---
const server = createServer((req, res) => {
  if (req.url === '/chunked') {
    res.setHeader('content-type', 'application/octet-stream');
    res.write('hello ');
    res.write(Buffer.alloc(300, 'x'));
    res.addTrailers({ 'x-checksum': 'abc' });
    res.end('world');
  } else if (req.url === '/length') res.end('{"ok":true}');
  else {
    res.writeHead(304);
    res.end();
  }
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const port = (server.address() as { port: number }).port;
const raw = (path: string, extra = '') =>
  new Promise<Buffer>((resolve) => {
    const parts: Buffer[] = [];
    const s = connect(port, '127.0.0.1', () => s.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nConnection: close\r\n${extra}\r\n`));
    s.on('data', (d) => parts.push(d));
    s.on('end', () => resolve(Buffer.concat(parts)));
  });
for (const [name, path] of [
  ['chunked', '/chunked'],
  ['length', '/length'],
  ['not-modified', '/304'],
] as const) {
  const r = await raw(path);
  const end = r.indexOf('\r\n\r\n');
  put('h1-head', name, r.subarray(0, end + 4));
  put('h1-client', name, r);
  if (name === 'chunked') put('h1-chunked', 'node-trailers', r.subarray(end + 4));
}
put(
  'h1-head',
  'interim',
  Buffer.concat([
    Buffer.from('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n'),
    fs.readFileSync(join(CORPUS_DIR, 'h1-head', 'length')),
  ]),
);
put('h1-client', 'interim', Buffer.concat([Buffer.from('HTTP/1.1 100 Continue\r\n\r\n'), fs.readFileSync(join(CORPUS_DIR, 'h1-client', 'length'))]));
server.close();
put('h1-chunked', 'ext-upper', '1A;name=value\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n');

// --- git: a repository with history, its pack, index, split index and advertisement ---
const repo = join(work, 'repo');
fs.mkdirSync(repo);
git(repo, 'init', '-q', '-b', 'main');
for (let i = 0; i < 3; i++) {
  fs.mkdirSync(join(repo, 'blocks', '000'), { recursive: true });
  fs.writeFileSync(join(repo, 'README'), `chain readme\n${'line of text that deltas well\n'.repeat(20)}version ${i}\n`);
  fs.writeFileSync(join(repo, 'blocks', '000', `${i}.json`), `{"index": ${i}}\n`);
  git(repo, 'add', '-A');
  git(repo, 'commit', '-q', '-m', `block ${i}`);
}
const pack = execFileSync('git', ['pack-objects', '--stdout', '--all', '--delta-base-offset', '-q'], { cwd: repo, input: '' });
put('git-pack', 'ofs-delta.pack', pack);
put('git-pack', 'ref-delta.pack', execFileSync('git', ['pack-objects', '--stdout', '--all', '-q'], { cwd: repo, input: '' }));
git(repo, 'repack', '-adq');
const packDir = join(repo, '.git', 'objects', 'pack');
const stored = fs.readdirSync(packDir).find((f) => f.endsWith('.pack'))!;
const idx = fs.readFileSync(join(packDir, stored.replace(/\.pack$/, '.idx')));
const len = Buffer.alloc(4);
len.writeUInt32BE(idx.length);
put('git-pack-disk', 'repacked', Buffer.concat([len, idx, fs.readFileSync(join(packDir, stored))]));
put('git-index', 'v2', fs.readFileSync(join(repo, '.git', 'index')));
git(repo, 'update-index', '--index-version', '4');
put('git-index', 'v4', fs.readFileSync(join(repo, '.git', 'index')));
git(repo, 'update-index', '--index-version', '2');
git(repo, 'config', 'core.splitIndex', 'true');
git(repo, 'update-index', '--split-index');
fs.writeFileSync(join(repo, 'blocks', '000', '1.json'), '{"index": 1, "changed": true}\n');
fs.writeFileSync(join(repo, 'new'), 'x');
git(repo, 'add', '-A');
git(repo, 'rm', '-q', '--cached', 'blocks/000/0.json');
put('git-index', 'split-link', fs.readFileSync(join(repo, '.git', 'index')));
const shared = fs.readdirSync(join(repo, '.git')).find((f) => f.startsWith('sharedindex.'))!;
put('git-index', 'shared', fs.readFileSync(join(repo, '.git', shared)));
put('pkt-line', 'advertisement', execFileSync('git', ['upload-pack', '--advertise-refs', '--stateless-rpc', repo]));
put('pkt-line', 'receive-advertisement', execFileSync('git', ['receive-pack', '--advertise-refs', '--stateless-rpc', repo]));
put(
  'git-smart-http',
  'upload-advertisement',
  Buffer.concat([
    pktLine('# service=git-upload-pack\n'),
    Buffer.from('0000'),
    execFileSync('git', ['upload-pack', '--advertise-refs', '--stateless-rpc', repo]),
  ]),
);
const head = git(repo, 'rev-parse', 'HEAD').toString().trim();
const ask = Buffer.concat([
  pktLine(`want ${head} side-band-64k shallow thin-pack ofs-delta no-progress\n`),
  pktLine('deepen 1\n'),
  Buffer.from('0000'),
  pktLine('done\n'),
]);
put('git-smart-http', 'upload-pack-result', execFileSync('git', ['upload-pack', '--stateless-rpc', repo], { input: ask }));
put(
  'git-smart-http',
  'receive-advertisement',
  Buffer.concat([
    pktLine('# service=git-receive-pack\n'),
    Buffer.from('0000'),
    execFileSync('git', ['receive-pack', '--advertise-refs', '--stateless-rpc', repo]),
  ]),
);
put('pkt-line', 'report-status', Buffer.concat([pktLine('unpack ok\n'), pktLine('ok refs/heads/main\n'), Buffer.from('0000')]));
put('pkt-line', 'report-refused', Buffer.concat([pktLine('unpack ok\n'), pktLine('ng refs/heads/main non-fast-forward\n'), Buffer.from('0000')]));
put(
  'git-delta',
  'copy-insert',
  Buffer.concat([Buffer.from([0, 11]), Buffer.from('hello world'), Buffer.from([11, 17, 0x91, 0, 5, 6]), Buffer.from(' there'), Buffer.from([0x91, 5, 6])]),
);

// --- leaf trees of block files, written by git (a full shard and the last, short one) ---
const leafTree = (base: number, count: number): Buffer => {
  const lines = Array.from({ length: count }, (_, k) => {
    const oid = createHash('sha1')
      .update(`block ${base + k}`)
      .digest('hex');
    return `100644 blob ${oid}\t${String(base + k).padStart(9, '0')}.json\n`;
  });
  const oid = execFileSync('git', ['mktree', '--missing'], { cwd: repo, input: lines.join('') })
    .toString()
    .trim();
  return execFileSync('git', ['cat-file', 'tree', oid], { cwd: repo });
};
put('blob-oids', 'shard-0', leafTree(0, 1000));
put('blob-oids', 'shard-7000-last', leafTree(7000, 37));

// --- the chain's formats ---
const { blocks, checkpoint } = buildFeatureChain();
for (const b of blocks.slice(0, 3)) put('block-file', `block-${b.index}.json`, formatBlockFile(b));
for (const f of fs.readdirSync(join(root, 'test/vectors/jcs')).filter((f) => f.endsWith('.input.json')))
  put('jcs', f, fs.readFileSync(join(root, 'test/vectors/jcs', f)));
put('jcs', 'block.json', formatBlockFile(blocks[1]!));
const signer = testSigner('fuzz.example/log');
const tree = new MerkleTree(nodeBackend);
for (let i = 0; i < 5; i++) tree.append(new Uint8Array(32).fill(i));
const body = { origin: 'fuzz.example/log', size: tree.size, root: tree.root(), extensions: [] };
const note = signCheckpoint(nodeBackend, body, signer);
const witness = testSigner('witness.example/w');
const n = parseNote(note);
const cosigned = formatNote({ text: n.text, signatures: [...n.signatures, cosign(nodeBackend, n.text, 'witness.example/w', witness, 1764400000)] });
put('signed-note', 'checkpoint.note', note);
put('signed-note', 'cosigned.note', cosigned);
put(
  'signed-note',
  'go-vector.note',
  "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n",
);
put('tlog-checkpoint', 'checkpoint.note', note);
put('tlog-checkpoint', 'cosigned.note', cosigned);
put('tlog-checkpoint', 'body', formatCheckpoint(body));
put('tlog-checkpoint', 'checkpoint.json', formatCheckpointFile(checkpoint));
put(
  'tlog-policy',
  'policy',
  `# a log and two witnesses, either one enough\nlog ${verifierKey(nodeBackend, 'fuzz.example/log', SIG_ED25519, signer.publicKey)} https://log.example/\nwitness w1 ${verifierKey(nodeBackend, 'witness.example/w', SIG_COSIGNATURE_V1, witness.publicKey)} https://w1.example/\nwitness w2 ${verifierKey(nodeBackend, 'other.example/w', SIG_COSIGNATURE_V1, nodeSigner('w2', privateKeyFromSeed(new Uint8Array(32).fill(2))).publicKey)}\ngroup g1 any w1 w2\nquorum g1\n`,
);
const b64 = (h: Uint8Array) => Buffer.from(h).toString('base64');
put('tlog-proof', 'vouch-proof.json', JSON.stringify({ index: 3, size: 5, proof: tree.inclusionProof(3, 5).map(b64), checkpoint: note }));
put(
  'tlog-proof',
  'inclusion.json',
  JSON.stringify({ success: true, index: 3, size: 5, leaf_hash: b64(tree.leafHashAt(3)), proof: tree.inclusionProof(3, 5).map(b64) }),
);
put('tlog-proof', 'consistency.json', JSON.stringify({ success: true, from: 3, to: 5, proof: tree.consistencyProof(3, 5).map(b64) }));
put('add-checkpoint', 'from-0', formatAddCheckpoint(0, [], cosigned));
put('add-checkpoint', 'from-3', formatAddCheckpoint(3, tree.consistencyProof(3, 5), note));
put('tile-path', 'full', tilePath({ kind: 'hash', level: 0, index: 1234567, width: 256 }));
put('tile-path', 'partial', tilePath({ kind: 'entries', index: 5, width: 17 }));
put('tile-path', 'query', 'index=3&size=5');
put('query', 'selection', 'url=https%3A%2F%2Ffiles.example%2Fwidget-1.0.0.tgz&semver=1.0.0&at=2026-01-01&proof=1');
put(
  'query',
  'submit.json',
  JSON.stringify({
    endorsements: [{ artifact_url: 'https://files.example/w.tgz', artifact_hash: `sha256:${'0'.repeat(64)}`, name: 'acme/widget', semver: '1.0.0' }],
  }),
);

// --- registries ---
const wheel = (v: string) => `widget-${v}-py3-none-any.whl`;
const html = `<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.1">\n    <title>Links for widget</title>\n  </head>\n  <body>\n    <h1>Links for widget</h1>\n${['1.0.0', '1.1.0', '2.0.0rc1'].map((v) => `    <a href="https://files.example/packages/ab/cd/${wheel(v)}#sha256=${'1f'.repeat(32)}" data-requires-python="&gt;=3.8" data-dist-info-metadata="sha256=${'2e'.repeat(32)}">${wheel(v)}</a><br />`).join('\n')}\n    <a href="../../packages/widget-1.0.0.tar.gz#sha256=${'3d'.repeat(32)}" data-yanked="broken">widget-1.0.0.tar.gz</a><br />\n  </body>\n</html>\n`;
const json = JSON.stringify({
  meta: { 'api-version': '1.1', _last_serial: 1 },
  name: 'widget',
  versions: ['1.0.0', '1.1.0'],
  files: ['1.0.0', '1.1.0'].map((v) => ({
    filename: wheel(v),
    url: `https://files.example/packages/${wheel(v)}`,
    hashes: { sha256: '1f'.repeat(32) },
    'requires-python': '>=3.8',
    'core-metadata': { sha256: '2e'.repeat(32) },
    yanked: false,
    size: 1234,
    'upload-time': '2026-01-01T00:00:00.000000Z',
  })),
});
put('pypi-html', 'pep503.html', html);
put('pypi-json', 'pep691.json', json);
put('lock-pip-index', 'pep503.html', html);
put('lock-pip-index', 'pep691.json', json);
const cache = join(process.env.HOME ?? '/root', '.npm/_cacache/content-v2');
const packuments: string[] = [];
const walk = (d: string) => {
  for (const e of fs.readdirSync(d, { withFileTypes: true })) {
    if (e.isDirectory()) walk(join(d, e.name));
    else if (packuments.length < 2) {
      const t = fs.readFileSync(join(d, e.name));
      if (t.length < 8000 && t.includes('"dist-tags"')) packuments.push(t.toString('utf8'));
    }
  }
};
walk(cache);
packuments.forEach((p, i) => {
  const doc = JSON.parse(p.replace(/https:\/\/registry\.npmjs\.org\//g, 'https://registry.example/'));
  const old = doc.name as string;
  put('npm-packument', `registry-${i}.json`, JSON.stringify(doc).split(JSON.stringify(old).slice(1, -1)).join('widget'));
});
put('json-shape', 'pep691.json', json);
put('json-shape', 'escapes.json', JSON.stringify({ a: 'quote " backslash \\ end\\', b: [[[{ c: ['\u2028', '\\"'] }]]], d: [1, -2.5e3, true, false, null] }));
put('go-proxy', 'list', 'v1.0.0\nv1.1.0 2026-01-01T00:00:00Z\nv1.2.0-rc.1\nv0.0.0-20260101000000-abcdefabcdef\n');
put('go-proxy', 'info.json', '{"Version":"v1.1.0","Time":"2026-01-01T00:00:00Z","Origin":{"VCS":"git","Hash":"abc"}}');
put('go-proxy', 'path-zip', 'example.com/!m/v2/@v/v2.0.0.zip');
put('go-proxy', 'path-list', 'gopkg.in/yaml.v3/@v/list');
const zdir = join(work, 'zip');
fs.mkdirSync(join(zdir, 'example.com', 'm@v1.0.0', 'sub'), { recursive: true });
fs.writeFileSync(join(zdir, 'example.com', 'm@v1.0.0', 'go.mod'), 'module example.com/m\n\ngo 1.21\n');
fs.writeFileSync(join(zdir, 'example.com', 'm@v1.0.0', 'sub', 'a.go'), 'package sub\n');
execFileSync(
  'python3',
  [
    '-c',
    'import sys,zipfile,os\nz=zipfile.ZipFile(sys.argv[1],"w",zipfile.ZIP_DEFLATED)\nfor d,_,fs in os.walk("example.com"):\n  for f in sorted(fs): z.write(os.path.join(d,f))\nz.close()',
    join(work, 'm.zip'),
  ],
  { cwd: zdir },
);
put('go-zip', 'module.zip', fs.readFileSync(join(work, 'm.zip')));

// --- lockfiles and config ---
const lock = JSON.parse(fs.readFileSync(join(root, 'package-lock.json'), 'utf8'));
const keep = Object.entries(lock.packages as Record<string, unknown>).slice(0, 6);
put(
  'lock-npm',
  'package-lock.json',
  JSON.stringify({ ...lock, packages: Object.fromEntries(keep) }, null, 2).replace(/https:\/\/registry\.npmjs\.org\//g, 'https://registry.example/'),
);
put(
  'lock-npm',
  'v1-lock.json',
  JSON.stringify(
    {
      name: 'x',
      lockfileVersion: 1,
      requires: true,
      dependencies: {
        widget: {
          version: '1.0.0',
          resolved: 'https://registry.example/widget/-/widget-1.0.0.tgz',
          integrity: `sha512-${Buffer.alloc(64, 7).toString('base64')}`,
        },
      },
    },
    null,
    2,
  ),
);
put(
  'lock-pip',
  'requirements.txt',
  `# pip-compile --generate-hashes\nwidget==1.0.0 \\\n    --hash=sha256:${'1f'.repeat(32)} \\\n    --hash=sha256:${'3d'.repeat(32)}\n    # via app\nother[extra]==2.1 ; python_version >= "3.8" \\\n    --hash=sha384:${'ab'.repeat(48)}\n`,
);
put('lock-go', 'go.sum', fs.readFileSync('/usr/share/go-1.19/src/go.sum'));
// The configuration examples of the guides (the README's before issue 34), configuration.md first.
const guides = [
  'configuration.md',
  ...fs
    .readdirSync(join(root, 'docs', 'guide'))
    .filter((f) => f.endsWith('.md') && f !== 'configuration.md')
    .sort(),
];
const readme = guides.map((f) => fs.readFileSync(join(root, 'docs', 'guide', f), 'utf8')).join('\n');
[...readme.matchAll(/```yaml\n([\s\S]*?)```/g)].slice(0, 4).forEach((m, i) => put('config', `readme-${i}.yaml`, m[1]!));
fs.rmSync(work, { recursive: true, force: true });
console.log(`seeds written under ${CORPUS_DIR}`);
