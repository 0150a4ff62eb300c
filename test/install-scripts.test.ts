/**
 * `npm ci` prints no warning of our making (issue 34, item 4): every
 * installed package with an install script (preinstall, install,
 * postinstall) is covered by package.json `allowScripts` (npm 11.16+ warns
 * about the others, and npm 12 skips their scripts). Read from the installed
 * tree, as npm's own check (`npm approve-scripts --allow-scripts-pending`).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './helpers/vectors.ts';

/** Every package directory under a node_modules directory, nested ones and scopes included. */
function packages(dir: string, out: string[] = []): string[] {
  if (!existsSync(dir)) return out;
  const here: string[] = [];
  for (const name of readdirSync(dir)) {
    if (name.startsWith('.')) continue;
    const p = join(dir, name);
    if (name.startsWith('@')) {
      for (const sub of readdirSync(p)) here.push(join(p, sub));
    } else here.push(p);
  }
  out.push(...here);
  for (const p of here) packages(join(p, 'node_modules'), out);
  return out;
}

test('every installed package with an install script is covered by allowScripts', () => {
  const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8'));
  const allowed: Record<string, boolean> = pkg.allowScripts ?? {};
  const uncovered: string[] = [];
  for (const dir of packages(join(repoRoot, 'node_modules'))) {
    const file = join(dir, 'package.json');
    if (!existsSync(file)) continue;
    const p = JSON.parse(readFileSync(file, 'utf8'));
    const scripts = p.scripts ?? {};
    if (!['preinstall', 'install', 'postinstall'].some((s) => typeof scripts[s] === 'string')) continue;
    if (!(p.name in allowed) && !(`${p.name}@${p.version}` in allowed)) uncovered.push(`${p.name}@${p.version}`);
  }
  assert.equal(uncovered, [], `install scripts not covered by package.json allowScripts: ${uncovered.join(', ')}`);
});

test.run();
