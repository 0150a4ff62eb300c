/**
 * The mirror's spool files: large artifacts (over `spoolThreshold`) are
 * written to a file in the spool directory while the verified fetcher hashes
 * them, and served from it; without a disk tier (or when it cannot take the
 * file) the file is deleted after its last reader.
 *
 * Owns: the spool directory (the configured one, or a private directory
 * under the OS temp dir, removed by `close()`), fresh temp names, and the
 * spool files held by readers.
 *
 * Trusts: the mirror to serve only files the fetcher verified.
 *
 * Must hold: a spool file handed out is not deleted before every holder
 * called `release()`, and is deleted after the last one did.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VouchError } from '../chain/errors.ts';
import type { StoredArtifact } from './stored-artifact.ts';

export const ignore = () => {
  /* best effort */
};

/** A temp file name unique to this process. */
export function tempName(prefix: string): string {
  return `${prefix}-${process.pid}-${randomBytes(8).toString('hex')}.tmp`;
}

/** Reference counting of one file shared by readers. */
class FileRefs {
  refs = 0;
  constructor(private readonly onLast: () => void) {}
  acquire(): () => void {
    this.refs++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.refs === 0) this.onLast();
    };
  }
}

function fileArtifact(artifactHash: string, path: string, size: number, contentType: string, headers: Record<string, string>, refs: FileRefs): StoredArtifact {
  const release = refs.acquire();
  return {
    artifactHash,
    contentType,
    headers,
    size,
    path,
    tier: 'spool',
    release,
    retain: () => fileArtifact(artifactHash, path, size, contentType, headers, refs),
  };
}

export class SpoolFiles {
  private directoryPromise: Promise<string> | null = null;
  private privateDir: string | null = null;
  private readonly held = new Map<string, number>(); // path -> size, held by readers

  /** `dir`: where spool files go; null: a private directory under the OS temp dir. */
  constructor(private readonly dir: string | null) {}

  /** The spool directory, made on first use. */
  async directory(): Promise<string> {
    this.directoryPromise ??= (async () => {
      if (this.dir !== null) {
        await mkdir(this.dir, { recursive: true });
        return this.dir;
      }
      this.privateDir = await mkdtemp(join(tmpdir(), 'vouch-spool-'));
      return this.privateDir;
    })();
    try {
      return await this.directoryPromise;
    } catch (e) {
      this.directoryPromise = null;
      throw new VouchError('io_error', `cannot create the spool directory: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
    }
  }

  /** Serves a verified spool file as it is; it is deleted after the last reader's `release()`. */
  serve(artifactHash: string, path: string, size: number, contentType: string, headers: Record<string, string>): StoredArtifact {
    this.held.set(path, size);
    const refs = new FileRefs(() => {
      this.held.delete(path);
      unlink(path).catch(ignore);
    });
    return fileArtifact(artifactHash, path, size, contentType, headers, refs);
  }

  stats(): { files: number; bytes: number } {
    let bytes = 0;
    for (const s of this.held.values()) bytes += s;
    return { files: this.held.size, bytes };
  }

  /** Removes the private directory, if one was made. */
  async close(): Promise<void> {
    if (this.privateDir !== null) await rm(this.privateDir, { recursive: true, force: true }).catch(ignore);
  }
}
