/**
 * The README's five-minute tour, run verbatim so it cannot rot: the blocks
 * fenced `sh tour-gateway` (the gateway, left running) and `sh tour` (the
 * steps, in order, in one shell) are taken from README.md as written and
 * run on a plain copy of the tree (the files git tracks or would track, with
 * this checkout's node_modules linked in). In a network namespace of its own
 * when the machine allows one, so the tour's fixed ports (8080, 8081) never
 * meet another test's. Asserts what the tour promises: a verified download,
 * a tamper refused with nothing written, and an offline `vouch verify`
 * (VOUCH_TOUR_SHOW=1 prints what the tour printed).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { repoRoot } from '../helpers/vectors.ts';

/** The fenced blocks of `markdown` whose info string is exactly `info`, in order. */
export function fencedBlocks(markdown: string, info: string): string[] {
  const out: string[] = [];
  const re = /^```([^\n]*)\n([\s\S]*?)^```$/gm;
  for (let m = re.exec(markdown); m !== null; m = re.exec(markdown)) if (m[1]!.trim() === info) out.push(m[2]!);
  return out;
}

const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');

test('the README marks one gateway command and the tour steps', () => {
  const gateway = fencedBlocks(readme, 'sh tour-gateway');
  assert.is(gateway.length, 1, 'one ```sh tour-gateway block');
  assert.ok(fencedBlocks(readme, 'sh tour').length >= 3, 'the tour has its steps in ```sh tour blocks');
  assert.ok(readme.split('\n').length <= 220, `README.md is ${readme.split('\n').length} lines (the issue asks for about 200)`);
  assert.not.match(readme, /\bjq\b(?!`)/, 'no example needs jq');
});

/** A plain copy of the tree: what `git ls-files` tracks plus untracked files not ignored (work in progress too). */
function plainCopy(): string {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'vouch-tour-')));
  const ls = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: repoRoot, encoding: 'utf8' });
  assert.is(ls.status, 0, ls.stderr);
  for (const f of ls.stdout.split('\0')) {
    // Regular files only: a node_modules symlink (a worktree's) or a deleted file is not part of the tree.
    if (f === '' || !existsSync(join(repoRoot, f)) || !lstatSync(join(repoRoot, f)).isFile()) continue;
    mkdirSync(dirname(join(dir, f)), { recursive: true });
    copyFileSync(join(repoRoot, f), join(dir, f));
  }
  symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

/** Whether this process may make a network namespace of its own (root, or user namespaces). */
function ownNetwork(): string[] | null {
  // A new namespace's loopback starts down: `ip` (iproute2) brings it up.
  if (spawnSync('ip', ['-V'], { encoding: 'utf8' }).status !== 0) return null;
  for (const args of [['-n'], ['-rn']]) {
    const r = spawnSync('unshare', [...args, 'true'], { encoding: 'utf8' });
    if (r.status === 0) return args;
  }
  return null;
}

test('the tour, verbatim: a verified download, a tamper refused, an offline verify', () => {
  const gateway = fencedBlocks(readme, 'sh tour-gateway')[0] ?? '';
  const steps = fencedBlocks(readme, 'sh tour');
  const dir = plainCopy();
  try {
    // One script: the gateway in the background until it is ready, then every step in one shell, as a reader types them.
    const script = [
      'set -uo pipefail',
      'ip link set lo up 2>/dev/null || true',
      `( ${gateway.trim()} ) > gateway.log 2>&1 &`,
      'GATEWAY=$!',
      'for i in $(seq 600); do grep -q "^ready: " gateway.log && break; kill -0 $GATEWAY 2>/dev/null || break; sleep 0.2; done',
      'grep -q "^ready: " gateway.log || { echo "the gateway did not start:"; cat gateway.log; exit 97; }',
      'set -e',
      ...steps.flatMap((s, i) => [`echo "=== step ${i + 1}"`, s]),
      'echo "=== tour done"',
    ].join('\n');
    const cleanup = 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; true';
    writeFileSync(join(dir, 'tour.sh'), `trap '${cleanup}' EXIT\n${script}\n`);
    const ns = ownNetwork();
    const cmd = ns === null ? ['bash', 'tour.sh'] : ['unshare', ...ns, 'bash', 'tour.sh'];
    const r = spawnSync(cmd[0]!, cmd.slice(1), { cwd: dir, encoding: 'utf8', timeout: 240_000, env: { ...process.env, CI: 'true', FORCE_COLOR: '0' } });
    const out = `${r.stdout}\n${r.stderr}`;
    if (process.env.VOUCH_TOUR_SHOW) console.log(out);
    const log = existsSync(join(dir, 'gateway.log')) ? readFileSync(join(dir, 'gateway.log'), 'utf8') : '';
    assert.ok(out.includes('=== tour done'), `the tour stopped (exit ${r.status}):\n${out}\n--- gateway.log\n${log}`);
    assert.is(r.status, 0, out);
    // The submits were signed: two blocks after the authority's.
    assert.match(out, /"success":true/);
    // The verified download: the origin's bytes, as endorsed.
    assert.is(readFileSync(join(dir, 'hello.txt'), 'utf8'), 'hello from vouch 1.0.0\n');
    // The tamper refused: curl -f failed on the 409 and wrote nothing.
    assert.match(out, /error: 409|returned error: 409/);
    assert.match(out, /^refused: /m);
    assert.not.match(out, /served \(unexpected\)/);
    assert.not.ok(existsSync(join(dir, 'tampered.txt')), 'no file from a refused download');
    // The offline audit of a clone: every block verified, the file checked.
    assert.match(out, /^ok: 3 blocks/m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
