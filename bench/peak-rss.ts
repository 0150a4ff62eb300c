/**
 * The peak RSS of this process, for bench children that report their own:
 * VmHWM from /proc/self/status (Linux), not `resourceUsage().maxRSS`, which
 * Linux carries over an exec from the forked parent. Elsewhere, maxRSS.
 */
import { readFileSync } from 'node:fs';

export function peakRssMiB(): number {
  try {
    const hwm = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    if (hwm) return Number(hwm[1]) / 1024;
  } catch {
    /* not Linux */
  }
  return process.resourceUsage().maxRSS / 1024;
}
