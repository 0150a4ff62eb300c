/**
 * The OpenAPI document at /v1/openapi.json cannot drift from the gateway:
 * real responses of every endpoint (successes and errors, through a real
 * gateway process) must have their status documented for that path and
 * method, and JSON bodies must validate (ajv, JSON Schema 2020-12) against
 * the documented schema; documented download headers must be present.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import Ajv2020 from 'ajv/dist/2020.js';
import { createKeyFile } from '../../platform/key-file.ts';
import { nodeBackend } from '../../platform/node-crypto.ts';
import type { Signer } from '../../chain/crypto-backend.ts';
import { applyKeyEvent, initialKeyState, keyStatement, rootStatement, signStatement, type SignedStatement, type Statement } from '../../chain/key-events.ts';
import { b64, HOLDERS, ONLINE } from '../helpers/key-fixture.ts';
import { OriginServer } from '../helpers/origin-server.ts';
import { startGatewayProcess, writeConfig, type GatewayProcess } from '../helpers/gateway-process.ts';

const work = mkdtempSync(join(tmpdir(), 'vouch-openapi-'));
const token = 'openapi-token-' + 'o'.repeat(30);
const agent = new Agent({ maxHeaderSize: 1024 * 1024 });
let gw: GatewayProcess;
let origin: OriginServer;
let doc: any;
let ajv: any;
const checked = new Set<string>();

test.before(async () => {
  createKeyFile(join(work, 'authority.pem'));
  writeFileSync(join(work, 'submit.token'), token, { mode: 0o600 });
  origin = await OriginServer.start();
  origin.route('/doc.tgz', { body: 'documented' });
  gw = await startGatewayProcess([
    '--config',
    writeConfig(work, {
      listen: { port: 0 },
      chain: { dir: join(work, 'chain') },
      authority: { key_file: join(work, 'authority.pem'), signer: 'openapi', submit_token_file: join(work, 'submit.token') },
      origin: { allow_private: true },
    }),
  ]);
  const r = await request(gw.url + '/v1/openapi.json', { dispatcher: agent });
  const { success, ...rest } = (await r.body.json()) as any;
  doc = rest;
  ajv = new (Ajv2020 as any)({ strict: false, allErrors: true });
  ajv.addSchema({ ...doc, $id: 'urn:vouch:openapi' });
});

test.after(async () => {
  await gw.stop();
  await origin.close();
  await agent.close();
  rmSync(work, { recursive: true, force: true });
});

async function call(method: string, path: string, opts: { headers?: Record<string, string>; body?: string } = {}) {
  const r = await request(gw.url + path, { method: method as 'GET', headers: opts.headers ?? {}, body: opts.body ?? null, dispatcher: agent });
  const raw = Buffer.from(await r.body.arrayBuffer());
  const bare = path.split('?')[0]!;
  const template = bare.startsWith('/tile/entries/') ? '/tile/entries/{index}' : bare.startsWith('/tile/') ? '/tile/{level}/{index}' : bare;
  const op = doc.paths[template]?.[method.toLowerCase()];
  assert.ok(op, `${method} ${template} is not documented`);
  const spec = op.responses[String(r.statusCode)];
  assert.ok(spec, `${method} ${template} answered ${r.statusCode}, which the document does not list`);
  const schema = spec.content?.['application/json']?.schema;
  if (schema) {
    const body = JSON.parse(raw.toString('utf8'));
    const ref = schema.$ref ? `urn:vouch:openapi${schema.$ref}` : null;
    const validate = ref ? ajv.getSchema(ref) : ajv.compile(schema);
    assert.ok(validate, `no schema for ${schema.$ref}`);
    const ok = validate(body);
    assert.ok(ok, `${method} ${path} ${r.statusCode}: ${ajv.errorsText(validate.errors)}\n${raw.toString().slice(0, 300)}`);
  }
  for (const h of Object.keys(spec.headers ?? {})) {
    assert.ok(r.headers[h.toLowerCase()] !== undefined, `${method} ${template} ${r.statusCode}: documented header ${h} missing`);
  }
  checked.add(`${method} ${template} ${r.statusCode}`);
  return { status: r.statusCode, raw };
}

const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
const enc = encodeURIComponent;

test('the document is OpenAPI 3.1 and names this gateway', () => {
  assert.is(doc.openapi, '3.1.0');
  assert.is(doc.servers[0].url, gw.url);
  assert.ok(Object.keys(doc.paths).length >= 8);
});

test('submit responses match the document', async () => {
  const body = JSON.stringify({ url: origin.url('/doc.tgz'), name: 'acme/doc', semver: '1.0.0', license: 'MIT' });
  assert.is((await call('POST', '/v1/submit', { headers: auth, body })).status, 201);
  assert.is((await call('POST', '/v1/submit', { headers: auth, body })).status, 200);
  origin.route('/doc.tgz', { body: 'changed' });
  assert.is((await call('POST', '/v1/submit', { headers: auth, body })).status, 409);
  origin.route('/doc.tgz', { body: 'documented' });
  assert.is((await call('POST', '/v1/submit', { headers: { 'content-type': 'application/json' }, body })).status, 401);
  assert.is((await call('POST', '/v1/submit', { headers: auth, body: '{' })).status, 400);
  assert.is((await call('POST', '/v1/submit', { headers: { ...auth, 'content-type': 'text/plain' }, body })).status, 415);
  assert.is((await call('POST', '/v1/submit', { headers: auth, body: 'x'.repeat(2 * 1024 * 1024) })).status, 413);
  assert.is(
    (await call('POST', '/v1/submit', { headers: auth, body: JSON.stringify({ url: origin.url('/none'), name: 'a/b', semver: '1.0.0', license: 'MIT' }) }))
      .status,
    502,
  );
});

test('revoke responses match the document', async () => {
  origin.route('/doc-revoked.tgz', { body: 'to be revoked' });
  const url = origin.url('/doc-revoked.tgz');
  assert.is(
    (await call('POST', '/v1/submit', { headers: auth, body: JSON.stringify({ url, name: 'acme/doc', semver: '0.1.0', license: 'MIT' }) })).status,
    201,
  );
  assert.is((await call('POST', '/v1/revoke', { headers: auth, body: JSON.stringify({ url, semver: '0.1.0', comment: 'documented' }) })).status, 201);
  assert.is((await call('POST', '/v1/revoke', { headers: auth, body: JSON.stringify({ url }) })).status, 409);
  assert.is((await call('POST', '/v1/revoke', { headers: auth, body: JSON.stringify({ block: 0 }) })).status, 400);
  assert.is((await call('POST', '/v1/revoke', { headers: auth, body: JSON.stringify({ url: origin.url('/never') }) })).status, 404);
  assert.is((await call('POST', '/v1/revoke', { headers: { 'content-type': 'application/json' }, body: '{}' })).status, 401);
  assert.is((await call('POST', '/v1/revoke', { headers: { ...auth, 'content-type': 'text/plain' }, body: '{}' })).status, 415);
  assert.is((await call('POST', '/v1/revoke', { headers: auth, body: 'x'.repeat(2 * 1024 * 1024) })).status, 413);
});

test('POST /v1/root: applied, stale, refused, key unavailable, not a statement file, each as documented', async () => {
  const a = (await (await fetch(gw.url + '/v1/authority')).json()) as { record_hash: string; payload: { authority: { signer: string; public_key: string } } };
  const keys = initialKeyState(a.record_hash, a.payload.authority.signer, a.payload.authority.public_key);
  const signed = (st: Statement, holders: Signer[]) => holders.reduce((s, h) => signStatement(s, h), { statement: st, signatures: [] } as SignedStatement);
  const adopt = signed(rootStatement(keys, { threshold: 2, keys: HOLDERS.slice(0, 3).map(b64) }), HOLDERS.slice(0, 2));
  const applied = await call('POST', '/v1/root', { headers: auth, body: JSON.stringify(adopt) });
  assert.is(applied.status, 201);
  assert.is((await call('POST', '/v1/root', { headers: auth, body: JSON.stringify(adopt) })).status, 409);
  const adopted = applyKeyEvent(nodeBackend, keys, adopt, JSON.parse(applied.raw.toString()).index);
  const rotate = keyStatement(adopted, { signer: 'openapi', public_key: b64(ONLINE.B) });
  assert.is((await call('POST', '/v1/root', { headers: auth, body: JSON.stringify(signed(rotate, HOLDERS.slice(0, 1))) })).status, 400);
  assert.is((await call('POST', '/v1/root', { headers: auth, body: JSON.stringify(signed(rotate, HOLDERS.slice(0, 2))) })).status, 409);
  assert.is((await call('POST', '/v1/root', { headers: auth, body: '{}' })).status, 400);
  assert.is((await call('POST', '/v1/root', { headers: { 'content-type': 'application/json' }, body: '{}' })).status, 401);
  assert.is((await call('POST', '/v1/root', { headers: { ...auth, 'content-type': 'text/plain' }, body: '{}' })).status, 415);
  assert.is((await call('POST', '/v1/root', { headers: auth, body: 'x'.repeat(128 * 1024) })).status, 413);
});

test('lookup, authority, checkpoint, download and documents match the document', async () => {
  const u = enc(origin.url('/doc.tgz'));
  for (const p of ['/v1/endorsement', '/v1/object']) {
    assert.is((await call('GET', `${p}?url=${u}`)).status, 200);
    assert.is((await call('GET', `${p}?url=${u}&proof=1`)).status, 200);
    assert.is((await call('GET', `${p}?url=${u}&proof=2`)).status, 400);
    assert.is((await call('GET', `${p}?url=${enc('https://none.example/x')}`)).status, 404);
    assert.is((await call('GET', `${p}?url=nope`)).status, 400);
    assert.is((await call('GET', `${p}?url=${u}`, { headers: { accept: 'text/html' } })).status, 406);
  }
  assert.is((await call('GET', '/v1/authority')).status, 200);
  assert.is((await call('GET', '/v1/checkpoint')).status, 200);
  assert.is((await call('GET', '/v1/openapi.json')).status, 200);
  assert.is((await call('GET', '/v1/skills/verify.md')).status, 200);
  assert.is((await call('GET', `/v1/download?url=${u}`)).status, 200);
  assert.is(
    (
      await call('GET', `/v1/download?url=${u}`, {
        headers: {
          'if-none-match': `"${((await (await request(`${gw.url}/v1/endorsement?url=${u}`, { dispatcher: agent })).body.json()) as any).payload.endorsements[0].artifact_hash}"`,
        },
      })
    ).status,
    304,
  );
  assert.is((await call('GET', `/v1/download?url=${enc('https://none.example/x')}`)).status, 404);
  assert.is((await call('GET', '/v1/download')).status, 400);
  origin.route('/doc.tgz', { body: 'documented', tamper: true });
  assert.is((await call('GET', `/v1/download?url=${u}&semver=1.0.0`, { headers: { 'cache-control': 'no-cache' } })).status, 200); // mirror hit: still the verified bytes
});

test('transparency routes match the document', async () => {
  const cp = await call('GET', '/checkpoint');
  assert.ok(cp.status === 200 || cp.status === 404, String(cp.status));
  assert.is((await call('GET', '/v1/proof/inclusion?index=0&size=1')).status, 200);
  assert.is((await call('GET', '/v1/proof/inclusion?index=abc')).status, 400);
  assert.is((await call('GET', '/v1/proof/inclusion?index=0&size=99999')).status, 404);
  assert.is((await call('GET', '/v1/proof/consistency?from=1&to=1')).status, 200);
  assert.is((await call('GET', '/v1/proof/consistency?from=x')).status, 400);
  assert.is((await call('GET', '/v1/proof/consistency?from=1&to=99999')).status, 404);
  assert.is((await call('GET', '/tile/0/000.p/1')).status, 200);
  assert.is((await call('GET', '/tile/0/999')).status, 404);
  assert.is((await call('GET', '/tile/0/1')).status, 400);
  assert.is((await call('GET', '/tile/entries/000.p/1')).status, 200);
  assert.is((await call('GET', '/tile/entries/999')).status, 404);
  assert.is((await call('GET', '/tile/entries/x')).status, 400);
  assert.is((await call('GET', '/v1/keys?since=0')).status, cp.status === 200 ? 200 : 404);
  assert.is((await call('GET', '/v1/keys?since=x')).status, 400);
  assert.is((await call('GET', '/v1/index/proof?unit=acme/doc')).status, cp.status === 200 ? 200 : 404);
  assert.is((await call('GET', '/v1/index/proof?unit=x')).status, 400);
  const authority = await request(`${gw.url}/v1/authority`, { dispatcher: agent });
  const a = (await authority.body.json()) as any;
  if (cp.status === 200) assert.match(a.verifier_key, /^[^+\s]+\+[0-9a-f]{8}\+[A-Za-z0-9+/]+=*$/);
});

test('browse endpoints and health probes match the document', async () => {
  const u = enc(origin.url('/doc.tgz'));
  assert.is((await call('GET', '/v1/blocks?limit=5')).status, 200);
  assert.is((await call('GET', '/v1/blocks?limit=0')).status, 400);
  assert.is((await call('GET', '/v1/block?index=1')).status, 200);
  assert.is((await call('GET', '/v1/block?index=999')).status, 404);
  assert.is((await call('GET', '/v1/block')).status, 400);
  assert.is((await call('GET', `/v1/versions?url=${u}`)).status, 200);
  assert.is((await call('GET', `/v1/versions?url=${enc('https://none.example/x')}`)).status, 404);
  assert.is((await call('GET', '/v1/versions')).status, 400);
  assert.is((await call('GET', '/v1/units?name=acme/doc')).status, 200);
  assert.is((await call('GET', '/v1/units?name=nobody/here')).status, 404);
  assert.is((await call('GET', '/v1/units?name=x')).status, 400);
  assert.is((await call('GET', '/healthz')).status, 200);
  assert.is((await call('GET', '/readyz')).status, 200);
  // Not a witness (no witness section): 404, as for an unknown log (test/integration/witness.test.ts has the rest).
  assert.is((await call('POST', '/add-checkpoint', { body: 'old 0\n\n' })).status, 404);
  // Not a mirror with chain.sync_token_file: 404 (test/integration/fleet.test.ts has a mirror's 202 and 401).
  assert.is((await call('POST', '/v1/sync')).status, 404);
  const metrics = await call('GET', '/metrics');
  assert.is(metrics.status, 200);
  assert.match(metrics.raw.toString('utf8'), /^vouch_http_requests_total\{/m);
});

test('every documented path was exercised', () => {
  for (const [path, ops] of Object.entries<any>(doc.paths)) {
    for (const method of Object.keys(ops)) {
      assert.ok(
        [...checked].some((c) => c.startsWith(`${method.toUpperCase()} ${path} `)),
        `${method.toUpperCase()} ${path} was never called`,
      );
    }
  }
});

test.run();
