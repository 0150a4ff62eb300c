/**
 * Auditing an untrusted clone is safe (issue 14, item 10; docs/spec/design.md §1.7
 * "Reading a chain (amended)"): whatever a chain directory holds, `vouch
 * verify` (and the gateway's cold start, the same code) plans no work from an
 * unverified checkpoint size, reads only regular files within the 16 MiB
 * bound, decodes strictly, refuses repeated member names, verifies what the
 * branch commits rather than a working tree that differs from it, refuses a
 * revoke of anything but an earlier endorse block, and names a block index
 * in every failure. Each attack runs inline and with worker threads (batches
 * of 250, so a failure sits inside a worker's batch), where the paths differ.
 * Plus item 13's part: partial `tmp_obj_*` files are removed when a writer
 * opens the chain.
 *
 * Owns: nothing outside its temporary directory.
 * Trusts: the installed git CLI (commits and checkouts as a forger would
 * make them), the fixture signer.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, unlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  buildAuthorityBlock,
  buildCheckpoint,
  buildEndorseBlock,
  buildRevokeBlock,
  artifactHashOf,
  computeRecordHash,
  formatBlockFile,
  formatCheckpointFile,
  VouchError,
  type Block,
} from '../../chain/index.ts';
import { utf8 } from '../../chain/encoding.ts';
import { readJson } from '../../chain/block.ts';
import fc from 'fast-check';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { ChainRepo, blockPath } from '../../store/chain-repo.ts';
import { verifyDirectory } from '../../store/parallel-verify.ts';
import { ChainState } from '../../gateway/chain/verified-state.ts';
import { T0, testSigner } from '../helpers/chain-fixture.ts';
import { gitIn, vouch } from '../helpers/processes.ts';

const N = 2_050; // above the inline threshold (2,000): worker threads take part
const K = 300; // the attacked block: inside the second batch of 250
const FFFD_AT = 700; // a block whose signed comment holds U+FFFD
const REVOKE_FAR = 1_400; // a valid revoke of block 7 (an earlier batch: the worker defers it to the main thread)
const REVOKE_NEAR = 1_410; // a valid revoke of block 1_405 (in its own batch)

const signer = testSigner();
const b = nodeBackend;
const blocks: Block[] = [buildAuthorityBlock({ signer, backend: b, now: T0, uns: 'acme/chain' })];
for (let i = 1; i < N; i++) {
  const prev = blocks[i - 1]!;
  const now = T0 + i * 1000;
  if (i === REVOKE_FAR || i === REVOKE_NEAR) {
    blocks.push(buildRevokeBlock({ prev, target: blocks[i === REVOKE_FAR ? 7 : 1_405]!, signer, backend: b, now }));
    continue;
  }
  blocks.push(
    buildEndorseBlock({
      prev,
      signer,
      backend: b,
      now,
      entries: [
        {
          url: `https://a.example/pkg/${i}.tgz`,
          artifactHash: artifactHashOf(b, 'sha256', utf8(`artifact ${i}`)),
          name: 'acme/pkg',
          semver: `1.${i}.0`,
          license: 'MIT',
          comment: i === FFFD_AT ? 'build \uFFFD (a replacement character, signed)' : `build ${i}`,
        },
      ],
    }),
  );
}
const checkpoint = buildCheckpoint({ head: blocks[N - 1]!, signer, now: T0 + N * 1000 });

const work = mkdtempSync(join(tmpdir(), 'vouch-untrusted-'));
const dir = join(work, 'chain');
let BASE = '';

const git = (...args: string[]): string => gitIn(dir, '-c', 'user.name=forger', '-c', 'user.email=forger@vouch.invalid', ...args);
const file = (i: number) => join(dir, blockPath(i));
const commitAll = (msg: string) => {
  git('add', '-A');
  git('commit', '-q', '--no-verify', '-m', msg);
};
/** Back to the chain as built: branch, index and working tree. */
const reset = () => {
  git('sparse-checkout', 'disable'); // an open for writing converted it: every file checked out again
  git('reset', '-q', '--hard', BASE);
  git('clean', '-q', '-fdx');
};

/** `ok <size>` or `<code>@<index>`, and the message. */
async function outcome(threads: number): Promise<{ r: string; message: string }> {
  try {
    const repo = await ChainRepo.open(dir, { repair: false });
    const res = await verifyDirectory(repo, { threads, batchSize: 250 });
    return { r: `ok ${res.state.size}`, message: '' };
  } catch (e) {
    if (e instanceof VouchError) return { r: `${e.code}@${e.index ?? 'null'}`, message: e.message };
    throw e;
  }
}

/** The same outcome inline and with two worker threads; returns the inline message. */
async function expectBoth(want: string, what: string): Promise<string> {
  const inline = await outcome(0);
  assert.is(inline.r, want, `inline, ${what}: ${inline.message}`);
  const threaded = await outcome(2);
  assert.is(threaded.r, want, `2 threads, ${what}: ${threaded.message}`);
  return inline.message;
}

/** vouch verify --json in a child process (bounded in time): exit status, code, index. */
function cli(threads: string, timeoutMs = 60_000): { status: number | null; code?: string; index?: number | null; stderr: string } {
  const r = vouch(['verify', '--chain', dir, '--json', '--threads', threads], {}, timeoutMs);
  let out: { code?: string; index?: number | null } = {};
  try {
    out = JSON.parse(r.stdout);
  } catch {
    /* crashed */
  }
  return { status: r.status, code: out.code, index: out.index, stderr: r.stderr.slice(0, 300) };
}

/** Blocks `from`.. replaced by `replacement` and re-linked (as the authority would have signed them), with a new checkpoint; committed. */
function commitRewritten(from: number, replacement: Block): void {
  const chain = [...blocks.slice(0, from), replacement];
  for (let i = from + 1; i < N; i++) {
    const next: any = structuredClone(blocks[i]!);
    next.prev_hash = chain[i - 1]!.record_hash;
    next.record_hash = computeRecordHash(next, b);
    chain.push(next as Block);
  }
  for (let i = from; i < N; i++) writeFileSync(file(i), formatBlockFile(chain[i]!));
  writeFileSync(join(dir, 'checkpoint.json'), formatCheckpointFile(buildCheckpoint({ head: chain[N - 1]!, signer, now: T0 + N * 1000 })));
  commitAll(`rewrite from block ${from}`);
}

test.before(async () => {
  await ChainRepo.init(
    dir,
    blocks.map((x) => ({ index: x.index, content: formatBlockFile(x) })),
    formatCheckpointFile(checkpoint),
    { message: 'chain\n', authorName: 'authority', authorEmail: 'authority@vouch.invalid', timestamp: 1_790_000_000 },
  );
  // Every file checked out, as a plain `git clone` has it: the forger's commits and working-tree edits below.
  git('sparse-checkout', 'disable');
  BASE = git('rev-parse', 'HEAD').trim();
});
test.after(() => rmSync(work, { recursive: true, force: true }));

test('the chain as built verifies inline and with workers (valid revokes of blocks in earlier and in the same batch)', async () => {
  await expectBoth(`ok ${N}`, 'clean chain');
});

// --- a checkpoint size is trusted for nothing before it verifies

test('a committed checkpoint "size": 1e12 or 1e400 plans no work: vouch verify ends with checkpoint_mismatch, inline and with threads', () => {
  // Only runs with threads read the size (to plan batches): 1e400 is checked there.
  for (const [size, runs] of [
    ['1e12', ['0', '2']],
    ['1e400', ['2']],
  ] as const) {
    reset();
    const cp = join(dir, 'checkpoint.json');
    writeFileSync(cp, readFileSync(cp, 'utf8').replace(`"size": ${N}`, `"size": ${size}`));
    commitAll(`checkpoint size ${size}`);
    for (const threads of runs) {
      const r = cli(threads, 45_000);
      assert.is(r.status, 1, `size ${size}, --threads ${threads}: exit ${r.status} ${r.stderr}`);
      assert.is(r.code, 'checkpoint_mismatch', `size ${size}, --threads ${threads}`);
    }
  }
});

// --- only regular files, never more than the bound

test('a block path of the working tree that is a symbolic link to /dev/zero, or a FIFO: not read (vouch reads git objects), promptly (vouch verify, inline and threads)', () => {
  for (const kind of ['/dev/zero', 'fifo']) {
    reset();
    unlinkSync(file(K));
    if (kind === 'fifo') spawnSync('mkfifo', [file(K)]);
    else symlinkSync(kind, file(K));
    for (const threads of ['0', '2']) {
      const r = cli(threads, 30_000);
      assert.is(r.status, 0, `${kind}, --threads ${threads}: exit ${r.status} ${r.stderr}`);
    }
  }
});

test('a block path that is a symbolic link to the same block inside or outside the clone, or to /etc/hostname: not read in the working tree; committed, malformed at that block', async () => {
  const outside = join(work, 'outside.json');
  const inside = join(dir, 'copy.json');
  const secret = join(work, 'secret');
  writeFileSync(secret, 'very-secret-host\n');
  for (const [what, target] of [
    ['inside the clone', inside],
    ['outside the clone', outside],
    ['a file of another owner (like /etc/hostname)', secret],
  ] as const) {
    reset();
    copyFileSync(file(K), outside);
    copyFileSync(file(K), inside);
    unlinkSync(file(K));
    symlinkSync(target, file(K));
    await expectBoth(`ok ${N}`, `symlink to a file ${what} (the working tree is not read)`);
  }
  // Committed as a link (mode 120000 on the branch): the same.
  reset();
  unlinkSync(file(K));
  symlinkSync(outside, file(K));
  commitAll('a link at a block path');
  const message = await expectBoth(`malformed@${K}`, 'a committed symbolic link');
  assert.not.match(message, /very-secret-host/);
});

test('a block file of the working tree larger than 16 MiB is not read, inline and with threads', async () => {
  reset();
  writeFileSync(file(K), '');
  spawnSync('truncate', ['-s', String(64 << 20), file(K)]); // sparse: 64 MiB of NUL
  await expectBoth(`ok ${N}`, 'a 64 MiB block file in the working tree');
});

// --- I-JSON: a repeated member name is malformed, in blocks and checkpoints

test('a repeated member name in a block ("comment":"FORGED" before the signed one, a nested artifact_url) is malformed at that block', async () => {
  reset();
  const text = readFileSync(file(K), 'utf8');
  writeFileSync(file(K), text.replace('{\n', '{\n  "comment": "FORGED",\n'));
  commitAll('duplicate comment');
  let message = await expectBoth(`malformed@${K}`, 'a repeated top-level member');
  assert.match(message, /repeats the member name "comment"/);
  reset();
  writeFileSync(
    file(K + 1),
    readFileSync(file(K + 1), 'utf8').replace('"artifact_hash"', '"artifact_url": "https://evil.example/x.tgz",\n        "artifact_hash"'),
  );
  commitAll('duplicate nested member');
  message = await expectBoth(`malformed@${K + 1}`, 'a repeated member inside an endorsement');
  assert.match(message, /repeats the member name "artifact_url"/);
});

test('a second "size" in the checkpoint is checkpoint_mismatch (a malformed checkpoint), inline and with threads', async () => {
  reset();
  const cp = join(dir, 'checkpoint.json');
  writeFileSync(cp, readFileSync(cp, 'utf8').replace('{\n', '{\n  "size": 7,\n'));
  commitAll('duplicate size');
  const message = await expectBoth('checkpoint_mismatch@null', 'a repeated checkpoint member');
  assert.match(message, /malformed checkpoint: an object repeats the member name "size"/);
});

test('readJson finds a repeated member name exactly, at any depth, whatever the escapes, colons and whitespace (generated)', () => {
  // A JSON AST whose objects may repeat names, written out with random escapes and spacing.
  type J = { o: [string, J][] } | { a: J[] } | { s: string } | { n: number } | { l: 'true' | 'false' | 'null' };
  const name = fc.constantFrom('a', 'a:b', ':', 'x"y', 'x\\', '__proto__', '0', 'é', '\u2028', '');
  const { j } = fc.letrec<{ j: J }>((tie) => ({
    j: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      fc.record({ s: name }),
      fc.record({ n: fc.integer() }),
      fc.record({ l: fc.constantFrom('true', 'false', 'null') as fc.Arbitrary<'true' | 'false' | 'null'> }),
      fc.record({ o: fc.array(fc.tuple(name, tie('j')), { maxLength: 5 }) }),
      fc.record({ a: fc.array(tie('j'), { maxLength: 3 }) }),
    ),
  }));
  const ws = fc.constantFrom('', ' ', '\n  ', '\t');
  const style = fc.record({ escape: fc.boolean(), ws });
  const str = (s: string, escape: boolean) =>
    escape ? '"' + [...s].map((c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')).join('') + '"' : JSON.stringify(s);
  const write = (v: J, st: { escape: boolean; ws: string }): string => {
    if ('o' in v) return '{' + v.o.map(([k, x]) => `${st.ws}${str(k, st.escape)}${st.ws}:${st.ws}${write(x, st)}`).join(',') + st.ws + '}';
    if ('a' in v) return '[' + v.a.map((x) => st.ws + write(x, st)).join(',') + ']';
    if ('s' in v) return str(v.s, st.escape);
    return 'n' in v ? String(v.n) : v.l;
  };
  const repeats = (v: J): boolean =>
    'o' in v ? new Set(v.o.map(([k]) => k)).size < v.o.length || v.o.some(([, x]) => repeats(x)) : 'a' in v ? v.a.some(repeats) : false;
  let withRepeats = 0;
  fc.assert(
    fc.property(j, style, (v, st) => {
      const text = write(v, st);
      const r = readJson(text);
      if (repeats(v)) withRepeats++;
      return (
        (r.error === null) === !repeats(v) &&
        (r.error === null ? JSON.stringify(r.value) === JSON.stringify(JSON.parse(text)) : /repeats the member name/.test(r.error))
      );
    }),
    { numRuns: 4000, seed: 14 },
  );
  assert.ok(withRepeats > 200, `only ${withRepeats} generated texts repeat a name`);
});

// --- strict UTF-8

test('an invalid UTF-8 byte where U+FFFD was signed is malformed at that block (worker and main thread alike)', async () => {
  reset();
  const bytes = readFileSync(file(FFFD_AT));
  const at = bytes.indexOf(Buffer.from('\uFFFD', 'utf8'));
  assert.ok(at > 0);
  writeFileSync(file(FFFD_AT), Buffer.concat([bytes.subarray(0, at), Buffer.from([0xff]), bytes.subarray(at + 3)]));
  commitAll('invalid UTF-8');
  const message = await expectBoth(`malformed@${FFFD_AT}`, 'a 0xFF byte');
  assert.match(message, /not valid UTF-8/);
});

// --- what the branch commits, not the working tree

test('a forged block committed with the original restored in the working tree: the committed forgery fails at that block', async () => {
  reset();
  const original = readFileSync(file(K));
  const forged: any = structuredClone(blocks[K]!);
  forged.payload.endorsements[0].artifact_hash = artifactHashOf(b, 'sha256', utf8('evil'));
  writeFileSync(file(K), formatBlockFile(forged as Block));
  commitAll('forged block');
  writeFileSync(file(K), original); // uncommitted: every clone gets the forgery
  await expectBoth(`record_hash_mismatch@${K}`, 'a working tree that differs from the branch');
});

test('a forged checkpoint committed with the original restored, a newer valid block and checkpoint left untracked, the last block missing from the working tree', async () => {
  reset();
  const cp = join(dir, 'checkpoint.json');
  const original = readFileSync(cp);
  writeFileSync(cp, formatCheckpointFile(buildCheckpoint({ head: blocks[N - 2]!, signer, now: T0 })));
  commitAll('forged checkpoint');
  writeFileSync(cp, original);
  assert.match(
    await expectBoth('checkpoint_mismatch@null', 'a working-tree checkpoint that differs from the branch'),
    /checkpoint\.json is not what branch main commits/,
  );

  reset();
  const next = buildEndorseBlock({
    prev: blocks[N - 1]!,
    signer,
    backend: b,
    now: T0 + (N + 1) * 1000,
    entries: [
      { url: 'https://a.example/untracked.tgz', artifactHash: artifactHashOf(b, 'sha256', utf8('u')), name: 'acme/pkg', semver: '9.9.9', license: 'MIT' },
    ],
  });
  writeFileSync(file(N), formatBlockFile(next));
  writeFileSync(cp, formatCheckpointFile(buildCheckpoint({ head: next, signer, now: T0 + (N + 1) * 1000 })));
  // The untracked block is not read; the working-tree checkpoint naming it is not what the branch commits.
  assert.match(await expectBoth('checkpoint_mismatch@null', 'an untracked valid block'), /checkpoint\.json is not what branch main commits/);

  reset();
  unlinkSync(file(N - 1));
  await expectBoth(`ok ${N}`, 'the last committed block missing from the working tree (not read)');
});

// --- a revoke names an earlier endorse block

test("a revoke naming no block, the authority block or another revoke is malformed at the revoke (in a worker batch and as a batch's first block)", async () => {
  const fake = { ...blocks[5]!, record_hash: 'ab'.repeat(32) };
  for (const at of [2_040, 2_015]) {
    for (const [what, target] of [
      ['no block', fake],
      ['the authority block', blocks[0]!],
      ['another revoke', blocks[REVOKE_FAR]!],
    ] as const) {
      reset();
      commitRewritten(at, buildRevokeBlock({ prev: blocks[at - 1]!, target, signer, backend: b, now: T0 + at * 1000 }));
      const message = await expectBoth(`malformed@${at}`, `a revoke of ${what} at ${at}`);
      assert.match(message, /not an earlier endorse block/);
    }
  }
  // A valid revoke of an endorse block far back, at the same places: accepted.
  reset();
  commitRewritten(2_040, buildRevokeBlock({ prev: blocks[2_039]!, target: blocks[3]!, signer, backend: b, now: T0 + 2_040_000 }));
  await expectBoth(`ok ${N}`, 'a valid revoke of block 3');
});

// --- every failure names a block index

test('a misplaced block file and stray files under blocks/ are malformed at the index they would hold (vouch verify prints it)', async () => {
  reset();
  mkdirSync(join(dir, 'blocks/000/001'), { recursive: true });
  copyFileSync(file(5), join(dir, 'blocks/000/001/000000005.json'));
  await expectBoth(`ok ${N}`, 'a copy of block 5 in another shard, uncommitted (not read)');
  commitAll('a misplaced copy');
  assert.match(await expectBoth('malformed@5', 'a committed copy of block 5 in another shard'), /blocks\/000\/001\/000000005\.json/);
  const r = vouch(['verify', '--chain', dir, '--threads', '2']);
  assert.is(r.status, 1);
  assert.match(r.stderr, /^malformed at block 5: .*blocks\/000\/001\/000000005\.json/);

  reset();
  writeFileSync(join(dir, 'blocks', 'README'), 'notes\n');
  commitAll('a committed stray file');
  assert.match(await expectBoth(`malformed@${N}`, 'a committed stray after the last block'), /blocks\/README/);

  reset();
  git('rm', '-q', blockPath(K));
  git('commit', '-q', '--no-verify', '-m', 'a block removed');
  assert.match(await expectBoth(`index_gap@${K}`, 'a missing block file'), new RegExp(`there is no ${blockPath(K)}`));
});

// --- item 13: partial object files after a full disk

test('opening the chain to write removes the tmp_obj_* files interrupted writes left (not those of a live writer, nor a fresh one of git), opening to read removes none', async () => {
  reset();
  const fan = join(dir, '.git', 'objects', 'ab');
  mkdirSync(fan, { recursive: true });
  const dead = join(fan, 'tmp_obj_vouch_999999999_3'); // a process that is gone
  const live = join(fan, `tmp_obj_vouch_${process.ppid}_0`); // a live process
  const oldGit = join(fan, 'tmp_obj_Xy12Ab');
  const freshGit = join(dir, '.git', 'objects', 'tmp_obj_Zz99Qq');
  for (const p of [dead, live, oldGit, freshGit]) writeFileSync(p, 'partial');
  const hourAgo = new Date(Date.now() - 3_600_000);
  utimesSync(oldGit, hourAgo, hourAgo);
  await ChainRepo.open(dir, { repair: false });
  assert.ok(
    [dead, live, oldGit, freshGit].every((p) => existsSync(p)),
    'a read-only open removed something',
  );
  const repo = await ChainRepo.open(dir);
  assert.not.ok(existsSync(dead), "the dead writer's file stayed");
  assert.not.ok(existsSync(oldGit), "git's old file stayed");
  assert.ok(existsSync(live) && existsSync(freshGit), 'a file that may still be written was removed');
  assert.ok(repo.repairs.some((r) => r.path === '.git/objects/ab/tmp_obj_vouch_999999999_3' && r.action === 'removed'));
  for (const p of [live, freshGit]) rmSync(p);
});

// --- the gateway's cold start is the same code

test("the gateway's cold start (ChainState.load) with a checkpoint size of 1e12 and a repeated member: refused, nothing planned for it", async () => {
  reset();
  const cp = join(dir, 'checkpoint.json');
  writeFileSync(cp, readFileSync(cp, 'utf8').replace(`"size": ${N}`, '"size": 1e12'));
  commitAll('checkpoint size 1e12');
  const load = async () => {
    try {
      await ChainState.load(await ChainRepo.open(dir, { repair: false }));
      return 'ok';
    } catch (e) {
      if (e instanceof VouchError) return `${e.code}@${e.index ?? 'null'}`;
      throw e;
    }
  };
  assert.is(await load(), 'checkpoint_mismatch@null');
  reset();
  writeFileSync(file(K), readFileSync(file(K), 'utf8').replace('{\n', '{\n  "comment": "FORGED",\n'));
  commitAll('duplicate comment');
  assert.is(await load(), `malformed@${K}`);
});

test('the gateway takes in no block or checkpoint text a sync hands over that repeats a member name (applyCommitted), and stays at its head', async () => {
  reset();
  const { state } = await ChainState.load(await ChainRepo.open(dir, { repair: false }), { pinnedPublicKey: Buffer.from(signer.publicKey).toString('base64') });
  const next = buildEndorseBlock({
    prev: blocks[N - 1]!,
    signer,
    backend: b,
    now: T0 + (N + 1) * 1000,
    entries: [{ url: 'https://a.example/next.tgz', artifactHash: artifactHashOf(b, 'sha256', utf8('n')), name: 'acme/pkg', semver: '9.9.9', license: 'MIT' }],
  });
  const cpText = formatCheckpointFile(buildCheckpoint({ head: next, signer, now: T0 + (N + 1) * 1000 }));
  const outcomeOf = (f: () => void) => {
    try {
      f();
      return 'ok';
    } catch (e) {
      if (e instanceof VouchError) return `${e.code}@${e.index ?? 'null'}`;
      throw e;
    }
  };
  const dupBlock = formatBlockFile(next).replace('{\n', '{\n  "comment": "FORGED",\n');
  assert.is(
    outcomeOf(() => state.applyCommitted([next], cpText, [dupBlock])),
    `malformed@${N}`,
  );
  assert.is(
    outcomeOf(() => state.applyCommitted([next], cpText.replace('{\n', '{\n  "size": 1,\n'), [formatBlockFile(next)])),
    'checkpoint_mismatch@null',
  );
  assert.is(state.size, N, 'a refused block was taken in');
  assert.is(
    outcomeOf(() => state.applyCommitted([next], cpText, [formatBlockFile(next)])),
    'ok',
  );
  assert.is(state.size, N + 1);
});

test.run();
