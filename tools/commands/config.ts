/**
 * `vouch config init [--out FILE] [--force]`: writes the embedded default
 * configuration (gateway/config.ts `embeddedDefaultYaml`), complete and
 * commented, as the file to edit; `vouch serve --config FILE` loads it back
 * to the same configuration as running without --config.
 * Must hold: never overwrites a file without --force.
 */
import { emit, type Command } from '../command.ts';

export const configInit: Command = {
  name: 'config init',
  usage: '[--out FILE] [--force]',
  summary:
    'Writes the embedded default gateway configuration, complete and commented, to FILE (default vouch.yaml) for `vouch serve --config FILE`. Refuses to overwrite a file without --force.',
  details: [
    'A config file is merged over the embedded default (mappings key by key, lists and scalars replace),',
    'so the written file may be cut down to the keys you change. Relative paths in it are relative to',
    'the file: next to it, ./var holds the chain, the development authority key and the submit token.',
    "The authority section is written commented out: so the default's development key and token are",
    'created on first start. Uncomment it to use your own key (vouch keygen) and token.',
  ].join('\n'),
  options: {
    out: { type: 'string', value: 'FILE', help: 'where to write the configuration (default: vouch.yaml)' },
    force: { type: 'boolean', help: 'overwrite FILE if it exists' },
  },
  async run(v) {
    const { writeDefaultConfig } = await import('../../gateway/config.ts');
    const out = (v.out as string | undefined) ?? 'vouch.yaml';
    writeDefaultConfig(out, v.force === true);
    emit(v, `wrote ${out}: the embedded default; run: vouch serve --config ${out}`, { file: out });
    return 0;
  },
};
