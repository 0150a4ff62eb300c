/**
 * The `vouch` command line (docs/spec/design.md §7): dispatches to one module per command,
 * loaded only when its command runs (tools/command-list.ts), so start-up
 * costs what that command imports and nothing more.
 * Exit status: 0 success, 1 a verification or check failed, 2 usage or
 * environment error, with one clear line on stderr.
 */
import { COMMANDS } from './command-list.ts';

function usage(): string {
  const w = Math.max(...COMMANDS.map((c) => c.name.length)) + 2;
  return [
    'usage: vouch <command> [options]',
    '',
    'commands:',
    ...COMMANDS.map((c) => `  ${c.name.padEnd(w)}${c.short}`),
    '',
    'Run `vouch <command> --help` for the options of a command.',
    '',
  ].join('\n');
}

const [name, ...rest] = process.argv.slice(2);
let code: number;
if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
  process.stdout.write(usage());
  code = name === undefined ? 2 : 0;
} else {
  // Two-word commands (`vouch root init`): the name and the first argument.
  const sub = rest[0] !== undefined ? COMMANDS.find((c) => c.name === `${name} ${rest[0]}`) : undefined;
  const entry = sub ?? COMMANDS.find((c) => c.name === name);
  if (sub !== undefined) rest.shift();
  const group = COMMANDS.filter((c) => c.name.startsWith(`${name} `)).map((c) => c.name.slice(name.length + 1));
  if (entry === undefined && group.length > 0) {
    process.stderr.write(`vouch ${name}: give a subcommand: ${group.join(', ')} (vouch ${name} <subcommand> --help)\n`);
    code = 2;
  } else if (entry === undefined) {
    const { nearest } = await import('./command.ts');
    const near = nearest(name, [...new Set(COMMANDS.map((c) => c.name.split(' ')[0]!))]);
    process.stderr.write(
      `vouch: unknown command ${JSON.stringify(name)}${near === null ? '' : `; did you mean ${near}?`} (commands: ${COMMANDS.map((c) => c.name).join(', ')})\n`,
    );
    code = 2;
  } else {
    const [{ runCommand }, cmd] = await Promise.all([import('./command.ts'), entry.load()]);
    code = await runCommand(cmd, rest);
  }
}
process.exitCode = code;
