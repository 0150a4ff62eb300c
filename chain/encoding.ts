/**
 * Byte encodings used by the chain format: UTF-8, lowercase hex, standard
 * base64 with padding. Portable (no Buffer): runs in Node and in browsers.
 *
 * Must hold: decoders are strict. `base64Decode` accepts only canonical
 * standard base64 with padding (what `base64Encode` writes), `hexDecode`
 * only an even number of lowercase hex digits; anything else returns null.
 */

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

export function utf8(s: string): Uint8Array {
  return encoder.encode(s);
}

/** Decodes UTF-8 strictly; throws TypeError on invalid bytes. */
export function fromUtf8(b: Uint8Array): string {
  return decoder.decode(b);
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

export function hexEncode(b: Uint8Array): string {
  let s = '';
  for (let i = 0; i < b.length; i++) s += HEX[b[i]!];
  return s;
}

const HEX_RE = /^(?:[0-9a-f]{2})*$/;

export function hexDecode(s: string): Uint8Array | null {
  if (!HEX_RE.test(s)) return null;
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(i * 2, i * 2 + 2), 16);
  return out;
}

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_INDEX = new Map([...B64].map((c, i) => [c, i]));

export function base64Encode(b: Uint8Array): string {
  let s = '';
  let i = 0;
  for (; i + 2 < b.length; i += 3) {
    const n = (b[i]! << 16) | (b[i + 1]! << 8) | b[i + 2]!;
    s += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + B64[n & 63]!;
  }
  const rest = b.length - i;
  if (rest === 1) {
    const n = b[i]! << 16;
    s += B64[n >> 18]! + B64[(n >> 12) & 63]! + '==';
  } else if (rest === 2) {
    const n = (b[i]! << 16) | (b[i + 1]! << 8);
    s += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + '=';
  }
  return s;
}

/** Strict, canonical standard base64 with padding; null when not. */
export function base64Decode(s: string): Uint8Array | null {
  if (s.length % 4 !== 0) return null;
  const pad = s.endsWith('==') ? 2 : s.endsWith('=') ? 1 : 0;
  const out = new Uint8Array((s.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < s.length; i += 4) {
    let n = 0;
    for (let j = 0; j < 4; j++) {
      const c = s[i + j]!;
      if (c === '=' && i + 4 === s.length && j >= 4 - pad) { n <<= 6; continue; }
      const v = B64_INDEX.get(c);
      if (v === undefined) return null;
      n = (n << 6) | v;
    }
    if (o < out.length) out[o++] = (n >> 16) & 255;
    if (o < out.length) out[o++] = (n >> 8) & 255;
    if (o < out.length) out[o++] = n & 255;
  }
  // Canonical: re-encoding must give the same text (no stray bits in padding).
  return base64Encode(out) === s ? out : null;
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}
