/**
 * Preloaded by test/run.ts after tsx: gives the test file the TMPDIR of its own
 * (VOUCH_TEST_TMPDIR) once tsx has fixed its transform cache under the shared
 * one, so parallel files never meet in a temp folder yet compile each module
 * once; at exit writes the file's CPU seconds (its own and its reaped children's,
 * from /proc/self/stat) to VOUCH_TEST_CPU_FILE, for the runner's report.
 */
import { readFileSync, writeFileSync } from 'node:fs';

if (process.env.VOUCH_TEST_TMPDIR) process.env.TMPDIR = process.env.VOUCH_TEST_TMPDIR;
const cpuFile = process.env.VOUCH_TEST_CPU_FILE;
if (cpuFile) {
  process.on('exit', () => {
    try {
      // Fields after the command's closing parenthesis: utime, stime, cutime, cstime are the 12th to 15th.
      const stat = readFileSync('/proc/self/stat', 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ticks = Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
      writeFileSync(cpuFile, String(ticks / 100)); // USER_HZ is 100 on Linux
    } catch {
      /* not Linux: no figure */
    }
  });
}
