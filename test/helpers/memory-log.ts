/**
 * A gateway Logger (gateway/observability/logger.ts) that keeps every call in memory, for
 * tests that check what a component logged (level, message, fields).
 */
import type { Logger } from '../../gateway/observability/logger.ts';

export interface LogLine {
  level: string;
  msg: string;
  fields: Record<string, unknown>;
}

export function memoryLog(): Logger & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at =
    (level: string) =>
    (msg: string, fields: Record<string, unknown> = {}) => {
      lines.push({ level, msg, fields });
    };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}
