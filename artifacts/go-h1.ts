/**
 * Go's `h1:` hash (golang.org/x/mod/sumdb/dirhash Hash1): sha256 over the
 * lines `<hex sha256 of the file>  <name>\n`, sorted by name bytewise,
 * base64; for a zip the zip's names (HashZip), for a go.mod the one name
 * `go.mod` (cmd/go goModSum).
 * Owns: the hash, for `vouch endorse --lockfile go.sum` and the authority
 * checking a go.sum claim (gateway/chain/submitter.ts).
 * Trusts: yauzl for the zip's structure. Must hold: bounded as Go's modzip
 * limits (uncompressed size, entry count), no name twice, none with a
 * newline.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import yauzl, { type ZipFile } from 'yauzl';
import { VouchError } from '../chain/errors.ts';

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
      if (name.length < prefix.length || !name.subarray(0, prefix.length).equals(prefix))
        bad(`${label}: the module zip has ${shown}, outside ${prefix.toString()}`);
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

/** The proxy form of a module file URL: `<proxy>/<escaped module>/@v/<escaped version>.zip|.mod`. */
const PROXY_FILE_RE = /^https?:\/\/[^?#]+?\/([^?#]+)\/@v\/([^/?#]+)\.(zip|mod)$/;

/** Whether `url` names a module proxy `.zip` or `.mod` file (what an `h1:` claim applies to). */
export function isGoProxyFileUrl(url: string): boolean {
  return PROXY_FILE_RE.test(url);
}

/**
 * `h1:` of a GOPROXY file already spooled to `file` (fetched from `url`): a
 * `.mod` hashes as a go.mod, a `.zip` as a module zip whose module path is
 * the zip's own (its first name up to `@<version>/`), which the URL must
 * name (escaped, on a path boundary): the proxy's base is not known here.
 * @throws VouchError `bad_request` for another URL or a zip Go would refuse.
 */
export async function goH1OfSpooled(file: string, url: string): Promise<string> {
  const m = PROXY_FILE_RE.exec(url);
  if (!m) bad(`${url}: an h1: claim applies to a module proxy .zip or .mod URL (<proxy>/<module>/@v/<version>.zip|.mod)`);
  if (m[3] === 'mod') {
    const h = createHash('sha256');
    for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
    return hash1([{ name: Buffer.from('go.mod'), sha256: h.digest('hex') }]);
  }
  const version = goUnescape(decodeURIComponent(m[2]!));
  const first = await firstZipName(file, url);
  const at = first.indexOf(`@${version}/`);
  const module = at > 0 ? first.slice(0, at) : '';
  const path = decodeURIComponent(m[1]!);
  const escaped = module.replace(/[A-Z]/g, (c) => '!' + c.toLowerCase());
  if (module === '' || !(path === escaped || path.endsWith('/' + escaped))) {
    bad(`${url}: the module zip's first file ${JSON.stringify(first.slice(0, 200))} is not under <module>@${version}/ for the module this URL names`);
  }
  return zipH1(file, module, version, url);
}
