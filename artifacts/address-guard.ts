/**
 * The address guard of fetches made on a caller's behalf (submit refuses
 * loopback and private origins unless `origin.allow_private`,
 * docs/spec/design.md §3.5) and of download redirect hops that leave the
 * signed URL's host.
 * Owns: the classification of IPv4/IPv6 addresses (loopback, private,
 * link-local, CGNAT, reserved ranges, embedded IPv4 forms) and the one-shot
 * resolve-and-check of a URL's host.
 * Trusts: the WHATWG URL parser's canonical IPv4 literals; the injected
 * resolver (default `dns.lookup`, all addresses).
 * Must hold: one resolution per hop, every address checked, and the caller
 * connects to the checked address (no rebinding window); a refusal is
 * `bad_request` before any packet, naming `vouch serve --dev` and
 * `origin.allow_private`.
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { VouchError } from '../chain/errors.ts';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to every address it has. Rejects when it has none. */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

/** What an address is; anything but `public` is refused by the guard. */
export type AddressClass =
  | 'public'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'unspecified'
  | 'shared'
  | 'multicast'
  | 'broadcast'
  | 'documentation'
  | 'reserved';

export interface AddressGuardOptions {
  /** Name resolution; default `dns.lookup(name, { all: true })`. */
  resolver?: Resolver;
  /**
   * Non-public addresses or CIDR ranges that are allowed anyway
   * (`'127.0.0.1'`, `'10.1.0.0/16'`, `'::1'`). IPv4-mapped IPv6 forms match
   * their IPv4 entries. Meant for tests and for deliberately reachable
   * internal hosts; empty by default.
   */
  allow?: readonly string[];
}

export const defaultResolver: Resolver = async (hostname) => {
  const all = await lookup(hostname, { all: true, verbatim: true });
  return all.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

// ---------------------------------------------------------------------------
// Parsing

/** The bytes of an IP address (4 or 16), or null when `text` is not one. Accepts `[v6]` and a `%zone`. */
export function parseIp(text: string): Uint8Array | null {
  let s = text;
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1);
  const zone = s.indexOf('%');
  if (zone >= 0) s = s.slice(0, zone);
  const kind = isIP(s);
  if (kind === 4) return parseV4(s);
  if (kind === 6) return parseV6(s);
  return null;
}

function parseV4(s: string): Uint8Array | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const n = Number(parts[i]);
    if (!Number.isInteger(n) || n < 0 || n > 255) return null;
    out[i] = n;
  }
  return out;
}

function parseV6(s: string): Uint8Array | null {
  const out = new Uint8Array(16);
  let tail: Uint8Array | null = null;
  let body = s;
  const lastColon = body.lastIndexOf(':');
  if (body.slice(lastColon + 1).includes('.')) {
    tail = parseV4(body.slice(lastColon + 1));
    if (tail === null) return null;
    body = body.slice(0, lastColon + 1) + '0:0';
  }
  const halves = body.split('::');
  if (halves.length > 2) return null;
  const groups = (h: string | undefined): number[] => (h === undefined || h === '' ? [] : h.split(':').map((g) => parseInt(g, 16)));
  const head = groups(halves[0]);
  const rest = halves.length === 2 ? groups(halves[1]) : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 1 ? missing !== 0 : missing < 0) return null;
  const all = [...head, ...new Array<number>(missing).fill(0), ...rest];
  for (let i = 0; i < 8; i++) {
    const g = all[i]!;
    if (!Number.isInteger(g) || g < 0 || g > 0xffff) return null;
    out[2 * i] = g >> 8;
    out[2 * i + 1] = g & 0xff;
  }
  if (tail !== null) out.set(tail, 12);
  return out;
}

/** `b` starts with the first `bits` bits of `prefix`. */
function inPrefix(b: Uint8Array, prefix: readonly number[], bits: number): boolean {
  for (let i = 0; bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if (((b[i] ?? 0) & mask) !== ((prefix[i] ?? 0) & mask)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Classification

const V4_RANGES: ReadonlyArray<readonly [number[], number, AddressClass]> = [
  [[255, 255, 255, 255], 32, 'broadcast'],
  [[0], 8, 'unspecified'], // "this network"; 0.0.0.0 reaches the local host
  [[10], 8, 'private'],
  [[100, 64], 10, 'shared'], // CGNAT
  [[127], 8, 'loopback'],
  [[169, 254], 16, 'link-local'],
  [[172, 16], 12, 'private'],
  [[192, 0, 0], 24, 'reserved'], // IETF protocol assignments
  [[192, 0, 2], 24, 'documentation'],
  [[192, 88, 99], 24, 'reserved'], // 6to4 relay anycast
  [[192, 168], 16, 'private'],
  [[198, 18], 15, 'reserved'], // benchmarking
  [[198, 51, 100], 24, 'documentation'],
  [[203, 0, 113], 24, 'documentation'],
  [[224], 4, 'multicast'],
  [[240], 4, 'reserved'],
];

function classifyV4(b: Uint8Array): AddressClass {
  for (const [prefix, bits, cls] of V4_RANGES) if (inPrefix(b, prefix, bits)) return cls;
  return 'public';
}

const V6_RANGES: ReadonlyArray<readonly [number[], number, AddressClass]> = [
  [[0x00, 0x64, 0xff, 0x9b, 0x00, 0x01], 48, 'private'], // local-use NAT64
  [[0x01, 0x00, 0, 0, 0, 0, 0, 0], 64, 'reserved'], // discard-only
  [[0x20, 0x01, 0x0d, 0xb8], 32, 'documentation'],
  [[0x20, 0x01, 0x00], 23, 'reserved'], // IETF protocol assignments, Teredo
  [[0x3f, 0xff, 0x00], 20, 'documentation'],
  [[0xfc], 7, 'private'], // unique local
  [[0xfe, 0x80], 10, 'link-local'],
  [[0xfe, 0xc0], 10, 'private'], // deprecated site-local
  [[0xff], 8, 'multicast'],
];

/** The IPv4 address embedded in an IPv4-mapped, NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address. */
function embeddedV4(b: Uint8Array): Uint8Array | null {
  const zero = (from: number, to: number) => b.subarray(from, to).every((x) => x === 0);
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return b.subarray(12, 16);
  if (inPrefix(b, [0x00, 0x64, 0xff, 0x9b], 32) && zero(4, 12)) return b.subarray(12, 16);
  if (b[0] === 0x20 && b[1] === 0x02) return b.subarray(2, 6);
  return null;
}

function classifyV6(b: Uint8Array): AddressClass {
  const v4 = embeddedV4(b);
  if (v4 !== null) return classifyV4(v4);
  if (b.every((x) => x === 0)) return 'unspecified';
  if (b.subarray(0, 15).every((x) => x === 0) && b[15] === 1) return 'loopback';
  for (const [prefix, bits, cls] of V6_RANGES) if (inPrefix(b, prefix, bits)) return cls;
  // Global unicast is 2000::/3; everything else (IPv4-compatible ::/96 included) is reserved.
  return (b[0]! & 0xe0) === 0x20 ? 'public' : 'reserved';
}

/** The class of an IP address text; null when it is not an IP address. */
export function classifyAddress(address: string): AddressClass | null {
  const b = parseIp(address);
  if (b === null) return null;
  return b.length === 4 ? classifyV4(b) : classifyV6(b);
}

// ---------------------------------------------------------------------------
// The guard

interface AllowEntry {
  bytes: Uint8Array;
  bits: number;
}

/** IPv4-mapped IPv6 is compared as the IPv4 it maps. */
function comparable(b: Uint8Array): Uint8Array {
  if (b.length === 16 && b.subarray(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff) return b.subarray(12);
  return b;
}

function parseAllow(entry: string): AllowEntry {
  const slash = entry.indexOf('/');
  const ip = parseIp(slash < 0 ? entry : entry.slice(0, slash));
  if (ip === null) throw new TypeError(`address guard: ${JSON.stringify(entry)} is not an IP address or CIDR range`);
  const bytes = comparable(ip);
  const bits = slash < 0 ? bytes.length * 8 : Number(entry.slice(slash + 1));
  if (!Number.isInteger(bits) || bits < 0 || bits > bytes.length * 8) throw new TypeError(`address guard: bad prefix length in ${JSON.stringify(entry)}`);
  return { bytes, bits };
}

const DESCRIBE: Record<AddressClass | 'not an IP address', string> = {
  public: 'a public address',
  loopback: 'a loopback address',
  private: 'a private address',
  'link-local': 'a link-local address',
  unspecified: 'an unspecified address',
  shared: 'a shared (CGNAT) address',
  multicast: 'a multicast address',
  broadcast: 'the broadcast address',
  documentation: 'a documentation address',
  reserved: 'a reserved address',
  'not an IP address': 'not an IP address',
};

/** Every refusal names the setting that lifts it: the guard runs only because it is off. */
export const ALLOW_HINT =
  ' (to allow loopback and private origins for local testing, run vouch serve --dev, or set origin.allow_private: true in the gateway config)';

export class AddressGuard {
  private readonly resolver: Resolver;
  private readonly allow: readonly AllowEntry[];

  constructor(options: AddressGuardOptions = {}) {
    this.resolver = options.resolver ?? defaultResolver;
    this.allow = (options.allow ?? []).map(parseAllow);
  }

  /** Why `address` may not be connected to, or null when it may. */
  refusal(address: string): AddressClass | 'not an IP address' | null {
    const ip = parseIp(address);
    if (ip === null) return 'not an IP address';
    const cls = ip.length === 4 ? classifyV4(ip) : classifyV6(ip);
    if (cls === 'public') return null;
    const c = comparable(ip);
    for (const a of this.allow) if (a.bytes.length === c.length && inPrefix(c, Array.from(a.bytes), a.bits)) return null;
    return cls;
  }

  /**
   * Resolves the host of `url` once and checks every address. Returns the
   * first address, which is the one to connect to. `resource` names the
   * original request in errors (a redirect hop may differ from it).
   */
  async check(url: URL, resource: string = url.href): Promise<ResolvedAddress> {
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    let addresses: ResolvedAddress[];
    const family = isIP(host);
    if (family !== 0) {
      addresses = [{ address: host, family: family === 6 ? 6 : 4 }];
    } else {
      try {
        addresses = await this.resolver(host);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        throw new VouchError('origin_error', `origin ${url.href}: cannot resolve ${host}${code ? ` (${code})` : ''}`, { resource });
      }
      if (addresses.length === 0) throw new VouchError('origin_error', `origin ${url.href}: ${host} has no address`, { resource });
    }
    for (const a of addresses) {
      const why = this.refusal(a.address);
      if (why !== null) {
        const named = family !== 0 ? a.address : `${host} (${a.address})`;
        throw new VouchError('bad_request', `origin address not allowed: ${named} is ${DESCRIBE[why]}${ALLOW_HINT}`, { resource });
      }
    }
    return addresses[0]!;
  }
}
