/** artifacts/yaml-shape.ts: the nesting and separators counted before a YAML parser runs. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { flowShape } from '../../artifacts/yaml-shape.ts';

test('depth counts flow collections; quoted scalars and comments are skipped', () => {
  assert.is(flowShape('a: [[{b: [1]}]]\nd: [ [ ] ]').depth, 4);
  assert.is(flowShape("c: \"{{{{ \\\" [[[\"\nd: '[[ '' {{'\n").depth, 0);
  assert.is(flowShape('e: 1 # [[[[\nf: [x#not a comment [\n').depth, 2);
  assert.is(flowShape('] ] } [x]').depth, 1, 'closers with nothing open do not go below zero');
  assert.is(flowShape(`${'- {prefix: /npm/, origin: ht'.repeat(100)}`).depth, 100, 'unclosed mappings pile up');
});

test('separators are the line breaks and commas outside quotes and comments', () => {
  assert.is(flowShape('a: [1, 2, 3]\nb: "x, y"\n# c, d\n').separators, 5);
  assert.is(flowShape('').separators, 0);
});

test('a quote or a comment left open runs to the end without throwing', () => {
  assert.equal(flowShape('a: "[[[\\'), { depth: 0, separators: 0 });
  assert.equal(flowShape("a: '[[["), { depth: 0, separators: 0 });
  assert.equal(flowShape('#'), { depth: 0, separators: 0 });
});

test.run();
