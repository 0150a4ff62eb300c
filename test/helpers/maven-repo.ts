/**
 * Maven repositories for tests: artifacts in the maven2 layout (a pom, a jar
 * of real class files compiled by javac, their `.sha1` / `.md5` side files,
 * artifact-level maven-metadata.xml) served by an OriginServer, and the real
 * `mvn` (Debian's maven 3.8) run against them with a settings.xml whose
 * mirror of `*` is a given URL and a fresh local repository seeded with
 * Debian's packaged plugins (/usr/share/maven-repo: files symlinked, so
 * Maven writes nothing there and fetches no plugin through the network).
 *
 * Owns: the files it writes below the directories it is given, and the mvn
 * processes it starts (killed at their timeout). Everything on 127.0.0.1.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import type { OriginServer } from './origin-server.ts';
import { zipStore } from './go-modules.ts';

export interface Coordinates {
  groupId: string;
  artifactId: string;
  version: string;
}
export interface MavenArtifact extends Coordinates {
  pom: string;
  jar: Buffer | null;
}

/** `group/path/artifactId/version/artifactId-version.ext`. */
export function artifactPath(c: Coordinates, ext: string): string {
  return `${c.groupId.replace(/\./g, '/')}/${c.artifactId}/${c.version}/${c.artifactId}-${c.version}.${ext}`;
}

/** A pom with `deps` as compile dependencies. */
export function pomXml(c: Coordinates, deps: Coordinates[] = [], extra = ''): string {
  const d = deps
    .map((x) => `    <dependency><groupId>${x.groupId}</groupId><artifactId>${x.artifactId}</artifactId><version>${x.version}</version></dependency>`)
    .join('\n');
  return `<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>${c.groupId}</groupId>
  <artifactId>${c.artifactId}</artifactId>
  <version>${c.version}</version>
  <packaging>jar</packaging>
${extra}
  <dependencies>
${d}
  </dependencies>
</project>
`;
}

/** Class files compiled by javac from `sources` (path -> Java text), by path below the output directory. */
export function compileJava(dir: string, sources: Record<string, string>): Map<string, Buffer> {
  const src = join(dir, 'src');
  const out = join(dir, 'classes');
  mkdirSync(out, { recursive: true });
  const files: string[] = [];
  for (const [p, text] of Object.entries(sources)) {
    mkdirSync(join(src, p, '..'), { recursive: true });
    writeFileSync(join(src, p), text);
    files.push(join(src, p));
  }
  const r = spawnSync('javac', [...SHORT_JVM.map((o) => `-J${o}`), '--release', '17', '-d', out, ...files], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`javac failed: ${r.stderr}`);
  const classes = new Map<string, Buffer>();
  const walk = (d: string) => {
    for (const e of readdirSync(d)) {
      const p = join(d, e);
      if (statSync(p).isDirectory()) walk(p);
      else classes.set(relative(out, p), readFileSync(p));
    }
  };
  walk(out);
  return classes;
}

/** A jar (a stored zip with a manifest naming `id`, so no two artifacts' jars are alike) of the given class files. */
export function jarOf(id: string, classes: Iterable<[string, Buffer]>): Buffer {
  const files: { name: string; data: Buffer }[] = [
    { name: 'META-INF/MANIFEST.MF', data: Buffer.from(`Manifest-Version: 1.0\r\nImplementation-Title: ${id}\r\n\r\n`) },
  ];
  for (const [name, data] of classes) files.push({ name, data });
  return zipStore(files);
}

export const sha1 = (b: string | Buffer): string => createHash('sha1').update(b).digest('hex');
const md5 = (b: string | Buffer): string => createHash('md5').update(b).digest('hex');

/**
 * Registers an artifact's pom and jar under `base` (`/repo/`), each with its
 * `.sha1` and `.md5`; `files` overrides what a path answers (a swapped jar).
 */
export function publish(origin: OriginServer, base: string, a: MavenArtifact, files: { jar?: Buffer; jarSha1?: string } = {}): void {
  const put = (path: string, body: string | Buffer, type: string, sum?: string) => {
    origin.route(base + path, { body, contentType: type });
    origin.route(`${base}${path}.sha1`, { body: sum ?? sha1(body), contentType: 'text/plain' });
    origin.route(`${base}${path}.md5`, { body: md5(body), contentType: 'text/plain' });
  };
  put(artifactPath(a, 'pom'), a.pom, 'text/xml');
  if (a.jar !== null) put(artifactPath(a, 'jar'), files.jar ?? a.jar, 'application/java-archive', files.jarSha1);
}

/** Artifact-level maven-metadata.xml (versions in deploy order), with its checksums, under `base`. */
export function publishMetadata(origin: OriginServer, base: string, groupId: string, artifactId: string, versions: string[]): string {
  const xml = `<?xml version="1.0" encoding="UTF-8"?>
<metadata>
  <groupId>${groupId}</groupId>
  <artifactId>${artifactId}</artifactId>
  <versioning>
    <latest>${versions.at(-1)}</latest>
    <release>${versions.at(-1)}</release>
    <versions>
${versions.map((v) => `      <version>${v}</version>`).join('\n')}
    </versions>
    <lastUpdated>20260101000000</lastUpdated>
  </versioning>
</metadata>
`;
  const path = `${base}${groupId.replace(/\./g, '/')}/${artifactId}/maven-metadata.xml`;
  origin.route(path, { body: xml, contentType: 'text/xml' });
  origin.route(`${path}.sha1`, { body: sha1(xml), contentType: 'text/plain' });
  origin.route(`${path}.md5`, { body: md5(xml), contentType: 'text/plain' });
  return xml;
}

/** Debian's packaged Maven plugins. */
export const DEBIAN_MAVEN_REPO = '/usr/share/maven-repo';

/** A fresh local repository at `dir` holding Debian's plugins (directories made, files symlinked). */
export function seededLocalRepo(dir: string): string {
  mkdirSync(dir, { recursive: true });
  const r = spawnSync('cp', ['-rs', `${DEBIAN_MAVEN_REPO}/.`, dir], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`seeding ${dir} failed: ${r.stderr}`);
  return dir;
}

/** A settings.xml whose mirror of every repository is `url`. */
export function mirrorSettings(path: string, url: string): string {
  writeFileSync(
    path,
    `<settings>
  <mirrors>
    <mirror><id>vouch</id><name>vouch gateway</name><mirrorOf>*</mirrorOf><url>${url}</url></mirror>
  </mirrors>
</settings>
`,
  );
  return path;
}

export interface MvnRun {
  status: number | null;
  output: string;
  ms: number;
}

/**
 * JVM options for a short-lived JVM: the client compiler only and the serial collector (about a third
 * less CPU for a run of a few seconds; what the JVM runs is the same). Tests use them; benches measure
 * mvn as users run it, without.
 */
export const SHORT_JVM = ['-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC'];

/**
 * Runs the real mvn (batch mode) without blocking this process; killed after `timeoutMs`. `shortJvm`
 * adds SHORT_JVM to MAVEN_OPTS.
 */
export function mvn(args: string[], opts: { cwd: string; settings: string; repo: string; timeoutMs?: number; shortJvm?: boolean }): Promise<MvnRun> {
  const started = Date.now();
  const mavenOpts = ['-Xmx256m', ...(opts.shortJvm ? SHORT_JVM : [])].join(' ');
  return new Promise((resolve) => {
    const child = spawn('mvn', ['-B', '-s', opts.settings, `-Dmaven.repo.local=${opts.repo}`, ...args], {
      cwd: opts.cwd,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: opts.cwd, MAVEN_OPTS: mavenOpts, JAVA_TOOL_OPTIONS: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => {
      output += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      output += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, output, ms: Date.now() - started });
    });
  });
}

/** A project directory: a pom with `deps` and one Java source. */
export function writeProject(dir: string, deps: Coordinates[], mainJava: string | null): string {
  mkdirSync(join(dir, 'src/main/java/app'), { recursive: true });
  const props =
    '<properties><maven.compiler.release>17</maven.compiler.release><project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>';
  writeFileSync(join(dir, 'pom.xml'), pomXml({ groupId: 'app', artifactId: 'app', version: '1.0' }, deps, props));
  if (mainJava !== null) writeFileSync(join(dir, 'src/main/java/app/Main.java'), mainJava);
  return dir;
}
