/**
 * Structured logging: one JSON line per event on stderr, or pino-pretty's
 * lines on a terminal; level from `VOUCH_LOG_LEVEL` (default info), format
 * from `VOUCH_LOG_FORMAT`. Lines are made by pino, except the request line,
 * written by hand with the same fields and escaping.
 * Owns: the `Logger` interface, the request line's format, where lines go
 * (`log-sink.ts`).
 * Trusts: callers to pass no secrets (the redact paths are a second line).
 * Must hold: one line per call, never a secret, never a raw control
 * character, U+2028/9 or lone surrogate inside a line; warn and error lines
 * written through at once with every line before them; all written at exit;
 * a logging call never throws.
 */
import { createRequire } from 'node:module';
import pino, { type DestinationStream, type Logger as PinoLogger, type LoggerOptions } from 'pino';
import { isoNow, isoOf, stderrSink } from './log-sink.ts';
import { FAULT, injectFault } from '../test-fault.ts';

export type Level = 'debug' | 'info' | 'warn' | 'error';
type Threshold = Level | 'silent';

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  /** False when lines of `level` are dropped (callers may skip building fields). Optional: plain test loggers lack it. */
  enabled?(level: Level): boolean;
  /** The info line of one answered request (`logRequest` falls back to `info('request', ...)` without it). */
  request?(r: RequestRecord): void;
}

/** The fields of a request line, in the order they are written. */
export interface RequestRecord {
  method: string;
  /** Without the query string. */
  path: string;
  route: string;
  status: number;
  ms: number;
  bytes: number;
  remote: string | null;
  /** The decoded `url` query parameter; left out when null or absent. */
  url?: string | null;
  /** Present (true) when the answer did not finish. */
  aborted?: boolean;
  /** When the answer ended, ms since the epoch (`wallClock`); the line's `time` (else the clock is read). Not a field of the line. */
  time?: number;
}

/** Logs `r` as the `request` line at info, through `log.request` when the logger has it. */
export function logRequest(log: Logger, r: RequestRecord): void {
  if (FAULT !== null) injectFault('log', r.route);
  if (log.request !== undefined) log.request(r);
  else log.info('request', requestFields(r));
}

function requestFields(r: RequestRecord): Record<string, unknown> {
  const fields: Record<string, unknown> = { method: r.method, path: r.path, route: r.route, status: r.status, ms: r.ms, bytes: r.bytes, remote: r.remote };
  if (r.url != null) fields.url = r.url;
  if (r.aborted) fields.aborted = true;
  return fields;
}

/** Characters JSON may carry raw that some line readers split or mangle: U+2028, U+2029, lone surrogates. */
const UNSAFE_IN_LINE = /[\u2028\u2029]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const escapeUnit = (c: string) => `\\u${c.charCodeAt(0).toString(16)}`;

/** A JSON line (or string literal) with U+2028, U+2029 and lone surrogates escaped as \\uXXXX; the same JSON value. */
export function lineSafe(json: string): string {
  UNSAFE_IN_LINE.lastIndex = 0;
  return UNSAFE_IN_LINE.test(json) ? json.replace(UNSAFE_IN_LINE, escapeUnit) : json;
}

/** A JSON string literal of `s`, printable ASCII as is, anything else escaped as JSON.stringify does, plus `lineSafe`. */
export function jsonString(s: string): string {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || c > 0x7e) return lineSafe(JSON.stringify(s));
  }
  return `"${s}"`;
}

const jsonNumber = (n: number) => (Number.isFinite(n) ? String(n) : 'null');

/**
 * `jsonNumber` of a number of hundredths (the line's `ms`), written digit by
 * digit: what String() gives for such a number (the shortest decimal that
 * reads back as it, here at most two decimals), without its slower general
 * conversion. Anything else goes to `jsonNumber`.
 */
export function hundredthsNumber(n: number): string {
  const h = Math.round(n * 100);
  if (h / 100 !== n || !(h >= 0 && h < 1e15)) return jsonNumber(n);
  const i = Math.floor(h / 100);
  const f = h - i * 100;
  return f === 0 ? `${i}` : f % 10 === 0 ? `${i}.${f / 10}` : f < 10 ? `${i}.0${f}` : `${i}.${f}`;
}

/** JSON literals of the few strings every line repeats (methods, route labels, remote addresses), made once each. */
const literals = new Map<string, string>();
const LITERALS_MAX = 1024;

function literal(s: string): string {
  let j = literals.get(s);
  if (j === undefined) {
    j = jsonString(s);
    if (literals.size < LITERALS_MAX) literals.set(s, j);
  }
  return j;
}

/** The request line as pino would write it for `info(fields, 'request')` (same keys, same order), newline included. */
export function requestLine(r: RequestRecord): string {
  const route = literal(r.route);
  let line =
    '{"level":"info","time":"' +
    (r.time === undefined ? isoNow() : isoOf(r.time)) +
    '","method":' +
    literal(r.method) +
    ',"path":' +
    (r.path === r.route ? route : jsonString(r.path)) +
    ',"route":' +
    route +
    ',"status":' +
    jsonNumber(r.status) +
    ',"ms":' +
    hundredthsNumber(r.ms) +
    ',"bytes":' +
    jsonNumber(r.bytes) +
    ',"remote":' +
    (r.remote === null ? 'null' : literal(r.remote));
  if (r.url != null) line += ',"url":' + jsonString(r.url);
  if (r.aborted) line += ',"aborted":true';
  return line + ',"msg":"request"}\n';
}

const THRESHOLDS: readonly string[] = ['debug', 'info', 'warn', 'error', 'silent'];

/**
 * Field names whose values are replaced by `[redacted]` at the top level of
 * a line and under `headers` / `req.headers`. Explicit paths only: a
 * wildcard path (`*.x`) costs some 20 µs per line.
 */
const SECRET_KEYS = [
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'token',
  'submit_token',
  'submitToken',
  'private_key',
  'privateKey',
  'secret',
  'password',
];
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
    timestamp: () => `,"time":"${isoNow()}"`, // pino's isoTime, made once per millisecond
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
 * A logger at `minLevel` (default `VOUCH_LOG_LEVEL`, else info). With
 * `write`, every line (JSON, newline-terminated) goes to it synchronously
 * (tests); without, to stderr as described above.
 */
export function createLogger(minLevel: Level | 'silent' = envThreshold(), write?: (line: string) => void): Logger {
  const level: Threshold = THRESHOLDS.includes(minLevel) ? minLevel : 'info';
  let p: PinoLogger;
  /** Where hand-made lines go (null: pretty output, made by pino). */
  let out: ((line: string) => void) | null;
  /** Writes through what is buffered (after a warn or error line). */
  let urgent: () => void = () => {};
  if (write !== undefined) {
    p = pino(options(level, true), { write: (line: string) => write(lineSafe(line)) });
    out = write;
  } else {
    const format = (process.env.VOUCH_LOG_FORMAT ?? '').trim().toLowerCase();
    const pretty = format === 'pretty' || (format !== 'json' && process.stderr.isTTY === true);
    if (pretty) {
      p = pino(options(level, false), prettyStream());
      out = null;
    } else {
      const sink = stderrSink();
      p = pino(options(level, true), { write: (line: string) => sink.write(lineSafe(line)) });
      out = (line) => sink.write(line);
      urgent = () => sink.flush();
    }
  }
  // Logging never throws into its caller (a request's listener, a handler's error path): a line that cannot be made is lost.
  const emit = (l: Level) => (msg: string, fields?: Record<string, unknown>) => {
    try {
      if (fields === undefined) p[l](msg);
      else p[l](fields, msg);
      if (l === 'warn' || l === 'error') urgent();
    } catch {
      // dropped: the sink counts what it could not write; a line pino could not make is not counted anywhere
    }
  };
  const info = emit('info');
  const requests = p.isLevelEnabled('info');
  return {
    debug: emit('debug'),
    info,
    warn: emit('warn'),
    error: emit('error'),
    // The level is fixed when the logger is made: the answer for info (asked once per request) is kept.
    enabled: (l) => (l === 'info' ? requests : p.isLevelEnabled(l)),
    request: (r) => {
      if (!requests) return;
      if (out !== null) out(requestLine(r));
      else info('request', requestFields(r));
    },
  };
}
