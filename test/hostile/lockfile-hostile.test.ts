/**
 * `vouch endorse --lockfile` against hostile indexes and lockfiles (issue
 * 31): a PyPI index naming a file otherwise than pip reads its link, a
 * requirements file of 16 MiB of `\` continuations (joined in linear time,
 * bounded), a package-lock integrity of 200,000 tokens, and the other
 * spreads over unbounded input. Real `vouch` processes, a real index on
 * 127.0.0.1, and python3's own pip for the file-name rule.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { git, type Run, initAuthorityChain, vouchEndorse } from '../helpers/processes.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { writerIn } from '../helpers/lockfiles.ts';
import { readRequirements, resolveRequirements, logicalLines, REQUIREMENTS_MAX_LINE_CHARS } from '../../tools/lockfiles/pip.ts';
import { pipFileNames, pipRequestUrl } from '../../artifacts/pip-url.ts';
import { parseSri, strongestSri, SRI_MAX_TOKENS } from '../../tools/lockfiles/digests.ts';
import { Http, OriginMap } from '../../tools/lockfiles/http.ts';
import { VouchError } from '../../chain/errors.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-lockfile-hostile-'));
const key = join(work, 'authority.pem');
const chain = join(work, 'chain');
let index: OriginServer;

const hex = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
const write = writerIn(work);
const head = () => git(['-C', chain, 'rev-parse', 'HEAD']).stdout.trim();
const endorse = (args: string[], timeoutMs?: number) => vouchEndorse(chain, key, args, {}, timeoutMs);
const oneLine = (r: Run) => {
  assert.is(r.stderr.trim().split('\n').length, 1, `expected one stderr line, got: ${r.stderr}`);
  assert.not.match(r.stderr, /internal error|\n\s+at /, r.stderr);
};
const opts = { license: 'MIT', licenseUnchecked: false, comment: undefined };

test.before(async () => {
  index = await OriginServer.start();
  await initAuthorityChain({ key, chain: chain, signer: 'lock-authority' });
});

test.after(async () => {
  await index.close();
  rmSync(work, { recursive: true, force: true });
});

// ------------------------------------------------------------ pip's file name

test('pip: a file the index names widget-1.0.0.tar.gz but links at widget-2.0.0.tar.gz is refused naming the package (HTML and JSON); nothing appended', async () => {
  const v1 = Buffer.from('widget 1.0.0 sdist');
  index.route('/files/widget-2.0.0.tar.gz', { body: v1 });
  index.route('/files/widget-1.0.0.tar.gz', { body: v1 });
  index.route('/html/widget/', { contentType: 'text/html', body: `<a href="/files/widget-2.0.0.tar.gz#sha256=${hex(v1)}">widget-1.0.0.tar.gz</a>` });
  index.route('/json/widget/', {
    contentType: 'application/vnd.pypi.simple.v1+json',
    body: JSON.stringify({
      meta: { 'api-version': '1.1' },
      name: 'widget',
      files: [{ filename: 'widget-1.0.0.tar.gz', url: '/files/widget-2.0.0.tar.gz', hashes: { sha256: hex(v1) } }],
    }),
  });
  // The other way round: the link is 1.0.0's, the index calls it 2.0.0 (a pin of 2.0.0 must not take it).
  index.route('/swap/widget/', { contentType: 'text/html', body: `<a href="/files/widget-1.0.0.tar.gz">widget-2.0.0.tar.gz</a>` });
  // %2F: the server sees one segment, pip reads the name after it.
  index.route('/slash/widget/', {
    contentType: 'text/html',
    body: `<a href="/files/widget-2.0.0.tar.gz%2Fwidget-1.0.0.tar.gz">widget-2.0.0.tar.gz%2Fwidget-1.0.0.tar.gz</a>`,
  });
  const before = head();
  for (const [page, pin, link] of [
    ['html', '1.0.0', '/files/widget-2.0.0.tar.gz'],
    ['json', '1.0.0', '/files/widget-2.0.0.tar.gz'],
    ['swap', '2.0.0', '/files/widget-1.0.0.tar.gz'],
    ['slash', '1.0.0', '/files/widget-2.0.0.tar.gz%2Fwidget-1.0.0.tar.gz'],
  ] as const) {
    const req = write(`${page}/requirements.txt`, `widget==${pin} --hash=sha256:${hex(v1)}\n`);
    const r = await endorse(['--lockfile', req, '--index-url', index.url(`/${page}/`), '--license', 'MIT']);
    assert.is(r.status, 2, `${page}: ${r.stderr}${r.stdout}`);
    oneLine(r);
    assert.match(r.stderr, `vouch endorse: widget==${pin}: refused: `, page);
    assert.ok(r.stderr.includes(index.url(link)), `${page}: the link is named: ${r.stderr}`);
    assert.match(r.stderr, /which pip reads as "widget-/, page);
  }
  assert.is(head(), before, 'something was appended');
  assert.is(index.requests('/files/widget-2.0.0.tar.gz'), 0, 'the confusable file was fetched');
});

test('pip: a disagreeing link of another version is ignored, the honest file of the pinned version endorsed; a link pip versions read differently is refused', async () => {
  const good = Buffer.from('gadget 1.0.0 wheel');
  index.route('/files/gadget-1.0.0-py3-none-any.whl', { body: good });
  index.route('/mixed/gadget/', {
    contentType: 'text/html',
    body: `<a href="/files/gadget-0.8.tar.gz">gadget-0.9.tar.gz</a>
      <a href="/files/gadget-1.0.0-py3-none-any.whl#sha256=${hex(good)}">gadget-1.0.0-py3-none-any.whl</a>`,
  });
  const req = write('mixed/requirements.txt', `gadget==1.0.0 --hash=sha256:${hex(good)}\n`);
  const r = await endorse(['--lockfile', req, '--index-url', index.url('/mixed/'), '--license', 'MIT', '--json']);
  assert.is(r.status, 0, r.stderr + r.stdout);
  assert.is(JSON.parse(r.stdout).entries, 1);
  // `%2541`: pip before 26.2 decodes it twice ("A"), later pip once ("%41"): which file it is depends on the pip.
  index.route('/twice/gadget/', { contentType: 'text/html', body: `<a href="/files/gadget-1.0.0%2541.tar.gz">gadget-1.0.0%41.tar.gz</a>` });
  const http = new Http(OriginMap.parse([]));
  try {
    const reqs = readRequirements(`gadget===1.0.0A --hash=sha256:${hex(good)}\n`, opts, 'r.txt').requirements;
    const e = await resolveRequirements(reqs, http, index.url('/twice/'), opts, 2).then(
      () => null,
      (x) => x,
    );
    assert.instance(e, VouchError);
    assert.is(e.code, 'bad_request');
    assert.match(
      e.message,
      /^gadget===1\.0\.0A: refused: pip reads the link .* as "gadget-1\.0\.0%41\.tar\.gz" \(pip 26\.2 and later\) or "gadget-1\.0\.0A\.tar\.gz" \(earlier\)/,
    );
  } finally {
    await http.close();
  }
});

test("pip-url: the name is the one python3's pip reads (Link.filename), for links of every shape", () => {
  const links = [
    'https://f.example/p/widget-2.0.0.tar.gz',
    'https://f.example/p/widget-1.0.0.tar.gz?name=widget-2.0.0.tar.gz#sha256=00',
    'https://f.example/p/widget-1.0.0.tar.gz/',
    'https://f.example/p/a%2Fwidget-1.0.0.tar.gz',
    'https://f.example/p/a%2fb@c%2F/d-1.0.tar.gz',
    'https://f.example/p/torch-2.0.0+cpu-cp311-cp311-linux_x86_64.whl',
    'https://f.example/',
    'https://f.example:8443/',
    'https://f.example/p/%C3%A9-1.0.tar.gz',
    'https://f.example/p/%FF%FE-1.0.tar.gz',
    'https://f.example/p/w x-1.0.tar.gz',
    'https://f.example/p/w%2520x-1.0.tar.gz',
    'https://f.example/p/%zz-1.0.tar.gz',
    'https://f.example/p/caf\u00e9-1.0.tar.gz',
    'https://f.example/p/x;y=z-1.0.tar.gz',
    'https://f.example/a/b/../c-1.0.tar.gz',
  ].map(pipRequestUrl);
  const py = spawnSync(
    'python3',
    [
      '-c',
      ['import sys, json', 'from pip._internal.models.link import Link', 'print(json.dumps([Link(u).filename for u in json.load(sys.stdin)]))'].join('\n'),
    ],
    { input: JSON.stringify(links), encoding: 'utf8', timeout: 60_000 },
  );
  assert.is(py.status, 0, py.stderr);
  const pip: string[] = JSON.parse(py.stdout);
  const version = spawnSync('python3', ['-c', 'import pip; print(pip.__version__)'], { encoding: 'utf8' }).stdout.trim();
  // The installed pip is older than 26.2 (two decodings): its reading is `legacy`; on 26.2 and later, `current`.
  const newer = Number(version.split('.')[0]) > 26 || (Number(version.split('.')[0]) === 26 && Number(version.split('.')[1]) >= 2);
  links.forEach((u, i) => assert.is(pipFileNames(u)[newer ? 'current' : 'legacy'], pip[i], `${u} (pip ${version})`));
});

// ------------------------------------------------------------ the join and its bounds

test('requirements: 16 MiB of \\ continuations end in bounded time with one line naming the bound (the index never asked)', async () => {
  const line = `    --hash=sha256:${'ab'.repeat(32)} \\\n`;
  const body = 'big==1.0 \\\n' + line.repeat(Math.ceil((16 * 1024 * 1024) / line.length));
  const req = write('big/requirements.txt', body);
  const r = await endorse(['--lockfile', req, '--index-url', index.url('/never/'), '--license', 'MIT'], 120_000);
  assert.is(r.signal, null, 'killed after 120 s: the join did not finish');
  assert.is(r.status, 2, r.stderr);
  oneLine(r);
  assert.match(r.stderr, `requirements.txt line 1: the line, joined with its \\ continuations, is longer than ${REQUIREMENTS_MAX_LINE_CHARS} characters`);
  assert.is(index.requests('/never/big/'), 0);
  // Many short lines: the line count bound, before any joining.
  const lines = write('lines/requirements.txt', 'x \\\n'.repeat(1_000_001));
  const l = await endorse(['--lockfile', lines, '--index-url', index.url('/never/'), '--license', 'MIT'], 120_000);
  assert.is(l.status, 2, l.stderr);
  assert.match(l.stderr, 'requirements.txt has more than 1000000 lines');
});

/** CPU time (ms) of `fn`, median of `n` runs. */
function cpuMedian(fn: () => void, n: number): number {
  const t: number[] = [];
  for (let i = 0; i < n; i++) {
    const s = process.cpuUsage();
    fn();
    const d = process.cpuUsage(s);
    t.push((d.user + d.system) / 1000);
  }
  return t.sort((a, b) => a - b)[n >> 1]!;
}

test('requirements: joining is linear: one requirement of 12,000 continued hash lines costs about what 16 of 750 do', () => {
  const hashLine = (i: number) => `    --hash=sha256:${i.toString(16).padStart(64, '0')} \\\n`;
  const requirement = (name: string, hashes: number, from: number) => {
    let s = `${name}==1.0 \\\n`;
    for (let i = 0; i < hashes; i++) s += hashLine(from + i);
    return s + '    # end\n';
  };
  const one = requirement('one', 12_000, 0);
  let many = '';
  for (let k = 0; k < 16; k++) many += requirement(`many${k}`, 750, k * 750);
  assert.ok(one.length > 1_000_000 && one.length < REQUIREMENTS_MAX_LINE_CHARS, String(one.length));
  assert.is(readRequirements(one, opts, 'r.txt').requirements[0]!.hashes.get('sha256')!.size, 12_000);
  assert.is(readRequirements(many, opts, 'r.txt').requirements.length, 16);
  // Work done is what decides: the joined text is built once (one logical line of the whole length).
  assert.is(logicalLines(one, 'r.txt').length, 1);
  // Interleaved medians of CPU time; a quadratic join makes `one` ~16x `many` (the old code: > 10x here).
  const a: number[] = [];
  const b: number[] = [];
  for (let round = 0; round < 3; round++) {
    a.push(cpuMedian(() => logicalLines(one, 'r.txt'), 3));
    b.push(cpuMedian(() => logicalLines(many, 'r.txt'), 3));
  }
  const [ta, tb] = [a.sort((x, y) => x - y)[1]!, b.sort((x, y) => x - y)[1]!];
  console.log(`  (CPU medians: one line ${ta.toFixed(1)} ms, 16 lines ${tb.toFixed(1)} ms)`);
  assert.ok(ta < 4 * Math.max(tb, 2), `one long line ${ta.toFixed(1)} ms of CPU, 16 shorter ${tb.toFixed(1)} ms: not linear`);
});

test('pip: more than 2,000 files of the pinned version at the index is refused naming the requirement', async () => {
  let page = '';
  for (let i = 0; i <= 2000; i++) page += `<a href="/many/f/many-1.0.tar.gz?copy=${i}">many-1.0.tar.gz</a>\n`;
  index.route('/many/many/', { contentType: 'text/html', body: page });
  const http = new Http(OriginMap.parse([]));
  try {
    const reqs = readRequirements(`many==1.0 --hash=sha256:${'cd'.repeat(32)}\n`, opts, 'r.txt').requirements;
    const e = await resolveRequirements(reqs, http, index.url('/many/'), opts, 2).then(
      () => null,
      (x) => x,
    );
    assert.instance(e, VouchError);
    assert.is(e.code, 'too_large');
    assert.match(e.message, /^many==1\.0: the index page .* lists 2001 files of version 1\.0, more than 2000$/);
    assert.is(index.requests('/many/f/many-1.0.tar.gz'), 0, 'a file was fetched');
  } finally {
    await http.close();
  }
});

// ------------------------------------------------------------ npm integrity, spreads

test('npm: an integrity of 200,000 tokens is refused naming the package, one line, not a stack overflow', async () => {
  const tgz = Buffer.from('huge 1.0.0');
  index.route('/npm/huge-1.0.0.tgz', { body: tgz });
  const token = `sha512-${createHash('sha512').update(tgz).digest('base64')}`;
  const integrity = Array.from({ length: 200_000 }, () => token).join(' ');
  const lock = {
    name: 'app',
    version: '1.0.0',
    lockfileVersion: 3,
    packages: { '': { name: 'app' }, 'node_modules/huge': { version: '1.0.0', license: 'MIT', resolved: index.url('/npm/huge-1.0.0.tgz'), integrity } },
  };
  const before = head();
  const r = await endorse(['--lockfile', write('npm/package-lock.json', JSON.stringify(lock))]);
  assert.is(r.status, 2, r.stderr);
  oneLine(r);
  assert.match(r.stderr, new RegExp(`^vouch endorse: huge@1\\.0\\.0: integrity "sha512-.*\\.\\.\\. has more than ${SRI_MAX_TOKENS} hash tokens\\n$`));
  assert.is(head(), before);
  assert.is(index.requests('/npm/huge-1.0.0.tgz'), 0);
  // The functions themselves: no argument-list spread over what a lockfile holds.
  assert.is(parseSri(integrity).ok, false);
  const many = Array.from({ length: 200_000 }, (_, i) => ({ algorithm: i % 2 ? ('sha512' as const) : ('sha1' as const), hex: String(i) }));
  assert.is(strongestSri(many).length, 100_000);
  const two = parseSri(`${token} sha1-${createHash('sha1').update(tgz).digest('base64')}`);
  assert.ok(two.ok && strongestSri(two.hashes).length === 1 && strongestSri(two.hashes)[0]!.algorithm === 'sha512');
});

test.run();
