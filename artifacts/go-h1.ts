/**
 * Go's `h1:` hash (golang.org/x/mod/sumdb/dirhash Hash1): sha256 over the
 * lines `<hex sha256 of the file>  <name>\n`, one per file, sorted by name
 * bytewise, base64 (standard, padded); for a zip the names are the zip's
 * (HashZip), for a go.mod the one name `go.mod` (cmd/go goModSum).
 *
 * Owns: the hash, for `vouch endorse --lockfile go.sum` (tools/lockfiles/go.ts)
 * and for the authority checking a go.sum claim (gateway/submitter.ts).
 * Trusts: yauzl for the zip's structure. Must hold: bounded (≤ 500 MiB
 * uncompressed, ≤ 1,000,000 entries, no name twice, none with a newline).
 */
import { createHash } from 'node:crypto';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yauzl, { type ZipFile } from 'yauzl';
import { VouchError } from '../chain/errors.ts';
import type { OriginFetcher } from './origin-fetcher.ts';

export const MAX_ZIP_BYTES = 500 * 1024 * 1024;
export const MAX_ZIP_ENTRIES = 1_000_000;

function bad(message: string): never {
  throw new VouchError('bad_request', message);
}

/** `h1:` of files given as (name bytes, sha256 hex). */
export function hash1(files: { name: Buffer; sha256: string }[]): string {
  const sorted = [...files].sort((a, b) => Buffer.compare(a.name, b.name));
  const h = createHash('sha256');
  for (const f of sorted) {
    h.update(`${f.sha256}  `);
    h.update(f.name);
    h.update('\n');
  }
  return 'h1:' + h.digest('base64');
}

/** `h1:` of a go.mod's bytes, as go.sum records it for `<version>/go.mod`. */
export function goModH1(bytes: Uint8Array): string {
  return hash1([{ name: Buffer.from('go.mod'), sha256: createHash('sha256').update(bytes).digest('hex') }]);
}

/**
 * `h1:` of a module zip file (dirhash HashZip), after the go command's
 * prefix check.
 * @throws VouchError `bad_request` for a zip the go command would refuse or that breaks a bound.
 */
export async function zipH1(path: string, module: string, version: string, label: string): Promise<string> {
  const prefix = Buffer.from(`${module}@${version}/`);
  let zip: ZipFile;
  try {
    zip = await yauzl.openPromise(path, { lazyEntries: true, decodeStrings: false, validateEntrySizes: true, autoClose: false });
  } catch (e) {
    return bad(`${label}: the module zip is not a zip file (${String((e as Error).message).split('\n')[0]})`);
  }
  try {
    if (zip.entryCount > MAX_ZIP_ENTRIES) bad(`${label}: the module zip has ${zip.entryCount} entries, more than ${MAX_ZIP_ENTRIES}`);
    const files: { name: Buffer; sha256: string }[] = [];
    const seen = new Set<string>();
    let total = 0;
    for await (const entry of zip.eachEntry()) {
      const name = Buffer.from(entry.fileNameRaw);
      const shown = JSON.stringify(name.toString('utf8').slice(0, 200));
      if (name.includes(0x0a)) bad(`${label}: the module zip has a file name with a newline`);
      if (name.length < prefix.length || !name.subarray(0, prefix.length).equals(prefix)) bad(`${label}: the module zip has ${shown}, outside ${prefix.toString()}`);
      const key = name.toString('latin1');
      if (seen.has(key)) bad(`${label}: the module zip holds ${shown} twice`);
      seen.add(key);
      total += entry.uncompressedSize;
      if (total > MAX_ZIP_BYTES) bad(`${label}: the module zip holds more than ${MAX_ZIP_BYTES} bytes uncompressed`);
      const h = createHash('sha256');
      const stream = await zip.openReadStreamPromise(entry);
      for await (const chunk of stream) h.update(chunk as Buffer);
      files.push({ name, sha256: h.digest('hex') });
    }
    return hash1(files);
  } catch (e) {
    if (e instanceof VouchError) throw e;
    return bad(`${label}: the module zip cannot be read (${String((e as Error).message).split('\n')[0]})`);
  } finally {
    zip.close();
  }
}


/** The first entry name of a zip file. */
async function firstZipName(path: string, label: string): Promise<string> {
  let zip: ZipFile;
  try {
    zip = await yauzl.openPromise(path, { lazyEntries: true, decodeStrings: false, autoClose: false });
  } catch (e) {
    return bad(`${label}: the module zip is not a zip file (${String((e as Error).message).split('\n')[0]})`);
  }
  try {
    for await (const entry of zip.eachEntry()) return Buffer.from(entry.fileNameRaw).toString('utf8');
    return bad(`${label}: the module zip is empty`);
  } finally {
    zip.close();
  }
}

/** Module path or version from the module proxy's escaped form (`!a` -> `A`). */
function goUnescape(s: string): string {
  return s.replace(/!([a-z])/g, (_, c: string) => c.toUpperCase());
}

/**
 * `h1:` of a GOPROXY file fetched with `fetcher`: `<proxy>/<module>/@v/<version>.mod`
 * hashes as a go.mod, `.zip` as a module zip (spooled to a private temporary
 * file, removed afterwards).
 * @throws VouchError `bad_request` for another URL or a zip Go would refuse; the fetcher's errors.
 */
export async function goH1OfUrl(url: string, fetcher: OriginFetcher, options: { guardPrivate: boolean; signal?: AbortSignal }): Promise<string> {
  const m = /^https?:\/\/[^?#]+?\/([^?#]+)\/@v\/([^/?#]+)\.(zip|mod)$/.exec(url);
  if (!m) bad(`${url}: an h1: claim applies to a module proxy .zip or .mod URL (<proxy>/<module>/@v/<version>.zip|.mod)`);
  const res = await fetcher.fetch(url, { guardPrivate: options.guardPrivate, ...(options.signal ? { signal: options.signal } : {}) });
  if (m[3] === 'mod') {
    const h = createHash('sha256');
    for await (const chunk of res.body) h.update(chunk);
    return hash1([{ name: Buffer.from('go.mod'), sha256: h.digest('hex') }]);
  }
  const dir = mkdtempSync(join(tmpdir(), 'vouch-h1-'));
  try {
    const file = join(dir, 'module.zip');
    const out = createWriteStream(file, { mode: 0o600 });
    for await (const chunk of res.body) if (!out.write(chunk)) await once(out, 'drain');
    out.end();
    await once(out, 'close');
    // The proxy's base is not known here: the module path is the zip's (its first name up to `@<version>/`),
    // and the URL must end with it (escaped) on a path boundary; zipH1 then checks every name against it.
    const version = goUnescape(decodeURIComponent(m[2]!));
    const first = await firstZipName(file, url);
    const at = first.indexOf(`@${version}/`);
    const module = at > 0 ? first.slice(0, at) : '';
    const path = decodeURIComponent(m[1]!);
    const escaped = module.replace(/[A-Z]/g, (c) => '!' + c.toLowerCase());
    if (module === '' || !(path === escaped || path.endsWith('/' + escaped))) {
      bad(`${url}: the module zip's first file ${JSON.stringify(first.slice(0, 200))} is not under <module>@${version}/ for the module this URL names`);
    }
    return await zipH1(file, module, version, url);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
