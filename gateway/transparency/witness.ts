/**
 * The gateway as a C2SP tlog-witness (`POST /add-checkpoint`): per log, the
 * latest checkpoint it cosigned (size, root); it cosigns a new one only when
 * a trusted key of its origin signed it, its `old` size is the recorded one
 * and the consistency proof holds (tlog-cosignature v1). A log configured
 * with its gateway `url` learns key events from `/v1/keys` (chain/key-walk).
 * Owns: the request body's format, and the state file (`witness.state_file`,
 * replaced whole and fsynced before a cosignature is answered).
 * Trusts: the configured log keys; the local disk; the clock.
 * Must hold: a recorded size never decreases and a root never changes at a
 * size; check, persist and cosign run in one synchronous step (no rollback
 * race); an unreadable state file stops the start; the private key is never
 * logged or answered.
 */
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { dirname } from 'node:path';
import { VouchError } from '../../chain/errors.ts';
import { base64Decode, base64Encode, bytesEqual } from '../../chain/encoding.ts';
import type { CryptoBackend, Signer } from '../../chain/crypto-backend.ts';
import { cosign, openNote, parseNote, parseVerifierKey, verifierKey } from '../../chain/note.ts';
import { parseCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { verifyConsistency } from '../../chain/merkle.ts';
import { MAX_WALKED_KEY_EVENTS } from '../../chain/key-events.ts';
import { KeyWalkError, parseKeysAnswer, parseTrail, startTrail, walkKeyEvents, type KeyTrail } from '../../chain/key-walk.ts';
import { fsyncDir, writeDurably } from '../../platform/durable-file.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeSigner } from '../../platform/node-crypto.ts';
import type { WitnessConfig } from '../config.ts';
import type { Logger } from '../observability/logger.ts';

/** tlog-witness: a client MUST NOT send more than 63 consistency proof lines. */
export const MAX_PROOF_LINES = 63;
const STATE_VERSION = 1;

/** A log the witness cosigns for: the checkpoint origin and one key trusted to sign it. */
export interface WitnessedLog {
  origin: string;
  /** The note key's name (the `— <name>` of its signature lines). */
  name: string;
  publicKey: Uint8Array;
  /** The log's gateway, whose `/v1/keys` is read to follow key events (null: the configured keys only). */
  url?: string | null;
}

interface Record_ {
  size: number;
  root: Uint8Array;
  time: number;
}

/** The most bytes of a `/v1/keys` answer the witness reads. */
const MAX_KEYS_ANSWER = 8 * 1024 * 1024;

export interface AddCheckpointRequest {
  old: number;
  proof: Uint8Array[];
  /** The signed checkpoint note, as sent. */
  note: string;
}

/** What `addCheckpoint` answers, by the status tlog-witness gives it. */
export type WitnessAnswer =
  | { status: 200; lines: string[] }
  | { status: 409; size: number; message: string }
  | { status: 400 | 403 | 404 | 422 | 500; message: string };

export interface WitnessStats {
  /** Requests by outcome. */
  cosigned: number;
  conflict: number;
  inconsistent: number;
  unknown_log: number;
  bad_signature: number;
  malformed: number;
  too_large: number;
  failed: number;
}

const malformed = (message: string): never => {
  throw new VouchError('bad_request', message);
};

/**
 * Parses an add-checkpoint body: `old <size>`, up to 63 base64 hashes, an
 * empty line, the signed checkpoint note. Each line ends with a newline.
 * @throws VouchError bad_request naming what is wrong
 */
export function parseAddCheckpoint(body: Uint8Array): AddCheckpointRequest {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(body);
  } catch {
    return malformed('the body is not UTF-8');
  }
  let at = text.indexOf('\n');
  if (at === -1) malformed('the body has no old size line');
  const m = /^old (0|[1-9][0-9]{0,15})$/.exec(text.slice(0, at));
  if (m === null || !Number.isSafeInteger(Number(m[1]))) malformed('the first line must be "old <size>" (decimal, no leading zeros)');
  const old = Number(m![1]);
  const proof: Uint8Array[] = [];
  for (;;) {
    const end = text.indexOf('\n', at + 1);
    if (end === -1) malformed('the body has no empty line before the checkpoint');
    const line = text.slice(at + 1, end);
    at = end;
    if (line === '') break;
    if (proof.length === MAX_PROOF_LINES) malformed(`more than ${MAX_PROOF_LINES} consistency proof lines`);
    const hash = /^[A-Za-z0-9+/]{43}=$/.test(line) ? base64Decode(line) : null;
    if (hash === null || hash.length !== 32) malformed(`consistency proof line ${proof.length + 1} is not the base64 of a 32-byte hash`);
    proof.push(hash!);
  }
  return { old, proof, note: text.slice(at + 1) };
}

/** The add-checkpoint body for `note` (a signed checkpoint) after size `old` with its consistency proof. */
export function formatAddCheckpoint(old: number, proof: readonly Uint8Array[], note: string): string {
  return `old ${old}\n${proof.map((h) => base64Encode(h) + '\n').join('')}\n${note}`;
}

export class Witness {
  private readonly logs = new Map<string, WitnessedLog[]>();
  private readonly records = new Map<string, Record_>();
  /** Key trails walked per origin (docs/spec/key-events.md): the key in force is trusted instead of the configured one. */
  private readonly trails = new Map<string, KeyTrail>();
  private readonly learning = new Map<string, Promise<void>>();
  private readonly counts: WitnessStats = {
    cosigned: 0,
    conflict: 0,
    inconsistent: 0,
    unknown_log: 0,
    bad_signature: 0,
    malformed: 0,
    too_large: 0,
    failed: 0,
  };
  /** The witness's verifier key (`name+hex8+base64(0x04 ‖ key)`). */
  readonly vkey: string;
  /**
   * The gateway's own chain as a log (its origin and the online key in force
   * of its verified chain), once its chain has a checkpoint note; asked on
   * each request that names an origin not configured.
   */
  ownLog: (() => WitnessedLog | null) | null = null;

  /**
   * Reads the state file (absent: a first start) and knows `logs`.
   * @throws VouchError io_error when the state file exists but is not a witness state of this format
   */
  constructor(
    private readonly o: {
      backend: CryptoBackend;
      /** The witness key; cosignature lines carry `name`. */
      signer: Signer;
      name: string;
      stateFile: string;
      logs: readonly WitnessedLog[];
      /** Epoch milliseconds. */
      now: () => number;
      log: Logger;
    },
  ) {
    this.vkey = verifierKey(o.backend, o.name, 0x04, o.signer.publicKey);
    for (const l of o.logs) this.addLog(l);
    this.readState();
  }

  /** Adds a log key (the gateway's own chain's, once known). A key already known for the origin is not added twice. */
  addLog(l: WitnessedLog): void {
    const list = this.logs.get(l.origin) ?? [];
    if (!list.some((k) => k.name === l.name && bytesEqual(k.publicKey, l.publicKey))) list.push(l);
    this.logs.set(l.origin, list);
  }

  /** The keys trusted for `origin`: the key in force of its walked trail, else the configured ones. */
  private trusted(origin: string, configured: readonly WitnessedLog[]): readonly WitnessedLog[] {
    const t = this.trails.get(origin);
    return t === undefined ? configured : [{ origin, name: origin, publicKey: base64Decode(t.state.online.publicKey)! }];
  }

  /** The key trail walked for `origin` (tests). */
  keyTrail(origin: string): KeyTrail | null {
    return this.trails.get(origin) ?? null;
  }

  /**
   * Before `addCheckpoint`: when the body's note names a log configured with
   * a `url` and carries no signature by a key trusted for it, reads
   * `<url>/v1/keys?since=<sequence>` and walks the key blocks, each proven
   * in the submitted checkpoint's tree (`/v1/proof/inclusion` at its size
   * when the answer's note is another), from block 0's configured key or the
   * trail kept. The note must open with the key in force after them, else
   * nothing changes. Never throws: a failure is logged and the synchronous
   * step refuses the note as it would have (403).
   */
  learnKeys(body: Uint8Array): Promise<void> {
    let cp: ReturnType<typeof parseCheckpoint>;
    let text: string;
    try {
      text = parseAddCheckpoint(body).note;
      cp = parseCheckpoint(parseNote(text).text);
    } catch {
      return Promise.resolve();
    }
    const configured = this.logs.get(cp.origin);
    const url = configured?.find((l) => l.url)?.url ?? null;
    if (configured === undefined || url === null) return Promise.resolve();
    const opened = openNote(this.o.backend, text, this.trusted(cp.origin, configured));
    if (opened.ok || opened.why !== 'unverified') return Promise.resolve();
    const running = this.learning.get(cp.origin);
    if (running) return running;
    const p = this.walk(cp, text, configured, url)
      .catch((e: unknown) => {
        this.o.log.warn("witness: cannot follow the log's key events; the note stays refused", { origin: cp.origin, url, error: firstLine(e) });
      })
      .finally(() => this.learning.delete(cp.origin));
    this.learning.set(cp.origin, p);
    return p;
  }

  private async getJson(url: string): Promise<unknown> {
    const res = await fetch(url, { redirect: 'error', signal: AbortSignal.timeout(10_000), headers: { accept: 'application/json' } });
    if (res.status !== 200) throw new Error(`${url}: HTTP ${res.status}`);
    const declared = Number(res.headers.get('content-length') ?? '0');
    if (declared > MAX_KEYS_ANSWER) throw new Error(`${url}: an answer of ${declared} bytes`);
    const chunks: Uint8Array[] = [];
    let n = 0;
    for await (const c of res.body as unknown as AsyncIterable<Uint8Array>) {
      n += c.length;
      if (n > MAX_KEYS_ANSWER) throw new Error(`${url}: an answer over ${MAX_KEYS_ANSWER} bytes`);
      chunks.push(c);
    }
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  }

  private async walk(cp: ReturnType<typeof parseCheckpoint>, note: string, configured: readonly WitnessedLog[], url: string): Promise<void> {
    const before = this.trails.get(cp.origin) ?? null;
    const answer = parseKeysAnswer(await this.getJson(`${url}/v1/keys?since=${before?.state.sequence ?? 0}`), url);
    let tree = { size: cp.size, root: cp.root };
    /** When the proofs are against the gateway's own (smaller) note: that note, to open with the key in force too. */
    let servedNote: string | null = null;
    if (answer.events.length > MAX_WALKED_KEY_EVENTS) {
      throw new KeyWalkError(
        'key_walk_limit',
        `${url}: ${answer.events.length} key events since sequence ${before?.state.sequence ?? 0}; a witness walks at most ${MAX_WALKED_KEY_EVENTS} in one update: configure the log's current key`,
      );
    }
    if (answer.size < cp.size) {
      // The gateway serves a smaller tree than the one submitted (it lags behind the authority): the proofs are
      // against its note, which must open with the key in force after the events as the submitted one must.
      let served;
      try {
        served = parseCheckpoint(parseNote(answer.checkpoint).text);
      } catch (e) {
        throw new KeyWalkError('bad_answer', `${url}: the /v1/keys checkpoint: ${firstLine(e)}`);
      }
      if (served.size !== answer.size || served.origin !== cp.origin)
        throw new KeyWalkError('bad_answer', `${url}: the /v1/keys checkpoint is not of ${cp.origin} at size ${answer.size}`);
      tree = { size: served.size, root: served.root };
      servedNote = answer.checkpoint;
    } else if (answer.size > cp.size) {
      // Proofs in the submitted checkpoint's tree, not the larger one the gateway serves now.
      const at = async (index: number): Promise<Uint8Array[]> => {
        const j = (await this.getJson(`${url}/v1/proof/inclusion?index=${index}&size=${cp.size}`)) as { index?: unknown; size?: unknown; proof?: unknown };
        if (j.index !== index || j.size !== cp.size || !Array.isArray(j.proof) || j.proof.length > 128)
          throw new KeyWalkError('bad_answer', `${url}: the inclusion answer is not for index ${index} in size ${cp.size}`);
        return j.proof.map((h) => {
          const b = typeof h === 'string' ? base64Decode(h) : null;
          if (b === null || b.length !== 32) throw new KeyWalkError('bad_answer', `${url}: a proof hash is not base64 of 32 bytes`);
          return b;
        });
      };
      answer.events = answer.events.filter((e) => e.index < cp.size);
      for (const e of answer.events) e.proof = await at(e.index);
      if (before === null) answer.firstBlock.proof = await at(0);
    }
    let trail = before;
    if (trail === null) {
      let first: KeyWalkError | null = null;
      for (const l of configured) {
        try {
          trail = startTrail(this.o.backend, answer, tree, base64Encode(l.publicKey), url);
          break;
        } catch (e) {
          if (!(e instanceof KeyWalkError)) throw e;
          first ??= e;
        }
      }
      if (trail === null) throw first ?? new KeyWalkError('untrusted_authority', `${url}: no configured key of ${cp.origin} is its block 0's`);
    } else if (answer.chain !== trail.state.chain) {
      throw new KeyWalkError('bad_answer', `${url}: /v1/keys is for chain ${answer.chain}, the trail kept is for ${trail.state.chain}`);
    }
    const next = walkKeyEvents(this.o.backend, trail, answer.events, tree, url);
    if (next.state.sequence === (before?.state.sequence ?? 0)) return; // nothing new: the note stays refused
    const inForce = [{ name: cp.origin, publicKey: base64Decode(next.state.online.publicKey)! }];
    if (!openNote(this.o.backend, note, inForce).ok)
      throw new KeyWalkError('bad_key_event', `the checkpoint is not signed by the key in force after the key events (${next.state.online.publicKey})`);
    if (servedNote !== null && !openNote(this.o.backend, servedNote, inForce).ok)
      throw new KeyWalkError('bad_key_event', `${url}: its checkpoint is not signed by the key in force after its key events`);
    this.trails.set(cp.origin, next);
    this.o.log.info("witness: followed the log's key events", { origin: cp.origin, sequence: next.state.sequence, online: next.state.online.publicKey });
  }

  /** The latest cosigned size and root of `origin` (tests, health). */
  recorded(origin: string): { size: number; root: string } | null {
    const r = this.records.get(origin);
    return r === undefined ? null : { size: r.size, root: base64Encode(r.root) };
  }

  stats(): WitnessStats {
    return { ...this.counts };
  }

  /** Counts a body refused before parsing (over the size bound). */
  countTooLarge(): void {
    this.counts.too_large++;
  }

  /**
   * Handles one add-checkpoint body. Synchronous from the check to the
   * persisted record (see the header).
   */
  addCheckpoint(body: Uint8Array): WitnessAnswer {
    let req: AddCheckpointRequest;
    let note: ReturnType<typeof parseNote>;
    let cp: ReturnType<typeof parseCheckpoint>;
    try {
      req = parseAddCheckpoint(body);
      note = parseNote(req.note);
      cp = parseCheckpoint(note.text);
    } catch (e) {
      this.counts.malformed++;
      return { status: 400, message: firstLine(e) };
    }
    let keys = this.logs.get(cp.origin);
    if (keys === undefined) {
      // The gateway's own chain: the key in force of what it verified, asked each time (a key event moves it).
      const own = this.ownLog?.() ?? null;
      if (own !== null && own.origin === cp.origin) keys = [own];
    }
    if (keys === undefined) {
      this.counts.unknown_log++;
      return { status: 404, message: `unknown log origin ${JSON.stringify(cp.origin.slice(0, 200))}` };
    }
    // Go's note.Open with the log's keys: other keys' lines (cosignatures, unknown keys, repeated or not) are
    // ignored, a trusted key's first line must verify (its later ones are dropped), and one must be there.
    const opened = openNote(this.o.backend, req.note, this.trusted(cp.origin, keys));
    if (!opened.ok) {
      this.counts.bad_signature++;
      return {
        status: 403,
        message:
          opened.why === 'invalid'
            ? `the signature of ${opened.signature.name} (a key trusted for ${cp.origin}) does not verify`
            : `no signature of a key trusted for ${cp.origin} verifies`,
      };
    }
    if (req.old > cp.size) {
      this.counts.malformed++;
      return { status: 400, message: `old size ${req.old} is larger than the checkpoint size ${cp.size}` };
    }
    const rec = this.records.get(cp.origin) ?? null;
    const known = rec?.size ?? 0;
    if (req.old !== known) {
      this.counts.conflict++;
      return { status: 409, size: known, message: `old size ${req.old} is not the size of the latest cosigned checkpoint` };
    }
    if (req.old === 0 && req.proof.length > 0) {
      this.counts.malformed++;
      return { status: 400, message: 'the consistency proof must be empty when the old size is 0' };
    }
    if (rec !== null && cp.size === rec.size) {
      if (!bytesEqual(cp.root, rec.root)) {
        this.counts.conflict++;
        this.o.log.warn('witness: a checkpoint with the recorded size and another root (a fork of the log?)', {
          origin: cp.origin,
          size: cp.size,
          recorded_root: base64Encode(rec.root),
          root: base64Encode(cp.root),
        });
        return { status: 409, size: rec.size, message: `a checkpoint of size ${cp.size} with another root was cosigned` };
      }
      if (req.proof.length > 0) {
        this.counts.inconsistent++;
        return { status: 422, message: 'the consistency proof between equal sizes must be empty' };
      }
    } else if (rec !== null && rec.size > 0 && !verifyConsistency(this.o.backend, rec.size, cp.size, rec.root, cp.root, req.proof)) {
      this.counts.inconsistent++;
      this.o.log.warn('witness: a signed checkpoint is not consistent with the one cosigned before', {
        origin: cp.origin,
        recorded_size: rec.size,
        recorded_root: base64Encode(rec.root),
        size: cp.size,
        root: base64Encode(cp.root),
      });
      return { status: 422, message: `the consistency proof from size ${rec.size} to ${cp.size} does not verify` };
    }
    const time = Math.floor(this.o.now() / 1000);
    const next: Record_ = { size: cp.size, root: cp.root, time };
    try {
      this.writeState(cp.origin, next);
    } catch (e) {
      this.counts.failed++;
      this.o.log.error('witness: cannot persist the state file; nothing cosigned', { file: this.o.stateFile, error: firstLine(e) });
      return { status: 500, message: 'the witness could not persist its state' };
    }
    this.records.set(cp.origin, next);
    const sig = cosign(this.o.backend, note.text, this.o.name, this.o.signer, time);
    this.counts.cosigned++;
    return { status: 200, lines: [sig.line] };
  }

  private readState(): void {
    const file = this.o.stateFile;
    if (!existsSync(file)) return;
    let doc: { version?: unknown; logs?: unknown };
    try {
      doc = JSON.parse(readFileSync(file, 'utf8'));
    } catch (e) {
      throw new VouchError('io_error', `witness.state_file ${file} cannot be read as JSON (${firstLine(e)}); a witness never starts without its state`);
    }
    const logs = doc?.logs;
    if (doc?.version !== STATE_VERSION || typeof logs !== 'object' || logs === null || Array.isArray(logs)) {
      throw new VouchError('io_error', `witness.state_file ${file} is not a vouch witness state (version ${STATE_VERSION})`);
    }
    for (const [origin, r] of Object.entries(logs as Record<string, { size?: unknown; root?: unknown; time?: unknown; keys?: unknown }>)) {
      const root = typeof r?.root === 'string' ? base64Decode(r.root) : null;
      if (!Number.isSafeInteger(r?.size) || (r.size as number) < 0 || root === null || root.length !== 32) {
        throw new VouchError('io_error', `witness.state_file ${file}: the record of ${JSON.stringify(origin)} is malformed`);
      }
      if (r.keys !== undefined) {
        const trail = parseTrail(r.keys);
        if (trail === null) throw new VouchError('io_error', `witness.state_file ${file}: the key trail of ${JSON.stringify(origin)} is malformed`);
        this.trails.set(origin, trail);
      }
      this.records.set(origin, { size: r.size as number, root, time: Number.isSafeInteger(r.time) ? (r.time as number) : 0 });
    }
  }

  /** Writes every record, `origin`'s replaced by `next`: temporary file fsynced, renamed, directory fsynced. */
  private writeState(origin: string, next: Record_): void {
    const logs: Record<string, { size: number; root: string; time: number; keys?: KeyTrail }> = {};
    const keys = (o: string) => {
      const t = this.trails.get(o);
      return t === undefined ? {} : { keys: t };
    };
    for (const [o, r] of this.records) logs[o] = { size: r.size, root: base64Encode(r.root), time: r.time, ...keys(o) };
    logs[origin] = { size: next.size, root: base64Encode(next.root), time: next.time, ...keys(origin) };
    const file = this.o.stateFile;
    const dir = dirname(file);
    mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeDurably(tmp, Buffer.from(JSON.stringify({ version: STATE_VERSION, witness: this.vkey, logs }, null, 1) + '\n'), 0o644);
    renameSync(tmp, file);
    fsyncDir(dir);
  }
}

/** The logs of `witness.logs`: each verifier key (type 0x01), under its origin (default: the key's name). */
export function configuredLogs(backend: CryptoBackend, logs: readonly { vkey: string; origin: string | null; url?: string | null }[]): WitnessedLog[] {
  return logs.map((l, i) => {
    let k: ReturnType<typeof parseVerifierKey>;
    try {
      k = parseVerifierKey(backend, l.vkey);
    } catch (e) {
      throw new VouchError('usage', `config: witness.logs[${i}].vkey ${firstLine(e)}`);
    }
    if (k.type !== 0x01) throw new VouchError('usage', `config: witness.logs[${i}].vkey must be an ed25519 note key (type 0x01), not type ${k.type}`);
    return { origin: l.origin ?? k.name, name: k.name, publicKey: k.publicKey, url: l.url ?? null };
  });
}

function firstLine(e: unknown): string {
  return ((e as Error)?.message ?? String(e)).split('\n')[0]!.slice(0, 300);
}

/**
 * The witness of a `witness` config section: its key (`key_file`, never
 * created here: a witness key is made on purpose, with `vouch keygen`), its
 * state, and the configured logs. The gateway prints `witness: <vkey>`.
 */
export function openWitness(config: WitnessConfig, backend: CryptoBackend, log: Logger, now: () => number): Witness {
  const signer = nodeSigner(config.name, readKeyFile(config.key_file));
  return new Witness({ backend, signer, name: config.name, stateFile: config.state_file, logs: configuredLogs(backend, config.logs), now, log });
}
