/**
 * Where the gateway's JSON log lines go: a batch buffer in front of a file
 * descriptor (stderr), written when it fills, at most `flushMs` after a
 * line, at once for warn and error, and at exit; no thread-pool hop.
 * Owns: the buffer, the order of lines, what happens when the reader lags
 * (a bounded backlog, then dropped and counted lines), and the timestamps
 * (`isoNow`, `isoOf`, `wallClock`).
 * Trusts: callers to hand whole lines ending in "\n".
 * Must hold: a line handed in before the process exits is written (only
 * SIGKILL or an OOM abort loses the last `flushMs`); an urgent line is
 * written before `write` returns; logging never throws into its caller and
 * never blocks the gateway or grows its heap without bound.
 */
import { writeSync } from 'node:fs';

export interface LineSinkOptions {
  /** Characters (bytes, for ASCII) batched before a write (default 64 Ki). */
  bufferBytes?: number;
  /** The longest a line waits in the buffer, in ms (default 100). */
  flushMs?: number;
  /** Bytes kept while the descriptor refuses writes before lines are dropped (default 16 MiB). */
  backlogBytes?: number;
  /** How long an urgent write or the exit flush waits for a stalled reader, in ms (default 5,000). */
  urgentWaitMs?: number;
  /** write(2) (tests inject one); returns the bytes written or throws like `fs.writeSync`. */
  write?: (fd: number, buf: Buffer, offset: number, length: number) => number;
}

const pause = new Int32Array(new SharedArrayBuffer(4));
const sleep = (ms: number) => Atomics.wait(pause, 0, 0, ms);

export class LineSink {
  /** Lines dropped because the backlog was full (or the descriptor failed). */
  dropped = 0;
  /** `dropped` when the last notice of dropped lines was written. */
  private reported = 0;
  /** Lines not written yet, and their length in UTF-16 units (bytes, for ASCII lines). */
  private lines: string[] = [];
  private chars = 0;
  private readonly bufferChars: number;
  /** Bytes the descriptor refused for now, oldest first. */
  private backlog: Buffer[] = [];
  private backlogLen = 0;
  private timer: NodeJS.Timeout | null = null;
  private readonly flushMs: number;
  private readonly backlogLimit: number;
  private readonly urgentWaitMs: number;
  private readonly writeFd: NonNullable<LineSinkOptions['write']>;
  private readonly onTimer = () => {
    this.timer = null;
    this.flush(false);
  };

  constructor(
    private readonly fd: number,
    o: LineSinkOptions = {},
  ) {
    this.bufferChars = o.bufferBytes ?? 64 * 1024;
    this.flushMs = o.flushMs ?? 100;
    this.backlogLimit = o.backlogBytes ?? 16 * 1024 * 1024;
    this.urgentWaitMs = o.urgentWaitMs ?? 5_000;
    this.writeFd = o.write ?? writeSync;
  }

  /** Appends one line (ending in "\n"); `urgent`: written through before returning. */
  write(line: string, urgent = false): void {
    if (this.backlogLen > this.backlogLimit && !urgent) {
      this.dropped++;
      return;
    }
    try {
      // Kept as strings, encoded once per batch: a Buffer.write per line costs more than the line itself.
      this.lines.push(line);
      this.chars += line.length;
      if (urgent) this.flush(true);
      else if (this.chars >= this.bufferChars) this.flush(false);
      else this.arm();
    } catch {
      // What was buffered could not be encoded or written (writeSome catches the descriptor's errors): dropped, never thrown.
      this.dropped += this.lines.length;
      this.lines = [];
      this.chars = 0;
    }
  }

  /** Makes sure a flush comes within `flushMs` (unref'd: it never keeps the process alive). */
  private arm(): void {
    if (this.timer !== null) return;
    this.timer = setTimeout(this.onTimer, this.flushMs);
    this.timer.unref();
  }

  /** Writes what is buffered; `wait`: waits (up to `urgentWaitMs`) for a reader that refuses more. */
  flush(wait = true): void {
    if (this.lines.length > 0) {
      const text = this.lines.length === 1 ? this.lines[0]! : this.lines.join('');
      this.lines = [];
      this.chars = 0;
      this.send(Buffer.from(text, 'utf8'), wait);
    } else if (this.backlogLen > 0) this.send(null, wait);
    if (this.backlogLen > 0) this.arm(); // the reader refused some: try again, even if no line comes
  }

  /** Writes the backlog, then `chunk`; what cannot be written now joins the backlog (copied). */
  private send(chunk: Buffer | null, wait: boolean): void {
    const deadline = wait ? performance.now() + this.urgentWaitMs : 0;
    while (this.backlog.length > 0) {
      const head = this.backlog[0]!;
      const n = this.writeSome(head, deadline);
      this.backlogLen -= n;
      if (n < head.length) {
        this.backlog[0] = head.subarray(n);
        if (chunk !== null) this.keep(chunk);
        return;
      }
      this.backlog.shift();
    }
    if (chunk !== null) {
      const n = this.writeSome(chunk, deadline);
      if (n < chunk.length) return this.keep(chunk.subarray(n));
    }
    if (this.dropped > this.reported) {
      // The reader is back: say how many lines it missed (once per stall).
      const line = `{"level":"warn","time":"${isoNow()}","dropped":${this.dropped - this.reported},"msg":"log lines dropped: the log's reader did not keep up"}\n`;
      this.reported = this.dropped;
      const b = Buffer.from(line, 'utf8');
      const n = this.writeSome(b, deadline);
      if (n < b.length) this.keep(b.subarray(n));
    }
  }

  private keep(rest: Buffer): void {
    this.backlog.push(rest); // every chunk is a Buffer of its own: nothing reuses it
    this.backlogLen += rest.length;
  }

  /** Writes as much of `b` as the descriptor takes (retrying on EAGAIN until `deadline`); returns the bytes written. */
  private writeSome(b: Buffer, deadline: number): number {
    let off = 0;
    while (off < b.length) {
      try {
        off += this.writeFd(this.fd, b, off, b.length - off);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'EAGAIN' || code === 'EWOULDBLOCK') {
          if (performance.now() >= deadline) return off;
          sleep(2);
          continue;
        }
        // Nobody can read these lines (EPIPE, EBADF, ENOSPC...): drop them, never fail the request that logged.
        this.dropped += countLines(b, off);
        return b.length;
      }
    }
    return off;
  }
}

function countLines(b: Buffer, from: number): number {
  let n = 0;
  for (let i = b.indexOf(10, from); i !== -1; i = b.indexOf(10, i + 1)) n++;
  return n;
}

let lastMs = -1;
let lastIso = '';
let lastSecond = NaN;
/** `YYYY-MM-DDTHH:MM:SS.` of `lastSecond`. */
let secondPrefix = '';
const MILLIS = Array.from({ length: 1000 }, (_, i) => `${String(i).padStart(3, '0')}Z`);

/** `new Date(ms).toISOString()` for a time in years 0 to 9999, made from its second's prefix (the Date formatted once a second). */
export function isoOf(ms: number): string {
  const second = Math.floor(ms / 1000);
  if (second !== lastSecond) {
    const iso = new Date(second * 1000).toISOString();
    if (iso.length !== 24) return new Date(ms).toISOString(); // beyond year 9999 or before year 0
    lastSecond = second;
    secondPrefix = iso.slice(0, 20);
  }
  return secondPrefix + MILLIS[ms - second * 1000]!;
}

/** `new Date().toISOString()`, made once per millisecond. */
export function isoNow(): string {
  const now = Date.now();
  if (now !== lastMs) {
    lastMs = now;
    lastIso = isoOf(now);
  }
  return lastIso;
}

/** `Date.now() - performance.now()` when last read, and the `performance.now()` it was read at. */
let clockOffset = 0;
let offsetAt = -Infinity;

/**
 * `Date.now()` at `perfNow` (a `performance.now()` the caller has read
 * anyway): the wall clock is read again at most once a second, so a
 * request's line costs one clock read less (a clock read is some 0.25 us
 * on a VM). A step of the wall clock shows in these times within a second;
 * the time may differ from `Date.now()` by the rounding of a millisecond.
 */
export function wallClock(perfNow: number): number {
  if (!(perfNow - offsetAt < 1000 && perfNow >= offsetAt)) {
    offsetAt = perfNow;
    clockOffset = Date.now() - perfNow;
  }
  return Math.floor(perfNow + clockOffset);
}

let stderr: LineSink | null = null;

/** The process's one sink on stderr (fd 2), flushed when the process exits. */
export function stderrSink(): LineSink {
  if (stderr === null) {
    const sink = new LineSink(2);
    process.on('exit', () => sink.flush(true));
    // Before Node prints an uncaught exception (then exits): the lines logged before it come first.
    process.on('uncaughtExceptionMonitor', () => sink.flush(true));
    stderr = sink;
  }
  return stderr;
}
