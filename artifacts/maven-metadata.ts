/**
 * Maven's `maven-metadata.xml` read strictly and written back: the artifact
 * level (`<versioning>`), the group level (`<plugins>`), and a SNAPSHOT's
 * version level (only recognised: the Maven route refuses it).
 * Owns: the bounded XML reading (htmlparser2 in XML mode: no DTD, no
 * external entity), the model, the writer.
 * Trusts: nothing of the bytes.
 * Must hold: a body over MAX_METADATA_XML, deeper than MAX_DEPTH, with more
 * than MAX_ELEMENTS elements or a text over MAX_TEXT is refused before more
 * is read; every name and version kept matches its token pattern, so the
 * writer escapes only `&<>`.
 */
import { Parser } from 'htmlparser2';

/** Largest maven-metadata.xml read (Central's largest artifact-level files are a few hundred KiB). */
export const MAX_METADATA_XML = 8 * 1024 * 1024;
/** Deepest element nesting read (the format needs 4). */
export const MAX_DEPTH = 16;
/** Most elements read (a version per element: 200k versions is far beyond any real artifact). */
export const MAX_ELEMENTS = 200_000;
/** Longest text of one element. */
export const MAX_TEXT = 1024;

/** A groupId, artifactId or plugin prefix: Maven's id characters. */
export const MAVEN_ID = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$/;
/** A version Maven can lay out as a path segment. */
export const MAVEN_VERSION = /^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$/;
const LAST_UPDATED = /^[0-9]{14}$/;

/** Origin metadata that is not usable; the message says why. */
export class MavenMetadataError extends Error {}

export interface MavenPlugin {
  name: string | null;
  prefix: string;
  artifactId: string;
}

export interface MavenMetadata {
  groupId: string | null;
  artifactId: string | null;
  /** The `<version>` of the root (version-level metadata). */
  version: string | null;
  /** Versions in the origin's order (deploy order: the last is the newest), each once; null: no `<versioning><versions>`. */
  versions: string[] | null;
  latest: string | null;
  release: string | null;
  lastUpdated: string | null;
  /** The document has `<versioning><snapshot>` or `<snapshotVersions>`: version-level SNAPSHOT metadata. */
  snapshot: boolean;
  /** Group-level plugin prefixes; null: no `<plugins>`. */
  plugins: MavenPlugin[] | null;
}

interface Node {
  name: string;
  text: string;
  children: Node[];
}

/**
 * The element tree of an XML document, bounded (see the header).
 * @throws MavenMetadataError for a body over the caps or without one root element.
 */
export function readXmlTree(body: Uint8Array | string): Node {
  if (body.length > MAX_METADATA_XML) throw new MavenMetadataError(`the document is larger than ${MAX_METADATA_XML} bytes`);
  const text = typeof body === 'string' ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  const top: Node = { name: '#document', text: '', children: [] };
  const stack: Node[] = [top];
  let elements = 0;
  const parser = new Parser(
    {
      onopentag(name) {
        if (stack.length > MAX_DEPTH) throw new MavenMetadataError(`the document is nested deeper than ${MAX_DEPTH} elements`);
        if (++elements > MAX_ELEMENTS) throw new MavenMetadataError(`the document has more than ${MAX_ELEMENTS} elements`);
        const node: Node = { name, text: '', children: [] };
        stack.at(-1)!.children.push(node);
        stack.push(node);
      },
      ontext(t) {
        const node = stack.at(-1)!;
        if (node === top) return;
        if (node.text.length + t.length > MAX_TEXT) {
          if ((node.text + t).trim().length > MAX_TEXT) throw new MavenMetadataError(`an element's text is longer than ${MAX_TEXT} characters`);
          node.text = (node.text + t).trim();
          return;
        }
        node.text += t;
      },
      onclosetag() {
        if (stack.length > 1) stack.pop();
      },
    },
    { xmlMode: true, decodeEntities: true, recognizeCDATA: true },
  );
  parser.write(text);
  parser.end();
  const roots = top.children;
  if (roots.length !== 1) throw new MavenMetadataError(roots.length === 0 ? 'the document has no root element' : 'the document has more than one root element');
  return roots[0]!;
}

const child = (n: Node | undefined, name: string): Node | undefined => n?.children.find((c) => c.name === name);
const textOf = (n: Node | undefined): string | null => (n === undefined ? null : n.text.trim());

function token(n: Node | undefined, pattern: RegExp, what: string): string | null {
  const t = textOf(n);
  if (t === null || t === '') return null;
  if (!pattern.test(t)) throw new MavenMetadataError(`${what} ${JSON.stringify(t.slice(0, 64))} is not valid`);
  return t;
}

/**
 * A maven-metadata.xml document.
 * @throws MavenMetadataError for a document over the caps, whose root is not
 * `<metadata>`, or with an id, version or time that is not valid.
 */
export function parseMavenMetadata(body: Uint8Array | string): MavenMetadata {
  const root = readXmlTree(body);
  if (root.name !== 'metadata') throw new MavenMetadataError(`the root element is <${root.name.slice(0, 32)}>, not <metadata>`);
  const versioning = child(root, 'versioning');
  const versionsNode = child(versioning, 'versions');
  let versions: string[] | null = null;
  if (versionsNode !== undefined) {
    const seen = new Set<string>();
    versions = [];
    for (const v of versionsNode.children) {
      if (v.name !== 'version') continue;
      const t = token(v, MAVEN_VERSION, 'a version');
      if (t !== null && !seen.has(t)) {
        seen.add(t);
        versions.push(t);
      }
    }
  }
  const pluginsNode = child(root, 'plugins');
  let plugins: MavenPlugin[] | null = null;
  if (pluginsNode !== undefined) {
    plugins = [];
    for (const p of pluginsNode.children) {
      if (p.name !== 'plugin') continue;
      const prefix = token(child(p, 'prefix'), MAVEN_ID, 'a plugin prefix');
      const artifactId = token(child(p, 'artifactId'), MAVEN_ID, 'a plugin artifactId');
      if (prefix === null || artifactId === null) continue;
      const name = (textOf(child(p, 'name')) ?? '').replace(/[\x00-\x20\x7f\s]+/g, ' ').trim();
      plugins.push({ prefix, artifactId, name: name === '' ? null : name });
    }
  }
  return {
    groupId: token(child(root, 'groupId'), MAVEN_ID, 'the groupId'),
    artifactId: token(child(root, 'artifactId'), MAVEN_ID, 'the artifactId'),
    version: token(child(root, 'version'), MAVEN_VERSION, 'the version'),
    versions,
    latest: token(child(versioning, 'latest'), MAVEN_VERSION, 'latest'),
    release: token(child(versioning, 'release'), MAVEN_VERSION, 'release'),
    lastUpdated: token(child(versioning, 'lastUpdated'), LAST_UPDATED, 'lastUpdated'),
    snapshot: child(versioning, 'snapshot') !== undefined || child(versioning, 'snapshotVersions') !== undefined,
    plugins,
  };
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** The document for `m` (artifact or group level; `snapshot` is not written), as Maven's own writer lays it out. */
export function writeMavenMetadata(m: MavenMetadata): string {
  const out = ['<?xml version="1.0" encoding="UTF-8"?>', '<metadata>'];
  if (m.groupId !== null) out.push(`  <groupId>${esc(m.groupId)}</groupId>`);
  if (m.artifactId !== null) out.push(`  <artifactId>${esc(m.artifactId)}</artifactId>`);
  if (m.version !== null) out.push(`  <version>${esc(m.version)}</version>`);
  if (m.versions !== null || m.lastUpdated !== null) {
    out.push('  <versioning>');
    if (m.latest !== null) out.push(`    <latest>${esc(m.latest)}</latest>`);
    if (m.release !== null) out.push(`    <release>${esc(m.release)}</release>`);
    if (m.versions !== null) {
      out.push('    <versions>');
      for (const v of m.versions) out.push(`      <version>${esc(v)}</version>`);
      out.push('    </versions>');
    }
    if (m.lastUpdated !== null) out.push(`    <lastUpdated>${esc(m.lastUpdated)}</lastUpdated>`);
    out.push('  </versioning>');
  }
  if (m.plugins !== null) {
    out.push('  <plugins>');
    for (const p of m.plugins) {
      out.push('    <plugin>');
      if (p.name !== null) out.push(`      <name>${esc(p.name)}</name>`);
      out.push(`      <prefix>${esc(p.prefix)}</prefix>`, `      <artifactId>${esc(p.artifactId)}</artifactId>`, '    </plugin>');
    }
    out.push('  </plugins>');
  }
  out.push('</metadata>', '');
  return out.join('\n');
}
