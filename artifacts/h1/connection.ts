/**
 * One origin connection: a net or tls socket read with `onread` into a
 * buffer this module chooses (a scratch buffer per connection, or the free
 * part of the caller's buffer, so a declared-length body goes from the
 * kernel into the caller's memory with no copy).
 * Owns: where the next read lands (`next`), the socket's end and errors
 * handed to its exchange, destroying it.
 * Trusts: `exchange.ts` to set `next` only to memory it may write; `pool.ts`
 * to keep it only while `release`d.
 * Must hold: an idle connection that says anything is destroyed; a
 * destroyed connection reads into nothing but its scratch buffer.
 */
import type net from 'node:net';
import { VouchError } from '../../chain/errors.ts';

export const SCRATCH_BYTES = 64 * 1024;

/** The failure of a connection that ended before its exchange was complete. */
export function connectionClosed(why = 'the connection closed before the response was complete'): VouchError {
  return new VouchError('origin_error', why);
}

/** What a connection needs from the pool that made it. */
export interface ConnOwner {
  /** The exchange completed and the connection may carry another. */
  release(conn: Conn): void;
  /** The connection is gone (closed, failed or destroyed). */
  forget(conn: Conn): void;
}

/** The exchange a connection carries, as the connection sees it. */
export interface ConnReader {
  /** The onread callback; false pauses the socket. */
  read(n: number, buf: Uint8Array): boolean;
  /** The socket ended, closed or failed. */
  eof(e: Error | null): void;
}

/** One socket and the exchange (if any) it is carrying. */
export class Conn {
  socket!: net.Socket;
  readonly scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
  /** Where the next read lands: the scratch buffer, or the rest of a direct receive's buffer. */
  next: Uint8Array = this.scratch;
  exchange: ConnReader | null = null;
  exchanges = 0;
  dead = false;
  idleTimer: NodeJS.Timeout | null = null;
  /** The origin's keep-alive hint (0: none). */
  idleMs = 0;

  constructor(
    readonly key: string,
    readonly owner: ConnOwner,
  ) {}

  /** The `onread` options of the socket. */
  readOptions() {
    return {
      buffer: () => this.next,
      callback: (n: number, buf: Uint8Array): boolean => {
        if (this.exchange === null) {
          this.destroy(); // an idle connection must say nothing
          return false;
        }
        return this.exchange.read(n, buf);
      },
    };
  }

  attach(socket: net.Socket): void {
    this.socket = socket;
    socket.on('error', (e) => this.gone(e));
    socket.on('end', () => this.gone(null));
    socket.on('close', () => this.gone(null));
  }

  private gone(e: Error | null): void {
    const ex = this.exchange;
    this.dead = true;
    this.owner.forget(this);
    if (ex !== null) ex.eof(e);
  }

  destroy(e?: Error): void {
    this.dead = true;
    this.next = this.scratch;
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.owner.forget(this);
    this.socket.destroy(e);
  }
}
