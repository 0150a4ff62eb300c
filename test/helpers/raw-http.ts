/**
 * One HTTP request to a test server exactly as given: the path sent as is
 * (no URL normalization), an optional Host, no agent (a connection of its
 * own), nothing decoded and no redirect followed — the status, headers and
 * bytes as the server sent them. Loopback servers only (the tests' own).
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';

export interface RawAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface RawOptions {
  method?: string;
  /** The Host header to send (default: node's, from `base`). */
  host?: string;
  headers?: Record<string, string>;
  body?: string;
  /** Fail when no whole answer came in this long (default: no limit). */
  timeoutMs?: number;
}

export function rawRequest(base: string, path: string, opts: RawOptions = {}): Promise<RawAnswer> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: u.hostname,
      port: u.port,
      path,
      method: opts.method ?? 'GET',
      agent: false,
      headers: { ...(opts.host !== undefined ? { host: opts.host } : {}), ...opts.headers },
    });
    if (opts.timeoutMs !== undefined) req.setTimeout(opts.timeoutMs, () => req.destroy(new Error(`no answer to ${path} in ${opts.timeoutMs} ms`)));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** One GET (or HEAD) on a connection of its own; the head's size in bytes as it came off the socket, and the headers. */
export function rawHead(
  base: string,
  path: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<{ bytes: number; status: number; headers: Map<string, string> }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname);
    let got = Buffer.alloc(0);
    s.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d]);
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return;
      s.destroy();
      const lines = got.subarray(0, end).toString('latin1').split('\r\n');
      const map = new Map<string, string>();
      for (const l of lines.slice(1)) map.set(l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim());
      resolve({ bytes: end + 4, status: Number(lines[0]!.split(' ')[1]), headers: map });
    });
    s.on('error', reject);
    s.write(
      `${method} ${path} HTTP/1.1\r\nHost: ${u.host}\r\n${Object.entries(headers)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('')}Connection: close\r\n\r\n`,
    );
  });
}
