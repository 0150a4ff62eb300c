/**
 * `vouch verify` reads git objects only (docs/decisions/one-layout.md), so a
 * working tree edited after the checkout is a warning on stderr, not a
 * failure (issue 33; docs/guide/auditing.md): one line naming how many files
 * differ from HEAD and the first, exit 0; a committed forgery still fails; a
 * clean clone or chain says nothing; no working tree is a note. The check
 * runs git in a directory nobody vouches for: a filter driver or fsmonitor
 * its configuration names is never run.
 * Owns: nothing outside its temporary directory.
 * Trusts: the installed git CLI (clones and commits as a user or forger makes them).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBlockFile, type Block } from '../../chain/index.ts';
import { blockPath } from '../../chain/layout.ts';
import { buildLongChain, initChainRepo } from '../helpers/chain-fixture.ts';
import { forgeChainFiles } from '../helpers/chain-files.ts';
import { gitIn, vouch } from '../helpers/processes.ts';

const N = 40;
const work = mkdtempSync(join(tmpdir(), 'vouch-worktree-'));
const chain = join(work, 'chain'); // as vouch writes it: the sparse layout
const clone = join(work, 'clone'); // a plain git clone: every block file checked out
const { blocks, checkpoint } = buildLongChain(N);
const WARNING = /^vouch verify: warning: the working tree differs from HEAD in (\d+) files? \(first: ([^)]+)\); verified the committed blocks/m;

function verify(dir: string, ...extra: string[]): { status: number | null; stdout: string; stderr: string } {
  return vouch(['verify', '--chain', dir, '--threads', '0', ...extra], {}, 60_000);
}

test.before(async () => {
  await initChainRepo(chain, blocks, checkpoint);
  gitIn(work, 'clone', '-q', chain, clone);
});
test.after(() => rmSync(work, { recursive: true, force: true }));

test('a clean chain and a clean clone: exit 0 and no warning', () => {
  for (const dir of [chain, clone]) {
    const r = verify(dir);
    assert.is(r.status, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^ok: ${N} blocks`));
    assert.not.match(r.stderr, /working tree/, `${dir}: ${r.stderr}`);
    const j = JSON.parse(verify(dir, '--json').stdout);
    assert.equal(j.working_tree, { compared: true, differs: 0, first: null });
  }
});

test('a block file edited in the working tree of a clone: one warning line naming it, exit 0 (the committed block is what was verified)', () => {
  const path = blockPath(7);
  const forged: Block = structuredClone(blocks[7]!);
  (forged as { comment?: string }).comment = 'edited after the checkout';
  writeFileSync(join(clone, path), formatBlockFile(forged));
  const r = verify(clone);
  assert.is(r.status, 0, r.stderr);
  const m = WARNING.exec(r.stderr);
  assert.ok(m, `no warning: ${r.stderr}`);
  assert.is(m![1], '1');
  assert.is(m![2], path);
  assert.is(r.stderr.match(/working tree/g)!.length, 1, 'one line');
  // Two more: a deleted block file and an untracked file; the count says 3.
  rmSync(join(clone, blockPath(8)));
  writeFileSync(join(clone, 'notes.txt'), 'mine\n');
  const r3 = verify(clone);
  assert.is(r3.status, 0, r3.stderr);
  assert.is(WARNING.exec(r3.stderr)?.[1], '3', r3.stderr);
  const j = JSON.parse(verify(clone, '--json').stdout);
  assert.is(j.ok, true);
  assert.is(j.working_tree.differs, 3);
  gitIn(clone, 'checkout', '-q', '--', '.');
  rmSync(join(clone, 'notes.txt'));
  assert.not.match(verify(clone).stderr, /working tree/);
});

test('an untracked file beside the root files of a sparse chain: the warning; a committed forgery still fails', () => {
  writeFileSync(join(chain, 'extra.json'), '{}\n');
  const r = verify(chain);
  assert.is(r.status, 0, r.stderr);
  assert.is(WARNING.exec(r.stderr)?.[2], 'extra.json', r.stderr);
  rmSync(join(chain, 'extra.json'));

  const forged: Block = structuredClone(blocks[5]!);
  (forged as { comment?: string }).comment = 'forged';
  const before = gitIn(chain, 'rev-parse', 'main').trim();
  forgeChainFiles(chain, { [blockPath(5)]: formatBlockFile(forged) });
  const f = verify(chain);
  assert.is(f.status, 1, f.stderr);
  assert.match(f.stderr, /^record_hash_mismatch at block 5/);
  gitIn(chain, 'update-ref', 'refs/heads/main', before);
  assert.is(verify(chain).status, 0);
});

test('a filter driver and an fsmonitor the clone configures are not run; the edit is still seen', () => {
  const marker = join(work, 'ran');
  writeFileSync(join(clone, '.git', 'info', 'attributes'), '* filter=evil\n');
  gitIn(clone, 'config', 'filter.evil.clean', `touch ${marker}-clean; cat`);
  gitIn(clone, 'config', 'filter.evil.process', `touch ${marker}-process`);
  gitIn(clone, 'config', 'filter.evil.required', 'true');
  gitIn(clone, 'config', 'core.fsmonitor', `touch ${marker}-fsmonitor; false`);
  writeFileSync(join(clone, blockPath(3)), 'edited\n');
  const r = verify(clone);
  assert.is(r.status, 0, r.stderr);
  assert.is(WARNING.exec(r.stderr)?.[2], blockPath(3), r.stderr);
  for (const k of ['clean', 'process', 'fsmonitor']) assert.not.ok(existsSync(`${marker}-${k}`), `the ${k} command ran`);
  // git itself would have run them (the configuration works).
  spawnSync('git', ['-C', clone, '-c', 'core.fsmonitor=false', 'status', '--porcelain'], { encoding: 'utf8' }); // fails: the process filter is no filter
  assert.ok(existsSync(`${marker}-clean`) || existsSync(`${marker}-process`), 'the filter is configured');
  gitIn(clone, 'config', '--unset', 'core.fsmonitor');
  gitIn(clone, 'config', '--remove-section', 'filter.evil');
  rmSync(join(clone, '.git', 'info', 'attributes'));
  gitIn(clone, 'checkout', '-q', '--', '.');
});

test('no working tree (core.bare): a note that nothing was compared, exit 0', () => {
  gitIn(clone, 'config', 'core.bare', 'true');
  const r = verify(clone);
  gitIn(clone, 'config', 'core.bare', 'false');
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stderr, /^note: the working tree was not compared with HEAD \(a bare repository has no working tree\)/m);
  assert.not.match(r.stderr, /warning: the working tree/);
});

test.run();
