/**
 * What an OCI route learnt is reachable from endorsed tags (a manifest,
 * platform manifest, config or layer digest of a repository -> the endorsed
 * manifest URL it was reached from), kept in memory and, with a mirror disk
 * tier, in `<mirror.disk_dir>/oci-reachable.jsonl`, so a restarted gateway
 * with its upstream down still serves the warm mirror's reachable digests.
 * Owns: that file: one JSON object a line (`route`, `repo`, `digest`,
 * `url`), appended as entries are learnt, rewritten (temp file, rename) at
 * twice the live entries or when a line at load is not one of ours.
 * Trusts: nothing of the file: each line is checked (bounded, oci.ts's
 * grammars, the URL under its route's base); a reachable digest is served
 * only while its URL is endorsed and in force.
 * Must hold: at most MAX entries (oldest forgotten first); a bounded read; a
 * broken file costs what it held (relearnt from the upstream), never the start.
 */
import { appendFile, rename, writeFile } from 'node:fs/promises';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { DIGEST, isRepository } from './oci.ts';

/** One line's longest spelling accepted. */
const MAX_LINE = 4096;

export interface RouteId {
  index: number;
  prefix: string;
  origin: string;
  canonical: string;
}

export class ReachableRecord {
  /** `route.index repo digest` -> URL, oldest first. */
  private readonly map = new Map<string, string>();
  private readonly file: string | null;
  private pending: string[] = [];
  private lines = 0;
  private writing: Promise<void> = Promise.resolve();
  private scheduled = false;

  constructor(
    dir: string | null,
    private readonly routes: readonly RouteId[],
    private readonly max: number,
    private readonly warn: (msg: string, f: Record<string, unknown>) => void,
  ) {
    this.file = dir === null ? null : join(dir, 'oci-reachable.jsonl');
    if (this.file !== null) this.load(this.file);
  }

  get size(): number {
    return this.map.size;
  }

  get(key: string): string | undefined {
    return this.map.get(key);
  }

  has(key: string): boolean {
    return this.map.has(key);
  }

  /** Records (or refreshes) `digest` of `repo` as reachable from `url` under `route`. */
  set(route: RouteId, repo: string, digest: string, url: string): void {
    const key = `${route.index} ${repo} ${digest}`;
    const known = this.map.get(key);
    this.map.delete(key);
    this.map.set(key, url);
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value!);
    if (known === url || this.file === null) return;
    this.pending.push(JSON.stringify({ route: `${route.prefix} ${route.origin}`, repo, digest, url }));
    this.schedule();
  }

  /** Resolves when everything learnt so far is written. */
  async flush(): Promise<void> {
    while (this.pending.length > 0 || this.scheduled) {
      this.scheduled = false;
      this.write();
      await this.writing;
    }
    await this.writing;
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      if (!this.scheduled) return;
      this.scheduled = false;
      this.write();
    });
  }

  private write(): void {
    const file = this.file!;
    const batch = this.pending;
    this.pending = [];
    this.writing = this.writing.then(async () => {
      try {
        if (this.lines + batch.length > 2 * Math.max(this.map.size, 1000)) await this.rewrite(file);
        else if (batch.length > 0) {
          await appendFile(file, batch.join('\n') + '\n', { mode: 0o600 });
          this.lines += batch.length;
        }
      } catch (e) {
        this.warn('oci: cannot write the reachability record', { file, error: (e as NodeJS.ErrnoException).code ?? String(e) });
      }
    });
  }

  /** The live entries, whole, in place of the file. */
  private async rewrite(file: string): Promise<void> {
    const byIndex = new Map(this.routes.map((r) => [r.index, r]));
    const out: string[] = [];
    for (const [key, url] of this.map) {
      const [index, repo, digest] = key.split(' ') as [string, string, string];
      const r = byIndex.get(Number(index));
      if (r !== undefined) out.push(JSON.stringify({ route: `${r.prefix} ${r.origin}`, repo, digest, url }));
    }
    const temp = `${file}.tmp`;
    await writeFile(temp, out.length === 0 ? '' : out.join('\n') + '\n', { mode: 0o600 });
    await rename(temp, file);
    this.lines = out.length;
  }

  private load(file: string): void {
    let text: string;
    try {
      if (statSync(file).size > this.max * MAX_LINE) {
        this.warn('oci: the reachability record is larger than its bound: rebuilt', { file });
        text = '';
        this.lines = Infinity; // rewritten at the first write
        this.schedule();
        return;
      }
      text = readFileSync(file, 'utf8');
    } catch {
      return; // none yet
    }
    const byId = new Map(this.routes.map((r) => [`${r.prefix} ${r.origin}`, r]));
    let bad = 0;
    let lines = 0;
    for (const line of text.split('\n')) {
      if (line === '') continue;
      lines++;
      const e = line.length <= MAX_LINE ? parseLine(line) : null;
      const route = e === null ? undefined : byId.get(e.route);
      if (e === null) {
        bad++;
        continue;
      }
      if (route === undefined || !e.url.startsWith(`${route.canonical.endsWith('/') ? route.canonical : `${route.canonical}/`}v2/${e.repo}/manifests/`))
        continue; // a route since removed
      const key = `${route.index} ${e.repo} ${e.digest}`;
      this.map.delete(key);
      this.map.set(key, e.url);
      if (this.map.size > this.max) this.map.delete(this.map.keys().next().value!);
    }
    this.lines = lines;
    if (bad > 0) {
      this.warn('oci: the reachability record held lines that are not entries: rebuilt from the others', { file, bad });
      this.lines = Infinity;
      this.schedule();
    }
  }
}

function parseLine(line: string): { route: string; repo: string; digest: string; url: string } | null {
  let o: unknown;
  try {
    o = JSON.parse(line);
  } catch {
    return null;
  }
  if (o === null || typeof o !== 'object') return null;
  const { route, repo, digest, url } = o as Record<string, unknown>;
  if (typeof route !== 'string' || typeof repo !== 'string' || typeof digest !== 'string' || typeof url !== 'string') return null;
  if (!isRepository(repo) || !DIGEST.test(digest) || url.length > 2048) return null;
  return { route, repo, digest, url };
}
