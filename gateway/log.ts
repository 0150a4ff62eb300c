/**
 * Structured logging on pino: one JSON line per event on stderr
 * (`{"level":"info","time":"<ISO>","msg":...,<fields>}`), or pino-pretty's
 * readable lines when stderr is a terminal. The level comes from
 * `VOUCH_LOG_LEVEL` (debug, info, warn, error, silent; default info); the
 * format from `VOUCH_LOG_FORMAT` (json or pretty; default: pretty on a
 * terminal, json otherwise).
 *
 * Owns: the `Logger` interface every module logs through, and where lines go.
 * Trusts: callers to pass no secrets (the key and the submit token are never
 * given to it); the redact paths below are a second line of defence only.
 * Must hold: one line per call, never a secret; info and debug lines go
 * through an asynchronous buffer (sonic-boom) so logging does not block the
 * hot path, flushed synchronously when the process exits; warn and error
 * lines, and every line of `write` (tests), are written synchronously.
 */
import { createRequire } from 'node:module';
import pino, { type DestinationStream, type Logger as PinoLogger, type LoggerOptions } from 'pino';

export type Level = 'debug' | 'info' | 'warn' | 'error';
type Threshold = Level | 'silent';

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  /** False when lines of `level` are dropped (callers may skip building fields). Optional: plain test loggers lack it. */
  enabled?(level: Level): boolean;
}

const THRESHOLDS: readonly string[] = ['debug', 'info', 'warn', 'error', 'silent'];

/**
 * Field names whose values are replaced by `[redacted]` at the top level of
 * a line and under `headers` / `req.headers`. Explicit paths only: a
 * wildcard path (`*.x`) costs some 20 µs per line.
 */
const SECRET_KEYS = ['authorization', 'proxy-authorization', 'cookie', 'set-cookie', 'token', 'submit_token', 'submitToken', 'private_key', 'privateKey', 'secret', 'password'];
export const REDACT_PATHS = ['', 'headers', 'req.headers'].flatMap((at) => SECRET_KEYS.map((k) => `${at}["${k}"]`));

function envThreshold(): Threshold {
  const v = (process.env.VOUCH_LOG_LEVEL ?? '').trim().toLowerCase();
  return THRESHOLDS.includes(v) ? (v as Threshold) : 'info';
}

function options(level: Threshold, labels: boolean): LoggerOptions {
  return {
    level,
    base: null, // no pid/hostname on every line
    messageKey: 'msg',
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    // JSON lines carry the level's name ("info"), as before pino; pino-pretty wants the numbers.
    ...(labels ? { formatters: { level: (label: string) => ({ level: label }) } } : {}),
  };
}

function prettyStream(): DestinationStream {
  // Loaded only for a terminal: the JSON path never pays for it.
  const require = createRequire(import.meta.url);
  const pretty = require('pino-pretty') as (o: Record<string, unknown>) => DestinationStream;
  return pretty({ destination: 2, sync: true, colorize: true, singleLine: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' });
}

/**
 * stderr for JSON lines: debug and info lines (one per request) through an
 * asynchronous buffer, so the hot path never waits for the pipe; warn and
 * error lines written at once, so they are on stderr before the answer that
 * follows them and survive a crash. (An info line may therefore appear after
 * a warn line logged just after it; `time` tells the order.)
 */
function jsonStreams(): DestinationStream {
  // A stalled stderr (a full pipe) drops buffered info lines past this instead of growing the heap.
  const BUFFER_LIMIT = 16 * 1024 * 1024;
  return pino.multistream([
    { level: 'debug', stream: pino.destination({ dest: 2, sync: false, maxLength: BUFFER_LIMIT }) },
    { level: 'warn', stream: pino.destination({ dest: 2, sync: true }) },
  ], { dedupe: true });
}

/**
 * A logger at `minLevel` (default `VOUCH_LOG_LEVEL`, else info). With
 * `write`, every line (JSON, newline-terminated) goes to it synchronously
 * (tests); without, to stderr as described above.
 */
export function createLogger(minLevel: Level | 'silent' = envThreshold(), write?: (line: string) => void): Logger {
  const level: Threshold = THRESHOLDS.includes(minLevel) ? minLevel : 'info';
  let p: PinoLogger;
  if (write !== undefined) {
    p = pino(options(level, true), { write });
  } else {
    const format = (process.env.VOUCH_LOG_FORMAT ?? '').trim().toLowerCase();
    const pretty = format === 'pretty' || (format !== 'json' && process.stderr.isTTY === true);
    p = pretty ? pino(options(level, false), prettyStream()) : pino(options(level, true), jsonStreams());
  }
  const emit = (l: Level) => (msg: string, fields?: Record<string, unknown>) => {
    if (fields === undefined) p[l](msg);
    else p[l](fields, msg);
  };
  return {
    debug: emit('debug'),
    info: emit('info'),
    warn: emit('warn'),
    error: emit('error'),
    enabled: (l) => p.isLevelEnabled(l),
  };
}
