/**
 * Transparency-log trust policies (c2sp.org/tlog-policy, Sigsum's format):
 * the logs accepted, the witnesses known, and the quorum of cosignatures a
 * checkpoint needs. Pure: no I/O.
 * Owns: parsing (lines `log <vkey> [url]`, `witness <name> <vkey> [url]`,
 * `group <name> all|any|<k> <member>...`, `quorum <name>|none`; names
 * defined before use, so no cycle; one namespace; limits of 256 each) and
 * evaluating the quorum.
 * Trusts: chain/note.ts and the injected `CryptoBackend`.
 * Must hold: `checkQuorum` counts a witness only when its cosignature
 * verifies over the note's text; anything else counts as not witnessed.
 */
import { VouchError } from './errors.ts';
import { hexEncode } from './encoding.ts';
import type { CryptoBackend } from './crypto-backend.ts';
import { parseVerifierKey, SIG_COSIGNATURE_V1, SIG_ED25519, verifyCosignature, verifyNoteSignature, type Note } from './note.ts';

export interface PolicyLog {
  vkey: string;
  name: string;
  publicKey: Uint8Array;
  url?: string;
}
export interface PolicyWitness {
  vkey: string /** policy name */;
  name: string /** note key name of the vkey */;
  keyName: string;
  publicKey: Uint8Array;
  url?: string;
}
export interface PolicyGroup {
  name: string;
  threshold: number;
  members: string[];
}

export interface Policy {
  logs: PolicyLog[];
  witnesses: Map<string, PolicyWitness>;
  groups: Map<string, PolicyGroup>;
  /** The quorum's witness or group name; null for `quorum none`. */
  quorum: string | null;
}

export const MAX_POLICY_ENTRIES = 256;

export function parsePolicy(c: CryptoBackend, text: string): Policy {
  const policy: Policy = { logs: [], witnesses: new Map(), groups: new Map(), quorum: null };
  let quorumSeen = false;
  const logKeys = new Set<string>();
  const witnessKeys = new Set<string>();
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  lines.forEach((raw, i) => {
    const bad = (why: string) => new VouchError('bad_request', `policy line ${i + 1}: ${why}`, { evidence: { line: i + 1 } });
    for (let j = 0; j < raw.length; j++) {
      const ch = raw.charCodeAt(j);
      if ((ch < 0x20 && ch !== 0x09) || ch === 0x7f) throw bad(`control character 0x${ch.toString(16).padStart(2, '0')}`);
    }
    const trimmed = raw.replace(/^[ \t]+|[ \t]+$/g, '');
    if (trimmed === '' || trimmed.startsWith('#')) return;
    const items = trimmed.split(/[ \t]+/);
    const keyword = items[0]!;
    const defined = (name: string) => policy.witnesses.has(name) || policy.groups.has(name);
    const newName = (name: string) => {
      if (name === 'none') throw bad('the name "none" is reserved');
      if (defined(name)) throw bad(`name ${JSON.stringify(name)} is already defined`);
    };
    const vkey = (text: string, type: number, what: string) => {
      let k;
      try {
        k = parseVerifierKey(c, text);
      } catch (e) {
        throw bad(`${what}: ${(e as Error).message}`);
      }
      if (k.type !== type) throw bad(`${what} key must have signature type 0x0${type} (got 0x0${k.type})`);
      return k;
    };
    switch (keyword) {
      case 'log': {
        if (items.length < 2 || items.length > 3) throw bad('expected "log <vkey> [<url>]"');
        if (policy.logs.length >= MAX_POLICY_ENTRIES) throw bad(`more than ${MAX_POLICY_ENTRIES} logs`);
        const k = vkey(items[1]!, SIG_ED25519, 'log');
        const id = hexEncode(k.publicKey);
        if (logKeys.has(id)) throw bad('duplicate log key');
        logKeys.add(id);
        policy.logs.push({ vkey: items[1]!, name: k.name, publicKey: k.publicKey, ...(items[2] === undefined ? {} : { url: items[2] }) });
        return;
      }
      case 'witness': {
        if (items.length < 3 || items.length > 4) throw bad('expected "witness <name> <vkey> [<url>]"');
        if (policy.witnesses.size >= MAX_POLICY_ENTRIES) throw bad(`more than ${MAX_POLICY_ENTRIES} witnesses`);
        const name = items[1]!;
        newName(name);
        const k = vkey(items[2]!, SIG_COSIGNATURE_V1, 'witness');
        const id = hexEncode(k.publicKey);
        if (witnessKeys.has(id)) throw bad('duplicate witness key');
        witnessKeys.add(id);
        policy.witnesses.set(name, { vkey: items[2]!, name, keyName: k.name, publicKey: k.publicKey, ...(items[3] === undefined ? {} : { url: items[3] }) });
        return;
      }
      case 'group': {
        if (items.length < 4) throw bad('expected "group <name> all|any|<k> <member>..."');
        if (policy.groups.size >= MAX_POLICY_ENTRIES) throw bad(`more than ${MAX_POLICY_ENTRIES} groups`);
        const name = items[1]!;
        newName(name);
        const members = items.slice(3);
        const seen = new Set<string>();
        for (const m of members) {
          if (m === 'none') throw bad('"none" cannot be a group member');
          if (m === name) throw bad(`group ${JSON.stringify(name)} lists itself`);
          if (!defined(m)) throw bad(`member ${JSON.stringify(m)} is not a witness or group defined above`);
          if (seen.has(m)) throw bad(`member ${JSON.stringify(m)} listed twice`);
          seen.add(m);
        }
        const t = items[2]!;
        let threshold: number;
        if (t === 'all') threshold = members.length;
        else if (t === 'any') threshold = 1;
        else if (/^[1-9][0-9]{0,8}$/.test(t)) threshold = Number(t);
        else throw bad(`threshold ${JSON.stringify(t)} is not all, any or a decimal k >= 1`);
        if (threshold > members.length) throw bad(`threshold ${threshold} is more than the ${members.length} members`);
        policy.groups.set(name, { name, threshold, members });
        return;
      }
      case 'quorum': {
        if (items.length !== 2) throw bad('expected "quorum <name>"');
        if (quorumSeen) throw bad('second quorum line');
        quorumSeen = true;
        const name = items[1]!;
        if (name === 'none') {
          policy.quorum = null;
          return;
        }
        if (!defined(name)) throw bad(`quorum ${JSON.stringify(name)} is not a witness or group defined above`);
        policy.quorum = name;
        return;
      }
      default:
        throw bad(`unknown keyword ${JSON.stringify(keyword.slice(0, 40))}`);
    }
  });
  if (!quorumSeen) throw new VouchError('bad_request', 'policy has no quorum line');
  return policy;
}

/**
 * Does the note satisfy the policy's quorum? `signed` lists the policy names
 * of the witnesses whose cosignature verified (in policy order).
 */
export function checkQuorum(c: CryptoBackend, policy: Policy, note: Note): { ok: boolean; signed: string[]; why?: string } {
  const signed: string[] = [];
  const witnessed = new Map<string, boolean>();
  for (const [name, w] of policy.witnesses) {
    const ok = verifyCosignature(c, note, w.keyName, w.publicKey).ok;
    witnessed.set(name, ok);
    if (ok) signed.push(name);
  }
  if (policy.quorum === null) return { ok: true, signed };
  // Groups only name earlier definitions, so one pass in definition order settles every group.
  for (const [name, g] of policy.groups) {
    const n = g.members.filter((m) => witnessed.get(m) === true).length;
    witnessed.set(name, n >= g.threshold);
  }
  if (witnessed.get(policy.quorum) === true) return { ok: true, signed };
  const g = policy.groups.get(policy.quorum);
  const why =
    g === undefined
      ? `witness ${policy.quorum} did not cosign`
      : `quorum ${policy.quorum} needs ${g.threshold} of ${g.members.length} (${g.members.join(', ')}); witnessed: ${g.members.filter((m) => witnessed.get(m) === true).join(', ') || 'none'}`;
  return { ok: false, signed, why };
}

/** The policy's log whose ed25519 signature (key name = its vkey name) the note carries and verifies; null when none. */
export function policyLogFor(c: CryptoBackend, policy: Policy, note: Note): PolicyLog | null {
  for (const log of policy.logs) if (verifyNoteSignature(c, note, log.name, log.publicKey)) return log;
  return null;
}
