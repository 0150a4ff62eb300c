/**
 * The authority's side of witnessing: after each append the committed
 * checkpoint note goes to every `authority.witnesses` entry (C2SP
 * tlog-witness) with a consistency proof from the size it last cosigned;
 * cosignatures that verify are served with that exact checkpoint at
 * `GET /checkpoint`, and `authority.policy_file` says if they make a quorum.
 * Owns: `.git/vouch-cosigned-checkpoint` (replaced atomically), the
 * per-witness loop and its counters.
 * Trusts: the verified chain's note and proofs; of a witness, only a
 * cosignature that verifies with its configured key.
 * Must hold: never delays a submit (`notify` only schedules); one request in
 * flight per witness, bounded; one retry on 409; a witness that did not
 * cosign is asked again with doubling delays up to a minute; a cosignature
 * is served only beside the checkpoint it signs.
 */
import { readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { VouchError } from '../../chain/errors.ts';
import type { CryptoBackend } from '../../chain/crypto-backend.ts';
import { bytesEqual } from '../../chain/encoding.ts';
import { parseNote, parseVerifierKey, verifyCosignature, type Note, type NoteSignature } from '../../chain/note.ts';
import { parseCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { checkQuorum, type Policy } from '../../chain/tlog-policy.ts';
import { readPolicyFile } from '../../platform/policy-file.ts';
import { writeDurably } from '../../platform/durable-file.ts';
import { formatAddCheckpoint } from './witness.ts';
import type { Logger } from '../observability/logger.ts';

/** Where the authority gets what it sends: the newest committed signed checkpoint, and proofs from its tree. */
export interface CheckpointSource {
  /** The committed checkpoint note (the authority's signature only), or null before the chain has one. */
  note(): string | null;
  /** RFC 6962 consistency proof between two sizes of the tree (0 < from <= to <= size). */
  consistencyProof(from: number, to: number): Uint8Array[];
}

export const WITNESS_TIMEOUT_MS = 5_000;
/** Bound of a witness's answer (its cosignature lines). */
const ANSWER_LIMIT = 16 * 1024;

type Outcome = 'cosigned' | 'conflict' | 'rejected' | 'bad_cosignature' | 'unreachable';

interface WitnessPeer {
  url: string;
  vkey: string;
  name: string;
  publicKey: Uint8Array;
  /** The size this witness last cosigned (as far as we know; 0 until it says otherwise). */
  size: number;
  busy: boolean;
  again: boolean;
  outcomes: Record<Outcome, number>;
  /** The next ask of the same checkpoint after one that got no cosignature, and its delay (doubling). */
  retry: ReturnType<typeof setTimeout> | null;
  backoffMs: number;
}

/** First and longest wait before asking a witness again for a checkpoint it did not cosign (unreachable, refused, lagging). */
const RETRY_FIRST_MS = 1_000;
const RETRY_MAX_MS = 60_000;

export interface CosignerStats {
  witnesses: number;
  /** Requests by witness key name and outcome. */
  requests: { witness: string; outcome: Outcome; count: number }[];
  /** Cosignatures held for the committed checkpoint. */
  cosignatures: number;
  /** 1 met, 0 unmet, null no policy. */
  quorum: number | null;
}

export class Cosigner {
  private readonly peers: WitnessPeer[];
  /** The checkpoint body the held lines sign, and the lines by witness name. */
  private body: string | null = null;
  private lines = new Map<string, string>();
  private closed = false;
  /** Bumped whenever the held lines change; `served` keeps its last answer per (note, version). */
  private version = 0;
  private servedIn = '';
  private servedOut = '';
  private servedVersion = -1;
  private readonly inflight = new Set<AbortController>();

  /** @throws VouchError usage on a witness vkey that is not an ed25519 cosignature key (type 0x04) */
  constructor(
    private readonly o: {
      backend: CryptoBackend;
      witnesses: readonly { url: string; vkey: string }[];
      policy: Policy | null;
      /** `.git/vouch-cosigned-checkpoint` of the chain. */
      file: string;
      source: CheckpointSource;
      log: Logger;
      timeoutMs?: number;
    },
  ) {
    this.peers = o.witnesses.map((w, i) => {
      let k: ReturnType<typeof parseVerifierKey>;
      try {
        k = parseVerifierKey(o.backend, w.vkey);
      } catch (e) {
        throw new VouchError('usage', `config: authority.witnesses[${i}].vkey ${(e as Error).message.split('\n')[0]}`);
      }
      if (k.type !== 0x04) throw new VouchError('usage', `config: authority.witnesses[${i}].vkey must be a cosignature key (type 0x04), not type ${k.type}`);
      return {
        url: w.url,
        vkey: w.vkey,
        name: k.name,
        publicKey: k.publicKey,
        size: 0,
        busy: false,
        again: false,
        retry: null,
        backoffMs: RETRY_FIRST_MS,
        outcomes: { cosigned: 0, conflict: 0, rejected: 0, bad_cosignature: 0, unreachable: 0 },
      };
    });
  }

  /** Whether the witness (key name, key) is one this cosigner asks. */
  asks(name: string, publicKey: Uint8Array): boolean {
    return this.peers.some((p) => p.name === name && bytesEqual(p.publicKey, publicKey));
  }

  /**
   * A restart: takes back the cosignatures kept for the committed
   * checkpoint, and learns from the kept note (whichever checkpoint it is)
   * the size each witness whose cosignature on it verifies last cosigned,
   * so the next request carries a consistency proof from there instead of
   * costing a 409 first. Then asks the witnesses missing.
   */
  start(): void {
    const note = this.o.source.note();
    if (note !== null) {
      try {
        const kept = parseNote(readFileSync(this.o.file, 'utf8'));
        const current = parseNote(note).text;
        const keptSize = parseCheckpoint(kept.text).size;
        const same = kept.text === current;
        // A kept checkpoint larger than the chain (rolled back) teaches nothing: proofs go up to the chain's size.
        const usable = keptSize <= parseCheckpoint(current).size;
        for (const p of this.peers) {
          const line = this.validLine(kept, p);
          if (line === null) continue;
          if (usable) p.size = keptSize;
          if (same) this.lines.set(p.name, line);
        }
        if (same) {
          this.body = kept.text;
          this.version++;
        }
      } catch {
        /* none kept, or not a checkpoint note */
      }
    }
    this.notify();
  }

  /** A new checkpoint was committed: ask every witness (in the background; never awaited by the submit). */
  notify(): void {
    if (this.closed) return;
    setImmediate(() => {
      for (const p of this.peers) {
        if (p.retry !== null) clearTimeout(p.retry);
        p.retry = null;
        p.backoffMs = RETRY_FIRST_MS;
        if (p.busy) p.again = true;
        else void this.run(p);
      }
    });
  }

  /**
   * The note to serve for `note` (the committed one): it plus the
   * cosignature lines held for its exact body, in the configured order.
   */
  served(note: string): string {
    if (this.lines.size === 0 || this.body === null) return note;
    if (note === this.servedIn && this.version === this.servedVersion) return this.servedOut;
    const out = this.compose(note);
    this.servedIn = note;
    this.servedOut = out;
    this.servedVersion = this.version;
    return out;
  }

  private compose(note: string): string {
    let text: string;
    try {
      text = parseNote(note).text;
    } catch {
      return note;
    }
    if (text !== this.body) return note;
    const add = this.peers.map((p) => this.lines.get(p.name)).filter((l): l is string => l !== undefined);
    return (note.endsWith('\n') ? note : note + '\n') + add.map((l) => l + '\n').join('');
  }

  /** Whether the cosignatures held for the committed checkpoint meet the policy's quorum (null: no policy or no note). */
  quorum(): { ok: boolean; signed: string[]; why?: string } | null {
    const policy = this.o.policy;
    const note = this.o.source.note();
    if (policy === null || note === null) return null;
    try {
      return checkQuorum(this.o.backend, policy, parseNote(this.served(note)));
    } catch (e) {
      return { ok: false, signed: [], why: (e as Error).message };
    }
  }

  stats(): CosignerStats {
    const q = this.quorum();
    return {
      witnesses: this.peers.length,
      requests: this.peers.flatMap((p) => (Object.entries(p.outcomes) as [Outcome, number][]).map(([outcome, count]) => ({ witness: p.name, outcome, count }))),
      cosignatures: this.lines.size,
      quorum: q === null ? null : q.ok ? 1 : 0,
    };
  }

  /** For /healthz: the checkpoint size cosigned, by how many, and the quorum. */
  report(): Record<string, unknown> {
    const q = this.quorum();
    let size: number | null = null;
    try {
      size = this.body === null ? null : parseCheckpoint(this.body).size;
    } catch {
      /* none */
    }
    return {
      witnesses: this.peers.length,
      cosigned_size: size,
      cosignatures: this.lines.size,
      quorum: q === null ? 'none' : q.ok ? 'met' : 'unmet',
      ...(q !== null && !q.ok && q.why ? { quorum_why: q.why } : {}),
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const p of this.peers) if (p.retry !== null) clearTimeout(p.retry);
    for (const c of this.inflight) c.abort();
    while (this.peers.some((p) => p.busy)) await new Promise((r) => setTimeout(r, 10));
  }

  // -------------------------------------------------------------------------

  /** Asks `p` for the committed checkpoint until it has the newest (one request at a time). */
  private async run(p: WitnessPeer): Promise<void> {
    p.busy = true;
    try {
      do {
        p.again = false;
        const note = this.o.source.note();
        if (note === null || this.closed) break;
        await this.ask(p, note).catch((e) => this.o.log.warn('witness request failed', { witness: p.name, url: p.url, error: (e as Error).message }));
      } while (p.again && !this.closed);
    } finally {
      p.busy = false;
    }
    // Not cosigned (unreachable, refused, or the witness still learning the log's keys): ask again later.
    const note = this.o.source.note();
    if (this.closed || note === null || p.retry !== null) return;
    if (this.body === parseNote(note).text && this.lines.has(p.name)) {
      p.backoffMs = RETRY_FIRST_MS;
      return;
    }
    p.retry = setTimeout(() => {
      p.retry = null;
      if (!p.busy && !this.closed) void this.run(p);
    }, p.backoffMs);
    p.retry.unref?.();
    p.backoffMs = Math.min(2 * p.backoffMs, RETRY_MAX_MS);
  }

  private async ask(p: WitnessPeer, note: string): Promise<void> {
    const parsed = parseNote(note);
    const cp = parseCheckpoint(parsed.text);
    if (this.body === parsed.text && this.lines.has(p.name)) return; // already cosigned by it
    let old = p.size <= cp.size ? p.size : 0;
    for (let attempt = 0; attempt < 2; attempt++) {
      const proof = old > 0 && old < cp.size ? this.o.source.consistencyProof(old, cp.size) : [];
      const answer = await this.post(p, formatAddCheckpoint(old, proof, note));
      if (answer === null) {
        p.outcomes.unreachable++;
        return;
      }
      if (answer.status === 200) {
        p.size = cp.size;
        const line = this.validLine(parseNote(note + answer.text), p);
        if (line === null) {
          p.outcomes.bad_cosignature++;
          this.o.log.warn('a witness answered without a cosignature that verifies with its configured key', { witness: p.name, url: p.url });
          return;
        }
        p.outcomes.cosigned++;
        this.keep(parsed.text, note, p, line);
        return;
      }
      if (answer.status === 409) {
        p.outcomes.conflict++;
        const m = /^(0|[1-9][0-9]{0,15})\n?$/.exec(answer.text);
        const known = m === null ? NaN : Number(m[1]);
        if (!Number.isSafeInteger(known)) {
          this.o.log.warn('a witness answered 409 without a size', { witness: p.name, url: p.url });
          return;
        }
        if (known > cp.size) {
          // It cosigned a larger tree of this origin than the chain has: a split view, or this chain was rolled back.
          this.o.log.error('a witness has cosigned a larger tree for this log than the chain holds', {
            witness: p.name,
            url: p.url,
            witness_size: known,
            size: cp.size,
          });
          p.size = known;
          return;
        }
        if (known === old) return; // a fork at that size, as far as this witness knows (it logged it)
        old = known;
        p.size = known;
        continue;
      }
      p.outcomes.rejected++;
      this.o.log.warn('a witness refused the checkpoint', {
        witness: p.name,
        url: p.url,
        status: answer.status,
        size: cp.size,
        old,
        message: answer.text.slice(0, 300),
      });
      return;
    }
  }

  /** One add-checkpoint request, bounded in time and size; null when the witness could not be reached or timed out. */
  private async post(p: WitnessPeer, body: string): Promise<{ status: number; text: string } | null> {
    const ac = new AbortController();
    this.inflight.add(ac);
    const timer = setTimeout(() => ac.abort(), this.o.timeoutMs ?? WITNESS_TIMEOUT_MS);
    try {
      const res = await fetch(`${p.url}/add-checkpoint`, {
        method: 'POST',
        body,
        signal: ac.signal,
        redirect: 'error',
        headers: { 'content-type': 'text/plain; charset=utf-8' },
      });
      const chunks: Uint8Array[] = [];
      let n = 0;
      for await (const c of res.body ?? []) {
        n += (c as Uint8Array).length;
        if (n > ANSWER_LIMIT) {
          ac.abort();
          return { status: 502, text: 'answer too large' };
        }
        chunks.push(c as Uint8Array);
      }
      return { status: res.status, text: Buffer.concat(chunks).toString('utf8') };
    } catch (e) {
      if (!this.closed) this.o.log.warn('a witness could not be reached', { witness: p.name, url: p.url, error: (e as Error).message });
      return null;
    } finally {
      clearTimeout(timer);
      this.inflight.delete(ac);
    }
  }

  /** The cosignature line of `p` in `n` that verifies with its key, or null. */
  private validLine(n: Note, p: WitnessPeer): string | null {
    const r = verifyCosignature(this.o.backend, n, p.name, p.publicKey);
    if (!r.ok) return null;
    const sig = n.signatures.find(
      (s: NoteSignature) => s.name === p.name && verifyCosignature(this.o.backend, { text: n.text, signatures: [s] }, p.name, p.publicKey).ok,
    );
    return sig === undefined ? null : lineOf(sig);
  }

  /** Holds `line` for the checkpoint `body` (a newer body replaces the lines of an older one) and persists them. */
  private keep(body: string, note: string, p: WitnessPeer, line: string): void {
    const current = this.o.source.note();
    if (current === null) return;
    let currentBody: string;
    try {
      currentBody = parseNote(current).text;
    } catch {
      return;
    }
    if (currentBody !== body) return; // an older checkpoint than the committed one
    if (this.body !== body) {
      this.body = body;
      this.lines = new Map();
    }
    this.lines.set(p.name, line);
    this.version++;
    try {
      const tmp = `${this.o.file}.${process.pid}.tmp`;
      writeDurably(tmp, Buffer.from(this.served(note)), 0o644);
      renameSync(tmp, this.o.file);
    } catch (e) {
      this.o.log.warn('cannot keep the cosigned checkpoint', { file: this.o.file, error: (e as Error).message });
    }
  }
}

/** A signature's line without its newline (`— name base64`). */
function lineOf(sig: NoteSignature): string {
  return sig.line.replace(/\n$/, '');
}

/**
 * The cosigner of an authority with `witnesses` or a `policy_file` (null
 * without either): the policy is read and checked at start (a bad policy
 * stops the start, naming the line), the chain's `.git` keeps the cosigned
 * note.
 */
export function openCosigner(
  a: { witnesses: readonly { url: string; vkey: string }[]; policy_file: string | null },
  chainDir: string,
  source: CheckpointSource,
  backend: CryptoBackend,
  log: Logger,
): Cosigner | null {
  if (a.witnesses.length === 0 && a.policy_file === null) return null;
  const policy = a.policy_file === null ? null : readPolicyFile(backend, a.policy_file, 'config: authority.policy_file');
  const cosigner = new Cosigner({ backend, witnesses: a.witnesses, policy, file: join(chainDir, '.git', 'vouch-cosigned-checkpoint'), source, log });
  // A policy witness no configured witness is asked for never cosigns: the quorum may be out of reach.
  for (const [name, w] of policy?.witnesses ?? []) {
    if (!cosigner.asks(w.keyName, w.publicKey))
      log.warn('authority.policy_file names a witness that is not in authority.witnesses (it is never asked)', { witness: name, vkey: w.vkey });
  }
  return cosigner;
}
