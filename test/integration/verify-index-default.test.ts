/**
 * `vouch verify` checks the completeness index by default (issue 37 item 4):
 * a clone whose committed note carries a wrong `vouch-index/v1` root fails
 * without any flag (exit 1, `checkpoint_mismatch at checkpoint`), passes
 * with `--no-index`, and still fails with the old `--index`; a note without
 * the line (a chain from before the index) passes, the index reported
 * absent. Real chain repositories (ChainRepo.init, real git), the real CLI.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBlockFile, formatCheckpointFile, type Block } from '../../chain/block.ts';
import { base64Encode } from '../../chain/encoding.ts';
import { CompletenessIndex } from '../../chain/index-tree.ts';
import { indexExtensionLine } from '../../chain/index-proof.ts';
import { nodeBackend as c } from '../../platform/node-crypto.ts';
import { signNoteText } from '../../platform/note-signer.ts';
import { ChainRepo } from '../../store/chain-repo.ts';
import { defaultOrigin, entryOf } from '../../store/chain-append.ts';
import { TreeEdge } from '../../store/tree-edge.ts';
import { buildFeatureChain } from '../helpers/chain-fixture.ts';
import { vouch } from '../helpers/processes.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-verify-index-'));
const chain = buildFeatureChain();
const pub = base64Encode(chain.signer.publicKey);
const rootOf = (blocks: readonly Block[]): Uint8Array => {
  const idx = new CompletenessIndex(c);
  for (const b of blocks) idx.addBlock(b, (h) => blocks.findIndex((x) => x.record_hash === h));
  return idx.root();
};
const right = rootOf(chain.blocks);
// the index of an older state of the same log: what a gateway hiding the newest block would commit
const stale = rootOf(chain.blocks.slice(0, -1));

/** A chain repository of the feature chain whose note carries `extensions`. */
async function repoWith(name: string, extensions: string[]): Promise<string> {
  const dir = join(work, name);
  const edge = TreeEdge.empty(c);
  for (const b of chain.blocks) edge.append(entryOf(b.record_hash));
  const note = signNoteText(chain.signer, defaultOrigin('vouch-test'), chain.blocks.length, edge.root(), extensions);
  await ChainRepo.init(
    dir,
    chain.blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    { json: formatCheckpointFile(chain.checkpoint), note },
    { message: 'fixture\n', authorName: 't', authorEmail: 't@vouch.invalid', timestamp: 1_790_000_000 },
  );
  return dir;
}

let good = '';
let bad = '';
let none = '';

test.before(async () => {
  assert.is.not(base64Encode(right), base64Encode(stale));
  good = await repoWith('good', [indexExtensionLine(right)]);
  bad = await repoWith('bad', [indexExtensionLine(stale)]);
  none = await repoWith('none', []);
});

test.after(() => rmSync(work, { recursive: true, force: true }));

test('without flags: the note whose index root is right passes, the root named', () => {
  const j = vouch(['verify', '--chain', good, '--public-key', pub, '--json']);
  assert.is(j.status, 0, j.stderr);
  const s = JSON.parse(j.stdout);
  assert.is(s.index_checked, true);
  assert.is(s.index_root, base64Encode(right));
  const t = vouch(['verify', '--chain', good, '--public-key', pub]);
  assert.is(t.status, 0, t.stderr);
  assert.match(t.stdout, `index ok (${base64Encode(right)})`);
});

test('without flags: a note committing the index of an older state fails, exit 1, naming the line', () => {
  const t = vouch(['verify', '--chain', bad, '--public-key', pub]);
  assert.is(t.status, 1, t.stdout + t.stderr);
  assert.match(t.stderr, /^checkpoint_mismatch at checkpoint: checkpoint\.note's vouch-index\/v1 root /);
  assert.is(t.stderr.trim().split('\n').length, 1);
  const j = vouch(['verify', '--chain', bad, '--public-key', pub, '--json']);
  assert.is(j.status, 1);
  const s = JSON.parse(j.stdout);
  assert.is(s.code, 'checkpoint_mismatch');
  assert.is(s.evidence.note_index_root, base64Encode(stale));
  assert.is(s.evidence.index_root, base64Encode(right));
});

test('--no-index skips the check (the summary says so); the old --index still checks', () => {
  const t = vouch(['verify', '--chain', bad, '--public-key', pub, '--no-index']);
  assert.is(t.status, 0, t.stderr);
  assert.match(t.stdout, 'index not checked (--no-index)');
  const j = vouch(['verify', '--chain', bad, '--public-key', pub, '--no-index', '--json']);
  assert.is(j.status, 0, j.stderr);
  assert.is(JSON.parse(j.stdout).index_checked, false);
  assert.is(vouch(['verify', '--chain', bad, '--public-key', pub, '--index']).status, 1);
  const both = vouch(['verify', '--chain', bad, '--index', '--no-index']);
  assert.is(both.status, 2);
  assert.match(both.stderr, '--index and --no-index exclude each other');
});

test('a note without the line (a chain from before the index) passes, the index reported absent; --index recomputes it anyway', () => {
  const t = vouch(['verify', '--chain', none, '--public-key', pub]);
  assert.is(t.status, 0, t.stderr);
  assert.match(t.stdout, 'index absent');
  const j = JSON.parse(vouch(['verify', '--chain', none, '--public-key', pub, '--json']).stdout);
  assert.is(j.index_checked, false);
  assert.is(j.index_root, null);
  const f = JSON.parse(vouch(['verify', '--chain', none, '--public-key', pub, '--json', '--index']).stdout);
  assert.is(f.index_checked, true);
  assert.is(f.index_root, null);
});

test.run();
