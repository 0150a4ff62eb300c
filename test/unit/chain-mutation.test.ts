/**
 * Mutation sweep: every field of every block of a generated chain is changed
 * in turn (value changed, member removed, member added); each change must be
 * detected at that block with a sensible code. Then the same sweep with the
 * record hashes and links recomputed ("re-sealed", as a forger would), so the
 * deeper checks (signer, signature, time, artifact hash, checkpoint) are
 * reached.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { verifyChain, computeRecordHash, buildEndorseBlock, buildCheckpoint, payloadMessage, type Block } from '../../chain/index.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import { buildFeatureChain, T0 } from '../helpers/chain-fixture.ts';

const { blocks, checkpoint, signer } = buildFeatureChain();
const clone = <T>(x: T): T => structuredClone(x);

type Path = (string | number)[];
function leafPaths(v: unknown, path: Path = []): Path[] {
  if (v !== null && typeof v === 'object') {
    const entries = Array.isArray(v) ? v.map((x, i) => [i, x] as const) : Object.entries(v);
    const out: Path[] = [];
    if (path.length > 0) out.push(path); // the container itself (removal)
    for (const [k, x] of entries) out.push(...leafPaths(x, [...path, k]));
    return out;
  }
  return [path];
}
function get(o: any, p: Path): any {
  return p.reduce((a, k) => a[k], o);
}
function parentOf(o: any, p: Path): [any, string | number] {
  return [get(o, p.slice(0, -1)), p[p.length - 1]!];
}

function changed(v: unknown): unknown {
  if (typeof v === 'string') return v.length ? v.slice(0, -1) + (v.endsWith('1') ? '2' : '1') : 'x';
  if (typeof v === 'number') return v + 1;
  if (typeof v === 'boolean') return !v;
  if (Array.isArray(v)) return v.length ? v.slice(1) : ['x'];
  return { ...(v as object), extra_member: 'x' };
}

function mutations(block: Block): { what: string; apply: (b: any) => void }[] {
  const out: { what: string; apply: (b: any) => void }[] = [];
  for (const p of leafPaths(block)) {
    const name = p.join('.');
    out.push({
      what: `change ${name}`,
      apply: (b) => {
        const [o, k] = parentOf(b, p);
        o[k] = changed(o[k]);
      },
    });
    out.push({
      what: `remove ${name}`,
      apply: (b) => {
        const [o, k] = parentOf(b, p);
        if (Array.isArray(o)) o.splice(k as number, 1);
        else delete o[k];
      },
    });
    const v = get(block, p);
    if (typeof v !== 'object')
      out.push({
        what: `retype ${name}`,
        apply: (b) => {
          const [o, k] = parentOf(b, p);
          o[k] = typeof o[k] === 'string' ? 7 : String(o[k]);
        },
      });
  }
  out.push({
    what: 'add a member at top level',
    apply: (b) => {
      b.extra = true;
    },
  });
  out.push({
    what: 'add a member to the payload',
    apply: (b) => {
      b.payload.extra = true;
    },
  });
  return out;
}

/** Recomputes record hashes and prev links from position i on, as a forger would. */
function reseal(chain: any[], from: number): void {
  for (let j = from; j < chain.length; j++) {
    if (j > from) chain[j].prev_hash = chain[j - 1].record_hash;
    try {
      chain[j].record_hash = computeRecordHash(chain[j], nodeBackend);
    } catch {
      /* unrepresentable: stays */
    }
  }
}

let plain = 0;
let resealed = 0;
for (let i = 0; i < blocks.length; i++) {
  test(`every mutation of block ${i} is detected at block ${i}`, () => {
    for (const m of mutations(blocks[i]!)) {
      const chain = clone(blocks) as any[];
      const before = JSON.stringify(chain[i]);
      try {
        m.apply(chain[i]);
      } catch {
        continue;
      }
      if (JSON.stringify(chain[i]) === before) continue;
      const r = verifyChain(chain, { backend: nodeBackend, checkpoint });
      assert.is(r.ok, false, `${m.what} was accepted`);
      if (r.ok) continue;
      plain++;
      assert.is(r.index, i, `${m.what}: ${r.message}`);
      const allowed = m.what.endsWith(' index')
        ? ['index_gap', 'malformed']
        : m.what.endsWith(' prev_hash')
          ? ['prev_hash_mismatch', 'malformed']
          : ['record_hash_mismatch', 'malformed'];
      assert.ok(allowed.includes(r.code), `${m.what}: got ${r.code}, expected one of ${allowed}`);
    }
  });

  test(`every re-sealed mutation of block ${i} is still detected`, () => {
    for (const m of mutations(blocks[i]!)) {
      const chain = clone(blocks) as any[];
      const before = JSON.stringify(chain[i]);
      try {
        m.apply(chain[i]);
      } catch {
        continue;
      }
      if (JSON.stringify(chain[i]) === before || m.what.endsWith(' record_hash')) continue;
      reseal(chain, i);
      const r = verifyChain(chain, { backend: nodeBackend, checkpoint });
      assert.is(r.ok, false, `re-sealed ${m.what} was accepted`);
      if (r.ok) continue;
      resealed++;
      // Detected at the block itself, or (for fields outside the signed
      // payload, e.g. comment and posted) by the signed checkpoint, or by a
      // later revoke whose (signed) target the re-sealing changed: it then
      // names no block of the chain (malformed at the revoke).
      const orphanedRevoke =
        r.code === 'malformed' &&
        r.index !== null &&
        r.index > i &&
        chain[r.index].payload.intent === 'revoke' &&
        blocks.findIndex((b) => b.record_hash === chain[r.index!].payload.target_hash) >= i;
      assert.ok(
        r.index === i || (r.index === null && r.code === 'checkpoint_mismatch') || (m.what.endsWith(' index') && r.code === 'index_gap') || orphanedRevoke,
        `re-sealed ${m.what}: ${r.code} at ${r.index}`,
      );
    }
  });
}

test('re-sealed payload changes are bad_signature; signer, time and hash forms have their own codes', () => {
  const expectCode = (mutate: (c: any[]) => void, at: number, code: string) => {
    const chain = clone(blocks) as any[];
    mutate(chain);
    reseal(chain, at);
    const r = verifyChain(chain, { backend: nodeBackend });
    assert.is(r.ok ? 'ok' : `${r.code}@${r.index}`, `${code}@${at}`);
  };
  expectCode(
    (c) => {
      c[1].payload.endorsements[0].artifact_hash = 'sha256:' + 'a'.repeat(64);
    },
    1,
    'bad_signature',
  );
  expectCode(
    (c) => {
      c[2].payload.endorsements[0].artifact_url = 'https://evil.example/widget.js';
    },
    2,
    'bad_signature',
  );
  expectCode(
    (c) => {
      c[2].signer = 'someone-else';
    },
    2,
    'signer_mismatch',
  );
  expectCode(
    (c) => {
      c[2].posted = '2025-12-31T00:00:00Z';
    },
    2,
    'time_regression',
  );
  expectCode(
    (c) => {
      c[1].signature = c[2].signature;
    },
    1,
    'bad_signature',
  );
  expectCode(
    (c) => {
      c[1].signature = 'not base64!';
    },
    1,
    'bad_signature',
  );
  expectCode(
    (c) => {
      c[0].payload.authority.signer = 'other';
    },
    0,
    'signer_mismatch',
  );
});

test('validly signed blocks with a bad artifact hash form fail as bad_artifact_hash', () => {
  for (const bad of ['sha256:ABC', 'md5:' + 'a'.repeat(32), 'sha256' + 'a'.repeat(64), 'sha512:' + 'a'.repeat(64), 'blake3:' + 'A'.repeat(64)]) {
    const chain = clone(blocks).slice(0, 1);
    chain.push(
      buildEndorseBlock({
        prev: chain[0]!,
        signer,
        backend: nodeBackend,
        now: T0 + 1000,
        entries: [{ url: 'https://a.example/x', artifactHash: bad, name: 'acme/x', semver: '1.0.0', license: 'MIT' }],
      }),
    );
    const r = verifyChain(chain, { backend: nodeBackend });
    assert.is(r.ok ? 'ok' : `${r.code}@${r.index}`, 'bad_artifact_hash@1', bad);
  }
});

test('the unmutated chain verifies, with its checkpoint, and a stale checkpoint is refused', () => {
  const r = verifyChain(blocks, { backend: nodeBackend, checkpoint, pinnedPublicKey: signer.publicKey });
  assert.ok(r.ok);
  const stale = buildCheckpoint({ head: blocks[blocks.length - 2]!, signer, now: T0 });
  const r2 = verifyChain(blocks, { backend: nodeBackend, checkpoint: stale });
  assert.is(r2.ok ? 'ok' : r2.code, 'checkpoint_mismatch');
  const r3 = verifyChain([], { backend: nodeBackend });
  assert.is(r3.ok ? 'ok' : r3.code, 'malformed');
});

test('the sweeps did real work', () => {
  assert.ok(plain > 300, `only ${plain} plain mutations`);
  assert.ok(resealed > 300, `only ${resealed} re-sealed mutations`);
});

test('a block larger than the reused encoding buffer (300 entries, multi-byte comments) verifies, so does the next; a change inside it is caught', () => {
  const { blocks, signer } = buildFeatureChain();
  const last = blocks[blocks.length - 1]!;
  const big = buildEndorseBlock({
    prev: last,
    signer,
    backend: nodeBackend,
    now: T0 + 10 * 86_400_000,
    entries: Array.from({ length: 300 }, (_, i) => ({
      url: `https://big.example/pkg/${i}.tgz`,
      artifactHash: 'sha256:' + String(i % 10).repeat(64),
      name: 'acme/big',
      semver: `1.0.${i}`,
      license: 'MIT',
      comment: `Grüße 世界 🎉 entry ${i} `.repeat(4),
    })),
  });
  assert.ok(payloadMessage(big.payload).length > 64 * 1024, 'the payload needs more than the 64 KiB scratch buffer');
  const after = buildEndorseBlock({
    prev: big,
    signer,
    backend: nodeBackend,
    now: T0 + 11 * 86_400_000,
    entries: [
      { url: 'https://big.example/after.tgz', artifactHash: 'sha256:' + 'a'.repeat(64), name: 'acme/big', semver: '2.0.0', license: 'MIT', comment: 'é' },
    ],
  });
  const chain = [...blocks, big, after];
  const ok = verifyChain(chain, { backend: nodeBackend });
  assert.ok(ok.ok, ok.ok ? '' : ok.message);
  const edited = structuredClone(big) as any;
  edited.payload.endorsements[250].comment = edited.payload.endorsements[250].comment.replace('世界', '世間');
  const unsealed = verifyChain([...blocks, edited, after], { backend: nodeBackend });
  assert.equal(unsealed.ok ? null : [unsealed.code, unsealed.index], ['record_hash_mismatch', blocks.length]);
  edited.record_hash = computeRecordHash(edited, nodeBackend);
  const resealed = verifyChain([...blocks, edited], { backend: nodeBackend });
  assert.equal(resealed.ok ? null : [resealed.code, resealed.index], ['bad_signature', blocks.length]);
});

test.run();
