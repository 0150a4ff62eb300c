/**
 * Reading a `go.sum` and checking a GOPROXY's files against it.
 * Owns: the lines read (`<module> <version> h1:...` and `.../go.mod h1:...`),
 * the GOPROXY URLs with Go's case escaping (`!x`), Go's `h1:` hash
 * (golang.org/x/mod/sumdb/dirhash Hash1: sha256 over sorted
 * `<hex sha256>  <name>` lines), and the go command's zip checks (names
 * under `<module>@<version>/`, Go's modzip size limits, no duplicate or
 * newline names; a bounded go.mod).
 * Trusts: yauzl for the zip's structure.
 * Must hold: a zip is spooled to a private temporary file, never held in
 * memory, and removed afterwards.
 */
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { hash1, goModH1, zipH1, MAX_ZIP_BYTES, MAX_ZIP_ENTRIES } from '../../artifacts/go-h1.ts';
import { VouchError } from '../../chain/errors.ts';
import { goSemver, goUnitName, isGoModulePath } from '../../chain/unit-names.ts';
import { checkLicense } from './licenses.ts';
import { MultiHash, type DigestName } from './digests.ts';
import type { Http } from './http.ts';
import { MiB } from './origin-map.ts';
import type { Fetched, Options, Pinned } from './types.ts';

export { hash1, goModH1, zipH1, MAX_ZIP_BYTES, MAX_ZIP_ENTRIES };
export const MAX_GO_MOD_BYTES = 16 * MiB;

function bad(msg: string): never {
  throw new VouchError('bad_request', msg);
}

/** Module path or version escaping of the module proxy protocol: `A` -> `!a`. */
export function goEscape(s: string): string {
  return s.replace(/[A-Z]/g, (c) => '!' + c.toLowerCase());
}

export interface GoSumLine {
  line: number;
  module: string;
  version: string;
  goMod: boolean;
  h1: string;
}

/**
 * Parses a go.sum and makes the artifacts to endorse (the .zip and .mod URLs of `proxy`).
 * @throws VouchError `bad_request` naming the line or module.
 */
export function readGoSum(text: string, proxy: string, options: Options, fileName: string): Pinned[] {
  const base = proxy.replace(/\/+$/, '');
  const seen = new Map<string, GoSumLine>();
  const pinned: Pinned[] = [];
  let license: string | undefined;
  text.split(/\r?\n/).forEach((raw, i) => {
    const at = `${fileName} line ${i + 1}`;
    const line = raw.trim();
    if (line === '') return;
    const f = line.split(/\s+/);
    if (f.length !== 3) bad(`${at}: not "<module> <version> <hash>"`);
    const [module, v, hash] = f as [string, string, string];
    const goMod = v.endsWith('/go.mod');
    const version = goMod ? v.slice(0, -'/go.mod'.length) : v;
    if (!isGoModulePath(module)) bad(`${at}: ${JSON.stringify(module.slice(0, 200))} is not a module path`);
    if (!/^h1:[A-Za-z0-9+/]{43}=$/.test(hash))
      bad(`${at}: ${module} ${v}: only h1: hashes (base64 of 32 bytes) are read, got ${JSON.stringify(hash.slice(0, 100))}`);
    const key = `${module} ${v}`;
    const earlier = seen.get(key);
    if (earlier) {
      if (earlier.h1 !== hash) bad(`${at}: ${key} has two different hashes (line ${earlier.line})`);
      return;
    }
    seen.set(key, { line: i + 1, module, version, goMod, h1: hash });
    const label = `${module} ${v}`;
    const name = goUnitName(module);
    if (!name.ok) bad(`${at}: ${name.reason}`);
    const semver = goSemver(version);
    if (!semver.ok) bad(`${at}: ${label}: ${semver.reason}`);
    if (options.license === undefined) bad(`${label}: a go.sum names no licences: pass --license`);
    license ??= checkLicense(options.license!, options.licenseUnchecked, { option: '--license' });
    const url = `${base}/${goEscape(module)}/@v/${goEscape(version)}.${goMod ? 'mod' : 'zip'}`;
    pinned.push({
      label,
      url,
      name: (name as { value: string }).value,
      semver: (semver as { value: string }).value,
      license: license!,
      comment: options.comment ?? `go ${label}`,
      endorseAlgorithm: 'sha256',
      check: { kind: goMod ? 'go-mod' : 'go-zip', h1: hash, module, version },
    });
  });
  return pinned;
}

/** Fetches a .zip or .mod and checks its h1 against go.sum. */
export async function fetchGo(http: Http, p: Pinned, algorithms: Set<DigestName>, signal: AbortSignal): Promise<Fetched> {
  const check = p.check;
  if (check.kind !== 'go-zip' && check.kind !== 'go-mod') throw new TypeError('not a Go artifact');
  const hashes = new MultiHash(algorithms);
  let h1: string;
  if (check.kind === 'go-mod') {
    const { bytes } = await http.bytes(p.url, { maxBytes: MAX_GO_MOD_BYTES, signal });
    hashes.update(bytes);
    h1 = goModH1(bytes);
  } else {
    const dir = mkdtempSync(join(tmpdir(), 'vouch-gozip-'));
    const file = join(dir, 'module.zip');
    const out = createWriteStream(file, { mode: 0o600 });
    try {
      const failed = once(out, 'error').then(([e]) => {
        throw new VouchError('io_error', `cannot write a temporary file: ${(e as Error).message}`);
      });
      failed.catch(() => {});
      const answer = await http.get(p.url, { maxBytes: MAX_ZIP_BYTES, signal });
      for await (const chunk of answer.body) {
        hashes.update(chunk);
        if (!out.write(chunk)) await Promise.race([once(out, 'drain'), failed]);
      }
      out.end();
      await Promise.race([once(out, 'close'), failed]);
      h1 = await zipH1(file, check.module, check.version, p.label);
    } finally {
      out.destroy();
      rmSync(dir, { recursive: true, force: true });
    }
  }
  if (h1 !== check.h1) {
    throw new VouchError('hash_mismatch', `go.sum mismatch: ${p.label} (${p.url}): go.sum ${check.h1}, fetched ${h1}`, { resource: p.url });
  }
  return { pinned: p, digests: hashes.digests(), bytes: hashes.bytes, matched: true };
}
