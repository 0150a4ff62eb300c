/**
 * Serves the chain explorer at `/`: the HTML page, its stylesheet, and its
 * script — `gateway/explorer/app.ts` with the pure `chain/` code and @noble,
 * bundled for the browser. Everything comes from the gateway itself (no
 * CDN); a strict Content-Security-Policy allows nothing else.
 *
 * Owns: the script, had once, on its first request, and kept in memory (the
 * page and stylesheet are read per request), from the directory `explorer/`
 * beside this code. The built code (dist/, `npm run build`) reads the bundle
 * the build wrote there, `dist/explorer/explorer.js` (beside copies of the
 * page and stylesheet); code run from sources (under tsx) bundles app.ts
 * with esbuild (a dev dependency), with the same options as tools/build.mjs.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { VouchError } from '../chain/errors.ts';
import type { GatewayContext } from './context.ts';
import { BUILT } from '../platform/worker-bundle.ts';

const dir = fileURLToPath(new URL('./explorer/', import.meta.url));
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}
let bundle: Promise<Asset> | null = null;

function asset(body: Buffer | string, type: string): Asset {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return { body: b, type, etag: `"${createHash('sha256').update(b).digest('hex').slice(0, 32)}"` };
}

/** app.ts bundled now (running from sources); tools/build.mjs uses the same options. */
async function buildBundle(): Promise<Asset> {
  const { build } = await import('esbuild');
  const out = await build({
    entryPoints: [`${dir}app.ts`],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    minify: true,
    write: false,
    legalComments: 'none',
    logLevel: 'silent',
  });
  return asset(Buffer.from(out.outputFiles[0]!.contents), 'text/javascript; charset=utf-8');
}

/** The bundle `npm run build` wrote (running from dist/). */
async function builtBundle(): Promise<Asset> {
  return asset(readFileSync(`${dir}explorer.js`), 'text/javascript; charset=utf-8');
}

const statics: Record<string, () => Promise<Asset>> = {
  '/': async () => asset(readFileSync(`${dir}index.html`), 'text/html; charset=utf-8'),
  '/explorer.css': async () => asset(readFileSync(`${dir}explorer.css`), 'text/css; charset=utf-8'),
  '/explorer.js': () =>
    (bundle ??= (BUILT ? builtBundle() : buildBundle()).catch((e) => {
      bundle = null;
      throw e;
    })),
};

export const EXPLORER_PATHS = Object.keys(statics);

export async function handleExplorer(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]!;
  const get = statics[path];
  if (!get) throw new VouchError('not_found', `no such path: ${path}`);
  let a: Asset;
  try {
    a = await get();
  } catch (e) {
    ctx.log.error('explorer bundle failed', { error: (e as Error).message });
    throw new VouchError('internal_error', 'the explorer could not be built');
  }
  const headers = {
    'content-type': a.type,
    'content-security-policy': CSP,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    etag: a.etag,
    'cache-control': 'no-cache',
  };
  if (req.headers['if-none-match'] === a.etag) {
    res.writeHead(304, headers).end();
    return;
  }
  res.writeHead(200, { ...headers, 'content-length': a.body.length });
  res.end(req.method === 'HEAD' ? undefined : a.body);
}
