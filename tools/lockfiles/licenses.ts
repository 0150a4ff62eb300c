/**
 * Licence checks of `vouch endorse`: an SPDX expression by the SPDX list,
 * through `spdx-expression-parse`.
 * Owns: the rule: the parser accepts it (SPDX ids, LicenseRef, WITH,
 * AND/OR, parentheses, `+`) and it fits the chain's own form (`isLicenseId`
 * of chain/block.ts). `--license-unchecked` drops the SPDX half only; npm's
 * `UNLICENSED` and `SEE LICENSE IN` are refused without it; parentheses
 * around the whole expression are dropped first.
 * Must hold: never throws anything but VouchError.
 */
import parseSpdx from 'spdx-expression-parse';
import { VouchError } from '../../chain/errors.ts';
import { isLicenseId } from '../../chain/block.ts';

/** `value` without parentheses that enclose all of it (and surrounding spaces). */
export function normalizeLicense(value: string): string {
  let s = value.trim();
  for (;;) {
    if (!s.startsWith('(') || !s.endsWith(')')) return s;
    let depth = 0;
    for (let i = 0; i < s.length; i++) {
      if (s[i] === '(') depth++;
      else if (s[i] === ')' && --depth === 0 && i !== s.length - 1) return s; // the first ( closes before the end
    }
    if (depth !== 0) return s;
    s = s.slice(1, -1).trim();
  }
}

/** Null when `value` (normalized) is acceptable, else the reason. */
export function licenseProblem(raw: string, unchecked: boolean): string | null {
  const value = normalizeLicense(raw);
  if (!isLicenseId(value))
    return 'it is not a licence id the chain accepts (at most 128 characters of letters, digits, . + : ( ) - and spaces, starting with a letter or digit)';
  if (unchecked) return null;
  try {
    parseSpdx(value);
    return null;
  } catch {
    return 'it is not an SPDX license expression (use LicenseRef-<id> for others, or --license-unchecked)';
  }
}

/**
 * Checks a licence given by `who` (an option or a package); returns it normalized.
 * @throws VouchError `usage` for an option, `bad_request` for a lockfile entry.
 */
export function checkLicense(value: string, unchecked: boolean, who: { option: string } | { entry: string }): string {
  const problem = licenseProblem(value, unchecked);
  if (problem === null) return normalizeLicense(value);
  if ('option' in who) throw new VouchError('usage', `${who.option} ${JSON.stringify(value.slice(0, 200))}: ${problem}`);
  throw new VouchError('bad_request', `${who.entry}: licence ${JSON.stringify(value.slice(0, 200))}: ${problem}`);
}
