/**
 * The shared vectors written out as real chain repositories and checked
 * through `vouch verify --json`: the valid chain passes; each invalid case
 * fails with exactly the expected code and index. Parallel and inline
 * verification must agree.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChainRepo } from '../../store/chain-repo.ts';
import { loadChainVectors } from '../helpers/vectors.ts';
import { vouch } from '../helpers/processes.ts';

const V = loadChainVectors();
const work = mkdtempSync(join(tmpdir(), 'vouch-vectors-'));
const pretty = (x: unknown) => JSON.stringify(x, null, 2) + '\n';
const commit = { message: 'vectors\n', authorName: 'vectors', authorEmail: 'vectors@vouch.invalid', timestamp: 1_790_000_000 };

async function writeChain(name: string, blocks: unknown[], checkpoint: unknown): Promise<string> {
  const dir = join(work, name);
  await ChainRepo.init(
    dir,
    blocks.map((b, i) => ({ index: i, content: pretty(b) })),
    pretty(checkpoint),
    commit,
  );
  return dir;
}

test.after(() => rmSync(work, { recursive: true, force: true }));

test('the valid vector chain verifies through vouch verify --json, pinned', async () => {
  const dir = await writeChain('valid', V.valid.blocks, V.valid.checkpoint);
  const r = vouch(['verify', '--chain', dir, '--json', '--public-key', V.key.public_key]);
  assert.is(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.is(out.ok, true);
  assert.is(out.blocks, 3);
  assert.is(out.head, V.valid.checkpoint.head);
});

for (const c of V.invalid) {
  test(`vector ${c.name} through vouch verify --json: ${c.expect.code} at ${c.expect.index}`, async () => {
    const dir = await writeChain(c.name, c.blocks, c.checkpoint ?? V.valid.checkpoint);
    const args = ['verify', '--chain', dir, '--json', ...(c.pinned_public_key ? ['--public-key', c.pinned_public_key] : [])];
    for (const threads of ['0', '2']) {
      const r = vouch([...args, '--threads', threads]);
      assert.is(r.status, 1, `${c.name} (threads ${threads}): ${r.stdout} ${r.stderr}`);
      const out = JSON.parse(r.stdout);
      assert.is(out.code, c.expect.code, out.message);
      assert.is(out.index, c.expect.index, out.message);
    }
  });
}

test.run();
