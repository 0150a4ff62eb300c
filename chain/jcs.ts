/**
 * RFC 8785 JSON Canonicalization Scheme (JCS).
 *
 * Owns: the canonical text that every hash and signature of the chain is
 * computed over. Object members sorted by their names' UTF-16 code units, no
 * insignificant whitespace, strings and numbers exactly as ECMAScript
 * `JSON.stringify` writes them (which is what RFC 8785 3.2.2 prescribes).
 *
 * Must hold: the output is byte-identical to the RFC 8785 reference data
 * (`shared/vectors/jcs/`) and to the independent chain vectors. Input that
 * JCS cannot represent (non-finite numbers, lone surrogates, undefined,
 * functions, cycles) throws a TypeError rather than producing text.
 */

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function serializeString(s: string): string {
  if (LONE_SURROGATE.test(s)) throw new TypeError('JCS: string holds a lone surrogate');
  return JSON.stringify(s);
}

function serialize(value: unknown, stack: unknown[]): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('JCS: number is not finite');
      return JSON.stringify(value);
    case 'string':
      return serializeString(value);
    case 'object': {
      if (stack.includes(value)) throw new TypeError('JCS: cyclic value');
      stack.push(value);
      let out: string;
      if (Array.isArray(value)) {
        out = '[' + value.map((v) => serialize(v, stack)).join(',') + ']';
      } else {
        const obj = value as Record<string, unknown>;
        const keys = Object.keys(obj).sort();
        const parts: string[] = [];
        for (const k of keys) {
          if (obj[k] === undefined) throw new TypeError(`JCS: member ${JSON.stringify(k)} is undefined`);
          parts.push(serializeString(k) + ':' + serialize(obj[k], stack));
        }
        out = '{' + parts.join(',') + '}';
      }
      stack.pop();
      return out;
    }
    default:
      throw new TypeError(`JCS: cannot represent a ${typeof value}`);
  }
}

/** Canonical JSON text of `value` (RFC 8785). Throws TypeError when impossible. */
export function canonicalize(value: unknown): string {
  return serialize(value, []);
}
