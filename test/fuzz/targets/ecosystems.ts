import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PageError, parseHtmlPage, parseJsonPage, versionOfFile } from '../../../artifacts/pypi-simple.ts';
import { renderHtml, renderJson, rewritePage } from '../../../gateway/ecosystems/pypi.ts';
import { renderPackument } from '../../../gateway/ecosystems/npm.ts';
import type { RenderView } from '../../../gateway/ecosystems/ecosystem.ts';
import { checkJsonShape, JsonShapeError } from '../../../artifacts/json-shape.ts';
import { memoryLog } from '../../helpers/memory-log.ts';
import { escapeGo, infoVersion, parseGoproxyPath, parseVersionList, formatVersionList, unescapeGo } from '../../../gateway/ecosystems/goproxy.ts';
import { loadConfigFile } from '../../../gateway/config.ts';
import { readNpmLock } from '../../../tools/lockfiles/npm.ts';
import { parseIndexPage, readRequirements } from '../../../tools/lockfiles/pip.ts';
import { readGoSum, zipH1 } from '../../../tools/lockfiles/go.ts';
import type { Selection } from '../../../chain/select.ts';
import { check, mix, mustNotThrow, mutatedBytes, mutatedJson, mutatedLines, randomInput, refusedOnly, refusedOnlyAsync, type FuzzTarget } from '../target.ts';
import { scratchDir } from './git.ts';

const utf8 = (b: Buffer) => b.toString('utf8');
const ORIGIN = 'https://files.example/';
/** Where the fuzz view's gateway serves an artifact URL (encoded after it). */
const GATEWAY = 'http://127.0.0.1:1/p/';

/** A request's view of the chain: URLs under the origin are routed; about half are endorsed (by a hash of the URL), at the version the URL names. */
function io(unendorsed: 'deny' | 'pass'): RenderView {
  return {
    unendorsed,
    log: memoryLog(),
    originUrl: (rest: string) => `${ORIGIN}${rest}`,
    artifactUrlOf: (u: string) => (u.startsWith(ORIGIN) || u.startsWith('https://registry.example/') ? u : null),
    artifactTailOf: (u: string) =>
      u.startsWith(ORIGIN) ? u.slice(ORIGIN.length) : u.startsWith('https://registry.example/') ? u.slice('https://registry.example/'.length) : null,
    gatewayUrlOf: (u: string) => `${GATEWAY}${encodeURIComponent(u)}`,
    endorsed: (u: string): Selection | null => {
      let h = 0;
      for (let i = 0; i < u.length; i++) h = (h * 31 + u.charCodeAt(i)) | 0;
      if (h & 1) return null;
      const semver = /-(\d+\.\d+\.\d+[^/]*?)(?:\.tgz|\.tar\.gz|-py3-none-any\.whl)$/.exec(u)?.[1] ?? '1.0.0';
      return { entry: { semver, artifact_hash: `sha512:${'ab'.repeat(64)}` }, revokedBy: null } as unknown as Selection;
    },
  };
}

const HTML_TOKENS = [
  '<a href="',
  '">',
  '</a>',
  '<base href="',
  '#sha256=',
  '#md5=',
  'data-requires-python="',
  'data-yanked',
  'data-dist-info-metadata',
  '&amp;',
  '&#',
  '<!--',
  '-->',
  '<script>',
  '<',
  '>',
  '"',
  "'",
  'widget-1.0.0.tar.gz',
  'https://files.example/',
  '../',
  '//',
  'javascript:',
  '\0',
];

export const pypiHtmlTarget: FuzzTarget = {
  name: 'pypi-html',
  about:
    'parseHtmlPage (PEP 503), rewritePage and renderHtml: a page or PageError; the rendered page parses again to the kept files; versionOfFile never throws',
  arbitrary: (seeds) =>
    mix(
      randomInput(HTML_TOKENS),
      mutatedBytes(seeds, { tokens: HTML_TOKENS }),
      mutatedLines(seeds, ['<a href="widget-2.0.tar.gz#sha256=00">widget-1.0.tar.gz</a>', '<base href="https://files.example/x/">']),
    ),
  check(input) {
    const page = refusedOnly(
      () => parseHtmlPage(utf8(input), `${ORIGIN}simple/widget/`, 'widget'),
      [],
      (e) => e instanceof PageError,
    );
    if (page === undefined) return;
    for (const f of page.files.slice(0, 50)) refusedOnly(() => versionOfFile(f.filename, 'widget', { strict: true }), []);
    for (const mode of ['deny', 'pass'] as const) {
      const out = rewritePage(page, io(mode));
      const again = mustNotThrow(
        () => parseHtmlPage(renderHtml(out), 'http://127.0.0.1:1/simple/widget/', 'widget'),
        'the page the gateway renders does not parse again',
      );
      check(again.files.length === out.files.length, `rendered ${out.files.length} files, read back ${again.files.length}`);
    }
  },
  runs: 300,
};

export const pypiJsonTarget: FuzzTarget = {
  name: 'pypi-json',
  about: 'parseJsonPage (PEP 691), rewritePage and renderJson: a page or PageError; the rendered page parses again to the kept files',
  arbitrary: (seeds) =>
    mix(randomInput(['{', '}', '"files"', '"url"', '"hashes"', '"meta"', '"api-version"', '"1.1"', '"versions"']), mutatedBytes(seeds), mutatedJson(seeds)),
  check(input) {
    const page = refusedOnly(
      () => parseJsonPage(utf8(input), `${ORIGIN}simple/widget/`),
      [],
      (e) => e instanceof PageError,
    );
    if (page === undefined) return;
    for (const mode of ['deny', 'pass'] as const) {
      const out = rewritePage(page, io(mode));
      const again = mustNotThrow(
        () => parseJsonPage(renderJson(out), 'http://127.0.0.1:1/simple/widget/'),
        'the page the gateway renders does not parse again',
      );
      check(again.files.length === out.files.length, `rendered ${out.files.length} files, read back ${again.files.length}`);
    }
  },
  runs: 300,
};

export const npmPackumentTarget: FuzzTarget = {
  name: 'npm-packument',
  about:
    'renderPackument (structure caps, parse, rewrite, write back; full and abbreviated, deny and pass): an answer or a 502/404 refusal, never a throw; an answer parses and offers only tarballs of this package through the gateway',
  arbitrary: (seeds) =>
    mix(
      randomInput(['{', '}', '"versions"', '"dist"', '"tarball"', '"dist-tags"', '"time"', '"name"', '"widget"']),
      mutatedBytes(seeds),
      mutatedJson(seeds),
      mutatedJson(seeds),
    ),
  check(input) {
    for (const mode of ['deny', 'pass'] as const) {
      for (const abbreviated of [false, true]) {
        const r = mustNotThrow(
          () => renderPackument(input, { kind: 'npm', contentType: 'application/json', name: 'widget', abbreviated }, io(mode)),
          'renderPackument threw',
        );
        if (!r.ok) {
          check(r.status === 502 || (r.status === 404 && mode === 'deny'), `refused with ${r.status}: ${r.message}`);
          continue;
        }
        const doc = mustNotThrow(() => JSON.parse(String(r.body)) as { versions?: Record<string, { dist?: { tarball?: unknown } }> }, 'the answer is not JSON');
        const view = io(mode);
        for (const v of Object.values(doc.versions ?? {})) {
          const t = v?.dist?.tarball;
          check(typeof t === 'string' && t.startsWith(GATEWAY), `a kept version's tarball is ${JSON.stringify(t)}, not the gateway's`);
          // An endorsed tarball is offered only under its own package's name; on a pass route an unendorsed
          // version passes through (marked), wherever its tarball is.
          const artifact = decodeURIComponent((t as string).slice(GATEWAY.length));
          if (mode === 'deny' || view.endorsed(artifact) !== null) {
            check(view.artifactTailOf(artifact)?.startsWith('widget/-/widget-') === true, `a kept endorsed version's tarball is ${artifact}, not widget's`);
          }
        }
      }
    }
  },
  runs: 300,
};

/** The deepest nesting of a parsed JSON value (iterative: a fuzzed value may be deep). */
function depthOf(v: unknown): number {
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[v, 0]];
  while (stack.length > 0) {
    const [x, d] = stack.pop()!;
    if (x === null || typeof x !== 'object') continue;
    deepest = Math.max(deepest, d + 1);
    for (const c of Object.values(x as object)) stack.push([c, d + 1]);
  }
  return deepest;
}

export const jsonShapeTarget: FuzzTarget = {
  name: 'json-shape',
  about:
    'checkJsonShape (the structure scan before JSON.parse of metadata): accepts or throws JsonShapeError; what it accepts and JSON.parse reads is no deeper, and has no longer string, than the caps',
  arbitrary: (seeds) => mix(randomInput(['{', '}', '[', ']', '"', '\\', '\\"', ',', ':', '1', 'null']), mutatedBytes(seeds), mutatedJson(seeds)),
  check(input) {
    const text = utf8(input);
    for (const caps of [
      { maxValues: 50, maxDepth: 3, maxString: 8 },
      { maxValues: 10_000, maxDepth: 32, maxString: 4096 },
    ]) {
      const r = refusedOnly(
        () => checkJsonShape(text, caps),
        [],
        (e) => e instanceof JsonShapeError,
      );
      if (r === undefined) continue;
      let doc: unknown;
      try {
        doc = JSON.parse(text);
      } catch {
        continue;
      }
      check(depthOf(doc) <= caps.maxDepth, `accepted a text ${depthOf(doc)} deep under maxDepth ${caps.maxDepth}`);
      const long = JSON.stringify(doc, (_k, v: unknown) => (typeof v === 'string' && v.length > caps.maxString ? '\u0000LONG' : v));
      check(!long.includes('\\u0000LONG'), `accepted a string longer than maxString ${caps.maxString}`);
    }
  },
  runs: 500,
};

const GO_TOKENS = [
  'v1.0.0',
  'v2.0.0+incompatible',
  'v0.0.0-20260101000000-abcdefabcdef',
  ' 2026-01-01T00:00:00Z',
  '\n',
  '\t',
  ' ',
  '@v/',
  'list',
  '.info',
  '.mod',
  '.zip',
  '@latest',
  '!',
  '!a',
  'A',
  '/v2',
  'gopkg.in/x.v1',
  'example.com/m/',
  '%',
  '..',
];

export const goProxyTarget: FuzzTarget = {
  name: 'go-proxy',
  about:
    '@v/list (parseVersionList), .info (infoVersion), request paths (parseGoproxyPath) and the case encoding: results or null, never a throw; list and escaping round trips',
  arbitrary: (seeds) =>
    mix(
      randomInput(GO_TOKENS),
      mutatedBytes(seeds, { tokens: GO_TOKENS }),
      mutatedLines(seeds, ['v1.0.0', 'v1.0.0 bad-time', 'v01.0.0', 'v1.0.0-'.padEnd(300, 'x')]),
      mutatedJson(seeds),
    ),
  check(input) {
    const text = utf8(input);
    for (const module of ['example.com/m', 'example.com/m/v2', 'gopkg.in/x.v1']) {
      const lines = refusedOnly(() => parseVersionList(text, module), []);
      check(
        lines !== undefined && JSON.stringify(parseVersionList(formatVersionList(lines), module)) === JSON.stringify(lines),
        'a version list written again reads differently',
      );
    }
    refusedOnly(() => infoVersion(input), []);
    const req = refusedOnly(() => parseGoproxyPath(text), []);
    if (req) check(req.module.length > 0, 'a request for no module');
    const u = refusedOnly(() => unescapeGo(text), []);
    if (u !== null && u !== undefined) check(escapeGo(u) === text, `escapeGo(unescapeGo(${JSON.stringify(text)})) = ${escapeGo(u)}`);
  },
  runs: 500,
};

const ZIP_TOKENS = [
  Buffer.from('PK\x03\x04', 'latin1'),
  Buffer.from('PK\x01\x02', 'latin1'),
  Buffer.from('PK\x05\x06', 'latin1'),
  Buffer.from('PK\x06\x06', 'latin1'),
  Buffer.from([0xff, 0xff, 0xff, 0xff]),
  Buffer.from('example.com/m@v1.0.0/', 'latin1'),
];
let zipSeq = 0;

export const goZipTarget: FuzzTarget = {
  name: 'go-zip',
  about: "zipH1 (a module zip read with yauzl, the go command's checks): an h1: hash or bad_request",
  arbitrary: (seeds) => mix(randomInput(), mutatedBytes(seeds, { tokens: ZIP_TOKENS }), mutatedBytes(seeds, { tokens: ZIP_TOKENS })),
  async check(input) {
    const file = join(scratchDir(), `m${zipSeq++ % 4}.zip`);
    writeFileSync(file, input);
    const h = await refusedOnlyAsync(() => zipH1(file, 'example.com/m', 'v1.0.0', 'fuzz'), ['bad_request']);
    if (h !== undefined) check(/^h1:[A-Za-z0-9+/]{43}=$/.test(h), `hash ${h}`);
  },
  runs: 200,
};

// --- lockfiles ------------------------------------------------------------------

const options = { license: 'MIT', licenseUnchecked: false, comment: undefined };

export const npmLockTarget: FuzzTarget = {
  name: 'lock-npm',
  about: 'readNpmLock (package-lock.json v1-v3): packages or bad_request',
  arbitrary: (seeds) =>
    mix(
      randomInput(['{', '}', '"packages"', '"lockfileVersion"', '"resolved"', '"integrity"', 'sha512-', 'node_modules/']),
      mutatedBytes(seeds),
      mutatedJson(seeds),
      mutatedJson(seeds),
    ),
  check(input) {
    refusedOnly(() => readNpmLock(utf8(input), options, 'package-lock.json'), ['bad_request']);
  },
  runs: 400,
};

const PIP_TOKENS = [
  '==',
  '===',
  '>=',
  ' \\\n',
  '\\',
  '--hash=sha256:',
  '--index-url ',
  '-r ',
  '-e ',
  '#',
  ';',
  ' python_version < "3"',
  '[extra]',
  '@ https://files.example/x.whl',
  '\r\n',
  '\t',
];

export const pipLockTarget: FuzzTarget = {
  name: 'lock-pip',
  about: 'readRequirements (requirements.txt, pinned with --hash): requirements or bad_request',
  arbitrary: (seeds) =>
    mix(
      randomInput(PIP_TOKENS),
      mutatedBytes(seeds, { tokens: PIP_TOKENS }),
      mutatedLines(seeds, ['widget==1.0 --hash=sha256:' + '0'.repeat(64), '--extra-index-url https://a.example/', 'x==1 \\', '   --hash=sha384:ab']),
    ),
  check(input) {
    refusedOnly(() => readRequirements(utf8(input), options, 'requirements.txt'), ['bad_request']);
  },
  runs: 400,
};

export const pipIndexTarget: FuzzTarget = {
  name: 'lock-pip-index',
  about: 'parseIndexPage (what endorse reads of an index page, HTML or JSON): files or bad_request',
  arbitrary: (seeds) => mix(randomInput(HTML_TOKENS), mutatedBytes(seeds, { tokens: HTML_TOKENS }), mutatedJson(seeds)),
  check(input) {
    const json = input[0] === 0x7b;
    refusedOnly(
      () => parseIndexPage(input, json ? 'application/vnd.pypi.simple.v1+json' : 'text/html', `${ORIGIN}simple/widget/`, 'widget', 'requirements.txt:1'),
      ['bad_request'],
    );
  },
  runs: 300,
};

const GOSUM_TOKENS = [' ', '/go.mod', ' h1:', 'h1:', '=', 'v1.0.0', 'v2.0.0+incompatible', '\n', 'example.com/m', 'A', '!'];

export const goSumTarget: FuzzTarget = {
  name: 'lock-go',
  about: 'readGoSum (go.sum): modules or bad_request',
  arbitrary: (seeds) =>
    mix(
      randomInput(GOSUM_TOKENS),
      mutatedBytes(seeds, { tokens: GOSUM_TOKENS }),
      mutatedLines(seeds, ['example.com/m v1.0.0 h1:x', 'example.com/M v1.0.0/go.mod h1:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=']),
    ),
  check(input) {
    refusedOnly(() => readGoSum(utf8(input), 'https://proxy.example', options, 'go.sum'), ['bad_request']);
  },
  runs: 400,
};

// --- the config file ---------------------------------------------------------------

const YAML_TOKENS = [
  'listen:\n',
  '  port: ',
  'chain:\n',
  '  dir: ',
  'authority:\n',
  'proxy:\n  routes:\n',
  '  - ',
  '&a ',
  '*a',
  '<<: *a',
  '!!binary ',
  '{',
  '}',
  '[',
  ']',
  ': ',
  '\n',
  '  ',
  '---\n',
  '...',
  '"',
  "'",
  '#',
  '~',
  'null',
  '0x10',
  '1e9',
  '-1',
];
let cfgSeq = 0;
// The yaml library warns on stderr (process.emitWarning) about unknown tags and odd anchors: fuzzed files make thousands.
const emitWarning = process.emitWarning.bind(process);
process.emitWarning = ((w: string | Error, ...rest: unknown[]) => {
  if (typeof w === 'object' && w.name === 'YAMLWarning') return;
  (emitWarning as (...a: unknown[]) => void)(w, ...rest);
}) as typeof process.emitWarning;

export const configTarget: FuzzTarget = {
  name: 'config',
  about: 'loadConfigFile (YAML, then the schema): a Config or usage',
  arbitrary: (seeds) =>
    mix(
      randomInput(YAML_TOKENS),
      mutatedBytes(seeds, { tokens: YAML_TOKENS }),
      mutatedLines(seeds, ['  port: 99999', '  port: -1', 'extra: 1', 'a: &x [*x]', '  timeout: 1e999']),
    ),
  check(input) {
    const file = join(scratchDir(), `c${cfgSeq++ % 4}.yaml`);
    writeFileSync(file, input);
    const c = refusedOnly(() => loadConfigFile(file), ['usage']);
    if (c) check(Number.isInteger(c.listen.port) && c.listen.port >= 0 && c.listen.port <= 65535, `port ${c.listen.port}`);
  },
  runs: 150,
};
