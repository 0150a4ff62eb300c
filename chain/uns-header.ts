/**
 * The `UNS` header of a verified answer (docs/spec/design.md §3.2), minified
 * JSON with non-ASCII escaped:
 *   full:    {"<service>":{"endorsement":<the whole block served>}}
 *   compact: {"<service>":{"block":{"index":N,"record_hash":"<hex>",
 *             "url":"<base>/v1/block?index=N"},"entry":<the URL's entry>}}
 * Full when its value fits UNS_FULL_MAX, compact otherwise and on
 * package-manager routes; `entry` left out past UNS_COMPACT_MAX. A compact
 * header is verified by fetching block N, checking it like any block, and
 * matching index, record_hash and entry.
 * Owns: both forms and their bounds; pure (no I/O), like the rest of chain/.
 */
import { canonicalize } from './jcs.ts';
import type { Block, Endorsement } from './block.ts';

/** Largest full-form value: a block of about eight entries; beyond it, the compact form. */
export const UNS_FULL_MAX = 4096;
/** Largest compact value with its `entry` (an entry with a long URL or comment is left out). */
export const UNS_COMPACT_MAX = 2048;

/** Minified JSON with every non-ASCII character escaped (\uXXXX): safe in an HTTP header. */
export function asciiJson(value: unknown): string {
  const text = JSON.stringify(value);
  // eslint-disable-next-line no-control-regex
  return /[^\x00-\x7e]/.test(text) ? text.replace(/[\u007f-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')) : text;
}

/** The full form, or null when it is longer than UNS_FULL_MAX. */
export function fullUns(service: string, block: Block): string | null {
  const text = asciiJson({ [service]: { endorsement: block } });
  return text.length <= UNS_FULL_MAX ? text : null;
}

/** The compact form for `entry` of `block`; `base` is the gateway's public URL (no trailing slash). */
export function compactUns(service: string, block: Block, entry: Endorsement | null, base: string): string {
  const ref = { index: block.index, record_hash: block.record_hash, url: `${base}/v1/block?index=${block.index}` };
  if (entry !== null) {
    const text = asciiJson({ [service]: { block: ref, entry } });
    if (text.length <= UNS_COMPACT_MAX) return text;
  }
  return asciiJson({ [service]: { block: ref } });
}

/** What a UNS header says: the whole block (unchecked), or a reference to it. */
export type UnsForm =
  | { form: 'full'; block: unknown }
  | { form: 'compact'; index: number; recordHash: string; url: string | null; entry: Record<string, unknown> | null };

/** Longest UNS header read (a full form of a block is far below; a header this long is not a gateway's). */
const MAX_UNS_CHARS = 16 * 1024 * 1024;

/**
 * Parses a UNS header value into its form; nothing is verified here.
 * Returns the reason as a string when it is neither form.
 */
export function parseUns(text: string): UnsForm | string {
  if (text.length > MAX_UNS_CHARS) return 'the UNS header is too long';
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch {
    return 'the UNS header is not JSON';
  }
  const values = typeof obj === 'object' && obj !== null && !Array.isArray(obj) ? Object.values(obj) : [];
  const inner = values.length === 1 ? values[0] : null;
  if (typeof inner !== 'object' || inner === null || Array.isArray(inner)) return 'the UNS header is not {"<service>":{...}}';
  const o = inner as Record<string, unknown>;
  if ('endorsement' in o) return { form: 'full', block: o.endorsement };
  const ref = o.block;
  if (typeof ref !== 'object' || ref === null || Array.isArray(ref)) return 'the UNS header has neither "endorsement" nor "block"';
  const r = ref as Record<string, unknown>;
  if (typeof r.index !== 'number' || !Number.isSafeInteger(r.index) || r.index < 0) return "the UNS header's block.index is not a non-negative integer";
  if (typeof r.record_hash !== 'string' || !/^[0-9a-f]{64}$/.test(r.record_hash)) return "the UNS header's block.record_hash is not 64 hex digits";
  if (r.url !== undefined && typeof r.url !== 'string') return "the UNS header's block.url is not a string";
  const entry = o.entry;
  if (entry !== undefined && (typeof entry !== 'object' || entry === null || Array.isArray(entry))) return "the UNS header's entry is not an object";
  return {
    form: 'compact',
    index: r.index,
    recordHash: r.record_hash,
    url: (r.url as string | undefined) ?? null,
    entry: (entry as Record<string, unknown> | undefined) ?? null,
  };
}

/** Whether a compact form's `entry` is exactly the block's entry (canonical JSON equal). */
export function sameEntry(given: Record<string, unknown>, signed: Endorsement): boolean {
  try {
    return canonicalize(given) === canonicalize(signed);
  } catch {
    return false;
  }
}
