/**
 * The unit-name rule of chain/unit-names.ts, as a table: what npm, PyPI and
 * Go packages and versions become in the chain, what is refused, and the
 * properties the README promises (every result is a unit name / SemVer of
 * chain/block.ts; ecosystems never collide; the PEP 440 mapping keeps
 * unequal versions apart and equal ones together).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { isSemver, isUnitName } from '../../chain/block.ts';
import {
  goSemver,
  goUnitName,
  npmSemver,
  npmUnitName,
  parsePep440,
  pep440Equal,
  pep440ToSemver,
  pypiNormalizeName,
  pypiUnitName,
  type Mapped,
} from '../../chain/unit-names.ts';

const value = (m: Mapped) => (m.ok ? m.value : `refused: ${m.reason}`);

test('names: the rule table', () => {
  const table: [(s: string) => Mapped, string, string][] = [
    [npmUnitName, 'leftpad', 'npm/leftpad'],
    [npmUnitName, 'JSONStream', 'npm/JSONStream'],
    [npmUnitName, 'lodash.merge', 'npm/lodash.merge'],
    [npmUnitName, '@scope/name', '@scope/name'],
    [npmUnitName, '@npm/x', '@npm/x'],
    [npmUnitName, '@types/node', '@types/node'],
    [pypiUnitName, 'requests', 'pypi/requests'],
    [pypiUnitName, 'Foo.Bar_baz', 'pypi/foo-bar-baz'],
    [pypiUnitName, 'zope.interface', 'pypi/zope-interface'],
    [pypiUnitName, 'A__B--c..D', 'pypi/a-b-c-d'],
    [goUnitName, 'golang.org/x/mod', 'go/golang.org+x+mod'],
    [goUnitName, 'github.com/Azure/go-autorest/v14', 'go/github.com+Azure+go-autorest+v14'],
    [goUnitName, 'gopkg.in/yaml.v3', 'go/gopkg.in+yaml.v3'],
  ];
  for (const [f, input, want] of table) {
    const got = value(f(input));
    assert.is(got, want, `${f.name}(${input})`);
    assert.ok(isUnitName(got), got);
  }
});

test('names: refusals say why', () => {
  const refused: [(s: string) => Mapped, string, RegExp][] = [
    [npmUnitName, '', /not an npm package name/],
    [npmUnitName, 'a/b', /not an npm package name/],
    [npmUnitName, '@scope', /not @scope\/name/],
    [npmUnitName, '@a@b/c', /not @scope\/name/],
    [npmUnitName, '@sc/na/me', /not @scope\/name/],
    [npmUnitName, '~tilde', /not a unit name/],
    [npmUnitName, '.hidden', /not a unit name/],
    [npmUnitName, 'x'.repeat(129), /longer than 128/],
    [npmUnitName, `@${'s'.repeat(128)}/x`, /scope is longer than 127/],
    [pypiUnitName, '-bad', /not a project name/],
    [pypiUnitName, 'bad-', /not a project name/],
    [pypiUnitName, 'has space', /not a project name/],
    [goUnitName, 'example.com/a~b', /"~" cannot appear/],
    [goUnitName, 'example.com//x', /not a module path/],
    [goUnitName, 'example.com/../x', /not a module path/],
    [goUnitName, 'example.com/x+y', /not a module path/],
    [goUnitName, `example.com/${'x'.repeat(120)}`, /longer than 128/],
  ];
  for (const [f, input, want] of refused) {
    const m = f(input);
    assert.is(m.ok, false, `${f.name}(${input}) accepted`);
    assert.match((m as { reason: string }).reason, want, `${f.name}(${input})`);
  }
});

test('names: the ecosystems never collide', () => {
  // npm unscoped -> owner "npm"; scoped -> owner "@<scope>"; PyPI -> "pypi"; Go -> "go".
  const owners = new Set([
    value(npmUnitName('x')),
    value(npmUnitName('@npm/x')),
    value(npmUnitName('@pypi/x')),
    value(pypiUnitName('x')),
    value(goUnitName('x')),
  ]);
  assert.is(owners.size, 5);
  assert.is(value(npmUnitName('@npm/x')), '@npm/x');
  assert.is.not(value(npmUnitName('@npm/x')), value(npmUnitName('x')));
  // Go: "/" -> "+" is reversible because "+" is not in module paths.
  assert.is(value(goUnitName('a.b/c')), 'go/a.b+c');
  assert.is(goUnitName('a.b+c').ok, false);
  assert.is(pypiNormalizeName('Django_REST.framework'), 'django-rest-framework');
});

test('versions: npm and Go', () => {
  assert.is(value(npmSemver('1.0.0')), '1.0.0');
  assert.is(value(npmSemver('2.0.0-beta.1+build.7')), '2.0.0-beta.1+build.7');
  assert.match(value(npmSemver('1.0')), /refused: .*not SemVer 2\.0\.0/);
  assert.match(value(npmSemver('v1.0.0')), /refused/);
  assert.is(value(goSemver('v1.2.3')), '1.2.3');
  assert.is(value(goSemver('v0.0.0-20230101120000-abcdef123456')), '0.0.0-20230101120000-abcdef123456');
  assert.is(value(goSemver('v1.2.4-0.20230101120000-abcdef123456')), '1.2.4-0.20230101120000-abcdef123456');
  assert.is(value(goSemver('v2.0.0+incompatible')), '2.0.0+incompatible');
  assert.match(value(goSemver('1.2.3')), /refused/);
  assert.match(value(goSemver('v1.2')), /refused/);
});

test('versions: the PEP 440 -> SemVer table', () => {
  const table: [string, string][] = [
    ['2.31', '2.31.0'],
    ['2.31.0', '2.31.0'],
    ['3', '3.0.0'],
    ['1.2.3', '1.2.3'],
    ['1.2.3.0', '1.2.3'],
    ['1.2.3.4', '1.2.3+rel.4'],
    ['1.0.0.0.4', '1.0.0+rel.0.4'],
    ['01.02', '1.2.0'],
    ['v1.0', '1.0.0'],
    ['1.0a1', '1.0.0-a.1'],
    ['1.0alpha1', '1.0.0-a.1'],
    ['1.0b2', '1.0.0-b.2'],
    ['1.0rc1', '1.0.0-rc.1'],
    ['1.0c1', '1.0.0-rc.1'],
    ['1.0RC1', '1.0.0-rc.1'],
    ['1.0a', '1.0.0-a.0'],
    ['1.0.dev3', '1.0.0-dev.3'],
    ['1.0a1.dev2', '1.0.0-a.1.dev.2'],
    ['1.0.post1', '1.0.0+post.1'],
    ['1.0-1', '1.0.0+post.1'],
    ['1.0.post1.dev2', '1.0.0+post.1.dev.2'],
    ['2023.3.post1', '2023.3.0+post.1'],
    ['1.0+cpu', '1.0.0+local.cpu'],
    ['1.0+ubuntu-1', '1.0.0+local.ubuntu.1'],
    ['1.0+01', '1.0.0+local.1'],
    ['1.0.post1+cu118', '1.0.0+post.1.local.cu118'],
    ['1.2.3.4rc1.post2.dev3+x', '1.2.3-rc.1+rel.4.post.2.dev.3.local.x'],
  ];
  for (const [pep, want] of table) {
    assert.is(value(pep440ToSemver(pep)), want, pep);
    assert.ok(isSemver(want), want);
  }
  assert.match(value(pep440ToSemver('1!2.0')), /refused: .*has an epoch/);
  assert.match(value(pep440ToSemver('2023.1-custom')), /refused: .*not a PEP 440 version/);
  assert.match(value(pep440ToSemver('latest')), /refused/);
});

test('versions: PEP 440 equality decides the mapping (equal versions map together, unequal apart)', () => {
  const versions = [
    '1',
    '1.0',
    '1.0.0',
    '1.0.0.0',
    '1.0.1',
    '1.0.0.1',
    '1.0a1',
    '1.0b1',
    '1.0rc1',
    '1.0.dev1',
    '1.0a1.dev1',
    '1.0.post1',
    '1.0.post1.dev1',
    '1.0+local',
    '1.0+local.1',
    '1.0.post1+local',
    '1.0a1+x',
    '2.0',
    '1.1',
    '10.0',
    '1.0.post2',
    '1.0.dev2',
    '1.0+post.1',
    '1.0.0.1.0',
  ];
  for (const a of versions) {
    for (const b of versions) {
      const equal = pep440Equal(parsePep440(a)!, parsePep440(b)!);
      const same = value(pep440ToSemver(a)) === value(pep440ToSemver(b));
      assert.is(same, equal, `${a} vs ${b}: equal ${equal}, mapped ${value(pep440ToSemver(a))} / ${value(pep440ToSemver(b))}`);
    }
  }
});

test('chain/unit-names.ts imports nothing from node (chain/ runs in a browser)', () => {
  const src = readFileSync(new URL('../../chain/unit-names.ts', import.meta.url), 'utf8');
  const imports = [...src.matchAll(/^import .* from '([^']+)';$/gm)].map((m) => m[1]);
  assert.equal(imports, ['./block.ts']);
});

test.run();
