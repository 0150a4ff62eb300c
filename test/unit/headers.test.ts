/**
 * File headers stay short and never copy bench figures (issue 34, item 3):
 * the leading comment of every source file under chain/, store/,
 * artifacts/, gateway/, tools/, platform/, bench/ and test/helpers/ is at
 * most 15 lines (owns / trusts / must hold; design content lives in
 * docs/spec/design.md), except the spec files allowed below with a reason,
 * and holds no measured figure (a timing, a rate, a ratio, a measured size)
 * outside a link: figures live in bench/RESULTS.md and change with it.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../helpers/vectors.ts';

export const MAX_HEADER_LINES = 15;

/** Files whose header is a worked example of the format they define; each with why. */
const ALLOWED_LONG: Record<string, string> = {
  'chain/block.ts': "the chain format's worked example (a block file, byte for byte) is the spec, and test/unit/spec-example.test.ts runs it",
};

const DIRS = ['chain', 'store', 'artifacts', 'gateway', 'tools', 'platform', 'bench', 'test/helpers'];

function sourceFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '--', ...DIRS], { cwd: repoRoot, encoding: 'utf8' });
  return out.split('\n').filter((f) => /\.(ts|mts|mjs|js)$/.test(f));
}

/** The leading comment block: a block comment or a run of line comments, after an optional shebang. */
export function leadingComment(text: string): string | null {
  const m = /^(?:#![^\n]*\n)?\s*(\/\*[\s\S]*?\*\/|(?:[ \t]*\/\/[^\n]*\n)+)/.exec(text);
  return m === null ? null : m[1]!.replace(/\n$/, '');
}

/**
 * A measured figure: a timing (`7.9 ms`, `8.6 s` with a decimal, `87 µs`), a rate (`41,000/s`, `1.4 GB/s`,
 * `blocks/s`), a ratio (`0.92x`), or an approximate or resident size (`~94 MiB`, `RSS 724 MiB`, `idled at 112 MiB`).
 * A bound or a setting (`at most 16 MiB`, `a 64 KiB buffer`, `every 500 ms`, `timeout 30 s`) is a constant of the
 * code, not a figure, and stays.
 */
const FIGURE = new RegExp(
  [
    String.raw`\d[\d,]*\.\d+\s?(?:ms|µs|s)\b`,
    String.raw`\d[\d,]*\s?(?:µs)\b`,
    String.raw`\d[\d,.]*\s?(?:[KMG]i?B\/s|\/s)\b`,
    String.raw`\d[\d,.]*\s?blocks\/s`,
    String.raw`\d\.\d+x\b`,
    String.raw`(?:~|about |some |RSS |heap |idled at )\d[\d,.]*\s?(?:[KMG]iB|[KMG]B|ms)\b`,
    String.raw`\b(?:median|p50|p99)\b[^.;]*\d`,
  ].join('|'),
);

/** A line's text outside markdown links and `bench/RESULTS.md#...` references, where a figure may not appear. */
const outsideLinks = (line: string) => line.replace(/\[[^\]]*\]\([^)]*\)/g, '').replace(/bench\/RESULTS\.md#\S+/g, '');

export function figuresIn(header: string): string[] {
  return header
    .split('\n')
    .filter((l) => FIGURE.test(outsideLinks(l)))
    .map((l) => l.trim());
}

test('the figure pattern finds figures and leaves bounds alone', () => {
  for (const l of [
    'latency 7.9 ms median',
    'clone 8.6 s',
    'verify takes 87 µs',
    'some 41,000/s',
    'at ~1.4 GB/s',
    '50,000 blocks/s',
    '(ratio 0.92x)',
    'JS heap ~94 MiB',
    'idled at 112 MiB RSS',
  ]) {
    assert.ok(figuresIn(l).length === 1, l);
  }
  for (const l of [
    'at most 16 MiB',
    'a 64 KiB scratch buffer',
    'polls every 500 ms',
    'timeout 30 s',
    'appends [7.9 ms](../bench/RESULTS.md#chain-core)',
    'bench/RESULTS.md#chain-append',
    '`vouch verify`: blocks/s as reported',
  ]) {
    assert.equal(figuresIn(l), [], l);
  }
});

test(`every source file's leading comment is at most ${MAX_HEADER_LINES} lines and copies no bench figure`, () => {
  const long: string[] = [];
  const figures: string[] = [];
  const files = sourceFiles();
  assert.ok(files.length > 200, `only ${files.length} source files found`);
  for (const f of files) {
    const header = leadingComment(readFileSync(join(repoRoot, f), 'utf8'));
    if (header === null) continue;
    const lines = header.split('\n').length;
    if (lines > MAX_HEADER_LINES && !(f in ALLOWED_LONG)) long.push(`${f}: ${lines} lines`);
    for (const l of figuresIn(header)) figures.push(`${f}: ${l}`);
  }
  assert.equal(long, [], `headers over ${MAX_HEADER_LINES} lines (move the design content to docs/spec/design.md):\n${long.join('\n')}`);
  assert.equal(figures, [], `bench figures in headers (link bench/RESULTS.md instead):\n${figures.join('\n')}`);
});

test('every allowed long header still exists and is still long', () => {
  for (const [f, why] of Object.entries(ALLOWED_LONG)) {
    assert.ok(why.length > 20);
    const header = leadingComment(readFileSync(join(repoRoot, f), 'utf8'));
    assert.ok(header !== null && header.split('\n').length > MAX_HEADER_LINES, `${f} no longer needs its place in ALLOWED_LONG`);
  }
});

test.run();
