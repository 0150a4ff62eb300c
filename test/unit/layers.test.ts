/**
 * The code's direction of flow (docs/project-layout.md): `chain/` →
 * `platform/` → `store/` → `artifacts/` → `gateway/` → `tools/`. A module
 * imports only modules of its own layer or of the layers before it; no
 * module reaches itself through its imports (no cycle, type imports
 * included); `chain/` imports no Node built-in (it runs in a browser).
 *
 * The import graph is esbuild's own (the build's tool: every source file an
 * entry point, its metafile lists each file's resolved imports); esbuild
 * drops `import type`, so type-only imports are added from the source text
 * (`import type … from '<relative>'` and `import { type … }` specifiers are
 * already in esbuild's graph only when something else in them is a value).
 * The checker is run on a small tree with known violations first, so a
 * checker that sees nothing fails here too.
 *
 * Owns: nothing outside its temporary directory.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const LAYERS = ['chain', 'platform', 'store', 'artifacts', 'gateway', 'tools'] as const;

function sourcesUnder(root: string, dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...sourcesUnder(root, p));
    else if (/\.(ts|js|mjs)$/.test(e.name) && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

const layerOf = (file: string): number => LAYERS.indexOf(file.split('/')[0] as (typeof LAYERS)[number]);

/** Relative `import type … from '…'` / `export type … from '…'` targets of a file (esbuild erases them). */
function typeImports(root: string, file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/^\s*(?:import|export)\s+type\s[^;]*?from\s*['"](\.{1,2}\/[^'"]+)['"]/gm)) {
    out.push(normalize(join(dirname(file), m[1]!)));
  }
  return out;
}

/** Every violation of the layer rules in the tree at `root` (paths relative to it). */
async function violations(root: string): Promise<string[]> {
  const files = LAYERS.flatMap((l) => sourcesUnder(root, l));
  const result = await build({
    absWorkingDir: root,
    entryPoints: files,
    bundle: true,
    write: false,
    metafile: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    outdir: join(root, '.layers-out'),
    logLevel: 'silent',
    external: ['../dist/*'], // tools/vouch.js runs the build's output, which need not exist yet
  });
  const edges = new Map<string, Set<string>>();
  const bad: string[] = [];
  for (const [file, input] of Object.entries(result.metafile.inputs)) {
    const from = relative(root, join(root, file));
    const to = edges.get(from) ?? new Set<string>();
    edges.set(from, to);
    for (const imp of input.imports) {
      if (imp.external) {
        if (from.startsWith('chain/') && (imp.path.startsWith('node:') || /^(fs|path|os|crypto|child_process|net|http|worker_threads)$/.test(imp.path))) {
          bad.push(`${from} imports the Node built-in ${imp.path} (chain/ must run in a browser)`);
        }
        continue;
      }
      to.add(relative(root, join(root, imp.path)));
    }
    if (/\.(ts|mts)$/.test(from)) for (const t of typeImports(root, from)) to.add(t);
  }
  for (const [from, tos] of edges) {
    const lf = layerOf(from);
    if (lf < 0) continue;
    for (const t of tos) {
      const lt = layerOf(t);
      if (lt > lf) bad.push(`${from} (${LAYERS[lf]}) imports ${t} (${LAYERS[lt]}, a later layer)`);
    }
  }
  // Cycles: strongly connected components of more than one module (Tarjan, iterative).
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  for (const start of edges.keys()) {
    if (index.has(start)) continue;
    const work: Array<{ v: string; it: Iterator<string> }> = [];
    const visit = (v: string) => {
      index.set(v, counter);
      low.set(v, counter++);
      stack.push(v);
      onStack.add(v);
      work.push({ v, it: (edges.get(v) ?? new Set()).values() });
    };
    visit(start);
    while (work.length > 0) {
      const top = work[work.length - 1]!;
      const n = top.it.next();
      if (!n.done) {
        const w = n.value;
        if (!index.has(w)) visit(w);
        else if (onStack.has(w)) low.set(top.v, Math.min(low.get(top.v)!, index.get(w)!));
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1]!.v;
        low.set(parent, Math.min(low.get(parent)!, low.get(top.v)!));
      }
      if (low.get(top.v) === index.get(top.v)) {
        const scc: string[] = [];
        for (;;) {
          const w = stack.pop()!;
          onStack.delete(w);
          scc.push(w);
          if (w === top.v) break;
        }
        if (scc.length > 1) bad.push(`import cycle: ${scc.sort().join(' ↔ ')}`);
      }
    }
  }
  return bad.sort();
}

test('the checker sees an upward import, a type-only cycle and a Node built-in in chain/', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vouch-layers-'));
  try {
    const put = (p: string, text: string) => {
      mkdirSync(join(dir, dirname(p)), { recursive: true });
      writeFileSync(join(dir, p), text);
    };
    put('chain/a.ts', "import { readFileSync } from 'node:fs';\nexport const a = readFileSync;\n");
    put('store/s.ts', "import { g } from '../gateway/g.ts';\nexport const s = () => g;\n");
    put('gateway/g.ts', "import type { H } from './h.ts';\nexport const g = 1; export type G = H;\n");
    put('gateway/h.ts', "import type { G } from './g.ts';\nexport type H = G | 2;\n");
    for (const l of LAYERS) mkdirSync(join(dir, l), { recursive: true });
    const found = await violations(dir);
    assert.ok(
      found.some((v) => v.startsWith('chain/a.ts imports the Node built-in node:fs')),
      found.join('\n'),
    );
    assert.ok(
      found.some((v) => v.startsWith('store/s.ts (store) imports gateway/g.ts (gateway')),
      found.join('\n'),
    );
    assert.ok(found.includes('import cycle: gateway/g.ts ↔ gateway/h.ts'), found.join('\n'));
    assert.is(found.length, 3, found.join('\n'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the code keeps the direction of flow: no upward import, no cycle, chain/ free of Node', async () => {
  const found = await violations(ROOT);
  assert.equal(found, [], `\n${found.join('\n')}`);
});

test.run();
