/** Configuration (docs/spec/design.md §5): defaults, strict validation naming the key, and refusal at start through `vouch serve`. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { resolveConfig, defaultConfig, loadConfigFile, CONFIG_MAX_BYTES, CONFIG_MAX_SEPARATORS } from '../../gateway/config.ts';
import { VouchError } from '../../chain/errors.ts';
import { vouch } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-config-'));
test.after(() => rmSync(work, { recursive: true, force: true }));

test('the embedded default: 127.0.0.1:8080, ./var/chain, authority mode, 256 MiB mirror', () => {
  const c = defaultConfig('/srv/vouch');
  assert.equal(c.listen, { host: '127.0.0.1', port: 8080 });
  assert.is(c.public_url, 'http://127.0.0.1:8080');
  assert.is(c.chain.dir, '/srv/vouch/var/chain');
  assert.is(c.authority?.key_file, '/srv/vouch/var/authority.pem');
  assert.is(c.mirror.memory_bytes, 268435456);
  assert.is(c.origin.allow_private, false);
});

test('an empty file gives the defaults without authority; relative paths resolve against the file', () => {
  const c = resolveConfig(null, '/etc/vouch', '/etc/vouch/vouch.yaml');
  assert.is(c.authority, null);
  assert.is(c.chain.dir, '/etc/vouch/var/chain');
  const d = resolveConfig(parse('chain: {dir: chain}\nmirror: {disk_dir: cache}\nlisten: {port: 9000}'), '/etc/vouch', null);
  assert.is(d.chain.dir, '/etc/vouch/chain');
  assert.is(d.mirror.disk_dir, '/etc/vouch/cache');
  assert.is(d.public_url, 'http://127.0.0.1:9000');
});

test('authority keys: next_key_file defaults to <key_file>.next (null too), resolves against the file; rollover_days defaults to 30', () => {
  const c = resolveConfig(parse('authority: {key_file: keys/online.pem}'), '/etc/vouch', null);
  assert.equal([c.authority?.next_key_file, c.authority?.rollover_days], ['/etc/vouch/keys/online.pem.next', 30]);
  const d = resolveConfig(parse('authority: {next_key_file: null}'), '/etc/vouch', null);
  assert.is(d.authority?.next_key_file, '/etc/vouch/var/authority.pem.next');
  const e = resolveConfig(parse('authority: {next_key_file: incoming/next.pem, rollover_days: 0}'), '/etc/vouch', null);
  assert.equal([e.authority?.next_key_file, e.authority?.rollover_days], ['/etc/vouch/incoming/next.pem', 0]);
  assert.is(defaultConfig('/srv/vouch').authority?.next_key_file, '/srv/vouch/var/authority.pem.next');
});

const refusals: [string, RegExp][] = [
  ['authority: {rollover_days: -1}', /authority\.rollover_days must be from 0 to 366/],
  ['authority: {next_key_file: 7}', /authority\.next_key_file must be a string/],
  ['listen: {hots: 1}', /listen\.hots is not a known key/],
  ['chain: {remotee: x}', /chain\.remotee is not a known key/],
  ['bogus: 1', /config\.bogus is not a known key/],
  ['listen: {port: "8080"}', /listen\.port must be an integer/],
  ['listen: {port: 70000}', /listen\.port must be from 0 to 65535/],
  ['origin: {allow_private: "yes"}', /origin\.allow_private must be true or false/],
  ['origin: {timeout: -1}', /origin\.timeout must be from/],
  ['mirror: {memory_bytes: 1.5}', /mirror\.memory_bytes must be an integer/],
  ['chain: {public_key: abc}', /chain\.public_key must be base64 of a 32-byte/],
  ['public_url: ftp://x', /public_url must be an absolute http/],
  ['authority: {signer: "bad signer"}', /authority\.signer must be/],
  ['proxy: {routes: [{prefix: /npm/}]}', /routes\[0\]\.origin is required/],
  ['proxy: {routes: [{prefix: npm, origin: "https://r.example/"}]}', /routes\[0\]\.prefix must be a path/],
  ['proxy: {routes: [{prefix: /npm/, origin: "https://r.example/", unendorsed: maybe}]}', /unendorsed must be deny or pass/],
  ['proxy: {routes: [{prefix: /npm/, origin: "https://r.example/", kind: cargo}]}', /routes\[0\]\.kind must be one of plain, npm, pypi, goproxy, maven/],
  ['proxy: {routes: [{prefix: /npm/, origin: "https://r.example/", canonical: "registry.example"}]}', /routes\[0\]\.canonical must be an absolute http/],
  ['proxy: {routes: [{prefix: /npm/, origin: "https://r.example/", metadata_ttl: -1}]}', /routes\[0\]\.metadata_ttl must be from 0/],
  ['proxy: {routes: [{prefix: /npm/, origin: "https://r.example/", metadata_max_stale: "1d"}]}', /routes\[0\]\.metadata_max_stale must be a number/],
  ['listen: [1, 2]', /listen must be a mapping/],
];
for (const [yaml, re] of refusals) {
  test(`refused: ${yaml}`, () => {
    try {
      resolveConfig(parse(yaml), '/x', null);
      assert.unreachable('accepted');
    } catch (e) {
      assert.instance(e, VouchError);
      assert.match((e as Error).message, re);
    }
  });
}

test('duplicate keys and bad YAML are refused', () => {
  const f = join(work, 'dup.yaml');
  writeFileSync(f, 'listen: {port: 1}\nlisten: {port: 2}\n');
  assert.throws(() => loadConfigFile(f), /not valid YAML: the key "listen" appears twice in one mapping \(line 2\)/);
  // Found in a nested flow mapping too (what the fuzzer's growth check grew: the library's own check is quadratic).
  writeFileSync(f, `listen: {port: 1}\nproxy:\n  routes:\n    - {prefix: /pypi/, kind: pypi, ${'oi, '.repeat(3)}origin: http://127.0.0.1:1/}\n`);
  assert.throws(() => loadConfigFile(f), /not valid YAML: the key "oi" appears twice in one mapping \(line 4\)/);
  // Keys equal as text but not as values are two keys, as before (1 and "1"); the schema then names the unknown one.
  writeFileSync(f, 'listen: {port: 1}\n1: a\n"1": b\n');
  assert.throws(() => loadConfigFile(f), /1 is not a known key/);
  writeFileSync(f, 'listen: [\n');
  assert.throws(() => loadConfigFile(f), /not valid YAML: .* at line 2, column 1$/);
  // One error a few bytes (what the growth check grew): the first is named with its place, found once.
  writeFileSync(f, `proxy:\n  routes:\n    - {prefix${': '.repeat(5000)}/npm/}\n`);
  assert.throws(() => loadConfigFile(f), /not valid YAML: Unexpected : in flow map at line 3, column 16$/);
});

test('a config nesting flow collections past 64, with too many nodes or over 1 MiB is refused before the YAML parser sees it', () => {
  const f = join(work, 'deep.yaml');
  // Unclosed flow mappings repeated (what the fuzzer's growth check grew): the parser's time rises faster than the input.
  writeFileSync(f, `listen: {port: 0}\nproxy:\n  routes:\n${'  - {prefix: /npm/, origin: ht'.repeat(2000)}\n`);
  assert.throws(() => loadConfigFile(f), /flow collections \(\{\.\.\.\}, \[\.\.\.\]\) nest 2000 deep, over 64/);
  writeFileSync(f, `listen: ${'['.repeat(64)}${']'.repeat(64)}\n`);
  assert.throws(() => loadConfigFile(f), /listen/); // parsed, then refused by the schema: 64 is allowed
  writeFileSync(f, `listen: {port: 0}\nproxy:\n  routes:\n    - {prefix${': '.repeat(CONFIG_MAX_SEPARATORS)}/npm/}\n`);
  assert.throws(
    () => loadConfigFile(f),
    new RegExp(`has ${CONFIG_MAX_SEPARATORS + 8} lines, flow items and mapping colons, over the ${CONFIG_MAX_SEPARATORS}`),
  );
  writeFileSync(f, `listen: {port: 0}\n${'#'.repeat(CONFIG_MAX_BYTES)}\n`);
  assert.throws(() => loadConfigFile(f), new RegExp(`is ${CONFIG_MAX_BYTES + 19} bytes, over the ${CONFIG_MAX_BYTES}`));
  const r = vouch(['serve', '--config', f]);
  assert.is(r.status, 2);
  assert.is(r.stderr.trim().split('\n').length, 1, r.stderr);
});

test('vouch serve refuses a bad config at start: one line naming the key, exit 2', () => {
  const f = join(work, 'bad.yaml');
  writeFileSync(f, 'listen: {port: 0}\nmirror: {memroy_bytes: 5}\n');
  const r = vouch(['serve', '--config', f]);
  assert.is(r.status, 2);
  assert.is(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /mirror\.memroy_bytes is not a known key/);
  const missing = vouch(['serve', '--config', join(work, 'nope.yaml')]);
  assert.is(missing.status, 2);
  assert.match(missing.stderr, /cannot read config/);
});

test.run();
