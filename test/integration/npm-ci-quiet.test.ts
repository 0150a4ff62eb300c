/**
 * `npm ci` prints no warning of our making: every installed package with an
 * install script (preinstall, install, postinstall) is decided in
 * package.json's `allowScripts` (npm 11 warns about each one that is not),
 * checked both by npm's own `npm install-scripts ls` and by reading
 * node_modules. esbuild's postinstall is allowed (it checks the binary
 * its platform package brought; `npm install-scripts approve esbuild`).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../helpers/vectors.ts';

const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { allowScripts?: Record<string, boolean> };

/** Installed packages (name@version) whose package.json has an install-time script. */
function withInstallScripts(dir: string, out: string[] = []): string[] {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    if (name.startsWith('.')) continue;
    if (name.startsWith('@')) {
      withInstallScripts(join(dir, name), out);
      continue;
    }
    const file = join(dir, name, 'package.json');
    if (!existsSync(file)) continue;
    const p = JSON.parse(readFileSync(file, 'utf8')) as { name: string; version: string; scripts?: Record<string, string> };
    if (['preinstall', 'install', 'postinstall'].some((s) => p.scripts?.[s])) out.push(`${p.name}@${p.version}`);
    withInstallScripts(join(dir, name, 'node_modules'), out);
  }
  return out;
}

test('every package with an install script is decided in allowScripts', () => {
  const found = withInstallScripts(join(repoRoot, 'node_modules'));
  assert.ok(
    found.some((p) => p.startsWith('esbuild@')),
    'esbuild (which has a postinstall) is installed',
  );
  const allow = pkg.allowScripts ?? {};
  const undecided = found.filter((p) => !(p in allow) && !(p.slice(0, p.lastIndexOf('@')) in allow));
  assert.equal(undecided, [], `not in package.json's allowScripts: ${undecided.join(', ')}`);
});

test('npm itself finds no unreviewed install script', () => {
  const r = spawnSync('npm', ['install-scripts', 'ls'], { cwd: repoRoot, encoding: 'utf8' });
  if (/Unknown command|not a valid npm command/i.test(r.stderr + r.stdout)) return; // npm before 11 has no such warning either
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /No packages with unreviewed install scripts/, r.stdout);
});

test.run();
