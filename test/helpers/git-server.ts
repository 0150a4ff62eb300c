/**
 * A real git smart-HTTP server for tests: the git CLI's `git http-backend`
 * behind a small Node CGI bridge on 127.0.0.1. Serves every repository under
 * `root` (clone, fetch, and push: http.receivepack is enabled). It can be
 * taken down (connections refused with 503 and dropped) and brought back.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export class GitServer {
  /** Requests served, by `<method> <path>` without the query. */
  readonly requests: string[] = [];
  /** While true, every request gets 503 and its connection is closed. */
  down = false;
  /** When set, each request served is added here with its start and end (performance.now(), ms): for tracing a bench. */
  timeline: { request: string; start: number; end: number; lastByte: number }[] | null = null;
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly root: string,
    readonly port: number,
  ) {}

  static async start(root: string): Promise<GitServer> {
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const gs = new GitServer(server, root, (server.address() as AddressInfo).port);
    server.on('connection', (s: Socket) => {
      gs.sockets.add(s);
      s.on('close', () => gs.sockets.delete(s));
    });
    server.on('request', (req, res) => gs.handle(req, res));
    return gs;
  }

  /** Smart-HTTP URL of `<root>/<name>` (a bare repository). */
  url(name: string): string {
    return `http://127.0.0.1:${this.port}/${name}`;
  }

  /** Creates a bare repository `<root>/<name>` that accepts pushes. */
  initBare(name: string): string {
    const dir = `${this.root}/${name}`;
    const r = spawnSync('git', ['init', '-q', '--bare', '-b', 'main', dir], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`git init --bare failed: ${r.stderr}`);
    spawnSync('git', ['-C', dir, 'config', 'http.receivepack', 'true']);
    return dir;
  }

  /** Drops every open connection (e.g. after `down = true`). */
  dropConnections(): void {
    for (const s of this.sockets) s.destroy();
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const u = new URL(req.url ?? '/', 'http://x');
    this.requests.push(`${req.method} ${u.pathname}`);
    let timed: { lastByte: number } | null = null;
    if (this.timeline !== null) {
      const entry = { request: `${req.method} ${u.pathname}${u.search}`, start: performance.now(), end: Number.NaN, lastByte: Number.NaN };
      timed = entry;
      this.timeline.push(entry);
      res.on('close', () => {
        entry.end = performance.now();
      });
    }
    if (this.down) {
      res.writeHead(503, { connection: 'close' }).end('down');
      req.socket.destroy();
      return;
    }
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      GIT_PROJECT_ROOT: this.root,
      GIT_HTTP_EXPORT_ALL: '1',
      GIT_CONFIG_NOSYSTEM: '1',
      HOME: this.root,
      PATH_INFO: decodeURIComponent(u.pathname),
      QUERY_STRING: u.search.slice(1),
      REQUEST_METHOD: req.method ?? 'GET',
      CONTENT_TYPE: req.headers['content-type'] ?? '',
      REMOTE_ADDR: '127.0.0.1',
      REMOTE_USER: 'test',
      SERVER_PROTOCOL: 'HTTP/1.1',
      GIT_HTTP_MAX_REQUEST_BUFFER: '100M',
    };
    if (req.headers['content-length']) env.CONTENT_LENGTH = req.headers['content-length'];
    if (req.headers['content-encoding']) env.HTTP_CONTENT_ENCODING = req.headers['content-encoding'];
    if (req.headers['git-protocol']) env.GIT_PROTOCOL = String(req.headers['git-protocol']);
    const cgi = spawn('git', ['http-backend'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    req.pipe(cgi.stdin);
    cgi.stdin.on('error', () => {});
    let head = Buffer.alloc(0);
    let headersDone = false;
    let stderr = '';
    cgi.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    cgi.stdout.on('data', (chunk: Buffer) => {
      if (timed !== null) timed.lastByte = performance.now();
      if (headersDone) {
        res.write(chunk);
        return;
      }
      head = Buffer.concat([head, chunk]);
      let sep = head.indexOf('\r\n\r\n');
      let sepLen = 4;
      if (sep === -1) {
        sep = head.indexOf('\n\n');
        sepLen = 2;
      }
      if (sep === -1) return;
      headersDone = true;
      let status = 200;
      const headers: Record<string, string> = {};
      for (const line of head.subarray(0, sep).toString('latin1').split(/\r?\n/)) {
        const i = line.indexOf(':');
        if (i <= 0) continue;
        const k = line.slice(0, i).trim();
        const v = line.slice(i + 1).trim();
        if (k.toLowerCase() === 'status') status = Number(v.split(' ')[0]);
        else headers[k] = v;
      }
      res.writeHead(status, headers);
      res.write(head.subarray(sep + sepLen));
    });
    cgi.on('close', (code) => {
      if (!headersDone) {
        res.writeHead(500).end(`git http-backend failed (${code}): ${stderr}`);
        return;
      }
      res.end();
    });
    // The client went away before the answer was complete: stop the backend.
    res.on('close', () => {
      if (!res.writableFinished) cgi.kill('SIGKILL');
    });
  }

  async stop(): Promise<void> {
    this.dropConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
