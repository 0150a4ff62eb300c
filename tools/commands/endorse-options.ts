/**
 * The checks `vouch endorse --url` makes of its options, offline and with
 * `--gateway` alike: one place, so both refuse the same things with the
 * same words.
 * Must hold: every refusal is a UsageError naming the option.
 */
import { UsageError } from '../command.ts';
import { isArtifactUrl, isDate, isLicenseId, isSemver, isUnitName, LIMITS } from '../../chain/block.ts';
import { DEFAULT_HASH_ALGORITHM, HASH_ALGORITHMS, isHashAlgorithm } from '../../chain/hash-algorithms.ts';
import type { HashAlgorithm } from '../../chain/crypto-backend.ts';
import { checkLicense } from '../lockfiles/licenses.ts';

/**
 * Checks the URLs and the block's options of `vouch endorse --url`.
 * @returns the hash algorithm to sign with.
 * @throws UsageError naming the first option that is not usable.
 */
export function checkUrlOptions(v: Record<string, any>, urls: readonly string[]): HashAlgorithm {
  for (const u of urls) if (!isArtifactUrl(u)) throw new UsageError(`--url must be an absolute http(s) URL, got ${JSON.stringify(u)}`);
  if (new Set(urls).size !== urls.length) throw new UsageError('a URL may appear only once in a block');
  if (!isUnitName(v.name)) throw new UsageError(`--name must be OWNER/NAME, got ${JSON.stringify(v.name)}`);
  if (!isSemver(v.semver)) throw new UsageError(`--semver must be a SemVer 2.0.0 version, got ${JSON.stringify(v.semver)}`);
  if (!isLicenseId(v.license)) throw new UsageError(`--license must be an SPDX-style id, got ${JSON.stringify(v.license)}`);
  checkLicense(v.license, v['license-unchecked'] === true, { option: '--license' });
  if (v['effective-date'] !== undefined && !isDate(v['effective-date'])) throw new UsageError('--effective-date must be a date YYYY-MM-DD');
  if (v.comment !== undefined && v.comment.length > LIMITS.comment) throw new UsageError(`--comment is longer than ${LIMITS.comment} characters`);
  const algorithm = v.algorithm ?? DEFAULT_HASH_ALGORITHM;
  if (!isHashAlgorithm(algorithm)) throw new UsageError(`unknown --algorithm ${JSON.stringify(algorithm)} (${Object.keys(HASH_ALGORITHMS).join(', ')})`);
  return algorithm;
}
