/**
 * Go modules for tests, in the go command's formats: a module version's
 * files, its `.mod`, its zip (entries `<module>@<version>/<name>`, stored)
 * and `.info`, and Go's `h1:` hash (golang.org/x/mod/sumdb/dirhash Hash1)
 * that go.sum lines carry.
 */
import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';

export interface ModVersion {
  module: string;
  version: string;
  files: Record<string, string>;
  mod: string;
  zip: Buffer;
  info: string;
}

/** A stored (uncompressed) zip, as Go's module zips may be. */
export function zipStore(files: { name: string; data: Buffer }[]): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const f of files) {
    const name = Buffer.from(f.name, 'utf8');
    const crc = crc32(f.data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(0x0800, 6); // UTF-8 names
    local.writeUInt16LE(0, 8); // stored
    local.writeUInt16LE(0, 10);
    local.writeUInt16LE(0x21, 12); // 1980-01-01
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(f.data.length, 18);
    local.writeUInt32LE(f.data.length, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(0, 28);
    const c = Buffer.alloc(46);
    c.writeUInt32LE(0x02014b50, 0);
    c.writeUInt16LE(20, 4);
    c.writeUInt16LE(20, 6);
    c.writeUInt16LE(0x0800, 8);
    c.writeUInt16LE(0, 10);
    c.writeUInt16LE(0, 12);
    c.writeUInt16LE(0x21, 14);
    c.writeUInt32LE(crc, 16);
    c.writeUInt32LE(f.data.length, 20);
    c.writeUInt32LE(f.data.length, 24);
    c.writeUInt16LE(name.length, 28);
    c.writeUInt32LE(offset, 42);
    parts.push(local, name, f.data);
    central.push(c, name);
    offset += 30 + name.length + f.data.length;
  }
  const cd = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(files.length, 8);
  end.writeUInt16LE(files.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, cd, end]);
}

/** golang.org/x/mod/sumdb/dirhash.Hash1 of named files. */
export function hash1(files: Record<string, string>): string {
  const h = createHash('sha256');
  for (const name of Object.keys(files).sort()) h.update(`${createHash('sha256').update(files[name]!).digest('hex')}  ${name}\n`);
  return `h1:${h.digest('base64')}`;
}

export function modVersion(module: string, version: string, time = '2026-01-01T00:00:00Z'): ModVersion {
  const mod = `module ${module}\n\ngo 1.19\n`;
  const pkg = module
    .split('/')
    .at(-1)!
    .toLowerCase()
    .replace(/[^a-z]/g, '');
  const files = { 'go.mod': mod, [`${pkg}.go`]: `package ${pkg}\n\n// Version is the release this file was built for.\nconst Version = "${version}"\n` };
  const zip = zipStore(Object.entries(files).map(([name, text]) => ({ name: `${module}@${version}/${name}`, data: Buffer.from(text) })));
  return { module, version, files, mod, zip, info: JSON.stringify({ Version: version, Time: time }) };
}
