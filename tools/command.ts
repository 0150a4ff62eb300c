/**
 * The frame every `vouch` command runs in: option parsing (node:util
 * parseArgs, strict), `--help`, and the one-line error contract of docs/spec/design.md §7:
 * exit 0 success, 1 a verification or check failed, 2 usage or environment
 * error, with one clear line on stderr — never a stack trace.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { VouchError, isVouchError } from '../chain/errors.ts';
import { EXIT_CODE } from './exit-codes.ts';

export type OptionSpec = {
  type: 'string' | 'boolean';
  multiple?: boolean;
  short?: string;
  /** Shown in --help, e.g. `--url URL  artifact URL`. */
  help: string;
  value?: string;
  required?: boolean;
};

export interface Command {
  name: string;
  summary: string;
  /** Usage line after `vouch <name>`. */
  usage: string;
  options: Record<string, OptionSpec>;
  positionals?: { name: string; required: boolean }[];
  details?: string;
  /** Set for commands without a result to print (serve): no --json/--quiet. */
  noResultOptions?: boolean;
  run(values: Record<string, any>, positionals: string[]): Promise<number>;
}

const RESULT_OPTIONS: Record<string, OptionSpec> = {
  json: { type: 'boolean', help: 'print the result (or the failure) as one JSON object on stdout' },
  quiet: { type: 'boolean', short: 'q', help: 'print nothing on success (failures still get one line on stderr)' },
};

function optionsOf(cmd: Command): Record<string, OptionSpec> {
  return cmd.noResultOptions ? cmd.options : { ...cmd.options, ...RESULT_OPTIONS };
}

/** Prints a command's result: `text` normally, `json` with --json, nothing with --quiet. */
export function emit(values: Record<string, any>, text: string, json: Record<string, unknown>): void {
  if (values.json) process.stdout.write(JSON.stringify({ ok: true, ...json }) + '\n');
  else if (!values.quiet) process.stdout.write(text.endsWith('\n') ? text : text + '\n');
}

/** Reports a failed check: one line on stderr, plus a JSON object on stdout with --json. Returns `exit`. */
export function refuse(values: Record<string, any>, code: string, line: string, extra: Record<string, unknown> = {}, exit: 1 | 2 = 1): number {
  if (values.json) process.stdout.write(JSON.stringify({ ok: false, code, message: line, ...extra }) + '\n');
  process.stderr.write(`${code}: ${line}\n`);
  return exit;
}

export class UsageError extends VouchError {
  constructor(message: string) {
    super('usage', message);
  }
}

export function helpText(cmd: Command): string {
  const lines = [`usage: vouch ${cmd.name} ${cmd.usage}`, '', cmd.summary, '', 'options:'];
  const rows = Object.entries(optionsOf(cmd)).map(([name, o]) => [
    `  --${name}${o.type === 'string' ? ' ' + (o.value ?? name.toUpperCase().replace(/-/g, '_')) : ''}`,
    o.help + (o.required ? ' (required)' : ''),
  ]);
  rows.push(['  -h, --help', 'show this help']);
  const w = Math.max(...rows.map((r) => r[0]!.length)) + 2;
  for (const [a, b] of rows) lines.push(a!.padEnd(w) + b);
  if (cmd.details) lines.push('', cmd.details);
  return lines.join('\n') + '\n';
}

/** Runs a command with its argv; returns the exit status. */
export async function runCommand(cmd: Command, argv: string[]): Promise<number> {
  try {
    const config: ParseArgsConfig = {
      args: argv,
      strict: true,
      allowPositionals: (cmd.positionals?.length ?? 0) > 0,
      options: {
        help: { type: 'boolean', short: 'h' },
        ...Object.fromEntries(
          Object.entries(optionsOf(cmd)).map(([k, o]) => [
            k,
            {
              type: o.type,
              ...(o.multiple ? { multiple: true } : {}),
              ...(o.short ? { short: o.short } : {}),
            },
          ]),
        ),
      },
    };
    let parsed;
    try {
      parsed = parseArgs(config);
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      const unknown = err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /'(-{1,2}[^'\s]+)'/.exec(err.message)?.[1] : undefined;
      const near = unknown === undefined ? null : nearestOption(unknown, Object.keys(config.options!));
      const hint = near === null ? '' : `; did you mean --${near}?`;
      throw new UsageError(`${err.message.split('\n')[0]}${hint} (see vouch ${cmd.name} --help)`);
    }
    const values = parsed.values as Record<string, any>;
    if (values.help) {
      process.stdout.write(helpText(cmd));
      return 0;
    }
    for (const [k, o] of Object.entries(cmd.options)) {
      if (o.required && (values[k] === undefined || (Array.isArray(values[k]) && values[k].length === 0))) {
        throw new UsageError(`missing --${k} (see vouch ${cmd.name} --help)`);
      }
    }
    const specs = cmd.positionals ?? [];
    const pos = parsed.positionals;
    if (pos.length > specs.length) throw new UsageError(`unexpected argument ${JSON.stringify(pos[specs.length])} (see vouch ${cmd.name} --help)`);
    const missing = specs.slice(pos.length).find((s) => s.required);
    if (missing) throw new UsageError(`missing ${missing.name} (see vouch ${cmd.name} --help)`);
    jsonErrors = values.json === true;
    return await cmd.run(values, pos);
  } catch (e) {
    return reportError(cmd.name, e);
  }
}

let jsonErrors = false;

/** Levenshtein distance of two short strings. */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length]!;
}

/** The known name closest to `given` (an option as typed, dashes included, or a command), if close enough to be a typo. */
export function nearest(given: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let bestD = Infinity;
  for (const k of known) {
    const d = editDistance(given, k);
    if (d < bestD) [best, bestD] = [k, d];
  }
  // A typo: 1 edit in a name of up to 3 characters, 2 up to 6, 3 beyond (a swap is 2), or the start of one name.
  const limit = given.length <= 3 ? 1 : given.length <= 6 ? 2 : 3;
  if (best !== null && bestD <= limit) return best;
  const prefixed = known.filter((k) => given.length >= 3 && k.startsWith(given));
  return prefixed.length === 1 ? prefixed[0]! : null;
}

function nearestOption(given: string, known: readonly string[]): string | null {
  return nearest(given.replace(/^-+/, '').split('=')[0]!, known);
}

export function reportError(commandName: string, e: unknown): number {
  if (jsonErrors) {
    const code = isVouchError(e) ? e.code : 'internal_error';
    const message = isVouchError(e) ? e.message.split('\n')[0] : String((e as Error)?.message ?? e).split('\n')[0];
    process.stdout.write(JSON.stringify({ ok: false, code, message }) + '\n');
  }
  if (isVouchError(e)) {
    process.stderr.write(`vouch ${commandName}: ${e.message.split('\n')[0]}\n`);
    return EXIT_CODE[e.code];
  }
  const err = e as NodeJS.ErrnoException;
  process.stderr.write(`vouch ${commandName}: internal error: ${(err?.message ?? String(e)).split('\n')[0]}\n`);
  if (process.env.VOUCH_DEBUG) console.error(e);
  return 2;
}

/** A progress line on a terminal (stderr), nothing on a pipe. */
export function progressReporter(label: string): { update(done: number, total: number, what?: string): void; done(): void } {
  const tty = process.stderr.isTTY === true;
  let last = 0;
  const started = Date.now();
  return {
    update(done, total, what) {
      if (!tty) return;
      if (what !== undefined && what !== label) {
        label = what;
        last = 0;
      }
      const now = Date.now();
      if (now - last < 100 && done < total) return;
      last = now;
      const width = 30;
      const frac = total === 0 ? 1 : done / total;
      const filled = Math.round(frac * width);
      const rate = done / Math.max(0.001, (now - started) / 1000);
      process.stderr.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} ${Math.round(rate)}/s `);
    },
    done() {
      if (tty) process.stderr.write('\r\x1b[K');
    },
  };
}
