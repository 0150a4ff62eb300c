/**
 * The `vouch` commands as tools/cli.ts lists them: each one's name, the
 * first sentence of its summary (for `vouch --help`), and how to load its
 * module. A command's module, with everything it imports, is loaded only
 * when that command runs (`import()`: the build splits dist/ there), so
 * `vouch endorse` or `vouch --help` never loads the gateway and its packages.
 *
 * Must hold: this module imports nothing at run time; each `short` is the
 * first sentence of the module's own `summary` (test/integration/cli-startup.test.ts).
 */
import type { Command } from './command.ts';

export interface CommandEntry {
  name: string;
  /** The first sentence of the command's summary, without its full stop. */
  short: string;
  load(): Promise<Command>;
}

export const COMMANDS: readonly CommandEntry[] = [
  {
    name: 'keygen',
    short: 'Creates a new ed25519 key as PKCS#8 PEM with mode 0600 (never overwrites) and prints its public key (base64) on stdout',
    load: async () => (await import('./commands/keygen.ts')).keygen,
  },
  {
    name: 'init',
    short: 'Creates a new chain repository in DIR (a git repository) holding the signed authority block and checkpoint',
    load: async () => (await import('./commands/init.ts')).init,
  },
  {
    name: 'endorse',
    short: 'Appends one endorsement block binding URL to the hash of its bytes, signed by the authority key; prints the block index and record_hash',
    load: async () => (await import('./commands/endorse.ts')).endorse,
  },
  {
    name: 'revoke',
    short: 'Appends one revoke block naming the endorse block selected for URL (or block N), signed by the authority key; prints its index and record_hash',
    load: async () => (await import('./commands/revoke.ts')).revoke,
  },
  {
    name: 'verify',
    short: 'Verifies every block of the chain in DIR and its checkpoint, offline',
    load: async () => (await import('./commands/verify.ts')).verify,
  },
  {
    name: 'check',
    short: 'Verifies the chain, selects the block signed for URL and checks that FILE hashes to its artifact_hash',
    load: async () => (await import('./commands/check.ts')).check,
  },
  {
    name: 'check-listing',
    short:
      "Checks that a package listing (npm packument, PyPI simple page, Go @v/list) shows exactly the versions the log's completeness index proves for its unit",
    load: async () => (await import('./commands/check-listing.ts')).checkListing,
  },
  {
    name: 'serve',
    short: 'Runs the gateway: JSON lookups, verified downloads and (with an authority key) submit',
    load: async () => (await import('./commands/serve.ts')).serve,
  },
  {
    name: 'config init',
    short: 'Writes the embedded default gateway configuration, complete and commented, to FILE (default vouch.yaml) for `vouch serve --config FILE`',
    load: async () => (await import('./commands/config.ts')).configInit,
  },
  {
    name: 'get',
    short:
      "Downloads an artifact through a gateway and verifies the UNS block's signature, its inclusion in the log's signed checkpoint, the checkpoint's consistency with the last one seen, and the bytes' hash itself before writing FILE",
    load: async () => (await import('./commands/get.ts')).get,
  },
  {
    name: 'root init',
    short:
      'Writes a root statement for the holders to sign: it adopts a root of the --holder keys (version 1) on a chain without one, or rotates the root (version v+1)',
    load: async () => (await import('./commands/root.ts')).rootInit,
  },
  {
    name: 'root sign',
    short: "Adds this holder's signature to a statement file (root, key rotation or compromise), in place",
    load: async () => (await import('./commands/root.ts')).rootSign,
  },
  {
    name: 'root apply',
    short: 'Appends a signed statement (root, key rotation or compromise) as a key block once applyKeyEvent accepts it on the chain as verified',
    load: async () => (await import('./commands/root.ts')).rootApply,
  },
  {
    name: 'key rotate',
    short: 'Writes a routine rotation statement: a new online key takes over at its key block, and the old key signs nothing after it',
    load: async () => (await import('./commands/key.ts')).keyRotate,
  },
  {
    name: 'key compromise',
    short:
      'Writes a compromise statement: the online key in force is declared compromised after block N (the last block known good), every later block it signed is void, and a new key takes over',
    load: async () => (await import('./commands/key.ts')).keyCompromise,
  },
  {
    name: 'reendorse',
    short:
      'Endorses again what the void blocks of a compromise endorsed, one block per void block, each artifact only when its bytes still hash to what the void block claimed',
    load: async () => (await import('./commands/reendorse.ts')).reendorse,
  },
  {
    name: 'witness-key',
    short: 'Prints the witness verifier key (name+hex8+base64, cosignature type 0x04) of the ed25519 key in FILE under NAME',
    load: async () => (await import('./commands/witness-key.ts')).witnessKey,
  },
];

/** The first sentence of a summary, without its full stop (what `short` holds). */
export function firstSentence(summary: string): string {
  return summary.split('. ')[0]!.replace(/\.$/, '');
}
