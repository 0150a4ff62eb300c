/**
 * Stopping `npm start` stops the gateway: no `vouch.js serve` process is
 * left behind holding the port or the chain lock, whether the signal goes to
 * the whole process group (a terminal's Ctrl-C, or its hang-up) or to npm
 * alone (a process manager's SIGTERM or SIGKILL). `npm start -- --config F`
 * runs the real start script with a config on port 0 and a temporary chain.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { writeConfig } from '../helpers/gateway-process.ts';
import { repoRoot } from '../helpers/vectors.ts';

const work = realpathSync(mkdtempSync(join(tmpdir(), 'vouch-npm-start-')));
const configFile = writeConfig(work, {
  listen: { port: 0 },
  chain: { dir: join(work, 'chain') },
  authority: { key_file: join(work, 'authority.pem'), signer: 'npm-start', submit_token_file: join(work, 'submit.token') },
});
const lockFile = join(work, 'chain', '.git', 'vouch.lock');

test.before(() => {
  createKeyFile(join(work, 'authority.pem'));
  writeFileSync(join(work, 'submit.token'), 'npm-start-token-' + 's'.repeat(30) + '\n', { mode: 0o600 });
});
test.after(() => rmSync(work, { recursive: true, force: true }));

/** Pids of live processes whose command line names our config file (the gateway, and a shell if any). */
function processesUsingConfig(): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8');
      const state = readFileSync(`/proc/${name}/stat`, 'utf8').replace(/^.*\) /, '')[0];
      if (cmd.includes(configFile) && state !== 'Z') out.push(Number(name));
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

interface Started {
  npm: ChildProcess;
  port: number;
  out: () => string;
}

async function npmStart(): Promise<Started> {
  // detached: npm leads its own process group, as in a terminal.
  const npm = spawn('npm', ['start', '--', '--config', configFile], { cwd: repoRoot, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  npm.stdout!.on('data', (d: Buffer) => {
    out += d;
  });
  npm.stderr!.on('data', (d: Buffer) => {
    out += d;
  });
  const deadline = Date.now() + 60_000;
  while (!/^ready: /m.test(out)) {
    if (npm.exitCode !== null || Date.now() > deadline) {
      try {
        process.kill(-npm.pid!, 'SIGKILL');
      } catch {
        /* gone */
      }
      throw new Error(`npm start did not get ready:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)![1]);
  assert.is(processesUsingConfig().length >= 1, true, 'the gateway process was not found');
  return { npm, port, out: () => out };
}

async function expectAllGone(s: Started, what: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while ((processesUsingConfig().length > 0 || (await portOpen(s.port))) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const left = processesUsingConfig();
  for (const pid of left) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  assert.equal(
    left,
    [],
    `${what}: processes left behind:\n${left.map((p) => spawnSync('ps', ['-o', 'pid,ppid,args', '-p', String(p)], { encoding: 'utf8' }).stdout).join('')}\n${s.out()}`,
  );
  assert.not.ok(await portOpen(s.port), `${what}: port ${s.port} still accepts connections`);
  assert.not.ok(existsSync(lockFile), `${what}: the chain lock was left behind`);
  try {
    process.kill(-s.npm.pid!, 'SIGKILL');
  } catch {
    /* gone */
  }
}

test('the start script runs the gateway directly (no shell in between to swallow signals)', () => {
  const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8'));
  assert.match(pkg.scripts.start, /^exec node tools\/vouch\.js serve$/);
});

test('SIGTERM to npm alone (a process manager): the gateway stops', async () => {
  const s = await npmStart();
  s.npm.kill('SIGTERM');
  await expectAllGone(s, 'SIGTERM to npm');
});

test('SIGINT to the process group (Ctrl-C in a terminal): the gateway stops', async () => {
  const s = await npmStart();
  process.kill(-s.npm.pid!, 'SIGINT');
  await expectAllGone(s, 'SIGINT to the group');
});

test('SIGHUP to the process group (the terminal closed): the gateway stops', async () => {
  const s = await npmStart();
  process.kill(-s.npm.pid!, 'SIGHUP');
  await expectAllGone(s, 'SIGHUP to the group');
});

test('SIGKILL to npm alone (nothing forwarded): the gateway notices and stops', async () => {
  const s = await npmStart();
  s.npm.kill('SIGKILL');
  await expectAllGone(s, 'SIGKILL to npm');
});

test.run();
