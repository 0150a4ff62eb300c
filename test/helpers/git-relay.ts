/**
 * The parts of the hostile git remotes in test/hostile/ (hostile-remote,
 * clone-proxy): a loopback server whose sockets are tracked so `stop()`
 * ends them, and the relay of a request to the real git server behind it.
 * Owns: nothing past the server it starts.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface TrackedServer {
  server: Server;
  port: number;
  /** Ends every open socket and closes the server. */
  stop(): Promise<void>;
}

/** A server on 127.0.0.1, port 0, answering with `handle`. */
export async function startTracked(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<TrackedServer> {
  const server = createServer();
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('request', handle);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    server,
    port: (server.address() as AddressInfo).port,
    stop: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** Forwards `req` to the git server on `port` and its answer back; `body` is the request's bytes when already read, else they are piped. */
export function relayToGit(port: number, req: IncomingMessage, res: ServerResponse, body?: Buffer): void {
  const up = httpRequest({ host: '127.0.0.1', port, path: req.url, method: req.method, headers: req.headers }, (r) => {
    res.writeHead(r.statusCode ?? 502, r.headers);
    r.pipe(res);
  });
  up.on('error', () => res.destroy());
  if (body === undefined) req.pipe(up);
  else up.end(body);
}
