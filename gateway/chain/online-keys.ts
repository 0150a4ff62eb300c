/**
 * The authority's online keys (docs/spec/key-events.md): the private key that
 * signs blocks, checkpoint.json and checkpoint.note now; the previous key
 * that co-signs notes during a rollover; a new key read from
 * `authority.next_key_file` when a statement puts it in force.
 *
 * Owns: choosing at start which of key_file / next_key_file holds the chain's
 * online key in force, and the rollover window.
 * Must hold: only the key in force signs blocks and checkpoint.json; a
 * compromised or retired key never does, and a compromised key never
 * co-signs; the previous key co-signs notes only after a routine rotation
 * (key, or root with a new online key), while key_file holds it, until the
 * key block's posted time + `rollover_days`. Errors name files and public
 * keys, never key material.
 */
import { existsSync } from 'node:fs';
import { VouchError } from '../../chain/errors.ts';
import { base64Encode } from '../../chain/encoding.ts';
import type { Block } from '../../chain/block.ts';
import type { CryptoBackend, Signer } from '../../chain/crypto-backend.ts';
import { applyKeyEvent, type KeyState, type SignedStatement } from '../../chain/key-events.ts';
import { readKeyFile } from '../../platform/key-file.ts';
import { nodeSigner } from '../../platform/node-crypto.ts';
import type { KeyObject } from 'node:crypto';

export const DAY_MS = 86_400_000;

/** The `authority` keys of the configuration this module reads. */
export interface KeyFiles {
  key_file: string;
  next_key_file: string;
  rollover_days: number;
}

/** A key statement ready to be appended: the state after it, the key that signs its block, and the note's signers. */
export interface KeyPlan {
  next: KeyState;
  signer: Signer;
  /** The key in force after the event first, then the previous key when a rollover starts. */
  noteSigners: Signer[];
  /** The key block is committed (posted at `postedMs`): the plan takes effect. */
  commit(postedMs: number): void;
}

const pub = (s: Signer) => base64Encode(s.publicKey);

/** The key of `path` as a signer named `id`, or null when there is no such file; other problems are thrown (key_error). */
function readSigner(path: string, id: string): Signer | null {
  if (!existsSync(path)) return null;
  return nodeSigner(id, readKeyFile(path));
}

/** `posted` of a block in epoch ms. */
export function postedMs(block: Block): number {
  return Date.parse(block.posted);
}

export class AuthorityKeys {
  private constructor(
    private readonly files: KeyFiles,
    private readonly backend: CryptoBackend,
    private keys: KeyState,
    private current: Signer,
    private rollover: { signer: Signer; until: number } | null,
    /** Which file the key in force was read from. */
    private from: 'key_file' | 'next_key_file',
  ) {}

  /**
   * The keys for a chain in `keys` (its verified state): the one of key_file
   * (`primary`, already read: null when there is none) or next_key_file
   * whose public key is the online key in force. `keyBlock`: the block that
   * put it in force (null: block 0), for the rollover window. It signs as
   * the chain says (`keys.online.signer`: a statement may name a new signer
   * id with a new key), whatever `authority.signer` says (the caller warns).
   * @throws VouchError key_error when neither file holds it.
   */
  static open(files: KeyFiles, backend: CryptoBackend, keys: KeyState, primary: KeyObject | null, keyBlock: Block | null, now: number): AuthorityKeys {
    const online = keys.online;
    const first = primary === null ? null : nodeSigner(online.signer, primary);
    let current: Signer | null = first !== null && pub(first) === online.publicKey ? first : null;
    let from: 'key_file' | 'next_key_file' = 'key_file';
    let next: Signer | null = null;
    if (current === null) {
      next = readSigner(files.next_key_file, online.signer);
      if (next !== null && pub(next) === online.publicKey) {
        current = next;
        from = 'next_key_file';
      }
    }
    if (current === null) {
      const what = (s: Signer | null) => {
        if (s === null) return 'none (no such file)';
        const k = pub(s);
        return keys.compromised.includes(k) ? `${k}, declared compromised` : keys.retired.includes(k) ? `${k}, retired` : k;
      };
      throw new VouchError(
        'key_error',
        `neither authority.key_file ${files.key_file} (holds ${what(first)}) nor authority.next_key_file ${files.next_key_file} (holds ${what(next)}) ` +
          `holds the chain's online key in force, ${online.publicKey} (since block ${online.since}): put its private key in one of them`,
      );
    }
    const k = new AuthorityKeys(files, backend, keys, current, null, from);
    // A rollover still running: key_file holds the key the last routine rotation retired.
    const previous = keys.retired[keys.retired.length - 1];
    if (
      from === 'next_key_file' &&
      first !== null &&
      keyBlock !== null &&
      previous !== undefined &&
      pub(first) === previous &&
      !keys.compromised.includes(previous) &&
      keyBlock.payload.statement?.action !== 'compromise'
    ) {
      const until = postedMs(keyBlock) + files.rollover_days * DAY_MS;
      if (now < until) k.rollover = { signer: first, until };
    }
    return k;
  }

  /** The online key in force: signs blocks, checkpoint.json and the note. */
  signer(): Signer {
    return this.current;
  }

  /** Where the key in force was read from. */
  get source(): string {
    return this.from === 'key_file' ? this.files.key_file : this.files.next_key_file;
  }

  /** The key state of the committed chain. */
  state(): KeyState {
    return this.keys;
  }

  /** The previous key co-signing notes now, or null. */
  rolloverSigner(now: number): Signer | null {
    return this.rollover !== null && now < this.rollover.until ? this.rollover.signer : null;
  }

  /** The note's signers at `now`: the key in force, then the rollover key while the rollover lasts. */
  noteSigners(now: number): Signer[] {
    const r = this.rolloverSigner(now);
    return r === null ? [this.current] : [this.current, r];
  }

  /**
   * Checks `signed` against the committed state as the block at index `at`
   * and, when it puts a new online key in force, reads that key's private
   * key from next_key_file.
   * @throws KeyEventError (refused statement); VouchError key_unavailable.
   */
  plan(signed: SignedStatement, at: number, now: number): KeyPlan {
    const next = applyKeyEvent(this.backend, this.keys, signed, at);
    const changed = next.online.publicKey !== this.keys.online.publicKey;
    const signer = changed ? this.readNext(next) : this.current;
    const action = signed.statement.action;
    // A routine rotation starts a rollover when key_file holds the key it retires; a compromise ends any.
    let previous: Signer | null = this.rolloverSigner(now);
    if (changed) {
      previous = null;
      if (action !== 'compromise' && this.files.rollover_days > 0) {
        let inFile: Signer | null = null;
        try {
          inFile = this.from === 'key_file' ? this.current : readSigner(this.files.key_file, this.current.id);
        } catch {
          inFile = null; // an unreadable key_file holds no previous key to co-sign with
        }
        if (inFile !== null && pub(inFile) === pub(this.current)) previous = this.current;
      }
    }
    return {
      next,
      signer,
      noteSigners: previous === null ? [signer] : [signer, previous],
      commit: (posted: number) => {
        if (changed) {
          this.rollover = previous === null ? null : { signer: previous, until: posted + this.files.rollover_days * DAY_MS };
          this.from = 'next_key_file';
        }
        this.keys = next;
        this.current = signer;
      },
    };
  }

  /** The private key of the online key `next` puts in force, from next_key_file. */
  private readNext(next: KeyState): Signer {
    const want = next.online.publicKey;
    const path = this.files.next_key_file;
    const unavailable = (why: string) =>
      new VouchError('key_unavailable', `the statement puts the online key ${want} in force, but authority.next_key_file ${path} ${why}; nothing appended`, {
        resource: path,
        evidence: { next_key_file: path, public_key: want },
      });
    let s: Signer | null;
    try {
      s = readSigner(path, next.online.signer);
    } catch (e) {
      throw unavailable(`cannot be used: ${(e as Error).message}`);
    }
    if (s === null) throw unavailable('does not exist');
    if (pub(s) !== want) throw unavailable(`holds another key (${pub(s)})`);
    return s;
  }
}
