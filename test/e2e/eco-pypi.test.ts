/**
 * The PyPI route kind (`kind: pypi`) with Debian's real pip 23
 * (`/usr/bin/python3 -m pip download`) against a real `vouch serve` process
 * with two pypi routes (an index route with `canonical:
 * https://pypi.example.org/`, a files route with `canonical:
 * https://files.example.org/`) in front of two loopback hosts laid out as
 * PyPI is: an index whose pages (HTML or JSON by Accept) link ABSOLUTELY to a
 * files host, with `#sha256=` fragments and core-metadata side files.
 *
 * Proves: endorsed wheels download with the endorsed bytes; a tampered file
 * (bytes and fragment replaced together) is refused and pip prints why; an
 * unendorsed version is not offered and an unpinned download gets the newest
 * endorsed one; a relative link is served through the index route; pip never
 * contacts the hosts itself; both page forms, as pip's own parser reads
 * them; with both hosts stopped pip still downloads (stale metadata, mirror
 * bytes). Unit tests of the rewrite cover relative links, hosts without a
 * route, sha256 / sha512 / blake3 fragments, hostile attribute values,
 * yanked, requires-python, PEP 700 versions and strict JSON parsing.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Parser } from 'htmlparser2';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint, buildEndorseBlock } from '../../chain/build.ts';
import { base64Encode, type Block } from '../../chain/index.ts';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { negotiate, renderHtml, renderJson, rewritePage, type RewriteIO } from '../../gateway/ecosystems/pypi.ts';
import { parseHtmlPage, parseJsonPage, PageError, versionOfFile } from '../../artifacts/pypi-simple.ts';
import { initChainRepo, testSigner } from '../helpers/chain-fixture.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { buildDists, distFilename, PypiHost, sha256Hex, SYSTEM_PYTHON, type DistSpec } from '../helpers/pypi-fixture.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-pypi-'));
let index: PypiHost;
let files: PypiHost;
let gw: GatewayProcess;
let pipConf = '';

const CANON_INDEX = 'https://pypi.example.org/';
const CANON_FILES = 'https://files.example.org/';

interface Dist extends DistSpec {
  bytes: Buffer;
  path: string;
  host: 'index' | 'files';
  alg: HashAlgorithm | null;
}
const dists: Record<string, Dist> = {};
let tamperedBytes: Buffer = Buffer.alloc(0);

function spec(key: string, d: Omit<Dist, 'bytes' | 'path'> & { dir: string }): void {
  dists[key] = { ...d, bytes: Buffer.alloc(0), path: `/packages/${d.dir}/${distFilename(d)}` };
}
// vouch-demo: 0.9.0 (linked relatively, on the index host), 1.0.0 (wheel + sdist), 1.1.0 (blake3), 2.0.0 (not endorsed)
spec('v090', { kind: 'wheel', name: 'vouch-demo', version: '0.9.0', host: 'index', alg: 'sha256', dir: 'rel' });
spec('v100', { kind: 'wheel', name: 'vouch-demo', version: '1.0.0', host: 'files', alg: 'sha256', dir: 'aa/bb' });
spec('v100s', { kind: 'sdist', name: 'vouch-demo', version: '1.0.0', host: 'files', alg: 'sha512', dir: 'aa/bc' });
spec('v110', { kind: 'wheel', name: 'vouch-demo', version: '1.1.0', host: 'files', alg: 'blake3', dir: 'cc/dd' });
spec('v200', { kind: 'wheel', name: 'vouch-demo', version: '2.0.0', host: 'files', alg: null, dir: 'ee/ff' });
spec('tamper', { kind: 'wheel', name: 'tamper-demo', version: '1.0.0', host: 'files', alg: 'sha256', dir: '11/22' });
spec('ghost', { kind: 'wheel', name: 'ghost-demo', version: '1.0.0', host: 'files', alg: null, dir: '33/44' });

const canonicalOf = (d: Dist) => (d.host === 'index' ? CANON_INDEX : CANON_FILES) + d.path.slice(1);

// ---------------------------------------------------------------------------
// Helpers

interface Run {
  status: number | null;
  out: string;
}

/** Debian's pip, with only the environment the README prescribes (no proxies, no user config). */
function pip(args: string[], timeoutMs = 60_000): Promise<Run> {
  const env = {
    PATH: '/usr/bin:/bin',
    HOME: join(work, 'home'),
    XDG_CONFIG_HOME: join(work, 'home', '.config'),
    LANG: 'C.UTF-8',
    PIP_CONFIG_FILE: pipConf,
    PIP_DISABLE_PIP_VERSION_CHECK: '1',
    PIP_NO_CACHE_DIR: '1',
    PIP_NO_INPUT: '1',
    PYTHONDONTWRITEBYTECODE: '1',
  };
  return new Promise((resolve) => {
    const child = spawn(SYSTEM_PYTHON, ['-m', 'pip', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, out });
    });
  });
}

/** `pip download --no-deps` into a fresh directory; the files it wrote. */
async function pipDownload(requirement: string, extra: string[] = []): Promise<Run & { files: Map<string, Buffer> }> {
  const dest = mkdtempSync(join(work, 'dl-'));
  const r = await pip(['download', '--no-deps', '--progress-bar', 'off', '-d', dest, ...extra, requirement]);
  if (process.env.VOUCH_TEST_SHOW_PIP) console.log(`--- pip download ${[...extra, requirement].join(' ')} (exit ${r.status})\n${r.out}`);
  const got = new Map(readdirSync(dest).map((f) => [f, readFileSync(join(dest, f))]));
  return { ...r, files: got };
}

/** pip's own reading of a page (pip._internal.index.collector.parse_links). */
function pipParse(
  body: Buffer,
  contentType: string,
  url: string,
): Promise<Array<{ url: string; filename: string; hash_name: string | null; hash: string | null; requires_python: string | null; yanked: string | null }>> {
  const script = `
import json, sys
from pip._internal.index.collector import IndexContent, parse_links
page = IndexContent(sys.stdin.buffer.read(), sys.argv[1], encoding='utf-8', url=sys.argv[2])
print(json.dumps([{'url': l.url, 'filename': l.filename, 'hash_name': l.hash_name, 'hash': l.hash,
                   'requires_python': l.requires_python, 'yanked': l.yanked_reason} for l in parse_links(page)]))
`;
  return new Promise((resolve, reject) => {
    const child = spawn(SYSTEM_PYTHON, ['-c', script, contentType, url], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d;
    });
    child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(err))));
    child.stdin.end(body);
  });
}

interface Answer {
  status: number;
  reason: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

function get(path: string, headers: Record<string, string> = {}): Promise<Answer> {
  const u = new URL(gw.url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path, headers, agent: false });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, reason: res.statusMessage ?? '', headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const PIP_ACCEPT = 'application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01';

/** The anchors of an HTML page (attributes decoded) and every tag name seen. */
function anchorsOf(html: string): { anchors: Array<Record<string, string> & { text: string }>; tags: Set<string> } {
  const anchors: Array<Record<string, string> & { text: string }> = [];
  const tags = new Set<string>();
  let open: (Record<string, string> & { text: string }) | null = null;
  const p = new Parser({
    onopentag(name, attribs) {
      tags.add(name);
      if (name === 'a') {
        open = { ...attribs, text: '' };
        anchors.push(open);
      }
    },
    ontext(t) {
      if (open !== null) open.text += t;
    },
    onclosetag(name) {
      if (name === 'a') open = null;
    },
  });
  p.write(html);
  p.end();
  return { anchors, tags };
}

function gatewayLog(msg: string): Array<Record<string, any>> {
  return gw
    .stderr()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .filter((l) => l.msg === msg);
}

// ---------------------------------------------------------------------------
// Fixture

test.before(async () => {
  const keys = Object.keys(dists);
  const built = buildDists(keys.map((k) => dists[k]!));
  keys.forEach((k, i) => {
    dists[k]!.bytes = built[i]!;
  });
  tamperedBytes = buildDists([{ kind: 'wheel', name: 'tamper-demo', version: '1.0.0', marker: 'TAMPERED' }])[0]!;

  index = await PypiHost.start();
  files = await PypiHost.start();
  const hostOf = (d: Dist) => (d.host === 'index' ? index : files);
  for (const d of Object.values(dists)) hostOf(d).file(d.path, d === dists.tamper ? tamperedBytes! : d.bytes);
  const link = (d: Dist, extra: object = {}) => ({
    href: d.host === 'index' ? `../..${d.path}` : files.url(d.path), // PyPI: absolute links to the files host
    sha256: sha256Hex(d === dists.tamper ? tamperedBytes! : d.bytes),
    filename: distFilename(d),
    version: d.version,
    ...extra,
  });
  index.project('vouch-demo', [
    link(dists.v090!),
    link(dists.v100!, { requiresPython: '>=3' }),
    link(dists.v100s!, { yanked: 'broken build' }),
    link(dists.v110!, { requiresPython: '>=3.7' }),
    link(dists.v200!),
    // A newer release on a host no route serves: must never be offered.
    {
      href: 'https://elsewhere.example/packages/vouch_demo-3.0.0-py3-none-any.whl',
      sha256: 'ab'.repeat(32),
      filename: 'vouch_demo-3.0.0-py3-none-any.whl',
      version: '3.0.0',
    },
  ]);
  index.project('tamper-demo', [link(dists.tamper!)]);
  index.project('ghost-demo', [link(dists.ghost!)]);
  index.page(
    '/simple/broken-demo/',
    'application/vnd.pypi.simple.v1+json',
    JSON.stringify({ meta: { 'api-version': '1.0' }, name: 'broken-demo', files: [{ filename: 'x.whl', url: 7, hashes: {} }] }),
  );

  // The chain: endorsements of canonical URLs, as an authority would sign them.
  const signer = testSigner('pypi-authority');
  const start = Date.now() - 3_600_000;
  const blocks: Block[] = [buildAuthorityBlock({ signer, backend: nodeBackend, now: start, uns: 'acme/pypi' })];
  const endorse = (ds: Dist[]) => {
    blocks.push(
      buildEndorseBlock({
        prev: blocks[blocks.length - 1]!,
        signer,
        backend: nodeBackend,
        now: start + blocks.length * 60_000,
        entries: ds.map((d) => ({
          url: canonicalOf(d),
          artifactHash: artifactHashOf(nodeBackend, d.alg!, d.bytes),
          name: `pypi/${d.name}`,
          semver: d.version,
          license: 'MIT',
        })),
      }),
    );
  };
  endorse([dists.v090!]);
  endorse([dists.v100!, dists.v100s!]);
  endorse([dists.v110!]);
  endorse([dists.tamper!]);
  const chainDir = join(work, 'chain');
  await initChainRepo(chainDir, blocks, buildCheckpoint({ head: blocks[blocks.length - 1]!, signer, now: start + blocks.length * 60_000 }), {
    timestamp: Math.floor(start / 1000),
  });

  gw = await startGatewayProcess(
    [
      '--config',
      writeConfig(work, {
        listen: { host: '127.0.0.1', port: 0 },
        chain: { dir: chainDir, public_key: base64Encode(signer.publicKey) },
        origin: { allow_private: true, timeout: 5 },
        mirror: { memory_bytes: 16 * 1024 * 1024 },
        proxy: {
          routes: [
            // metadata_ttl 0: every page is asked of the index, so the stale path is the one taken once it is down.
            { prefix: '/pypi/', kind: 'pypi', origin: `${index.origin}/`, canonical: CANON_INDEX, unendorsed: 'deny', metadata_ttl: 0 },
            { prefix: '/pypi-files/', kind: 'pypi', origin: `${files.origin}/`, canonical: CANON_FILES, unendorsed: 'deny' },
          ],
        },
      }),
    ],
    { env: { VOUCH_LOG_FORMAT: 'json' } },
  );
  // pip.conf exactly as docs/guide/pypi.md says.
  mkdirSync(join(work, 'home'), { recursive: true });
  pipConf = join(work, 'pip.conf');
  writeFileSync(pipConf, `[global]\nindex-url = ${gw.url}/pypi/simple/\n`);
});

test.after(async () => {
  await gw?.stop();
  await index?.close().catch(() => {});
  await files?.close().catch(() => {});
  rmSync(work, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------
// Unit level: negotiation, parsing, rewrite, rendering

test("negotiation: pip's Accept gets JSON; HTML forms, text/html and no Accept get HTML; nothing acceptable is null", () => {
  assert.equal(negotiate(PIP_ACCEPT), { form: 'json', contentType: 'application/vnd.pypi.simple.v1+json' });
  assert.equal(negotiate('application/vnd.pypi.simple.v1+html'), { form: 'html', contentType: 'application/vnd.pypi.simple.v1+html; charset=utf-8' });
  assert.equal(negotiate('text/html, application/vnd.pypi.simple.v1+json;q=0.5')?.form, 'html');
  assert.equal(negotiate('application/vnd.pypi.simple.latest+json')?.form, 'json');
  assert.equal(negotiate(undefined)?.form, 'html');
  assert.equal(negotiate('*/*')?.form, 'html');
  assert.is(negotiate('application/json'), null);
  assert.is(negotiate('application/vnd.pypi.simple.v1+json;q=0'), null);
});

/** Two routes as configured in the e2e fixture, over fake origins: idx.test (index) and files.test. */
function unitIO(unendorsed: 'deny' | 'pass', signed: Record<string, string>): RewriteIO {
  const routes = [
    { origin: 'https://idx.test/', canonical: CANON_INDEX, prefix: '/pypi/' },
    { origin: 'https://files.test/', canonical: CANON_FILES, prefix: '/pypi-files/' },
  ];
  return {
    unendorsed,
    endorsed: (u) => (signed[u] === undefined ? null : { entry: { artifact_hash: signed[u]! } }),
    artifactUrlOf: (u) => {
      for (const r of routes) {
        if (u.startsWith(r.canonical)) return u;
        if (u.startsWith(r.origin)) return r.canonical + u.slice(r.origin.length);
      }
      return null;
    },
    gatewayUrlOf: (u) => {
      const r = routes.find((x) => u.startsWith(x.canonical));
      return r === undefined ? null : `http://gw.test${r.prefix}${u.slice(r.canonical.length)}`;
    },
  };
}

const H256 = 'a'.repeat(64);
const H512 = 'b'.repeat(128);
const HB3 = 'c'.repeat(64);
const SIGNED = {
  [`${CANON_INDEX}packages/rel/x-0.9-py3-none-any.whl`]: `sha256:${H256}`,
  [`${CANON_FILES}packages/x-1.0.tar.gz`]: `sha512:${H512}`,
  [`${CANON_FILES}packages/x-1.1-py3-none-any.whl`]: `blake3:${HB3}`,
  [`${CANON_FILES}packages/%3Cb%3Ex-1.2.tar.gz`]: `sha256:${H256}`,
};
const HOSTILE_HTML = `<!DOCTYPE html><html><head><title>Links for x</title></head><body>
<a href="../../packages/rel/x-0.9-py3-none-any.whl#sha256=${'0'.repeat(64)}" data-requires-python="&gt;=3.8" data-dist-info-metadata="sha256=00" data-core-metadata="true" data-gpg-sig="true">x-0.9-py3-none-any.whl</a>
<a href="https://files.test/packages/x-1.0.tar.gz#md5=ffff" data-yanked="">x-1.0.tar.gz</a>
<A HREF='https://files.test/packages/x-1.1-py3-none-any.whl' data-requires-python='"><script>alert(1)</script>' data-yanked="&quot;&gt;&lt;script&gt;alert(2)&lt;/script&gt;"> x-1.1-py3-none-any.whl
</A>
<a href="https://files.test/packages/x-1.1-py3-none-any.whl">evil<script>alert(3)</script></a>
<a href="https://files.test/packages/%3Cb%3Ex-1.2.tar.gz">&lt;b&gt;x-1.2.tar.gz</a>
<a href="https://files.test/packages/x-1.0.tar.gz?x=1#sha256=${H256}">x-0.9.tar.gz</a>
<a href="https://elsewhere.example/packages/x-9.0.tar.gz#sha256=${H256}">x-9.0.tar.gz</a>
<a href="https://files.test/packages/x-2.0-py3-none-any.whl#sha256=${'d'.repeat(64)}">x-2.0-py3-none-any.whl</a>
<a name="no-href">nothing</a>
</body></html>`;

test('HTML rewrite: links resolved, mapped to the gateway, fragments from the signed hash, side files and unrouted hosts gone, values escaped', () => {
  const page = parseHtmlPage(HOSTILE_HTML, 'https://idx.test/simple/x/', 'x');
  const out = rewritePage(page, unitIO('deny', SIGNED));
  assert.equal(out.noRoute, ['https://elsewhere.example/packages/x-9.0.tar.gz']);
  assert.equal(out.unendorsed, [`${CANON_FILES}packages/x-2.0-py3-none-any.whl`]);
  // Named otherwise by the index than by the URL (pip goes by the URL): dropped, whatever the chain says of the URL.
  assert.equal(out.misnamed, [
    { url: 'https://files.test/packages/x-1.1-py3-none-any.whl', index: 'evilalert(3)', pip: 'x-1.1-py3-none-any.whl' },
    { url: 'https://files.test/packages/x-1.0.tar.gz?x=1', index: 'x-0.9.tar.gz', pip: 'x-1.0.tar.gz' },
  ]);
  assert.equal(out.disagreements, [{ url: `${CANON_INDEX}packages/rel/x-0.9-py3-none-any.whl`, index: `sha256:${'0'.repeat(64)}`, signed: `sha256:${H256}` }]);
  const html = renderHtml(out);
  assert.not.match(html, /<script|dist-info-metadata|core-metadata|gpg-sig|elsewhere|idx\.test|files\.test|x-2\.0/i);
  const { anchors, tags } = anchorsOf(html);
  assert.equal([...tags].sort(), ['a', 'body', 'br', 'h1', 'head', 'html', 'meta', 'title']);
  assert.equal(anchors, [
    // relative link on the index host -> the index route; the index's (wrong) fragment replaced by the signed sha256
    { href: `http://gw.test/pypi/packages/rel/x-0.9-py3-none-any.whl#sha256=${H256}`, 'data-requires-python': '>=3.8', text: 'x-0.9-py3-none-any.whl' },
    // signed sha512 -> #sha512=; the index's md5 dropped; yanked kept
    { href: `http://gw.test/pypi-files/packages/x-1.0.tar.gz#sha512=${H512}`, 'data-yanked': '', text: 'x-1.0.tar.gz' },
    // signed blake3 -> no fragment (pip cannot check it; the gateway does); hostile values survive as text only
    {
      href: 'http://gw.test/pypi-files/packages/x-1.1-py3-none-any.whl',
      'data-requires-python': '"><script>alert(1)</script>',
      'data-yanked': '"><script>alert(2)</script>',
      text: 'x-1.1-py3-none-any.whl',
    },
    { href: `http://gw.test/pypi-files/packages/%3Cb%3Ex-1.2.tar.gz#sha256=${H256}`, text: '<b>x-1.2.tar.gz' },
  ]);

  // A pass route keeps the unendorsed link (to the gateway, which passes it through) with the index's own fragment.
  const passed = rewritePage(page, unitIO('pass', SIGNED));
  assert.equal(passed.files.map((f) => [f.url, f.hashes, f.endorsed]).slice(-1), [
    [`http://gw.test/pypi-files/packages/x-2.0-py3-none-any.whl`, { sha256: 'd'.repeat(64) }, false],
  ]);
  assert.ok(passed.noRoute.length === 1 && passed.unendorsed.length === 0);

  // <base href> is honoured as pip honours it.
  const based = parseHtmlPage('<base href="https://files.test/packages/"><a href="x-1.0.tar.gz">x-1.0.tar.gz</a>', 'https://idx.test/simple/x/', 'x');
  assert.equal(
    rewritePage(based, unitIO('deny', SIGNED)).files.map((f) => f.url),
    ['http://gw.test/pypi-files/packages/x-1.0.tar.gz'],
  );
});

test('JSON rewrite: url and hashes from the chain, side files removed, versions limited to kept files, api-version kept', () => {
  const origin = {
    meta: { '_last-serial': 9, 'api-version': '1.1' },
    name: 'x',
    versions: ['0.9', '1.0', '1.1', '1.2', '2.0', '9.0'],
    files: [
      {
        filename: 'x-0.9-py3-none-any.whl',
        url: '../../packages/rel/x-0.9-py3-none-any.whl',
        hashes: { sha256: '0'.repeat(64) },
        'requires-python': '>=3.8',
        'core-metadata': { sha256: '1' },
        'dist-info-metadata': true,
        'data-dist-info-metadata': true,
        'gpg-sig': false,
        size: 10,
        'upload-time': '2026-01-01T00:00:00Z',
        provenance: 'x',
      },
      { filename: 'x-1.0.tar.gz', url: 'https://files.test/packages/x-1.0.tar.gz', hashes: { md5: 'ff' }, 'requires-python': null, yanked: 'broken', size: 11 },
      { filename: 'x-1.1-py3-none-any.whl', url: 'https://files.test/packages/x-1.1-py3-none-any.whl', hashes: {}, yanked: false },
      { filename: 'x-2.0-py3-none-any.whl', url: 'https://files.test/packages/x-2.0-py3-none-any.whl', hashes: {} },
      { filename: 'x-9.0.tar.gz', url: 'https://elsewhere.example/x-9.0.tar.gz', hashes: {} },
      // The index names 0.9's file, the URL is 1.0's (endorsed): pip would install 1.0 as the file named x-1.0.tar.gz.
      { filename: 'x-0.9.tar.gz', url: 'https://files.test/packages/x-1.0.tar.gz', hashes: {} },
    ],
  };
  const page = parseJsonPage(JSON.stringify(origin), 'https://idx.test/simple/x/');
  const out = rewritePage(page, unitIO('deny', SIGNED));
  assert.equal(out.misnamed, [{ url: 'https://files.test/packages/x-1.0.tar.gz', index: 'x-0.9.tar.gz', pip: 'x-1.0.tar.gz' }]);
  assert.equal(JSON.parse(renderJson(out)), {
    meta: { 'api-version': '1.1' },
    name: 'x',
    files: [
      {
        filename: 'x-0.9-py3-none-any.whl',
        url: 'http://gw.test/pypi/packages/rel/x-0.9-py3-none-any.whl',
        hashes: { sha256: H256 },
        'requires-python': '>=3.8',
        size: 10,
        'upload-time': '2026-01-01T00:00:00Z',
      },
      { filename: 'x-1.0.tar.gz', url: 'http://gw.test/pypi-files/packages/x-1.0.tar.gz', hashes: { sha512: H512 }, yanked: 'broken', size: 11 },
      { filename: 'x-1.1-py3-none-any.whl', url: 'http://gw.test/pypi-files/packages/x-1.1-py3-none-any.whl', hashes: {} },
    ],
    versions: ['0.9', '1.0', '1.1'],
  });
  // The same page as HTML (a JSON origin answering an HTML client), and an HTML origin as JSON (api-version 1.0, no versions).
  assert.is(anchorsOf(renderHtml(out)).anchors.length, 3);
  const fromHtml = JSON.parse(renderJson(rewritePage(parseHtmlPage(HOSTILE_HTML, 'https://idx.test/simple/x/', 'x'), unitIO('deny', SIGNED))));
  assert.equal(fromHtml.meta, { 'api-version': '1.0' });
  assert.is(fromHtml.versions, undefined);
  assert.equal(fromHtml.files[2], {
    filename: 'x-1.1-py3-none-any.whl',
    url: 'http://gw.test/pypi-files/packages/x-1.1-py3-none-any.whl',
    hashes: {},
    'requires-python': '"><script>alert(1)</script>',
    yanked: '"><script>alert(2)</script>',
  });
  assert.is(versionOfFile('Foo.Bar-1.0rc1.tar.gz', 'foo-bar'), '1.0rc1');
  assert.is(versionOfFile('foo_bar-2.0-cp311-cp311-manylinux_2_17_x86_64.whl', 'foo-bar'), '2.0');
});

test('JSON pages of a bad shape are refused with the reason', () => {
  const base = { meta: { 'api-version': '1.0' }, name: 'x', files: [] as unknown[] };
  const file = { filename: 'x-1.0.tar.gz', url: 'x-1.0.tar.gz', hashes: {} };
  for (const [doc, reason] of [
    ['{', /does not parse/],
    ['[]', /not an object/],
    [{ ...base, meta: {} }, /api-version is missing/],
    [{ ...base, meta: { 'api-version': '2.0' } }, /unsupported api-version "2\.0"/],
    [{ ...base, name: 5 }, /name is missing/],
    [{ ...base, files: {} }, /files is not an array/],
    [{ ...base, files: [5] }, /files\[0\] is not an object/],
    [{ ...base, files: [{ ...file, url: 7 }] }, /files\[0\]\.url is missing/],
    [{ ...base, files: [{ ...file, hashes: [] }] }, /files\[0\]\.hashes is not an object/],
    [{ ...base, files: [{ ...file, hashes: { sha256: 1 } }] }, /hashes\.sha256 is not a string/],
    [{ ...base, files: [{ ...file, yanked: 1 }] }, /yanked is not a boolean or a string/],
    [{ ...base, files: [{ ...file, 'requires-python': 3 }] }, /requires-python is not a string/],
    [{ ...base, files: [{ ...file, size: -1 }] }, /size is not a size/],
    [{ ...base, versions: [1] }, /versions is not an array of strings/],
  ] as const) {
    try {
      parseJsonPage(typeof doc === 'string' ? doc : JSON.stringify(doc), 'https://idx.test/simple/x/');
      assert.unreachable(`accepted ${JSON.stringify(doc)}`);
    } catch (e) {
      assert.instance(e, PageError, String(e));
      assert.match((e as Error).message, reason);
    }
  }
});

// ---------------------------------------------------------------------------
// Real pip through a real gateway

test('pip downloads endorsed wheels through the gateway, with the endorsed bytes', async () => {
  const r = await pipDownload('vouch-demo==1.0.0');
  assert.is(r.status, 0, r.out);
  assert.equal([...r.files.keys()], [distFilename(dists.v100!)], r.out);
  assert.ok(r.files.get(distFilename(dists.v100!))!.equals(dists.v100!.bytes), 'other bytes than endorsed');
  assert.match(r.out, new RegExp(`${gw.url}/pypi-files/packages/aa/bb/vouch_demo-1\\.0\\.0-py3-none-any\\.whl`));
});

test('an unendorsed version is not offered: ==2.0.0 finds no matching distribution; unpinned gets the newest endorsed (1.1.0, blake3)', async () => {
  const pinned = await pipDownload('vouch-demo==2.0.0');
  assert.is(pinned.status, 1, pinned.out);
  assert.match(pinned.out, /from versions: 0\.9\.0, 1\.0\.0, 1\.1\.0\)/);
  assert.match(pinned.out, /ERROR: No matching distribution found for vouch-demo==2\.0\.0/);
  assert.is(pinned.files.size, 0);
  const newest = await pipDownload('vouch-demo');
  assert.is(newest.status, 0, newest.out);
  assert.equal([...newest.files.keys()], [distFilename(dists.v110!)], newest.out);
  assert.ok(newest.files.get(distFilename(dists.v110!))!.equals(dists.v110!.bytes));
  assert.is(files.log.filter((l) => l.path === dists.v200!.path).length, 0, 'the unendorsed file was fetched');
});

test('a file linked relatively from the index is served through the index route', async () => {
  const r = await pipDownload('vouch-demo==0.9.0');
  assert.is(r.status, 0, r.out);
  assert.ok(r.files.get(distFilename(dists.v090!))?.equals(dists.v090!.bytes), r.out);
  assert.match(r.out, new RegExp(`${gw.url}/pypi/packages/rel/vouch_demo-0\\.9\\.0-py3-none-any\\.whl`));
});

test('tampered (bytes and fragment replaced together): the gateway refuses with 409 and pip prints the refusal and the reason', async () => {
  const r = await pipDownload('tamper-demo==1.0.0');
  assert.is(r.status, 1, r.out);
  assert.is(r.files.size, 0, 'a tampered file was written');
  assert.ok(
    /ERROR: HTTP error 409 while getting http:\/\/127\.0\.0\.1:\d+\/pypi-files\/packages\/11\/22\/tamper_demo-1\.0\.0-py3-none-any\.whl/.test(r.out),
    r.out,
  );
  const signed = artifactHashOf(nodeBackend, 'sha256', dists.tamper!.bytes);
  assert.ok(
    r.out.includes(`409 Client Error: vouch: hash mismatch for ${CANON_FILES}packages/11/22/tamper_demo-1.0.0-py3-none-any.whl, refused (signed ${signed})`),
    r.out,
  );
  // The page carried the signed hash, not the index's (pip would have refused the tampered bytes itself too).
  const page = JSON.parse((await get('/pypi/simple/tamper-demo/', { accept: PIP_ACCEPT })).body.toString());
  assert.equal(page.files[0].hashes, { sha256: signed.slice('sha256:'.length) });
  const warned = gatewayLog('pypi: the index states another hash than the signed one');
  assert.ok(warned.some((l) => l.signed === signed && l.index === `sha256:${sha256Hex(tamperedBytes)}`));
});

test("the gateway's pages as pip's own parser reads them: JSON and HTML, gateway links, signed fragments, no side files, versions limited", async () => {
  const pageUrl = `${gw.url}/pypi/simple/vouch-demo/`;
  const f = (k: string) => `${gw.url}${dists[k]!.host === 'index' ? '/pypi' : '/pypi-files'}${dists[k]!.path}`;
  const expected = [
    { url: f('v090'), filename: distFilename(dists.v090!), hash_name: 'sha256', hash: sha256Hex(dists.v090!.bytes), requires_python: null, yanked: null },
    { url: f('v100'), filename: distFilename(dists.v100!), hash_name: 'sha256', hash: sha256Hex(dists.v100!.bytes), requires_python: '>=3', yanked: null },
    {
      url: f('v100s'),
      filename: distFilename(dists.v100s!),
      hash_name: 'sha512',
      hash: artifactHashOf(nodeBackend, 'sha512', dists.v100s!.bytes).slice(7),
      requires_python: null,
      yanked: 'broken build',
    },
    { url: f('v110'), filename: distFilename(dists.v110!), hash_name: null, hash: null, requires_python: '>=3.7', yanked: null },
  ];
  const json = await get('/pypi/simple/vouch-demo/', { accept: PIP_ACCEPT });
  assert.is(json.status, 200);
  assert.is(json.headers['content-type'], 'application/vnd.pypi.simple.v1+json');
  assert.equal(await pipParse(json.body, String(json.headers['content-type']), pageUrl), expected);
  const doc = JSON.parse(json.body.toString());
  assert.equal(doc.versions, ['0.9.0', '1.0.0', '1.1.0']);
  assert.equal(doc.meta, { 'api-version': '1.1' });
  assert.not.match(json.body.toString(), /core-metadata|dist-info-metadata|elsewhere|127\.0\.0\.1:(?!\d+\/pypi)/);

  for (const accept of ['text/html', 'application/vnd.pypi.simple.v1+html']) {
    const html = await get('/pypi/simple/vouch-demo/', { accept });
    assert.is(html.status, 200);
    assert.ok(String(html.headers['content-type']).startsWith(accept), String(html.headers['content-type']));
    assert.is(html.headers['vary'], 'Accept');
    // pip keeps an HTML link's fragment in its URL.
    const withFragments = expected.map((e) => ({ ...e, url: e.hash === null ? e.url : `${e.url}#${e.hash_name}=${e.hash}` }));
    assert.equal(await pipParse(html.body, String(html.headers['content-type']), pageUrl), withFragments);
    assert.not.match(html.body.toString(), /data-dist-info-metadata|data-core-metadata|elsewhere|<!--SERIAL/);
  }
  // The index was asked for each form with the normalized Accept.
  const accepts = new Set(index.log.filter((l) => l.path === '/simple/vouch-demo/').map((l) => l.accept));
  assert.ok(accepts.has('application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01'), [...accepts].join(' | '));
  assert.ok(accepts.has('application/vnd.pypi.simple.v1+html, text/html;q=0.01'), [...accepts].join(' | '));
  const removed = gatewayLog('pypi: removed links that no route serves');
  assert.ok(removed.some((l) => l.urls.includes('https://elsewhere.example/packages/vouch_demo-3.0.0-py3-none-any.whl')));
});

test("redirects go to the gateway; unknown, unendorsed and broken projects and the index root fail with the reason in pip's form", async () => {
  const moved = await get('/pypi/simple/Vouch_Demo/', { accept: PIP_ACCEPT });
  assert.is(moved.status, 301);
  assert.is(moved.headers['location'], `${gw.url}/pypi/simple/vouch-demo/`);
  const expectFailure = (r: Answer, status: number, reason: RegExp) => {
    assert.is(r.status, status);
    assert.is(r.headers['content-type'], 'text/plain; charset=utf-8');
    assert.match(r.body.toString(), reason);
    assert.ok(r.body.toString().endsWith('\n'));
    assert.match(r.reason, reason); // the status line, which pip prints
  };
  expectFailure(await get('/pypi/simple/no-such-project/', { accept: PIP_ACCEPT }), 404, /vouch: the index has no project no-such-project \(it answered 404\)/);
  expectFailure(
    await get('/pypi/simple/ghost-demo/', { accept: PIP_ACCEPT }),
    404,
    /vouch: no file of ghost-demo is served through vouch \(1 on the index: 1 not endorsed by the authority\)/,
  );
  expectFailure(
    await get('/pypi/simple/broken-demo/', { accept: PIP_ACCEPT }),
    502,
    /vouch: cannot read the index page of broken-demo: files\[0\]\.url is missing/,
  );
  expectFailure(await get('/pypi/simple/', { accept: PIP_ACCEPT }), 404, /not served through vouch/);
  expectFailure(await get('/pypi/simple/vouch-demo/', { accept: 'application/json' }), 406, /Accept header rules out/);
  expectFailure(
    await get(`/pypi-files${dists.v200!.path}`),
    404,
    /vouch: https:\/\/files\.example\.org\/packages\/ee\/ff\/vouch_demo-2\.0\.0-py3-none-any\.whl is not endorsed by the authority, refused/,
  );
  // What pip shows for a project without an endorsed file (the reason only with -vv: pip logs page failures at debug level).
  const r = await pipDownload('ghost-demo');
  assert.is(r.status, 1);
  assert.match(r.out, /ERROR: No matching distribution found for ghost-demo/);
  const verbose = await pipDownload('ghost-demo', ['-vv']);
  assert.is(verbose.status, 1);
  assert.match(
    verbose.out,
    /Could not fetch URL http:\/\/127\.0\.0\.1:\d+\/pypi\/simple\/ghost-demo\/: 404 Client Error: vouch: no file of ghost-demo is served through vouch \(1 on the index: 1 not endorsed by the authority\)/,
  );
});

test('pip itself never contacted the index or the files host: every request they saw came from the gateway', () => {
  const seen = [...index.log, ...files.log];
  assert.ok(index.log.length > 0 && files.log.length > 0);
  const agents = new Set(seen.map((l) => l.userAgent));
  for (const ua of agents) assert.match(ua, /^vouch/, `a request with user agent ${ua}`);
  assert.not.ok(seen.some((l) => /pip|python|requests/i.test(l.userAgent)));
});

test('with the index and the files host stopped, a fresh pip download still works (stale metadata, mirror bytes)', async () => {
  await index.close();
  await files.close();
  const r = await pipDownload('vouch-demo==1.0.0');
  assert.is(r.status, 0, r.out);
  assert.ok(r.files.get(distFilename(dists.v100!))?.equals(dists.v100!.bytes), r.out);
  const newest = await pipDownload('vouch-demo');
  assert.is(newest.status, 0, newest.out);
  assert.ok(newest.files.get(distFilename(dists.v110!))?.equals(dists.v110!.bytes), newest.out);
});

test.run();
