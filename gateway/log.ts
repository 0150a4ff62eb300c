/**
 * Structured logging: one JSON line per notable event on stderr, with a
 * level. Never given secrets (the key and the submit token are never passed
 * to it).
 */
export type Level = 'debug' | 'info' | 'warn' | 'error';
const RANK: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function createLogger(minLevel: Level = (process.env.VOUCH_LOG_LEVEL as Level) ?? 'info', write: (line: string) => void = (l) => process.stderr.write(l)): Logger {
  const min = RANK[minLevel] ?? RANK.info;
  const emit = (level: Level) => (msg: string, fields: Record<string, unknown> = {}) => {
    if (RANK[level] < min) return;
    write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }) + '\n');
  };
  return { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
}
