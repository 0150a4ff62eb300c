/**
 * `vouch get` following a log's key events (docs/spec/key-events.md "Clients
 * following key events"): which online key signs the block at an index and
 * the checkpoint note, from the pin (block 0's key, or a root) and the key
 * trail remembered in the state file; when they do not verify, one walk of
 * `GET /v1/keys?since=<sequence>` from the same gateway (chain/key-walk.ts).
 *
 * Owns: the `--root` pin's forms, the stored `{pin, trail}`, the walk's
 * refusals as `vouch get` refusals (catalogue codes).
 * Trusts: the pin; a stored trail only under the same pin.
 * Must hold: at most one walk per run, at most MAX_WALKED_KEY_EVENTS events
 * after the trusted point; a root pin trusts events only from the key block
 * that put that root in force; a chain without key events costs nothing more
 * (no request, nothing stored).
 */
import { readFileSync, statSync } from 'node:fs';
import { base64Decode } from '../../chain/encoding.ts';
import { VouchError } from '../../chain/errors.ts';
import { KeyEventError, parseSignedStatement } from '../../chain/key-events.ts';
import { KeyWalkError, keyAt, parseKeysAnswer, parseTrail, sameRoot, startTrail, walkKeyEvents, type KeyTrail } from '../../chain/key-walk.ts';
import { parseNote } from '../../chain/note.ts';
import { openCheckpoint, parseCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import type { SeenCheckpoint } from './checkpoint-state.ts';
import { Refusal } from './tlog-client.ts';

export type KeyPin = { kind: 'key'; publicKey: string } | { kind: 'root'; threshold: number; keys: string[] };

/** `--root FILE`: a statement file of a `root` action, or `{threshold, keys}`. @throws VouchError usage */
export function readRootPin(path: string): KeyPin {
  const usage = (why: string) => new VouchError('usage', `--root ${path}: ${why}`);
  let v: unknown;
  try {
    if (statSync(path).size > 1 << 20) throw usage('larger than 1 MiB');
    v = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    if (e instanceof VouchError) throw e;
    throw usage((e as Error).message);
  }
  if (typeof v === 'object' && v !== null && 'statement' in v) {
    try {
      const s = parseSignedStatement(v).statement;
      if (s.action !== 'root') throw usage(`the statement is a ${s.action} statement, not a root`);
      return { kind: 'root', threshold: s.root.threshold, keys: [...s.root.keys] };
    } catch (e) {
      if (e instanceof KeyEventError) throw usage(e.message);
      throw e;
    }
  }
  const o = v as { threshold?: unknown; keys?: unknown } | null;
  const keys = o?.keys;
  if (
    typeof o !== 'object' ||
    o === null ||
    !Array.isArray(keys) ||
    keys.length === 0 ||
    keys.length > 32 ||
    !keys.every((k) => typeof k === 'string' && base64Decode(k)?.length === 32) ||
    new Set(keys).size !== keys.length
  ) {
    throw usage('not a statement file nor {"threshold": K, "keys": [1..32 distinct base64 ed25519 keys]}');
  }
  const t = o.threshold;
  if (typeof t !== 'number' || !Number.isSafeInteger(t) || t < 1 || t > keys.length) throw usage(`threshold must be an integer 1..${keys.length}`);
  return { kind: 'root', threshold: t, keys: keys as string[] };
}

const samePin = (a: KeyPin, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

export class KeyFollower {
  /** The walked keys; null: none walked (a key pin's key signs everything). */
  private trail: KeyTrail | null = null;
  private walking: Promise<boolean> | null = null;
  private moved = false;

  constructor(
    private readonly pin: KeyPin,
    /** `GET <gateway>/v1/keys?since=S`: the JSON answer, or null when the gateway has no such route (404). */
    private readonly fetchKeys: (gateway: string, since: number) => Promise<unknown | null>,
  ) {}

  /** Takes the trail stored for the log, when it was walked under the same pin. */
  load(stored: SeenCheckpoint | undefined): void {
    if (this.trail !== null || stored?.keys === undefined || !samePin(this.pin, stored.keys.pin)) return;
    const t = parseTrail(stored.keys.trail);
    if (t !== null && (this.pin.kind === 'root' || t.state.first === this.pin.publicKey)) this.trail = t;
  }

  /** Whether a walk is needed before anything verifies (a root pin with no trail). */
  get needsWalk(): boolean {
    return this.trail === null && this.pin.kind === 'root';
  }

  /** The online key in force as known (raw). */
  online(): Uint8Array {
    const k = this.trail?.state.online.publicKey ?? (this.pin.kind === 'key' ? this.pin.publicKey : null);
    if (k === null) throw new Error('KeyFollower: no key known before the walk');
    return base64Decode(k)!;
  }

  /** The key that signs block `index` (raw), or 'void'. */
  keyAt(index: number): Uint8Array | 'void' {
    if (this.trail === null) return this.online();
    const span = keyAt(this.trail, index);
    return span === null ? 'void' : base64Decode(span.publicKey)!;
  }

  /** The log's first key (block 0's): the pin, or the walked trail's; null before a root pin's walk. */
  firstKey(): Uint8Array | null {
    const k = this.trail?.state.first ?? (this.pin.kind === 'key' ? this.pin.publicKey : null);
    return k === null ? null : base64Decode(k)!;
  }

  /** Every key that ever signed notes, newest first (to re-open a remembered note). */
  noteKeys(): Uint8Array[] {
    if (this.trail === null) return [this.online()];
    return [...this.trail.spans].reverse().map((s) => base64Decode(s.publicKey)!);
  }

  /** Whether the known keys changed in this run (to be stored). */
  get changed(): boolean {
    return this.moved;
  }

  /** What to store with the checkpoint (absent when nothing was ever walked). */
  stored(): SeenCheckpoint['keys'] {
    return this.trail === null ? undefined : { pin: this.pin, trail: this.trail };
  }

  /**
   * One walk of `/v1/keys?since=<sequence>` from `gateway` (once per run):
   * every new key block proven in the answer's checkpoint, applied, and that
   * checkpoint opened with the key in force after them. True when the known
   * keys moved; false when there was nothing to walk (the caller's own
   * refusal stands).
   * @throws Refusal
   */
  walk(gateway: string): Promise<boolean> {
    this.walking ??= this.walkOnce(gateway);
    return this.walking;
  }

  /** Loads the trail stored for `origin` (when known), else the one entry walked under the same pin. */
  loadFrom(state: ReadonlyMap<string, SeenCheckpoint>, origin: string | null): void {
    if (origin !== null) return this.load(state.get(origin));
    const under = [...state.values()].filter((s) => s.keys !== undefined && samePin(this.pin, s.keys.pin));
    if (under.length === 1) this.load(under[0]);
  }

  private async walkOnce(gateway: string): Promise<boolean> {
    const since = this.trail?.state.sequence ?? 0;
    const json = await this.fetchKeys(gateway, since);
    if (json === null) {
      if (this.needsWalk) throw new Refusal('bad_answer', `${gateway} answers no /v1/keys: a client pinned to a root cannot learn the log's keys from it`);
      return false;
    }
    try {
      const answer = parseKeysAnswer(json, gateway);
      let body;
      try {
        body = parseCheckpoint(parseNote(answer.checkpoint).text);
      } catch (e) {
        throw new KeyWalkError('bad_answer', `${gateway}: the /v1/keys checkpoint: ${(e as Error).message}`);
      }
      if (body.size !== answer.size)
        throw new KeyWalkError('bad_answer', `${gateway}: the /v1/keys checkpoint is size ${body.size}, the answer says ${answer.size}`);
      const tree = { size: body.size, root: body.root };
      let trail = this.trail;
      let events = answer.events;
      if (trail === null) {
        trail = startTrail(nodeBackend, answer, tree, this.pin.kind === 'key' ? this.pin.publicKey : null, gateway);
        if (this.pin.kind === 'root') {
          // Trust starts at the key block that put the pinned root in force; the walk bound counts from there.
          const pin = this.pin;
          let k = 0;
          while (!sameRoot(trail.state.root, pin)) {
            if (k >= events.length)
              throw new KeyWalkError(
                'untrusted_authority',
                `${gateway}: the log's key events never put the pinned root (${pin.threshold} of ${pin.keys.length} keys) in force`,
              );
            trail = walkKeyEvents(nodeBackend, trail, [events[k]!], tree, gateway, 1);
            k++;
          }
          events = events.slice(k);
        }
      } else if (answer.chain !== trail.state.chain) {
        throw new KeyWalkError('bad_answer', `${gateway}: /v1/keys is for chain ${answer.chain}, the keys remembered are for ${trail.state.chain}`);
      }
      const first = this.trail === null && this.pin.kind === 'root';
      trail = walkKeyEvents(nodeBackend, trail, events, tree, gateway);
      if (!first && trail.state.sequence <= (this.trail?.state.sequence ?? 0)) return false; // nothing new: the caller's refusal stands
      try {
        openCheckpoint(nodeBackend, answer.checkpoint, { publicKey: base64Decode(trail.state.online.publicKey)! });
      } catch (e) {
        throw new Refusal(
          'bad_checkpoint',
          `${gateway}: the /v1/keys checkpoint is not signed by the online key in force after its key events: ${(e as Error).message}`,
        );
      }
      this.trail = trail;
      this.moved = true;
      return true;
    } catch (e) {
      // Pinned to a key that is not this log's block 0 key: no walk helps; the caller's own refusal stands (as before key events).
      if (e instanceof KeyWalkError && e.code === 'untrusted_authority' && this.pin.kind === 'key') return false;
      if (e instanceof KeyWalkError) throw new Refusal(e.code, e.message);
      throw e;
    }
  }
}
