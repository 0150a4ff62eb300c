/** artifacts/yaml-shape.ts: the nesting and separators counted before a YAML parser runs. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { flowShape, lineColumn } from '../../artifacts/yaml-shape.ts';
import { readImageRefs } from '../../tools/lockfiles/oci.ts';

test('depth counts flow collections; quoted scalars and comments are skipped', () => {
  assert.is(flowShape('a: [[{b: [1]}]]\nd: [ [ ] ]').depth, 4);
  assert.is(flowShape("c: \"{{{{ \\\" [[[\"\nd: '[[ '' {{'\n").depth, 0);
  assert.is(flowShape('e: 1 # [[[[\nf: [x#not a comment [\n').depth, 2);
  assert.is(flowShape('] ] } [x]').depth, 1, 'closers with nothing open do not go below zero');
  assert.is(flowShape(`${'- {prefix: /npm/, origin: ht'.repeat(100)}`).depth, 100, 'unclosed mappings pile up');
});

test('separators are the line breaks, commas and mapping colons outside quotes and comments', () => {
  assert.is(flowShape('a: [1, 2, 3]\nb: "x, y: z"\n# c, d: e\n').separators, 7);
  assert.is(flowShape('url: https://x.example:8080/a\nk:\n  - v:\tw').separators, 5, 'a colon not followed by white space is not one');
  assert.is(flowShape('').separators, 0);
});

test('a quote or a comment left open runs to the end without throwing', () => {
  assert.equal(flowShape('a: "[[[\\'), { depth: 0, separators: 1 });
  assert.equal(flowShape("a: '[[["), { depth: 0, separators: 1 });
  assert.equal(flowShape('#'), { depth: 0, separators: 0 });
});

test('lineColumn: 1-based line and column of an offset', () => {
  assert.equal(lineColumn('ab\ncd\n', 0), { line: 1, col: 1 });
  assert.equal(lineColumn('ab\ncd\n', 4), { line: 2, col: 2 });
  assert.equal(lineColumn('ab\ncd\n', 6), { line: 3, col: 1 });
});

test('vouch endorse --oci --file: a compose file of many mapping colons is refused before the parser; an error names its place', () => {
  // 250,000 errors took the parser minutes with its pretty messages (each rescans the text).
  assert.throws(
    () => readImageRefs(`services:\n  web:\n    image: {a${': '.repeat(250_000)}b}\n`, 'compose.yaml'),
    /more than 200000 YAML lines, flow items and mapping colons/,
  );
  assert.throws(
    () => readImageRefs(`services:\n  web:\n    image: {a${': '.repeat(100)}b}\n`, 'compose.yaml'),
    /compose\.yaml: not YAML: Unexpected : in flow map at line 3, column 16$/,
  );
  assert.equal(readImageRefs('services:\n  web:\n    image: registry.example/app:1.4\n', 'compose.yaml'), ['registry.example/app:1.4']);
});

test.run();
