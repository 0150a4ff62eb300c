/**
 * The shape of a YAML text measured before any parser sees it: how deep its
 * flow collections nest and how many line breaks, commas and mapping
 * colons it holds, in one linear scan. The yaml library recurses on nesting and its time grows
 * faster than the input on deep piles, so readers of YAML from users and
 * remotes (the gateway's config file, `vouch endorse --oci`'s compose and
 * Kubernetes files) bound these first, and name a parser error's place
 * with `lineColumn` (the library's pretty errors rescan the text for each).
 * Must hold: linear in the text; never throws.
 */

/**
 * The deepest nesting of YAML flow collections (`[` `{`) in `text` and its
 * line breaks, commas and mapping colons, quoted scalars and comments skipped: one linear
 * scan before the parser, which recurses on nesting (and takes seconds to
 * fail on a deep pile) and spends about 10 µs a node.
 */
export function flowShape(text: string): { depth: number; separators: number } {
  let depth = 0;
  let deepest = 0;
  let separators = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 || c === 0x27) {
      // a quoted scalar: to its closing quote (a doubled ' or an escaped " inside)
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (c === 0x22 && d === 0x5c) i++;
        else if (d === c) break;
      }
    } else if (c === 0x23 && (i === 0 || /\s/.test(text[i - 1]!))) {
      // a comment (after white space): to the end of the line
      const nl = text.indexOf('\n', i);
      i = nl === -1 ? text.length : nl - 1;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > deepest) deepest = depth;
    } else if ((c === 0x5d || c === 0x7d) && depth > 0) depth--;
    else if (c === 0x0a || c === 0x2c) separators++;
    // a mapping's `:` (followed by white space or the end): each can make a node, or an error, of its own
    else if (c === 0x3a && (i + 1 === text.length || text.charCodeAt(i + 1) === 0x20 || text.charCodeAt(i + 1) === 0x0a || text.charCodeAt(i + 1) === 0x09))
      separators++;
  }
  return { depth: deepest, separators };
}

/** The 1-based line and column of a UTF-16 offset in the text. */
export function lineColumn(text: string, offset: number): { line: number; col: number } {
  let line = 1;
  let start = 0;
  for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) {
    line++;
    start = i + 1;
  }
  return { line, col: offset - start + 1 };
}
