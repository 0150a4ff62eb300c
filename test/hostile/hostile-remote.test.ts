/**
 * Hostile chain remotes and https origins with bad certificates (issue 14,
 * item 9).
 *
 * A scripted git smart-HTTP server on 127.0.0.1 proxies a real
 * `git http-backend` (test/helpers/git-server.ts) while it is honest and,
 * case by case, answers `info/refs` or `git-upload-pack` itself with hostile
 * bytes: endless pkt-lines (also as a gzip bomb), an oversized pkt-line,
 * 200,000 refs, packs that declare 2^31 or one too many objects, are
 * truncated or carry a wrong checksum, zip bombs, deltas on a missing base
 * or on themselves, a quadratic delta chain, one-byte side-band packets,
 * endless shallow lines, silence, a trickle of one byte per second,
 * endless pack data (junk: stopped at the first object, the pack being
 * indexed as it arrives) and endless well-formed objects (stopped by the
 * bound on bytes). Each case is driven against
 * `ChainRepo.clone` and `ChainRepo.fetch` directly, and the worst of them
 * against a running mirror gateway process. Then https origins whose
 * certificate is self-signed, for another name or expired (made with
 * `openssl`) are refused for downloads and submits.
 *
 * Owns: nothing outside its temporary directory; the servers and gateway
 * processes it starts (stopped in `after`).
 * Trusts: git http-backend for the honest answers; openssl for certificates.
 * Must hold: every hostile answer fails the clone or fetch with a VouchError
 * that names the problem, within a few seconds (the trickle: the 20 s
 * discovery deadline), with this process's peak RSS less than 256 MiB above
 * its baseline (and the mirror gateway's too), leaving the chain repository
 * exactly as it was (a failed clone leaves no directory); a running mirror
 * keeps serving its last verified head, reports the error in `/readyz`, and
 * catches up when the remote is honest again. An https origin whose
 * certificate does not verify is never fetched from: 502 `origin_error`,
 * nothing served or cached, a submit of it refused.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { constants as zc, deflateRawSync, deflateSync } from 'node:zlib';
import { Agent, request } from 'undici';
import { GitServer } from '../helpers/git-server.ts';
import { type TrackedServer, relayToGit, startTracked } from '../helpers/git-relay.ts';
import { startGatewayProcess, until, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';
import { buildLongChain, endorseNext, testSigner, TEST_SEED, T0 } from '../helpers/chain-fixture.ts';
import { artifactHashOf, buildCheckpoint, buildEndorseBlock } from '../../chain/build.ts';
import { formatBlockFile, formatCheckpointFile, type Block } from '../../chain/block.ts';
import { base64Encode } from '../../chain/encoding.ts';
import { VouchError } from '../../chain/errors.ts';
import { nodeBackend, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { ChainRepo, FETCH_LIMITS, type FetchOptions } from '../../store/chain-repo.ts';
import { appendSigned, commitFor } from '../../store/chain-append.ts';
import { drainedOrClosed } from '../../platform/drained.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-hostile-'));
const signer = testSigner();
const pub = base64Encode(signer.publicKey);
const agent = new Agent();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MiB = 1 << 20;
/** Peak RSS growth allowed over the baseline, for this process and for the mirror gateway. */
const RSS_LIMIT = 256 * MiB;
let seq = 0;
const fresh = (name: string) => join(work, `${name}-${seq++}`);

// ---------------------------------------------------------------------------
// git plumbing for the scripts: pkt-lines, advertisements, packs

function pkt(data: string | Buffer): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  return Buffer.concat([Buffer.from((body.length + 4).toString(16).padStart(4, '0'), 'latin1'), body]);
}
const FLUSH = Buffer.from('0000', 'latin1');
const CAPS = 'multi_ack_detailed side-band-64k thin-pack ofs-delta shallow no-progress agent=git/hostile';
/** A commit id the mirror does not have, so a fetch goes on to upload-pack. */
const NEW_OID = '5ca1ab1e'.repeat(5);

function advertisement(main: string, extra: Buffer[] = []): Buffer {
  return Buffer.concat([pkt('# service=git-upload-pack\n'), FLUSH, pkt(`${main} HEAD\0${CAPS}\n`), pkt(`${main} refs/heads/main\n`), ...extra, FLUSH]);
}

/** Object header of a pack entry: type and inflated size. */
function objHead(kind: number, size: number): Buffer {
  const out: number[] = [];
  let c = (kind << 4) | (size % 16);
  let s = Math.floor(size / 16);
  while (s > 0) {
    out.push(c | 0x80);
    c = s % 128;
    s = Math.floor(s / 128);
  }
  out.push(c);
  return Buffer.from(out);
}

function packOf(objects: Buffer[], count = objects.length): Buffer {
  const head = Buffer.from('PACK\0\0\0\x02\0\0\0\0', 'latin1');
  head.writeUInt32BE(count >>> 0, 8);
  const body = Buffer.concat([head, ...objects]);
  return Buffer.concat([body, createHash('sha1').update(body).digest()]);
}

const blobEntry = (data: Buffer) => Buffer.concat([objHead(3, data.length), deflateSync(data)]);

/** A zlib stream of `mib` MiB of zeros, made without holding them: a zip bomb costs its sender nothing. */
function zeroStream(mib: number): Buffer {
  const block = deflateRawSync(Buffer.alloc(MiB), { finishFlush: zc.Z_FULL_FLUSH });
  const adler = Buffer.alloc(4);
  adler.writeUInt32BE(((((mib * MiB) % 65521) << 16) | 1) >>> 0);
  return Buffer.concat([Buffer.from([0x78, 0x01]), ...new Array<Buffer>(mib).fill(block), Buffer.from([0x03, 0x00]), adler]);
}

function varint(n: number): Buffer {
  const out: number[] = [];
  do {
    let c = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) c |= 0x80;
    out.push(c);
  } while (n > 0);
  return Buffer.from(out);
}

/** A delta copying the whole of a `size`-byte base (copy ops of up to 16 MiB - 1). */
function copyAllDelta(size: number): Buffer {
  const ops: Buffer[] = [varint(size), varint(size)];
  for (let off = 0; off < size; ) {
    const len = Math.min(size - off, 0xffffff);
    ops.push(
      Buffer.from([
        0x80 | 0x0f | 0x70,
        off & 0xff,
        (off >> 8) & 0xff,
        (off >> 16) & 0xff,
        (off >>> 24) & 0xff,
        len & 0xff,
        (len >> 8) & 0xff,
        (len >> 16) & 0xff,
      ]),
    );
    off += len;
  }
  return Buffer.concat(ops);
}

/** OFS_DELTA entry whose base starts `rel` bytes before it. */
function ofsDelta(rel: number, delta: Buffer): Buffer {
  const enc: number[] = [rel & 0x7f];
  let r = Math.floor(rel / 128);
  while (r > 0) {
    r -= 1;
    enc.unshift(0x80 | (r & 0x7f));
    r = Math.floor(r / 128);
  }
  return Buffer.concat([objHead(6, delta.length), Buffer.from(enc), deflateSync(delta)]);
}

const refDelta = (base: string, delta: Buffer) => Buffer.concat([objHead(7, delta.length), Buffer.from(base, 'hex'), deflateSync(delta)]);

// ---------------------------------------------------------------------------
// The hostile remote

type Handler = (res: ServerResponse, req: IncomingMessage) => void | Promise<void>;
interface Script {
  refs?: Handler;
  pack?: Handler;
}

/** Writes with backpressure; false once the client has gone. */
async function send(res: ServerResponse, chunk: Buffer): Promise<boolean> {
  if (res.destroyed || stopping) return false;
  if (!res.write(chunk)) {
    await drainedOrClosed(res);
  }
  return !res.destroyed && !stopping;
}
let stopping = false;

const ADVERT_TYPE = { 'content-type': 'application/x-git-upload-pack-advertisement', 'cache-control': 'no-cache' };
const RESULT_TYPE = { 'content-type': 'application/x-git-upload-pack-result', 'cache-control': 'no-cache' };

/**
 * What an upload-pack answer to a depth-1 fetch starts with: the shallow
 * section (git's fetch-pack requires it; the hand-written one reads it) and NAK.
 */
const ANSWER_HEAD = (): Buffer => Buffer.concat([pkt(`shallow ${NEW_OID}\n`), FLUSH, pkt('NAK\n')]);

/** Side-band-64k framing of `pack` after the shallow section and a NAK, then a flush. */
function sideband(pack: Buffer, chunk = 65515): Buffer {
  const parts: Buffer[] = [ANSWER_HEAD()];
  for (let o = 0; o < pack.length; o += chunk) parts.push(pkt(Buffer.concat([Buffer.from([1]), pack.subarray(o, o + chunk)])));
  parts.push(FLUSH);
  return Buffer.concat(parts);
}

/** A script answering every fetch with the main at NEW_OID and `pack` as the upload-pack answer. */
function servePack(pack: Buffer): Script {
  return {
    refs: (res) => {
      res.writeHead(200, ADVERT_TYPE).end(advertisement(NEW_OID));
    },
    pack: (res) => {
      res.writeHead(200, RESULT_TYPE).end(sideband(pack));
    },
  };
}

class HostileRemote {
  script: Script | null = null;
  readonly hits = { refs: 0, pack: 0 };
  private tracked: TrackedServer | null = null;
  private constructor(private readonly upstream: GitServer) {}

  static async start(upstream: GitServer): Promise<HostileRemote> {
    const h = new HostileRemote(upstream);
    h.tracked = await startTracked((req, res) => h.handle(req, res));
    return h;
  }

  get port(): number {
    return this.tracked!.port;
  }

  url(name: string): string {
    return `http://127.0.0.1:${this.port}/${name}`;
  }

  /** The upstream's honest advertisement. */
  async honestAdvertisement(name: string): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      httpRequest({ host: '127.0.0.1', port: this.upstream.port, path: `/${name}/info/refs?service=git-upload-pack` }, (r) => {
        const parts: Buffer[] = [];
        r.on('data', (d: Buffer) => parts.push(d));
        r.on('end', () => resolve(Buffer.concat(parts)));
      })
        .on('error', reject)
        .end();
    });
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const kind = path.endsWith('/info/refs') ? 'refs' : path.endsWith('/git-upload-pack') ? 'pack' : null;
    if (kind) this.hits[kind]++;
    res.on('error', () => {});
    const scripted = kind ? this.script?.[kind] : undefined;
    if (scripted && kind === 'pack') {
      // Stock git's depth-1 fetch asks twice: the deepen alone (answered with the shallow section), then with `done`.
      const body: Buffer[] = [];
      req.on('data', (d: Buffer) => body.push(d));
      req.on('end', () => {
        if (!Buffer.concat(body).includes('0009done\n')) {
          res.writeHead(200, RESULT_TYPE).end(Buffer.concat([pkt(`shallow ${NEW_OID}\n`), FLUSH]));
          return;
        }
        Promise.resolve(scripted(res, req)).catch(() => res.destroy());
      });
      return;
    }
    if (scripted) {
      req.resume();
      Promise.resolve(scripted(res, req)).catch(() => res.destroy());
      return;
    }
    relayToGit(this.upstream.port, req, res);
  }

  async stop(): Promise<void> {
    await this.tracked?.stop();
  }
}

// ---------------------------------------------------------------------------
// The authority side (an honest chain pushed to the real git server)

function gitAsync(args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn('git', args, { env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_TERMINAL_PROMPT: '0' } });
    let stderr = '';
    c.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    c.on('close', (status) => resolve({ status, stderr }));
  });
}

const endorse = (prev: Block, tag: string): Block => endorseNext(prev, signer, tag, { space: 'hostile', name: 'acme/hostile', major: 3 });

let gitServer: GitServer;
let hostile: HostileRemote;
let authorityDir = '';
let authorityRepo: ChainRepo;
let blocks: Block[] = [];
let url = '';
/** A mirror repository (cloned honestly through the hostile remote) that every direct fetch case runs against. */
let mirror: ChainRepo;
let mirrorDir = '';
let baselineRss = 0;

async function appendAndPush(tag: string): Promise<Block> {
  const b = endorse(blocks[blocks.length - 1]!, tag);
  await appendSigned(authorityRepo, [b], buildCheckpoint({ head: b, signer, now: T0 + 50_000_000 + b.index }), T0 + 50_000_000);
  blocks.push(b);
  const r = await gitAsync(['-C', authorityDir, 'push', '-q', gitServer.url('chain.git'), 'main']);
  assert.is(r.status, 0, r.stderr);
  return b;
}

/** Every file under `dir` with its size and mtime: a fetch that fails must change none of it. */
function listing(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else {
        const st = statSync(p);
        out.push(`${p.slice(dir.length)} ${st.size} ${st.mtimeMs}`);
      }
    }
  };
  walk(dir);
  return out.sort();
}

function peakRssGrowth(): number {
  return process.resourceUsage().maxRSS * 1024 - baselineRss;
}

test.before(async () => {
  mkdirSync(join(work, 'srv'));
  gitServer = await GitServer.start(join(work, 'srv'));
  gitServer.initBare('chain.git');
  blocks = buildLongChain(30).blocks;
  authorityDir = fresh('authority');
  authorityRepo = await ChainRepo.init(
    authorityDir,
    blocks.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(buildCheckpoint({ head: blocks[blocks.length - 1]!, signer, now: T0 + 40_000 })),
    commitFor([blocks[0]!], T0),
  );
  const r = await gitAsync(['-C', authorityDir, 'push', '-q', gitServer.url('chain.git'), 'main']);
  assert.is(r.status, 0, r.stderr);
  hostile = await HostileRemote.start(gitServer);
  url = hostile.url('chain.git');
  mirrorDir = fresh('mirror');
  mirror = await ChainRepo.clone(url, mirrorDir);
  zeroStream(1); // warm the zlib code paths before the baseline
  global.gc?.();
  baselineRss = Math.max(process.memoryUsage.rss(), process.resourceUsage().maxRSS * 1024);
});

test.after(async () => {
  stopping = true;
  if (hostile) hostile.script = null;
  await gatewayMirror?.stop();
  await tlsGateway?.stop();
  for (const s of tlsServers.values()) {
    s.closeAllConnections();
    s.close();
  }
  await hostile?.stop();
  await gitServer?.stop();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------
// (a) ChainRepo.clone and ChainRepo.fetch against each hostile answer

interface Case {
  name: string;
  script: () => Script;
  /** The message of the VouchError expected (its code is always io_error). */
  expect: RegExp;
  opts?: FetchOptions;
  /**
   * Most CPU time (this process, user + system) a failed clone or fetch may use: the work hostile input can
   * make us do, measured so that a loaded machine (parallel tests, other jobs) does not stretch it.
   */
  maxMs?: number;
  /** Longest a failed clone or fetch may take by the clock: for the cases whose property is a time bound (stalls). */
  maxWallMs?: number;
  /** Only the fetch (the clone of an honest remote is the control case's business). */
  fetchOnly?: boolean;
  /**
   * The clone's message where it differs: the clone is stock git behind store/git-fetch-proxy.ts, whose
   * pack parser (index-pack) words the per-object refusals (docs/decisions/git-store.md "Mirror clone").
   */
  cloneExpect?: RegExp;
  /** The clone's options where they differ (the resolve work git has no bound for: the clone's time bound, shortened). */
  cloneOpts?: FetchOptions;
}

async function failing(what: string, p: Promise<unknown>, c: Case, expect = c.expect): Promise<void> {
  const t0 = Date.now();
  const cpu0 = process.cpuUsage();
  let err: unknown = null;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  const ms = Date.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const cpuMs = Math.round((cpu.user + cpu.system) / 1000);
  assert.ok(err !== null, `${c.name}: the ${what} succeeded`);
  assert.ok(err instanceof VouchError, `${c.name}: the ${what} threw ${String((err as Error)?.stack ?? err)}`);
  const e = err as VouchError;
  assert.is(e.code, 'io_error', `${c.name}: ${e.message}`);
  assert.match(e.message, expect, `${c.name}: the ${what} failed with: ${e.message}`);
  assert.ok(cpuMs < (c.maxMs ?? 8_000), `${c.name}: the ${what} used ${cpuMs} ms of CPU (${ms} ms by the clock)`);
  if (c.maxWallMs !== undefined) assert.ok(ms < c.maxWallMs, `${c.name}: the ${what} took ${ms} ms`);
  const growth = peakRssGrowth();
  assert.ok(growth < RSS_LIMIT, `${c.name}: peak RSS grew by ${Math.round(growth / MiB)} MiB`);
}

async function runCase(c: Case): Promise<void> {
  hostile.script = c.script();
  try {
    if (!c.fetchOnly) {
      const dir = fresh('clone');
      await failing('clone', ChainRepo.clone(url, dir, c.cloneOpts ?? c.opts ?? {}), c, c.cloneExpect);
      assert.not.ok(existsSync(dir), `${c.name}: a failed clone left ${dir} behind`);
    }
    const before = listing(mirrorDir);
    const head = mirror.head;
    await failing('fetch', mirror.fetch(url, c.opts ?? {}), c);
    mirror.dropFetched();
    assert.is(mirror.head, head);
    assert.equal(listing(mirrorDir), before, `${c.name}: the failed fetch changed the chain repository`);
  } finally {
    hostile.script = null;
  }
}

/** Endless pkt-lines written as fast as the client reads them (small ones 64 KiB at a time, big ones as they are). */
function endless(res: ServerResponse, head: Buffer, line: (i: number) => Buffer): Promise<void> {
  return (async () => {
    if (!(await send(res, head))) return;
    for (let i = 0; ; ) {
      const l = line(i++);
      if (l.length >= 32 * 1024) {
        if (!(await send(res, l))) return;
        continue;
      }
      const batch: Buffer[] = [l];
      for (let n = l.length; n < 64 * 1024; ) {
        const m = line(i++);
        batch.push(m);
        n += m.length;
      }
      if (!(await send(res, Buffer.concat(batch)))) return;
    }
  })();
}

const hex40 = (i: number) => i.toString(16).padStart(40, '0');

const cases: Case[] = [
  {
    name: 'info/refs: endless pkt-lines, never a flush',
    script: () => ({
      refs: (res) => {
        res.writeHead(200, ADVERT_TYPE);
        return endless(res, Buffer.concat([pkt('# service=git-upload-pack\n'), FLUSH, pkt(`${NEW_OID} refs/heads/main\0${CAPS}\n`)]), (i) =>
          pkt(`${hex40(i)} refs/tags/t${i}\n`),
        );
      },
    }),
    expect: new RegExp(`advertised more than ${FETCH_LIMITS.refs} refs`),
  },
  {
    // The transport inflates a gzip answer: what counts is what it inflates to. '0000' is a flush-pkt.
    name: 'info/refs: a gzip bomb of endless flush-pkts',
    script: () => ({
      refs: (res) => {
        res.writeHead(200, { ...ADVERT_TYPE, 'content-encoding': 'gzip' });
        const block = deflateRawSync(Buffer.alloc(MiB, 0x30), { finishFlush: zc.Z_FULL_FLUSH });
        return endless(res, Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]), () => block);
      },
    }),
    expect: new RegExp(`advertised more than ${FETCH_LIMITS.refs} refs`),
  },
  {
    name: 'info/refs: one pkt-line longer than git allows (65535 bytes)',
    script: () => ({
      refs: (res) => {
        res
          .writeHead(200, ADVERT_TYPE)
          .end(
            Buffer.concat([
              pkt('# service=git-upload-pack\n'),
              FLUSH,
              Buffer.from('ffff', 'latin1'),
              Buffer.alloc(0xffff - 4, 0x61),
              advertisement(NEW_OID).subarray(34),
            ]),
          );
      },
    }),
    expect: /pkt-line of 65535 bytes \(git's limit is 65520\)/,
  },
  {
    name: 'info/refs: 200,000 refs',
    script: () => ({
      refs: (res) => {
        const extra = Array.from({ length: 200_000 }, (_, i) => pkt(`${hex40(i)} refs/tags/v${i}\n`));
        res.writeHead(200, ADVERT_TYPE).end(advertisement(NEW_OID, extra));
      },
    }),
    expect: new RegExp(`advertised more than ${FETCH_LIMITS.refs} refs`),
  },
  {
    name: 'pack: the header declares 2^31 objects',
    script: () => servePack(packOf([blobEntry(Buffer.from('one small blob'))], 2 ** 31)),
    expect: new RegExp(`declares 2147483648 objects, more than ${FETCH_LIMITS.objects}`),
  },
  {
    name: 'pack: truncated (cut in the middle, no trailer)',
    script: () => {
      const p = packOf(Array.from({ length: 50 }, (_, i) => blobEntry(Buffer.from(`blob ${i} `.repeat(200)))));
      return servePack(p.subarray(0, p.length >> 1));
    },
    expect: /bad pack: (checksum mismatch|truncated)/,
    cloneExpect: /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: early EOF/,
  },
  {
    name: 'pack: a wrong trailing checksum',
    script: () => {
      const p = packOf([blobEntry(Buffer.from('a blob'))]);
      p[p.length - 1]! ^= 0xff;
      return servePack(p);
    },
    expect: /bad pack: checksum mismatch/,
    cloneExpect: /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: pack is corrupted \(SHA1 mismatch\)/,
  },
  {
    name: 'pack: zip bomb, an object header claiming 2^40 bytes',
    script: () => servePack(packOf([Buffer.concat([objHead(3, 2 ** 40), zeroStream(64)])])),
    expect: new RegExp(`has 1099511627776 bytes, more than ${FETCH_LIMITS.objectBytes}`),
    cloneExpect: /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: pack has bad object at offset 12: inflate returned/,
  },
  {
    name: 'pack: zip bomb, 1 KiB claimed, 4 GiB of zeros inside',
    script: () => servePack(packOf([Buffer.concat([objHead(3, 1024), zeroStream(4096)])])),
    expect: /object at 12 does not inflate/,
    cloneExpect: /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: pack has bad object at offset 12: inflate returned/,
  },
  {
    name: 'pack: zip bomb, eight objects of 255 MiB each (as claimed)',
    script: () => {
      const z = zeroStream(255);
      return servePack(packOf(Array.from({ length: 8 }, () => Buffer.concat([objHead(3, 255 * MiB), z]))));
    },
    expect: new RegExp(`has 267386880 bytes, more than ${FETCH_LIMITS.objectBytes}`),
    // No per-object size bound in git: index-pack inflates each (streaming past core.bigFileThreshold, 32 MiB), bounded by the clone's time.
    cloneExpect: /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: The same object \S+ appears twice in the pack/,
  },
  {
    name: 'pack: one object more than allowed (2,000,001 empty blobs)',
    script: () => servePack(packOf(new Array<Buffer>(FETCH_LIMITS.objects + 1).fill(blobEntry(Buffer.alloc(0))))),
    expect: new RegExp(`declares ${FETCH_LIMITS.objects + 1} objects, more than ${FETCH_LIMITS.objects}`),
  },
  {
    // At FETCH_LIMITS.objects (2,000,000) this would take ~30 s: git-pack.test.ts checks the bytes an object costs instead.
    name: 'pack: 200,000 empty blobs (memory per object)',
    script: () => servePack(packOf(new Array<Buffer>(200_000).fill(blobEntry(Buffer.alloc(0))))),
    expect: /does not hold commit/,
    fetchOnly: true,
    maxMs: 15_000,
  },
  {
    name: 'pack: a delta on a base that is nowhere',
    script: () => servePack(packOf([blobEntry(Buffer.from('x')), refDelta('ba5e'.repeat(10), copyAllDelta(16))])),
    expect: /delta base ba5eba5e\S* is missing/,
    cloneExpect: /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: pack has 1 unresolved delta/,
  },
  {
    // A true cycle cannot be built (a base is named by the hash of what it resolves to): deltas waiting on bases that never come.
    name: 'pack: two deltas waiting on bases that never come (no cycle can resolve)',
    script: () => {
      const a = refDelta(hex40(1), copyAllDelta(8));
      const b = refDelta(hex40(2), copyAllDelta(8));
      return servePack(packOf([a, b]));
    },
    expect: /delta base \S+ is missing/,
    cloneExpect: /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: pack has 2 unresolved deltas/,
  },
  {
    name: 'pack: an OFS_DELTA naming itself as its base',
    script: () => servePack(packOf([blobEntry(Buffer.from('x')), ofsDelta(0, copyAllDelta(1))])),
    expect: /names no earlier object as its base/,
    cloneExpect:
      /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: pack has bad object at offset 22: delta base offset is out of bound/,
  },
  {
    name: 'pack: a quadratic delta chain (3,000 deltas, each the whole of a 9 MiB base)',
    script: () => {
      const size = 9 * MiB;
      const base = Buffer.concat([objHead(3, size), zeroStream(9)]);
      const entries: Buffer[] = [base];
      let last = base.length;
      for (let i = 0; i < 3000; i++) {
        const d = ofsDelta(last, copyAllDelta(size));
        entries.push(d);
        last = d.length;
      }
      return servePack(packOf(entries));
    },
    expect: /more than \d+ bytes of objects to resolve|delta chain deeper than/,
    // git has no bound on delta depth or resolve work: the clone's time bound (advertisement + answer) stops it.
    cloneOpts: { timeoutMs: 3_000 },
    cloneExpect: /the clone of http:\/\/127\.0\.0\.1:\d+\/chain\.git did not finish in time \(6 s, plus 1 s per MiB received\)/,
  },
  {
    name: 'upload-pack: the pack in one-byte side-band packets',
    script: () => ({
      refs: (res) => {
        res.writeHead(200, ADVERT_TYPE).end(advertisement(NEW_OID));
      },
      pack: (res) => {
        res.writeHead(200, RESULT_TYPE);
        // A well-formed start (one 16 MiB blob, zlib data in stored blocks), so that what stops it is the count of pkt-lines.
        const start = Buffer.concat([packOf([], 1).subarray(0, 12), objHead(3, 16 * MiB), Buffer.from([0x78, 0x01])]);
        const stored = Buffer.concat([Buffer.from([0, 0xff, 0xff, 0, 0]), Buffer.alloc(0xffff, 0x55)]);
        const ones = Array.from(stored, (b) => pkt(Buffer.from([1, b])));
        return endless(res, Buffer.concat([ANSWER_HEAD(), pkt(Buffer.concat([Buffer.from([1]), start]))]), (i) => ones[i % ones.length]!);
      },
    }),
    expect: new RegExp(`more than ${FETCH_LIMITS.resultPktLines} pkt-lines`),
  },
  {
    name: 'upload-pack: endless shallow lines',
    script: () => ({
      refs: (res) => {
        res.writeHead(200, ADVERT_TYPE).end(advertisement(NEW_OID));
      },
      pack: (res) => {
        res.writeHead(200, RESULT_TYPE);
        return endless(res, Buffer.alloc(0), (i) => pkt(`shallow ${hex40(i)}\n`));
      },
    }),
    expect: new RegExp(`more than ${FETCH_LIMITS.shallowLines} shallow lines`),
  },
  {
    // The pack is indexed as it arrives: endless bytes that are no object stop at the first one (nothing past it is read or kept).
    name: 'upload-pack: far more than any chain update (endless pack data)',
    script: () => ({
      refs: (res) => {
        res.writeHead(200, ADVERT_TYPE).end(advertisement(NEW_OID));
      },
      pack: (res) => {
        res.writeHead(200, RESULT_TYPE);
        const head = packOf([], 1000).subarray(0, 12);
        const junk = pkt(Buffer.concat([Buffer.from([1]), Buffer.alloc(65515, 0x77)])); // one buffer, written again and again
        return endless(res, Buffer.concat([ANSWER_HEAD(), pkt(Buffer.concat([Buffer.from([1]), head]))]), () => junk);
      },
    }),
    expect: /bad pack: object at 12 does not inflate/,
    cloneExpect: /cannot clone http:\/\/127\.0\.0\.1:\d+\/chain\.git: git refused the clone: fatal: pack has bad object at offset 12: inflate returned/,
  },
  {
    // Endless well-formed objects (64 KiB blobs, stored): what stops them is the bound on bytes (maxBytes, here 64 MiB; FETCH_LIMITS.packBytes by default).
    name: 'upload-pack: endless well-formed objects, past the bound on bytes',
    script: () => ({
      refs: (res) => {
        res.writeHead(200, ADVERT_TYPE).end(advertisement(NEW_OID));
      },
      pack: (res) => {
        res.writeHead(200, RESULT_TYPE);
        const head = packOf([], FETCH_LIMITS.objects).subarray(0, 12);
        const blob = Buffer.concat([Buffer.from([1]), objHead(3, 65000), deflateSync(Buffer.alloc(65000, 0x77), { level: 0 })]);
        const line = pkt(blob);
        return endless(res, Buffer.concat([ANSWER_HEAD(), pkt(Buffer.concat([Buffer.from([1]), head]))]), () => line);
      },
    }),
    opts: { maxBytes: 64 * MiB },
    expect: new RegExp(`sent more than ${64 * MiB} bytes`),
  },
  {
    name: 'upload-pack: headers, then silence',
    script: () => ({
      refs: (res) => {
        res.writeHead(200, ADVERT_TYPE).end(advertisement(NEW_OID));
      },
      pack: (res) => {
        res.writeHead(200, RESULT_TYPE);
        res.write(ANSWER_HEAD());
      },
    }),
    opts: { stallMs: 1_500 },
    expect: /sent nothing for 1\.5 s/,
    maxMs: 4_000,
    maxWallMs: 4_000,
  },
  {
    name: 'upload-pack: a trickle of one byte per second',
    script: () => ({
      refs: (res) => {
        res.writeHead(200, ADVERT_TYPE).end(advertisement(NEW_OID));
      },
      pack: async (res) => {
        res.writeHead(200, RESULT_TYPE);
        const bytes = sideband(packOf([blobEntry(Buffer.from('slow'))]));
        for (const b of bytes) {
          if (!(await send(res, Buffer.from([b])))) return;
          await sleep(1000);
        }
        res.end();
      },
    }),
    opts: { timeoutMs: 2_000 },
    expect: /did not answer in time \(2 s\)/,
    maxMs: 4_000,
    maxWallMs: 4_000,
  },
];

for (const c of cases) test(`hostile remote, clone and fetch: ${c.name}`, () => runCase(c));

test('an advertisement with 5,000 other refs around an honest main clones and fetches', async () => {
  const honest = await hostile.honestAdvertisement('chain.git');
  const extra = Buffer.concat(Array.from({ length: 5000 }, (_, i) => pkt(`${hex40(i)} refs/tags/v${i}\n`)));
  hostile.script = {
    refs: (res) => {
      res.writeHead(200, ADVERT_TYPE).end(Buffer.concat([honest.subarray(0, honest.length - 4), extra, FLUSH]));
    },
  };
  try {
    const dir = fresh('clone-many-refs');
    const repo = await ChainRepo.clone(url, dir);
    assert.is(repo.size, blocks.length);
    const b = await appendAndPush('many-refs');
    const honest2 = await hostile.honestAdvertisement('chain.git');
    hostile.script = {
      refs: (res) => {
        res.writeHead(200, ADVERT_TYPE).end(Buffer.concat([honest2.subarray(0, honest2.length - 4), extra, FLUSH]));
      },
    };
    const got = await repo.fetch(url);
    assert.ok(got.objects > 0);
    await repo.fastForward(got.commit);
    assert.is(repo.size, b.index + 1);
  } finally {
    hostile.script = null;
  }
});

// ---------------------------------------------------------------------------
// (b) a running mirror gateway against the same hostile answers

let gatewayMirror: GatewayProcess | null = null;

async function getJson(base: string, path: string): Promise<{ status: number; json: any }> {
  const r = await request(base + path, { dispatcher: agent });
  return { status: r.statusCode, json: await r.body.json() };
}

function procStatus(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m![1]) * 1024;
}

test('a mirror gateway under a hostile remote keeps serving its verified head, reports the error, and catches up when the remote is honest again', async () => {
  const dir = fresh('gw-mirror');
  gatewayMirror = await startGatewayProcess([
    '--config',
    writeConfig(dir, {
      listen: { port: 0 },
      chain: { dir: join(dir, 'chain'), remote: url, public_key: pub, sync_interval: 1 },
    }),
  ]);
  const gw = gatewayMirror;
  const pid = gw.child.pid!;
  const checkpoint = await getJson(gw.url, '/v1/checkpoint');
  assert.is(checkpoint.status, 200);
  await until('a first successful sync', async () => (await getJson(gw.url, '/readyz')).json.sync?.last_success, 10_000);
  const rss0 = procStatus(pid, 'VmRSS');
  const repoBefore = listing(join(dir, 'chain'));
  const someUrl = `/v1/endorsement?url=${encodeURIComponent(`https://a.example/pkg/5/artifact-5.tgz`)}`;
  const attacks = [
    ['info/refs: endless pkt-lines, never a flush', 10_000],
    ['pack: the header declares 2^31 objects', 10_000],
    ['pack: zip bomb, eight objects of 255 MiB each (as claimed)', 10_000],
    ['pack: a quadratic delta chain (3,000 deltas, each the whole of a 9 MiB base)', 15_000],
    ['pack: one object more than allowed (2,000,001 empty blobs)', 15_000],
    ['upload-pack: the pack in one-byte side-band packets', 10_000],
    ['upload-pack: far more than any chain update (endless pack data)', 15_000],
  ] as const;
  for (const [name, ms] of attacks) {
    const c = cases.find((x) => x.name === name)!;
    const expect = c.expect;
    const t0 = Date.now();
    hostile.script = c.script();
    const err = await until(
      `the mirror to report ${name}`,
      async () => {
        const r = await getJson(gw.url, '/readyz');
        const s = r.json.sync;
        return s?.last_error && Date.parse(s.last_attempt) >= t0 && expect.test(s.last_error.message) ? s.last_error : null;
      },
      ms,
    );
    assert.is(err.code, 'io_error', name);
    assert.equal((await getJson(gw.url, '/v1/checkpoint')).json, checkpoint.json, `${name}: the served checkpoint moved`);
    assert.is((await getJson(gw.url, someUrl)).status, 200, `${name}: a lookup failed`);
    assert.is((await getJson(gw.url, '/readyz')).status, 200, `${name}: /readyz`);
  }
  // The trickle, with the gateway's default deadlines (discovery: 20 s).
  const t0 = Date.now();
  hostile.script = {
    refs: async (res) => {
      res.writeHead(200, ADVERT_TYPE);
      for (const b of advertisement(NEW_OID)) {
        if (!(await send(res, Buffer.from([b])))) return;
        await sleep(1000);
      }
      res.end();
    },
  };
  const slow = await until(
    'the mirror to give up on a trickling remote',
    async () => {
      const s = (await getJson(gw.url, '/readyz')).json.sync;
      // Only the trickle ends an attempt with the advertisement's own deadline (20 s); an attempt that began
      // before t0 may be the one that meets it, so the attempt's start is not compared with t0.
      return s?.last_error && /did not answer in time \(20 s\)/.test(s.last_error.message) ? s : null;
    },
    110_000,
  );
  // An attempt of the previous attack may still be in flight at t0 (up to its 30 s stall bound) before
  // the trickle is asked for, and a loaded machine stretches each step: still under the 120 s the
  // exchange bound took before the advertisement had its own.
  assert.ok(Date.now() - t0 < 110_000, `the trickle took ${Date.now() - t0} ms`);
  assert.ok(slow.consecutive_failures >= 1);
  assert.equal((await getJson(gw.url, '/v1/checkpoint')).json, checkpoint.json);
  assert.equal(listing(join(dir, 'chain')), repoBefore, "the hostile remote changed the mirror's chain repository");
  const growth = procStatus(pid, 'VmHWM') - rss0;
  assert.ok(growth < RSS_LIMIT, `the mirror's peak RSS grew by ${Math.round(growth / MiB)} MiB`);
  // Honest again, with a new block: the mirror catches up.
  hostile.script = null;
  const b = await appendAndPush('after-attacks');
  await until(
    'the mirror to catch up',
    async () => {
      const r = await getJson(gw.url, '/v1/checkpoint');
      return r.json.head === b.record_hash;
    },
    15_000,
  );
  const ready = await getJson(gw.url, '/readyz');
  assert.is(ready.status, 200);
  assert.is(ready.json.sync.last_error, null);
  assert.is(ready.json.chain.size, b.index + 1);
  const fsck = await gitAsync(['-C', join(dir, 'chain'), 'fsck', '--strict', '--no-progress']);
  assert.is(fsck.status, 0, fsck.stderr);
  await gw.stop();
  gatewayMirror = null;
});

// ---------------------------------------------------------------------------
// https origins with bad certificates

let tlsGateway: GatewayProcess | null = null;
const tlsServers = new Map<string, HttpsServer>();

test('https origins whose certificate is self-signed, for another name or expired are refused: 502 origin_error, nothing served or cached; a submit of them is refused', async () => {
  const dir = fresh('tls');
  mkdirSync(dir);
  const ssl = (...args: string[]) => promisify(execFile)('openssl', args, { cwd: dir });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  await ssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=vouch test CA');
  const leaf = async (name: string, san: string, days: string) => {
    await ssl('req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', '/CN=localhost', '-addext', `subjectAltName=${san}`);
    await ssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-out', `${name}.pem`, '-days', days, '-copy_extensions', 'copy');
  };
  await leaf('good', 'DNS:localhost', '2');
  await leaf('other', 'DNS:other.example', '2');
  await leaf('expired', 'DNS:localhost', '-1'); // notAfter one day before notBefore (now): expired
  await ssl(
    'req',
    '-x509',
    ...ec,
    '-keyout',
    'self.key',
    '-out',
    'self.pem',
    '-days',
    '2',
    '-subj',
    '/CN=localhost',
    '-addext',
    'subjectAltName=DNS:localhost',
  );
  const expiredDates = (await ssl('x509', '-in', 'expired.pem', '-noout', '-enddate')).stdout;
  assert.ok(Date.parse(expiredDates.replace('notAfter=', '').trim()) < Date.now(), expiredDates);

  // One artifact per origin: the gateway caches by artifact_hash, so equal bytes would be served from the good origin's copy.
  const artifactOf = (name: string) => Buffer.from(`an artifact behind TLS at the ${name} origin\n`.repeat(100));
  const hits: Record<string, number> = {};
  const ports: Record<string, number> = {};
  for (const name of ['good', 'other', 'expired', 'self']) {
    hits[name] = 0;
    const s = createHttpsServer({ key: readFileSync(join(dir, `${name}.key`)), cert: readFileSync(join(dir, `${name}.pem`)) }, (_q, r) => {
      hits[name]!++;
      const artifact = artifactOf(name);
      r.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': artifact.length }).end(artifact);
    });
    s.on('tlsClientError', () => {});
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    tlsServers.set(name, s);
    ports[name] = (s.address() as AddressInfo).port;
  }
  const artifactUrl = (name: string, file = 'artifact.bin') => `https://localhost:${ports[name]}/${file}`;

  // A chain that endorses the artifact at each of the four origins (signed here: a submit of the bad ones is refused).
  const chain: Block[] = [buildLongChain(1).blocks[0]!];
  for (const name of ['good', 'other', 'expired', 'self']) {
    const prev = chain[chain.length - 1]!;
    chain.push(
      buildEndorseBlock({
        prev,
        signer,
        backend: nodeBackend,
        now: T0 + chain.length * 1000,
        entries: [
          {
            url: artifactUrl(name),
            artifactHash: artifactHashOf(nodeBackend, 'sha256', artifactOf(name)),
            name: `acme/tls-${name}`,
            semver: '1.0.0',
            license: 'MIT',
          },
        ],
      }),
    );
  }
  await ChainRepo.init(
    join(dir, 'chain'),
    chain.map((b) => ({ index: b.index, content: formatBlockFile(b) })),
    formatCheckpointFile(buildCheckpoint({ head: chain[chain.length - 1]!, signer, now: T0 + 10_000 })),
    commitFor([chain[0]!], T0),
  );
  writeFileSync(join(dir, 'authority.pem'), privateKeyFromSeed(TEST_SEED).export({ format: 'pem', type: 'pkcs8' }) as string, { mode: 0o600 });
  chmodSync(join(dir, 'authority.pem'), 0o600);
  const token = 'tls-test-token-' + 'z'.repeat(24);
  writeFileSync(join(dir, 'submit.token'), token, { mode: 0o600 });
  tlsGateway = await startGatewayProcess(
    [
      '--config',
      writeConfig(dir, {
        listen: { port: 0 },
        chain: { dir: join(dir, 'chain') },
        authority: { key_file: join(dir, 'authority.pem'), signer: signer.id, submit_token_file: join(dir, 'submit.token') },
        origin: { allow_private: true, timeout: 5 },
      }),
    ],
    { env: { NODE_EXTRA_CA_CERTS: join(dir, 'ca.pem') } },
  );
  const gw = tlsGateway;
  const download = async (u: string) => {
    const r = await request(`${gw.url}/v1/download?url=${encodeURIComponent(u)}`, { dispatcher: agent });
    return { status: r.statusCode, body: Buffer.from(await r.body.arrayBuffer()), headers: r.headers };
  };
  const submit = async (u: string, name: string) => {
    const r = await request(`${gw.url}/v1/submit`, {
      method: 'POST',
      dispatcher: agent,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: u, name, semver: '2.0.0', license: 'MIT' }),
    });
    return { status: r.statusCode, json: (await r.body.json()) as any };
  };

  // The control: a certificate from the CA in NODE_EXTRA_CA_CERTS, for the right name, in its validity period.
  const ok = await download(artifactUrl('good'));
  assert.is(ok.status, 200);
  assert.ok(ok.body.equals(artifactOf('good')));
  const okSubmit = await submit(artifactUrl('good', 'new.bin'), 'acme/tls-good-2');
  assert.is(okSubmit.status, 201, JSON.stringify(okSubmit.json));

  for (const name of ['self', 'other', 'expired'] as const) {
    for (let round = 0; round < 2; round++) {
      // twice: the refusal is not cached as bytes either
      const r = await download(artifactUrl(name));
      assert.is(r.status, 502, `${name}: ${r.status} ${r.body.toString()}`);
      assert.not.ok(r.body.includes('an artifact behind TLS'), `${name}: artifact bytes were served`);
      const text = r.body.toString();
      if (text) assert.match(text, /origin_error/, `${name}: ${text}`);
    }
    const s = await submit(artifactUrl(name, 'new.bin'), `acme/tls-${name}-2`);
    assert.is(s.status, 502, `${name}: submit answered ${s.status} ${JSON.stringify(s.json)}`);
    assert.is(s.json.status, 'origin_error', JSON.stringify(s.json));
    const why = { self: /SELF_SIGNED/, other: /ALTNAME/, expired: /EXPIRED/ }[name]!;
    assert.match(s.json.message, why, JSON.stringify(s.json));
    assert.is(hits[name], 0, `${name}: the origin was asked for bytes over a connection that did not verify`);
  }
  // Nothing of a refused one was cached: once its certificate is fixed, the bytes come from the origin.
  tlsServers.get('self')!.setSecureContext({ key: readFileSync(join(dir, 'good.key')), cert: readFileSync(join(dir, 'good.pem')) });
  const fixed = await download(artifactUrl('self'));
  assert.is(fixed.status, 200);
  assert.ok(fixed.body.equals(artifactOf('self')));
  assert.is(hits.self, 1, 'served without asking the origin: it had been cached');
  assert.is((await getJson(gw.url, '/v1/checkpoint')).json.size, chain.length + 1, 'only the good submit was appended');
  await gw.stop();
  tlsGateway = null;
});

test.run();
