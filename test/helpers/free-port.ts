/**
 * Loopback ports for tests: one free a moment ago, for a server that cannot
 * listen on port 0 and say which it got (HAProxy); and one nothing listens
 * on, that stays so while tests run in parallel.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

async function bindAndRelease(port: number): Promise<number | null> {
  const s = createServer();
  const ok = await new Promise<boolean>((r) => {
    s.once('error', () => r(false));
    s.listen(port, '127.0.0.1', () => r(true));
  });
  if (!ok) return null;
  const bound = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return bound;
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export async function freePort(): Promise<number> {
  const port = await bindAndRelease(0);
  if (port === null) throw new Error('freePort: cannot listen on 127.0.0.1');
  return port;
}

/**
 * A TCP port on 127.0.0.1 that nothing listens on: below the kernel's
 * ephemeral range, so no `listen(0)` or outgoing connection of a test
 * running beside this one is given it (a port of that range, released, can
 * be taken again at once), and found free by binding it.
 */
export async function closedPort(): Promise<number> {
  let low = 32768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || low;
  } catch {
    // not Linux: the IANA range's start is below every common default
  }
  const top = Math.min(low, 32768);
  const from = Math.max(1024, top - 12000);
  for (let i = 0; i < 50 && from < top; i++) {
    const port = from + Math.floor(Math.random() * (top - from));
    if ((await bindAndRelease(port)) !== null) return port;
  }
  throw new Error(`closedPort: no free port below ${low}`);
}
