/**
 * `npm start` until the gateway lands: a short demo on the embedded default
 * paths under ./var/demo — creates an authority key and a chain (first run),
 * endorses a freshly written artifact, verifies the chain and checks the
 * file, running the real `vouch` commands and showing each one.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const dir = join(root, 'var', 'demo');
const key = join(dir, 'authority.pem');
const chain = join(dir, 'chain');
mkdirSync(dir, { recursive: true });

function vouch(...args: string[]): string {
  console.log(`$ npx vouch ${args.map((a) => (/[\s"']/.test(a) ? JSON.stringify(a) : a)).join(' ')}`);
  const r = spawnSync(process.execPath, [join(root, 'tools', 'vouch.js'), ...args], { cwd: root, encoding: 'utf8' });
  process.stdout.write(r.stdout);
  process.stderr.write(r.stderr);
  if (r.status !== 0) process.exit(r.status ?? 2);
  return r.stdout;
}

if (!existsSync(key)) vouch('keygen', '--out', key);
if (!existsSync(chain)) vouch('init', '--chain', chain, '--key', key, '--signer', 'vouch-dev', '--uns', 'demo/provenance-chain');
const n = Date.now();
const version = `0.1.${Math.floor(n / 1000)}`;
const file = join(dir, `hello-${version}.txt`);
writeFileSync(file, `hello from vouch ${version}\n`);
const url = `https://artifacts.example.org/demo/hello-${version}.txt`;
vouch(
  'endorse',
  '--chain',
  chain,
  '--key',
  key,
  '--url',
  url,
  '--file',
  file,
  '--name',
  'demo/hello',
  '--semver',
  version,
  '--license',
  'MIT',
  '--comment',
  'demo endorsement — “hello”',
);
vouch('verify', '--chain', chain);
vouch('check', '--chain', chain, '--url', url, file);
writeFileSync(file + '.tampered', `hello from vouch ${version}!\n`);
console.log(`$ npx vouch check --chain ${chain} --url ${url} ${file}.tampered   # expected to fail`);
const r = spawnSync(process.execPath, [join(root, 'tools', 'vouch.js'), 'check', '--chain', chain, '--url', url, file + '.tampered'], {
  cwd: root,
  encoding: 'utf8',
});
process.stdout.write(r.stderr);
console.log(`(exit ${r.status})\n\nThe chain is a plain git repository: try  git -C ${chain} log --stat -3`);
