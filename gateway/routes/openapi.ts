/**
 * The OpenAPI 3.1 document of the gateway's whole HTTP interface (served at
 * /v1/openapi.json; the VIBECODE header's `spec` points to it), and the
 * onboarding document for clients under /v1/skills/.
 *
 * Must hold: it describes what the handlers do — statuses from the error
 * catalogue, the download headers of docs/spec/design.md §3.2. A test compares it with
 * real responses.
 */
import { ERROR_CATALOGUE } from '../../chain/errors.ts';
import { PAYLOAD_SCHEMA } from '../../chain/schema.ts';

export const SKILL_PATH = '/v1/skills/verify.md';

const selectionParams = [
  {
    name: 'url',
    in: 'query',
    required: true,
    description: 'The artifact URL exactly as endorsed (absolute http or https).',
    schema: { type: 'string', format: 'uri' },
  },
  { name: 'semver', in: 'query', required: false, description: 'Exact SemVer 2.0.0 version.', schema: { type: 'string' } },
  {
    name: 'at',
    in: 'query',
    required: false,
    description: 'Date YYYY-MM-DD: the version with the greatest effective_date on or before it (ties: highest index).',
    schema: { type: 'string', format: 'date' },
  },
];

/** `proof=1` on lookups (issue 17). */
const proofParam = {
  name: 'proof',
  in: 'query',
  required: false,
  description:
    "1: add member `proof`, the selected block's inclusion proof in the checkpoint /checkpoint serves (absent while that checkpoint does not cover the block yet). 0 or absent: no proof.",
  schema: { enum: ['0', '1'] },
};

const errorRef = { $ref: '#/components/schemas/Error' };
const jsonError = (description: string) => ({ description, content: { 'application/json': { schema: errorRef } } });
const emptyBody = (description: string) => ({ description: `${description} (empty body)` });

export function openApiDocument(publicUrl: string, serviceName: string, authority: boolean): Record<string, unknown> {
  const lookup = (summary: string) => ({
    get: {
      summary,
      parameters: [...selectionParams, proofParam],
      responses: {
        200: {
          description: 'The selected signed block, with `success: true` added.',
          content: { 'application/json': { schema: { $ref: '#/components/schemas/LookupResponse' } } },
        },
        400: jsonError('Missing url, url not absolute http(s), invalid semver or date, proof not 0 or 1 (`bad_request`).'),
        404: jsonError('No provenance block is on file for the URL (`not_found`); `resource` is the URL.'),
        406: jsonError('The Accept header rules out JSON (`not_acceptable`).'),
        503: jsonError('The chain is not loaded yet (`not_ready`).'),
      },
    },
  });
  const paths: Record<string, unknown> = {
    '/v1/endorsement': lookup('The block selected for an artifact URL'),
    '/v1/object': lookup('Same as /v1/endorsement (historical name, kept)'),
    '/v1/authority': {
      get: {
        summary: 'The authority block (block 0) and the keys in force (docs/spec/key-events.md)',
        responses: {
          200: {
            description:
              'Block 0 with `success: true` added; `verifier_key`: the signed-note verifier key `<origin>+<hex8 key ID>+<base64(0x01 ‖ ed25519 key)>` ' +
              'of the online key in force (absent when no origin is known); `keys`: the key state (root, online key, retired and compromised keys, void blocks) ' +
              'and the verifier keys a checkpoint note is signed with now (the key in force first, then the previous key during a rollover).',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/LookupResponse' } } },
          },
          503: jsonError('Not ready.'),
        },
      },
    },
    '/v1/checkpoint': {
      get: {
        summary: 'The signed checkpoint of the chain head',
        responses: {
          200: {
            description: 'The checkpoint with `success: true` added.',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/CheckpointResponse' } } },
          },
          404: jsonError('The chain has no checkpoint.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/checkpoint': {
      get: {
        summary:
          "The signed checkpoint note (C2SP tlog-checkpoint in a signed-note): origin, tree size, base64 Merkle root, the authority's signature, and any witness cosignatures",
        responses: {
          200: {
            description: 'The committed checkpoint.note (text, not JSON; no Accept rule).',
            content: { 'text/plain; charset=utf-8': { schema: { type: 'string' } } },
          },
          404: jsonError('The chain has no checkpoint.note yet (`not_found`); it gains one with its next append.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/tile/{level}/{index}': {
      get: {
        summary: 'A Merkle tree tile (C2SP tlog-tiles): hashes of tree level 8·level, 256 a full tile',
        description:
          "The path is exactly tlog-tiles': `/tile/<L>/<N>[.p/<W>]`, N in 3-digit groups, all but the last prefixed with `x` (`/tile/0/x001/234`), `.p/<W>` a partial tile of W (1-255) hashes. Entry i of the tree is block i's 32-byte record_hash; leaf hash SHA-256(0x00 ‖ entry), node SHA-256(0x01 ‖ left ‖ right) (RFC 6962).",
        parameters: [
          { name: 'level', in: 'path', required: true, schema: { type: 'integer', minimum: 0, maximum: 63 } },
          {
            name: 'index',
            in: 'path',
            required: true,
            description: 'N in x-prefixed 3-digit groups, optionally followed by `.p/<W>` (several path segments).',
            schema: { type: 'string' },
          },
        ],
        responses: {
          200: {
            description:
              'W×32 bytes of hashes. Every tile, full or partial, is immutable (`Cache-Control: public, max-age=31536000, immutable`): a tile of a given width never changes (tlog-tiles).',
            headers: { 'Cache-Control': { schema: { type: 'string' } } },
            content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
          },
          400: emptyBody('Not a tile path'),
          404: emptyBody('The tile is beyond the tree'),
          503: emptyBody('Chain not loaded yet'),
        },
      },
    },
    '/tile/entries/{index}': {
      get: {
        summary: 'An entry bundle (C2SP tlog-tiles): the record hashes of blocks 256·N ... 256·N+W-1, each as uint16be length 32 ‖ 32 bytes',
        parameters: [
          {
            name: 'index',
            in: 'path',
            required: true,
            description: 'N in x-prefixed 3-digit groups, optionally followed by `.p/<W>`.',
            schema: { type: 'string' },
          },
        ],
        responses: {
          200: {
            description: 'W×34 bytes; caching as for tiles.',
            headers: { 'Cache-Control': { schema: { type: 'string' } } },
            content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
          },
          400: emptyBody('Not an entry bundle path'),
          404: emptyBody('The bundle is beyond the tree'),
          503: emptyBody('Chain not loaded yet'),
        },
      },
    },
    '/v1/proof/inclusion': {
      get: {
        summary: 'Inclusion proof of block `index` in the tree of `size` blocks (RFC 9162 PATH, leaf upwards)',
        parameters: [
          { name: 'index', in: 'query', required: true, schema: { type: 'integer', minimum: 0 } },
          {
            name: 'size',
            in: 'query',
            required: false,
            description: 'Tree size (default: the size of the checkpoint /checkpoint serves).',
            schema: { type: 'integer', minimum: 1 },
          },
        ],
        responses: {
          200: { description: 'The proof.', content: { 'application/json': { schema: { $ref: '#/components/schemas/InclusionProof' } } } },
          400: jsonError('Missing or non-integer parameters, or index >= size (`bad_request`).'),
          404: jsonError('size (or index, without size) beyond the tree (`not_found`).'),
          406: jsonError('The Accept header rules out JSON.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/v1/index/proof': {
      get: {
        summary:
          "A key's completeness-index proof (docs/spec/index.md 6) against the served checkpoint note: `{kind, name, size, index_proof, checkpoint}`; the listing answers of the npm, PyPI and Go routes link it in `Vouch-Index-Proof-Url` (docs/spec/index.md 11)",
        parameters: [
          {
            name: 'unit',
            in: 'query',
            required: false,
            description: "A unit name (an endorsement's `name`: `npm/x`, `@scope/y`, `pypi/z`, `go/...`).",
            schema: { type: 'string' },
          },
          { name: 'url', in: 'query', required: false, description: 'An artifact URL (instead of unit).', schema: { type: 'string' } },
        ],
        responses: {
          200: {
            description: 'The proof (of absence when no block names the key) and the note it is against.',
            content: { 'application/json': { schema: { type: 'object' } } },
          },
          400: jsonError('Not exactly one of unit and url, or a malformed one (`bad_request`).'),
          404: jsonError('The served checkpoint commits no completeness index at this size (`not_found`).'),
          406: jsonError('The Accept header rules out JSON.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/v1/keys': {
      get: {
        summary:
          "The log's key events (docs/spec/key-events.md): block 0 and every key block with sequence > `since`, each with its inclusion proof in the tree of the served checkpoint note `checkpoint` of `size`; the key state of the served chain and each online key's note verifier key (the key in force first)",
        parameters: [
          {
            name: 'since',
            in: 'query',
            required: false,
            description: 'Key events the client has applied (default 0: all).',
            schema: { type: 'integer', minimum: 0 },
          },
        ],
        responses: {
          200: {
            description: 'The key events.',
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  required: ['success', 'chain', 'first', 'first_block', 'state', 'checkpoint', 'size', 'events', 'verifier_keys'],
                  properties: {
                    success: { const: true },
                    chain: { type: 'string', description: 'record_hash of block 0 (what statements name)' },
                    first: { type: 'object', properties: { signer: { type: 'string' }, public_key: { type: 'string' } } },
                    first_block: { type: 'object', properties: { block: { type: 'object' }, proof: { type: 'array', items: { type: 'string' } } } },
                    state: {
                      type: 'object',
                      description: 'The key state after the served chain: root, online key (since), retired and compromised keys, void ranges, sequence.',
                    },
                    checkpoint: { type: 'string', description: 'The signed checkpoint note every proof is against (as /checkpoint serves it).' },
                    size: { type: 'integer', minimum: 1 },
                    events: {
                      type: 'array',
                      items: {
                        type: 'object',
                        required: ['index', 'sequence', 'block', 'proof'],
                        properties: {
                          index: { type: 'integer' },
                          sequence: { type: 'integer' },
                          block: { type: 'object' },
                          proof: { type: 'array', items: { type: 'string' }, description: 'base64 hashes, leaf upwards (RFC 9162 PATH)' },
                        },
                      },
                    },
                    verifier_keys: { type: 'array', items: { type: 'string' }, description: "<origin>+<hex8>+<base64(0x01 ‖ key)> for Go's sumdb/note" },
                  },
                },
              },
            },
          },
          400: jsonError('`since` is not a non-negative integer (`bad_request`).'),
          404: jsonError('The chain has no checkpoint note yet (`not_found`).'),
          406: jsonError('The Accept header rules out JSON.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/v1/proof/consistency': {
      get: {
        summary: 'Consistency proof that the tree of `from` blocks is a prefix of the tree of `to` (RFC 9162 PROOF; empty when from is 0 or equals to)',
        parameters: [
          { name: 'from', in: 'query', required: true, schema: { type: 'integer', minimum: 0 } },
          {
            name: 'to',
            in: 'query',
            required: false,
            description: 'Default: the size of the checkpoint /checkpoint serves.',
            schema: { type: 'integer', minimum: 0 },
          },
        ],
        responses: {
          200: { description: 'The proof.', content: { 'application/json': { schema: { $ref: '#/components/schemas/ConsistencyProof' } } } },
          400: jsonError('Missing or non-integer parameters, or from > to (`bad_request`).'),
          404: jsonError('to (or from, without to) beyond the tree (`not_found`).'),
          406: jsonError('The Accept header rules out JSON.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/v1/download': {
      get: {
        summary: 'The artifact bytes, served only after they hash to the signed artifact_hash',
        description:
          "Select the block (as /v1/endorsement), get the bytes from the mirror or the origin, hash them with the block's algorithm, compare, serve only on equality. No byte reaches the client before the check passes. Failures have an empty body.",
        parameters: selectionParams,
        responses: {
          200: {
            description:
              'The verified bytes. Also header `Vouch-Proof` (when the served checkpoint covers the block): minified pure-ASCII JSON {"index","size","proof":[base64 hashes],"checkpoint":"<signed checkpoint note>"}, the block\'s inclusion proof in that checkpoint (as on 304 and on verified proxy answers); at most 3,072 bytes: past that the note keeps the authority\'s signature and the witness cosignatures that fit, and "omitted_cosignatures":K counts the others (the lookup with proof=1 carries them all). The whole head (status line and headers) of every verified answer fits 8 KiB, whatever the block.',
            headers: {
              'Content-Type': { schema: { type: 'string' }, description: "The artifact's own type (application/octet-stream if the origin gave none)." },
              'Content-Length': { schema: { type: 'integer' } },
              UNS: {
                schema: { type: 'string' },
                description:
                  `Minified single-line JSON, non-ASCII escaped as \\uXXXX, in one of two forms. Full, when it is at most 4,096 bytes: {"${serviceName}":{"endorsement":<block served>}}. ` +
                  `Compact, for a larger block (and on package-manager routes): {"${serviceName}":{"block":{"index":N,"record_hash":"<hex>","url":"<base>/v1/block?index=N"},"entry":<the endorsement entry of this URL, as signed>}} ` +
                  '("entry" left out when the value would pass 2,048 bytes). To verify the compact form, fetch block N (from "url" or /v1/block?index=N of any gateway of the chain), check it as any block, ' +
                  'require its index and record_hash to be the header\'s and its entry for the URL to equal "entry" (canonical JSON); Vouch-Proof proves that record_hash in the log.',
              },
              VIBECODE: { schema: { type: 'string' }, description: 'Minified JSON {"spec": <this document>, "skills": [<URL>, ...]}.' },
              ETag: { schema: { type: 'string' }, description: 'The quoted artifact_hash; If-None-Match answers 304.' },
              'X-Content-Type-Options': { schema: { type: 'string', const: 'nosniff' } },
              'Content-Security-Policy': { schema: { type: 'string', const: 'sandbox' } },
            },
            content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
          },
          304: emptyBody('If-None-Match matched the artifact_hash'),
          400: emptyBody('Missing or invalid parameters'),
          404: emptyBody('No signed block for the URL / version'),
          409: emptyBody('The bytes hash differently from the signed artifact_hash'),
          410: emptyBody('The selected version is revoked'),
          502: emptyBody('Origin unreachable, non-2xx, truncated body, or larger than the limit'),
          503: emptyBody('Chain not loaded yet'),
          504: emptyBody('Origin too slow'),
        },
      },
    },
    '/v1/blocks': {
      get: {
        summary: 'Newest blocks first (summaries), for browsing',
        parameters: [
          {
            name: 'before',
            in: 'query',
            required: false,
            description: 'List blocks with an index below this (default: the chain size).',
            schema: { type: 'integer', minimum: 0 },
          },
          {
            name: 'limit',
            in: 'query',
            required: false,
            description: 'At most this many (1-200, default 20).',
            schema: { type: 'integer', minimum: 1, maximum: 200 },
          },
        ],
        responses: {
          200: { description: 'Block summaries.', content: { 'application/json': { schema: { $ref: '#/components/schemas/BlockList' } } } },
          400: jsonError('Bad parameters.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/v1/block': {
      get: {
        summary: 'One block as stored, by index or record hash',
        parameters: [
          { name: 'index', in: 'query', required: false, schema: { type: 'integer', minimum: 0 } },
          { name: 'hash', in: 'query', required: false, description: 'record_hash', schema: { type: 'string', pattern: '^[0-9a-f]{64}$' } },
        ],
        responses: {
          200: {
            description:
              'The block with `success: true` (and `revoked_by` when revoked; `void: {from, to, compromise}` when a compromise declaration at block `compromise` voids blocks `from`..`to`, this one among them, docs/spec/key-events.md).',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/LookupResponse' } } },
          },
          400: jsonError('Neither index nor hash, or a malformed one.'),
          404: jsonError('No such block.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/v1/versions': {
      get: {
        summary: 'Every endorsement of an artifact URL, newest first',
        parameters: [selectionParams[0]],
        responses: {
          200: { description: 'Version history.', content: { 'application/json': { schema: { $ref: '#/components/schemas/VersionList' } } } },
          400: jsonError('Missing or invalid url.'),
          404: jsonError('No provenance block is on file for the URL.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/v1/units': {
      get: {
        summary: 'The blocks of a unit (owner/name), newest first',
        parameters: [{ name: 'name', in: 'query', required: true, schema: { type: 'string' } }],
        responses: {
          200: { description: 'Block summaries.', content: { 'application/json': { schema: { $ref: '#/components/schemas/BlockList' } } } },
          400: jsonError('Missing or invalid name.'),
          404: jsonError('No blocks for that unit.'),
          503: jsonError('Not ready.'),
        },
      },
    },
    '/healthz': {
      get: {
        summary: 'Liveness: the process answers',
        responses: { 200: { description: 'Alive.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Health' } } } } },
      },
    },
    '/readyz': {
      get: {
        summary:
          'Readiness: the chain is loaded and verified (`ready`); a mirror staler than chain.max_staleness answers 200 `degraded` with `reasons` (503 with chain.unready_when_stale; docs/guide/fleet.md)',
        responses: {
          200: {
            description: 'Ready or degraded (stale but verified), with chain, sync and push details.',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/Readiness' } } },
          },
          503: {
            description: 'Not ready, with the reason and the same details.',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/Readiness' } } },
          },
        },
      },
    },
    '/v1/sync': {
      post: {
        summary:
          "Sync hint (a mirror with chain.sync_token_file): start a sync now. Sent by the authority after each push (authority.notify) or a git host's post-receive hook; what the sync fetches is verified as always (docs/guide/fleet.md).",
        security: [{ bearer: [] }],
        requestBody: {
          required: false,
          content: {
            'application/json': {
              schema: {
                type: 'object',
                properties: {
                  size: { type: 'integer', minimum: 0, description: 'The tree size the remote now holds.' },
                  head: {
                    type: 'string',
                    pattern: '^[0-9a-f]{40}$',
                    description:
                      "The commit the remote's main now names: the mirror asks for it at once (no ref advertisement first); one the remote does not serve, or not newer than the mirror's, falls back to an ordinary sync.",
                  },
                },
              },
            },
          },
        },
        responses: {
          202: {
            description: 'Accepted: a sync runs in the background.',
            content: {
              'application/json': {
                schema: { type: 'object', properties: { success: { type: 'boolean' }, status: { enum: ['accepted'] }, size: { type: ['integer', 'null'] } } },
              },
            },
          },
          400: jsonError('The body is not JSON, size is not a non-negative integer, or head is not a commit id.'),
          401: jsonError('Missing or wrong bearer token.'),
          404: jsonError('This gateway is not a mirror with chain.sync_token_file.'),
        },
      },
    },
    '/metrics': {
      get: {
        summary:
          'Prometheus metrics: requests by route and status, latencies, origin fetches, hash mismatches, mirror, chain, sync and push, submits, proxy, process',
        responses: {
          200: {
            description: 'Prometheus text exposition format 0.0.4 (not JSON; no Accept rule).',
            content: { 'text/plain; version=0.0.4; charset=utf-8': { schema: { type: 'string' } } },
          },
        },
      },
    },
    '/add-checkpoint': {
      post: {
        summary:
          'C2SP tlog-witness add-checkpoint (a gateway with a witness section): cosigns a checkpoint consistent with the last one it cosigned for that log',
        requestBody: {
          required: true,
          content: {
            'text/plain': {
              schema: { type: 'string', description: '`old <size>`, up to 63 base64 consistency proof lines, an empty line, the signed checkpoint note' },
            },
          },
        },
        responses: {
          200: { description: 'The cosignature line(s) (tlog-cosignature v1).', content: { 'text/plain; charset=utf-8': { schema: { type: 'string' } } } },
          400: {
            description: 'Malformed body, or old size larger than the checkpoint size.',
            content: { 'text/plain; charset=utf-8': { schema: { type: 'string' } } },
          },
          403: {
            description: 'No signature by a key trusted for the origin verifies.',
            content: { 'text/plain; charset=utf-8': { schema: { type: 'string' } } },
          },
          404: {
            description: 'Unknown log origin, or this gateway is not a witness.',
            content: { 'text/plain; charset=utf-8': { schema: { type: 'string' } } },
          },
          409: {
            description: 'The old size is not the size last cosigned (or a different root at that size): the body is that size and a newline.',
            content: { 'text/x.tlog.size': { schema: { type: 'string' } } },
          },
          413: { description: 'Body over 64 KiB.', content: { 'text/plain; charset=utf-8': { schema: { type: 'string' } } } },
          422: { description: 'The consistency proof does not verify.', content: { 'text/plain; charset=utf-8': { schema: { type: 'string' } } } },
        },
      },
    },
    '/v1/openapi.json': { get: { summary: 'This document', responses: { 200: { description: 'OpenAPI 3.1 document.' } } } },
    [SKILL_PATH]: {
      get: {
        summary: 'Onboarding for clients: how to verify a block and a download',
        responses: { 200: { description: 'Markdown.', content: { 'text/markdown': {} } } },
      },
    },
  };
  if (authority) {
    paths['/v1/submit'] = {
      post: {
        summary: 'Fetch, hash, sign and append (authority mode)',
        security: [{ bearer: [] }],
        requestBody: {
          required: true,
          content: { 'application/json': { schema: { $ref: '#/components/schemas/SubmitRequest' } } },
        },
        responses: {
          201: { description: 'Posted: the block is committed.', content: { 'application/json': { schema: { $ref: '#/components/schemas/SubmitResponse' } } } },
          200: {
            description:
              'Unchanged: the bytes equal the newest version under the URL; nothing posted. ' +
              'With `Accept: application/x-ndjson`: always 200, one `{"progress": {done, total, url}}` line per entry fetched and hashed, ' +
              "then one result line: the plain answer's body (SubmitResponse or Error) with `http_status`, the status it would have had. " +
              'A client that disconnects does not stop the submit: its block is committed whole or not at all.',
            content: {
              'application/json': { schema: { $ref: '#/components/schemas/SubmitResponse' } },
              'application/x-ndjson': { schema: { $ref: '#/components/schemas/SubmitProgressLine' } },
            },
          },
          400: jsonError('Invalid body, or a URL whose address is not allowed.'),
          401: jsonError('Missing or wrong bearer token.'),
          409: jsonError(
            "The same URL and semver are signed with different bytes (`semver_conflict`), or the fetched bytes contradict an entry's `expect` claim (`hash_mismatch`: `refused` lists every such entry, nothing of the block is signed).",
          ),
          413: jsonError('Body too large.'),
          415: jsonError('Body is not application/json.'),
          502: jsonError('The origin failed.'),
          504: jsonError('The origin was too slow.'),
        },
      },
    };
    paths['/v1/root'] = {
      post: {
        summary:
          'Apply a key statement signed by the root holders (authority mode, docs/spec/key-events.md): adopt or rotate the root, rotate the online key, ' +
          "or declare it compromised. Appended through the same writer as submits once it is valid for the chain's key state; a statement that puts " +
          'a new online key in force needs its private key in `authority.next_key_file`, read at that moment, which then signs every block, ' +
          'checkpoint and note.',
        security: [{ bearer: [] }],
        requestBody: {
          required: true,
          content: { 'application/json': { schema: { $ref: '#/components/schemas/StatementFile' } } },
        },
        responses: {
          201: {
            description: 'Applied: the key block is committed.',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/RootResponse' } } },
          },
          400: jsonError(
            "`bad_request`: not a statement file; `bad_statement`: refused for the chain's key state (too few signatures, a key outside the root, a holder twice, a weak or retired key, a bad index, another chain), the reason named.",
          ),
          401: jsonError('Missing or wrong bearer token.'),
          409: jsonError(
            '`stale_statement`: its sequence is used (replayed, superseded or conflicting); `key_unavailable`: authority.next_key_file does not hold the new online key (the file and the key named).',
          ),
          413: jsonError('Body too large (64 KiB).'),
          415: jsonError('Body is not application/json.'),
        },
      },
    };
    paths['/v1/revoke'] = {
      post: {
        summary:
          'Sign and append a revoke block naming an endorse block (authority mode): `{url, semver?}` names the block a lookup selects for the URL today (with semver: the newest block with exactly that version), `{block}` names one by index',
        security: [{ bearer: [] }],
        requestBody: {
          required: true,
          content: { 'application/json': { schema: { $ref: '#/components/schemas/RevokeRequest' } } },
        },
        responses: {
          201: {
            description: 'Revoked: the revoke block is committed.',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/RevokeResponse' } } },
          },
          400: jsonError('Invalid body; block 0, a revoke block, or a URL whose block endorses other artifacts too (name that block by index).'),
          401: jsonError('Missing or wrong bearer token.'),
          404: jsonError('Nothing endorsed for the URL (and semver), or no such block.'),
          409: jsonError("The block is already revoked (`already_revoked`), whatever the earlier revocation's effective date."),
          413: jsonError('Body too large.'),
          415: jsonError('Body is not application/json.'),
        },
      },
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: `${serviceName} — vouch artifact provenance gateway`,
      version: '1.0.0',
      description:
        'Signed endorsement blocks (artifact URL -> hash, name, semver, license) in an append-only hash chain kept in git; downloads served only after the bytes hash to what was signed. Every JSON response has a boolean `success`; errors carry `status`, `message` and `resource`.',
    },
    servers: [{ url: publicUrl }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      schemas: {
        Error: {
          type: 'object',
          required: ['success', 'status', 'message'],
          properties: {
            success: { const: false },
            status: { enum: Object.keys(ERROR_CATALOGUE).filter((c) => c !== 'usage') },
            message: { type: 'string' },
            resource: { type: 'string' },
            refused: {
              type: 'array',
              description: "A submit's hash_mismatch: one {url, name, semver, expected, fetched} per entry whose bytes contradict its claims.",
              items: { type: 'object' },
            },
          },
        },
        Payload: PAYLOAD_SCHEMA,
        LookupResponse: {
          type: 'object',
          required: ['success', 'comment', 'index', 'prev_hash', 'posted', 'signer', 'payload', 'signature', 'record_hash'],
          properties: {
            success: { const: true },
            comment: { type: 'string' },
            index: { type: 'integer', minimum: 0 },
            prev_hash: { type: 'string', pattern: '^[0-9a-f]{64}$' },
            posted: { type: 'string', pattern: '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}Z$' },
            signer: { type: 'string' },
            payload: { $ref: '#/components/schemas/Payload' },
            signature: { type: 'string' },
            record_hash: { type: 'string', pattern: '^[0-9a-f]{64}$' },
            revoked_by: {
              type: 'object',
              description: 'Present when the block is revoked (returned only when asked by exact semver).',
              properties: { index: { type: 'integer' }, record_hash: { type: 'string' }, effective_date: { type: 'string' } },
            },
            proof: { $ref: '#/components/schemas/BlockProof' },
            verifier_key: { type: 'string', description: '/v1/authority only: the note verifier key of the online key in force.' },
            keys: { $ref: '#/components/schemas/KeyState' },
            void: {
              const: true,
              description:
                '/v1/block only: the block was signed by a compromised key after its last good block (docs/spec/key-events.md): kept as evidence, never selected.',
            },
          },
        },
        BlockProof: {
          type: 'object',
          description: "Lookups with proof=1 (and the Vouch-Proof download header): the block's inclusion proof in the served signed checkpoint.",
          required: ['index', 'size', 'proof', 'checkpoint'],
          properties: {
            index: { type: 'integer', minimum: 0 },
            size: { type: 'integer', minimum: 1 },
            proof: { type: 'array', items: { type: 'string' } },
            checkpoint: { type: 'string' },
          },
        },
        InclusionProof: {
          type: 'object',
          required: ['success', 'index', 'size', 'leaf_hash', 'proof'],
          properties: {
            success: { const: true },
            index: { type: 'integer', minimum: 0 },
            size: { type: 'integer', minimum: 1 },
            leaf_hash: { type: 'string', description: 'base64 SHA-256(0x00 ‖ record_hash bytes)' },
            proof: { type: 'array', items: { type: 'string' }, description: 'base64 hashes, leaf upwards' },
          },
        },
        ConsistencyProof: {
          type: 'object',
          required: ['success', 'from', 'to', 'proof'],
          properties: {
            success: { const: true },
            from: { type: 'integer', minimum: 0 },
            to: { type: 'integer', minimum: 0 },
            proof: { type: 'array', items: { type: 'string' } },
          },
        },
        CheckpointResponse: {
          type: 'object',
          required: ['success', 'size', 'head', 'signer', 'timestamp', 'signature'],
          properties: {
            success: { const: true },
            size: { type: 'integer', minimum: 1 },
            head: { type: 'string', pattern: '^[0-9a-f]{64}$' },
            signer: { type: 'string' },
            timestamp: { type: 'string' },
            signature: { type: 'string' },
          },
        },
        BlockSummary: {
          type: 'object',
          required: ['index', 'record_hash', 'posted', 'intent', 'uns', 'semver', 'effective_date', 'endorsements', 'comment'],
          properties: {
            index: { type: 'integer' },
            record_hash: { type: 'string' },
            posted: { type: 'string' },
            intent: { type: 'string' },
            uns: { type: 'string' },
            semver: { type: 'string' },
            effective_date: { type: 'string' },
            endorsements: { type: 'integer' },
            comment: { type: 'string' },
            target_hash: { type: 'string' },
            revoked_by: { type: 'integer' },
            key_event: {
              type: 'object',
              description:
                "A key block: what it did (action, sequence, online key, holders' signatures; root: version, threshold, keys; compromise: compromised key, good_through, voids).",
            },
            void: { const: true, description: 'The block is void (signed by a compromised key after its last good block): never selected.' },
          },
        },
        BlockList: {
          type: 'object',
          required: ['success', 'blocks'],
          properties: {
            success: { const: true },
            size: { type: 'integer' },
            before: { type: 'integer' },
            name: { type: 'string' },
            total: { type: 'integer' },
            blocks: { type: 'array', items: { $ref: '#/components/schemas/BlockSummary' } },
          },
        },
        VersionList: {
          type: 'object',
          required: ['success', 'url', 'total', 'versions'],
          properties: {
            success: { const: true },
            url: { type: 'string' },
            total: { type: 'integer' },
            versions: {
              type: 'array',
              items: {
                type: 'object',
                required: ['index', 'record_hash', 'semver', 'effective_date', 'artifact_hash'],
                properties: {
                  index: { type: 'integer' },
                  record_hash: { type: 'string' },
                  semver: { type: 'string' },
                  effective_date: { type: 'string' },
                  posted: { type: 'string' },
                  artifact_hash: { type: 'string' },
                  license: { type: 'string' },
                  revoked_by: { type: 'integer' },
                },
              },
            },
          },
        },
        Health: {
          type: 'object',
          required: ['success', 'status'],
          properties: {
            success: { const: true },
            status: { const: 'alive' },
            uptime_seconds: { type: 'integer' },
            witnesses: {
              type: 'object',
              description: 'An authority with witnesses or a policy: the cosignatures held for its committed checkpoint.',
              properties: {
                witnesses: { type: 'integer' },
                cosigned_size: { type: ['integer', 'null'] },
                cosignatures: { type: 'integer' },
                quorum: { enum: ['met', 'unmet', 'none'] },
                quorum_why: { type: 'string' },
              },
            },
          },
        },
        Readiness: {
          type: 'object',
          required: ['success', 'status', 'mode', 'chain'],
          properties: {
            success: { type: 'boolean' },
            status: { enum: ['ready', 'degraded', 'not_ready'] },
            message: { type: 'string' },
            reasons: {
              type: 'array',
              items: { type: 'object', required: ['code', 'message'], properties: { code: { type: 'string' }, message: { type: 'string' } } },
            },
            mode: { enum: ['authority', 'mirror', 'read-only'] },
            chain: {
              oneOf: [
                { type: 'null' },
                {
                  type: 'object',
                  required: ['size', 'head'],
                  properties: { size: { type: 'integer' }, head: { type: 'string' }, checkpoint_timestamp: { type: ['string', 'null'] } },
                },
              ],
            },
            sync: { type: ['object', 'null'] },
            push: { type: ['object', 'null'] },
          },
        },
        SubmitRequest: {
          oneOf: [
            {
              type: 'object',
              required: ['url', 'name', 'semver', 'license'],
              properties: {
                url: { type: 'string' },
                name: { type: 'string' },
                semver: { type: 'string' },
                license: { type: 'string' },
                comment: { type: 'string' },
                effective_date: { type: 'string' },
                tags: { type: 'object', additionalProperties: { type: 'boolean' } },
                algorithm: { enum: ['sha256', 'sha512', 'sha3-256', 'blake3'] },
                expect: { $ref: '#/components/schemas/Claims' },
              },
            },
            {
              type: 'object',
              required: ['uns', 'semver', 'endorsements'],
              properties: {
                uns: { type: 'string' },
                semver: { type: 'string' },
                comment: { type: 'string' },
                effective_date: { type: 'string' },
                tags: { type: 'object', additionalProperties: { type: 'boolean' } },
                algorithm: { enum: ['sha256', 'sha512', 'sha3-256', 'blake3'] },
                endorsements: {
                  type: 'array',
                  items: {
                    type: 'object',
                    required: ['url', 'name', 'semver', 'license'],
                    properties: {
                      url: { type: 'string' },
                      name: { type: 'string' },
                      semver: { type: 'string' },
                      license: { type: 'string' },
                      comment: { type: 'string' },
                      expect: { $ref: '#/components/schemas/Claims' },
                      algorithm: {
                        enum: ['sha256', 'sha512', 'sha3-256', 'blake3'],
                        description: "This entry's artifact_hash algorithm (default: the request's).",
                      },
                    },
                  },
                },
              },
            },
            {
              type: 'object',
              required: ['blocks'],
              additionalProperties: false,
              description:
                "Several blocks endorsed together (a lockfile's): fetched as one submit, appended in one commit, all or none; " +
                'at most 256 blocks and 1,000 entries in all, a URL once in all.',
              properties: { blocks: { type: 'array', minItems: 1, maxItems: 256, items: { type: 'object', required: ['uns', 'semver', 'endorsements'] } } },
            },
          ],
        },
        RevokeRequest: {
          type: 'object',
          properties: {
            url: { type: 'string' },
            semver: { type: 'string' },
            block: { type: 'integer', minimum: 0 },
            effective_date: { type: 'string', description: 'YYYY-MM-DD from which the revocation is in force (default: today, UTC)' },
            comment: { type: 'string' },
          },
          oneOf: [
            { required: ['url'], not: { required: ['block'] } },
            { required: ['block'], not: { anyOf: [{ required: ['url'] }, { required: ['semver'] }] } },
          ],
          additionalProperties: false,
        },
        RevokeResponse: {
          type: 'object',
          required: ['success', 'status', 'index', 'record_hash', 'effective_date', 'revokes'],
          properties: {
            success: { const: true },
            status: { const: 'revoked' },
            index: { type: 'integer' },
            record_hash: { type: 'string' },
            effective_date: { type: 'string' },
            revokes: {
              type: 'object',
              required: ['index', 'record_hash', 'urls'],
              properties: { index: { type: 'integer' }, record_hash: { type: 'string' }, urls: { type: 'array', items: { type: 'string' } } },
            },
          },
        },
        StatementFile: {
          type: 'object',
          required: ['statement', 'signatures'],
          additionalProperties: false,
          description:
            'docs/spec/key-events.md: `statement` (action root | key | compromise, chain, sequence, online, and root or compromised + good_through) and the holders\' signatures over "vouch key statement v1\\n" + JCS(statement).',
          properties: {
            statement: { type: 'object' },
            signatures: {
              type: 'array',
              maxItems: 64,
              items: {
                type: 'object',
                required: ['public_key', 'signature'],
                additionalProperties: false,
                properties: { public_key: { type: 'string' }, signature: { type: 'string' } },
              },
            },
          },
        },
        RootResponse: {
          type: 'object',
          required: ['success', 'status', 'index', 'record_hash', 'sequence', 'action', 'online'],
          properties: {
            success: { const: true },
            status: { const: 'applied' },
            index: { type: 'integer' },
            record_hash: { type: 'string' },
            sequence: { type: 'integer' },
            action: { enum: ['root', 'key', 'compromise'] },
            online: { type: 'object', required: ['signer', 'public_key'], properties: { signer: { type: 'string' }, public_key: { type: 'string' } } },
          },
        },
        KeyState: {
          type: 'object',
          description: "/v1/authority only: the verified chain's keys (docs/spec/key-events.md).",
          properties: {
            sequence: { type: 'integer', description: 'Key events applied.' },
            root: {
              type: ['object', 'null'],
              properties: { version: { type: 'integer' }, threshold: { type: 'integer' }, keys: { type: 'array', items: { type: 'string' } } },
            },
            online: {
              type: 'object',
              properties: {
                signer: { type: 'string' },
                public_key: { type: 'string' },
                since: { type: 'integer', description: 'The key block that put it in force (0: block 0).' },
                verifier_key: { type: ['string', 'null'] },
              },
            },
            retired: { type: 'array', items: { type: 'string' } },
            compromised: { type: 'array', items: { type: 'string' } },
            voids: {
              type: 'array',
              items: { type: 'array', items: { type: 'integer' }, minItems: 2, maxItems: 2 },
              description: 'Inclusive index ranges of void blocks.',
            },
            rollover: {
              type: ['object', 'null'],
              properties: { public_key: { type: 'string' }, verifier_key: { type: ['string', 'null'] } },
              description: 'The previous key co-signing checkpoint notes during a rollover.',
            },
            verifier_keys: {
              type: 'array',
              items: { type: 'string' },
              description: 'The note verifier keys a checkpoint note is signed with now: the key in force first.',
            },
          },
        },
        Claims: {
          description:
            "What the client claims the bytes hash to (a lockfile's integrity, pip --hash, go.sum h1:): the authority fetches and hashes " +
            'the artifact itself and refuses the block (409 hash_mismatch) unless one claim matches; a claim is never signed as given.',
          oneOf: [{ $ref: '#/components/schemas/Claim' }, { type: 'array', minItems: 1, maxItems: 64, items: { $ref: '#/components/schemas/Claim' } }],
        },
        Claim: {
          type: 'string',
          pattern:
            '^((sha1:[0-9a-f]{40})|(sha256:[0-9a-f]{64})|(sha384:[0-9a-f]{96})|(sha512:[0-9a-f]{128})|(sha3-256:[0-9a-f]{64})|(blake3:[0-9a-f]{64})|(h1:[A-Za-z0-9+/]{43}=))$',
          description: "`<algorithm>:<lowercase hex>`, or Go's `h1:<base64>` of a module proxy `.zip` or `.mod` URL.",
        },
        SubmitProgressLine: {
          type: 'object',
          description: 'One NDJSON line: progress, or the final result (with http_status).',
          properties: {
            progress: { type: 'object', properties: { done: { type: 'integer' }, total: { type: 'integer' }, url: { type: 'string' } } },
            http_status: { type: 'integer' },
            refused: { type: 'array', items: { type: 'object' } },
          },
        },
        SubmitResponse: {
          type: 'object',
          required: ['success', 'status', 'index', 'record_hash'],
          description: "`url` (and `urls` in the multi form) for one block; `blocks` for the blocks form (index and record_hash: its first posted block's).",
          properties: {
            success: { const: true },
            status: { enum: ['posted', 'unchanged'] },
            url: { type: 'string' },
            urls: { type: 'array', items: { type: 'string' } },
            index: { type: 'integer' },
            record_hash: { type: 'string' },
            blocks: {
              type: 'array',
              items: {
                type: 'object',
                required: ['status', 'index', 'record_hash', 'entries'],
                properties: {
                  status: { enum: ['posted', 'unchanged'] },
                  index: { type: 'integer' },
                  record_hash: { type: 'string' },
                  entries: { type: 'integer' },
                },
              },
            },
          },
        },
      },
    },
  };
}

export function skillDocument(publicUrl: string, serviceName: string): string {
  return `# Verifying what ${serviceName} serves

This gateway serves artifacts only after their bytes hash to what an
authority signed. You do not have to trust the gateway: every answer carries
what you need to check it yourself with the authority's public key.

## 1. Pin the authority key
\`GET ${publicUrl}/v1/authority\` returns block 0. Its
\`payload.authority.public_key\` (base64, raw 32-byte ed25519) is the key that
signs every block. Compare it once, out of band, with the key the authority
publishes, and keep it.

Key events (docs/spec/key-events.md) can change the signing key later: a block
with \`payload.intent\` \`key\` carries a statement signed by a threshold of
root holders that puts a new online key in force (a rotation, or a
compromise that voids the old key's later blocks). The same answer's
\`keys\` names the key in force now (\`keys.online.public_key\`, since block
\`keys.online.since\`), the retired and compromised keys and the void
blocks; a block is signed by the key in force at its index. \`vouch get\`
and \`vouch verify\` follow these key blocks from the key you pinned.

## 2. Verify a block
\`GET ${publicUrl}/v1/endorsement?url=<artifact URL>[&semver=X][&at=YYYY-MM-DD]\`
returns the block with \`success: true\` added. Remove \`success\` (and
\`revoked_by\` if present), then:

1. \`signature\` must be a valid ed25519 signature (RFC 8032), by the pinned
   key, over the UTF-8 bytes of the RFC 8785 canonical JSON (JCS) of \`payload\`.
2. \`record_hash\` must equal lowercase hex sha256 of JCS of the block without
   \`record_hash\`.
3. \`payload.endorsements\` must hold an entry whose \`artifact_url\` is your URL;
   its \`artifact_hash\` is \`<algorithm>:<hex>\` with algorithm sha256, sha512,
   sha3-256 or blake3.

## 3. Verify a download
\`GET ${publicUrl}/v1/download?url=<artifact URL>\` answers 200 with the bytes
and a \`UNS\` header: minified JSON \`{"${serviceName}":{"endorsement":<block>}}\`
(non-ASCII escaped as \\uXXXX). Verify that block as in step 2, hash the body
with the entry's algorithm and compare with its \`artifact_hash\`. A block too
large for a header (over 4,096 bytes as UNS) comes as a reference instead:
\`{"${serviceName}":{"block":{"index":N,"record_hash":H,"url":U},"entry":E}}\`;
fetch block N (\`GET ${publicUrl}/v1/block?index=N\`), verify it as in step 2,
require its record_hash to be H and its entry for your URL to equal E. Any failure
has an empty body and a status: 400 bad parameters, 404 nothing signed, 409
bytes differ from what was signed, 410 revoked, 502 origin failed, 503 not
ready, 504 origin too slow.

The \`vouch get\` command does all of this:

    npx vouch get --gateway ${publicUrl} --url <artifact URL> --public-key <pinned key> -o FILE

## 4. Audit the whole chain
The chain is a git repository: clone it and run \`npx vouch verify --chain DIR
--public-key <pinned key>\`. \`GET ${publicUrl}/v1/checkpoint\` returns the signed
statement of the head (\`size\`, \`head\`) to compare with your clone.

The full interface: ${publicUrl}/v1/openapi.json
`;
}
