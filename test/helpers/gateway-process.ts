/**
 * Starts a real `vouch serve` process on 127.0.0.1 with a generated
 * configuration, waits until it is ready, and stops it afterwards. Also the
 * setup several tests share on top of it: an authority gateway that pushes
 * its chain to a real git smart-HTTP server (test/helpers/git-server.ts),
 * mirror gateways following that remote, submits, and polling for a state.
 *
 * Owns: the processes and servers it starts (their `stop` ends them) and the
 * files it writes below the directory it is given; removing that directory
 * is the caller's. Everything listens on 127.0.0.1 only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { stringify } from 'yaml';
import { createKeyFile } from '../../platform/key-file.ts';
import { GitServer } from './git-server.ts';
import { repoRoot } from './vectors.ts';

export interface GatewayProcess {
  url: string;
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * Writes `config` as YAML into `dir/vouch.yaml` and returns its path. A config without an `authority` key gets
 * `authority: null` (read-only), as the tests mean it: a file is merged over the embedded default, whose
 * development authority it would otherwise get (gateway/config.ts); `inheritAuthority` keeps the merge's own rule.
 */
export function writeConfig(dir: string, config: Record<string, unknown>, name = 'vouch.yaml', o: { inheritAuthority?: boolean } = {}): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, name);
  writeFileSync(path, stringify('authority' in config || o.inheritAuthority ? config : { ...config, authority: null }));
  return path;
}

export async function startGatewayProcess(
  args: string[],
  opts: { cwd?: string; env?: Record<string, string>; readyTimeoutMs?: number; waitFor?: RegExp } = {},
): Promise<GatewayProcess> {
  const child = spawn(process.execPath, [join(repoRoot, 'tools', 'vouch.js'), 'serve', ...args], {
    cwd: opts.cwd ?? repoRoot,
    env: { ...process.env, ...(opts.env ?? {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d;
  });
  child.stderr!.on('data', (d: Buffer) => {
    err += d;
  });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const waitFor = opts.waitFor ?? /^ready: /m;
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
  let exitCode: number | null | undefined;
  exited.then((c) => {
    exitCode = c;
  });
  while (!waitFor.test(out)) {
    if (exitCode !== undefined) throw new Error(`vouch serve exited ${exitCode} before ready:\n${out}\n${err}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`vouch serve not ready in time:\n${out}\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  const url = /listening on (http:\/\/\S+)/.exec(out)![1]!;
  return {
    url,
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (exitCode === undefined) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/**
 * Calls `fn` every `everyMs` until it gives a truthy value, and resolves
 * with it; throws `timed out waiting for <what>` once `timeoutMs` has
 * passed. For what happens "soon" on a loaded machine, in place of a fixed
 * sleep before an assertion.
 */
export async function until<T>(
  what: string,
  fn: () => T | null | undefined | false | Promise<T | null | undefined | false>,
  timeoutMs = 20_000,
  everyMs = 100,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** What `/v1/submit` answers with 201. */
export interface Submitted {
  index: number;
  record_hash: string;
  [member: string]: unknown;
}

/** A gateway's answer to a submit: status, the body as text, and as JSON (null when it is not JSON). */
export interface SubmitAnswer {
  status: number;
  text: string;
  json: any;
}

/**
 * POSTs `body` (an object, sent as JSON, or raw text) to `base`'s `/v1/submit` with the bearer `token` (no
 * authorization header when null) and `headers` over them; asserts nothing, so refusals can be checked.
 */
export async function postSubmit(base: string, token: string | null, body: unknown, headers: Record<string, string> = {}): Promise<SubmitAnswer> {
  const r = await fetch(`${base}/v1/submit`, {
    method: 'POST',
    headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    /* not JSON: left null */
  }
  return { status: r.status, text, json };
}

/** POSTs one entry to `base`'s `/v1/submit` with the bearer `token`; asserts 201 and returns the answer. */
export async function submitEntry(base: string, token: string, entry: { url: string; name: string; semver: string; license: string }): Promise<Submitted> {
  const r = await postSubmit(base, token, entry);
  assert.is(r.status, 201, r.text);
  return r.json as Submitted;
}

export interface PushingAuthorityOptions {
  /** `authority.signer`. */
  signer: string;
  /** The submit token, written to `<work>/submit.token`. */
  token: string;
  /** The authority's key file, created here; default `<work>/authority.pem`. */
  keyFile?: string;
  /** The authority's directory (its vouch.yaml and chain/); default `<work>/a`. */
  dir?: string;
  /** More `chain` keys (e.g. `origin`). */
  chain?: Record<string, unknown>;
  /** More `authority` keys (e.g. `witnesses`). */
  authority?: Record<string, unknown>;
}

export interface MirrorOptions {
  /** `chain.sync_interval` in seconds; default 1. */
  syncInterval?: number;
  /** Adds `origin.allow_private` (origins on 127.0.0.1); default true. */
  privateOrigins?: boolean;
  /** More top-level configuration (e.g. a `witness` section). */
  more?: Record<string, unknown>;
}

/**
 * An authority gateway whose appends are pushed to `<work>/git/chain.git`,
 * served by a real `git http-backend` (`remote`), and mirror gateways that
 * follow that remote with the authority's key pinned. `stop()` stops the
 * mirrors, the authority and the git server.
 */
export class PushingAuthority {
  /** The authority gateway (replaced by `restart`). */
  authority!: GatewayProcess;
  private readonly mirrors: GatewayProcess[] = [];

  private constructor(
    readonly gitServer: GitServer,
    /** Smart-HTTP URL of the bare repository the authority pushes to. */
    readonly remote: string,
    /** That bare repository's directory. */
    readonly bareDir: string,
    readonly keyFile: string,
    /** The authority's public key, base64. */
    readonly pub: string,
    readonly token: string,
    readonly tokenFile: string,
    /** The authority's directory; its chain is `chainDir`. */
    readonly dir: string,
    readonly chainDir: string,
    private readonly opts: PushingAuthorityOptions,
  ) {}

  static async start(work: string, opts: PushingAuthorityOptions): Promise<PushingAuthority> {
    const keyFile = opts.keyFile ?? join(work, 'authority.pem');
    const pub = createKeyFile(keyFile).publicKeyB64;
    const tokenFile = join(work, 'submit.token');
    writeFileSync(tokenFile, opts.token, { mode: 0o600 });
    mkdirSync(join(work, 'git'), { recursive: true });
    const gitServer = await GitServer.start(join(work, 'git'));
    const bareDir = gitServer.initBare('chain.git');
    const dir = opts.dir ?? join(work, 'a');
    const pa = new PushingAuthority(gitServer, gitServer.url('chain.git'), bareDir, keyFile, pub, opts.token, tokenFile, dir, join(dir, 'chain'), opts);
    try {
      pa.authority = await startGatewayProcess(['--config', pa.authorityConfig()]);
    } catch (e) {
      await gitServer.stop();
      throw e;
    }
    return pa;
  }

  /** Writes the authority's configuration (`more` added to its `authority` keys) and returns its path. */
  authorityConfig(more: Record<string, unknown> = {}): string {
    return writeConfig(this.dir, {
      listen: { port: 0 },
      chain: { dir: this.chainDir, remote: this.remote, ...this.opts.chain },
      authority: { key_file: this.keyFile, signer: this.opts.signer, submit_token_file: this.tokenFile, ...this.opts.authority, ...more },
      origin: { allow_private: true },
    });
  }

  /** Stops the authority and starts it again on the same chain, with `more` added to its `authority` keys. */
  async restart(more: Record<string, unknown> = {}): Promise<GatewayProcess> {
    await this.authority.stop();
    this.authority = await startGatewayProcess(['--config', this.authorityConfig(more)]);
    return this.authority;
  }

  /** Submits one entry to the authority (201 asserted). */
  submit(entry: { url: string; name: string; semver: string; license: string }): Promise<Submitted> {
    return submitEntry(this.authority.url, this.token, entry);
  }

  /** Starts a mirror gateway in `dir` (chain in `<dir>/chain`) following the remote, the authority's key pinned. */
  async startMirror(dir: string, opts: MirrorOptions = {}): Promise<GatewayProcess> {
    const gw = await startGatewayProcess([
      '--config',
      writeConfig(dir, {
        listen: { port: 0 },
        chain: { dir: join(dir, 'chain'), remote: this.remote, public_key: this.pub, sync_interval: opts.syncInterval ?? 1 },
        ...((opts.privateOrigins ?? true) ? { origin: { allow_private: true } } : {}),
        ...opts.more,
      }),
    ]);
    this.mirrors.push(gw);
    return gw;
  }

  /** Stops the mirrors, the authority and the git server (safe to call again). */
  async stop(): Promise<void> {
    for (const m of this.mirrors.splice(0)) await m.stop();
    await this.authority?.stop();
    await this.gitServer.stop();
  }
}
