/**
 * Go's reference code as a checker: builds test/go-interop/checknote.go
 * (golang.org/x/mod/sumdb/note and sumdb/tlog from Debian's
 * golang-golang-x-mod-dev, GOPATH mode, no network) and runs it on one JSON
 * input (a verifier key, a note, inclusion and consistency proofs); it exits
 * 0 when Go accepts everything, 1 when it refuses something.
 *
 * Owns: `<work>/checknote`, `<work>/gocache` (the caller removes `work`).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as assert from 'uvu/assert';

export const GOPATH = '/usr/share/gocode';
export const checkNoteProgram = fileURLToPath(new URL('../go-interop/checknote.go', import.meta.url));

export interface CheckNoteRun {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Builds the checker into `work` (asserting the build) and returns a function that runs it on `input`, bounded by `timeoutMs`. */
export function buildCheckNote(work: string): (input: unknown, timeoutMs?: number) => CheckNoteRun {
  assert.ok(existsSync(checkNoteProgram), 'test/go-interop/checknote.go');
  assert.ok(existsSync(join(GOPATH, 'src/golang.org/x/mod/sumdb/note')), 'golang-golang-x-mod-dev is not installed (apt-get install golang-golang-x-mod-dev)');
  const binary = join(work, 'checknote');
  const goEnv = { ...process.env, GO111MODULE: 'off', GOPATH, GOCACHE: join(work, 'gocache'), HOME: work, GOFLAGS: '', GOTOOLCHAIN: 'local' };
  const built = spawnSync('go', ['build', '-o', binary, checkNoteProgram], { env: goEnv, encoding: 'utf8', timeout: 180_000 });
  assert.is(built.status, 0, `go build failed: ${built.stderr}`);
  return (input, timeoutMs = 30_000) => {
    const r = spawnSync(binary, [], { input: JSON.stringify(input), encoding: 'utf8', timeout: timeoutMs });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };
}
