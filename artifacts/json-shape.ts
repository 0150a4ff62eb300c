/**
 * A bound on the structure of a JSON text, checked before `JSON.parse`
 * builds it: how many values, how deep, how long one string. `JSON.parse`
 * of a few MiB can hold the event loop for seconds when the text is millions
 * of tiny values, and a document nested 200,000 deep parses but cannot be
 * written back (`JSON.stringify` overflows the stack).
 *
 * Owns: one linear pass over the text (strings skipped with `indexOf`).
 * Trusts: nothing of the text; it does not check the syntax (`JSON.parse`
 * does, after), only that the structure stays under the caps.
 * Must hold: time linear in the text's length; no allocation per value;
 * throws `JsonShapeError` naming the cap the text exceeds.
 */

export interface JsonCaps {
  /** Values: counted as separators and openings (so within 2 x of the true count; an object member counts once). */
  maxValues: number;
  /** Arrays and objects open at once. */
  maxDepth: number;
  /** UTF-16 code units of one string (escapes counted as written). */
  maxString: number;
}

/** A text over one of the caps; the message names it. */
export class JsonShapeError extends Error {}

/**
 * Checks `text` against `caps` without parsing it.
 * @throws JsonShapeError naming the first cap exceeded.
 */
export function checkJsonShape(text: string, caps: JsonCaps): { values: number; depth: number } {
  const n = text.length;
  let depth = 0;
  let deepest = 0;
  let values = 1;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      let from = i + 1;
      let end = -1;
      for (;;) {
        const q = text.indexOf('"', from);
        if (q === -1) break; // unterminated: JSON.parse refuses it
        let b = q - 1;
        while (b > i && text.charCodeAt(b) === 0x5c) b--;
        if ((q - 1 - b) % 2 === 0) {
          end = q;
          break;
        }
        from = q + 1;
      }
      if (end === -1) return { values, depth: deepest };
      if (end - i - 1 > caps.maxString) throw new JsonShapeError(`a string longer than ${caps.maxString} characters`);
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > caps.maxDepth) throw new JsonShapeError(`nested deeper than ${caps.maxDepth} levels`);
      if (depth > deepest) deepest = depth;
      if (++values > caps.maxValues) throw new JsonShapeError(`more than ${caps.maxValues} values`);
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    } else if (c === 0x2c) {
      if (++values > caps.maxValues) throw new JsonShapeError(`more than ${caps.maxValues} values`);
    }
  }
  return { values, depth: deepest };
}
