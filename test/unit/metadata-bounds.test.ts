/**
 * Units of the metadata bounds (issue 31, items 2 and 3): the JSON structure
 * scan before a parse, the file name pip gives a URL, and the render worker
 * (a real worker thread) answering exactly as the same rendering on this
 * thread, refusals included.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { checkJsonShape, JsonShapeError } from '../../artifacts/json-shape.ts';
import { pipFileNames } from '../../artifacts/pip-url.ts';
import type { Rendered, RenderJob, RenderView } from '../../gateway/ecosystems/ecosystem.ts';
import { decide, renderJob } from '../../gateway/ecosystems/render-job.ts';
import { RenderPool } from '../../gateway/ecosystems/render-pool.ts';
import type { Selection } from '../../chain/select.ts';
import { memoryLog } from '../helpers/memory-log.ts';

const CAPS = { maxValues: 10, maxDepth: 3, maxString: 8 };

test('checkJsonShape: values, depth and string length bounded; strings and escapes skipped', () => {
  assert.equal(checkJsonShape('{"a":[1,2],"b":{"c":"x"}}', CAPS), { values: 6, depth: 2 });
  assert.equal(checkJsonShape('"[[[[[[[[[[,,,,,,"', { ...CAPS, maxString: 100 }), { values: 1, depth: 0 });
  assert.equal(checkJsonShape('["a\\"[[[[,,,,,,,,,,\\\\"]', { ...CAPS, maxString: 100 }).depth, 1);
  const refused = (text: string, reason: RegExp) =>
    assert.throws(
      () => checkJsonShape(text, CAPS),
      (e: unknown) => e instanceof JsonShapeError && reason.test(e.message),
    );
  refused('[[[[1]]]]', /nested deeper than 3 levels/);
  refused('[1,2,3,4,5,6,7,8,9,10,11]', /more than 10 values/);
  refused('["123456789"]', /a string longer than 8 characters/);
  refused('[[[],[]],[[],[]],[[],[]]]', /more than 10 values/); // arrays count as values too
  const deep = '['.repeat(200_000) + ']'.repeat(200_000);
  assert.throws(() => checkJsonShape(deep, { maxValues: 1e9, maxDepth: 64, maxString: 1e9 }), /nested deeper than 64/);
});

test('pipFileNames: the last path segment, percent-decoded as pip does (once since pip 26.2, twice before); query and fragment dropped', () => {
  const both = (url: string, name: string) => assert.equal(pipFileNames(url), { current: name, legacy: name }, url);
  both('https://f.test/p/widget-2.0.0.tar.gz?x=1#sha256=00', 'widget-2.0.0.tar.gz');
  both('https://f.test/p/torch-2.0.0%2Bcpu-cp311-none-any.whl', 'torch-2.0.0+cpu-cp311-none-any.whl');
  both('https://f.test/p/evil%2Fwidget-1.0.0.tar.gz', 'widget-1.0.0.tar.gz'); // pip splits at an encoded slash
  assert.equal(pipFileNames('https://f.test/p/w-1.0.tar.gz%252F'), { current: 'w-1.0.tar.gz%2F', legacy: 'w-1.0.tar.gz/' });
  both('https://f.test/p/w-1.0.tar.gz/', 'w-1.0.tar.gz');
  both('https://f.test/p/%E2%82%AC-1.0.tar.gz', '€-1.0.tar.gz');
  both('https://f.test/p/%ZZ-1.0.tar.gz', '%ZZ-1.0.tar.gz');
  both('https://f.test:8443/', 'f.test:8443');
});

const CANON = 'https://reg.test/';
const view = (endorsed: Record<string, string>): RenderView => ({
  unendorsed: 'deny',
  log: memoryLog(),
  artifactUrlOf: (u) => (u.startsWith('http://origin.test/') ? CANON + u.slice('http://origin.test/'.length) : null),
  gatewayUrlOf: (a) => (a.startsWith(CANON) ? `http://gw.test/npm/${a.slice(CANON.length)}` : null),
  artifactTailOf: (a) => (a.startsWith(CANON) ? a.slice(CANON.length) : null),
  endorsed: (a) => (endorsed[a] === undefined ? null : ({ entry: { semver: endorsed[a], artifact_hash: `sha512:${'ab'.repeat(64)}` } } as Selection)),
  originUrl: (rest) => `http://origin.test/${rest}`,
});

test('the render worker answers as the rendering on this thread: a packument, a page, refusals', async () => {
  const pool = new RenderPool();
  try {
    const v = view({ [`${CANON}p/-/p-1.0.0.tgz`]: '1.0.0', [`${CANON}files/x-1.0.tar.gz`]: '1.0' });
    const tb = (ver: string) => `http://origin.test/p/-/p-${ver}.tgz`;
    const packument = Buffer.from(
      JSON.stringify({
        name: 'p',
        versions: {
          '1.0.0': { name: 'p', version: '1.0.0', dist: { tarball: tb('1.0.0') } },
          '2.0.0': { name: 'p', version: '2.0.0', dist: { tarball: tb('2.0.0') } },
        },
      }),
    );
    const npmJob: RenderJob = { kind: 'npm', contentType: 'application/json', name: 'p', abbreviated: false };
    const page = Buffer.from(
      '<a href="http://origin.test/files/x-1.0.tar.gz">x-1.0.tar.gz</a><a href="http://origin.test/files/x-2.0.tar.gz">x-1.0.tar.gz</a>',
    );
    const pageJob: RenderJob = {
      kind: 'pypi',
      contentType: 'text/html',
      pageUrl: 'http://origin.test/simple/x/',
      project: 'x',
      want: { form: 'json', contentType: 'application/vnd.pypi.simple.v1+json' },
    };
    const cases: Array<[RenderJob, Buffer]> = [
      [npmJob, packument],
      [pageJob, page],
      [npmJob, Buffer.from('{"name":"p","x":' + '['.repeat(1000) + ']'.repeat(1000) + '}')],
      [npmJob, Buffer.from('{"name":"q","versions":{}}')],
    ];
    const text = (r: Rendered) => (r.ok ? { ...r, body: Buffer.from(r.body).toString() } : r);
    for (const [job, body] of cases) {
      const here = renderJob(job, body, v);
      const there = await pool.render(job, body, 'deny', (urls) => decide(urls, v));
      assert.ok(there !== null, 'no worker');
      assert.equal(text(there!.rendered), text(here));
    }
    const offered = await pool.render(npmJob, packument, 'deny', (urls) => decide(urls, v));
    assert.equal(Object.keys(JSON.parse(Buffer.from((offered!.rendered as { body: Buffer }).body).toString()).versions), ['1.0.0']);
    const deep = await pool.render(npmJob, cases[2]![1], 'deny', (urls) => decide(urls, v));
    assert.equal(deep!.rendered, { ok: false, status: 502, message: "vouch: the registry's packument of p is unusable: nested deeper than 64 levels" });
    assert.equal(
      deep!.logs.map((l) => l.level),
      ['warn'],
    );
  } finally {
    await pool.close();
  }
});

test('a job posted to a new worker while the idle one is still exiting is not answered by that exit', async () => {
  const pool = new RenderPool();
  try {
    const v = view({ [`${CANON}p/-/p-1.0.0.tgz`]: '1.0.0' });
    const packument = Buffer.from(
      JSON.stringify({ name: 'p', versions: { '1.0.0': { name: 'p', version: '1.0.0', dist: { tarball: 'http://origin.test/p/-/p-1.0.0.tgz' } } } }),
    );
    const npmJob: RenderJob = { kind: 'npm', contentType: 'application/json', name: 'p', abbreviated: false };
    const first = await pool.render(npmJob, packument, 'deny', (urls) => decide(urls, v));
    assert.ok(first?.rendered.ok, 'first rendering');
    // The idle timer stops the worker (terminate(): its `exit` comes later); a job right then starts another.
    const internals = pool as unknown as { worker: unknown };
    const t0 = Date.now();
    while (internals.worker !== null) {
      if (Date.now() - t0 > 10_000) throw new Error('the idle worker was not stopped');
      await new Promise((r) => setImmediate(r));
    }
    const second = await pool.render(npmJob, packument, 'deny', (urls) => decide(urls, v));
    assert.ok(second?.rendered.ok, `second rendering: ${JSON.stringify(second?.rendered)}`);
  } finally {
    await pool.close();
  }
});

test.run();
