/**
 * Every relative link of the project's Markdown (README.md, CONTRIBUTING.md,
 * CHANGELOG.md, SECURITY.md, docs/**) points at a file that exists, and a
 * `#fragment` at a heading of that file (GitHub's anchors, which the site
 * uses too: docs/.vitepress/config.mts). The site's build checks links to
 * its pages; this also checks anchors and links out of docs/ into the tree.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { repoRoot } from '../helpers/vectors.ts';

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
export function slugify(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]*>/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The text of a Markdown file without its fenced code blocks. */
function withoutFences(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
}

function anchorsOf(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of withoutFences(readFileSync(file, 'utf8')).matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const base = slugify(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

function markdownFiles(): string[] {
  const out = ['README.md', 'CONTRIBUTING.md', 'CHANGELOG.md', 'SECURITY.md'].map((f) => join(repoRoot, f)).filter((f) => existsSync(f));
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      if (name === 'node_modules' || name === 'dist' || name === 'cache') continue;
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith('.md')) out.push(p);
    }
  };
  walk(join(repoRoot, 'docs'));
  return out;
}

test('every relative link and anchor in the docs resolves', () => {
  const broken: string[] = [];
  const files = markdownFiles();
  assert.ok(files.length > 30, `only ${files.length} Markdown files found`);
  for (const file of files) {
    // Headings keep their inline code for anchors; links are read outside code only.
    const text = withoutFences(readFileSync(file, 'utf8')).replace(/`[^`\n]*`/g, '');
    for (const m of text.matchAll(/\]\(([^)\s]+)(?: "[^"]*")?\)/g)) {
      const target = m[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      const [path, fragment] = target.split('#', 2) as [string, string | undefined];
      const dest = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
      const where = `${relative(repoRoot, file)}: ${target}`;
      if (!existsSync(dest)) {
        broken.push(`${where} (no such file)`);
        continue;
      }
      if (fragment !== undefined && fragment !== '' && dest.endsWith('.md') && !anchorsOf(dest).has(fragment)) broken.push(`${where} (no such heading)`);
    }
  }
  assert.equal(broken, [], `broken links:\n${broken.join('\n')}`);
});

test('the anchors are computed as GitHub does', () => {
  assert.is(slugify('1.7 Verification (offline, and by every gateway before it serves)'), '17-verification-offline-and-by-every-gateway-before-it-serves');
  assert.is(slugify('What `vouch get` checks, and what it cannot'), 'what-vouch-get-checks-and-what-it-cannot');
  assert.is(slugify('Maven repositories (Maven, Gradle)'), 'maven-repositories-maven-gradle');
});

test('no document links to an anchor of the README that moved to docs/', () => {
  const stale: string[] = [];
  for (const file of markdownFiles()) {
    for (const m of readFileSync(file, 'utf8').matchAll(/README\.md#([a-z0-9-]+)/g)) {
      if (!anchorsOf(join(repoRoot, 'README.md')).has(m[1]!)) stale.push(`${relative(repoRoot, file)}: README.md#${m[1]}`);
    }
  }
  assert.equal(stale, []);
});

test.run();
