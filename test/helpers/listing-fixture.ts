/**
 * A real authority gateway with npm, PyPI and Go routes (deny) over one
 * origin that lists three versions of one package each (npm `leftpad`,
 * PyPI `demo`, Go `example.com/demo`), and the log's history in stages the
 * listing tests replay: `endorse(['1.0.0', '1.1.0'])`, `revoke('1.1.0')`,
 * `endorse(['2.0.0'])` (Go: v1.2.0 for 2.0.0, the path has no /v2).
 * Used by test/integration/listing-proofs and test/hostile/listing-hostile.
 */
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKeyFile } from '../../platform/key-file.ts';
import { OriginServer } from './origin-server.ts';
import { startGatewayProcess, submitEntry, writeConfig, type GatewayProcess } from './gateway-process.ts';

export const VERSIONS = ['1.0.0', '1.1.0', '2.0.0'] as const;
/** The Go version standing for a semver of VERSIONS. */
export const goVersion = (v: string) => (v === '2.0.0' ? 'v1.2.0' : `v${v}`);
export const GO_MODULE = 'example.com/demo';

export class ListingFixture {
  readonly work = mkdtempSync(join(tmpdir(), 'vouch-listing-'));
  origin!: OriginServer;
  gw!: GatewayProcess;
  pub = '';
  readonly token = `listing-${'t'.repeat(40)}`;

  /** `authority`: more keys of the authority section (e.g. `rollover_days`). */
  static async start(authority: Record<string, unknown> = {}): Promise<ListingFixture> {
    const f = new ListingFixture();
    const keyFile = join(f.work, 'authority.pem');
    const tokenFile = join(f.work, 'submit.token');
    f.pub = createKeyFile(keyFile).publicKeyB64;
    writeFileSync(tokenFile, `${f.token}\n`, { mode: 0o600 });
    f.origin = await OriginServer.start();
    f.serveOrigin();
    const dir = join(f.work, 'gw');
    f.gw = await startGatewayProcess([
      '--config',
      writeConfig(dir, {
        listen: { host: '127.0.0.1', port: 0 },
        chain: { dir: join(dir, 'chain'), origin: 'log.listing.test' },
        authority: { key_file: keyFile, signer: 'test-authority', submit_token_file: tokenFile, ...authority },
        origin: { allow_private: true, timeout: 5 },
        proxy: {
          routes: [
            { prefix: '/npm/', kind: 'npm', origin: f.origin.url('/npm/'), unendorsed: 'deny', metadata_ttl: 0 },
            { prefix: '/pypi/', kind: 'pypi', origin: f.origin.url('/pypi/'), unendorsed: 'deny', metadata_ttl: 0 },
            { prefix: '/go/', kind: 'goproxy', origin: f.origin.url('/go/'), unendorsed: 'deny', metadata_ttl: 0 },
          ],
        },
      }),
    ]);
    return f;
  }

  tarball = (v: string) => this.origin.url(`/npm/leftpad/-/leftpad-${v}.tgz`);
  wheel = (v: string) => this.origin.url(`/pypi/files/demo-${v}-py3-none-any.whl`);
  zip = (v: string) => this.origin.url(`/go/${GO_MODULE}/@v/${goVersion(v)}.zip`);

  private serveOrigin(): void {
    const o = this.origin;
    const versions: Record<string, unknown> = {};
    for (const v of VERSIONS) {
      o.route(`/npm/leftpad/-/leftpad-${v}.tgz`, { body: `leftpad ${v}\n` });
      o.route(`/pypi/files/demo-${v}-py3-none-any.whl`, { body: `demo ${v}\n` });
      o.route(`/go/${GO_MODULE}/@v/${goVersion(v)}.zip`, { body: `zip ${v}\n` });
      o.route(`/go/${GO_MODULE}/@v/${goVersion(v)}.info`, {
        body: JSON.stringify({ Version: goVersion(v), Time: '2026-01-01T00:00:00Z' }),
        contentType: 'application/json',
      });
      versions[v] = { name: 'leftpad', version: v, dist: { tarball: this.tarball(v) } };
    }
    o.route('/npm/leftpad', { body: JSON.stringify({ name: 'leftpad', 'dist-tags': { latest: '2.0.0' }, versions }), contentType: 'application/json' });
    const links = VERSIONS.map((v) => `<a href="${this.wheel(v)}">demo-${v}-py3-none-any.whl</a><br>`).join('\n');
    o.route('/pypi/simple/demo/', { body: `<!DOCTYPE html><html><body>\n${links}\n</body></html>\n`, contentType: 'text/html' });
    o.route(`/go/${GO_MODULE}/@v/list`, { body: VERSIONS.map((v) => `${goVersion(v)}\n`).join(''), contentType: 'text/plain' });
  }

  /** Endorses each version in all three ecosystems, one block per version and ecosystem. */
  async endorse(vs: readonly string[]): Promise<void> {
    for (const v of vs) {
      await submitEntry(this.gw.url, this.token, { url: this.tarball(v), name: 'npm/leftpad', semver: v, license: 'MIT' });
      await submitEntry(this.gw.url, this.token, { url: this.wheel(v), name: 'pypi/demo', semver: v, license: 'MIT' });
      await submitEntry(this.gw.url, this.token, { url: this.zip(v), name: 'go/example.com+demo', semver: goVersion(v).slice(1), license: 'MIT' });
    }
  }

  /** Revokes a version in all three ecosystems. */
  async revoke(v: string): Promise<void> {
    for (const [url, semver] of [
      [this.tarball(v), v],
      [this.wheel(v), v],
      [this.zip(v), goVersion(v).slice(1)],
    ] as const) {
      const r = await fetch(`${this.gw.url}/v1/revoke`, {
        method: 'POST',
        headers: { authorization: `Bearer ${this.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url, semver }),
      });
      assert.is(r.status, 201, await r.text());
    }
  }

  async close(): Promise<void> {
    await this.gw?.stop();
    await this.origin?.close();
    rmSync(this.work, { recursive: true, force: true });
  }
}

/** The three listings, as paths on a gateway, with the Accept each asks with. */
export const LISTINGS = [
  { eco: 'npm', pkg: 'leftpad', path: '/npm/leftpad', accept: 'application/vnd.npm.install-v1+json', form: 'abbreviated' },
  { eco: 'npm', pkg: 'leftpad', path: '/npm/leftpad', accept: 'application/json', form: 'full' },
  { eco: 'pypi', pkg: 'demo', path: '/pypi/simple/demo/', accept: 'application/vnd.pypi.simple.v1+json', form: 'json' },
  { eco: 'pypi', pkg: 'demo', path: '/pypi/simple/demo/', accept: 'application/vnd.pypi.simple.v1+html', form: 'html' },
  { eco: 'go', pkg: GO_MODULE, path: `/go/${GO_MODULE}/@v/list`, accept: '*/*', form: 'text' },
] as const;

/** Go `@latest` (one version, the newest live one), checked like a listing. */
export const LATEST = { eco: 'go', pkg: GO_MODULE, path: `/go/${GO_MODULE}/@latest`, accept: '*/*', form: 'text' } as const;
