/**
 * Chains with key events for tests and benchmarks (docs/spec/key-events.md):
 * deterministic holder and online keys, and a builder that appends
 * endorsements and root-signed key blocks with the real builders.
 */
import type { KeyObject } from 'node:crypto';
import { artifactHashOf, buildAuthorityBlock, buildCheckpoint, buildEndorseBlock, buildKeyBlock } from '../../chain/build.ts';
import type { Block, Checkpoint } from '../../chain/block.ts';
import type { Signer } from '../../chain/crypto-backend.ts';
import { base64Encode, utf8 } from '../../chain/encoding.ts';
import {
  applyKeyEvent,
  compromiseStatement,
  initialKeyState,
  keyStatement,
  rootStatement,
  signStatement,
  type KeyState,
  type SignedStatement,
  type Statement,
} from '../../chain/key-events.ts';
import { nodeBackend, nodeSigner, privateKeyFromSeed } from '../../platform/node-crypto.ts';
import { T0, testSigner } from './chain-fixture.ts';

/** The deterministic ed25519 private key of a label (seed = 32 bytes derived from it): what `seededSigner` signs with. */
export function seededKey(label: string): KeyObject {
  const seed = new Uint8Array(32);
  for (let i = 0; i < 32; i++) seed[i] = (label.charCodeAt(i % label.length) * 31 + i * 7) & 0xff;
  return privateKeyFromSeed(seed);
}

/** A deterministic ed25519 signer from a label. */
export function seededSigner(label: string, id = label): Signer {
  return nodeSigner(id, seededKey(label));
}

export const b64 = (s: Signer): string => base64Encode(s.publicKey);

/** Root holders H1..H4 and online keys (signer id `vouch-test`, as block 0's). */
export const HOLDERS = ['holder-1', 'holder-2', 'holder-3', 'holder-4'].map((l) => seededSigner(l));
export const ONLINE = {
  A: testSigner(),
  B: seededSigner('online-b', 'vouch-test'),
  C: seededSigner('online-c', 'vouch-test'),
  D: seededSigner('online-d', 'vouch-test'),
};

/** Appends blocks to a chain while tracking its key state, as the authority does. */
export class KeyChain {
  readonly blocks: Block[];
  keys: KeyState;
  signer: Signer;
  private t = T0;

  constructor(signer: Signer = ONLINE.A, uns = 'acme/chain') {
    this.signer = signer;
    this.blocks = [buildAuthorityBlock({ signer, backend: nodeBackend, now: this.t, uns })];
    this.keys = initialKeyState(this.blocks[0]!.record_hash, signer.id, b64(signer));
  }

  get head(): Block {
    return this.blocks[this.blocks.length - 1]!;
  }

  /** An endorse block signed by `by` (default: the key in force). */
  endorse(i: number, by: Signer = this.signer): Block {
    this.t += 1000;
    const block = buildEndorseBlock({
      prev: this.head,
      signer: by,
      backend: nodeBackend,
      now: this.t,
      entries: [
        {
          url: `https://a.example/pkg/${i % 997}/artifact-${i}.tgz`,
          artifactHash: artifactHashOf(nodeBackend, 'sha256', utf8(`artifact ${i}`)),
          name: `acme/pkg${i % 997}`,
          semver: `1.${i}.0`,
          license: 'MIT',
        },
      ],
    });
    this.blocks.push(block);
    return block;
  }

  /** A statement signed by `holders`. */
  sign(statement: Statement, holders: Signer[]): SignedStatement {
    let s: SignedStatement = { statement, signatures: [] };
    for (const h of holders) s = signStatement(s, h);
    return s;
  }

  /** Appends a key block carrying `signed`, signed by `by` (default: the key in force), and applies it. */
  key(signed: SignedStatement, by?: Signer): Block {
    this.t += 1000;
    const signer = by ?? this.signer;
    const block = buildKeyBlock({ prev: this.head, signer, backend: nodeBackend, now: this.t, signed });
    this.keys = applyKeyEvent(nodeBackend, this.keys, signed, block.index);
    this.blocks.push(block);
    this.signer = signer;
    return block;
  }

  /** Appends a key block without checking or applying its statement (a forged or refused event, for verifiers to catch). */
  forge(signed: SignedStatement, by: Signer): Block {
    this.t += 1000;
    const block = buildKeyBlock({ prev: this.head, signer: by, backend: nodeBackend, now: this.t, signed });
    this.blocks.push(block);
    return block;
  }

  adoptRoot(holders = HOLDERS.slice(0, 3), threshold = 2, signers = holders.slice(0, threshold)): Block {
    return this.key(this.sign(rootStatement(this.keys, { threshold, keys: holders.map(b64) }), signers));
  }

  rotate(to: Signer, signers = this.rootSigners()): Block {
    return this.key(this.sign(keyStatement(this.keys, { signer: to.id, public_key: b64(to) }), signers), to);
  }

  compromise(goodThrough: number, to: Signer, signers = this.rootSigners()): Block {
    return this.key(this.sign(compromiseStatement(this.keys, goodThrough, { signer: to.id, public_key: b64(to) }), signers), to);
  }

  /** The first `threshold` holders of the root in force. */
  rootSigners(): Signer[] {
    const root = this.keys.root!;
    return HOLDERS.filter((h) => root.keys.includes(b64(h))).slice(0, root.threshold);
  }

  checkpoint(): Checkpoint {
    return buildCheckpoint({ head: this.head, signer: this.signer, now: this.t + 1000 });
  }
}

/**
 * A 12-block chain living through every key event: a 2-of-3 root adopted
 * at 2, a rotation A -> B at 4, blocks 6-7 by B after its last good block
 * 5 voided by a compromise declaration at 8 (C takes over), a root
 * rotation to {H1, H2, H4} at 10.
 */
export function buildKeyLifeChain(): KeyChain {
  const c = new KeyChain();
  c.endorse(1);
  c.adoptRoot();
  c.endorse(3);
  c.rotate(ONLINE.B);
  c.endorse(5);
  c.endorse(6);
  c.endorse(7);
  c.compromise(5, ONLINE.C);
  c.endorse(9);
  c.key(c.sign(rootStatement(c.keys, { threshold: 2, keys: [HOLDERS[0]!, HOLDERS[1]!, HOLDERS[3]!].map(b64) }), [HOLDERS[0]!, HOLDERS[1]!]));
  c.endorse(11);
  return c;
}

/** `n` blocks with a 2-of-3 root adopted at block 1 and the online key rotated every `every` blocks (benchmarks, parallel verification). */
export function buildRotatingChain(n: number, every: number): KeyChain {
  const c = new KeyChain();
  c.adoptRoot();
  let k = 0;
  while (c.blocks.length < n) {
    if (c.blocks.length % every === 0) c.rotate(seededSigner(`rotation-${k++}`, 'vouch-test'));
    else c.endorse(c.blocks.length);
  }
  return c;
}
