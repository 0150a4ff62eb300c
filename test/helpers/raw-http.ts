/**
 * One HTTP request to a test server exactly as given: the path sent as is
 * (no URL normalization), an optional Host, no agent (a connection of its
 * own), nothing decoded and no redirect followed — the status, headers and
 * bytes as the server sent them. Loopback servers only (the tests' own).
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';

export interface RawAnswer { status: number; headers: IncomingHttpHeaders; body: Buffer }

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
      host: u.hostname, port: u.port, path, method: opts.method ?? 'GET', agent: false,
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
