/// <reference lib="dom" />
/**
 * The chain explorer, running in the browser: browse the newest blocks,
 * search by artifact URL, owner/name, index or record hash, show a block's
 * endorsements and version history, and verify a block's signature and
 * record hash right here with the same pure `chain/` code the server uses
 * (on @noble, no server trust needed beyond the authority key it shows).
 * Key events (docs/spec/key-events.md): each block is verified with the online
 * key in force at its index (from `/v1/keys`), key blocks say what they did
 * (root, rotation, compromise with the voided range), void blocks are marked.
 *
 * A URL's version history is checked against the completeness index
 * (docs/spec/index.md 8): the URL's index proof, against the signed note it
 * comes with, must list exactly the blocks shown and their revocations.
 *
 * Loaded only from the gateway itself (no CDN). Bundled by esbuild at
 * gateway start (gateway/explorer.ts).
 */
import { parseBlock, computeRecordHash, payloadMessage, base64Decode, isFullOrderPublicKey, type Block } from '../../chain/index.ts';
import { nobleBackend } from '../../chain/backend-noble.ts';
import { openCheckpoint } from '../../chain/tlog-checkpoint.ts';
import { indexRootOf, unitVersions, verifyIndexProof } from '../../chain/index-proof.ts';
import type { IndexEvent } from '../../chain/index-tree.ts';

type Json = Record<string, any>;
const $ = (sel: string) => document.querySelector(sel) as HTMLElement;

function el(tag: string, attrs: Record<string, string> = {}, ...children: (Node | string | null)[]): HTMLElement {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) if (c !== null) e.append(c);
  return e;
}

async function api(path: string): Promise<Json> {
  const r = await fetch(path, { headers: { accept: 'application/json' } });
  const j = await r.json();
  if (!j.success) throw new Error(`${j.status}: ${j.message}`);
  return j;
}

let authority: { signer: string; key: string } | null = null;
/** Each online key and the first index it signs (block 0's key from 0; each key event that changed it from its block). */
let spans: { since: number; signer: string; key: string }[] = [];

/** The online key in force at block `index` (a key block: the key its statement names, which is the one from that index). */
function keyAt(index: number): { signer: string; key: string } | null {
  let found: { signer: string; key: string } | null = authority;
  for (const s of spans) if (s.since <= index) found = s;
  return found;
}

/** One line on what a key block did (`key_event` of a summary, or the block's statement). */
function describeKeyEvent(k: Json): string {
  if (k.action === 'root') return `root version ${k.root.version}: ${k.root.threshold} of ${k.root.keys} holders (${k.signatures} holders' signatures)`;
  if (k.action === 'compromise') {
    return `compromise of ${k.compromised} after block ${k.good_through}: ${k.voids ? `blocks ${k.voids[0]}–${k.voids[1]} void` : 'no block void'}; ${k.online} takes over`;
  }
  return `rotation: ${k.online} takes over (${k.signatures} holders' signatures)`;
}

/** `key_event` from a block's statement (what /v1/blocks gives in summaries). */
function keyEventOfBlock(b: Json): Json | null {
  const s = b.payload?.statement;
  if (b.payload?.intent !== 'key' || !s) return null;
  const common = { action: s.action, sequence: s.sequence, online: s.online.public_key, signatures: (b.payload.signatures ?? []).length };
  if (s.action === 'root') return { ...common, root: { version: s.root.version, threshold: s.root.threshold, keys: s.root.keys.length } };
  if (s.action === 'compromise')
    return {
      ...common,
      compromised: s.compromised,
      good_through: s.good_through,
      voids: s.good_through + 1 <= b.index - 1 ? [s.good_through + 1, b.index - 1] : null,
    };
  return common;
}

export interface Verdict {
  ok: boolean;
  reason: string;
}

/** Verifies a block (as served, with `success` etc.) against the authority key, in the browser. */
export function verifyBlock(served: Json, authorityKey: string, authoritySigner: string): Verdict {
  const { success: _s, revoked_by: _r, verifier_key: _v, proof: _p, void: _void, keys: _k, ...block } = served; // members the gateway adds beside the block
  let parsed: Block;
  try {
    parsed = parseBlock(block, typeof block.index === 'number' ? block.index : -1);
  } catch (e) {
    return { ok: false, reason: (e as Error).message };
  }
  if (computeRecordHash(parsed, nobleBackend) !== parsed.record_hash) return { ok: false, reason: 'record_hash does not match the block content' };
  if (parsed.signer !== authoritySigner) return { ok: false, reason: `signed by ${parsed.signer}, not ${authoritySigner}` };
  const key = base64Decode(authorityKey);
  const sig = base64Decode(parsed.signature);
  if (key === null || sig === null || !nobleBackend.verify(key, payloadMessage(parsed.payload), sig)) {
    return { ok: false, reason: 'the signature does not verify with the authority key' };
  }
  return { ok: true, reason: `ed25519 signature by ${authoritySigner} (${authorityKey.slice(0, 12)}…) and record hash checked in this browser` };
}

function link(text: string, hash: string): HTMLElement {
  return el('a', { href: hash }, text);
}

function blocksTable(blocks: Json[]): HTMLElement {
  const rows = blocks.map((b) =>
    el(
      'tr',
      { 'data-index': String(b.index), ...(b.void ? { class: 'void' } : {}) },
      el('td', {}, link(String(b.index), `#/block/${b.index}`)),
      el('td', {}, b.posted),
      el('td', {}, b.intent),
      el('td', {}, b.intent === 'key' ? b.uns : link(b.uns, `#/search/${encodeURIComponent(b.uns)}`)),
      el('td', {}, b.semver + (b.revoked_by !== undefined ? ' (revoked)' : '') + (b.void ? ' (void)' : '')),
      el('td', {}, String(b.endorsements)),
      el('td', { class: 'comment' }, b.key_event ? describeKeyEvent(b.key_event) : b.comment),
    ),
  );
  return el(
    'table',
    { class: 'blocks' },
    el('thead', {}, el('tr', {}, ...['#', 'posted', 'intent', 'unit', 'version', 'files', 'comment'].map((h) => el('th', {}, h)))),
    el('tbody', {}, ...rows),
  );
}

async function showHome(before?: number): Promise<void> {
  const list = await api(`/v1/blocks?limit=20${before !== undefined ? `&before=${before}` : ''}`);
  const main = $('#main');
  main.replaceChildren(el('h2', {}, 'Newest blocks'), blocksTable(list.blocks));
  const last = list.blocks[list.blocks.length - 1];
  if (last && last.index > 0) {
    const more = el('button', { id: 'older' }, 'Older blocks');
    more.onclick = () => {
      void showHome(last.index);
    };
    main.append(more);
  }
}

async function showBlock(ref: string): Promise<void> {
  const json = await api(/^[0-9a-f]{64}$/.test(ref) ? `/v1/block?hash=${ref}` : `/v1/block?index=${encodeURIComponent(ref)}`);
  const main = $('#main');
  const signing = keyAt(json.index);
  const verdict = signing ? verifyBlock(json, signing.key, signing.signer) : { ok: false, reason: 'no authority key' };
  const result = el(
    'div',
    { id: 'verify-result', class: verdict.ok ? 'valid' : 'invalid' },
    verdict.ok ? 'signature valid' : 'signature invalid',
    el('small', {}, ' — ' + verdict.reason),
  );
  const p = json.payload;
  const fields = el(
    'dl',
    {},
    ...[
      ['index', String(json.index)],
      ['posted', json.posted],
      ['signer', json.signer],
      ['intent', p.intent],
      ['unit', `${p.uns} ${p.semver}`],
      ['effective date', p.effective_date],
      ['comment', json.comment],
      ['prev_hash', json.prev_hash],
      ['record_hash', json.record_hash],
      ['signature', json.signature],
      ...(p.intent === 'revoke' ? [['revokes', p.target_hash]] : []),
      ...(json.revoked_by ? [['revoked by', `block ${json.revoked_by.index} from ${json.revoked_by.effective_date}`]] : []),
      ...(p.intent === 'key' ? [['key event', describeKeyEvent(keyEventOfBlock(json)!)]] : []),
    ].flatMap(([k, v]) => [el('dt', {}, k!), el('dd', {}, v!)]),
  );
  const voided = json.void
    ? el(
        'div',
        { id: 'void-banner', class: 'void' },
        `VOID: signed by a compromised online key after its last good block ${json.void.from - 1}; block ${json.void.compromise} declares blocks ${json.void.from}–${json.void.to} void. Kept in the log as evidence, never selected.`,
      )
    : null;
  const entries = (p.endorsements as Json[]).map((e) =>
    el(
      'tr',
      {},
      el('td', {}, link(e.artifact_url, `#/search/${encodeURIComponent(e.artifact_url)}`)),
      el('td', {}, e.name),
      el('td', {}, e.semver),
      el('td', {}, e.license),
      el('td', { class: 'hash' }, e.artifact_hash),
      el('td', {}, el('a', { href: `/v1/download?url=${encodeURIComponent(e.artifact_url)}&semver=${encodeURIComponent(e.semver)}` }, 'download')),
    ),
  );
  main.replaceChildren(
    el('h2', {}, `Block ${json.index}`),
    ...(voided ? [voided] : []),
    result,
    fields,
    el('h3', {}, 'Endorsements'),
    entries.length ? el('table', { class: 'entries' }, el('tbody', {}, ...entries)) : el('p', {}, 'none'),
    el('h3', {}, 'Raw'),
    el('pre', {}, JSON.stringify((({ success, ...b }) => b)(json), null, 2)),
  );
}

type IndexVerdict = { state: 'valid' | 'invalid' | 'unchecked'; text: string };

/**
 * The history shown for `url` (`shown`, of `total` blocks) against the URL's
 * completeness-index proof and the note it is against (from the lookup with
 * proof=1, or its 404): every endorse event is a block shown, none more, and
 * each block's revocation in force today is the one shown.
 */
type Proved = { value: true; v: { events: IndexEvent[]; voids: [number, number][] }; cp: { size: number } };

/** A key's index proof (base64) against a note signed by one of the authority's keys: the proved events, or the verdict why not. */
function checkedProof(note: string, proofB64: unknown, kind: 'url' | 'unit', name: string): Proved | IndexVerdict {
  const bad = (text: string): IndexVerdict => ({ state: 'invalid', text });
  let cp: ReturnType<typeof openCheckpoint>['checkpoint'] | null = null;
  for (const k of [...spans].reverse().concat(authority ? [{ since: 0, ...authority }] : [])) {
    const key = base64Decode(k.key);
    if (key === null) continue;
    try {
      cp = openCheckpoint(nobleBackend, note, { publicKey: key }).checkpoint;
      break;
    } catch {
      /* another key */
    }
  }
  if (cp === null) return bad("the checkpoint note does not verify with the authority's keys");
  const root = indexRootOf(cp.extensions);
  if (root === null) return { state: 'unchecked', text: `the log commits no completeness index at size ${cp.size}: completeness not checked` };
  if (!(root instanceof Uint8Array)) return bad(`the checkpoint is malformed: ${root.malformed}`);
  const proof = typeof proofB64 === 'string' ? base64Decode(proofB64) : null;
  if (proof === null) return bad(`the answer carries no index proof though the checkpoint of size ${cp.size} commits an index`);
  const v = verifyIndexProof(nobleBackend, proof, kind, name, { root, size: cp.size });
  if (!v.ok) return bad(v.reason);
  return { value: true, v: v.value, cp };
}

/**
 * The versions of unit `name` as its index proof lists them (the side route
 * /v1/index/proof), checked here: shown only when the proof verifies.
 */
async function unitIndexSection(name: string): Promise<HTMLElement[]> {
  const r = await fetch(`/v1/index/proof?unit=${encodeURIComponent(name)}`, { headers: { accept: 'application/json' } });
  const j = (await r.json().catch(() => ({}))) as Json;
  let verdict: IndexVerdict;
  let rows: HTMLElement[] = [];
  if (typeof j.checkpoint !== 'string') {
    verdict = { state: 'unchecked', text: `the gateway answers no index proof for this unit (HTTP ${r.status})` };
  } else {
    const checked = checkedProof(j.checkpoint, j.index_proof, 'unit', name);
    if (!('value' in checked)) verdict = checked;
    else {
      const today = new Date().toISOString().slice(0, 10);
      const versions = unitVersions(checked.v.events, checked.v.voids, today);
      rows = versions.map((u) =>
        el(
          'tr',
          {},
          el('td', {}, link(String(u.block), `#/block/${u.block}`)),
          el('td', {}, u.semver + (u.revokedBy !== null ? ' (revoked)' : '')),
          el('td', {}, u.date),
          el('td', {}, u.revokedBy !== null ? `block ${u.revokedBy.block} from ${u.revokedBy.date}` : ''),
        ),
      );
      verdict = { state: 'valid', text: `every endorsement of ${name} in the log at size ${checked.cp.size}: ${versions.length} version(s)` };
    }
  }
  return [
    el('h3', {}, 'Versions of this unit, from the completeness index'),
    indexResult(verdict),
    ...(rows.length
      ? [
          el(
            'table',
            { class: 'unit-versions' },
            el('thead', {}, el('tr', {}, ...['block', 'version', 'effective', 'revoked by'].map((h) => el('th', {}, h)))),
            el('tbody', {}, ...rows),
          ),
        ]
      : []),
  ];
}

async function checkUrlIndex(url: string, shown: Json[], total: number): Promise<IndexVerdict> {
  const bad = (text: string): IndexVerdict => ({ state: 'invalid', text });
  const r = await fetch(`/v1/endorsement?url=${encodeURIComponent(url)}&proof=1`, { headers: { accept: 'application/json' } });
  const j = (await r.json().catch(() => ({}))) as Json;
  const note = j.proof?.checkpoint ?? j.checkpoint;
  if (typeof note !== 'string') return bad(`the gateway answers no checkpoint for this URL (HTTP ${r.status}): nothing shows the history is complete`);
  const checked = checkedProof(note, j.index_proof, 'url', url);
  if (!('value' in checked)) return checked;
  const { v, cp } = checked;
  const endorsed = v.events.filter((e) => e.kind === 'endorse').map((e) => e.block);
  const shownBlocks = new Set(shown.map((x) => Number(x.index)));
  const missing = endorsed.filter((b) => !shownBlocks.has(b));
  if (shown.length === total && missing.length > 0)
    return bad(`the history shown leaves out block ${missing.join(', ')}, which the log's index at size ${cp.size} lists for this URL`);
  const extra = [...shownBlocks].filter((b) => !endorsed.includes(b));
  if (extra.length > 0) return bad(`the history shown has block ${extra.join(', ')}, which the log's index at size ${cp.size} does not list for this URL`);
  if (total !== endorsed.length) return bad(`the gateway counts ${total} blocks for this URL, the log's index at size ${cp.size} lists ${endorsed.length}`);
  const today = new Date().toISOString().slice(0, 10);
  for (const u of unitVersions(v.events, v.voids, today)) {
    const row = shown.find((x) => Number(x.index) === u.block);
    if (row !== undefined && (row.revoked_by !== undefined) !== (u.revokedBy !== null)) {
      return bad(
        u.revokedBy !== null
          ? `block ${u.block} is shown as usable, but block ${u.revokedBy.block} revokes it from ${u.revokedBy.date} (the log's index at size ${cp.size})`
          : `block ${u.block} is shown as revoked, but the log's index at size ${cp.size} holds no revocation of it in force`,
      );
    }
  }
  return { state: 'valid', text: `the ${endorsed.length} block(s) shown are all the log's index at size ${cp.size} lists for this URL` };
}

function indexResult(v: IndexVerdict): HTMLElement {
  const head = v.state === 'valid' ? 'index proof valid: complete' : v.state === 'invalid' ? 'index proof INVALID' : 'completeness not checked';
  return el('div', { id: 'index-result', class: v.state === 'unchecked' ? 'unchecked' : v.state }, head, el('small', {}, ' — ' + v.text));
}

async function showSearch(q: string): Promise<void> {
  const main = $('#main');
  if (/^\d+$/.test(q) || /^[0-9a-f]{64}$/.test(q)) return showBlock(q);
  if (/^https?:\/\//i.test(q)) {
    // A 404 is a claim too: no block names the URL; the index proof checks it.
    const v = await api(`/v1/versions?url=${encodeURIComponent(q)}`).catch((e: Error) => {
      if (/^not_found:/.test(e.message)) return { versions: [], total: 0 } as Json;
      throw e;
    });
    const verdict = await checkUrlIndex(q, v.versions as Json[], Number(v.total ?? (v.versions as Json[]).length)).catch(
      (e: Error): IndexVerdict => ({ state: 'invalid', text: `the index check failed: ${e.message}` }),
    );
    const rows = (v.versions as Json[]).map((x) =>
      el(
        'tr',
        {},
        el('td', {}, link(String(x.index), `#/block/${x.index}`)),
        el('td', {}, x.semver + (x.revoked_by !== undefined ? ' (revoked)' : '')),
        el('td', {}, x.effective_date),
        el('td', {}, x.license),
        el('td', { class: 'hash' }, x.artifact_hash),
      ),
    );
    main.replaceChildren(
      el('h2', {}, 'Version history'),
      el('p', { class: 'url' }, q),
      indexResult(verdict),
      el(
        'table',
        { class: 'versions' },
        el('thead', {}, el('tr', {}, ...['block', 'version', 'effective', 'license', 'hash'].map((h) => el('th', {}, h)))),
        el('tbody', {}, ...rows),
      ),
    );
    return;
  }
  const u = await api(`/v1/units?name=${encodeURIComponent(q)}`);
  const unitIndex = await unitIndexSection(q).catch((e: Error) => [indexResult({ state: 'invalid', text: `the index check failed: ${e.message}` })]);
  main.replaceChildren(el('h2', {}, `Blocks of ${q}`), blocksTable(u.blocks), ...unitIndex);
}

async function route(): Promise<void> {
  const h = decodeURIComponent(location.hash.slice(1));
  try {
    if (h.startsWith('/block/')) await showBlock(h.slice(7));
    else if (h.startsWith('/search/')) await showSearch(h.slice(8));
    else await showHome();
  } catch (e) {
    $('#main').replaceChildren(el('p', { class: 'error', id: 'error' }, (e as Error).message));
  }
}

async function start(): Promise<void> {
  // Before anything is awaited: a search sent while the authority loads sets the hash (routed once loaded)
  // instead of submitting the form to the server, which reloaded the page and lost the search.
  const form = $('#search') as HTMLFormElement;
  form.onsubmit = (ev) => {
    ev.preventDefault();
    const q = (form.querySelector('input') as HTMLInputElement).value.trim();
    if (q) location.hash = `/search/${encodeURIComponent(q)}`;
  };
  const a = await api('/v1/authority');
  const cp = await api('/v1/checkpoint').catch(() => null);
  const key = a.payload.authority.public_key as string;
  const selfCheck = verifyBlock(a, key, a.payload.authority.signer);
  const strong = (() => {
    const raw = base64Decode(key);
    return raw !== null && isFullOrderPublicKey(raw);
  })();
  authority = { signer: a.payload.authority.signer, key };
  // The online keys after key events, from the log's key blocks (a chain without any: block 0's key signs everything).
  const keys = await api('/v1/keys').catch(() => null);
  spans = [];
  for (const e of (keys?.events ?? []) as Json[]) {
    const online = e.block?.payload?.statement?.online;
    const last = spans[spans.length - 1] ?? authority;
    if (online && online.public_key !== last.key) spans.push({ since: e.index, signer: online.signer, key: online.public_key });
  }
  const inForce = spans[spans.length - 1] ?? null;
  $('#authority').replaceChildren(
    el('span', {}, 'Authority '),
    el('strong', {}, authority.signer),
    el('code', { id: 'authority-key' }, key),
    el('span', { class: selfCheck.ok && strong ? 'valid' : 'invalid' }, selfCheck.ok && strong ? ' authority block valid' : ' authority block INVALID'),
    el('span', {}, cp ? ` · ${cp.size} blocks · head ${String(cp.head).slice(0, 16)}…` : ''),
    ...(inForce ? [el('span', {}, ` · online key since block ${inForce.since} `), el('code', { id: 'online-key' }, inForce.key)] : []),
  );
  window.onhashchange = () => {
    void route();
  };
  await route();
}

void start().catch((e) => {
  $('#main').replaceChildren(el('p', { class: 'error', id: 'error' }, (e as Error).message));
});
