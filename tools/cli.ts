/**
 * The `vouch` command line (DESIGN 7): dispatches to one module per command.
 * Exit status: 0 success, 1 a verification or check failed, 2 usage or
 * environment error, with one clear line on stderr.
 */
import { type Command, runCommand } from './command.ts';
import { keygen } from './commands/keygen.ts';
import { init } from './commands/init.ts';
import { endorse } from './commands/endorse.ts';
import { verify } from './commands/verify.ts';
import { check } from './commands/check.ts';
import { serve } from './commands/serve.ts';
import { get } from './commands/get.ts';

const COMMANDS: Command[] = [keygen, init, endorse, verify, check, serve, get];

function usage(): string {
  const w = Math.max(...COMMANDS.map((c) => c.name.length)) + 2;
  return [
    'usage: vouch <command> [options]',
    '',
    'commands:',
    ...COMMANDS.map((c) => `  ${c.name.padEnd(w)}${c.summary.split('. ')[0]!.replace(/\.$/, '')}`),
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
  const cmd = COMMANDS.find((c) => c.name === name);
  if (cmd === undefined) {
    process.stderr.write(`vouch: unknown command ${JSON.stringify(name)} (commands: ${COMMANDS.map((c) => c.name).join(', ')})\n`);
    code = 2;
  } else {
    code = await runCommand(cmd, rest);
  }
}
process.exitCode = code;
