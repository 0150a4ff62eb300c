/**
 * The lockfile mode's option defaults, apart from the code that uses them
 * (tools/commands/endorse-lockfile.ts), so `vouch endorse` can show them in
 * its --help and refuse lockfile-only options without loading the lockfile
 * readers and their packages (undici, htmlparser2, yauzl).
 *
 * Owns: constants only; imports nothing.
 */
export const DEFAULT_INDEX_URL = 'https://pypi.org/simple/';
export const DEFAULT_GOPROXY = 'https://proxy.golang.org/';
export const DEFAULT_MAVEN_REPO = 'https://repo.maven.apache.org/maven2/';

/** Options only the lockfile mode takes (the single-URL mode refuses them). */
export const LOCKFILE_ONLY = ['lockfile-type', 'index-url', 'goproxy', 'maven-repo', 'origin'] as const;
