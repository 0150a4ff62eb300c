/**
 * Byte encodings used by the chain format: UTF-8 (encoding only: strict
 * decoding is `utf8Text` in block.ts), lowercase hex, standard base64 with
 * padding. Portable (no Buffer): runs in Node and in browsers.
 *
 * Must hold: decoders are strict. `base64Decode` accepts only canonical
 * standard base64 with padding (what `base64Encode` writes), `hexDecode`
 * only an even number of lowercase hex digits; anything else returns null.
 */

const encoder = new TextEncoder();

export function utf8(s: string): Uint8Array {
  return encoder.encode(s);
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
/** Char code -> 6-bit value; 255 for anything else (including '='). */
const B64_CODE = (() => {
  const t = new Uint8Array(256).fill(255);
  for (let i = 0; i < 64; i++) t[B64.charCodeAt(i)] = i;
  return t;
})();

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
  const len = s.length;
  if (len % 4 !== 0) return null;
  const pad = len > 0 && s.charCodeAt(len - 1) === 61 ? (s.charCodeAt(len - 2) === 61 ? 2 : 1) : 0;
  const out = new Uint8Array((len / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < len; i += 4) {
    const last = i + 4 === len;
    const a = B64_CODE[s.charCodeAt(i)] ?? 255;
    const b = B64_CODE[s.charCodeAt(i + 1)] ?? 255;
    const c = last && pad === 2 ? 0 : (B64_CODE[s.charCodeAt(i + 2)] ?? 255);
    const d = last && pad >= 1 ? 0 : (B64_CODE[s.charCodeAt(i + 3)] ?? 255);
    if ((a | b | c | d) > 63) return null;
    const n = (a << 18) | (b << 12) | (c << 6) | d;
    out[o++] = (n >> 16) & 255;
    if (o < out.length) out[o++] = (n >> 8) & 255;
    if (o < out.length) out[o++] = n & 255;
    // Canonical: the bits padding drops must be zero.
    if (last && ((pad === 2 && (b & 15) !== 0) || (pad === 1 && (c & 3) !== 0))) return null;
  }
  return out;
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}
